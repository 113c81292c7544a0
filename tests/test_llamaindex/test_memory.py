"""GlidingMemory: put/get/get_all/set/reset, the budget, supplements delivered once."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
from llama_index.core.base.llms.types import ChatMessage, ToolCallBlock

import gliding_llamaindex.memory
from gliding_core import ClosedError, HashEmbedder, InvalidInputError, Memory
from gliding_core.view.conversation import RECALL_HEADER
from gliding_llamaindex import GlidingMemory

TASK = "urn:task:llamaindex-test"


def user(text: str) -> ChatMessage:
    return ChatMessage(role="user", content=text)


def assistant(text: str) -> ChatMessage:
    return ChatMessage(role="assistant", content=text)


def chat(memory: Memory, budget: int = 300) -> GlidingMemory:
    return GlidingMemory.from_defaults(memory, TASK, budget=budget)


def count(memory: Memory, messages: list[ChatMessage]) -> int:
    """The exact token count of ``messages`` as sent, the way the core counts a view."""
    records = [{"role": m.role.value, "content": m.content or ""} for m in messages]
    return memory.framing().count(records)


def test_put_keeps_the_history_and_archives_each_message_once(memory: Memory) -> None:
    history = chat(memory)
    history.put(user("The deploy key lives in the blue vault."))
    history.put(assistant("Understood, the blue vault."))
    history.set(history.get_all())  # the same history again: nothing new to archive

    assert [m.content for m in history.get_all()] == [
        "The deploy key lives in the blue vault.",
        "Understood, the blue vault.",
    ]
    assert memory.store.count() == 2 + 1  # the two messages and the L1 session's state
    assert [hit.entry.node["text"] for hit in memory.search("blue vault deploy key", 1)] == [
        "The deploy key lives in the blue vault."
    ]


def test_get_shows_the_newest_messages_within_the_budget(memory: Memory) -> None:
    history = chat(memory, budget=200)
    for i in range(40):
        history.put(user(f"Question {i} about the harbour crane schedule and its shifts?"))
        history.put(assistant(f"Answer {i}: the crane runs shift {i % 3} on pier {i}."))

    shown = history.get()

    assert len(history.get_all()) == 80
    assert count(memory, history.get_all()) > 4 * 200
    assert count(memory, shown) <= 200
    assert history.last_view is not None
    assert history.last_view.tokens == count(memory, shown)
    assert shown[-1].content == "Answer 39: the crane runs shift 0 on pier 39."
    # The memory message: a user message just before the newest turn (the default placement).
    assert shown[-3].role.value == "user"
    assert shown[-3].content == history.last_view.memory
    assert shown[-2].content.startswith("Question 39")


def test_get_recalls_an_early_fact_for_the_input(memory: Memory) -> None:
    history = chat(memory, budget=250)
    history.put(user("Let's plan the office move."))
    history.put(user("The wifi password for the new office is heron-lantern-42."))
    for i in range(30):
        history.put(user(f"Item {i}: book movers for floor {i} and label crate {i}."))
        history.put(assistant(f"Booked movers for floor {i}."))

    shown = history.get("what is the wifi password of the new office?")

    assert history.last_view is not None
    memory_message = history.last_view.memory
    (carrier,) = [m for m in shown if m.content == memory_message]
    assert carrier.role.value == "user"  # the default placement: before the newest turn
    assert "heron-lantern-42" in memory_message  # from L1's context or L0's recall
    assert not any("heron" in (m.content or "") for m in shown if m is not carrier)
    assert history.last_view.dropped > 0


def test_recall_quotes_l0_hits_for_the_input(memory: Memory) -> None:
    # A note of no scope is read through a graph the memory shares explicitly.
    history = GlidingMemory.from_defaults(memory, TASK, budget=250, shared=["urn:kg:office"])
    memory.store.put(
        {"@id": "urn:note:wifi", "text": "Guest wifi password: heron-lantern-42."},
        named_graph="urn:kg:office",
    )
    for i in range(30):
        history.put(user(f"Item {i}: book movers for floor {i} and label crate {i}."))

    shown = history.get("what is the guest wifi password?")

    assert history.last_view is not None
    assert [hit.iri for hit in history.last_view.recall][:1] == ["urn:note:wifi"]
    (carrier,) = [m for m in shown if RECALL_HEADER in (m.content or "")]
    recalled = (carrier.content or "").split(RECALL_HEADER, 1)[1]
    assert "heron-lantern-42" in recalled


def test_supplements_are_delivered_once_as_user_messages(memory: Memory) -> None:
    history = chat(memory, budget=400)
    history.put(user("Draft the release notes."))
    producer = threading.Thread(
        target=memory.supplements.put, args=(TASK, "Mention the new export button.")
    )
    producer.start()
    producer.join()

    first = history.get()
    second = history.get()

    def delivered(messages: list[ChatMessage]) -> list[ChatMessage]:
        return [
            m
            for m in messages
            if m.role.value == "user" and m.content == "Mention the new export button."
        ]

    assert len(delivered(first)) == 1
    assert first[-1].content == "Mention the new export button."
    assert len(delivered(second)) == 1  # kept in the history, not delivered again
    assert len(delivered(history.get_all())) == 1
    assert history.last_view is not None
    assert history.last_view.supplements == []


def test_set_replaces_the_history_and_reset_forgets_it(memory: Memory) -> None:
    history = chat(memory)
    history.put(user("first"))
    history.set([user("alpha topic"), assistant("beta reply")])

    assert [m.content for m in history.get_all()] == ["alpha topic", "beta reply"]
    # First, alpha, beta (the archive keeps everything), and the L1 session's state.
    assert memory.store.count() == 3 + 1

    history.reset()
    assert history.get_all() == []
    assert len(history.get()) <= 1  # at most the memory message (L1's context)
    history.put(user("first"))  # new after a reset: archived again
    assert memory.store.count() == 4 + 1


def test_callers_get_copies(memory: Memory) -> None:
    history = chat(memory)
    history.put(user("original text"))
    shown = history.get()
    shown[-1].content = "edited by an agent"
    history.get_all()[0].content = "edited too"

    assert [m.content for m in history.get_all()] == ["original text"]


def test_tool_calls_stay_with_their_results(memory: Memory) -> None:
    history = chat(memory, budget=120)
    history.put(user("What's the weather in Oslo?"))
    history.put(
        ChatMessage(
            role="assistant",
            blocks=[
                ToolCallBlock(tool_call_id="c1", tool_name="weather", tool_kwargs={"c": "Oslo"})
            ],
        )
    )
    history.put(
        ChatMessage(
            role="tool", content="Oslo: 3 degrees", additional_kwargs={"tool_call_id": "c1"}
        )
    )
    history.put(assistant("It is 3 degrees in Oslo."))

    shown = history.get()

    roles = [m.role.value for m in shown]
    assert roles[-1] == "assistant"
    if "tool" in roles:  # a result is never shown without the call it answers
        call = shown[roles.index("tool") - 1]
        assert [b.tool_call_id for b in call.blocks if isinstance(b, ToolCallBlock)] == ["c1"]


async def test_async_methods_work_in_a_worker_thread(memory: Memory) -> None:
    history = chat(memory)
    await history.aput(user("async hello"))
    await history.aput_messages([assistant("async reply")])

    assert [m.content for m in await history.aget_all()] == ["async hello", "async reply"]
    assert (await history.aget())[-1].content == "async reply"
    await history.areset()
    assert await history.aget_all() == []


class HashMemory(Memory):
    """``Memory()`` without the local model, so the test does not load it."""

    def __init__(self) -> None:
        super().__init__(embedder=HashEmbedder())


def test_from_defaults_takes_token_limit_and_owns_a_memory_it_makes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(gliding_llamaindex.memory, "Memory", HashMemory)
    history = GlidingMemory.from_defaults(task_iri=TASK, token_limit=500)
    owned = history.conversation.memory
    history.put(user("hello"))

    assert history.conversation.budget == 500
    assert owned.store.count() == 1 + 1  # the message and the L1 session's state
    history.close()
    with pytest.raises(ClosedError):
        owned.store.count()


@pytest.mark.parametrize(
    ("call", "named"),
    [
        (lambda h: h.put("not a message"), "'not a message'"),
        (lambda h: h.put({"role": "user", "content": "x"}), "{'role': 'user'"),
        (lambda h: h.put_messages([ChatMessage(role="user", content="ok"), 7]), "message 1"),
        (lambda h: h.set("nope"), "'nope'"),
        (lambda h: h.get(input=42), "42"),
    ],
)
def test_bad_messages_are_typed_errors_naming_the_value(
    memory: Memory, call: object, named: str
) -> None:
    history = chat(memory)
    with pytest.raises(InvalidInputError, match=r".*") as info:
        call(history)  # type: ignore[operator]
    assert named in str(info.value)
    assert history.get_all() == []
    assert memory.store.count() == 0


@pytest.mark.parametrize(
    ("options", "named"),
    [
        ({"budget": 0}, "budget must be an int >= 1, got 0"),
        ({"budget": "big"}, "'big'"),
        ({"budget": 100, "token_limit": 200}, "100"),
        ({"recall_k": -1}, "recall_k"),
        ({"memory": "not a memory"}, "'not a memory'"),
    ],
)
def test_bad_options_are_typed_errors_naming_the_value(
    memory: Memory, options: dict[str, object], named: str
) -> None:
    options = {"memory": memory, **options}
    with pytest.raises(InvalidInputError) as info:
        GlidingMemory.from_defaults(task_iri=TASK, **options)  # type: ignore[arg-type]
    assert named in str(info.value)


def test_set_archives_only_new_messages_wherever_they_are(memory: Memory) -> None:
    history = chat(memory)
    history.put_messages([user(f"message number {i}") for i in range(6)])
    session = history.conversation.session

    history.set(history.get_all()[2:])  # trimmed: nothing new
    assert len(session.turns) == 6
    history.set([])
    history.put(user("message number 0"))  # said again: a new message
    assert len(session.turns) == 7


def test_a_memory_reopened_on_its_directory_and_session_has_its_history(tmp_path: Path) -> None:
    call = ChatMessage(
        role="assistant",
        blocks=[ToolCallBlock(tool_call_id="c1", tool_name="lookup", tool_kwargs={"q": "gate"})],
    )
    result = ChatMessage(role="tool", content="gate 4", additional_kwargs={"tool_call_id": "c1"})
    sent = [user("Which gate does the ferry leave from?"), call, result, assistant("Gate 4.")]
    with Memory.open(tmp_path, embedder=HashEmbedder()) as memory:
        first = GlidingMemory.from_defaults(memory, session_id="ferry")
        first.put_messages(sent)
        entries = memory.store.count()
    with Memory.open(tmp_path, embedder=HashEmbedder()) as memory:
        again = GlidingMemory.from_defaults(memory, session_id="ferry")
        assert again.get_all() == sent  # exactly, tool calls and all
        assert GlidingMemory.from_defaults(memory, session_id="other").get_all() == []
        again.set(again.get_all())  # the same history: nothing archived again
        assert memory.store.count() == entries
        again.put(user("And the return ferry?"))
        assert memory.store.count() == entries + 1  # one L0 entry per message
        assert [m.content for m in again.get_all()][-1] == "And the return ferry?"
