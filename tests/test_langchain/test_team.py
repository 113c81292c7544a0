"""Role agents on one task: frames in the model requests, handover order, the final board, input.

Real ``create_agent`` loops, a real LangGraph graph, the real blackboard, SQLite and tiktoken;
the only fakes are the chat models, which act from scripts on what they are sent.
"""

from __future__ import annotations

import multiprocessing
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from langchain.agents import create_agent
from langchain.agents.middleware import AgentMiddleware, AgentState
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.runtime import Runtime
from langgraph.store.memory import InMemoryStore
from langgraph.types import Command, interrupt

from gliding_core import (
    Event,
    EventType,
    HashEmbedder,
    InvalidInputError,
    Memory,
    MemoryConfig,
    TopicConfig,
)
from gliding_core.blackboard.coordination.agents import AgentStatus
from gliding_core.testing import Request, RoleScript, artifact_iri, node_iris, round_problems
from gliding_core.testing import step_iri as step
from gliding_core.view.team import DEFAULT_NAMES, ROLES, default_names, instructions
from gliding_langchain import BlackboardToolkit, GlidingMemoryMiddleware, ScriptedChatModel
from gliding_langchain.messages import SUPPLEMENT_ID_PREFIX, to_records
from gliding_langchain.team import RoleAgent, create_role_agent, pdca_agents, pdca_graph
from gliding_langchain.testing import pdca_model

TASK = "urn:task:refunds"
REQUEST = Request("a refund endpoint", ("validate the payment", "call the vault", "audit"))
NOTE = "Note from the user: refunds over 500 EUR need a second approval."


@pytest.fixture
def memory() -> Iterator[Memory]:
    config = MemoryConfig(topics=TopicConfig(interval_s=0))
    with Memory(config=config, embedder=HashEmbedder()) as value:
        yield value


def models() -> dict[str, ScriptedChatModel]:
    return {role: pdca_model(role, TASK) for role in ROLES}


def run_round(memory: Memory, chat: dict[str, ScriptedChatModel]) -> tuple[dict, dict]:
    agents = pdca_agents(memory, TASK, chat, budget=1_200)
    state = pdca_graph(memory, TASK, agents=agents).invoke({"request": REQUEST.text})
    return agents, state


def request_text(messages: list[BaseMessage]) -> str:
    return "\n".join(m.text for m in messages)


def test_the_round_hands_over_in_order_and_leaves_a_correct_board(memory: Memory) -> None:
    _, state = run_round(memory, models())
    assert state["handovers"] == ["plan", "do", "check", "act"]
    assert round_problems(memory.blackboard, TASK, len(REQUEST.steps)) == []
    assert state["reports"]["act"] == "act: 2 tool calls, 0 refused"
    decision = memory.blackboard.read(node_iris(TASK)["decision"])
    assert decision is not None
    assert decision.node["decision"] == "ship"
    task = memory.blackboard.coordination.tasks.get(TASK)  # type: ignore[union-attr]
    assert task.status.value == "completed"
    # Each agent's state holds only its own messages: the request, its calls, its report.
    assert [m.text for m in state["transcripts"]["do"] if m.type == "human"] == [REQUEST.text]


def test_each_model_request_carries_its_frame_and_no_area_it_may_not_read(
    memory: Memory,
) -> None:
    chat = models()
    agents, _ = run_round(memory, chat)
    for role in ROLES:  # every view within the budget, counted exactly
        views = agents[role].middleware.views
        assert len(views) == len(chat[role].requests) == 2
        assert all(view.tokens <= 1_200 for view in views), role
    steps = [step(TASK, i) for i in (1, 2, 3)]
    artifacts = [artifact_iri(TASK, i) for i in (1, 2, 3)]
    iris = node_iris(TASK)
    first = {role: chat[role].requests[0] for role in ROLES}
    system = {role: first[role][0].text for role in ROLES}
    # plan sees the task; do sees the plan's steps; check the artifacts; act the review.
    assert f'"@id":"{TASK}"' in system["plan"]
    assert all(iri in system["do"] for iri in steps)
    assert all(iri in system["check"] for iri in artifacts)
    assert iris["review"] in system["act"]
    # What a role may not read never reaches its model, in any call.
    hidden = {
        "plan": [*artifacts, iris["review"], iris["decision"]],
        "do": [*artifacts[1:], iris["review"], iris["decision"]],
        "check": [*steps, iris["plan"], iris["decision"]],
        "act": [*steps, *artifacts, iris["plan"]],
    }
    for role, never in hidden.items():
        for request in chat[role].requests:
            text = request_text(request)
            if role == "do":  # its own tool results quote its artifacts and their steps
                text = request_text([m for m in request if m.type != "tool"])
            leaked = [iri for iri in never if f'"{iri}"' in text]
            assert leaked == [], f"{role} was shown {leaked}"


