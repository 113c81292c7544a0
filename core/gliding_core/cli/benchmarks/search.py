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

import json
import random
import statistics
import time
import uuid
from collections.abc import Sequence
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any, Literal, Protocol

import numpy as np
from typing_extensions import Unpack

from gliding_core.cli.benchmarks import progress, stages
from gliding_core.cli.benchmarks.l0 import _records, _vocabulary
from gliding_core.config import MemoryConfig, SearchOptions, StoreConfig, TopicConfig
from gliding_core.errors import InvalidInputError
from gliding_core.hyperspace.backends import CachedEmbedder
from gliding_core.hyperspace.embedders import Embedder, embedder_name
from gliding_core.hyperspace.index import VectorIndex
from gliding_core.hyperspace.search import HybridSearch, SearchResults
from gliding_core.memory import Memory
from gliding_core.store.entry import Record
from gliding_core.store.filters import SearchFilters
from gliding_core.store.protocol import EntryStore
from gliding_core.store.sqlite import L0Store
from gliding_core.tokens import TokenCounter

BATCH = 500
ONLINE = 1_000  # the last entries of a run, written after the bulk load with their embedding
TIE = 1e-5  # two cosines closer than this are one score (float32 on either side)
STORE_MARKER = "bench-search.json"  # what a store built under --store holds (entries, seed, ...)


