"""Role agents: ``create_agent`` agents that work on one task and hand over through the blackboard.

``create_role_agent(model, handle, memory=memory)`` builds one: its model is given, within its
budget, its role's frame of the task, its L1 context and its recall
(``GlidingMemoryMiddleware(memory, handle=handle)``), and it acts through the blackboard tools
of its handle (``BlackboardToolkit``). ``pdca_agents`` builds the four of a task over the
engine's team (``gliding_core.view.team.team``: names, the task's registration, the handles, the
memory's one scheduler, the instructions); ``pdca_graph`` chains them (plan, do, check, act) in
a LangGraph ``StateGraph``: each gets the user's request as its only message and reads the
previous role's work through its frame, never through a shared message history.

Invariants: an agent's identity and role are its handle's (bound when it is built); the graph
state carries the request, the order of handovers and each role's final report, never the
agents' messages; a supplementary input put for the task reaches the agent whose model call
starts next, once.
"""

from __future__ import annotations

import operator
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Annotated, Any, NamedTuple, TypedDict

from langchain.agents import create_agent
from langchain.agents.middleware import AgentMiddleware
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import BaseMessage, HumanMessage
from langchain_core.runnables import RunnableConfig
from langchain_core.tools import BaseTool
from langgraph.graph import END, START, StateGraph
from langgraph.graph.state import CompiledStateGraph
from typing_extensions import Unpack

from gliding_core import InvalidInputError, Memory
from gliding_core.blackboard.handle import AgentHandle
from gliding_core.config import ViewOptions
from gliding_core.jsonld import preview
from gliding_core.projection.scheduler import Scheduler
from gliding_core.view.team import DEFAULT_BUDGET as DEFAULT_BUDGET  # the adapter's names too
from gliding_core.view.team import DEFAULT_NAMES as DEFAULT_NAMES
from gliding_core.view.team import (
    ROLES,
    check_memory,
    check_roles,
    check_scheduler,
    instructions,
    team,
)
from gliding_langchain.board_tools import BlackboardToolkit
from gliding_langchain.messages import to_records
from gliding_langchain.middleware import GlidingMemoryMiddleware


@dataclass(frozen=True, slots=True)
class RoleAgent:
    """A role agent: its handle, its compiled agent graph and its memory middleware.

    Attributes:
        handle: the agent's identity on the blackboard (name, role, task).
        graph: the ``create_agent`` graph (``graph.invoke({"messages": [...]})``).
        middleware: its memory; ``middleware.views`` are what its model saw, call by call.
    """

    handle: AgentHandle
    graph: CompiledStateGraph[Any, Any, Any, Any]
    middleware: GlidingMemoryMiddleware

    @property
    def name(self) -> str:
        """The agent's name."""
        return self.handle.name

    @property
    def role(self) -> str:
        """The agent's role."""
        return self.handle.role


def create_role_agent(
    model: BaseChatModel,
    handle: AgentHandle,
    *,
    memory: Memory,
    tools: Sequence[BaseTool] = (),
    scheduler: Scheduler | None = None,
    system_prompt: str | None = None,
    middleware: Sequence[AgentMiddleware[Any, Any, Any]] = (),
    **options: Unpack[ViewOptions],
) -> RoleAgent:
    """Return a ``create_agent`` agent for ``handle``: its frame, memory and blackboard tools.

    Args:
        model: the chat model (``pdca_model(role, task)`` offline).
        handle: the agent's blackboard handle (``memory.agent(name, role=..., task=...)``).
        memory: the memory the handle's blackboard belongs to.
        tools: more tools besides the blackboard's.
        scheduler: the frame's read path (and ``project_frame``'s); the memory's own
            (``memory.scheduler``) when omitted.
        system_prompt: the agent's instructions; a line naming its role, task and area when
            omitted.
        middleware: more middleware, after the memory's (inside its model call: one that
            trims messages should do it in ``before_model``, so the frame's references are to
            copies the request still holds; see ``GlidingMemoryMiddleware``).
        **options: the memory's view settings (``budget`` per model call, ``recall_k`` ...).

    Raises:
        InvalidInputError: a bad handle, memory, scheduler or option.
    """
    owner = check_memory(memory)
    scheduler = check_scheduler(scheduler, owner)
    options.setdefault("budget", DEFAULT_BUDGET)
    memory_middleware = GlidingMemoryMiddleware(
        memory, handle=handle, scheduler=scheduler, **options
    )
    board_tools = BlackboardToolkit(handle, scheduler=scheduler).get_tools()
    graph = create_agent(
        model,
        [*board_tools, *tools],
        system_prompt=system_prompt if system_prompt is not None else instructions(handle),
        middleware=[memory_middleware, *middleware],
        name=handle.name,
    )
    return RoleAgent(handle, graph, memory_middleware)


def pdca_agents(
    memory: Memory,
    task: str,
    models: Mapping[str, BaseChatModel],
    *,
    names: Mapping[str, str] = DEFAULT_NAMES,
    scheduler: Scheduler | None = None,
    **options: Unpack[ViewOptions],
) -> dict[str, RoleAgent]:
    """Return the four role agents of ``task`` (plan, do, check, act), registering the task.

    Args:
        memory: the memory whose blackboard they share.
        task: the task's IRI; registered in the blackboard's task registry if it is not.
        models: role -> chat model, for each of the four roles.
        names: role -> agent name (distinct).
        scheduler: the read path of their frames; the memory's own (``memory.scheduler``)
            when omitted.
        **options: the memory's view settings of every agent (``budget=...``).

    Raises:
        InvalidInputError: a bad memory, a role without a model or a name, or what
            ``create_role_agent`` rejects.
    """
    check_memory(memory)
    chosen = check_roles(models, what="models", kind="chat models")
    crew = team(memory, task, names=names, scheduler=scheduler)
    return {
        role: create_role_agent(
            chosen[role],
            crew.handles[role],
            memory=memory,
            scheduler=crew.scheduler,
            system_prompt=crew.instructions(role),
            **options,
        )
        for role in ROLES
    }


