"""The scheduler: role -> frame, the L3 -> L2 -> L0 read path, task completion, FrameSource."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from gliding_core import ClosedError, FrameNotFoundError, HashEmbedder, InvalidInputError, Memory
from gliding_core.bus import EventType
from gliding_core.config import BlackboardConfig, MemoryConfig, TopicConfig
from gliding_core.projection import Frame
from gliding_core.projection.scheduler import TASK_COMPLETED, Scheduler
from gliding_core.view.frame_source import FrameSource
from gliding_core.view.sources import ContextSource, SourceRequest

TASK = "urn:ex:task:sched"
SUB = "urn:ex:task:sched-sub"


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


def write_plan(memory: Memory, task: str = TASK) -> None:
    memory.blackboard.write(
        [
            {"@id": f"{task}/plan", "@type": "Plan", "task": {"@id": task}, "summary": "the plan"},
            {
                "@id": f"{task}/s1",
                "@type": "PlanStep",
                "plan": {"@id": f"{task}/plan"},
                "summary": "write the parser",
            },
        ],
        task=task,
        area="plan",
    )


@pytest.mark.parametrize(
    ("role", "frame"),
    [
        ("plan", "pa_init"),
        ("PA", "pa_init"),
        ("do", "da_input"),
        ("executor", "da_input"),
        ("check", "ca_review"),
        ("act", "aa_decision"),
        ("sa", "summary_only"),
        ("anything", "summary_only"),
    ],
)
def test_role_to_frame(scheduler: Scheduler, role: str, frame: str) -> None:
    assert scheduler.frame_for(role) == frame


def test_roles_are_configurable(memory: Memory) -> None:
    scheduler = memory.scheduler.with_roles({"do": "reference_only"})
    assert scheduler.frame_for("do") == "reference_only"
    assert scheduler.frame_for("plan") == "summary_only"
    with pytest.raises(Exception, match="no frame 'nope'"):
        memory.scheduler.with_roles({"do": "nope"})
    with pytest.raises(InvalidInputError, match="role"):
        scheduler.frame_for("")


def test_for_memory_returns_the_memorys_one_scheduler(memory: Memory) -> None:
    assert Scheduler.for_memory(memory) is memory.scheduler is memory.scheduler
    other = Scheduler.for_memory(memory, roles={"do": "reference_only"})
    assert other is not memory.scheduler
    assert other.projector is memory.scheduler.projector
    assert other.frame_for("do") == "reference_only"
    assert (
        Scheduler.for_memory(memory, default_frame="health_check").frame_for("x") == "health_check"
    )
    for wrong in ("memory", memory.store, None):
        with pytest.raises(InvalidInputError, match="must be a gliding_core Memory"):
            Scheduler.for_memory(wrong)  # type: ignore[arg-type]


def test_other_roles_share_the_projector_its_cache_and_the_memorys_lifetime() -> None:
    """``with_roles`` opens nothing: one listener on the bus, stopped when the memory closes."""
    config = MemoryConfig(
        topics=TopicConfig(interval_s=0), blackboard=BlackboardConfig(flush_interval_s=0)
    )
    memory = Memory(config=config, embedder=HashEmbedder())
    write_plan(memory)
    base = memory.scheduler
    derived = base.with_roles({"plan": "pa_init", "do": "reference_only"})
    same = Scheduler.for_memory(memory, roles={"plan": "pa_init"})
    assert derived.projector is base.projector is same.projector
    assert (derived.store, derived.search, derived.bus) == (base.store, base.search, base.bus)
    first = base.read(TASK, "plan", budget=400)
    assert derived.read(TASK, "plan", budget=400) == first
    assert base.projector.cache.stats().hits == 1  # the view the other one built
    cache = base.projector.cache
    before = cache.sequence
    memory.bus.publish(EventType.CACHE_INVALIDATE, {"iri": f"{TASK}/plan"})
    assert cache.sequence == before + 1  # one listener, however many schedulers
    memory.close()
    before = cache.sequence
    memory.bus.publish(EventType.CACHE_INVALIDATE, {"iri": f"{TASK}/plan"})
    assert cache.sequence == before  # nobody listens once the memory is closed
    with pytest.raises(FrameNotFoundError):
        base.with_roles({"do": "nope"})
    with pytest.raises(InvalidInputError, match="roles must map"):
        base.with_roles(["do"])  # type: ignore[arg-type]


def test_a_closed_memory_builds_no_scheduler() -> None:
    with Memory(embedder=HashEmbedder()) as memory:
        pass
    with pytest.raises(ClosedError, match="scheduler"):
        _ = memory.scheduler
    with pytest.raises(ClosedError, match="blackboard"):
        _ = memory.blackboard


def test_l3_first(memory: Memory, scheduler: Scheduler) -> None:
    write_plan(memory)
    read = scheduler.read(TASK, "do", budget=400)
    assert read.level == "l3"
    assert read.frame == "da_input"
    assert set(read.iris) == {f"{TASK}/plan", f"{TASK}/s1"}
    assert read.tokens == memory.count_tokens(read.text) <= 400


def test_l2_when_the_frame_has_nothing(memory: Memory, scheduler: Scheduler) -> None:
    memory.blackboard.write(
        [{"@id": f"{TASK}/note", "@type": "Note", "text": "only a note"}], task=TASK, area="shared"
    )
    read = scheduler.read(TASK, "check", budget=400)  # ca_review: no artifact, no criteria
    assert read.level == "l2"
    assert read.iris == (f"{TASK}/note",)
    assert "only a note" in read.text


def test_l0_when_the_blackboard_has_nothing(memory: Memory, scheduler: Scheduler) -> None:
    write_plan(memory)
    completion = scheduler.complete(TASK)
    assert completion.flushed == 2
    assert completion.released == 2
    assert memory.blackboard.by_task(TASK) == []
    read = scheduler.read(TASK, "do", budget=400)
    assert read.level == "l0"
    assert set(read.iris) == {f"{TASK}/plan", f"{TASK}/s1", TASK}  # the plan links its task


def test_l0_search_with_a_query(memory: Memory, scheduler: Scheduler) -> None:
    memory.store.put({"@id": "urn:ex:fact", "text": "the parser uses recursive descent"})
    assert scheduler.read(TASK, "do", budget=400).level == "none"
    read = scheduler.read(TASK, "do", budget=400, query="recursive descent parser")
    assert read.level == "l0"
    assert read.iris == ("urn:ex:fact",)


def test_the_frame_fallback_reads_the_frame_s_areas_only_and_no_l0(
    memory: Memory, scheduler: Scheduler
) -> None:
    memory.blackboard.write(
        [{"@id": f"{TASK}/note", "@type": "Note", "text": "a shared note"}],
        task=TASK,
        area="shared",
    )
    assert scheduler.read(TASK, "check", budget=400, fallback="frame").level == "none"
    memory.blackboard.write(
        [{"@id": f"{TASK}/memo", "@type": "Note", "text": "a review memo"}],
        task=TASK,
        area="review",
    )
    read = scheduler.read(TASK, "check", budget=400, fallback="frame")  # ca_review selects neither
    assert (read.level, read.iris) == ("l2", (f"{TASK}/memo",))
    level, _, nodes = scheduler.nodes(TASK, "check", fallback="frame")
    assert (level, [n["@id"] for n in nodes]) == ("l2", [f"{TASK}/memo"])
    # As an agent, the fallback is the frame's areas its role may read: do may not read plan.
    write_plan(memory)
    memory.blackboard.write(
        [{"@id": f"{TASK}/log", "@type": "Note", "text": "a run log"}], task=TASK, area="execution"
    )
    doer = memory.agent("doer", role="do", task=TASK)
    read = scheduler.read(TASK, "do", budget=400, agent=doer, fallback="frame")
    assert (read.level, read.iris) == ("l2", (f"{TASK}/log",))
    source = FrameSource.for_agent(scheduler, doer, fallback="frame")
    part = source.fill(SourceRequest(None, 400))
    assert part.iris == (f"{TASK}/log",)
    assert FrameSource(scheduler, TASK, "do", agent=doer, fallback="frame").fallback == "frame"
    # Nothing comes from L0, neither the task's entries nor a search.
    scheduler.complete(TASK)
    memory.store.put({"@id": "urn:ex:fact", "text": "the parser uses recursive descent"})
    for fallback, level in (("task", "l0"), ("frame", "none")):
        read = scheduler.read(TASK, "check", budget=400, query="parser", fallback=fallback)  # type: ignore[arg-type]
        assert read.level == level
    with pytest.raises(InvalidInputError, match="'system'"):
        scheduler.read(TASK, "check", budget=400, fallback="system")  # type: ignore[arg-type]
    with pytest.raises(InvalidInputError, match="fallback"):
        FrameSource(scheduler, TASK, "check", fallback="l0")  # type: ignore[arg-type]


def test_nothing_anywhere(scheduler: Scheduler) -> None:
    read = scheduler.read(TASK, "do", budget=400)
    assert (read.level, read.text, read.tokens, read.iris) == ("none", "", 0, ())


def test_completion_flushes_releases_subtasks_and_announces(
    memory: Memory, scheduler: Scheduler
) -> None:
    write_plan(memory)
    write_plan(memory, SUB)
    before = scheduler.read(TASK, "do", budget=400)
    assert before.level == "l3"
    completion = scheduler.complete(TASK, subtasks=[SUB])
    assert (completion.flushed, completion.released) == (4, 4)
    assert memory.store.get(f"{SUB}/s1") is not None
    events = memory.bus.recent(TASK_COMPLETED)
    assert events[-1].payload["task"] == TASK
    assert events[-1].payload["released"] == 4
    assert scheduler.read(TASK, "do", budget=400).level == "l0"


def test_a_blackboard_without_write_back_releases_nothing() -> None:
    from gliding_core.blackboard.board import Blackboard, EmbeddedGraph
    from gliding_core.projection import Projector
    from gliding_core.tokens import TokenCounter

    with Blackboard(EmbeddedGraph()) as board:
        board.write([{"@id": "urn:ex:a", "@type": "Plan", "summary": "s"}], task=TASK, area="plan")
        scheduler = Scheduler(Projector(board, TokenCounter()))
        assert scheduler.complete(TASK).released == 0
        assert board.read("urn:ex:a") is not None


def test_frame_source_is_a_context_source(memory: Memory, scheduler: Scheduler) -> None:
    write_plan(memory)
    source = FrameSource(scheduler, TASK, "do")
    assert isinstance(source, ContextSource)
    assert isinstance(source, FrameSource)
    part = source.fill(SourceRequest("what next?", 400))
    assert part.source == "frame"
    assert part.tokens == memory.count_tokens(part.text) <= 400
    assert set(part.iris) == {f"{TASK}/plan", f"{TASK}/s1"}


def test_frame_source_leaves_out_what_is_shown(memory: Memory, scheduler: Scheduler) -> None:
    write_plan(memory)
    source = FrameSource(scheduler, TASK, "do")
    part = source.fill(SourceRequest(None, 400, frozenset({f"{TASK}/plan"})))
    assert f"{TASK}/plan" not in part.text
    assert part.iris == (f"{TASK}/s1",)
    everything = frozenset({f"{TASK}/plan", f"{TASK}/s1"})
    assert source.fill(SourceRequest(None, 400, everything)) == source.fill(
        SourceRequest(None, 400, everything)
    )
    assert source.fill(SourceRequest(None, 400, everything)).text == ""


@pytest.mark.parametrize("budget", [0, 10, 30, 60, 120])
def test_frame_source_stays_within_the_budget(
    memory: Memory, scheduler: Scheduler, budget: int
) -> None:
    write_plan(memory)
    part = FrameSource(scheduler, TASK, "do").fill(SourceRequest(None, budget))
    assert part.tokens == memory.count_tokens(part.text) <= budget


def test_a_user_frame_serves_a_role(memory: Memory) -> None:
    write_plan(memory)
    memory.scheduler.projector.register(
        Frame(
            "steps_only", "steps", "?node a gh:PlanStep ; gh:summary ?s .", "?node gh:summary ?s ."
        )
    )
    scheduler = memory.scheduler.with_roles({"do": "steps_only"})
    assert scheduler.read(TASK, "do", budget=400).iris == (f"{TASK}/s1",)


def test_completion_finds_the_subtree_in_the_task_registry(
    memory: Memory, scheduler: Scheduler
) -> None:
    coordination = memory.blackboard.coordination
    assert coordination is not None
    coordination.tasks.register(TASK)
    coordination.tasks.register(SUB, parent=TASK)
    write_plan(memory)
    write_plan(memory, SUB)
    completion = scheduler.complete(TASK)
    assert memory.blackboard.by_task(SUB) == []
    assert completion.released >= 4
    assert memory.bus.recent(TASK_COMPLETED)[-1].payload["subtasks"] == [SUB]


def test_memory_has_one_scheduler_closed_with_it() -> None:
    config = MemoryConfig(
        topics=TopicConfig(interval_s=0), blackboard=BlackboardConfig(flush_interval_s=0)
    )
    memory = Memory(config=config, embedder=HashEmbedder())
    scheduler = memory.scheduler
    assert memory.scheduler is scheduler
    assert scheduler.board is memory.blackboard
    write_plan(memory)
    assert scheduler.read(TASK, "do", budget=300).level == "l3"
    memory.close()
    assert scheduler.projector._subscription is None  # no longer listening to the bus
