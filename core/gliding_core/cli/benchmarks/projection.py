"""Benchmark of L3 projections: frame latency cold and cached, invalidation, budgets, tokens.

Synthetic, seeded tasks of N nodes on an in-memory blackboard, shaped like a PDCA round: the
task and its 5W2H, plans and their steps (with nested input data), artifacts with test results,
errors, reviews, decisions, and knowledge facts. For every shipped frame and every size:

- first: no view, nothing remembered (a new process): query, pyld, every token count;
- cold: one node of the frame's view rewritten, then the frame projected (the read after a
  write: query, pyld for the changed node, the counts of texts not counted before);
- cached: the same projection again, from the view cache;
each in wall-clock time and in the process's CPU time (which a loaded machine inflates less).

Invalidation is timed on bare view caches holding 10, 1,000 and 100,000 views, each node in
three views (three frames of its task), sampled in turn: the median (and p95) time to apply
one change, which must not grow with the number of views (see ``invalidation``).
``invalidation_us`` is the blackboard's ``NODE_UPDATED`` of a random node of any task;
``invalidation_node_us`` the coherence layer's node-only event; ``invalidation_hot_us`` a node
of the same three tasks at every size, which separates the algorithm from the memory hierarchy
(a random one of 100,000 views is far from the CPU); ``invalidation_floor_us`` a bare dict
lookup among as many names, the part of that no index avoids.

Budgets: every frame at 50, 100, 200 and 400 tokens and at its own default; a projection fits
when it is within its budget and shows at least one node whenever the frame has one. Tokens:
the frames' projections at their default budgets, against the raw JSON of the same task's
nodes.
"""

from __future__ import annotations

import json
import os
import random
import statistics
import time
from collections.abc import Sequence
from typing import Any

from gliding_core.blackboard.board import Blackboard, EmbeddedGraph
from gliding_core.bus import Event, EventBus, EventType
from gliding_core.projection import SHIPPED, Projector, ViewCache
from gliding_core.projection.cache import COPIES_INVALIDATED, view_key
from gliding_core.projection.projector import forget
from gliding_core.tokens import TokenCounter

_TEXT = (
    "parser token schema login form cache index query plan review budget graph node agent"
    " retry timeout latency error commit merge config session"
)
WORDS = tuple(_TEXT.split())
BUDGETS = (50, 100, 200, 400)
VIEW_COUNTS = (10, 1_000, 100_000)
_BATCH = 5_000
# area, type and share of the nodes after the task and its 5W2H
_SHAPE = (
    ("plan", "Plan", 0.02),
    ("plan", "PlanStep", 0.38),
    ("execution", "Artifact", 0.15),
    ("execution", "TestRun", 0.05),
    ("execution", "Error", 0.05),
    ("review", "Review", 0.08),
    ("decision", "Decision", 0.04),
    ("knowledge", "Fact", 0.23),
)


def _phrase(rng: random.Random, n: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(n))


def task_nodes(task: str, count: int, rng: random.Random) -> dict[str, list[dict[str, Any]]]:
    """Return ``count`` synthetic nodes of ``task`` by area (seeded by ``rng``)."""
    areas: dict[str, list[dict[str, Any]]] = {"tasks": []}
    areas["tasks"].append(
        {
            "@id": task,
            "@type": "Task",
            "summary": _phrase(rng, 8),
            "goal": _phrase(rng, 6),
            "successCriteria": _phrase(rng, 6),
            "status": "running",
        }
    )
    areas["tasks"].append({"@id": f"{task}/5w2h", "@type": "FiveW2H", "what": _phrase(rng, 5)})
    plans = max(1, int(count * _SHAPE[0][2]))
    made = 2
    for area, kind, share in _SHAPE:
        for i in range(max(1, int(count * share))):
            if made >= count:
                break
            areas.setdefault(area, []).append(_node(task, kind, i, plans, rng))
            made += 1
    return areas


def _node(task: str, kind: str, i: int, plans: int, rng: random.Random) -> dict[str, Any]:
    iri = f"{task}/{kind.lower()}/{i}"
    node: dict[str, Any] = {
        "@id": iri,
        "@type": kind,
        "summary": _phrase(rng, rng.randint(6, 14)),
        "status": rng.choice(["open", "done", "blocked"]),
        "importance": round(rng.random(), 3),
    }
    if kind == "Plan":
        node["task"] = {"@id": task}
    elif kind == "PlanStep":
        node["plan"] = {"@id": f"{task}/plan/{rng.randrange(plans)}"}
        node["instructions"] = _phrase(rng, 20)
        node["inputData"] = {"format": "json", "fields": {"names": _phrase(rng, 4)}}
    elif kind == "Error":
        node["agent"] = f"agent-{rng.randrange(4)}"
        node["errorType"] = rng.choice(["Timeout", "Crash", "Refused"])
    elif kind == "Review":
        node["verdict"] = rng.choice(["pass", "fail"])
    return node