class PdcaState(TypedDict, total=False):
    """The state of the round: the request, who handed over in which order, each report."""

    request: str
    handovers: Annotated[list[str], operator.add]
    reports: Annotated[dict[str, str], operator.or_]
    transcripts: Annotated[dict[str, list[BaseMessage]], operator.or_]


def pdca_graph(
    memory: Memory,
    task: str,
    models: Mapping[str, BaseChatModel] | None = None,
    *,
    agents: Mapping[str, RoleAgent] | None = None,
    **options: Unpack[ViewOptions],
) -> CompiledStateGraph[PdcaState, Any, PdcaState, PdcaState]:
    """Return a LangGraph graph of plan, do, check and act agents on ``task``, in that order.

    Each node runs one role agent on the request alone; the agents hand over through the
    blackboard (plan writes the steps, do the artifacts, check the reviews, act the
    decision), each reading the previous role's area through its frame.

    Args:
        memory: the memory whose blackboard the agents share.
        task: the task's IRI.
        models: role -> chat model (``pdca_agents`` builds the agents); or give ``agents``.
        agents: ready role agents (from ``pdca_agents``), role -> agent.
        **options: the memory's view settings, with ``models``.

    Raises:
        InvalidInputError: neither or both of ``models`` and ``agents``, or an agent of
            another task or role.

    Example:
        >>> from gliding_core.testing import ROLES, Request
        >>> from gliding_langchain.testing import pdca_model
        >>> models = {role: pdca_model(role, "urn:task:1") for role in ROLES}
        >>> graph = pdca_graph(memory, "urn:task:1", models, budget=1200)  # doctest: +SKIP
        >>> request = Request("refunds", ("validate", "call the vault")).text
        >>> graph.invoke({"request": request})["handovers"]  # doctest: +SKIP
        ['plan', 'do', 'check', 'act']

    The agents work in the task's scope: a supplementary input is put for the task
    (``memory.supplements.put(task, text)``). Run without a ``thread_id`` or ``user_id`` in
    the config: with one, their middleware would read and write that scope instead. Each
    agent's middleware delivers the inputs itself; do not give the graph a
    ``SupplementaryInputCallbackHandler`` of one agent's conversation (the graph's callbacks
    reach every agent's model calls, so that agent's session would take inputs meant for the
    agent working then).
    """
    if (models is None) == (agents is None):
        raise InvalidInputError("give models or agents, one of the two")
    team = (
        dict(agents) if agents is not None else pdca_agents(memory, task, models or {}, **options)
    )
    for role in ROLES:
        agent = team.get(role)
        if not isinstance(agent, RoleAgent) or agent.role != role or agent.handle.task != task:
            raise InvalidInputError(f"agents[{role!r}] must be a {role} RoleAgent on {task!r}")
    builder: StateGraph[PdcaState, Any, PdcaState, PdcaState] = StateGraph(PdcaState)
    for role in ROLES:
        builder.add_node(role, _node(team[role]))
    for before, after in zip((START, *ROLES), (*ROLES, END), strict=True):
        builder.add_edge(before, after)
    return builder.compile()


class CallTokens(NamedTuple):
    """The prompt tokens of one model call of the round, and what a shared history would cost.

    Attributes:
        role: the agent's role.
        call: the call's number within the agent's run, from 1.
        sent: the tokens the model was sent (the budgeted view, exact; tool schemas aside).
        shared: the tokens of the same call given the task's whole message history instead:
            the agent's system prompt and messages so far after every earlier agent's
            messages (the request once), as a shared-history supervisor setup sends it.
    """

    role: str
    call: int
    sent: int
    shared: int


def call_tokens(
    memory: Memory, agents: Mapping[str, RoleAgent], state: Mapping[str, Any]
) -> list[CallTokens]:
    """Return the prompt tokens of every model call of a finished round, in order.

    Args:
        memory: the memory (its token counter counts).
        agents: the round's agents (their middleware kept the views).
        state: the graph's final state (its ``transcripts``).
    """
    framing = memory.framing()
    transcripts = state.get("transcripts") or {}
    rows: list[CallTokens] = []
    earlier = 0  # the earlier agents' messages, the request left out (it is counted once)
    for role in ROLES:
        if role not in agents:
            continue
        for number, view in enumerate(agents[role].middleware.views, start=1):
            rows.append(CallTokens(role, number, view.tokens, view.history_tokens + earlier))
        records = to_records(list(transcripts.get(role, []))[1:])
        earlier += sum(framing.message_tokens(record) for record in records)
    return rows


def _node(agent: RoleAgent) -> Any:
    """The graph node running ``agent`` on the request; it reports its final answer."""

    def run(state: PdcaState, config: RunnableConfig) -> dict[str, Any]:
        request = state.get("request")
        if not isinstance(request, str) or not request.strip():
            raise InvalidInputError(f"the round needs a request (a string), got {preview(request)}")
        callbacks = config.get("callbacks")
        final = agent.graph.invoke(
            {"messages": [HumanMessage(request)]}, config={"callbacks": callbacks}
        )
        messages: list[BaseMessage] = final["messages"]
        return {
            "handovers": [agent.role],
            "reports": {agent.role: messages[-1].text},
            "transcripts": {agent.role: messages},
        }

    return run
