"""Adapter: concurrent async calls on ``GlidingStore`` beside LangGraph's ``InMemoryStore``.

``python -m gliding_langchain.cli.store_bench [--operations 6000]`` runs the same mixed
operations (a third puts, a third gets, a sixth searches, a sixth namespace listings, over 20
namespaces) all at once with ``asyncio.gather`` on each store, and prints the wall time and
the batches the gliding store ran. The gliding store keeps its items in an in-memory ``Memory``
with the hash embedder (the L0 store, the dense index, the sweeps: the whole engine).
"""

from __future__ import annotations

import argparse
import asyncio
import time
from collections.abc import Awaitable, Sequence
from typing import Any

from langgraph.store.base import BaseStore
from langgraph.store.memory import InMemoryStore

from gliding_core import HashEmbedder, Memory, MemoryConfig, TopicConfig
from gliding_langchain.store import GlidingStore

NAMESPACES = 20


def call(store: BaseStore, i: int) -> Awaitable[Any]:
    """The ``i``-th of the mixed operations."""
    namespace = ("docs", str(i % NAMESPACES))
    kind = i % 6
    if kind in (0, 1):
        return store.aput(namespace, f"k{i}", {"n": i, "t": "x"})
    if kind in (2, 3):
        return store.aget(namespace, f"k{i - 2}")
    if kind == 4:
        return store.asearch(namespace, filter={"t": "x"}, limit=5)
    return store.alist_namespaces(prefix=("docs",))


def timed(store: BaseStore, n: int) -> float:
    """Seconds to run the ``n`` operations at once on ``store``."""

    async def run() -> None:
        await asyncio.gather(*(call(store, i) for i in range(n)))

    started = time.perf_counter()
    asyncio.run(run())
    return time.perf_counter() - started


class _Counting(GlidingStore):
    __slots__ = ("batches",)
    batches: int

    def batch(self, ops: Any) -> Any:
        self.batches += 1
        return super().batch(ops)


def main(argv: Sequence[str] | None = None) -> None:
    """Print the wall time of the mixed concurrent operations on each store."""
    parser = argparse.ArgumentParser(prog="python -m gliding_langchain.cli.store_bench")
    parser.add_argument("--operations", type=int, default=6_000)
    args = parser.parse_args(argv)
    config = MemoryConfig(topics=TopicConfig(interval_s=0))
    with Memory(config=config, embedder=HashEmbedder()) as memory:
        gliding = _Counting(memory)
        gliding.batches = 0
        ours = timed(gliding, args.operations)
    theirs = timed(InMemoryStore(), args.operations)
    print(f"{args.operations} concurrent operations")
    print(f"GlidingStore   {ours:8.2f} s  ({gliding.batches} batches)")
    print(f"InMemoryStore  {theirs:8.2f} s")


if __name__ == "__main__":
    main()
