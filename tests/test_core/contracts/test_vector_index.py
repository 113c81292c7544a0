"""VectorIndex contract: the dense index follows L0 through its change log and never falls behind
for good; queries, similarities, rebuilds; an index of another embedder is refused.

Every test runs on each implementation in ``conftest.VECTOR_INDEXES`` (Chroma embedded in the
process, a Chroma server, and pgvector in PostgreSQL), each following an L0 store that outlives
its handles. A long text is held in windows (the default ``DenseConfig``) on every one; a writer
may defer the embedding to a background catch-up. Faults are
injected at the embedder, the one part every implementation calls: an embedding API that does
not answer, or a process that dies while it embeds.
"""

from __future__ import annotations

import dataclasses
import random
import signal
import threading
from collections.abc import Iterator, Sequence

import numpy as np
import pytest

from gliding_core import (
    DenseConfig,
    EmbedderError,
    EntryStore,
    HashEmbedder,
    IndexMismatchError,
    InvalidInputError,
    Record,
    VectorIndex,
)
from gliding_core.hyperspace import following
from gliding_core.hyperspace.windows import entry_of, text_windows
from tests.test_core.contracts.conftest import IndexBackend, run_child


class TestEmbedder(HashEmbedder):
    """The hash embedder, counting the batches it embeds; an API that can go down (a fake at
    the network edge)."""

    __test__ = False  # not a test class

    def __init__(self, dimension: int = 64) -> None:
        super().__init__(dimension)
        self.down = False
        self.batches: list[int] = []
        # An API that answers slowly: a thread other than the test's waits at the gate.
        self.gate = threading.Event()
        self.gate.set()
        self.waiting = threading.Event()

    def embed_documents(self, texts: Sequence[str]) -> list[list[float]]:
        if self.down:
            raise EmbedderError("injected: the embedding API does not answer")
        if not self.gate.is_set() and threading.current_thread() is not threading.main_thread():
            self.waiting.set()
            self.gate.wait()
        self.batches.append(len(texts))
        return super().embed_documents(texts)


# Tests whose index is past ``SCAN_LIMIT`` whatever the setting: the graph answers once.
PAST_THE_SCAN = {"test_a_put_many_larger_than_a_backend_batch_is_fully_indexed"}


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """Every test runs twice (``answered_by``): a small index answering by its exact scan (the
    default), and by the backend's graph, as an index past ``SCAN_LIMIT`` does."""
    if "answered_by" in metafunc.fixturenames:
        graph_only = metafunc.definition.originalname in PAST_THE_SCAN
        modes = ["graph"] if graph_only else ["scan", "graph"]
        metafunc.parametrize("answered_by", modes, indirect=True)


