"""Role agents: ``create_agent`` agents that work on one task and hand over through the blackboard.

``create_role_agent(model, handle, memory=memory)`` builds one, a ``RoleAgent``: the
``create_agent`` graph (``agent.graph``; ``agent.invoke``, ``stream`` and their async twins
call it) with the agent's handle, memory middleware and turn. Its model is given, within its
budget, its role's frame of the task, its L1 context and its recall
(``GlidingMemoryMiddleware(memory, handle=handle)``), and it acts through the blackboard tools
of its handle (``BlackboardToolkit``); ``create_agent``'s own arguments (``checkpointer``,
``store``, ``context_schema``, interrupts, ``debug``) are passed on. ``pdca_agents`` builds the
four of a task over the engine's team (``gliding_core.view.team.team``: names, the task's
registration, the handles, the memory's one scheduler, the instructions); ``pdca_graph`` chains
them (plan, do, check, act) in a LangGraph ``StateGraph``: each gets the user's request as its
only message and reads the previous role's work through its frame, never through a shared
message history. Each node runs its agent as a turn (``AgentTurn``): registered and Working
while it runs, completed and unregistered when it ends, so the round can run again, on this
task or another, in this process or the next.

Invariants: an agent's identity and role are its handle's (bound when it is built); the graph
state carries the request, the order of handovers and each role's final report, never the
agents' messages; a supplementary input put for the task reaches the agent whose model call
starts next, once; a finished round leaves none of its agents registered.
"""

from __future__ import annotations

import asyncio
import operator
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from typing import Annotated, Any, NamedTuple, TypedDict

from langchain.agents import create_agent
from langchain.agents.middleware import AgentMiddleware, AgentState
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import BaseMessage, HumanMessage
from langchain_core.runnables import RunnableConfig
from langchain_core.tools import BaseTool
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.errors import GraphBubbleUp
from langgraph.graph import END, START, StateGraph
from langgraph.graph.state import CompiledStateGraph
from langgraph.runtime import Runtime
from langgraph.store.base import BaseStore
from langgraph.types import Checkpointer
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
    AgentTurn,
    check_memory,
    check_roles,
    check_scheduler,
    instructions,
    team,
)
from gliding_core.view.team import default_names as default_names
from gliding_langchain.board_tools import BlackboardToolkit
from gliding_langchain.messages import to_records
from gliding_langchain.middleware import GlidingMemoryMiddleware


