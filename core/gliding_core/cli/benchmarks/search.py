"""Benchmarks of hybrid search speed (query latency at N entries) and of batch ingest.

Synthetic, seeded data (as the L0 benchmark): texts of 12-24 words from a Zipf-distributed
vocabulary, written with ``put_many`` in batches of 500 (embedding and indexing included).
Each query is three fresh words, so its embedding is computed, never cached.

``run_ingest`` writes the same data with ``memory.put_many`` both ways: ``embed="now"`` (a batch
returns once it is embedded) and ``embed="later"`` (a batch returns once L0 has committed; the
index catches up in the background), timing when the writes returned and when the dense index
had caught up with all of them.
"""

from __future__ import annotations

import random
import statistics
import time
from typing import Any, Literal

from gliding_core.cli.benchmarks import progress
from gliding_core.cli.benchmarks.l0 import _records, _vocabulary
from gliding_core.config import MemoryConfig, TopicConfig
from gliding_core.hyperspace.embedders import Embedder, embedder_name
from gliding_core.memory import Memory
from gliding_core.store.entry import Record

BATCH = 500


def run(entries: int, embedder: Embedder, *, queries: int = 300, seed: int = 0) -> dict[str, Any]:
    """Ingest ``entries`` synthetic entries, time ``queries`` searches, return the figures."""
    rng = random.Random(seed)
    vocab = _vocabulary(rng)
    data = _records(entries, rng, vocab)
    config = MemoryConfig(topics=TopicConfig(interval_s=0))
    with Memory(config=config, embedder=embedder) as memory:
        start = time.perf_counter()
        for offset in progress(range(0, entries, BATCH), "ingest batches"):
            memory.store.put_many(
                [Record(d["node"], tags=d["tags"]) for d in data[offset : offset + BATCH]]
            )
        ingest = entries / (time.perf_counter() - start)
        latencies = []
        for i in progress(range(queries), "queries"):
            query = f"{' '.join(rng.sample(vocab[50:5_000], 3))} q{i}"
            start = time.perf_counter()
            memory.search(query, 10)
            latencies.append((time.perf_counter() - start) * 1e3)
    cuts = statistics.quantiles(latencies, n=100, method="inclusive")
    return {
        "entries": entries,
        "embedder": embedder_name(embedder),
        "ingest_per_s": ingest,
        "search_p50_ms": cuts[49],
        "search_p95_ms": cuts[94],
    }


def run_ingest(entries: int, embedder: Embedder, *, seed: int = 0) -> dict[str, Any]:
    """Write ``entries`` synthetic entries with each embed mode; return entries/s of each."""
    rng = random.Random(seed)
    data = _records(entries, rng, _vocabulary(rng))
    records = [Record(d["node"], tags=d["tags"]) for d in data]
    out: dict[str, Any] = {"entries": entries, "embedder": embedder_name(embedder)}
    modes: tuple[Literal["now", "later"], ...] = ("now", "later")
    for mode in modes:
        config = MemoryConfig(topics=TopicConfig(interval_s=0))
        with Memory(config=config, embedder=embedder) as memory:
            start = time.perf_counter()
            for offset in progress(range(0, entries, BATCH), f"ingest batches ({mode})"):
                memory.put_many(records[offset : offset + BATCH], embed=mode)
            written = time.perf_counter() - start
            memory.index.refresh(wait=True)  # waits for the background catch-up, if any
            indexed = time.perf_counter() - start
            out[f"{mode}_returned_per_s"] = entries / written
            out[f"{mode}_indexed_per_s"] = entries / indexed
    return out
