"""Role conversations and the scripted plan / do / check / act round, without a framework."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from gliding_core import HashEmbedder, InvalidInputError, Memory, MemoryConfig, TopicConfig
from gliding_core.testing import (
    Request,
    RoleScript,
    artifact_iri,
    node_iris,
    round_problems,
    step_iri,
    visible_nodes,
)
from gliding_core.view.team import role_conversation

TASK = "urn:task:core-round"


@pytest.fixture
def memory() -> Iterator[Memory]:
    config = MemoryConfig(topics=TopicConfig(interval_s=0))
    with Memory(config=config, embedder=HashEmbedder()) as value:
        value.blackboard.coordination.tasks.register(TASK)  # type: ignore[union-attr]
        yield value


def test_a_request_reads_back_what_it_writes() -> None:
    request = Request("refunds", ("validate", "call the vault"))
    assert Request.parse(request.text) == request
    assert Request.parse("no structure here") == Request("", ())


def test_visible_nodes_finds_every_quoted_node_and_skips_bare_references() -> None:
    text = 'frame: {"@graph":[{"@id":"urn:a","@type":"Step","plan":{"@id":"urn:p"}}]} and {bad'
    assert visible_nodes([text]) == {
        "urn:a": {"@id": "urn:a", "@type": "Step", "plan": {"@id": "urn:p"}}
    }


def test_a_script_acts_once_on_what_it_is_shown_then_reports() -> None:
    script = RoleScript("do", TASK)
    frame = json.dumps(
        {"@graph": [{"@id": step_iri(TASK, 1), "@type": "Step", "instructions": "x"}]}
    )
    seen = [{"role": "system", "content": frame}, {"role": "user", "content": "Goal: g\nSteps: x"}]
    move = script(seen)
    assert move == script(seen)  # deterministic
    assert [c.name for c in move.calls] == ["write_node", "post_message"]
    assert move.calls[0].args["node"]["@id"] == artifact_iri(TASK, 1)
    assert move.calls[0].args["based_on"] == 0
    calls = [{"id": c.id, "name": c.name, "args": c.args} for c in move.calls]
    done = [
        *seen,
        {"role": "assistant", "content": "", "tool_calls": calls},
        {"role": "tool", "content": "Error: not permitted", "tool_call_id": calls[0]["id"]},
        {"role": "user", "content": "a late note"},
    ]
    assert script(done).text == "do: 2 tool calls, 1 refused; noted: a late note"
    # Shown nothing of the plan (the user's text is not the frame), it writes no artifact.
    assert [c.name for c in script(seen[1:]).calls] == ["post_message"]
    with pytest.raises(InvalidInputError, match="role must be one of"):
        RoleScript("review", TASK)


def test_round_problems_says_what_is_missing(memory: Memory) -> None:
    assert round_problems(memory.blackboard, TASK, 1) == [
        f"no plan node {node_iris(TASK)['plan']}",
        f"no review node {node_iris(TASK)['review']}",
        f"no decision node {node_iris(TASK)['decision']}",
        "no step 1",
        "no artifact of step 1",
        "the task is pending",
    ]


def test_role_conversation_shows_the_frame_and_checks_its_parts(memory: Memory) -> None:
    planner = memory.agent("planner", role="plan", task=TASK)
    planner.write([{"@id": step_iri(TASK, 1), "@type": "Step", "plan": {"@id": f"{TASK}/plan"},
                    "instructions": "validate"}], area="plan")  # fmt: skip
    doer = memory.agent("doer", role="do", task=TASK)
    chat = role_conversation(memory, doer, budget=600)
    assert (chat.settings.agent, chat.settings.role, chat.task_iri) == ("doer", "do", TASK)
    view = chat.view([{"role": "user", "content": "go", "id": "m1"}])
    assert step_iri(TASK, 1) in view.memory
    assert [p.source for p in view.parts][-1] == "frame"
    with Memory(embedder=HashEmbedder()) as other:
        with pytest.raises(InvalidInputError, match="on the memory's blackboard"):
            role_conversation(other, doer)
        with pytest.raises(InvalidInputError, match="Scheduler over the handle's"):
            role_conversation(memory, doer, scheduler=other.scheduler)
    with pytest.raises(InvalidInputError, match="recall_filters"):
        role_conversation(memory, doer, recall_filters="tags")  # type: ignore[arg-type]


def test_an_empty_frame_falls_back_to_its_own_areas_only(memory: Memory) -> None:
    planner = memory.agent("planner", role="plan", task=TASK)
    planner.write([{"@id": f"{TASK}/plan", "@type": "Plan", "summary": "the secret plan"}],
                  area="plan")  # fmt: skip
    decider = memory.agent("decider", role="act", task=TASK)
    query = [{"role": "user", "content": "decide", "id": "m1"}]
    # The scheduler's own fallback (every area of the task) would show the decider the plan.
    assert "the secret plan" in memory.scheduler.read(TASK, "act", budget=400).text
    chat = role_conversation(memory, decider, budget=600)
    assert "the secret plan" not in chat.view(query).memory
    # A node in the frame's areas that the frame does not select is shown instead.
    memory.blackboard.write(
        [{"@id": f"{TASK}/memo", "summary": "a memo"}], task=TASK, area="decision"
    )
    view = chat.view(query)
    assert "a memo" in view.memory
    assert "the secret plan" not in view.memory
