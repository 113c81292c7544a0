"""Scoping per user and thread, and supplementary input shown once, in real ``create_agent`` loops.

The model is the scripted chat model (the network edge); the agent graph, the memory's SQLite,
Chroma and tiktoken are real. Each user's turns carry words only that user says, so any of them
in another user's model request, retriever result or store search is a leak.
"""

from __future__ import annotations

import asyncio
import itertools
import re
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from langchain.agents import create_agent
from langchain.agents.middleware import AgentMiddleware
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage
from langchain_core.tools import tool
from langgraph.config import get_config

from gliding_core import HashEmbedder, InvalidInputError, Memory, MemoryConfig, TopicConfig
from gliding_core.store.scope import Scope, scope_task_iri
from gliding_langchain import (
    GlidingMemoryMiddleware,
    GlidingRetriever,
    GlidingStore,
    SupplementaryInputCallbackHandler,
)
from gliding_langchain import ScriptedChatModel as Model
from gliding_langchain.messages import SUPPLEMENT_ID_PREFIX

TASK = "urn:task:support"
WORDS = {"alice": ("whale", "cobalt", "harpoon"), "bob": ("fox", "crimson", "lantern")}
TURNS = 20


@pytest.fixture
def memory() -> Iterator[Memory]:
    config = MemoryConfig(topics=TopicConfig(interval_s=0))
    with Memory(config=config, embedder=HashEmbedder()) as value:
        yield value


def said(user: str, thread: str, turn: int) -> str:
    a, b, c = WORDS[user]
    return f"{user} {thread} turn {turn}: the {a} by the {b} {c} needs item {turn}."


def owner(request: list[BaseMessage]) -> str:
    """The user whose run sent ``request``: the speaker of its last human message."""
    last = next(m for m in reversed(request) if m.type == "human")
    return last.text.split()[0]


def leaks(user: str, text: str) -> list[str]:
    other = "bob" if user == "alice" else "alice"
    return [w for w in (other, *WORDS[other]) if re.search(rf"\b{w}\b", text)]


def chat(agent: Any, user: str, thread: str, how: str) -> None:
    """Twenty turns of one user's thread; the user is named the way ``how`` says."""
    messages: list[BaseMessage] = []
    for turn in range(TURNS):
        config: dict[str, Any] = {"configurable": {"thread_id": f"{user}-{thread}"}}
        kwargs: dict[str, Any] = {}
        if how == "context":
            kwargs["context"] = {"user_id": user}
        else:
            config["configurable"]["user_id"] = user
        state = agent.invoke(
            {"messages": [*messages, HumanMessage(said(user, thread, turn))]},
            config=config,
            **kwargs,
        )
        messages = state["messages"]


def test_two_users_two_threads_each_never_see_each_other(memory: Memory) -> None:
    """Four threads at once (alice named in the runtime context, bob in the configurable):
    no model request, retriever result or store search of one user holds the other's words."""
    model = Model()
    middleware = GlidingMemoryMiddleware(memory, TASK, budget=260, recall_k=4)
    agent = create_agent(model, [], middleware=[middleware], system_prompt="Be brief.")
    store = GlidingStore(memory, scope_template=("memories", "{user_id}"))
    runs = [
        threading.Thread(target=chat, args=(agent, user, thread, how))
        for user, how in (("alice", "context"), ("bob", "configurable"))
        for thread in ("t1", "t2")
    ]
    for run in runs:
        run.start()
    for run in runs:
        run.join()
    for user in WORDS:
        store.put(("memories", user), "likes", {"text": " ".join(WORDS[user])})

    assert len(model.requests) == 4 * TURNS
    recalled = 0
    for request in model.requests:
        user = owner(request)
        text = "\n".join(m.text for m in request)
        assert leaks(user, text) == [], text
        recalled += "[Recalled from long-term memory]" in request[0].text
    assert recalled > TURNS  # recall ran: the test would see a leak
    everything = " ".join(w for words in WORDS.values() for w in words)
    for user in WORDS:
        retriever = GlidingRetriever(
            memory=memory, k=20, scope=Scope.user(user), include_turns=True
        )
        docs = retriever.invoke(everything)
        assert docs
        assert all(leaks(user, d.page_content) == [] for d in docs)
        items = store.search(("memories", user), query=everything, limit=10)
        assert [item.value["text"] for item in items] == [" ".join(WORDS[user])]
    # A retriever without a scope reads no scope's entries.
    assert GlidingRetriever(memory=memory, k=20, include_turns=True).invoke(everything) == []


