"""Stale turns: a turn that quoted a shared node is hidden, or refreshed, once the node moves on."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gliding_core import AgentHandle, ClosedError, HashEmbedder, InvalidInputError, Memory
from gliding_core.bus import EventBus, EventType
from gliding_core.config import BlackboardConfig, MemoryConfig, TopicConfig
from gliding_core.tokens import TokenCounter
from gliding_core.tools import board_tools as ops
from gliding_core.view.conversation import Conversation
from gliding_core.view.sources import SourceRequest
from gliding_core.view.stale_turns import STALE_HEADER, StaleTurns, quoted_nodes

TASK = "urn:ex:task:stale"
NODE = f"{TASK}/report"
SUMMARY = "the quarterly report on parser throughput, with the benchmark tables"


@pytest.fixture
def memory() -> Iterator[Memory]:
    config = MemoryConfig(
        topics=TopicConfig(interval_s=0), blackboard=BlackboardConfig(flush_interval_s=0)
    )
    with Memory(config=config, embedder=HashEmbedder()) as value:
        value.blackboard.coordination.tasks.register(TASK)  # type: ignore[union-attr]
        yield value


@pytest.fixture
def handle(memory: Memory) -> AgentHandle:
    return memory.agent("doer", role="do", task=TASK)


def write(memory: Memory, status: str, iri: str = NODE) -> None:
    node = {"@id": iri, "@type": "Artifact", "summary": SUMMARY, "status": status}
    memory.blackboard.write([node], task=TASK, area="execution")


def tool_exchange(result: dict[str, Any], n: int = 1) -> list[dict[str, Any]]:
    """A model's call of a blackboard tool and its result, as message records."""
    call = {"id": f"c{n}", "name": "read_node", "args": {"iri": NODE}}
    return [
        {"role": "assistant", "content": "", "tool_calls": [call], "id": f"a{n}"},
        {"role": "tool", "content": json.dumps(result), "tool_call_id": f"c{n}", "id": f"t{n}"},
    ]


def chat_with_a_quote(memory: Memory, handle: AgentHandle) -> tuple[Conversation, list[Any], str]:
    write(memory, "draft")
    chat = Conversation(memory, TASK, budget=2000)
    history = [
        {"role": "user", "content": "Is the report ready?", "id": "u1"},
        *tool_exchange(ops.read_node(handle, NODE)),
    ]
    turns = chat.record(history)
    return chat, history, turns[-1].l0_archive_iri


def test_a_tool_result_is_noted_and_marked_stale_by_the_write_event(
    memory: Memory, handle: AgentHandle
) -> None:
    chat, _, turn = chat_with_a_quote(memory, handle)
    [quote] = chat.stale_turns.quotes(turn)
    assert (quote.iri, quote.generation, quote.value) == (
        NODE,
        1,
        {"@id": NODE, "@type": "Artifact", "summary": SUMMARY, "status": "draft"},
    )
    assert not chat.stale_turns.is_stale(turn)
    write(memory, "final")
    assert chat.stale_turns.is_stale(turn)  # the bus event, before any view


def test_a_stale_turn_in_the_window_is_refreshed_with_the_change(
    memory: Memory, handle: AgentHandle
) -> None:
    chat, history, turn = chat_with_a_quote(memory, handle)
    assert STALE_HEADER not in chat.view(history).memory
    write(memory, "final")
    view = chat.view(history)
    assert view.parts[0].source == "stale"
    note = view.parts[0].text
    assert note.startswith(STALE_HEADER)
    assert f'{NODE} changed (generation 1 -> 2): {{"changed":{{"status":"final"}}}}' in note
    assert turn in view.parts[0].hides
    assert any(m.get("id") == "t1" for m in view.messages)  # the history is never rewritten


