"""``bench agents``, its framework-neutral half: tasks, scripts, the ledger, checks and frames."""

from __future__ import annotations

import json
from typing import Any

import pytest

from gliding_core.blackboard.permissions import PermissionMatrix
from gliding_core.blackboard.vocabulary import AREAS
from gliding_core.cli.benchmarks import agents as work
from gliding_core.errors import InvalidInputError
from gliding_core.hyperspace.embedders import HashEmbedder
from gliding_core.memory import Memory
from gliding_core.projection.frames import SHIPPED, FrameSet
from gliding_core.projection.projector import Projector
from gliding_core.projection.scheduler import Scheduler


def _play(task: work.TaskSpec, ledger: work.Ledger) -> dict[str, dict[str, Any]]:
    """Run the four scripts round-robin on one always-current state until none has work."""
    state: dict[str, dict[str, Any]] = {}
    busy = True
    while busy:
        busy = False
        for role in work.ROLES:
            node = work.next_write(role, task, state)
            if node is not None:
                ledger.commit(node, ledger.stale_in(node))
                state[node["@id"]] = node
                busy = True
    return state


def test_tasks_depend_only_on_the_seed() -> None:
    assert work.generate(5, seed=3) == work.generate(5, seed=3)
    assert work.generate(5, seed=3) != work.generate(5, seed=4)
    tasks = work.generate(20, seed=0)
    assert all(3 <= len(t.steps) <= 5 for t in tasks)
    assert any(s.refined for t in tasks for s in t.steps)  # the plan is revised somewhere
    assert any(s.flawed for t in tasks for s in t.steps)  # and some drafts are sent back


@pytest.mark.parametrize("count", [0, -1, True, "3"])
def test_a_bad_task_count_is_refused(count: Any) -> None:
    with pytest.raises(InvalidInputError, match="count"):
        work.generate(count, seed=0)


def test_scripts_on_a_current_state_finish_every_task_without_stale_reads() -> None:
    for task in work.generate(6, seed=1):
        ledger = work.Ledger()
        state = _play(task, ledger)
        assert work.check_task(task, state) == []
        assert ledger.stale_reads == 0
        revised = [s for s in task.steps if s.refined or s.flawed]
        # Every revision made an artifact version beyond the first.
        drafts = [state[task.item("artifact", s.index)]["version"] for s in revised]
        assert all(version > 1 for version in drafts)


def test_a_write_from_an_old_version_is_a_stale_read() -> None:
    task = work.generate(1, seed=0)[0]
    ledger = work.Ledger()
    step = task.item("step", 1)
    ledger.commit({"@id": step, "version": 1}, 0)
    ledger.commit({"@id": step, "version": 2}, 0)
    artifact = {"@id": task.item("artifact", 1), "version": 1, "implements": 1}
    assert ledger.stale_in(artifact) == 1  # it implements step version 1; 2 is committed
    assert ledger.stale_in({**artifact, "implements": 2}) == 0
    ledger.commit({**artifact, "implements": 2}, 0)
    assert ledger.stale_in({**artifact, "version": 1, "implements": 2}) == 1  # its own old copy


def test_the_check_finds_a_review_of_an_older_artifact() -> None:
    task = work.generate(1, seed=2)[0]
    state = _play(task, work.Ledger())
    review = task.item("review", 1)
    state[review] = {**state[review], "reviewed": state[review]["reviewed"] - 1}
    assert work.check_task(task, state) == ["review 1 is not of the latest artifact"]
    del state[task.item("decision", 2)]
    assert "decision 2 is not on the latest artifact" in work.check_task(task, state)


def test_knowledge_is_the_newest_version_seen_anywhere() -> None:
    prefix = "urn:t/"
    known: dict[str, dict[str, Any]] = {}
    text = json.dumps([{"@id": "urn:t/a", "version": 2, "content": "new"}])
    work.collect(f"read: {text} and more", known, prefix)
    work.collect({"node": {"@id": "urn:t/a", "version": 1, "content": "old"}}, known, prefix)
    work.collect({"@id": "urn:other/b", "version": 5}, known, prefix)
    assert known == {"urn:t/a": {"@id": "urn:t/a", "version": 2, "content": "new"}}
    work.collect('{"@id": "urn:t/a", "version": 2, "unchanged": true}', known, prefix)
    assert known["urn:t/a"]["content"] == "new"  # a reference keeps what was shown


