"""GlidingFrameRetriever: a frame's projection as NodeWithScore, ids stable, generations fresh."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest
from llama_index.core.schema import MetadataMode, NodeWithScore, TextNode

from gliding_core import (
    FrameNotFoundError,
    HashEmbedder,
    InvalidInputError,
    Memory,
    PermissionDeniedError,
)
from gliding_core.config import BlackboardConfig, MemoryConfig, TopicConfig
from gliding_core.projection import Projector
from gliding_llamaindex import GlidingFrameRetriever, frame_retrievers
from tests.test_core.projection.frame_round import EXPECTED, expected_iris, pdca_round, team

TASK = "urn:ex:task:login"
OTHER = "urn:ex:task:billing"


@pytest.fixture
def filled() -> Iterator[tuple[Memory, dict[str, str]]]:
    config = MemoryConfig(
        topics=TopicConfig(interval_s=0), blackboard=BlackboardConfig(flush_interval_s=0)
    )
    with Memory(config=config, embedder=HashEmbedder()) as memory:
        mine = pdca_round(memory, TASK, "login")
        pdca_round(memory, OTHER, "billing")
        yield memory, mine


@pytest.mark.parametrize("frame", list(EXPECTED))
def test_each_frame_retriever_gives_the_round_with_generations(
    filled: tuple[Memory, dict[str, str]], frame: str
) -> None:
    memory, mine = filled
    found = GlidingFrameRetriever(memory, frame, task=TASK, budget=4_000).retrieve("")

    assert all(isinstance(n, NodeWithScore) and isinstance(n.node, TextNode) for n in found)
    assert {n.node.node_id for n in found} == expected_iris(memory, TASK, mine, frame)
    for hit in found:
        node = memory.blackboard.read(hit.node.node_id)
        assert node is not None
        metadata = hit.node.metadata
        assert metadata["iri"] == hit.node.node_id
        assert (metadata["generation"], metadata["graph"]) == (node.generation, node.graph)
        assert metadata["types"] == [node.node["@type"]]
        assert (metadata["task"], metadata["frame"], metadata["step"]) == (TASK, frame, "full")
        assert hit.score is None  # a blank query: no relevance, the frame's order
        assert hit.node.get_content(MetadataMode.LLM) == hit.node.get_content()
        assert "billing" not in hit.node.get_content()


def test_ids_are_stable_and_a_write_gives_the_new_generation(
    filled: tuple[Memory, dict[str, str]],
) -> None:
    memory, mine = filled
    retriever = GlidingFrameRetriever(memory, "ca_review", task=TASK, budget=4_000)
    first = {n.node.node_id: n for n in retriever.retrieve("form")}
    again = {n.node.node_id: n for n in retriever.retrieve("form")}  # from the view cache
    assert first.keys() == again.keys()
    assert first[mine["art"]].node.metadata["generation"] == 1
    team(memory, TASK, "login")["do"].write(
        [{"@id": mine["art"], "@type": "Artifact", "summary": "form, second take"}],
        area="execution",
    )
    after = {n.node.node_id: n for n in retriever.retrieve("form")}
    assert after.keys() == first.keys()
    assert after[mine["art"]].node.metadata["generation"] == 2
    assert "second take" in after[mine["art"]].node.get_content()


def test_an_agent_retriever_shows_only_what_its_role_may_read(
    filled: tuple[Memory, dict[str, str]],
) -> None:
    memory, mine = filled
    actor = team(memory, TASK, "login")["act"]
    found = GlidingFrameRetriever(memory, "summary_only", agent=actor).retrieve("merge")
    assert {n.node.node_id for n in found} == {mine[k] for k in ("task", "rev", "dec")}
    assert found[0].node.node_id == mine["dec"]
    assert found[0].score is not None
    assert found[0].score > 0
    assert {n.node.metadata["area"] for n in found} <= set(actor.readable_areas())
    with pytest.raises(PermissionDeniedError, match=OTHER):
        GlidingFrameRetriever(memory, "summary_only", task=OTHER, agent=actor)


async def test_async_top_k_and_a_projector_source(filled: tuple[Memory, dict[str, str]]) -> None:
    memory, mine = filled
    projector = Projector(memory.blackboard, memory.tokens)
    retriever = GlidingFrameRetriever(projector, "summary_only", task=TASK, similarity_top_k=2)
    found = await retriever.aretrieve("reviewed")
    assert [n.node.node_id for n in found][:1] == [mine["rev"]]
    assert len(found) == 2
    assert len(GlidingFrameRetriever(projector, "summary_only", task=TASK, k=1).retrieve("x")) == 1
    projector.close()


def test_one_retriever_per_shipped_frame(filled: tuple[Memory, dict[str, str]]) -> None:
    memory, mine = filled
    retrievers = frame_retrievers(
        memory, task=TASK, budget=4_000, params={"ca_review": {"artifact": mine["art"]}}
    )
    assert list(retrievers) == list(EXPECTED)
    assert {n.node.node_id for n in retrievers["ca_review"].retrieve("")} == {TASK, mine["art"]}
    with pytest.raises(InvalidInputError, match="nope"):
        frame_retrievers(memory, task=TASK, params={"nope": {}})


def test_a_memorys_retrievers_read_through_its_one_scheduler(
    filled: tuple[Memory, dict[str, str]],
) -> None:
    memory, _ = filled
    retrievers = frame_retrievers(memory, task=TASK)
    projector = memory.scheduler.projector
    assert all(r.artifacts.projector is projector for r in retrievers.values())


@pytest.mark.parametrize(
    ("options", "error", "named"),
    [
        ({"source": "memory"}, InvalidInputError, "'memory'"),
        ({"frame": "nope"}, FrameNotFoundError, "nope"),
        ({"task": "not an iri"}, InvalidInputError, "not an iri"),
        ({"budget": 1.5}, InvalidInputError, "1.5"),
        ({"similarity_top_k": 0}, InvalidInputError, "similarity_top_k must be an int >= 1"),
        ({"k": "3"}, InvalidInputError, "k must be an int >= 1, got '3'"),
        ({"params": {"plan": "urn:ex:p"}}, InvalidInputError, "plan"),
        ({"agent": object()}, InvalidInputError, "object"),
    ],
)
def test_bad_arguments_are_typed_errors(
    filled: tuple[Memory, dict[str, str]], options: dict[str, Any], error: type, named: str
) -> None:
    memory, _ = filled
    given: dict[str, Any] = {"source": memory, "frame": "summary_only", "task": TASK} | options
    with pytest.raises(error) as info:
        GlidingFrameRetriever(given.pop("source"), given.pop("frame"), **given)
    assert named in str(info.value)


async def test_aretrieve_projects_off_the_event_loop(
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
    assert await GlidingFrameRetriever(memory, "summary_only", task=TASK).aretrieve("plan")
    assert threads
    assert threading.get_ident() not in threads
