"""Benchmark of the token economy of shared nodes: a multi-call round with and without a ledger.

One agent's frame source (role ``do``: the ``da_input`` frame) over a task of a plan and its
steps on an in-memory blackboard, asked once per model call of a round. Before every call but
the first, another agent rewrites each step with the write probability: its status (a few
tokens) or its instructions (most of the node), half and half, always to a new value. Each
call's frame part is counted exactly with the memory's counter, in three modes on the same
writes:

- ``whole``: no ledger, the view whole at every call (what ``FrameSource`` does by default);
- ``reference``: ``SeenNodes()``: whole once, then changes, and a line per unchanged node;
- ``omit``: ``SeenNodes(unchanged="omit")``: unchanged nodes left out.

``stale_references`` counts the calls where a step written since the last call was shown as a
reference (the economy must never do it). Tokens are sums over the round, means over the seeds.
"""

from __future__ import annotations

import random
import statistics
from collections.abc import Sequence
from typing import Any

from gliding_core.blackboard.board import Blackboard, EmbeddedGraph
from gliding_core.bus import EventBus
from gliding_core.coherence.seen import SeenNodes
from gliding_core.projection import Projector
from gliding_core.scheduler import FrameSource, Scheduler
from gliding_core.sources import SourceRequest
from gliding_core.tokens import TokenCounter

TASK = "urn:bench:economy:task"
PLAN = f"{TASK}/plan"
MODES = ("whole", "reference", "omit")
WRITE_PROBABILITIES = (0.05, 0.10, 0.25, 0.50)
_TEXT = (
    "parse input schema validate field cache result index query plan review budget write tests "
    "graph node agent export report merge"
)
_WORDS = tuple(_TEXT.split())
_STATUSES = ("open", "running", "blocked", "done")


def run(
    *,
    steps: int = 12,
    calls: int = 20,
    seeds: int = 3,
    write_probabilities: Sequence[float] = WRITE_PROBABILITIES,
    budget: int = 8_000,
    counter: TokenCounter | None = None,
) -> dict[str, Any]:
    """Replay the round for every write probability and seed; return the figures."""
    counter = counter or TokenCounter()
    rounds: dict[str, Any] = {}
    for probability in write_probabilities:
        runs = [_round(steps, calls, probability, seed, budget, counter) for seed in range(seeds)]
        figures: dict[str, Any] = {m: round(statistics.fmean(r[m] for r in runs)) for m in MODES}
        figures["stale_references"] = sum(r["stale_references"] for r in runs)
        for mode in ("reference", "omit"):
            figures[f"{mode}_vs_whole"] = round(figures[mode] / figures["whole"], 3)
        rounds[f"{probability:.2f}"] = figures
    return {"steps": steps, "calls": calls, "seeds": seeds, "budget": budget, "rounds": rounds}


def _round(
    steps: int, calls: int, probability: float, seed: int, budget: int, counter: TokenCounter
) -> dict[str, int]:
    rng = random.Random(seed)
    with Blackboard(EmbeddedGraph(), bus=EventBus()) as board:
        board.write([_plan()] + [_step(i, rng) for i in range(steps)], task=TASK, area="plan")
        projector = Projector(board, counter)
        scheduler = Scheduler(projector)
        sources: dict[str, FrameSource] = {
            "whole": scheduler.source(TASK, "do"),
            "reference": scheduler.source(TASK, "do", seen=SeenNodes()),
            "omit": scheduler.source(TASK, "do", seen=SeenNodes(unchanged="omit")),
        }
        totals = dict.fromkeys((*MODES, "stale_references"), 0)
        for call in range(calls):
            changed = _writes(board, steps, probability, rng) if call else []
            for mode, source in sources.items():
                part = source.fill(SourceRequest(None, budget))
                totals[mode] += part.tokens
                if mode != "whole":
                    totals["stale_references"] += sum(
                        f"{iri} (generation" in part.text for iri in changed
                    )
        projector.close()
    return totals


def _writes(board: Blackboard, steps: int, probability: float, rng: random.Random) -> list[str]:
    changed = []
    for i in range(steps):
        if rng.random() >= probability:
            continue
        node = board.read(_iri(i))
        assert node is not None  # written at the start, never deleted
        value = node.node
        if rng.random() < 0.5:
            value["status"] = rng.choice([s for s in _STATUSES if s != value["status"]])
        else:
            value["instructions"] = _sentence(rng, 60)
        board.write([value], task=TASK, area="plan", source="other-agent")
        changed.append(_iri(i))
    return changed


def _plan() -> dict[str, Any]:
    return {"@id": PLAN, "@type": "Plan", "task": {"@id": TASK}, "summary": "the release plan"}


def _step(i: int, rng: random.Random) -> dict[str, Any]:
    return {
        "@id": _iri(i),
        "@type": "PlanStep",
        "plan": {"@id": PLAN},
        "summary": f"step {i}: " + _sentence(rng, 10),
        "instructions": _sentence(rng, 60),
        "language": "python",
        "status": "open",
        "importance": round(rng.random(), 2),
    }


def _iri(i: int) -> str:
    return f"{TASK}/step/{i}"


def _sentence(rng: random.Random, words: int) -> str:
    return " ".join(rng.choice(_WORDS) for _ in range(words))
