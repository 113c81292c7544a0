"""L0: full-text search on PostgreSQL, ranked by BM25 exactly as SQLite's FTS5 ranks.

PostgreSQL's own ranking (``ts_rank``) weighs term frequency without the rarity of the term or
the length of the text, and its ``english`` configuration stems by Snowball, not by Porter. So
the store keeps an index of its own: its words are FTS5's (``store.lexical`` makes them), its
rows are ``postings`` blocks, and ``text_stats`` holds the number of entries with text and their
total length (a transaction adds its own changes of those two counts only at its commit, so a
search inside it adds them to what it reads). A search reads the blocks of the query's terms
with those counts in one statement (``POSTINGS``; one snapshot) and the client computes FTS5's
``bm25()`` from them (``ranked``): for each query term, its idf from the number of documents
holding it (exact: every block of the term is read), and for each entry the sum over the query
terms of ``idf * tf * (k1 + 1) / (tf + k1 * (1 - b + b * length / average length))``. A second
statement (``best_sql``) then reads the best live entries that pass the search's filters, given
their ids in rank order. The server computing the same sums in SQL spent about 3 us a posting
on its executor's rows: a query of 3,900 postings at 100,000 entries took 12.4 ms that way and
takes 2.8 ms so, one of 260 postings 2.2 and 1.4 ms (medians of 50); the arrays come in their
binary form, which numpy reads whole. An entry whose
text is kept in parts has a second document, its whole text, under its id negated
(``store.postgres.parts``), as the SQLite store gives it a second full-text row: it is ranked
once, by the better of the two.

A block is one row for one term and up to ``BLOCK`` documents written together: their ids in
ascending order, the term's frequency in each and each one's length in tokens, three arrays of
one order, and the least and greatest id (``low``, ``high``, the key with the term). A batch of
5,000 entries holds about 16 postings an entry but about 15,000 distinct terms, so it writes
some 15,000 rows rather than 80,000: each row costs the server a heap tuple, a key in the index
and their log records, which was most of a batched put's time on the server. ``BLOCK`` keeps a
row under PostgreSQL's TOAST threshold (about 2 kB), so it is stored inline, read without a
second look-up, and rewritten cheaply when a document leaves it. A document leaves its block by
an ``UPDATE`` (a block left empty is deleted): the new version carries on the old one's chain,
so a concurrent remover that waited for the row lock reads the version with the other's change
(``FOR UPDATE`` in ``READ COMMITTED``), and no removal is lost. The blocks of a term are found
by the key: ``low <= id AND high >= id`` is answered from the index's own tuples.

The scan reads only the blocks of the query's terms; without filters, only the best ``limit``
entries (and a few more, for any that expired meanwhile) are then sent back. The counts in
``text_stats`` change only under the change log's lock (``store.postgres.entries``), so
concurrent writers never wait on that row for long.
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from collections.abc import Mapping, Sequence
from operator import itemgetter
from typing import Any

import numpy as np
import numpy.typing as npt
import psycopg

from gliding_core.store.lexical import K1, MIN_IDF, B, term_counts
from gliding_core.store.postgres.schema import BLOCK, COPY_ESCAPED, COPY_ESCAPES

POSTINGS = (
    "SELECT p.term, array_send(p.ids), array_send(p.frequencies), array_send(p.lengths),"
    " s.documents, s.tokens FROM postings AS p CROSS JOIN text_stats AS s"
    " WHERE p.term = ANY(%s::text[])"
)
"""The blocks of the query's terms with the index's counts (one snapshot), the arrays in
PostgreSQL's binary form (read with ``binary=True``): their parameter, the terms."""

_HEADER = 20  # a one-dimensional array's binary header: dimensions, flags, type, size, bound
_IDS = np.dtype([("size", ">i4"), ("value", ">i8")])
_COUNTS = np.dtype([("size", ">i4"), ("value", ">i4")])


def best_sql(columns: str, condition: str | None) -> str:
    """Return the statement that selects ``columns`` of the entries whose ids it is given in
    rank order, the live ones passing ``condition`` (a filter on ``e``; ``None``: none), in
    that order, up to a limit; each row ends with the entry's place in the given order (from 1).

    Its parameters: the ids (an array literal), the parameters of ``condition``, the limit.
    """
    if condition is None:
        return (
            f"SELECT {columns}, c.o FROM unnest(%s::bigint[]) WITH ORDINALITY AS c(id, o)"
            " JOIN live_entries AS e ON e.id = c.id ORDER BY c.o LIMIT %s"
        )
    # Each candidate is looked up by its key and checked there (``OFFSET 0`` keeps the planner
    # from joining the filter's matches first: it misjudges their number and read every entry
    # holding a common tag, 40 ms, for a few thousand candidates).
    return (
        f"SELECT {columns}, c.o FROM unnest(%s::bigint[]) WITH ORDINALITY AS c(id, o)"
        " CROSS JOIN LATERAL (SELECT * FROM live_entries AS e WHERE e.id = c.id"
        f" AND {condition} OFFSET 0) AS e ORDER BY c.o LIMIT %s"
    )