class RoleAgent:
    """A role agent: its ``create_agent`` graph, its handle, its memory middleware, its turn.

    Run it as the ``create_agent`` agent it is: ``invoke``, ``ainvoke``, ``stream``,
    ``astream``, ``get_state`` and ``aget_state`` call ``graph`` with the same arguments, and
    ``graph`` itself is the compiled graph (a LangGraph node, ``with_config`` ...).

    Args:
        handle: the agent's identity on the blackboard (name, role, task).
        graph: the ``create_agent`` graph (``graph.invoke({"messages": [...]})``).
        middleware: its memory; ``middleware.views`` are what its model saw, call by call.
        turn: its turn in a round (``with agent.turn.running(): agent.invoke(...)``
            registers it while it works and releases it after; ``pdca_graph`` does so);
            one of the handle when omitted.
    """

    __slots__ = ("graph", "handle", "middleware", "turn")

    def __init__(
        self,
        handle: AgentHandle,
        graph: CompiledStateGraph[Any, Any, Any, Any],
        middleware: GlidingMemoryMiddleware,
        turn: AgentTurn | None = None,
    ) -> None:
        if not isinstance(handle, AgentHandle):
            raise InvalidInputError(f"handle must be an AgentHandle, got {preview(handle)}")
        if not isinstance(middleware, GlidingMemoryMiddleware):
            raise InvalidInputError(
                f"middleware must be a GlidingMemoryMiddleware, got {preview(middleware)}"
            )
        if turn is not None and (not isinstance(turn, AgentTurn) or turn.handle is not handle):
            raise InvalidInputError(f"turn must be an AgentTurn of the handle, got {preview(turn)}")
        self.handle = handle
        self.graph = graph
        self.middleware = middleware
        self.turn = turn if turn is not None else AgentTurn(handle)

    def __repr__(self) -> str:
        return f"RoleAgent({self.name!r}, role={self.role!r}, task={self.handle.task!r})"

    def invoke(self, input: Any, config: RunnableConfig | None = None, **kwargs: Any) -> Any:
        """Run the agent: ``graph.invoke`` (``{"messages": [...]}`` in, the state out)."""
        return self.graph.invoke(input, config, **kwargs)

    async def ainvoke(self, input: Any, config: RunnableConfig | None = None, **kwargs: Any) -> Any:
        """Run the agent: ``graph.ainvoke``."""
        return await self.graph.ainvoke(input, config, **kwargs)

    def stream(
        self, input: Any, config: RunnableConfig | None = None, **kwargs: Any
    ) -> Iterator[Any]:
        """Stream the run: ``graph.stream``."""
        return self.graph.stream(input, config, **kwargs)

    def astream(
        self, input: Any, config: RunnableConfig | None = None, **kwargs: Any
    ) -> AsyncIterator[Any]:
        """Stream the run: ``graph.astream``."""
        return self.graph.astream(input, config, **kwargs)

    def get_state(self, config: RunnableConfig, **kwargs: Any) -> Any:
        """The state of a thread (with a checkpointer): ``graph.get_state``."""
        return self.graph.get_state(config, **kwargs)

    async def aget_state(self, config: RunnableConfig, **kwargs: Any) -> Any:
        """The state of a thread (with a checkpointer): ``graph.aget_state``."""
        return await self.graph.aget_state(config, **kwargs)

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
    checkpointer: Checkpointer = None,
    store: BaseStore | None = None,
    context_schema: type[Any] | None = None,
    interrupt_before: Sequence[str] | None = None,
    interrupt_after: Sequence[str] | None = None,
    debug: bool = False,
    **options: Unpack[ViewOptions],
) -> RoleAgent:
    """Return the role agent of ``handle``: a ``create_agent`` agent with its frame, memory and
    blackboard tools, as a ``RoleAgent`` (``agent.invoke(...)``; ``agent.graph`` is the graph).

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
        checkpointer: ``create_agent``'s: keeps each thread's messages (invoke with
            ``{"configurable": {"thread_id": ...}}``; the memory then serves that thread's
            scope, see ``GlidingMemoryMiddleware``).
        store: ``create_agent``'s long-term store (``GlidingStore`` or any LangGraph store).
        context_schema: ``create_agent``'s runtime context type (a ``user_id`` field of the
            context scopes the memory to that user).
        interrupt_before: ``create_agent``'s: nodes to interrupt before.
        interrupt_after: ``create_agent``'s: nodes to interrupt after.
        debug: ``create_agent``'s debug output.
        **options: the memory's view settings (``budget`` per model call, ``recall_k`` ...).

    Raises:
        InvalidInputError: a bad handle, memory, scheduler, option or ``create_agent``
            argument.
    """
    owner = check_memory(memory)
    scheduler = check_scheduler(scheduler, owner)
    _check_agent_arguments(checkpointer, store, context_schema, interrupt_before, interrupt_after)
    if not isinstance(debug, bool):
        raise InvalidInputError(f"debug must be a bool, got {preview(debug)}")
    options.setdefault("budget", DEFAULT_BUDGET)
    memory_middleware = GlidingMemoryMiddleware(
        memory, handle=handle, scheduler=scheduler, **options
    )
    turn = AgentTurn(handle)
    board_tools = BlackboardToolkit(handle, scheduler=scheduler).get_tools()
    graph = create_agent(
        model,
        [*board_tools, *tools],
        system_prompt=system_prompt if system_prompt is not None else instructions(handle),
        middleware=[memory_middleware, *middleware, _TurnBeat(turn)],
        checkpointer=checkpointer,
        store=store,
        context_schema=context_schema,
        interrupt_before=None if interrupt_before is None else list(interrupt_before),
        interrupt_after=None if interrupt_after is None else list(interrupt_after),
        debug=debug,
        name=handle.name,
    )
    return RoleAgent(handle, graph, memory_middleware, turn)


