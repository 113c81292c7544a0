"""L2: the coordination store, the protocol every backend of leases, tasks, agents and messages
implements, and the graph mirror the registries write to.

The registries (``LeaseTable``, ``TaskRegistry``, ``AgentRegistry``, ``MessageBoard``) hold every
decision: lease compatibility and fencing, task transitions and the DAG checks, agent liveness,
message validation, events and mirroring. A backend holds rows: it implements
``CoordinationStore``, whose transactions (``CoordinationTx``) carry one record store per kind
of row (``LeaseRecords``, ``TaskRecords``, ``AgentRecords``, ``MessageRecords``). SQLite
(``coordination.sqlite.CoordinationDB``) is the first backend; a server database is another
class of the same protocol, run through the same contract suite
(``tests/test_core/contracts/test_coordination_store.py``).

What every backend must hold (the contract suite checks each):

- ``write()`` is one transaction, serialisable with every other write on the same storage, from
  any handle or process: a registry reads, decides and writes inside one (a grant reads the
  holders and inserts its lease), so no other write may fall between its read and its write.
  SQLite takes the database's write lock first (``BEGIN IMMEDIATE``); a server database takes
  a lock at the start of the transaction or runs it serialisable and retries it whole.
- A ``read()`` or ``write()`` opened inside a ``write()`` on the same thread joins it: it sees the
  outer transaction's rows, and a nested ``write()`` is a savepoint (its failure rolls back only
  itself; the outer one commits or rolls back everything). A heartbeat renews leases inside
  the agent's transaction this way, and a lease grant's ``void`` reads the agent registry.
- A block that raises rolls its transaction back: nothing is written half-way.
- Fencing tokens (``LeaseRecords.grant``) and message sequences (``MessageRecords.append``)
  strictly increase across every handle and process of one storage: each is above every one
  a committed transaction took, and none a transaction committed is taken again, even after
  its rows are deleted or the storage is reopened (one a rolled-back transaction took may or
  may not come again: nobody was given it).
- ``CoordinationTx.now()`` is the coordination clock (seconds since the epoch): the clock lease
  expiry and heartbeats are measured on, one clock for every handle of the storage.
- A write's ``commit`` (``Commit``) says how durable its caller needs it: ``"sync"`` (the
  default) is durable before any other transaction sees it. The other two are permissions a
  backend may ignore (SQLite does: its commits are as durable as its ``synchronous`` pragma
  says), for the writes whose callers showed they are safe: ``"flush"`` may be seen by other
  transactions before it is durable, and ``write()`` returns once it is; ``"async"`` may return
  before it is durable, and a crash of the storage (not of a client) may then lose it. Either
  way a write whose commit is lost is lost with every transaction committed after it, never
  alone (a server's log is flushed in order): no later write that saw it survives without it.
- Backend exceptions leave as ``StorageError`` (``gliding_core.boundary``); a closed store
  raises ``ClosedError``.
- A transaction calls out to nothing (no event, no mirror, no callback but a lease grant's
  ``void``, which reads this store only), so the store's lock is always the innermost one.
  The registries publish and mirror after the transaction.

Every value given to a record store was checked by the registries (``coordination.checks``):
names are non-empty strings without whitespace or lone surrogates, at most 2,048 characters.
Lists are returned in the order each method names, so every backend answers alike.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence
from contextlib import AbstractContextManager
from typing import Any, Literal, Protocol, runtime_checkable

from gliding_core.blackboard.coordination.records import (
    Agent,
    AgentStatus,
    FirstGrant,
    Lease,
    LeaseMode,
    Message,
    Task,
    TaskStatus,
)
from gliding_core.config import CoordinationConfig
from gliding_core.errors import InvalidInputError
from gliding_core.jsonld import preview

logger = logging.getLogger(__name__)

Commit = Literal["sync", "flush", "async"]
"""How durable a write's commit must be when ``write()`` returns and when others see it (see
the module): ``"sync"``, durable before anyone sees it; ``"flush"``, durable before ``write()``
returns, maybe seen by others a moment before; ``"async"``, maybe not yet durable."""

COMMITS: tuple[Commit, ...] = ("sync", "flush", "async")


def check_commit(value: object) -> Commit:
    """Return ``value`` if it is one of ``COMMITS``, else ``InvalidInputError`` naming it."""
    for commit in COMMITS:
        if value == commit and isinstance(value, str):
            return commit
    raise InvalidInputError(f"commit must be one of {', '.join(COMMITS)}, got {preview(value)}")


class LeaseRecords(Protocol):
    """The lease rows of a transaction, and the fence of each resource.

    A lease row is live while ``now < expires_at``; the methods named ``live`` ignore the
    others, the rest see every row. The fence of a resource is the newest token granted on it
    in a fenced mode (Write, Exclusive); it outlives the leases.
    """

    def on(self, resource: str) -> list[Lease]:
        """Return every lease row on ``resource``, expired ones included, by holder."""
        ...

    def on_any(self, resources: Sequence[str]) -> list[Lease]:
        """Return every lease row on any of ``resources`` (one statement), expired ones
        included, by resource then holder."""
        ...

    def live(self, resource: str, holder: str, now: float) -> Lease | None:
        """Return ``holder``'s live lease on ``resource``, if any."""
        ...

    def live_on(self, resource: str, now: float) -> list[Lease]:
        """Return the live leases on ``resource``, oldest grant (smallest token) first."""
        ...

    def live_all(self, now: float, holder: str | None = None) -> list[Lease]:
        """Return the live leases (of ``holder`` when given), by resource then holder."""
        ...

    def newest_token(self, resource: str) -> int | None:
        """Return the newest token granted on ``resource`` in a fenced mode, if any."""
        ...

    def grant(self, lease: Lease, *, fenced: bool) -> Lease:
        """Store ``lease`` (replacing ``lease.holder``'s row on its resource) with a new token.

        The token is above every token of a committed grant of this storage, from any handle
        or process, and is never given again once committed; when ``fenced`` it becomes the
        resource's fence.

        Returns:
            ``lease`` with its token.
        """
        ...

    def grant_if_free(
        self,
        resource: str,
        holder: str,
        mode: LeaseMode,
        ttl_s: float,
        *,
        blocking: frozenset[LeaseMode],
        fenced: bool,
    ) -> FirstGrant:
        """Grant ``holder`` a first lease on ``resource`` if no live row stands in its way,
        reading the rows and writing the grant in one step.

        At the transaction's clock ``now`` (``CoordinationTx.now()``, which reads the same from
        then on): when no live row on ``resource`` is ``holder``'s own or of a mode in
        ``blocking``, delete the other expired rows on it and store ``holder``'s lease of
        ``mode`` (depth 1, acquired ``now``, expiring ``now + ttl_s``, replacing an expired row
        of ``holder``) with a new token, as ``grant`` does (the fence moves when ``fenced``).
        Otherwise change nothing.

        Returns:
            the lease granted (or ``None``), every row on ``resource`` as it was before, and
            ``now``.
        """
        ...

    def deepen(self, resource: str, holder: str, expires_at: float) -> None:
        """Add one acquisition to ``holder``'s lease row and set its expiry."""
        ...

    def set_expiry(self, resource: str, holder: str, expires_at: float) -> None:
        """Set the expiry of ``holder``'s lease row on ``resource``."""
        ...

    def renew_all(self, holder: str, now: float) -> int:
        """Set each live lease of ``holder`` to expire its own TTL after ``now``; return how
        many."""
        ...

    def decrement(self, resource: str, holder: str) -> None:
        """Take one acquisition off ``holder``'s lease row (its depth is above 1)."""
        ...

    def delete(self, resource: str, holder: str) -> None:
        """Delete ``holder``'s lease row on ``resource``, if any."""
        ...

    def delete_expired_on(self, resource: str, now: float) -> None:
        """Delete the expired lease rows on ``resource``."""
        ...

    def remove_holder(self, holder: str) -> list[Lease]:
        """Delete every lease row of ``holder``, expired ones included; return them by resource."""
        ...

    def remove_expired(self, now: float) -> list[Lease]:
        """Delete every expired lease row; return them by resource then holder."""
        ...


