"""L2: the blackboard facade, and the agent handle through which agents use it.

``Blackboard`` is the system's view: it writes and reads any graph (as the coordination layer
does when it mirrors tasks and agents), runs SPARQL over the whole store, and owns the
write-back to L0. ``AgentHandle`` binds an identity (name, role, task) once; every operation
made through it is checked against the permission matrix, reads included.

Invariants:
- An agent's operation touches only its task's area graphs, and only as the matrix allows:
  create for a new node, update for an existing one, delete, read; a refused operation raises
  ``PermissionDeniedError`` and changes nothing.
- An agent's SPARQL runs over a dataset of exactly the graphs its role may read (default graph
  and named graphs), which overrides any ``FROM`` / ``FROM NAMED`` in the text; it is always a
  query, never an update, and never reaches a remote ``SERVICE``.
- A guarded write (``lease_token=``) is refused unless the token is the newest one granted for
  each node's IRI to this agent (fencing); a node under another agent's live Write or
  Exclusive lease is refused to every other writer, and its holder must present the token.
- The ``tasks``, ``agents`` and ``messages`` areas are written by the coordination layer only
  (through ``mirror``); agents change them through the handle's task, status and message
  operations, which the matrix checks like node operations.
- With a coordination layer, a task's completion flushes its areas to L0 before
  ``complete`` returns, and closing the blackboard closes the coordination first (its sweeper
  mirrors into the graph).
- Parameters of the queries the blackboard ships are bound as terms, never spliced as text.
"""

from __future__ import annotations

import os
import re
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, Protocol

import pyoxigraph as ox

from gliding_core.blackboard.graph import (
    Dataset,
    EmbeddedGraph,
    GraphBackend,
    QueryResult,
    Term,
    mask_opaque,
    term_value,
)
from gliding_core.blackboard.graph import open_graph as _open_graph
from gliding_core.blackboard.nodes import BoardNode, NodeStore, check_iri
from gliding_core.blackboard.permissions import Operation, PermissionMatrix
from gliding_core.blackboard.vocabulary import (
    AREAS,
    META_GRAPH,
    VOCAB,
    area_graph,
    check_area,
    graph_area,
)
from gliding_core.blackboard.writeback import WriteBack
from gliding_core.bus import Event, EventBus, EventType, Subscription
from gliding_core.config import BlackboardConfig
from gliding_core.errors import (
    ClosedError,
    InvalidInputError,
    LeaseConflictError,
    PermissionDeniedError,
)
from gliding_core.jsonld import preview
from gliding_core.store import L0Store

if TYPE_CHECKING:
    from gliding_core.blackboard.agents import Agent, AgentStatus
    from gliding_core.blackboard.leases import Lease, LeaseMode
    from gliding_core.blackboard.messages import Message
    from gliding_core.blackboard.registries import Coordination
    from gliding_core.blackboard.tasks import Task

_UPDATE_KEYWORDS = frozenset(
    {"insert", "delete", "load", "clear", "create", "drop", "copy", "move", "add", "with"}
)
_SERVICE = re.compile(r"(?<![\w:])service(?![\w:])", re.IGNORECASE)
MIRRORED_AREAS = frozenset({"tasks", "agents", "messages"})
"""Areas the coordination layer writes; agents reach them through their handle's operations."""
_PROLOGUE = re.compile(r"\s*(?:base\s*<>|prefix\s+[\w.-]*:\s*<>)", re.IGNORECASE)


class FenceChecker(Protocol):
    """What a guarded write needs from the lease table (``LeaseTable.check_fence``)."""

    def check_fence(self, resource: str, holder: str, token: int) -> None:
        """Raise unless ``token`` is the newest one granted for ``resource`` to ``holder``."""
        ...


def type_iri(name: str) -> str:
    """Return the IRI of a type given as a vocabulary term (``"Task"``) or an absolute IRI."""
    if not isinstance(name, str) or not name:
        raise InvalidInputError(f"a type must be a non-empty string, got {preview(name)}")
    return name if ":" in name else VOCAB + name