def test_threads_without_a_user_are_scopes_of_their_own(memory: Memory) -> None:
    model = Model()
    middleware = GlidingMemoryMiddleware(memory, TASK, budget=200)
    agent = create_agent(model, [], middleware=[middleware])
    for turn in range(6):
        for user in WORDS:
            config = {"configurable": {"thread_id": user}}
            agent.invoke({"messages": [HumanMessage(said(user, "t", turn))]}, config=config)

    for request in model.requests:
        assert leaks(owner(request), "\n".join(m.text for m in request)) == []
    scopes = {middleware.scope_of(None)}  # outside a run: the task it was built with
    assert scopes == {Scope.task(TASK)}
    assert middleware.conversation.session.turns == []  # no run fell back to it


def test_input_for_a_user_reaches_that_users_run_only(memory: Memory) -> None:
    model = Model()
    agent = create_agent(model, [], middleware=[GlidingMemoryMiddleware(memory, TASK)])
    memory.supplements.put(scope_task_iri(user_id="alice"), "alice asked: bring the harpoon")

    for user in ("bob", "alice", "bob"):
        config = {"configurable": {"user_id": user}}
        agent.invoke({"messages": [HumanMessage(f"{user} says hello")]}, config=config)

    seen = [owner(r) for r in model.requests if any("bring the harpoon" in m.text for m in r)]
    assert seen == ["alice"]


def test_the_handler_takes_the_inputs_of_the_runs_scope(memory: Memory) -> None:
    """Inputs put for the run's user after delivery, before the model call: the handler built
    for the middleware takes each into that user's session at the model's start, and that
    user's next request shows it."""
    middleware = GlidingMemoryMiddleware(memory, TASK)
    handler = SupplementaryInputCallbackHandler.for_middleware(middleware)
    serial = itertools.count()

    class Producer(AgentMiddleware[Any, Any, Any]):
        def before_model(self, state: Any, runtime: Any) -> dict[str, Any] | None:
            user = get_config()["configurable"]["user_id"]
            memory.supplements.put(scope_task_iri(user_id=user), f"{user} note {next(serial)}")
            return None

    model = Model()
    agent = create_agent(model, [], middleware=[middleware, Producer()])
    for turn in range(3):
        for user in WORDS:
            config = {"configurable": {"user_id": user}, "callbacks": [handler]}
            agent.invoke({"messages": [HumanMessage(f"{user} asks {turn}")]}, config=config)

    assert [item.task_iri for item in handler.taken] == [
        scope_task_iri(user_id=user) for _ in range(3) for user in WORDS
    ]
    for user in WORDS:
        chat = middleware.conversation_for(Scope.user(user))
        taken = [item.content for item, _ in chat.session.taken_inputs.values()]
        assert len(taken) == 3
        assert all(text.startswith(f"{user} note ") for text in taken)
    for request in model.requests:
        assert leaks(owner(request), "\n".join(m.text for m in request)) == []


def test_concurrent_async_runs_of_two_users_do_not_mix(memory: Memory) -> None:
    model = Model()
    middleware = GlidingMemoryMiddleware(memory, TASK, budget=200)
    agent = create_agent(model, [], middleware=[middleware])

    async def run(user: str) -> None:
        messages: list[BaseMessage] = []
        for turn in range(8):
            state = await agent.ainvoke(
                {"messages": [*messages, HumanMessage(said(user, "t", turn))]},
                context={"user_id": user},
            )
            messages = state["messages"]

    async def both() -> None:
        await asyncio.gather(run("alice"), run("bob"))

    asyncio.run(both())

    assert len(model.requests) == 16
    for request in model.requests:
        assert leaks(owner(request), "\n".join(m.text for m in request)) == []


