"""The retriever: LangChain's standard retriever suite, then what it adds (filters, metadata)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest
from langchain_core.retrievers import BaseRetriever
from langchain_tests.integration_tests import RetrieversIntegrationTests

from gliding_core import HashEmbedder, InvalidInputError, Memory, Scope, SearchFilters
from gliding_langchain import GlidingRetriever

NOTES = [
    ("urn:note:db", "We chose PostgreSQL for the order database.", ["decision"]),
    ("urn:note:queue", "The queue runs on Redis streams.", ["decision"]),
    ("urn:note:alice", "Alice owns the billing service and its database.", ["person"]),
    ("urn:note:release", "The release is planned for the first of March.", ["plan"]),
    ("urn:note:backup", "Database backups run nightly at two.", ["ops"]),
]


def filled_memory() -> Memory:
    memory = Memory(embedder=HashEmbedder())
    for iri, text, tags in NOTES:
        memory.store.put({"@id": iri, "@type": "Note", "text": text}, tags=tags)
    return memory


class TestGlidingRetrieverStandard(RetrieversIntegrationTests):
    """The suite every LangChain retriever integration is held to."""

    @pytest.fixture(autouse=True)
    def _memory(self) -> Iterator[None]:
        self._open = filled_memory()
        yield
        self._open.close()

    @property
    def retriever_constructor(self) -> type[BaseRetriever]:
        return GlidingRetriever

    @property
    def retriever_constructor_params(self) -> dict[str, Any]:
        return {"memory": self._open}

    @property
    def retriever_query_example(self) -> str:
        return "database"


@pytest.fixture
def memory() -> Iterator[Memory]:
    with filled_memory() as value:
        yield value


def test_documents_carry_the_entry_and_why_it_ranked(memory: Memory) -> None:
    docs = GlidingRetriever(memory=memory, k=2).invoke("which database did we choose?")

    assert docs[0].id == "urn:note:db"
    assert docs[0].page_content == NOTES[0][1]
    assert docs[0].metadata["tags"] == ["decision"]
    assert docs[0].metadata["types"] == ["Note"]
    assert docs[0].metadata["score"] >= docs[1].metadata["score"]
    assert "lexical" in docs[0].metadata["ranks"]


def test_filters_on_the_retriever_and_per_call(memory: Memory) -> None:
    people = GlidingRetriever(memory=memory, filters=SearchFilters(tags_any=("person",)))
    assert [d.id for d in people.invoke("database")] == ["urn:note:alice"]

    everyone = GlidingRetriever(memory=memory, k=5)
    ops = everyone.invoke("database", filters=SearchFilters(tags_all=("ops",)))
    assert [d.id for d in ops] == ["urn:note:backup"]


def test_bad_k_and_query_are_rejected(memory: Memory) -> None:
    with pytest.raises(ValueError, match="k must be an int >= 1, got 0"):
        GlidingRetriever(memory=memory, k=0)
    with pytest.raises(InvalidInputError, match="query"):
        GlidingRetriever(memory=memory).invoke("   ")


async def test_async_calls_take_k_and_filters(memory: Memory) -> None:
    retriever = GlidingRetriever(memory=memory)
    assert len(await retriever.ainvoke("database", k=2)) == 2
    people = await retriever.ainvoke("database", filters=SearchFilters(tags_any=("person",)))
    assert [d.id for d in people] == ["urn:note:alice"]


# -- langchain-chroma's conventions ------------------------------------------------------------


def test_search_kwargs_set_k_and_a_dict_filter(memory: Memory) -> None:
    retriever = GlidingRetriever(
        memory=memory, search_kwargs={"k": 1, "filter": {"tags": {"$in": ["ops", "person"]}}}
    )
    assert [d.id for d in retriever.invoke("database")] in (["urn:note:alice"], ["urn:note:backup"])
    assert len(retriever.invoke("database", k=2)) == 2  # a call overrides search_kwargs
    assert [d.id for d in retriever.invoke("database", top_k=5, filter={"tags": "ops"})] == [
        "urn:note:backup"
    ]


@pytest.mark.parametrize(
    ("where", "expected"),
    [
        ({"tags": "decision"}, {"urn:note:db", "urn:note:queue"}),
        ({"tags": {"$ne": "decision"}}, {"urn:note:alice", "urn:note:release", "urn:note:backup"}),
        ({"$or": [{"tags": "plan"}, {"tags": "ops"}]}, {"urn:note:release", "urn:note:backup"}),
        (
            {"$and": [{"types": "Note"}, {"tags": {"$nin": ["decision", "plan"]}}]},
            {"urn:note:alice", "urn:note:backup"},
        ),
        ({"importance": {"$gte": 0.0}, "tags": "person"}, {"urn:note:alice"}),
        ({"importance": {"$gt": 1.0 - 1e-9}}, set()),
    ],
)
def test_dict_filters_select_like_langchain_chroma(
    memory: Memory, where: dict[str, Any], expected: set[str]
) -> None:
    docs = GlidingRetriever(memory=memory, k=10).invoke("database release queue", filter=where)
    assert {d.id for d in docs} == expected


@pytest.mark.parametrize(
    ("options", "named"),
    [
        ({"search_kwargs": {"k": 0}}, "k must be an int >= 1, got 0"),
        ({"search_kwargs": {"fetch_k": 3}}, "fetch_k"),
        ({"search_kwargs": {"filter": {"colour": "red"}}}, "colour"),
        ({"search_kwargs": {"filter": {"tags": {"$regex": "x"}}}}, "$regex"),
        ({"filters": {"importance": {"$gt": "high"}}}, "high"),
        ({"search_kwargs": "k=3"}, "k=3"),
    ],
)
def test_bad_search_kwargs_are_typed_errors(
    memory: Memory, options: dict[str, Any], named: str
) -> None:
    with pytest.raises(InvalidInputError) as info:
        GlidingRetriever(memory=memory, **options)
    assert named in str(info.value)


def test_a_bad_per_call_option_is_a_typed_error(memory: Memory) -> None:
    with pytest.raises(InvalidInputError, match="score_threshold"):
        GlidingRetriever(memory=memory).invoke("database", score_threshold=0.5)


def test_chat_turns_are_left_out_unless_asked_for(memory: Memory) -> None:
    scope = Scope.task("urn:task:chat")
    session = memory.session(scope.task_iri)
    session.add_turn("user", "Which database did we choose for orders?", tags=[scope.tag])
    knowledge = GlidingRetriever(memory=memory, k=10, scope=Scope.task("urn:task:chat"))
    assert all("Turn" not in d.metadata["types"] for d in knowledge.invoke("database orders"))
    turns = knowledge.invoke("database orders", include_turns=True)
    assert any("Turn" in d.metadata["types"] for d in turns)
    with_turns = GlidingRetriever(
        memory=memory, k=10, scope=Scope.task("urn:task:chat"), include_turns=True
    )
    assert [d.id for d in with_turns.invoke("database orders")] == [d.id for d in turns]


async def test_the_async_search_runs_off_the_event_loop(
    memory: Memory, monkeypatch: pytest.MonkeyPatch
) -> None:
    threads: list[int] = []
    search = memory.search

    def recording(*args: Any, **kwargs: Any) -> Any:
        threads.append(threading.get_ident())
        return search(*args, **kwargs)

    monkeypatch.setattr(memory, "search", recording)
    await GlidingRetriever(memory=memory).ainvoke("database")
    assert threads
    assert threading.get_ident() not in threads