def test_without_its_frame_a_role_writes_nothing_and_the_round_is_wrong(memory: Memory) -> None:
    chat = models()
    agents = pdca_agents(memory, TASK, chat, budget=1_200)
    # The do agent on a plain middleware without recall (no handle): no frame, no steps.
    handle = agents["do"].handle
    blind = GlidingMemoryMiddleware(memory, TASK, agent="doer", budget=1_200, recall_k=0)
    tools = BlackboardToolkit(handle).get_tools()
    agents["do"] = RoleAgent(handle, create_agent(chat["do"], tools, middleware=[blind]), blind)
    pdca_graph(memory, TASK, agents=agents).invoke({"request": REQUEST.text})
    assert step(TASK, 1) not in request_text(chat["do"].requests[0])
    assert "no artifact of step 1" in round_problems(memory.blackboard, TASK, 3)


def test_role_recall_skips_the_other_agents_turns(memory: Memory) -> None:
    agents, _ = run_round(memory, models())
    query = [{"role": "user", "content": "validate the payment step 1 artifact", "id": "q"}]
    # A plain conversation on the task recalls what the other agents' tools returned ...
    plain = GlidingMemoryMiddleware(memory, TASK, agent="auditor", recall_k=8).conversation
    planner = agents["plan"].name
    assert any(hit.entry.node.get("agent") == planner for hit in plain.view(query).recall)
    # ... a role agent's recall quotes only its own turns.
    own = agents["check"].middleware.conversation
    hits = own.view(query).recall
    assert hits
    assert {hit.entry.named_graph for hit in hits} <= {own.session.iri}


def test_a_supplementary_input_reaches_the_working_agent_exactly_once(memory: Memory) -> None:
    chat = models()
    script = RoleScript("do", TASK)
    sent: list[threading.Thread] = []

    def doer(messages: list[BaseMessage]) -> AIMessage:
        if not sent:  # the user sends a note while the do agent works
            sent.append(threading.Thread(target=memory.supplements.put, args=(TASK, NOTE)))
            sent[0].start()
            sent[0].join()
        move = script(to_records(messages))
        calls = [{"id": c.id, "name": c.name, "args": c.args} for c in move.calls]
        return AIMessage(content=move.text, tool_calls=calls)

    chat["do"] = ScriptedChatModel(reply=doer)
    _, state = run_round(memory, chat)
    delivered = [
        m
        for m in state["transcripts"]["do"]
        if isinstance(m, HumanMessage) and (m.id or "").startswith(SUPPLEMENT_ID_PREFIX)
    ]
    assert [m.text for m in delivered] == [NOTE]
    assert NOTE not in request_text(chat["do"].requests[0])  # it arrived after the first call
    assert request_text(chat["do"].requests[1]).count(NOTE) == 1
    assert state["reports"]["do"].endswith(f"noted: {NOTE}")
    for role in ("plan", "check", "act"):
        assert all(NOTE not in request_text(r) for r in chat[role].requests), role
    assert memory.supplements.pending_count(TASK) == 0
    assert round_problems(memory.blackboard, TASK, 3) == []


def test_the_agents_read_through_the_memorys_scheduler_with_the_engines_instructions(
    memory: Memory,
) -> None:
    chat = models()
    agents, _ = run_round(memory, chat)
    for role, agent in agents.items():
        frame = agent.middleware.conversation.extra_sources[0]
        assert frame.scheduler is memory.scheduler  # type: ignore[attr-defined]
        system = chat[role].requests[0][0]
        assert system.type == "system"
        assert system.text.startswith(instructions(agent.handle))  # the memory text follows
    with pytest.raises(InvalidInputError, match="names must differ"):
        pdca_agents(memory, TASK, models(), names=dict.fromkeys(ROLES, "twin"))