# -- supplementary input, shown exactly once -------------------------------------------------


def occurrences(request: list[BaseMessage], text: str) -> list[BaseMessage]:
    return [m for m in request for _ in range(m.text.count(text))]


def check_exactly_once(requests: list[list[BaseMessage]], texts: list[str]) -> None:
    """Each input: in no request before the one that delivers it, then in exactly one message
    of each request, the delivered message itself (never the memory text)."""
    for text in texts:
        first = None
        for index, request in enumerate(requests):
            found = occurrences(request, text)
            if first is None and not found:
                continue
            first = index if first is None else first
            assert len(found) == 1, (text, index, [m.type for m in found])
            assert (found[0].id or "").startswith(SUPPLEMENT_ID_PREFIX), (text, index)
        assert first is not None, text


QUESTION = "Plan the whale route; every whale route update matters."
# Earlier turns: out of the window, recall quotes them; it would quote a pending input on the
# route (closer to the question) before them.
EARLIER = [
    message
    for i in range(5)
    for message in (
        HumanMessage(f"Earlier leg {i}: the ship passes buoy {i}."),
        AIMessage(f"Noted leg {i}."),
    )
]


def whale_routes(messages: list[BaseMessage]) -> AIMessage:
    """Keep calling the tool until told to stop."""
    if any(m.type == "human" and m.text == "stop" for m in messages):
        return AIMessage(content="Done with the whale route.")
    call = {"id": f"call-{time.monotonic_ns()}", "name": "chart", "args": {"leg": "next"}}
    return AIMessage(content="", tool_calls=[call])


@tool
def chart(leg: str) -> str:
    """Chart the next leg of the route."""
    return f"Charted the {leg} leg."


def test_input_put_between_delivery_and_the_model_call_is_shown_once(memory: Memory) -> None:
    """A middleware after the memory's puts an input after delivery, before the model call:
    the recall of that call must not quote it (it is pending in L0, and the closest match to the
    question), the next call delivers it. Without the scope's SQL filter this test fails."""
    texts = [f"whale route update #{i:03d}." for i in range(12)]
    queue = list(texts)

    class Producer(AgentMiddleware[Any, Any, Any]):
        def before_model(self, state: Any, runtime: Any) -> dict[str, Any] | None:
            if queue:
                memory.supplements.put(TASK, queue.pop(0))
            elif not any(m.text == "stop" for m in state["messages"]):
                return {"messages": [HumanMessage("stop")]}
            return None

    model = Model(reply=whale_routes)
    memory_first = GlidingMemoryMiddleware(
        memory, TASK, budget=1_200, recall_k=20, window_share=0.2
    )
    agent = create_agent(model, [chart], middleware=[memory_first, Producer()])
    state = agent.invoke({"messages": [*EARLIER, HumanMessage(QUESTION)]})
    agent.invoke({"messages": [*state["messages"], HumanMessage(QUESTION + " Again.")]})

    check_exactly_once(model.requests, texts)


def test_inputs_from_two_threads_are_shown_once(memory: Memory) -> None:
    """300 inputs from two producer threads while the agent loops on a recall-heavy view."""
    texts = [f"whale route update #{p}{i:03d}." for p in "ab" for i in range(150)]
    done = threading.Event()

    def produce(batch: list[str]) -> None:
        for i, text in enumerate(batch):
            memory.supplements.put(TASK, text)
            if i % 25 == 0:
                time.sleep(0.005)

    def until_done(messages: list[BaseMessage]) -> AIMessage:
        if done.is_set() and memory.supplements.pending_count(TASK) == 0:
            return AIMessage(content="All updates charted.")
        return whale_routes(messages)

    model = Model(reply=until_done)
    middleware = GlidingMemoryMiddleware(memory, TASK, budget=6_000, recall_k=5)
    agent = create_agent(model, [chart], middleware=[middleware])
    producers = [threading.Thread(target=produce, args=(texts[:150],))]
    producers.append(threading.Thread(target=produce, args=(texts[150:],)))
    for thread in producers:
        thread.start()

    def finish() -> None:
        for thread in producers:
            thread.join()
        done.set()

    closer = threading.Thread(target=finish)
    closer.start()
    agent.invoke({"messages": [HumanMessage(QUESTION)]}, config={"recursion_limit": 100_000})
    closer.join()

    check_exactly_once(model.requests, texts)