def ranked(
    rows: Sequence[tuple[Any, ...]], terms: Mapping[str, int], pending: tuple[int, int]
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.float64]]:
    """Rank the entries ``rows`` (of ``POSTINGS``) hold by BM25 as FTS5's ``bm25()`` does:
    their ids best first (equal scores by id) and their scores.

    ``terms``: the query's terms with how many query words gave each; ``pending``: the
    number of entries with text and their length that the reader's own transaction has not
    yet added to ``text_stats``. A term's idf counts the documents holding it, a document's
    score sums its terms', and an entry kept in parts (its whole text under its id negated)
    takes the better of its two documents' scores.
    """
    if not rows:
        return np.empty(0, np.int64), np.empty(0, np.float64)
    documents = float(rows[0][4] + pending[0])
    average = max(float(rows[0][5] + pending[1]), 1.0) / max(documents, 1.0)
    blocks: defaultdict[str, list[tuple[bytes, bytes, bytes]]] = defaultdict(list)
    for term, ids, frequencies, lengths, *_ in rows:
        blocks[term].append((ids, frequencies, lengths))
    found_ids, found_scores = [], []
    for term, held in blocks.items():
        ids = _elements([block[0] for block in held], _IDS)
        tf = _elements([block[1] for block in held], _COUNTS).astype(np.float64)
        length = _elements([block[2] for block in held], _COUNTS).astype(np.float64)
        idf = math.log(max((documents - len(ids) + 0.5) / (len(ids) + 0.5), 1e-300))
        weight = terms[term] * (MIN_IDF if idf <= 0 else idf)
        found_ids.append(ids)
        found_scores.append(weight * (tf * (K1 + 1) / (tf + K1 * ((1 - B) + B * length / average))))
    ids, scores = _summed(np.concatenate(found_ids), np.concatenate(found_scores))
    if (ids < 0).any():  # the better of an entry's two documents
        ids, scores = _summed(np.abs(ids), scores, better=True)
    order = np.lexsort((ids, -scores))
    return ids[order], scores[order]


def _elements(blobs: Sequence[bytes], kind: np.dtype[Any]) -> npt.NDArray[Any]:
    """The elements of one-dimensional arrays without nulls in binary form, in order."""
    body = b"".join(blob[_HEADER:] for blob in blobs)
    elements = np.frombuffer(body, kind)
    if elements.size and (elements["size"] != kind["value"].itemsize).any():
        raise ValueError("a postings array holds a null or an element of another size")
    return elements["value"]


def _summed(
    ids: npt.NDArray[np.int64], scores: npt.NDArray[np.float64], *, better: bool = False
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.float64]]:
    """Each distinct id once, with the sum (``better``: the greatest) of its scores."""
    order = np.argsort(ids, kind="stable")
    unique, first = np.unique(ids[order], return_index=True)
    combine = np.maximum if better else np.add
    return unique, combine.reduceat(scores[order], first)


_LOCK = (
    "SELECT p.term, p.low, p.ids, p.frequencies, p.lengths FROM postings AS p"
    " JOIN unnest(%s::text[], %s::bigint[], %s::bigint[]) AS g(term, low, high)"
    " ON p.term = g.term AND p.low <= g.high AND p.high >= g.low"
    " ORDER BY p.term, p.low FOR UPDATE OF p"
)
_REWRITE = (
    "UPDATE postings AS p SET low = u.ids[1], high = u.ids[cardinality(u.ids)], ids = u.ids,"
    " frequencies = u.frequencies, lengths = u.lengths"
    " FROM (SELECT term, low, ids::bigint[] AS ids, frequencies::integer[] AS frequencies,"
    " lengths::integer[] AS lengths"
    " FROM unnest(%s::text[], %s::bigint[], %s::text[], %s::text[], %s::text[])"
    " AS r(term, low, ids, frequencies, lengths)) AS u"
    " WHERE p.term = u.term AND p.low = u.low"
)
_EMPTIED = (
    "DELETE FROM postings AS p USING unnest(%s::text[], %s::bigint[]) AS d(term, low)"
    " WHERE p.term = d.term AND p.low = d.low"
)