def check_query(text: object) -> str:
    """Return ``text`` if it is a SPARQL query that may run here: not an update, no SERVICE.

    Raises:
        InvalidInputError: not a string, or it calls a remote ``SERVICE``.
        PermissionDeniedError: it is a SPARQL UPDATE.
    """
    if not isinstance(text, str) or not text.strip():
        raise InvalidInputError(f"a SPARQL query must be a non-empty string, got {preview(text)}")
    bare = re.sub(r"<\s*>", "<>", mask_opaque(text))
    if _SERVICE.search(bare) or "\\u" in bare.lower():
        raise InvalidInputError("SPARQL SERVICE (a remote query) is not allowed on the blackboard")
    words = _PROLOGUE.sub(" ", bare).split()
    if words and words[0].lower() in _UPDATE_KEYWORDS:
        raise PermissionDeniedError(
            "SPARQL UPDATE is not allowed here; write nodes through the blackboard",
            role="agent",
            graph="*",
            operation="sparql-update",
        )
    return text


class Blackboard:
    """The L2 blackboard: JSON-LD nodes in named graphs over an RDF store, flushed to L0.

    Args:
        backend: the RDF store (``EmbeddedGraph`` or ``SparqlEndpoint``).
        store: the L0 store written back to; no write-back when ``None``.
        bus: where node and write-back events go.
        config: the blackboard settings.
        permissions: the role x area x operation matrix (from ``config`` when omitted).
        fences: the lease table guarded writes are checked against (the coordination's).
        coordination: the leases, tasks, agents and messages; the blackboard mirrors their
            state, flushes a task's areas when it completes, and closes it.

    Example:
        >>> board = Blackboard(EmbeddedGraph())
        >>> board.write([{"@id": "urn:ex:plan", "@type": "Plan"}], task="urn:ex:t", area="plan")
        ...  # doctest: +ELLIPSIS
        [BoardNode(...)]
    """

    def __init__(
        self,
        backend: GraphBackend,
        *,
        store: L0Store | None = None,
        bus: EventBus | None = None,
        config: BlackboardConfig | None = None,
        permissions: PermissionMatrix | None = None,
        fences: FenceChecker | None = None,
        coordination: Coordination | None = None,
    ) -> None:
        self.config = config or BlackboardConfig()
        self.backend = backend
        self.bus = bus
        self.nodes = NodeStore(
            backend,
            max_node_bytes=self.config.max_node_bytes,
            max_batch=self.config.max_batch_nodes,
            cache_size=self.config.cache_nodes,
            bus=bus,
        )
        self.permissions = permissions or PermissionMatrix(self.config.permissions)
        self.fences: FenceChecker | None = fences
        self.coordination = coordination
        self._completions: Subscription | None = None
        if coordination is not None:
            self._attach(coordination)
        self.writeback: WriteBack | None = None
        if store is not None:
            self.writeback = WriteBack(
                self.nodes,
                store,
                critical_tags=self.config.critical_tags,
                batch=self.config.flush_batch,
                bus=bus,
            )
            self.writeback.start(self.config.flush_interval_s)
        self._closed = False
        self._close_lock = threading.Lock()

    def _attach(self, coordination: Coordination) -> None:
        coordination.mirror = self
        if self.fences is None:
            self.fences = coordination.leases
        self._completions = coordination.bus.subscribe(
            self._on_task_status, [EventType.TASK_STATUS_CHANGED]
        )

    def _on_task_status(self, event: Event) -> None:
        """Flush a completed task's areas to L0 (on the thread that completed it)."""
        if event.payload.get("status") == "completed" and event.task_iri is not None:
            self.flush(task=event.task_iri)

    def _coordination(self) -> Coordination:
        if self.coordination is None:
            raise InvalidInputError("this blackboard has no coordination layer (leases, tasks...)")
        return self.coordination

    @classmethod
    def open(
        cls,
        path: str | os.PathLike[str] | None = None,
        *,
        endpoint: str | None = None,
        **options: Any,
    ) -> Blackboard:
        """Open a blackboard on a server (``endpoint``), a directory (``path``) or in memory.

        A blackboard on disk or on a server first flushes what a crash left dirty.
        """
        board = cls(_open_graph(path=path, endpoint=endpoint), **options)
        if board.backend.kind != "memory":
            board.flush()
        return board

    # -- the system's operations -------------------------------------------------------------

    def write(
        self,
        nodes: Sequence[Mapping[str, Any] | str],
        *,
        task: str | None = None,
        area: str | None = None,
        graph: str | None = None,
        tags: Sequence[str] = (),
        source: str | None = None,
    ) -> list[BoardNode]:
        """Write a batch of nodes into one graph, all or nothing; return them as stored.

        The graph is a task's area (``task`` and ``area``) or any IRI (``graph``). Nodes with a
        critical tag are in L0 when this returns.

        Raises:
            InvalidNodeError: a node is malformed; ContentTooLargeError: a node or the batch is
                too large; InvalidInputError: the graph is missing or not allowed.
        """
        target = self._graph(task, area, graph)
        written = self.nodes.write(self.nodes.prepare(nodes, target, tags), source=source)
        self._after_write(written)
        return written

    def _after_write(self, written: Sequence[BoardNode]) -> None:
        if self.writeback is not None:
            self.writeback.after_write(written)

    def _graph(self, task: str | None, area: str | None, graph: str | None) -> str:
        self._check_open()
        if graph is not None:
            if task is not None or area is not None:
                raise InvalidInputError("give either graph= or task= and area=, not both")
            if check_iri(graph, "graph") == META_GRAPH:
                raise InvalidInputError(f"{META_GRAPH} holds the blackboard's bookkeeping")
            return graph
        if task is None or area is None:
            raise InvalidInputError("a write needs task= and area= (or graph=)")
        return area_graph(task, area)

    def read(self, iri: str) -> BoardNode | None:
        """Return the node with ``iri``, or ``None`` (the cache first, then the store)."""
        self._check_open()
        return self.nodes.get(iri)

    def read_many(self, iris: Sequence[str]) -> dict[str, BoardNode]:
        """Return the existing nodes among ``iris``, by IRI."""
        self._check_open()
        return self.nodes.get_many([check_iri(i, "IRI") for i in iris])

    def by_graph(self, graph: str) -> list[BoardNode]:
        """Return the nodes of a named graph, sorted by IRI."""
        return self._nodes(self.nodes.iris_in([check_iri(graph, "graph")]))

    def by_task(self, task: str, areas: Sequence[str] = AREAS) -> list[BoardNode]:
        """Return the nodes of a task's areas (all of them by default), sorted by IRI."""
        return self._nodes(self.nodes.iris_in(task_graphs(task, areas)))

    def by_type(
        self, type_name: str, *, task: str | None = None, areas: Sequence[str] = AREAS
    ) -> list[BoardNode]:
        """Return the nodes of a type (a term such as ``"Task"`` or an IRI), sorted by IRI."""
        graphs = task_graphs(task, areas) if task is not None else self._area_graphs()
        return self._nodes(self.nodes.iris_of_type(type_iri(type_name), graphs))

    def _area_graphs(self) -> list[str]:
        result = self.backend.query("SELECT DISTINCT ?g WHERE { GRAPH ?g { } }")
        graphs = [term_value(row["g"]) for row in result.rows]
        return [g for g in graphs if g != META_GRAPH]

    def _nodes(self, iris: Sequence[str]) -> list[BoardNode]:
        found = self.nodes.get_many(iris)
        return [found[i] for i in iris if i in found]

    def delete(self, iris: Sequence[str], *, source: str | None = None) -> int:
        """Delete nodes from the blackboard (not from L0); return how many existed."""
        self._check_open()
        return len(self.nodes.delete(iris, source=source))

    def query(
        self,
        sparql: str,
        *,
        graphs: Sequence[str] | None = None,
        bindings: Mapping[str, Term] | None = None,
    ) -> QueryResult:
        """Run a SPARQL SELECT, CONSTRUCT, ASK or DESCRIBE as the system.

        Args:
            sparql: the query.
            graphs: the graphs it sees (default graph = their union, and as named graphs);
                the whole store when ``None``.
            bindings: variables bound to terms (``{"task": NamedNode(...)}``).
        """
        self._check_open()
        check_query(sparql)
        dataset = None if graphs is None else Dataset(tuple(graphs), tuple(graphs))
        return self.nodes.query(sparql, dataset=dataset, bindings=_check_bindings(bindings))

    def flush(self, *, task: str | None = None) -> int:
        """Write the dirty nodes (of ``task`` when given) to L0; return how many."""
        if self.writeback is None:
            return 0
        return self.writeback.flush(None if task is None else task_graphs(task))

    # -- the coordination layer's mirror (NodeMirror) ----------------------------------------

    def mirror(self, task_iri: str, area: str, nodes: Sequence[Mapping[str, Any]]) -> None:
        """Write coordination state (tasks, agents) as nodes of a task's area, as the system."""
        self.write(nodes, task=task_iri, area=area, source="system")

    def forget(self, iris: Sequence[str]) -> None:
        """Delete mirrored nodes."""
        self.delete(iris, source="system")

    # -- agents ------------------------------------------------------------------------------

    def agent(self, name: str, *, role: str, task: str) -> AgentHandle:
        """Return the handle through which the agent ``name`` of ``role`` works on ``task``.

        With a coordination layer the agent is registered (again: a heartbeat).
        """
        self._check_open()
        handle = AgentHandle(self, name, role=role, task=task)
        if self.coordination is not None:
            self.coordination.agents.register(handle.name, role=handle.role, task=handle.task)
        return handle

    # -- lifecycle ---------------------------------------------------------------------------

    @property
    def closed(self) -> bool:
        """Whether ``close()`` was called (background workers over the board stop then)."""
        return self._closed

    def _check_open(self) -> None:
        if self._closed:
            raise ClosedError("the blackboard is closed")

    def close(self) -> None:
        """Stop the flush timer, flush what is dirty, close the store; twice is harmless."""
        with self._close_lock:
            if self._closed:
                return
            if self.coordination is not None:
                if self._completions is not None:
                    self._completions.cancel()
                self.coordination.close()  # its sweeper mirrors into the graph: first
            if self.writeback is not None:
                self.writeback.stop()
                self.writeback.flush()
            self._closed = True
            self.backend.close()

    def __enter__(self) -> Blackboard:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Blackboard({self.backend!r})"


