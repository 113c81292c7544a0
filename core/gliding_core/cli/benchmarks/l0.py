"""Benchmark of the L0 store: put throughput, get, tag query and text search latency, memory.

Synthetic, deterministic data (seeded): each node has a Zipf-distributed text of 12-24 words
from a 20,000-word vocabulary, one of five types, and two tags, one of which is shared by exactly
100 entries, so a tag query returns 100 hits.

``run_readers`` measures reads in parallel: for each number of reader threads, on one file
store preloaded with those entries, every reader alternates a ``get`` of a random entry and a
three-word text search for a fixed time while one writer thread streams ``put_many`` batches of
new entries. Figures per reader count: get and text-search p50/p95 and aggregate reads/s, with
ratios against the first reader count of the same run; then the latency of a ``get`` issued
while another thread holds a write transaction open (median of several).
"""

from __future__ import annotations

import itertools
import json
import random
import resource
import sqlite3
import statistics
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from gliding_core.config import StoreConfig
from gliding_core.store.entry import Record
from gliding_core.store.protocol import EntryStore
from gliding_core.store.sqlite import L0Store

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


def run_postgres(
    entries: int, url: str, *, seed: int = 0, queries: int = 2_000, single_puts: int = 500
) -> dict[str, float]:
    """Run the L0 benchmark on a ``PostgresEntryStore`` in a new schema of the database at
    ``url`` (dropped after); the same data, queries and figures as ``run``."""
    from gliding_core.store.postgres import Database, PostgresEntryStore

    rng = random.Random(seed)
    vocab = _vocabulary(rng)
    data = _records(entries, rng, vocab)
    schema = f"bench_{uuid.uuid4().hex[:12]}"
    db = Database(url, schema=schema)
    try:
        with PostgresEntryStore(url, schema=schema, config=StoreConfig()) as store:
            figures = _measure(store, data, rng, vocab, queries, single_puts)
        figures["db_mb"] = _schema_mb(db)
        figures["baseline_kv_put_per_s"] = _baseline_kv_postgres(db, data)
    finally:
        with db.connection() as conn:
            conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
        db.close()
    figures["batched_put_vs_kv"] = figures["batched_put_per_s"] / figures["baseline_kv_put_per_s"]
    return figures


def _schema_mb(db: Any) -> float:
    """The size of the schema's tables and indexes, in MiB."""
    with db.connection() as conn:
        row = conn.execute(
            "SELECT COALESCE(sum(pg_total_relation_size(c.oid)), 0) FROM pg_class AS c"
            " JOIN pg_namespace AS n ON n.oid = c.relnamespace"
            " WHERE n.nspname = %s AND c.relkind IN ('r', 'm')",
            (db.schema,),
        ).fetchone()
    return float(row[0]) / 2**20


def _baseline_kv_postgres(db: Any, data: list[dict[str, Any]]) -> float:
    """``_baseline_kv`` on PostgreSQL: a bare table (IRI -> JSON) in the same schema, the same
    batches, one synced commit per batch, no indexes but the key."""
    with db.connection() as conn:
        conn.execute('CREATE TABLE kv (iri text COLLATE "C" PRIMARY KEY, content text NOT NULL)')
        start = time.perf_counter()
        for offset in range(0, len(data), BATCH):
            part = data[offset : offset + BATCH]
            with conn.transaction():
                conn.execute(
                    "INSERT INTO kv (iri, content) SELECT * FROM unnest(%s::text[], %s::text[])",
                    ([d["node"]["@id"] for d in part], [json.dumps(d["node"]) for d in part]),
                )
        return len(data) / (time.perf_counter() - start)


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
    store: EntryStore,
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


STREAM_BATCH = 500  # entries per put_many of the streaming writer: a commit every few ms


def run_readers(
    entries: int,
    readers: Sequence[int],
    *,
    seconds: float = 3.0,
    hold_s: float = 0.5,
    holds: int = 5,
    seed: int = 0,
    directory: Path | None = None,
) -> dict[str, Any]:
    """Run the parallel-read benchmark on a new file store and return its figures."""
    rng = random.Random(seed)
    vocab = _vocabulary(rng)
    data = _records(entries, rng, vocab)
    stream = _records(entries, random.Random(seed + 1), vocab)
    figures: dict[str, Any] = {"entries": entries, "seconds": seconds, "readers": {}}
    with (
        tempfile.TemporaryDirectory(dir=directory) as tmp,
        L0Store(Path(tmp) / "bench.sqlite3", StoreConfig()) as store,
    ):
        for offset in range(0, entries, BATCH):
            store.put_many(_batch(data, offset, BATCH, "urn:bench"))
        queries = [" ".join(rng.sample(vocab[50:5_000], 3)) for _ in range(1_000)]
        written = 0
        for count in readers:
            phase = _phase(store, count, seconds, entries, queries, stream, written, seed)
            written = phase.pop("streamed_total")
            figures["readers"][str(count)] = phase
        figures["get_during_held_write_ms"] = _held_gets(store, hold_s, holds, entries)
    _add_ratios(figures["readers"], str(readers[0]))
    figures["hold_s"] = hold_s
    return figures


