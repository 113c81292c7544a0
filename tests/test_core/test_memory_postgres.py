"""Memory on PostgreSQL: opened by URL or by the environment, shared by memories and processes.

Every test runs on the session's real PostgreSQL (``postgres_url``: an embedded server, or
``GLIDING_TEST_DATABASE_URL``) in a schema of its own (``postgres_schema``).
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from unittest import mock

import psycopg
import pytest

from gliding_core import (
    BlackboardConfig,
    ConfigError,
    DatabaseUnavailableError,
    GlidingError,
    HashEmbedder,
    InvalidInputError,
    MalformedImportError,
    Memory,
    MemoryConfig,
    Record,
    Scope,
)
from gliding_core.attention.postgres_queue import PostgresSupplementaryQueue
from gliding_core.config import mask_url
from gliding_core.hyperspace import following
from gliding_core.hyperspace.pgvector import PgVectorIndex
from gliding_core.retention.copying import Place
from gliding_core.retention.transfer import FORMAT, VERSION
from gliding_core.store.postgres import PostgresEntryStore

REPOSITORY = Path(__file__).resolve().parents[2]
SECRET = "s3cret-Pa55word"


def _config(schema: str, **values: object) -> MemoryConfig:
    return MemoryConfig(embedder="hash", database_schema=schema, **values)  # type: ignore[arg-type]


def _with_password(url: str, password: str = SECRET) -> str:
    """``url`` with a password in its user part (the test server trusts local users, so the
    password is sent and ignored)."""
    scheme, _, rest = url.partition("://")
    user, at, host = rest.partition("@")
    assert at, f"the test URL names no user: {mask_url(url)}"
    return f"{scheme}://{user.partition(':')[0]}:{password}@{host}"


@pytest.fixture
def memory(postgres_url: str, postgres_schema: str) -> Iterator[Memory]:
    with Memory.open(postgres_url, config=_config(postgres_schema)) as value:
        yield value


def _child_env(url: str, schema: str) -> dict[str, str]:
    """The environment of a worker process: the database through the variables a deployment
    sets (so the URL is on no command line)."""
    path = os.pathsep.join([str(REPOSITORY), str(REPOSITORY / "core")])
    return {
        **os.environ,
        "PYTHONPATH": path,
        "GLIDING_DATABASE_URL": url,
        "GLIDING_DATABASE_SCHEMA": schema,
        "GLIDING_EMBEDDER": "hash",
    }


# -- opening -----------------------------------------------------------------------------------


def test_a_url_opens_the_memory_in_postgresql(memory: Memory, postgres_schema: str) -> None:
    assert isinstance(memory.store, PostgresEntryStore)
    assert memory.store.schema == postgres_schema
    assert isinstance(memory.supplements, PostgresSupplementaryQueue)
    assert memory.directory is None
    assert memory.owner is None
    assert memory.storage.kind == "postgresql"
    assert isinstance(memory.index, PgVectorIndex)  # the dense index is the database's too
    assert postgres_schema in repr(memory)


def test_put_search_session_and_supplements_go_through_the_database(
    memory: Memory, postgres_url: str, postgres_schema: str
) -> None:
    iri = memory.store.put({"@id": "urn:pg:fact", "text": "the heron nests by the mill pond"})
    results = memory.search("heron mill pond", k=3)
    assert [hit.iri for hit in results][:1] == [iri]
    assert set(results.arms) == {"dense", "lexical"}

    session = memory.session("urn:task:pg", agent="worker")
    turn = session.add_turn("user", "find where the heron nests")
    memory.supplements.put("urn:task:pg", "it moved to the river", producer="user")
    taken = session.start_cycle(memory.supplements)
    assert [item.content for item in taken] == ["it moved to the river"]
    assert memory.supplements.pending_count("urn:task:pg") == 0

    with psycopg.connect(postgres_url) as conn:  # in the schema's tables, not in a file
        rows = conn.execute(
            f'SELECT iri FROM "{postgres_schema}".entries WHERE iri = ANY(%s)',
            ([iri, turn.l0_archive_iri],),
        ).fetchall()
    assert {row[0] for row in rows} == {iri, turn.l0_archive_iri}


@pytest.mark.parametrize("answered_by", ["graph", "scan"])
def test_a_search_goes_to_the_server_a_fixed_number_of_times(
    memory: Memory, answered_by: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A hybrid search is seven statements, each its own round trip: the dense index's check
    that nothing changed (the shared watermark and the change log in one), the lexical arm's
    two (the blocks of the query's terms, then the best entries by id), the dense arm (no
    transaction around it), the context links in both directions at once, the candidates'
    entries (their graphs and the hits) and those of the entries the links add (the re-rank
    takes the candidates' vectors from the index's cache, not their texts from L0). A memory
    small enough for the dense arm's exact scan (``SCAN_LIMIT``) asks nothing for that arm:
    six. Load does not move this count; a search that fetched the same rows twice, read the
    watermark and the log apart, or wrapped the dense arm in a transaction of its own, would
    raise it. The lexical arm runs beside the check, the embedding and the dense arm, and the
    links beside the candidates' entries, on connections of their own."""
    if answered_by == "graph":
        monkeypatch.setattr(following, "SCAN_LIMIT", -1)
    expected = 7 if answered_by == "graph" else 6
    store = memory.store
    assert isinstance(store, PostgresEntryStore)
    # More entries than either arm ranks (100): some candidates need their texts read.
    memory.store.put_many(
        [
            {
                "@id": f"urn:pg:turn:{i}",
                "text": f"turn {i} about the {word} by the mill",
                **({"previous": {"@id": f"urn:pg:turn:{i - 1}"}} if i else {}),
            }
            for i, word in enumerate(["heron", "kettle", "lantern", "ferry", "orchard"] * 30)
        ],
    )
    # Read one statement after the other, on connections that have the HNSW beam already (the
    # first search gives it to the connection it uses, once).
    store.concurrent_reads = False  # type: ignore[misc]
    memory.search("heron mill")
    before = store.db.statements
    results = memory.search("lantern by the mill")
    assert store.db.statements - before == expected
    # Read together, the same statements, but for the beam given to a connection the pool
    # opens for a search's second or third read at once, when its dense arm draws it.
    store.concurrent_reads = True  # type: ignore[misc]
    for _ in range(3):
        before = store.db.statements
        results = memory.search("lantern by the mill")
        assert expected <= store.db.statements - before <= expected + 1
    assert results.index_behind == 0
    assert set(results.arms) == {"dense", "lexical"}
    # A write between searches is still caught up with before the next one ranks.
    memory.store.put({"@id": "urn:pg:new", "text": "the quiet weir above the lock"})
    results = memory.search("quiet weir lock", k=3)
    assert [hit.iri for hit in results][:1] == ["urn:pg:new"]
    assert results.index_behind == 0