def test_role_agents_are_built_from_valid_parts(memory: Memory) -> None:
    handle = memory.agent("doer", role="do", task=TASK)
    agent = create_role_agent(pdca_model("do", TASK), handle, memory=memory)
    assert (agent.name, agent.role) == ("doer", "do")
    assert agent.middleware.conversation.settings.agent == "doer"
    assert agent.middleware.conversation.task_iri == TASK
    with pytest.raises(InvalidInputError, match="not the task of the handle"):
        GlidingMemoryMiddleware(memory, "urn:task:other", handle=handle)
    with pytest.raises(InvalidInputError, match="handle must be an AgentHandle"):
        GlidingMemoryMiddleware(memory, handle="doer")  # type: ignore[arg-type]
    with pytest.raises(InvalidInputError, match="missing"):
        pdca_agents(memory, TASK, {"plan": pdca_model("plan", TASK)})
    with pytest.raises(InvalidInputError, match="memory must be a gliding Memory"):
        create_role_agent(pdca_model("do", TASK), handle, memory="memory")  # type: ignore[arg-type]
    with pytest.raises(InvalidInputError, match="models must map roles"):
        pdca_agents(memory, TASK, [pdca_model("plan", TASK)])  # type: ignore[arg-type]
    with pytest.raises(InvalidInputError, match="models or agents"):
        pdca_graph(memory, TASK)
    names = {role: f"{role}-two" for role in ROLES}
    agents = pdca_agents(memory, "urn:task:two", models(), names=names)
    with pytest.raises(InvalidInputError, match="must be a plan RoleAgent"):
        pdca_graph(memory, TASK, agents=agents)
    with pytest.raises(InvalidInputError, match="needs a request"):
        pdca_graph(memory, "urn:task:two", agents=agents).invoke({"request": " "})


# -- rounds that run again ---------------------------------------------------------------------

TASKS = [f"urn:task:round-{n}" for n in (1, 2, 3, 4)]
ON_DISK = MemoryConfig(embedder="hash", topics=TopicConfig(interval_s=0))


def round_on(memory: Memory, task: str) -> dict[str, Any]:
    """Run the scripted round on ``task``; return what a finished round must show."""
    chat = {role: pdca_model(role, task) for role in ROLES}
    state = pdca_graph(memory, task, chat, budget=1_200).invoke({"request": REQUEST.text})
    coordination = memory.blackboard.coordination
    assert coordination is not None
    return {
        "handovers": state["handovers"],
        "problems": round_problems(memory.blackboard, task, len(REQUEST.steps)),
        "task": coordination.tasks.get(task).status.value,
        "registered": [agent.name for agent in coordination.agents.agents()],
    }


FINISHED = {"handovers": list(ROLES), "problems": [], "task": "completed", "registered": []}


def finished_agents(memory: Memory) -> list[str]:
    """The agents reported Completed from now on, in order (a list the bus fills)."""
    completed: list[str] = []

    def keep(event: Event) -> None:
        if event.payload["status"] == "Completed":
            completed.append(str(event.source))

    memory.bus.subscribe(keep, [EventType.AGENT_STATUS_CHANGED.value])
    return completed


def round_in_a_process(directory: str, task: str, results: Any) -> None:
    """In a process of its own: open the directory, run the round on ``task``, report."""
    try:
        with Memory.open(directory, config=ON_DISK) as memory:
            results.put(round_on(memory, task))
    except Exception as exc:  # reported to the test, which names it
        results.put({"error": f"{type(exc).__name__}: {exc}"})


def test_rounds_on_three_tasks_then_one_from_another_process_all_complete(
    tmp_path: Path,
) -> None:
    with Memory.open(tmp_path, config=ON_DISK) as memory:
        completed = finished_agents(memory)
        for task in TASKS[:3]:
            assert round_on(memory, task) == FINISHED, task
        assert completed == [default_names(task)[role] for task in TASKS[:3] for role in ROLES]
    context = multiprocessing.get_context("spawn")
    results = context.Queue()
    child = context.Process(target=round_in_a_process, args=(str(tmp_path), TASKS[3], results))
    child.start()
    outcome = results.get(timeout=300)
    child.join(timeout=60)
    assert outcome == FINISHED
    with Memory.open(tmp_path, config=ON_DISK) as memory:
        assert round_on(memory, TASKS[0])["registered"] == []  # and the first task again
        assert round_problems(memory.blackboard, TASKS[3], len(REQUEST.steps)) == []


