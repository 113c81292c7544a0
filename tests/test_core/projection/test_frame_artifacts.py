"""Frame artifacts: each frame's projection as nodes with IRIs and generations, for an agent too."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gliding_core import (
    ClosedError,
    FrameArtifacts,
    FrameNotFoundError,
    HashEmbedder,
    InvalidInputError,
    Memory,
    PermissionDeniedError,
    frame_artifacts,
)
from gliding_core.config import BlackboardConfig, MemoryConfig, TopicConfig
from gliding_core.projection import SHIPPED, Projector
from gliding_core.projection.artifacts import lexical_scores
from tests.test_core.projection.frame_round import EXPECTED, expected_iris, pdca_round, team

TASK = "urn:ex:task:login"
OTHER = "urn:ex:task:billing"


@pytest.fixture
def memory() -> Iterator[Memory]:
    config = MemoryConfig(
        topics=TopicConfig(interval_s=0), blackboard=BlackboardConfig(flush_interval_s=0)
    )
    with Memory(config=config, embedder=HashEmbedder()) as value:
        yield value


@pytest.fixture
def rounds(memory: Memory) -> tuple[dict[str, str], dict[str, str]]:
    return pdca_round(memory, TASK, "login"), pdca_round(memory, OTHER, "billing")


def test_every_shipped_frame_is_covered() -> None:
    assert [f.name for f in SHIPPED] == list(EXPECTED)


@pytest.mark.parametrize("frame", list(EXPECTED))
def test_each_frame_gives_its_round_with_generations_and_nothing_of_another_task(
    memory: Memory, rounds: tuple[dict[str, str], dict[str, str]], frame: str
) -> None:
    mine, theirs = rounds
    board = memory.blackboard
    found = frame_artifacts(memory, frame, task=TASK, budget=4_000)

    assert {a.iri for a in found} == expected_iris(memory, TASK, mine, frame)
    assert not {a.iri for a in found} & set(theirs.values())
    for artifact in found:
        node = board.read(artifact.iri)
        assert node is not None
        assert (artifact.generation, artifact.graph) == (node.generation, node.graph)
        assert artifact.area is not None
        assert artifact.graph.startswith("urn:gliding-horse:graph:")
        assert artifact.types == (node.node["@type"],)
        assert (artifact.task, artifact.frame, artifact.step) == (TASK, frame, "full")
        assert artifact.node["@id"] == artifact.iri
        assert "billing" not in artifact.text


def test_artifacts_are_the_projection_nodes_in_its_order(
    memory: Memory, rounds: tuple[dict[str, str], dict[str, str]]
) -> None:
    projector = Projector(memory.blackboard, memory.tokens)
    projection = projector.project(TASK, "da_input", budget=4_000)
    found = frame_artifacts(projector, "da_input", task=TASK, budget=4_000)

    assert tuple(a.iri for a in found) == projection.iris
    assert [a.node for a in found] == projection.document["@graph"]
    step = next(a for a in found if a.types == ("PlanStep",))
    assert step.node["inputData"] == {"format": "html", "detail": {"width": 3}}
    assert step.document["@context"] == projection.document["@context"]
    assert step.metadata() == {
        "iri": step.iri,
        "generation": 1,
        "types": ["PlanStep"],
        "graph": step.graph,
        "area": "plan",
        "task": TASK,
        "frame": "da_input",
        "step": "full",
    }
    projector.close()


def test_a_write_gives_the_new_generation_not_the_cached_view(
    memory: Memory, rounds: tuple[dict[str, str], dict[str, str]]
) -> None:
    mine, _ = rounds
    reader = FrameArtifacts(memory, "aa_decision", task=TASK, budget=4_000)
    before = {a.iri: a for a in reader.read()}
    assert before[mine["rev"]].generation == 1
    hits = reader.projector.cache.stats().hits
    reader.read()
    assert reader.projector.cache.stats().hits > hits  # the second read came from the view

    checker = memory.agent("login-check", role="check", task=TASK)
    checker.write(
        [
            {
                "@id": mine["rev"],
                "@type": "Review",
                "summary": "login review redone",
                "verdict": "fail",
            }
        ],
        area="review",
    )
    after = {a.iri: a for a in reader.read()}
    assert after[mine["rev"]].generation == 2 == memory.blackboard.read(mine["rev"]).generation
    assert after[mine["rev"]].node["verdict"] == "fail"
    assert "redone" in after[mine["rev"]].text
    assert after[mine["dec"]].generation == 1


def test_a_write_between_content_and_generation_never_claims_a_newer_generation(
    memory: Memory, rounds: tuple[dict[str, str], dict[str, str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A write lands after the view was served and before its generations are read."""
    mine, _ = rounds
    board = memory.blackboard
    reader = FrameArtifacts(memory, "aa_decision", task=TASK, budget=4_000)
    reader.read()  # the view is cached
    read_many = board.read_many
    checker = memory.agent("login-check", role="check", task=TASK)
    calls: list[int] = []

    def racing(iris: Any) -> Any:
        if not calls:
            checker.write(
                [{"@id": mine["rev"], "@type": "Review", "summary": "v2", "verdict": "fail"}],
                area="review",
            )
        calls.append(1)
        return read_many(iris)

    monkeypatch.setattr(board, "read_many", racing)
    review = next(a for a in reader.read() if a.iri == mine["rev"])
    assert review.generation == 2
    assert review.node["verdict"] == "fail"  # the content is that generation's, not the view's


