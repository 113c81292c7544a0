"""Hyperspace: pgvector beyond the VectorIndex contract: a bulk load is indexed without the HNSW
graph, which is built once after it, serves the writes that follow, and is never left missing
for good, by a worker that died loading or by two workers loading at once; vectors travel in
COPY's binary form, bit for bit.

The contract itself runs on pgvector in ``tests/test_core/contracts/``. ``BULK_FROM`` is
lowered here so that a load of a few thousand entries counts as a bulk load.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from typing import Any

import numpy as np
import psycopg
import pytest

from gliding_core import HashEmbedder, Record
from gliding_core.config import DenseConfig
from gliding_core.errors import InvalidInputError
from gliding_core.hyperspace import following, pgvector, search
from gliding_core.hyperspace.following import Matrix
from gliding_core.hyperspace.pgvector import PgVectorIndex
from gliding_core.hyperspace.search import HybridSearch
from gliding_core.hyperspace.windows import text_windows
from gliding_core.store.filters import SearchFilters
from gliding_core.store.postgres import DatabaseSettings, PostgresEntryStore
from gliding_core.store.postgres.database import lock_key
from tests.test_core.contracts.conftest import TEST_DATABASE_URL

LOAD = 1_500  # entries of a bulk load: two writes of the catch-up, the first of BATCH
GRAPH = "dense_default_half"  # the HNSW graph of the index named "default" (halfvec copies)


@pytest.fixture(autouse=True)
def _small_bulk(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(pgvector, "BULK_FROM", 1_000)


@pytest.fixture
def store(postgres_url: str, postgres_schema: str) -> Iterator[PostgresEntryStore]:
    with PostgresEntryStore(postgres_url, schema=postgres_schema) as value:
        yield value


@pytest.fixture
def admin(
    postgres_url: str, postgres_schema: str
) -> Iterator[psycopg.Connection[tuple[object, ...]]]:
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        conn.execute(f'SET search_path = "{postgres_schema}", public')
        yield conn


def _records(n: int, start: int = 0) -> list[Record]:
    return [
        Record({"@id": f"urn:b:{i}", "text": f"note {i}: w{i} v{i * 7 % 1009} u{i * 13 % 997}"})
        for i in range(start, start + n)
    ]


def _graph(admin: psycopg.Connection[tuple[object, ...]]) -> bool | None:
    """Whether the index's HNSW graph is valid; ``None``: there is none."""
    row = admin.execute(
        "SELECT indisvalid FROM pg_index WHERE indexrelid = to_regclass(%s)", (GRAPH,)
    ).fetchone()
    return None if row is None else bool(row[0])


def _uses_graph(admin: psycopg.Connection[tuple[object, ...]], index: PgVectorIndex) -> bool:
    """Whether the planner can answer the dense arm's query through the graph (a table this
    small it would rather scan)."""
    probe = "[" + ",".join(["0.1"] * index.dimension) + "]"
    admin.execute("SET enable_seqscan = off")
    plan = admin.execute(
        f"EXPLAIN SELECT iri FROM dense_default"
        f" ORDER BY {index._key} <=> '{probe}'::{index._probe} LIMIT 10"
    ).fetchall()
    admin.execute("RESET enable_seqscan")
    return any(GRAPH in str(row[0]) for row in plan)


def _watch_writes(
    index: PgVectorIndex, admin: psycopg.Connection[tuple[object, ...]]
) -> list[tuple[int, bool | None]]:
    """Record, at each write of the index, its size and whether the graph was there."""
    seen: list[tuple[int, bool | None]] = []
    write = index._write

    def watched(keys: list[str], vectors: Matrix) -> None:
        write(keys, vectors)
        seen.append((len(keys), _graph(admin)))

    index._write = watched  # type: ignore[method-assign]
    return seen


def _finds_itself(index: PgVectorIndex, records: list[Record]) -> None:
    for record in records:
        text = str(record.node["text"])
        assert index.query(text, 1)[0][0] == record.node["@id"]