def test_default_names_are_the_tasks_own() -> None:
    names = {task: default_names(task) for task in TASKS}
    assert len({name for each in names.values() for name in each.values()}) == 4 * len(TASKS)
    for each in names.values():
        assert [name.rsplit("-", 1)[0] for name in each.values()] == list(DEFAULT_NAMES.values())
        assert all(name.replace("-", "").isalnum() for name in each.values())
    assert default_names(TASKS[0]) == names[TASKS[0]]  # the same in every process


def test_a_name_another_task_holds_is_refused_saying_how_to_proceed(memory: Memory) -> None:
    coordination = memory.blackboard.coordination
    assert coordination is not None
    memory.agent("planner", role="plan", task="urn:task:elsewhere")
    with pytest.raises(InvalidInputError) as refused:
        pdca_graph(memory, TASK, models(), names=DEFAULT_NAMES)
    message = str(refused.value)
    assert "agent 'planner' is live as 'plan' on 'urn:task:elsewhere'" in message
    assert "it cannot register as 'plan' on 'urn:task:refunds'" in message
    assert "Give this agent another name" in message
    assert "falls silent for 30 s" in message
    assert "unregister('planner')" in message
    assert "default_names(task)" in message
    assert TASK not in coordination.tasks  # refused before anything was written
    assert round_on(memory, TASK)["handovers"] == list(ROLES)  # the task's own names
    assert [agent.name for agent in coordination.agents.agents()] == ["planner"]


def test_the_silent_agent_of_a_crashed_round_gives_up_its_name(memory: Memory) -> None:
    coordination = memory.blackboard.coordination
    assert coordination is not None
    crashed = "urn:task:crashed"
    coordination.agents.register("planner", role="plan", task=crashed, heartbeat_timeout_s=0.01)
    coordination.agents.set_status("planner", "working")
    time.sleep(0.05)  # past its timeout: silent, as the agent of a process that died
    state = pdca_graph(memory, TASK, models(), names=DEFAULT_NAMES, budget=1_200).invoke(
        {"request": REQUEST.text}
    )
    assert state["handovers"] == list(ROLES)
    lost = memory.blackboard.bus.recent(EventType.AGENT_LOST)
    assert [(event.source, event.task_iri) for event in lost] == [("planner", crashed)]
    assert coordination.agents.agents() == []


def test_a_failed_turn_leaves_its_agent_in_error_and_the_round_runs_again(memory: Memory) -> None:
    coordination = memory.blackboard.coordination
    assert coordination is not None

    def down(messages: list[BaseMessage]) -> AIMessage:
        raise RuntimeError("the model is down")

    chat = models()
    chat["do"] = ScriptedChatModel(reply=down)
    with pytest.raises(RuntimeError, match="the model is down"):
        pdca_graph(memory, TASK, chat, budget=1_200).invoke({"request": REQUEST.text})
    left = [(agent.name, agent.status) for agent in coordination.agents.agents()]
    assert left == [(default_names(TASK)["do"], AgentStatus.ERROR)]  # the others: released
    again = round_on(memory, TASK)  # the model is back: the round runs over the failed one
    assert (again["handovers"], again["registered"]) == (list(ROLES), [])


def test_a_role_agent_is_invoked_as_its_graph_and_uses_the_checkpointer_given(
    memory: Memory,
) -> None:
    model = ScriptedChatModel()  # echoes the last message
    saver = InMemorySaver()
    handle = memory.agent("doer", role="do", task=TASK)
    agent = create_role_agent(model, handle, memory=memory, checkpointer=saver, budget=1_200)
    thread = {"configurable": {"thread_id": "refunds-1"}}
    agent.invoke({"messages": [HumanMessage("the first question")]}, thread)
    state = agent.invoke({"messages": [HumanMessage("the second question")]}, thread)
    asked = [m.text for m in state["messages"] if m.type == "human"]
    assert asked == ["the first question", "the second question"]  # the thread was kept
    assert saver.get_tuple(thread) is not None
    assert agent.get_state(thread).values["messages"] == state["messages"]
    assert "the first question" in request_text(model.requests[-1])
    other = agent.invoke(
        {"messages": [HumanMessage("elsewhere")]}, {"configurable": {"thread_id": "refunds-2"}}
    )
    assert [m.text for m in other["messages"] if m.type == "human"] == ["elsewhere"]


