"""Benchmarks of hybrid search speed (query latency at N entries) and of batch ingest.

Synthetic, seeded data (as the L0 benchmark): texts of 12-24 words from a Zipf-distributed
vocabulary, written as a bulk load (``put_many`` in batches of 500 with the dense index's
embedding deferred, then one catch-up: embedding and indexing included), then the last
``ONLINE`` entries (a tenth of a small run) as a memory in use takes them, each batch embedded
as it commits. Each query is three fresh words, so its embedding is computed, never cached.

``run(..., url=...)`` runs the same on PostgreSQL: ``PostgresSearch`` is what a memory's search
is made of (L0, the cached embedder, the dense index, ``HybridSearch``) with L0 in a
``PostgresEntryStore`` and the dense index in pgvector beside it, in a schema of its own that is
dropped after. ``recall.run`` takes it as its ``memory`` to compare LoCoMo recall across the two
backends in one run.

``run_ingest`` writes the same data with ``memory.put_many`` both ways: ``embed="now"`` (a batch
returns once it is embedded) and ``embed="later"`` (a batch returns once L0 has committed; the
index catches up in the background), timing when the writes returned and when the dense index
had caught up with all of them.
"""

from __future__ import annotations

import random
import statistics
import time
import uuid
from collections.abc import Sequence
from contextlib import AbstractContextManager
from typing import Any, Literal, Protocol

import numpy as np
from typing_extensions import Unpack

from gliding_core.cli.benchmarks import progress, stages
from gliding_core.cli.benchmarks.l0 import _records, _vocabulary
from gliding_core.config import MemoryConfig, SearchOptions, TopicConfig
from gliding_core.hyperspace.backends import CachedEmbedder
from gliding_core.hyperspace.embedders import Embedder, embedder_name
from gliding_core.hyperspace.index import VectorIndex
from gliding_core.hyperspace.search import HybridSearch, SearchResults
from gliding_core.memory import Memory
from gliding_core.store.entry import Record
from gliding_core.store.protocol import EntryStore
from gliding_core.tokens import TokenCounter

BATCH = 500
ONLINE = 1_000  # the last entries of a run, written after the bulk load with their embedding


class Searcher(Protocol):
    """What the search benchmarks use of a memory (``Memory`` has it; so has
    ``PostgresSearch``)."""

    @property
    def store(self) -> EntryStore: ...

    @property
    def index(self) -> VectorIndex: ...

    def search(
        self, query: str, k: int = 10, **options: Unpack[SearchOptions]
    ) -> SearchResults: ...

    def count_tokens(self, text: str) -> int: ...


class PostgresSearch:
    """A memory's search on PostgreSQL: L0 and pgvector in a new schema at ``url``, with the
    memory's cached embedder and ``HybridSearch``; the schema is dropped on ``close``."""

    def __init__(self, url: str, embedder: Embedder) -> None:
        from gliding_core.hyperspace.pgvector import PgVectorIndex
        from gliding_core.store.postgres import PostgresEntryStore

        self._url, self._schema = url, f"bench_{uuid.uuid4().hex[:12]}"
        self.embedder = CachedEmbedder(embedder)
        self._store = PostgresEntryStore(url, schema=self._schema)
        self.store: EntryStore = self._store
        self.index: VectorIndex = PgVectorIndex(self._store, self.embedder)
        self.hyperspace = HybridSearch(self.store, self.index)
        self.tokens = TokenCounter()

    def search(self, query: str, k: int = 10, **options: Unpack[SearchOptions]) -> SearchResults:
        """Hybrid search, as ``Memory.search``."""
        return self.hyperspace.search(query, k, **options)

    def count_tokens(self, text: str) -> int:
        """The exact cl100k count of ``text``, as ``Memory.count_tokens``."""
        return self.tokens.count(text)

    def close(self) -> None:
        """Close the index and the store and drop the schema."""
        self.index.close()
        db = self._store.db
        with db.connection() as conn:
            conn.execute(f'DROP SCHEMA IF EXISTS "{self._schema}" CASCADE')
        self._store.close()
        self.embedder.close()

    def __enter__(self) -> PostgresSearch:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def searcher(embedder: Embedder, url: str | None = None) -> AbstractContextManager[Searcher]:
    """A fresh in-memory ``Memory``, or a ``PostgresSearch`` on ``url`` when given."""
    if url is not None:
        return PostgresSearch(url, embedder)
    return Memory(config=MemoryConfig(topics=TopicConfig(interval_s=0)), embedder=embedder)


