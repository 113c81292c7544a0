"""L2: the blackboard facade, and the agent handle through which agents use it.

``Blackboard`` is the system's view: it writes and reads any graph (as the coordination layer
does when it mirrors tasks and agents), runs SPARQL over the whole store, and owns the
write-back to L0. ``AgentHandle`` binds an identity (name, role, task) once; every operation
made through it is checked against the permission matrix, reads included.

Invariants:
- An agent's operation touches only its task's area graphs, and only as the matrix allows:
  create for a new node, update for an existing one, delete, read; a refused operation raises
  ``PermissionDeniedError`` and changes nothing. One exception: a read of the ``tasks`` area
  sees the root task's ``tasks`` graph, where the whole tree's ``Task`` nodes are mirrored
  (``sparql.TaskRoots``), so every task of a tree reads its tree's tasks.
- An agent's SPARQL runs over a dataset of exactly the graphs its role may read (default graph
  and named graphs); it is always a query, never an update, names no dataset (``FROM``) and
  never reaches a remote ``SERVICE``. Every query, the system's too, is checked on its SPARQL
  tokens under ``config.query_limits`` and the store runs the rewrite of the checked tokens
  (``sparql_check``), never the text given.
- A guarded write (``lease_token=``) is refused unless the token is the newest one granted for
  each node's IRI to this agent (fencing); a node under another agent's live Write or
  Exclusive lease is refused to every other writer, and its holder must present the token.
- The ``tasks``, ``agents`` and ``messages`` areas are written by the coordination layer only
  (through ``mirror``); agents change them through the handle's task, status and message
  operations, which the matrix checks like node operations.
- With a coordination layer, a task's completion flushes its areas to L0 before
  ``complete`` returns; a task's release (or collection) flushes its areas, then deletes
  their nodes and unregisters its agents before ``release`` returns (``release_tasks``: a
  failed flush deletes nothing and is logged); and closing the blackboard closes the
  coordination first (its sweeper mirrors into the graph).
- Every write and delete, the system's included, is one transition of the board's coordinator
  (``coherence``), decided in one place (``writes``, see ``gliding_core.blackboard.writes``):
  agents' copies are invalidated and announced, a read through a handle is served only from a
  current copy (``read_for``), and a write based on an old generation is refused.
- Parameters of the queries the blackboard ships are bound as terms, never spliced as text.
- At a server with a directory that pushes changes (PostgreSQL's), the board subscribes to
  it: another process's commit drops this process's copies of the nodes it moved (and their
  cache entries) and the copies it ended as it arrives, announced on the bus
  (``Coherence.changed_elsewhere``); the subscription ends with ``close``. Reads never wait
  for a push: while none arrive (the connection lost), copies are checked against the
  directory's token on read, as always.
- Every write and delete, the system's included, carries a write id kept with it in the store
  (``writeids``); a write whose reply was lost raises ``WriteOutcomeUnknownError`` with it, and
  the same write given that id again returns what it committed if it landed, else is made once.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol

import pyoxigraph as ox

from gliding_core.blackboard.coordination.tasks import TASKS_AREA
from gliding_core.blackboard.graph import (
    Dataset,
    EmbeddedGraph,
    GraphBackend,
    QueryResult,
    Term,
    term_value,
)
from gliding_core.blackboard.graph import open_graph as _open_graph
from gliding_core.blackboard.handle import AgentHandle
from gliding_core.blackboard.nodes import NodeStore
from gliding_core.blackboard.permissions import PermissionMatrix
from gliding_core.blackboard.records import BoardNode
from gliding_core.blackboard.sparql import FenceChecker, task_graphs, type_iri
from gliding_core.blackboard.sparql_check import CheckedQuery, check_query
from gliding_core.blackboard.validation import check_iri, is_iri
from gliding_core.blackboard.vocabulary import (
    AREAS,
    area_graph,
    check_area,
    graph_area,
    is_bookkeeping,
)
from gliding_core.blackboard.writeback import WriteBack
from gliding_core.blackboard.writes import WritePath
from gliding_core.bus import Event, EventBus, EventType, Subscription
from gliding_core.checks import check_list
from gliding_core.coherence.coordinator import Coherence
from gliding_core.coherence.directory import (
    Directory,
    DirectoryChange,
    LocalDirectory,
    PushingDirectory,
)
from gliding_core.config import BlackboardConfig
from gliding_core.errors import ClosedError, EntryNotFoundError, InvalidInputError
from gliding_core.jsonld import check_text, preview
from gliding_core.store.protocol import EntryStore

if TYPE_CHECKING:
    from gliding_core.blackboard.coordination.registries import Coordination

logger = logging.getLogger(__name__)


class Reader(Protocol):
    """Who reads through ``Blackboard.read_for``: an agent's handle (its name checked once)."""

    @property
    def name(self) -> str:
        """The agent's name."""
        ...

    def check_readable(self, node: BoardNode) -> None:
        """Refuse ``node`` (``PermissionDeniedError``) unless the agent may read it."""
        ...


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
        directory: the coherence directory of agents' copies (a fresh ``LocalDirectory`` when
            omitted; a ``SQLiteDirectory`` shared by the processes that share the store), which
            the blackboard closes.

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
        store: EntryStore | None = None,
        bus: EventBus | None = None,
        config: BlackboardConfig | None = None,
        permissions: PermissionMatrix | None = None,
        fences: FenceChecker | None = None,
        coordination: Coordination | None = None,
        directory: Directory | None = None,
    ) -> None:
        _check_options(
            config=config, store=store, bus=bus, permissions=permissions, coordination=coordination
        )
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
        self.coordination = coordination
        self.writeback: WriteBack | None = None
        if store is not None:
            self.writeback = WriteBack(
                self.nodes,
                store,
                critical_tags=self.config.critical_tags,
                batch=self.config.flush_batch,
                bus=bus,
            )
        chosen = directory if directory is not None else LocalDirectory()
        self.writes = WritePath(
            self.nodes,
            chosen,
            shared=backend.kind == "server" and not isinstance(chosen, LocalDirectory),
            bus=bus,
            writeback=self.writeback,
            critical_tags=frozenset(self.config.critical_tags),
        )
        """Every write and delete of the board's nodes (``gliding_core.blackboard.writes``)."""
        self.writes.attach(coordination=coordination, fences=fences)
        self._completions: Subscription | None = None
        self.task_releases = 0  # releases seen: a released task may come back under another root
        if coordination is not None:
            self._attach(coordination)
        if self.writeback is not None:
            self.writeback.start(self.config.flush_interval_s)
        self._closed = False
        self._close_lock = threading.Lock()
        self._pushes: Callable[[], None] | None = None
        if backend.kind == "server" and isinstance(chosen, PushingDirectory):
            self._pushes = chosen.subscribe(self._pushed)

    @property
    def coherence(self) -> Coherence:
        """The coordinator of agents' copies of the board's nodes."""
        return self.writes.coordinator

    @property
    def pushed(self) -> bool:
        """Whether other processes' writes reach this board's copies as they commit (its
        directory pushes them, and is connected now); else copies are checked on read only."""
        directory = self.writes.coordinator.directory
        if self._pushes is None or not isinstance(directory, PushingDirectory):
            return False
        return directory.listening

    def _pushed(self, change: DirectoryChange) -> None:
        """Drop what another process's commit made stale here (on the directory's thread).

        Moved nodes leave the node cache too (their next read must fetch them anyway); when
        the change names none (pushes were missed), every held copy goes and the cache stays:
        each of its entries is checked against the directory before it is served. A change of
        copy states only (another agent's read) drops the copies it ended, if any.
        """
        if change.iris is None:
            self.writes.coordinator.changed_elsewhere(None)
            return
        if change.moved:
            self.nodes.forget(change.moved)
        if change.moved or change.lost:
            self.writes.coordinator.changed_elsewhere(change.moved, change.lost)

    @property
    def fences(self) -> FenceChecker | None:
        """The lease table guarded writes are checked against (the coordination's by default)."""
        return self.writes.fences

    def _attach(self, coordination: Coordination) -> None:
        coordination.mirror = self
        self._completions = coordination.bus.subscribe(
            self._on_task_status, [EventType.TASK_STATUS_CHANGED, EventType.TASK_RELEASED]
        )

    def _on_task_status(self, event: Event) -> None:
        """Flush a completed task's areas to L0, free a released task's (on the thread that
        completed or released it)."""
        if event.type == EventType.TASK_RELEASED:
            self._on_task_released(event.payload.get("iris", []))
        elif event.payload.get("status") == "completed" and event.task_iri is not None:
            self.flush(task=event.task_iri)

    @classmethod
    def open(
        cls,
        path: str | os.PathLike[str] | None = None,
        *,
        endpoint: str | None = None,
        **options: Any,
    ) -> Blackboard:
        """Open a blackboard on a server (``endpoint``), a directory (``path``) or in memory.

        A blackboard on disk or on a server first flushes what a crash left dirty. When the
        board cannot be built from ``options``, the graph opened for it is closed again.

        Raises:
            InvalidInputError: ``path`` is not a path, or ``endpoint`` not an http(s) URL.
        """
        if path is not None and (
            isinstance(path, bytes) or not isinstance(path, (str, os.PathLike))
        ):
            raise InvalidInputError(f"path must be a directory path or None, got {preview(path)}")
        graph = _open_graph(path=path, endpoint=endpoint)
        try:
            board = cls(graph, **options)
        except BaseException:
            graph.close()  # a directory stays locked by its open store
            raise
        if board.backend.kind != "memory":
            try:
                board.flush()
            except BaseException:
                with contextlib.suppress(Exception):  # the flush's own error is the one raised
                    board.close()  # frees the directory; the dirty marks stay for the next open
                raise
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
        write_id: str | None = None,
    ) -> list[BoardNode]:
        """Write a batch of nodes into one graph, all or nothing; return them as stored.

        The graph is a task's area (``task`` and ``area``) or any IRI (``graph``). Nodes with a
        critical tag are in L0 when this returns. ``write_id`` retries a write that raised
        ``WriteOutcomeUnknownError``, as ``AgentHandle.write`` does.

        Raises:
            InvalidNodeError: a node is malformed; ContentTooLargeError: a node or the batch is
                too large; InvalidInputError: the graph is missing or not allowed.
            WriteOutcomeUnknownError: the store may have applied the write and its answer was
                lost; retry with the error's ``write_id``.
        """
        target = self._graph(task, area, graph)
        if source is not None:
            _check_source(source)
        return self.writes.write(
            None, nodes, graph=target, tags=tags, source=source, write_id=write_id
        )

    def _graph(self, task: str | None, area: str | None, graph: str | None) -> str:
        self._check_open()
        if graph is not None:
            if task is not None or area is not None:
                raise InvalidInputError("give either graph= or task= and area=, not both")
            if is_bookkeeping(check_iri(graph, "graph")):
                raise InvalidInputError(f"{graph} holds the blackboard's bookkeeping")
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
        return self.nodes.get_many(_check_iris(iris, "IRIs"))

    def read_for(self, reader: Reader, iri: str) -> BoardNode | None:
        """Return the node with ``iri`` as ``reader`` reads it, registering its copy.

        The node returned is at least at the generation the directory holds for it (a node
        another process wrote meanwhile is read again from the store). The reader's
        ``check_readable`` sees the node before the copy is registered and again after a fresh
        read, so a node the agent may not read never gets a copy.

        Raises:
            PermissionDeniedError: the agent may not read the node.
            InvalidNodeError: ``iri`` is not an absolute IRI.
        """
        self._check_open()
        writes = self.writes
        if self.nodes.check is writes.cache:
            # At a server one read of the shared counter vouches both the cache's entry and
            # the agent's copy: both are then current as of the moment the read began.
            token = writes.cache.token()
            node = self.nodes.get(iri, token=token)
        else:
            node, token = self.nodes.get(iri), None
        if node is None:
            return None
        reader.check_readable(node)
        try:
            generation = writes.coordinator.generation(reader.name, iri, token=token)
        except EntryNotFoundError:
            return None  # deleted since
        if generation > node.generation:  # the cache missed another process's write
            node = self.nodes.get_many([iri], fresh=True).get(iri)
            if node is not None:
                reader.check_readable(node)
        return node

    def by_graph(self, graph: str) -> list[BoardNode]:
        """Return the nodes of a named graph, sorted by IRI."""
        return self.nodes.get_listed(self.nodes.iris_in([check_iri(graph, "graph")]))

    def by_task(self, task: str, areas: Sequence[str] = AREAS) -> list[BoardNode]:
        """Return the nodes of a task's areas (all of them by default), sorted by IRI."""
        return self.nodes.get_listed(
            self.nodes.iris_in(task_graphs(task, check_list(areas, what="areas")))
        )

    def by_type(
        self, type_name: str, *, task: str | None = None, areas: Sequence[str] = AREAS
    ) -> list[BoardNode]:
        """Return the nodes of a type (a term such as ``"Task"`` or an IRI), sorted by IRI.

        Without ``task``: of every task's ``areas``, and of the graphs written by IRI
        (``graph=``) unless ``areas`` leaves some area out.
        """
        checked = [check_area(a) for a in check_list(areas, what="areas")]
        if task is not None:
            graphs = task_graphs(task, checked)
        else:
            graphs = self._area_graphs(None if set(checked) >= set(AREAS) else set(checked))
        return self.nodes.get_listed(self.nodes.iris_of_type(type_iri(type_name), graphs))

    def _area_graphs(self, areas: set[str] | None = None) -> list[str]:
        """Every node graph of the store (``areas`` given: only the task areas among them)."""
        result = self.backend.query("SELECT DISTINCT ?g WHERE { GRAPH ?g { } }")
        graphs = [term_value(row["g"]) for row in result.rows]
        if areas is not None:
            return [g for g in graphs if (graph_area(g) or ("", ""))[1] in areas]
        return [g for g in graphs if not is_bookkeeping(g)]

    def delete(
        self, iris: Sequence[str], *, source: str | None = None, write_id: str | None = None
    ) -> int:
        """Delete nodes from the blackboard (not from L0); return how many existed.

        ``write_id`` retries a delete that raised ``WriteOutcomeUnknownError`` (if it landed,
        nothing more is deleted and the number it deleted is returned).
        """
        self._check_open()
        checked = _check_iris(iris, "IRIs")
        if source is not None:
            _check_source(source)
        return self.writes.delete(None, checked, source=source, write_id=write_id)

    def query(
        self,
        sparql: str | CheckedQuery,
        *,
        graphs: Sequence[str] | None = None,
        bindings: Mapping[str, Term] | None = None,
    ) -> QueryResult:
        """Run a SPARQL SELECT, CONSTRUCT, ASK or DESCRIBE as the system.

        The text is checked (``sparql_check.check_query``, under ``config.query_limits``) and
        the store runs its rewrite from the checked tokens, never the text given.

        Args:
            sparql: the query, or one already checked (``AgentHandle.query`` checks an
                agent's with ``check_agent_query``).
            graphs: the graphs it sees (default graph = their union, and as named graphs);
                the whole store when ``None``, nothing when empty.
            bindings: variables bound to terms (``{"task": NamedNode(...)}``).

        Raises:
            InvalidInputError: the query, a graph or a binding is malformed, or the query holds
                what the check refuses (``SERVICE``, an unknown word...): nothing runs.
            ContentTooLargeError: the query is past a limit of ``config.query_limits``.
            PermissionDeniedError: the text is a SPARQL UPDATE.
        """
        self._check_open()
        if isinstance(sparql, CheckedQuery):
            text = sparql.text
        else:
            text = check_query(sparql, self.config.query_limits).text
        checked = _check_bindings(bindings)
        if graphs is None:
            return self.nodes.query(text, dataset=None, bindings=checked)
        names = tuple(_check_iris(graphs, "graphs"))
        return self.nodes.query(text, dataset=Dataset(names, names), bindings=checked)

    def compact(self) -> None:
        """Rewrite the graph's files without what was deleted (``EmbeddedGraph.compact``),
        holding the writer so no write lands meanwhile; a server's store keeps its own files."""
        self._check_open()
        compact = getattr(self.backend, "compact", None)
        if callable(compact):
            with self.nodes.writer:
                compact()

    def flush(self, *, task: str | None = None) -> int:
        """Write the dirty nodes (of ``task`` when given) to L0; return how many."""
        graphs = None if task is None else task_graphs(task)
        if self.writeback is None:
            return 0
        return self.writeback.flush(graphs)

    # -- the coordination layer's mirror (NodeMirror) ----------------------------------------

    def mirror(self, task_iri: str, area: str, nodes: Sequence[Mapping[str, Any]]) -> None:
        """Write coordination state (tasks, agents) as nodes of a task's area, as the system."""
        self.write(nodes, task=task_iri, area=area, source="system")

    def forget(self, iris: Sequence[str]) -> None:
        """Delete mirrored nodes, writing the dirty ones back to L0 first (a failed flush
        raises and deletes nothing)."""
        if self.writeback is not None:
            self.writeback.flush_nodes(list(self.read_many(iris).values()))
        self.delete(iris, source="system")

    # -- released tasks ----------------------------------------------------------------------

    def release_tasks(self, tasks: Sequence[str]) -> int:
        """Free the working memory of released tasks; return how many nodes left the board.

        In order: every dirty node of the tasks' areas is flushed to L0; then every node of
        those areas is deleted from the blackboard (L0 keeps them); then the agents registered
        on the tasks are unregistered (their Agent nodes go, their leases are released). The
        coordination messages of the tasks stay in the coordination database, a durable log
        read by cursor (``read_since``); only their mirror nodes leave the graph. Without an
        L0 store there is nowhere to keep the nodes: they are deleted all the same.

        The registry's ``release`` and ``gc`` call this through ``TASK_RELEASED``; call it
        again to retry after a failure (a released task's ``Task`` node that the registry
        failed to remove goes too). A node written into a released area while this runs stays
        on the board, dirty, for the next flush, unless it lands in the few statements between
        the last look at the nodes and their deletion (the board takes no lock over both: a
        released task is completed, and its agents are done); so does a node written there
        later through a handle kept past the release: call this again to free it.

        Raises:
            StorageError (or another error of the L0 store): the flush failed; nothing was
                deleted from the blackboard and no agent was unregistered.
        """
        self._check_open()
        checked = _check_iris(tasks, "task IRIs")
        graphs = [graph for task in checked for graph in task_graphs(task)]
        nodes = self.nodes.get_listed(self.nodes.iris_in(graphs))
        ghosts = self._task_ghosts(checked)
        if self.writeback is not None:
            self.writeback.flush(graphs)
            self.writeback.flush_nodes(ghosts)
            # Kept: a node dirty again since the flush (written meanwhile: for the next flush)
            # or moved to another graph meanwhile (no longer the released task's).
            where = {n.iri: n.graph for n in [*nodes, *ghosts]}
            nodes = [
                n
                for n in self.nodes.get_listed(list(where))
                if not n.dirty and n.graph == where[n.iri]
            ]
        else:
            nodes += ghosts
        deleted = self.delete([n.iri for n in nodes], source="system")
        if self.coordination is not None:
            for task in checked:
                for agent in self.coordination.agents.agents(task=task):
                    self.coordination.agents.unregister(agent.name)
        return deleted

    def _task_ghosts(self, tasks: Sequence[str]) -> list[BoardNode]:
        """The ``Task`` nodes of ``tasks`` still mirrored though the tasks are not registered.

        The registry removes a released task's node itself; when that failed (its write-back
        to L0 did), the node is left in its root's ``tasks`` area, outside the task's graphs.
        """
        registry = None if self.coordination is None else self.coordination.tasks
        return [
            node
            for node in self.nodes.get_listed(tasks)
            if (place := graph_area(node.graph)) is not None
            and place[1] == TASKS_AREA
            and (registry is None or node.iri not in registry)
        ]

    def _on_task_released(self, tasks: Sequence[str]) -> None:
        self.task_releases += 1  # (``sparql.TaskRoots`` forgets the roots it kept)
        try:
            self.release_tasks(tasks)
        except Exception:
            logger.exception(
                "freeing the blackboard areas of released task(s) %s failed: their nodes and "
                "agents stay on the blackboard (retry with release_tasks)",
                ", ".join(map(repr, tasks)),
            )

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
        """Stop the flush timer, flush what is dirty, close the store; twice is harmless.

        When the last flush fails, its error is raised. A board on disk or at a server is
        closed all the same (its dirty marks stay in the store, and the next ``open`` flushes
        them); a board in memory stays open, since its dirty nodes live nowhere else: call
        ``close`` again once L0 works.
        """
        with self._close_lock:
            if self._closed:
                return
            if self.coordination is not None:
                if self._completions is not None:
                    self._completions.cancel()
                self.coordination.close()  # its sweeper mirrors into the graph: first
            try:
                if self.writeback is not None:
                    self.writeback.stop()
                    self.writeback.flush()
            except BaseException:
                if self.backend.kind == "memory":
                    raise
                self._release_store()
                raise
            self._release_store()

    def _release_store(self) -> None:
        if self._pushes is not None:
            self._pushes()
            self._pushes = None
        self.writes.close()
        self._closed = True
        self.backend.close()

    def __enter__(self) -> Blackboard:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Blackboard({self.backend!r})"


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
        try:
            ox.Variable(name)
        except ValueError as exc:
            raise InvalidInputError(
                f"binding {preview(name)} is not a SPARQL variable name ({exc})"
            ) from exc
    return bindings


