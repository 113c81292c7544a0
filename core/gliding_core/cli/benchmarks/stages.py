"""CLI: where a search's time goes, stage by stage, measured by timers around its parts.

The benchmark wraps methods of the searcher's own objects (the store, the dense index, its
embedder, the hybrid search) in timers; nothing in the search itself knows of them. Each
timer counts its call's time less the time of timed calls made inside it, so the stages add
up to at most the search's time, and the rest (fusion arithmetic aside: validation, the
re-rank's scoring, sorting, and waiting for reads sent beside the search) is what no timer
covered. Reads a search sends beside itself, on its reader threads (a store that runs reads
at once), are timed apart as the ``beside`` stages, which overlap the others and are not in
that sum.
"""

from __future__ import annotations

import functools
import statistics
import threading
import time
from collections.abc import Mapping, Sequence
from typing import Any

from gliding_core.hyperspace.search import READER_THREADS

STAGES = (
    ("embed", "query embedding"),
    ("refresh", "index catch-up check"),
    ("lexical", "lexical arm (full-text search)"),
    ("dense", "dense arm (approximate nearest neighbours)"),
    ("fusion", "fusion (weighted reciprocal rank)"),
    ("vectors", "re-rank: candidates' vectors and exact cosines"),
    ("links", "re-rank: linked neighbours"),
    ("fetch", "fetching the entries"),
    ("rerank", "re-rank scoring and the rest"),
    ("lexical_beside", "beside: lexical arm"),
    ("links_beside", "beside: linked neighbours"),
    ("fetch_beside", "beside: fetching the entries"),
)
"""Each stage's key in the figures and what it covers; ``rerank`` is the search's time no
other timer covered; the ``beside`` stages are reads run on a search's reader threads."""
BESIDE = "_beside"


class StageClock:
    """Timers around the parts of a searcher; ``take`` returns one search's time per stage.

    Only calls on the thread that made the clock are timed, and on the search's reader
    threads (as ``beside`` stages); a catch-up in a background thread is not part of the
    search being timed.
    """

    def __init__(self) -> None:
        self._thread = threading.get_ident()
        self._open: list[float] = []  # time of timed calls nested in each open call
        self._current: dict[str, float] = {}
        self._beside: dict[str, float] = {}
        self._beside_lock = threading.Lock()

    def wrap(self, owner: object, method: str, stage: str) -> None:
        """Time every call of ``owner.method`` as ``stage`` (if ``owner`` has that method)."""
        inner = getattr(owner, method, None)
        if owner is None or not callable(inner):
            return

        @functools.wraps(inner)
        def timed(*args: Any, **kwargs: Any) -> Any:
            if threading.get_ident() != self._thread:
                if not threading.current_thread().name.startswith(READER_THREADS):
                    return inner(*args, **kwargs)
                start = time.perf_counter()
                try:
                    return inner(*args, **kwargs)
                finally:
                    elapsed = time.perf_counter() - start
                    with self._beside_lock:
                        key = stage + BESIDE
                        self._beside[key] = self._beside.get(key, 0.0) + elapsed
            self._open.append(0.0)
            start = time.perf_counter()
            try:
                return inner(*args, **kwargs)
            finally:
                elapsed = time.perf_counter() - start
                nested = self._open.pop()
                self._current[stage] = self._current.get(stage, 0.0) + elapsed - nested
                if self._open:
                    self._open[-1] += elapsed

        setattr(owner, method, timed)

    def take(self, total_s: float) -> dict[str, float]:
        """Return the stages' milliseconds since the last ``take`` (the uncovered rest of
        ``total_s`` as ``rerank``), and start again."""
        found, self._current = self._current, {}
        with self._beside_lock:
            beside, self._beside = self._beside, {}
        out = {
            key: found.get(key, 0.0) * 1e3
            for key, _ in STAGES
            if key != "rerank" and not key.endswith(BESIDE)
        }
        out["rerank"] = max(0.0, total_s * 1e3 - sum(out.values()))
        out.update({key: beside.get(key, 0.0) * 1e3 for key, _ in STAGES if key.endswith(BESIDE)})
        return out


def clocked(searcher: Any) -> StageClock:
    """Return a clock timing the stages of ``searcher``'s searches (a ``Memory`` or anything
    with its ``store``, ``index`` and ``hyperspace``)."""
    clock = StageClock()
    store, index = searcher.store, searcher.index
    clock.wrap(getattr(index, "embedder", None), "embed_query", "embed")
    clock.wrap(index, "refresh", "refresh")
    clock.wrap(store, "search_ids", "lexical")
    clock.wrap(index, "query", "dense")
    clock.wrap(index, "query_filtered", "dense")
    clock.wrap(getattr(searcher, "hyperspace", None), "fuse", "fusion")
    clock.wrap(index, "similarities", "vectors")
    clock.wrap(index, "vectors", "vectors")
    clock.wrap(store, "linked", "links")
    clock.wrap(store, "get_many", "fetch")
    return clock


def summary(
    samples: Sequence[Mapping[str, float]], totals: Sequence[float]
) -> dict[str, dict[str, float]]:
    """Per stage: mean, p50 and p95 over the searches, and the mean over the slowest 5 % (at or
    above the total's p95), in milliseconds."""
    cut = _quantile(totals, 95)
    tail = [s for s, total in zip(samples, totals, strict=True) if total >= cut] or list(samples)
    out: dict[str, dict[str, float]] = {}
    for key, _ in STAGES:
        values = [s[key] for s in samples]
        out[key] = {
            "mean": statistics.fmean(values),
            "p50": _quantile(values, 50),
            "p95": _quantile(values, 95),
            "slowest_5pc_mean": statistics.fmean(s[key] for s in tail),
        }
    return out


def rows(stages: Mapping[str, Mapping[str, float]]) -> list[tuple[str, float, float, float, float]]:
    """Table rows of a ``summary``: stage, mean, p50, p95, mean over the slowest 5 %."""
    what = dict(STAGES)
    return [
        (what[key], f["mean"], f["p50"], f["p95"], f["slowest_5pc_mean"])
        for key, f in stages.items()
    ]


def _quantile(values: Sequence[float], percent: int) -> float:
    if len(values) < 2:
        return float(values[0]) if values else 0.0
    return statistics.quantiles(values, n=100, method="inclusive")[percent - 1]
