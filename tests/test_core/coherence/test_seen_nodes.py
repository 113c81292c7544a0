"""The token economy of shared nodes: whole once, then the change, a reference while unchanged."""

from __future__ import annotations

import io
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gliding_core import HashEmbedder, InvalidInputError, Memory
from gliding_core.cli import main
from gliding_core.coherence.seen import SeenNodes, SeenView, SharedNode, fit_lines
from gliding_core.config import BlackboardConfig, MemoryConfig, TopicConfig
from gliding_core.projection.budget import fit
from gliding_core.projection.scheduler import Scheduler
from gliding_core.store.scope import Scope
from gliding_core.tokens import TokenCounter
from gliding_core.view.conversation import Conversation
from gliding_core.view.frame_source import FrameSource
from gliding_core.view.sources import SourceRequest

COUNTER = TokenCounter()
TASK = "urn:ex:task:economy"


def node(i: int, generation: int = 1, **values: Any) -> SharedNode:
    value = {"@id": f"urn:ex:n{i}", "@type": "Artifact", "summary": f"artifact {i}", **values}
    return SharedNode(value["@id"], generation, value)


def at(generation: int, shared: SharedNode, **changes: Any) -> SharedNode:
    return SharedNode(shared.iri, generation, {**shared.value, **changes})


def lines(view: SeenView) -> dict[str, str]:
    """The line of each node that is not in the document, by IRI."""
    return {line.split(" ", 1)[0]: line for line in view.text.splitlines()[1:]}


# -- the ledger's decisions ----------------------------------------------------------------------


def test_whole_then_reference_then_change() -> None:
    seen = SeenNodes()
    a, b = node(1, body="alpha"), node(2, body="beta")
    first = seen.render([a, b], 500, COUNTER)
    assert first.kinds == {a.iri: "whole", b.iri: "whole"}
    assert [json.loads(line)["@id"] for line in first.text.splitlines()] == [a.iri, b.iri]
    second = seen.render([a, b], 500, COUNTER)
    assert second.kinds == {a.iri: "reference", b.iri: "reference"}
    assert "alpha" not in second.text
    assert "(generation 1, unchanged): Artifact: artifact 1" in (second.text)
    b2 = at(2, b, body="gamma", status="done")
    third = seen.render([a, b2], 500, COUNTER)
    assert third.kinds == {a.iri: "reference", b.iri: "change"}
    change = third.text.splitlines()[0]
    assert change.startswith(f"{b.iri} changed (generation 1 -> 2): ")
    assert json.loads(change.split(": ", 1)[1]) == {"changed": {"body": "gamma", "status": "done"}}
    assert third.tokens == COUNTER.count(third.text) < first.tokens


def test_a_new_node_is_whole_and_a_removed_property_is_said() -> None:
    seen = SeenNodes()
    a = node(1, body="alpha", note="n")
    seen.render([a], 500, COUNTER)
    gone = SharedNode(a.iri, 2, {k: v for k, v in a.value.items() if k != "note"})
    view = seen.render([gone, node(3)], 500, COUNTER)
    assert view.kinds == {a.iri: "change", "urn:ex:n3": "whole"}
    assert '{"changed":{},"removed":["note"]}' in view.text


def test_the_omit_policy_leaves_unchanged_nodes_out() -> None:
    seen = SeenNodes(unchanged="omit")
    a, b = node(1), node(2)
    seen.render([a, b], 500, COUNTER)
    view = seen.render([a, at(2, b, body="x")], 500, COUNTER)
    assert view.kinds == {a.iri: "omitted", b.iri: "change"}
    assert a.iri not in view.text
    assert view.iris == (b.iri,)


def test_a_new_generation_with_the_same_value_is_a_reference_at_it() -> None:
    seen = SeenNodes()
    a = node(1)
    seen.render([a], 500, COUNTER)
    view = seen.render([at(5, a)], 500, COUNTER)
    assert view.kinds == {a.iri: "reference"}
    assert "(generation 5, unchanged)" in view.text
    assert seen.generation(a.iri) == 5


def test_a_changed_value_is_never_a_reference_whatever_the_generation() -> None:
    seen = SeenNodes()
    a = node(1, body="old")
    seen.render([a], 500, COUNTER)
    view = seen.render([at(1, a, body="new")], 500, COUNTER)  # same label, new value
    assert view.kinds == {a.iri: "change"}
    assert "new" in view.text
    assert "unchanged" not in view.text


