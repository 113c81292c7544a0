"""Benchmark of scoped recall: what the scope's SQL filter costs, and what it keeps out.

Synthetic, seeded data: ``users`` users, each with ``turns`` turns recorded through their own
scoped ``Conversation`` (so each turn is tagged, as the adapters archive it), and three pending
supplementary inputs per user. Every user's turns share a topic vocabulary (and carry a word of
their own); a query is two topic words, as any user may ask. Each query is timed twice in the
same run, over the same memory: the unfiltered hybrid search recall used before scoping (the
baseline) and the scoped one. The figures: p50 and p95 latency of each, their ratio, the share
of the baseline's hits that belonged to another user or were supplementary inputs, and how many
of the scoped search's hits did (it must be none).

Run: ``python -m gliding_core.cli.benchmarks.scope [--users 10] [--turns 100] [--queries 200]``.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from typing import Any

from gliding_core.cli.table import render
from gliding_core.config import MemoryConfig, TopicConfig
from gliding_core.hyperspace.embedders import Embedder, HashEmbedder, embedder_name
from gliding_core.memory import Memory
from gliding_core.store.filters import SearchFilters
from gliding_core.store.scope import INPUT_TYPE, Scope
from gliding_core.view.conversation import Conversation

TOPIC = ["invoice", "shipment", "refund", "password", "account", "order", "delivery", "plan"]
K = 10


def run(
    users: int, turns: int, embedder: Embedder, *, queries: int = 200, seed: int = 0
) -> dict[str, Any]:
    """Build the memory, time ``queries`` searches each way, return the figures."""
    rng = random.Random(seed)
    config = MemoryConfig(topics=TopicConfig(interval_s=0))
    with Memory(config=config, embedder=embedder) as memory:
        scopes = [Scope.user(f"user{u}") for u in range(users)]
        for scope in scopes:
            own = f"{scope.key}word"
            chat = Conversation(memory, scope=scope)
            chat.record([_turn(rng, own, i) for i in range(turns)])
            for i in range(3):
                memory.supplements.put(scope.task_iri, f"{own} {rng.choice(TOPIC)} update {i}")
        plain, scoped, foreign, leaked = [], [], [], 0
        for i in range(queries):
            scope = scopes[i % users]
            query = f"my {' '.join(rng.sample(TOPIC, 2))}"  # what any user may ask
            plain.append(_timed(memory, query, None))
            scoped.append(_timed(memory, query, scope.filters()))
            hits = memory.search(query, K)
            foreign.append(sum(not _belongs(hit.entry, scope) for hit in hits) / max(len(hits), 1))
            kept = memory.search(query, K, filters=scope.filters())
            leaked += sum(not _belongs(hit.entry, scope) for hit in kept)
    return {
        "users": users,
        "turns_per_user": turns,
        "entries": users * (turns + 3),
        "embedder": embedder_name(embedder),
        "baseline_p50_ms": _cut(plain, 50),
        "baseline_p95_ms": _cut(plain, 95),
        "scoped_p50_ms": _cut(scoped, 50),
        "scoped_p95_ms": _cut(scoped, 95),
        "scoped_over_baseline_p50": _cut(scoped, 50) / _cut(plain, 50),
        "baseline_foreign_hit_share": statistics.fmean(foreign),
        "scoped_foreign_hits": leaked,
    }


def _turn(rng: random.Random, own: str, index: int) -> dict[str, Any]:
    words = " ".join(rng.sample(TOPIC, 3))
    return {"role": "user", "content": f"{own} asks about the {words} number {index}."}


def _timed(memory: Memory, query: str, filters: SearchFilters | None) -> float:
    start = time.perf_counter()
    memory.search(query, K, filters=filters)
    return (time.perf_counter() - start) * 1e3


def _belongs(entry: Any, scope: Scope) -> bool:
    return scope.tag in entry.tags and INPUT_TYPE not in entry.jsonld_types


def _cut(values: list[float], percent: int) -> float:
    return statistics.quantiles(values, n=100, method="inclusive")[percent - 1]


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark from the command line and print its table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--users", type=int, default=10)
    parser.add_argument("--turns", type=int, default=100)
    parser.add_argument("--queries", type=int, default=200)
    args = parser.parse_args(argv)
    figures = run(args.users, args.turns, HashEmbedder(), queries=args.queries)
    rows = [(name, value) for name, value in figures.items()]
    sys.stdout.write(render(["figure", "value"], rows, title="Scoped recall") + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