@pytest.fixture(autouse=True)
def answered_by(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """How the index answers a query (see ``pytest_generate_tests``)."""
    if request.param == "graph":
        monkeypatch.setattr(following, "SCAN_LIMIT", -1)
    return str(request.param)


@pytest.fixture
def embedder() -> TestEmbedder:
    return TestEmbedder()


@pytest.fixture
def l0(index_backend: IndexBackend) -> Iterator[EntryStore]:
    """A handle on the L0 store the index follows."""
    store = index_backend.store.open()
    yield store
    store.close()


@pytest.fixture
def index(
    index_backend: IndexBackend, l0: EntryStore, embedder: TestEmbedder
) -> Iterator[VectorIndex]:
    """The index on ``l0``, with ``embedder``."""
    value = index_backend.open(l0, embedder)
    yield value
    value.close()


def _records(n: int, prefix: str = "urn:e:") -> list[Record]:
    return [
        Record({"@id": f"{prefix}{i}", "text": f"entry {i} about topic {i % 97}"}) for i in range(n)
    ]


def _found(index: VectorIndex, text: str, n: int = 5) -> set[str]:
    return {iri for iri, _ in index.query(text, n)}


KNOWLEDGE = [
    Record({"@id": "urn:jwt", "text": "Sign JWT tokens with RS256 keys"}),
    Record({"@id": "urn:pool", "text": "Database connection pool of 20"}),
    Record({"@id": "urn:task", "text": "Rotate the JWT signing keys monthly"}),
    Record({"@id": "urn:note", "text": "Lunch order for the offsite"}),
]


def test_the_handle_is_a_vector_index(index: VectorIndex, embedder: TestEmbedder) -> None:
    assert isinstance(index, VectorIndex)
    assert index.embedder is embedder
    assert index.name


def test_the_index_follows_writes_in_batches_and_deletes(
    l0: EntryStore, index: VectorIndex, embedder: TestEmbedder
) -> None:
    l0.put_many(KNOWLEDGE)
    assert index.count() == 4
    assert embedder.batches == [4]  # one batch for one put_many
    l0.put({"@id": "urn:jwt", "status": "approved"})  # text changed: re-embedded
    assert embedder.batches == [4, 1]
    assert l0.delete("urn:note")
    assert index.count() == 3
    assert index.behind() == 0
    assert "urn:note" not in _found(index, "Lunch order for the offsite")


def test_a_put_many_larger_than_a_backend_batch_is_fully_indexed(
    l0: EntryStore, index: VectorIndex
) -> None:
    l0.put_many(_records(12_000))  # more than Chroma takes in one upsert
    assert index.behind() == 0
    assert index.count() == 12_000
    assert "urn:e:11999" in _found(index, "entry 11999 about topic 68", 3)
    # One scan batch larger than the backend's: the upsert itself must split it.
    assert index.rebuild(batch=12_000) == 12_000
    assert index.count() == 12_000


def test_a_rolled_back_write_never_reaches_the_index(l0: EntryStore, index: VectorIndex) -> None:
    def failing() -> None:
        with l0.transaction():
            l0.put({"@id": "urn:ghost", "text": "never committed"})
            raise RuntimeError("abort")

    with pytest.raises(RuntimeError):
        failing()
    assert index.count() == 0


def test_a_search_inside_a_rolled_back_transaction_indexes_nothing(
    l0: EntryStore, index: VectorIndex
) -> None:
    def failing() -> None:
        with l0.transaction():
            l0.put({"@id": "urn:ghost", "text": "never committed text"})
            # What a search does first: its reads see the write; the index must not apply it.
            index.refresh(wait=True)
            assert index.catch_up() == 0
            index.query("never committed text", 3)
            raise RuntimeError("abort")

    with pytest.raises(RuntimeError):
        failing()
    assert index.count() == 0
    l0.put({"@id": "urn:real", "text": "committed afterwards"})  # takes the same sequence
    assert index.behind() == 0
    assert _found(index, "committed afterwards never") == {"urn:real"}


def test_a_failed_update_says_the_index_is_behind_and_is_repaired(
    l0: EntryStore, index: VectorIndex, embedder: TestEmbedder
) -> None:
    l0.put_many(_records(5))
    embedder.down = True
    l0.put_many(_records(3, "urn:late:"))  # returns normally: the write stands
    assert l0.count() == 8
    assert index.behind() == 3
    assert index.refresh(wait=True) == 3  # a failed catch-up is not raised
    embedder.down = False
    assert index.refresh(wait=True) == 0
    assert index.count() == 8
    assert "urn:late:2" in _found(index, "entry 2 about topic 2", 10)


def test_a_fault_between_commit_and_upsert_is_repaired_on_reopen(
    index_backend: IndexBackend, l0: EntryStore, embedder: TestEmbedder
) -> None:
    index = index_backend.open(l0, embedder)
    try:
        l0.put_many(_records(50))
        embedder.down = True
        l0.put_many(_records(40, "urn:lost:"))
        l0.delete("urn:e:0")
        assert index.behind() > 0
    finally:
        index.close()
    again = index_backend.open(l0, TestEmbedder())
    try:
        assert again.behind() == 0
        assert again.count() == 89
        assert again.query("entry 0 about topic 0", 5, allowed=["urn:e:0"]) == []
        for i in range(40):
            assert f"urn:lost:{i}" in _found(again, f"entry {i} about topic {i % 97}")
    finally:
        again.close()


CRASHING_WRITER = """
import os, signal
from gliding_core import HashEmbedder, Record

class Dying(HashEmbedder):
    dying = False
    def embed_documents(self, texts):
        if self.dying:  # the process dies after L0 committed, before the index saw anything
            os.kill(os.getpid(), signal.SIGKILL)
        return super().embed_documents(texts)

store = open_backend()
embedder = Dying(64)
index = open_index(store, embedder)
store.put_many([Record({"@id": f"urn:kept:{i}", "text": f"kept {i}"}) for i in range(30)])
embedder.dying = True
store.put_many(
    [Record({"@id": f"urn:crash:{i}", "text": f"written before the crash {i}"}) for i in range(60)]
)
"""


def test_a_process_killed_between_commit_and_upsert_loses_nothing(
    index_backend: IndexBackend,
) -> None:
    both = dataclasses.replace(
        index_backend.store,
        child_source=index_backend.store.child_source + index_backend.child_source,
    )
    child = run_child(both, CRASHING_WRITER)
    child.communicate(timeout=120)
    assert child.returncode == -signal.SIGKILL
    store = index_backend.store.open()
    index = index_backend.open(store, TestEmbedder())
    try:
        assert store.count() == 90
        assert index.behind() == 0
        assert index.count() == 90
        # Scored exactly over every entry: what is checked is that each vector is there and
        # right, not how an approximate graph written by a killed process answers.
        everything = sorted(iri for batch in store.scan_texts() for iri, _ in batch)
        for i in range(60):
            found = index.query(f"written before the crash {i}", 5, allowed=everything)
            assert f"urn:crash:{i}" in {iri for iri, _ in found}
    finally:
        index.close()
        store.close()


def test_an_index_of_another_embedder_is_refused_and_kept(
    index_backend: IndexBackend, l0: EntryStore
) -> None:
    index = index_backend.open(l0, HashEmbedder(64))
    l0.put_many(_records(5))
    index.close()
    with pytest.raises(IndexMismatchError, match="hash-64"):
        index_backend.open(l0, HashEmbedder(128))
    kept = index_backend.open(l0, HashEmbedder(64))
    try:
        assert kept.count() == 5  # nothing was deleted
    finally:
        kept.close()


def test_rebuild_and_reset_make_the_index_equal_to_l0(l0: EntryStore, index: VectorIndex) -> None:
    l0.put_many(KNOWLEDGE)
    index.upsert([("urn:stale", "Rotate the JWT signing keys monthly")])  # not in L0
    assert index.count() == 5
    assert index.rebuild() == 4
    assert index.count() == 4
    assert "urn:stale" not in _found(index, "Rotate the JWT signing keys monthly", 5)
    assert index.reset() == 4
    assert index.count() == 4
    assert index.behind() == 0


def test_query_ranks_by_cosine_and_keeps_to_the_allowed(
    l0: EntryStore, index: VectorIndex, embedder: TestEmbedder
) -> None:
    l0.put_many(KNOWLEDGE)
    hits = index.query("JWT signing keys", 4)
    assert {iri for iri, _ in hits[:2]} == {"urn:jwt", "urn:task"}
    scores = [score for _, score in hits]
    assert scores == sorted(scores, reverse=True)
    assert all(-1.0 <= score <= 1.0 + 1e-6 for score in scores)
    best, score = hits[0]
    cosine = float(np.dot(embedder.embed_query("JWT signing keys"), _vec(index, best)))
    assert score == pytest.approx(cosine, abs=1e-5)  # unit vectors: the cosine is the dot
    allowed = index.query("JWT signing keys", 4, allowed=["urn:pool", "urn:note"])
    assert {iri for iri, _ in allowed} == {"urn:pool", "urn:note"}
    assert index.query("JWT signing keys", 4, allowed=[]) == []
    assert index.query(index.vector("JWT signing keys"), 4) == hits  # a vector passes through


def test_entries_tied_at_the_last_place_are_ranked_by_iri(
    l0: EntryStore, index: VectorIndex
) -> None:
    """Equal texts have equal cosines: which of them make the n asked for, and in which
    order, is decided by IRI, not by the order the graph's walk met them in (the ranking a
    search fuses would otherwise change from one index to the next over the same entries)."""
    same = [f"urn:tie:{i:02d}" for i in range(6)]
    others = [f"urn:other:{i}" for i in range(30)]
    order = [*others[:15], *reversed(same), *others[15:]]
    random.Random(7).shuffle(order)
    l0.put_many(
        Record({"@id": iri, "text": "the spare key hangs behind the red door"})
        if iri.startswith("urn:tie:")
        else Record({"@id": iri, "text": f"note {iri[-2:]} on gutters and slate {iri}"})
        for iri in order
    )
    for n in (1, 3, 5):
        hits = index.query("the spare key hangs behind the red door", n)
        assert [iri for iri, _ in hits] == same[:n]
    exact = index.query("the spare key hangs behind the red door", 3, allowed=order)
    assert [iri for iri, _ in exact] == same[:3]


def test_a_small_index_finds_an_entry_its_graph_lost(
    l0: EntryStore, index: VectorIndex, answered_by: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An approximate graph can lose an entry outright (Chroma's HNSW lost one or more of 44
    near-duplicate texts in about one fresh collection in a hundred). Here the backend's
    graph never answers with one entry: a small index still finds it; past the limit the
    graph answers."""
    l0.put_many(_records(40))
    lost = "urn:e:39"
    graph = index._nearest  # type: ignore[attr-defined]

    def losing(vector: object, n: int, keys: list[str] | None) -> list[tuple[str, float]]:
        return [pair for pair in graph(vector, n, keys) if entry_of(pair[0]) != lost]

    monkeypatch.setattr(index, "_nearest", losing)
    allowed = index.query("entry 39 about topic 39", 5, allowed=["urn:none", "urn:e:3", lost])
    assert [iri for iri, _ in allowed] == [lost, "urn:e:3"]  # scored exactly: few allowed
    found = index.query("entry 39 about topic 39", 3)
    if answered_by == "graph":
        assert lost not in {iri for iri, _ in found}
        return
    assert found[0] == (lost, pytest.approx(1.0, abs=1e-5))
    monkeypatch.setattr(following, "SCAN_LIMIT", 40)
    l0.put({"@id": "urn:e:40", "text": "entry 40 about topic 40"})  # 41 entries: past it
    assert lost not in _found(index, "entry 39 about topic 39", 3)
    l0.delete("urn:e:40")  # back within it: the next query loads every entry again
    assert _found(index, "entry 39 about topic 39", 1) == {lost}


def test_a_small_index_sees_what_another_handle_applied(
    index_backend: IndexBackend,
    l0: EntryStore,
    index: VectorIndex,
    embedder: TestEmbedder,
    answered_by: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Another handle (another worker) writes and its index applies the changes: this one's
    answers, from its own copy of the vectors, follow them after its catch-up, which reads
    the changed entries again (not every entry of the memory)."""
    l0.put_many(KNOWLEDGE)
    assert "urn:note" in _found(index, "Lunch order for the offsite")
    loads: list[object] = []
    listing = l0.matching
    monkeypatch.setattr(l0, "matching", lambda *args: loads.append(args) or listing(*args))
    other_l0 = index_backend.store.open()
    try:
        other = index_backend.open(other_l0, embedder)
        other_l0.put({"@id": "urn:new", "text": "the boiler needs a new valve"})
        other_l0.delete("urn:note")
        other_l0.put({"@id": "urn:pool", "text": "the gutters drain into the garden"})
        other.close()  # its watermark recorded: these changes were applied elsewhere
        assert index.refresh(wait=True) == 0
        assert _found(index, "the boiler needs a new valve", 1) == {"urn:new"}
        assert "urn:note" not in _found(index, "Lunch order for the offsite", 4)
        assert index.query("the gutters drain into the garden", 1)[0] == (
            "urn:pool",
            pytest.approx(1.0, abs=1e-5),
        )
        assert loads == []  # the scan's copy was kept whole: no load of the memory's entries
    finally:
        other_l0.close()


def _vec(index: VectorIndex, iri: str) -> list[float]:
    texts = {record.node["@id"]: record.node["text"] for record in KNOWLEDGE}
    return index.embedder.embed_documents([texts[iri]])[0]


def test_similarities_are_the_exact_cosines_of_the_indexed(
    l0: EntryStore, index: VectorIndex, embedder: TestEmbedder
) -> None:
    l0.put_many(KNOWLEDGE)
    query = embedder.embed_query("JWT signing keys")
    found = index.similarities("JWT signing keys", ["urn:jwt", "urn:pool", "urn:missing"])
    assert set(found) == {"urn:jwt", "urn:pool"}
    for iri, score in found.items():
        assert score == pytest.approx(float(np.dot(query, _vec(index, iri))), abs=1e-5)
    assert index.similarities("JWT signing keys", []) == {}


class Unnormalised(TestEmbedder):
    """An embedder whose vectors are not of unit length (a model that does not normalise)."""

    __test__ = False

    def embed_documents(self, texts: Sequence[str]) -> list[list[float]]:
        return [[3.0 * x for x in vector] for vector in super().embed_documents(texts)]


def test_similarities_are_cosines_when_the_embedder_does_not_normalise(
    index_backend: IndexBackend, l0: EntryStore
) -> None:
    """Read from the index's storage (a handle with nothing in its process) or kept in the
    process, a vector counts by its direction alone."""
    embedder = Unnormalised()
    l0.put_many(KNOWLEDGE)
    iris = ["urn:jwt", "urn:pool", "urn:note"]
    query = np.asarray(embedder.embed_query("JWT signing keys"))
    texts = {record.node["@id"]: record.node["text"] for record in KNOWLEDGE}
    for _ in range(2):  # a new handle each time: its first reads come from storage
        index = index_backend.open(l0, embedder)
        try:
            index.refresh(wait=True)
            for _ in range(2):  # read, then kept in the process
                found = index.similarities("JWT signing keys", iris)
                for iri in iris:
                    stored = np.asarray(embedder.embed_documents([texts[iri]])[0])
                    cosine = query @ stored / np.linalg.norm(query) / np.linalg.norm(stored)
                    assert found[iri] == pytest.approx(float(cosine), abs=1e-5)
                vectors = index.vectors(iris)
                assert all(
                    np.linalg.norm(v) == pytest.approx(1.0, abs=1e-5) for v in vectors.values()
                )
        finally:
            index.close()


# -- long texts in windows ---------------------------------------------------------------------

READS = 40  # words ``ReadsTheBeginning`` embeds of each text
WINDOWS = DenseConfig(window_words=32, window_overlap=8, max_windows=16)  # every word is read
FACT = "the spare key hides under the blue flowerpot by the garage"
FILLER = ["river", "mountain", "coffee", "budget", "meeting", "violin", "harbour", "winter"]
SHORT = "a short note about lunch"


class ReadsTheBeginning(TestEmbedder):
    """An embedder that reads a text's first words only, as a model reads a bounded number
    of word pieces: a fact past them is found only through a window that starts near it."""

    __test__ = False

    def embed_documents(self, texts: Sequence[str]) -> list[list[float]]:
        return super().embed_documents([" ".join(t.split()[:READS]) for t in texts])


def _long(seed: int, fact: bool = False) -> str:
    rng = random.Random(seed)
    text = " ".join(rng.choice(FILLER) for _ in range(200))  # 8 windows, 9 with the fact
    return f"{text} {FACT}" if fact else text


@pytest.fixture
def reader() -> ReadsTheBeginning:
    return ReadsTheBeginning(256)


@pytest.fixture
def windowed(
    index_backend: IndexBackend, l0: EntryStore, reader: ReadsTheBeginning
) -> Iterator[VectorIndex]:
    """An index whose embedder reads only the beginning, over three long texts and a short one
    (the fact is in the last window of ``urn:long:1`` only)."""
    value = index_backend.open(l0, reader, WINDOWS)
    l0.put_many(
        [Record({"@id": f"urn:long:{i}", "text": _long(i, fact=i == 1)}) for i in range(3)]
        + [Record({"@id": "urn:short", "text": SHORT})]
    )
    yield value
    value.close()


def test_a_fact_in_the_last_window_is_found_and_the_entry_stays_one(
    windowed: VectorIndex, reader: ReadsTheBeginning
) -> None:
    assert len(text_windows(_long(1, fact=True), WINDOWS)) == 9
    hits = windowed.query(FACT, 4)
    assert hits[0][0] == "urn:long:1"
    assert [iri for iri, _ in hits] == list(dict.fromkeys(iri for iri, _ in hits))  # once each
    assert {iri for iri, _ in hits} == {"urn:long:0", "urn:long:1", "urn:long:2", "urn:short"}
    assert windowed.count() == 4  # entries, not windows
    best = windowed.similarities(FACT, ["urn:long:1"])["urn:long:1"]
    assert best == pytest.approx(hits[0][1], abs=1e-5)  # the best window's cosine
    allowed = windowed.query(FACT, 2, allowed=["urn:long:1", "urn:long:2"])
    assert allowed[0] == ("urn:long:1", pytest.approx(best, abs=1e-5))
    # Without windows the fact is past what the embedder reads.
    beginning = float(np.dot(reader.embed_query(FACT), _unit(reader, _long(1, fact=True))))
    assert best > beginning


def test_a_reopened_index_reads_the_windows_it_holds(
    index_backend: IndexBackend, windowed: VectorIndex, l0: EntryStore, reader: ReadsTheBeginning
) -> None:
    before = windowed.similarities(FACT, ["urn:long:1", "urn:short"])
    vectors = windowed.vectors(["urn:long:1", "urn:short"])
    windowed.close()
    again = index_backend.open(l0, reader, WINDOWS)  # nothing in process: from its storage
    try:
        after = again.similarities(FACT, ["urn:long:1", "urn:short", "urn:missing"])
        assert after == pytest.approx(before, abs=1e-5)
        reread = again.vectors(["urn:long:1", "urn:short", "urn:missing"])
        assert set(reread) == {"urn:long:1", "urn:short"}
        for iri, vector in vectors.items():
            assert reread[iri] == pytest.approx(vector, abs=1e-5)
    finally:
        again.close()


def test_vectors_are_unit_and_a_windowed_entry_is_its_windows_mean(
    windowed: VectorIndex, reader: ReadsTheBeginning
) -> None:
    vectors = windowed.vectors(["urn:long:1", "urn:short", "urn:missing"])
    assert set(vectors) == {"urn:long:1", "urn:short"}
    short = np.asarray(reader.embed_documents([SHORT])[0])
    assert vectors["urn:short"] == pytest.approx(short / np.linalg.norm(short), abs=1e-5)
    rows = np.asarray(reader.embed_documents(text_windows(_long(1, True), WINDOWS)))
    mean = (rows / np.linalg.norm(rows, axis=1, keepdims=True)).mean(axis=0)
    assert vectors["urn:long:1"] == pytest.approx(mean / np.linalg.norm(mean), abs=1e-5)
    assert all(float(np.linalg.norm(v)) == pytest.approx(1.0, abs=1e-5) for v in vectors.values())


def test_a_shorter_rewrite_a_delete_and_a_remove_leave_no_window_behind(
    windowed: VectorIndex, l0: EntryStore, reader: ReadsTheBeginning
) -> None:
    l0.replace({"@id": "urn:long:1", "text": "a short note now"})
    short = float(np.dot(reader.embed_query(FACT), _unit(reader, "a short note now")))
    # Scored from the backend's vectors: a window left behind would still score the fact.
    (scored,) = windowed.query(FACT, 1, allowed=["urn:long:1"])
    assert scored == ("urn:long:1", pytest.approx(short, abs=1e-5))
    assert windowed.count() == 4
    assert l0.delete("urn:long:0")
    assert "urn:long:0" not in {iri for iri, _ in windowed.query(_long(0), 10)}
    assert windowed.count() == 3
    assert windowed.remove(["urn:long:2", "urn:long:2", "urn:missing"]) == 1
    assert "urn:long:2" not in {iri for iri, _ in windowed.query(_long(2), 10)}
    assert windowed.count() == 2
    assert windowed.rebuild() == 3  # L0 still holds it: a rebuild puts every window back
    assert windowed.query(_long(2), 1)[0][0] == "urn:long:2"


def _unit(embedder: TestEmbedder, text: str) -> np.ndarray:
    vector = np.asarray(embedder.embed_documents([text])[0])
    return vector / np.linalg.norm(vector)


# -- deferred embedding --------------------------------------------------------------------------


def test_a_deferred_write_waits_for_refresh_later_and_searches_do_not_wait(
    l0: EntryStore, index: VectorIndex, embedder: TestEmbedder
) -> None:
    l0.put_many(KNOWLEDGE[:2])
    with index.deferred():
        l0.put_many(KNOWLEDGE[2:])  # commits, embeds nothing
    assert index.behind() == 2
    assert not index.catching_up
    embedder.gate.clear()  # the background catch-up will stall in the embedder
    index.refresh_later()
    assert embedder.waiting.wait(60)
    assert index.catching_up
    assert index.refresh() == 2  # a search's refresh leaves the work to it and says so
    index.refresh_later()  # one catch-up at a time: this asks it to go round again
    assert "urn:task" not in _found(index, "Rotate the JWT signing keys monthly")
    embedder.gate.set()
    assert index.refresh(wait=True) == 0
    assert index.count() == 4
    assert "urn:task" in _found(index, "Rotate the JWT signing keys monthly")


def test_deferring_is_the_writing_thread_s_alone(l0: EntryStore, index: VectorIndex) -> None:
    with index.deferred():
        other = threading.Thread(target=l0.put_many, args=(KNOWLEDGE[:1],))
        other.start()
        other.join(60)
        assert index.behind() == 0  # another thread's commit was applied as it committed
        l0.put_many(KNOWLEDGE[1:])
    assert index.behind() == 3
    assert index.refresh(wait=True) == 0  # any refresh applies what was deferred
    assert index.count() == 4


def test_a_closed_index_starts_no_catch_up(l0: EntryStore, index: VectorIndex) -> None:
    with index.deferred():
        l0.put_many(KNOWLEDGE)
    index.close()
    index.refresh_later()
    assert not index.catching_up


# -- progress reports ----------------------------------------------------------------------------


def test_a_writer_hears_its_entries_embedded_in_steps(l0: EntryStore, index: VectorIndex) -> None:
    heard: list[int] = []
    with index.reporting(heard.append):
        l0.put_many(_records(300))
    assert sum(heard) == 300
    assert len(heard) >= 3  # steps, not one report at the end
    l0.put_many(_records(5, "urn:quiet:"))  # outside the block: nothing is heard
    assert sum(heard) == 300
    assert index.count() == 305


def test_a_windowed_entry_is_heard_once(
    index_backend: IndexBackend, l0: EntryStore, reader: ReadsTheBeginning
) -> None:
    index = index_backend.open(l0, reader, WINDOWS)
    heard: list[int] = []
    try:
        with index.reporting(heard.append):
            l0.put_many([Record({"@id": f"urn:long:{i}", "text": _long(i)}) for i in range(3)])
    finally:
        index.close()
    assert sum(heard) == 3


@pytest.mark.parametrize("report", [None, "bar", 3])
def test_a_report_that_cannot_be_called_is_refused(index: VectorIndex, report: object) -> None:
    with (
        pytest.raises(InvalidInputError, match="report must be callable"),
        index.reporting(report),  # type: ignore[arg-type]
    ):
        pass