def test_scope_arguments_get_typed_errors(memory: Memory) -> None:
    with pytest.raises(InvalidInputError, match="shared graph IRI"):
        GlidingRetriever(memory=memory, shared=("not an iri",))
    with pytest.raises(InvalidInputError, match="scope must be a Scope"):
        GlidingRetriever(memory=memory, scope="user:alice")
    with pytest.raises(InvalidInputError, match="memory"):
        GlidingRetriever(memory="nope")
    with pytest.raises(InvalidInputError, match="scope_template"):
        GlidingStore(memory, scope_template=("memories", "user"))
    with pytest.raises(InvalidInputError, match="max_scopes"):
        GlidingMemoryMiddleware(memory, TASK, max_scopes=0)
    with pytest.raises(InvalidInputError, match="scope must be a gliding Scope"):
        GlidingMemoryMiddleware(memory, TASK).conversation_for("user:alice")  # type: ignore[arg-type]
    agent = create_agent(Model(), [], middleware=[GlidingMemoryMiddleware(memory, TASK)])
    with pytest.raises(InvalidInputError, match="user or thread id"):
        agent.invoke({"messages": [HumanMessage("hi")]}, context={"user_id": 3.5})


def test_a_store_search_ranks_each_namespace_on_its_own(memory: Memory) -> None:
    """A namespace holding a strong match lifts none of its other items over another's."""
    store = GlidingStore(memory, scope_template=("memories", "{user_id}"))
    store.put(("memories", "alice"), "strong", {"text": "red kite red kite over the red hill"})
    store.put(("memories", "alice"), "weak", {"text": "a quiet afternoon"})
    store.put(("memories", "bob"), "some", {"text": "a kite"})

    keys = [item.key for item in store.search(("memories",), query="red kite", limit=3)]
    alone = [item.key for item in store.search(("memories", "alice"), query="red kite")]

    assert keys == ["strong", "some", "weak"]
    assert alone == ["strong", "weak"]
    assert store.scope_of(("memories", "bob")) == Scope.user("bob")
    assert store.scope_of(("notes", "bob")) is None


def test_a_shared_graph_reaches_every_user_and_nothing_else_does(memory: Memory) -> None:
    handbook = "urn:kg:handbook"
    memory.store.put({"@id": "urn:hb:1", "text": "Refunds take five days."}, named_graph=handbook)
    memory.store.put({"@id": "urn:loose:1", "text": "Refunds of the beta took nine days."})
    model = Model()
    middleware = GlidingMemoryMiddleware(memory, TASK, shared=[handbook], budget=300)
    agent = create_agent(model, [], middleware=[middleware])
    for user in WORDS:
        config = {"configurable": {"user_id": user}}
        agent.invoke({"messages": [HumanMessage(f"{user}: how long do refunds take?")]}, config)

    for request in model.requests:
        assert "Refunds take five days." in request[0].text
        assert "nine days" not in request[0].text
    retriever = GlidingRetriever(memory=memory, scope=Scope.user("alice"), shared=(handbook,))
    assert [d.id for d in retriever.invoke("refunds")][:1] == ["urn:hb:1"]
    # per call; turns too (a retriever reads knowledge entries unless asked for chat turns)
    bob = retriever.invoke("how long do refunds take", scope=Scope.user("bob"), include_turns=True)
    assert all(leaks("bob", d.page_content) == [] for d in bob)
    assert any("bob:" in d.page_content for d in bob)