class _TurnBeat(AgentMiddleware[AgentState[Any], Any, Any]):
    """Tells the registry the agent is alive before each model call of its turn (a long turn
    would otherwise look like a crashed one); outside a turn it does nothing."""

    def __init__(self, turn: AgentTurn) -> None:
        super().__init__()
        self.turn = turn

    def before_model(self, state: AgentState[Any], runtime: Runtime[Any]) -> dict[str, Any] | None:
        """Beat, if one is due."""
        self.turn.beat()
        return None

    async def abefore_model(
        self, state: AgentState[Any], runtime: Runtime[Any]
    ) -> dict[str, Any] | None:
        """Async ``before_model``: the beat runs in a worker thread, off the event loop."""
        return await asyncio.to_thread(self.before_model, state, runtime)


def _check_agent_arguments(
    checkpointer: object,
    store: object,
    context_schema: object,
    interrupt_before: object,
    interrupt_after: object,
) -> None:
    """Refuse a ``create_agent`` argument of the wrong kind, naming it (LangGraph would fail
    later, at the first run)."""
    if checkpointer is not None and not isinstance(checkpointer, (bool, BaseCheckpointSaver)):
        raise InvalidInputError(
            f"checkpointer must be a LangGraph checkpointer (BaseCheckpointSaver), a bool or"
            f" None, got {preview(checkpointer)}"
        )
    if store is not None and not isinstance(store, BaseStore):
        raise InvalidInputError(f"store must be a LangGraph BaseStore, got {preview(store)}")
    if context_schema is not None and not isinstance(context_schema, type):
        raise InvalidInputError(f"context_schema must be a type, got {preview(context_schema)}")
    for what, nodes in (
        ("interrupt_before", interrupt_before),
        ("interrupt_after", interrupt_after),
    ):
        if nodes is not None and (
            isinstance(nodes, str)
            or not isinstance(nodes, Sequence)
            or not all(isinstance(node, str) for node in nodes)
        ):
            raise InvalidInputError(f"{what} must be a list of node names, got {preview(nodes)}")


