"""Hyperspace: hybrid search, the lexical arm (FTS5, BM25) and the dense arm (Chroma), fused.

Invariants: the same ``SearchFilters`` restrict every arm; the arms are fused by weighted
reciprocal rank, ``sum(weight / (rrf_k + rank))`` with ``rrf_k = 60``; every hit carries its
rank and score in each arm that found it, so any result can be explained.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field

from gliding_core.entry import Entry
from gliding_core.errors import InvalidInputError
from gliding_core.filters import SearchFilters
from gliding_core.hyperspace.dense import DenseIndex
from gliding_core.jsonld import preview
from gliding_core.store import L0Store

RRF_K = 60
ARMS = ("lexical", "dense")


@dataclass(frozen=True, slots=True)
class ArmResult:
    """Where one arm placed a hit: its 1-based rank and the arm's own score."""

    rank: int
    score: float


@dataclass(frozen=True, slots=True)
class SearchHit:
    """One search result: the entry, its fused score, and each arm's rank and score."""

    entry: Entry
    score: float
    arms: Mapping[str, ArmResult] = field(default_factory=dict)

    @property
    def iri(self) -> str:
        """The entry's IRI."""
        return self.entry.iri


class HybridSearch:
    """Search L0 by words and by meaning, with structured filters.

    Args:
        store: the L0 store (lexical arm, filters, entries).
        dense: the dense index, or ``None`` for lexical search only.
        weights: the weight of each arm in the fusion.
        rrf_k: the reciprocal-rank constant.
        candidates: how many hits each arm contributes before fusion (at least ``k``).
    """

    def __init__(
        self,
        store: L0Store,
        dense: DenseIndex | None,
        *,
        weights: Mapping[str, float] | None = None,
        rrf_k: int = RRF_K,
        candidates: int = 50,
    ) -> None:
        self.store, self.dense = store, dense
        self.weights = _check_weights(weights or {"lexical": 1.0, "dense": 1.0})
        self.rrf_k, self.candidates = rrf_k, candidates

    def search(
        self,
        query: str,
        k: int = 10,
        *,
        filters: SearchFilters | None = None,
        weights: Mapping[str, float] | None = None,
    ) -> list[SearchHit]:
        """Return the ``k`` best entries for ``query`` that pass ``filters``, best first."""
        if not isinstance(query, str) or not query.strip():
            raise InvalidInputError(f"query must be a non-empty string, got {preview(query)}")
        if isinstance(k, bool) or not isinstance(k, int) or k < 1:
            raise InvalidInputError(f"k must be an int >= 1, got {preview(k)}")
        if filters is not None and not isinstance(filters, SearchFilters):
            raise InvalidInputError(f"filters must be SearchFilters, got {preview(filters)}")
        mix = self.weights if weights is None else _check_weights(weights)
        ranked = self.arms(query, max(k, self.candidates), filters or SearchFilters())
        return self.fuse(ranked, mix, k)

    def arms(
        self, query: str, n: int, filters: SearchFilters
    ) -> dict[str, list[tuple[str, float]]]:
        """Return each arm's ranked ``(iri, score)`` list for ``query`` under ``filters``."""
        lexical = [
            (hit.entry.iri, hit.score)
            for hit in self.store.search_text(query, limit=n, filters=filters)
        ]
        out = {"lexical": lexical}
        if self.dense is not None:
            out["dense"] = self._dense(query, n, filters)
        return out

    def _dense(self, query: str, n: int, filters: SearchFilters) -> list[tuple[str, float]]:
        assert self.dense is not None
        if filters.empty:
            return self.dense.query(query, n)
        # Over-fetch and keep what passes; fall back to the allowed set when that is too few.
        found = self.dense.query(query, n * 4)
        passing = set(self.store.matching(filters, [iri for iri, _ in found]))
        kept = [(iri, score) for iri, score in found if iri in passing][:n]
        if len(kept) < n and len(found) >= n * 4:
            kept = self.dense.query(query, n, allowed=self.store.matching(filters))
        return kept

    def fuse(
        self, ranked: Mapping[str, list[tuple[str, float]]], weights: Mapping[str, float], k: int
    ) -> list[SearchHit]:
        """Fuse ranked lists by weighted reciprocal rank and return the top ``k`` hits."""
        fused: dict[str, float] = {}
        detail: dict[str, dict[str, ArmResult]] = {}
        for arm, hits in ranked.items():
            weight = weights.get(arm, 0.0)
            for rank, (iri, score) in enumerate(hits, start=1):
                detail.setdefault(iri, {})[arm] = ArmResult(rank, score)
                fused[iri] = fused.get(iri, 0.0) + weight / (self.rrf_k + rank)
        best = sorted(fused, key=lambda iri: (-fused[iri], iri))[:k]
        entries = self.store.get_many(best)
        return [SearchHit(entries[iri], fused[iri], detail[iri]) for iri in best if iri in entries]


def _check_weights(weights: Mapping[str, float]) -> dict[str, float]:
    if not isinstance(weights, Mapping):
        raise InvalidInputError(f"weights must map arm names to numbers, got {preview(weights)}")
    out = {}
    for arm, value in weights.items():
        if arm not in ARMS:
            raise InvalidInputError(f"unknown search arm {arm!r}; arms are {', '.join(ARMS)}")
        if (
            isinstance(value, bool)
            or not isinstance(value, (int, float))
            or not math.isfinite(value)
            or value < 0
        ):
            raise InvalidInputError(
                f"weight of {arm!r} must be a number >= 0, got {preview(value)}"
            )
        out[arm] = float(value)
    return out
