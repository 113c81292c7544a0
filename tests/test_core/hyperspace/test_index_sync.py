"""DenseIndex in a memory: retries, the watermark in L0, Chroma's files, metadata and chunks.

What every dense index promises (catch-up from the change log, repair after a fault or a killed
process, batches, refusing another embedder's index) is the contract suite's
(``contracts/test_vector_index.py``), on embedded Chroma and a Chroma server.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import chromadb.errors
import pytest

from gliding_core import (
    ConfigError,
    DenseIndex,
    EmbedderError,
    HashEmbedder,
    InvalidInputError,
    L0Store,
    Memory,
    Record,
    StorageError,
)
from gliding_core.config import DenseConfig
from gliding_core.hyperspace import following
from gliding_core.hyperspace.backends import CachedEmbedder
from gliding_core.hyperspace.dense import DIMENSION_KEY, EMBEDDER_KEY, chroma_client, close_client
from gliding_core.memory import CHROMA_DIR, EMBEDDING_CACHE_FILE, MANIFEST_FILE, STORE_FILE
from tests.test_core.held_embedder import HeldEmbedder


def _records(n: int, prefix: str = "urn:e:") -> list[Record]:
    return [
        Record({"@id": f"{prefix}{i}", "text": f"entry {i} about topic {i % 97}"}) for i in range(n)
    ]


def _indexed(memory: Memory) -> set[str]:
    return set(memory.index._ids())


def _l0_iris(memory: Memory) -> set[str]:
    return {iri for batch in memory.store.scan_texts() for iri, _ in batch}


class FailingUpserts:
    """A fault between the L0 commit and Chroma: the collection's upserts raise until healed."""

    def __init__(self, index: DenseIndex) -> None:
        self.index, self.failures = index, 0
        self._real = index.collection.upsert
        index.collection.upsert = self  # the real collection, with one method failing

    def __call__(self, **kwargs: Any) -> None:
        self.failures += 1
        raise chromadb.errors.InternalError("injected: the segment is unavailable")

    def heal(self) -> None:
        self.index.collection.upsert = self._real


@pytest.fixture
def memory() -> Iterator[Memory]:
    with Memory(embedder=HashEmbedder(64)) as value:
        yield value


def test_a_failed_update_says_the_index_is_behind_and_is_repaired(
    memory: Memory, caplog: pytest.LogCaptureFixture
) -> None:
    memory.index.retry_s = 3_600.0  # no timer during the test: the search repairs it
    memory.store.put_many(_records(5))
    fault = FailingUpserts(memory.index)
    with caplog.at_level(logging.WARNING):
        memory.store.put_many(_records(3, "urn:late:"))  # returns normally: the write stands
        hits = memory.search("entry 2 about topic 2", 10)
    assert fault.failures >= 2  # the write's own update, then the search's retry
    assert hits.index_behind == 3
    assert hits.arms == ("lexical", "dense")
    assert "urn:late:2" in {h.iri for h in hits}  # the lexical arm still finds it
    assert "3 L0 changes behind" in caplog.text
    fault.heal()
    again = memory.search("entry 2 about topic 2", 10)
    assert again.index_behind == 0
    assert "urn:late:2" in {iri for iri, _ in memory.index.query("entry 2 about topic 2", 10)}
    assert _indexed(memory) == _l0_iris(memory)


def test_a_retry_timer_repairs_the_index_without_a_search(memory: Memory) -> None:
    memory.index.retry_s = 0.05
    fault = FailingUpserts(memory.index)
    memory.store.put_many(_records(4))
    assert memory.index.behind() == 4
    fault.heal()
    deadline = time.monotonic() + 60  # a wait for the timer, not a measure of speed
    while memory.index.behind() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert memory.index.behind() == 0
    assert memory.index.count() == 4


def test_the_retry_timer_goes_on_while_its_retries_fail(memory: Memory) -> None:
    memory.index.retry_s = 0.05
    fault = FailingUpserts(memory.index)
    memory.store.put_many(_records(4))
    deadline = time.monotonic() + 60  # waits for the timer, not measures of speed
    while fault.failures < 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert fault.failures >= 2  # the write's catch-up failed, then the timer's retry
    fault.heal()
    while memory.index.behind() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert memory.index.behind() == 0  # a later retry of the timer's own repaired it
    assert memory.index.count() == 4


def test_the_watermark_is_recorded_in_l0(tmp_path: Path) -> None:
    with Memory.open(tmp_path, embedder=HashEmbedder(64)) as memory:
        memory.store.put_many(_records(10))
        name = memory.index.watermark_name
    with L0Store(tmp_path / STORE_FILE) as store:
        assert store.watermark(name) == store.change_sequence() > 0


def test_a_lost_chroma_directory_is_rebuilt_from_l0(tmp_path: Path) -> None:
    import shutil

    with Memory.open(tmp_path, embedder=HashEmbedder(64)) as memory:
        memory.store.put_many(_records(20))
    shutil.rmtree(tmp_path / CHROMA_DIR)  # the watermark says 20, the new collection is empty
    with Memory.open(tmp_path, embedder=HashEmbedder(64)) as again:
        assert again.index.count() == 20


