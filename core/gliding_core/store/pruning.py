"""L0: an unfiltered full-text query's best matches without scoring every match of its
commonest words (SQLite store).

FTS5's ``bm25()`` scores every row that matches any word of a query, reading each row's length
from the index as it goes: a word found in 1 % of a million entries costs 10,000 scored rows,
most of which can never reach the best ``limit``. The score is a sum over the query's phrases,
and a phrase's part of it is below a bound known before any row is read: ``idf * (k1 + 1)``
(its term frequency part ``tf / (tf + k1 * (1 - b + b * length / average))`` is below 1 for
any row, as ``1 - b > 0``). So, as in Turtle and Flood's MaxScore ("Query evaluation:
strategies and optimizations", 1995):

1. Each phrase of one term gets its number of matching rows from the full-text index's
   vocabulary, and so its idf, the same idf FTS5 computes.
2. The commonest phrases, each matching at least ``min_deferred`` rows, are *deferred* while
   their weights add up to less than the idf of the rarest phrase kept. The weight is the
   phrase's idf: the score of one occurrence in a row of average length, so a row holding the
   deferred phrases once each scores below a row holding the rarest kept phrase once. With
   ``exact`` the weight is the bound instead.
3. The kept phrases are searched alone (``"a" OR "b"``): every row matching one of them, with
   the score of the kept phrases, computed from the index's postings when the store handle
   keeps its rows' lengths (``store.postings``; a query with nothing to defer is then scored
   that way whole, and is the full query's answer), else by FTS5's ``bm25()``. The rows that
   also hold a deferred phrase are searched again with every phrase (``("c") AND ("a" OR
   "b")``), which gives their whole score; FTS5 reads the deferred phrases' postings there
   only to merge them, scoring none but the rows found.
4. The best ``limit`` of these are the answer. With ``exact``, only if the last of them scores
   above the deferred phrases' summed bound (a row holding deferred phrases only scores at most
   that, so it cannot be among them); otherwise, and always with fewer than ``limit`` rows,
   ``None`` is returned and the caller runs the full query.

With ``exact`` the result is the full query's, scores included; only rows of exactly equal
score may come in another order, and the summation of a row's phrases in another order may
change its score in the last bit. The bound is loose (a row of average length with one
occurrence reaches less than half of it), so on the search benchmark's queries it proved
nothing. Without ``exact`` a row holding only deferred words is missed when it would need
several occurrences of them, or a very short text, to outrank the rows found: a row holding
any kept word is scored exactly, and the rows missed are those the weights of step 2 rank
below a single occurrence of the rarest kept word. A phrase of several terms (``foo_bar``), or
of a term the vocabulary does not hold, is never deferred and gives no idf to the rule of
step 2. A term in over half of the entries has FTS5's idf of ``1e-6``: its weight is about
zero and it is always deferred, so no threshold on idf is needed.

Invariants: reads only; every statement of one search runs in one read transaction (the
counts, the two queries and the check see one state of the index); never used with filters
or with texts in parts (the caller's ``_ranked`` paths).
"""

from __future__ import annotations

import math
import sqlite3
from dataclasses import dataclass
from typing import NamedTuple

from gliding_core.store.lexical import K1, MIN_IDF, tokens
from gliding_core.store.postings import FULL_TEXT, MOST_POSTINGS, RowLengths, averages, top_scored

VOCABULARY = f"{FULL_TEXT}_terms"  # its fts5vocab table (the store makes it, ``TERMS_TABLE``)
# An fts5vocab table stores nothing: it reads the full-text index's own term list. Readers run
# with ``query_only``, so it is made with the schema rather than on first use.
TERMS_TABLE = f"CREATE VIRTUAL TABLE IF NOT EXISTS {VOCABULARY} USING fts5vocab({FULL_TEXT}, row);"
# The pruned search runs in stores of at least this many times ``min_deferred`` rows, where a
# word it may defer is in at most 1/20 of them. Its look-ups cost about 0.3 ms a word: in a
# smaller store the full query is fast, and they would cost more than they save.
STORE_FACTOR = 20


class TopMatches(NamedTuple):
    """The best matches of a query, and how they were found."""

    rows: list[tuple[int, float]]
    """``(rowid, score)``, best first."""
    deferred: bool
    """Whether phrases were deferred (the pruned search)."""
    scored: bool
    """Whether the kept phrases were scored from the postings (``store.postings``)."""