def pdca_agents(
    memory: Memory,
    task: str,
    models: Mapping[str, BaseChatModel],
    *,
    names: Mapping[str, str] | None = None,
    scheduler: Scheduler | None = None,
    store: BaseStore | None = None,
    context_schema: type[Any] | None = None,
    **options: Unpack[ViewOptions],
) -> dict[str, RoleAgent]:
    """Return the four role agents of ``task`` (plan, do, check, act), registering the task.

    The agents are registered by their turns (``pdca_graph`` runs each as one), not here.

    Args:
        memory: the memory whose blackboard they share.
        task: the task's IRI; registered in the blackboard's task registry if it is not.
        models: role -> chat model, for each of the four roles.
        names: role -> agent name (distinct); the task's own (``default_names(task)``:
            ``planner-1a2b3c4d`` ...) when omitted, which no other task's agents take.
        scheduler: the read path of their frames; the memory's own (``memory.scheduler``)
            when omitted.
        store: every agent's ``create_agent`` store (a graph's store reaches them anyway).
        context_schema: every agent's ``create_agent`` runtime context type (``pdca_graph``
            passes its run's context on).
        **options: the memory's view settings of every agent (``budget=...``).

    The round's checkpointer is ``pdca_graph``'s: the agents run inside its nodes, as its
    subgraphs.

    Raises:
        InvalidInputError: a bad memory, a role without a model or a name, a name a live
            agent holds elsewhere, or what ``create_role_agent`` rejects.
    """
    check_memory(memory)
    chosen = check_roles(models, what="models", kind="chat models")
    _check_agent_arguments(None, store, context_schema, None, None)
    crew = team(memory, task, names=names, scheduler=scheduler)
    return {
        role: create_role_agent(
            chosen[role],
            crew.handles[role],
            memory=memory,
            scheduler=crew.scheduler,
            system_prompt=crew.instructions(role),
            store=store,
            context_schema=context_schema,
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
    names: Mapping[str, str] | None = None,
    checkpointer: Checkpointer = None,
    store: BaseStore | None = None,
    context_schema: type[Any] | None = None,
    interrupt_before: Sequence[str] | None = None,
    interrupt_after: Sequence[str] | None = None,
    debug: bool = False,
    **options: Unpack[ViewOptions],
) -> CompiledStateGraph[PdcaState, Any, PdcaState, PdcaState]:
    """Return a LangGraph graph of plan, do, check and act agents on ``task``, in that order.

    Each node runs one role agent on the request alone, as its turn (``AgentTurn``): the
    agent is registered and Working while it runs, then Completed and unregistered (Error,
    when it raises), so a finished round leaves no agent registered and the graph can run
    again, and rounds on other tasks never meet its names. The agents hand over through the
    blackboard (plan writes the steps, do the artifacts, check the reviews, act the
    decision), each reading the previous role's area through its frame.

    Args:
        memory: the memory whose blackboard the agents share.
        task: the task's IRI.
        models: role -> chat model (``pdca_agents`` builds the agents); or give ``agents``.
        agents: ready role agents (from ``pdca_agents``), role -> agent.
        names: with ``models``, the agents' names (``pdca_agents``).
        checkpointer: the graph's checkpointer (``StateGraph.compile``): invoke with a
            ``thread_id`` then, and the agents read and write that thread's scope.
        store: the graph's store; its nodes' agents reach it as subgraphs do.
        context_schema: the graph's runtime context type; each agent is given the run's
            context (build the agents with the same ``context_schema``; ``pdca_agents``
            does, with ``models``).
        interrupt_before: ``compile``'s: roles to interrupt before.
        interrupt_after: ``compile``'s: roles to interrupt after.
        debug: ``compile``'s debug output.
        **options: the memory's view settings, with ``models``.

    Raises:
        InvalidInputError: neither or both of ``models`` and ``agents``, an agent of another
            task or role, or a bad ``compile`` argument.

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
    the config (unless with a checkpointer, which needs a ``thread_id``): with one, their
    middleware reads and writes that scope instead. Each agent's middleware delivers the
    inputs itself; do not give the graph a ``SupplementaryInputCallbackHandler`` of one
    agent's conversation (the graph's callbacks reach every agent's model calls, so that
    agent's session would take inputs meant for the agent working then).
    """
    if (models is None) == (agents is None):
        raise InvalidInputError("give models or agents, one of the two")
    if agents is not None and names is not None:
        raise InvalidInputError("names are for the agents pdca_graph builds: give them with models")
    _check_agent_arguments(checkpointer, store, context_schema, interrupt_before, interrupt_after)
    if not isinstance(debug, bool):
        raise InvalidInputError(f"debug must be a bool, got {preview(debug)}")
    crew = (
        dict(agents)
        if agents is not None
        else pdca_agents(
            memory,
            task,
            models or {},
            names=names,
            store=store,
            context_schema=context_schema,
            **options,
        )
    )
    for role in ROLES:
        agent = crew.get(role)
        if not isinstance(agent, RoleAgent) or agent.role != role or agent.handle.task != task:
            raise InvalidInputError(f"agents[{role!r}] must be a {role} RoleAgent on {task!r}")
    builder: StateGraph[PdcaState, Any, PdcaState, PdcaState] = StateGraph(
        PdcaState, context_schema=context_schema
    )
    for role in ROLES:
        builder.add_node(role, _node(crew[role]))
    for before, after in zip((START, *ROLES), (*ROLES, END), strict=True):
        builder.add_edge(before, after)
    return builder.compile(
        checkpointer=checkpointer,
        store=store,
        interrupt_before=None if interrupt_before is None else list(interrupt_before),
        interrupt_after=None if interrupt_after is None else list(interrupt_after),
        debug=debug,
    )


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
    """The graph node running ``agent`` on the request, as its turn; it reports its answer."""

    def run(state: PdcaState, config: RunnableConfig, runtime: Runtime[Any]) -> dict[str, Any]:
        request = state.get("request")
        if not isinstance(request, str) or not request.strip():
            raise InvalidInputError(f"the round needs a request (a string), got {preview(request)}")
        callbacks = config.get("callbacks")
        with agent.turn.running(pauses=(GraphBubbleUp,)):  # an interrupt pauses the turn
            final = agent.graph.invoke(
                {"messages": [HumanMessage(request)]},
                config={"callbacks": callbacks},
                context=runtime.context,
            )
        messages: list[BaseMessage] = final["messages"]
        return {
            "handovers": [agent.role],
            "reports": {agent.role: messages[-1].text},
            "transcripts": {agent.role: messages},
        }

    return run
