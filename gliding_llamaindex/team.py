"""Role agents for LlamaIndex: ``FunctionAgent``s on one task in an ``AgentWorkflow``.

``create_role_agent(llm, handle)`` is a ``FunctionAgent`` named after the handle, with the
handle's ``BlackboardToolSpec`` (and any other ``FunctionAgent`` argument). ``TeamMemory`` is
the one memory an ``AgentWorkflow`` takes, holding a ``GlidingMemory`` per agent
(``role_memory``: its role's frame, L1 context and own recall,
``gliding_core.view.team.role_conversation``) and answering with the memory of the agent that
works now. ``pdca_workflow`` chains plan, do, check and act agents that hand off in that order
and share nothing but the blackboard and the user's request; it is built over the engine's
team (``gliding_core.view.team.team``: names, the task's registration, the handles, the
memory's one scheduler, the instructions, the round's order). Each of its agents runs as a
turn (``AgentTurn``): registered and Working from its first step, completed and unregistered
when it hands off or answers, so a finished round leaves no agent registered and rounds on
other tasks never meet its names (``default_names(task)``).

How ``TeamMemory`` knows who works: the workflow puts the user's message into it first (the
root agent's); when an agent's turn is put (its ``finalize``) with a ``handoff`` call to a
known agent, that agent works from then on, and it is given the user's request.

Token economy (``gliding_core.view.team``): each agent's frame shows a node the model request holds
at its current value (a blackboard tool's result) as a reference. A ``FunctionAgent`` keeps the
tool calls of its run in progress in a scratchpad, sent after the memory's view and put into
the memory only when the run ends; the role agent (``RoleFunctionAgent``) hands the scratchpad
to its memory after each round of tool results (``hold``), so the next view counts those copies
too, once.

Invariants: an agent's model sees only its own memory's view (never another agent's messages);
each agent's identity is its handle's; a supplementary input put for the task is delivered by
the memory of the agent working when it arrives, once; messages held for a view are ones the
next model request carries (the scratchpad, sent whole after the view).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from llama_index.core.agent.workflow import (
    AgentContext,
    AgentOutput,
    AgentWorkflow,
    BaseWorkflowAgent,
    FunctionAgent,
    ToolCallResult,
)
from llama_index.core.base.llms.types import ChatMessage
from llama_index.core.bridge.pydantic import ConfigDict, PrivateAttr
from llama_index.core.llms.llm import LLM
from llama_index.core.memory.types import BaseMemory
from llama_index.core.tools import AsyncBaseTool, BaseTool
from typing_extensions import Unpack
from workflows import Context
from workflows.handler import WorkflowHandler

from gliding_core import InvalidInputError, Memory
from gliding_core.blackboard.handle import AgentHandle
from gliding_core.config import ViewOptions
from gliding_core.jsonld import preview
from gliding_core.projection.scheduler import Scheduler
from gliding_core.view.team import (
    AREA_OF,
    ROLES,
    AgentTurn,
    check_memory,
    check_roles,
    instructions,
    role_conversation,
    team,
)
from gliding_core.view.team import DEFAULT_BUDGET as DEFAULT_BUDGET  # the adapter's names too
from gliding_core.view.team import DEFAULT_NAMES as DEFAULT_NAMES
from gliding_core.view.team import default_names as default_names
from gliding_llamaindex.board_tools import BlackboardToolSpec
from gliding_llamaindex.memory import GlidingMemory
from gliding_llamaindex.messages import to_record

HANDOFF = "handoff"  # the name of AgentWorkflow's hand-off tool


def role_memory(
    memory: Memory,
    handle: AgentHandle,
    *,
    scheduler: Scheduler | None = None,
    **options: Unpack[ViewOptions],
) -> GlidingMemory:
    """Return the ``GlidingMemory`` of a role agent: its frame, L1 context and own recall.

    The memory text is a system message unless ``placement`` says otherwise (a
    ``FunctionAgent`` reads either).
    """
    check_memory(memory)
    options.setdefault("placement", "system")
    options.setdefault("budget", DEFAULT_BUDGET)
    return GlidingMemory(role_conversation(memory, handle, scheduler=scheduler, **options))


class TeamMemory(BaseMemory):
    """The memory of an ``AgentWorkflow``: one ``GlidingMemory`` per agent, the working one's.

    Args:
        memories: agent name -> its memory.
        root: the agent that works first.

    Attributes:
        current: the name of the agent working now.
        handovers: the agents that worked, in order.
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

    _memories: dict[str, GlidingMemory] = PrivateAttr()
    _request: ChatMessage | None = PrivateAttr(default=None)
    _handovers: list[str] = PrivateAttr(default_factory=list)

    def __init__(self, memories: Mapping[str, GlidingMemory], *, root: str) -> None:
        super().__init__()
        if not isinstance(memories, Mapping) or not memories:
            raise InvalidInputError(f"memories must map agent names, got {preview(memories)}")
        for name, each in memories.items():
            if not isinstance(each, GlidingMemory):
                raise InvalidInputError(f"the memory of {name!r} is not a GlidingMemory")
        if root not in memories:
            raise InvalidInputError(f"root {root!r} is not one of {sorted(memories)}")
        self._memories = dict(memories)
        self._handovers = [root]

    @classmethod
    def class_name(cls) -> str:
        """The LlamaIndex component name."""
        return "GlidingTeamMemory"

    @classmethod
    def from_defaults(cls, **kwargs: Any) -> TeamMemory:
        """Not supported: a team memory is built from its agents' memories."""
        raise InvalidInputError("build a TeamMemory from its agents' memories: TeamMemory({...})")

    @property
    def current(self) -> str:
        """The name of the agent working now."""
        return self._handovers[-1]

    @property
    def handovers(self) -> list[str]:
        """The agents that worked, in order (the first is the root)."""
        return list(self._handovers)

    def memory_of(self, name: str) -> GlidingMemory:
        """Return the memory of agent ``name``."""
        if name not in self._memories:
            raise InvalidInputError(f"no agent {name!r}; agents: {sorted(self._memories)}")
        return self._memories[name]

    def get(self, input: str | None = None, **kwargs: Any) -> list[ChatMessage]:
        """Return the working agent's view."""
        return self._memories[self.current].get(input, **kwargs)

    def get_all(self) -> list[ChatMessage]:
        """Return the working agent's full history."""
        return self._memories[self.current].get_all()

    def hold(self, messages: Sequence[ChatMessage]) -> None:
        """Hold messages for the working agent's next view (``GlidingMemory.hold``)."""
        self._memories[self.current].hold(messages)

    def put(self, message: ChatMessage) -> None:
        """Put a message into the working agent's memory."""
        self.put_messages([message])

    def put_messages(self, messages: list[ChatMessage]) -> None:
        """Put messages into the working agent's memory; a hand-off among them switches agents."""
        working = self._memories[self.current]
        working.put_messages(messages)
        if self._request is None:
            self._request = next((m for m in messages if m.role.value == "user"), None)
        target = _handed_to(messages, self._memories)
        if target is not None and target != self.current:
            self._handovers.append(target)
            if self._request is not None:
                self._memories[target].put(self._request.model_copy(deep=True))

    def set(self, messages: list[ChatMessage]) -> None:
        """Replace the working agent's history."""
        self._memories[self.current].set(messages)

    def reset(self) -> None:
        """Forget every agent's history (L0 keeps what was archived) and start at the root."""
        for each in self._memories.values():
            each.reset()
        self.restart()

    def restart(self) -> None:
        """Start the next run at the root, every agent's history kept (a new round)."""
        self._handovers = self._handovers[:1]
        self._request = None


