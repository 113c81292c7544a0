"""CLI: the blackboard part of ``gliding-horse demo``: one plan/do/check/act round on one task.

Four agents register on the L2 blackboard, each takes a write lease on the node it writes (and
releases it), writes to its area with the lease's token, is refused where the permission matrix
forbids, they exchange a message, and the finished task is flushed to L0. Writes to the stream
it is given; works on the memory it is given.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, TextIO

from gliding_core.blackboard.board import AgentHandle
from gliding_core.blackboard.coordination.leases import Lease
from gliding_core.blackboard.vocabulary import PROLOGUE, area_graph
from gliding_core.cli.table import render
from gliding_core.errors import GlidingError
from gliding_core.memory import Memory

TASK = "urn:demo:task/refund-endpoint"
PLAN = "urn:demo:bb/plan"
CODE = "urn:demo:bb/code"
REVIEW = "urn:demo:bb/review"
DECISION = "urn:demo:bb/decision"


def run(out: TextIO, memory: Memory) -> None:
    """Run the round on ``memory``'s blackboard and write what happens."""
    board = memory.blackboard
    if board.coordination is None:
        raise AssertionError("the demo needs the blackboard's coordination layer")
    board.coordination.tasks.register(TASK)
    team = {
        role: memory.agent(name, role=role, task=TASK)
        for name, role in [
            ("planner", "plan"),
            ("coder", "do"),
            ("reviewer", "check"),
            ("lead", "act"),
        ]
    }
    refusals: list[tuple[str, str, str]] = []
    team["plan"].start_task()
    leases = [
        _plan(team["plan"]),
        _do(team["do"], refusals),
        _check(team["check"], refusals),
        _act(team["act"], refusals),
    ]
    _say(out, "L2: four agents on one task (plan, do, check, act)", _agents_table(memory))
    _say(
        out,
        "Leases: each write presented its token; each lease was released after",
        render(
            ["agent", "node", "mode", "token"],
            [(x.holder, x.resource, x.mode.value, x.token) for x in leases],
        ),
    )
    _say(
        out,
        "Refused by the permission matrix (nothing was written or read)",
        render(["agent", "tried", "refusal"], refusals),
    )
    messages = team["do"].messages()
    _say(
        out,
        "Coordination messages of the task (durable, in order)",
        render(
            ["seq", "topic", "from", "payload"],
            [(m.sequence, m.topic, m.sender or "-", str(dict(m.payload))) for m in messages],
        ),
    )
    seen = team["check"].query(PROLOGUE + "SELECT DISTINCT ?s WHERE { ?s ?p ?o } ORDER BY ?s")
    _say(
        out,
        "The reviewer's SPARQL sees only the graphs its role may read",
        "\n".join(row["s"] for row in seen.values()),
    )
    through = memory.store.get(DECISION)
    before = [iri for iri in (PLAN, CODE, REVIEW) if memory.store.get(iri) is not None]
    team["act"].complete_task()
    after = [iri for iri in (PLAN, CODE, REVIEW, DECISION) if memory.store.get(iri) is not None]
    _say(
        out,
        "Write-back to L0",
        "the decision (tag confirmed_fact) was in L0 before the task ended:"
        f" {through is not None}\nother nodes in L0 before completion: {len(before)};"
        f" after: {len(after)} of 4",
    )


def _plan(planner: AgentHandle) -> Lease:
    lease = _write_leased(
        planner,
        {
            "@id": PLAN,
            "@type": "Plan",
            "summary": "POST /refunds, idempotent, audited",
            "steps": ["validate the payment", "call the vault", "write the audit row"],
        },
        area="plan",
    )
    planner.publish("plan-ready", {"plan": PLAN, "steps": 3})
    return lease


def _do(coder: AgentHandle, refusals: list[tuple[str, str, str]]) -> Lease:
    coder.set_status("Working", operation="coding the refund endpoint")
    _try(refusals, "coder", "read the plan area", lambda: coder.read(PLAN))
    ready = coder.messages(topic="plan-ready")[-1]
    lease = _write_leased(
        coder,
        {
            "@id": CODE,
            "@type": "Result",
            "summary": "refund endpoint with tests",
            "implements": {"@id": str(ready.payload["plan"])},
        },
        area="execution",
    )
    _try(
        refusals,
        "coder",
        "write a review",
        lambda: coder.write([{"@id": REVIEW, "verdict": "great"}], area="review"),
    )
    coder.publish("code-ready", {"result": CODE})
    return lease


def _check(reviewer: AgentHandle, refusals: list[tuple[str, str, str]]) -> Lease:
    code = reviewer.read(CODE)
    lease = _write_leased(
        reviewer,
        {
            "@id": REVIEW,
            "@type": "Review",
            "verdict": "approve",
            "about": {"@id": CODE},
            "note": f"checked generation {code.generation if code else 0}",
        },
        area="review",
    )
    _try(
        refusals,
        "reviewer",
        "update the code",
        lambda: reviewer.write([{"@id": CODE, "summary": "rewritten"}], area="execution"),
    )
    return lease


def _act(lead: AgentHandle, refusals: list[tuple[str, str, str]]) -> Lease:
    review = lead.read(REVIEW)
    lease = _write_leased(
        lead,
        {
            "@id": DECISION,
            "@type": "Decision",
            "summary": "ship the refund endpoint",
            "basedOn": {"@id": REVIEW},
            "verdict": review.node["verdict"] if review else "-",
        },
        area="decision",
        tags=["confirmed_fact"],
    )
    _try(refusals, "lead", "run SPARQL UPDATE", lambda: lead.query("CLEAR ALL"))
    return lease


def _write_leased(
    agent: AgentHandle, node: dict[str, Any], *, area: str, tags: Sequence[str] = ()
) -> Lease:
    """Write ``node`` under the agent's Write lease on its IRI, held for the write only."""
    with agent.hold(node["@id"]) as lease:
        agent.write([node], area=area, tags=tags, lease_token=lease.token)
    return lease


def _try(refusals: list[tuple[str, str, str]], agent: str, what: str, action: object) -> None:
    try:
        action()  # type: ignore[operator]
    except GlidingError as error:
        refusals.append((agent, what, f"{type(error).__name__}: {error}"[:90]))
    else:
        raise AssertionError(f"{agent} was allowed to {what}")


def _agents_table(memory: Memory) -> str:
    board = memory.blackboard
    rows = []
    for node in board.by_type("Agent", task=TASK):
        agent = node.node
        rows.append((agent["name"], agent["role"], agent["status"], agent.get("operation", "-")))
    written = [
        (n.iri.removeprefix("urn:demo:bb/"), n.graph.rsplit(":", 2)[-2], n.generation)
        for n in board.by_task(TASK, ["plan", "execution", "review", "decision"])
    ]
    return (
        render(["agent", "role", "status", "operation"], rows)
        + "\n\n"
        + render(["node", "area", "generation"], written)
        + f"\n(areas are named graphs, e.g. {area_graph(TASK, 'plan')})"
    )


def _say(out: TextIO, title: str, body: str) -> None:
    out.write(f"\n== {title}\n{body}\n")
