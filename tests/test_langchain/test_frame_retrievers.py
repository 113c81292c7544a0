"""The frame retriever: LangChain's standard retriever suite, then frames, generations, agents."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest
from langchain_core.documents import Document
from langchain_core.retrievers import BaseRetriever
from langchain_tests.integration_tests import RetrieversIntegrationTests

from gliding_core import (
    FrameNotFoundError,
    HashEmbedder,
    InvalidInputError,
    Memory,
    PermissionDeniedError,
)
from gliding_core.config import BlackboardConfig, MemoryConfig, TopicConfig
from gliding_langchain import GlidingFrameRetriever, frame_retrievers
from tests.test_core.projection.frame_round import EXPECTED, expected_iris, pdca_round, team

TASK = "urn:ex:task:login"
OTHER = "urn:ex:task:billing"


def round_memory() -> tuple[Memory, dict[str, str]]:
    config = MemoryConfig(
        topics=TopicConfig(interval_s=0), blackboard=BlackboardConfig(flush_interval_s=0)
    )
    memory = Memory(config=config, embedder=HashEmbedder())
    mine = pdca_round(memory, TASK, "login")
    pdca_round(memory, OTHER, "billing")
    return memory, mine


class TestGlidingFrameRetrieverStandard(RetrieversIntegrationTests):
    """The suite every LangChain retriever integration is held to (``k`` on both paths)."""

    @pytest.fixture(autouse=True)
    def _memory(self) -> Iterator[None]:
        self._open, _ = round_memory()
        yield
        self._open.close()

    @property
    def retriever_constructor(self) -> type[BaseRetriever]:
        return GlidingFrameRetriever

    @property
    def retriever_constructor_params(self) -> dict[str, Any]:
        return {"memory": self._open, "frame": "summary_only", "task": TASK, "budget": 4_000}

    @property
    def retriever_query_example(self) -> str:
        return "the login plan"


@pytest.fixture
def filled() -> Iterator[tuple[Memory, dict[str, str]]]:
    memory, mine = round_memory()
    with memory:
        yield memory, mine


@pytest.mark.parametrize("frame", list(EXPECTED))
def test_each_frame_retriever_gives_the_round_with_generations(
    filled: tuple[Memory, dict[str, str]], frame: str
) -> None:
    memory, mine = filled
    docs = GlidingFrameRetriever(memory=memory, frame=frame, task=TASK, budget=4_000).invoke("")

    assert {d.id for d in docs} == expected_iris(memory, TASK, mine, frame)
    for doc in docs:
        node = memory.blackboard.read(doc.id or "")
        assert node is not None
        assert doc.metadata["iri"] == doc.id
        assert doc.metadata["generation"] == node.generation
        assert doc.metadata["graph"] == node.graph
        assert doc.metadata["types"] == [node.node["@type"]]
        assert (doc.metadata["frame"], doc.metadata["step"]) == (frame, "full")
        assert doc.page_content.startswith('{"@id":')
        assert "billing" not in doc.page_content


def test_a_write_reaches_the_next_invoke(filled: tuple[Memory, dict[str, str]]) -> None:
    memory, mine = filled
    retriever = GlidingFrameRetriever(memory=memory, frame="da_input", task=TASK, budget=4_000)
    before = {d.id: d for d in retriever.invoke("steps")}
    assert before[mine["step"]].metadata["generation"] == 1
    retriever.invoke("steps")  # served from the view cache
    planner = team(memory, TASK, "login")["plan"]
    planner.write(
        [
            {
                "@id": mine["step"],
                "@type": "PlanStep",
                "plan": {"@id": mine["plan"]},
                "summary": "v2",
            }
        ],
        area="plan",
    )
    after = {d.id: d for d in retriever.invoke("steps")}
    assert after[mine["step"]].metadata["generation"] == 2
    assert '"summary":"v2"' in after[mine["step"]].page_content


def test_an_agent_retriever_shows_only_what_its_role_may_read(
    filled: tuple[Memory, dict[str, str]],
) -> None:
    memory, mine = filled
    agents = team(memory, TASK, "login")
    checker = GlidingFrameRetriever(memory=memory, frame="summary_only", agent=agents["check"])
    docs = checker.invoke("anything")
    assert {d.id for d in docs} == {mine[k] for k in ("task", "art", "res", "rev")}
    assert {d.metadata["area"] for d in docs} <= set(agents["check"].readable_areas())
    assert (
        GlidingFrameRetriever(memory=memory, frame="da_input", agent=agents["do"]).invoke("x") == []
    )
    with pytest.raises(PermissionDeniedError, match=OTHER):
        GlidingFrameRetriever(memory=memory, frame="summary_only", task=OTHER, agent=agents["do"])


def test_a_query_orders_and_k_cuts(filled: tuple[Memory, dict[str, str]]) -> None:
    memory, mine = filled
    retriever = GlidingFrameRetriever(memory=memory, frame="summary_only", task=TASK, k=2)
    docs = retriever.invoke("reviewed")
    assert len(docs) == 2
    assert docs[0].id == mine["rev"]
    assert docs[0].metadata["score"] > docs[1].metadata["score"] == 0.0
    assert len(retriever.invoke("reviewed", k=5)) == 5


async def test_async_and_a_scheduler_source(filled: tuple[Memory, dict[str, str]]) -> None:
    memory, mine = filled
    retriever = GlidingFrameRetriever(
        scheduler=memory.scheduler, frame="da_input", task=TASK, params={"plan": mine["plan"]}
    )
    docs = await retriever.ainvoke("html")
    assert all(isinstance(d, Document) for d in docs)
    assert [d.id for d in docs] == [mine["step"], mine["plan"]]


def test_one_retriever_per_shipped_frame(filled: tuple[Memory, dict[str, str]]) -> None:
    memory, mine = filled
    planner = team(memory, TASK, "login")["plan"]
    retrievers = frame_retrievers(memory=memory, agent=planner, budget=4_000)
    assert list(retrievers) == list(EXPECTED)
    assert {d.id for d in retrievers["pa_init"].invoke("")} == expected_iris(
        memory, TASK, mine, "pa_init"
    )
    with pytest.raises(InvalidInputError, match="plan_detail"):
        frame_retrievers(memory=memory, task=TASK, params={"plan_detail": {}})


def test_a_memorys_retrievers_read_through_its_one_scheduler(
    filled: tuple[Memory, dict[str, str]],
) -> None:
    """Every retriever of a memory shares its projector and view cache: a view is built once."""
    memory, _ = filled
    retrievers = frame_retrievers(memory=memory, task=TASK, budget=4_000)
    cache = memory.scheduler.projector.cache
    before = cache.stats()
    first = retrievers["summary_only"].invoke("")
    again = GlidingFrameRetriever(memory=memory, frame="summary_only", task=TASK, budget=4_000)
    assert again.invoke("") == first
    assert cache.stats().misses == before.misses + 1  # the first invoke built the view
    assert cache.stats().hits == before.hits + 1  # the second retriever was served it


@pytest.mark.parametrize(
    ("options", "error", "named"),
    [
        ({}, InvalidInputError, "exactly one of memory= and scheduler="),
        ({"memory": "mem"}, InvalidInputError, "'mem'"),
        ({"scheduler": 3}, InvalidInputError, "3"),
        ({"memory": True, "frame": "nope"}, FrameNotFoundError, "nope"),
        ({"memory": True, "task": "not an iri"}, InvalidInputError, "not an iri"),
        ({"memory": True, "budget": -5}, InvalidInputError, "-5"),
        ({"memory": True, "k": 0}, InvalidInputError, "k must be an int >= 1, got 0"),
        ({"memory": True, "params": "plan"}, InvalidInputError, "'plan'"),
        ({"memory": True, "agent": "planner"}, InvalidInputError, "planner"),
    ],
)
def test_bad_arguments_are_typed_errors(
    filled: tuple[Memory, dict[str, str]], options: dict[str, Any], error: type, named: str
) -> None:
    memory, _ = filled
    given: dict[str, Any] = {"frame": "summary_only", "task": TASK} | options
    if given.get("memory") is True:
        given["memory"] = memory
    with pytest.raises(error) as info:
        GlidingFrameRetriever(**given)
    assert named in str(info.value)


def test_bad_call_options_are_typed_errors(filled: tuple[Memory, dict[str, str]]) -> None:
    memory, _ = filled
    retriever = GlidingFrameRetriever(memory=memory, frame="summary_only", task=TASK)
    with pytest.raises(InvalidInputError, match="filter"):
        retriever.invoke("x", filter={"tags": "a"})
    with pytest.raises(InvalidInputError, match="got -1"):
        retriever.invoke("x", k=-1)


async def test_the_async_path_projects_off_the_event_loop(
    filled: tuple[Memory, dict[str, str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    memory, _ = filled
    board = memory.blackboard
    threads: list[int] = []
    read_many = board.read_many

    def recording(iris: Any) -> Any:
        threads.append(threading.get_ident())
        return read_many(iris)

    monkeypatch.setattr(board, "read_many", recording)
    retriever = GlidingFrameRetriever(memory=memory, frame="summary_only", task=TASK)
    assert await retriever.ainvoke("plan", k=2)
    assert threads
    assert threading.get_ident() not in threads
