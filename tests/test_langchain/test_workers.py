"""A LangGraph thread whose runs alternate between two workers, in real ``create_agent`` loops.

Each worker is an agent with its own ``Memory`` on one shared directory (neither owns it, as
processes opened with ``engines=False``) and its own middleware; the thread's messages are in the
checkpointer the two share, as a deployment's are in its database. The model (the network edge)
records what it is sent: every request must be what a single worker serving the whole thread
sends, the L1 context included, and each message is archived once.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from langchain.agents import create_agent
from langchain_core.messages import HumanMessage
from langgraph.checkpoint.memory import InMemorySaver

from gliding_core import Memory
from gliding_core.store.scope import Scope
from gliding_core.store.session_state import session_id
from gliding_langchain import GlidingMemoryMiddleware
from gliding_langchain import ScriptedChatModel as Model
from tests.workers import LINES, worker_memories

TASK = "urn:task:desk"
RUNS = 10


@pytest.fixture
def memories(tmp_path: Path) -> Iterator[tuple[Memory, Memory, Memory]]:
    with worker_memories(tmp_path) as made:
        yield made


def _agent(memory: Memory, model: Model, saver: InMemorySaver) -> Any:
    middleware = GlidingMemoryMiddleware(memory, TASK, budget=300, recall_k=3)
    return create_agent(model, [], middleware=[middleware], checkpointer=saver)


def _converse(agents: list[Any], thread: str) -> None:
    config: dict[str, Any] = {"configurable": {"thread_id": thread}}
    for run in range(RUNS):
        text = f"Thread {thread} run {run}: {LINES[run % len(LINES)]} Keep note {run * 11}."
        agents[run % len(agents)].invoke({"messages": [HumanMessage(text)]}, config=config)


def _requests(model: Model) -> list[list[tuple[str, str]]]:
    return [[(m.type, m.text) for m in request] for request in model.requests]


def test_runs_alternating_between_two_workers_send_what_one_worker_sends(
    memories: tuple[Memory, Memory, Memory],
) -> None:
    first, second, alone = memories
    saver, shared_model = InMemorySaver(), Model()
    pair = [_agent(first, shared_model, saver), _agent(second, shared_model, saver)]
    _converse(pair, "t1")
    single_model = Model()
    _converse([_agent(alone, single_model, InMemorySaver())], "t1")
    got, expected = _requests(shared_model), _requests(single_model)
    assert len(got) == len(expected) == RUNS
    for run, (one, other) in enumerate(zip(got, expected, strict=True)):
        assert one == other, f"run {run} differs"
    # The L1 context reached the model (part of the thread was out of the window).
    assert any("[Context from" in text for request in expected for _, text in request)
    task = Scope.thread("t1").task_iri
    turns = first.store.by_tags([f"session:{session_id('agent', task)}"])
    assert len(turns) == 2 * RUNS  # each message archived once, by whichever worker saw it


def test_a_thread_of_one_worker_is_not_read_by_another_thread(
    memories: tuple[Memory, Memory, Memory],
) -> None:
    first, second, _ = memories
    saver, model = InMemorySaver(), Model()
    _converse([_agent(first, model, saver)], "t1")
    other = Model()
    _converse([_agent(second, other, InMemorySaver())], "t2")
    assert len(other.requests) == RUNS
    for request in other.requests:  # t2's model is sent nothing of t1, by any path
        assert "Thread t1" not in "\n".join(m.text for m in request)
    assert any("[Context from" in m.text for request in other.requests for m in request)
    t1 = first.session(Scope.thread("t1").task_iri)
    t2 = second.session(Scope.thread("t2").task_iri)
    assert t1.id != t2.id
    assert not {t.l0_archive_iri for t in t1.turns} & {t.l0_archive_iri for t in t2.turns}
