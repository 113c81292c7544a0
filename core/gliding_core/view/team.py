"""View: the conversation of a role agent, an agent with a handle on the blackboard.

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

from collections.abc import Mapping, Sequence

from typing_extensions import Unpack

from gliding_core.blackboard.handle import AgentHandle
from gliding_core.config import ConversationSettings, ViewOptions
from gliding_core.errors import InvalidInputError
from gliding_core.jsonld import preview
from gliding_core.memory import Memory
from gliding_core.projection.scheduler import Scheduler
from gliding_core.store.filters import SearchFilters
from gliding_core.store.scope import Shared
from gliding_core.view.conversation import Conversation
from gliding_core.view.frame_source import FrameSource

TURN_TYPES = ("Turn", "SupplementaryInput")  # the L0 types of archived chat turns
ROLES = ("plan", "do", "check", "act")  # the roles of a team, in the order of a round
# The area each role writes.
AREA_OF = {"plan": "plan", "do": "execution", "check": "review", "act": "decision"}


def role_conversation(
    memory: Memory,
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
        scheduler: the read path of the frame; ``Scheduler.for_memory(memory)`` when omitted.
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
    if not isinstance(memory, Memory):
        raise InvalidInputError(f"memory must be a gliding_core Memory, got {preview(memory)}")
    if not isinstance(handle, AgentHandle) or handle.board is not memory.blackboard:
        raise InvalidInputError(
            f"handle must be an AgentHandle on the memory's blackboard, got {preview(handle)}"
        )
    if scheduler is None:
        scheduler = Scheduler.for_memory(memory)
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