def test_a_bulk_load_is_written_without_the_graph_then_built_once_and_finds_everything(
    store: PostgresEntryStore, admin: psycopg.Connection[tuple[object, ...]]
) -> None:
    index = PgVectorIndex(store, HashEmbedder(64))
    try:
        assert _graph(admin) is True  # a new index has its (empty) graph
        seen = _watch_writes(index, admin)
        records = _records(LOAD)
        with index.deferred():
            for start in range(0, LOAD, 500):
                store.put_many(records[start : start + 500])
        assert index.refresh(wait=True) == 0
        # Every write of the load went to a table without the graph; it was built after.
        assert [size for size, _ in seen] == [1_000, 500]
        assert [graph for _, graph in seen] == [None, None]
        assert _graph(admin) is True
        assert _uses_graph(admin, index)
        assert index.count() == LOAD
        _finds_itself(index, records[::50])
    finally:
        index.close()


def test_a_graph_built_after_a_bulk_load_serves_the_writes_after_it(
    store: PostgresEntryStore, admin: psycopg.Connection[tuple[object, ...]]
) -> None:
    index = PgVectorIndex(store, HashEmbedder(64))
    try:
        with index.deferred():
            store.put_many(_records(LOAD))
        index.refresh(wait=True)
        seen = _watch_writes(index, admin)
        # A batch smaller than the table is written through the graph, as a memory in use does.
        later = _records(600, start=LOAD)
        store.put_many(later)
        assert seen == [(600, True)]
        store.put({"@id": "urn:b:one", "text": "a single entry written after the load"})
        assert index.behind() == 0
        assert _uses_graph(admin, index)
        _finds_itself(index, later[::40])
        assert index.query("a single entry written after the load", 1)[0][0] == "urn:b:one"
        assert index.count() == LOAD + 601
    finally:
        index.close()


def test_a_graph_a_dead_loader_left_missing_or_invalid_is_built_by_the_next_opening(
    store: PostgresEntryStore, admin: psycopg.Connection[tuple[object, ...]]
) -> None:
    PgVectorIndex(store, HashEmbedder(64)).close()
    store.put_many(_records(300))
    # What a worker killed between the drop and the build leaves: no graph.
    admin.execute(f"DROP INDEX {GRAPH}")
    index = PgVectorIndex(store, HashEmbedder(64))
    try:
        assert _graph(admin) is True
        _finds_itself(index, _records(300)[::30])
    finally:
        index.close()
    # What a build that failed half-way leaves: an invalid graph, which no query uses (only a
    # superuser can mark one so; a server of the user's may not let the test).
    superuser = admin.execute("SELECT rolsuper FROM pg_roles WHERE rolname = current_user")
    if superuser.fetchone() != (True,):
        return
    admin.execute(
        "UPDATE pg_index SET indisvalid = false WHERE indexrelid = %s::regclass", (GRAPH,)
    )
    assert _graph(admin) is False
    index = PgVectorIndex(store, HashEmbedder(64))
    try:
        assert _graph(admin) is True
        assert _uses_graph(admin, index)
    finally:
        index.close()


def test_a_worker_loading_while_another_holds_the_graph_lock_keeps_the_graph(
    store: PostgresEntryStore, admin: psycopg.Connection[tuple[object, ...]], postgres_schema: str
) -> None:
    """Another worker loading (or building) holds the graph lock: this one neither drops the
    graph under it nor builds one beside it; its vectors go through the graph as they are."""
    index = PgVectorIndex(store, HashEmbedder(64))
    try:
        admin.execute(
            "SELECT pg_advisory_lock(%s)", (lock_key(postgres_schema, '"dense_default" graph'),)
        )
        seen = _watch_writes(index, admin)
        records = _records(LOAD)
        with index.deferred():
            store.put_many(records)
        index.refresh(wait=True)
        assert seen
        assert all(graph is True for _, graph in seen)
        admin.execute("SELECT pg_advisory_unlock_all()")
        _finds_itself(index, records[::100])
    finally:
        index.close()