def test_a_search_whose_reads_run_together_ranks_as_one_reading_in_turn(
    postgres_url: str, postgres_schema: str
) -> None:
    """The reads a search sends beside each other (the lexical arm beside the dense one, the
    links beside the candidates' entries) give the hits and scores of the same search read one
    statement after the other; a reader that raised would raise from the search."""
    queries = ["lantern ferry", "copper weir near the mill", "river7 heron", "turn 12 orchard"]
    with Memory.open(postgres_url, config=_config(postgres_schema)) as memory:
        memory.store.put_many(_conversation())
        store = memory.store
        assert store.concurrent_reads
        together = [[(h.iri, h.score, h.arms) for h in memory.search(q)] for q in queries]
        store.concurrent_reads = False  # type: ignore[misc]
        in_turn = [[(h.iri, h.score, h.arms) for h in memory.search(q)] for q in queries]
        assert together == in_turn
        store.concurrent_reads = True  # type: ignore[misc]
        with (
            mock.patch.object(store, "linked", side_effect=DatabaseUnavailableError("injected")),
            pytest.raises(DatabaseUnavailableError, match="injected"),
        ):
            memory.search("lantern ferry")
        assert [(h.iri, h.score, h.arms) for h in memory.search(queries[0])] == together[0]


def test_the_dense_arm_runs_while_the_lexical_arm_reads(
    postgres_url: str, postgres_schema: str
) -> None:
    """A search asks the dense index while its lexical arm is still being read beside it (the
    two arms' waits overlap), and ranks as before."""
    with Memory.open(postgres_url, config=_config(postgres_schema)) as memory:
        memory.store.put_many(_conversation())
        before = [(h.iri, h.score) for h in memory.search("lantern ferry")]
        dense_asked = threading.Event()
        seen: list[bool] = []
        search_ids, query = memory.store.search_ids, memory.index.query

        def slow_lexical(*args: Any, **kwargs: Any) -> Any:
            seen.append(dense_asked.wait(timeout=10))
            return search_ids(*args, **kwargs)

        def noted_query(*args: Any, **kwargs: Any) -> Any:
            dense_asked.set()
            return query(*args, **kwargs)

        with (
            mock.patch.object(memory.store, "search_ids", side_effect=slow_lexical),
            mock.patch.object(memory.index, "query", side_effect=noted_query),
        ):
            hits = [(h.iri, h.score) for h in memory.search("lantern ferry")]
        assert seen == [True]
        assert hits == before