class TaskRecords(Protocol):
    """The task rows of a transaction and their "depends on" edges.

    Lists of IRIs are sorted; lists of tasks are in IRI order. A ``Task`` carries its
    dependencies, sorted.
    """

    def get(self, iri: str) -> Task | None:
        """Return the task ``iri``, if it is registered."""
        ...

    def insert(self, iri: str, *, parent: str | None, root: str, now: float) -> None:
        """Store a new pending task at revision 1, created and updated ``now``."""
        ...

    def all(self, status: TaskStatus | None = None) -> list[Task]:
        """Return every task (of ``status`` when given)."""
        ...

    def children(self, iri: str) -> list[str]:
        """Return the tasks whose parent is ``iri``."""
        ...

    def unfinished_children(self, iri: str) -> list[str]:
        """Return the pending or running tasks whose parent is ``iri``."""
        ...

    def dependencies(self, iri: str) -> list[str]:
        """Return the tasks ``iri`` depends on."""
        ...

    def dependents(self, iri: str) -> list[str]:
        """Return the tasks that depend on ``iri``."""
        ...

    def unfinished_dependents(self, iri: str) -> list[str]:
        """Return the pending or running tasks that depend on ``iri``."""
        ...

    def ready(self) -> list[Task]:
        """Return the pending tasks whose every dependency is completed."""
        ...

    def finished_before(self, time: float) -> list[str]:
        """Return the completed or failed tasks last updated at or before ``time``."""
        ...

    def link(self, task: str, depends_on: str) -> None:
        """Store the edge ``task`` depends on ``depends_on`` (an existing edge stays one)."""
        ...

    def unlink(self, task: str, depends_on: str) -> bool:
        """Delete the edge ``task`` depends on ``depends_on``; return whether there was one."""
        ...

    def touch(self, iri: str, now: float) -> None:
        """Record a change of ``iri``: updated ``now``, one revision more."""
        ...

    def set_status(self, iri: str, status: TaskStatus, now: float) -> None:
        """Set the status of ``iri``: updated ``now``, one revision more."""
        ...

    def delete(self, iris: Iterable[str]) -> None:
        """Delete the tasks ``iris`` and every edge that names one of them."""
        ...


