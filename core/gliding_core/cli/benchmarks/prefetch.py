"""Benchmark of intent-driven prefetch: a multi-agent trace replayed with and without it.

The trace (generated, seeded): each task has ``entities`` L0 entries linked to 2-3 others of
the same task (and, rarely, of another), and one agent stepping through a plan of ``steps``
steps; the agents take turns, one step each. A step names two entities (written on the
blackboard as the plan step's links: the intent) and needs ``needs`` others from their
two-hop neighbourhood (a neighbour one hop away twice as likely as one two hops away), which
its frame read must see on the blackboard.

With prefetch, the step's intent goes to the prefetcher, the agent "thinks" (up to
``think_s`` seconds, the model call; the worker runs meanwhile), then reads. Without, it reads
at once. A read pages in each needed entity not yet on the blackboard (a miss, from L0), then
projects the role's frame (``pa_init``, which shows the task's knowledge). Figures: the hit
rate of needed entities, the frame read latency (page-ins included) p50 / p95, and the nodes
prefetch loaded that no read ever needed.
"""

from __future__ import annotations

import random
import statistics
import time
from collections.abc import Sequence
from typing import Any

from gliding_core.blackboard.board import Blackboard, EmbeddedGraph
from gliding_core.blackboard.vocabulary import area_graph
from gliding_core.bus import EventBus
from gliding_core.cli.benchmarks.projection import WORDS
from gliding_core.config import BlackboardConfig
from gliding_core.projection import Projector
from gliding_core.projection.prefetch import PAGE_AREA, Prefetcher
from gliding_core.projection.scheduler import Scheduler
from gliding_core.store.sqlite import L0Store
from gliding_core.tokens import TokenCounter


def trace(
    tasks: int, entities: int, steps: int, needs: int, rng: random.Random
) -> tuple[list[dict[str, Any]], list[tuple[str, int, list[str], list[str]]]]:
    """Return the L0 entities and the steps ``(task, step, named, needed)``, in turn order."""
    nodes: list[dict[str, Any]] = []
    links: dict[str, list[str]] = {}
    for t in range(tasks):
        names = [f"urn:ex:entity:{t}-{i}" for i in range(entities)]
        for iri in names:
            targets = rng.sample(names, 3)[: rng.randint(2, 3)]
            if rng.random() < 0.05:
                targets.append(f"urn:ex:entity:{rng.randrange(tasks)}-{rng.randrange(entities)}")
            links[iri] = [x for x in targets if x != iri]
    for iri, targets in links.items():
        nodes.append(
            {
                "@id": iri,
                "@type": "Entity",
                "summary": " ".join(rng.choice(WORDS) for _ in range(8)),
                "related": [{"@id": x} for x in targets],
            }
        )
    undirected: dict[str, set[str]] = {iri: set() for iri in links}
    for iri, targets in links.items():
        for target in targets:
            undirected[iri].add(target)
            undirected[target].add(iri)
    plan = []
    for step in range(steps):
        for t in range(tasks):
            named = rng.sample([n for n in links if n.startswith(f"urn:ex:entity:{t}-")], 2)
            plan.append((f"urn:ex:task:{t}", step, named, _needed(named, undirected, needs, rng)))
    return nodes, plan


def _needed(
    named: list[str], graph: dict[str, set[str]], needs: int, rng: random.Random
) -> list[str]:
    one = sorted({n for e in named for n in graph[e]} - set(named))
    two = sorted({m for n in one for m in graph[n]} - set(one) - set(named))
    pool = [(n, 2.0) for n in one] + [(n, 1.0) for n in two]
    chosen: list[str] = []
    while pool and len(chosen) < needs:
        pick = rng.choices(range(len(pool)), weights=[w for _, w in pool])[0]
        chosen.append(pool.pop(pick)[0])
    return chosen


def _page_in(board: Blackboard, store: L0Store, task: str, iris: Sequence[str]) -> int:
    """Load the entities not on the blackboard from L0 (the read path's misses)."""
    missing = [iri for iri in iris if board.read(iri) is None]
    nodes = [entry.node for entry in store.get_many(missing).values()]
    if nodes:
        graph = area_graph(task, PAGE_AREA)
        board.nodes.write(board.nodes.prepare(nodes, graph), source="read", dirty=False)
    return len(missing)


def replay(
    nodes: list[dict[str, Any]],
    plan: list[tuple[str, int, list[str], list[str]]],
    *,
    prefetch: bool,
    think_s: float,
    budget: int,
) -> dict[str, Any]:
    """Replay the trace once; return its figures."""
    store = L0Store()
    store.put_many(nodes)
    board = Blackboard(
        EmbeddedGraph(), store=store, bus=EventBus(), config=BlackboardConfig(flush_interval_s=0)
    )
    projector = Projector(board, TokenCounter())
    scheduler = Scheduler(projector, store=store)
    prefetcher = Prefetcher(board, store, start=True) if prefetch else None
    hits = misses = 0
    latencies: list[float] = []
    needed_all: set[str] = set()
    try:
        for task, step, named, needed in plan:
            board.write(
                [
                    {
                        "@id": f"{task}/step/{step}",
                        "@type": "PlanStep",
                        "summary": f"step {step}",
                        "uses": [{"@id": e} for e in named],
                    }
                ],
                task=task,
                area="plan",
                source="planner",
            )
            if prefetcher is not None:
                prefetcher.on_intent(task, named)
                prefetcher.drain(timeout=think_s)
            needed_all.update(needed)
            start = time.perf_counter()
            missed = _page_in(board, store, task, needed)
            scheduler.read(task, "plan", budget=budget)
            latencies.append((time.perf_counter() - start) * 1e3)
            misses += missed
            hits += len(needed) - missed
        loaded = list(prefetcher.loaded) if prefetcher is not None else []
    finally:
        if prefetcher is not None:
            prefetcher.close()
        projector.close()
        board.close()
        store.close()
    unused = [iri for iri in loaded if iri not in needed_all]
    cuts = statistics.quantiles(latencies, n=100, method="inclusive")
    return {
        "hit_rate": hits / (hits + misses) if hits + misses else 0.0,
        "frame_p50_ms": cuts[49],
        "frame_p95_ms": cuts[94],
        "reads": len(latencies),
        "needed": hits + misses,
        "prefetched": len(loaded),
        "prefetched_unused": len(unused),
        "prefetched_unused_share": len(unused) / len(loaded) if loaded else 0.0,
    }


def run(
    *,
    tasks: int = 4,
    entities: int = 60,
    steps: int = 10,
    needs: int = 3,
    think_s: float = 0.2,
    budget: int = 800,
    seed: int = 0,
) -> dict[str, Any]:
    """Generate the trace and replay it without and with prefetch; return both figures."""
    nodes, plan = trace(tasks, entities, steps, needs, random.Random(seed))
    return {
        "trace": {
            "tasks": tasks,
            "entities_per_task": entities,
            "steps_per_agent": steps,
            "needed_per_step": needs,
            "think_s": think_s,
            "budget": budget,
            "seed": seed,
        },
        "without_prefetch": replay(nodes, plan, prefetch=False, think_s=think_s, budget=budget),
        "with_prefetch": replay(nodes, plan, prefetch=True, think_s=think_s, budget=budget),
    }
