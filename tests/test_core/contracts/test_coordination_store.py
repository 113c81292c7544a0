"""Contract suite of the coordination store: leases with fencing, tasks, agents and messages.

Every test runs on each implementation of ``CoordinationStore`` in ``conftest.py``'s table,
through the registries that decide over it (``LeaseTable``, ``TaskRegistry``, ``AgentRegistry``,
``MessageBoard``, ``Coordination``), so a backend passes when the registries keep every promise
on it. Cross-handle tests open two handles on one storage (what two processes see); the
child-process tests run a second interpreter on it, and kill it.
"""

from __future__ import annotations

import asyncio
import signal
import textwrap
import threading
import uuid
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule, run_state_machine_as_test

from gliding_core.blackboard.coordination.agents import (
    LIVE,
    AgentRegistry,
    AgentStatus,
    agent_iri,
)
from gliding_core.blackboard.coordination.agents import (
    TRANSITIONS as AGENT_TRANSITIONS,
)
from gliding_core.blackboard.coordination.leases import (
    COMPATIBLE,
    STRENGTH,
    Lease,
    LeaseMode,
    LeaseTable,
)
from gliding_core.blackboard.coordination.messages import Message, MessageBoard
from gliding_core.blackboard.coordination.protocol import CoordinationStore
from gliding_core.blackboard.coordination.registries import Coordination
from gliding_core.blackboard.coordination.tasks import (
    TRANSITIONS as TASK_TRANSITIONS,
)
from gliding_core.blackboard.coordination.tasks import (
    TaskRegistry,
    TaskStatus,
)
from gliding_core.bus import EventBus, EventType
from gliding_core.config import CoordinationConfig
from gliding_core.errors import (
    AgentNotFoundError,
    ClosedError,
    ContentTooLargeError,
    FencingTokenError,
    InvalidInputError,
    InvalidTransitionError,
    LeaseConflictError,
    LeaseNotHeldError,
    LeaseTimeoutError,
    TaskCycleError,
    TaskNotFoundError,
)
from tests.test_core.contracts.conftest import Backend, FakeClock, run_child

R, W, X = LeaseMode.READ, LeaseMode.WRITE, LeaseMode.EXCLUSIVE
P, RUN, C, F = TaskStatus.PENDING, TaskStatus.RUNNING, TaskStatus.COMPLETED, TaskStatus.FAILED


@pytest.fixture
def clock(coordination_clock: FakeClock) -> FakeClock:
    """The fake clock every handle of the test reads."""
    return coordination_clock


@pytest.fixture
def leases(coordination_store: CoordinationStore) -> LeaseTable:
    return LeaseTable(coordination_store)


@pytest.fixture
def tasks(coordination_store: CoordinationStore) -> TaskRegistry:
    return TaskRegistry(coordination_store)


@pytest.fixture
def bus() -> EventBus:
    return EventBus()


@pytest.fixture
def agents(
    coordination_store: CoordinationStore, leases: LeaseTable, bus: EventBus
) -> Iterator[AgentRegistry]:
    registry = AgentRegistry(coordination_store, leases=leases, bus=bus)
    yield registry
    registry.close()


@pytest.fixture
def messages(coordination_store: CoordinationStore) -> MessageBoard:
    return MessageBoard(coordination_store)


class RecordingMirror:
    """A graph stand-in that keeps the last mirrored version of each node."""

    def __init__(self) -> None:
        self.nodes: dict[str, tuple[str, str, dict[str, Any]]] = {}
        self.calls: list[tuple[str, str, list[dict[str, Any]]]] = []

    def mirror(self, task_iri: str, area: str, nodes: Sequence[Mapping[str, Any]]) -> None:
        self.calls.append((task_iri, area, [dict(n) for n in nodes]))
        for node in nodes:
            self.nodes[node["@id"]] = (task_iri, area, dict(node))

    def forget(self, iris: Sequence[str]) -> None:
        for iri in iris:
            self.nodes.pop(iri, None)


class FailingMirror(RecordingMirror):
    def mirror(self, task_iri: str, area: str, nodes: Sequence[Mapping[str, Any]]) -> None:
        raise ConnectionError("the graph is down")


# == the store's transactions ===================================================================


def test_the_store_is_a_coordination_store(coordination_store: CoordinationStore) -> None:
    assert isinstance(coordination_store, CoordinationStore)
    assert not coordination_store.closed
    assert isinstance(coordination_store.config, CoordinationConfig)


def test_a_transaction_s_clock_is_the_coordination_clock(
    coordination_store: CoordinationStore, clock: FakeClock
) -> None:
    with coordination_store.read("reading the clock") as tx:
        assert tx.now() == clock.now
    clock.advance(7)
    with coordination_store.write("reading the clock") as tx:
        assert tx.now() == clock.now


def _publish(store: CoordinationStore, topic: str) -> int:
    with store.write(f"publishing {topic}") as tx:
        return tx.messages.append(
            iri=f"urn:uuid:{uuid.uuid4()}", topic=topic, task=None, sender=None, payload="{}", now=1
        )


def _topics(store: CoordinationStore) -> list[str]:
    with store.read("reading") as tx:
        return [message.topic for message in tx.messages.since(0)]


def test_a_failed_nested_write_rolls_back_only_itself(
    coordination_store: CoordinationStore,
) -> None:
    def publish_then_fail(topic: str) -> None:
        with coordination_store.write(f"publishing {topic}") as tx:
            tx.messages.append(
                iri=f"urn:uuid:{uuid.uuid4()}",
                topic=topic,
                task=None,
                sender=None,
                payload="{}",
                now=1,
            )
            raise KeyError(topic)

    with coordination_store.write("outer") as tx:
        tx.messages.append(
            iri="urn:uuid:outer", topic="outer", task=None, sender=None, payload="{}", now=1
        )
        with pytest.raises(KeyError):
            publish_then_fail("inner")  # a savepoint of the outer write
        with coordination_store.read("inside the write") as inner:
            assert [m.topic for m in inner.messages.since(0)] == ["outer"]  # joins the write
    with pytest.raises(KeyError):
        publish_then_fail("lost")
    assert _topics(coordination_store) == ["outer"]


def test_a_raising_write_leaves_nothing_half_written(
    coordination_store: CoordinationStore, leases: LeaseTable
) -> None:
    granted: list[Lease] = []

    def write_then_fail() -> None:
        with coordination_store.write("a grant, a message and a task") as tx:
            granted.append(tx.leases.grant(Lease("urn:r", "a", W, 0, 1, 20, 1, 21), fenced=True))
            tx.messages.append(
                iri="urn:uuid:m", topic="t", task=None, sender=None, payload="{}", now=1
            )
            tx.tasks.insert("urn:t:1", parent=None, root="urn:t:1", now=1)
            raise RuntimeError("the caller failed after its writes")

    with pytest.raises(RuntimeError):
        write_then_fail()
    assert granted[0].token > 0
    assert leases.holders("urn:r") == []
    assert leases.newest_token("urn:r") is None  # the fence moved back with the rollback
    assert _topics(coordination_store) == []
    with coordination_store.read("reading") as tx:
        assert tx.tasks.get("urn:t:1") is None


def test_a_grant_returns_the_lease_as_stored_with_its_new_token(
    coordination_store: CoordinationStore,
) -> None:
    lease = Lease("urn:r:g", "a", LeaseMode.READ, 0, 2, 15.5, 3.25, 18.75)
    with coordination_store.write("a grant") as tx:
        got = tx.leases.grant(lease, fenced=False)
        assert tx.leases.on("urn:r:g") == [got]
    assert got.token > 0
    assert got == Lease("urn:r:g", "a", LeaseMode.READ, got.token, 2, 15.5, 3.25, 18.75)


def _insert_then_fail(store: CoordinationStore, commit: Any) -> None:
    with store.write("failing", commit=commit) as tx:
        tx.tasks.insert("urn:t:lost", parent=None, root="urn:t:lost", now=1)
        raise KeyError("the caller failed")


@pytest.mark.parametrize("commit", ["sync", "flush", "async"])
def test_every_commit_of_a_write_commits_it_and_rolls_back_with_it(
    coordination_store: CoordinationStore, commit: Any
) -> None:
    with coordination_store.write(f"publishing, {commit}", commit=commit) as tx:
        iri = f"urn:uuid:{uuid.uuid4()}"
        tx.messages.append(iri=iri, topic=commit, task=None, sender=None, payload="{}", now=1)
    with pytest.raises(KeyError):
        _insert_then_fail(coordination_store, commit)
    assert _topics(coordination_store) == [commit]
    with coordination_store.read("reading") as tx:
        assert tx.tasks.get("urn:t:lost") is None


@pytest.mark.parametrize("commit", ["SYNC", "later", "", None, 1, True])
def test_a_write_with_an_unknown_commit_is_refused_naming_it(
    coordination_store: CoordinationStore, commit: Any
) -> None:
    with (
        pytest.raises(InvalidInputError, match="commit must be one of sync, flush, async"),
        coordination_store.write("refused", commit=commit) as tx,
    ):
        tx.tasks.insert("urn:t:never", parent=None, root="urn:t:never", now=1)
    with coordination_store.read("reading") as tx:
        assert tx.tasks.get("urn:t:never") is None


def test_tokens_and_sequences_are_never_reused_after_release_and_prune(
    coordination_store: CoordinationStore, leases: LeaseTable
) -> None:
    first = leases.try_acquire("urn:r", "a", W).token
    leases.release("urn:r", "a")
    second = leases.try_acquire("urn:r", "a", W).token
    assert second > first
    sequence = _publish(coordination_store, "one")
    with coordination_store.write("pruning") as tx:
        assert tx.messages.prune(sequence) == 1
        assert tx.messages.latest() == 0
    assert _publish(coordination_store, "two") > sequence


def test_a_closed_store_refuses_every_registry(coordination_backend: Backend[Any]) -> None:
    store = coordination_backend.open()
    leases, messages = LeaseTable(store), MessageBoard(store)
    store.close()
    store.close()  # twice is harmless
    assert store.closed
    with pytest.raises(ClosedError):
        leases.try_acquire("urn:r", "a")
    with pytest.raises(ClosedError):
        messages.read_since()
    with pytest.raises(ClosedError), store.read("reading"):
        pass


