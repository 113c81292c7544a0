"""Hyperspace: the Poincaré structural index, trained embeddings of the memory's hierarchy.

Nickel & Kiela (2017): each node is a point in the open unit ball; the distance
``arcosh(1 + 2|u - v|^2 / ((1 - |u|^2)(1 - |v|^2)))`` grows without bound towards the edge, so
general nodes settle near the centre and specific ones near the boundary. Training minimises,
for each edge (u, v), the softmax loss of v against sampled non-neighbours of u, by Riemannian
SGD (the Euclidean gradient scaled by ``(1 - |x|^2)^2 / 4``, then projected back inside the
ball), after a burn-in of a few epochs at a tenth of the learning rate. NumPy only; batches of
edges are updated at once.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt

from gliding_core.errors import InvalidInputError
from gliding_core.jsonld import preview

Array = npt.NDArray[np.float64]
_EPS = 1e-5
_MAX_NORM = 1.0 - _EPS


@dataclass(frozen=True, slots=True)
class PoincareSettings:
    """Training settings (defaults measured on the WordNet mammal closure, d=10)."""

    dimension: int = 10
    epochs: int = 75
    negatives: int = 10
    batch_size: int = 10
    learning_rate: float = 0.2
    burn_in: int = 10
    seed: int = 0


class PoincareIndex:
    """Poincaré embeddings of a hierarchy given as (child, parent) edges.

    Args:
        settings: training settings.
    """

    def __init__(self, settings: PoincareSettings | None = None) -> None:
        self.settings = settings or PoincareSettings()
        _check_settings(self.settings)
        self.nodes: list[str] = []
        self.index: dict[str, int] = {}
        self.vectors: Array = np.zeros((0, self.settings.dimension))
        self.train_seconds = 0.0

    # -- training ------------------------------------------------------------------------------

    def fit(self, edges: Iterable[tuple[str, str]]) -> PoincareIndex:
        """Train on ``edges`` (self-loops are ignored) and return ``self``."""
        pairs = self._load(edges)
        s = self.settings
        rng = np.random.default_rng(s.seed)
        n = len(self.nodes)
        self.vectors = rng.uniform(-1e-3, 1e-3, size=(n, s.dimension))
        related = _related(pairs, n)
        started = time.perf_counter()
        for epoch in range(s.epochs):
            rate = s.learning_rate * (0.1 if epoch < s.burn_in else 1.0)
            order = rng.permutation(len(pairs))
            for start in range(0, len(order), s.batch_size):
                self._step(pairs[order[start : start + s.batch_size]], rate, related, rng)
        self.train_seconds = time.perf_counter() - started
        return self

    def _load(self, edges: Iterable[tuple[str, str]]) -> npt.NDArray[np.int64]:
        index: dict[str, int] = {}
        pairs = []
        for edge in edges:
            if not (
                isinstance(edge, tuple | list)
                and len(edge) == 2
                and all(isinstance(x, str) and x for x in edge)
            ):
                raise InvalidInputError(
                    f"each edge must be a (child, parent) pair of strings, got {preview(edge)}"
                )
            child, parent = edge
            for node in (child, parent):
                index.setdefault(node, len(index))
            if child != parent:
                pairs.append((index[child], index[parent]))
        if not pairs:
            raise InvalidInputError("training needs at least one edge between two different nodes")
        self.nodes, self.index = list(index), index
        return np.unique(np.asarray(pairs, dtype=np.int64), axis=0)

    def _step(
        self,
        batch: npt.NDArray[np.int64],
        rate: float,
        related: npt.NDArray[np.int64],
        rng: np.random.Generator,
    ) -> None:
        theta, n = self.vectors, len(self.nodes)
        u, v = batch[:, 0], batch[:, 1]
        negatives = rng.integers(0, n, size=(len(batch), self.settings.negatives))
        keys = u[:, None] * n + negatives
        slot = np.minimum(np.searchsorted(related, keys), len(related) - 1)
        valid = (negatives != u[:, None]) & (related[slot] != keys)
        candidates = np.concatenate([v[:, None], negatives], axis=1)
        mask = np.concatenate([np.ones((len(batch), 1), bool), valid], axis=1)
        pu, px = theta[u], theta[candidates]
        uu = np.sum(pu * pu, axis=1)
        xx = np.sum(px * px, axis=2)
        ux = np.einsum("bd,bkd->bk", pu, px)
        alpha = 1.0 - uu
        beta = 1.0 - xx
        gamma = 1.0 + 2.0 * (uu[:, None] - 2.0 * ux + xx) / (alpha[:, None] * beta)
        gamma = np.maximum(gamma, 1.0 + 1e-7)
        distance = np.arccosh(gamma)
        logits = np.where(mask, -distance, -np.inf)
        logits -= logits.max(axis=1, keepdims=True)
        weights = np.exp(logits)
        weights /= weights.sum(axis=1, keepdims=True)
        grad_d = -weights
        grad_d[:, 0] += 1.0
        root = np.sqrt(gamma * gamma - 1.0)
        coeff_u = grad_d * 4.0 / (beta * root)
        coeff_x = grad_d * 4.0 / (alpha[:, None] * root)
        grad_u = np.einsum(
            "bk,bkd->bd",
            coeff_u,
            ((xx - 2.0 * ux + 1.0) / (alpha[:, None] ** 2))[:, :, None] * pu[:, None, :]
            - px / alpha[:, None, None],
        )
        grad_x = coeff_x[:, :, None] * (
            ((uu[:, None] - 2.0 * ux + 1.0) / beta**2)[:, :, None] * px
            - pu[:, None, :] / beta[:, :, None]
        )
        rows = np.concatenate([u, candidates.reshape(-1)])
        grads = np.concatenate([grad_u, grad_x.reshape(-1, theta.shape[1])])
        # Riemannian SGD: the Euclidean gradient scaled by the inverse metric (1 - |x|^2)^2 / 4.
        scale = (1.0 - np.sum(theta[rows] ** 2, axis=1)) ** 2 / 4.0
        np.subtract.at(theta, rows, (rate * scale)[:, None] * grads)
        norms = np.linalg.norm(theta[rows], axis=1, keepdims=True)
        theta[rows] /= np.maximum(norms / _MAX_NORM, 1.0)

    # -- queries -------------------------------------------------------------------------------

    def distances(self, node: str) -> Array:
        """Return the Poincaré distance from ``node`` to every node, in ``nodes`` order."""
        x = self.vectors[self._position(node)]
        return _distance(x[None, :], self.vectors)

    def distance(self, a: str, b: str) -> float:
        """Return the Poincaré distance between two nodes."""
        return float(
            _distance(self.vectors[self._position(a)][None, :], self.vectors[[self._position(b)]])[
                0
            ]
        )

    def similar(self, node: str, k: int = 10) -> list[tuple[str, float]]:
        """Return the ``k`` nodes nearest to ``node`` by Poincaré distance, with the distance."""
        if isinstance(k, bool) or not isinstance(k, int) or k < 1:
            raise InvalidInputError(f"k must be an int >= 1, got {preview(k)}")
        distances = self.distances(node)
        own = self._position(node)
        order = [i for i in np.argsort(distances) if i != own][:k]
        return [(self.nodes[i], float(distances[i])) for i in order]

    def norm(self, node: str) -> float:
        """Return how far from the centre ``node`` lies (general nodes lie near 0)."""
        return float(np.linalg.norm(self.vectors[self._position(node)]))

    def __contains__(self, node: object) -> bool:
        return isinstance(node, str) and node in self.index

    def _position(self, node: str) -> int:
        try:
            return self.index[node]
        except (KeyError, TypeError):
            raise InvalidInputError(f"{preview(node)} is not in the Poincaré index") from None

    def remove(self, nodes: Iterable[str]) -> int:
        """Drop ``nodes`` and their points from the index; return how many it held."""
        gone = {node for node in nodes if node in self.index}
        if not gone:
            return 0
        keep = [i for i, node in enumerate(self.nodes) if node not in gone]
        self.nodes = [self.nodes[i] for i in keep]
        self.vectors = self.vectors[keep]
        self.index = {node: i for i, node in enumerate(self.nodes)}
        return len(gone)

    # -- persistence ---------------------------------------------------------------------------

    def save(self, path: Path) -> None:
        """Write the index to ``path`` (NumPy ``.npz`` with the node names)."""
        np.savez(
            path,
            vectors=self.vectors,
            nodes=np.asarray(json.dumps(self.nodes)),
            settings=np.asarray(json.dumps(_settings_dict(self.settings))),
        )

    @classmethod
    def load(cls, path: Path) -> PoincareIndex:
        """Read an index written by ``save``."""
        with np.load(path) as data:
            index = cls(PoincareSettings(**json.loads(str(data["settings"]))))
            index.vectors = np.asarray(data["vectors"], dtype=np.float64)
            index.nodes = json.loads(str(data["nodes"]))
        index.index = {node: i for i, node in enumerate(index.nodes)}
        return index


def _settings_dict(settings: PoincareSettings) -> dict[str, object]:
    return {name: getattr(settings, name) for name in settings.__slots__}


def _distance(x: Array, ys: Array) -> Array:
    xx = np.sum(x * x, axis=1)
    yy = np.sum(ys * ys, axis=1)
    diff = np.sum((ys - x) ** 2, axis=1)
    gamma = 1.0 + 2.0 * diff / ((1.0 - xx) * (1.0 - yy))
    return np.asarray(np.arccosh(np.maximum(gamma, 1.0)), dtype=np.float64)


def _related(pairs: npt.NDArray[np.int64], n: int) -> npt.NDArray[np.int64]:
    """Return the sorted keys ``u * n + v`` of related pairs, in both directions."""
    return np.unique(np.concatenate([pairs[:, 0] * n + pairs[:, 1], pairs[:, 1] * n + pairs[:, 0]]))


def _check_settings(s: PoincareSettings) -> None:
    for name in ("dimension", "epochs", "negatives", "batch_size"):
        value = getattr(s, name)
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise InvalidInputError(f"{name} must be an int >= 1, got {preview(value)}")
    if not s.learning_rate > 0:
        raise InvalidInputError(f"learning_rate must be > 0, got {s.learning_rate!r}")
    if isinstance(s.burn_in, bool) or not isinstance(s.burn_in, int) or s.burn_in < 0:
        raise InvalidInputError(f"burn_in must be an int >= 0, got {preview(s.burn_in)}")


class HasDistances(Protocol):
    """Anything that gives the distances from a node to every node (ours, gensim's vectors)."""

    def distances(self, node: str) -> Any:
        """Return the distances from ``node`` to every node."""
        ...


def reconstruction(
    index: HasDistances, relations: dict[str, set[str]], nodes: Sequence[str]
) -> tuple[float, float]:
    """Return the reconstruction mean rank and MAP of an embedding of ``relations``.

    For each node, each of its related nodes is ranked among the other nodes not related to it
    by distance (rank 1 is best); average precision is computed over its related nodes. ``nodes``
    gives the order of ``index.distances(node)``.
    """
    position = {node: i for i, node in enumerate(nodes)}
    ranks: list[int] = []
    precisions: list[float] = []
    for node, related in relations.items():
        distances = np.asarray(index.distances(node), dtype=np.float64)
        positives = np.asarray([position[r] for r in related])
        negative = np.ones(len(distances), dtype=bool)
        negative[positives] = False
        negative[position[node]] = False  # a node is not its own competitor
        closer = (distances[None, :] < distances[positives][:, None]) & negative[None, :]
        item_ranks = closer.sum(axis=1) + 1
        ordered = np.sort(item_ranks) + np.arange(len(item_ranks))
        precisions.append(float((np.arange(1, len(ordered) + 1) / np.sort(ordered)).mean()))
        ranks.extend(int(r) for r in item_ranks)
    return float(np.mean(ranks)), float(np.mean(precisions))
