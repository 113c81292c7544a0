"""Attention: the relevance tracker: how far an input is from the task and from the last input.

score = alpha * sim(input, task goal) + (1 - alpha) * sim(input, previous input), alpha 0.6.
Similarities are cosines clamped to [0, 1] (an opposite vector is unrelated, not relevant).
Defined values when an embedding is missing: with one of the two references the score is that
similarity alone; with neither, or without the input's own embedding, it is ``NEUTRAL`` (0.5).
Thread-safe.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence

from gliding_core.errors import InvalidInputError
from gliding_core.hyperspace.vectors import Vector, as_vector, cosine
from gliding_core.jsonld import preview

NEUTRAL = 0.5
DEFAULT_ALPHA = 0.6


def similarity(
    a: Sequence[float] | Vector | None, b: Sequence[float] | Vector | None
) -> float | None:
    """Return the cosine of ``a`` and ``b`` clamped to [0, 1], or ``None`` when undefined."""
    value = cosine(a, b)
    return None if value is None else max(0.0, value)


class RelevanceTracker:
    """Score each new input against the task goal and the previous input.

    Args:
        alpha: the weight of the task goal; ``1 - alpha`` goes to the previous input.
    """

    def __init__(self, alpha: float = DEFAULT_ALPHA) -> None:
        if isinstance(alpha, bool) or not isinstance(alpha, (int, float)) or not 0 <= alpha <= 1:
            raise InvalidInputError(f"alpha must be a number in [0, 1], got {preview(alpha)}")
        self.alpha = float(alpha)
        self._lock = threading.Lock()
        self._task: Vector | None = None
        self._previous: Vector | None = None

    @property
    def task_embedding(self) -> Vector | None:
        """The embedding of the task goal, or ``None``."""
        return self._task

    def set_task(self, embedding: Sequence[float] | Vector | None) -> None:
        """Set the task goal's embedding (the 5W2H what + why, or the task statement)."""
        with self._lock:
            self._task = None if embedding is None else as_vector(embedding)

    def set_previous(self, embedding: Sequence[float] | Vector | None) -> None:
        """Set the previous input's embedding (a session rebuilt from L0 restores it)."""
        with self._lock:
            self._previous = None if embedding is None else as_vector(embedding)

    def score(self, embedding: Sequence[float] | Vector | None, *, remember: bool = True) -> float:
        """Return the relevance of a new input; with ``remember`` it becomes the previous input."""
        if embedding is None:
            return NEUTRAL
        vector = as_vector(embedding)
        with self._lock:
            goal, local = similarity(vector, self._task), similarity(vector, self._previous)
            if remember:
                self._previous = vector
        if goal is not None and local is not None:
            return self.alpha * goal + (1 - self.alpha) * local
        if goal is not None:
            return goal
        return NEUTRAL if local is None else local

    def reset(self) -> None:
        """Forget the task goal and the previous input."""
        with self._lock:
            self._task = self._previous = None
