"""Benchmark of topic-shift detection on sequences with known boundaries.

Each sequence joins whole sessions of different LoCoMo conversations (seeded choice), so a
boundary is known wherever one session ends and the next begins. Shifts inside a session are not
labelled, so every method is charged for them alike. A detected boundary counts when it lies
within one turn of a true one; each true boundary is matched at most once.

Methods, on the same embeddings in the same run:
- ``gliding``: the monitor's detector (block similarity, window and threshold from TopicConfig);
- ``adjacent``: the plain rule the monitor refines, adjacent-turn similarity below the
  threshold;
- ``texttiling``: TextTiling depth scores (Hearst, 1997) over the same blocks, with the
  cut-off mean - std / 2.
"""

from __future__ import annotations

import random
import statistics
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from gliding_core.cli.benchmarks.conversations import Turn, load
from gliding_core.config import TopicConfig
from gliding_core.hyperspace.embedders import Embedder
from gliding_core.hyperspace.vectors import Vector, as_vector, cosine
from gliding_core.topics import boundaries

Detector = Callable[[list[Vector]], list[int]]


def run(
    path: Path,
    embedder: Embedder,
    *,
    sequences: int = 30,
    segments: int = 4,
    seed: int = 0,
    config: TopicConfig | None = None,
) -> dict[str, Any]:
    """Build the sequences, run each detector, and return precision, recall and F1."""
    config = config or TopicConfig()
    data = load(path)
    sessions = [
        (c.sample_id, [t for t in c.turns if t.session == number])
        for c in data
        for number in sorted({t.session for t in c.turns})
    ]
    rng = random.Random(seed)
    built = [_sequence(rng, sessions, segments) for _ in range(sequences)]
    detectors: dict[str, Detector] = {
        "gliding": lambda v: [
            b.index for b in boundaries(v, threshold=config.threshold, window=config.window)
        ],
        "adjacent": lambda v: [
            b.index for b in boundaries(v, threshold=config.threshold, window=1)
        ],
        "texttiling": lambda v: _texttiling(v, config.window),
    }
    counts = {name: [0, 0, 0] for name in detectors}  # matched, predicted, true
    for turns, truth in built:
        vectors = [as_vector(v) for v in embedder.embed_documents([t.text for t in turns])]
        for name, detect in detectors.items():
            found = detect(vectors)
            counts[name][0] += _matched(found, truth)
            counts[name][1] += len(found)
            counts[name][2] += len(truth)
    methods = {name: _scores(*values) for name, values in counts.items()}
    return {
        "sequences": sequences,
        "turns": sum(len(t) for t, _ in built),
        "true_boundaries": sum(len(b) for _, b in built),
        "embedder": getattr(embedder, "name", type(embedder).__name__),
        "threshold": config.threshold,
        "window": config.window,
        "methods": methods,
    }


def _sequence(
    rng: random.Random, sessions: list[tuple[str, list[Turn]]], segments: int
) -> tuple[list[Turn], list[int]]:
    turns: list[Turn] = []
    truth: list[int] = []
    previous = None
    for _ in range(segments):
        conversation, chosen = rng.choice([s for s in sessions if s[0] != previous])
        if turns:
            truth.append(len(turns))
        turns.extend(chosen)
        previous = conversation
    return turns, truth


def _texttiling(vectors: list[Vector], window: int) -> list[int]:
    gaps = []
    for i in range(1, len(vectors)):
        left = np.mean(vectors[max(0, i - window) : i], axis=0)
        right = np.mean(vectors[i : i + window], axis=0)
        gaps.append(cosine(left, right) or 0.0)
    if len(gaps) < 3:
        return []
    depths = []
    for i, value in enumerate(gaps):
        left_peak = max(gaps[: i + 1])
        right_peak = max(gaps[i:])
        depths.append((left_peak - value) + (right_peak - value))
    cutoff = statistics.fmean(depths) - statistics.pstdev(depths) / 2
    found: list[int] = []
    for i, depth in enumerate(depths):
        is_peak = depth >= max(depths[max(0, i - 1) : i + 2])
        if depth > cutoff and is_peak and (not found or i + 1 - found[-1] >= window):
            found.append(i + 1)
    return found


def _matched(found: list[int], truth: list[int]) -> int:
    free = list(truth)
    hits = 0
    for index in found:
        match = next((t for t in free if abs(t - index) <= 1), None)
        if match is not None:
            free.remove(match)
            hits += 1
    return hits


def _scores(matched: int, predicted: int, true: int) -> dict[str, float]:
    precision = matched / predicted if predicted else 0.0
    recall = matched / true if true else 0.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    return {"precision": precision, "recall": recall, "f1": f1, "predicted": float(predicted)}
