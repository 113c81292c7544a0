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

``MIGRATIONS`` lists the schema's versions; ``Database.prepare`` runs the ones a schema lacks.
Version 2 added the lexical index and fills it from the entries already stored.
"""

from __future__ import annotations

from typing import Any

import psycopg

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

_BATCH = 1_000
# What COPY's text form escapes in a value (a term holds none of them, but may one day).
_COPY_ESCAPES = str.maketrans({"\\": "\\\\", "\t": "\\t", "\n": "\\n", "\r": "\\r"})


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
        entry, and this is several times faster than binding arrays.
        """
        if not self.terms:
            return
        lines = "".join(
            f"{term.translate(_COPY_ESCAPES)}\t{entry}\t{frequency}\t{length}\n"
            for term, entry, frequency, length in zip(
                self.terms, self.entries, self.frequencies, self.lengths, strict=True
            )
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


MIGRATIONS: list[Migration] = [
    (1, "create the entry tables", _create_entries),
    (2, "create the lexical index", _create_lexical_index),
]
SCHEMA_VERSION = MIGRATIONS[-1][0]
