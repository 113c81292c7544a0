"""Leases across OS processes on one PostgreSQL database: at most one Write holder, a killed
worker's lease expires and its token is fenced, a paused worker's stale token is refused.

The contract suite (``tests/test_core/contracts/test_coordination_store.py``) runs every lease
rule on PostgreSQL with two handles and one child at a time; here three processes share one
schema at once, each with its own pool, on the server's clock (the store's default), as the
workers of a fleet would.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from gliding_core.blackboard.coordination.leases import LeaseMode, LeaseTable
from gliding_core.blackboard.coordination.postgres import PostgresCoordinationStore
from gliding_core.errors import FencingTokenError
from tests.test_core.contracts.conftest import TEST_DATABASE_URL

RESOURCE = "urn:node:shared"

_WORKER = textwrap.dedent(
    """
    import os, sys, threading, time
    from pathlib import Path
    from gliding_core.blackboard.coordination.leases import LeaseTable
    from gliding_core.blackboard.coordination.postgres import PostgresCoordinationStore
    from gliding_core.errors import FencingTokenError, LeaseNotHeldError
    RESOURCE = "urn:node:shared"
    schema, name, mode = sys.argv[1], sys.argv[2], sys.argv[3]
    store = PostgresCoordinationStore.open(os.environ["GLIDING_TEST_DATABASE_URL"], schema=schema)
    table = LeaseTable(store)

    def renewing():  # a live holder renews well inside its TTL, until it cannot
        while True:
            time.sleep(0.05)
            try:
                table.renew(RESOURCE, name)
            except LeaseNotHeldError:
                return

    if mode == "hold":  # take the lease, keep it alive, wait to be told to write
        lease = table.try_acquire(RESOURCE, name, "write", ttl_s=float(sys.argv[4]))
        threading.Thread(target=renewing, daemon=True).start()
        print(lease.token, flush=True)
        sys.stdin.readline()
        try:
            table.check_fence(RESOURCE, name, lease.token)  # the guard of a write
            print("written", flush=True)
        except FencingTokenError as error:
            print("fenced", error.newest, flush=True)
    else:  # count: read-modify-write a file under the lease, round after round
        counter, rounds = Path(sys.argv[4]), int(sys.argv[5])
        print("ready", flush=True)
        tokens = []
        for _ in range(rounds):
            with table.hold(RESOURCE, name, "write", timeout_s=120) as lease:
                table.check_fence(RESOURCE, name, lease.token)
                value = int(counter.read_text())
                time.sleep(0.005)  # widen the window a second holder would fall into
                counter.write_text(str(value + 1))
                tokens.append(lease.token)
        print(" ".join(map(str, tokens)), flush=True)
    store.close()
    """
)


@pytest.fixture
def schema(postgres_schema: str) -> str:
    """A schema of the test's own (``tests/conftest.py`` drops it after the test)."""
    return postgres_schema


@pytest.fixture
def spawn(postgres_url: str, schema: str) -> Iterator[_Spawner]:
    spawner = _Spawner(postgres_url, schema)
    yield spawner
    spawner.reap()


class _Spawner:
    """Starts worker processes on the test's schema (the URL travels in the environment)."""

    def __init__(self, url: str, schema: str) -> None:
        self.env = {**os.environ, TEST_DATABASE_URL: url}
        self.schema = schema
        self.children: list[subprocess.Popen[str]] = []

    def __call__(self, name: str, *args: str) -> subprocess.Popen[str]:
        child = subprocess.Popen(
            [sys.executable, "-c", _WORKER, self.schema, name, *args],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=self.env,
        )
        self.children.append(child)
        return child

    def reap(self) -> None:
        for child in self.children:
            if child.poll() is None:
                child.send_signal(signal.SIGCONT)
                child.kill()
            child.communicate(timeout=30)


def line(child: subprocess.Popen[str]) -> str:
    assert child.stdout is not None
    return child.stdout.readline().strip()


def writers(leases: LeaseTable) -> list[str]:
    """The live Write or Exclusive holders of the shared resource, as the database says now."""
    return [lease.holder for lease in leases.holders(RESOURCE) if lease.mode is not LeaseMode.READ]


