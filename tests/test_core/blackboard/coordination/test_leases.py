"""Leases: compatibility, TTL, re-entrancy, fencing, waits, and processes that crash."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import textwrap
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from gliding_core.blackboard.coordination.leases import (
    COMPATIBLE,
    STRENGTH,
    Lease,
    LeaseMode,
    LeaseTable,
)
from gliding_core.blackboard.coordination.sqlite import CoordinationDB
from gliding_core.bus import EventBus, EventType
from gliding_core.cli.benchmarks.leases import contended_grants, lease_benchmark
from gliding_core.config import CoordinationConfig
from gliding_core.errors import (
    ClosedError,
    FencingTokenError,
    InvalidInputError,
    LeaseConflictError,
    LeaseNotHeldError,
    LeaseTimeoutError,
    StorageError,
)

R, W, X = LeaseMode.READ, LeaseMode.WRITE, LeaseMode.EXCLUSIVE


class FakeClock:
    """A wall clock that moves only when told."""

    def __init__(self, now: float = 1_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def db(tmp_path: Path, clock: FakeClock) -> Iterator[CoordinationDB]:
    with CoordinationDB(tmp_path / "blackboard.sqlite3", clock=clock) as value:
        yield value


@pytest.fixture
def leases(db: CoordinationDB) -> LeaseTable:
    return LeaseTable(db)


# -- the compatibility table -------------------------------------------------------------------


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


def test_other_resources_do_not_conflict(leases: LeaseTable) -> None:
    leases.try_acquire("urn:r1", "a", X)
    assert leases.try_acquire("urn:r2", "b", X).holder == "b"


# -- re-entrancy, upgrades and release ---------------------------------------------------------


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


# -- TTL, renewal, expiry ----------------------------------------------------------------------


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


# -- fencing -----------------------------------------------------------------------------------


def test_the_newest_holder_s_token_passes_the_fence(leases: LeaseTable) -> None:
    lease = leases.try_acquire("urn:n", "a", W)
    leases.check_fence("urn:n", "a", lease.token)
    assert leases.newest_token("urn:n") == lease.token


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


def test_tokens_increase_across_connections_to_one_file(tmp_path: Path) -> None:
    path = tmp_path / "blackboard.sqlite3"
    with CoordinationDB(path) as one, CoordinationDB(path) as two:
        first, second = LeaseTable(one), LeaseTable(two)
        tokens = []
        for index in range(6):
            table = first if index % 2 else second
            tokens.append(table.try_acquire(f"urn:r{index}", "a", W).token)
        assert tokens == sorted(set(tokens))
        with pytest.raises(LeaseConflictError):
            second.try_acquire("urn:r1", "b", W)  # granted through the other connection


# -- waiting -----------------------------------------------------------------------------------


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


# -- validation and lifecycle ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "named"),
    [
        ({"resource": ""}, "resource"),
        ({"resource": "has space"}, "'has space'"),
        ({"resource": 7}, "7"),
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


def test_a_closed_database_refuses_leases(tmp_path: Path) -> None:
    db = CoordinationDB(tmp_path / "c.sqlite3")
    leases = LeaseTable(db)
    db.close()
    db.close()
    with pytest.raises(ClosedError):
        leases.try_acquire("urn:r", "a")


def test_a_database_that_is_not_sqlite_is_a_storage_error(tmp_path: Path) -> None:
    path = tmp_path / "c.sqlite3"
    path.write_bytes(b"not a database, just some bytes" * 100)
    with pytest.raises(StorageError, match="coordination"):
        LeaseTable(CoordinationDB(path))


def test_the_in_memory_database_works_the_same() -> None:
    with CoordinationDB() as db:
        leases = LeaseTable(db)
        leases.try_acquire("urn:r", "a", X)
        with pytest.raises(LeaseConflictError):
            leases.try_acquire("urn:r", "b", R)


def test_a_db_that_is_not_a_coordination_db_is_refused() -> None:
    with pytest.raises(InvalidInputError, match="CoordinationStore"):
        LeaseTable("blackboard.sqlite3")  # type: ignore[arg-type]


# -- the coordination database ----------------------------------------------------------------


def test_a_failed_nested_write_rolls_back_only_itself(db: CoordinationDB) -> None:
    db.ensure_schema("CREATE TABLE IF NOT EXISTS probe (value TEXT);")

    def insert_then_fail(value: str) -> None:
        with db.write(f"inserting {value}") as tx:
            tx.connection.execute("INSERT INTO probe VALUES (?)", (value,))
            raise KeyError(value)

    with db.write("outer") as tx:
        tx.connection.execute("INSERT INTO probe VALUES ('outer')")
        with pytest.raises(KeyError):
            insert_then_fail("inner")  # a savepoint of the outer write
    with pytest.raises(KeyError):
        insert_then_fail("lost")
    with db.read("reading") as tx:
        assert tx.connection.execute("SELECT value FROM probe").fetchall() == [("outer",)]


def test_a_bad_statement_is_a_storage_error_and_leaves_no_transaction(db: CoordinationDB) -> None:
    with (
        pytest.raises(StorageError, match="doing the impossible"),
        db.write("doing the impossible") as tx,
    ):
        tx.connection.execute("INSERT INTO no_such_table VALUES (1)")
    with db.write("then something else") as tx:
        tx.connection.execute("SELECT 1")


def test_the_database_of_a_directory_and_bad_arguments(tmp_path: Path) -> None:
    with CoordinationDB.in_directory(tmp_path) as db:
        assert db.path == str(tmp_path / "blackboard.sqlite3")
        assert "blackboard.sqlite3" in repr(db)
    with CoordinationDB.in_directory(None) as db:
        assert db.path is None
    with pytest.raises(InvalidInputError, match="path"):
        CoordinationDB(42)  # type: ignore[arg-type]
    with pytest.raises(InvalidInputError, match="clock"):
        CoordinationDB(clock=1.0)  # type: ignore[arg-type]
    closed = CoordinationDB()
    closed.close()
    with pytest.raises(ClosedError), closed.read("reading"):
        pass


# -- processes ---------------------------------------------------------------------------------

_HOLDER = textwrap.dedent(
    """
    import sys, time
    from gliding_core.blackboard.coordination.sqlite import CoordinationDB
    from gliding_core.blackboard.coordination.leases import LeaseTable
    table = LeaseTable(CoordinationDB(sys.argv[1]))
    lease = table.try_acquire("urn:shared", "child", "exclusive", ttl_s=float(sys.argv[2]))
    print(lease.token, flush=True)
    while True:  # a live holder: it renews well inside its TTL, until it is killed
        time.sleep(0.05)
        table.renew("urn:shared", "child")
    """
)


def test_a_sigkilled_holder_s_lease_expires_and_the_waiter_gets_it(tmp_path: Path) -> None:
    path = tmp_path / "blackboard.sqlite3"
    with CoordinationDB(path) as db:
        leases = LeaseTable(db)
        child = subprocess.Popen(
            [sys.executable, "-c", _HOLDER, str(path), "2.0"],
            stdout=subprocess.PIPE,
            text=True,
            env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
        )
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
        [lease] = granted
        assert lease.token > child_token
        leases.check_fence("urn:shared", "parent", lease.token)
        with pytest.raises(FencingTokenError):
            leases.check_fence("urn:shared", "child", child_token)


_COUNTER = textwrap.dedent(
    """
    import sys
    from pathlib import Path
    from gliding_core.blackboard.coordination.sqlite import CoordinationDB
    from gliding_core.blackboard.coordination.leases import LeaseTable
    db_path, counter, name, rounds = sys.argv[1], Path(sys.argv[2]), sys.argv[3], int(sys.argv[4])
    table = LeaseTable(CoordinationDB(db_path))
    tokens = []
    for _ in range(rounds):
        with table.hold("urn:counter", name, "exclusive", timeout_s=120) as lease:
            counter.write_text(str(int(counter.read_text()) + 1))  # a read-modify-write
            tokens.append(lease.token)
    print(" ".join(map(str, tokens)))
    """
)


def test_exclusive_leases_serialise_processes_and_tokens_never_repeat(tmp_path: Path) -> None:
    path, counter = tmp_path / "blackboard.sqlite3", tmp_path / "counter.txt"
    counter.write_text("0")
    LeaseTable(CoordinationDB(path)).db.close()  # create the tables once
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    children = [
        subprocess.Popen(
            [sys.executable, "-c", _COUNTER, str(path), str(counter), f"p{n}", "25"],
            stdout=subprocess.PIPE,
            text=True,
            env=env,
        )
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


# -- the state machine -------------------------------------------------------------------------

AGENTS = ("a", "b", "c")
RESOURCES = ("urn:r1", "urn:r2")
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
    incompatible one is made.
    """

    def __init__(self) -> None:
        super().__init__()
        self.clock = FakeClock()
        self.db = CoordinationDB(clock=self.clock, config=CoordinationConfig(lease_ttl_s=TTL))
        self.leases = LeaseTable(self.db)
        self.model: dict[str, dict[str, Held]] = {r: {} for r in RESOURCES}
        self.crashed: set[str] = set()
        self.last_token = 0

    def teardown(self) -> None:
        self.db.close()

    def _live(self, resource: str) -> dict[str, Held]:
        now = self.clock.now
        self.model[resource] = {h: v for h, v in self.model[resource].items() if v.expires_at > now}
        return self.model[resource]

    @rule(
        agent=st.sampled_from(AGENTS),
        resource=st.sampled_from(RESOURCES),
        mode=st.sampled_from(list(LeaseMode)),
    )
    def acquire(self, agent: str, resource: str, mode: LeaseMode) -> None:
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
        assert not blocking, f"{agent} got {mode} on {resource} beside {blocking}"
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

    @rule(agent=st.sampled_from(AGENTS), resource=st.sampled_from(RESOURCES))
    def release(self, agent: str, resource: str) -> None:
        if agent in self.crashed:
            return
        own = self._live(resource).get(agent)
        assert self.leases.release(resource, agent) is (own is not None)
        if own is not None:
            own.depth -= 1
            if own.depth == 0:
                del self.model[resource][agent]

    @rule(agent=st.sampled_from(AGENTS))
    def heartbeat(self, agent: str) -> None:
        if agent in self.crashed:
            return
        renewed = 0
        for resource in RESOURCES:
            own = self._live(resource).get(agent)
            if own is not None:
                own.expires_at = self.clock.now + TTL
                renewed += 1
        assert self.leases.renew_all(agent) == renewed

    @rule(agent=st.sampled_from(AGENTS))
    def crash(self, agent: str) -> None:
        self.crashed.add(agent)  # its leases stay until they expire

    @rule(agent=st.sampled_from(AGENTS))
    def restart(self, agent: str) -> None:
        self.crashed.discard(agent)

    @rule(seconds=st.sampled_from([0.5, 3.0, 10.0, 25.0]))
    def wait(self, seconds: float) -> None:
        self.clock.advance(seconds)

    @rule(agent=st.sampled_from(AGENTS), resource=st.sampled_from(RESOURCES))
    def fence(self, agent: str, resource: str) -> None:
        own = self._live(resource).get(agent)
        newest = self.leases.newest_token(resource)
        if own is not None and own.mode in (W, X) and own.token == newest:
            self.leases.check_fence(resource, agent, own.token)
        elif newest is not None:
            with pytest.raises(FencingTokenError):
                self.leases.check_fence(resource, agent, newest if own is None else own.token)

    @invariant()
    def holders_are_compatible_and_match_the_model(self) -> None:
        for resource in RESOURCES:
            held = self.leases.holders(resource)
            for one in held:
                for other in held:
                    if one.holder != other.holder:
                        assert COMPATIBLE[one.mode, other.mode], (one, other)
            assert {(lease.holder, lease.mode, lease.depth) for lease in held} == {
                (h, v.mode, v.depth) for h, v in self._live(resource).items()
            }


