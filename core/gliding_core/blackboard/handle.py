"""L2: an agent's handle on the blackboard: one identity, every operation checked by its role.

Made by ``Blackboard.agent`` (or ``Memory.agent``) with a name, a role and a task, once; the
agent never states who it is again. Node reads, writes and deletes, SPARQL, task transitions
and messages are checked against the permission matrix; guarded writes and deletes against the
leases.

Invariants:
- An operation touches only the agent's task's area graphs, and only as the matrix allows;
  a refusal raises ``PermissionDeniedError`` and changes nothing. The one exception is the
  ``tasks`` area: a read of it sees the root task's ``tasks`` graph (where the whole tree's
  ``Task`` nodes are mirrored, ``sparql.TaskRoots``), and is checked as a read of ``tasks``.
- The agent's SPARQL runs over exactly the graphs its role may read; it is a query, never an
  update, and holds only what ``sparql_check.check_agent_query`` allows (no ``SERVICE``, no
  ``FROM``, ``GRAPH`` naming only those graphs); the store runs its checked rewrite.
- A sequence parameter (``nodes``, ``tags``, ``iris``, ``areas``, ``depends_on``) is a list, a
  tuple or a set, never a string (whose characters would be taken for its items).
- A write or delete is decided by the board's write path (``board.writes``, see
  ``gliding_core.blackboard.writes``) with this handle as its writer: existence, rights and
  fences are checked inside the coordinator's transaction, under the blackboard's single
  writer, so they hold when the write happens. The handle reaches no private member of the
  board.
- A read registers the agent's copy and is served only at the node's current generation,
  whichever process wrote it (``board.read_for``); a write based on a generation the node has
  moved past is refused with ``StaleWriteError`` (current generation and value) and the agent's
  copy becomes ``INVALID``, unless the agent holds a Write or Exclusive lease on it.
- Every write and delete carries a write id (``writeids``): a new one, or the one a caller gives
  to retry a write that raised ``WriteOutcomeUnknownError``; a retry of a write that landed
  writes nothing and returns what that write committed.
- A lease needs the right it protects, on a node of the agent's own task, and a lease of
  another task's agent, or of a role without that right, never blocks the agent
  (``lease_rights``); no refusal names an agent of another task.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from gliding_core.blackboard.coordination.tasks import TASKS_AREA
from gliding_core.blackboard.graph import QueryResult, Term
from gliding_core.blackboard.lease_rights import LeaseRights
from gliding_core.blackboard.permissions import Operation, PermissionMatrix
from gliding_core.blackboard.records import BoardNode
from gliding_core.blackboard.sparql import TaskRoots, type_iri
from gliding_core.blackboard.sparql_check import check_agent_query
from gliding_core.blackboard.validation import check_iri
from gliding_core.blackboard.vocabulary import area_graph, area_in_task, check_area, graph_area
from gliding_core.bus import Subscription
from gliding_core.checks import check_list
from gliding_core.errors import InvalidInputError, LeaseConflictError, PermissionDeniedError
from gliding_core.jsonld import preview

if TYPE_CHECKING:
    from gliding_core.blackboard.board import Blackboard
    from gliding_core.blackboard.coordination.agents import Agent, AgentStatus
    from gliding_core.blackboard.coordination.leases import Lease, LeaseMode
    from gliding_core.blackboard.coordination.messages import Message
    from gliding_core.blackboard.coordination.registries import Coordination
    from gliding_core.blackboard.coordination.tasks import Task


class AgentHandle:
    """One agent's identity on the blackboard; every operation is checked against its role.

    Made by ``Blackboard.agent`` (or ``Memory.agent``); the agent never states who it is again.

    Raises:
        InvalidInputError: the name or task is not valid, or the matrix does not know the role.
    """

    def __init__(self, board: Blackboard, name: str, *, role: str, task: str) -> None:
        if not isinstance(name, str) or not name.strip():
            raise InvalidInputError(
                f"an agent name must be a non-empty string, got {preview(name)}"
            )
        self.board = board
        self.name = name
        self._role = board.permissions.role(role)
        self._task = check_iri(task, "task IRI")
        # What the matrix granted this handle, by (area, operation), and the area's graph, kept
        # with the matrix that granted it (one attribute: a grant checked against a matrix
        # replaced meanwhile lands in that matrix's dict, never in the new one's). A matrix is
        # immutable, so a grant holds while the board keeps it. Beside it, the graphs of the
        # agent's own task that matrix let it read: a cached read checks one set.
        self._grants: tuple[PermissionMatrix, dict[tuple[str, Operation], str], set[str]] = (
            board.permissions,
            {},
            set(),
        )
        self._roots = TaskRoots(board)  # the tasks area a read sees is the tree root's
        self._leases = LeaseRights(board, role=self._role, task=self._task)

    @property
    def role(self) -> str:
        """The agent's role (fixed for the handle: its grants are remembered)."""
        return self._role

    @property
    def task(self) -> str:
        """The IRI of the agent's task (fixed for the handle: its graphs are remembered)."""
        return self._task

    @property
    def lease_rights(self) -> LeaseRights:
        """Which leases the agent may take, and which stand in its way (``lease_rights``)."""
        return self._leases

    def authorize(self, area: str, operation: Operation) -> str:
        """Return the graph of ``area`` if the role may do ``operation`` there, else refuse.

        Raises:
            PermissionDeniedError: the matrix does not allow it.
        """
        matrix = self.board.permissions
        held, granted, _ = self._grants
        if held is matrix:
            graph = granted.get((area, operation))
            if graph is not None:
                return graph
        else:  # the board's matrix was replaced: nothing it granted is known
            granted = {}
            self._grants = (matrix, granted, set())
        graph = area_graph(self._task, area)
        matrix.check(self._role, area, operation, graph=graph)
        granted[(area, operation)] = graph
        return graph

    def write(
        self,
        nodes: Sequence[Mapping[str, Any] | str],
        *,
        area: str,
        tags: Sequence[str] = (),
        lease_token: int | None = None,
        based_on: int | Mapping[str, int] | None = None,
        write_id: str | None = None,
    ) -> list[BoardNode]:
        """Write nodes into an area of the agent's task (create or update, as the role allows).

        Args:
            nodes: the JSON-LD nodes, one batch (all or nothing).
            area: the area they go to (``"plan"``, ``"execution"``...).
            tags: tags of every node (a critical tag writes through to L0).
            lease_token: the fencing token of the agent's lease on each node's IRI; a write
                with a token older than the newest grant is refused.
            based_on: the generation the change was made from (0: the node must not exist
                yet), for every node of the batch or by IRI; ``None`` (or an IRI left out of
                the mapping) writes whatever the node's generation.
            write_id: ``None`` for a new write (the handle gives it an id); to retry a write
                that raised ``WriteOutcomeUnknownError``, its ``write_id`` with the same nodes,
                area and tags: if that write landed, the nodes are returned as it committed
                them and nothing is written again (``based_on`` and the lease are not checked
                again); if not, this write is made, once.

        Raises:
            PermissionDeniedError: the role may not create or update there (or delete a node
                it would move out of another area).
            FencingTokenError: the token is stale or the lease is not the agent's.
            StaleWriteError: a node has moved past ``based_on`` and the agent holds no Write
                lease on it; nothing was written.
            WriteOutcomeUnknownError: the store may have applied the write and its answer was
                lost; retry with the error's ``write_id``.
            InvalidInputError: ``write_id`` is not an id, or one another write's nodes carry.
        """
        return self.board.writes.write(
            self,
            nodes,
            area=area,
            tags=tags,
            lease_token=lease_token,
            based_on=based_on,
            write_id=write_id,
            source=self.name,
        )

    def area_of(self, node: BoardNode, *, reading: bool = False) -> str:
        """Return the area of the agent's task that holds ``node``, or refuse.

        ``reading``: a node of the root task's ``tasks`` graph is in the ``tasks`` area (a
        read sees the tree's ``Task`` nodes there; a write or delete of it is refused).

        Raises:
            PermissionDeniedError: the node is in no area of the agent's task.
        """
        area = area_in_task(node.graph, self.task)
        if area is not None:
            return area
        place = graph_area(node.graph) if reading else None
        if place is not None and place[1] == TASKS_AREA and place[0] == self._root():
            return TASKS_AREA
        raise PermissionDeniedError(
            f"node {node.iri!r} is not in an area of task {self.task!r}",
            role=self.role,
            graph=node.graph,
            operation="read",
        )

    def _root(self) -> str:
        """Return the root of the agent's task tree (looked up once the task is registered)."""
        return self._roots.root(self.task)

    def read(self, iri: str) -> BoardNode | None:
        """Return a node of the agent's task, or ``None`` when there is none.

        The agent's copy is registered (``EXCLUSIVE`` alone, else ``SHARED``) and the
        node returned is at least at the generation the directory holds for it.

        Raises:
            PermissionDeniedError: the node is in an area (or task) the role may not read.
            InvalidNodeError: ``iri`` is not an absolute IRI string.
        """
        if type(iri) is not str:  # the cache's look-up takes any hashable
            check_iri(iri, "IRI")
        return self.board.read_for(self, iri)

    def check_readable(self, node: BoardNode) -> None:
        """Refuse ``node`` unless it is in an area of the task the role may read.

        Raises:
            PermissionDeniedError: it is not.
        """
        matrix = self.board.permissions
        held, _, readable = self._grants
        if held is matrix and node.graph in readable:
            return
        self.authorize(self.area_of(node, reading=True), Operation.READ)
        held, _, readable = self._grants
        # Only the task's own graphs are remembered: their area is fixed by their name, where
        # the tree's ``tasks`` graph a read may see changes when the task is registered again.
        if held is matrix and area_in_task(node.graph, self.task) is not None:
            readable.add(node.graph)

    def evict(self, iri: str) -> None:
        """Drop the agent's copy of a node (a dirty one is written back to L0 first)."""
        self.board.coherence.evict(self.name, check_iri(iri, "IRI"))

    def readable_areas(self) -> list[str]:
        """Return the areas this agent may read."""
        return self.board.permissions.areas(self.role, Operation.READ)

    def _graphs(self, areas: Sequence[str]) -> list[str]:
        """Return the graphs a read of ``areas`` sees: the task's, and its tree's ``tasks``.

        No permission is checked here: the handle's reads check each area first.
        """
        return self._roots.graphs(self.task, areas)

    def by_area(self, area: str) -> list[BoardNode]:
        """Return the nodes of one area of the agent's task (``tasks``: its tree's tasks)."""
        self.authorize(check_area(area), Operation.READ)
        (graph,) = self._graphs([area])
        return self.board.by_graph(graph)

    def by_type(self, type_name: str) -> list[BoardNode]:
        """Return the nodes of a type in the areas this agent may read."""
        nodes = self.board.nodes
        graphs = self._graphs(self.readable_areas())
        return nodes.get_listed(nodes.iris_of_type(type_iri(type_name), graphs))

    def delete(
        self, iris: Sequence[str], *, lease_token: int | None = None, write_id: str | None = None
    ) -> int:
        """Delete nodes of the agent's task; return how many existed.

        Args:
            iris: the IRIs of the nodes (one batch: all or nothing).
            lease_token: the fencing token of the agent's lease on each node's IRI, as for
                ``write``: a node under the agent's own Write lease needs it.
            write_id: as for ``write``: the ``write_id`` of a delete that raised
                ``WriteOutcomeUnknownError`` retries it (if it landed, nothing more is
                deleted and the number of nodes it deleted is returned).

        Raises:
            PermissionDeniedError: a node is in an area where the role may not delete.
            LeaseConflictError: a node is under another agent's Write or Exclusive lease.
            FencingTokenError: the token is stale or the lease is not the agent's.
            WriteOutcomeUnknownError: the store may have applied the delete and its answer
                was lost; retry with the error's ``write_id``.
        """
        checked = [check_iri(i, "IRI") for i in check_list(iris, what="iris")]
        return self.board.writes.delete(
            self, checked, lease_token=lease_token, write_id=write_id, source=self.name
        )

    def query(
        self,
        sparql: str,
        *,
        areas: Sequence[str] | None = None,
        bindings: Mapping[str, Term] | None = None,
    ) -> QueryResult:
        """Run a SPARQL query over the graphs the agent may read (``areas`` narrows them).

        The dataset is set by the blackboard. The text is checked on its SPARQL tokens
        (``sparql_check.check_agent_query``: a query form, known keywords, no ``SERVICE``, no
        ``FROM``, ``GRAPH`` naming only those graphs, the board's ``query_limits``) and the
        store runs the rewrite of the checked tokens.

        Raises:
            PermissionDeniedError: an update, an area the role may not read (or none), or
                ``GRAPH`` naming a graph outside the areas read.
            ContentTooLargeError: the query is past a limit of the board's ``query_limits``.
            InvalidInputError: the query holds anything else the check refuses.
        """
        readable = self.readable_areas()
        wanted = (
            readable if areas is None else [check_area(a) for a in check_list(areas, what="areas")]
        )
        for area in wanted:
            self.authorize(area, Operation.READ)
        if not wanted:
            raise PermissionDeniedError(
                f"role {self.role!r} may read no area of the blackboard",
                role=self.role,
                graph="*",
                operation="read",
            )
        graphs = self._graphs(wanted)
        checked = check_agent_query(
            sparql, graphs=graphs, role=self.role, limits=self.board.config.query_limits
        )
        return self.board.query(checked, graphs=graphs, bindings=bindings)

    # -- coordination: status, leases, tasks, messages -----------------------------------------

    def heartbeat(
        self, *, status: AgentStatus | str | None = None, operation: str | None = None
    ) -> Agent:
        """Tell the blackboard the agent is alive (renewing its leases), maybe with a status."""
        return self._coordination().agents.heartbeat(self.name, status=status, operation=operation)

    def set_status(self, status: AgentStatus | str, *, operation: str | None = None) -> Agent:
        """Report the agent's status (Idle, Working, Waiting, Completed, Error)."""
        return self._coordination().agents.set_status(self.name, status, operation=operation)

    def acquire(
        self,
        resource: str,
        mode: LeaseMode | str = "write",
        *,
        ttl_s: float | None = None,
        timeout_s: float | None = None,
    ) -> Lease:
        """Take a lease on ``resource`` (a node IRI: it guards the node's writes), waiting up to
        ``timeout_s``; its ``token`` is what guarded writes present.

        The lease needs the right it protects (``lease_rights``): Read, to read the node;
        Write and Exclusive, to update it; on a node of the agent's task. An IRI with no node
        yet needs a role that may create in some area of the task.

        Raises:
            PermissionDeniedError: the agent lacks that right (nothing is leased).
            LeaseConflictError: the resource is held incompatibly (``LeaseTimeoutError`` at
                the deadline); a holder of another task is named
                ``lease_rights.OTHER_TASK_HOLDER``.
        """
        leases = self._coordination().leases
        iri, asked, void = self._leases.leasable(resource, mode)
        try:
            return leases.acquire(
                iri, self.name, asked, ttl_s=ttl_s, timeout_s=timeout_s, void=void
            )
        except LeaseConflictError as error:
            raise self._leases.shown(error, asked) from None

    async def acquire_async(
        self,
        resource: str,
        mode: LeaseMode | str = "write",
        *,
        ttl_s: float | None = None,
        timeout_s: float | None = None,
    ) -> Lease:
        """Await a lease like ``acquire`` (the same rights) without blocking the event loop."""
        leases = self._coordination().leases
        iri, asked, void = await asyncio.to_thread(self._leases.leasable, resource, mode)
        try:
            return await leases.acquire_async(
                iri, self.name, asked, ttl_s=ttl_s, timeout_s=timeout_s, void=void
            )
        except LeaseConflictError as error:
            raise await asyncio.to_thread(self._leases.shown, error, asked) from None

    @contextmanager
    def hold(
        self, resource: str, mode: LeaseMode | str = "write", *, timeout_s: float | None = None
    ) -> Iterator[Lease]:
        """Hold a lease for the block (``acquire`` on entry, released on exit)."""
        lease = self.acquire(resource, mode, timeout_s=timeout_s)
        try:
            yield lease
        finally:
            self.release(lease.resource)

    def release(self, resource: str) -> bool:
        """Release the agent's lease on ``resource``; return whether it held one."""
        return self._coordination().leases.release(resource, self.name)

    def task_status(self) -> Task:
        """Return the agent's task as registered (status, parent, dependencies)."""
        self.authorize("tasks", Operation.READ)
        return self._coordination().tasks.get(self.task)

    def register_subtask(self, iri: str, *, depends_on: Sequence[str] = ()) -> Task:
        """Register a subtask of the agent's task (the matrix's create on ``tasks``)."""
        self.authorize("tasks", Operation.CREATE)
        return self._coordination().tasks.register(
            iri, parent=self.task, depends_on=check_list(depends_on, what="depends_on")
        )

    def start_task(self) -> Task:
        """Move the agent's task to running (the matrix's update on ``tasks``)."""
        return self._move_task(lambda tasks: tasks.start(self.task))

    def complete_task(self) -> Task:
        """Complete the agent's task; its areas are flushed to L0 before this returns."""
        return self._move_task(lambda tasks: tasks.complete(self.task))

    def fail_task(self) -> Task:
        """Mark the agent's task failed."""
        return self._move_task(lambda tasks: tasks.fail(self.task))

    def _move_task(self, change: Callable[[Any], Task]) -> Task:
        self.authorize("tasks", Operation.UPDATE)
        return change(self._coordination().tasks)

    def publish(self, topic: str, payload: Mapping[str, Any] | None = None) -> Message:
        """Publish a coordination message on the agent's task, signed with its name."""
        self.authorize("messages", Operation.CREATE)
        return self._coordination().messages.publish(
            topic, payload, task=self.task, sender=self.name
        )

    def messages(
        self, since: int = 0, *, topic: str | None = None, limit: int | None = None
    ) -> list[Message]:
        """Return the task's messages after sequence ``since``, in order, all of them."""
        self.authorize("messages", Operation.READ)
        return self._coordination().messages.read_since(
            since, topic=topic, task=self.task, limit=limit
        )

    def subscribe(
        self, callback: Callable[[Message], None], *, topic: str | None = None
    ) -> Subscription:
        """Push each new message of the agent's task (and ``topic``) to ``callback``."""
        self.authorize("messages", Operation.READ)
        return self._coordination().messages.subscribe(callback, topic=topic, task=self.task)

    def _coordination(self) -> Coordination:
        """The board's coordination layer; ``InvalidInputError`` when it has none."""
        coordination = self.board.coordination
        if coordination is None:
            raise InvalidInputError("this blackboard has no coordination layer (leases, tasks...)")
        return coordination

    def __repr__(self) -> str:
        return f"AgentHandle({self.name!r}, role={self.role!r}, task={self.task!r})"