def test_a_reset_reloads_every_vector_in_bulk(
    store: PostgresEntryStore, admin: psycopg.Connection[tuple[object, ...]]
) -> None:
    index = PgVectorIndex(store, HashEmbedder(64))
    try:
        store.put_many(_records(LOAD))
        seen = _watch_writes(index, admin)
        assert index.reset() == LOAD
        assert seen
        assert all(graph is None for _, graph in seen)
        assert _graph(admin) is True
        assert index.count() == LOAD
    finally:
        index.close()


def test_vectors_travel_bit_for_bit_under_any_iri(
    store: PostgresEntryStore, admin: psycopg.Connection[tuple[object, ...]]
) -> None:
    """The binary COPY carries each float exactly and an IRI in any script, with the
    characters COPY's text form would have to escape (a window's id holds a space)."""
    embedder = HashEmbedder(64)
    iris = ["urn:plain", "urn:été/ünï/日本", "urn:back\\slash\\t", "urn:quote'\"%s"]
    index = PgVectorIndex(store, embedder)
    try:
        texts = {iri: f"text number {n} of {n * 3}" for n, iri in enumerate(iris)}
        store.put_many([Record({"@id": iri, "text": text}) for iri, text in texts.items()])
        found = admin.execute("SELECT iri, embedding::text FROM dense_default").fetchall()
        rows = {str(iri): str(vector) for iri, vector in found}
        assert set(rows) == set(iris)
        for iri, text in texts.items():
            expected = np.asarray(embedder.embed_query(text), dtype=np.float32)
            stored = np.asarray(json.loads(rows[iri]), dtype=np.float32)
            assert stored.tobytes() == expected.tobytes()
        keys = ["urn:plain #1", "urn:été #2"]  # window ids, as the base class writes them
        vectors = np.asarray([embedder.embed_query(k) for k in keys], dtype=np.float32)
        index._write(keys, vectors)
        assert {key for key, _ in index._fetch(keys)} == set(keys)
    finally:
        index.close()


def test_the_graph_ranks_by_half_precision_copies_and_the_hits_are_scored_whole(
    store: PostgresEntryStore, admin: psycopg.Connection[tuple[object, ...]]
) -> None:
    embedder = HashEmbedder(64)
    index = PgVectorIndex(store, embedder)
    try:
        records = _records(400)
        store.put_many(records)
        column = admin.execute(
            "SELECT format_type(atttypid, atttypmod) FROM pg_attribute"
            " WHERE attrelid = 'dense_default'::regclass AND attname = 'embedding'"
        ).fetchone()
        assert column == ("vector(64)",)  # the table keeps each vector whole
        definition = admin.execute("SELECT pg_get_indexdef(to_regclass(%s))", (GRAPH,)).fetchone()
        assert definition is not None
        assert "halfvec(64)" in str(definition[0])
        assert "halfvec_cosine_ops" in str(definition[0])
        texts = {str(r.node["@id"]): str(r.node["text"]) for r in records}
        matrix = np.asarray(embedder.embed_documents(list(texts.values())), dtype=np.float32)
        probe = np.asarray(embedder.embed_query("w17 v119 u221"), dtype=np.float32)
        exact = dict(zip(texts, (matrix @ probe).tolist(), strict=True))
        hits = index.query(probe, 20)
        assert [score for _, score in hits] == sorted((s for _, s in hits), reverse=True)
        for iri, score in hits:
            assert score == pytest.approx(exact[iri], abs=1e-6)
        best = sorted(exact, key=lambda iri: -exact[iri])[:5]
        assert hits[0][0] == best[0] == "urn:b:17"
        assert set(best) <= {iri for iri, _ in hits}  # copies may swap near ties, not lose
    finally:
        index.close()