@pytest.mark.parametrize("registry", [LeaseTable, TaskRegistry, AgentRegistry, MessageBoard])
def test_a_registry_refuses_what_is_not_a_coordination_store(registry: Any) -> None:
    with pytest.raises(InvalidInputError, match="CoordinationStore"):
        registry("blackboard.sqlite3")
    with pytest.raises(InvalidInputError, match="CoordinationStore"):
        Coordination(None)  # type: ignore[arg-type]


# == leases: the compatibility table ============================================================


def test_the_table_says_what_the_design_says() -> None:
    expected = {
        (R, R): True,
        (R, W): True,
        (W, R): True,
        (W, W): False,
        **{(X, m): False for m in LeaseMode},
        **{(m, X): False for m in LeaseMode},
    }
    assert dict(COMPATIBLE) == expected
    assert all(COMPATIBLE[a, b] == COMPATIBLE[b, a] for a, b in COMPATIBLE)
    assert STRENGTH[R] < STRENGTH[W] < STRENGTH[X]


@pytest.mark.parametrize(("held", "asked"), list(COMPATIBLE))
def test_every_pair_of_modes_is_granted_or_refused_as_the_table_says(
    leases: LeaseTable, held: LeaseMode, asked: LeaseMode
) -> None:
    first = leases.try_acquire("urn:r", "a", held)
    if COMPATIBLE[held, asked]:
        second = leases.try_acquire("urn:r", "b", asked)
        assert second.token > first.token
        assert {lease.holder for lease in leases.holders("urn:r")} == {"a", "b"}
    else:
        with pytest.raises(LeaseConflictError) as caught:
            leases.try_acquire("urn:r", "b", asked)
        assert caught.value.holders == (("a", held.value),)
        assert caught.value.resource == "urn:r"
        assert "'a' (" in str(caught.value)


def _first(store: CoordinationStore, holder: str, mode: LeaseMode) -> Any:
    blocking = frozenset(held for held in LeaseMode if not COMPATIBLE[held, mode])
    with store.write("a first grant") as tx:
        return tx.leases.grant_if_free(
            "urn:r", holder, mode, 10.0, blocking=blocking, fenced=mode is not R
        )


def test_a_first_grant_is_made_only_when_no_live_lease_stands_in_its_way(
    coordination_store: CoordinationStore, leases: LeaseTable, clock: FakeClock
) -> None:
    made = _first(coordination_store, "a", W)
    assert (made.seen, made.now) == ([], clock.now)
    assert made.lease == Lease(
        "urn:r", "a", W, made.lease.token, 1, 10.0, clock.now, clock.now + 10
    )
    assert leases.holders("urn:r") == [made.lease]
    assert leases.newest_token("urn:r") == made.lease.token
    # The holder's own live lease, or a conflicting one, stands in its way: nothing changes.
    for holder in ("a", "b"):
        refused = _first(coordination_store, holder, W)
        assert (refused.lease, refused.seen) == (None, [made.lease])
    reader = _first(coordination_store, "b", R)  # a compatible mode
    assert reader.lease is not None
    assert reader.seen == [made.lease]
    assert leases.newest_token("urn:r") == made.lease.token  # a Read grant leaves the fence
    clock.advance(10)
    late = _first(coordination_store, "c", X)  # both expired: deleted with the grant
    assert late.lease is not None
    assert [lease.holder for lease in late.seen] == ["a", "b"]
    with coordination_store.read("reading the rows") as tx:
        assert [lease.holder for lease in tx.leases.on("urn:r")] == ["c"]
    clock.advance(10)
    again = _first(coordination_store, "c", W)  # its own expired row is replaced
    assert again.lease is not None
    assert again.lease.token > late.lease.token
    assert leases.holders("urn:r") == [again.lease]


def test_other_resources_do_not_conflict(leases: LeaseTable) -> None:
    leases.try_acquire("urn:r1", "a", X)
    assert leases.try_acquire("urn:r2", "b", X).holder == "b"


# == leases: re-entrancy, upgrades and release ==================================================


def test_a_holder_re_enters_its_lease_and_keeps_its_token(leases: LeaseTable) -> None:
    first = leases.try_acquire("urn:r", "a", W)
    again = leases.try_acquire("urn:r", "a", R)  # a weaker mode is covered by the lease
    assert (again.token, again.depth, again.mode) == (first.token, 2, W)
    assert leases.release("urn:r", "a") is True
    with pytest.raises(LeaseConflictError):
        leases.try_acquire("urn:r", "b", W)  # one acquisition is still held
    assert leases.release("urn:r", "a") is True
    assert leases.holders("urn:r") == []
    assert leases.release("urn:r", "a") is False  # a late release is harmless


def test_an_upgrade_is_a_new_grant_and_needs_the_others_to_allow_it(leases: LeaseTable) -> None:
    read = leases.try_acquire("urn:r", "a", R)
    upgraded = leases.try_acquire("urn:r", "a", W)
    assert upgraded.token > read.token
    assert (upgraded.mode, upgraded.depth) == (W, 2)
    leases.try_acquire("urn:r", "b", R)  # a reader beside the writer
    with pytest.raises(LeaseConflictError) as caught:
        leases.try_acquire("urn:r", "a", X)  # b's read forbids an exclusive upgrade
    assert caught.value.holders == (("b", "read"),)
    assert leases.holders("urn:r")[0].mode is W  # the refused upgrade changed nothing


def test_release_all_ends_every_depth_of_every_lease(leases: LeaseTable) -> None:
    leases.try_acquire("urn:r1", "a", W)
    leases.try_acquire("urn:r1", "a", W)
    leases.try_acquire("urn:r2", "a", R)
    leases.try_acquire("urn:r2", "b", R)
    released = leases.release_all("a")
    assert [lease.resource for lease in released] == ["urn:r1", "urn:r2"]
    assert leases.leases() == leases.leases("b")
    assert leases.try_acquire("urn:r1", "b", X).holder == "b"


def test_the_holders_of_several_resources_are_read_at_once(
    leases: LeaseTable, clock: FakeClock
) -> None:
    leases.try_acquire("urn:r2", "b", R, ttl_s=100)
    leases.try_acquire("urn:r1", "c", R, ttl_s=100)
    leases.try_acquire("urn:r1", "a", R, ttl_s=100)
    leases.try_acquire("urn:r3", "d", W, ttl_s=5)
    clock.advance(10)  # d's lease has expired
    found = leases.holders_of(["urn:r1", "urn:r3", "urn:none", "urn:r2", "urn:r1"])
    assert list(found) == ["urn:r1", "urn:r3", "urn:none", "urn:r2"]  # each once, in order
    assert {r: [lease.holder for lease in held] for r, held in found.items()} == {
        "urn:r1": ["c", "a"],  # by grant, as ``holders``
        "urn:r3": [],
        "urn:none": [],
        "urn:r2": ["b"],
    }
    assert found["urn:r1"] == leases.holders("urn:r1")
    assert leases.holders_of([]) == {}
    with pytest.raises(InvalidInputError):
        leases.holders_of(["urn:r1", ""])
    for bad in ("urn:r1", None, 5, b"urn:r1"):  # a name alone is not a list of its letters
        with pytest.raises(InvalidInputError, match="resources must be a list"):
            leases.holders_of(bad)  # type: ignore[arg-type]
    with pytest.raises(InvalidInputError):
        leases.holders_of([None])  # type: ignore[list-item]


def test_holders_and_leases_are_listed_in_their_order(leases: LeaseTable) -> None:
    leases.try_acquire("urn:r2", "b", R)
    leases.try_acquire("urn:r1", "c", R)
    leases.try_acquire("urn:r1", "a", R)
    assert [lease.holder for lease in leases.holders("urn:r1")] == ["c", "a"]  # by grant
    assert [(lease.resource, lease.holder) for lease in leases.leases()] == [
        ("urn:r1", "a"),
        ("urn:r1", "c"),
        ("urn:r2", "b"),
    ]
    assert [lease.resource for lease in leases.leases("a")] == ["urn:r1"]
    assert leases.holds_write_lease("urn:r1", "a") is False


# == leases: TTL, renewal, expiry ===============================================================


def test_a_lease_expires_after_its_ttl_and_the_next_holder_gets_it(
    leases: LeaseTable, clock: FakeClock
) -> None:
    first = leases.try_acquire("urn:r", "a", X, ttl_s=10)
    clock.advance(9.9)
    with pytest.raises(LeaseConflictError):
        leases.try_acquire("urn:r", "b", R)
    clock.advance(0.1)
    second = leases.try_acquire("urn:r", "b", R)
    assert second.token > first.token
    assert [lease.holder for lease in leases.holders("urn:r")] == ["b"]


def test_renewal_extends_by_the_lease_s_own_ttl(leases: LeaseTable, clock: FakeClock) -> None:
    leases.try_acquire("urn:r", "a", W, ttl_s=10)
    clock.advance(8)
    renewed = leases.renew("urn:r", "a")
    assert renewed.expires_at == clock.now + 10
    clock.advance(8)
    assert leases.renew_all("a") == 1
    clock.advance(9)
    with pytest.raises(LeaseConflictError):
        leases.try_acquire("urn:r", "b", W)
    clock.advance(1)
    assert leases.renew_all("a") == 0  # expired leases are not revived
    with pytest.raises(LeaseNotHeldError, match="'a' holds no live lease on 'urn:r'"):
        leases.renew("urn:r", "a")


def test_expire_deletes_and_reports_expired_leases(leases: LeaseTable, clock: FakeClock) -> None:
    bus = EventBus()
    leases.bus = bus
    leases.try_acquire("urn:r1", "a", W, ttl_s=5)
    leases.try_acquire("urn:r2", "a", W, ttl_s=50)
    clock.advance(5)
    assert [lease.resource for lease in leases.expire()] == ["urn:r1"]
    assert [e.payload["resource"] for e in bus.recent(EventType.LEASE_EXPIRED)] == ["urn:r1"]
    assert [lease.resource for lease in leases.leases("a")] == ["urn:r2"]
    assert leases.expire() == []


