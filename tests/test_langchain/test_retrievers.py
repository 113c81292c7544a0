"""The retriever: LangChain's standard retriever suite, then what it adds (filters, metadata)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from langchain_core.retrievers import BaseRetriever
from langchain_tests.integration_tests import RetrieversIntegrationTests

from gliding_core import HashEmbedder, InvalidInputError, Memory, SearchFilters
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
