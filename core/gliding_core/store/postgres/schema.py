"""L0: the tables of the entry store in a PostgreSQL schema, and the steps that upgrade them.

The tables mirror the SQLite store's (``gliding_core.store.sqlite``), column for column, so the
shared row code (``store.columns``) and the filters' SQL (``store.filters``) serve both:

- ``entries``: one row per entry; ``id`` comes from the sequence ``entry_ids``, so "oldest
  first" is the order in which entries were first written.
- ``entry_tags``, ``entry_types``, ``edges``: the label and reference indexes.
- ``changes``: the change log, one row per IRI (its latest change of text); ``watermarks``.
- ``postings``: the lexical index, one row per term and entry with the term's frequency and the
  entry's length in tokens, so BM25 is computed from one index scan per term (see
  ``store.postgres.lexical``); ``text_stats``: one row, the number of entries with text and
  their total length, BM25's N and average length.

Labels, IRIs and terms are compared byte by byte (``COLLATE "C"``): the order of code points,
as SQLite compares, which the prefix filters rely on, and faster than a language's collation.

Expiry: ``entry_expiry`` holds the expiry time (UNIX seconds) of each entry that has one, and
every read goes through the view ``live_entries``, the entries less those expired by the
server's clock at the statement's start (``LIVE``), so an entry vanishes from every read the
moment it expires, whichever process reads. A table beside the entries rather than a column:
most entries never expire, and the view's anti-join probes an index holding only those that do.

``MIGRATIONS`` lists the schema's versions; ``Database.prepare`` runs the ones a schema lacks.
Version 2 added the lexical index and fills it from the entries already stored; version 3 the
expiry table and the live view; version 4 the table of texts kept in parts (``entry_parts``);
version 5 the index fields of each entry (``gliding_core.fields``): the entries stored before
keep ``["$"]``, every string and number value, the text they were indexed with, until they are
written again; a new entry with the default has none (``NULL``).
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


def _create_entries(conn: psycopg.Connection[Any]) -> None:
    conn.execute(_ENTRIES)


def _create_lexical_index(conn: psycopg.Connection[Any]) -> None:
    """Create the lexical index and fill it from the stored entries, a batch at a time."""
    conn.execute(_LEXICAL)
    last, documents, tokens = 0, 0, 0
    while True:
        rows = conn.execute(
            "SELECT id, content FROM entries WHERE id > %s ORDER BY id LIMIT %s", (last, _BATCH)
        ).fetchall()
        if not rows:
            break
        last = rows[-1][0]
        postings = Postings()
        for entry_id, content in rows:
            text = node_text(parse_canonical(content))
            if text:
                documents += 1
                tokens += postings.add(entry_id, text)
        postings.insert(conn)
    conn.execute("UPDATE text_stats SET documents = %s, tokens = %s", (documents, tokens))


class Postings:
    """Rows of the ``postings`` table, collected column by column for one statement."""

    def __init__(self) -> None:
        self.terms: list[str] = []
        self.entries: list[int] = []
        self.frequencies: list[int] = []
        self.lengths: list[int] = []

    def add(self, entry_id: int, text: str) -> int:
        """Add the postings of an entry's text; return its length in tokens."""
        counts, length = term_counts(text)
        self.terms += counts
        self.entries += [entry_id] * len(counts)
        self.frequencies += counts.values()
        self.lengths += [length] * len(counts)
        return length

    def insert(self, conn: psycopg.Connection[Any]) -> None:
        """Insert the rows collected (they are new: an entry's old postings go first).

        ``COPY`` in its text form, written whole: a batch holds about twenty postings per
        entry, and this is several times faster than binding arrays. The rows go in the
        index's order (by term, then entry): each leaf page of the primary key then takes its
        new rows together, which cuts the server's time for the statement by about a third
        against rows in the order of the entries (the same WAL).
        """
        if not self.terms:
            return
        by_term: dict[str, list[tuple[int, int, int]]] = {}
        for term, entry, frequency, length in zip(
            self.terms, self.entries, self.frequencies, self.lengths, strict=True
        ):
            found = by_term.get(term)
            if found is None:
                by_term[term] = [(entry, frequency, length)]
            else:
                found.append((entry, frequency, length))
        lines = "".join(
            f"{escaped}\t{entry}\t{frequency}\t{length}\n"
            for term in sorted(by_term)  # Python orders strings by code point, as "C" does
            for escaped in (term.translate(COPY_ESCAPES),)
            for entry, frequency, length in sorted(by_term[term])
        )
        with (
            conn.cursor() as cursor,
            cursor.copy("COPY postings (term, entry_id, frequency, length) FROM STDIN") as copy,
        ):
            copy.write(lines)

    def delete(self, conn: psycopg.Connection[Any]) -> None:
        """Delete the rows collected (their frequencies and lengths are not compared)."""
        if self.terms:
            conn.execute(
                "DELETE FROM postings AS p USING unnest(%s::text[], %s::bigint[]) AS d(term, id)"
                " WHERE p.term = d.term AND p.entry_id = d.id",
                (self.terms, self.entries),
            )


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
]
SCHEMA_VERSION = MIGRATIONS[-1][0]
