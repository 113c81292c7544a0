"""View: a team of role agents on one task, and the conversation of each.

``team(memory, task)`` assembles what both adapters' teams share: it checks the memory and the
agents' names, registers the task when the coordination layer does not know it, and makes one
blackboard handle per role (``ROLES``, the order of a round: each role hands over to the next).
The ``Team`` it returns holds the handles, the memory's one scheduler (every agent's frame and
``project_frame`` read through it) and each agent's instructions; an adapter adds only its
framework's agents and wiring. ``check_roles`` refuses a role -> model mapping missing a role.

Names: unless given, a team's agents are named after their role and the task
(``default_names(task)``: ``planner-1a2b3c4d``, the digest of the task's IRI), so the rounds of
two tasks never share a name. An agent is registered only for its turn (``AgentTurn``): from
when it starts working to when it ends, when it is reported Completed (its leases released)
and unregistered, so a finished round leaves no agent behind and its names are free for the
next one. A round that dies with its process leaves its working agent registered, silent: once
its heartbeat timeout has passed, the sweeper (or the next registration of the name) marks it
lost.

``role_conversation(memory, handle)`` is the ``Conversation`` both adapters give a role agent
(``GlidingMemoryMiddleware(memory, handle=handle)``, ``GlidingMemory(role_conversation(...))``):
its model sees, within the budget, its L1 context, the recall of its own turns and of the
task's other L0 entries, and its role's frame of the task (``FrameSource(..., fallback=
"frame")``: the scheduler's read path, its fallback confined to the frame's areas). The frame
is projected as the system, not read as the agent: the default permission matrix (the
reference's) does not let the ``do`` role read the plan area, and its frame, ``da_input``, is
the plan's steps; read as the agent, the doer would be shown nothing to do. The agent is the
handle's name and its role the handle's role, so its L1 session is its own; agents on one task
share supplementary inputs (put for the task): the first of them to start a cycle takes an
input, and only its model sees it.

Token economy (on by default, ``economy=False`` turns it off): the frame shows each node by the
copies of shared nodes the model request holds (``FrameSource(seen="request")``): a node the
agent read or wrote through a blackboard tool whose result is still in the window is a
reference while the copy is current and the change once another agent has written it; any
other node is whole. The ledger is each request's own, because both adapters rebuild the memory
message at every call: what an earlier call's memory message showed is not in the next one.

Invariants:
- A team has one agent per role of ``ROLES``, each with its own name, all on the task and the
  memory's blackboard; nothing is registered or written when a check fails.
- An agent is registered while its turn runs, never after it: a turn that ends, well or not,
  leaves the name free (a failed turn leaves its agent in Error, which is no live status).
- The agent's recall never quotes another agent's turns on the task (their tool calls and
  results carry the areas they may read, not this agent's): the recall filter admits turns of
  the agent's own session only, whatever else the caller's filters say.
- The frame is the one of the handle's task and role; the handle's board is the memory's.
- The model is shown nothing of an area outside the frame's: when the frame has nothing to
  show, the fallback is the task's blackboard nodes in the frame's areas only, never L0 (the
  scheduler's default fallback reads every area of the task, and L0), so the decider, before
  any review, is not shown the plan.
- A node is shown as a reference only when a copy of it at its current generation, holding
  what the frame shows of it, is in the same request; the economy shows nothing the frame
  would not show whole (a change lists the frame's properties that differ from the copy, and
  those the node lost since).
"""

from __future__ import annotations

import hashlib
import logging
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Protocol, cast

from typing_extensions import Unpack

from gliding_core.blackboard.board import Blackboard
from gliding_core.blackboard.coordination.agents import AgentRegistry, AgentStatus, agent_iri
from gliding_core.blackboard.coordination.registries import Coordination
from gliding_core.blackboard.handle import AgentHandle
from gliding_core.blackboard.validation import check_iri
from gliding_core.config import ConversationSettings, ViewOptions
from gliding_core.errors import AgentNotFoundError, InvalidInputError, InvalidTransitionError
from gliding_core.jsonld import preview
from gliding_core.projection.scheduler import Scheduler
from gliding_core.store.filters import SearchFilters
from gliding_core.store.scope import Shared
from gliding_core.view.conversation import Conversation, ViewMemory
from gliding_core.view.frame_source import FrameSource