@dataclass(frozen=True, slots=True)
class Phrase:
    """One quoted word of a full-text query, with what the index says of it.

    Attributes:
        text: the phrase as the query writes it (quoted).
        term: its one index term, or ``None`` when unknown: a word of several (or no) terms,
            or a term the vocabulary does not hold (kept, in case the index splits the word
            otherwise than ``lexical.tokens``).
        hits: how many rows hold ``term`` (0 when unknown).
        idf: FTS5's idf of the phrase (0 when unknown).
        single: whether the word is one term (known or not): a word of several terms is a
            phrase whose terms must be adjacent, which only FTS5's query scores.
        occurrences: how many times ``term`` occurs in all rows (0 when unknown).
    """

    text: str
    term: str | None
    hits: int
    idf: float
    single: bool = True
    occurrences: int = 0

    @property
    def bound(self) -> float:
        """The most this phrase adds to any row's score (``inf`` when unknown)."""
        return self.idf * (K1 + 1.0) if self.term is not None else math.inf


def top_matches(
    conn: sqlite3.Connection,
    words: list[str],
    limit: int,
    *,
    expired: str,
    min_deferred: int,
    exact: bool = True,
    lengths: RowLengths | None = None,
) -> TopMatches | None:
    """Return the best ``limit`` ``(rowid, score)`` of the query ``words`` joined by ``OR``,
    best first, with how they were found, or ``None`` when neither the pruned search nor the
    scoring from postings applies (see the module).

    Args:
        conn: a reader of the store.
        words: the query's words (stop words already left out).
        limit: how many rows to return (at least 1).
        expired: a query of the ids of expired entries, left out.
        min_deferred: the fewest rows a phrase must match to be deferred; ``0`` turns the
            pruned search off, and so does a store of fewer than ``STORE_FACTOR`` times as
            many rows.
        exact: answer only when the bound proves the answer the full query's (step 4).
        lengths: the store handle's row lengths: the kept phrases are then scored from the
            index's postings (``store.postings``), and a query with nothing to defer is
            answered too (none: FTS5's ``bm25()`` scores them, and such a query gets ``None``).
            Never inside the writer's transaction: its texts may yet be rolled back, and the
            lengths (which only move forward) must not follow them.
    """
    if min_deferred <= 0 or not words or (len(words) < 2 and lengths is None):
        return None
    rows = _row_count(conn)  # read again below, in the transaction
    if rows is None or rows < STORE_FACTOR * min_deferred:
        return None  # a small store: looking its words up would cost more than it saves
    own = not conn.in_transaction  # (else the caller's: its statements see one snapshot)
    if own:
        conn.execute("BEGIN")
    try:
        return _top_matches(conn, words, limit, expired, min_deferred, exact, lengths)
    finally:
        if own:
            conn.execute("COMMIT")


def applies(conn: sqlite3.Connection, min_deferred: int) -> bool:
    """Whether the store holds enough rows for the pruned search (and the scoring from
    postings) with ``min_deferred``."""
    rows = _row_count(conn)
    return min_deferred > 0 and rows is not None and rows >= STORE_FACTOR * min_deferred