def test_grants_and_releases_are_published(leases: LeaseTable) -> None:
    bus = EventBus()
    leases.bus = bus
    lease = leases.try_acquire("urn:r", "a", W)
    leases.try_acquire("urn:r", "a", W)
    leases.release("urn:r", "a")
    leases.release("urn:r", "a")
    granted = bus.recent(EventType.LEASE_GRANTED)
    assert [e.payload["reentrant"] for e in granted] == [False, True]
    assert granted[0].payload == {
        "resource": "urn:r",
        "holder": "a",
        "mode": "write",
        "token": lease.token,
        "reentrant": False,
    }
    assert len(bus.recent(EventType.LEASE_RELEASED)) == 1  # only the end of the lease


# == leases: fencing ============================================================================


def test_the_newest_holder_s_token_passes_the_fence(leases: LeaseTable) -> None:
    lease = leases.try_acquire("urn:n", "a", W)
    leases.check_fence("urn:n", "a", lease.token)
    assert leases.newest_token("urn:n") == lease.token
    assert leases.holds_write_lease("urn:n", "a") is True


def test_a_paused_holder_whose_lease_expired_cannot_overwrite_its_successor(
    leases: LeaseTable, clock: FakeClock
) -> None:
    old = leases.try_acquire("urn:n", "a", W, ttl_s=5)
    clock.advance(6)
    new = leases.try_acquire("urn:n", "b", W)
    with pytest.raises(FencingTokenError) as caught:
        leases.check_fence("urn:n", "a", old.token)
    assert (caught.value.token, caught.value.newest) == (old.token, new.token)
    assert f"token {new.token}" in str(caught.value)
    leases.check_fence("urn:n", "b", new.token)


def test_the_fence_refuses_expired_released_foreign_and_read_tokens(
    leases: LeaseTable, clock: FakeClock
) -> None:
    with pytest.raises(FencingTokenError, match="no write lease was ever granted"):
        leases.check_fence("urn:n", "a", 1)
    read = leases.try_acquire("urn:n", "a", R)
    with pytest.raises(FencingTokenError):
        leases.check_fence("urn:n", "a", read.token)  # a read lease guards no write
    write = leases.try_acquire("urn:n", "b", W, ttl_s=5)
    with pytest.raises(FencingTokenError, match="expired or was released"):
        leases.check_fence("urn:n", "a", write.token)  # not a's lease
    clock.advance(5)
    with pytest.raises(FencingTokenError, match="expired or was released"):
        leases.check_fence("urn:n", "b", write.token)
    again = leases.try_acquire("urn:n", "b", W)
    leases.release("urn:n", "b")
    with pytest.raises(FencingTokenError, match="expired or was released"):
        leases.check_fence("urn:n", "b", again.token)
    assert leases.newest_token("urn:n") == again.token  # the fence outlives the lease


# == leases: voided by a grant ==================================================================


def test_a_grant_ends_the_conflicting_leases_it_voids_and_only_when_it_is_made(
    coordination_store: CoordinationStore,
) -> None:
    bus = EventBus()
    leases = LeaseTable(coordination_store, bus=bus)
    squatter = leases.acquire("urn:r", "squatter", X)
    leases.acquire("urn:s", "rightful", W)
    only_squatters = lambda lease: lease.holder == "squatter"  # noqa: E731
    with pytest.raises(LeaseConflictError) as still:
        leases.try_acquire("urn:s", "owner", W, void=only_squatters)
    assert still.value.holders == (("rightful", "write"),)
    leases.acquire("urn:s", "squatter", R)  # shares with the rightful Write
    with pytest.raises(LeaseConflictError):  # the rightful holder still conflicts: none ends
        leases.try_acquire("urn:s", "owner", X, void=only_squatters)
    assert {lease.holder for lease in leases.holders("urn:s")} == {"rightful", "squatter"}
    granted = leases.acquire("urn:r", "owner", W, timeout_s=0, void=only_squatters)
    assert [lease.holder for lease in leases.holders("urn:r")] == ["owner"]
    assert granted.token > squatter.token
    with pytest.raises(FencingTokenError):
        leases.check_fence("urn:r", "squatter", squatter.token)
    revoked = [e.payload for e in bus.recent(EventType.LEASE_RELEASED) if e.payload.get("revoked")]
    assert [(p["resource"], p["holder"]) for p in revoked] == [("urn:r", "squatter")]
    assert leases.renew_all("squatter") == 1  # its Read on urn:s: the one on urn:r is gone
    with pytest.raises(InvalidInputError, match="void"):
        leases.try_acquire("urn:t", "owner", W, void="squatter")  # type: ignore[arg-type]


def test_an_awaited_grant_asks_void_at_every_attempt(leases: LeaseTable) -> None:
    leases.acquire("urn:r", "squatter", X)
    voided: list[str] = []

    def void(lease: Lease) -> bool:
        voided.append(lease.holder)
        return True

    lease = asyncio.run(leases.acquire_async("urn:r", "owner", X, timeout_s=0, void=void))
    assert lease.holder == "owner"
    assert voided == ["squatter"]


def test_void_may_read_the_agent_registry_inside_the_grant(
    coordination_store: CoordinationStore, leases: LeaseTable, agents: AgentRegistry
) -> None:
    """A handle's ``void`` asks the agent registry from inside the grant's transaction."""
    agents.register("squatter", role="do", task="urn:t:other")
    leases.acquire("urn:r", "squatter", X)

    def of_another_task(lease: Lease) -> bool:
        return agents.get(lease.holder).task != "urn:t:mine"

    assert leases.try_acquire("urn:r", "owner", W, void=of_another_task).holder == "owner"


# == leases: waiting ============================================================================


def test_a_blocked_acquire_gets_the_lease_when_it_is_released(leases: LeaseTable) -> None:
    leases.try_acquire("urn:r", "a", X)
    granted: list[int] = []
    waiter = threading.Thread(
        target=lambda: granted.append(leases.acquire("urn:r", "b", W, timeout_s=30).token)
    )
    waiter.start()
    leases.release("urn:r", "a")
    waiter.join(30)
    assert len(granted) == 1
    assert leases.holders("urn:r")[0].holder == "b"


