"""A fake at the network edge for tests: an embedding API that answers slowly."""

from __future__ import annotations

import threading
from collections.abc import Sequence

import pytest

from gliding_core import HashEmbedder
from gliding_core.hyperspace.backends import CachedEmbedder


class HeldEmbedder(HashEmbedder):
    """The hash embedder behind a gate the test opens (an embedding API that answers slowly):
    only threads other than the test's own (a background catch-up, a search's reader) wait
    at it; the test's thread passes.

    Args:
        dimension: the hash embedder's dimension (its default when omitted).
    """

    def __init__(self, dimension: int | None = None) -> None:
        if dimension is None:
            super().__init__()
        else:
            super().__init__(dimension)
        self.gate = threading.Event()
        self.gate.set()
        self.waiting = threading.Event()

    def embed_documents(self, texts: Sequence[str]) -> list[list[float]]:
        if not self.gate.is_set() and threading.current_thread() is not threading.main_thread():
            self.waiting.set()
            self.gate.wait()
        return super().embed_documents(texts)


def cache_forgets(monkeypatch: pytest.MonkeyPatch) -> threading.Event:
    """Return an event set each time the embedding cache has forgotten texts."""
    forgotten = threading.Event()
    original = CachedEmbedder.forget

    def forget(cache: CachedEmbedder, texts: Sequence[str]) -> int:
        try:
            return original(cache, texts)
        finally:
            forgotten.set()

    monkeypatch.setattr(CachedEmbedder, "forget", forget)
    return forgotten
