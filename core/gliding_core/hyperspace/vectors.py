"""Hyperspace: small vector helpers shared by every layer that compares embeddings."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from contextlib import AbstractContextManager

import numpy as np
import numpy.typing as npt
from threadpoolctl import ThreadpoolController

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


def one_blas_thread() -> AbstractContextManager[object]:
    """Run the enclosed numpy products on one BLAS thread, process-wide while inside.

    A search multiplies matrices of a few hundred rows at most. OpenBLAS splits even those
    over its own threads, which then spin for a while after each product and take the CPU
    from the embedding model's threads: with a local model, the next query's embedding took
    two to four times as long. One thread is as fast for products this small.
    """
    limited: AbstractContextManager[object] = _blas().limit(limits=1, user_api="blas")
    return limited


def _blas() -> ThreadpoolController:
    """The process's BLAS libraries, found again only when modules were imported since
    (finding them walks the loaded libraries): a BLAS loaded after the first search (a local
    model's, on its first use) is limited too."""
    global _found
    modules = len(sys.modules)
    found = _found
    if found is None or found[0] != modules:
        found = _found = (modules, ThreadpoolController())
    return found[1]


_found: tuple[int, ThreadpoolController] | None = None  # (modules imported, their BLAS)