def test_an_index_of_an_older_version_gets_its_graph_anew(
    store: PostgresEntryStore, admin: psycopg.Connection[tuple[object, ...]]
) -> None:
    """A graph over the whole vectors (as versions before the half-precision graph built it)
    is dropped on opening and the graph of copies built: the one a query can use."""
    PgVectorIndex(store, HashEmbedder(64)).close()
    store.put_many(_records(300))
    admin.execute(f"DROP INDEX {GRAPH}")
    admin.execute(
        "CREATE INDEX dense_default_hnsw ON dense_default USING hnsw (embedding vector_cosine_ops)"
    )
    index = PgVectorIndex(store, HashEmbedder(64))
    try:
        assert admin.execute("SELECT to_regclass('dense_default_hnsw')").fetchone() == (None,)
        assert _graph(admin) is True
        assert _uses_graph(admin, index)
        _finds_itself(index, _records(300)[::30])
    finally:
        index.close()


def test_a_bulk_load_through_a_pool_of_one_connection(
    postgres_url: str, postgres_schema: str, admin: psycopg.Connection[tuple[object, ...]]
) -> None:
    """The graph lock's connection is not one of the pool's: a pool of one still loads."""
    settings = DatabaseSettings(max_connections=1, timeout_s=5.0)
    with PostgresEntryStore(postgres_url, schema=postgres_schema, settings=settings) as store:
        index = PgVectorIndex(store, HashEmbedder(64))
        try:
            records = _records(LOAD)
            with index.deferred():
                store.put_many(records)
            assert index.refresh(wait=True) == 0
            assert _graph(admin) is True
            assert index.count() == LOAD
        finally:
            index.close()


_LOADER = textwrap.dedent(
    """
    import os, sys
    from gliding_core import HashEmbedder
    from gliding_core.hyperspace import pgvector
    from gliding_core.store.postgres import PostgresEntryStore

    pgvector.BULK_FROM = 1_000
    build = pgvector.PgVectorIndex._build_graph

    def announced(self, conn):  # the load is written, the graph about to be built
        print("building", flush=True)
        sys.stdin.readline()
        build(self, conn)

    pgvector.PgVectorIndex._build_graph = announced
    store = PostgresEntryStore(os.environ["GLIDING_TEST_DATABASE_URL"], schema=sys.argv[1])
    pgvector.PgVectorIndex(store, HashEmbedder(64))  # fills itself from L0: a bulk load
    print("loaded", flush=True)
    """
)


def test_a_loader_killed_while_it_builds_the_graph_leaves_an_index_that_searches_and_heals(
    store: PostgresEntryStore,
    admin: psycopg.Connection[tuple[object, ...]],
    postgres_url: str,
    postgres_schema: str,
) -> None:
    """A worker SIGKILLed inside the graph's ``CREATE INDEX CONCURRENTLY``: its server session
    goes on (holding the graph lock) with an invalid graph that no query uses; the next
    worker's index searches meanwhile, and builds the graph once that session has ended."""
    records = _records(LOAD)
    store.put_many(records)
    child = subprocess.Popen(
        [sys.executable, "-c", _LOADER, postgres_schema],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, TEST_DATABASE_URL: postgres_url},
    )
    try:
        assert child.stdin is not None
        assert child.stdout is not None
        assert child.stdout.readline().strip() == "building"
        assert _graph(admin) is None  # dropped for the load
        # A writer's open transaction holds the build in its first wait, the graph invalid.
        admin.execute("BEGIN")
        admin.execute("LOCK TABLE dense_default IN ROW EXCLUSIVE MODE")
        child.stdin.write("build\n")
        child.stdin.flush()
        while _graph(admin) is None:
            assert child.poll() is None, "the loader ended before it built the graph"
            time.sleep(0.05)
        assert _graph(admin) is False
        child.send_signal(signal.SIGKILL)
        child.wait(60)
        index = PgVectorIndex(store, HashEmbedder(64))
        try:
            assert index.refresh(wait=True) == 0  # the graph lock is the dead worker's still
            assert _graph(admin) is False
            _finds_itself(index, records[::100])  # scored exactly while the graph is invalid
            # The dead worker's session ends (as its lock_timeout would end it), its build
            # aborted: the graph is left invalid, and nobody holds the graph lock.
            admin.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_locks WHERE relation ="
                " 'dense_default'::regclass AND mode = 'ShareUpdateExclusiveLock'"
                " AND pid <> pg_backend_pid()"
            )
            admin.execute("ROLLBACK")
            while admin.execute(
                "SELECT EXISTS (SELECT 1 FROM pg_locks WHERE relation ="
                " 'dense_default'::regclass AND mode = 'ShareUpdateExclusiveLock')"
            ).fetchone() != (False,):
                time.sleep(0.05)
            assert _graph(admin) is False
            assert index.refresh(wait=True) == 0  # a search's catch-up builds it again
            assert _graph(admin) is True
            _finds_itself(index, records[::100])
            assert _uses_graph(admin, index)
            assert index.count() == LOAD
        finally:
            index.close()
    finally:
        if child.poll() is None:
            child.kill()
        child.communicate(timeout=30)
        if admin.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
            admin.execute("ROLLBACK")


