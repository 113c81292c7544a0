"""L0: full-text search on PostgreSQL, ranked by BM25 exactly as SQLite's FTS5 ranks.

PostgreSQL's own ranking (``ts_rank``) weighs term frequency without the rarity of the term or
the length of the text, and its ``english`` configuration stems by Snowball, not by Porter. So
the store keeps an index of its own: its words are FTS5's (``store.lexical`` makes them), its
rows are ``postings`` blocks, and ``text_stats`` holds the number of entries with text and their
total length (a transaction adds its own changes of those two counts only at its commit, so a
search inside it adds them to what it reads). One statement then computes FTS5's ``bm25()``:
for each query term, its idf from the number of entries holding it (counted in the same index
scan that fetches them, so it is exact and of the same snapshot), and for each entry the sum
over the query terms of
``idf * tf * (k1 + 1) / (tf + k1 * (1 - b + b * length / average length))``. An entry whose
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
entries are then fetched. The counts in ``text_stats`` change only under the change log's lock
(``store.postgres.entries``), so concurrent writers never wait on that row for long.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from operator import itemgetter
from typing import Any

import psycopg

from gliding_core.store.lexical import K1, MIN_IDF, B, term_counts
from gliding_core.store.postgres.schema import BLOCK, COPY_ESCAPED, COPY_ESCAPES, live


def _number(value: float) -> str:
    """A float as an exact ``float8`` literal (a bare ``2.2`` would be ``numeric``)."""
    return f"{value!r}::float8"


_SCORED = f"""
WITH hits AS MATERIALIZED (
    SELECT p.term, u.entry_id, u.tf::float8 AS tf, u.length::float8 AS length
    FROM postings AS p CROSS JOIN LATERAL unnest(p.ids, p.frequencies, p.lengths)
        AS u(entry_id, tf, length)
    WHERE p.term = ANY(%s::text[])
),
totals AS (
    SELECT d.documents, GREATEST(d.tokens, 1) / GREATEST(d.documents, 1) AS average
    FROM text_stats AS s
    CROSS JOIN LATERAL (
        SELECT (s.documents + %s)::float8 AS documents, (s.tokens + %s)::float8 AS tokens
    ) AS d
),
weights AS (
    SELECT q.term, q.times * CASE WHEN r.idf <= 0 THEN {_number(MIN_IDF)} ELSE r.idf END AS weight
    FROM unnest(%s::text[], %s::float8[]) AS q(term, times)
    JOIN (SELECT term, count(*)::float8 AS found FROM hits GROUP BY term) AS d USING (term)
    CROSS JOIN totals AS t
    CROSS JOIN LATERAL (
        SELECT ln(GREATEST((t.documents - d.found + 0.5) / (d.found + 0.5), 1e-300)) AS idf
    ) AS r
),
documents AS (
    SELECT h.entry_id, sum(w.weight * (h.tf * {_number(K1 + 1)} / (h.tf + {_number(K1)}
        * ({_number(1 - B)} + {_number(B)} * h.length / t.average)))) AS score
    FROM hits AS h JOIN weights AS w USING (term) CROSS JOIN totals AS t
    GROUP BY h.entry_id
),
scores AS (
    SELECT abs(entry_id) AS entry_id, max(score) AS score FROM documents GROUP BY abs(entry_id)
)"""


def ranked_sql(columns: str, condition: str | None) -> str:
    """Return the statement that ranks entries by BM25 and selects ``columns`` of the best.

    ``columns`` are on the alias ``e`` of ``entries``; the score follows them. Expired entries
    are left out before the best are chosen (a limit never counts one). Its parameters:
    the query's terms; the change of the number of entries with text and of their length that
    the reader's own transaction has not yet added to ``text_stats`` (0 and 0 outside one);
    the terms again with how many query words gave each; then the parameters of ``condition``
    (a filter on ``e``; ``None``: no filter); then the limit.
    """
    if condition is None:
        return (
            f"{_SCORED}, best AS (SELECT s.entry_id, s.score FROM scores AS s"
            f" WHERE {live('s.entry_id')}"
            " ORDER BY s.score DESC, s.entry_id LIMIT %s)"
            f" SELECT {columns}, b.score FROM best AS b JOIN entries AS e ON e.id = b.entry_id"
            " ORDER BY b.score DESC, e.id"
        )
    return (
        f"{_SCORED} SELECT {columns}, s.score FROM scores AS s"
        f" JOIN live_entries AS e ON e.id = s.entry_id WHERE {condition}"
        " ORDER BY s.score DESC, e.id LIMIT %s"
    )


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
                    _array(ids[n] for n in kept),
                    _array(frequencies[n] for n in kept),
                    _array(lengths[n] for n in kept),
                )
            )
        with conn.pipeline():
            if rewritten:
                conn.execute(_REWRITE, [list(column) for column in zip(*rewritten, strict=True)])
            if emptied:
                conn.execute(_EMPTIED, [list(column) for column in zip(*emptied, strict=True)])


def _array(values: Any) -> str:
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