def _batch(data: list[dict[str, Any]], offset: int, size: int, prefix: str) -> list[Record]:
    """Return records of ``data[offset:offset + size]`` under IRIs with ``prefix``."""
    records = []
    for item in data[offset : offset + size]:
        node = {**item["node"], "@id": prefix + item["node"]["@id"].removeprefix("urn:bench")}
        records.append(Record(node, tags=item["tags"], importance=item["importance"]))
    return records


def _phase(
    store: L0Store,
    count: int,
    seconds: float,
    entries: int,
    queries: list[str],
    stream: list[dict[str, Any]],
    written: int,
    seed: int,
) -> dict[str, Any]:
    """Run ``count`` readers and the streaming writer for ``seconds``; return the figures."""
    stop = threading.Event()
    gets: list[list[float]] = [[] for _ in range(count)]
    searches: list[list[float]] = [[] for _ in range(count)]
    streamed = [written]
    writer = threading.Thread(target=_stream, args=(store, stream, streamed, stop))
    threads = [
        threading.Thread(
            target=_read,
            args=(store, random.Random(seed * 1_000 + n), entries, queries, gets[n], searches[n]),
            kwargs={"stop": stop},
        )
        for n in range(count)
    ]
    writer.start()
    start = time.perf_counter()
    for thread in threads:
        thread.start()
    time.sleep(seconds)
    stop.set()
    for thread in threads:
        thread.join()
    elapsed = time.perf_counter() - start
    writer.join()
    all_gets = [s for samples in gets for s in samples]
    all_searches = [s for samples in searches for s in samples]
    get_p50, get_p95 = _quantiles(all_gets)
    text_p50, text_p95 = _quantiles(all_searches)
    return {
        "get_p50_ms": get_p50,
        "get_p95_ms": get_p95,
        "text_search_p50_ms": text_p50,
        "text_search_p95_ms": text_p95,
        "reads_per_s": (len(all_gets) + len(all_searches)) / elapsed,
        "writer_entries_per_s": (streamed[0] - written) / elapsed,
        "streamed_total": streamed[0],
    }


def _read(
    store: L0Store,
    rng: random.Random,
    entries: int,
    queries: list[str],
    gets: list[float],
    searches: list[float],
    *,
    stop: threading.Event,
) -> None:
    """Alternate a get and a text search until ``stop``; append each latency in ms."""
    while not stop.is_set():
        iri = f"urn:bench:{rng.randrange(entries)}"
        started = time.perf_counter_ns()
        store.get(iri)
        middle = time.perf_counter_ns()
        store.search_text(rng.choice(queries))
        ended = time.perf_counter_ns()
        gets.append((middle - started) / 1e6)
        searches.append((ended - middle) / 1e6)


def _stream(
    store: L0Store, stream: list[dict[str, Any]], streamed: list[int], stop: threading.Event
) -> None:
    """Write batches of new entries until ``stop``; keep the running total in ``streamed``."""
    while not stop.is_set():
        offset = streamed[0] % len(stream)
        lap = streamed[0] // len(stream)
        store.put_many(_batch(stream, offset, STREAM_BATCH, f"urn:stream:{lap}"))
        streamed[0] += min(STREAM_BATCH, len(stream) - offset)


def _held_gets(store: L0Store, hold_s: float, holds: int, entries: int) -> dict[str, float]:
    """Time a get issued while another thread holds a write transaction for ``hold_s``."""
    samples = []
    for attempt in range(holds):
        inside = threading.Event()
        holder = threading.Thread(target=_hold, args=(store, attempt, inside, hold_s))
        holder.start()
        inside.wait()
        started = time.perf_counter_ns()
        store.get(f"urn:bench:{attempt % entries}")
        samples.append((time.perf_counter_ns() - started) / 1e6)
        holder.join()
    return {"median": statistics.median(samples), "max": max(samples)}


def _hold(store: L0Store, number: int, inside: threading.Event, hold_s: float) -> None:
    """Write inside a transaction, set ``inside``, and keep the transaction open ``hold_s``."""
    with store.transaction():
        store.put({"@id": f"urn:bench:held:{number}", "text": "held open"})
        inside.set()
        time.sleep(hold_s)


def _add_ratios(phases: dict[str, dict[str, Any]], base: str) -> None:
    """Add each phase's figures as ratios against the phase of ``base`` readers."""
    first = phases[base]
    for phase in phases.values():
        phase["reads_per_s_vs_first"] = phase["reads_per_s"] / first["reads_per_s"]
        phase["get_p50_vs_first"] = phase["get_p50_ms"] / first["get_p50_ms"]
        phase["text_search_p50_vs_first"] = (
            phase["text_search_p50_ms"] / first["text_search_p50_ms"]
        )