def test_an_agent_sees_only_what_its_role_may_read(
    memory: Memory, rounds: tuple[dict[str, str], dict[str, str]]
) -> None:
    mine, _ = rounds
    agents = team(memory, TASK, "login")
    checker = agents["check"]
    readable = set(checker.readable_areas())

    seen = FrameArtifacts(memory, "summary_only", agent=checker, budget=4_000).read()
    assert {a.iri for a in seen} == {mine[k] for k in ("task", "art", "res", "rev")}
    assert all(a.area in readable for a in seen)
    assert all(a.frame == "summary_only" for a in seen)

    # The do role may not read the plan area: its own frame shows it nothing of the plan.
    assert FrameArtifacts(memory, "da_input", agent=agents["do"]).read() == []
    # A node it may read does not embed one it may not: the task links the fact, as a link.
    everything = frame_artifacts(memory, "pa_init", task=TASK, budget=4_000)
    assert "known fact" in next(a.text for a in everything if a.iri == TASK)
    narrowed = FrameArtifacts(memory, "pa_init", agent=checker, budget=4_000).read()
    assert [a.iri for a in narrowed] == [TASK]
    assert narrowed[0].node["resources"] == {"@id": mine["fact"]}
    assert "known fact" not in narrowed[0].text
    # The planner may read every area of its frame: the frame itself, not a narrowed copy.
    planner = FrameArtifacts(memory, "pa_init", agent=agents["plan"], budget=4_000)
    assert {a.iri for a in planner.read()} == {mine[k] for k in EXPECTED["pa_init"]}


def test_an_agent_reads_only_its_own_task(
    memory: Memory, rounds: tuple[dict[str, str], dict[str, str]]
) -> None:
    checker = memory.agent("login-check", role="check", task=TASK)
    with pytest.raises(PermissionDeniedError, match=OTHER):
        FrameArtifacts(memory, "summary_only", task=OTHER, agent=checker)
    assert FrameArtifacts(memory, "summary_only", task=TASK, agent=checker).task == TASK


def test_the_agent_read_follows_a_replaced_frame_and_registers_none(
    memory: Memory, rounds: tuple[dict[str, str], dict[str, str]]
) -> None:
    mine, _ = rounds
    projector = Projector(memory.blackboard, memory.tokens)
    names = projector.frames.names()
    checker = memory.agent("login-check", role="check", task=TASK)
    reader = FrameArtifacts(projector, "summary_only", agent=checker, budget=4_000)
    assert len(reader.read()) == 4
    assert len(FrameArtifacts(projector, "pa_init", agent=checker, budget=4_000).read()) == 1
    assert projector.frames.names() == names  # read through project(areas=...), no copy
    only_reviews = next(f for f in SHIPPED if f.name == "aa_decision")
    projector.register(replace(only_reviews, name="summary_only"), replace=True)
    assert [a.iri for a in reader.read()] == [mine["rev"]]  # decision: not readable by check
    projector.close()


def test_a_query_orders_the_artifacts_and_k_keeps_the_first(
    memory: Memory, rounds: tuple[dict[str, str], dict[str, str]]
) -> None:
    mine, _ = rounds
    reader = FrameArtifacts(memory, "summary_only", task=TASK, budget=4_000)
    plain = reader.read()
    assert all(a.score is None for a in plain)
    assert [a.iri for a in reader.read("   ")] == [a.iri for a in plain]

    ranked = reader.read("the reviewed verdicts")  # stemmed: "review", a stop word dropped
    assert ranked[0].iri == mine["rev"]
    assert ranked[0].score is not None
    assert ranked[0].score > 0
    rest = [a.iri for a in ranked[1:]]
    assert rest == [a.iri for a in plain if a.iri != mine["rev"]]  # ties keep frame order
    assert all(a.score == 0.0 for a in ranked[1:])
    assert "score" in ranked[0].metadata()

    top = reader.read("write the form", k=2)
    assert [a.iri for a in top] == [mine["step"], mine["art"]]  # two words beat one
    assert len(reader.read(k=1)) == 1


def test_lexical_scores_follow_l0_text_search() -> None:
    texts = ["the painted fence", "a fence", "nothing here"]
    scores = lexical_scores(texts, "painting fences", stop_words={"the"})
    assert scores[0] > scores[1] > scores[2] == 0.0
    assert lexical_scores(texts, "the", stop_words={"the"})[0] > 0  # only stop words: kept
    assert lexical_scores([], "fence") == []
    assert lexical_scores(texts, '" OR "') == [0.0, 0.0, 0.0]


