"""L0: the tables of the entry store in a PostgreSQL schema, and the steps that upgrade them.

The tables mirror the SQLite store's (``gliding_core.store.sqlite``), column for column, so the
shared row code (``store.columns``) and the filters' SQL (``store.filters``) serve both:

- ``entries``: one row per entry; ``id`` comes from the sequence ``entry_ids``, so "oldest
  first" is the order in which entries were first written.
- ``entry_tags``, ``entry_types``, ``edges``: the label and reference indexes.
- ``changes``: the change log, one row per IRI (its latest change of text); ``watermarks``.
- ``postings``: the lexical index, one row per term and block of up to ``BLOCK`` documents
  written together, with arrays of their ids, the term's frequency in each and each one's length
  in tokens, so BM25 is computed from one index scan per term (see ``store.postgres.lexical``);
  ``text_stats``: one row, the number of entries with text and their total length, BM25's N and
  average length.

Labels, IRIs and terms are compared byte by byte (``COLLATE "C"``): the order of code points,
as SQLite compares, which the prefix filters rely on, and faster than a language's collation.

Expiry: ``entry_expiry`` holds the expiry time (UNIX seconds) of each entry that has one, and
every read goes through the view ``live_entries``, the entries less those expired by the
server's clock at the statement's start (``LIVE``), so an entry vanishes from every read the
moment it expires, whichever process reads. A table beside the entries rather than a column:
most entries never expire, and the view's anti-join probes an index holding only those that do.

``MIGRATIONS`` lists the schema's versions; ``Database.prepare`` runs the ones a schema lacks.
Version 2 added the lexical index and fills it from the entries already stored (one row per
term and entry, as it was then); version 3 the expiry table and the live view; version 4 the
table of texts kept in parts (``entry_parts``); version 5 the index fields of each entry
(``gliding_core.fields``): the entries stored before keep ``["$"]``, every string and number
value, the text they were indexed with, until they are written again; a new entry with the
default has none (``NULL``); version 6 gathers the lexical index's rows into blocks. A step keeps
the tables as they were at its version, so a schema of any version comes up through the same
steps.
"""

from __future__ import annotations

from typing import Any

import psycopg

from gliding_core.fields import LEGACY, encode
from gliding_core.jsonld import node_text, parse_canonical
from gliding_core.store.lexical import term_counts
from gliding_core.store.postgres.database import Migration

COMPONENT = "l0"

_ENTRIES = """
CREATE TABLE entries (
    id bigint PRIMARY KEY,
    iri text COLLATE "C" NOT NULL UNIQUE,
    content text NOT NULL,
    importance double precision NOT NULL,
    access_count bigint NOT NULL DEFAULT 0,
    created_at double precision NOT NULL,
    last_accessed double precision NOT NULL,
    updated_at double precision NOT NULL,
    tags text NOT NULL,
    metadata text NOT NULL,
    mesi_state text NOT NULL CHECK (mesi_state IN ('M', 'E', 'S', 'I')),
    content_hash text NOT NULL,
    named_graph text COLLATE "C",
    jsonld_context text,
    jsonld_types text NOT NULL,
    generation bigint NOT NULL
);
CREATE SEQUENCE entry_ids OWNED BY entries.id;
CREATE INDEX entries_by_graph ON entries (named_graph) WHERE named_graph IS NOT NULL;
CREATE INDEX entries_by_importance ON entries (importance);
CREATE TABLE entry_tags (
    tag text COLLATE "C" NOT NULL, entry_id bigint NOT NULL, PRIMARY KEY (tag, entry_id)
);
CREATE TABLE entry_types (
    type text COLLATE "C" NOT NULL, entry_id bigint NOT NULL, PRIMARY KEY (type, entry_id)
);
CREATE TABLE edges (
    source_id bigint NOT NULL,
    predicate text COLLATE "C" NOT NULL,
    target text COLLATE "C" NOT NULL,
    PRIMARY KEY (source_id, predicate, target)
);
CREATE INDEX edges_by_target ON edges (target);
CREATE TABLE changes (seq bigint PRIMARY KEY, iri text COLLATE "C" NOT NULL UNIQUE);
CREATE TABLE watermarks (name text COLLATE "C" PRIMARY KEY, sequence bigint NOT NULL);
"""

# The lexical index as version 2 made it: one row per term and entry (version 6 converts it).
_LEXICAL = """
CREATE TABLE postings (
    term text COLLATE "C" NOT NULL,
    entry_id bigint NOT NULL,
    frequency integer NOT NULL,
    length integer NOT NULL,
    PRIMARY KEY (term, entry_id) INCLUDE (frequency, length)
);
CREATE TABLE text_stats (documents bigint NOT NULL, tokens bigint NOT NULL);
INSERT INTO text_stats (documents, tokens) VALUES (0, 0);
"""

NOW = "extract(epoch FROM statement_timestamp())::float8"
"""The server's clock as UNIX seconds, fixed for a statement: the clock expiry is read by."""
EXPIRED = f"SELECT entry_id FROM entry_expiry WHERE expires_at <= {NOW}"
"""The ids of the entries that have expired (not yet swept)."""


def live(entry_id: str) -> str:
    """The condition that the entry whose id is the column ``entry_id`` has not expired."""
    return (
        f"NOT EXISTS (SELECT 1 FROM entry_expiry AS x WHERE x.entry_id = {entry_id}"
        f" AND x.expires_at <= {NOW})"
    )


