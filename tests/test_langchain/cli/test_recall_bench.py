"""``langchain-trim``: the budget holds and the recall bench counts its evidence."""

from __future__ import annotations

from gliding_core.cli.benchmarks import recall
from gliding_core.cli.benchmarks.conversations import Turn
from gliding_core.hyperspace.embedders import HashEmbedder
from gliding_core.tokens import TokenCounter
from gliding_langchain.cli.recall_bench import TrimMethod

TEXTS = [
    "I adopted a puppy named Max last spring",
    "Max chews every shoe in the house",
    "My pottery class made a blue bowl",
    "The glaze on the bowl cracked in the kiln",
    "We hiked the lake trail on Sunday",
    "The lake trail was muddy after the rain",
]


def _turns() -> list[Turn]:
    return [
        Turn(f"D1:{i + 1}", 1, "1:56 pm on 8 May, 2023", float(i), ("Ann", "Bo")[i % 2], text)
        for i, text in enumerate(TEXTS)
    ]


def test_trim_keeps_the_last_turns_within_the_budget() -> None:
    counter = TokenCounter()
    turns = _turns()
    sizes = counter.count_many([t.line for t in turns])
    budget = sum(sizes[-2:]) + 1  # room for the last two turns, not the third from the end
    method = TrimMethod(turns, tokens=counter, embedder=HashEmbedder(), budgets=[budget])

    pieces = method.context("Where did we hike?", budget)

    assert pieces == [t.line for t in turns[-2:]]
    assert sum(counter.count_many(pieces)) <= budget


def test_the_bench_counts_evidence_in_the_trimmed_context() -> None:
    counter = TokenCounter()
    turns = _turns()
    budget = sum(counter.count_many([t.line for t in turns[-2:]]))
    method = TrimMethod(turns, tokens=counter, embedder=HashEmbedder(), budgets=[budget])
    pieces = method.context("anything", budget)
    lines = {t.dia_id: " ".join(t.line.split()) for t in turns}
    scores: dict[str, list[float]] = {}

    used = sum(counter.count_many(pieces))
    recall._score_context(scores, ["D1:5", "D1:1"], pieces, lines, budget, used)

    assert scores[f"budget_recall@{budget}"] == [0.5]  # D1:5 kept, D1:1 cut
    assert scores[f"context_tokens@{budget}"] == [float(used)]
    assert scores[f"over_budget@{budget}"] == [0.0]