@dataclass
class UserContext:
    user_id: str


def test_a_role_agent_and_a_round_pass_on_the_frameworks_arguments(memory: Memory) -> None:
    store = InMemoryStore()
    handle = memory.agent("doer", role="do", task=TASK)
    agent = create_role_agent(
        ScriptedChatModel(), handle, memory=memory, store=store, context_schema=UserContext
    )
    assert agent.graph.store is store
    state = agent.invoke({"messages": [HumanMessage("hello")]}, context=UserContext("alice"))
    assert [m.type for m in state["messages"]] == ["human", "ai"]
    saver = InMemorySaver()
    graph = pdca_graph(memory, "urn:task:kept", models_for("urn:task:kept"), checkpointer=saver)
    thread = {"configurable": {"thread_id": "round-1"}}
    assert graph.invoke({"request": REQUEST.text}, thread)["handovers"] == list(ROLES)
    assert graph.get_state(thread).values["handovers"] == list(ROLES)
    assert round_problems(memory.blackboard, "urn:task:kept", len(REQUEST.steps)) == []


@pytest.mark.parametrize(
    ("arguments", "match"),
    [
        ({"checkpointer": "memory"}, "checkpointer must be a LangGraph checkpointer"),
        ({"store": {}}, "store must be a LangGraph BaseStore"),
        ({"context_schema": "UserContext"}, "context_schema must be a type"),
        ({"interrupt_before": "tools"}, "interrupt_before must be a list of node names"),
        ({"interrupt_after": [1]}, "interrupt_after must be a list of node names"),
        ({"debug": "yes"}, "debug must be a bool"),
    ],
)
def test_bad_framework_arguments_are_refused_naming_them(
    memory: Memory, arguments: dict[str, Any], match: str
) -> None:
    handle = memory.agent("doer", role="do", task=TASK)
    with pytest.raises(InvalidInputError, match=match):
        create_role_agent(ScriptedChatModel(), handle, memory=memory, **arguments)
    with pytest.raises(InvalidInputError, match=match):
        pdca_graph(memory, TASK, models(), **arguments)
    assert TASK not in memory.blackboard.coordination.tasks  # type: ignore[union-attr]


def models_for(task: str) -> dict[str, ScriptedChatModel]:
    return {role: pdca_model(role, task) for role in ROLES}


class AskOnce(AgentMiddleware[AgentState[Any], Any, Any]):
    """Stops the agent's first model call for a human's answer (a LangGraph interrupt)."""

    def __init__(self) -> None:
        super().__init__()
        self.answers: list[object] = []

    def before_model(self, state: AgentState[Any], runtime: Runtime[Any]) -> dict[str, Any] | None:
        if not self.answers:
            self.answers.append(interrupt("may I write the artifacts?"))
        return None


def test_an_interrupted_turn_waits_and_the_resumed_round_completes(memory: Memory) -> None:
    coordination = memory.blackboard.coordination
    assert coordination is not None
    chat = models()
    agents = pdca_agents(memory, TASK, chat, budget=1_200)
    ask = AskOnce()
    doer = agents["do"].handle
    agents["do"] = create_role_agent(
        chat["do"], doer, memory=memory, middleware=[ask], budget=1_200
    )
    graph = pdca_graph(memory, TASK, agents=agents, checkpointer=InMemorySaver())
    thread = {"configurable": {"thread_id": "round-1"}}
    stopped = graph.invoke({"request": REQUEST.text}, thread)
    assert [i.value for i in stopped["__interrupt__"]] == ["may I write the artifacts?"]
    assert [(a.name, a.status) for a in coordination.agents.agents()] == [
        (doer.name, AgentStatus.WAITING)  # paused, not failed; the planner was released
    ]
    state = graph.invoke(Command(resume="yes"), thread)
    assert ask.answers == ["yes"]
    assert state["handovers"] == list(ROLES)
    assert round_problems(memory.blackboard, TASK, len(REQUEST.steps)) == []
    assert coordination.agents.agents() == []
