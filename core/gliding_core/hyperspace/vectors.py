"""Hyperspace: small vector helpers shared by every layer that compares embeddings."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

Vector = npt.NDArray[np.float32]


def as_vector(values: Sequence[float] | Vector) -> Vector:
    """Return ``values`` as a 1-D float32 array."""
    return np.asarray(values, dtype=np.float32).reshape(-1)


def cosine(a: Sequence[float] | Vector | None, b: Sequence[float] | Vector | None) -> float | None:
    """Return the cosine similarity of ``a`` and ``b`` in [-1, 1], or ``None`` when undefined.

    Undefined: a vector is missing or zero, or the lengths differ.
    """
    if a is None or b is None:
        return None
    x, y = as_vector(a), as_vector(b)
    if x.shape != y.shape or x.size == 0:
        return None
    norm = float(np.linalg.norm(x) * np.linalg.norm(y))
    if norm == 0.0:
        return None
    return max(-1.0, min(1.0, float(np.dot(x, y)) / norm))
