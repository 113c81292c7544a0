"""Hyperspace: hybrid search, the lexical arm (L0's full-text search) and the dense arm, fused.

Invariants: the same ``SearchFilters`` restrict every arm; the arms are fused by weighted
reciprocal rank, ``sum(weight / (rrf_k + rank))`` with ``rrf_k = 60``; every hit carries its
rank and score in each arm that found it, so any result can be explained. Before the dense arm
runs, its index catches up with L0; results say which arms ran and how many L0 changes the
dense index had not applied (``SearchResults``), and a search on an index that is behind logs
a warning, so entries are never missing silently. A query the embedder cannot embed is searched
by the lexical arm alone, with a warning, and its results' ``arms`` say so.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from gliding_core.errors import EmbedderError, InvalidInputError
from gliding_core.hyperspace.index import VectorIndex
from gliding_core.hyperspace.vectors import Vector
from gliding_core.jsonld import check_text, preview
from gliding_core.store.entry import Entry
from gliding_core.store.filters import MAX_RESULTS, SearchFilters
from gliding_core.store.protocol import EntryStore

logger = logging.getLogger(__name__)

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


class SearchResults(list[SearchHit]):
    """The hits of a search, best first (a list), and what the search could see.

    Attributes:
        arms: the arms that ran (``("lexical",)`` for a memory without its dense index).
        index_behind: how many committed L0 changes the dense index had not applied when it
            was queried (0: it saw everything); entries they wrote may be missing from its arm.
    """

    def __init__(
        self, hits: Iterable[SearchHit] = (), *, arms: tuple[str, ...], index_behind: int = 0
    ) -> None:
        super().__init__(hits)
        self.arms, self.index_behind = arms, index_behind

    def __repr__(self) -> str:
        return (
            f"SearchResults({list.__repr__(self)}, arms={self.arms!r}, "
            f"index_behind={self.index_behind})"
        )


class HybridSearch:
    """Search L0 by words and by meaning, with structured filters, in two stages.

    1. Each arm ranks up to ``candidates`` entries; the arms are fused by weighted reciprocal
       rank (``rrf_k`` = 60) and the best ``pool`` become the candidates, with the entries
       linked to them under ``context_predicates`` (the turns around a conversation turn).
    2. With ``rerank`` (the default) the candidates are re-scored: each arm's own score
       (BM25, exact cosine) plus ``context_weight`` times its linked neighbours' scores, so a
       turn is judged with its context; each arm is normalised over the candidates and the
       arms are mixed by their weights. Without it, the fused rank decides.

    Args:
        store: the L0 store (lexical arm, filters, entries).
        dense: the dense index, or ``None`` for lexical search only.
        weights: the weight of each arm, in both stages.
        rrf_k: the reciprocal-rank constant.
        candidates: how many hits each arm contributes (at least ``k``).
        pool: how many fused hits go on to the second stage.
        rerank: whether to run the second stage.
        context_weight: the share of a neighbour's score a hit receives.
        context_predicates: the links that carry context.
        group_weight: how much a hit gains from the best candidates of its named graph (the
            mean of their ``group_top`` scores; by default the single best): a conversation
            session, or a project, that holds a strong match makes its other entries likelier.
            0 turns it off.
        group_top: how many of a graph's best candidates make its score.
    """

    def __init__(
        self,
        store: EntryStore,
        dense: VectorIndex | None,
        *,
        weights: Mapping[str, float] | None = None,
        rrf_k: int = RRF_K,
        candidates: int = 100,
        pool: int = 100,
        rerank: bool = True,
        context_weight: float = 0.2,
        context_predicates: tuple[str, ...] = ("previous",),
        group_weight: float = 1.0,
        group_top: int = 1,
    ) -> None:
        self.store, self.dense = store, dense
        self.weights = _check_weights(weights or {"lexical": 0.75, "dense": 1.0})
        self.rrf_k, self.candidates, self.pool, self.rerank = rrf_k, candidates, pool, rerank
        self.context_weight, self.context_predicates = context_weight, context_predicates
        self.group_weight, self.group_top = group_weight, group_top

    def search(
        self,
        query: str,
        k: int = 10,
        *,
        filters: SearchFilters | None = None,
        weights: Mapping[str, float] | None = None,
    ) -> SearchResults:
        """Return the ``k`` best entries for ``query`` that pass ``filters``, best first.

        The dense index first catches up with L0 (unless another thread is already doing so);
        if it is still behind, the results' ``index_behind`` says by how much and a warning is
        logged.
        """
        if not isinstance(query, str) or not query.strip():
            raise InvalidInputError(f"query must be a non-empty string, got {preview(query)}")
        check_text(query, what="query")
        if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= MAX_RESULTS:
            raise InvalidInputError(f"k must be an int in [1, {MAX_RESULTS}], got {preview(k)}")
        if filters is not None and not isinstance(filters, SearchFilters):
            raise InvalidInputError(f"filters must be SearchFilters, got {preview(filters)}")
        mix = self.weights if weights is None else _check_weights(weights)
        limits = filters or SearchFilters()
        behind = self._refresh()
        # One query vector for the dense arm and the re-rank: the query is embedded once.
        probe = self._probe(query)
        n = max(k, self.candidates)
        if self.dense is not None and probe is None:
            ranked = {"lexical": self.store.search_ids(query, limit=n, filters=limits)}
        else:
            ranked = self.arms(query, n, limits, vector=probe)
        fused, detail = self.fuse(ranked, mix)
        best = sorted(fused, key=lambda iri: (-fused[iri], iri))[: max(k, self.pool)]
        # The candidates' entries, when the re-rank reads them for their graphs (the best k
        # are among them: one read serves both); otherwise the best k are read at the end.
        entries: dict[str, Entry] | None = None
        if self.rerank:
            final, entries = self._rerank(probe, best, ranked, detail, mix, limits)
        else:
            final = {iri: fused[iri] for iri in best}
        top = sorted(final, key=lambda iri: (-final[iri], iri))[:k]
        if entries is None:
            entries = self.store.get_many(top)
        return SearchResults(
            (SearchHit(entries[i], final[i], detail.get(i, {})) for i in top if i in entries),
            arms=tuple(arm for arm in ARMS if arm in ranked),
            index_behind=behind,
        )

    def _probe(self, query: str) -> Vector | None:
        """Embed the query for the dense arm; ``None`` without one, or when the embedder fails
        (the search goes on with the lexical arm, and says so in its ``arms``)."""
        if self.dense is None:
            return None
        try:
            return self.dense.vector(query)
        except EmbedderError as exc:
            logger.warning("the query could not be embedded (%s): searching by words only", exc)
            return None

    def _refresh(self) -> int:
        """Let the dense index catch up; return how many changes it still has not applied."""
        if self.dense is None:
            return 0
        # Wait for a catch-up another thread is running (a writer's listener, the retry timer):
        # a search never misses what was committed before it began, unless the index failed.
        behind = self.dense.refresh(wait=True)
        if behind:
            logger.warning(
                "the dense index is %d L0 changes behind: recent entries may be missing from "
                "its arm (it is retrying)",
                behind,
            )
        return behind

    def arms(
        self, query: str, n: int, filters: SearchFilters, *, vector: Vector | None = None
    ) -> dict[str, list[tuple[str, float]]]:
        """Return each arm's ranked ``(iri, score)`` list for ``query`` under ``filters``.

        ``vector`` is the query's embedding when the caller has it already.
        """
        lexical = self.store.search_ids(query, limit=n, filters=filters)
        out = {"lexical": lexical}
        if self.dense is not None:
            out["dense"] = self._dense(query if vector is None else vector, n, filters)
        return out

    def _dense(
        self, query: str | Vector, n: int, filters: SearchFilters
    ) -> list[tuple[str, float]]:
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
        self, ranked: Mapping[str, list[tuple[str, float]]], weights: Mapping[str, float]
    ) -> tuple[dict[str, float], dict[str, dict[str, ArmResult]]]:
        """Fuse ranked lists by weighted reciprocal rank; return the scores and each hit's
        rank and score per arm."""
        fused: dict[str, float] = {}
        detail: dict[str, dict[str, ArmResult]] = {}
        for arm, hits in ranked.items():
            weight = weights.get(arm, 0.0)
            for rank, (iri, score) in enumerate(hits, start=1):
                detail.setdefault(iri, {})[arm] = ArmResult(rank, score)
                fused[iri] = fused.get(iri, 0.0) + weight / (self.rrf_k + rank)
        for iri, value in fused.items():
            detail[iri]["fused"] = ArmResult(0, value)
        return fused, detail

    def _rerank(
        self,
        query: Vector | None,
        best: list[str],
        ranked: Mapping[str, list[tuple[str, float]]],
        detail: dict[str, dict[str, ArmResult]],
        weights: Mapping[str, float],
        filters: SearchFilters,
    ) -> tuple[dict[str, float], dict[str, Entry] | None]:
        """Re-score the candidates; return their scores, and their entries when the group
        prior read them (``None`` otherwise)."""
        links = self.store.linked(best, self.context_predicates) if self.context_weight else []
        extra = {n for _, n in links if n not in detail}
        if extra and not filters.empty:
            extra = set(self.store.matching(filters, sorted(extra)))
        pool = list(dict.fromkeys([*best, *sorted(extra)]))
        if not pool:  # nothing matched (an empty memory, or filters that exclude everything)
            return {}, None
        raw = {"lexical": dict(ranked.get("lexical", []))}
        if self.dense is not None and query is not None:
            # The dense arm's own hits carry exact cosines already; compute only the others.
            known = dict(ranked.get("dense", []))
            missing = [iri for iri in pool if iri not in known]
            raw["dense"] = {**known, **self.dense.similarities(query, missing)}
        neighbours: dict[str, list[str]] = {}
        for iri, other in links:
            if other in raw["lexical"] or other in raw.get("dense", {}) or other in pool:
                neighbours.setdefault(iri, []).append(other)
        final = dict.fromkeys(pool, 0.0)
        for arm, scores in raw.items():
            mixed = {
                iri: scores.get(iri, 0.0)
                + self.context_weight * sum(scores.get(n, 0.0) for n in neighbours.get(iri, []))
                for iri in pool
            }
            # BM25 is scaled by its best score (0 means no match); cosines are spread over
            # the candidates' own range.
            low = 0.0 if arm == "lexical" else min(mixed.values())
            high = max(mixed.values())
            for iri in pool:
                if high > low:
                    share = (mixed[iri] - low) / (high - low)
                else:  # one value for all: each is the best there is, if it matched at all
                    share = 1.0 if high > 0 else 0.0
                final[iri] += weights.get(arm, 0.0) * share
        entries = None
        if self.group_weight:
            entries = self._group_prior(final, detail)
        for iri in pool:
            detail.setdefault(iri, {})["rerank"] = ArmResult(0, final[iri])
        return final, entries

    def _group_prior(
        self, final: dict[str, float], detail: dict[str, dict[str, ArmResult]]
    ) -> dict[str, Entry]:
        """Add to each candidate the prior of its named graph; return the candidates' entries
        (read for their graphs)."""
        entries = self.store.get_many(list(final))
        graph_of = {
            iri: entry.named_graph
            for iri, entry in entries.items()
            if entry.named_graph is not None
        }
        members: dict[str, list[float]] = {}
        for iri, graph in graph_of.items():
            members.setdefault(graph, []).append(final[iri])
        prior = {
            graph: sum(sorted(scores, reverse=True)[: self.group_top])
            / min(len(scores), self.group_top)
            for graph, scores in members.items()
        }
        for iri, graph in graph_of.items():
            boost = self.group_weight * prior[graph]
            final[iri] += boost
            detail.setdefault(iri, {})["group"] = ArmResult(0, boost)
        return entries


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
