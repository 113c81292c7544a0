"""Write-back and write-through from the blackboard to L0, a SIGKILL included.

Each test runs on the embedded store in memory and on disk, and on the SPARQL server.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import psycopg
import pytest

from gliding_core import EventBus, EventType, L0Store, Memory, MemoryConfig
from gliding_core.blackboard.board import Blackboard
from gliding_core.blackboard.graph import GraphBackend, SparqlEndpoint
from gliding_core.blackboard.records import BoardNode
from gliding_core.blackboard.vocabulary import area_graph, meta
from gliding_core.coherence.postgres_directory import PostgresDirectory
from gliding_core.config import BlackboardConfig
from tests.test_core.blackboard.test_blackboard_graph import make_backend

TASK = "iri://task/t1"
OTHER = "iri://task/t2"
QUIET = BlackboardConfig(flush_interval_s=0.0)

Backends = Callable[[], GraphBackend]


@pytest.fixture(params=["memory", "disk", "server"])
def fresh(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Backends]:
    """Make empty backends of one kind (each on disk in its own directory; the server cleared)."""
    made: list[GraphBackend] = []

    def make() -> GraphBackend:
        folder = tmp_path / f"backend-{len(made)}"
        folder.mkdir()
        made.append(make_backend(request.param, folder, request))
        return made[-1]

    yield make
    for backend in made:
        backend.close()  # (closing twice is harmless: most are closed by their board)


def test_dirty_nodes_reach_l0_on_flush_exactly_as_the_node(store: L0Store, fresh: Backends) -> None:
    board = Blackboard(fresh(), store=store, config=QUIET)
    board.write(
        [{"@id": "urn:n:1", "@type": "Result", "summary": "a", "extra": 1}],
        task=TASK,
        area="execution",
        tags=["draft", "wip"],
    )
    assert store.get("urn:n:1") is None
    assert board.flush() == 1
    entry = store.get("urn:n:1")
    assert entry is not None
    assert entry.tags == ("draft", "wip")
    assert entry.named_graph == area_graph(TASK, "execution")
    board.write([{"@id": "urn:n:1", "summary": "b"}], task=TASK, area="execution", tags=["final"])
    assert board.flush() == 1
    entry = store.get("urn:n:1")
    assert entry is not None
    assert entry.node == {"@id": "urn:n:1", "summary": "b"}  # "extra" and the type do not linger
    assert entry.tags == ("final",)
    assert entry.jsonld_types == ()
    assert entry.metadata == {"l2_generation": 2}
    assert board.flush() == 0  # nothing is dirty any more
    assert board.nodes.dirty() == []


def test_a_flush_keeps_the_l0_entrys_history(store: L0Store, fresh: Backends) -> None:
    board = Blackboard(fresh(), store=store, config=QUIET)
    node = {"@id": "urn:n:1", "summary": "the kestrel hovers", "note": "over the stubble field"}
    board.write([node], task=TASK, area="execution", tags=["draft"])
    board.flush()
    first = store.get("urn:n:1")
    assert first is not None
    assert [hit.entry.iri for hit in store.search_text("stubble")] == ["urn:n:1"]
    board.write([{"@id": "urn:n:1", "summary": "the kestrel dives"}], task=TASK, area="execution")
    board.flush()
    second = store.get("urn:n:1")
    assert second is not None
    assert second.node == {"@id": "urn:n:1", "summary": "the kestrel dives"}  # no "note"
    assert second.tags == ()
    assert store.by_tags(["draft"]) == []
    assert second.generation == first.generation + 1  # L0's generation goes on
    assert second.created_at == first.created_at
    assert second.metadata == {"l2_generation": 2}
    assert store.search_text("stubble") == []
    assert [hit.entry.iri for hit in store.search_text("dives")] == ["urn:n:1"]


def test_critical_tags_write_through_before_the_write_returns(
    store: L0Store, fresh: Backends
) -> None:
    board = Blackboard(fresh(), store=store, config=QUIET)
    board.write([{"@id": "urn:n:plain"}], task=TASK, area="plan")
    board.write(
        [{"@id": "urn:n:intent", "text": "ship it"}], task=TASK, area="plan", tags=["user_intent"]
    )
    assert store.get("urn:n:intent") is not None
    assert store.get("urn:n:plain") is None
    assert [n.iri for n in board.nodes.dirty()] == ["urn:n:plain"]


def test_critical_tags_are_configurable(store: L0Store, fresh: Backends) -> None:
    config = BlackboardConfig(flush_interval_s=0.0, critical_tags=frozenset({"urgent"}))
    board = Blackboard(fresh(), store=store, config=config)
    board.write([{"@id": "urn:n:1"}], task=TASK, area="plan", tags=["emphasis"])
    board.write([{"@id": "urn:n:2"}], task=TASK, area="plan", tags=["urgent"])
    assert store.get("urn:n:1") is None
    assert store.get("urn:n:2") is not None


def test_a_flush_of_one_task_leaves_the_others_dirty(store: L0Store, fresh: Backends) -> None:
    bus = EventBus()
    board = Blackboard(fresh(), store=store, bus=bus, config=QUIET)
    board.write([{"@id": "urn:n:1"}], task=TASK, area="plan")
    board.write([{"@id": "urn:n:2"}], task=OTHER, area="plan")
    assert board.flush(task=TASK) == 1
    assert [n.iri for n in board.nodes.dirty()] == ["urn:n:2"]
    [event] = bus.recent(EventType.MEMORY_WRITE_BACK)
    assert event.payload == {"iris": ["urn:n:1"], "count": 1}


def test_a_node_rewritten_during_a_flush_stays_dirty(store: L0Store, fresh: Backends) -> None:
    board = Blackboard(fresh(), store=store, config=QUIET)
    [old] = board.write([{"@id": "urn:n:1", "v": 1}], task=TASK, area="plan")
    board.write([{"@id": "urn:n:1", "v": 2}], task=TASK, area="plan")
    board.nodes.mark_clean([old])  # a flush of generation 1 finishing late
    assert [n.generation for n in board.nodes.dirty()] == [2]


def test_close_flushes_and_the_timer_flushes(store: L0Store, fresh: Backends) -> None:
    board = Blackboard(fresh(), store=store, config=QUIET)
    board.write([{"@id": "urn:n:1"}], task=TASK, area="plan")
    board.close()
    assert store.get("urn:n:1") is not None
    bus = EventBus()
    flushed = threading.Event()
    bus.subscribe(lambda e: flushed.set(), [EventType.MEMORY_WRITE_BACK])
    timed = Blackboard(
        fresh(), store=store, bus=bus, config=BlackboardConfig(flush_interval_s=0.05)
    )
    timed.write([{"@id": "urn:n:2"}], task=TASK, area="plan")
    assert flushed.wait(timeout=30)
    timed.close()
    assert store.get("urn:n:2") is not None


def test_the_memory_builds_its_blackboard_lazily_and_closes_it(tmp_path: Path) -> None:
    config = MemoryConfig(embedder="hash", blackboard=QUIET)
    with Memory(config=config) as memory:
        assert memory._blackboard is None
        planner = memory.agent("p", role="plan", task=TASK)
        planner.write([{"@id": "urn:n:1", "@type": "Plan"}], area="plan")
        assert memory.blackboard.backend.kind == "memory"
    with Memory.open(tmp_path / "m", config=config) as memory:
        memory.agent("p", role="plan", task=TASK).write([{"@id": "urn:n:2"}], area="plan")
        assert memory.blackboard.backend.kind == "disk"
    with Memory.open(tmp_path / "m", config=config) as memory:
        assert memory.store.get("urn:n:2") is not None  # flushed on close
        assert memory.blackboard.read("urn:n:2") is not None


_CHILD = """
import sys, time
from gliding_core import L0Store
from gliding_core.blackboard.board import Blackboard
from gliding_core.config import BlackboardConfig
store = L0Store(sys.argv[1])
where = {"endpoint": sys.argv[2]} if sys.argv[2].startswith("http") else {"path": sys.argv[2]}
board = Blackboard.open(**where, store=store, config=BlackboardConfig(flush_interval_s=0))
board.write([{"@id": "urn:n:through", "v": 1}], task="iri://task/t1", area="plan",
            tags=["confirmed_fact"])
