"""Agents: registration, statuses, heartbeats that renew leases, and the sweeper of silent ones."""

from __future__ import annotations

import threading
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

from gliding_core import Memory, MemoryConfig
from gliding_core.blackboard.board import Blackboard
from gliding_core.blackboard.coordination.agents import (
    LIVE,
    TRANSITIONS,
    AgentRegistry,
    AgentStatus,
    agent_iri,
)
from gliding_core.blackboard.coordination.leases import LeaseTable
from gliding_core.blackboard.coordination.registries import Coordination
from gliding_core.blackboard.coordination.sqlite import CoordinationDB
from gliding_core.blackboard.graph import EmbeddedGraph
from gliding_core.bus import EventBus, EventType
from gliding_core.config import BlackboardConfig, CoordinationConfig
from gliding_core.errors import (
    AgentNotFoundError,
    FencingTokenError,
    InvalidInputError,
    InvalidTransitionError,
    LeaseConflictError,
)

QUIET = BlackboardConfig(flush_interval_s=0.0)


class FakeClock:
    def __init__(self, now: float = 1_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


class RecordingMirror:
    def __init__(self) -> None:
        self.nodes: dict[str, tuple[str, str, dict[str, Any]]] = {}

    def mirror(self, task_iri: str, area: str, nodes: Sequence[Mapping[str, Any]]) -> None:
        for node in nodes:
            self.nodes[node["@id"]] = (task_iri, area, dict(node))

    def forget(self, iris: Sequence[str]) -> None:
        for iri in iris:
            self.nodes.pop(iri, None)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def db(tmp_path: Path, clock: FakeClock) -> Iterator[CoordinationDB]:
    config = CoordinationConfig(heartbeat_timeout_s=30, lease_ttl_s=20, sweep_interval_s=0)
    with CoordinationDB(tmp_path / "blackboard.sqlite3", clock=clock, config=config) as value:
        yield value


@pytest.fixture
def leases(db: CoordinationDB) -> LeaseTable:
    return LeaseTable(db)


@pytest.fixture
def bus() -> EventBus:
    return EventBus()


@pytest.fixture
def agents(db: CoordinationDB, leases: LeaseTable, bus: EventBus) -> Iterator[AgentRegistry]:
    registry = AgentRegistry(db, leases=leases, bus=bus)
    yield registry
    registry.close()


# -- registering -------------------------------------------------------------------------------


def test_an_agent_registers_idle_with_its_role_and_task(
    agents: AgentRegistry, bus: EventBus, clock: FakeClock
) -> None:
    agent = agents.register("planner", role="plan", task="urn:t:1")
    assert (agent.status, agent.role, agent.task) == (AgentStatus.IDLE, "plan", "urn:t:1")
    assert agent.last_heartbeat == agent.registered_at == clock.now
    assert agent.timeout_s == 30
    assert agent.iri == agent_iri("planner") == "urn:gliding-horse:agent:planner"
    assert agents.get("planner") == agent
    event = bus.recent(EventType.AGENT_REGISTERED)[0]
    assert (event.source, event.task_iri) == ("planner", "urn:t:1")
    assert event.payload == {"name": "planner", "role": "plan", "incarnation": 1}


def test_registering_again_is_a_heartbeat_or_refused(
    agents: AgentRegistry, clock: FakeClock
) -> None:
    agents.register("a", role="do", task="urn:t:1")
    clock.now += 5
    again = agents.register("a", role="do", task="urn:t:1")
    assert (again.last_heartbeat, again.incarnation) == (clock.now, 1)
    with pytest.raises(InvalidInputError, match="'a' is live as 'do' on 'urn:t:1'"):
        agents.register("a", role="check", task="urn:t:1")


def test_agents_are_listed_by_task_role_and_status(agents: AgentRegistry) -> None:
    agents.register("p", role="plan", task="urn:t:1")
    agents.register("d", role="do", task="urn:t:1")
    agents.register("x", role="do", task="urn:t:2", heartbeat_timeout_s=5)
    agents.set_status("d", "working", operation="compiling")
    assert [a.name for a in agents.agents(task="urn:t:1")] == ["d", "p"]
    assert [a.name for a in agents.agents(role="do")] == ["d", "x"]
    assert [a.name for a in agents.agents(status=AgentStatus.WORKING)] == ["d"]
    assert agents.get("d").operation == "compiling"
    assert agents.get("x").timeout_s == 5


@pytest.mark.parametrize(
    ("kwargs", "named"),
    [
        ({"name": ""}, "agent name"),
        ({"name": "two words"}, "'two words'"),
        ({"role": None}, "None"),
        ({"task": 5}, "5"),
        ({"heartbeat_timeout_s": -1}, "-1"),
    ],
)
def test_bad_registrations_are_refused_naming_the_value(
    agents: AgentRegistry, kwargs: dict[str, Any], named: str
) -> None:
    request = {"name": "a", "role": "do", "task": "urn:t:1", **kwargs}
    with pytest.raises(InvalidInputError, match=named):
        agents.register(**request)
    assert agents.agents() == []


def test_an_unknown_agent_or_status_is_refused(agents: AgentRegistry) -> None:
    with pytest.raises(AgentNotFoundError, match="'ghost'"):
        agents.heartbeat("ghost")
    agents.register("a", role="do", task="urn:t:1")
    with pytest.raises(InvalidInputError, match="'Sleeping'"):
        agents.set_status("a", "Sleeping")
    with pytest.raises(InvalidInputError, match="operation must be a string"):
        agents.heartbeat("a", operation=3)  # type: ignore[arg-type]


# -- statuses ----------------------------------------------------------------------------------


def test_the_transition_table_lets_live_agents_move_and_keeps_finished_ones() -> None:
    assert {AgentStatus.IDLE, AgentStatus.WORKING, AgentStatus.WAITING} == LIVE
    for status in AgentStatus:
        expected = set(AgentStatus) if status in LIVE else set()
        assert set(TRANSITIONS[status]) == expected


@pytest.mark.parametrize("final", [AgentStatus.COMPLETED, AgentStatus.ERROR])
def test_a_finished_agent_releases_its_leases_and_cannot_beat(
    agents: AgentRegistry, leases: LeaseTable, final: AgentStatus
) -> None:
    agents.register("a", role="do", task="urn:t:1")
    leases.try_acquire("urn:n:1", "a", "write")
    agents.set_status("a", final)
    assert leases.leases("a") == []
    with pytest.raises(InvalidTransitionError) as caught:
        agents.heartbeat("a")
    assert caught.value.current == final.value
    again = agents.register("a", role="check", task="urn:t:2")  # a new incarnation
    assert (again.status, again.incarnation, again.role) == (AgentStatus.IDLE, 2, "check")


def test_status_changes_are_published(agents: AgentRegistry, bus: EventBus) -> None:
    agents.register("a", role="do", task="urn:t:1")
    agents.set_status("a", AgentStatus.WORKING, operation="step 1")
    agents.heartbeat("a", operation="step 2")  # no change of status, no event
    agents.heartbeat("a", status="Waiting")
    changes = [e.payload for e in bus.recent(EventType.AGENT_STATUS_CHANGED)]
    assert changes == [
        {"name": "a", "previous": "Idle", "status": "Working", "operation": "step 1"},
        {"name": "a", "previous": "Working", "status": "Waiting", "operation": "step 2"},
    ]


# -- heartbeats and leases ---------------------------------------------------------------------


def test_a_heartbeat_renews_the_agent_s_leases(
    agents: AgentRegistry, leases: LeaseTable, clock: FakeClock
) -> None:
    agents.register("a", role="do", task="urn:t:1")
    lease = leases.try_acquire("urn:n:1", "a", "write")  # TTL 20
    for _ in range(5):
        clock.now += 15
        agents.heartbeat("a")
    with pytest.raises(LeaseConflictError):
        leases.try_acquire("urn:n:1", "b", "write")
    leases.check_fence("urn:n:1", "a", lease.token)


def test_without_heartbeats_the_leases_expire(
    agents: AgentRegistry, leases: LeaseTable, clock: FakeClock
) -> None:
    agents.register("a", role="do", task="urn:t:1")
    leases.try_acquire("urn:n:1", "a", "write")
    clock.now += 21
    assert leases.try_acquire("urn:n:1", "b", "write").holder == "b"


def test_a_registry_refuses_leases_of_another_database(db: CoordinationDB) -> None:
    with CoordinationDB() as other, pytest.raises(InvalidInputError, match="LeaseTable"):
        AgentRegistry(db, leases=LeaseTable(other))


# -- the sweeper -------------------------------------------------------------------------------


def test_a_sweep_marks_silent_agents_error_and_releases_their_leases(
    agents: AgentRegistry, leases: LeaseTable, bus: EventBus, clock: FakeClock
) -> None:
    agents.register("quiet", role="do", task="urn:t:1")
    agents.register("busy", role="check", task="urn:t:1")
    lease = leases.try_acquire("urn:n:1", "quiet", "exclusive", ttl_s=3_600)
    leases.try_acquire("urn:n:2", "busy", "write")
    clock.now += 25
    agents.heartbeat("busy")
    assert agents.sweep() == []  # 25 s of silence is within the 30 s timeout
    clock.now += 10
    assert agents.silent() == [agents.get("quiet")]
    lost = agents.sweep()
    assert [(a.name, a.status) for a in lost] == [("quiet", AgentStatus.ERROR)]
    assert agents.get("busy").status is AgentStatus.IDLE
    assert leases.leases("quiet") == []  # released, not left to its hour-long TTL
    assert leases.try_acquire("urn:n:1", "busy", "write").holder == "busy"
    with pytest.raises(FencingTokenError):
        leases.check_fence("urn:n:1", "quiet", lease.token)
    event = bus.recent(EventType.AGENT_LOST)[0]
    assert event.payload == {"name": "quiet", "role": "do", "silent_s": 35, "released": ["urn:n:1"]}
    with pytest.raises(InvalidTransitionError, match="register it again"):
        agents.heartbeat("quiet")
    assert agents.sweep() == []  # an Error agent is not lost twice


def test_a_sweep_deletes_expired_leases(
    agents: AgentRegistry, leases: LeaseTable, bus: EventBus, clock: FakeClock
) -> None:
    leases.bus = bus
    agents.register("a", role="do", task="urn:t:1", heartbeat_timeout_s=3_600)
    leases.try_acquire("urn:n:forgotten", "a", "read", ttl_s=1)
    clock.now += 2
    assert agents.sweep() == []
    assert [e.payload["resource"] for e in bus.recent(EventType.LEASE_EXPIRED)] == [
        "urn:n:forgotten"
    ]


def test_an_agent_swept_by_another_process_learns_it_was_lost(
    tmp_path: Path, clock: FakeClock
) -> None:
    path = tmp_path / "shared.sqlite3"
    config = CoordinationConfig(heartbeat_timeout_s=30, sweep_interval_s=0)
    with (
        CoordinationDB(path, clock=clock, config=config) as here,
        CoordinationDB(path, clock=clock, config=config) as there,
    ):
        mine, theirs = AgentRegistry(here, leases=LeaseTable(here)), AgentRegistry(there)
        mine.register("a", role="do", task="urn:t:1")
        clock.now += 20
        mine.heartbeat("a")
        clock.now += 20
        assert theirs.sweep() == []  # the beat of the other process counts
        clock.now += 20
        assert [agent.name for agent in theirs.sweep()] == ["a"]
        with pytest.raises(InvalidTransitionError, match="register it again"):
            mine.heartbeat("a")
        assert mine.register("a", role="do", task="urn:t:1").incarnation == 2


def test_the_sweeper_thread_starts_with_the_first_agent_and_stops_with_close(
    tmp_path: Path, clock: FakeClock
) -> None:
    config = CoordinationConfig(heartbeat_timeout_s=30, sweep_interval_s=0.01)
    with CoordinationDB(tmp_path / "c.sqlite3", clock=clock, config=config) as db:
        bus = EventBus()
        lost = threading.Event()
        bus.subscribe(lambda event: lost.set(), [EventType.AGENT_LOST])
        agents = AgentRegistry(db, leases=LeaseTable(db), bus=bus)
        assert not agents.sweeper_running
        agents.register("a", role="do", task="urn:t:1")
        assert agents.sweeper_running
        clock.now += 31
        assert lost.wait(30)
        assert agents.get("a").status is AgentStatus.ERROR
        agents.close()
        agents.close()
        assert not agents.sweeper_running
        agents.register("b", role="do", task="urn:t:1")  # a closed registry starts no sweeper
        assert not agents.sweeper_running


def test_the_sweeper_stops_quietly_when_the_database_closes(
    tmp_path: Path, clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    config = CoordinationConfig(sweep_interval_s=0.01)
    db = CoordinationDB(tmp_path / "c.sqlite3", clock=clock, config=config)
    agents = AgentRegistry(db)
    agents.register("a", role="do", task="urn:t:1")
    db.close()
    assert agents._sweeper is not None
    agents._sweeper.join(30)
    assert not agents.sweeper_running
    assert "sweeper failed" not in caplog.text


# -- the graph mirror --------------------------------------------------------------------------


def test_agents_are_mirrored_into_their_task_s_agents_area(
    db: CoordinationDB, clock: FakeClock
) -> None:
    mirror = RecordingMirror()
    agents = AgentRegistry(db, mirror=mirror)
    agents.register("planner-1", role="plan", task="urn:t:1")
    iri = agent_iri("planner-1")
    task_iri, area, node = mirror.nodes[iri]
    assert (task_iri, area, node["@type"], node["status"]) == ("urn:t:1", "agents", "Agent", "Idle")
    assert node["task"] == {"@id": "urn:t:1"}
    clock.now += 7
    agents.heartbeat("planner-1", status="Working", operation="planning")
    node = mirror.nodes[iri][2]
    assert (node["status"], node["operation"], node["lastHeartbeat"]) == (
        "Working",
        "planning",
        clock.now,
    )
    agents.unregister("planner-1")
    assert mirror.nodes == {}
    assert agents.unregister("planner-1") is False


def test_agent_iris_are_escaped() -> None:
    assert agent_iri("a<b>") == "urn:gliding-horse:agent:a%3Cb%3E"


# -- the four registries together --------------------------------------------------------------


def test_coordination_wires_the_registries_over_one_database(
    tmp_path: Path, clock: FakeClock
) -> None:
    mirror = RecordingMirror()
    with Coordination.open(tmp_path, mirror=mirror, clock=clock) as coordination:
        assert coordination.db.path == str(tmp_path / "blackboard.sqlite3")
        task = coordination.tasks.register("urn:t:1")
        agent = coordination.agents.register("do-1", role="do", task=task.iri)
        lease = coordination.leases.acquire("urn:n:1", agent.name, "write", ttl_s=5)
        clock.now += 4
        coordination.agents.heartbeat(agent.name)
        assert coordination.leases.holders("urn:n:1")[0].expires_at == clock.now + 5
        coordination.messages.publish("progress", {"lease": lease.token}, task=task.iri)
        assert {"urn:t:1", agent.iri} <= set(mirror.nodes)
        assert len(mirror.nodes) == 3  # the task, the agent and the message
        seen = {e.type for e in coordination.bus.recent()}
        assert {"TASK_REGISTERED", "AGENT_REGISTERED", "LEASE_GRANTED"} <= seen
        assert "COORDINATION_MESSAGE" in seen
        replacement = RecordingMirror()
        coordination.mirror = replacement
        assert coordination.mirror is replacement
        assert coordination.remirror() == 2
        assert set(replacement.nodes) == {"urn:t:1", agent.iri}
    assert coordination.db.closed
    assert not coordination.agents.sweeper_running
    coordination.close()


def test_coordination_leaves_a_borrowed_database_open() -> None:
    with CoordinationDB() as db:
        Coordination(db, owns_db=False).close()
        assert not db.closed
        with pytest.raises(InvalidInputError, match="CoordinationStore"):
            Coordination("db")  # type: ignore[arg-type]


class ProbingMirror(RecordingMirror):
    """A mirror that checks, from another thread, that the database is not locked meanwhile.

    The blackboard's writer takes its own lock and then the database's (for the fence), so a
    registry that mirrored while holding the database's lock could deadlock with it.
    """

    def __init__(self, db: CoordinationDB) -> None:
        super().__init__()
        self.db, self.blocked = db, 0

    def mirror(self, task_iri: str, area: str, nodes: Sequence[Mapping[str, Any]]) -> None:
        self._probe()
        super().mirror(task_iri, area, nodes)

    def forget(self, iris: Sequence[str]) -> None:
        self._probe()
        super().forget(iris)

    def _probe(self) -> None:
        free: list[bool] = []

        def try_lock() -> None:
            got = self.db._lock.acquire(timeout=5)
            free.append(got)
            if got:
                self.db._lock.release()

        prober = threading.Thread(target=try_lock)
        prober.start()
        prober.join()
        self.blocked += not free[0]


def test_no_registry_mirrors_or_publishes_while_holding_the_database(
    db: CoordinationDB, clock: FakeClock
) -> None:
    mirror = ProbingMirror(db)
    coordination = Coordination(db, mirror=mirror, owns_db=False)
    coordination.bus.subscribe(lambda event: mirror._probe())
    coordination.tasks.register("urn:t:1")
    coordination.agents.register("a", role="do", task="urn:t:1")
    coordination.agents.register("a", role="do", task="urn:t:1")
    coordination.leases.acquire("urn:n:1", "a", "write")
    coordination.agents.heartbeat("a", status="Working")
    coordination.messages.publish("progress", task="urn:t:1", sender="a")
    clock.now += 60
    assert [agent.name for agent in coordination.agents.sweep()] == ["a"]
    coordination.tasks.start("urn:t:1")
    coordination.tasks.complete("urn:t:1")
    coordination.tasks.release("urn:t:1")
    coordination.agents.unregister("a")
    coordination.close()
    assert mirror.blocked == 0


# -- names the graph cannot hold, defaults, and the sweeper's end with its memory ----------------


def test_a_mirrored_registry_refuses_a_task_the_graph_cannot_hold(
    db: CoordinationDB, caplog: pytest.LogCaptureFixture
) -> None:
    coordination = Coordination(db, owns_db=False)
    with Blackboard(EmbeddedGraph(), config=QUIET, coordination=coordination) as board:
        with pytest.raises(InvalidInputError, match=r"task IRI .* got 'foo'"):
            coordination.agents.register("a", role="do", task="foo")
        assert coordination.agents.agents() == []
        assert board.read(agent_iri("a")) is None
        assert "mirroring" not in caplog.text
        # The agent's own name needs no IRI: its node is named by agent_iri.
        agent = coordination.agents.register("a<b>", role="do", task="urn:t:1")
        assert board.read(agent.iri) is not None


def test_the_default_heartbeat_timeout_is_thirty_seconds(tmp_path: Path) -> None:
    assert CoordinationConfig().heartbeat_timeout_s == 30.0
    with CoordinationDB(tmp_path / "c.sqlite3") as db:
        agents = AgentRegistry(db)
        try:
            assert agents.register("a", role="do", task="urn:t:1").timeout_s == 30.0
        finally:
            agents.close()


SWEEPER = "gliding-horse-agent-sweeper"


def _new_sweepers(before: set[threading.Thread]) -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == SWEEPER and t not in before]


@pytest.mark.parametrize("where", [None, "directory"])
def test_the_sweeper_stops_when_the_memory_closes(tmp_path: Path, where: str | None) -> None:
    before = set(threading.enumerate())
    config = MemoryConfig(embedder="hash", blackboard=QUIET)
    memory = Memory(config=config) if where is None else Memory.open(tmp_path / "m", config=config)
    try:
        memory.agent("doer", role="do", task="urn:t:1")
        sweepers = _new_sweepers(before)
        assert len(sweepers) == 1
        assert sweepers[0].is_alive()
    finally:
        memory.close()
    assert not sweepers[0].is_alive()


def test_the_sweeper_stops_when_the_blackboard_closes() -> None:
    before = set(threading.enumerate())
    board = Blackboard(EmbeddedGraph(), config=QUIET, coordination=Coordination.open(None))
    board.agent("doer", role="do", task="urn:t:1")
    sweepers = _new_sweepers(before)
    assert len(sweepers) == 1
    assert sweepers[0].is_alive()
    board.close()
    assert not sweepers[0].is_alive()