def test_three_processes_one_holder_at_a_time_and_a_killed_holder_is_fenced(
    postgres_url: str, schema: str, spawn: _Spawner, tmp_path: Path
) -> None:
    counter = tmp_path / "counter.txt"
    counter.write_text("0")
    store = PostgresCoordinationStore.open(postgres_url, schema=schema)
    try:
        leases = LeaseTable(store)
        holder = spawn("holder", "hold", "2.0")
        killed_token = int(line(holder))
        counters = [spawn(f"counter-{n}", "count", str(counter), "15") for n in range(2)]
        assert [line(child) for child in counters] == ["ready", "ready"]
        assert writers(leases) == ["holder"]  # both counters are waiting on it
        holder.send_signal(signal.SIGKILL)
        holder.wait(30)
        outputs: list[str] = []
        done = threading.Thread(target=lambda: outputs.extend(line(c) for c in counters))
        done.start()
        samples = 0
        while done.is_alive():  # sample the holders while the two counters contend
            assert len(writers(leases)) <= 1
            samples += 1
            done.join(0.01)
        assert [child.wait(60) for child in counters] == [0, 0]
        assert counter.read_text() == "30"  # no increment lost: never two holders at once
        tokens = [[int(token) for token in output.split()] for output in outputs]
        everything = [token for mine in tokens for token in mine]
        assert len(everything) == len(set(everything)) == 30
        assert all(mine == sorted(mine) for mine in tokens)
        assert min(everything) > killed_token  # granted after the killed holder's lease
        with pytest.raises(FencingTokenError):
            leases.check_fence(RESOURCE, "holder", killed_token)
        assert writers(leases) == []
        assert samples >= 1
    finally:
        store.close()


def test_a_paused_holder_s_stale_token_is_refused_once_another_process_holds(
    postgres_url: str, schema: str, spawn: _Spawner
) -> None:
    store = PostgresCoordinationStore.open(postgres_url, schema=schema)
    try:
        leases = LeaseTable(store)
        paused = spawn("paused", "hold", "1.0")
        stale = int(line(paused))
        paused.send_signal(signal.SIGSTOP)  # a long pause: no renewals, its lease lapses
        successor = leases.acquire(RESOURCE, "successor", "write", timeout_s=120)
        assert successor.token > stale
        paused.send_signal(signal.SIGCONT)
        assert paused.stdin is not None
        paused.stdin.write("write now\n")
        paused.stdin.flush()
        assert line(paused).split() == ["fenced", str(successor.token)]
        assert paused.wait(60) == 0
        leases.check_fence(RESOURCE, "successor", successor.token)  # the new holder writes
        assert writers(leases) == ["successor"]
    finally:
        store.close()


_STOPPED_WRITER = textwrap.dedent(
    """
    import os, signal, sys
    from gliding_core.blackboard.coordination.postgres import PostgresCoordinationStore
    from gliding_core.config import CoordinationConfig
    store = PostgresCoordinationStore.open(
        os.environ["GLIDING_TEST_DATABASE_URL"],
        schema=sys.argv[1],
        config=CoordinationConfig(busy_timeout_ms=2_000),
    )
    with store.write("stopping inside a write") as tx:
        tx.tasks.insert("urn:task:never", parent=None, root="urn:task:never", now=tx.now())
        print("inside", flush=True)
        os.kill(os.getpid(), signal.SIGSTOP)  # stopped holding the storage's write lock
    """
)


def test_a_process_stopped_inside_a_write_does_not_hold_the_lock_of_the_others(
    postgres_url: str, schema: str
) -> None:
    store = PostgresCoordinationStore.open(postgres_url, schema=schema)
    child = subprocess.Popen(
        [sys.executable, "-c", _STOPPED_WRITER, schema],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, TEST_DATABASE_URL: postgres_url},
    )
    try:
        assert line(child) == "inside"
        # The server ends the stopped writer's session (after half its busy timeout), well
        # before this write's own busy timeout (30 s) runs out; its transaction rolls back.
        lease = LeaseTable(store).try_acquire(RESOURCE, "other", "write")
        assert lease.holder == "other"
        with store.read("reading") as tx:
            assert tx.tasks.get("urn:task:never") is None
    finally:
        child.kill()
        child.communicate(timeout=30)
        store.close()
