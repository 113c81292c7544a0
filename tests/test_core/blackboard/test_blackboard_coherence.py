"""Coherence on the blackboard: agents' handles read and write through the board's coordinator.

Against the embedded store in memory and on disk (one process, a dict directory) and the SPARQL
server (a SQLite directory, as processes sharing a memory directory have), then with two real
processes sharing the server and the memory directory, and under random runs of the MESI
state machine driven through agent handles.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from gliding_core import EventBus, EventType, L0Store, Memory, MemoryConfig
from gliding_core.blackboard.board import Blackboard
from gliding_core.blackboard.coordination.registries import Coordination
from gliding_core.blackboard.coordination.sqlite import CoordinationDB
from gliding_core.blackboard.graph import EmbeddedGraph, GraphBackend, SparqlEndpoint
from gliding_core.blackboard.handle import AgentHandle
from gliding_core.coherence import CoherenceCoordinator, LocalDirectory, SQLiteDirectory
from gliding_core.coherence.directory import Directory
from gliding_core.config import BlackboardConfig, CoordinationConfig
from gliding_core.errors import InvalidInputError, PermissionDeniedError, StaleWriteError
from gliding_core.projection.cache import ViewCache, view_key
from gliding_core.store.entry import MesiState

TASK = "iri://task/coherent"
QUIET = BlackboardConfig(flush_interval_s=0.0)
CHILD = Path(__file__).with_name("board_child.py")
M, E, S, I = MesiState.MODIFIED, MesiState.EXCLUSIVE, MesiState.SHARED, MesiState.INVALID  # noqa: E741


class Clock:
    """A wall clock the test moves by hand."""

    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


class Board:
    """A coherent blackboard with its coordination, L0 store, bus and clock."""

    def __init__(self, backend: GraphBackend, directory: Directory) -> None:
        self.clock, self.bus, self.store = Clock(), EventBus(), L0Store()
        settings = CoordinationConfig(
            lease_ttl_s=10.0, heartbeat_timeout_s=60.0, sweep_interval_s=0
        )
        self.coordination = Coordination(
            CoordinationDB(None, config=settings, clock=self.clock), bus=self.bus
        )
        self.board = Blackboard(
            backend,
            store=self.store,
            bus=self.bus,
            config=QUIET,
            coordination=self.coordination,
            directory=directory,
        )
        self.coordination.tasks.register(TASK)

    @property
    def coherence(self) -> CoherenceCoordinator:
        return self.board.coherence

    def agent(self, name: str) -> AgentHandle:
        return self.board.agent(name, role="do", task=TASK)

    def copies(self, iri: str) -> dict[str, MesiState]:
        return self.coherence.copies(iri)

    def close(self) -> None:
        self.board.close()
        self.store.close()


def open_board(kind: str, folder: Path, request: pytest.FixtureRequest) -> Board:
    if kind == "memory":
        return Board(EmbeddedGraph(), LocalDirectory())
    if kind == "disk":  # one process owns the directory: the in-process directory, as Memory's
        return Board(EmbeddedGraph(folder / "graph"), LocalDirectory())
    endpoint = SparqlEndpoint(request.getfixturevalue("oxigraph_server"))
    endpoint.update("CLEAR ALL")
    return Board(endpoint, SQLiteDirectory(folder / "coherence.sqlite3"))


@pytest.fixture(params=["memory", "disk", "server"])
def bb(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Board]:
    value = open_board(request.param, tmp_path, request)
    yield value
    value.close()


def step(iri: str, text: str) -> dict[str, Any]:
    return {"@id": iri, "@type": "Step", "text": text}


def test_reads_register_copies_and_a_write_invalidates_the_others(bb: Board) -> None:
    a, b = bb.agent("a"), bb.agent("b")
    [first] = a.write([step("urn:n:1", "one")], area="execution", based_on=0)
    assert (first.generation, bb.copies("urn:n:1")) == (1, {"a": M})
    node = b.read("urn:n:1")
    assert node is not None
    assert node.generation == 1
    assert bb.copies("urn:n:1") == {"a": S, "b": S}
    entry = bb.store.get("urn:n:1")  # a's dirty copy went to L0 before b shared it
    assert entry is not None
    assert entry.metadata["l2_generation"] == 1
    b.write([step("urn:n:1", "two")], area="execution", based_on=1)
    assert bb.copies("urn:n:1") == {"a": I, "b": M}


def test_a_stale_write_is_refused_with_the_current_generation_and_value(bb: Board) -> None:
    a, b = bb.agent("a"), bb.agent("b")
    a.write([step("urn:n:1", "one")], area="execution")
    assert b.read("urn:n:1") is not None
    a.write([step("urn:n:1", "two")], area="execution", based_on=1)
    with pytest.raises(StaleWriteError) as refused:
        b.write([step("urn:n:1", "mine")], area="execution", based_on=1)
    assert refused.value.current_generation == 2
    assert refused.value.current_value == step("urn:n:1", "two")
    assert bb.copies("urn:n:1")["b"] is I
    node = bb.board.read("urn:n:1")
    assert node is not None
    assert node.generation == 2
    assert node.node["text"] == "two"
    with pytest.raises(StaleWriteError):  # 0: the node must not exist yet
        b.write([step("urn:n:1", "new")], area="execution", based_on=0)


def test_a_stale_batch_writes_nothing(bb: Board) -> None:
    a = bb.agent("a")
    a.write([step("urn:n:1", "one")], area="execution")
    batch = [step("urn:n:2", "new"), step("urn:n:1", "stale")]
    with pytest.raises(StaleWriteError):
        a.write(batch, area="execution", based_on={"urn:n:2": 0, "urn:n:1": 0})
    assert bb.board.read("urn:n:2") is None
    with pytest.raises(InvalidInputError, match="does not write"):
        a.write(batch, area="execution", based_on={"urn:n:3": 0})


def test_a_write_lease_holder_is_never_refused(bb: Board) -> None:
    a, b = bb.agent("a"), bb.agent("b")
    a.write([step("urn:n:1", "one")], area="execution")
    a.write([step("urn:n:1", "two")], area="execution")
    with b.hold("urn:n:1", "write") as lease:
        [node] = b.write(
            [step("urn:n:1", "leased")], area="execution", based_on=1, lease_token=lease.token
        )
    assert node.generation == 3
    assert bb.copies("urn:n:1") == {"a": I, "b": M}


def test_invalidations_reach_a_view_cache_on_the_memory_bus(bb: Board) -> None:
    views = ViewCache()
    bb.bus.subscribe(views.on_event, [EventType.COPIES_INVALIDATED.value])  # only coherence's
    a, b = bb.agent("a"), bb.agent("b")
    a.write([step("urn:n:1", "one")], area="execution")
    assert b.read("urn:n:1") is not None
    key = view_key(TASK, "do", {})
    views.put(key, (step("urn:n:1", "one"),), frozenset({"urn:n:1"}), [], since=views.sequence)
    assert views.get(key) is not None
    a.write([step("urn:n:1", "two")], area="execution")
    assert views.get(key) is None


def test_flush_and_critical_tags_take_modified_copies_to_exclusive(bb: Board) -> None:
    a = bb.agent("a")
    a.write([step("urn:n:1", "one")], area="execution")
    assert bb.copies("urn:n:1") == {"a": M}
    assert bb.board.flush() >= 1
    assert bb.copies("urn:n:1") == {"a": E}
    a.write([step("urn:n:2", "fact")], area="execution", tags=["confirmed_fact"])
    assert bb.copies("urn:n:2") == {"a": E}
    assert bb.store.get("urn:n:2") is not None


def test_a_lost_agent_drops_its_copies_after_writing_them_back(bb: Board) -> None:
    a, b = bb.agent("a"), bb.agent("b")
    a.write([step("urn:n:1", "one")], area="execution")
    assert bb.store.get("urn:n:1") is None
    bb.clock.now += 61
    b.heartbeat()
    assert [agent.name for agent in bb.coordination.agents.sweep()] == ["a"]
    assert "a" not in bb.copies("urn:n:1")
    entry = bb.store.get("urn:n:1")
    assert entry is not None
    assert entry.node["text"] == "one"


def test_an_expired_lease_invalidates_the_copy_it_guarded(bb: Board) -> None:
    a = bb.agent("a")
    lease = a.acquire("urn:n:1", ttl_s=1.0)
    a.write([step("urn:n:1", "one")], area="execution", lease_token=lease.token)
    bb.clock.now += 2
    assert [gone.resource for gone in bb.coordination.leases.expire()] == ["urn:n:1"]
    assert bb.copies("urn:n:1") == {"a": I}
    assert bb.store.get("urn:n:1") is not None  # the dirty copy was written back


def test_deletes_invalidate_and_a_system_write_is_announced(bb: Board) -> None:
    seen: list[dict[str, Any]] = []
    bb.bus.subscribe(lambda e: seen.append(dict(e.payload)), [EventType.COPIES_INVALIDATED.value])
    a, b = bb.agent("a"), bb.agent("b")
    a.write([step("urn:n:1", "one")], area="execution")
    assert b.read("urn:n:1") is not None
    bb.board.write([step("urn:n:1", "system")], task=TASK, area="execution")
    assert bb.copies("urn:n:1") == {"a": I, "b": I}
    assert seen[-1]["writer"] is None
    assert sorted(seen[-1]["agents"]) == ["a", "b"]
    node = b.read("urn:n:1")
    assert node is not None
    assert node.node["text"] == "system"
    assert a.delete(["urn:n:1"]) == 1
    assert b.read("urn:n:1") is None
    assert set(bb.copies("urn:n:1").values()) == {I}
    [again] = a.write([step("urn:n:1", "back")], area="execution", based_on=0)
    assert again.generation == 3


def test_a_refused_write_or_read_leaves_every_copy_as_it_was(bb: Board) -> None:
    doer, checker = bb.agent("doer"), bb.board.agent("checker", role="check", task=TASK)
    doer.write([step("urn:n:1", "one")], area="execution")
    token = bb.coherence.directory.token()
    with pytest.raises(PermissionDeniedError):
        checker.write([step("urn:n:1", "theirs")], area="execution", based_on=1)
    with pytest.raises(PermissionDeniedError):
        checker.write([step("urn:n:9", "plan")], area="plan")
    assert bb.coherence.directory.token() == token
    assert bb.copies("urn:n:1") == {"doer": M}
    planner = bb.board.agent("planner", role="plan", task=TASK)
    with pytest.raises(PermissionDeniedError):
        planner.read("urn:n:1")  # plan may not read execution
    assert bb.copies("urn:n:1") == {"doer": M}


def test_a_read_overtaken_by_a_write_does_not_cache_the_older_node(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    bb = Board(EmbeddedGraph(), LocalDirectory())
    a = bb.agent("a")
    a.write([step("urn:n:1", "one")], area="execution")
    bb.board.nodes.forget_cache()
    load, overtaken = bb.board.nodes._load, []

    def slow_load(iris: Any) -> Any:
        found = load(iris)  # the older node, read before the write below
        if not overtaken:
            overtaken.append(True)
            a.write([step("urn:n:1", "two")], area="execution", based_on=1)
        return found

    monkeypatch.setattr(bb.board.nodes, "_load", slow_load)
    assert bb.board.read("urn:n:1") is not None  # the overlapping read may return either
    node = bb.board.read("urn:n:1")
    assert node is not None
    assert node.generation == 2
    [again] = a.write([step("urn:n:1", "three")], area="execution", based_on=2)
    assert again.generation == 3
    bb.close()


def test_the_memory_keeps_copies_in_process_for_an_embedded_board(tmp_path: Path) -> None:
    # An embedded board (in memory or on disk) has one process, the directory's owner: the
    # in-process directory; only a board on a server shares a SQLite one (the two-process tests).
    config = MemoryConfig(embedder="hash", blackboard=QUIET)
    with Memory.open(tmp_path / "m", config=config) as memory:
        assert isinstance(memory.blackboard.coherence, CoherenceCoordinator)
        assert isinstance(memory.blackboard.coherence.directory, LocalDirectory)
        memory.agent("a", role="do", task=TASK).write([step("urn:n:1", "x")], area="execution")
    assert not (tmp_path / "m" / "coherence.sqlite3").exists()
    with Memory(config=config) as memory:
        assert isinstance(memory.blackboard.coherence, CoherenceCoordinator)
        assert isinstance(memory.blackboard.coherence.directory, LocalDirectory)


# -- two processes sharing the SPARQL server and the memory directory -------------------------


class Child:
    """The other process: a memory on the same directory and server, driven through a pipe."""

    def __init__(self, directory: Path, endpoint: str) -> None:
        self.process = subprocess.Popen(
            [sys.executable, str(CHILD), str(directory), endpoint, TASK],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )

    def run(self, op: str, **args: Any) -> dict[str, Any]:
        assert self.process.stdin is not None
        assert self.process.stdout is not None
        self.process.stdin.write(json.dumps({"op": op, **args}) + "\n")
        self.process.stdin.flush()
        answer: dict[str, Any] = json.loads(self.process.stdout.readline())
        return answer

    def close(self) -> None:
        self.process.communicate(timeout=60)


def test_a_read_in_one_process_never_returns_an_older_write_of_another(
    oxigraph_server: str, tmp_path: Path
) -> None:
    with closing(SparqlEndpoint(oxigraph_server)) as endpoint:
        endpoint.update("CLEAR ALL")
    folder = tmp_path / "shared"
    config = MemoryConfig(
        embedder="hash", blackboard=BlackboardConfig(endpoint=oxigraph_server, flush_interval_s=0.0)
    )
    iri = "urn:n:shared"
    with Memory.open(folder, config=config, engines=False) as memory:
        memory.blackboard.coordination.tasks.register(TASK)  # type: ignore[union-attr]
        here = memory.agent("here", role="do", task=TASK)
        child = Child(folder, oxigraph_server)
        try:
            generation = here.write([step(iri, "w1")], area="execution", based_on=0)[0].generation
            for round_ in range(6):
                there = child.run("read", iri=iri)
                assert there == {"generation": generation, "text": f"w{round_ * 2 + 1}"}
                assert child.run("system_read", iri=iri) == there
                stale = child.run("write", iri=iri, text="late", based_on=generation - 1)
                assert stale == {"error": "StaleWriteError", "current_generation": generation}
                wrote = child.run("write", iri=iri, text=f"w{round_ * 2 + 2}", based_on=generation)
                generation += 1
                assert wrote == {"generation": generation}
                node = here.read(iri)  # this process's cache still held the older write
                assert node is not None
                assert node.generation == generation
                assert node.node["text"] == f"w{round_ * 2 + 2}"
                system = memory.blackboard.read(iri)
                assert system is not None
                assert system.generation == generation
                with pytest.raises(StaleWriteError):
                    here.write([step(iri, "late")], area="execution", based_on=generation - 1)
                here.write([step(iri, f"w{round_ * 2 + 3}")], area="execution", based_on=generation)
                generation += 1
            copies = memory.blackboard.coherence.copies(iri)
            assert copies == {"here": M, "there": I}
        finally:
            child.close()


def test_no_increment_is_lost_between_two_processes(oxigraph_server: str, tmp_path: Path) -> None:
    with closing(SparqlEndpoint(oxigraph_server)) as endpoint:
        endpoint.update("CLEAR ALL")
    folder, iri, times = tmp_path / "shared", "urn:n:counter", 25
    board = BlackboardConfig(endpoint=oxigraph_server, flush_interval_s=0.0)
    config = MemoryConfig(embedder="hash", blackboard=board)
    with Memory.open(folder, config=config, engines=False) as memory:
        here = memory.agent("here", role="do", task=TASK)
        here.write([{"@id": iri, "@type": "Step", "count": 0}], area="execution", based_on=0)
        child = Child(folder, oxigraph_server)
        try:
            assert child.process.stdin is not None
            child.process.stdin.write(json.dumps({"op": "increment", "iri": iri, "times": times}))
            child.process.stdin.write("\n")
            child.process.stdin.flush()
            sys.path.insert(0, str(CHILD.parent))
            try:
                from board_child import increment
            finally:
                sys.path.remove(str(CHILD.parent))
            increment(here, iri, times)
            assert child.process.stdout is not None
            assert "retries" in json.loads(child.process.stdout.readline())
        finally:
            child.close()
        node = here.read(iri)
        assert node is not None
        assert node.node["count"] == 2 * times
        assert node.generation == 2 * times + 1


# -- the state machine, through agent handles ----------------------------------------------------

TAGS = st.sampled_from([(), ("draft",), ("confirmed_fact",)])


class BoardMachine(RuleBasedStateMachine):
    """The MESI rules and invariants, driven through agent handles on a real blackboard."""

    kind = "memory"
    request: pytest.FixtureRequest | None = None
    folder: Path | None = None

    @initialize(agents=st.integers(2, 5), nodes=st.integers(1, 4))
    def start(self, agents: int, nodes: int) -> None:
        assert self.folder is not None
        for old in self.folder.glob("coherence.sqlite3*"):
            old.unlink()
        self.bb = open_board(self.kind, self.folder, self.request)  # type: ignore[arg-type]
        self.names = [f"agent-{i}" for i in range(agents)]
        self.handles = {name: self.bb.agent(name) for name in self.names}
        self.nodes = [f"urn:node:{i}" for i in range(nodes)]
        self.shadow: dict[str, tuple[int, dict[str, Any]]] = {}
        self.seen: dict[tuple[str, str], int] = {}
        self.highest: dict[str, int] = {}
        self.writes = 0

    def teardown(self) -> None:
        if hasattr(self, "bb"):
            self.bb.close()

    def pick(self, a: int, n: int) -> tuple[AgentHandle, str]:
        return self.handles[self.names[a % len(self.names)]], self.nodes[n % len(self.nodes)]

    @rule(a=st.integers(0, 4), n=st.integers(0, 3))
    def read(self, a: int, n: int) -> None:
        handle, iri = self.pick(a, n)
        node = handle.read(iri)
        if iri not in self.shadow:
            assert node is None
            return
        assert node is not None
        assert (node.generation, node.node) == self.shadow[iri], "a read was not the last write"
        self.seen[handle.name, iri] = node.generation

    def _write(self, handle: AgentHandle, iri: str, based_on: int, **options: Any) -> int:
        self.writes += 1
        value = {"@id": iri, "@type": "Step", "text": f"write {self.writes} by {handle.name}"}
        [node] = handle.write([value], area="execution", based_on=based_on, **options)
        self.shadow[iri] = (node.generation, value)
        self.seen[handle.name, iri] = node.generation
        return node.generation

    @rule(a=st.integers(0, 4), n=st.integers(0, 3), tags=TAGS)
    def write(self, a: int, n: int, tags: tuple[str, ...]) -> None:
        handle, iri = self.pick(a, n)
        current = self.shadow.get(iri, (0, None))[0]
        assert self._write(handle, iri, current, tags=tags) == current + 1

    @precondition(lambda self: any(self.seen[k] < self.shadow[k[1]][0] for k in self.seen))
    @rule(data=st.data(), leased=st.booleans())
    def write_from_a_stale_copy(self, data: st.DataObject, leased: bool) -> None:
        stale = sorted(k for k in self.seen if self.seen[k] < self.shadow[k[1]][0])
        name, iri = data.draw(st.sampled_from(stale))
        handle, (current, value) = self.handles[name], self.shadow[iri]
        if leased:  # a Write lease holder cannot be refused
            with handle.hold(iri, "write") as lease:
                based = self.seen[name, iri]
                assert self._write(handle, iri, based, lease_token=lease.token) == current + 1
            return
        with pytest.raises(StaleWriteError) as refused:
            self._write(handle, iri, self.seen[name, iri])
        assert (refused.value.current_generation, refused.value.current_value) == (current, value)
        assert self.bb.copies(iri).get(name, I) is I

    @rule()
    def write_back(self) -> None:
        self.bb.board.flush()
        for iri in self.nodes:
            assert M not in self.bb.copies(iri).values()

    @rule(a=st.integers(0, 4), n=st.integers(0, 3))
    def evict(self, a: int, n: int) -> None:
        handle, iri = self.pick(a, n)
        handle.evict(iri)
        assert handle.name not in self.bb.copies(iri)

    @rule(a=st.integers(0, 4), n=st.integers(0, 3))
    def lease_expiry(self, a: int, n: int) -> None:
        handle, iri = self.pick(a, n)
        handle.acquire(iri, "write", ttl_s=1.0)
        self.bb.clock.now += 2
        assert self.bb.coordination.leases.expire()
        assert self.bb.copies(iri).get(handle.name, I) is I

    @rule(a=st.integers(0, 4))
    def crash(self, a: int) -> None:
        name = self.names[a % len(self.names)]
        self.bb.clock.now += 61
        for other in self.names:
            if other != name:
                self.handles[other].heartbeat()
        assert [agent.name for agent in self.bb.coordination.agents.sweep()] == [name]
        assert self.bb.coherence.directory.holdings(name) == []
        self.handles[name] = self.bb.agent(name)  # it comes back: a new incarnation

    # -- invariants ----------------------------------------------------------------------------

    @invariant()
    def single_writer_multiple_readers(self) -> None:
        for iri in getattr(self, "nodes", []):
            states = list(self.bb.copies(iri).values())
            owners = [s for s in states if s in (M, E)]
            assert len(owners) <= 1, f"two owners of {iri}: {states}"
            if owners:
                assert states.count(I) == len(states) - 1, states

    @invariant()
    def valid_copies_hold_the_current_value(self) -> None:
        for iri in getattr(self, "nodes", []):
            record = self.bb.coherence.directory.record(iri)
            valid = [c for c in record.copies.values() if c.state is not I]
            if not valid:
                continue
            node = self.bb.board.read(iri)
            assert node is not None
            assert (record.generation, record.value) == (node.generation, node.node)
            assert all(c.generation == node.generation for c in valid)
            assert (node.generation, node.node) == self.shadow[iri]

    @invariant()
    def generations_never_decrease(self) -> None:
        for iri in getattr(self, "nodes", []):
            generation = self.bb.coherence.directory.record(iri).generation
            assert generation >= self.highest.get(iri, 0)
            self.highest[iri] = generation

    @invariant()
    def nothing_committed_is_lost(self) -> None:
        for iri, (generation, value) in getattr(self, "shadow", {}).items():
            if M not in self.bb.copies(iri).values():
                entry = self.bb.store.get(iri)
                assert entry is not None, f"{iri} at {generation} not in L0"
                assert entry.metadata["l2_generation"] == generation
                assert entry.node == value


MACHINE = settings(
    max_examples=30,
    stateful_step_count=25,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)


def test_the_machine_on_the_embedded_board(request: pytest.FixtureRequest, tmp_path: Path) -> None:
    BoardMachine.kind, BoardMachine.request, BoardMachine.folder = "memory", request, tmp_path
    BoardMachine.TestCase.settings = MACHINE
    BoardMachine.TestCase().runTest()


def test_the_machine_on_the_sparql_server(request: pytest.FixtureRequest, tmp_path: Path) -> None:
    BoardMachine.kind, BoardMachine.request, BoardMachine.folder = "server", request, tmp_path
    BoardMachine.TestCase.settings = settings(MACHINE, max_examples=8)
    BoardMachine.TestCase().runTest()