def _top_matches(
    conn: sqlite3.Connection,
    words: list[str],
    limit: int,
    expired: str,
    min_deferred: int,
    exact: bool,
    lengths: RowLengths | None,
) -> TopMatches | None:
    totals = averages(conn)
    if totals is None or totals[0] < STORE_FACTOR * min_deferred:
        return None  # a small store: looking its words up would cost more than it saves
    phrases = _phrases(conn, words, totals[0])
    deferred = _deferred(phrases, exact=exact, min_hits=min_deferred)
    kept = [p for p in phrases if all(p is not d for d in deferred)]
    scored = (
        lengths is not None
        and all(p.single for p in phrases)
        and sum(p.occurrences for p in kept) <= MOST_POSTINGS
    )
    if not deferred and not scored:
        return None
    bound = sum(p.bound for p in deferred)
    either = " OR ".join(p.text for p in kept)
    where = f"WHERE {FULL_TEXT} MATCH ? AND rowid NOT IN ({expired})"
    both: list[tuple[int, float]] = []
    if deferred:
        # The rows holding a deferred phrase and a kept one, with their whole score.
        both = conn.execute(
            f"SELECT rowid, -bm25({FULL_TEXT}) FROM {FULL_TEXT} {where}",
            (f"({' OR '.join(p.text for p in deferred)}) AND ({either})",),
        ).fetchall()
    # The rows holding a kept phrase, by the kept phrases' score: enough of them that the best
    # ``limit`` of those not above are among them.
    alone = None
    scored_alone = False
    if scored and lengths is not None and not _misread(conn, kept):
        pairs = [(p.term, p.idf) for p in kept]
        alone = top_scored(
            conn, pairs, limit + len(both), lengths=lengths, expired=expired, totals=totals
        )
        scored_alone = alone is not None
    if alone is None:
        if not deferred:
            return None
        alone = conn.execute(
            f"SELECT rowid, -bm25({FULL_TEXT}) AS score FROM {FULL_TEXT} {where}"
            " ORDER BY score DESC LIMIT ?",
            (either, limit + len(both)),
        ).fetchall()
    if not deferred:
        return TopMatches(alone, False, True)  # every phrase scored: the full query's answer
    scores: dict[int, float] = dict(alone)
    scores.update(both)
    best = sorted(scores.items(), key=lambda pair: (-pair[1], pair[0]))[:limit]
    if len(best) < limit or (exact and not best[-1][1] > bound):
        return None  # a row with deferred phrases only might be among the best
    return TopMatches(best, True, scored_alone)


def _misread(conn: sqlite3.Connection, phrases: list[Phrase]) -> bool:
    """Whether FTS5 finds a row for a phrase the vocabulary said no row holds (its tokenizer
    split the word otherwise than ``lexical.tokens``): then only its own query is right."""
    absent = [p.text for p in phrases if p.term is None]
    if not absent:
        return False
    found = conn.execute(
        f"SELECT 1 FROM {FULL_TEXT} WHERE {FULL_TEXT} MATCH ? LIMIT 1", (" OR ".join(absent),)
    ).fetchone()
    return found is not None


def _phrases(conn: sqlite3.Connection, words: list[str], rows: int) -> list[Phrase]:
    """The query's phrases with their number of matching rows and idf, in the query's order."""
    out = []
    for word in words:
        text = '"' + word.replace('"', '""') + '"'
        terms = tokens(word)
        if len(terms) != 1:
            out.append(Phrase(text, None, 0, 0.0, single=False))
            continue
        found = conn.execute(f"SELECT doc, cnt FROM {VOCABULARY} WHERE term = ?", terms).fetchone()
        hits = int(found[0]) if found else 0
        if hits:
            out.append(Phrase(text, terms[0], hits, fts5_idf(rows, hits), occurrences=found[1]))
        else:
            out.append(Phrase(text, None, 0, 0.0))
    return out


def _deferred(phrases: list[Phrase], *, exact: bool, min_hits: int) -> list[Phrase]:
    """The commonest phrases, each matching at least ``min_hits`` rows, deferred while their
    weights add up to less than the idf of the rarest phrase kept (a phrase of several terms,
    or unknown, is always kept): their bounds when ``exact``, else their idfs (the score of one
    occurrence at average length)."""
    order = sorted(phrases, key=lambda p: p.bound)
    deferred: list[Phrase] = []
    total = 0.0
    for index, phrase in enumerate(order[:-1]):
        rest = order[index + 1 :]
        known = [p.idf for p in rest if p.term is not None]
        weight = phrase.bound if exact else phrase.idf
        if phrase.hits < min_hits or not known or total + weight >= max(known):
            break
        deferred.append(phrase)
        total += weight
    return deferred


def fts5_idf(rows: int, hits: int) -> float:
    """FTS5's idf of a phrase found in ``hits`` of ``rows`` rows (``1e-6`` when not positive)."""
    idf = math.log((rows - hits + 0.5) / (hits + 0.5))
    return idf if idf > 0.0 else MIN_IDF


def _row_count(conn: sqlite3.Connection) -> int | None:
    """The number of rows of the full-text index, as FTS5's ``bm25()`` reads it (``None`` if
    its averages record is missing)."""
    totals = averages(conn)
    return None if totals is None else totals[0]