logger = logging.getLogger(__name__)

TURN_TYPES = ("Turn", "SupplementaryInput")  # the L0 types of archived chat turns
ROLES = ("plan", "do", "check", "act")  # the roles of a team, in the order of a round
# The area each role writes.
AREA_OF = {"plan": "plan", "do": "execution", "check": "review", "act": "decision"}
# The stem of each role's default name (``default_names`` adds the task's digest).
DEFAULT_NAMES: Mapping[str, str] = MappingProxyType(
    {"plan": "planner", "do": "doer", "check": "checker", "act": "decider"}
)
DEFAULT_BUDGET = 1_200  # the tokens of a role agent's view per model call, unless set


class BoardMemory(ViewMemory, Protocol):
    """What a team needs of its memory: a conversation's needs, the blackboard, the scheduler.

    Not checked with ``isinstance`` (that would open the blackboard): ``check_memory`` is the
    check.
    """

    @property
    def blackboard(self) -> Blackboard:
        """The memory's blackboard."""
        ...

    @property
    def scheduler(self) -> Scheduler:
        """The memory's one scheduler."""
        ...

    def agent(self, name: str, *, role: str, task: str) -> AgentHandle:
        """Return the blackboard handle of agent ``name`` with ``role`` on ``task``."""
        ...


def check_memory(memory: object) -> BoardMemory:
    """Return ``memory`` if it is a memory with a blackboard (a ``Memory``); refuse anything else.

    Nothing is opened: the blackboard and the scheduler are looked for on the class.
    """
    kind = type(memory)
    if not isinstance(memory, ViewMemory) or not all(
        hasattr(kind, name) for name in ("blackboard", "scheduler", "agent")
    ):
        raise InvalidInputError(
            f"memory must be a gliding Memory (gliding_core.Memory), got {preview(memory)}"
        )
    return cast(BoardMemory, memory)


def check_scheduler(scheduler: object, memory: BoardMemory) -> Scheduler:
    """Return ``scheduler``, or the memory's own when ``None``; refuse one over another board."""
    if scheduler is None:
        return memory.scheduler
    if not isinstance(scheduler, Scheduler) or scheduler.board is not memory.blackboard:
        raise InvalidInputError(
            f"scheduler must be a Scheduler over the memory's blackboard, got {preview(scheduler)}"
        )
    return scheduler


def check_roles(mapping: object, *, what: str, kind: str) -> Mapping[str, Any]:
    """Return ``mapping`` if it maps every role of ``ROLES`` (to a model: ``kind``).

    Raises:
        InvalidInputError: ``mapping`` is not a mapping, or a role is missing (named).
    """
    if not isinstance(mapping, Mapping):
        raise InvalidInputError(f"{what} must map roles to {kind}, got {preview(mapping)}")
    missing = [role for role in ROLES if role not in mapping]
    if missing:
        raise InvalidInputError(f"{what} need the roles {list(ROLES)}; missing {missing}")
    return mapping


def instructions(
    handle: AgentHandle, *, then: str = "report in one line", frame: bool = True
) -> str:
    """Return a role agent's system prompt: who it is, where it writes, what it does after.

    Args:
        handle: the agent.
        then: what it does once its work is written (``"hand off"``).
        frame: say that the earlier roles' work is in its frame, below (the memory's view
            shows it; leave it out for an agent built without that view).
    """
    area = AREA_OF.get(handle.role, handle.role)
    shown = " What the earlier roles wrote is in your frame of the task, below." if frame else ""
    return (
        f"You are {handle.name}, the {handle.role} agent of task {handle.task}.{shown} Write your"
        f" work to the {area!r} area with the blackboard tools, then {then}."
    )


