"""Leases on PostgreSQL through a crash of the server: a grant is durable before ``acquire``
returns; a release may be lost, and then the lease comes back only until its TTL runs out.

A grant commits without waiting for the log's flush and flushes it on request before it
returns; a release commits without waiting at all (``coordination.leases``, durability). The
crash is a ``SIGQUIT`` of the server (an immediate shutdown: what is not in the log on disk is
lost) on a server of the module's own, whose WAL writer is told to flush only every 10 s, so a
commit that nobody flushed is still in memory when the crash comes. That is a window, not a
promise (the writer may wake in it), so the release test crashes up to three times until one
release is lost, and fails if none is: a release that waits for its flush would never be.
"""

from __future__ import annotations

import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import uuid
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from gliding_core.blackboard.coordination.leases import LeaseTable
from gliding_core.blackboard.coordination.postgres import PostgresCoordinationStore
from gliding_core.errors import FencingTokenError, LeaseConflictError
from gliding_core.store.postgres.database import DatabaseSettings
from tests.test_core.contracts.conftest import FakeClock
from tests.test_core.liveness import until_it_works
from tests.test_core.test_memory_postgres_faults import StoppableServer

TTL_S = 30.0
CRASHES = 3


@pytest.fixture(scope="module")
def server() -> Iterator[StoppableServer]:
    directory = Path(tempfile.mkdtemp(prefix="gliding-pglease-"))
    directory.chmod(0o755)  # the server runs as a user of its own when the tests run as root
    value = StoppableServer(directory)
    try:
        with psycopg.connect(value.url, autocommit=True) as conn:
            # The WAL writer flushes what nobody waited for every wal_writer_delay (at most
            # 10 s); nothing else of the server writes the log meanwhile.
            conn.execute("ALTER SYSTEM SET wal_writer_delay = '10s'")
            conn.execute("ALTER SYSTEM SET autovacuum = off")
        value.crash()  # started again below with those settings, its WAL writer awake
        value.start()
        yield value
    finally:
        value.start()  # a test that failed half-way may have left it stopped
        value.cleanup()
        shutil.rmtree(directory, ignore_errors=True)


@pytest.fixture
def store(server: StoppableServer) -> Iterator[tuple[PostgresCoordinationStore, FakeClock]]:
    clock = FakeClock()
    schema = f"test_{uuid.uuid4().hex[:16]}"
    value = PostgresCoordinationStore.open(
        server.url, schema=schema, clock=clock, settings=DatabaseSettings(timeout_s=2.0)
    )
    try:
        yield value, clock
    finally:
        value.close()


def _rows(server: StoppableServer, schema: str, resource: str) -> list[tuple[str, int]]:
    """The lease rows on ``resource`` as the server has them (holder, token)."""
    with psycopg.connect(server.url, autocommit=True) as conn:
        rows = conn.execute(
            f'SELECT holder, token FROM "{schema}".coordination_leases WHERE resource = %s',
            (resource,),
        ).fetchall()
    return [(str(holder), int(token)) for holder, token in rows]


def _crash_and_restart(server: StoppableServer, leases: LeaseTable) -> None:
    server.crash()
    server.start()
    until_it_works(lambda: leases.holders("urn:any"))  # the pool has reconnected


def test_a_grant_is_durable_when_acquire_returns(
    server: StoppableServer, store: tuple[PostgresCoordinationStore, FakeClock]
) -> None:
    db, _ = store
    leases = LeaseTable(db)
    tokens: list[int] = []
    for crash in range(CRASHES):
        resource = f"urn:node:granted:{crash}"
        lease = leases.try_acquire(resource, "holder", "write", ttl_s=TTL_S)
        _crash_and_restart(server, leases)  # at once: nobody flushed the log since
        assert _rows(server, db.database.schema, resource) == [("holder", lease.token)]
        with pytest.raises(LeaseConflictError):
            leases.try_acquire(resource, "other", "write")
        leases.check_fence(resource, "holder", lease.token)
        tokens.append(lease.token)
    assert tokens == sorted(set(tokens))  # and the sequence did not go back