def test_the_checker_frame_shows_only_artifacts_awaiting_review() -> None:
    task = work.generate(1, seed=0)[0]
    state = _play(task, work.Ledger())
    with Memory(embedder=HashEmbedder()) as memory:
        frames = FrameSet([*SHIPPED, *work.bench_frames()])
        projector = Projector(memory.blackboard, memory.tokens, frames=frames)
        roles = {role: work.FRAME_OF_ROLE[role] for role in work.ROLES}
        scheduler = Scheduler(projector, roles=roles)
        for role, kinds in work.WRITES.items():
            handle = memory.agent(work.AGENT_NAMES[role], role=role, task=task.iri)
            for iri in task.keys(kinds):
                handle.write([state[iri]], area=work.AREA_OF_KIND[work.kind_of(iri)])
        read = scheduler.read(task.iri, "check", budget=4_000)
        assert read.level == "l3"
        assert not any("/artifact/" in iri for iri in read.iris)  # all reviewed
        doer = memory.agent(work.AGENT_NAMES["do"], role="do", task=task.iri)
        artifact = task.item("artifact", 1)
        doer.write(
            [{**state[artifact], "version": state[artifact]["version"] + 1}], area="execution"
        )
        read = scheduler.read(task.iri, "check", budget=4_000)
        assert [iri for iri in read.iris if "/artifact/" in iri] == [artifact]
        assert '"content"' in read.text
        assert scheduler.read(task.iri, "act", budget=4_000).level == "l3"


def test_a_frame_sees_a_node_that_newly_matches_it_while_other_views_hold_it() -> None:
    # The checker's frame selects on other nodes (artifacts without a review at their version):
    # an artifact that the actor's view holds must still reach the checker's view when it moves.
    task = work.generate(1, seed=0)[0]
    with Memory(embedder=HashEmbedder()) as memory:
        frames = FrameSet([*SHIPPED, *work.bench_frames()])
        projector = Projector(memory.blackboard, memory.tokens, frames=frames)
        roles = {role: work.FRAME_OF_ROLE[role] for role in work.ROLES}
        scheduler = Scheduler(projector, roles=roles)
        doer = memory.agent("doer", role="do", task=task.iri)
        checker = memory.agent("checker", role="check", task=task.iri)
        artifact = {"@id": task.item("artifact", 1), "@type": "Artifact", "version": 1}
        doer.write([{**artifact, "content": "v1"}], area="execution")
        review = {"@id": task.item("review", 1), "@type": "Review", "version": 1}
        checker.write(
            [{**review, "artifact": {"@id": artifact["@id"]}, "reviewed": 1}], area="review"
        )
        assert artifact["@id"] not in scheduler.read(task.iri, "check", budget=2_000).iris
        assert artifact["@id"] in scheduler.read(task.iri, "act", budget=2_000).iris  # held
        doer.write([{**artifact, "version": 2, "content": "v2"}], area="execution")
        seen = scheduler.read(task.iri, "check", budget=2_000)
        assert artifact["@id"] in seen.iris
        assert '"v2"' in seen.text


def test_the_bench_matrix_lets_each_role_read_its_frame_and_changes_nothing_else() -> None:
    rules = work.bench_permissions()
    matrix = PermissionMatrix(rules)
    default = PermissionMatrix()
    frames = {f.name: f for f in work.bench_frames()}
    for role in work.ROLES:
        areas = frames[work.FRAME_OF_ROLE[role]].areas
        assert all(matrix.allows(role, area, "read") for area in areas), role
    assert not default.allows("do", "plan", "read")  # why the bench needs its own matrix
    for role in work.ROLES:
        for area in AREAS:
            for op in ("create", "update", "delete"):
                assert matrix.allows(role, area, op) == default.allows(role, area, op)