_EXPIRY = f"""
CREATE TABLE entry_expiry (entry_id bigint PRIMARY KEY, expires_at double precision NOT NULL);
CREATE INDEX entry_expiry_by_time ON entry_expiry (expires_at);
CREATE VIEW live_entries AS SELECT * FROM entries AS e WHERE {live("e.id")};
"""

_BATCH = 1_000
# What COPY's text form escapes in a value (a term holds none of them, but may one day).
COPY_ESCAPES = str.maketrans({"\\": "\\\\", "\t": "\\t", "\n": "\\n", "\r": "\\r"})
COPY_ESCAPED = tuple("\\\t\n\r")  # the characters COPY_ESCAPES rewrites
BLOCK = 100
"""The most documents a row of the lexical index holds: 100 ids, frequencies and lengths are
about 1.7 kB, under PostgreSQL's TOAST threshold (about 2 kB), so a row stays inline."""

_BLOCKS = f"""
ALTER TABLE postings RENAME TO postings_by_entry;
ALTER INDEX postings_pkey RENAME TO postings_by_entry_pkey;
CREATE TABLE postings (
    term text COLLATE "C" NOT NULL,
    low bigint NOT NULL,
    high bigint NOT NULL,
    ids bigint[] NOT NULL,
    frequencies integer[] NOT NULL,
    lengths integer[] NOT NULL,
    PRIMARY KEY (term, low, high)
);
INSERT INTO postings (term, low, high, ids, frequencies, lengths)
SELECT term, min(entry_id), max(entry_id), array_agg(entry_id ORDER BY entry_id),
    array_agg(frequency ORDER BY entry_id), array_agg(length ORDER BY entry_id)
FROM (
    SELECT *, (row_number() OVER (PARTITION BY term ORDER BY entry_id) - 1) / {BLOCK} AS block
    FROM postings_by_entry
) AS numbered
GROUP BY term, block
ORDER BY term, 2;
DROP TABLE postings_by_entry;
"""


def _create_entries(conn: psycopg.Connection[Any]) -> None:
    conn.execute(_ENTRIES)


def _create_lexical_index(conn: psycopg.Connection[Any]) -> None:
    """Create the lexical index as version 2 had it and fill it from the stored entries, a
    batch at a time: a row per term and entry (``_blocks`` gathers them afterwards)."""
    conn.execute(_LEXICAL)
    last, documents, tokens = 0, 0, 0
    while True:
        rows = conn.execute(
            "SELECT id, content FROM entries WHERE id > %s ORDER BY id LIMIT %s", (last, _BATCH)
        ).fetchall()
        if not rows:
            break
        last = rows[-1][0]
        lines: list[str] = []
        for entry_id, content in rows:
            text = node_text(parse_canonical(content))
            if text:
                counts, length = term_counts(text)
                documents, tokens = documents + 1, tokens + length
                lines += (
                    f"{term.translate(COPY_ESCAPES)}\t{entry_id}\t{frequency}\t{length}\n"
                    for term, frequency in counts.items()
                )
        if lines:
            with (
                conn.cursor() as cursor,
                cursor.copy("COPY postings (term, entry_id, frequency, length) FROM STDIN") as copy,
            ):
                copy.write("".join(lines))
    conn.execute("UPDATE text_stats SET documents = %s, tokens = %s", (documents, tokens))


def _blocks(conn: psycopg.Connection[Any]) -> None:
    """Gather the lexical index's rows into blocks of up to ``BLOCK`` documents (by id)."""
    conn.execute(_BLOCKS)


def _create_expiry(conn: psycopg.Connection[Any]) -> None:
    conn.execute(_EXPIRY)


def _create_parts(conn: psycopg.Connection[Any]) -> None:
    """The table of texts kept in parts (``store.postgres.parts``)."""
    conn.execute(
        "CREATE TABLE entry_parts (entry_id bigint NOT NULL, part integer NOT NULL,"
        " text text NOT NULL, PRIMARY KEY (entry_id, part))"
    )


def _add_index_fields(conn: psycopg.Connection[Any]) -> None:
    """The column of the index fields: the rows already there get ``LEGACY`` (a default that
    PostgreSQL records once, rewriting no row), the rows to come ``NULL``. The live view is
    made again to show the column (a view's ``*`` is expanded when it is made)."""
    legacy = encode(LEGACY, derived=True)
    # A constant, so a literal: DDL takes no parameters.
    assert legacy is not None
    assert "'" not in legacy
    conn.execute(f"ALTER TABLE entries ADD COLUMN index_fields text DEFAULT '{legacy}'")
    conn.execute("ALTER TABLE entries ALTER COLUMN index_fields DROP DEFAULT")
    conn.execute(
        f"CREATE OR REPLACE VIEW live_entries AS SELECT * FROM entries AS e WHERE {live('e.id')}"
    )


MIGRATIONS: list[Migration] = [
    (1, "create the entry tables", _create_entries),
    (2, "create the lexical index", _create_lexical_index),
    (3, "create the expiry table", _create_expiry),
    (4, "create the table of texts in parts", _create_parts),
    (5, "add the index fields of entries", _add_index_fields),
    (6, "gather the lexical index into blocks", _blocks),
]
SCHEMA_VERSION = MIGRATIONS[-1][0]
