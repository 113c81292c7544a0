"""L0: FTS5's BM25 of an unfiltered full-text query, computed from the index's postings in
this process (SQLite store).

``bm25()`` costs about 1.9 us a matching row at 1,000,000 entries, and most of it is not the
arithmetic: FTS5 looks up each row's length in its ``%_docsize`` table (a B-tree search per
row, about 0.9 us) and walks the row's positions through its extension API. Reading the same
postings through an ``fts5vocab`` table of type ``instance`` (one row per occurrence, in rowid
order) and taking each row's length from memory costs about 0.4 us a row, so the lexical arm's
slowest queries (three words of 2,000-5,000 entries each) take a quarter of the time. Measured
in docs/benchmarks.md ("At 1,000,000 entries").

The score is FTS5's, operation for operation (``fts5_aux.c``): for each phrase of the query,
in the query's order, ``score += idf * ((f * (k1 + 1)) / (f + k1 * (1 - b + b * D /
avgdl)))``, with ``f`` the phrase's occurrences in the row, ``D`` the row's length in tokens,
``avgdl`` the index's tokens over its rows (its averages record) and FTS5's idf of the rows
holding the phrase; a phrase the row lacks adds ``0.0``. So the scores are FTS5's to the bit
(double arithmetic in the same order), and only rows of equal score may come in another order.

``RowLengths`` holds each row's length, read once from ``%_docsize`` (0.77 s at 1,000,000
entries; the store reads it on a thread of its own when it opens a store large enough, else
the first search that needs it does) and then caught up from the change log:
each text written since is a row of ``changes`` above the sequence it has applied, and its
length is read again. A reader whose snapshot is older than what the lengths have applied (its
read transaction began before another thread's caught up) gets ``None`` and the caller runs
FTS5's query.

Invariants: reads only, inside the caller's read transaction (postings, lengths, averages and
expired ids from one state of the index); used only for unfiltered queries on stores without
texts in parts, where every row of the index is an entry's whole text; a phrase of several
terms is never scored here (its terms must be adjacent: the caller runs FTS5's query), nor
words of more than ``MOST_POSTINGS`` occurrences together (their postings are read into
memory); nor a query inside the caller's transaction (the writer's: its texts may be rolled
back, and the lengths only move forward).
"""

from __future__ import annotations

import sqlite3
import threading

import numpy as np
import numpy.typing as npt

from gliding_core.store.lexical import K1, B

FULL_TEXT = "entry_text"  # the store's FTS5 table
POSTINGS = f"{FULL_TEXT}_postings"
# Like the row vocabulary, it stores nothing and is made with the schema (readers are
# ``query_only``).
POSTINGS_TABLE = (
    f"CREATE VIRTUAL TABLE IF NOT EXISTS {POSTINGS} USING fts5vocab({FULL_TEXT}, instance);"
)
# Lengths are kept by rowid in one array: past this many slots a row (ids far sparser than the
# rows) FTS5's own query is used rather than an array mostly empty.
_SLOTS_A_ROW = 4
_SLACK = 1_024  # slots kept beyond the highest rowid, so that a growing store rarely copies
_RETRY_AFTER = 10_000  # changes after a refusal before the rowids are looked at again
MOST_POSTINGS = 200_000
"""The most occurrences a query's scored words may have together in the index: past it FTS5
scores them. Their postings are read whole into memory, one row an occurrence (about 100 bytes
each while read); a word repeated in a long text counts every time, not once a text."""


