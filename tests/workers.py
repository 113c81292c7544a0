"""Two workers of one memory, for the adapters' worker tests: two ``Memory`` objects on one
shared directory (neither owns it, as processes opened with ``engines=False``) and a third on a
directory of its own, serving the same conversation alone, to compare with."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from gliding_core import HashEmbedder, Memory, MemoryConfig, SessionConfig, TopicConfig

LINES = [
    "The payments release needs a rollback plan before Friday.",
    "Login tests on mobile fail behind the CDN since Tuesday.",
    "Size the reporting replicas' connection pool for the night jobs.",
    "The data team's cloud spend doubled this quarter.",
    "Rotate the JWT signing keys without downtime.",
]
"""What the users say, turn after turn."""


def worker_memory(directory: Path) -> Memory:
    """Return a worker's memory on ``directory``: a small L1 budget (part of a conversation
    leaves the window), topics at once, one fixed clock."""
    config = MemoryConfig(
        session=SessionConfig(budget=120, max_summary_tokens=30),
        topics=TopicConfig(interval_s=0),
    )
    return Memory(
        config=config,
        embedder=HashEmbedder(),
        directory=directory,
        engines=False,
        clock=lambda: 1_000_000.0,
    )


@contextmanager
def worker_memories(root: Path) -> Iterator[tuple[Memory, Memory, Memory]]:
    """Yield two workers' memories on ``root/shared`` and one alone on ``root/alone``; close
    them after."""
    (root / "shared").mkdir()
    (root / "alone").mkdir()
    made = [worker_memory(root / "shared"), worker_memory(root / "shared")]
    made.append(worker_memory(root / "alone"))
    try:
        yield made[0], made[1], made[2]
    finally:
        for memory in made:
            memory.close()
