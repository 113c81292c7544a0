"""L3 -> L2 -> L0: the scheduler's read path for an agent's role, and the end of a task.

``Scheduler.read(task, role, budget=...)`` answers with the role's frame (plan: ``pa_init``,
do: ``da_input``, check: ``ca_review``, act: ``aa_decision``, any other role:
``summary_only``; configurable) projected within the budget. When the frame has nothing to
show, the task's blackboard nodes are shown instead (L2), and when the blackboard holds nothing
of the task, its entries in L0 (written back under the task's graphs) or, given a query, what
L0 search finds for it. L2 and L0 show what agents wrote, not the coordination layer's mirror
of tasks, agents and messages (a registered agent would otherwise always fill L2). No level
shows the conversation or what is delivered through it: an L1 turn (``Turn``, archived in a
``urn:gliding:session:`` graph), a chat message, or a supplementary input (pending, consumed,
or archived as the turn that delivered it) is never part of a frame, read as the system or as
an agent. L0 search read as the system reads every other entry (any scope, any graph); read
as an agent it reads, in the same SQL as the search (``SearchFilters``), only the entries of
the task's scope (tagged ``Scope.of_task(task).tag``) and those in the graphs of the areas of the
task the agent's role may read: never another task's, another scope's (a user's, a thread's)
or an entry of no scope. With
``fallback="frame"`` (what role agents read, ``gliding_core.view.team``) the fallback is narrower:
the task's blackboard nodes in the frame's own areas only, and no L0 (so the decider, before any
review exists, is not shown the plan the ``aa_decision`` frame leaves out).
``view.frame_source.FrameSource`` is this read as a context source of the model view.

A memory has one scheduler (``Memory.scheduler``): its projector and view cache serve every
reader of the memory. ``Scheduler.for_memory(memory)`` returns that one, and
``scheduler.with_roles(roles)`` a scheduler with other role frames over the same projector (it
holds nothing of its own to close, so it lives as long as the memory's).

``Scheduler.complete(task)`` is the end of a task: its dirty nodes are flushed to L0, its
nodes (and its subtasks', from the coordination layer's task registry when there is one) are
released from the blackboard, its views are invalidated, and ``TASK_COMPLETED`` is published.

Invariants:
- Each level is read only when the one above it has nothing to show; every answer is within
  its budget, counted exactly, and quotes nothing the caller says is already shown.
- Read as an agent (``read(..., agent=handle)``), no level shows a
  node of an area the agent's role may not read, nor of another task (but the ``Task`` nodes
  of its tree: its ``tasks`` area is the tree root's, as for the handle): the frame's query runs
  over exactly the readable graphs (as ``AgentHandle.query`` does, embedded objects included),
  L2 and L0 are read from them, and L0 search finds only the task's scope and those graphs.
  A node the view references but the agent may not read is shown as the reference written,
  never expanded, and ``board_nodes(..., agent=)`` (what the tools read generations with)
  does not find it.
- ``fallback="frame"`` never shows a node outside the frame's areas, at any level.
- Release never loses a write: a node is removed from the blackboard only once it is in L0 (a
  blackboard without write-back releases nothing), and a node written after the flush stays.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from gliding_core.attention.supplementary import CONSUMED, PENDING
from gliding_core.blackboard.board import AgentHandle, Blackboard
from gliding_core.blackboard.permissions import ROLE_ALIASES
from gliding_core.blackboard.records import BoardNode
from gliding_core.blackboard.sparql import MIRRORED_AREAS
from gliding_core.blackboard.validation import check_iri, is_iri
from gliding_core.blackboard.vocabulary import AREA_GRAPH_PREFIX, AREAS
from gliding_core.bus import EventBus
from gliding_core.errors import InvalidInputError, PermissionDeniedError
from gliding_core.hyperspace.search import SearchHit
from gliding_core.jsonld import preview
from gliding_core.projection.budget import check_budget, fit
from gliding_core.projection.projector import Projector
from gliding_core.session import SESSION_PREFIX
from gliding_core.store.entry import Entry
from gliding_core.store.filters import SearchFilters
from gliding_core.store.protocol import EntryStore
from gliding_core.store.retrieval import CHAT_TYPES
from gliding_core.store.scope import INPUT_TYPE, Scope

logger = logging.getLogger(__name__)

TASK_COMPLETED = "TASK_COMPLETED"
DEFAULT_ROLE_FRAMES: Mapping[str, str] = {
    "plan": "pa_init",
    "do": "da_input",
    "check": "ca_review",
    "act": "aa_decision",
}
DEFAULT_FRAME = "summary_only"
LEVELS = ("l3", "l2", "l0", "none")

Fallback = Literal["task", "frame"]  # what a read shows when its frame shows nothing

_WHOLE = 1 << 62  # a budget every frame fits in: the frame's nodes unfitted
_L0_HITS = 10  # what one L0 search of a read returns at most
# What no frame shows from L0: the conversation (turns, chat messages) and supplementary inputs,
# by their types, their tags (the L1 archive's and the input store's) and the sessions' graphs.
_CONVERSATION_TYPES = (*CHAT_TYPES, INPUT_TYPE)
_CONVERSATION_TAGS = ("turn", PENDING, CONSUMED)
TASK_CONTENT = SearchFilters(
    exclude_types=_CONVERSATION_TYPES,
    exclude_tags=_CONVERSATION_TAGS,
    exclude_graph_prefixes=(SESSION_PREFIX,),
)
"""The L0 entries a frame may show: no turn, no chat message, no supplementary input."""


class HasScheduler(Protocol):
    """What owns a scheduler (a ``Memory``): it hands out its one scheduler, made once."""

    @property
    def scheduler(self) -> Scheduler:
        """The owner's scheduler."""
        ...


