"""Benchmark of long-term recall on LoCoMo: hybrid search against its own arms and a window.

For each conversation a fresh in-memory memory takes every turn through the public API
(``memory.store.put``, one call per turn, as ``[session date] speaker: text``), then each
question of categories 1-4 is asked of every method in the same run:
- ``gliding``: the memory's hybrid search (``memory.search``);
- ``lexical``: its lexical arm alone (FTS5, BM25);
- ``dense``: its dense arm alone (the embedder, Chroma);
- ``recent``: the most recent turns.

recall@k is the share of a question's evidence turns among the first k hits; budget recall at
B tokens is that share among the hits taken in rank order while their text fits in B cl100k
tokens. ``context_tokens_mean`` is the mean size of the top-10 hits' text.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from gliding_core.benchmarks.conversations import Conversation, answerable, load
from gliding_core.config import MemoryConfig, TopicConfig
from gliding_core.hyperspace.embedders import Embedder, embedder_name
from gliding_core.memory import Memory

METHODS = ("gliding", "lexical", "dense", "recent")
RECALL_AT = (5, 10, 20)
BUDGETS = (500, 1000, 2000)
DEPTH = 100  # hits asked of each method: enough to fill the largest budget

Ranker = Callable[[str], list[str]]


def run(
    path: Path,
    embedder: Embedder,
    *,
    conversations: list[str] | None = None,
    methods: Sequence[str] = METHODS,
) -> dict[str, Any]:
    """Ingest each conversation, ask its questions of every method, and return the figures."""
    data = load(path, conversations)
    scores: dict[str, dict[str, list[float]]] = {m: {} for m in methods}
    timings: dict[str, list[float]] = {"ingest": []}
    questions = 0
    for conversation in data:
        questions += _conversation(conversation, embedder, methods, scores, timings)
    return {
        "conversations": [c.sample_id for c in data],
        "questions": questions,
        "embedder": embedder_name(embedder),
        "methods": {m: _summary(scores[m], timings, m) for m in methods},
    }


def _conversation(
    conversation: Conversation,
    embedder: Embedder,
    methods: Sequence[str],
    scores: dict[str, dict[str, list[float]]],
    timings: dict[str, list[float]],
) -> int:
    config = MemoryConfig(topics=TopicConfig(interval_s=0))
    with Memory(config=config, embedder=embedder) as memory:
        prefix = f"urn:locomo:{conversation.sample_id}:"
        tokens: dict[str, int] = {}
        previous = None
        for turn in conversation.turns:
            node: dict[str, Any] = {
                "@id": prefix + turn.dia_id,
                "@type": "DialogueTurn",
                "text": turn.line,
                "session": turn.session,
            }
            if previous is not None and previous.session == turn.session:
                node["previous"] = {"@id": prefix + previous.dia_id}
            previous = turn
            start = time.perf_counter()
            # A conversation session is a named graph, as the L1 session archives turns.
            graph = f"{prefix}session/{turn.session}"
            memory.store.put(node, tags=[f"session:{turn.session}"], named_graph=graph)
            timings["ingest"].append((time.perf_counter() - start) * 1e3)
            tokens[turn.dia_id] = memory.count_tokens(turn.line)
        order = [t.dia_id for t in conversation.turns]
        rankers = _rankers(memory, prefix, order)
        asked = answerable(conversation)
        for question in asked:
            for method in methods:
                start = time.perf_counter()
                ranked = rankers[method](question.question)
                elapsed = (time.perf_counter() - start) * 1e3
                _score(scores[method], question.evidence, ranked, tokens)
                timings.setdefault(method, []).append(elapsed)
    return len(asked)


def _rankers(memory: Memory, prefix: str, order: list[str]) -> dict[str, Ranker]:
    def strip(iris: list[str]) -> list[str]:
        return [iri.removeprefix(prefix) for iri in iris]

    return {
        "gliding": lambda q: strip([h.iri for h in memory.search(q, DEPTH)]),
        "lexical": lambda q: strip([h.entry.iri for h in memory.store.search_text(q, limit=DEPTH)]),
        "dense": lambda q: strip([iri for iri, _ in memory.index.query(q, DEPTH)]),
        "recent": lambda q: list(reversed(order))[:DEPTH],
    }


def _score(
    into: dict[str, list[float]], evidence: Sequence[str], ranked: list[str], tokens: dict[str, int]
) -> None:
    wanted = set(evidence) & set(tokens)
    for k in RECALL_AT:
        into.setdefault(f"recall@{k}", []).append(len(wanted & set(ranked[:k])) / len(wanted))
    for budget in BUDGETS:
        taken: set[str] = set()
        used = 0
        for dia_id in ranked:
            cost = tokens.get(dia_id, 0)
            if used + cost > budget:
                break
            taken.add(dia_id)
            used += cost
        into.setdefault(f"budget_recall@{budget}", []).append(len(wanted & taken) / len(wanted))
    into.setdefault("context_tokens", []).append(float(sum(tokens.get(d, 0) for d in ranked[:10])))


def _summary(
    scores: dict[str, list[float]], timings: dict[str, list[float]], method: str
) -> dict[str, float]:
    def quantile(values: list[float], cut: int) -> float:
        if len(values) < 2:
            return values[0] if values else 0.0
        return statistics.quantiles(values, n=100, method="inclusive")[cut - 1]

    out = {
        name: statistics.fmean(values)
        for name, values in scores.items()
        if name != "context_tokens"
    }
    out["context_tokens_mean"] = statistics.fmean(scores.get("context_tokens", [0.0]))
    out["ingest_p50_ms"] = quantile(timings["ingest"], 50)
    out["ingest_p95_ms"] = quantile(timings["ingest"], 95)
    out["search_p50_ms"] = quantile(timings.get(method, []), 50)
    out["search_p95_ms"] = quantile(timings.get(method, []), 95)
    return out