class RowLengths:
    """Each full-text row's length in tokens, by rowid, as of a change-log sequence.

    One per store handle, shared by its reading threads (a lock guards it).
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._sizes: npt.NDArray[np.int32] | None = None
        self._seen = -1  # the change-log sequence the lengths are as of
        self._refused = -_RETRY_AFTER  # the sequence at which they were last refused
        self.loads = 0
        """How many times every length was read (1 for the handle's life, unless refused)."""

    def gather(
        self, conn: sqlite3.Connection, rowids: npt.NDArray[np.int64]
    ) -> npt.NDArray[np.float64] | None:
        """Return the lengths of ``rowids`` (sorted, >= 1) as of ``conn``'s read transaction,
        or ``None`` when they cannot be given (an older snapshot, ids too sparse)."""
        head = log_head(conn)
        with self._lock:
            if self._sizes is None and head < self._refused + _RETRY_AFTER:
                return None  # refused lately: the rowids are as sparse as then
            if self._sizes is None or head > self._seen:
                if not self._catch_up(conn, head):
                    self._sizes, self._refused = None, head
                    return None
            elif head < self._seen:
                return None  # this snapshot predates lengths another thread read
            sizes = self._sizes
            assert sizes is not None
            if rowids.size and (rowids[0] < 1 or rowids[-1] >= sizes.size):
                return None
            return sizes[rowids].astype(np.float64)

    def _catch_up(self, conn: sqlite3.Connection, head: int) -> bool:
        if self._sizes is None:
            top = conn.execute(f"SELECT COALESCE(MAX(id), 0), count(*) FROM {FULL_TEXT}_docsize")
            highest, count = top.fetchone()
            if highest > _SLOTS_A_ROW * count + _SLACK:
                return False
            sizes = np.zeros(highest + _SLACK, dtype=np.int32)
            rows = conn.execute(f"SELECT id, sz FROM {FULL_TEXT}_docsize")
            self.loads += 1
        else:
            sizes = self._sizes
            rows = conn.execute(
                f"SELECT d.id, d.sz FROM changes AS c JOIN entries AS e ON e.iri = c.iri"
                f" JOIN {FULL_TEXT}_docsize AS d ON d.id = e.id WHERE c.seq > ?",
                (self._seen,),
            )
        while chunk := rows.fetchmany(65_536):
            ids = np.fromiter((row[0] for row in chunk), dtype=np.int64, count=len(chunk))
            values = np.fromiter(
                (_first_varint(row[1]) for row in chunk), dtype=np.int64, count=len(chunk)
            )
            if ids.size and ids.min() < 1:
                return False  # not an entry's row: the caller uses FTS5's query
            if ids.size and ids.max() >= sizes.size:
                grown = np.zeros(max(int(ids.max()) + _SLACK, 2 * sizes.size), dtype=np.int32)
                grown[: sizes.size] = sizes
                sizes = grown
            sizes[ids] = values
        self._sizes, self._seen = sizes, head
        return True


def top_scored(
    conn: sqlite3.Connection,
    phrases: list[tuple[str | None, float]],
    limit: int,
    *,
    lengths: RowLengths,
    expired: str,
    totals: tuple[int, int],
) -> list[tuple[int, float]] | None:
    """Return the best ``limit`` ``(rowid, score)`` of the rows holding any of ``phrases``, by
    FTS5's BM25 over them, best first (equal scores by rowid), or ``None`` when the lengths
    cannot be had.

    Args:
        conn: a reader of the store, inside its read transaction.
        phrases: each phrase of the query, in its order, as its one index term (``None``: the
            phrase matches no row) and FTS5's idf of it.
        limit: how many rows to return.
        lengths: the store handle's row lengths.
        expired: a query of the ids of expired entries, left out.
        totals: the index's rows and tokens (``averages``), read in the same transaction.
    """
    rows, tokens = totals
    if rows <= 0:
        return None
    found: dict[str, tuple[npt.NDArray[np.int64], npt.NDArray[np.float64]]] = {}
    for term, _ in phrases:
        if term is not None and term not in found:
            found[term] = _postings(conn, term)
    if not found:
        return []
    rowids = np.unique(np.concatenate([ids for ids, _ in found.values()]))
    sizes = lengths.gather(conn, rowids)
    if sizes is None:
        return None
    norm = K1 * (1 - B + B * sizes / (tokens / rows))
    scores = np.zeros(rowids.size)
    for term, idf in phrases:
        if term is None:
            continue
        ids, counts = found[term]
        freq = np.zeros(rowids.size)
        freq[np.searchsorted(rowids, ids)] = counts
        scores += idf * ((freq * (K1 + 1.0)) / (freq + norm))
    gone = [row[0] for row in conn.execute(expired)]
    if gone:
        keep = ~np.isin(rowids, np.asarray(gone, dtype=np.int64))
        rowids, scores = rowids[keep], scores[keep]
    if rowids.size > limit:
        least = np.partition(scores, rowids.size - limit)[rowids.size - limit]
        keep = scores >= least  # every row tied with the last kept, so ties go by rowid
        rowids, scores = rowids[keep], scores[keep]
    order = np.lexsort((rowids, -scores))[:limit]
    return list(zip(rowids[order].tolist(), scores[order].tolist(), strict=True))


def log_head(conn: sqlite3.Connection) -> int:
    """The sequence number of the store's last change of text (0 when none), as ``conn``
    sees it."""
    return int(conn.execute("SELECT COALESCE(MAX(seq), 0) FROM changes").fetchone()[0])


def _postings(
    conn: sqlite3.Connection, term: str
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.float64]]:
    """The rows holding ``term`` (ascending) and its occurrences in each."""
    flat = conn.execute(f"SELECT doc FROM {POSTINGS} WHERE term = ?", (term,)).fetchall()
    docs = np.fromiter((row[0] for row in flat), dtype=np.int64, count=len(flat))
    if not docs.size:
        return docs, np.zeros(0)
    # One row per occurrence, in rowid order: each run of one rowid is a row's occurrences.
    starts = np.flatnonzero(np.concatenate(([True], docs[1:] != docs[:-1])))
    counts = np.diff(np.append(starts, docs.size)).astype(np.float64)
    return docs[starts], counts


def averages(conn: sqlite3.Connection) -> tuple[int, int] | None:
    """The index's row count and its total of tokens, as FTS5's ``bm25()`` reads them: the
    first two varints of its averages record (``None`` if there is none)."""
    found = conn.execute(f"SELECT block FROM {FULL_TEXT}_data WHERE id = 1").fetchone()
    if not found or not found[0]:
        return None
    values = varints(bytes(found[0]), 2)
    return (values[0], values[1]) if len(values) == 2 else None


def _first_varint(data: bytes) -> int:
    """A ``%_docsize`` row's length: its first varint (one byte below 128 tokens)."""
    if data and data[0] < 0x80:
        return data[0]
    values = varints(bytes(data), 1)
    return values[0] if values else 0


def varints(data: bytes, count: int) -> list[int]:
    """The first ``count`` SQLite varints of ``data`` (big-endian groups of 7 bits, the ninth
    byte whole); fewer when ``data`` ends first."""
    values: list[int] = []
    position = 0
    while len(values) < count and position < len(data):
        value = 0
        for index in range(9):
            if position >= len(data):
                return values
            byte = data[position]
            position += 1
            if index == 8:
                value = (value << 8) | byte
                break
            value = (value << 7) | (byte & 0x7F)
            if byte < 0x80:
                break
        values.append(value)
    return values