def run(
    entries: int,
    embedder: Embedder,
    *,
    queries: int = 300,
    seed: int = 0,
    url: str | None = None,
    exact_sample: int = 0,
) -> dict[str, Any]:
    """Ingest ``entries`` synthetic entries, time ``queries`` searches, return the figures
    (on PostgreSQL at ``url`` when given, else on an in-memory SQLite memory).

    The figures hold each stage's time (``stages``, see ``stages.STAGES``) and, with
    ``exact_sample``, the dense index's recall against an exact search on that many of the
    queries (``dense_recall``, see ``dense_recall``).
    """
    rng = random.Random(seed)
    vocab = _vocabulary(rng)
    data = _records(entries, rng, vocab)
    texts = [f"{' '.join(rng.sample(vocab[50:5_000], 3))} q{i}" for i in range(queries)]
    records = [Record(d["node"], tags=d["tags"]) for d in data]
    online = min(ONLINE, entries // 10)
    with searcher(embedder, url) as memory:
        start = time.perf_counter()
        with memory.index.deferred():  # a bulk load: the index catches up once, at the end
            for offset in progress(range(0, entries - online, BATCH), "ingest batches"):
                memory.store.put_many(records[offset : min(offset + BATCH, entries - online)])
        memory.index.refresh(wait=True)
        bulk = time.perf_counter() - start
        start = time.perf_counter()
        for offset in range(entries - online, entries, BATCH):  # each batch embedded on commit
            memory.store.put_many(records[offset : offset + BATCH])
        added = time.perf_counter() - start
        clock = stages.clocked(memory)
        latencies, samples = [], []
        for query in progress(texts, "queries"):
            clock.take(0.0)
            start = time.perf_counter()
            memory.search(query, 10)
            elapsed = time.perf_counter() - start
            samples.append(clock.take(elapsed))
            latencies.append(elapsed * 1e3)
        recall = dense_recall(memory.store, memory.index, texts[:exact_sample])
    cuts = statistics.quantiles(latencies, n=100, method="inclusive")
    figures: dict[str, Any] = {
        "backend": "sqlite" if url is None else "postgresql",
        "entries": entries,
        "embedder": embedder_name(embedder),
        "ingest_per_s": (entries - online) / bulk,
        "online_per_s": online / added if online else None,
        "search_p50_ms": cuts[49],
        "search_p95_ms": cuts[94],
        "search_mean_ms": statistics.fmean(latencies),
        "stages": stages.summary(samples, latencies),
    }
    if recall is not None:
        figures["dense_recall"] = recall
    return figures


def dense_recall(
    store: EntryStore, index: VectorIndex, queries: Sequence[str], *, batch: int = 5_000
) -> dict[str, float] | None:
    """The dense index's recall against an exact search, over ``queries`` (``None`` for none).

    The exact search scores every entry of the store by the cosine of its vector with the
    query's (one pass over the store for all the queries; an entry in several windows by the
    mean of its windows, which the benchmark's short texts never are). ``recall@10``: the
    share of the exact ten best that the index's own ten best hold; ``recall@10_in_100``: the
    share of them among the index's hundred best, as many as the dense arm gives the fusion
    by default.
    """
    if not queries:
        return None
    probes = np.stack([index.vector(query) for query in queries]).astype(np.float32)
    probes /= np.maximum(np.linalg.norm(probes, axis=1, keepdims=True), 1e-12)
    best_ids: list[list[str]] = [[] for _ in queries]
    best_scores = np.full((len(queries), 0), -np.inf, dtype=np.float32)
    for items in progress(store.scan_texts(batch), "exact search"):
        vectors = index.vectors([iri for iri, _ in items])
        if not vectors:
            continue
        iris = list(vectors)
        scores = probes @ np.stack([vectors[iri] for iri in iris]).T
        merged = np.concatenate([best_scores, scores], axis=1)
        keep = np.argsort(-merged, axis=1, kind="stable")[:, :10]
        best_ids = [
            [(row[j] if j < len(row) else iris[j - len(row)]) for j in order]
            for row, order in zip(best_ids, keep, strict=True)
        ]
        best_scores = np.take_along_axis(merged, keep, axis=1)
    found10 = found100 = total = 0
    for probe, exact in zip(probes, best_ids, strict=True):
        approximate = [iri for iri, _ in index.query(probe, 100)]
        truth = set(exact)
        found10 += len(truth & set(approximate[:10]))
        found100 += len(truth & set(approximate))
        total += len(truth)
    return {
        "queries": len(queries),
        "recall@10": found10 / total if total else 1.0,
        "recall@10_in_100": found100 / total if total else 1.0,
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
                memory.put_many(records[offset : offset + BATCH], embed=mode, progress=False)
            written = time.perf_counter() - start
            memory.index.refresh(wait=True)  # waits for the background catch-up, if any
            indexed = time.perf_counter() - start
            out[f"{mode}_returned_per_s"] = entries / written
            out[f"{mode}_indexed_per_s"] = entries / indexed
    return out