def _handed_to(messages: Sequence[ChatMessage], names: Mapping[str, Any]) -> str | None:
    """The agent the last ``handoff`` call among ``messages`` names, if it is one of ``names``."""
    target = None
    for message in messages:
        for call in to_record(message).get("tool_calls", []):
            args = call.get("args")
            if isinstance(args, str):
                try:
                    args = json.loads(args)
                except ValueError:
                    continue
            name = args.get("to_agent") if isinstance(args, Mapping) else None
            if call.get("name") == HANDOFF and name in names:
                target = str(name)
    return target


class RoleFunctionAgent(FunctionAgent):
    """A ``FunctionAgent`` that hands its scratchpad to a gliding memory for the next view.

    After each round of tool results the scratchpad (the run's tool calls and their results,
    which the agent sends after the memory's view) is held by the memory (``hold``), so the
    frame in the next view shows the nodes those results hold at their current value as
    references. With any other memory it is a plain ``FunctionAgent``.

    With a turn (``turn``, a round's agent) the agent is registered and Working from its
    first step (each step beats), and completed and unregistered when it hands off or
    answers (``finalize``).
    """

    _turn: AgentTurn | None = PrivateAttr(default=None)

    @property
    def turn(self) -> AgentTurn | None:
        """The agent's turn in a round, if it runs as one."""
        return self._turn

    def run_as_turn(self, turn: AgentTurn) -> None:
        """Run each of the agent's runs as ``turn`` (of its own handle)."""
        if not isinstance(turn, AgentTurn) or turn.handle.name != self.name:
            raise InvalidInputError(f"turn must be an AgentTurn of {self.name!r}, got {turn!r:.80}")
        self._turn = turn

    async def take_step(
        self,
        ctx: AgentContext,
        llm_input: list[ChatMessage],
        tools: Sequence[AsyncBaseTool],
        memory: BaseMemory,
    ) -> AgentOutput:
        """Start the turn (or beat, when it runs), then take the step as ``FunctionAgent``."""
        turn = self._turn
        if turn is not None:
            await asyncio.to_thread(turn.beat if turn.active else turn.start)
        return await super().take_step(ctx, llm_input, tools, memory)

    async def finalize(self, ctx: Context, output: AgentOutput, memory: BaseMemory) -> AgentOutput:
        """Finalize as ``FunctionAgent``, then end the turn (completed, unregistered)."""
        final = await super().finalize(ctx, output, memory)
        turn = self._turn
        if turn is not None and turn.active:
            await asyncio.to_thread(turn.finish)
        return final

    async def handle_tool_call_results(
        self, ctx: Context, results: list[ToolCallResult], memory: BaseMemory
    ) -> None:
        """Add the results to the scratchpad (as ``FunctionAgent`` does), then hold it."""
        await super().handle_tool_call_results(ctx, results, memory)
        if isinstance(memory, (TeamMemory, GlidingMemory)):
            scratchpad = await ctx.store.get(self.scratchpad_key, default=[])
            memory.hold(list(scratchpad))