@dataclass(frozen=True, slots=True)
class Team:
    """The role agents of one task on one memory: handles in round order, one shared scheduler.

    Attributes:
        memory: the memory whose blackboard they share.
        task: the task's IRI.
        handles: role -> the agent's handle, in the order of ``ROLES``.
        scheduler: the read path of every agent's frame (the memory's, unless given).
    """

    memory: BoardMemory
    task: str
    handles: Mapping[str, AgentHandle]
    scheduler: Scheduler

    @property
    def names(self) -> dict[str, str]:
        """Role -> the agent's name."""
        return {role: handle.name for role, handle in self.handles.items()}

    def next_role(self, role: str) -> str | None:
        """Return the role ``role`` hands over to, ``None`` for the last of the round."""
        if role not in ROLES:
            raise InvalidInputError(f"role must be one of {list(ROLES)}, got {preview(role)}")
        index = ROLES.index(role) + 1
        return ROLES[index] if index < len(ROLES) else None

    def instructions(self, role: str, *, then: str = "report in one line") -> str:
        """Return the system prompt of the agent of ``role`` (see ``instructions``)."""
        if role not in self.handles:
            raise InvalidInputError(f"role must be one of {list(ROLES)}, got {preview(role)}")
        return instructions(self.handles[role], then=then)


def default_names(task: str) -> dict[str, str]:
    """Return the agent names of a team on ``task`` unless it is given others.

    Each is the role's stem (``DEFAULT_NAMES``) and the first 8 hex digits of the SHA-256 of
    the task's IRI (``planner-1a2b3c4d``): the teams of two tasks never share a name, the
    names of a task's team are the same in every process, and a name holds only letters,
    digits and ``-`` (model APIs refuse other characters in a message's author name, which
    LangChain sets to the agent's).

    Raises:
        InvalidInputError: ``task`` is not an IRI.
    """
    digest = hashlib.sha256(check_iri(task, "task IRI").encode()).hexdigest()[:8]
    return {role: f"{DEFAULT_NAMES[role]}-{digest}" for role in ROLES}


def team(
    memory: object,
    task: str,
    *,
    names: Mapping[str, str] | None = None,
    scheduler: Scheduler | None = None,
) -> Team:
    """Return the team of ``task``: one agent per role of ``ROLES``, registering the task.

    Everything is checked before anything is written: the memory, the task's IRI, the names
    (one non-empty string per role, no two alike; with a coordination layer, names it takes
    and that no live agent holds in another role or on another task) and the scheduler. The
    agents are not registered here: each is, for its turn (``AgentTurn``).

    Args:
        memory: the memory whose blackboard the agents share (a ``Memory``).
        task: the task's IRI; registered in the coordination layer's task registry if it is
            not.
        names: role -> agent name; ``default_names(task)`` when omitted.
        scheduler: the read path of the agents' frames; the memory's own (``memory.scheduler``)
            when omitted.

    Raises:
        InvalidInputError: a bad memory, task IRI, name or scheduler, or a name a live agent
            holds in another role or on another task (the message says how to proceed).
    """
    owner = check_memory(memory)
    check_iri(task, "task IRI")
    chosen = _check_names(default_names(task) if names is None else names)
    reader = check_scheduler(scheduler, owner)
    coordination = owner.blackboard.coordination
    if coordination is not None:
        _check_free(coordination, chosen, task)
    if coordination is not None and task not in coordination.tasks:
        coordination.tasks.register(task)
    board = owner.blackboard
    handles = {role: AgentHandle(board, chosen[role], role=role, task=task) for role in ROLES}
    return Team(owner, task, MappingProxyType(handles), reader)


def _check_names(names: object) -> dict[str, str]:
    if not isinstance(names, Mapping):
        raise InvalidInputError(f"names must map roles to agent names, got {preview(names)}")
    missing = [role for role in ROLES if role not in names]
    if missing:
        raise InvalidInputError(f"names need the roles {list(ROLES)}; missing {missing}")
    chosen = {role: names[role] for role in ROLES}
    for role, name in chosen.items():
        if not isinstance(name, str) or not name.strip():
            raise InvalidInputError(
                f"the name of role {role!r} must be a non-empty string, got {preview(name)}"
            )
    if len(set(chosen.values())) < len(ROLES):
        raise InvalidInputError(f"names must differ from role to role, got {preview(chosen)}")
    return chosen


