"""Hyperspace: the structure side of the memory, Poincaré embeddings of L0's hierarchy.

The hierarchy is read from L0: each entry is a child of each of its JSON-LD types, and links
under the hierarchy predicates (``parent``, ``subClassOf``, ``broader``, ``partOf`` ...) point
from child to parent. Training is explicit (``train()``); the trained index is saved beside the
memory's other files and loaded with it.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

from gliding_core.errors import InvalidInputError
from gliding_core.hyperspace.poincare import PoincareIndex, PoincareSettings
from gliding_core.hyperspace.search import HybridSearch, SearchHit
from gliding_core.jsonld import preview
from gliding_core.store.protocol import EntryStore

logger = logging.getLogger(__name__)

HIERARCHY_PREDICATES = (
    "parent",
    "subClassOf",
    "rdfs:subClassOf",
    "broader",
    "partOf",
    "isA",
)


@dataclass(frozen=True, slots=True)
class DualHit:
    """A dual-space hit: the text hit, its structural similarity, and the mixed score."""

    hit: SearchHit
    structure: float
    score: float


class StructureIndex:
    """Poincaré embeddings of L0's hierarchy, with nearest neighbours and dual-space search.

    Args:
        store: the L0 store to read the hierarchy from.
        path: where the trained index is saved; ``None`` keeps it in memory only.
    """

    def __init__(self, store: EntryStore, path: Path | None = None) -> None:
        self.store, self.path = store, path
        self.index: PoincareIndex | None = None
        if path is not None and path.is_file():
            self.index = PoincareIndex.load(path)

    def edges(self) -> list[tuple[str, str]]:
        """Return the hierarchy's (child, parent) edges as L0 holds them now."""
        return self.store.hierarchy(HIERARCHY_PREDICATES)

    def train(self, settings: PoincareSettings | None = None) -> PoincareIndex:
        """Train on the current hierarchy, save it, and return the index."""
        edges = self.edges()
        if not any(child != parent for child, parent in edges):
            raise InvalidInputError("L0 holds no hierarchy to train on (no types or parent links)")
        self.index = PoincareIndex(settings).fit(edges)
        if self.path is not None:
            self.index.save(self.path)
        logger.info("trained the Poincaré index on %d edges", len(edges))
        return self.index

    def similar(self, iri: str, k: int = 10) -> list[tuple[str, float]]:
        """Return the ``k`` nodes structurally nearest to ``iri``, with their distances."""
        return self._trained().similar(iri, k)

    def dual_search(
        self,
        search: HybridSearch,
        query: str,
        k: int = 10,
        *,
        alpha: float = 0.5,
        anchor: str | None = None,
    ) -> list[DualHit]:
        """Mix text and structure: ``alpha * text + (1 - alpha) * structure``.

        Text scores come from hybrid search, scaled to [0, 1]; structure is
        ``1 / (1 + distance)`` to ``anchor`` (the best text hit when omitted) in the ball.
        """
        if isinstance(alpha, bool) or not isinstance(alpha, (int, float)) or not 0 <= alpha <= 1:
            raise InvalidInputError(f"alpha must be a number in [0, 1], got {preview(alpha)}")
        index = self._trained()
        hits = search.search(query, max(k * 3, 30))
        if not hits:
            return []
        center = anchor or next((h.iri for h in hits if h.iri in index), None)
        top = max(h.score for h in hits) or 1.0
        out = []
        for hit in hits:
            structure = 0.0
            if center is not None and center in index and hit.iri in index:
                structure = 1.0 / (1.0 + index.distance(center, hit.iri))
            text = hit.score / top
            out.append(DualHit(hit, structure, alpha * text + (1 - alpha) * structure))
        return sorted(out, key=lambda d: -d.score)[:k]

    def _trained(self) -> PoincareIndex:
        if self.index is None:
            raise InvalidInputError("the structure index is not trained yet: call train() first")
        return self.index