def load(board: Blackboard, task: str, count: int, rng: random.Random) -> int:
    """Write a synthetic task of ``count`` nodes; return how many were written."""
    written = 0
    for area, nodes in task_nodes(task, count, rng).items():
        for start in range(0, len(nodes), _BATCH):
            written += len(board.write(nodes[start : start + _BATCH], task=task, area=area))
    return written


def _quantile(values: Sequence[float], cut: int) -> float:
    if len(values) < 2:
        return float(values[0]) if values else 0.0
    return statistics.quantiles(values, n=100, method="inclusive")[cut - 1]


def frame_latency(projector: Projector, task: str, repeat: int) -> dict[str, dict[str, float]]:
    """Time every shipped frame first, cold and cached over ``task``; return the figures by frame.

    - first: no view and nothing remembered (compactions, token counts): a new process;
    - cold: the view invalidated by a write of one of its nodes (a summary changed), the read
      that follows a write;
    - cached: the same projection again, from the view cache.
    """
    figures: dict[str, dict[str, float]] = {}
    for frame in SHIPPED:
        times: dict[str, list[float]] = {k: [] for k in ("first", "first_cpu", "cold", "cold_cpu")}
        cached: list[float] = []
        for round_ in range(repeat):
            forget()
            projector.cache.invalidate_task(task)
            _timed(projector, task, frame.name, times, "first")
            shown = projector.project(task, frame.name).iris
            if shown:
                _rewrite(projector.board, shown[round_ % len(shown)], round_)
            else:
                projector.cache.invalidate_task(task)
            _timed(projector, task, frame.name, times, "cold")
            for _ in range(5):
                start = time.perf_counter()
                projector.project(task, frame.name)
                cached.append((time.perf_counter() - start) * 1e3)
        figures[frame.name] = {
            **{f"{k}_p{cut}_ms": _quantile(v, cut) for k, v in times.items() for cut in (50, 95)},
            "cached_p50_ms": _quantile(cached, 50),
            "cached_p95_ms": _quantile(cached, 95),
        }
    return figures


def _timed(
    projector: Projector, task: str, frame: str, times: dict[str, list[float]], name: str
) -> None:
    start, cpu = time.perf_counter(), time.process_time()
    projector.project(task, frame)
    times[name].append((time.perf_counter() - start) * 1e3)
    times[f"{name}_cpu"].append((time.process_time() - cpu) * 1e3)


def _rewrite(board: Blackboard, iri: str, version: int) -> None:
    """Change one node's summary (a write the frame's view depends on)."""
    node = board.read(iri)
    if node is not None:
        content = {**node.node, "summary": f"{_TEXT[:40]} version {version}"}
        board.write([content], graph=node.graph)