def test_a_query_for_more_hits_than_the_widest_beam_is_answered(
    store: PostgresEntryStore,
) -> None:
    """pgvector's beam (``hnsw.ef_search``) is at most 1,000; a caller may ask for more hits
    (a search's ``k`` goes to 1,000,000): it is answered, not failed."""
    index = PgVectorIndex(store, HashEmbedder(64))
    try:
        store.put_many(_records(LOAD))
        for n in (1_001, 5_000, 1_000_000):
            hits = index.query("note 7: w7 v49 u91", n)
            assert hits[0][0] == "urn:b:7"
            assert len({iri for iri, _ in hits}) == len(hits) <= n
            assert [s for _, s in hits] == sorted((s for _, s in hits), reverse=True)
        assert len(index.query("note 7", 10)) == 10  # and the beam is back for the next
    finally:
        index.close()


def _expected_vectors(
    embedder: HashEmbedder, texts: dict[str, str], windows: DenseConfig
) -> dict[str, Matrix]:
    """Each entry's window vectors as unit rows, computed from its text by the embedder."""
    out = {}
    for iri, text in texts.items():
        rows = np.asarray(embedder.embed_documents(text_windows(text, windows)), dtype=np.float32)
        out[iri] = rows / np.linalg.norm(rows, axis=1, keepdims=True)
    return out


def test_candidates_vectors_are_read_from_this_schema_with_their_windows_not_expired_ones(
    postgres_url: str, postgres_schema: str, admin: psycopg.Connection[tuple[object, ...]]
) -> None:
    """An index with nothing in its process cache (another worker's, say) reads the re-rank's
    vectors from its table: each entry with all its windows, exactly what was embedded; not
    the vectors another memory in the same database keeps under the same IRIs, not an entry
    that expired in L0 (its text is gone from every read), and never a window id's stray."""
    windows = DenseConfig(window_words=8, window_overlap=2)
    ours = {
        "urn:v:short": "a heron by the mill pond",
        "urn:v:long": " ".join(f"word{i} river{i % 5}" for i in range(20)),  # 40 words
        "urn:v:gone": "the lantern that expires",
        "urn:v:short2": "a kettle on the quiet shelf",
    }
    theirs = {iri: f"something else entirely {n}" for n, iri in enumerate(ours)}
    other = f"{postgres_schema}_other"
    embedder = HashEmbedder(64)
    try:
        with (
            PostgresEntryStore(postgres_url, schema=postgres_schema) as store,
            PostgresEntryStore(postgres_url, schema=other) as elsewhere,
        ):
            for where, texts in ((elsewhere, theirs), (store, ours)):
                writer = PgVectorIndex(where, embedder, windows=windows)
                where.put_many([Record({"@id": i, "text": t}) for i, t in texts.items()])
                writer.close()
            admin.execute(
                "INSERT INTO entry_expiry (entry_id, expires_at)"
                " SELECT id, 0 FROM entries WHERE iri = 'urn:v:gone'"
            )
            reader = PgVectorIndex(store, embedder, windows=windows)  # its cache is empty
            try:
                probe = np.asarray(embedder.embed_query("heron river3 kettle"), np.float32)
                unit = probe / np.linalg.norm(probe)
                expected = _expected_vectors(embedder, ours, windows)
                assert len(expected["urn:v:long"]) > 2  # the long text is held in windows
                asked = [*ours, "urn:v:missing"]
                scores = reader.similarities(probe, asked)
                assert set(scores) == {"urn:v:short", "urn:v:long", "urn:v:short2"}
                for iri, score in scores.items():
                    assert score == pytest.approx(float(np.max(expected[iri] @ unit)), abs=1e-6)
                mean = expected["urn:v:long"].mean(axis=0)
                vector = reader.vectors(["urn:v:long"])["urn:v:long"]
                assert vector == pytest.approx(mean / np.linalg.norm(mean), abs=1e-6)
            finally:
                reader.close()
    finally:
        admin.execute(f'DROP SCHEMA IF EXISTS "{other}" CASCADE')