def test_a_change_dearer_than_the_node_is_shown_whole() -> None:
    seen = SeenNodes()
    a = SharedNode("urn:ex:tiny", 1, {"@id": "urn:ex:tiny", "v": 1})
    seen.render([a], 500, COUNTER)
    view = seen.render([SharedNode(a.iri, 2, {"@id": a.iri, "v": 2})], 500, COUNTER)
    assert view.kinds == {a.iri: "whole"}
    assert json.loads(view.text) == {"@id": a.iri, "v": 2}


def test_no_room_for_the_change_gives_a_notice_and_the_change_comes_next() -> None:
    seen = SeenNodes()
    a = node(1, body="x" * 10)
    seen.render([a], 500, COUNTER)
    a2 = at(2, a, body="a much longer body " * 20)
    notice = seen.render([a2], 25, COUNTER)
    assert notice.kinds == {a.iri: "notice"}
    assert notice.text == f"{a.iri} changed (generation 1 -> 2): read it again"
    nothing = seen.render([a2], 3, COUNTER)
    assert nothing.kinds == {a.iri: "dropped"}
    assert nothing.text == ""
    later = seen.render([a2], 500, COUNTER)
    assert later.kinds == {a.iri: "change"}
    assert "much longer" in later.text


def test_forget_shows_the_nodes_whole_again() -> None:
    seen = SeenNodes()
    a, b = node(1), node(2)
    seen.render([a, b], 500, COUNTER)
    seen.forget([a.iri])
    assert seen.render([a, b], 500, COUNTER).kinds == {a.iri: "whole", b.iri: "reference"}
    seen.forget()
    assert len(seen) == 0
    assert a.iri not in seen


def test_bad_input_is_refused() -> None:
    with pytest.raises(InvalidInputError, match="'everything'"):
        SeenNodes(unchanged="everything")  # type: ignore[arg-type]
    seen = SeenNodes()
    with pytest.raises(InvalidInputError, match="budget"):
        seen.render([node(1)], -1, COUNTER)
    with pytest.raises(InvalidInputError, match="SharedNode"):
        seen.render([{"@id": "urn:ex:a"}], 10, COUNTER)  # type: ignore[list-item]
    with pytest.raises(InvalidInputError, match="IRI"):
        seen.render([SharedNode("not an iri", 1, {})], 10, COUNTER)
    with pytest.raises(InvalidInputError, match="generation"):
        seen.render([SharedNode("urn:ex:a", True, {})], 10, COUNTER)
    with pytest.raises(InvalidInputError, match="departure"):
        seen.render([], 10, COUNTER, gone={"urn:ex:a": "3"})  # type: ignore[dict-item]
    assert len(seen) == 0


# -- what the model sees, replayed: never a stale value as current, always within budget ----------


def model_reads(view: SeenView, knows: dict[str, dict[str, Any]]) -> None:
    """Update what a model knows from the text alone, as a reader would."""
    for line in view.text.splitlines():
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


values = st.text(alphabet="abcdefgh xyz", min_size=0, max_size=40)
writes = st.lists(
    st.tuples(st.integers(0, 3), st.sampled_from(["summary", "body", "status"]), values),
    max_size=4,
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(st.tuples(writes, st.integers(0, 160)), min_size=1, max_size=6),
    st.sampled_from(["lines", "projection"]),
    st.sampled_from(["reference", "omit"]),
)
def test_replayed_calls_never_show_a_stale_value_as_current(
    calls: list[tuple[list[tuple[int, str, str]], int]], fitting: str, unchanged: str
) -> None:
    current = {i: node(i).value for i in range(4)}
    generations = dict.fromkeys(range(4), 1)
    seen = SeenNodes(unchanged=unchanged)  # type: ignore[arg-type]
    knows: dict[str, dict[str, Any]] = {}
    for changes, budget in calls:
        for i, key, value in changes:
            current[i] = {**current[i], key: value}
            generations[i] += 1
        shared = [SharedNode(current[i]["@id"], generations[i], current[i]) for i in range(4)]
        view = seen.render(
            shared, budget, COUNTER, fit=fit if fitting == "projection" else fit_lines
        )
        assert view.tokens == COUNTER.count(view.text) <= budget
        model_reads(view, knows)
        for each in shared:
            if view.kinds[each.iri] in ("reference", "omitted"):
                assert knows[each.iri] == each.value  # what it is told is current, is
            if view.kinds[each.iri] == "change":
                assert knows[each.iri] == each.value


# -- the frame source and the model view ---------------------------------------------------------


@pytest.fixture
def memory() -> Iterator[Memory]:
    config = MemoryConfig(
        topics=TopicConfig(interval_s=0), blackboard=BlackboardConfig(flush_interval_s=0)
    )
    with Memory(config=config, embedder=HashEmbedder()) as value:
        yield value