def _check_iris(value: object, what: str) -> list[str]:
    """Return ``value`` as a list of absolute IRIs (``what`` names it in the message)."""
    items = check_list(value, what=what)
    for item in items:
        if not isinstance(item, str) or not is_iri(item):
            raise InvalidInputError(
                f"each of {what} must be an absolute IRI, got {preview(item)} in {preview(value)}"
            )
    return items  # each item is a str (checked above)


def _check_options(**options: object) -> None:
    """Refuse an option of the wrong kind before the board attaches to anything."""
    from gliding_core.blackboard.coordination.registries import (
        Coordination,  # (it imports this module)
    )

    kinds: dict[str, type] = {
        "config": BlackboardConfig,
        "store": EntryStore,
        "bus": EventBus,
        "permissions": PermissionMatrix,
        "coordination": Coordination,
    }
    for name, value in options.items():
        if value is not None and not isinstance(value, kinds[name]):
            raise InvalidInputError(
                f"{name} must be a {kinds[name].__name__} or None, got {preview(value)}"
            )


def _check_source(source: object) -> None:
    """Refuse a ``source`` that is not a name (an agent's, or ``"system"``), as agents' are."""
    if not isinstance(source, str) or not source.strip():
        raise InvalidInputError(f"source must be a non-empty name, got {preview(source)}")
    check_text(source, what="source")


__all__ = ["AgentHandle", "Blackboard", "EmbeddedGraph", "check_query", "task_graphs", "type_iri"]
