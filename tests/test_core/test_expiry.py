"""Expiry in a memory: entries vanish when they expire and a background sweep, run by the memory
itself, deletes them from every index; the LangGraph store's items go the same way."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from gliding_core import (
    Conversation,
    HashEmbedder,
    Memory,
    MemoryConfig,
    Record,
    Scope,
    TopicConfig,
)
from gliding_core.config import DenseConfig, ExpiryConfig, StoreConfig
from gliding_core.errors import ClosedError
from gliding_core.hyperspace.backends import CachedEmbedder
from gliding_core.hyperspace.windows import text_windows
from gliding_core.retention.erasure import ExpirySweeper
from gliding_core.storage import EMBEDDING_CACHE_FILE
from tests.test_core.held_embedder import HeldEmbedder, cache_forgets

WAIT_S = 60.0  # the most a test waits for the background sweep: long on a loaded machine


def config(interval_s: float, **expiry: object) -> MemoryConfig:
    return MemoryConfig(
        topics=TopicConfig(interval_s=0),
        store=StoreConfig(expiry=ExpiryConfig(sweep_interval_s=interval_s, **expiry)),
    )


def eventually(condition: Callable[[], bool]) -> bool:
    """Whether ``condition`` holds within ``WAIT_S`` (a guard against a hang, not a timing)."""
    deadline = time.monotonic() + WAIT_S
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


def test_the_memory_sweeps_expired_entries_without_being_asked(tmp_path: Path) -> None:
    with Memory.open(tmp_path, config=config(0.05), embedder=HashEmbedder()) as memory:
        memory.store.put({"@id": "urn:kept", "text": "lasting words"})
        memory.store.put({"@id": "urn:brief", "text": "brief words Qzbrief"}, ttl=0.05)
        memory.search("words", 5)  # both are in the dense index
        before = memory.store.change_sequence()
        assert eventually(lambda: memory.store.change_sequence() > before)  # a deletion
        assert [h.iri for h in memory.search("brief words", 5)] == ["urn:kept"]
        assert eventually(lambda: memory.index.count() == 1)
        assert memory.sweep_expired().removed == 0  # nothing left to sweep
        sweeper = memory._sweeper._thread
        assert sweeper is not None
        assert sweeper.is_alive()
    assert not sweeper.is_alive()  # stopped with the memory
    assert not any(b"Qzbrief" in p.read_bytes() for p in tmp_path.rglob("*.sqlite3"))


def test_an_expired_turn_leaves_the_open_session_at_the_sweep() -> None:
    expiring = config(0, by_scope={"user:alice": 0.05})
    with Memory(config=expiring, embedder=HashEmbedder()) as memory:
        conversation = Conversation(memory, scope=Scope.user("alice"))
        conversation.record([{"role": "user", "content": "a passing remark Qzpass"}])
        bob = Conversation(memory, scope=Scope.user("bob"))
        bob.record([{"role": "user", "content": "bob stays"}])
        assert len(conversation.session.turns) == 1
        time.sleep(0.15)
        assert memory.store.search_ids("Qzpass") == []  # invisible at once
        report = memory.sweep_expired()
        assert report.target == "expired"
        assert report.kinds == {"Turn": 1}
        assert report.session_turns == 1
        assert conversation.session.turns == []
        assert len(bob.session.turns) == 1


def test_no_sweep_runs_with_an_interval_of_zero() -> None:
    with Memory(config=config(0), embedder=HashEmbedder()) as memory:
        assert memory._sweeper._thread is None
        memory.store.put({"@id": "urn:brief"}, ttl=0.01)
        time.sleep(0.05)
        assert [e.iri for e in memory.store.sweep_expired()] == ["urn:brief"]


def test_a_sweep_that_finds_the_memory_closed_ends_the_sweeper_quietly(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A memory closes between the sweeper's wake-up and its stop: the sweep's ClosedError
    ends the thread without an error in the log (a worker closing its memory logged a
    traceback)."""
    calls: list[int] = []

    def closed() -> None:
        calls.append(1)
        raise ClosedError("closed")

    sweeper = ExpirySweeper(closed, 0.01)
    with caplog.at_level(logging.ERROR):
        sweeper.start()
        assert eventually(lambda: bool(calls))
        sweeper.stop()
    assert calls == [1]
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]


@pytest.mark.parametrize("options", [{}, {"rerank": False}, {"group_weight": 0.0}])
def test_an_expired_entry_not_yet_swept_takes_no_place_among_the_hits(
    options: dict[str, Any],
) -> None:
    """The dense index holds an expired entry until the sweep: it may rank, but the k hits
    are k live entries whenever as many match."""
    with Memory(config=config(0), embedder=HashEmbedder()) as memory:
        memory.store.put_many(
            [{"@id": f"urn:k:{i}", "text": f"lasting note {i}"} for i in range(5)]
        )
        memory.store.put({"@id": "urn:brief", "text": "brief harbour ferry"}, ttl=0.01)
        time.sleep(0.05)
        hits = memory.search("brief harbour ferry", 3, **options)
        assert len(hits) == 3
        assert "urn:brief" not in [h.iri for h in hits]


def test_sweeping_an_entry_still_being_embedded_leaves_no_vector_in_the_cache(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A batch written with embed="later" expires while its catch-up holds the text: the sweep
    waits for the catch-up before the cache forgets, so the vector is not cached after."""
    text = "Qzexpiring diagnosis of the patient"
    embedder = HeldEmbedder()
    forgotten = cache_forgets(monkeypatch)
    with Memory.open(tmp_path, config=config(0), embedder=embedder) as memory:
        memory.put_many([{"@id": "urn:kept", "text": "another text"}])
        embedder.gate.clear()
        memory.put_many([Record({"@id": "urn:late", "text": text}, ttl=0.01)], embed="later")
        assert embedder.waiting.wait(60)  # the background catch-up holds the text
        time.sleep(0.05)
        sweeper = threading.Thread(target=memory.sweep_expired)
        sweeper.start()
        forgotten.wait(5)  # (the sweep waits for the catch-up first: a little later)
        embedder.gate.set()
        sweeper.join(60)
        assert not sweeper.is_alive()
    cache = CachedEmbedder(embedder, tmp_path / EMBEDDING_CACHE_FILE)
    try:
        assert cache.missing([text]) == [text]
    finally:
        cache.close()


def test_the_sweep_drops_the_cached_vectors_of_a_long_texts_windows(tmp_path: Path) -> None:
    long = " ".join(f"Qzword{i}" for i in range(400))
    embedder = HashEmbedder()
    with Memory.open(tmp_path, config=config(0), embedder=embedder) as memory:
        memory.store.put({"@id": "urn:long", "text": long}, ttl=0.01)
        time.sleep(0.05)
        assert memory.sweep_expired().removed == 1
    windows = text_windows(long, DenseConfig())
    assert len(windows) > 1
    cache = CachedEmbedder(embedder, tmp_path / EMBEDDING_CACHE_FILE)
    try:
        assert cache.missing(windows) == windows
    finally:
        cache.close()
