"""Forgetting on PostgreSQL, to the byte: after ``Memory.forget`` no byte of the forgotten text
is left in any relation file of the memory's schema (every table, its TOAST table and every
index), read from the server's data directory after a checkpoint; the others' data stays.

The session's server (``postgres_url``) is the embedded one the suite starts, whose data
directory this process can read. Against a server of the user's (``GLIDING_TEST_DATABASE_URL``)
whose files are out of reach, or a role that may not ask for a checkpoint, the test is skipped.
What ``forget`` cannot reach on any server (the write-ahead log until it is recycled, replicas,
backups) is the README's to say, not this test's.
"""

from __future__ import annotations

import re
import secrets
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from gliding_core import Memory, MemoryConfig, Record, Scope, StoreConfig

ALICE, BOB = Scope.user("alice"), Scope.user("bob")
# One word no other text holds, ending in digits so that the lexical index's stemmer keeps it
# whole: the byte scan finds it only where the forgotten data stayed.
SECRET = f"qzforget{uuid.uuid4().hex}2468"
KEPT = f"qzkeep{uuid.uuid4().hex}1357"
_FORK = re.compile(r"^(?:_fsm|_vm|_init)?(?:\.\d+)?$")
# Every relation of the schema by name, and each table's TOAST table and its index, named
# after the table, with the path of its main file under the data directory (none: a view).
_RELATIONS = """
SELECT r.name, pg_relation_filepath(r.oid) FROM (
    SELECT relname AS name, oid FROM pg_class WHERE relnamespace = %(schema)s::regnamespace
    UNION ALL
    SELECT relname || ' toast', reltoastrelid FROM pg_class
    WHERE relnamespace = %(schema)s::regnamespace AND reltoastrelid <> 0
    UNION ALL
    SELECT t.relname || ' toast index', i.indexrelid FROM pg_class AS t
    JOIN pg_index AS i ON i.indrelid = t.reltoastrelid
    WHERE t.relnamespace = %(schema)s::regnamespace
) AS r
"""


