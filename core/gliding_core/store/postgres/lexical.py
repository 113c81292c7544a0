"""L0: full-text search on PostgreSQL, ranked by BM25 exactly as SQLite's FTS5 ranks.

PostgreSQL's own ranking (``ts_rank``) weighs term frequency without the rarity of the term or
the length of the text, and its ``english`` configuration stems by Snowball, not by Porter. So
the store keeps an index of its own: its words are FTS5's (``store.lexical`` makes them), its
rows are ``postings`` (term, entry, frequency in the entry, the entry's length in tokens), and
``text_stats`` holds the number of entries with text and their total length (a transaction
adds its own changes of those two counts only at its commit, so a search inside it adds them to
what it reads). One statement then
computes FTS5's ``bm25()``: for each query term, its idf from the number of entries holding it
(counted in the same index scan that fetches them, so it is exact and of the same snapshot),
and for each entry the sum over the query terms of
``idf * tf * (k1 + 1) / (tf + k1 * (1 - b + b * length / average length))``.

The scan reads only the postings of the query's terms; without filters, only the best
``limit`` entries are then fetched. The counts in ``text_stats`` change only under the change
log's lock (``store.postgres.entries``), so concurrent writers never wait on that row for long.
"""

from __future__ import annotations

from gliding_core.store.lexical import K1, MIN_IDF, B


def _number(value: float) -> str:
    """A float as an exact ``float8`` literal (a bare ``2.2`` would be ``numeric``)."""
    return f"{value!r}::float8"


_SCORED = f"""
WITH hits AS MATERIALIZED (
    SELECT p.term, p.entry_id, p.frequency::float8 AS tf, p.length::float8 AS length
    FROM postings AS p WHERE p.term = ANY(%s::text[])
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
scores AS (
    SELECT h.entry_id, sum(w.weight * (h.tf * {_number(K1 + 1)} / (h.tf + {_number(K1)}
        * ({_number(1 - B)} + {_number(B)} * h.length / t.average)))) AS score
    FROM hits AS h JOIN weights AS w USING (term) CROSS JOIN totals AS t
    GROUP BY h.entry_id
)"""


def ranked_sql(columns: str, condition: str | None) -> str:
    """Return the statement that ranks entries by BM25 and selects ``columns`` of the best.

    ``columns`` are on the alias ``e`` of ``entries``; the score follows them. Its parameters:
    the query's terms; the change of the number of entries with text and of their length that
    the reader's own transaction has not yet added to ``text_stats`` (0 and 0 outside one);
    the terms again with how many query words gave each; then the parameters of ``condition``
    (a filter on ``e``; ``None``: no filter); then the limit.
    """
    if condition is None:
        return (
            f"{_SCORED}, best AS (SELECT entry_id, score FROM scores"
            " ORDER BY score DESC, entry_id LIMIT %s)"
            f" SELECT {columns}, b.score FROM best AS b JOIN entries AS e ON e.id = b.entry_id"
            " ORDER BY b.score DESC, e.id"
        )
    return (
        f"{_SCORED} SELECT {columns}, s.score FROM scores AS s"
        f" JOIN entries AS e ON e.id = s.entry_id WHERE {condition}"
        " ORDER BY s.score DESC, e.id LIMIT %s"
    )
