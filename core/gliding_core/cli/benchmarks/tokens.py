"""Benchmark of L1 token savings: LoCoMo conversations replayed turn by turn through a session.

At each step the prompt is what the session gives the model (``session.context()``), counted
as chat messages; the baseline in the same run is the full history as chat messages. After the
last turn, each question's evidence turns are looked up in the window (the session's context,
and, as a second baseline, the most recent turns that fit the same budget).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from gliding_core.cli.benchmarks import progress
from gliding_core.cli.benchmarks.conversations import Conversation, answerable, load
from gliding_core.config import MemoryConfig, SessionConfig, TopicConfig
from gliding_core.framing import PER_REPLY
from gliding_core.hyperspace.embedders import Embedder
from gliding_core.memory import Memory

BUDGETS = (500, 1000, 2000, 4000)


class _Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def run(
    path: Path,
    *,
    conversations: list[str] | None = None,
    budgets: Sequence[int] = BUDGETS,
    embedder: Embedder | None = None,
) -> dict[str, Any]:
    """Replay the conversations at each budget and return the figures per budget."""
    data = load(path, conversations)
    out: dict[str, Any] = {"conversations": [c.sample_id for c in data], "budgets": {}}
    for budget in progress(budgets, "budgets"):
        steps: dict[str, list[float]] = {k: [] for k in ("prompt", "full", "add_ms", "ctx_ms")}
        shares: dict[str, list[float]] = {"session": [], "recent": []}
        for conversation in data:
            _replay(conversation, budget, embedder, steps, shares)
        out["budgets"][str(budget)] = _summarise(steps, shares)
    return out


def _replay(
    conversation: Conversation,
    budget: int,
    embedder: Embedder | None,
    steps: dict[str, list[float]],
    shares: dict[str, list[float]],
) -> None:
    clock = _Clock()
    config = MemoryConfig(session=SessionConfig(budget=budget), topics=TopicConfig(interval_s=0))
    with Memory(config=config, embedder=embedder, clock=clock) as memory:
        first, second = conversation.speakers
        session = memory.session(f"urn:locomo:{conversation.sample_id}", agent="companion")
        clock.now = conversation.turns[0].time
        statement = (
            f"Long-term conversation between {first} and {second}: remember what each of them "
            "shares (events, dates, people, plans, feelings)."
        )
        session.add_turn("system", statement, relevance=1.0)
        window = memory.framing()
        history = window.count([{"role": "system", "content": statement}]) - PER_REPLY
        dia_of: dict[str, str] = {}
        lines: list[tuple[str, int]] = []
        context = session.context()
        for turn in conversation.turns:
            clock.now = turn.time
            role = "user" if turn.speaker == first else "assistant"
            start = time.perf_counter()
            added = session.add_turn(role, turn.line, at=turn.time)
            steps["add_ms"].append((time.perf_counter() - start) * 1e3)
            dia_of[added.l0_archive_iri] = turn.dia_id
            start = time.perf_counter()
            context = session.context()
            steps["ctx_ms"].append((time.perf_counter() - start) * 1e3)
            steps["prompt"].append(window.count(context.messages))
            message = {"role": role, "content": turn.line}
            history += window.count([message]) - PER_REPLY
            steps["full"].append(history + PER_REPLY)
            lines.append((turn.dia_id, memory.count_tokens(turn.line) + 1))
        in_window = {dia_of.get(t.l0_archive_iri) for t in context.main + context.low_relevance}
        recent = _recent_fit(lines, budget)
        for question in answerable(conversation):
            evidence = set(question.evidence)
            shares["session"].append(len(evidence & in_window) / len(evidence))
            shares["recent"].append(len(evidence & recent) / len(evidence))


def _recent_fit(lines: list[tuple[str, int]], budget: int) -> set[str]:
    kept: set[str] = set()
    used = 0
    for dia_id, cost in reversed(lines):
        if used + cost > budget:
            break
        kept.add(dia_id)
        used += cost
    return kept


def _summarise(steps: dict[str, list[float]], shares: dict[str, list[float]]) -> dict[str, float]:
    def q(values: list[float], cut: int) -> float:
        return statistics.quantiles(values, n=100, method="inclusive")[cut - 1]

    prompt_mean, full_mean = statistics.fmean(steps["prompt"]), statistics.fmean(steps["full"])
    return {
        "steps": float(len(steps["prompt"])),
        "prompt_tokens_mean": prompt_mean,
        "prompt_tokens_max": max(steps["prompt"]),
        "full_history_tokens_mean": full_mean,
        "full_history_tokens_max": max(steps["full"]),
        "saving_pct": 100.0 * (1.0 - prompt_mean / full_mean),
        "add_turn_p50_ms": q(steps["add_ms"], 50),
        "add_turn_p95_ms": q(steps["add_ms"], 95),
        "context_p50_ms": q(steps["ctx_ms"], 50),
        "context_p95_ms": q(steps["ctx_ms"], 95),
        "evidence_in_window": statistics.fmean(shares["session"]),
        "evidence_in_recent_window": statistics.fmean(shares["recent"]),
        "questions": float(len(shares["session"])),
    }