FACT = "zebra"  # the one word of an entry's last window, found by the query for it


def _filtered_records() -> list[Record]:
    """Sixty entries tagged by parity and by a group of three; entry 0's text is long, with
    ``FACT`` only in its last window."""
    records = []
    for i in range(60):
        text = " ".join(TOPICS[(i * 7 + j * j) % len(TOPICS)] for j in range(4))
        if i == 0:
            text = " ".join(f"word{w} kettle" for w in range(20)) + f" {FACT}"
        tags = ["even" if i % 2 == 0 else "odd", f"g{i % 3}"][: 1 + i % 7 // 6]
        node = {"@id": f"urn:f:{i}", "text": text, **({"@type": "Note"} if i % 5 < 2 else {})}
        records.append(Record(node, tags=tags))
    return records


TOPICS = ["harbour", "crane", "orchard", "ladder", "lantern", "ferry", "kettle", "meadow", "wren"]
FILTERS = {
    "a tag": SearchFilters(tags_any=("even",)),
    "a tag, another excluded": SearchFilters(tags_any=("g1",), exclude_tags=("odd",)),
    "all of two tags": SearchFilters(tags_all=("odd", "g2")),
    "any of two": SearchFilters(
        any_of=(SearchFilters(tags_any=("g0",)), SearchFilters(tags_all=("odd", "g2")))
    ),
    "nothing passes": SearchFilters(tags_any=("none",)),
    "a type": SearchFilters(types=("Note",)),
    "a type, a tag prefix excluded": SearchFilters(types=("Note",), exclude_tag_prefixes=("g",)),
    "all of a tag and a type": SearchFilters(
        all_of=(SearchFilters(tags_any=("odd",)), SearchFilters(types=("Note",)))
    ),
}


@pytest.mark.parametrize("name", list(FILTERS))
def test_a_filtered_query_scores_every_entry_passing_in_one_statement_as_exactly_as_by_iri(
    store: PostgresEntryStore,
    admin: psycopg.Connection[tuple[object, ...]],
    monkeypatch: pytest.MonkeyPatch,
    name: str,
) -> None:
    """The filter in the scoring's statement gives what scoring the IRIs it allows gives: the
    same entries, the same cosines (each entry by its best window: a word in a long text's
    last window finds it), expired entries left out; more entries passing than ``at_most``:
    ``None``, nothing scored."""
    monkeypatch.setattr(following, "SCAN_LIMIT", -1)  # the index answers, not a scan
    windows = DenseConfig(window_words=8, window_overlap=2)
    index = PgVectorIndex(store, HashEmbedder(64), windows=windows)
    try:
        store.put_many(_filtered_records())
        index.refresh(wait=True)
        admin.execute(
            "INSERT INTO entry_expiry (entry_id, expires_at)"
            " SELECT id, 0 FROM entries WHERE iri = 'urn:f:2'"
        )
        filters = FILTERS[name]
        allowed = store.matching(filters)
        assert "urn:f:2" not in allowed
        for query in (f"{FACT} kettle", "harbour crane ladder", "wren meadow"):
            expected = index.query(query, 10, allowed=allowed) if allowed else []
            got = index.query_filtered(query, 10, filters, at_most=60)
            assert got == expected
            if query.startswith(FACT) and "urn:f:0" in allowed:
                assert got[0][0] == "urn:f:0"  # found by the fact in its last window only
        if allowed:
            assert index.query_filtered("wren", 10, filters, at_most=len(allowed)) is not None
        if len(allowed) > 1:
            assert index.query_filtered("wren", 10, filters, at_most=len(allowed) - 1) is None
    finally:
        index.close()


@pytest.mark.parametrize(
    ("args", "bad"),
    [
        (("wren", 10, {"tags_any": ["even"]}, 100), "filters must be SearchFilters"),
        (("wren", 0, SearchFilters(tags_any=("even",)), 100), "^n must be an int"),
        (("wren", 10**7, SearchFilters(tags_any=("even",)), 100), "^n must be an int"),
        (("wren", 10, SearchFilters(tags_any=("even",)), True), "^at_most must be an int"),
        (("wren", 10, SearchFilters(tags_any=("even",)), -1), "^at_most must be an int"),
        (("wren", 10, SearchFilters(tags_any=("even",)), 2**63), "^at_most must be an int"),
    ],
)
def test_a_filtered_query_refuses_bad_input_naming_it(
    store: PostgresEntryStore, args: tuple[Any, ...], bad: str
) -> None:
    index = PgVectorIndex(store, HashEmbedder(64))
    try:
        text, n, filters, at_most = args
        with pytest.raises(InvalidInputError, match=bad):
            index.query_filtered(text, n, filters, at_most=at_most)
    finally:
        index.close()


@pytest.mark.parametrize(("exact_up_to", "widest"), [(1_000, None), (5, None), (5, 8)])
def test_the_search_s_filtered_dense_arm_on_pgvector_scores_the_filter_s_entries_at_once(
    store: PostgresEntryStore,
    monkeypatch: pytest.MonkeyPatch,
    exact_up_to: int,
    widest: int | None,
) -> None:
    """Up to ``FILTERED_EXACT`` entries passing, the dense arm is one statement of the index
    with the filter in it, and its answer the exact one; past it the graph is walked with no read of
    the entries passing first (the statement counted them), and when the walks find too few
    (an index whose widest query is short) every entry passing is scored, in one statement
    again: the exact answer."""
    monkeypatch.setattr(search, "FILTERED_EXACT", exact_up_to)
    monkeypatch.setattr(following, "SCAN_LIMIT", -1)
    index = PgVectorIndex(store, HashEmbedder(64))
    hyperspace = HybridSearch(store, index)
    if widest is not None:
        query = index.query
        monkeypatch.setattr(index, "widest_query", widest)
        monkeypatch.setattr(index, "query", lambda t, n, **kw: query(t, min(n, widest), **kw))
    try:
        store.put_many(_filtered_records())
        index.refresh(wait=True)
        filters = FILTERS["a tag"]
        limited: list[Any] = []
        matching = store.matching

        def spying(given: Any, iris: Any = None, *, limit: Any = None) -> Any:
            limited.append((iris, limit))
            return matching(given, iris, limit=limit)

        monkeypatch.setattr(store, "matching", spying)
        got = hyperspace._dense("harbour crane ladder", 5, filters)
        exact = index.query("harbour crane ladder", 5, allowed=matching(filters))
        if exact_up_to == 1_000 or widest is not None:  # scored in the index's statement
            assert got == exact
        else:
            assert len(got) == 5
            assert all(int(iri[6:]) % 2 == 0 for iri, _ in got)
        # Never a read of the entries passing: neither EXACT_LIMIT + 1 of them nor all.
        assert all(iris is not None for iris, _ in limited)
    finally:
        hyperspace.close()
        index.close()


def test_a_filtered_search_inside_a_transaction_sees_its_writes(
    store: PostgresEntryStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Inside the caller's transaction the dense arm reads through the store (the index's own
    connection would not see the transaction's writes): a tag added there excludes the entry,
    one added there admits it, as the lexical arm and ``matching`` see them."""
    monkeypatch.setattr(following, "SCAN_LIMIT", -1)
    index = PgVectorIndex(store, HashEmbedder(64))
    hyperspace = HybridSearch(store, index)
    try:
        store.put_many(
            Record({"@id": f"urn:t:{i}", "text": f"harbour crane {i}"}, tags=["a"])
            for i in range(20)
        )
        index.refresh(wait=True)
        without = SearchFilters(tags_any=("a",), exclude_tags=("gone",))
        added = SearchFilters(tags_any=("new",))
        with store.transaction():
            store.retag("urn:t:12", add=["gone"])
            store.retag("urn:t:3", add=["new"])
            dense = [iri for iri, _ in hyperspace.arms("harbour crane 12", 5, without)["dense"]]
            assert dense
            assert "urn:t:12" not in dense
            assert [iri for iri, _ in hyperspace.arms("crane 3", 5, added)["dense"]] == ["urn:t:3"]
        assert "urn:t:12" not in [i for i, _ in hyperspace.arms("crane 12", 5, without)["dense"]]
    finally:
        hyperspace.close()
        index.close()


def test_a_query_without_a_direction_finds_nothing_under_a_filter(
    store: PostgresEntryStore,
) -> None:
    """A query whose embedding is the zero vector (only punctuation, to the hash embedder) has
    no cosine with anything: the filtered query finds no entry (the database would rank its NaN
    cosines first, and return arbitrary entries)."""
    index = PgVectorIndex(store, HashEmbedder(64))
    try:
        store.put_many(_filtered_records())
        index.refresh(wait=True)
        assert not np.any(index.vector("!!!"))
        assert index.query_filtered("!!!", 5, FILTERS["a tag"], at_most=100) == []
        assert index.query_filtered("!!!", 5, FILTERS["a tag"], at_most=None) == []
    finally:
        index.close()


def test_a_filter_found_broad_is_not_counted_again_for_a_while(
    store: PostgresEntryStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A filter more than ``FILTERED_EXACT`` entries passed goes straight to the graph's walks
    for its next ``BROAD_KEPT_FOR`` searches, then is counted again; the answers are the same
    either way. Other filters are counted as before."""
    monkeypatch.setattr(following, "SCAN_LIMIT", -1)
    monkeypatch.setattr(search, "FILTERED_EXACT", 5)
    monkeypatch.setattr(search, "BROAD_KEPT_FOR", 2)
    index = PgVectorIndex(store, HashEmbedder(64))
    hyperspace = HybridSearch(store, index)
    try:
        store.put_many(_filtered_records())
        index.refresh(wait=True)
        counted: list[SearchFilters] = []
        query_filtered = index.query_filtered

        def spying(text: Any, n: int, filters: SearchFilters, *, at_most: Any) -> Any:
            if at_most is not None:
                counted.append(filters)
            return query_filtered(text, n, filters, at_most=at_most)

        monkeypatch.setattr(index, "query_filtered", spying)
        broad, narrow = FILTERS["a tag"], FILTERS["all of two tags"]
        answers = [hyperspace._dense("harbour crane", 5, broad) for _ in range(4)]
        assert counted == [broad, broad]  # counted, then two searches not, then counted again
        assert all(answer == answers[0] for answer in answers)
        monkeypatch.setattr(search, "FILTERED_EXACT", 1_000)
        assert hyperspace._dense("harbour crane", 5, narrow) == index.query(
            "harbour crane", 5, allowed=store.matching(narrow)
        )
        assert counted[-1] == narrow
    finally:
        hyperspace.close()
        index.close()