@pytest.fixture
def scheduler(memory: Memory) -> Iterator[Scheduler]:
    value = Scheduler.for_memory(memory)
    yield value
    value.projector.close()


def write(memory: Memory, i: int, summary: str, status: str = "open") -> None:
    iri = f"{TASK}/a{i}"
    memory.blackboard.write(
        [{"@id": iri, "@type": "Artifact", "summary": summary, "status": status}],
        task=TASK,
        area="execution",
    )


def test_a_frame_source_with_a_ledger_shows_changes_written_by_another_agent(
    memory: Memory, scheduler: Scheduler
) -> None:
    for i in range(3):
        write(memory, i, f"artifact number {i} with a long enough summary to be worth it")
    source = FrameSource(scheduler, TASK, "sa", seen=SeenNodes())
    first = source.fill(SourceRequest(None, 600))
    assert first.text.startswith('{"@context"')
    assert first.tokens == memory.count_tokens(first.text)
    assert set(first.iris) == {f"{TASK}/a{i}" for i in range(3)}
    second = source.fill(SourceRequest(None, 600))
    assert second.text.count("unchanged") == 3
    assert second.tokens < first.tokens
    write(memory, 1, "artifact number 1 with a long enough summary to be worth it", "done")
    third = source.fill(SourceRequest(None, 600))
    assert f"{TASK}/a1 changed (generation 1 -> 2): " in third.text
    assert '"status":"done"' in third.text
    assert '"status":"open"' not in third.text
    assert f"{TASK}/a1 (generation" not in third.text  # never a reference for it
    assert third.text.count("unchanged") == 2
    write(memory, 3, "a new artifact")
    fourth = source.fill(SourceRequest(None, 600))
    assert '"summary":"a new artifact"' in fourth.text
    assert fourth.text.count("unchanged") == 3


def test_a_frame_source_without_a_ledger_shows_the_view_whole_every_time(
    memory: Memory, scheduler: Scheduler
) -> None:
    write(memory, 0, "the only artifact")
    source = FrameSource(scheduler, TASK, "sa")
    assert source.fill(SourceRequest(None, 400)) == source.fill(SourceRequest(None, 400))


@pytest.mark.parametrize("budget", [0, 5, 20, 40, 80, 160])
def test_a_frame_source_with_a_ledger_stays_within_the_budget(
    memory: Memory, scheduler: Scheduler, budget: int
) -> None:
    for i in range(3):
        write(memory, i, f"artifact {i} " * 6)
    source = FrameSource(scheduler, TASK, "sa", seen=SeenNodes())
    for round_ in range(3):
        part = source.fill(SourceRequest(None, budget))
        assert part.tokens == memory.count_tokens(part.text) <= budget
        write(memory, round_, f"artifact {round_} moved " * 6)


def test_a_conversation_round_shows_the_frame_whole_then_the_change(
    memory: Memory, scheduler: Scheduler
) -> None:
    for i in range(3):
        write(memory, i, f"artifact {i}: the parser for format {i} and its tests")
    source = FrameSource(scheduler, TASK, "sa", seen=SeenNodes())
    chat = Conversation(memory, TASK, extra_sources=[source], budget=1200)
    history = [{"role": "user", "content": "what is left to do?", "id": "u1"}]
    chat.record(history)
    first = chat.view(history)
    assert [p.source for p in first.parts][-1] == "frame"
    write(memory, 2, "artifact 2: the parser for format 2 and its tests", "done")
    second = chat.view(history)
    frame = second.parts[-1].text
    assert f"{TASK}/a2 changed (generation 1 -> 2)" in frame
    assert '"status":"done"' in frame
    assert second.tokens < first.tokens <= 1200


def test_another_scope_gets_a_fresh_ledger(memory: Memory, scheduler: Scheduler) -> None:
    write(memory, 0, "artifact 0: the parser for format 0 and its tests")
    source = FrameSource(scheduler, TASK, "sa", seen=SeenNodes(unchanged="omit"))
    assert FrameSource(scheduler, TASK, "sa").fresh().seen is None
    chat = Conversation(memory, TASK, extra_sources=[source], budget=1200)
    history = [{"role": "user", "content": "what is left to do?", "id": "u1"}]
    chat.view(history)
    other = chat.for_scope(Scope.user("bob"))
    [frame] = other.extra_sources
    assert isinstance(frame, FrameSource)
    assert frame.seen is not None
    assert frame.seen is not source.seen
    assert frame.seen.unchanged == "omit"
    assert len(frame.seen) == 0
    assert "parser for format 0" in other.view(history).memory  # whole for bob's model