def test_another_embedder_without_a_manifest_rebuilds_the_owned_index(tmp_path: Path) -> None:
    with Memory.open(tmp_path, embedder=HashEmbedder(64)) as memory:
        memory.store.put_many(_records(10))
    (tmp_path / MANIFEST_FILE).unlink()
    with Memory.open(tmp_path, embedder=HashEmbedder(128)) as changed:
        metadata = changed.index.collection.metadata
        assert metadata[EMBEDDER_KEY] == "hash-128"
        assert metadata[DIMENSION_KEY] == 128
        assert changed.index.count() == 10
        assert changed.search("entry 3 about topic 3", 3)[0].iri == "urn:e:3"


def test_chroma_failures_are_storage_errors(
    memory: Memory, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(following, "SCAN_LIMIT", 0)  # a search asks Chroma, as past the scan
    memory.store.put_many(_records(3))
    memory.index.client.delete_collection(memory.index.name)  # pulled from under the index
    with pytest.raises(StorageError, match="dense index"):
        memory.index.count()
    with pytest.raises(StorageError, match="dense index"):
        memory.search("entry 1", 3)
    with pytest.raises(StorageError):
        memory.index.upsert([("urn:x", "text")])


def test_a_rebuild_holds_every_entry_across_chunks(memory: Memory) -> None:
    memory.index.max_batch = 7  # chunks as small as a constrained server's
    memory.store.put_many(_records(40))
    assert memory.index.count() == 40
    memory.index.collection.delete(ids=[f"urn:e:{i}" for i in range(10)])
    assert memory.index.rebuild(batch=9) == 40
    assert _indexed(memory) == _l0_iris(memory)


class FlakyEmbedder(HashEmbedder):
    """An embedding API that is down until told otherwise (a fake at the network edge)."""

    def __init__(self) -> None:
        super().__init__(64)
        self.down = False

    def embed_documents(self, texts: Any) -> list[list[float]]:
        if self.down:
            raise EmbedderError("injected: the embedding API does not answer")
        return super().embed_documents(texts)


def test_an_embedder_down_at_open_delays_the_rebuild_but_loses_nothing(tmp_path: Path) -> None:
    with Memory.open(tmp_path, embedder=HashEmbedder(64)) as memory:
        memory.store.put_many(_records(30))
    import shutil

    shutil.rmtree(tmp_path / CHROMA_DIR)
    (tmp_path / EMBEDDING_CACHE_FILE).unlink()  # or the rebuild needs no embedder at all
    embedder = FlakyEmbedder()
    embedder.down = True
    with Memory.open(tmp_path, embedder=embedder) as again:  # opens: L0 and lexical search work
        again.index.retry_s = 3_600.0
        assert again.index.behind() > 0
        hits = again.search("entry 7 about topic 7", 3)
        assert hits.index_behind > 0
        assert hits.arms == ("lexical",)  # the query could not be embedded either
        assert hits[0].iri == "urn:e:7"
        embedder.down = False
        assert again.search("entry 7 about topic 7", 3).index_behind == 0
        assert again.index.count() == 30


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"on_mismatch": "delete"}, "on_mismatch"),
        ({"retry_s": 0}, "retry_s"),
        ({"retry_s": True}, "retry_s"),
        ({"retry_s": float("nan")}, "retry_s.*nan"),
        ({"retry_s": float("inf")}, "retry_s.*inf"),
        ({"retry_s": 1e300}, "retry_s.*1e"),
        ({"collection": 7}, "collection"),
    ],
)
def test_bad_index_arguments_are_named(kwargs: dict[str, Any], message: str) -> None:
    client = chroma_client()
    try:
        with L0Store() as store, pytest.raises(InvalidInputError, match=message):
            DenseIndex(store, HashEmbedder(64), client, **kwargs)
    finally:
        close_client(client)


def test_the_search_beam_is_the_configs_and_reaches_an_existing_collection(
    tmp_path: Path,
) -> None:
    client = chroma_client(tmp_path / "chroma")
    try:
        with L0Store() as store:
            made = DenseIndex(store, HashEmbedder(64), client, "beam")
            beam = made.collection.configuration_json["hnsw"]["ef_search"]
            assert beam == DenseConfig().search_ef
            made.close()
            wider = DenseIndex(
                store, HashEmbedder(64), client, "beam", windows=DenseConfig(search_ef=700)
            )
            assert wider.collection.configuration_json["hnsw"]["ef_search"] == 700
            wider.close()
        assert client.get_collection("beam").configuration_json["hnsw"]["ef_search"] == 700
    finally:
        close_client(client)


@pytest.mark.parametrize("value", [0, -5, 100_001, "wide", None, True, 2.5, 10**18])
def test_the_search_beam_is_validated(value: object) -> None:
    with pytest.raises(ConfigError, match="search_ef"):
        DenseConfig(search_ef=value)  # type: ignore[arg-type]