def create_role_agent(
    llm: LLM,
    handle: AgentHandle,
    *,
    scheduler: Scheduler | None = None,
    tools: Sequence[BaseTool] = (),
    can_handoff_to: Sequence[str] | None = None,
    system_prompt: str | None = None,
    turn: bool = False,
    **agent_options: Any,
) -> RoleFunctionAgent:
    """Return a ``FunctionAgent`` named after ``handle`` with its blackboard tools.

    It is a ``RoleFunctionAgent``: with a ``TeamMemory`` or ``GlidingMemory`` its tool results
    of the run in progress count for its frame's economy.

    Args:
        llm: a function-calling LLM (``pdca_llm(role, task)`` offline).
        handle: the agent's blackboard handle.
        scheduler: the read path of ``project_frame``; without one the tool is left out.
        tools: more tools besides the blackboard's.
        can_handoff_to: the agents it may hand off to (all, when ``None``).
        system_prompt: its instructions; a line naming its role, task and area when omitted.
        turn: run each run as a turn of a round (``AgentTurn``): registered while it works,
            completed and unregistered when it hands off or answers (``pdca_workflow``'s
            agents do).
        **agent_options: more ``FunctionAgent`` arguments (``description``,
            ``output_cls``, ``streaming``, ``allow_parallel_tool_calls`` ...).

    Raises:
        InvalidInputError: ``handle`` is not an ``AgentHandle``, ``turn`` not a bool, or an
            option names what the role agent sets itself.
    """
    if not isinstance(handle, AgentHandle):
        raise InvalidInputError(f"handle must be an AgentHandle, got {preview(handle)}")
    if not isinstance(turn, bool):
        raise InvalidInputError(f"turn must be a bool, got {preview(turn)}")
    taken = sorted(set(agent_options) & _SET_BY_ROLE)
    if taken:
        raise InvalidInputError(
            f"{taken} are set by the role agent (its handle, llm, tools, can_handoff_to and"
            f" system_prompt arguments), not through options"
        )
    spec = BlackboardToolSpec(handle, scheduler=scheduler)
    area = AREA_OF.get(handle.role, handle.role)
    then = "report in one line" if can_handoff_to == [] else "hand off"
    agent_options.setdefault(
        "description", f"The {handle.role} agent: writes the {area!r} area of {handle.task}."
    )
    agent = RoleFunctionAgent(
        name=handle.name,
        system_prompt=system_prompt
        if system_prompt is not None
        else instructions(handle, then=then, frame=False),
        tools=[*spec.to_tool_list(), *tools],
        llm=llm,
        can_handoff_to=None if can_handoff_to is None else list(can_handoff_to),
        **agent_options,
    )
    if turn:
        agent.run_as_turn(AgentTurn(handle))
    return agent


_SET_BY_ROLE = frozenset({"name", "system_prompt", "tools", "llm", "can_handoff_to"})
# AgentWorkflow arguments a round sets itself.
_SET_BY_ROUND = frozenset({"agents", "root_agent"})