class Search(Protocol):
    """L0 search as the scheduler calls it (``Memory.search``): hits best first."""

    def __call__(
        self, query: str, k: int, *, filters: SearchFilters | None = None
    ) -> Sequence[SearchHit]:
        """Return the ``k`` best hits for ``query`` among the entries ``filters`` passes."""
        ...


@dataclass(frozen=True, slots=True)
class Read:
    """What the read path found for a role.

    Attributes:
        level: where it came from: ``"l3"`` (the frame), ``"l2"`` (the task's blackboard
            nodes), ``"l0"`` (the durable store) or ``"none"``.
        text: the JSON-LD document shown ("" for none).
        tokens: its exact token count.
        iris: every IRI it quotes, in order.
        frame: the frame used at L3.
        step: the budget step taken (see ``gliding_core.projection.STEPS``).
    """

    level: str
    text: str
    tokens: int
    iris: tuple[str, ...]
    frame: str
    step: str


@dataclass(frozen=True, slots=True)
class Completion:
    """What ``Scheduler.complete`` did: nodes flushed to L0, released, views invalidated."""

    task: str
    flushed: int
    released: int
    invalidated: int


class Scheduler:
    """Serves each role its frame of a task, falling back to L2 and L0; ends tasks.

    Args:
        projector: the L3 projector (over the blackboard).
        store: the L0 store (the last level of the read path); none when ``None``.
        search: L0 search (``memory.search``), used with a query when L0 holds nothing of
            the task's graphs; it is given the filters of what the reader may see
            (``filters=``), which it applies in its own query.
        roles: role -> frame, replacing the defaults (``DEFAULT_ROLE_FRAMES``).
        default_frame: the frame of any other role.
        bus: where ``TASK_COMPLETED`` goes; the blackboard's bus when omitted.
    """

    def __init__(
        self,
        projector: Projector,
        *,
        store: EntryStore | None = None,
        search: Search | None = None,
        roles: Mapping[str, str] | None = None,
        default_frame: str = DEFAULT_FRAME,
        bus: EventBus | None = None,
    ) -> None:
        self.projector = projector
        self.board: Blackboard = projector.board
        if search is not None and not callable(search):
            raise InvalidInputError(f"search must be callable or None, got {preview(search)}")
        self.store, self.search = store, search
        self.roles = dict(DEFAULT_ROLE_FRAMES if roles is None else _check_roles(roles))
        for frame in (*self.roles.values(), default_frame):
            projector.frames.get(frame)
        self.default_frame = default_frame
        self.bus = bus if bus is not None else self.board.bus

    @classmethod
    def for_memory(
        cls,
        memory: HasScheduler,
        *,
        roles: Mapping[str, str] | None = None,
        default_frame: str | None = None,
    ) -> Scheduler:
        """Return a memory's one scheduler (``memory.scheduler``); it builds none of its own.

        Given ``roles`` or ``default_frame``, return ``memory.scheduler.with_roles(...)``: other
        role frames over the memory's one projector and view cache.

        Raises:
            InvalidInputError: ``memory`` has no scheduler (it is not a ``Memory``), or a bad
                role -> frame mapping.
            FrameNotFoundError: a role's frame is unknown.
        """
        scheduler = getattr(memory, "scheduler", None)
        if not isinstance(scheduler, Scheduler):
            raise InvalidInputError(
                f"memory must be a gliding_core Memory (with a scheduler), got {preview(memory)}"
            )
        if roles is None and default_frame is None:
            return scheduler
        frame = DEFAULT_FRAME if default_frame is None else default_frame
        return scheduler.with_roles(roles, default_frame=frame)

    def with_roles(
        self, roles: Mapping[str, str] | None, *, default_frame: str = DEFAULT_FRAME
    ) -> Scheduler:
        """Return a scheduler with other role frames over this one's projector and view cache.

        It shares everything else too (store, search, bus) and opens nothing, so it needs no
        closing: its views stop following the blackboard when this one's projector closes
        (the memory's, when the memory closes).

        Args:
            roles: role -> frame, replacing the defaults (``DEFAULT_ROLE_FRAMES``); the
                defaults when ``None``.
            default_frame: the frame of any other role.

        Raises:
            InvalidInputError: a bad role -> frame mapping.
            FrameNotFoundError: a frame the projector does not know.
        """
        return Scheduler(
            self.projector,
            store=self.store,
            search=self.search,
            roles=roles,
            default_frame=default_frame,
            bus=self.bus,
        )

    def frame_for(self, role: str) -> str:
        """Return the frame of ``role`` (aliases such as ``pa`` or ``planner`` resolved)."""
        return self.roles.get(_role(role), self.default_frame)

    def read(
        self,
        task: str,
        role: str,
        *,
        budget: int,
        query: str | None = None,
        params: Mapping[str, object] | None = None,
        shown: frozenset[str] = frozenset(),
        agent: AgentHandle | None = None,
        fallback: Fallback = "task",
    ) -> Read:
        """Return the role's view of ``task`` within ``budget`` tokens: L3, else L2, else L0.

        Args:
            task: the task's IRI.
            role: the role whose frame is read.
            budget: the most tokens of the answer.
            query: what L0 search looks for when nothing of the task is found above it.
            params: the frame's parameters.
            shown: IRIs the model already sees (left out).
            agent: read as this agent: every level shows only the areas of its task its role
                may read (the frame's query runs over exactly those graphs, L0 search finds
                only the entries of the task's scope and of those graphs). Without it the read
                is the system's, over every area, and L0 search over every scope. Neither
                shows a turn, a chat message or a supplementary input (see the module).
            fallback: what is shown when the frame shows nothing: ``"task"``, the task's
                blackboard nodes, else its L0 entries (or L0 search); ``"frame"``, the task's
                blackboard nodes in the frame's areas only, and nothing from L0.

        Raises:
            InvalidInputError: ``fallback`` is neither ``"task"`` nor ``"frame"``, or
                ``query`` is neither a string nor ``None``.
            PermissionDeniedError: ``agent`` works on another task, or has another role.
        """
        check_iri(task, "task IRI")
        check_budget(budget)
        check_fallback(fallback)
        _check_query(query)
        frame = self.frame_for(role)
        areas = None if agent is None else self.readable_areas(agent, task, role)
        projection = self.projector.project(
            task, frame, budget=budget, params=params, exclude=frozenset(shown), areas=areas
        )
        if projection.iris:
            nodes = projection.document.get("@graph", [])
            return Read(
                "l3", projection.text, projection.tokens, quoted_iris(nodes), frame, projection.step
            )
        for level, wanted in self._below(task, frame, query, areas, fallback, shown):
            text, tokens, kept, step = fit(wanted, budget, self.projector.tokens)
            if kept:
                return Read(level, text, tokens, quoted_iris(kept), frame, step)
        return Read("none", "", 0, (), frame, "empty")

    def nodes(
        self,
        task: str,
        role: str,
        *,
        query: str | None = None,
        params: Mapping[str, object] | None = None,
        shown: frozenset[str] = frozenset(),
        agent: AgentHandle | None = None,
        fallback: Fallback = "task",
    ) -> tuple[str, str, list[dict[str, Any]]]:
        """Return ``(level, frame, nodes)`` of the role's view of ``task``, not fitted.

        The levels are those of ``read`` (as ``agent`` when given): the frame's top-level
        nodes, else the task's blackboard nodes, else its L0 entries; nothing whose IRI is in
        ``shown``; ``fallback`` as in ``read``.
        """
        check_iri(task, "task IRI")
        check_fallback(fallback)
        _check_query(query)
        frame = self.frame_for(role)
        areas = None if agent is None else self.readable_areas(agent, task, role)
        projection = self.projector.project(
            task, frame, budget=_WHOLE, params=params, exclude=frozenset(shown), areas=areas
        )
        if projection.iris:
            return "l3", frame, list(projection.document.get("@graph", []))
        for level, wanted in self._below(task, frame, query, areas, fallback, shown):
            return level, frame, wanted
        return "none", frame, []

    def _below(
        self,
        task: str,
        frame: str,
        query: str | None,
        areas: Sequence[str] | None,
        fallback: Fallback,
        shown: frozenset[str],
    ) -> Iterator[tuple[str, list[dict[str, Any]]]]:
        """Yield the levels under L3 that have something not in ``shown``, each read lazily."""
        chosen = self._fallen_back(frame, areas, fallback)
        wanted = [n for n in self._l2(task, chosen) if n.get("@id") not in shown]
        if wanted:
            yield "l2", wanted
        if fallback == "frame":
            return
        found = self._l0(task, query, chosen, confined=areas is not None)
        wanted = [n for n in found if n.get("@id") not in shown]
        if wanted:
            yield "l0", wanted

    def readable_areas(self, agent: AgentHandle, task: str, role: str) -> list[str]:
        """Return the areas ``agent`` may read of ``task``, or refuse a read it may not make."""
        if not isinstance(agent, AgentHandle) or agent.board is not self.board:
            raise InvalidInputError(
                f"agent must be a handle on this scheduler's blackboard, got {preview(agent)}"
            )
        if agent.task != task:
            raise PermissionDeniedError(
                f"agent {agent.name!r} works on task {agent.task!r}; it may not read {task!r}",
                role=agent.role,
                graph="*",
                operation="read",
            )
        if _role(role) != agent.role:
            raise PermissionDeniedError(
                f"agent {agent.name!r} has role {agent.role!r}; it may not read as {role!r}",
                role=agent.role,
                graph="*",
                operation="read",
            )
        return agent.readable_areas()

    def _fallen_back(
        self, frame: str, areas: Sequence[str] | None, fallback: Fallback
    ) -> list[str]:
        """Return the areas the fallback reads: readable ones, of the frame's own if asked."""
        scope = AREAS if fallback == "task" else self.projector.frames.get(frame).areas
        return [a for a in scope if a not in MIRRORED_AREAS and (areas is None or a in areas)]

    def _l2(self, task: str, areas: Sequence[str]) -> list[dict[str, Any]]:
        return [_bare(node.node) for node in self.board.by_task(task, areas)]

    def _l0(
        self, task: str, query: str | None, areas: Sequence[str], *, confined: bool
    ) -> list[dict[str, Any]]:
        """The task's L0 entries in ``areas``, else (given a query) what L0 search finds.

        ``confined`` (read as an agent): the search finds only the task's scope and the graphs
        of ``areas``; the filters are the search's own SQL, so its ``k`` best are of those.
        """
        if self.store is None:
            return []
        graphs = self.projector.roots.graphs(task, areas)
        found = [
            _bare(entry.node)
            for graph in graphs
            for entry in self.store.by_graph(graph, limit=100)
            if _task_content(entry)
        ]
        if found or not query or not query.strip() or self.search is None:
            return found
        readable = _agent_filters(task, graphs) if confined else TASK_CONTENT
        return [_bare(hit.entry.node) for hit in self.search(query, _L0_HITS, filters=readable)]

    def board_nodes(
        self, iris: Iterable[str], *, agent: AgentHandle | None = None
    ) -> dict[str, BoardNode]:
        """Return the blackboard nodes among ``iris`` (their generations), by IRI.

        As ``agent``, only those in the graphs it may read of its task (the frame's graphs):
        a node in another area or another task is not found, as if it did not exist, so
        nothing of it (not its generation) reaches the agent. Strings that are not IRIs are
        skipped.

        Raises:
            InvalidInputError: ``agent`` is not a handle on this scheduler's blackboard.
        """
        wanted = [iri for iri in dict.fromkeys(iris) if isinstance(iri, str) and is_iri(iri)]
        if agent is None:
            return self.board.read_many(wanted)
        self.readable_areas(agent, agent.task, agent.role)
        graphs = set(self.projector.roots.graphs(agent.task, agent.readable_areas()))
        found = self.board.read_many(wanted)
        return {iri: node for iri, node in found.items() if node.graph in graphs}

    def complete(self, task: str, *, subtasks: Sequence[str] | None = None) -> Completion:
        """Flush ``task`` and its subtasks to L0, release their nodes, publish the event.

        Args:
            task: the finished task.
            subtasks: the tasks under it; by default its subtree in the blackboard's task
                registry (none without a coordination layer, or for an unregistered task).
        """
        check_iri(task, "task IRI")
        if subtasks is None:
            subtasks = self._subtree(task)
        tasks = list(dict.fromkeys(check_iri(t, "task IRI") for t in (task, *subtasks)))
        flushed = sum(self.board.flush(task=t) for t in tasks)
        released = invalidated = 0
        for each in tasks:
            released += self._release(each)
            invalidated += self.projector.cache.invalidate_task(each)
        if self.bus is not None:
            self.bus.publish(
                TASK_COMPLETED,
                {
                    "task": task,
                    "subtasks": list(subtasks),
                    "flushed": flushed,
                    "released": released,
                },
                task_iri=task,
                source="scheduler",
            )
        return Completion(task, flushed, released, invalidated)

    def _subtree(self, task: str) -> list[str]:
        coordination = self.board.coordination
        if coordination is None or task not in coordination.tasks:
            return []
        return coordination.tasks.subtree(task)[1:]

    def _release(self, task: str) -> int:
        if self.board.writeback is None:
            return 0  # nothing would hold the nodes afterwards
        with self.board.nodes.writer:  # no write lands between the check and the delete
            nodes = self.board.by_task(task)
            clean = [n.iri for n in nodes if not n.dirty]
            return self.board.delete(clean, source="scheduler") if clean else 0