def test_a_stale_turn_out_of_the_window_is_left_out_of_l1_and_recall(
    memory: Memory, handle: AgentHandle
) -> None:
    chat, history, turn = chat_with_a_quote(memory, handle)
    filler = [
        {
            "role": "user" if i % 2 else "assistant",
            "content": f"report chat {i} " * 30,
            "id": f"f{i}",
        }
        for i in range(12)
    ]
    history += filler
    chat.record(filler)
    fresh = chat.view(history, query="the report status draft", budget=900, summary=True)
    assert turn in {iri for part in fresh.parts for iri in part.iris}  # quoted while current
    write(memory, "final")
    stale = chat.view(history, query="the report status draft", budget=900, summary=True)
    assert all(m.get("id") != "t1" for m in stale.messages)  # out of the window
    assert turn not in {iri for part in stale.parts for iri in part.iris}
    assert '"status": "draft"' not in stale.memory
    assert '"status":"draft"' not in stale.memory
    assert STALE_HEADER not in stale.memory  # nothing to refresh: the model does not see it


def test_a_quote_noted_after_the_write_is_stale_at_once(
    memory: Memory, handle: AgentHandle
) -> None:
    write(memory, "draft")
    result = ops.read_node(handle, NODE)
    write(memory, "final")  # before the turn is recorded: its event is gone
    chat = Conversation(memory, TASK)
    turn = chat.record(tool_exchange(result))[-1].l0_archive_iri
    assert chat.stale_turns.is_stale(turn)


def test_a_deleted_node_is_said_deleted(memory: Memory, handle: AgentHandle) -> None:
    chat, history, turn = chat_with_a_quote(memory, handle)
    memory.blackboard.delete([NODE])
    assert chat.stale_turns.is_stale(turn)
    assert f"{NODE} (quoted at generation 1) has been deleted" in chat.view(history).memory


def test_a_project_frame_result_carries_generations_and_goes_stale(
    memory: Memory, handle: AgentHandle
) -> None:
    write(memory, "draft")
    result = ops.project_frame(handle, memory.scheduler, budget=400)
    assert result["generations"][NODE] == 1
    chat = Conversation(memory, TASK)
    history = tool_exchange(result)
    turn = chat.record(history)[-1].l0_archive_iri
    write(memory, "final")
    assert chat.stale_turns.is_stale(turn)
    note = chat.view(history).parts[0].text
    assert f"{NODE} changed (generation 1 -> 2), now: " in note
    assert '"status":"final"' in note


@pytest.mark.parametrize("budget", [1, 10, 20, 30, 45, 80])
def test_refresh_notes_stay_within_the_budget(
    memory: Memory, handle: AgentHandle, budget: int
) -> None:
    chat, _, turn = chat_with_a_quote(memory, handle)
    write(memory, "final " * 20)
    part = chat.stale_turns.fill(SourceRequest(None, budget, frozenset({turn})))
    assert part.tokens == memory.count_tokens(part.text) <= budget
    assert part.hides == (turn,)


def test_messages_that_quote_nothing_are_not_noted() -> None:
    assert quoted_nodes({"role": "user", "content": json.dumps({"found": True})}) == []
    assert quoted_nodes({"role": "tool", "content": "{not json", "tool_call_id": "x"}) == []
    assert quoted_nodes({"role": "tool", "content": '{"found": false, "id": "urn:a"}'}) == []
    assert quoted_nodes({"role": "tool", "content": '{"generations": {"urn:a": 3}}'}) == [
        ("urn:a", 3, None)
    ]


def test_one_tracker_per_memory_and_bad_input(memory: Memory) -> None:
    assert memory.stale_turns is memory.stale_turns
    assert Conversation(memory, TASK).stale_turns is memory.stale_turns
    tracker = StaleTurns(lambda iris: {}, TokenCounter(), bus=EventBus())
    with pytest.raises(InvalidInputError, match="generation"):
        tracker.quote("urn:turn:1", NODE, -1)
    with pytest.raises(InvalidInputError, match="IRI"):
        tracker.quote("not a turn", NODE, 1)
    with pytest.raises(InvalidInputError, match="lookup"):
        StaleTurns("nope", TokenCounter())  # type: ignore[arg-type]
    with pytest.raises(InvalidInputError, match="SourceRequest"):
        tracker.fill("budget")  # type: ignore[arg-type]
    assert tracker.quotes() == []