def test_bench_economy_json_shape_and_sense(tmp_path: Path) -> None:
    out = io.StringIO()
    target = tmp_path / "economy.json"
    argv = ["bench", "economy", "--steps", "4", "--calls", "4", "--seeds", "1"]
    assert main([*argv, "--json", str(target)], out=out) == 0
    figures = json.loads(target.read_text())
    assert set(figures["rounds"]) == {"0.05", "0.10", "0.25", "0.50"}
    for round_ in figures["rounds"].values():
        assert round_["stale_references"] == 0
        assert round_["omit"] <= round_["reference"] < round_["whole"]
        assert round_["request"] < round_["whole"]
    assert "Shared-node tokens over 4 calls" in out.getvalue()


def test_the_l2_fallback_has_the_economy_too(memory: Memory, scheduler: Scheduler) -> None:
    note = {"@id": f"{TASK}/note", "@type": "Note", "text": "only a note, " * 8}
    memory.blackboard.write([note], task=TASK, area="shared")
    assert scheduler.nodes(TASK, "check")[0] == "l2"  # ca_review: no artifact, no criteria
    source = FrameSource(scheduler, TASK, "check", seen=SeenNodes())
    assert "only a note" in source.fill(SourceRequest(None, 400)).text
    assert "(generation 1, unchanged)" in source.fill(SourceRequest(None, 400)).text
    memory.blackboard.write([{**note, "status": "read"}], task=TASK, area="shared")
    moved = source.fill(SourceRequest(None, 400)).text
    assert moved == f'{TASK}/note changed (generation 1 -> 2): {{"changed":{{"status":"read"}}}}'


def test_a_node_that_left_is_said_deleted_or_changed_once() -> None:
    seen = SeenNodes()
    a, b, c = node(1), node(2), node(3)
    seen.render([a, b, c], 500, COUNTER)
    view = seen.render([], 500, COUNTER, gone={a.iri: None, b.iri: 4, c.iri: 1})
    assert view.kinds == {a.iri: "gone", b.iri: "gone"}  # c left unchanged: its copy holds
    assert view.text.splitlines() == [
        f"{a.iri} (shown at generation 1) has been deleted",
        f"{b.iri} changed (generation 1 -> 4): no longer in this view",
    ]
    assert seen.iris() == [c.iri]
    assert seen.render([], 500, COUNTER, gone={a.iri: None}).text == ""


def test_a_frame_source_says_when_a_node_it_showed_was_deleted_or_left(
    memory: Memory, scheduler: Scheduler
) -> None:
    for i in range(3):
        write(memory, i, f"artifact {i}")
    source = FrameSource(scheduler, TASK, "sa", seen=SeenNodes(unchanged="omit"))
    source.fill(SourceRequest(None, 600))
    memory.blackboard.delete([f"{TASK}/a0"])
    memory.blackboard.write(  # no summary: summary_only no longer selects it
        [{"@id": f"{TASK}/a1", "@type": "Artifact", "status": "open"}], task=TASK, area="execution"
    )
    part = source.fill(SourceRequest(None, 600))
    assert part.text.splitlines() == [
        f"{TASK}/a0 (shown at generation 1) has been deleted",
        f"{TASK}/a1 changed (generation 1 -> 2): no longer in this view",
    ]
    assert source.fill(SourceRequest(None, 600)).text == ""


def test_each_agent_has_its_own_ledger_and_sees_the_other_agents_write(
    memory: Memory, scheduler: Scheduler
) -> None:
    memory.blackboard.coordination.tasks.register(TASK)  # type: ignore[union-attr]
    writer = memory.agent("writer", role="do", task=TASK)
    long = "the parser for the configuration format, with its error messages and tests"
    writer.write([{"@id": f"{TASK}/a0", "@type": "Artifact", "summary": long}], area="execution")
    alice = FrameSource(scheduler, TASK, "sa", seen=SeenNodes())
    bob = FrameSource(scheduler, TASK, "sa", seen=SeenNodes())
    assert long in alice.fill(SourceRequest(None, 600)).text
    assert "unchanged" in alice.fill(SourceRequest(None, 600)).text
    assert long in bob.fill(SourceRequest(None, 600)).text  # bob never saw it: whole
    node = {"@id": f"{TASK}/a0", "@type": "Artifact", "summary": long, "status": "done"}
    writer.write([node], area="execution")
    for source in (alice, bob):
        text = source.fill(SourceRequest(None, 600)).text
        assert text == f'{TASK}/a0 changed (generation 1 -> 2): {{"changed":{{"status":"done"}}}}'