def test_a_small_budget_degrades_and_keeps_whole_nodes(
    memory: Memory, rounds: tuple[dict[str, str], dict[str, str]]
) -> None:
    found = frame_artifacts(memory, "summary_only", task=TASK, budget=60)
    assert found
    assert {a.step for a in found} <= {"summaries", "fewer-nodes", "references"}
    assert sum(memory.count_tokens(a.text) for a in found) <= 60
    assert frame_artifacts(memory, "summary_only", task=TASK, budget=0) == []


def test_a_scheduler_works_as_the_source(
    memory: Memory, rounds: tuple[dict[str, str], dict[str, str]]
) -> None:
    scheduler = memory.scheduler.with_roles(None)
    reader = FrameArtifacts(scheduler, "da_input", task=TASK, params={"plan": f"{TASK}/plan"})
    assert reader.projector is scheduler.projector
    assert reader.stop_words == memory.store.stop_words
    assert {a.iri for a in reader.read()} == {f"{TASK}/plan", f"{TASK}/step"}


def test_one_projector_per_memory(memory: Memory) -> None:
    first = FrameArtifacts(memory, "summary_only", task=TASK)
    second = FrameArtifacts(memory, "pa_init", task=OTHER)
    assert first.projector is second.projector is memory.scheduler.projector
    assert FrameArtifacts(memory.scheduler, "pa_init", task=TASK).projector is first.projector


def test_anything_with_a_scheduler_is_a_source(memory: Memory) -> None:
    """The source is resolved by what it has (a scheduler), never by importing ``Memory``."""

    class Owner:
        scheduler = memory.scheduler

    class Pretender:
        scheduler = "not a scheduler"

    owned = FrameArtifacts(Owner(), "summary_only", task=TASK)
    assert owned.projector is memory.scheduler.projector
    with pytest.raises(InvalidInputError, match="source must be a Memory, a Scheduler"):
        FrameArtifacts(Pretender(), "summary_only", task=TASK)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("arguments", "error", "named"),
    [
        ({"source": "memory"}, InvalidInputError, "'memory'"),
        ({"frame": "plan_detail"}, FrameNotFoundError, "plan_detail"),
        ({"task": "not a task"}, InvalidInputError, "not a task"),
        ({"task": None}, InvalidInputError, "task"),
        ({"params": ["plan"]}, InvalidInputError, "['plan']"),
        ({"frame": "da_input", "params": {"artifact": "urn:ex:a"}}, InvalidInputError, "artifact"),
        ({"frame": "da_input", "params": {"plan": "no iri"}}, InvalidInputError, "no iri"),
        ({"budget": -1}, InvalidInputError, "-1"),
        ({"budget": "10"}, InvalidInputError, "'10'"),
        ({"agent": "login-check"}, InvalidInputError, "login-check"),
    ],
)
def test_bad_arguments_are_typed_errors_naming_the_value(
    memory: Memory, arguments: dict[str, Any], error: type[Exception], named: str
) -> None:
    given: dict[str, Any] = {"source": memory, "frame": "summary_only", "task": TASK} | arguments
    with pytest.raises(error) as info:
        FrameArtifacts(given.pop("source"), given.pop("frame"), **given)
    assert named in str(info.value)


def test_bad_read_arguments_and_a_foreign_agent(memory: Memory) -> None:
    reader = FrameArtifacts(memory, "summary_only", task=TASK)
    with pytest.raises(InvalidInputError, match="got 0"):
        reader.read(k=0)
    with pytest.raises(InvalidInputError, match="True"):
        reader.read(k=True)
    with pytest.raises(InvalidInputError, match="3"):
        reader.read(3)  # type: ignore[arg-type]
    config = MemoryConfig(topics=TopicConfig(interval_s=0))
    with Memory(config=config, embedder=HashEmbedder()) as elsewhere:
        stranger = elsewhere.agent("x", role="check", task=TASK)
        with pytest.raises(InvalidInputError, match="another blackboard"):
            FrameArtifacts(memory, "summary_only", agent=stranger)


_QUERY_WORDS = ["review", "the", "NEAR", "AND", "OR", "NOT", '"', "*", "^", "(", ":", "plan"]
_QUERIES = st.lists(st.sampled_from(_QUERY_WORDS) | st.text(max_size=8), max_size=6).map(" ".join)


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(query=_QUERIES)
def test_any_query_only_reorders_the_frame(
    memory: Memory, rounds: tuple[dict[str, str], dict[str, str]], query: str
) -> None:
    """FTS5 syntax, quotes and stop words in a query never add, drop or break an artifact."""
    reader = FrameArtifacts(memory, "summary_only", task=TASK, budget=4_000)
    plain = reader.read()
    ranked = reader.read(query)
    assert sorted(a.iri for a in ranked) == sorted(a.iri for a in plain)
    scores = [a.score or 0.0 for a in ranked]
    assert scores == sorted(scores, reverse=True)


def test_a_closed_memory_is_a_typed_error() -> None:
    memory = Memory(embedder=HashEmbedder())
    reader = FrameArtifacts(memory, "summary_only", task=TASK)
    memory.close()
    with pytest.raises(ClosedError):
        reader.read()
    with pytest.raises(ClosedError, match="closed"):
        FrameArtifacts(memory, "summary_only", task=TASK)