class Postings:
    """The postings of a batch of documents, written as blocks or taken out at once.

    A document is added once (with all its text): the index holds each (term, document) once.
    The documents' term counts are kept as they come and grouped by term only when written
    (``_lines``): a batch of 5,000 entries holds some 80,000 postings of 12,500 terms, most of
    them in one document.
    """

    def __init__(self) -> None:
        self._documents: list[tuple[int, Counter[str], int]] = []

    def add(self, entry_id: int, text: str) -> int:
        """Add the postings of document ``entry_id``'s text; return its length in tokens."""
        counts, length = term_counts(text)
        if counts:
            self._documents.append((entry_id, counts, length))
        return length

    def rows(self) -> list[tuple[str, int, int, int]]:
        """Every posting as ``(term, id, frequency, length)``, by term and id."""
        return sorted(
            (term, entry_id, frequency, length)
            for entry_id, counts, length in self._documents
            for term, frequency in counts.items()
        )

    def insert(self, conn: psycopg.Connection[Any]) -> None:
        """Write the postings collected as new blocks (their documents are in no block yet:
        a document's old postings are taken out first).

        ``COPY`` in its text form, written whole, the blocks in the key's order (by term, then
        id): each leaf page of the key then takes its new rows together. The server could
        group the postings itself, but that costs it about four times what ``COPY`` of the
        blocks does, more than the client saves (measured).
        """
        if not self._documents:
            return
        lines = _lines(self._documents)
        with (
            conn.cursor() as cursor,
            cursor.copy(
                "COPY postings (term, low, high, ids, frequencies, lengths) FROM STDIN"
            ) as copy,
        ):
            copy.write(lines)

    def delete(self, conn: psycopg.Connection[Any]) -> None:
        """Take the postings collected out of their blocks (frequencies are not compared).

        The blocks that may hold them are locked in the key's order and read as they now are,
        then each is rewritten without them, or deleted when none of its documents is left.
        Two statements and the client's arithmetic between them: a block of a common term
        holds up to ``BLOCK`` ids, and the client finds the ones to drop in a set, where the
        server could only compare each with each.
        """
        if not self._documents:
            return
        gone: dict[str, set[int]] = {}
        for entry_id, counts, _ in self._documents:
            for term in counts:
                gone.setdefault(term, set()).add(entry_id)
        terms = list(gone)
        found = conn.execute(
            _LOCK, (terms, [min(gone[t]) for t in terms], [max(gone[t]) for t in terms])
        ).fetchall()
        rewritten: list[tuple[str, int, str, str, str]] = []
        emptied: list[tuple[str, int]] = []
        for term, low, ids, frequencies, lengths in found:
            drop = gone[term]
            if drop.isdisjoint(ids):
                continue
            kept = [n for n, entry_id in enumerate(ids) if entry_id not in drop]
            if not kept:
                emptied.append((term, low))
                continue
            rewritten.append(
                (
                    term,
                    low,
                    array_literal(ids[n] for n in kept),
                    array_literal(frequencies[n] for n in kept),
                    array_literal(lengths[n] for n in kept),
                )
            )
        with conn.pipeline():
            if rewritten:
                conn.execute(_REWRITE, [list(column) for column in zip(*rewritten, strict=True)])
            if emptied:
                conn.execute(_EMPTIED, [list(column) for column in zip(*emptied, strict=True)])


def array_literal(values: Any) -> str:
    """Integers as an array literal (``{1,2,3}``)."""
    return "{" + ",".join(map(str, values)) + "}"


class _Numbers(dict[int, str]):
    """Integers as text, each converted once: a batch's frequencies are a few small numbers."""

    def __missing__(self, number: int) -> str:
        text = self[number] = str(number)
        return text


# The COPY line of a block of one document: term, low, high, ids, frequencies, lengths.
_SINGLE = "{0}\t{1}\t{1}\t{{{1}}}\t{{{2}}}\t{{{3}}}\n".format


def _lines(documents: list[tuple[int, Counter[str], int]]) -> str:
    """Return the ``COPY`` lines of the blocks of ``documents``' postings: per term in the
    key's order, ``BLOCK`` documents at a time in id order.

    One pass over the postings appends each to its term's list as two fields of text, the
    document's id (converted once a document) and the term's frequency; the documents go in
    id order, so each list is in id order, and their lengths are looked up by id when the
    lines are made. The terms are then sorted, and each list becomes its lines: most terms of
    a batch have one document, a line made by one ``format``. This touches each posting's
    fields once, close together: about half the client's time of sorting the postings'
    positions by term and gathering columns by them (measured at 5,000 entries a batch).
    """
    groups: defaultdict[str, list[str]] = defaultdict(list)
    numbers = _Numbers()
    length_of: dict[str, str] = {}
    for entry_id, counts, length in sorted(documents, key=itemgetter(0)):
        identity = str(entry_id)
        length_of[identity] = str(length)
        for term, frequency in counts.items():
            fields = groups[term]
            fields.append(identity)
            fields.append(numbers[frequency])
    unique = sorted(groups)
    names = unique
    if any(char in "".join(unique) for char in COPY_ESCAPED):  # none today; one day may
        names = [term.translate(COPY_ESCAPES) for term in unique]
    lines: list[str] = []
    add = lines.append
    lengths = length_of.__getitem__
    for term, name in zip(unique, names, strict=True):
        fields = groups[term]  # id, frequency, id, frequency ...
        if len(fields) == 2:
            identity = fields[0]
            add(_SINGLE(name, identity, fields[1], length_of[identity]))
            continue
        for a in range(0, len(fields), 2 * BLOCK):
            block = fields[a : a + 2 * BLOCK]
            ids = block[0::2]
            add(
                f"{name}\t{ids[0]}\t{ids[-1]}\t{{{','.join(ids)}}}"
                f"\t{{{','.join(block[1::2])}}}\t{{{','.join(map(lengths, ids))}}}\n"
            )
    return "".join(lines)
