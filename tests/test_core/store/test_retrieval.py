"""gliding_core.store.retrieval: dict filters select in SQL exactly what their meaning selects."""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gliding_core import DEFAULT_K, InvalidInputError, L0Store, filters_from_dict, knowledge_filters
from gliding_core.store.filters import SearchFilters
from gliding_core.store.scope import INPUT_TYPE

TAGS = ["a", "b", "c"]
TYPES = ["Note", "Fact"]
GRAPHS = ["urn:g:1", "urn:g:2"]
ENTRIES = [
    {"tags": tags, "type": kind, "graph": graph, "importance": importance}
    for tags in ([], ["a"], ["b"], ["a", "b"], ["c"])
    for kind in TYPES
    for graph in GRAPHS
    for importance in (0.25, 0.5, 0.75)
]


@pytest.fixture(scope="module")
def store() -> Iterator[L0Store]:
    with L0Store(None) as value:
        for i, entry in enumerate(ENTRIES):
            value.put(
                {"@id": f"urn:e:{i}", "@type": entry["type"], "text": "x"},
                tags=entry["tags"],
                named_graph=entry["graph"],
                importance=entry["importance"],
            )
        yield value


def holds(entry: dict[str, Any], spec: dict[str, Any]) -> bool:
    """The meaning of a dict filter, evaluated in Python (the oracle)."""
    return all(_clause(entry, key, value) for key, value in spec.items())


def _clause(entry: dict[str, Any], key: str, value: Any) -> bool:
    if key == "$and":
        return all(holds(entry, part) for part in value)
    if key == "$or":
        return any(holds(entry, part) for part in value)
    conditions = value if isinstance(value, dict) else {"$eq": value}
    return all(_test(entry, key, op, arg) for op, arg in conditions.items())


def _test(entry: dict[str, Any], key: str, op: str, arg: Any) -> bool:
    if key == "importance":
        x = entry["importance"]
        return {"$eq": x == arg, "$gt": x > arg, "$gte": x >= arg, "$lt": x < arg}.get(op, x <= arg)
    have = {"tags": entry["tags"], "types": [entry["type"]], "named_graph": [entry["graph"]]}[key]
    many = arg if isinstance(arg, list) else [arg]
    if op in ("$eq", "$contains", "$all"):
        return all(v in have for v in many)
    if op == "$in":
        return any(v in have for v in many)
    return not any(v in have for v in many)  # $ne, $nin


leaf = st.one_of(
    st.builds(lambda t: {"tags": t}, st.sampled_from(TAGS)),
    st.builds(
        lambda op, t: {"tags": {op: t}},
        st.sampled_from(["$eq", "$contains", "$ne"]),
        st.sampled_from(TAGS),
    ),
    st.builds(
        lambda op, ts: {"tags": {op: ts}},
        st.sampled_from(["$in", "$all", "$nin"]),
        st.lists(st.sampled_from(TAGS), min_size=1, max_size=2),
    ),
    st.builds(
        lambda op, t: {"types": {op: t}}, st.sampled_from(["$eq", "$ne"]), st.sampled_from(TYPES)
    ),
    st.builds(lambda g: {"named_graph": {"$in": g}}, st.lists(st.sampled_from(GRAPHS), min_size=1)),
    st.builds(lambda g: {"named_graph": g}, st.sampled_from(GRAPHS)),
    st.builds(
        lambda op, x: {"importance": {op: x}},
        st.sampled_from(["$eq", "$gt", "$gte", "$lt", "$lte"]),
        st.sampled_from([0.25, 0.5, 0.75]),
    ),
)
specs = st.recursive(
    leaf,
    lambda inner: st.builds(
        lambda op, parts: {op: parts},
        st.sampled_from(["$and", "$or"]),
        st.lists(inner, min_size=1, max_size=3),
    ),
    max_leaves=6,
)


@settings(max_examples=150, deadline=None)
@given(spec=specs)
def test_the_sql_of_a_dict_filter_selects_what_it_means(
    store: L0Store, spec: dict[str, Any]
) -> None:
    chosen = set(store.matching(filters_from_dict(spec)))
    expected = {f"urn:e:{i}" for i, entry in enumerate(ENTRIES) if holds(entry, spec)}
    assert chosen == expected


@pytest.mark.parametrize(
    ("spec", "named"),
    [
        ("tags=a", "tags=a"),
        ({"colour": "red"}, "colour"),
        ({"tags": {"$regex": "a"}}, "$regex"),
        ({"tags": {"$in": "a"}}, "$in"),
        ({"tags": {"$in": []}}, "$in"),
        ({"tags": 3}, "3"),
        ({"importance": {"$gt": "high"}}, "high"),
        ({"importance": {"$gt": math.nan}}, "nan"),
        ({"created_at": {"$gte": True}}, "True"),
        ({"named_graph": {"$ne": "urn:g:1"}}, "$ne"),
        ({"$or": []}, "$or"),
        ({"$and": {"tags": "a"}}, "$and"),
    ],
)
def test_what_l0_cannot_express_is_a_typed_error(spec: Any, named: str) -> None:
    with pytest.raises(InvalidInputError) as info:
        filters_from_dict(spec)
    assert named in str(info.value)


def test_knowledge_leaves_out_conversation_and_inputs() -> None:
    assert set(knowledge_filters().exclude_types) == {"Turn", "ChatMessage", INPUT_TYPE}
    assert knowledge_filters(include_turns=True).exclude_types == (INPUT_TYPE,)
    assert DEFAULT_K == 4


def test_a_graph_prefix_leaves_out_exactly_the_graphs_that_start_with_it() -> None:
    graphs = [None, "urn:g:", "urn:g:1", "urn:g:1:x", "urn:g;", "urn:h:1", "urn:f:9", "urn:g"]
    with L0Store(None) as store:
        for i, graph in enumerate(graphs):
            store.put({"@id": f"urn:e:{i}", "text": "x"}, named_graph=graph)
        kept = store.matching(SearchFilters(exclude_graph_prefixes=("urn:g:",)))
        outside = [i for i, g in enumerate(graphs) if not (g or "").startswith("urn:g:")]
        assert kept == [f"urn:e:{i}" for i in outside]
        both = SearchFilters(exclude_graph_prefixes=("urn:g:", "urn:h"))
        assert store.matching(both) == ["urn:e:0", "urn:e:4", "urn:e:6", "urn:e:7"]
    with pytest.raises(InvalidInputError, match="exclude_graph_prefixes"):
        SearchFilters(exclude_graph_prefixes="urn:g:")  # type: ignore[arg-type]