def task_graphs(task: str, areas: Sequence[str] = AREAS) -> list[str]:
    """Return the named graphs of a task's areas."""
    return [area_graph(task, check_area(a)) for a in areas]


def _check_bindings(bindings: Mapping[str, Term] | None) -> Mapping[str, Term] | None:
    if bindings is None:
        return None
    if not isinstance(bindings, Mapping):
        raise InvalidInputError(
            f"bindings must map variable names to terms, got {preview(bindings)}"
        )
    for name, value in bindings.items():
        if not isinstance(name, str) or not isinstance(
            value, (ox.NamedNode, ox.BlankNode, ox.Literal, ox.Triple)
        ):
            raise InvalidInputError(
                f"binding {name!r} must be a pyoxigraph term (NamedNode, Literal...),"
                f" got {preview(value)}"
            )
    return bindings


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
        self.role = board.permissions.role(role)
        self.task = check_iri(task, "task IRI")

    def _check(self, area: str, operation: Operation) -> str:
        graph = area_graph(self.task, area)
        self.board.permissions.check(self.role, area, operation, graph=graph)
        return graph

    def write(
        self,
        nodes: Sequence[Mapping[str, Any] | str],
        *,
        area: str,
        tags: Sequence[str] = (),
        lease_token: int | None = None,
    ) -> list[BoardNode]:
        """Write nodes into an area of the agent's task (create or update, as the role allows).

        Args:
            nodes: the JSON-LD nodes, one batch (all or nothing).
            area: the area they go to (``"plan"``, ``"execution"``...).
            tags: tags of every node (a critical tag writes through to L0).
            lease_token: the fencing token of the agent's lease on each node's IRI; a write
                with a token older than the newest grant is refused.

        Raises:
            PermissionDeniedError: the role may not create or update there (or delete a node
                it would move out of another area).
            FencingTokenError: the token is stale or the lease is not the agent's.
        """
        board = self.board
        graph = area_graph(self.task, self._writable(area))
        requests = board.nodes.prepare(nodes, graph, tags)
        with board.nodes.writer:  # existence, rights and fences do not change before the write
            existing = board.nodes.get_many([r.iri for r in requests])
            for request in requests:
                self._check_write(existing.get(request.iri), area)
                self._check_lease(request.iri, lease_token)
            written = board.nodes.write(requests, source=self.name)
        board._after_write(written)
        return written

    def _check_write(self, old: BoardNode | None, area: str) -> None:
        if old is None:
            self._check(area, Operation.CREATE)
            return
        self._check(area, Operation.UPDATE)
        if old.graph != area_graph(self.task, area):
            self._check(self._area_of(old), Operation.DELETE)

    def _writable(self, area: str) -> str:
        if check_area(area) in MIRRORED_AREAS:
            raise PermissionDeniedError(
                f"the {area!r} area is written by the coordination layer; use the handle's"
                " task, status and message operations",
                role=self.role,
                graph=area_graph(self.task, area),
                operation="create",
            )
        return area

    def _check_lease(self, iri: str, token: int | None) -> None:
        """Refuse a write that a live Write or Exclusive lease on ``iri`` does not allow."""
        board = self.board
        if token is not None:
            if board.fences is None:
                raise InvalidInputError("this blackboard has no lease table to check tokens")
            board.fences.check_fence(iri, self.name, token)
            return
        if board.coordination is None:
            return
        guards = [lease for lease in board.coordination.leases.holders(iri) if lease.mode != "read"]
        others = tuple((g.holder, g.mode.value) for g in guards if g.holder != self.name)
        if others:
            raise LeaseConflictError(
                f"{iri!r} is leased for writing by {[h for h, _ in others]}; {self.name!r} may"
                " not write it",
                resource=iri,
                holders=others,
            )
        if guards:
            raise InvalidInputError(
                f"{self.name!r} holds a write lease on {iri!r}: present its token (lease_token=)"
            )

    def _area_of(self, node: BoardNode) -> str:
        """Return the area of the agent's task that holds ``node``, or refuse."""
        place = graph_area(node.graph)
        if place is None or place[0] != self.task:
            raise PermissionDeniedError(
                f"node {node.iri!r} is not in an area of task {self.task!r}",
                role=self.role,
                graph=node.graph,
                operation="read",
            )
        return place[1]

    def read(self, iri: str) -> BoardNode | None:
        """Return a node of the agent's task, or ``None`` when there is none.

        Raises:
            PermissionDeniedError: the node is in an area (or task) the role may not read.
        """
        node = self.board.read(iri)
        if node is not None:
            self._check(self._area_of(node), Operation.READ)
        return node

    def readable_areas(self) -> list[str]:
        """Return the areas this agent may read."""
        return self.board.permissions.areas(self.role, Operation.READ)

    def by_area(self, area: str) -> list[BoardNode]:
        """Return the nodes of one area of the agent's task."""
        self._check(check_area(area), Operation.READ)
        return self.board.by_task(self.task, [area])

    def by_type(self, type_name: str) -> list[BoardNode]:
        """Return the nodes of a type in the areas this agent may read."""
        return self.board.by_type(type_name, task=self.task, areas=self.readable_areas())

    def delete(self, iris: Sequence[str]) -> int:
        """Delete nodes of the agent's task; return how many existed.

        Raises:
            PermissionDeniedError: a node is in an area where the role may not delete.
        """
        board = self.board
        with board.nodes.writer:
            existing = board.nodes.get_many([check_iri(i, "IRI") for i in iris])
            for node in existing.values():
                self._check(self._writable(self._area_of(node)), Operation.DELETE)
                self._check_lease(node.iri, None)
            return board.delete(list(existing), source=self.name)

    def query(
        self,
        sparql: str,
        *,
        areas: Sequence[str] | None = None,
        bindings: Mapping[str, Term] | None = None,
    ) -> QueryResult:
        """Run a SPARQL query over the graphs the agent may read (``areas`` narrows them).

        The dataset is set by the blackboard: ``FROM`` / ``FROM NAMED`` in the text cannot
        widen it.

        Raises:
            PermissionDeniedError: an update, or an area the role may not read (or none).
        """
        readable = self.readable_areas()
        wanted = readable if areas is None else [check_area(a) for a in areas]
        for area in wanted:
            self._check(area, Operation.READ)
        if not wanted:
            raise PermissionDeniedError(
                f"role {self.role!r} may read no area of the blackboard",
                role=self.role,
                graph="*",
                operation="read",
            )
        check_query(sparql)
        return self.board.query(sparql, graphs=task_graphs(self.task, wanted), bindings=bindings)

    # -- coordination: status, leases, tasks, messages -----------------------------------------

    def heartbeat(
        self, *, status: AgentStatus | str | None = None, operation: str | None = None
    ) -> Agent:
        """Tell the blackboard the agent is alive (renewing its leases), maybe with a status."""
        return self.board._coordination().agents.heartbeat(
            self.name, status=status, operation=operation
        )

    def set_status(self, status: AgentStatus | str, *, operation: str | None = None) -> Agent:
        """Report the agent's status (Idle, Working, Waiting, Completed, Error)."""
        return self.board._coordination().agents.set_status(self.name, status, operation=operation)

    def acquire(
        self,
        resource: str,
        mode: LeaseMode | str = "write",
        *,
        ttl_s: float | None = None,
        timeout_s: float | None = None,
    ) -> Lease:
        """Take a lease on ``resource`` (a node IRI guards its writes), waiting up to
        ``timeout_s``; its ``token`` is what guarded writes present."""
        leases = self.board._coordination().leases
        return leases.acquire(resource, self.name, mode, ttl_s=ttl_s, timeout_s=timeout_s)

    async def acquire_async(
        self,
        resource: str,
        mode: LeaseMode | str = "write",
        *,
        ttl_s: float | None = None,
        timeout_s: float | None = None,
    ) -> Lease:
        """Await a lease like ``acquire`` without blocking the event loop."""
        leases = self.board._coordination().leases
        return await leases.acquire_async(
            resource, self.name, mode, ttl_s=ttl_s, timeout_s=timeout_s
        )

    @contextmanager
    def hold(
        self, resource: str, mode: LeaseMode | str = "write", *, timeout_s: float | None = None
    ) -> Iterator[Lease]:
        """Hold a lease for the block (acquired on entry, released on exit)."""
        leases = self.board._coordination().leases
        with leases.hold(resource, self.name, mode, timeout_s=timeout_s) as lease:
            yield lease

    def release(self, resource: str) -> bool:
        """Release the agent's lease on ``resource``; return whether it held one."""
        return self.board._coordination().leases.release(resource, self.name)

    def task_status(self) -> Task:
        """Return the agent's task as registered (status, parent, dependencies)."""
        self._check("tasks", Operation.READ)
        return self.board._coordination().tasks.get(self.task)

    def register_subtask(self, iri: str, *, depends_on: Sequence[str] = ()) -> Task:
        """Register a subtask of the agent's task (the matrix's create on ``tasks``)."""
        self._check("tasks", Operation.CREATE)
        return self.board._coordination().tasks.register(
            iri, parent=self.task, depends_on=depends_on
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
        self._check("tasks", Operation.UPDATE)
        return change(self.board._coordination().tasks)

    def publish(self, topic: str, payload: Mapping[str, Any] | None = None) -> Message:
        """Publish a coordination message on the agent's task, signed with its name."""
        self._check("messages", Operation.CREATE)
        return self.board._coordination().messages.publish(
            topic, payload, task=self.task, sender=self.name
        )

    def messages(
        self, since: int = 0, *, topic: str | None = None, limit: int | None = None
    ) -> list[Message]:
        """Return the task's messages after sequence ``since``, in order, all of them."""
        self._check("messages", Operation.READ)
        return self.board._coordination().messages.read_since(
            since, topic=topic, task=self.task, limit=limit
        )

    def subscribe(
        self, callback: Callable[[Message], None], *, topic: str | None = None
    ) -> Subscription:
        """Push each new message of the agent's task (and ``topic``) to ``callback``."""
        self._check("messages", Operation.READ)
        return self.board._coordination().messages.subscribe(callback, topic=topic, task=self.task)

    def __repr__(self) -> str:
        return f"AgentHandle({self.name!r}, role={self.role!r}, task={self.task!r})"


__all__ = ["AgentHandle", "Blackboard", "EmbeddedGraph", "check_query", "task_graphs", "type_iri"]