def test_vectors_read_while_their_entry_is_rewritten_are_not_kept(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A search reads an entry's vectors (from its text) while another thread rewrites it: the
    rewrite's vectors stay in the index's copy, not the ones read before it."""
    with Memory.open(tmp_path, embedder=HashEmbedder(64)) as memory:
        memory.store.put_many(_records(5))
    gate, waiting = threading.Event(), threading.Event()
    searcher: list[threading.Thread] = []
    matrix = CachedEmbedder.matrix

    def held(cache: CachedEmbedder, texts: Sequence[str]) -> Any:
        if searcher and threading.current_thread() is searcher[0] and not gate.is_set():
            waiting.set()  # the texts are read: the rewrite commits before their vectors land
            gate.wait()
        return matrix(cache, texts)

    monkeypatch.setattr(CachedEmbedder, "matrix", held)
    with Memory.open(tmp_path, embedder=HashEmbedder(64)) as memory:  # its copy is empty
        searcher.append(threading.Thread(target=memory.search, args=("entry 3", 3)))
        searcher[0].start()
        assert waiting.wait(60)
        rewritten = "the gutters drain into the garden"
        memory.store.put({"@id": "urn:e:3", "text": rewritten})
        gate.set()
        searcher[0].join(60)
        assert memory.index.similarities(rewritten, ["urn:e:3"])["urn:e:3"] == pytest.approx(
            1.0, abs=1e-5
        )
        assert memory.index.query(rewritten, 1)[0] == ("urn:e:3", pytest.approx(1.0, abs=1e-5))


class RejectingEmbedder(HashEmbedder):
    """An embedding API that refuses some texts (too long for it, or flagged): those holding
    ``poison``."""

    def embed_documents(self, texts: Sequence[str]) -> list[list[float]]:
        if any("poison" in text for text in texts):
            raise EmbedderError("injected: the API refuses this input")
        return super().embed_documents(texts)


@pytest.mark.parametrize("answered_by", ["scan", "graph"])
def test_an_entry_the_embedder_refuses_leaves_searches_to_the_others(
    answered_by: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The index cannot embed one entry (it stays behind, retrying): searches go on, that
    entry found by words only."""
    if answered_by == "graph":
        monkeypatch.setattr(following, "SCAN_LIMIT", -1)
    with Memory(embedder=RejectingEmbedder(64)) as memory:
        memory.index.retry_s = 3_600.0  # no timer during the test
        memory.store.put_many(_records(5))
        memory.store.put({"@id": "urn:poison", "text": "a poison entry about topic 3"})
        hits = memory.search("entry 3 about topic 3", 6)
        assert hits.index_behind > 0
        assert hits[0].iri == "urn:e:3"
        refused = [h for h in hits if h.iri == "urn:poison"]
        assert len(refused) == 1
        assert "dense" not in refused[0].arms
        assert "lexical" in refused[0].arms


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"n": -1}, "n must be an int"),
        ({"n": True}, "n must be an int"),
        ({"n": 2.5}, "n must be an int"),
        ({"n": float("nan")}, "n must be an int"),
        ({"n": 3, "allowed": "urn:e:1"}, "allowed must be a list"),
    ],
)
def test_bad_query_arguments_are_named(
    memory: Memory, kwargs: dict[str, Any], message: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    memory.store.put_many(_records(3))
    for answered_by in (following.SCAN_LIMIT, -1):  # the scan, and the backend's graph
        monkeypatch.setattr(following, "SCAN_LIMIT", answered_by)
        with pytest.raises(InvalidInputError, match=message):
            memory.index.query("entry 1", **kwargs)


def test_a_search_during_a_scrub_waits_for_the_refilled_index(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Forget rewrites Chroma's files: the collection is made anew and refilled from L0. A
    search that had passed its catch-up when the refill began waits for it, rather than
    finding the collection empty and saying nothing."""
    monkeypatch.setattr(following, "SCAN_LIMIT", -1)  # as past 2,000 entries: the graph answers
    embedder = HeldEmbedder(64)
    with Memory.open(tmp_path, embedder=embedder) as memory:
        memory.put_many(
            [{"@id": f"urn:r:{i}", "text": f"harbour ferry note {i}"} for i in range(50)]
        )
        memory.put_many([{"@id": "urn:gone", "text": "to be forgotten"}])
        found: list[Any] = []
        embedder.gate.clear()
        searcher = threading.Thread(
            target=lambda: found.append(memory.search("harbour ferry note number seven", 5))
        )
        searcher.start()
        assert embedder.waiting.wait(60)  # past its catch-up, embedding its query
        index = memory.index
        refill = index._rebuild  # type: ignore[attr-defined]

        def refilled(batch: int) -> int:  # the collection is new and empty here
            embedder.gate.set()
            searcher.join(2)  # (a search that waits is let go after 2 s)
            return int(refill(batch))

        monkeypatch.setattr(index, "_rebuild", refilled)
        memory.forget(["urn:gone"])  # (the search waits for the rewrite of Chroma's file too)
        searcher.join(60)
        (hits,) = found
        assert hits.index_behind == 0
        assert all("dense" in hit.arms for hit in hits)
