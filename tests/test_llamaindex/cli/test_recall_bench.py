"""``llamaindex-memory``: LlamaIndex's own bounds hold and the recall bench counts its evidence."""

from __future__ import annotations

from gliding_core.cli.benchmarks import recall
from gliding_core.cli.benchmarks.conversations import Turn
from gliding_core.hyperspace.embedders import HashEmbedder
from gliding_core.tokens import TokenCounter
from gliding_llamaindex.cli.recall_bench import FLUSH_RATIO, VectorMemoryMethod

TOPICS = [
    "I adopted a puppy named Max and he chews shoes",
    "My pottery class glazed a blue bowl in the kiln",
    "We hiked the muddy lake trail after the rain",
    "The new job at the bank has long hours",
]
BUDGET = 300


def _turns() -> list[Turn]:
    texts = [f"{topic}, part {n}" for topic in TOPICS for n in range(4)]
    return [
        Turn(f"D1:{i + 1}", 1, "1:56 pm on 8 May, 2023", float(i), ("Ann", "Bo")[i % 2], text)
        for i, text in enumerate(texts)
    ]


def test_memory_retrieves_old_turns_and_keeps_recent_ones_within_its_limit() -> None:
    counter = TokenCounter()
    turns = _turns()
    method = VectorMemoryMethod(turns, tokens=counter, embedder=HashEmbedder(), budgets=[BUDGET])

    try:
        system, *history = method.context("What did the puppy Max chew?", BUDGET)
    finally:
        method.close()

    assert history == [t.line for t in turns[-len(history) :]]
    retrieved = [t for t in turns[: -len(history)] if t.line in system]
    assert system.startswith("<memory>")
    assert retrieved  # flushed turns, found again in the vector block
    # LlamaIndex's own bounds: the chat history within 70% of the limit, and the two
    # retrieved flush batches (each at most the flush size plus one turn) on top.
    assert sum(counter.count_many(history)) <= 0.7 * BUDGET
    longest = max(counter.count_many([t.line for t in turns]))
    assert counter.count(system) <= 2 * (FLUSH_RATIO * BUDGET + longest) + 80


def test_the_bench_counts_evidence_in_the_memory_context() -> None:
    counter = TokenCounter()
    turns = _turns()
    method = VectorMemoryMethod(turns, tokens=counter, embedder=HashEmbedder(), budgets=[BUDGET])
    try:
        pieces = method.context("What did the puppy Max chew?", BUDGET)
    finally:
        method.close()
    lines = {t.dia_id: " ".join(t.line.split()) for t in turns}
    found = {d for d, line in lines.items() if any(line in " ".join(p.split()) for p in pieces)}
    missing = sorted(set(lines) - found)
    scores: dict[str, list[float]] = {}

    used = sum(counter.count_many(pieces))
    recall._score_context(scores, [turns[-1].dia_id, missing[0]], pieces, lines, BUDGET, used)

    assert scores[f"budget_recall@{BUDGET}"] == [0.5]  # the last turn is in, a cut one is not
    assert scores[f"over_budget@{BUDGET}"] == [float(used > BUDGET)]