def test_a_search_inside_a_transaction_reads_its_writes(memory: Memory) -> None:
    """Inside the caller's transaction every read of a search goes through the transaction's
    connection (another thread's would not see its writes)."""
    memory.store.put_many([{"@id": f"urn:pg:n{i}", "text": f"note {i} on slate"} for i in range(5)])
    with memory.store.transaction():
        memory.store.put({"@id": "urn:pg:fresh", "text": "a marigold under the slate roof"})
        hits = memory.search("marigold slate", k=3)
        assert [hit.iri for hit in hits][:1] == ["urn:pg:fresh"]
        assert "lexical" in hits[0].arms


def test_two_memories_on_one_database_see_each_other(
    postgres_url: str, postgres_schema: str
) -> None:
    config = _config(postgres_schema)
    with (
        Memory.open(postgres_url, config=config) as first,
        Memory.open(postgres_url, config=config) as second,
    ):
        first.store.put({"@id": "urn:pg:one", "text": "copper kettles on the shelf"})
        assert second.store.get("urn:pg:one") is not None
        # The second one's dense index follows L0's change log: the first's write is found
        # by meaning too, with no reopening.
        results = second.search("copper kettles", k=2)
        assert [hit.iri for hit in results][:1] == ["urn:pg:one"]
        assert "dense" in results.arms
        second.supplements.put("urn:task:shared", "from the second")
        assert [i.content for i in first.supplements.take_pending("urn:task:shared")] == [
            "from the second"
        ]
        assert second.supplements.take_pending("urn:task:shared") == []


def _conversation() -> list[Record]:
    """Turns of a few sessions, each linked to the one before, one of them long enough to be
    embedded in windows: what the re-rank reads links, graphs and vectors for."""
    words = ["heron", "kettle", "lantern", "ferry", "orchard", "weir", "mill", "copper"]
    turns: list[Record] = []
    for i in range(240):
        text = f"turn {i}: the {words[i % 8]} and the {words[i * 3 % 7]} near {words[i % 5]}"
        if i == 77:
            text += " " + " ".join(f"{words[j % 8]} river{j % 13}" for j in range(200))
        node = {
            "@id": f"urn:pg:turn:{i}",
            "text": text,
            **({"previous": {"@id": f"urn:pg:turn:{i - 1}"}} if i % 40 else {}),
        }
        turns.append(Record(node, named_graph=f"urn:s:{i // 40}"))  # a graph per session
    return turns