def _check_query(query: object) -> None:
    if query is not None and not isinstance(query, str):
        raise InvalidInputError(f"query must be a string or None, got {preview(query)}")


def check_fallback(fallback: object) -> Fallback:
    """Return ``fallback`` if it is ``"task"`` or ``"frame"``; refuse anything else."""
    if fallback not in ("task", "frame"):
        raise InvalidInputError(f"fallback must be 'task' or 'frame', got {preview(fallback)}")
    return "frame" if fallback == "frame" else "task"


def _role(role: object) -> str:
    """Return a role's name (aliases such as ``pa`` or ``planner`` resolved)."""
    if not isinstance(role, str) or not role.strip():
        raise InvalidInputError(f"a role must be a non-empty string, got {preview(role)}")
    name = role.strip().lower()
    return ROLE_ALIASES.get(name, name)


def _task_content(entry: Entry) -> bool:
    """Return whether an L0 entry may be shown in a frame (see ``TASK_CONTENT``)."""
    return not (
        any(t in _CONVERSATION_TYPES for t in entry.jsonld_types)
        or any(t in _CONVERSATION_TAGS for t in entry.tags)
        or (entry.named_graph or "").startswith(SESSION_PREFIX)
    )


def _agent_filters(task: str, graphs: Sequence[str]) -> SearchFilters:
    """The L0 entries an agent's read of ``task`` may find: its scope's and those of ``graphs``.

    The task's scope is the one a single-tenant adapter built for the task writes
    (``Scope.task``), outside the blackboard's area graphs (a node an agent wrote, tagged
    with the scope, is flushed into its area's graph: only a role that may read that area
    sees it); ``graphs`` are the graphs of the areas the agent may read.
    """
    scope = SearchFilters(
        tags_any=(Scope.of_task(task).tag,), exclude_graph_prefixes=(AREA_GRAPH_PREFIX,)
    )
    reach = (scope, SearchFilters(named_graphs=tuple(graphs))) if graphs else (scope,)
    return SearchFilters(all_of=(TASK_CONTENT, SearchFilters(any_of=reach)))


def _bare(node: Mapping[str, Any]) -> dict[str, Any]:
    """Return a node without its own ``@context`` (the projection document carries one)."""
    return {k: v for k, v in node.items() if k != "@context"}


def quoted_iris(nodes: Sequence[Mapping[str, Any]]) -> tuple[str, ...]:
    """Return every ``@id`` in ``nodes``, nested ones too, in document order."""
    found: dict[str, None] = {}

    def walk(value: Any) -> None:
        if isinstance(value, dict):
            iri = value.get("@id")
            if isinstance(iri, str):
                found[iri] = None
            for inner in value.values():
                walk(inner)
        elif isinstance(value, list):
            for item in value:
                walk(item)

    for node in nodes:
        walk(node)
    return tuple(found)


def _check_roles(roles: object) -> dict[str, str]:
    if not isinstance(roles, Mapping):
        raise InvalidInputError(f"roles must map role names to frames, got {preview(roles)}")
    checked = {}
    for role, frame in roles.items():
        if not isinstance(role, str) or not role.strip() or not isinstance(frame, str):
            raise InvalidInputError(f"bad role -> frame pair {role!r} -> {frame!r}")
        checked[ROLE_ALIASES.get(role.strip().lower(), role.strip().lower())] = frame
    return checked