class AgentRecords(Protocol):
    """The agent rows of a transaction. Lists of agents are in name order."""

    def find(self, name: str) -> Agent | None:
        """Return the agent ``name``, if it is registered."""
        ...

    def insert(self, agent: Agent) -> None:
        """Store ``agent``, replacing any row of the same name (a new incarnation)."""
        ...

    def beat(
        self, name: str, status: AgentStatus, operation: str | None, now: float
    ) -> Agent | None:
        """Record a heartbeat: the status, the operation (kept when ``None``), the last
        heartbeat ``now``, one revision more. Return the agent as it is now (``None``: not
        registered)."""
        ...

    def set_status(self, name: str, status: AgentStatus) -> Agent | None:
        """Set the status of ``name`` (one revision more, no heartbeat); return the agent as it
        is now (``None``: not registered)."""
        ...

    def delete(self, name: str) -> bool:
        """Delete the agent ``name``; return whether it was registered."""
        ...

    def all(self) -> list[Agent]:
        """Return every registered agent."""
        ...


class MessageRecords(Protocol):
    """The message log of a transaction."""

    def append(
        self,
        *,
        iri: str,
        topic: str,
        task: str | None,
        sender: str | None,
        payload: str,
        now: float,
    ) -> int:
        """Store a message (``payload``: a JSON object's text) and return its sequence.

        The sequence is above every sequence of a committed message of this storage, from any
        handle or process (after ``prune`` too), and is never given again once committed.
        """
        ...

    def since(
        self,
        cursor: int,
        *,
        topic: str | None = None,
        task: str | None = None,
        limit: int | None = None,
    ) -> list[Message]:
        """Return the messages after sequence ``cursor`` (of ``topic`` and ``task`` when
        given), by sequence, at most ``limit`` of them."""
        ...

    def latest(self) -> int:
        """Return the sequence of the newest stored message (0 when there is none)."""
        ...

    def prune(self, up_to: int) -> int:
        """Delete the messages up to sequence ``up_to`` (included); return how many."""
        ...

    def forget_task(self, task: str) -> int:
        """Delete every message of ``task`` (erasure on request); return how many."""
        ...


