"""Benchmark of the Poincaré index: reconstruction of a hierarchy against gensim, same run.

Both models train on the same edges (self-loops dropped) with the same dimension, number of
negatives and epochs; both are scored by the same function (``reconstruction``) on the file's
relations, as gensim's ``ReconstructionEvaluation`` scores them.
"""

from __future__ import annotations

import csv
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

from gliding_core.errors import InvalidInputError
from gliding_core.hyperspace.poincare import PoincareIndex, PoincareSettings, reconstruction


def read_edges(path: Path) -> list[tuple[str, str]]:
    """Read ``child TAB parent`` lines."""
    try:
        with open(path, newline="", encoding="utf-8") as handle:
            rows = [tuple(row) for row in csv.reader(handle, delimiter="\t") if row]
    except OSError as exc:
        raise InvalidInputError(f"cannot read edges from {str(path)!r}: {exc}") from exc
    bad = [row for row in rows if len(row) != 2]
    if bad:
        raise InvalidInputError(
            f"{str(path)!r}: each line needs two tab-separated names, got {bad[0]!r}"
        )
    return [(row[0], row[1]) for row in rows]


def run(
    path: Path, *, dimension: int = 10, epochs: int = 75, gensim: bool = True
) -> dict[str, Any]:
    """Train both models on the edges at ``path`` and return their figures."""
    edges = read_edges(path)
    relations: dict[str, set[str]] = defaultdict(set)
    for child, parent in edges:
        relations[child].add(parent)
    ours = PoincareIndex(PoincareSettings(dimension=dimension, epochs=epochs)).fit(edges)
    mean_rank, average_precision = reconstruction(ours, relations, ours.nodes)
    methods = {
        "gliding": {"map": average_precision, "mean_rank": mean_rank, "train_s": ours.train_seconds}
    }
    if gensim:
        methods["gensim"] = _gensim(edges, relations, dimension, epochs)
    return {
        "edges": len(edges),
        "nodes": len(ours.nodes),
        "dimension": dimension,
        "epochs": epochs,
        "methods": methods,
    }


def _gensim(
    edges: list[tuple[str, str]], relations: dict[str, set[str]], dimension: int, epochs: int
) -> dict[str, float]:
    try:
        from gensim.models.poincare import PoincareModel
    except ImportError as exc:
        raise InvalidInputError(
            "the comparison needs gensim: pip install 'gliding-horse[bench]' (or pass --no-gensim)"
        ) from exc
    model = PoincareModel([e for e in edges if e[0] != e[1]], size=dimension, negative=10, seed=0)
    start = time.perf_counter()
    model.train(epochs=epochs)
    seconds = time.perf_counter() - start
    mean_rank, average_precision = reconstruction(model.kv, relations, list(model.kv.index_to_key))
    return {"map": average_precision, "mean_rank": mean_rank, "train_s": seconds}
