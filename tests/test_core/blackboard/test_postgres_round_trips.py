"""A blackboard on PostgreSQL goes to its servers a fixed number of times per operation.

A handle's write of a node is one directory transaction (two round trips to the database: its
opening with the records' read, then its writes with the ``COMMIT``) and one look-up of the
leases of its nodes inside it (all of them at once), beside its two SPARQL requests (the nodes'
records read under the directory's lock, and the update); a lease's acquire and release are
two round trips each, and the check of the node behind the lease one. The counts are
statements sent (``Database.statements``: several sent as one string count once, one round
trip) and requests to the SPARQL server, which load does not move: a change that went to a
server once more per operation (a token read again, a transaction of its own for a read) fails
here.

Every test runs on the session's PostgreSQL and ``oxigraph serve``, in a schema of its own and
with node IRIs of its own.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from gliding_core import BlackboardConfig, Memory, MemoryConfig
from gliding_core.blackboard.board import AgentHandle
from gliding_core.blackboard.coordination.postgres import PostgresCoordinationStore
from gliding_core.blackboard.graph import SparqlEndpoint
from gliding_core.config import CoordinationConfig
from gliding_core.errors import FencingTokenError, LeaseConflictError
from gliding_core.store.postgres import Database

TASK = "urn:task:round-trips"


class Requests:
    """The requests a process sends to SPARQL servers (every ``SparqlEndpoint``'s), counted."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.count = 0
        send = SparqlEndpoint._post

        def counted(endpoint: SparqlEndpoint, *args: Any, **options: Any) -> Any:
            self.count += 1
            return send(endpoint, *args, **options)

        monkeypatch.setattr(SparqlEndpoint, "_post", counted)


@pytest.fixture
def memory(postgres_url: str, postgres_schema: str, oxigraph_server: str) -> Iterator[Memory]:
    config = MemoryConfig(
        embedder="hash",
        database_schema=postgres_schema,
        blackboard=BlackboardConfig(
            endpoint=oxigraph_server,
            flush_interval_s=0.0,
            # No sweeper: its statements would land in the counts at random.
            coordination=CoordinationConfig(sweep_interval_s=0.0),
        ),
    )
    with Memory.open(postgres_url, config=config) as value:
        yield value


def _database(memory: Memory) -> Database:
    """The blackboard's database (its coordination store's and its directory's)."""
    store = memory.blackboard.coordination.leases.db  # type: ignore[union-attr]
    assert isinstance(store, PostgresCoordinationStore)
    return store.database


def _count(database: Database, requests: Requests, call: Any) -> tuple[int, int]:
    """The statements and SPARQL requests ``call()`` sends."""
    statements, sent = database.statements, requests.count
    call()
    return database.statements - statements, requests.count - sent


def _agent(memory: Memory, name: str) -> AgentHandle:
    return memory.agent(name, role="do", task=TASK)


def test_a_handle_write_is_three_round_trips_to_the_database_and_two_requests(
    memory: Memory, monkeypatch: pytest.MonkeyPatch
) -> None:
    requests = Requests(monkeypatch)
    writer = _agent(memory, "writer")
    database = _database(memory)
    prefix = f"urn:rt:{uuid.uuid4().hex}"
    writer.write([{"@id": f"{prefix}:warm", "summary": "w"}], area="execution")

    def create() -> None:
        writer.write([{"@id": f"{prefix}:new", "summary": "n"}], area="execution")

    def update() -> None:
        writer.write([{"@id": f"{prefix}:new", "summary": "m"}], area="execution")

    # The directory's transaction (opening with the records; writes with the COMMIT) and the
    # node's leases read in it; the node's records read from the store under the lock (a new
    # IRI, or the store may hold a write this process did not see land), and the update.
    assert _count(database, requests, create) == (3, 2)
    assert _count(database, requests, update) == (3, 2)
    node = memory.blackboard.read(f"{prefix}:new")
    assert node is not None
    assert (node.generation, node.node["summary"]) == (2, "m")


def test_a_write_of_several_nodes_reads_their_leases_at_once(
    memory: Memory, monkeypatch: pytest.MonkeyPatch
) -> None:
    requests = Requests(monkeypatch)
    writer, other = _agent(memory, "writer"), _agent(memory, "other")
    database = _database(memory)
    prefix = f"urn:rt:{uuid.uuid4().hex}"
    writer.write([{"@id": f"{prefix}:warm", "summary": "w"}], area="execution")
    iris = [f"{prefix}:{i}" for i in range(5)]

    def create() -> None:
        writer.write([{"@id": iri, "summary": "n"} for iri in iris], area="execution")

    # One read of the five nodes' leases, not one a node (that was 3 + 4 statements).
    assert _count(database, requests, create) == (3, 2)
    other.acquire(iris[3], mode="write")
    with pytest.raises(LeaseConflictError):  # the lease on one node refuses the whole write
        writer.write([{"@id": iri, "summary": "again"} for iri in iris], area="execution")
    assert [memory.blackboard.read(iri).node["summary"] for iri in iris] == ["n"] * 5  # type: ignore[union-attr]


def test_a_guarded_write_checks_its_fence_in_the_directory_s_transaction(
    memory: Memory, monkeypatch: pytest.MonkeyPatch
) -> None:
    requests = Requests(monkeypatch)
    writer, other = _agent(memory, "writer"), _agent(memory, "other")
    database = _database(memory)
    iri = f"urn:rt:{uuid.uuid4().hex}"
    writer.write([{"@id": iri, "summary": "first"}], area="execution")
    lease = writer.acquire(iri, mode="write")

    def guarded() -> None:
        writer.write(
            [{"@id": iri, "summary": "guarded"}], area="execution", lease_token=lease.token
        )

    # The fence's two reads (the newest token, the holder's lease) join the transaction; the
    # node's cache entry, vouched by the lease's check at the epoch the update holds (nothing
    # changed since), is not read again: the update is the one request.
    assert _count(database, requests, guarded) == (4, 1)
    with pytest.raises(LeaseConflictError):  # the lease still guards the node
        other.write([{"@id": iri, "summary": "other"}], area="execution")
    writer.release(iri)
    with pytest.raises(FencingTokenError):  # and its token is dead once released
        writer.write([{"@id": iri, "summary": "late"}], area="execution", lease_token=lease.token)
    node = memory.blackboard.read(iri)
    assert node is not None
    assert node.node["summary"] == "guarded"


def test_a_lease_acquire_and_release_are_five_round_trips(
    memory: Memory, monkeypatch: pytest.MonkeyPatch
) -> None:
    requests = Requests(monkeypatch)
    holder, other = _agent(memory, "holder"), _agent(memory, "other")
    database = _database(memory)
    iri = f"urn:rt:{uuid.uuid4().hex}"
    holder.write([{"@id": iri, "summary": "s"}], area="execution")
    holder.acquire(iri, mode="write")  # (the node's cache entry is vouched from then on)
    holder.release(iri)

    def acquire() -> None:
        holder.acquire(iri, mode="write")

    def release() -> None:
        assert holder.release(iri)

    # The node checked against the directory's token, then the grant: its opening with the
    # grant in one statement, the COMMIT with the log's flush after it.
    assert _count(database, requests, acquire) == (3, 0)
    with pytest.raises(LeaseConflictError):  # granted: nobody else gets it meanwhile
        other.acquire(iri, mode="write", timeout_s=0)
    # The release: its opening with the resource's leases, the deletion with the COMMIT.
    assert _count(database, requests, release) == (2, 0)
    assert other.acquire(iri, mode="write", timeout_s=0).token > 0
    assert not holder.release(iri)  # released once: a second release finds nothing