def test_a_search_ranks_as_on_sqlite_in_a_worker_with_nothing_cached(
    postgres_url: str, postgres_schema: str
) -> None:
    """The memory that wrote the turns (their vectors in its process cache) and another that
    only opened the database (its re-rank reads every vector from the index's table) give
    the same hits with the same scores, and the best hit SQLite gives: a read that lost a
    window, took another entry's vector or an expired one would move a hit or a score."""
    turns = _conversation()
    queries = ["lantern ferry", "copper weir near the mill", "river7 heron", "turn 12 orchard"]
    config = _config(postgres_schema)
    with Memory(config=MemoryConfig(embedder="hash")) as local:
        local.store.put_many(turns)
        expected = [[(h.iri, h.score) for h in local.search(q, k=10)] for q in queries]
    with Memory.open(postgres_url, config=config) as writer:
        writer.store.put_many(turns)
        warm = [[(h.iri, h.score) for h in writer.search(q, k=10)] for q in queries]
        with Memory.open(postgres_url, config=config) as reader:
            cold = [[(h.iri, h.score) for h in reader.search(q, k=10)] for q in queries]
    # The reader's vectors, read from the table, are the writer's bit for bit: the same hits,
    # the scores equal but for the order of float sums.
    for hits, written in zip(cold, warm, strict=True):
        assert [iri for iri, _ in hits] == [iri for iri, _ in written]
        assert [s for _, s in hits] == pytest.approx([s for _, s in written], abs=1e-6)
    # The graph's walk is random (pgvector draws each element's level), Chroma's too: the
    # backends agree on the best hit, not always on every place below it.
    assert [hits[0][0] for hits in warm] == [hits[0][0] for hits in expected]


