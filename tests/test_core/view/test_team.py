"""Role conversations and the scripted plan / do / check / act round, without a framework."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from gliding_core import (
    EventType,
    HashEmbedder,
    InvalidInputError,
    Memory,
    MemoryConfig,
    TopicConfig,
)
from gliding_core.blackboard.coordination.agents import AgentStatus
from gliding_core.testing import (
    Request,
    RoleScript,
    artifact_iri,
    node_iris,
    round_problems,
    step_iri,
    visible_nodes,
)
from gliding_core.view.team import (
    DEFAULT_NAMES,
    ROLES,
    AgentTurn,
    check_roles,
    default_names,
    instructions,
    role_conversation,
    team,
)

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


def test_a_team_is_one_agent_per_role_over_the_memorys_one_scheduler() -> None:
    config = MemoryConfig(topics=TopicConfig(interval_s=0))
    with Memory(config=config, embedder=HashEmbedder()) as memory:
        crew = team(memory, "urn:task:crew")
        tasks = memory.blackboard.coordination.tasks  # type: ignore[union-attr]
        assert "urn:task:crew" in tasks  # registered, since the coordination did not know it
        assert list(crew.handles) == list(ROLES)
        assert crew.names == default_names("urn:task:crew")
        assert memory.blackboard.coordination.agents.agents() == []  # type: ignore[union-attr]
        assert {(h.role, h.task) for h in crew.handles.values()} == {
            (role, "urn:task:crew") for role in ROLES
        }
        assert crew.scheduler is memory.scheduler
        assert [crew.next_role(role) for role in ROLES] == ["do", "check", "act", None]
        assert crew.instructions("do") == (
            f"You are {crew.names['do']}, the do agent of task urn:task:crew. What the earlier"
            " roles wrote is in your frame of the task, below. Write your work to the"
            " 'execution' area with the blackboard tools, then report in one line."
        )
        assert crew.instructions("plan", then="hand off").endswith("then hand off.")
        assert "your frame" not in instructions(crew.handles["act"], frame=False)
        again = team(memory, "urn:task:crew", names={r: f"{r}-2" for r in ROLES})
        assert again.names["check"] == "check-2"  # a known task is not registered again
        with pytest.raises(InvalidInputError, match="role must be one of"):
            crew.next_role("review")
        with pytest.raises(InvalidInputError, match="role must be one of"):
            crew.instructions("review")


def test_the_adapters_share_the_role_conversations_scheduler(memory: Memory) -> None:
    doer = memory.agent("doer", role="do", task=TASK)
    chat = role_conversation(memory, doer)
    assert chat.extra_sources[0].scheduler is memory.scheduler  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("arguments", "match"),
    [
        ({"memory": "a string"}, "memory must be a gliding Memory"),
        ({"memory": "its store"}, "memory must be a gliding Memory"),
        ({"task": "not an IRI"}, "task IRI"),
        ({"names": ["planner"]}, "names must map roles"),
        ({"names": {"plan": "p"}}, r"names need the roles .*; missing \['do', 'check', 'act'\]"),
        ({"names": {**DEFAULT_NAMES, "do": " "}}, "the name of role 'do'"),
        ({"names": {**DEFAULT_NAMES, "do": 7}}, "the name of role 'do'"),
        ({"names": {**DEFAULT_NAMES, "act": "planner"}}, "names must differ"),
        ({"names": {**DEFAULT_NAMES, "do": "the doer"}}, "agent name must be .* without spaces"),
        ({"names": {**DEFAULT_NAMES, "check": "busy"}}, "'busy' is live as 'plan' on"),
        ({"scheduler": "other"}, "scheduler must be a Scheduler over the memory's blackboard"),
        ({"scheduler": "text"}, "scheduler must be a Scheduler"),
    ],
)
def test_a_bad_team_is_refused_before_anything_is_written(
    arguments: dict[str, object], match: str
) -> None:
    config = MemoryConfig(topics=TopicConfig(interval_s=0))
    with (
        Memory(config=config, embedder=HashEmbedder()) as memory,
        Memory(config=config, embedder=HashEmbedder()) as other,
    ):
        given = {"memory": memory, "task": "urn:task:crew", **arguments}
        stand_ins = {"its store": memory.store, "other": other.scheduler}
        given = {key: stand_ins.get(str(value), value) for key, value in given.items()}
        coordination = memory.blackboard.coordination
        assert coordination is not None
        memory.agent("busy", role="plan", task="urn:task:elsewhere")
        with pytest.raises(InvalidInputError, match=match):
            team(given.pop("memory"), given.pop("task"), **given)  # type: ignore[arg-type]
        assert "urn:task:crew" not in coordination.tasks
        assert [a.name for a in coordination.agents.agents()] == ["busy"]


def test_a_role_mapping_must_name_every_role() -> None:
    models = dict.fromkeys(ROLES, "model")
    assert check_roles(models, what="models", kind="chat models") is models
    with pytest.raises(InvalidInputError, match="models must map roles to chat models, got"):
        check_roles(["model"], what="models", kind="chat models")
    with pytest.raises(InvalidInputError, match=r"llms need the roles .*missing \['act'\]"):
        check_roles({r: 1 for r in ROLES[:3]}, what="llms", kind="LLMs")


def test_an_agent_is_registered_for_its_turn_only(memory: Memory) -> None:
    coordination = memory.blackboard.coordination
    assert coordination is not None
    crew = team(memory, TASK)
    name = crew.names["do"]
    turn = AgentTurn(crew.handles["do"])
    assert not turn.active
    turn.beat()  # before its turn: nothing
    assert coordination.agents.agents() == []
    turn.start()
    agent = coordination.agents.get(name)
    assert (agent.status, agent.role, agent.task, turn.active) == (
        AgentStatus.WORKING,
        "do",
        TASK,
        True,
    )
    turn.finish()
    assert coordination.agents.agents() == []
    changes = memory.blackboard.bus.recent(EventType.AGENT_STATUS_CHANGED)
    assert [e.payload["status"] for e in changes if e.source == name] == ["Working", "Completed"]
    with pytest.raises(RuntimeError, match="the model is down"), turn.running():
        raise RuntimeError("the model is down")
    failed = coordination.agents.get(name)
    assert (failed.status, failed.incarnation) == (AgentStatus.ERROR, 1)  # kept, to say so
    with turn.running():
        assert coordination.agents.get(name).incarnation == 2  # a new incarnation
    assert coordination.agents.agents() == []
    with pytest.raises(KeyboardInterrupt), turn.running(pauses=(KeyboardInterrupt,)):
        raise KeyboardInterrupt  # a framework's interrupt: the turn waits for its resume
    assert coordination.agents.get(name).status is AgentStatus.WAITING
    assert not turn.active
    paused = coordination.agents.get(name)
    turn.start()  # resumed: the same incarnation, working again
    resumed = coordination.agents.get(name)
    assert (resumed.status, resumed.incarnation) == (AgentStatus.WORKING, paused.incarnation)
    coordination.agents.unregister(name)  # gone meanwhile (released by hand, or lost)
    turn._next_beat = 0.0  # a beat is due
    turn.beat()
    assert coordination.agents.get(name).status is AgentStatus.WORKING  # back for its turn
    turn.finish()
    with pytest.raises(InvalidInputError, match="handle must be an AgentHandle"):
        AgentTurn("doer")  # type: ignore[arg-type]


def test_default_names_are_the_roles_and_the_tasks_digest() -> None:
    names = default_names("urn:task:a")
    assert list(names) == list(ROLES)
    assert all(names[role].startswith(f"{DEFAULT_NAMES[role]}-") for role in ROLES)
    assert len({*names.values(), *default_names("urn:task:b").values()}) == 8
    with pytest.raises(InvalidInputError, match="task IRI"):
        default_names("not an IRI")