class Searcher(Protocol):
    """What the search benchmarks use of a memory (``Memory`` has it; so has
    ``PostgresSearch``)."""

    @property
    def store(self) -> EntryStore: ...

    @property
    def index(self) -> VectorIndex: ...

    def search(
        self,
        query: str,
        k: int = 10,
        *,
        filters: SearchFilters | None = None,
        **options: Unpack[SearchOptions],
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

    def search(
        self,
        query: str,
        k: int = 10,
        *,
        filters: SearchFilters | None = None,
        **options: Unpack[SearchOptions],
    ) -> SearchResults:
        """Hybrid search, as ``Memory.search``."""
        return self.hyperspace.search(query, k, filters=filters, **options)

    def count_tokens(self, text: str) -> int:
        """The exact cl100k count of ``text``, as ``Memory.count_tokens``."""
        return self.tokens.count(text)

    def close(self) -> None:
        """Close the search, the index and the store and drop the schema."""
        self.hyperspace.close()
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


def searcher(
    embedder: Embedder, url: str | None = None, directory: Path | None = None
) -> AbstractContextManager[Searcher]:
    """A fresh in-memory ``Memory``, a ``Memory`` under ``directory``, or a ``PostgresSearch``
    on ``url`` when given."""
    if url is not None:
        return PostgresSearch(url, embedder)
    if directory is not None:
        # A benchmark's store: nothing in it must survive a power loss.
        config = MemoryConfig(
            topics=TopicConfig(interval_s=0), store=StoreConfig(durability="normal")
        )
        return Memory(config=config, embedder=embedder, directory=directory)
    return Memory(config=MemoryConfig(topics=TopicConfig(interval_s=0)), embedder=embedder)


def _built(directory: Path | None, key: dict[str, Any]) -> bool:
    """Whether ``directory`` holds a store this benchmark built with the same ``key``.

    Raises:
        InvalidInputError: the directory holds something else (it is never overwritten).
    """
    if directory is None:
        return False
    if directory.exists() and not directory.is_dir():
        raise InvalidInputError(f"{str(directory)!r} is not a directory")
    marker = directory / STORE_MARKER
    if marker.is_file():
        try:
            found = json.loads(marker.read_text(encoding="utf-8"))
        except ValueError:  # not UTF-8, or not JSON
            raise InvalidInputError(
                f"{str(directory)!r} holds a {STORE_MARKER} this benchmark did not write"
            ) from None
        if found != key:
            raise InvalidInputError(
                f"{str(directory)!r} holds a store built with {found}, not {key}"
            )
        return True
    if directory.exists() and any(directory.iterdir()):
        raise InvalidInputError(
            f"{str(directory)!r} is not empty and holds no store this benchmark built"
        )
    return False


def run(
    entries: int,
    embedder: Embedder,
    *,
    queries: int = 300,
    seed: int = 0,
    url: str | None = None,
    exact_sample: int = 0,
    directory: Path | None = None,
    filtered: int = 0,
) -> dict[str, Any]:
    """Ingest ``entries`` synthetic entries, time ``queries`` searches, return the figures
    (on PostgreSQL at ``url`` when given, else on a SQLite memory: in memory, or under
    ``directory``).

    With ``directory``, a store this benchmark built there before with the same entries, seed
    and embedder is searched again without ingesting (``ingest_per_s`` is then ``None``); an
    empty or missing directory gets one built, kept for the next run.

    The figures hold each stage's time (``stages``, see ``stages.STAGES``), the lexical arm's
    agreement with its unpruned search (``lexical_agreement``, see ``lexical_agreement``)
    and, with ``exact_sample``, the dense index's recall against an exact search on that many
    of the queries (``dense_recall``, see ``dense_recall``).
    """
    if isinstance(filtered, bool) or not isinstance(filtered, int) or filtered < 0:
        raise InvalidInputError(f"filtered must be an int >= 0, got {filtered!r}")
    rng = random.Random(seed)
    vocab = _vocabulary(rng)
    data = _records(entries, rng, vocab)
    texts = [f"{' '.join(rng.sample(vocab[50:5_000], 3))} q{i}" for i in range(queries)]
    records = [Record(d["node"], tags=d["tags"]) for d in data]
    online = min(ONLINE, entries // 10)
    key = {"entries": entries, "seed": seed, "embedder": embedder_name(embedder)}
    reused = url is None and _built(directory, key)
    if directory is not None and url is None:
        try:
            directory.mkdir(parents=True, exist_ok=True)
        except OSError as exc:  # under a file, or where this user may not write
            raise InvalidInputError(f"{str(directory)!r} cannot be made: {exc}") from None
    with searcher(embedder, url, None if url is not None else directory) as memory:
        if reused and memory.store.count() != entries:
            raise InvalidInputError(
                f"{str(directory)!r} holds {memory.store.count()} entries, not the {entries}"
                f" of the store its {STORE_MARKER} names"
            )
        bulk: float | None = None
        added: float | None = None
        if not reused:
            start = time.perf_counter()
            with memory.index.deferred():  # a bulk load: the index catches up once, at the end
                for offset in progress(range(0, entries - online, BATCH), "ingest batches"):
                    memory.store.put_many(records[offset : min(offset + BATCH, entries - online)])
            memory.index.refresh(wait=True)
            bulk = time.perf_counter() - start
            start = time.perf_counter()
            for offset in range(entries - online, entries, BATCH):  # each embedded on commit
                memory.store.put_many(records[offset : offset + BATCH])
            added = time.perf_counter() - start
            if directory is not None and url is None:
                (directory / STORE_MARKER).write_text(json.dumps(key), encoding="utf-8")
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
        agreement = lexical_agreement(memory.store, texts)
        narrowed = filtered_figures(memory, texts[:filtered], entries, seed) if filtered else None
    cuts = statistics.quantiles(latencies, n=100, method="inclusive")
    figures: dict[str, Any] = {
        "backend": "sqlite" if url is None else "postgresql",
        "entries": entries,
        "embedder": embedder_name(embedder),
        "ingest_per_s": None if bulk is None else (entries - online) / bulk,
        "online_per_s": online / added if online and added is not None else None,
        "search_p50_ms": cuts[49],
        "search_p95_ms": cuts[94],
        "search_mean_ms": statistics.fmean(latencies),
        "stages": stages.summary(samples, latencies),
    }
    if recall is not None:
        figures["dense_recall"] = recall
    if agreement is not None:
        figures["lexical_agreement"] = agreement
    if narrowed is not None:
        figures["filtered"] = narrowed
    return figures


def filters_of(entries: int, seed: int) -> dict[str, SearchFilters]:
    """The filters of ``--filtered``, on the benchmark's tags (``group-N`` on 1 entry in
    ``entries // 100``, ``kind-N`` on 1 in 7): a rare tag (100 entries, as one user's scope),
    a tag on 1 entry in 7, and any of 50 rare tags (1 in 20)."""
    rng = random.Random(seed + 1)
    groups = max(1, entries // 100)
    return {
        "a rare tag": SearchFilters(tags_any=(f"group-{rng.randrange(groups)}",)),
        "1 in 7": SearchFilters(tags_any=(f"kind-{rng.randrange(7)}",)),
        "any of 50 rare": SearchFilters(
            any_of=tuple(
                SearchFilters(tags_any=(f"group-{g}",))
                for g in rng.sample(range(groups), min(50, groups))
            )
        ),
    }


def filtered_figures(
    memory: Searcher, queries: Sequence[str], entries: int, seed: int
) -> dict[str, dict[str, float]]:
    """Each filter of ``filters_of``: the p50 and p95 of ``queries`` searched under it, ms,
    after five searches not timed."""
    figures: dict[str, dict[str, float]] = {}
    for name, filters in filters_of(entries, seed).items():
        for query in queries[:5]:
            memory.search(query, 10, filters=filters)
        latencies = []
        for query in queries:
            start = time.perf_counter()
            memory.search(query, 10, filters=filters)
            latencies.append((time.perf_counter() - start) * 1e3)
        cuts = statistics.quantiles(latencies * 2, n=100, method="inclusive")  # (one query)
        figures[name] = {"p50_ms": cuts[49], "p95_ms": cuts[94]}
    return figures


def lexical_agreement(
    store: EntryStore, queries: Sequence[str], *, depth: int = 100
) -> dict[str, float] | None:
    """How the lexical arm's pruned search agrees with the full one on ``queries``.

    The pruned search (``StoreConfig.defer_common_words``, ``gliding_core.store.pruning``)
    against the same store with it off, each asked for the ``depth`` best (as many as the arm
    gives the fusion by default): ``same_order``, the share of queries whose two lists hold
    the same entries in the same order; ``recall@10`` and ``recall@100``, the share of the
    full search's ten (hundred) best that the pruned search's ten (hundred) best hold;
    ``max_score_difference``, the largest difference of one entry's score between the two;
    ``pruned``, the share of queries the pruned search answered (the others ran the full
    query); ``scored``, the share whose words were scored from the index's postings
    (``gliding_core.store.postings``); ``p50_ms`` / ``p95_ms`` and ``full_p50_ms`` /
    ``full_p95_ms``, the arm's time each way, the two alternated query by query (which goes
    first alternating too). ``None`` for a store without the pruned search, or with it off.
    """
    if not isinstance(store, L0Store) or store.defer_common_words <= 0 or not queries:
        return None
    setting = store.defer_common_words
    before, scored = store.pruned_searches, store.scored_searches
    pruned: list[list[tuple[str, float]]] = []
    full: list[list[tuple[str, float]]] = []
    times: dict[int, list[float]] = {setting: [], 0: []}
    try:
        for number, query in enumerate(queries):
            for each in (setting, 0) if number % 2 == 0 else (0, setting):
                store.defer_common_words = each
                start = time.perf_counter()
                found = store.search_ids(query, limit=depth)
                times[each].append((time.perf_counter() - start) * 1e3)
                (pruned if each else full).append(found)
    finally:
        store.defer_common_words = setting
    answered = store.pruned_searches - before
    scored = store.scored_searches - scored
    same = found10 = found100 = total10 = total100 = 0
    difference = 0.0
    for mine, theirs in zip(pruned, full, strict=True):
        same += [iri for iri, _ in mine] == [iri for iri, _ in theirs]
        ours = dict(mine)
        found10 += len({i for i, _ in theirs[:10]} & {i for i, _ in mine[:10]})
        found100 += len({i for i, _ in theirs} & set(ours))
        total10, total100 = total10 + len(theirs[:10]), total100 + len(theirs)
        for iri, score in theirs:
            if iri in ours:
                difference = max(difference, abs(ours[iri] - score))
    cuts, full_cuts = _cuts(times[setting]), _cuts(times[0])
    return {
        "queries": len(queries),
        "pruned": answered / len(queries),
        "scored": scored / len(queries),
        "p50_ms": cuts[49],
        "p95_ms": cuts[94],
        "full_p50_ms": full_cuts[49],
        "full_p95_ms": full_cuts[94],
        "same_order": same / len(queries),
        "recall@10": found10 / total10 if total10 else 1.0,
        "recall@100": found100 / total100 if total100 else 1.0,
        "max_score_difference": difference,
    }


def _cuts(values: list[float]) -> list[float]:
    """The percentiles of ``values`` (every one the value itself when there is one)."""
    if len(values) < 2:
        return [values[0] if values else 0.0] * 99
    return statistics.quantiles(values, n=100, method="inclusive")


def dense_recall(
    store: EntryStore, index: VectorIndex, queries: Sequence[str], *, batch: int = 5_000
) -> dict[str, float] | None:
    """The dense index's recall against an exact search, over ``queries`` (``None`` for none).

    The exact search scores every entry of the store by the cosine of its vector with the
    query's (one pass over the store for all the queries; an entry in several windows by the
    mean of its windows, which the benchmark's short texts never are). ``recall@10``: the
    share of the exact ten best that the index's own ten best hold; ``recall@10_in_100``: the
    share of them among the index's hundred best, as many as the dense arm gives the fusion
    by default; ``recall@10_ties``: as ``recall@10``, but an entry of the index's ten best
    scoring at least the exact tenth best (less ``TIE``, the float32 rounding of the two
    cosines) counts as found: texts of the same words tie, and which of them the exact
    search ranks tenth is an accident of order.
    """
    if not queries:
        return None
    # The exact search scores every entry L0 holds: the index must have caught up with them
    # all (a catch-up still running in the background would make its misses look like the
    # approximate search's).
    index.refresh(wait=True)
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
    found10 = found100 = tied = total = 0
    for probe, exact, scores in zip(probes, best_ids, best_scores, strict=True):
        hits = index.query(probe, 100)
        approximate = [iri for iri, _ in hits]
        truth = set(exact)
        found10 += len(truth & set(approximate[:10]))
        found100 += len(truth & set(approximate))
        if len(scores):
            tied += min(len(truth), sum(s >= scores[-1] - TIE for _, s in hits[:10]))
        total += len(truth)
    return {
        "queries": len(queries),
        "recall@10": found10 / total if total else 1.0,
        "recall@10_in_100": found100 / total if total else 1.0,
        "recall@10_ties": tied / total if total else 1.0,
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