board.write([{"@id": "urn:n:back", "v": 2}], task="iri://task/t1", area="plan")
print("written", flush=True)
time.sleep(600)
"""


def run_and_kill(code: str, *args: str) -> None:
    """Run ``code`` in a child process until it prints "written", then SIGKILL it."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    with subprocess.Popen(
        [sys.executable, "-c", code, *args], stdout=subprocess.PIPE, env=env
    ) as child:
        try:
            assert child.stdout is not None
            assert child.stdout.readline().strip() == b"written"
        finally:
            child.send_signal(signal.SIGKILL)
            child.wait()
    assert child.returncode == -signal.SIGKILL


@pytest.mark.parametrize("kind", ["disk", "server"])
def test_a_sigkill_loses_no_write_through_and_no_write_back_on_disk_or_the_server(
    tmp_path: Path, request: pytest.FixtureRequest, kind: str
) -> None:
    l0, where = tmp_path / "l0.sqlite3", str(tmp_path / "graph")
    if kind == "server":
        make_backend("server", tmp_path, request).close()  # an empty server
        where = request.getfixturevalue("oxigraph_server")
    run_and_kill(_CHILD, str(l0), where)
    with L0Store(l0) as store:
        assert store.get("urn:n:through") is not None  # written through before returning
        assert store.get("urn:n:back") is None  # still only on the blackboard
        reopened = {"endpoint": where} if kind == "server" else {"path": where}
        with Blackboard.open(**reopened, store=store, config=QUIET) as board:  # recovers
            node = board.read("urn:n:back")
            assert node is not None
            assert not node.dirty
        entry = store.get("urn:n:back")
        assert entry is not None
        assert entry.node == {"@id": "urn:n:back", "v": 2}


