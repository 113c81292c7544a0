"""L0Store's readers and buffered access statistics: one connection per reading thread, counts
written by a timer and on close, never lost to an entry.

That reads never wait for a write transaction, and see their own writes inside one, is the L0
contract suite's (``contracts/test_entry_store_concurrency.py``).
"""

from __future__ import annotations

import gc
import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from gliding_core import ClosedError, ConfigError, L0Store, StorageError, StoreConfig

# Statistics are written only when a test asks (or on close), never by the timer meanwhile.
HELD = StoreConfig(access_flush_interval_s=3600.0)


@pytest.fixture(params=["file", "memory"])
def any_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[L0Store]:
    """A file store and an in-memory store, with statistics held until asked for."""
    path = tmp_path / "l0.sqlite3" if request.param == "file" else None
    with L0Store(path, HELD) as value:
        yield value


def _stored_count(path: Path, iri: str) -> int:
    conn = sqlite3.connect(path)
    try:
        row = conn.execute("SELECT access_count FROM entries WHERE iri = ?", (iri,)).fetchone()
    finally:
        conn.close()
    return int(row[0])


def test_a_read_writes_nothing(tmp_path: Path) -> None:
    path = tmp_path / "l0.sqlite3"
    with L0Store(path, StoreConfig(busy_timeout_ms=0, access_flush_interval_s=3600.0)) as store:
        store.put({"@id": "urn:a", "text": "x"})
        blocker = sqlite3.connect(path, isolation_level=None)
        blocker.execute("BEGIN IMMEDIATE")  # another process's writer holds the lock
        try:
            entry = store.get("urn:a")
            with pytest.raises(StorageError, match="locked"):
                store.put({"@id": "urn:b", "text": "y"})  # a write would have failed like this
        finally:
            blocker.execute("ROLLBACK")
            blocker.close()
        assert entry is not None
        assert entry.access_count == 1
        assert _stored_count(path, "urn:a") == 0  # buffered, not written


def test_buffered_counts_are_written_on_close(tmp_path: Path) -> None:
    path = tmp_path / "l0.sqlite3"
    store = L0Store(path, HELD)
    store.put({"@id": "urn:a", "text": "x"})
    counts = [entry.access_count for entry in (store.get("urn:a") for _ in range(3)) if entry]
    assert counts == [1, 2, 3]
    assert _stored_count(path, "urn:a") == 0
    store.close()
    assert _stored_count(path, "urn:a") == 3
    with L0Store(path, HELD) as reopened:
        again = reopened.get("urn:a")
    assert again is not None
    assert again.access_count == 4


def test_every_read_sees_the_buffered_counts(any_store: L0Store) -> None:
    any_store.put({"@id": "urn:a", "text": "counted words"}, tags=["t"])
    first = any_store.get("urn:a")
    second = any_store.get("urn:a")
    assert first is not None
    assert second is not None
    assert any_store.get_many(["urn:a"])["urn:a"].access_count == 2  # get_many does not count
    assert [e.access_count for e in any_store.by_tags(["t"])] == [2]
    assert [h.entry.access_count for h in any_store.search_text("counted")] == [2]
    assert any_store.retag("urn:a", add=["u"]).access_count == 2
    assert any_store.set_mesi_state("urn:a", "E").last_accessed == second.last_accessed
    assert any_store.flush_access() == 1
    assert any_store.flush_access() == 0
    assert [e.access_count for e in any_store.by_tags(["t"])] == [2]  # now from the database
    third = any_store.get("urn:a")
    assert third is not None
    assert third.access_count == 3
    assert third.generation == second.generation + 2  # retag and MESI state; reads are not changes


def test_a_deleted_entry_forgets_its_buffered_counts(any_store: L0Store) -> None:
    any_store.put({"@id": "urn:a", "text": "x"})
    any_store.get("urn:a")
    assert any_store.delete("urn:a") is True
    any_store.put({"@id": "urn:a", "text": "again"})
    entry = any_store.get("urn:a")
    assert entry is not None
    assert entry.access_count == 1


def test_a_failed_write_of_the_counts_keeps_them(tmp_path: Path) -> None:
    path = tmp_path / "l0.sqlite3"
    config = StoreConfig(busy_timeout_ms=0, access_flush_interval_s=3600.0)
    with L0Store(path, config) as store:
        store.put({"@id": "urn:a", "text": "x"})
        store.get("urn:a")
        blocker = sqlite3.connect(path, isolation_level=None)
        blocker.execute("BEGIN IMMEDIATE")
        with pytest.raises(StorageError, match="access statistics"):
            store.flush_access()
        blocker.execute("ROLLBACK")
        blocker.close()
        entry = store.get("urn:a")
        assert entry is not None
        assert entry.access_count == 2
        assert store.flush_access() == 1
        assert _stored_count(path, "urn:a") == 2


def test_counts_from_many_threads_are_exact_while_the_timer_writes(tmp_path: Path) -> None:
    """Flushes commit all the time; no read is counted twice or missed, by any thread."""
    path = tmp_path / "l0.sqlite3"
    threads, reads = 4, 150
    seen: list[list[int]] = [[] for _ in range(threads)]
    with L0Store(path, StoreConfig(access_flush_interval_s=0.001)) as store:
        store.put({"@id": "urn:hot", "text": "hot"})

        def read(worker: int) -> None:
            for _ in range(reads):
                entry = store.get("urn:hot")
                assert entry is not None
                seen[worker].append(entry.access_count)

        workers = [threading.Thread(target=read, args=(w,)) for w in range(threads)]
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join()
        total = store.get_many(["urn:hot"])["urn:hot"].access_count
    assert total == threads * reads
    assert all(counts == sorted(set(counts)) for counts in seen)  # each thread's grow
    assert sorted(c for counts in seen for c in counts) == list(range(1, threads * reads + 1))
    assert _stored_count(path, "urn:hot") == threads * reads