def _check_free(coordination: Coordination, names: Mapping[str, str], task: str) -> None:
    """Refuse what the agent registry would refuse half-way through: a name it cannot take,
    or one a live agent holds in another role or on another task (an agent silent past its
    timeout holds nothing: its registry takes the name over)."""
    for name in names.values():
        agent_iri(name)  # the registry's rule for a name
    for role, name in names.items():
        refusal = coordination.agents.refusal(name, role=role, task=task)
        if refusal is not None:
            raise InvalidInputError(
                f"{refusal}. A team given no names takes its task's own (default_names(task)),"
                f" which no other task's team shares"
            )


class AgentTurn:
    """One agent's turn in a round: registered and Working while it runs, released at its end.

    ``start()`` registers the agent (a new incarnation when an earlier turn of it ended, or
    when a round that died left it silent) and reports it Working; ``beat()`` tells the
    registry it is alive (at most every third of its heartbeat timeout: a model call may
    come every second) and registers it again if it was lost meanwhile; ``finish()`` reports
    it Completed, which releases its leases, and unregisters it; ``finish(failed=True)``
    reports it Error instead and keeps its record, so the registry says the turn failed (the
    name is free all the same: Error is no live status); ``pause()`` reports it Waiting, for a
    turn a framework interrupts and resumes later. ``running()`` is these in a ``with`` block.
    Without a coordination layer each is a no-op.

    Args:
        handle: the agent.
    """

    def __init__(self, handle: AgentHandle) -> None:
        if not isinstance(handle, AgentHandle):
            raise InvalidInputError(f"handle must be an AgentHandle, got {preview(handle)}")
        self.handle = handle
        self._lock = threading.Lock()
        self._active = False
        self._next_beat = 0.0  # time.monotonic() of the next beat that is due

    @property
    def active(self) -> bool:
        """Whether the turn started and has not finished."""
        return self._active

    def start(self) -> None:
        """Register the agent and report it Working."""
        registry = self._registry()
        with self._lock:
            if registry is not None:
                self._register(registry)
            self._active = True

    def beat(self) -> None:
        """Tell the registry the agent is alive if a beat is due (nothing before ``start``)."""
        registry = self._registry()
        with self._lock:
            if registry is None or not self._active or time.monotonic() < self._next_beat:
                return
            try:
                agent = registry.heartbeat(self.handle.name, status=AgentStatus.WORKING)
                self._due(agent.timeout_s)
            except (AgentNotFoundError, InvalidTransitionError):
                self._register(registry)  # lost meanwhile (a long model call): back again

    def finish(self, *, failed: bool = False) -> None:
        """Report the agent Completed and unregister it, or report it Error when ``failed``."""
        registry = self._registry()
        with self._lock:
            self._active = False
            if registry is None:
                return
            name = self.handle.name
            status = AgentStatus.ERROR if failed else AgentStatus.COMPLETED
            # Unregistered, or lost meanwhile: nothing of it is live now.
            with suppress(AgentNotFoundError, InvalidTransitionError):
                registry.set_status(name, status)
            if not failed:
                registry.unregister(name)

    def pause(self) -> None:
        """Report the agent Waiting: its turn stopped for a resume that starts it again (a
        turn never resumed falls silent, and the sweeper marks it lost)."""
        registry = self._registry()
        with self._lock:
            self._active = False
            if registry is None:
                return
            # Unregistered, or lost meanwhile: the resume registers it again.
            with suppress(AgentNotFoundError, InvalidTransitionError):
                registry.set_status(self.handle.name, AgentStatus.WAITING)

    @contextmanager
    def running(self, *, pauses: tuple[type[BaseException], ...] = ()) -> Iterator[None]:
        """Start the turn, and finish it when the block ends (failed, if it raises).

        Args:
            pauses: exceptions that stop the turn for a resume (a framework's interrupt):
                the agent is reported Waiting (``pause``) instead of failed.
        """
        self.start()
        try:
            yield
        except pauses:
            self.pause()
            raise
        except BaseException:
            try:
                self.finish(failed=True)
            except Exception:  # the turn's own error is the one to raise
                logger.exception("reporting the failed turn of %r failed", self.handle.name)
            raise
        self.finish()

    def _registry(self) -> AgentRegistry | None:
        coordination = self.handle.board.coordination
        return None if coordination is None else coordination.agents

    def _register(self, registry: AgentRegistry) -> None:
        handle = self.handle
        agent = registry.register(handle.name, role=handle.role, task=handle.task)
        registry.set_status(handle.name, AgentStatus.WORKING)
        self._due(agent.timeout_s)

    def _due(self, timeout_s: float) -> None:
        self._next_beat = time.monotonic() + timeout_s / 3