def test_schemas_keep_memories_apart(postgres_url: str, postgres_schema: str) -> None:
    other = f"{postgres_schema}_b"
    try:
        with Memory.open(postgres_url, config=_config(postgres_schema)) as first:
            first.store.put({"@id": "urn:pg:mine", "text": "only here"})
            with Memory.open(postgres_url, config=_config(other)) as second:
                assert second.store.get("urn:pg:mine") is None
                assert second.store.count() == 0
    finally:
        with psycopg.connect(postgres_url, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA IF EXISTS "{other}" CASCADE')


def test_a_second_process_shares_the_memory(postgres_url: str, postgres_schema: str) -> None:
    with Memory.open(postgres_url, config=_config(postgres_schema)) as memory:
        memory.store.put({"@id": "urn:pg:parent", "text": "written by the parent"})
        child = textwrap.dedent(
            """
            from gliding_core import Memory
            with Memory.open() as memory:  # GLIDING_DATABASE_URL, GLIDING_DATABASE_SCHEMA
                print(memory.store.get("urn:pg:parent").node["text"])
                memory.store.put({"@id": "urn:pg:child", "text": "written by the child"})
                memory.supplements.put("urn:task:pg", "a note from the child")
            """
        )
        done = subprocess.run(
            [sys.executable, "-c", child],
            env=_child_env(postgres_url, postgres_schema),
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        assert done.returncode == 0, done.stderr
        assert done.stdout.strip() == "written by the parent"
        entry = memory.store.get("urn:pg:child")
        assert entry is not None
        assert entry.node["text"] == "written by the child"
        assert memory.search("written by the child", k=1)[0].iri == "urn:pg:child"
        taken = memory.supplements.take_pending("urn:task:pg")
        assert [item.content for item in taken] == ["a note from the child"]


def test_the_environment_names_the_database(
    postgres_url: str, postgres_schema: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GLIDING_DATABASE_URL", postgres_url)
    monkeypatch.setenv("GLIDING_DATABASE_SCHEMA", postgres_schema)
    monkeypatch.setenv("GLIDING_EMBEDDER", "hash")
    config = MemoryConfig.from_env()
    assert config.database_url == postgres_url
    assert config.database_schema == postgres_schema
    with Memory.open() as memory:
        assert isinstance(memory.store, PostgresEntryStore)
        assert memory.store.schema == postgres_schema
    with Memory(config=config) as memory:  # the constructor follows the settings too
        assert isinstance(memory.store, PostgresEntryStore)


def test_open_with_no_place_is_a_typed_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("GLIDING_DATABASE_URL", raising=False)
    with pytest.raises(InvalidInputError, match="GLIDING_DATABASE_URL"):
        Memory.open()


def test_a_directory_given_wins_over_the_database_setting(
    tmp_path: Path, postgres_url: str, postgres_schema: str
) -> None:
    config = _config(postgres_schema, database_url=postgres_url)
    with Memory.open(tmp_path, config=config) as memory:
        assert memory.storage.kind == "directory"
        assert memory.directory == tmp_path


@pytest.mark.parametrize(
    "schema", ["public", "pg_catalog", "Upper", "1st", "a-b", "x" * 64, "", "a;drop"]
)
def test_bad_schema_names_are_config_errors(schema: str) -> None:
    with pytest.raises(ConfigError, match="database_schema"):
        MemoryConfig(database_schema=schema)


# -- forgetting, expiry, export and import ------------------------------------------------------


def test_forget_expiry_and_export_reach_the_database(
    memory: Memory, postgres_url: str, postgres_schema: str, tmp_path: Path
) -> None:
    alice, bob = Scope.user("alice"), Scope.user("bob")
    memory.store.put({"@id": "urn:pg:a", "text": "alice passport Qzalice"}, tags=[alice.tag])
    memory.store.put({"@id": "urn:pg:b", "text": "bob keeps Qzbob"}, tags=[bob.tag])
    memory.supplements.put(alice.task_iri, "an input of alice Qzinput")
    memory.store.put({"@id": "urn:pg:brief", "text": "brief Qzbrief"}, ttl=0.01)
    time.sleep(0.1)  # past its TTL (a put and a search may come within 10 ms of each other)
    assert memory.store.search_ids("Qzbrief") == []  # expired: invisible at once
    assert "urn:pg:a" in {hit.iri for hit in memory.search("alice passport", k=5)}

    report = memory.forget(alice)
    assert "urn:pg:a" in report.entries
    assert report.inputs == 1
    assert "l0" in report.scrubbed
    with psycopg.connect(postgres_url) as conn:  # gone from the tables, the swept one too
        rows = conn.execute(f'SELECT iri FROM "{postgres_schema}".entries ORDER BY iri').fetchall()
    assert [row[0] for row in rows] == ["urn:pg:b"]
    assert memory.store.search_ids("Qzalice Qzinput") == []
    assert "urn:pg:a" not in {hit.iri for hit in memory.search("alice passport", k=5)}

    out = tmp_path / "memory.jsonl"
    assert memory.export_jsonl(out) == 1
    other = f"{postgres_schema}_copy"
    try:
        with Memory.open(postgres_url, config=_config(other)) as copy:
            assert copy.import_jsonl(out).imported == ("urn:pg:b",)
            entry, original = copy.store.get("urn:pg:b"), memory.store.get("urn:pg:b")
            assert entry is not None
            assert original is not None
            assert (entry.node, entry.tags, entry.created_at) == (
                original.node,
                original.tags,
                original.created_at,
            )
    finally:
        with psycopg.connect(postgres_url, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA IF EXISTS "{other}" CASCADE')


def test_an_import_refuses_a_forged_vector_and_keeps_the_vectors_it_holds(
    memory: Memory, tmp_path: Path
) -> None:
    """The import path and the embedding cache are the same on PostgreSQL: a forged vector of
    a new text refuses the file and writes nothing; one of a text the memory holds is not
    taken (the memory's entry of that text and the file's score alike)."""
    text = "the ferry timetable Qzferry"
    header = {"format": FORMAT, "version": VERSION, "embedder": memory.embedder_name}
    record = {
        "entry": {"@id": "urn:pg:file", "text": text},
        "created": 1_000.0,
        "embedding": HashEmbedder().embed_query("crate code 5521"),
    }
    hostile = tmp_path / "hostile.jsonl"
    hostile.write_text(f"{json.dumps(header)}\n{json.dumps(record)}\n", encoding="utf-8")
    with pytest.raises(MalformedImportError, match="urn:pg:file"):
        memory.import_jsonl(hostile)
    assert memory.store.get("urn:pg:file") is None

    memory.store.put({"@id": "urn:pg:own", "text": text})
    memory.store.put({"@id": "urn:pg:crate", "text": "crate code 5521"})
    assert memory.import_jsonl(hostile).imported == ("urn:pg:file",)
    scores = {hit.iri: hit.score for hit in memory.search("crate code 5521", k=3)}
    assert scores["urn:pg:file"] == pytest.approx(scores["urn:pg:own"])


# -- the blackboard ------------------------------------------------------------------------------


def test_the_blackboard_needs_a_sparql_endpoint(memory: Memory) -> None:
    with pytest.raises(ConfigError, match=r"BlackboardConfig\(endpoint=\.\.\.\)"):
        _ = memory.blackboard
    with pytest.raises(ConfigError, match="SPARQL"):  # again: nothing was left half-open
        memory.agent("a", role="do", task="urn:task:x")


def test_leases_and_nodes_are_shared_through_the_database_and_the_endpoint(
    postgres_url: str, postgres_schema: str, oxigraph_server: str
) -> None:
    config = _config(postgres_schema, blackboard=BlackboardConfig(endpoint=oxigraph_server))
    task = f"urn:task:{uuid.uuid4().hex}"
    node = f"urn:pg:node:{uuid.uuid4().hex}"
    with (
        Memory.open(postgres_url, config=config) as first,
        Memory.open(postgres_url, config=config) as second,
    ):
        writer = first.agent("writer", role="do", task=task)
        writer.write([{"@id": node, "text": "v1"}], area="execution")
        reader = second.agent("reader", role="check", task=task)
        found = reader.read(node)
        assert found is not None
        assert found.node["text"] == "v1"
        # The reader's copy is invalidated by the other memory's write (the coherence
        # directory is the database's): its next read is the new value, never the cached one.
        writer.write([{"@id": node, "text": "v2"}], area="execution", based_on=found.generation)
        again = reader.read(node)
        assert again is not None
        assert again.node["text"] == "v2"
        # The coordination store is the database's: the second memory sees the first's agent.
        names = {agent.name for agent in second.blackboard.coordination.agents.agents(task=task)}
        assert names == {"writer", "reader"}


# -- secrets and bad URLs ------------------------------------------------------------------------


def test_the_password_is_never_shown(
    postgres_url: str, postgres_schema: str, caplog: pytest.LogCaptureFixture
) -> None:
    url = _with_password(postgres_url)
    config = _config(postgres_schema, database_url=url)
    caplog.set_level(logging.DEBUG)
    with Memory.open(url, config=_config(postgres_schema)) as memory:
        memory.store.put({"@id": "urn:pg:s", "text": "secret keeping"})
        memory.search("secret keeping")
        shown = [repr(memory), str(memory), repr(memory.store), repr(memory.config)]
        shown += [str(memory.config), repr(config), str(config), repr(memory.storage)]
        for text in shown:
            assert SECRET not in text
        assert "***" in repr(config)
    messages = [record.getMessage() for record in caplog.records]
    assert [message for message in messages if "postgres:***@" in message]  # shown masked
    assert not [message for message in messages if SECRET in message]


@pytest.mark.parametrize(
    ("url", "error", "shown"),
    [
        (f"postgresql://u:{SECRET}@localhost:notaport/db", ConfigError, "notaport"),
        (f"mysql://u:{SECRET}@localhost/db", InvalidInputError, "mysql://u:***@localhost"),
        (f"postgresq://u:{SECRET}@localhost/db", InvalidInputError, "postgresq://u:***@"),
        (f"postgresql://u:{SECRET}@/db\n?host=/tmp", ConfigError, "control character"),
    ],
)
def test_a_bad_url_is_a_typed_error_with_its_password_masked(
    url: str, error: type[GlidingError], shown: str
) -> None:
    with pytest.raises(error) as caught:
        Memory.open(url, config=MemoryConfig(embedder="hash"))
    message = str(caught.value)
    assert SECRET not in message
    assert shown in message


@pytest.mark.parametrize(
    "conninfo",
    [
        f"host=localhost password={SECRET} dbname=memory",
        f"  DBNAME=memory user=u password='{SECRET}'",
        f"user=u password = {SECRET}",
        f"host=db password={SECRET}=x dbname=d",  # no piece of a value is named
        f"host=db password='pa {SECRET}=word' dbname=d",
        f"connect_timeout=10 host=db user=u password={SECRET} dbname=d",
        f"application_name=app host=db password={SECRET}",
    ],
)
def test_a_key_value_connection_string_is_refused_not_made_a_directory(
    conninfo: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # It was taken as a directory name: a folder named after it, password and all, and a
    # memory whose repr showed it.
    monkeypatch.chdir(tmp_path)
    with pytest.raises(InvalidInputError, match="key=value connection string") as caught:
        Memory.open(conninfo, config=MemoryConfig(embedder="hash"))
    assert SECRET not in str(caught.value)
    with pytest.raises(InvalidInputError, match="key=value connection string") as caught:
        Place.parse(conninfo)
    assert SECRET not in str(caught.value)
    assert list(tmp_path.iterdir()) == []


# Passwords holding what ends a URL's authority for urllib but not for libpq; the pieces
# between those characters are what must never be shown.
PIECES = ("Xq7k", "Zr9m", "Wp3v")


@pytest.mark.parametrize("password", ["Xq7k#Zr9m", "Xq7k?Zr9m", "Xq7k#Zr9m?Wp3v", "Xq7k&Zr9m=Wp3v"])
def test_a_password_holding_url_delimiters_is_read_as_libpq_reads_it_and_never_shown(
    postgres_url: str, postgres_schema: str, password: str, caplog: pytest.LogCaptureFixture
) -> None:
    """libpq takes everything up to the user part's ``@`` as the password, ``#`` and ``?``
    included (urllib would end the authority there): the URL opens,
    and no piece of the password is shown."""
    url = _with_password(postgres_url, password)
    caplog.set_level(logging.DEBUG)
    with Memory.open(url, config=_config(postgres_schema)) as memory:
        memory.store.put({"@id": "urn:pg:d", "text": "delimiters"})
        shown = [repr(memory), repr(memory.store), repr(memory.config), repr(memory.storage)]
    shown += [record.getMessage() for record in caplog.records]
    assert not [text for text in shown if any(piece in text for piece in PIECES)]


@pytest.mark.parametrize(
    "url",
    [
        "postgresql://u:Xq7k#Zr9m@host/db",
        "postgresql://u:Xq7k?Zr9m@host:5432/db?sslmode=require",
        "postgresql://u:Xq7k/Zr9m@host/db",  # libpq reads a host and a port: refused
        "postgresql://u@host/db?password=Xq7k#Zr9m&sslmode=require",
        "postgresql://u@host/db?pass%77ord=Xq7k",
        "postgresql://u@host/db?sslpassword=Xq7k#Zr9m",
    ],
)
def test_a_masked_url_shows_no_piece_of_its_password(url: str) -> None:
    """``mask_url``, and a ``ConfigError`` for a URL libpq cannot read, show none of it."""
    assert "***" in mask_url(url)
    assert not [piece for piece in PIECES if piece in mask_url(url)]
    if "/Zr9m" not in url:  # libpq reads it: so does the configuration
        assert MemoryConfig(embedder="hash", database_url=url).database_url == url
        return
    with pytest.raises(ConfigError, match="port") as caught:
        MemoryConfig(embedder="hash", database_url=url)
    assert not [piece for piece in PIECES if piece in str(caught.value)]


def test_an_unreachable_database_is_a_typed_error_naming_it(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    url = f"postgresql://worker:{SECRET}@/memory?host={tmp_path}/nowhere"
    config = MemoryConfig(embedder="hash", database_timeout_s=0.5)
    with pytest.raises(DatabaseUnavailableError) as caught:
        Memory.open(url, config=config)
    message = str(caught.value)
    assert "nowhere" in message
    assert "PostgreSQL" in message
    assert SECRET not in message
    assert SECRET not in repr(caught.value)
    cause = caught.value.__cause__
    assert cause is None or SECRET not in str(cause)
    assert not [r.getMessage() for r in caplog.records if SECRET in r.getMessage()]


def test_a_database_that_refuses_is_a_config_error_naming_why(
    postgres_url: str, postgres_schema: str
) -> None:
    scheme, _, rest = postgres_url.partition("://")
    authority, _, query = rest.partition("/")
    missing = f"{scheme}://{authority}/no_such_database_{uuid.uuid4().hex[:8]}"
    if "?" in query:
        missing += "?" + query.partition("?")[2]
    with pytest.raises(ConfigError, match="no_such_database"):
        Memory.open(missing, config=_config(postgres_schema, database_timeout_s=2.0))


# -- the servers for trying it: `gliding-horse serve` ---------------------------------------------


def _serve(directory: Path) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "gliding_core.cli", "serve", str(directory)],
        env=_child_env("postgresql://unused@/x", "unused"),
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )


def _exports(server: subprocess.Popen[str]) -> dict[str, str]:
    assert server.stdout is not None
    lines = [server.stdout.readline().strip() for _ in range(2)]
    pairs = [line.removeprefix("export ").split("=", 1) for line in lines]
    return {name: value.strip("'") for name, value in pairs}


def _stop(server: subprocess.Popen[str]) -> None:
    server.terminate()  # SIGTERM: both servers are shut down cleanly
    assert server.wait(timeout=120) == 0


def test_serve_runs_what_a_shared_memory_needs_and_keeps_its_data() -> None:
    directory = Path(tempfile.mkdtemp(prefix="gliding-serve-"))
    try:
        with _serve(directory) as server:
            try:
                environ = {**_exports(server), "GLIDING_EMBEDDER": "hash"}
                config = MemoryConfig.from_env(environ)
                assert config.blackboard.endpoint == environ["GLIDING_SPARQL_ENDPOINT"]
                with Memory.open(config=config) as memory:
                    memory.store.put({"@id": "urn:pg:kept", "text": "kept across restarts"})
                    handle = memory.agent("a", role="do", task="urn:task:serve")
                    handle.write([{"@id": "urn:pg:node", "text": "on the board"}], area="execution")
            finally:
                _stop(server)
        with _serve(directory) as server:  # started again on the same directory
            try:
                config = MemoryConfig.from_env({**_exports(server), "GLIDING_EMBEDDER": "hash"})
                with Memory.open(config=config) as memory:
                    assert memory.store.get("urn:pg:kept") is not None
            finally:
                _stop(server)
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def test_the_sparql_endpoint_comes_from_the_environment() -> None:
    config = MemoryConfig.from_env({"GLIDING_SPARQL_ENDPOINT": "http://127.0.0.1:7878"})
    assert config.blackboard.endpoint == "http://127.0.0.1:7878"
    given = BlackboardConfig(endpoint="http://other:1")
    config = MemoryConfig.from_env({"GLIDING_SPARQL_ENDPOINT": "http://x:1"}, blackboard=given)
    assert config.blackboard is given