def test_close_leaves_no_thread_and_no_file(tmp_path: Path) -> None:
    store = L0Store(config=StoreConfig(access_flush_interval_s=0.01))
    store.put({"@id": "urn:a", "text": "x"})
    store.get("urn:a")
    scratch = store._scratch
    assert scratch is not None
    assert os.path.isdir(scratch)
    store.close()
    assert not os.path.exists(scratch)
    assert [t for t in threading.enumerate() if t.name.startswith("gliding-l0-")] == []
    with pytest.raises(ClosedError):
        store.get("urn:a")
    with pytest.raises(ClosedError):
        store.flush_access()
    store.close()


def test_an_unclosed_store_is_closed_when_collected(tmp_path: Path) -> None:
    path = tmp_path / "l0.sqlite3"
    store = L0Store(path, HELD)
    store.put({"@id": "urn:a", "text": "x"})
    store.get("urn:a")
    del store
    gc.collect()
    assert _stored_count(path, "urn:a") == 1
    assert [t for t in threading.enumerate() if t.name.startswith("gliding-l0-")] == []


def test_readers_of_ended_threads_are_closed(any_store: L0Store) -> None:
    any_store.put({"@id": "urn:a", "text": "x"})
    for _ in range(5):
        reader = threading.Thread(target=any_store.count)
        reader.start()
        reader.join()
    assert any_store._db.reader_count() <= 1
    any_store.count()
    assert any_store._db.reader_count() <= 1  # the main thread's reader; the others closed


def test_a_read_while_closing_from_another_thread_is_refused_or_done(tmp_path: Path) -> None:
    store = L0Store(tmp_path / "l0.sqlite3", HELD)
    store.put({"@id": "urn:a", "text": "x"})
    results: list[object] = []

    def read() -> None:
        for _ in range(200):
            try:
                results.append(store.get("urn:a") is not None)
            except ClosedError:
                results.append("closed")
                return

    reader = threading.Thread(target=read)
    reader.start()
    store.close()
    reader.join()
    assert set(results) <= {True, "closed"}
    with L0Store(tmp_path / "l0.sqlite3", HELD) as reopened:
        entry = reopened.get_many(["urn:a"])["urn:a"]
    assert entry.access_count == results.count(True)  # every read that returned was kept


READER = textwrap.dedent(
    """
    import sys
    from gliding_core import L0Store, StoreConfig

    store = L0Store(sys.argv[1], StoreConfig(access_flush_interval_s=0.01))
    for i in range(1_000_000):
        store.put({"@id": f"urn:k:{i}", "text": f"entry {i}"})
        store.get(f"urn:k:{i // 2}")
        print(i, flush=True)  # acknowledged: the put and the read have returned
    """
)


def test_a_crash_loses_at_most_buffered_counts_never_an_entry(tmp_path: Path) -> None:
    path = tmp_path / "l0.sqlite3"
    child = subprocess.Popen(
        [sys.executable, "-c", READER, str(path)], stdout=subprocess.PIPE, text=True
    )
    assert child.stdout is not None
    acknowledged = -1
    for line in child.stdout:
        acknowledged = int(line)
        if acknowledged >= 200:
            break
    os.kill(child.pid, signal.SIGKILL)
    child.wait(timeout=30)
    child.stdout.close()
    with L0Store(path, HELD) as store:
        assert store.integrity_check() == "ok"
        found = store.get_many([f"urn:k:{i}" for i in range(acknowledged + 1)])
        assert len(found) == acknowledged + 1
        counted = sum(entry.access_count for entry in found.values())
    assert counted <= acknowledged + 2  # one read per put, plus one not yet acknowledged


@pytest.mark.parametrize(
    "setting",
    [
        {"access_flush_interval_s": 0.0},
        {"access_flush_interval_s": -1.0},
        {"access_flush_interval_s": 7200.0},
        {"access_buffer_limit": 0},
    ],
)
def test_bad_access_settings_are_refused(setting: dict[str, float]) -> None:
    name = next(iter(setting))
    with pytest.raises(ConfigError, match=name):
        StoreConfig(**setting)  # type: ignore[arg-type]


def test_a_full_buffer_is_written_before_the_interval(tmp_path: Path) -> None:
    path = tmp_path / "l0.sqlite3"
    config = StoreConfig(access_flush_interval_s=3600.0, access_buffer_limit=3)
    with L0Store(path, config) as store:
        store.put_many({"@id": f"urn:f:{i}", "text": "x"} for i in range(3))
        for i in range(3):
            store.get(f"urn:f:{i}")
        flusher = store._flusher
        assert flusher is not None
        # The third buffered entry woke the writer thread; wait for its write, not for a time.
        stored: list[int] = []
        for _ in range(10_000):
            stored = [_stored_count(path, f"urn:f:{i}") for i in range(3)]
            if stored == [1, 1, 1]:
                break
            flusher.join(timeout=0.01)
        assert stored == [1, 1, 1]
        assert len(store._access) == 0
