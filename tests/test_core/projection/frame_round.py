"""A plan/do/check/act round on a memory's blackboard, written through agent handles.

Shared by the frame-artifact tests of the core and of both adapters. The task's own node and
its 5W2H are the coordination layer's (``tasks`` area, written as the system), the fact is
written into ``knowledge`` as the system, as L0 entries paged in are; everything else is
written by the four agents of the round, each through its handle in its role's area.
"""

from __future__ import annotations

from gliding_core import AgentHandle, Memory

# What each shipped frame shows of a round (by the keys ``pdca_round`` returns); "agents" is
# the round's four Agent nodes, mirrored by the coordination layer (they have a status).
EXPECTED = {
    "summary_only": {"task", "fact", "plan", "step", "art", "res", "rev", "dec"},
    "pa_init": {"task", "plan", "fact"},
    "da_input": {"plan", "step"},
    "ca_review": {"task", "art"},
    "aa_decision": {"rev", "dec"},
    "health_check": {"task", "agents"},
    "error_analysis": {"err"},
    "reference_only": {
        "task",
        "5w",
        "fact",
        "plan",
        "step",
        "art",
        "res",
        "err",
        "rev",
        "dec",
        "agents",
    },
    "5w2h_summary": {"5w"},
}
ROLES = ("plan", "do", "check", "act")


def team(memory: Memory, task: str, tag: str) -> dict[str, AgentHandle]:
    """Return the round's four agents on ``task``, by role."""
    return {role: memory.agent(f"{tag}-{role}", role=role, task=task) for role in ROLES}


def pdca_round(memory: Memory, task: str, tag: str) -> dict[str, str]:
    """Write one round on ``task``; return the IRIs written by what they are."""
    iris = {name: f"{task}/{name}" for name in ("plan", "step", "art", "res", "rev", "dec")}
    iris |= {"err": f"{task}/err", "5w": f"{task}/5w", "fact": f"{task}/fact", "task": task}
    board = memory.blackboard
    agents = team(memory, task, tag)
    board.write(
        [
            {
                "@id": task,
                "@type": "Task",
                "summary": f"{tag}: build the feature",
                "goal": f"{tag} goal",
                "successCriteria": f"{tag} tests pass",
                "status": "running",
                "resources": {"@id": iris["fact"]},
            },
            {"@id": iris["5w"], "@type": "FiveW2H", "what": f"{tag} what", "why": "users"},
        ],
        task=task,
        area="tasks",
    )
    board.write(
        [{"@id": iris["fact"], "@type": "Fact", "summary": f"{tag} known fact about sessions"}],
        task=task,
        area="knowledge",
    )
    agents["plan"].write(
        [
            {"@id": iris["plan"], "@type": "Plan", "task": {"@id": task}, "summary": f"{tag} plan"},
            {
                "@id": iris["step"],
                "@type": "PlanStep",
                "plan": {"@id": iris["plan"]},
                "summary": f"{tag} write the html form",
                "instructions": "use html",
                "inputData": {"format": "html", "detail": {"width": 3}},
            },
        ],
        area="plan",
    )
    agents["do"].write(
        [
            {
                "@id": iris["art"],
                "@type": "Artifact",
                "summary": f"{tag} form.html",
                "storagePath": "/src/form.html",
                "results": {"@id": iris["res"]},
            },
            {"@id": iris["res"], "@type": "TestRun", "summary": f"{tag} 3 passed", "passed": 3},
            {"@id": iris["err"], "@type": "Error", "agent": "do-1", "errorType": "Timeout"},
        ],
        area="execution",
    )
    agents["check"].write(
        [{"@id": iris["rev"], "@type": "Review", "summary": f"{tag} review ok", "verdict": "pass"}],
        area="review",
    )
    agents["act"].write(
        [{"@id": iris["dec"], "@type": "Decision", "summary": f"{tag} merge", "decision": "go"}],
        area="decision",
    )
    return iris


def expected_iris(memory: Memory, task: str, iris: dict[str, str], frame: str) -> set[str]:
    """Return the IRIs ``frame`` shows of the round written on ``task``."""
    wanted = EXPECTED[frame]
    found = {iris[key] for key in wanted if key != "agents"}
    if "agents" in wanted:
        found |= {node.iri for node in memory.blackboard.by_type("Agent", task=task)}
    return found
