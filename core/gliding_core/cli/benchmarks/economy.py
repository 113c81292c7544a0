"""Benchmark of the token economy of shared nodes: a multi-call round with and without a ledger.

One agent's frame source (role ``do``: the ``da_input`` frame) over a task of a plan and its
steps on an in-memory blackboard, asked once per model call of a round. Before every call but
the first, another agent rewrites each step with the write probability: its status (a few
tokens) or its instructions (most of the node), half and half, always to a new value. Each
call's frame part is counted exactly with the memory's counter, in three modes on the same
writes:

- ``whole``: no ledger, the view whole at every call (what ``FrameSource`` does by default);
- ``reference``: ``SeenNodes()``: whole once, then changes, and a line per unchanged node;
- ``omit``: ``SeenNodes(unchanged="omit")``: unchanged nodes left out;
- ``request``: ``FrameSource(seen="request")``, the economy of an agent whose memory message is
  rebuilt every call (role agents): nothing of the earlier frames is kept, and the ledger of a
  call is the copies its request holds. The agent works on one step a call, reading it with
  ``read_node`` (step ``call mod steps``); the request holds the results of its last
  ``window`` reads (its window of messages), each at the generation it was read at. Those
  steps are references while unchanged, changes once rewritten; the others whole.

``stale_references`` counts the calls where a step written since the last call was shown as a
reference (the economy must never do it: every copy was read before those writes). Tokens are
sums over the round, means over the seeds; the copies themselves are not counted (the agent's
reads put them in its request in every mode).
"""

from __future__ import annotations

import random
import statistics
from collections import deque
from collections.abc import Sequence
from typing import Any

from gliding_core.blackboard.board import Blackboard, EmbeddedGraph
from gliding_core.bus import EventBus
from gliding_core.coherence.seen import SeenNodes, SharedNode
from gliding_core.projection import Projector
from gliding_core.projection.scheduler import Scheduler
from gliding_core.tokens import TokenCounter
from gliding_core.view.frame_source import FrameSource
from gliding_core.view.sources import SourceRequest

TASK = "urn:bench:economy:task"
PLAN = f"{TASK}/plan"
MODES = ("whole", "reference", "omit", "request")
WINDOW = 6  # the reads an agent's window of messages holds in the ``request`` mode
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
        for mode in ("reference", "omit", "request"):
            figures[f"{mode}_vs_whole"] = round(figures[mode] / figures["whole"], 3)
        rounds[f"{probability:.2f}"] = figures
    return {
        "steps": steps,
        "calls": calls,
        "seeds": seeds,
        "budget": budget,
        "window": WINDOW,
        "rounds": rounds,
    }


def _round(
    steps: int, calls: int, probability: float, seed: int, budget: int, counter: TokenCounter
) -> dict[str, int]:
    rng = random.Random(seed)
    with Blackboard(EmbeddedGraph(), bus=EventBus()) as board:
        board.write([_plan()] + [_step(i, rng) for i in range(steps)], task=TASK, area="plan")
        projector = Projector(board, counter)
        scheduler = Scheduler(projector)
        sources: dict[str, FrameSource] = {
            "whole": FrameSource(scheduler, TASK, "do"),
            "reference": FrameSource(scheduler, TASK, "do", seen=SeenNodes()),
            "omit": FrameSource(scheduler, TASK, "do", seen=SeenNodes(unchanged="omit")),
            "request": FrameSource(scheduler, TASK, "do", seen="request"),
        }
        totals = dict.fromkeys((*MODES, "stale_references"), 0)
        held: deque[SharedNode] = deque(maxlen=WINDOW)  # the read_node results in the window
        for call in range(calls):
            changed = _writes(board, steps, probability, rng) if call else []
            for mode, source in sources.items():
                copies = tuple(held) if mode == "request" else ()
                part = source.fill(SourceRequest(None, budget, copies=copies))
                totals[mode] += part.tokens
                if mode != "whole":
                    totals["stale_references"] += sum(
                        f"{iri} (generation" in part.text for iri in changed
                    )
            read = board.read(_iri(call % steps))  # this call's work: one step, read
            assert read is not None
            held.append(SharedNode(read.iri, read.generation, read.node))
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