def test_a_crash_of_an_in_memory_blackboard_loses_only_unflushed_write_backs(
    tmp_path: Path,
) -> None:
    l0 = tmp_path / "l0.sqlite3"
    in_memory = _CHILD.replace("Blackboard.open(**where,", "Blackboard.open(None,")
    assert in_memory != _CHILD  # the child really opens a board in memory
    run_and_kill(in_memory, str(l0), "-")
    with L0Store(l0) as store:
        assert store.get("urn:n:through") is not None
        assert store.get("urn:n:back") is None


def test_a_flush_in_one_process_never_undoes_another_processs_write(
    oxigraph_server: str,
    postgres_url: str,
    postgres_schema: str,
    store: L0Store,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Two boards on one server and one directory stand in for two processes. The flushing
    board is stopped right before it writes its clean mark, and the other writes the node
    meanwhile: that write must survive the clean mark (the record then says generation 2),
    and the next write on it must find the store where the directory is."""
    iri, task = f"urn:test:flush-race:{postgres_schema}", f"urn:task:{postgres_schema}"
    here = Blackboard(
        SparqlEndpoint(oxigraph_server),
        store=store,
        config=QUIET,
        directory=PostgresDirectory.open(postgres_url, schema=postgres_schema),
    )
    there = Blackboard(
        SparqlEndpoint(oxigraph_server),
        config=QUIET,
        directory=PostgresDirectory.open(postgres_url, schema=postgres_schema),
    )
    with here, there:
        theirs = there.agent("theirs", role="do", task=task)
        assert theirs.write([{"@id": iri, "n": "1"}], area="execution")[0].generation == 1
        outcome: list[object] = []

        def write_two() -> None:
            try:
                outcome.append(theirs.write([{"@id": iri, "n": "2"}], area="execution", based_on=1))
            except Exception as exc:
                outcome.append(exc)

        other = threading.Thread(target=write_two)
        backend = here.nodes.backend
        update = backend.update

        def paused(text: str) -> None:
            if CLEAN_MARK in text and not other.is_alive() and not outcome:
                other.start()  # the other process writes between the read and the clean mark
                _until_done_or_waiting(other, postgres_url)
            update(text)

        monkeypatch.setattr(backend, "update", paused)
        assert here.flush(task=task) == 1
        other.join()
        [written] = outcome
        assert isinstance(written, list), written
        assert written[0].generation == 2
        [stored] = here.nodes.known([iri], fresh=True).values()
        assert isinstance(stored, BoardNode)
        assert (stored.generation, stored.node["n"]) == (2, "2")
        if not stored.dirty:  # written back since (the flush wrote back the writer's copy)
            entry = store.get(iri)
            assert entry is not None
            assert entry.node["n"] == "2"
        third = theirs.write([{"@id": iri, "n": "3"}], area="execution", based_on=2)
        assert third[0].generation == 3
        assert here.flush(task=task) == 1
        entry = store.get(iri)
        assert entry is not None
        assert entry.node["n"] == "3"


CLEAN_MARK = f"<{meta('clean')}>"


def _until_done_or_waiting(thread: threading.Thread, url: str) -> None:
    """Return once ``thread`` has finished, or a session waits for the coherence directory's
    lock (the write it makes is held back until the flush's transaction ends)."""
    with psycopg.connect(url, autocommit=True) as conn:
        for _ in range(60_000):
            if not thread.is_alive():
                return
            waiting = conn.execute(  # the directory serialises its updates on an advisory lock
                "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'"
                " AND wait_event = 'advisory' AND datname = current_database()"
            ).fetchone()
            if waiting is not None and waiting[0] > 0:
                return
            thread.join(0.01)
    raise AssertionError("the other board's write neither finished nor waited")