@dataclass(frozen=True, slots=True)
class RoleWorkflow:
    """An ``AgentWorkflow`` of role agents with the ``TeamMemory`` it runs with.

    Attributes:
        workflow: the workflow (plan hands off to do, do to check, check to act).
        memory: the team memory; ``memory.memory_of(name).last_view`` is what an agent saw.
        handles: role -> the agent's handle.
    """

    workflow: AgentWorkflow
    memory: TeamMemory
    handles: Mapping[str, AgentHandle]

    def run(self, request: str, **kwargs: Any) -> WorkflowHandler:
        """Start the round on ``request``; await the handler for the last agent's output.

        ``kwargs`` go to ``AgentWorkflow.run`` (``max_iterations``, ``ctx`` ...). Without a
        ``ctx`` (a run to resume) the round starts again at its first agent, each agent's
        history kept (``TeamMemory.restart``).
        """
        if kwargs.get("ctx") is None:
            self.memory.restart()
        return self.workflow.run(user_msg=request, memory=self.memory, **kwargs)


def pdca_workflow(
    memory: Memory,
    task: str,
    llms: Mapping[str, LLM],
    *,
    names: Mapping[str, str] | None = None,
    scheduler: Scheduler | None = None,
    workflow_options: Mapping[str, Any] | None = None,
    **options: Unpack[ViewOptions],
) -> RoleWorkflow:
    """Return plan, do, check and act ``FunctionAgent``s on ``task``, handing off in order.

    Each agent runs as a turn (``create_role_agent(..., turn=True)``): a finished round leaves
    none of them registered, so it can run again, and another task's round can run beside it.

    Args:
        memory: the memory whose blackboard they share; the task is registered if it is not.
        task: the task's IRI.
        llms: role -> function-calling LLM, for each of the four roles.
        names: role -> agent name (distinct); the task's own (``default_names(task)``:
            ``planner-1a2b3c4d`` ...) when omitted, which no other task's agents take. The
            hand-off names them: a scripted LLM needs them (``pdca_llm(role, task,
            next_agent=...)``).
        scheduler: the read path of the frames; the memory's own (``memory.scheduler``) when
            omitted.
        workflow_options: more ``AgentWorkflow`` arguments (``timeout``, ``initial_state``,
            ``handoff_prompt``, ``verbose`` ...); not ``agents`` or ``root_agent``.
        **options: each agent's view settings (``budget=...``).

    Raises:
        InvalidInputError: a bad memory, a role without an LLM, a bad or taken name, or a
            workflow option the round sets itself.

    Example:
        >>> from gliding_llamaindex.testing import pdca_llm
        >>> names = default_names(TASK)  # doctest: +SKIP
        >>> pairs = zip(ROLES, [names["do"], names["check"], names["act"], None])  # doctest: +SKIP
        >>> llms = {r: pdca_llm(r, TASK, next_agent=n) for r, n in pairs}  # doctest: +SKIP
        >>> team = pdca_workflow(memory, TASK, llms, budget=1200)  # doctest: +SKIP
        >>> await team.run(request)  # doctest: +SKIP
    """
    check_memory(memory)
    chosen = check_roles(llms, what="llms", kind="LLMs")
    extra = _check_workflow_options(workflow_options)
    crew = team(memory, task, names=names, scheduler=scheduler)
    chosen_names = crew.names
    workflow_agents: list[BaseWorkflowAgent] = [
        create_role_agent(
            chosen[role],
            crew.handles[role],
            scheduler=crew.scheduler,
            can_handoff_to=[chosen_names[n]] if (n := crew.next_role(role)) is not None else [],
            turn=True,
        )
        for role in ROLES
    ]
    memories = {
        chosen_names[role]: role_memory(
            memory, crew.handles[role], scheduler=crew.scheduler, **options
        )
        for role in ROLES
    }
    root = chosen_names[ROLES[0]]
    workflow = AgentWorkflow(agents=workflow_agents, root_agent=root, **extra)
    return RoleWorkflow(workflow, TeamMemory(memories, root=root), crew.handles)


def _check_workflow_options(options: object) -> dict[str, Any]:
    """Return ``options`` as keyword arguments of ``AgentWorkflow``, or refuse them."""
    if options is None:
        return {}
    if not isinstance(options, Mapping) or not all(isinstance(key, str) for key in options):
        raise InvalidInputError(
            f"workflow_options must map AgentWorkflow argument names, got {preview(options)}"
        )
    taken = sorted(set(options) & _SET_BY_ROUND)
    if taken:
        raise InvalidInputError(f"{taken} are set by the round, not through workflow_options")
    return dict(options)