class _Views:
    """A bare view cache of ``count`` views, three per task, ten nodes each, one graph per task."""

    def __init__(self, count: int) -> None:
        self.count = count
        self.cache = ViewCache(max_views=max(count, 1))
        self.groups = max(1, count // 3)
        self.members: list[tuple[Any, frozenset[str], tuple[str]]] = []
        for v in range(count):
            iris = frozenset(f"urn:ex:n{v // 3}-{j}" for j in range(10))
            key = view_key(f"urn:ex:task{v // 3}", f"frame{v % 3}", {})
            graphs = (f"urn:ex:graph{v // 3}",)
            self.members.append((key, iris, graphs))
            self.cache.put(key, (), iris, graphs, since=self.cache.sequence)
        self.floor = {f"urn:ex:graph{g}": g for g in range(self.groups)}

    def event(self, group: int, node: int, kind: str) -> Event:
        iri, graph = f"urn:ex:n{group}-{node}", f"urn:ex:graph{group}"
        if kind == "node":  # the coherence layer's: the node only
            return Event(COPIES_INVALIDATED, {"iri": iri, "generation": 2})
        return Event(EventType.NODE_UPDATED.value, {"iri": iri, "graph": graph, "generation": 2})

    def restore(self, group: int) -> None:
        for key, iris, graphs in self.members[group * 3 : group * 3 + 3]:
            self.cache.put(key, (), iris, graphs, since=self.cache.sequence)


def invalidation(
    counts: Sequence[int] = VIEW_COUNTS, *, samples: int = 20_000, seed: int = 0
) -> dict[str, dict[str, float]]:
    """Time one changed node's invalidation among each of ``counts`` views; microseconds.

    The caches are built first and then sampled in turn (one change in each per round), so a
    burst of load on the machine falls on every size alike. Each figure is the median (and
    95th percentile) of ``samples`` changes, with the garbage collector on, as a user runs:

    - ``graph``: the ``NODE_UPDATED`` the blackboard publishes for a node of a random task;
    - ``node``: a node-only event of the coherence layer (``COPIES_INVALIDATED``);
    - ``hot``: a node of the same three tasks at every size (no cache misses: the algorithm);
    - ``floor``: a bare ``dict.get`` of a random task's graph among as many graphs, the cost of
      reaching a random one of that many objects that any index pays.

    The invalidated views are put back between samples, outside the timing.
    """
    rng = random.Random(seed)
    setups = [_Views(count) for count in counts]
    kinds = ("graph", "node", "hot", "floor")
    times: dict[tuple[int, str], list[int]] = {(s.count, k): [] for s in setups for k in kinds}
    clock = time.perf_counter_ns
    for _ in range(samples):
        for setup in setups:
            for kind in kinds:
                groups = min(3, setup.groups) if kind == "hot" else setup.groups
                group = rng.randrange(groups)
                if kind == "floor":
                    name = f"urn:ex:graph{group}"
                    start = clock()
                    setup.floor.get(name)
                    times[setup.count, kind].append(clock() - start)
                    continue
                event = setup.event(group, rng.randrange(10), kind)
                start = clock()
                setup.cache.on_event(event)
                times[setup.count, kind].append(clock() - start)
                setup.restore(group)
    figures: dict[str, dict[str, float]] = {}
    for kind in kinds:
        for cut, label in ((50, ""), (95, "_p95")):
            figures[f"{kind}{label}"] = {
                str(s.count): _quantile(times[s.count, kind], cut) / 1e3 for s in setups
            }
    return figures


def budgets(projector: Projector, task: str) -> tuple[int, int, dict[str, int]]:
    """Project every frame at every budget; return (fitted, total, steps taken)."""
    fitted = total = 0
    steps: dict[str, int] = {}
    for frame in SHIPPED:
        for budget in (*BUDGETS, frame.max_tokens):
            projection = projector.project(task, frame.name, budget=budget)
            total += 1
            steps[projection.step] = steps.get(projection.step, 0) + 1
            shows = bool(projection.iris) or projection.total == 0
            fitted += int(projection.tokens <= budget and shows)
    return fitted, total, steps


def raw_tokens(board: Blackboard, task: str, counter: TokenCounter) -> int:
    """Return the tokens of the task's nodes as raw JSON (what a model gets without L3)."""
    return counter.count(json.dumps([n.node for n in board.by_task(task)]))


def run(
    sizes: Sequence[int] = (1_000, 10_000),
    *,
    repeat: int = 30,
    views: Sequence[int] = VIEW_COUNTS,
    changes: int = 20_000,
    seed: int = 0,
) -> dict[str, Any]:
    """Run the benchmark; return the figures (see the module docstring)."""
    rng = random.Random(seed)
    counter = TokenCounter()
    by_size: dict[str, Any] = {}
    fitted = total = 0
    steps: dict[str, int] = {}
    tokens: list[int] = []
    raws: list[int] = []
    for size in sizes:
        with Blackboard(EmbeddedGraph(), bus=EventBus(history=0)) as board:
            projector = Projector(board, counter)
            task = f"urn:ex:bench:task-{size}"
            start = time.perf_counter()
            load(board, task, size, rng)
            load(board, f"urn:ex:bench:other-{size}", min(size, 1_000), rng)
            load_s = time.perf_counter() - start
            frames = frame_latency(projector, task, repeat)
            by_size[str(size)] = {"load_s": load_s, "frames": frames}
            f, t, s = budgets(projector, task)
            fitted, total = fitted + f, total + t
            for step, n in s.items():
                steps[step] = steps.get(step, 0) + n
            tokens += [projector.project(task, frame.name).tokens for frame in SHIPPED]
            raws += [raw_tokens(board, task, counter)] * len(SHIPPED)
            projector.close()
    largest = by_size[str(max(sizes))]["frames"]
    invalidations = invalidation(views, samples=changes, seed=seed)
    return {
        "frames": {
            name: {**largest[name], "by_nodes": {k: v["frames"][name] for k, v in by_size.items()}}
            for name in largest
        },
        "invalidation_us": invalidations["graph"],
        "invalidation_p95_us": invalidations["graph_p95"],
        "invalidation_node_us": invalidations["node"],
        "invalidation_node_p95_us": invalidations["node_p95"],
        "invalidation_hot_us": invalidations["hot"],
        "invalidation_floor_us": invalidations["floor"],
        "budget_fit_share": fitted / total if total else 0.0,
        "budget_steps": steps,
        "tokens_mean": statistics.fmean(tokens) if tokens else 0.0,
        "raw_tokens_mean": statistics.fmean(raws) if raws else 0.0,
        "nodes": list(sizes),
        "load_s": {k: v["load_s"] for k, v in by_size.items()},
        "repeat": repeat,
        "load_average": os.getloadavg()[0] if hasattr(os, "getloadavg") else None,
    }
