"""Fixtures for the LlamaIndex adapters: a real in-memory Memory with the hash embedder."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from gliding_core import HashEmbedder, Memory


@pytest.fixture
def memory() -> Iterator[Memory]:
    """An in-memory gliding Memory (SQLite + ephemeral Chroma) that embeds by feature hashing."""
    with Memory(embedder=HashEmbedder()) as value:
        yield value
