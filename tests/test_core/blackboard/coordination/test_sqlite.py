"""The SQLite coordination store: what only a file can show (where it lives, what a foreign file
does, a bad statement, the lock no registry holds while it calls out).

Everything the protocol promises is the contract suite's (tests/test_core/contracts/
test_coordination_store.py), which runs on this store in memory and in a file.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

from gliding_core.blackboard.coordination.leases import Lease, LeaseMode, LeaseTable
from gliding_core.blackboard.coordination.protocol import CoordinationStore
from gliding_core.blackboard.coordination.registries import Coordination
from gliding_core.blackboard.coordination.sqlite import COORDINATION_FILE, CoordinationDB
from gliding_core.config import CoordinationConfig
from gliding_core.errors import ClosedError, InvalidInputError, StorageError


class FakeClock:
    def __init__(self, now: float = 1_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def db(tmp_path: Path, clock: FakeClock) -> Iterator[CoordinationDB]:
    config = CoordinationConfig(sweep_interval_s=0)
    with CoordinationDB(tmp_path / COORDINATION_FILE, clock=clock, config=config) as value:
        yield value


def test_the_sqlite_store_is_a_coordination_store(db: CoordinationDB) -> None:
    assert isinstance(db, CoordinationStore)
    with db.read("reading") as tx:
        assert isinstance(tx.connection, sqlite3.Connection)


def test_the_database_of_a_directory_and_bad_arguments(tmp_path: Path) -> None:
    with CoordinationDB.in_directory(tmp_path) as db:
        assert db.path == str(tmp_path / "blackboard.sqlite3")
        assert "blackboard.sqlite3" in repr(db)
    with CoordinationDB.in_directory(None) as db:
        assert db.path is None
        assert repr(db) == "CoordinationDB(path=':memory:')"
    with pytest.raises(InvalidInputError, match="path"):
        CoordinationDB(42)  # type: ignore[arg-type]
    with pytest.raises(InvalidInputError, match="clock"):
        CoordinationDB(clock=1.0)  # type: ignore[arg-type]
    closed = CoordinationDB()
    closed.close()
    with pytest.raises(ClosedError), closed.read("reading"):
        pass


def test_the_tables_are_made_when_the_file_opens(tmp_path: Path) -> None:
    path = tmp_path / COORDINATION_FILE
    CoordinationDB(path).close()
    with sqlite3.connect(path) as conn:
        tables = {row[0] for row in conn.execute("SELECT name FROM sqlite_master")}
    assert {"leases", "lease_grants", "tasks", "task_dependencies", "agents", "messages"} <= tables
    with CoordinationDB(path) as again:  # opening an existing file changes nothing
        assert LeaseTable(again).leases() == []


def test_a_database_that_is_not_sqlite_is_a_storage_error(tmp_path: Path) -> None:
    path = tmp_path / "c.sqlite3"
    path.write_bytes(b"not a database, just some bytes" * 100)
    with pytest.raises(StorageError, match="coordination"):
        CoordinationDB(path)


def test_a_bad_statement_is_a_storage_error_and_leaves_no_transaction(db: CoordinationDB) -> None:
    with (
        pytest.raises(StorageError, match="doing the impossible"),
        db.write("doing the impossible") as tx,
    ):
        tx.connection.execute("INSERT INTO no_such_table VALUES (1)")
    with db.write("then something else") as tx:
        tx.connection.execute("SELECT 1")
    assert not db._conn.in_transaction


def test_a_token_rolled_back_is_taken_by_the_next_grant(db: CoordinationDB) -> None:
    """SQLite's AUTOINCREMENT rolls back with the grant (the protocol allows it: nobody was
    given that token)."""
    lease = Lease("urn:s", "a", LeaseMode.WRITE, 0, 1, 20.0, 1_000.0, 1_020.0)
    taken: list[int] = []

    def grant_then_fail() -> None:
        with db.write("a grant that fails") as tx:
            taken.append(tx.leases.grant(lease, fenced=True).token)
            raise KeyError("the caller failed")

    with pytest.raises(KeyError):
        grant_then_fail()
    leases = LeaseTable(db)
    assert leases.newest_token("urn:s") is None
    assert leases.try_acquire("urn:s", "b").token == taken[0]


def test_coordination_opens_the_file_of_a_directory(tmp_path: Path) -> None:
    with Coordination.open(tmp_path) as coordination:
        assert isinstance(coordination.db, CoordinationDB)
        assert coordination.db.path == str(tmp_path / COORDINATION_FILE)
        coordination.tasks.register("urn:t:1")
    assert coordination.db.closed
    with Coordination.open(tmp_path) as again:
        assert [task.iri for task in again.tasks.tasks()] == ["urn:t:1"]


class ProbingMirror:
    """A mirror that checks, from another thread, that the database is not locked meanwhile.

    The blackboard's writer takes its own lock and then the database's (for the fence), so a
    registry that mirrored while holding the database's lock could deadlock with it.
    """

    def __init__(self, db: CoordinationDB) -> None:
        self.db, self.blocked = db, 0

    def mirror(self, task_iri: str, area: str, nodes: Sequence[Mapping[str, Any]]) -> None:
        self.probe()

    def forget(self, iris: Sequence[str]) -> None:
        self.probe()

    def probe(self) -> None:
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
    coordination.bus.subscribe(lambda event: mirror.probe())
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