def _noise(size: int) -> str:
    """Random words that neither pglz nor lz4 can compress, so a long value is stored as it
    is, out of line (TOAST), and its bytes can be found in the files."""
    return " ".join(secrets.token_urlsafe(12) for _ in range(size // 17 + 1))


def _fill(memory: Memory, scope: Scope, word: str, tag: str) -> None:
    """Give ``scope`` the word in a short entry, a long one (TOAST), a text kept in parts
    (``entry_parts``) and a supplementary input; every text is in the lexical index."""
    memory.store.put({"@id": f"urn:pg:{tag}:note", "text": f"note {word}"}, tags=[scope.tag])
    memory.store.put(
        {"@id": f"urn:pg:{tag}:long", "text": f"{_noise(6_000)} {word} {_noise(1_000)}"},
        tags=[scope.tag],
    )
    memory.store.put_text(  # past the node's head: the word is only in the parts
        {"@id": f"urn:pg:{tag}:parts", "@type": "Turn"},
        f"{_noise(1_000)} {word} {_noise(10_000)}",
        tags=[scope.tag],
    )
    memory.supplements.put(scope.task_iri, f"an input {word}")
    # Entries enough that the planner's sample of them is long: kept out of line, as is.
    memory.store.put_many(
        [
            Record({"@id": f"urn:pg:{tag}:filler{i}", "text": _noise(600)}, tags=[scope.tag])
            for i in range(40)
        ]
    )


def _relation_files(url: str, schema: str) -> dict[str, list[Path]]:
    """The files of every relation of ``schema``: its tables, sequences and indexes, their
    TOAST tables and the TOAST tables' indexes, each with its forks and segments, by name,
    written out by a checkpoint first (pages still in shared buffers are in no file)."""
    with psycopg.connect(url, autocommit=True) as conn:
        try:
            conn.execute("CHECKPOINT")
            data = Path(str(_one(conn, "SHOW data_directory")))
        except psycopg.errors.InsufficientPrivilege:
            pytest.skip("the test role may not run CHECKPOINT or read data_directory")
        rows = conn.execute(_RELATIONS, {"schema": schema}).fetchall()
    files: dict[str, list[Path]] = {}
    for name, relative in rows:
        if relative is None:  # a view: no storage
            continue
        main = data / relative
        if not main.parent.is_dir() or not _readable(main.parent):
            pytest.skip(f"the server's data directory is not readable here: {main.parent}")
        files[name] = [
            path
            for path in main.parent.iterdir()
            if path.name.startswith(main.name) and _FORK.match(path.name[len(main.name) :])
        ]
    return files


def _readable(directory: Path) -> bool:
    try:
        next(iter(directory.iterdir()), None)
    except PermissionError:
        return False
    return True


def _one(conn: psycopg.Connection[Any], sql: str) -> object:
    row = conn.execute(sql).fetchone()
    assert row is not None
    return row[0]


def _database_files(url: str) -> dict[str, Path]:
    """Every file of the test's database (``base/<oid>/``: its tables, indexes and catalogs,
    ``pg_statistic`` among them), by name, after a checkpoint; and, under the names
    ``"pg_statistic"`` and ``"pg_statistic toast"``, the planner statistics' own files."""
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("CHECKPOINT")
        data = Path(str(_one(conn, "SHOW data_directory")))
        base = data / str(
            _one(conn, "SELECT 'base/' || oid FROM pg_database WHERE datname = current_database()")
        )
        statistics = {
            str(name): data / str(path)
            for name, path in conn.execute(
                "SELECT 'pg_statistic', pg_relation_filepath('pg_catalog.pg_statistic')"
                " UNION ALL SELECT 'pg_statistic toast', pg_relation_filepath(reltoastrelid)"
                " FROM pg_class WHERE oid = 'pg_catalog.pg_statistic'::regclass"
            ).fetchall()
        }
    own = set(statistics.values())
    files = {path.name: path for path in base.iterdir() if path.is_file() and path not in own}
    return {**files, **statistics}


def _holds(path: Path, needle: bytes) -> bool:
    """Whether the file at ``path`` holds ``needle``; a file the server removed since the
    listing (its relation cache's ``pg_internal.init``, rewritten as backends start) holds
    nothing any more."""
    try:
        return needle in path.read_bytes()
    except FileNotFoundError:
        return False


def _holding(url: str, schema: str, word: str) -> set[str]:
    """The relations of ``schema`` whose files hold ``word``'s bytes."""
    needle = word.encode()
    return {
        name
        for name, paths in _relation_files(url, schema).items()
        if any(_holds(path, needle) for path in paths)
    }


@pytest.fixture
def memory(postgres_url: str, postgres_schema: str) -> Iterator[Memory]:
    # A small node limit, so that a text of 20 KB is kept in parts without writing megabytes.
    config = MemoryConfig(
        embedder="hash",
        database_schema=postgres_schema,
        store=StoreConfig(max_content_bytes=8_192, text_head_bytes=256),
    )
    with Memory.open(postgres_url, config=config) as value:
        yield value


def test_forget_leaves_no_byte_of_the_text_in_the_schemas_files(
    memory: Memory, postgres_url: str, postgres_schema: str
) -> None:
    _fill(memory, ALICE, SECRET, "a")
    _fill(memory, BOB, KEPT, "b")
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        conn.execute(f'ANALYZE "{postgres_schema}".entries')  # as autovacuum would, in time
    sampled = {
        name
        for name, path in _database_files(postgres_url).items()
        if _holds(path, SECRET.encode())
    }
    assert sampled & {"pg_statistic", "pg_statistic toast"}  # the planner kept a sample
    before = _holding(postgres_url, postgres_schema, SECRET)
    # The scan finds the word where it is: the entries (the long one out of line, in their
    # TOAST table), the parts (long: in theirs), the lexical index's table and its primary key
    # (the term is its key).
    assert {"entries", "entries toast", "entry_parts toast", "postings", "postings_pkey"} <= before

    report = memory.forget(ALICE)

    assert {"urn:pg:a:note", "urn:pg:a:long", "urn:pg:a:parts"} <= set(report.entries)
    assert report.inputs == 1
    assert "l0" in report.scrubbed
    assert _holding(postgres_url, postgres_schema, SECRET) == set()
    left = [
        name
        for name, path in _database_files(postgres_url).items()
        if _holds(path, SECRET.encode())
    ]
    assert left == []  # nor in any other file of the database: not in pg_statistic
    assert {"entries", "entries toast", "entry_parts toast", "postings"} <= _holding(
        postgres_url, postgres_schema, KEPT
    )
    assert KEPT in (memory.store.full_text("urn:pg:b:parts") or "")
    inputs = [item.iri for item in memory.supplements.history(BOB.task_iri)]
    found = {iri for iri, _ in memory.store.search_ids(KEPT, limit=10)}
    assert found == {"urn:pg:b:note", "urn:pg:b:long", "urn:pg:b:parts", *inputs}
    assert memory.store.search_ids(SECRET) == []
