"""Benchmark of the L0 store: put throughput, get, tag query and text search latency, memory.

Synthetic, deterministic data (seeded): each node has a Zipf-distributed text of 12-24 words
from a 20,000-word vocabulary, one of five types, and two tags, one of which is shared by exactly
100 entries, so a tag query returns 100 hits.
"""

from __future__ import annotations

import itertools
import json
import random
import resource
import sqlite3
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from gliding_core.config import StoreConfig
from gliding_core.entry import Record
from gliding_core.store import L0Store

BATCH = 5_000
TYPES = ("Task", "Decision", "Observation", "Message", "Person")
SYLLABLES = ("ka", "lo", "mi", "ne", "ru", "sa", "ti", "vo", "ze", "pa", "do", "gi", "hu", "be")


def _vocabulary(rng: random.Random, size: int = 20_000) -> list[str]:
    words: dict[str, None] = {}
    while len(words) < size:
        words["".join(rng.choice(SYLLABLES) for _ in range(rng.randint(2, 4)))] = None
    return list(words)


def _records(entries: int, rng: random.Random, vocab: list[str]) -> list[dict[str, Any]]:
    cumulative = list(itertools.accumulate(1 / (rank + 1) for rank in range(len(vocab))))
    groups = max(1, entries // 100)
    items = []
    for i in range(entries):
        words = rng.choices(vocab, cum_weights=cumulative, k=rng.randint(12, 24))
        items.append(
            {
                "node": {
                    "@id": f"urn:bench:{i}",
                    "@type": TYPES[i % len(TYPES)],
                    "text": " ".join(words),
                    "about": {"@id": f"urn:bench:{i // 10}"},
                },
                "tags": [f"group-{i % groups}", f"kind-{i % 7}"],
                "importance": round(rng.random(), 3),
            }
        )
    return items


def _latencies(call: Callable[[Any], object], arguments: list[Any]) -> list[float]:
    """Call ``call`` once per argument; return each call's latency in milliseconds."""
    samples = []
    for argument in arguments:
        start = time.perf_counter_ns()
        call(argument)
        samples.append((time.perf_counter_ns() - start) / 1e6)
    return samples


def _quantiles(samples: list[float]) -> tuple[float, float]:
    cuts = statistics.quantiles(samples, n=100, method="inclusive")
    return cuts[49], cuts[94]


def run(
    entries: int,
    *,
    directory: Path | None = None,
    seed: int = 0,
    queries: int = 2_000,
    single_puts: int = 500,
) -> dict[str, float]:
    """Run the L0 benchmark on a new file store and return its figures."""
    rng = random.Random(seed)
    vocab = _vocabulary(rng)
    data = _records(entries, rng, vocab)
    with tempfile.TemporaryDirectory(dir=directory) as tmp:
        path = Path(tmp) / "bench.sqlite3"
        with L0Store(path, StoreConfig()) as store:
            figures = _measure(store, data, rng, vocab, queries, single_puts)
        figures["db_mb"] = sum(p.stat().st_size for p in Path(tmp).iterdir()) / 2**20
        figures["baseline_kv_put_per_s"] = _baseline_kv(Path(tmp) / "kv.sqlite3", data)
    figures["batched_put_vs_kv"] = figures["batched_put_per_s"] / figures["baseline_kv_put_per_s"]
    figures["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return figures


def _baseline_kv(path: Path, data: list[dict[str, Any]]) -> float:
    """Return the put rate of a bare key-value table (IRI -> JSON) with the same durability.

    The floor under the store's batched put: same batches, same WAL and sync settings, but no
    validation, merge, tags, types, edges or full-text index.
    """
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute("PRAGMA synchronous = FULL")
    conn.execute("CREATE TABLE kv (iri TEXT PRIMARY KEY, content TEXT NOT NULL)")
    start = time.perf_counter()
    for offset in range(0, len(data), BATCH):
        conn.execute("BEGIN IMMEDIATE")
        conn.executemany(
            "INSERT INTO kv (iri, content) VALUES (?, ?)",
            [(d["node"]["@id"], json.dumps(d["node"])) for d in data[offset : offset + BATCH]],
        )
        conn.execute("COMMIT")
    rate = len(data) / (time.perf_counter() - start)
    conn.close()
    return rate


def _measure(
    store: L0Store,
    data: list[dict[str, Any]],
    rng: random.Random,
    vocab: list[str],
    queries: int,
    single_puts: int,
) -> dict[str, float]:
    entries = len(data)
    start = time.perf_counter()
    for offset in range(0, entries, BATCH):
        store.put_many(
            [
                Record(item["node"], tags=item["tags"], importance=item["importance"])
                for item in data[offset : offset + BATCH]
            ]
        )
    batched = entries / (time.perf_counter() - start)

    start = time.perf_counter()
    for i in range(single_puts):
        store.put(
            {"@id": f"urn:bench:single:{i}", "text": " ".join(rng.sample(vocab, 12))},
            tags=["single"],
        )
    single = single_puts / (time.perf_counter() - start)

    get_iris = [f"urn:bench:{rng.randrange(entries)}" for _ in range(queries)]
    gets = _latencies(store.get, get_iris)
    groups = max(1, entries // 100)
    tag_sets = [[f"group-{rng.randrange(groups)}"] for _ in range(queries)]
    tag_times = _latencies(store.by_tags, tag_sets)
    hits = sum(len(store.by_tags(tags)) for tags in tag_sets[:100]) / min(100, queries)
    # Queries of three words from the middle of the vocabulary (not stop-word-like, not unseen).
    texts = [" ".join(rng.sample(vocab[50:5_000], 3)) for _ in range(queries)]
    text_times = _latencies(store.search_text, texts)
    get_p50, get_p95 = _quantiles(gets)
    tag_p50, tag_p95 = _quantiles(tag_times)
    text_p50, text_p95 = _quantiles(text_times)
    return {
        "entries": float(entries),
        "batched_put_per_s": batched,
        "single_put_per_s": single,
        "get_p50_ms": get_p50,
        "get_p95_ms": get_p95,
        "tag_query_hits_mean": hits,
        "tag_query_p50_ms": tag_p50,
        "tag_query_p95_ms": tag_p95,
        "text_search_p50_ms": text_p50,
        "text_search_p95_ms": text_p95,
    }