def role_conversation(
    memory: BoardMemory,
    handle: AgentHandle,
    *,
    scheduler: Scheduler | None = None,
    params: Mapping[str, object] | None = None,
    settings: ConversationSettings | None = None,
    recall_filters: SearchFilters | None = None,
    shared: Sequence[Shared] = (),
    economy: bool = True,
    **options: Unpack[ViewOptions],
) -> Conversation:
    """Return the conversation of the agent ``handle``: its frame, L1 context and own recall.

    Args:
        memory: the memory whose blackboard the handle is on.
        handle: the agent (``memory.agent(name, role=..., task=...)``); its name is the
            conversation's agent, its role the conversation's role, its task the task.
        scheduler: the read path of the frame; the memory's own (``memory.scheduler``) when
            omitted.
        params: the frame's parameters, if any (``{"plan": PLAN_IRI}`` for ``da_input``).
        settings: budget, recall size, shares and placement (``agent`` and ``role`` are the
            handle's, whatever these say).
        recall_filters: restrict recall further; turns of other agents stay out regardless.
        shared: named graph IRIs or scopes that recall reads besides the task's entries.
        economy: show the frame's nodes by the copies the request holds (see the module
            docstring); ``False`` shows the frame whole at every call.
        **options: fields of ``settings`` to replace (``budget=900``, ``recall_k=3`` ...).

    The conversation is the task's scope. A middleware serving a run of another scope (a
    ``thread_id`` in its config) builds that scope's conversation from this one: it keeps the
    frame and still leaves the other agents' turns out, but recalls none of its own turns.

    Raises:
        InvalidInputError: ``memory`` is not a ``Memory``, ``handle`` not an ``AgentHandle`` on
            its blackboard, ``scheduler`` not a ``Scheduler`` over it, ``economy`` not a bool,
            or a bad option.

    Example:
        >>> doer = memory.agent("doer", role="do", task="urn:task:1")  # doctest: +SKIP
        >>> chat = role_conversation(memory, doer, budget=1200)  # doctest: +SKIP
    """
    memory = check_memory(memory)
    if not isinstance(handle, AgentHandle) or handle.board is not memory.blackboard:
        raise InvalidInputError(
            f"handle must be an AgentHandle on the memory's blackboard, got {preview(handle)}"
        )
    if scheduler is None:
        scheduler = memory.scheduler
    elif not isinstance(scheduler, Scheduler) or scheduler.board is not handle.board:
        raise InvalidInputError(
            f"scheduler must be a Scheduler over the handle's blackboard, got {preview(scheduler)}"
        )
    if recall_filters is not None and not isinstance(recall_filters, SearchFilters):
        raise InvalidInputError(
            f"recall_filters must be SearchFilters or None, got {preview(recall_filters)}"
        )
    if not isinstance(economy, bool):
        raise InvalidInputError(f"economy must be a bool, got {preview(economy)}")
    chosen = ConversationSettings.of(settings, **options)
    chosen = ConversationSettings.of(chosen, agent=handle.name, role=handle.role)
    session = memory.session(handle.task, agent=handle.name, role=handle.role)
    return Conversation(
        memory,
        handle.task,
        settings=chosen,
        recall_filters=own_turns(session.iri, recall_filters),
        shared=shared,
        extra_sources=[
            FrameSource(
                scheduler,
                handle.task,
                handle.role,
                params=params,
                fallback="frame",
                seen="request" if economy else None,
            )
        ],
    )


def own_turns(session_iri: str, base: SearchFilters | None = None) -> SearchFilters:
    """Return filters admitting the turns of one session and every entry that is not a turn."""
    mine = SearchFilters(
        any_of=(SearchFilters(exclude_types=TURN_TYPES), SearchFilters(named_graph=session_iri))
    )
    return mine if base is None else SearchFilters(all_of=(base, mine))
