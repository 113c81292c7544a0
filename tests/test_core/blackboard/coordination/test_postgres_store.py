"""What only the PostgreSQL coordination store does, beside the contract suite's rules: the
server's clock by default, one schema shared with the coherence directory, refusals that leave
no pool open, and no password in any ``repr`` or error.
"""

from __future__ import annotations

import uuid
from typing import Any

import psycopg
import pytest

from gliding_core.blackboard.coordination.leases import Lease, LeaseMode, LeaseTable
from gliding_core.blackboard.coordination.postgres import PostgresCoordinationStore
from gliding_core.coherence.postgres_directory import PostgresDirectory
from gliding_core.errors import InvalidInputError, StorageError
from gliding_core.store.postgres.database import Database, DatabaseSettings


@pytest.fixture
def schema(postgres_schema: str) -> str:
    """A schema of the test's own (``tests/conftest.py`` drops it after the test)."""
    return postgres_schema


def server_time(url: str) -> float:
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute("SELECT extract(epoch FROM clock_timestamp())::float8").fetchone()
    assert row is not None
    return float(row[0])


def test_the_default_clock_is_the_server_s(postgres_url: str, schema: str) -> None:
    with PostgresCoordinationStore.open(postgres_url, schema=schema) as store:
        before = server_time(postgres_url)
        with store.write("reading the clock") as tx:
            in_write = tx.now()
            assert tx.now() == in_write  # one reading per transaction
        with store.read("reading the clock") as tx:
            in_read = tx.now()
        after = server_time(postgres_url)
        assert before <= in_write <= in_read <= after
        lease = LeaseTable(store).try_acquire("urn:r", "a", "write", ttl_s=5)
        assert before <= lease.acquired_at <= server_time(postgres_url)


def test_the_stores_of_a_memory_share_one_database_and_schema(
    postgres_url: str, schema: str
) -> None:
    database = Database(postgres_url, schema=schema)
    try:
        store = PostgresCoordinationStore(database)
        directory = PostgresDirectory(database)
        token = LeaseTable(store).try_acquire("urn:r", "a", "write").token
        assert directory.touch() == 1
        store.close()
        directory.close()  # neither owns the database: it stays open
        with database.connection() as conn:
            versions = dict(conn.execute("SELECT component, version FROM schema_versions"))
        assert versions == {"coordination": 1, "coherence": 2}
        again = PostgresCoordinationStore(database)  # tables found, not made again
        assert LeaseTable(again).try_acquire("urn:s", "a", "write").token > token
        again.close()
    finally:
        database.close()


def test_bad_arguments_are_refused_and_leave_no_pool_open(postgres_url: str, schema: str) -> None:
    with pytest.raises(InvalidInputError, match="Database"):
        PostgresCoordinationStore("postgresql://nobody@/nowhere")  # type: ignore[arg-type]
    database = Database(postgres_url, schema=schema)
    bad_clock: Any = 42
    with pytest.raises(InvalidInputError, match="clock"):
        PostgresCoordinationStore(database, clock=bad_clock, owns_database=True)
    assert database.pool.closed
    database = Database(postgres_url, schema=schema)
    bad_config: Any = {"lease_ttl_s": 1}
    with pytest.raises(InvalidInputError, match="CoordinationConfig"):
        PostgresCoordinationStore(database, config=bad_config)
    assert not database.pool.closed  # not the store's to close
    database.close()


def test_a_password_is_in_no_repr_and_no_error(postgres_url: str, schema: str) -> None:
    secret = "pw-" + uuid.uuid4().hex
    bad = f"postgresql://nobody:{secret}@/nowhere?host=/nonexistent/socket/dir&connect_timeout=1"
    settings = DatabaseSettings(timeout_s=1.0)
    with pytest.raises(StorageError) as caught:
        PostgresCoordinationStore.open(bad, schema=schema, settings=settings)
    assert secret not in str(caught.value)
    assert secret not in repr(caught.value)
    with pytest.raises(StorageError) as caught:
        PostgresDirectory.open(bad, schema=schema, settings=settings)
    assert secret not in str(caught.value)
    with PostgresCoordinationStore.open(postgres_url, schema=schema) as store:
        password = psycopg.conninfo.conninfo_to_dict(postgres_url).get("password")
        assert not password or str(password) not in repr(store)
    with PostgresDirectory.open(postgres_url, schema=schema) as directory:
        assert not password or str(password) not in repr(directory)


def test_a_grant_is_two_round_trips_and_a_release_two(postgres_url: str, schema: str) -> None:
    """A write's opening (level, limits, lock, clock) goes with its first statement, and the
    lease writes whose answer nobody reads go with the COMMIT: a grant on a free resource is
    the opening with the grant (one statement), then the COMMIT with the flush after it; a
    release the opening with the leases, then the deletion with the COMMIT. A write that sent
    nothing sends nothing to end."""
    database = Database(postgres_url, schema=schema)
    store = PostgresCoordinationStore(database, owns_database=True)
    leases = LeaseTable(store)
    try:
        leases.try_acquire("urn:warm", "a", "write")
        before = database.statements
        token = leases.try_acquire("urn:r", "a", "write", ttl_s=5).token
        assert database.statements - before == 2
        before = database.statements
        assert leases.try_acquire("urn:r", "a", "write").token == token  # re-entrant: deeper
        assert database.statements - before == 2  # (the deepening went with the COMMIT)
        assert leases.release("urn:r", "a")
        before = database.statements
        assert leases.release("urn:r", "a")
        assert database.statements - before == 2
        assert leases.holders("urn:r") == []
        assert leases.try_acquire("urn:r", "b", "write").token > token  # released for good
        before = database.statements
        with pytest.raises(KeyError), store.write("nothing at all"):
            raise KeyError("before any statement")
        assert database.statements == before
    finally:
        store.close()


def _delete_then_fail(store: PostgresCoordinationStore) -> None:
    with store.write("inner") as inner:
        inner.leases.delete("urn:r", "a")  # deferred: not sent yet
        raise KeyError("the inner write fails")


def _grant_then_refused(store: PostgresCoordinationStore) -> None:
    with store.write("a grant, then a refused write") as tx:
        now = tx.now()
        tx.leases.grant(Lease("urn:s", "b", LeaseMode.WRITE, 0, 1, 20, now, now + 20), fenced=True)
        tx.leases.decrement("urn:r", "a")  # depth 1 -> 0: the table's CHECK refuses it


def test_deferred_lease_writes_are_all_or_nothing_with_their_transaction(
    postgres_url: str, schema: str
) -> None:
    database = Database(postgres_url, schema=schema)
    store = PostgresCoordinationStore(database, owns_database=True)
    leases = LeaseTable(store)
    try:
        leases.try_acquire("urn:r", "a", "write")
        # A nested write's deferred deletion goes with its savepoint's rollback.
        with store.write("outer") as tx:
            with pytest.raises(KeyError):
                _delete_then_fail(store)
            assert [lease.holder for lease in tx.leases.on("urn:r")] == ["a"]
        assert [lease.holder for lease in leases.holders("urn:r")] == ["a"]
        # A deferred write the table refuses at the COMMIT fails the whole transaction.
        with pytest.raises(StorageError):
            _grant_then_refused(store)
        assert leases.holders("urn:s") == []
        assert [(lease.holder, lease.depth) for lease in leases.holders("urn:r")] == [("a", 1)]
        # And one that commits is there.
        with store.write("a deletion") as tx:
            tx.leases.delete("urn:r", "a")
        assert leases.holders("urn:r") == []
    finally:
        store.close()