def test_a_release_lost_in_a_crash_holds_the_lease_only_until_its_ttl(
    server: StoppableServer, store: tuple[PostgresCoordinationStore, FakeClock]
) -> None:
    db, clock = store
    leases = LeaseTable(db)
    for crash in range(CRASHES):
        resource = f"urn:node:released:{crash}"
        lease = leases.try_acquire(resource, "first", "write", ttl_s=TTL_S)
        assert leases.release(resource, "first")  # acknowledged
        assert leases.holders(resource) == []
        _crash_and_restart(server, leases)
        if _rows(server, db.database.schema, resource):
            break  # the release was lost
    else:
        pytest.fail(f"no release was lost in {CRASHES} crashes: releases wait for the flush")
    # The lease is back as it was: its holder (which no longer uses it) is the only one.
    back = leases.holders(resource)
    assert [(held.holder, held.token, held.expires_at) for held in back] == [
        ("first", lease.token, lease.expires_at)
    ]
    with pytest.raises(LeaseConflictError):
        leases.try_acquire(resource, "second", "write")
    leases.check_fence(resource, "first", lease.token)
    clock.advance(TTL_S - 1)
    with pytest.raises(LeaseConflictError):  # a second before its TTL runs out
        leases.try_acquire(resource, "second", "write")
    clock.advance(1)
    successor = leases.try_acquire(resource, "second", "write")  # and as it does
    assert successor.token > lease.token
    with pytest.raises(FencingTokenError):
        leases.check_fence(resource, "first", lease.token)
    leases.check_fence(resource, "second", successor.token)


def test_a_grant_that_found_a_release_makes_the_release_durable(
    server: StoppableServer, store: tuple[PostgresCoordinationStore, FakeClock]
) -> None:
    """The release is not flushed when it returns, the next holder's grant is: the log is
    flushed in order, so the crash keeps both, never the first lease beside the second."""
    db, _ = store
    leases = LeaseTable(db)
    for crash in range(CRASHES):
        resource = f"urn:node:handed:{crash}"
        first = leases.try_acquire(resource, "first", "write", ttl_s=TTL_S)
        assert leases.release(resource, "first")
        second = leases.try_acquire(resource, "second", "write", ttl_s=TTL_S)
        assert second.token > first.token
        _crash_and_restart(server, leases)
        assert _rows(server, db.database.schema, resource) == [("second", second.token)]
        with pytest.raises(FencingTokenError):
            leases.check_fence(resource, "first", first.token)
        leases.check_fence(resource, "second", second.token)


_CYCLING = textwrap.dedent(
    """
    import sys
    from gliding_core.blackboard.coordination.leases import LeaseTable
    from gliding_core.blackboard.coordination.postgres import PostgresCoordinationStore
    url, schema, resource, ttl = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4])
    table = LeaseTable(PostgresCoordinationStore.open(url, schema=schema))
    while True:  # grant, release, as fast as it can, until it is killed
        lease = table.try_acquire(resource, "cycler", "write", ttl_s=ttl)
        print("granted", lease.token, flush=True)
        table.release(resource, "cycler")
        print("released", lease.token, flush=True)
    """
)
CYCLER_TTL_S = 2.0  # on the server's clock: the survivor waits this long at most
CYCLES = 40  # grants acknowledged before the kill


def _grants(line: str) -> list[int]:
    """The token of a grant the cycler acknowledged on ``line`` (none on another line)."""
    said = line.split()
    return [int(said[1])] if len(said) == 2 and said[0] == "granted" else []


def test_a_worker_killed_amid_grants_and_releases_then_a_crash_keeps_one_holder(
    server: StoppableServer,
) -> None:
    """A worker granting and releasing (grants flushed, releases not) is SIGKILLed, and the
    server crashes right after: no acknowledged grant's token comes back lower, at most one
    holder is left (the dead worker's, until its TTL), and the next holder fences it."""
    schema = f"test_{uuid.uuid4().hex[:16]}"
    resource = "urn:node:cycled"
    db = PostgresCoordinationStore.open(
        server.url, schema=schema, settings=DatabaseSettings(timeout_s=2.0)
    )
    child = subprocess.Popen(
        [sys.executable, "-c", _CYCLING, server.url, schema, resource, str(CYCLER_TTL_S)],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        leases = LeaseTable(db)
        assert child.stdout is not None
        granted: list[int] = []
        while len(granted) < CYCLES:
            said = child.stdout.readline()
            assert said, "the cycler ended before it was killed"
            granted += _grants(said)
        child.send_signal(signal.SIGKILL)  # somewhere between a grant and a release
        child.wait(60)
        _crash_and_restart(server, leases)
        for line in child.stdout.read().splitlines():  # what it said before it died
            granted += _grants(line)
        assert granted == sorted(set(granted))
        left = _rows(server, schema, resource)
        assert len(left) <= 1  # its last lease, back or never released, or none
        assert all(holder == "cycler" and token >= granted[-1] for holder, token in left)
        tokens = {granted[-1], *(token for _, token in left)}
        survivor = leases.acquire(resource, "survivor", "write", timeout_s=120)
        assert survivor.token > max(tokens)
        for stale in tokens:
            with pytest.raises(FencingTokenError):
                leases.check_fence(resource, "cycler", stale)
        assert _rows(server, schema, resource) == [("survivor", survivor.token)]
    finally:
        if child.poll() is None:
            child.kill()
        child.communicate(timeout=30)
        db.close()