def test_closing_the_memory_stops_its_tracker_for_good() -> None:
    """The tracker is the memory's: it stops listening when the memory closes, and stays so."""
    config = MemoryConfig(
        topics=TopicConfig(interval_s=0), blackboard=BlackboardConfig(flush_interval_s=0)
    )
    memory = Memory(config=config, embedder=HashEmbedder())
    memory.blackboard.coordination.tasks.register(TASK)  # type: ignore[union-attr]
    write(memory, "draft")
    tracker = memory.stale_turns
    tracker.quote("urn:turn:1", NODE, 1)
    memory.close()
    tracker.quote("urn:turn:2", NODE, 1)  # noted after the close: it listens no more
    memory.bus.publish(EventType.NODE_UPDATED, {"iri": NODE, "generation": 2})
    assert tracker.stale() == frozenset()
    assert memory.stale_turns is tracker
    with Memory(config=config, embedder=HashEmbedder()) as other:
        pass
    with pytest.raises(ClosedError, match="stale-turn tracker"):
        _ = other.stale_turns  # a closed memory builds none it could not close


def test_an_event_marks_only_older_quotes() -> None:
    bus = EventBus()
    nodes = {NODE: (3, {"@id": NODE})}
    tracker = StaleTurns(
        lambda iris: {i: nodes[i] for i in iris if i in nodes}, TokenCounter(), bus=bus
    )
    tracker.quote("urn:turn:old", NODE, 2)  # already behind: marked when noted
    tracker.quote("urn:turn:now", NODE, 3)
    assert tracker.stale() == {"urn:turn:old"}
    bus.publish(EventType.NODE_UPDATED, {"iri": NODE, "generation": 3})
    assert tracker.stale() == {"urn:turn:old"}
    bus.publish(EventType.NODE_UPDATED, {"iri": NODE, "generation": 4})
    assert tracker.stale() == {"urn:turn:old", "urn:turn:now"}
    tracker.close()
    tracker.close()


def test_a_memory_without_a_blackboard_records_quotes_and_marks_nothing(tmp_path: Path) -> None:
    result = {"found": True, "id": NODE, "generation": 1, "value": {"@id": NODE}}
    with Memory.open(tmp_path, embedder=HashEmbedder(64), engines=False) as memory:
        chat = Conversation(memory, TASK)
        history = tool_exchange(result)
        turn = chat.record(history)[-1].l0_archive_iri
        assert chat.stale_turns.quotes(turn)[0].generation == 1
        assert not chat.stale_turns.is_stale(turn)
        assert STALE_HEADER not in chat.view(history).memory


@settings(max_examples=80, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["write", "write-unannounced", "quote", "quote-old", "delete"]),
            st.integers(0, 2),
            st.integers(0, 3),
        ),
        max_size=25,
    ),
    st.integers(0, 60),
)
def test_after_fill_exactly_the_turns_behind_are_stale(
    steps: list[tuple[str, int, int]], budget: int
) -> None:
    bus = EventBus()
    nodes: dict[str, tuple[int, dict[str, Any]]] = {}
    counter = TokenCounter()
    tracker = StaleTurns(lambda iris: {i: nodes[i] for i in iris if i in nodes}, counter, bus=bus)
    generations = {f"urn:ex:n{i}": 0 for i in range(3)}
    for action, n, t in steps:
        iri, turn = f"urn:ex:n{n}", f"urn:ex:turn:{t}"
        if action.startswith("write"):
            generations[iri] += 1
            nodes[iri] = (generations[iri], {"@id": iri, "v": generations[iri]})
            if action == "write":
                bus.publish(EventType.NODE_UPDATED, {"iri": iri, "generation": generations[iri]})
        elif action == "delete" and iri in nodes:
            del nodes[iri]  # the tombstone keeps the generation
            bus.publish(EventType.NODE_DELETED, {"iri": iri, "generation": generations[iri]})
        elif action.startswith("quote") and iri in nodes:
            generation = nodes[iri][0] - (1 if action == "quote-old" else 0)
            tracker.quote(turn, iri, generation, {"@id": iri, "v": generation})
    everyone = frozenset(q.turn for q in tracker.quotes())
    part = tracker.fill(SourceRequest(None, budget, everyone))
    behind = {
        q.turn for q in tracker.quotes() if q.iri not in nodes or nodes[q.iri][0] != q.generation
    }
    assert tracker.stale() == behind
    assert part.hides == tuple(sorted(behind))
    assert part.tokens == counter.count(part.text) <= budget
