"""L0: texts of any size, kept in parts beside their entry (the PostgreSQL side of ``put_text``).

The same layout as the SQLite store's (``gliding_core.store.parts``): the entry's node keeps a
head of the text, ``entry_parts`` keeps every byte of it in parts, and the lexical index holds
the whole text as a second document of the entry, under the entry's id negated, so a word
anywhere in the text finds the entry; search ranks an entry by the better of its two documents
(``store.postgres.lexical``). The parts go when the entry's ``"text"`` changes or the entry is
deleted, their postings with them. A text whose entry's index fields leave ``"text"`` out has
no second document, and its parts carry the marker row ``UNSEARCHED`` (as the SQLite store's),
so that taking them out takes out no postings and counts no document. Every value travels as a
parameter.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

import psycopg

from gliding_core.store.parts import UNSEARCHED, split_text
from gliding_core.store.postgres.lexical import Postings


class Counts(Protocol):
    """What a write transaction counts for the lexical index's statistics."""

    documents: int
    tokens: int


def write_parts(
    conn: psycopg.Connection[Any],
    counts: Counts,
    entry_id: int,
    text: str,
    part_bytes: int,
    *,
    searched: bool = True,
) -> None:
    """Make ``text`` the parts of entry ``entry_id``, and its second lexical document when
    ``searched`` (else the ``UNSEARCHED`` marker)."""
    drop_parts(conn, counts, [entry_id])
    parts = split_text(text, part_bytes)
    conn.execute(
        "INSERT INTO entry_parts (entry_id, part, text)"
        " SELECT %s, n - 1, t FROM unnest(%s::text[]) WITH ORDINALITY AS p(t, n)",
        (entry_id, parts),
    )
    if not searched:
        conn.execute(
            "INSERT INTO entry_parts (entry_id, part, text) VALUES (%s, %s, '')",
            (entry_id, UNSEARCHED),
        )
        return
    added = Postings()
    counts.tokens += added.add(-entry_id, text)
    counts.documents += 1
    added.insert(conn)


def drop_parts(conn: psycopg.Connection[Any], counts: Counts, entry_ids: Sequence[int]) -> None:
    """Take the parts of the entries ``entry_ids`` out of the store and the lexical index."""
    if not entry_ids:
        return
    found = conn.execute(
        "SELECT entry_id, string_agg(text, '' ORDER BY part), min(part) FROM entry_parts"
        " WHERE entry_id = ANY(%s::bigint[]) GROUP BY entry_id",
        (list(entry_ids),),
    ).fetchall()
    if not found:
        return
    removed = Postings()
    for entry_id, text, first in found:
        if first == UNSEARCHED:
            continue  # no second document was written
        # The postings keep no copy of the text: taking them out needs it back.
        counts.tokens -= removed.add(-entry_id, text)
        counts.documents -= 1
    removed.delete(conn)
    conn.execute(
        "DELETE FROM entry_parts WHERE entry_id = ANY(%s::bigint[])",
        ([entry_id for entry_id, _, _ in found],),
    )


def read_parts(conn: psycopg.Connection[Any], entry_id: int) -> str | None:
    """Return the text stored in parts for entry ``entry_id``, or ``None`` when it has none."""
    row = conn.execute(
        "SELECT string_agg(text, '' ORDER BY part) FROM entry_parts"
        " WHERE entry_id = %s AND part >= 0",
        (entry_id,),
    ).fetchone()
    return None if row is None or row[0] is None else str(row[0])