def test_exclusive_leases_serialise_threads(leases: LeaseTable) -> None:
    counter = [0]

    def increment(name: str) -> None:
        for _ in range(25):
            with leases.hold("urn:counter", name, X, timeout_s=60):
                value = counter[0]
                threading.Event().wait(0.0001)  # give another thread the chance to interleave
                counter[0] = value + 1

    threads = [threading.Thread(target=increment, args=(f"t{n}",)) for n in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    assert counter[0] == 100


def test_an_acquire_times_out_naming_the_holders(leases: LeaseTable) -> None:
    leases.try_acquire("urn:r", "a", W)
    with pytest.raises(LeaseTimeoutError) as caught:
        leases.acquire("urn:r", "b", X, timeout_s=0.05)
    assert caught.value.holders == (("a", "write"),)
    assert isinstance(caught.value, TimeoutError)
    assert isinstance(caught.value, LeaseConflictError)
    with pytest.raises(LeaseTimeoutError):
        leases.acquire("urn:r", "b", X, timeout_s=0)  # zero: one attempt


def test_hold_releases_on_exit_even_after_an_error(leases: LeaseTable) -> None:
    inside: list[list[Lease]] = []

    def work() -> None:
        with leases.hold("urn:r", "a", X):
            inside.append(leases.holders("urn:r"))
            raise KeyError("boom")

    with pytest.raises(KeyError):
        work()
    assert [lease.holder for lease in inside[0]] == ["a"]
    assert leases.holders("urn:r") == []


async def test_an_awaited_lease_is_granted_after_release(leases: LeaseTable) -> None:
    leases.try_acquire("urn:r", "a", W)
    waiting = asyncio.ensure_future(leases.acquire_async("urn:r", "b", W, timeout_s=30))
    await asyncio.sleep(0.01)
    assert not waiting.done()
    leases.release("urn:r", "a")
    assert (await waiting).holder == "b"


async def test_awaiting_agents_take_an_exclusive_lease_in_turn(leases: LeaseTable) -> None:
    order: list[str] = []

    async def work(name: str) -> None:
        lease = await leases.acquire_async("urn:r", name, X, timeout_s=60)
        order.append(name)
        assert [held.holder for held in leases.holders("urn:r")] == [name]
        await asyncio.sleep(0.001)
        leases.release(lease.resource, name)

    await asyncio.gather(*(work(f"agent-{n}") for n in range(4)))
    assert sorted(order) == [f"agent-{n}" for n in range(4)]
    assert leases._async_waiters == []


async def test_an_awaited_lease_times_out(leases: LeaseTable) -> None:
    leases.try_acquire("urn:r", "a", X)
    with pytest.raises(LeaseTimeoutError):
        await leases.acquire_async("urn:r", "b", R, timeout_s=0.05)


# == leases: validation =========================================================================


@pytest.mark.parametrize(
    ("kwargs", "named"),
    [
        ({"resource": ""}, "resource"),
        ({"resource": "has space"}, "'has space'"),
        ({"resource": 7}, "7"),
        ({"resource": "urn:\ud800"}, "surrogate"),
        ({"resource": "urn:" + "r" * 2_048}, "longer than 2048"),
        ({"holder": None}, "None"),
        ({"mode": "shared"}, "'shared'"),
        ({"ttl_s": 0}, "ttl_s"),
        ({"ttl_s": float("nan")}, "nan"),
        ({"ttl_s": True}, "True"),
    ],
)
def test_bad_requests_are_refused_naming_the_value(
    leases: LeaseTable, kwargs: dict[str, object], named: str
) -> None:
    request: dict[str, object] = {"resource": "urn:r", "holder": "a", "mode": "write", **kwargs}
    with pytest.raises(InvalidInputError, match=named.replace("(", r"\(")):
        leases.try_acquire(**request)  # type: ignore[arg-type]
    assert leases.leases() == []


def test_modes_may_be_named_by_value(leases: LeaseTable) -> None:
    assert leases.try_acquire("urn:r", "a", "Exclusive").mode is X


def test_a_bad_timeout_or_token_is_refused(leases: LeaseTable) -> None:
    with pytest.raises(InvalidInputError, match="timeout_s"):
        leases.acquire("urn:r", "a", timeout_s=-1)
    with pytest.raises(InvalidInputError, match="token must be an int"):
        leases.check_fence("urn:r", "a", "1")  # type: ignore[arg-type]


# == leases: a model of the live leases =========================================================

AGENT_NAMES = ("a", "b", "c")
RESOURCE_NAMES = ("r1", "r2")
TTL = 10.0


@dataclass
class Held:
    """The model's view of one live lease."""

    mode: LeaseMode
    depth: int
    expires_at: float
    token: int


class LeaseMachine(RuleBasedStateMachine):
    """Agents acquire, renew, release, crash and wait while the clock moves.

    A model of the live leases decides what must happen: a grant exactly when no live lease of
    another agent is incompatible, so no grant is lost to an expired (crashed) holder and no
    incompatible one is made. Each run opens a new handle and names its agents and resources
    afresh, so runs on one storage never meet.
    """

    def __init__(self, backend: Backend[CoordinationStore], clock: FakeClock) -> None:
        super().__init__()
        run = uuid.uuid4().hex[:8]
        self.clock = clock
        self.db = backend.open()
        self.leases = LeaseTable(self.db)
        self.agents = {name: f"{name}-{run}" for name in AGENT_NAMES}
        self.resources = [f"urn:{name}:{run}" for name in RESOURCE_NAMES]
        self.model: dict[str, dict[str, Held]] = {r: {} for r in self.resources}
        self.crashed: set[str] = set()
        self.last_token = 0

    def teardown(self) -> None:
        self.db.close()

    def _live(self, resource: str) -> dict[str, Held]:
        now = self.clock.now
        self.model[resource] = {h: v for h, v in self.model[resource].items() if v.expires_at > now}
        return self.model[resource]

    @rule(
        who=st.sampled_from(AGENT_NAMES),
        which=st.sampled_from(range(len(RESOURCE_NAMES))),
        mode=st.sampled_from(list(LeaseMode)),
    )
    def acquire(self, who: str, which: int, mode: LeaseMode) -> None:
        agent, resource = self.agents[who], self.resources[which]
        if agent in self.crashed:
            return
        live = self._live(resource)
        blocking = {h for h, v in live.items() if h != agent and not COMPATIBLE[v.mode, mode]}
        if blocking:
            with pytest.raises(LeaseConflictError) as caught:
                self.leases.try_acquire(resource, agent, mode)
            assert {h for h, _ in caught.value.holders} == blocking
            return
        lease = self.leases.try_acquire(resource, agent, mode)
        own = live.get(agent)
        expires = self.clock.now + TTL
        if own is not None and STRENGTH[mode] <= STRENGTH[own.mode]:
            own.depth, own.expires_at = own.depth + 1, max(own.expires_at, expires)
            assert (lease.token, lease.depth, lease.mode) == (own.token, own.depth, own.mode)
            assert lease.expires_at == own.expires_at
            return
        assert lease.token > self.last_token, "tokens must strictly increase"
        self.last_token = lease.token
        depth = 1 if own is None else own.depth + 1
        assert (lease.depth, lease.mode, lease.expires_at) == (depth, mode, expires)
        live[agent] = Held(mode, depth, expires, lease.token)

    @rule(who=st.sampled_from(AGENT_NAMES), which=st.sampled_from(range(len(RESOURCE_NAMES))))
    def release(self, who: str, which: int) -> None:
        agent, resource = self.agents[who], self.resources[which]
        if agent in self.crashed:
            return
        own = self._live(resource).get(agent)
        assert self.leases.release(resource, agent) is (own is not None)
        if own is not None:
            own.depth -= 1
            if own.depth == 0:
                del self.model[resource][agent]

    @rule(who=st.sampled_from(AGENT_NAMES))
    def heartbeat(self, who: str) -> None:
        agent = self.agents[who]
        if agent in self.crashed:
            return
        renewed = 0
        for resource in self.resources:
            own = self._live(resource).get(agent)
            if own is not None:
                own.expires_at = self.clock.now + TTL
                renewed += 1
        assert self.leases.renew_all(agent) == renewed

    @rule(who=st.sampled_from(AGENT_NAMES))
    def crash(self, who: str) -> None:
        self.crashed.add(self.agents[who])  # its leases stay until they expire

    @rule(who=st.sampled_from(AGENT_NAMES))
    def restart(self, who: str) -> None:
        self.crashed.discard(self.agents[who])

    @rule(seconds=st.sampled_from([0.5, 3.0, 10.0, 25.0]))
    def wait(self, seconds: float) -> None:
        self.clock.advance(seconds)

    @rule(who=st.sampled_from(AGENT_NAMES), which=st.sampled_from(range(len(RESOURCE_NAMES))))
    def fence(self, who: str, which: int) -> None:
        agent, resource = self.agents[who], self.resources[which]
        own = self._live(resource).get(agent)
        newest = self.leases.newest_token(resource)
        if own is not None and own.mode in (W, X) and own.token == newest:
            self.leases.check_fence(resource, agent, own.token)
        elif newest is not None:
            with pytest.raises(FencingTokenError):
                self.leases.check_fence(resource, agent, newest if own is None else own.token)

    @invariant()
    def holders_are_compatible_and_match_the_model(self) -> None:
        for resource in self.resources:
            held = self.leases.holders(resource)
            for one in held:
                for other in held:
                    if one.holder != other.holder:
                        assert COMPATIBLE[one.mode, other.mode], (one, other)
            assert {(lease.holder, lease.mode, lease.depth) for lease in held} == {
                (h, v.mode, v.depth) for h, v in self._live(resource).items()
            }


@pytest.mark.coordination_config(lease_ttl_s=TTL)
def test_the_lease_machine(
    coordination_backend: Backend[CoordinationStore], clock: FakeClock
) -> None:
    run_state_machine_as_test(
        lambda: LeaseMachine(coordination_backend, clock),
        settings=settings(max_examples=60, stateful_step_count=40, deadline=None),
    )


@pytest.mark.stress
@pytest.mark.coordination_config(lease_ttl_s=TTL)
def test_the_lease_machine_at_length(
    coordination_backend: Backend[CoordinationStore], clock: FakeClock
) -> None:
    """The same machine with many more and longer runs (``pytest -m stress``)."""
    run_state_machine_as_test(
        lambda: LeaseMachine(coordination_backend, clock),
        settings=settings(max_examples=1_000, stateful_step_count=80, deadline=None),
    )


# == leases: two handles, and processes =========================================================


def test_tokens_increase_across_handles_on_one_storage(
    shared_coordination_backend: Backend[CoordinationStore],
) -> None:
    one, two = shared_coordination_backend.open(), shared_coordination_backend.open()
    try:
        first, second = LeaseTable(one), LeaseTable(two)
        tokens = []
        for index in range(6):
            table = first if index % 2 else second
            tokens.append(table.try_acquire(f"urn:r{index}", "a", W).token)
        assert tokens == sorted(set(tokens))
        with pytest.raises(LeaseConflictError):
            second.try_acquire("urn:r1", "b", W)  # granted through the other handle
        first.release("urn:r1", "a")
        assert second.try_acquire("urn:r1", "b", X).token > tokens[-1]
        with pytest.raises(FencingTokenError):
            first.check_fence("urn:r1", "a", tokens[1])  # the other handle's grant fenced it
    finally:
        one.close()
        two.close()


def test_tokens_and_sequences_survive_reopening(
    shared_coordination_backend: Backend[CoordinationStore],
) -> None:
    store = shared_coordination_backend.open()
    token = LeaseTable(store).try_acquire("urn:r", "a", W).token
    LeaseTable(store).release_all("a")
    board = MessageBoard(store)
    old = [board.publish("t", {"i": i}).sequence for i in range(3)]
    assert board.prune(old[-1]) == 3
    store.close()
    reopened = shared_coordination_backend.open()
    try:
        assert LeaseTable(reopened).try_acquire("urn:s", "b", W).token > token
        board = MessageBoard(reopened)
        assert board.read_since() == []
        assert board.publish("t").sequence > old[-1]
    finally:
        reopened.close()


_HOLDER = textwrap.dedent(
    """
    import sys, time
    from gliding_core.blackboard.coordination.leases import LeaseTable
    table = LeaseTable(open_backend())
    lease = table.try_acquire("urn:shared", "child", "exclusive", ttl_s=float(sys.argv[1]))
    print(lease.token, flush=True)
    while True:  # a live holder: it renews well inside its TTL, until it is killed
        time.sleep(0.05)
        table.renew("urn:shared", "child")
    """
)


@pytest.mark.wall_clock  # the child renews on the real clock
def test_a_sigkilled_holder_s_lease_expires_and_its_token_is_fenced(
    shared_coordination_backend: Backend[CoordinationStore],
) -> None:
    store = shared_coordination_backend.open()
    leases = LeaseTable(store)
    child = run_child(shared_coordination_backend, _HOLDER, "2.0")
    try:
        assert child.stdout is not None
        child_token = int(child.stdout.readline())
        with pytest.raises(LeaseConflictError) as caught:
            leases.try_acquire("urn:shared", "parent", "write")
        assert caught.value.holders == (("child", "exclusive"),)
        granted: list[Lease] = []
        waiter = threading.Thread(
            target=lambda: granted.append(
                leases.acquire("urn:shared", "parent", "write", timeout_s=120)
            )
        )
        waiter.start()
        child.send_signal(signal.SIGKILL)
        child.wait(30)
        waiter.join(150)
    finally:
        child.kill()
        child.wait(30)
        if child.stdout is not None:
            child.stdout.close()
    try:
        [lease] = granted
        assert lease.token > child_token
        leases.check_fence("urn:shared", "parent", lease.token)
        with pytest.raises(FencingTokenError):
            leases.check_fence("urn:shared", "child", child_token)
    finally:
        store.close()


_COUNTER = textwrap.dedent(
    """
    import sys
    from pathlib import Path
    from gliding_core.blackboard.coordination.leases import LeaseTable
    counter, name, rounds = Path(sys.argv[1]), sys.argv[2], int(sys.argv[3])
    table = LeaseTable(open_backend())
    tokens = []
    for _ in range(rounds):
        with table.hold("urn:counter", name, "exclusive", timeout_s=120) as lease:
            counter.write_text(str(int(counter.read_text()) + 1))  # a read-modify-write
            tokens.append(lease.token)
    print(" ".join(map(str, tokens)))
    """
)


def test_exclusive_leases_serialise_processes_and_tokens_never_repeat(
    shared_coordination_backend: Backend[CoordinationStore], tmp_path: Path
) -> None:
    counter = tmp_path / "counter.txt"
    counter.write_text("0")
    shared_coordination_backend.open().close()  # create the storage once
    children = [
        run_child(shared_coordination_backend, _COUNTER, str(counter), f"p{n}", "25")
        for n in range(3)
    ]
    outputs = [child.communicate(timeout=300)[0] for child in children]
    assert all(child.returncode == 0 for child in children)
    assert counter.read_text() == "75"  # no increment lost: never two holders at once
    tokens = [int(token) for output in outputs for token in output.split()]
    assert len(tokens) == len(set(tokens)) == 75
    for output in outputs:
        mine = [int(token) for token in output.split()]
        assert mine == sorted(mine)


# == tasks: registering =========================================================================


def _finish(tasks: TaskRegistry, *iris: str) -> None:
    for iri in iris:
        tasks.start(iri)
        tasks.complete(iri)


def test_a_task_is_registered_pending_under_its_parent(tasks: TaskRegistry) -> None:
    root = tasks.register("urn:t:root")
    child = tasks.register("urn:t:a", parent="urn:t:root")
    assert (root.status, root.parent, root.root) == (P, None, "urn:t:root")
    assert (child.parent, child.root, child.revision) == ("urn:t:root", "urn:t:root", 1)
    grandchild = tasks.register("urn:t:a1", parent="urn:t:a")
    assert grandchild.root == "urn:t:root"
    assert [t.iri for t in tasks.children("urn:t:root")] == ["urn:t:a"]
    assert tasks.subtree("urn:t:root") == ["urn:t:root", "urn:t:a", "urn:t:a1"]
    assert "urn:t:a" in tasks
    assert "urn:t:nope" not in tasks
    assert 3 not in tasks


def test_registration_refuses_taken_iris_missing_or_finished_parents(tasks: TaskRegistry) -> None:
    tasks.register("urn:t:a")
    with pytest.raises(InvalidInputError, match="'urn:t:a' is already registered"):
        tasks.register("urn:t:a")
    with pytest.raises(TaskNotFoundError, match="urn:t:ghost"):
        tasks.register("urn:t:b", parent="urn:t:ghost")
    with pytest.raises(TaskNotFoundError, match="urn:t:ghost"):
        tasks.register("urn:t:b", depends_on=["urn:t:ghost"])
    assert "urn:t:b" not in tasks  # nothing half-written
    _finish(tasks, "urn:t:a")
    with pytest.raises(InvalidInputError, match="the parent is completed"):
        tasks.register("urn:t:b", parent="urn:t:a")


@pytest.mark.parametrize(
    ("kwargs", "named"),
    [
        ({"iri": ""}, "task IRI"),
        ({"iri": "a b"}, "'a b'"),
        ({"parent": 3}, "3"),
        ({"depends_on": "urn:t:x"}, "'urn:t:x'"),
        ({"depends_on": [None]}, "None"),
    ],
)
def test_bad_task_registrations_are_refused_naming_the_value(
    tasks: TaskRegistry, kwargs: dict[str, Any], named: str
) -> None:
    request = {"iri": "urn:t:a", **kwargs}
    with pytest.raises(InvalidInputError, match=named):
        tasks.register(**request)
    assert tasks.tasks() == []


def test_without_a_mirror_any_name_without_spaces_names_a_task(tasks: TaskRegistry) -> None:
    """The store alone holds it: the registry is usable without a graph (a documented choice)."""
    assert tasks.register("foo").iri == "foo"
    tasks.register("baz")
    assert tasks.register("bar", parent="foo", depends_on=["baz"]).root == "foo"


# == tasks: transitions =========================================================================


def test_the_transition_table_is_the_documented_one() -> None:
    assert {s: set(t) for s, t in TASK_TRANSITIONS.items()} == {
        P: {RUN, F},
        RUN: {C, F, P},
        F: {P},
        C: set(),
    }


@pytest.mark.parametrize("start", list(TaskStatus))
@pytest.mark.parametrize("target", list(TaskStatus))
def test_every_transition_is_allowed_or_refused_as_the_table_says(
    tasks: TaskRegistry, start: TaskStatus, target: TaskStatus
) -> None:
    tasks.register("urn:t:a")
    path = {P: [], RUN: [RUN], C: [RUN, C], F: [F]}[start]
    for step in path:
        tasks.set_status("urn:t:a", step)
    if target in TASK_TRANSITIONS[start]:
        changed = tasks.set_status("urn:t:a", target.value)
        assert changed.status is target
        assert changed.revision == len(path) + 2
    else:
        with pytest.raises(InvalidTransitionError) as caught:
            tasks.set_status("urn:t:a", target)
        assert (caught.value.current, caught.value.requested) == (start.value, target.value)
        assert tasks.get("urn:t:a").status is start


def test_a_task_starts_only_when_its_dependencies_are_completed(tasks: TaskRegistry) -> None:
    tasks.register("urn:t:a")
    tasks.register("urn:t:b", depends_on=["urn:t:a"])
    with pytest.raises(InvalidTransitionError, match="waits for 'urn:t:a'"):
        tasks.start("urn:t:b")
    _finish(tasks, "urn:t:a")
    assert tasks.start("urn:t:b").status is RUN


def test_a_task_completes_only_when_its_children_are_finished(tasks: TaskRegistry) -> None:
    tasks.register("urn:t:p")
    tasks.register("urn:t:c1", parent="urn:t:p")
    tasks.register("urn:t:c2", parent="urn:t:p")
    tasks.register("urn:t:c3", parent="urn:t:p")
    tasks.start("urn:t:p")
    _finish(tasks, "urn:t:c1")
    with pytest.raises(InvalidTransitionError, match="children 'urn:t:c2', 'urn:t:c3' are unf"):
        tasks.complete("urn:t:p")
    tasks.fail("urn:t:c2")
    tasks.fail("urn:t:c3")
    assert tasks.complete("urn:t:p").status is C


def test_task_status_changes_are_published(
    coordination_store: CoordinationStore, clock: FakeClock
) -> None:
    bus = EventBus()
    tasks = TaskRegistry(coordination_store, bus=bus)
    registered_at = clock.now
    tasks.register("urn:t:a")
    clock.advance(3)
    tasks.start("urn:t:a")
    tasks.complete("urn:t:a")
    registered = bus.recent(EventType.TASK_REGISTERED)
    assert registered[0].payload == {"iri": "urn:t:a", "parent": None, "depends_on": []}
    changes = bus.recent(EventType.TASK_STATUS_CHANGED)
    assert [(e.payload["previous"], e.payload["status"]) for e in changes] == [
        ("pending", "running"),
        ("running", "completed"),
    ]
    assert changes[-1].task_iri == "urn:t:a"
    assert changes[-1].payload["revision"] == 3
    task = tasks.get("urn:t:a")
    assert (task.created_at, task.updated_at) == (registered_at, clock.now)


def test_a_bad_status_is_refused_naming_it(tasks: TaskRegistry) -> None:
    tasks.register("urn:t:a")
    with pytest.raises(InvalidInputError, match="'done'"):
        tasks.set_status("urn:t:a", "done")
    with pytest.raises(TaskNotFoundError, match="urn:t:b"):
        tasks.start("urn:t:b")


# == tasks: ready tasks and layers ==============================================================


def test_ready_tasks_are_pending_with_completed_dependencies(tasks: TaskRegistry) -> None:
    tasks.register("urn:t:a")
    tasks.register("urn:t:b", depends_on=["urn:t:a"])
    tasks.register("urn:t:c", depends_on=["urn:t:a", "urn:t:b"])
    tasks.register("urn:t:other")
    assert [t.iri for t in tasks.ready()] == ["urn:t:a", "urn:t:other"]
    _finish(tasks, "urn:t:a")
    assert [t.iri for t in tasks.ready()] == ["urn:t:b", "urn:t:other"]
    tasks.start("urn:t:b")
    assert [t.iri for t in tasks.ready()] == ["urn:t:other"]
    tasks.complete("urn:t:b")
    assert [t.iri for t in tasks.ready()] == ["urn:t:c", "urn:t:other"]
    assert tasks.get("urn:t:c").depends_on == ("urn:t:a", "urn:t:b")


def test_ready_tasks_within_a_subtree(tasks: TaskRegistry) -> None:
    tasks.register("urn:t:p")
    tasks.register("urn:t:p1", parent="urn:t:p")
    tasks.register("urn:t:q")
    assert [t.iri for t in tasks.ready(under="urn:t:p")] == ["urn:t:p", "urn:t:p1"]


def test_tasks_are_listed_by_iri_and_status(tasks: TaskRegistry) -> None:
    for name in ("urn:t:c", "urn:t:a", "urn:t:b"):
        tasks.register(name)
    tasks.fail("urn:t:b")
    assert [t.iri for t in tasks.tasks()] == ["urn:t:a", "urn:t:b", "urn:t:c"]
    assert [t.iri for t in tasks.tasks(status="failed")] == ["urn:t:b"]
    assert [t.iri for t in tasks.tasks(status=P)] == ["urn:t:a", "urn:t:c"]


@pytest.mark.parametrize(
    ("edges", "expected"),
    [
        ({"b": ["a"], "c": ["b"]}, [["a"], ["b"], ["c"]]),  # chain
        ({"b": ["a"], "c": ["a"]}, [["a"], ["b", "c"]]),  # fan-out
        ({"b": ["a"], "c": ["a"], "d": ["b", "c"]}, [["a"], ["b", "c"], ["d"]]),  # diamond
    ],
)
def test_layers_of_dependency_shapes(
    tasks: TaskRegistry, edges: dict[str, list[str]], expected: list[list[str]]
) -> None:
    for name in sorted({n for e in edges.values() for n in e} | set(edges)):
        tasks.register(f"urn:t:{name}", depends_on=[f"urn:t:{d}" for d in edges.get(name, [])])
    for name in ("a", "c"):
        layers = tasks.layers(f"urn:t:{name}")
        assert [[iri.removeprefix("urn:t:") for iri in layer] for layer in layers] == expected


def test_children_come_before_their_parent(tasks: TaskRegistry) -> None:
    tasks.register("urn:t:p")
    tasks.register("urn:t:s1", parent="urn:t:p")
    tasks.register("urn:t:s2", parent="urn:t:p", depends_on=["urn:t:s1"])
    tasks.register("urn:t:s3", parent="urn:t:p")
    assert tasks.layers("urn:t:p") == [["urn:t:s1", "urn:t:s3"], ["urn:t:s2"], ["urn:t:p"]]


# == tasks: cycles ==============================================================================


def test_a_dependency_closing_a_cycle_is_refused_naming_the_cycle(tasks: TaskRegistry) -> None:
    tasks.register("urn:t:a")
    tasks.register("urn:t:b", depends_on=["urn:t:a"])
    tasks.register("urn:t:c", depends_on=["urn:t:b"])
    with pytest.raises(TaskCycleError) as caught:
        tasks.add_dependency("urn:t:a", "urn:t:c")
    assert caught.value.cycle == ("urn:t:a", "urn:t:c", "urn:t:b", "urn:t:a")
    assert "urn:t:a -> urn:t:c -> urn:t:b -> urn:t:a" in str(caught.value)
    assert tasks.get("urn:t:a").depends_on == ()  # nothing written
    assert tasks.layers("urn:t:a") == [["urn:t:a"], ["urn:t:b"], ["urn:t:c"]]


def test_two_threads_closing_a_cycle_at_once_cannot_both_succeed(tasks: TaskRegistry) -> None:
    tasks.register("urn:t:a")
    tasks.register("urn:t:b")
    outcomes: list[str] = []

    def link(task: str, dependency: str) -> None:
        try:
            tasks.add_dependency(task, dependency)
            outcomes.append("linked")
        except TaskCycleError:
            outcomes.append("cycle")

    threads = [
        threading.Thread(target=link, args=("urn:t:a", "urn:t:b")),
        threading.Thread(target=link, args=("urn:t:b", "urn:t:a")),
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert sorted(outcomes) == ["cycle", "linked"]
    assert len(tasks.layers("urn:t:a")) == 2


def test_two_handles_closing_a_cycle_cannot_both_succeed(
    shared_coordination_backend: Backend[CoordinationStore],
) -> None:
    one, two = shared_coordination_backend.open(), shared_coordination_backend.open()
    try:
        here, there = TaskRegistry(one), TaskRegistry(two)
        here.register("urn:t:a")
        there.register("urn:t:b")
        here.add_dependency("urn:t:a", "urn:t:b")
        with pytest.raises(TaskCycleError):
            there.add_dependency("urn:t:b", "urn:t:a")  # sees the other handle's edge
        assert there.layers("urn:t:b") == [["urn:t:b"], ["urn:t:a"]]
    finally:
        one.close()
        two.close()


def test_a_task_cannot_depend_on_itself_or_on_its_ancestor(tasks: TaskRegistry) -> None:
    tasks.register("urn:t:p")
    with pytest.raises(TaskCycleError) as caught:
        tasks.add_dependency("urn:t:p", "urn:t:p")
    assert caught.value.cycle == ("urn:t:p", "urn:t:p")
    with pytest.raises(TaskCycleError) as caught:
        tasks.register("urn:t:c", parent="urn:t:p", depends_on=["urn:t:p"])
    assert caught.value.cycle == ("urn:t:c", "urn:t:p", "urn:t:c")
    assert "urn:t:c" not in tasks  # the registration rolled back whole


def test_dependencies_are_added_to_pending_tasks_and_removed(tasks: TaskRegistry) -> None:
    tasks.register("urn:t:a")
    tasks.register("urn:t:b")
    assert tasks.add_dependency("urn:t:b", "urn:t:a").depends_on == ("urn:t:a",)
    assert tasks.add_dependency("urn:t:b", "urn:t:a").revision == 2  # harmless again
    assert tasks.dependents("urn:t:a") == ["urn:t:b"]
    assert tasks.remove_dependency("urn:t:b", "urn:t:a") is True
    assert tasks.get("urn:t:b").revision == 3
    assert tasks.remove_dependency("urn:t:b", "urn:t:a") is False
    assert tasks.get("urn:t:b").revision == 3  # nothing removed, nothing changed
    tasks.start("urn:t:b")
    with pytest.raises(InvalidTransitionError, match="it is running"):
        tasks.add_dependency("urn:t:b", "urn:t:a")


# == tasks: release and GC ======================================================================


def test_a_completed_subtree_is_released_with_its_edges(tasks: TaskRegistry) -> None:
    tasks.register("urn:t:p")
    tasks.register("urn:t:c", parent="urn:t:p")
    tasks.register("urn:t:later", depends_on=["urn:t:c"])
    tasks.start("urn:t:p")
    _finish(tasks, "urn:t:c")
    tasks.complete("urn:t:p")
    assert tasks.release("urn:t:p") == ["urn:t:p", "urn:t:c"]
    assert [t.iri for t in tasks.tasks()] == ["urn:t:later"]
    assert tasks.get("urn:t:later").depends_on == ()
    assert [t.iri for t in tasks.ready()] == ["urn:t:later"]


def test_only_a_completed_finished_unneeded_subtree_is_released(tasks: TaskRegistry) -> None:
    tasks.register("urn:t:p")
    with pytest.raises(InvalidTransitionError, match="'urn:t:p' is pending"):
        tasks.release("urn:t:p")
    tasks.register("urn:t:c", parent="urn:t:p")
    tasks.register("urn:t:waiting", depends_on=["urn:t:c"])
    tasks.start("urn:t:p")
    tasks.fail("urn:t:c")
    tasks.complete("urn:t:p")
    with pytest.raises(InvalidTransitionError, match="'urn:t:waiting' still depends"):
        tasks.release("urn:t:p")
    assert len(tasks.tasks()) == 3


def test_gc_collects_finished_trees_and_keeps_what_is_still_needed(
    tasks: TaskRegistry, clock: FakeClock
) -> None:
    clock.now = 100.0
    tasks.register("urn:t:done")
    tasks.register("urn:t:done/1", parent="urn:t:done")
    tasks.start("urn:t:done")
    _finish(tasks, "urn:t:done/1")
    tasks.complete("urn:t:done")
    tasks.register("urn:t:live")
    tasks.register("urn:t:live/1", parent="urn:t:live")
    tasks.register("urn:t:live/2", parent="urn:t:live")
    _finish(tasks, "urn:t:live/1")
    tasks.fail("urn:t:live/2")
    tasks.register("urn:t:retry-me", depends_on=["urn:t:live/2"])
    clock.now = 150.0
    assert tasks.gc(older_than_s=60) == []
    assert tasks.gc(older_than_s=50) == ["urn:t:done", "urn:t:done/1", "urn:t:live/1"]
    assert sorted(t.iri for t in tasks.tasks()) == [
        "urn:t:live",
        "urn:t:live/2",
        "urn:t:retry-me",
    ]
    assert tasks.gc() == []


# == tasks: the graph mirror ====================================================================


def test_tasks_are_mirrored_into_their_root_s_tasks_area(
    coordination_store: CoordinationStore,
) -> None:
    mirror = RecordingMirror()
    tasks = TaskRegistry(coordination_store, mirror=mirror)
    tasks.register("urn:t:p")
    tasks.register("urn:t:a", parent="urn:t:p")
    tasks.register("urn:t:b", parent="urn:t:p", depends_on=["urn:t:a"])
    task_iri, area, node = mirror.nodes["urn:t:b"]
    assert (task_iri, area) == ("urn:t:p", "tasks")
    assert node["@type"] == "Task"
    assert node["status"] == "pending"
    assert node["parent"] == {"@id": "urn:t:p"}
    assert node["dependsOn"] == [{"@id": "urn:t:a"}]
    _finish(tasks, "urn:t:a")
    assert mirror.nodes["urn:t:a"][2]["status"] == "completed"
    tasks.fail("urn:t:b")
    tasks.start("urn:t:p")
    tasks.complete("urn:t:p")
    tasks.release("urn:t:p")
    assert mirror.nodes == {}


def test_a_failing_mirror_does_not_undo_the_change_and_remirror_repairs(
    coordination_store: CoordinationStore, caplog: pytest.LogCaptureFixture
) -> None:
    tasks = TaskRegistry(coordination_store, mirror=FailingMirror())
    tasks.register("urn:t:a")
    assert "the graph is down" in caplog.text
    assert tasks.get("urn:t:a").status is P
    repaired = RecordingMirror()
    tasks.mirror = repaired
    assert tasks.remirror() == 1
    assert set(repaired.nodes) == {"urn:t:a"}


def test_a_mirrored_registry_refuses_a_name_the_graph_cannot_hold(
    coordination_store: CoordinationStore,
) -> None:
    tasks = TaskRegistry(coordination_store, mirror=RecordingMirror())
    tasks.register("urn:t:known")
    for kwargs in ({"iri": "foo"}, {"parent": "bar"}, {"depends_on": ["urn:t:known", "baz"]}):
        with pytest.raises(InvalidInputError, match="absolute IRI"):
            tasks.register(**{"iri": "urn:t:a", **kwargs})  # type: ignore[arg-type]
    assert [t.iri for t in tasks.tasks()] == ["urn:t:known"]  # nothing written


# == agents: registering ========================================================================


def test_an_agent_registers_idle_with_its_role_and_task(
    agents: AgentRegistry, bus: EventBus, clock: FakeClock
) -> None:
    agent = agents.register("planner", role="plan", task="urn:t:1")
    assert (agent.status, agent.role, agent.task) == (AgentStatus.IDLE, "plan", "urn:t:1")
    assert agent.last_heartbeat == agent.registered_at == clock.now
    assert agent.timeout_s == 30
    assert (agent.operation, agent.incarnation, agent.revision) == (None, 1, 1)
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
    assert (again.last_heartbeat, again.incarnation, again.revision) == (clock.now, 1, 2)
    with pytest.raises(InvalidInputError, match="'a' is live as 'do' on 'urn:t:1'"):
        agents.register("a", role="check", task="urn:t:1")


def test_a_silent_agent_s_name_is_taken_over_and_a_live_one_s_refused_saying_how(
    agents: AgentRegistry, leases: LeaseTable, bus: EventBus, clock: FakeClock
) -> None:
    agents.register("a", role="do", task="urn:t:1")
    leases.try_acquire("urn:n:1", "a", "write")
    clock.now += 10
    refused = (
        r"'a' is live as 'do' on 'urn:t:1' \(its last heartbeat 10\.0 s ago, status Idle\);"
        r" it cannot register as 'plan' on 'urn:t:2'\. Give this agent another name; or wait"
        r" until that agent completes, or falls silent for 30 s .*unregister\('a'\)"
    )
    with pytest.raises(InvalidInputError, match=refused):
        agents.register("a", role="plan", task="urn:t:2")
    assert agents.refusal("a", role="plan", task="urn:t:2") is not None
    assert agents.refusal("a", role="do", task="urn:t:1") is None  # its own: a heartbeat
    assert agents.refusal("b", role="plan", task="urn:t:2") is None
    clock.now += 25  # silent for 35 s, past its 30 s timeout: a crashed process's agent
    assert agents.refusal("a", role="plan", task="urn:t:2") is None
    agent = agents.register("a", role="plan", task="urn:t:2")
    assert (agent.role, agent.task, agent.status, agent.incarnation) == (
        "plan",
        "urn:t:2",
        AgentStatus.IDLE,
        2,
    )
    assert leases.leases("a") == []  # the old incarnation's lease went with it
    lost = bus.recent(EventType.AGENT_LOST)
    assert [(event.source, event.task_iri) for event in lost] == [("a", "urn:t:1")]


def test_agents_are_listed_by_task_role_and_status(agents: AgentRegistry) -> None:
    agents.register("p", role="plan", task="urn:t:1")
    agents.register("d", role="do", task="urn:t:1")
    agents.register("x", role="do", task="urn:t:2", heartbeat_timeout_s=5)
    agents.set_status("d", "working", operation="compiling")
    assert [a.name for a in agents.agents()] == ["d", "p", "x"]
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
def test_bad_registrations_of_agents_are_refused_naming_the_value(
    agents: AgentRegistry, kwargs: dict[str, Any], named: str
) -> None:
    request = {"name": "a", "role": "do", "task": "urn:t:1", **kwargs}
    with pytest.raises(InvalidInputError, match=named):
        agents.register(**request)
    assert agents.agents() == []


def test_an_unknown_agent_or_status_is_refused(agents: AgentRegistry) -> None:
    with pytest.raises(AgentNotFoundError, match="'ghost'"):
        agents.heartbeat("ghost")
    with pytest.raises(AgentNotFoundError, match="'ghost'"):
        agents.get("ghost")
    agents.register("a", role="do", task="urn:t:1")
    with pytest.raises(InvalidInputError, match="'Sleeping'"):
        agents.set_status("a", "Sleeping")
    with pytest.raises(InvalidInputError, match="operation must be a string"):
        agents.heartbeat("a", operation=3)  # type: ignore[arg-type]


# == agents: statuses ===========================================================================


def test_the_transition_table_lets_live_agents_move_and_keeps_finished_ones() -> None:
    assert {AgentStatus.IDLE, AgentStatus.WORKING, AgentStatus.WAITING} == LIVE
    for status in AgentStatus:
        expected = set(AgentStatus) if status in LIVE else set()
        assert set(AGENT_TRANSITIONS[status]) == expected


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
    assert (again.revision, again.operation) == (1, None)


def test_agent_status_changes_are_published(agents: AgentRegistry, bus: EventBus) -> None:
    agents.register("a", role="do", task="urn:t:1")
    agents.set_status("a", AgentStatus.WORKING, operation="step 1")
    agents.heartbeat("a", operation="step 2")  # no change of status, no event
    agents.heartbeat("a", status="Waiting")
    changes = [e.payload for e in bus.recent(EventType.AGENT_STATUS_CHANGED)]
    assert changes == [
        {"name": "a", "previous": "Idle", "status": "Working", "operation": "step 1"},
        {"name": "a", "previous": "Working", "status": "Waiting", "operation": "step 2"},
    ]
    assert agents.get("a").revision == 4


# == agents: heartbeats and leases ==============================================================


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


def test_a_registry_refuses_leases_of_another_store(
    coordination_backend: Backend[CoordinationStore],
) -> None:
    one, other = coordination_backend.open(), coordination_backend.open()
    try:
        with pytest.raises(InvalidInputError, match="LeaseTable"):
            AgentRegistry(one, leases=LeaseTable(other))
    finally:
        one.close()
        other.close()


# == agents: the sweeper ========================================================================


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


def test_an_agent_swept_by_another_handle_learns_it_was_lost(
    shared_coordination_backend: Backend[CoordinationStore], clock: FakeClock
) -> None:
    here, there = shared_coordination_backend.open(), shared_coordination_backend.open()
    try:
        mine, theirs = AgentRegistry(here, leases=LeaseTable(here)), AgentRegistry(there)
        mine.register("a", role="do", task="urn:t:1")
        clock.now += 20
        mine.heartbeat("a")
        clock.now += 20
        assert theirs.sweep() == []  # the beat of the other handle counts
        clock.now += 20
        assert [agent.name for agent in theirs.sweep()] == ["a"]
        with pytest.raises(InvalidTransitionError, match="register it again"):
            mine.heartbeat("a")
        assert mine.register("a", role="do", task="urn:t:1").incarnation == 2
    finally:
        here.close()
        there.close()


@pytest.mark.coordination_config(sweep_interval_s=0.01)
def test_the_sweeper_thread_starts_with_the_first_agent_and_stops_with_close(
    coordination_store: CoordinationStore, clock: FakeClock
) -> None:
    bus = EventBus()
    lost = threading.Event()
    bus.subscribe(lambda event: lost.set(), [EventType.AGENT_LOST])
    agents = AgentRegistry(coordination_store, leases=LeaseTable(coordination_store), bus=bus)
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


@pytest.mark.coordination_config(sweep_interval_s=0.01)
def test_the_sweeper_stops_quietly_when_the_store_closes(
    coordination_backend: Backend[CoordinationStore], caplog: pytest.LogCaptureFixture
) -> None:
    store = coordination_backend.open()
    agents = AgentRegistry(store)
    agents.register("a", role="do", task="urn:t:1")
    store.close()
    assert agents._sweeper is not None
    agents._sweeper.join(30)
    assert not agents.sweeper_running
    assert "sweeper failed" not in caplog.text


@pytest.mark.coordination_config(**CoordinationConfig().model_dump())  # every default
def test_the_default_heartbeat_timeout_is_thirty_seconds(
    coordination_store: CoordinationStore,
) -> None:
    assert CoordinationConfig().heartbeat_timeout_s == 30.0
    agents = AgentRegistry(coordination_store)
    try:
        assert agents.register("a", role="do", task="urn:t:1").timeout_s == 30.0
    finally:
        agents.close()


# == agents: the graph mirror ===================================================================


def test_agents_are_mirrored_into_their_task_s_agents_area(
    coordination_store: CoordinationStore, clock: FakeClock
) -> None:
    mirror = RecordingMirror()
    agents = AgentRegistry(coordination_store, mirror=mirror)
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
    agents.heartbeat("planner-1")  # no operation said: the last one stands
    assert mirror.nodes[iri][2]["operation"] == "planning"
    agents.unregister("planner-1")
    assert mirror.nodes == {}
    assert agents.unregister("planner-1") is False


def test_agent_iris_are_escaped() -> None:
    assert agent_iri("a<b>") == "urn:gliding-horse:agent:a%3Cb%3E"


def test_unregistering_forgets_the_agent_and_releases_its_leases(
    agents: AgentRegistry, leases: LeaseTable
) -> None:
    agents.register("a", role="do", task="urn:t:1")
    leases.try_acquire("urn:n:1", "a", "write")
    assert agents.unregister("a") is True
    assert leases.leases("a") == []
    with pytest.raises(AgentNotFoundError):
        agents.get("a")


# == the four registries together ===============================================================


def test_coordination_wires_the_registries_over_one_store(
    coordination_backend: Backend[CoordinationStore], clock: FakeClock
) -> None:
    mirror = RecordingMirror()
    with Coordination(coordination_backend.open(), mirror=mirror) as coordination:
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


def test_coordination_leaves_a_borrowed_store_open(coordination_store: CoordinationStore) -> None:
    Coordination(coordination_store, owns_db=False).close()
    assert not coordination_store.closed


# == messages ===================================================================================


def test_messages_are_read_back_in_order_after_a_cursor(
    messages: MessageBoard, clock: FakeClock
) -> None:
    first = messages.publish("progress", {"done": 1}, task="urn:t:1", sender="do-1")
    second = messages.publish("resource-request", {"iri": "urn:n:1"}, task="urn:t:1")
    messages.publish("progress", {"done": 2}, task="urn:t:2")
    assert first.sequence < second.sequence
    assert [m.payload for m in messages.read_since()] == [
        {"done": 1},
        {"iri": "urn:n:1"},
        {"done": 2},
    ]
    assert messages.read_since(first.sequence)[0] == second
    assert [m.payload["done"] for m in messages.read_since(topic="progress")] == [1, 2]
    assert [m.topic for m in messages.read_since(task="urn:t:1")] == [
        "progress",
        "resource-request",
    ]
    assert messages.read_since(0, topic="progress", task="urn:t:2")[0].payload == {"done": 2}
    assert (first.sender, first.task, first.iri[:9]) == ("do-1", "urn:t:1", "urn:uuid:")
    assert (second.sender, first.created_at) == (None, clock.now)
    assert messages.latest() == messages.read_since()[-1].sequence


def test_a_payload_reads_back_as_it_was_published(messages: MessageBoard) -> None:
    payload = {"text": "naïve ☃ 𝄞", "n": [1, 2.5, None, True], "nested": {"a": {"b": "c"}}}
    message = messages.publish("unicode", payload)
    [stored] = messages.read_since()
    assert stored == message
    assert stored.payload == payload


def test_there_is_no_cap_but_the_caller_s_limit(messages: MessageBoard) -> None:
    for index in range(120):  # the reference stopped at 50
        messages.publish("tick", {"i": index})
    assert [m.payload["i"] for m in messages.read_since()] == list(range(120))
    page = messages.read_since(limit=50)
    rest = messages.read_since(page[-1].sequence)
    assert len(page) == 50
    assert [m.payload["i"] for m in page + rest] == list(range(120))


def test_pruning_deletes_up_to_a_sequence(messages: MessageBoard) -> None:
    sequences = [messages.publish("t", {"i": i}).sequence for i in range(4)]
    assert messages.prune(sequences[1]) == 2
    assert [m.sequence for m in messages.read_since()] == sequences[2:]
    assert messages.prune(sequences[1]) == 0
    assert messages.latest() == sequences[-1]


def test_messages_from_another_handle_are_read_in_order(
    shared_coordination_backend: Backend[CoordinationStore],
) -> None:
    one, two = shared_coordination_backend.open(), shared_coordination_backend.open()
    try:
        here, there = MessageBoard(one), MessageBoard(two)
        sent = [(here if i % 2 else there).publish("mixed", {"i": i}).sequence for i in range(6)]
        assert sent == sorted(sent)
        assert [m.payload["i"] for m in here.read_since()] == list(range(6))
        assert there.latest() == here.latest() == sent[-1]
    finally:
        one.close()
        two.close()


_PUBLISHER = textwrap.dedent(
    """
    from gliding_core.blackboard.coordination.messages import MessageBoard
    board = MessageBoard(open_backend())
    for i in range(20):
        board.publish("remote", {"i": i}, sender="child")
    """
)


def test_messages_from_another_process_are_read_in_order(
    shared_coordination_backend: Backend[CoordinationStore],
) -> None:
    store = shared_coordination_backend.open()
    try:
        board = MessageBoard(store)
        board.publish("local", {"i": -1})
        child = run_child(shared_coordination_backend, _PUBLISHER)
        child.communicate(timeout=120)
        assert child.returncode == 0
        remote = board.read_since(topic="remote")
    finally:
        store.close()
    assert [m.payload["i"] for m in remote] == list(range(20))
    assert all(m.sender == "child" for m in remote)


_ENDLESS_PUBLISHER = textwrap.dedent(
    """
    from gliding_core.blackboard.coordination.messages import MessageBoard
    board = MessageBoard(open_backend())
    i = 0
    while True:
        message = board.publish("work", {"i": i})
        print(message.sequence, flush=True)
        i += 1
    """
)


def test_every_message_whose_publish_returned_survives_a_sigkill(
    shared_coordination_backend: Backend[CoordinationStore],
) -> None:
    shared_coordination_backend.open().close()  # create the storage once
    child = run_child(shared_coordination_backend, _ENDLESS_PUBLISHER)
    assert child.stdout is not None
    returned = [int(child.stdout.readline()) for _ in range(200)]
    child.send_signal(signal.SIGKILL)
    child.wait(30)
    child.stdout.close()
    store = shared_coordination_backend.open()
    try:
        stored = [m.sequence for m in MessageBoard(store).read_since()]
    finally:
        store.close()
    assert stored[: len(returned)] == returned  # none lost, in order, none invented before


def test_subscribers_get_the_messages_of_their_topic_and_task(messages: MessageBoard) -> None:
    everything: list[Message] = []
    progress_of_1: list[Message] = []
    messages.subscribe(everything.append)
    subscription = messages.subscribe(progress_of_1.append, topic="progress", task="urn:t:1")
    messages.publish("progress", {"n": 1}, task="urn:t:1")
    messages.publish("progress", {"n": 2}, task="urn:t:2")
    messages.publish("other", {"n": 3}, task="urn:t:1")
    subscription.cancel()
    messages.publish("progress", {"n": 4}, task="urn:t:1")
    assert [m.payload["n"] for m in everything] == [1, 2, 3, 4]
    assert [m.payload["n"] for m in progress_of_1] == [1]
    assert everything == messages.read_since()


def test_messages_are_pushed_on_the_memory_s_bus(coordination_store: CoordinationStore) -> None:
    bus = EventBus()
    board = MessageBoard(coordination_store, bus=bus)
    received: list[Message] = []
    board.subscribe(received.append)
    bus.publish(EventType.COORDINATION_MESSAGE, {"text": "not from a board"})
    message = board.publish("hello", {"x": 1}, task="urn:t:1", sender="plan-1")
    event = bus.recent(EventType.COORDINATION_MESSAGE)[-1]
    assert (event.task_iri, event.source) == ("urn:t:1", "plan-1")
    assert Message(**event.payload) == message
    assert received == [message]


def test_pushes_follow_the_sequence_order_across_threads(messages: MessageBoard) -> None:
    seen: list[int] = []
    messages.subscribe(lambda m: seen.append(m.sequence))

    def publish_many(name: str) -> None:
        for index in range(50):
            messages.publish("race", {"i": index}, sender=name)

    threads = [threading.Thread(target=publish_many, args=(f"t{n}",)) for n in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert seen == sorted(seen)
    assert len(seen) == 200


def test_a_subscriber_may_reply_and_a_failing_one_is_logged(
    messages: MessageBoard, caplog: pytest.LogCaptureFixture
) -> None:
    def reply(message: Message) -> None:
        if message.topic == "question":
            messages.publish("answer", {"to": message.sequence})

    def broken(message: Message) -> None:
        raise RuntimeError("subscriber bug")

    messages.subscribe(reply)
    messages.subscribe(broken)
    question = messages.publish("question")
    assert messages.read_since(question.sequence)[0].payload == {"to": question.sequence}
    assert "subscriber bug" in caplog.text


def test_messages_about_a_task_are_mirrored_into_its_messages_area(
    coordination_store: CoordinationStore,
) -> None:
    mirror = RecordingMirror()
    board = MessageBoard(coordination_store, mirror=mirror)
    board.publish("no-task", {"a": 1})
    message = board.publish("progress", {"b": [1, 2]}, task="urn:t:1", sender="do-1")
    assert len(mirror.calls) == 1
    task_iri, area, [node] = mirror.calls[0]
    assert (task_iri, area) == ("urn:t:1", "messages")
    assert node["@id"] == message.iri
    assert node["@type"] == "CoordinationMessage"
    assert node["payloadJson"] == '{"b": [1, 2]}'
    assert node["task"] == {"@id": "urn:t:1"}


def test_a_mirrored_board_refuses_a_task_the_graph_cannot_hold(
    coordination_store: CoordinationStore,
) -> None:
    mirror = RecordingMirror()
    board = MessageBoard(coordination_store, mirror=mirror)
    with pytest.raises(InvalidInputError, match=r"absolute IRI.*'t1'"):
        board.publish("progress", {"b": 1}, task="t1")
    assert board.read_since(0) == []  # nothing stored
    assert mirror.calls == []
    unmirrored = MessageBoard(coordination_store)  # no graph: a task is any name without spaces
    assert unmirrored.publish("progress", task="t1").task == "t1"


@pytest.mark.parametrize(
    ("kwargs", "named"),
    [
        ({"topic": ""}, "topic"),
        ({"topic": "two words"}, "'two words'"),
        ({"payload": [1, 2]}, r"\[1, 2\]"),
        ({"payload": {"x": float("nan")}}, "nan"),
        ({"payload": {"x": object()}}, "not JSON-serialisable"),
        ({"payload": {"x": "\ud800"}}, "surrogate"),
        ({"task": ""}, "task IRI"),
        ({"sender": 1}, "1"),
    ],
)
def test_bad_messages_are_refused_naming_the_value(
    messages: MessageBoard, kwargs: dict[str, Any], named: str
) -> None:
    request: dict[str, Any] = {"topic": "t", "payload": {}, **kwargs}
    with pytest.raises(InvalidInputError, match=named):
        messages.publish(**request)
    assert messages.read_since() == []


def test_a_payload_over_the_limit_is_refused(messages: MessageBoard) -> None:
    with pytest.raises(ContentTooLargeError, match="over the limit of 1000"):
        messages.publish("big", {"text": "x" * 1_000})
    assert messages.latest() == 0


@pytest.mark.parametrize(
    "kwargs", [{"cursor": -1}, {"cursor": "3"}, {"limit": 0}, {"limit": True}, {"topic": ""}]
)
def test_bad_reads_are_refused(messages: MessageBoard, kwargs: dict[str, Any]) -> None:
    with pytest.raises(InvalidInputError):
        messages.read_since(**kwargs)


def test_bad_subscriptions_and_prunes_are_refused(messages: MessageBoard) -> None:
    with pytest.raises(InvalidInputError, match="callable"):
        messages.subscribe("print")  # type: ignore[arg-type]
    with pytest.raises(InvalidInputError, match="up_to"):
        messages.prune(-1)