TestLeaseMachine = LeaseMachine.TestCase
TestLeaseMachine.settings = settings(max_examples=60, stateful_step_count=40, deadline=None)


# -- the benchmark -----------------------------------------------------------------------------


def test_the_lease_benchmark_reports_its_three_figures(tmp_path: Path) -> None:
    figures = lease_benchmark(tmp_path, processes=2, seconds=0.2, samples=20)
    assert set(figures) == {
        "acquire_release_p50_ms",
        "acquire_release_p95_ms",
        "contended_grants_per_s",
    }
    assert 0 < figures["acquire_release_p50_ms"] <= figures["acquire_release_p95_ms"]
    assert figures["contended_grants_per_s"] > 0
    with CoordinationDB(tmp_path / "blackboard.sqlite3") as db:
        assert LeaseTable(db).leases() == []  # every grant was released


def test_a_failing_benchmark_process_is_reported_with_its_error(tmp_path: Path) -> None:
    with pytest.raises(StorageError, match="lease benchmark process failed"):
        contended_grants(tmp_path / "missing" / "blackboard.sqlite3", 1, 0.1)


@pytest.mark.parametrize(
    "kwargs", [{"processes": 0}, {"samples": True}, {"seconds": 0}, {"seconds": "1"}]
)
def test_the_lease_benchmark_refuses_bad_arguments(
    tmp_path: Path, kwargs: dict[str, object]
) -> None:
    with pytest.raises(InvalidInputError):
        lease_benchmark(tmp_path, **kwargs)  # type: ignore[arg-type]


@pytest.mark.stress
class TestLeaseMachineAtLength(LeaseMachine.TestCase):
    """The same machine with many more and longer runs (``pytest -m stress``)."""

    settings = settings(max_examples=1_000, stateful_step_count=80, deadline=None)


# -- voided leases -----------------------------------------------------------------------------


def test_a_grant_ends_the_conflicting_leases_it_voids_and_only_when_it_is_made(
    db: CoordinationDB,
) -> None:
    bus = EventBus()
    leases = LeaseTable(db, bus=bus)
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
