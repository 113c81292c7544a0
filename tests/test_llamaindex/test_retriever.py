"""GlidingRetriever: L0 entries as NodeWithScore, with their metadata, k and filters."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from llama_index.core.schema import MetadataMode, NodeWithScore
from llama_index.core.vector_stores.types import (
    ExactMatchFilter,
    FilterCondition,
    FilterOperator,
    MetadataFilter,
    MetadataFilters,
)

from gliding_core import InvalidInputError, Memory, Scope, SearchFilters
from gliding_core.store.filters import MAX_NESTING
from gliding_core.store.retrieval import DEFAULT_K
from gliding_llamaindex import GlidingRetriever


@pytest.fixture
def filled(memory: Memory) -> Memory:
    """Five notes about ports in two named graphs, and one unrelated note."""
    for i in range(5):
        memory.store.put(
            {
                "@id": f"urn:note:{i}",
                "@type": "Note",
                "text": f"Port {i} of the harbour has crane {i}.",
            },
            tags=["harbour", "even" if i % 2 == 0 else "odd"],
            named_graph="urn:graph:east" if i < 3 else "urn:graph:west",
            importance=0.2 + 0.1 * i,
        )
    memory.store.put({"@id": "urn:note:cake", "text": "The cake recipe needs three eggs."})
    return memory


def test_nodes_carry_the_entry_text_iri_score_and_metadata(filled: Memory) -> None:
    nodes = GlidingRetriever(filled, k=3).retrieve("harbour port crane")

    assert len(nodes) == 3
    assert all(isinstance(n, NodeWithScore) for n in nodes)
    assert [n.score for n in nodes] == sorted((n.score or 0.0 for n in nodes), reverse=True)
    best = nodes[0]
    assert best.node.node_id.startswith("urn:note:")
    assert best.node.get_content() == filled.store.get(best.node.node_id).node["text"]
    metadata = best.node.metadata
    assert metadata["iri"] == best.node.node_id
    assert "harbour" in metadata["tags"]
    assert metadata["types"] == ["Note"]
    assert metadata["named_graph"] in ("urn:graph:east", "urn:graph:west")
    assert metadata["importance"] == filled.store.get(best.node.node_id).importance
    assert best.node.get_content(MetadataMode.LLM) == best.node.get_content()  # text alone


def test_filters_restrict_the_results(filled: Memory) -> None:
    east = GlidingRetriever(filled, k=10, filters=SearchFilters(named_graph="urn:graph:east"))
    odd = GlidingRetriever(filled, k=10, filters=SearchFilters(tags_all=("harbour", "odd")))

    assert {n.node.node_id for n in east.retrieve("port crane")} == {
        "urn:note:0",
        "urn:note:1",
        "urn:note:2",
    }
    assert {n.node.node_id for n in odd.retrieve("port crane")} == {"urn:note:1", "urn:note:3"}


async def test_async_retrieve(filled: Memory) -> None:
    nodes = await GlidingRetriever(filled, k=1).aretrieve("cake recipe eggs")

    assert [n.node.node_id for n in nodes] == ["urn:note:cake"]


@pytest.mark.parametrize(
    ("options", "named"),
    [
        ({"k": 0}, "k must be an int >= 1, got 0"),
        ({"k": True}, "got True"),
        ({"filters": {"tags_all": ["x"]}}, "{'tags_all': ['x']}"),
    ],
)
def test_bad_options_are_typed_errors(
    memory: Memory, options: dict[str, object], named: str
) -> None:
    with pytest.raises(InvalidInputError) as info:
        GlidingRetriever(memory, **options)  # type: ignore[arg-type]
    assert named in str(info.value)


def test_a_memory_is_required_and_queries_are_checked(memory: Memory) -> None:
    with pytest.raises(InvalidInputError, match="'not memory'"):
        GlidingRetriever("not memory")  # type: ignore[arg-type]
    with pytest.raises(InvalidInputError, match="query must be a non-empty string"):
        GlidingRetriever(memory).retrieve("   ")


# -- LlamaIndex's conventions ------------------------------------------------------------------


def test_similarity_top_k_and_the_shared_default(filled: Memory) -> None:
    assert len(GlidingRetriever(filled, similarity_top_k=2).retrieve("harbour port")) == 2
    assert len(GlidingRetriever(filled).retrieve("harbour port")) == DEFAULT_K
    assert GlidingRetriever(filled, k=3).similarity_top_k == 3


@pytest.mark.parametrize(
    ("filters", "expected"),
    [
        (MetadataFilters(filters=[ExactMatchFilter(key="tags", value="odd")]), {1, 3}),
        (
            MetadataFilters(
                filters=[
                    MetadataFilter(key="named_graph", value="urn:graph:west"),
                    MetadataFilter(key="tags", value="even"),
                ]
            ),
            {4},
        ),
        (
            MetadataFilters(
                filters=[
                    MetadataFilter(key="importance", value=0.45, operator=FilterOperator.GT),
                    MetadataFilter(key="tags", value="odd", operator=FilterOperator.NE),
                ],
                condition=FilterCondition.OR,
            ),
            {0, 2, 3, 4, "cake"},  # the cake note has no tag "odd"
        ),
        (
            MetadataFilters(
                filters=[
                    MetadataFilter(key="tags", value=["odd", "even"], operator=FilterOperator.ANY),
                    MetadataFilters(
                        filters=[
                            MetadataFilter(
                                key="importance", value=0.35, operator=FilterOperator.LTE
                            )
                        ]
                    ),
                ]
            ),
            {0, 1},
        ),
    ],
)
def test_metadata_filters_select_on_l0(
    filled: Memory, filters: MetadataFilters, expected: set[int | str]
) -> None:
    nodes = GlidingRetriever(filled, similarity_top_k=10, filters=filters).retrieve("port crane")
    assert {n.node.node_id for n in nodes} == {f"urn:note:{i}" for i in expected}


@pytest.mark.parametrize(
    ("filters", "named"),
    [
        (MetadataFilters(filters=[ExactMatchFilter(key="colour", value="red")]), "colour"),
        (
            MetadataFilters(
                filters=[MetadataFilter(key="tags", value="x", operator=FilterOperator.TEXT_MATCH)]
            ),
            "text_match",
        ),
        (
            MetadataFilters(
                filters=[ExactMatchFilter(key="tags", value="x")], condition=FilterCondition.NOT
            ),
            "not",
        ),
    ],
)
def test_filters_l0_cannot_express_are_typed_errors(
    memory: Memory, filters: MetadataFilters, named: str
) -> None:
    with pytest.raises(InvalidInputError, match=named):
        GlidingRetriever(memory, filters=filters)


@pytest.mark.parametrize("levels", [MAX_NESTING + 1, 10_000])
def test_filters_nested_too_deep_are_a_typed_error(memory: Memory, levels: int) -> None:
    filters = MetadataFilters(filters=[ExactMatchFilter(key="tags", value="x")])
    for _ in range(levels):
        filters = MetadataFilters(filters=[filters])
    with pytest.raises(InvalidInputError, match=f"more than {MAX_NESTING} levels"):
        GlidingRetriever(memory, filters=filters)


def test_chat_turns_only_with_include_turns(memory: Memory) -> None:
    scope = Scope.task("urn:task:chat")
    memory.session(scope.task_iri).add_turn("user", "The harbour crane is red.", tags=[scope.tag])
    plain = GlidingRetriever(memory, scope=scope).retrieve("harbour crane")
    turns = GlidingRetriever(memory, scope=scope, include_turns=True).retrieve("harbour crane")
    assert plain == []
    assert [n.node.metadata["types"] for n in turns] == [["Turn"]]


async def test_aretrieve_searches_off_the_event_loop(
    filled: Memory, monkeypatch: pytest.MonkeyPatch
) -> None:
    threads: list[int] = []
    search = filled.search

    def recording(*args: Any, **kwargs: Any) -> Any:
        threads.append(threading.get_ident())
        return search(*args, **kwargs)

    monkeypatch.setattr(filled, "search", recording)
    await GlidingRetriever(filled).aretrieve("cake recipe")
    assert threads
    assert threading.get_ident() not in threads
