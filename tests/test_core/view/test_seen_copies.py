"""The token economy from the request: a frame shows nodes by the copies its request holds.

Real blackboard (Oxigraph in memory), projector, scheduler, conversation and tiktoken; the
"model requests" are the message records an adapter would send.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gliding_core import HashEmbedder, InvalidInputError, Memory
from gliding_core.coherence.seen import SeenNodes, SharedNode, within_view
from gliding_core.config import BlackboardConfig, MemoryConfig, TopicConfig
from gliding_core.projection.scheduler import Scheduler
from gliding_core.tokens import TokenCounter
from gliding_core.tools.board_tools import project_frame, read_node
from gliding_core.view.conversation import Conversation
from gliding_core.view.frame_source import FrameSource
from gliding_core.view.sources import SourceRequest
from gliding_core.view.stale_turns import node_copies

COUNTER = TokenCounter()
TASK = "urn:ex:task:copies"


def iri(i: int) -> str:
    return f"{TASK}/a{i}"


def tool_result(result: Any, call: str = "c1") -> list[dict[str, Any]]:
    """The records of one tool call and its result, as an adapter translates them."""
    return [
        {"role": "assistant", "content": "", "tool_calls": [{"id": call, "name": "t", "args": {}}]},
        {"role": "tool", "content": json.dumps(result), "tool_call_id": call},
    ]


@pytest.fixture
def memory() -> Iterator[Memory]:
    config = MemoryConfig(
        topics=TopicConfig(interval_s=0), blackboard=BlackboardConfig(flush_interval_s=0)
    )
    with Memory(config=config, embedder=HashEmbedder()) as value:
        yield value


@pytest.fixture
def scheduler(memory: Memory) -> Scheduler:
    return memory.scheduler


def write(memory: Memory, i: int, summary: str, status: str = "open", **more: Any) -> None:
    node = {"@id": iri(i), "@type": "Artifact", "summary": summary, "status": status, **more}
    memory.blackboard.write([node], task=TASK, area="execution", source="another-agent")


def copy_of(memory: Memory, i: int) -> dict[str, Any]:
    """What ``read_node`` answers for artifact ``i`` now (as the system reads it)."""
    node = memory.blackboard.read(iri(i))
    assert node is not None
    return {"found": True, "id": iri(i), "generation": node.generation, "value": node.node}


def fill(source: FrameSource, records: list[dict[str, Any]], budget: int = 800) -> str:
    part = source.fill(SourceRequest(None, budget, copies=node_copies(records)))
    assert part.tokens == COUNTER.count(part.text) <= budget
    return part.text


# -- the extractor ---------------------------------------------------------------------------------


def test_node_copies_finds_what_the_blackboard_tools_answer(memory: Memory) -> None:
    write(memory, 1, "first")
    write(memory, 2, "second")
    memory.blackboard.coordination.tasks.register(TASK)  # type: ignore[union-attr]
    doer = memory.agent("doer", role="do", task=TASK)
    framed = project_frame(doer, memory.scheduler, budget=800)
    records = [
        {"role": "user", "content": json.dumps(copy_of(memory, 2))},  # not a tool result
        *tool_result(read_node(doer, iri(1)), "c1"),
        *tool_result({"error": "nothing"}, "c2"),
        {"role": "tool", "content": "Error: not permitted", "tool_call_id": "c3"},
        *tool_result(framed, "c4"),
    ]
    copies = {c.iri: c for c in node_copies(records)}
    assert set(copies) == {iri(1), iri(2)}
    assert copies[iri(1)].generation == 1
    assert copies[iri(1)].value["summary"] == "first"
    assert "@context" not in copies[iri(1)].value
    assert copies[iri(2)].value["summary"] == "second"  # from the projected view
    write(memory, 1, "first, again")
    newer = [*records, *tool_result(read_node(doer, iri(1)), "c5"), *tool_result(framed, "c6")]
    again = {c.iri: c for c in node_copies(newer)}
    assert (again[iri(1)].generation, again[iri(1)].value["summary"]) == (2, "first, again")
    with pytest.raises(InvalidInputError):
        node_copies("not messages")  # type: ignore[arg-type]


def test_a_ledger_of_copies_reads_the_generations_too() -> None:
    value = {"@id": iri(1), "@type": "Artifact", "summary": "s", "status": "open"}
    current = SharedNode(iri(1), 2, value)
    at_two = SeenNodes.of([SharedNode(iri(1), 1, {**value, "status": "x"}), current])
    assert at_two.render([current], 500, COUNTER).kinds == {iri(1): "reference"}
    behind = SeenNodes.of([SharedNode(iri(1), 1, value)])  # same value, older generation
    view = behind.render([current], 500, COUNTER)
    assert view.kinds == {iri(1): "change"}
    assert view.text == f'{iri(1)} changed (generation 1 -> 2): {{"changed":{{}}}}'
    partial = SeenNodes.of([SharedNode(iri(1), 2, {"@id": iri(1), "summary": "s"})])
    assert partial.render([current], 500, COUNTER).kinds == {iri(1): "whole"}
    assert SeenNodes.of([]).render([current], 500, COUNTER).kinds == {iri(1): "whole"}
    with pytest.raises(InvalidInputError):
        SeenNodes.of([value])  # type: ignore[list-item]
    with pytest.raises(InvalidInputError):
        SeenNodes.of([SharedNode(iri(1), -1, value)])
    with pytest.raises(InvalidInputError):
        SeenNodes.of("urn:x")  # type: ignore[arg-type]


def test_within_view_keeps_what_the_view_shows_and_what_the_node_lost() -> None:
    copy = SharedNode(iri(1), 1, {"@id": iri(1), "summary": "s", "plan": "p", "gone": 1})
    view = {"@id": iri(1), "summary": "t"}
    assert within_view(copy, view).value == {"@id": iri(1), "summary": "s"}
    now = {"@id": iri(1), "summary": "t", "plan": "p"}
    assert within_view(copy, view, now=now).value == {"@id": iri(1), "summary": "s", "gone": 1}
    with pytest.raises(InvalidInputError):
        within_view(copy, "not a node")  # type: ignore[arg-type]


def test_a_request_refuses_copies_that_are_not_shared_nodes() -> None:
    with pytest.raises(InvalidInputError):
        SourceRequest(None, 10, copies=({"@id": iri(1)},))  # type: ignore[arg-type]
    with pytest.raises(InvalidInputError):
        SourceRequest(None, 10, copies="urn:x")  # type: ignore[arg-type]


# -- the frame source ------------------------------------------------------------------------------


def test_a_frame_shows_a_held_node_as_a_reference_then_its_change_else_whole(
    memory: Memory, scheduler: Scheduler
) -> None:
    for i in (1, 2):
        write(memory, i, f"artifact {i}: the parser for format {i} and all of its tests")
    source = FrameSource(scheduler, TASK, "sa", seen="request")
    assert source.fresh() is source  # nothing kept from call to call, so nothing to renew
    held = tool_result(copy_of(memory, 1))
    first = fill(source, held)
    assert f"{iri(1)} (generation 1, unchanged): Artifact: artifact 1" in first
    assert "artifact 2: the parser for format 2 and all of its tests" in first  # never held
    assert f'"@id":"{iri(1)}"' not in first  # not in the document of whole nodes
    write(memory, 1, "artifact 1: the parser for format 1 and all of its tests", "done")
    second = fill(source, held)
    assert f'{iri(1)} changed (generation 1 -> 2): {{"changed":{{"status":"done"}}}}' in second
    assert f"{iri(1)} (generation" not in second  # never a reference to the old copy
    third = fill(source, [])  # the tool result left the request: whole again
    assert f'"@id":"{iri(1)}"' in third
    assert '"status":"done"' in third
    assert "changed" not in third
    assert fill(source, []) == third  # every call without a copy is the same whole view


def test_a_frame_never_vouches_for_a_copy_that_differs_from_the_node(
    memory: Memory, scheduler: Scheduler
) -> None:
    write(memory, 1, "the real summary")
    source = FrameSource(scheduler, TASK, "sa", seen="request")
    wrong = copy_of(memory, 1)
    wrong["value"] = {**wrong["value"], "summary": "a made-up summary"}
    text = fill(source, tool_result(wrong))
    assert "the real summary" in text
    assert "unchanged" not in text
    assert "made-up" not in text


def test_a_frame_says_nothing_of_held_nodes_outside_it(memory: Memory) -> None:
    write(memory, 1, "an artifact the checker reviews")
    memory.blackboard.write(
        [{"@id": f"{TASK}/secret", "@type": "Note", "summary": "the plan's secret"}],
        task=TASK,
        area="plan",
    )
    checker = memory.agent("checker", role="check", task=TASK)
    source = FrameSource.for_agent(memory.scheduler, checker, seen="request")
    secret = memory.blackboard.read(f"{TASK}/secret")
    assert secret is not None
    planted = {"found": True, "id": secret.iri, "generation": 1, "value": {"@id": secret.iri}}
    text = fill(source, [*tool_result(copy_of(memory, 1)), *tool_result(planted, "c2")])
    assert f"{iri(1)} (generation 1, unchanged)" in text
    assert "secret" not in text  # the plan area is not the checker's to read


@pytest.mark.parametrize("budget", [0, 8, 20, 40, 80])
def test_the_frame_with_copies_stays_within_its_budget(
    memory: Memory, scheduler: Scheduler, budget: int
) -> None:
    for i in range(3):
        write(memory, i, f"artifact {i} " * 8)
    source = FrameSource(scheduler, TASK, "sa", seen="request")
    held = [*tool_result(copy_of(memory, 0)), *tool_result(copy_of(memory, 1), "c2")]
    for round_ in range(3):
        fill(source, held, budget)
        write(memory, round_, f"artifact {round_} moved " * 8)


def test_bad_seen_is_refused(scheduler: Scheduler) -> None:
    with pytest.raises(InvalidInputError):
        FrameSource(scheduler, TASK, "sa", seen="requests")  # type: ignore[arg-type]


# -- the conversation: what is in the window is what is held -----------------------------------


def test_a_copy_trimmed_out_of_the_window_is_no_longer_held(
    memory: Memory, scheduler: Scheduler
) -> None:
    write(memory, 1, "artifact 1: the parser for format 1 and all of its tests")
    source = FrameSource(scheduler, TASK, "sa", seen="request")
    chat = Conversation(memory, TASK, extra_sources=[source], budget=2_000, recall_k=0)
    records = [
        {"role": "user", "content": "review the parser", "id": "u1"},
        *({**r, "id": f"m{n}"} for n, r in enumerate(tool_result(copy_of(memory, 1)))),
    ]
    chat.record(records)
    held = chat.view(records)
    assert f"{iri(1)} (generation 1, unchanged)" in held.parts[-1].text
    filler = [
        {"role": "user" if n % 2 else "assistant", "content": f"note {n}: " + "words " * 90}
        for n in range(12)
    ]
    longer = [*records, *({**m, "id": f"f{n}"} for n, m in enumerate(filler))]
    chat.record(longer)
    trimmed = chat.view(longer, budget=900)
    assert trimmed.dropped > 0
    assert not any(m.get("role") == "tool" for m in trimmed.messages)
    frame = next(p for p in trimmed.parts if p.source == "frame")
    assert "artifact 1: the parser for format 1 and all of its tests" in frame.text
    assert "unchanged" not in frame.text


# -- replayed: whatever the copies, what the model reads of the view is the view ------------------

words = st.text(alphabet="abc xyz", max_size=12)


def reads(text: str, knows: dict[str, dict[str, Any]]) -> None:
    """Update what a model knows from the frame's text, as a reader would."""
    for line in text.splitlines():
        if line.startswith("{"):
            document = json.loads(line)
            for value in document.get("@graph", [document]):
                knows[value["@id"]] = value
            continue
        iri, rest = line.split(" ", 1)
        if rest.startswith("changed (") and rest.endswith("}"):
            body = json.loads(rest.split("): ", 1)[1])
            known = {**knows[iri], **body["changed"]}
            knows[iri] = {k: v for k, v in known.items() if k not in body.get("removed", [])}


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(
        st.tuples(st.integers(0, 2), st.sampled_from(["summary", "status", "hidden"]), words),
        max_size=8,
    ),
    st.lists(st.tuples(st.integers(0, 9), st.booleans()), min_size=3, max_size=3),
)
def test_what_a_model_reads_of_a_held_view_is_the_view(
    writes: list[tuple[int, str, str]], picks: list[tuple[int, bool]]
) -> None:
    history = {
        i: [{"@id": iri(i), "summary": f"s{i}", "status": "open", "hidden": "h"}] for i in range(3)
    }
    for i, key, value in writes:
        history[i].append({**history[i][-1], key: value})
    copies, knows = [], {}
    for i, (pick, partial) in enumerate(picks):
        if pick >= len(history[i]):
            continue  # no copy of this node in the request
        value = dict(history[i][pick])
        if partial:
            value.pop("summary")
        copies.append(SharedNode(iri(i), pick + 1, value))
        knows[iri(i)] = value
    now = {i: history[i][-1] for i in range(3)}
    views = {i: {k: v for k, v in now[i].items() if k != "hidden"} for i in range(3)}
    held = [within_view(c, views[int(c.iri[-1])], now=now[int(c.iri[-1])]) for c in copies]
    shared = [SharedNode(iri(i), len(history[i]), views[i]) for i in range(3)]
    view = SeenNodes.of(held).render(shared, 2_000, COUNTER)
    reads(view.text, knows)
    by_iri = {c.iri: c for c in copies}
    for node in shared:
        kind = view.kinds[node.iri]
        assert {k: v for k, v in knows[node.iri].items() if k != "hidden"} == node.value
        if kind == "reference":
            assert by_iri[node.iri].generation == node.generation
        if node.iri not in by_iri:
            assert kind == "whole"
