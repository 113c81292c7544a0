"""L3 budgeted projection: exact counts, the degradation steps, never zero when one would fit."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gliding_core import InvalidInputError
from gliding_core.blackboard.board import Blackboard, EmbeddedGraph
from gliding_core.bus import EventBus
from gliding_core.projection import STEPS, Projector
from gliding_core.projection.budget import fit, limit_depth, references, render, summarise
from gliding_core.tokens import TokenCounter

TASK = "urn:ex:task:budget"
COUNTER = TokenCounter()


def deep_node(i: int, *, importance: float = 0.5, words: int = 30) -> dict[str, Any]:
    return {
        "@id": f"urn:ex:n{i}",
        "@type": "PlanStep",
        "summary": f"step {i}",
        "importance": importance,
        "instructions": " ".join(["carefully"] * words),
        "inputData": {
            "@id": f"urn:ex:in{i}",
            "note": "level one " * 10,
            "detail": {"@id": f"urn:ex:d{i}", "more": "level two " * 10, "deep": {"x": "three"}},
        },
    }


def test_a_projection_that_fits_is_whole() -> None:
    nodes = [deep_node(1)]
    text, tokens, shown, step = fit(nodes, 10_000, COUNTER)
    assert step == "full"
    assert shown == tuple(nodes)
    assert tokens == COUNTER.count(text) == COUNTER.count(render(nodes))


def test_the_steps_come_in_order() -> None:
    nodes = [deep_node(i) for i in range(3)]
    sizes = {
        "full": COUNTER.count(render(nodes)),
        "depth-2": COUNTER.count(render([limit_depth(n, 2) for n in nodes])),
        "depth-1": COUNTER.count(render([limit_depth(n, 1) for n in nodes])),
        "links": COUNTER.count(render([limit_depth(n, 0) for n in nodes])),
        "summaries": COUNTER.count(render([summarise(n) for n in nodes])),
    }
    assert list(sizes.values()) == sorted(sizes.values(), reverse=True)
    for step, size in sizes.items():
        _, tokens, shown, taken = fit(nodes, size, COUNTER)
        assert taken == step
        assert tokens == size
        assert len(shown) == 3
    links = fit(nodes, sizes["links"], COUNTER)[2]
    assert links[0]["inputData"] == {"@id": "urn:ex:in0"}
    depth1 = fit(nodes, sizes["depth-1"], COUNTER)[2]
    assert depth1[0]["inputData"]["detail"] == {"@id": "urn:ex:d0"}


def test_fewer_nodes_keeps_the_most_important_whole() -> None:
    nodes = [deep_node(i, importance=i / 10) for i in range(6)]
    two = COUNTER.count(render([summarise(nodes[4]), summarise(nodes[5])]))
    _, tokens, shown, step = fit(nodes, two, COUNTER)
    assert step == "fewer-nodes"
    assert [n["@id"] for n in shown] == ["urn:ex:n4", "urn:ex:n5"]
    assert tokens <= two


def test_references_when_no_summary_fits() -> None:
    nodes = [deep_node(i, importance=i / 10) for i in range(3)]
    nodes = [{**n, "summary": "long " * 40} for n in nodes]
    one = COUNTER.count(render(references(nodes[2:])))
    _, tokens, shown, step = fit(nodes, one, COUNTER)
    assert step == "references"
    assert shown == ({"@id": "urn:ex:n2", "@type": "PlanStep"},)
    assert tokens <= one


def test_never_zero_when_one_would_fit() -> None:
    nodes = [deep_node(i) for i in range(20)]
    one = min(COUNTER.count(render(references([n]))) for n in nodes)
    text, tokens, shown, step = fit(nodes, one, COUNTER)
    assert len(shown) >= 1
    assert tokens <= one
    text, tokens, shown, step = fit(nodes, one - 1, COUNTER)
    assert (text, tokens, shown, step) == ("", 0, (), "empty")


def test_budget_is_checked() -> None:
    with pytest.raises(InvalidInputError, match="budget"):
        fit([], -1, COUNTER)
    with pytest.raises(InvalidInputError, match="budget"):
        fit([], True, COUNTER)


_text = st.text(alphabet=st.characters(codec="utf-8", exclude_categories=["Cs"]), max_size=40)
_leaf = st.one_of(_text, st.integers(-(10**6), 10**6), st.booleans(), st.floats(0, 1))
_json = st.recursive(
    _leaf,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3),
        st.dictionaries(st.sampled_from(["a", "b", "note", "summary"]), inner, max_size=3),
        st.builds(
            lambda i, d: {"@id": f"urn:ex:o{i}", **d},
            st.integers(0, 99),
            st.dictionaries(st.sampled_from(["x", "y", "summary"]), inner, max_size=2),
        ),
    ),
    max_leaves=12,
)
_node = st.builds(
    lambda i, props, imp: {"@id": f"urn:ex:n{i}", "@type": "Thing", "importance": imp, **props},
    st.integers(0, 10_000),
    st.dictionaries(st.sampled_from(["summary", "text", "detail", "links", "name"]), _json),
    st.floats(0, 1),
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(_node, max_size=8), st.integers(0, 400))
def test_the_result_is_within_budget_for_any_graph(
    nodes: list[dict[str, Any]], budget: int
) -> None:
    text, tokens, shown, step = fit(nodes, budget, COUNTER)
    assert step in STEPS
    assert tokens == COUNTER.count(text) <= budget
    assert (text == "") == (step == "empty")
    if any(COUNTER.count(render(references([n]))) <= budget for n in nodes):
        assert shown, "a node would have fitted"
    ids = {n["@id"] for n in nodes}
    assert all(n["@id"] in ids for n in shown)


# -- through the projector, over a real blackboard -------------------------------------------


@pytest.fixture
def projector() -> Iterator[Projector]:
    with Blackboard(EmbeddedGraph(), bus=EventBus()) as board:
        board.write(
            [
                {
                    "@id": f"urn:ex:p{i}",
                    "@type": "PlanStep",
                    "plan": {"@id": "urn:ex:plan"},
                    "summary": f"step {i} " + "word " * 20,
                    "importance": i / 10,
                }
                for i in range(8)
            ],
            task=TASK,
            area="plan",
        )
        value = Projector(board, COUNTER)
        yield value
        value.close()


@pytest.mark.parametrize("budget", [0, 20, 45, 80, 150, 300, 5_000])
def test_project_stays_within_its_budget(projector: Projector, budget: int) -> None:
    projection = projector.project(TASK, "da_input", budget=budget)
    assert projection.tokens == COUNTER.count(projection.text) <= budget
    assert projection.total == 8
    assert projection.budget == budget
    again = projector.project(TASK, "da_input", budget=budget)
    assert again.cached
    assert again.text == projection.text


def test_the_default_budget_is_the_frames(projector: Projector) -> None:
    projection = projector.project(TASK, "reference_only")
    assert projection.budget == 128
    assert projection.tokens <= 128
    assert projection.iris  # the reference's 3.9 KB context left nothing under 500 bytes


def test_remembered_counts_are_the_counter_s() -> None:
    from gliding_core.projection.budget import _Counts

    memo = _Counts(size=3)
    texts = ["a b c", '{"@id":"urn:x"}', "héllo wörld", "a b c", "x" * 20_000, "", "y z"]
    for _ in range(2):  # the second time from the memo, past evictions
        assert [memo.count(COUNTER, t) for t in texts] == [COUNTER.count(t) for t in texts]