class CoordinationTx(Protocol):
    """One transaction on a coordination store: its record stores and its clock.

    Valid only inside the ``with`` block that opened it.
    """

    @property
    def leases(self) -> LeaseRecords:
        """The lease rows and fences."""
        ...

    @property
    def tasks(self) -> TaskRecords:
        """The task rows and their edges."""
        ...

    @property
    def agents(self) -> AgentRecords:
        """The agent rows."""
        ...

    @property
    def messages(self) -> MessageRecords:
        """The message log."""
        ...

    def now(self) -> float:
        """Return the coordination clock (seconds since the epoch)."""
        ...


@runtime_checkable
class CoordinationStore(Protocol):
    """Where leases, tasks, agents and messages live: one transaction at a time per write.

    Constructors are not part of the protocol: ``Memory`` and ``Coordination.open`` choose the
    backend. Safe to share between threads.
    """

    @property
    def config(self) -> CoordinationConfig:
        """The coordination settings (TTLs, timeouts, limits)."""
        ...

    @property
    def closed(self) -> bool:
        """Whether ``close()`` was called."""
        ...

    def write(
        self, doing: str, *, commit: Commit = "sync"
    ) -> AbstractContextManager[CoordinationTx]:
        """Run the block as one write transaction (joining an open one of this thread).

        Args:
            doing: what the block does, for the message of a translated backend error.
            commit: how durable the commit must be (``Commit``); a write joining an open
                one commits with it, as that one says.
        """
        ...

    def read(self, doing: str) -> AbstractContextManager[CoordinationTx]:
        """Run the block's reads on one consistent state (joining an open write of this
        thread)."""
        ...

    def close(self) -> None:
        """Release the backend; later transactions raise ``ClosedError``; twice is harmless."""
        ...

    def scrub(self) -> None:
        """Make deleted records unrecoverable from the backend's files (free pages, logs)."""
        ...


class NodeMirror(Protocol):
    """Where the registries mirror tasks and agents as JSON-LD nodes, so graph queries see them.

    The blackboard implements it, writing as the system (outside agent permissions).
    """

    def mirror(self, task_iri: str, area: str, nodes: Sequence[Mapping[str, Any]]) -> None:
        """Write ``nodes`` (whole, replacing earlier versions) into the ``area`` of a task."""

    def forget(self, iris: Sequence[str]) -> None:
        """Remove the nodes with these IRIs from every graph."""


def mirror_nodes(
    mirror: NodeMirror | None, task_iri: str, area: str, nodes: Sequence[Mapping[str, Any]]
) -> None:
    """Mirror ``nodes`` if there is a mirror, logging (not raising) its failure.

    The mirror is derived state: the coordination store is the truth, a mirror failure is
    logged and the change stands; the registries can mirror everything again (``remirror()``).
    """
    if mirror is None or not nodes:
        return
    try:
        mirror.mirror(task_iri, area, nodes)
    except Exception:
        logger.exception("mirroring %d node(s) into %s/%s failed", len(nodes), task_iri, area)


def forget_nodes(mirror: NodeMirror | None, iris: Sequence[str]) -> None:
    """Remove ``iris`` from the mirror if there is one, logging (not raising) its failure."""
    if mirror is None or not iris:
        return
    try:
        mirror.forget(iris)
    except Exception:
        logger.exception("removing %d node(s) from the graph mirror failed", len(iris))
