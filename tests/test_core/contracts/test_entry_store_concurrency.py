"""EntryStore contract, concurrency and durability: threads, readers beside a writer, other
processes, and a writer killed with SIGKILL.

Readers never wait for a write transaction and never see half of one; a thread inside its
transaction reads its own writes. On a shared implementation several processes write at once,
and a process killed mid-stream loses nothing it was told was written.
"""

from __future__ import annotations

import os
import signal
import threading

import pytest

from gliding_core import EntryStore, InvalidInputError, Record
from tests.test_core.contracts.conftest import Backend, run_child


def test_reads_of_another_thread_do_not_wait_for_a_write_transaction(
    entry_store: EntryStore,
) -> None:
    entry_store.put({"@id": "urn:a", "text": "committed"})
    inside, release = threading.Event(), threading.Event()
    failures: list[BaseException] = []

    def hold() -> None:
        try:
            with entry_store.transaction():
                entry_store.put({"@id": "urn:b", "text": "uncommitted"})
                inside.set()
                release.wait(timeout=60)
        except BaseException as exc:  # collected for the main thread
            failures.append(exc)

    writer = threading.Thread(target=hold)
    writer.start()
    try:
        assert inside.wait(timeout=60)
        entry = entry_store.get("urn:a")
        count = entry_store.count()
        hits = entry_store.search_ids("committed uncommitted")
        missing = entry_store.get("urn:b")
        # The writer is still inside its transaction: these reads did not wait for it.
        assert not release.is_set()
        assert writer.is_alive()
    finally:
        release.set()
        writer.join()
    assert failures == []
    assert entry is not None
    assert (count, missing, [iri for iri, _ in hits]) == (1, None, ["urn:a"])
    assert entry_store.count() == 2


def test_a_read_inside_a_write_transaction_sees_its_writes(entry_store: EntryStore) -> None:
    seen: list[object] = []
    with entry_store.transaction():
        entry_store.put({"@id": "urn:new", "text": "fresh words"})
        seen += [
            entry_store.count(),
            "urn:new" in entry_store,
            entry_store.get("urn:new") is not None,
        ]
        seen.append([iri for iri, _ in entry_store.search_ids("fresh")])
        other = threading.Thread(target=lambda: seen.append(entry_store.count()))
        other.start()
        other.join()
    assert seen == [1, True, True, ["urn:new"], 0]


def test_many_threads_write_one_store(entry_store: EntryStore) -> None:
    errors: list[BaseException] = []

    def work(worker: int) -> None:
        try:
            for i in range(150):
                entry_store.put({"@id": f"urn:t{worker}:{i}", "text": "thread"}, tags=["thread"])
                entry_store.put({"@id": "urn:shared"}, tags=[f"w{worker}-{i}"])
                entry_store.get(f"urn:t{worker}:{i}")
        except BaseException as exc:  # collected for the main thread
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(w,)) for w in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert entry_store.count() == 4 * 150 + 1
    assert len(entry_store.by_tags(["thread"])) == 4 * 150
    shared = entry_store.get("urn:shared")
    assert shared is not None
    assert len(shared.tags) == 4 * 150  # no merge lost a tag
    assert shared.generation == 4 * 150


def test_readers_beside_a_writer_never_see_half_a_batch(entry_store: EntryStore) -> None:
    """Each reader works on a snapshot of a commit: a batch is all there or not at all."""
    batches, size = 30, 40
    seen: list[int] = []
    errors: list[BaseException] = []
    done = threading.Event()

    def read() -> None:
        try:
            while not done.is_set():
                count = entry_store.count()
                tagged = len(entry_store.by_tags(["batch"]))
                hits = len(entry_store.search_ids("batched", limit=batches * size))
                seen.extend((count, tagged, hits))
        except BaseException as exc:  # collected for the main thread
            errors.append(exc)

    readers = [threading.Thread(target=read) for _ in range(3)]
    for reader in readers:
        reader.start()
    try:
        for b in range(batches):
            entry_store.put_many(
                Record({"@id": f"urn:b{b}:{i}", "text": "batched"}, tags=["batch"])
                for i in range(size)
            )
    finally:
        done.set()
        for reader in readers:
            reader.join()
    assert errors == []
    assert seen
    assert {n % size for n in seen} == {0}
    assert entry_store.count() == batches * size


WRITER = """
import sys

store = open_backend()
prefix = sys.argv[1]
count = int(sys.argv[2])
for i in range(count):
    store.put(
        {"@id": f"urn:{prefix}:{i}", "text": f"write {i} of {prefix}"},
        tags=[prefix],
    )
    store.put({"@id": "urn:shared", f"by_{prefix}": i}, tags=[f"{prefix}-{i % 5}"])
    print(i, flush=True)  # acknowledged: put() has returned
"""


def test_every_acknowledged_write_survives_sigkill(
    shared_entry_backend: Backend[EntryStore],
) -> None:
    writer = run_child(shared_entry_backend, WRITER, "killed", "1000000")
    assert writer.stdout is not None
    acknowledged = -1
    for line in writer.stdout:
        acknowledged = int(line)
        if acknowledged >= 300:
            break
    os.kill(writer.pid, signal.SIGKILL)
    writer.wait(timeout=30)
    writer.stdout.close()
    assert writer.returncode == -signal.SIGKILL
    store = shared_entry_backend.open()
    try:
        if shared_entry_backend.verify is not None:
            shared_entry_backend.verify(store)
        for i in range(acknowledged + 1):
            node = store.get_node(f"urn:killed:{i}")
            assert node == {"@id": f"urn:killed:{i}", "text": f"write {i} of killed"}
        shared = store.get_node("urn:shared")
        assert shared is not None
        assert shared["by_killed"] >= acknowledged
        # Nothing half-written: each entry's indexes agree with it.
        assert len(store.by_tags(["killed"])) == store.count() - 1
    finally:
        store.close()


def _write_from(backend: Backend[EntryStore], processes: int, count: int) -> None:
    writers = [run_child(backend, WRITER, f"p{k}", str(count)) for k in range(processes)]
    for writer in writers:
        out, _ = writer.communicate(timeout=600)
        assert writer.returncode == 0
        assert out.split()[-1] == str(count - 1)


def test_many_processes_write_one_store(shared_entry_backend: Backend[EntryStore]) -> None:
    _write_from(shared_entry_backend, 3, 120)
    store = shared_entry_backend.open()
    try:
        if shared_entry_backend.verify is not None:
            shared_entry_backend.verify(store)
        for k in range(3):
            entries = store.by_tags([f"p{k}"])
            assert sorted(e.iri for e in entries) == sorted(f"urn:p{k}:{i}" for i in range(120))
        shared = store.get("urn:shared")
        assert shared is not None
        assert set(shared.tags) == {f"p{k}-{i}" for k in range(3) for i in range(5)}
        assert {shared.node[f"by_p{k}"] for k in range(3)} == {119}
        assert store.count() == 3 * 120 + 1
    finally:
        store.close()


@pytest.mark.stress
def test_stress_four_processes_with_merges(shared_entry_backend: Backend[EntryStore]) -> None:
    _write_from(shared_entry_backend, 4, 500)
    store = shared_entry_backend.open()
    try:
        assert store.count() == 4 * 500 + 1
        if shared_entry_backend.verify is not None:
            shared_entry_backend.verify(store)
    finally:
        store.close()


# -- hold: a lock per purpose, to the end of the transaction -----------------------------------


def test_hold_needs_a_transaction_and_a_label(entry_store: EntryStore) -> None:
    with pytest.raises(InvalidInputError, match="transaction"):
        entry_store.hold("session:x")
    with entry_store.transaction():
        with pytest.raises(InvalidInputError, match="lock purpose"):
            entry_store.hold("bad\nlabel")
        entry_store.hold("session:x")
        entry_store.hold("session:x")  # again in the same transaction: it holds it already
        entry_store.put({"@id": "urn:a"})
    assert "urn:a" in entry_store


def _bump(store: EntryStore, times: int) -> None:
    """Read a counter, add one, write it: ``times`` times, each in a transaction holding it."""
    for _ in range(times):
        with store.transaction():
            store.hold("counter")
            node = store.get_many(["urn:counter"])["urn:counter"].node
            store.replace({"@id": "urn:counter", "n": node["n"] + 1})


def test_threads_holding_one_purpose_lose_no_read_change_write(entry_store: EntryStore) -> None:
    entry_store.put({"@id": "urn:counter", "n": 0})
    errors: list[BaseException] = []

    def work() -> None:
        try:
            _bump(entry_store, 25)
        except BaseException as exc:  # collected for the main thread
            errors.append(exc)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert entry_store.get_node("urn:counter") == {"@id": "urn:counter", "n": 100}


BUMPER = """
import sys

store = open_backend()
for _ in range(int(sys.argv[1])):
    with store.transaction():
        store.hold("counter")
        node = store.get_many(["urn:counter"])["urn:counter"].node
        store.replace({"@id": "urn:counter", "n": node["n"] + 1})
store.close()
print("done", flush=True)
"""


def test_processes_holding_one_purpose_lose_no_read_change_write(
    shared_entry_backend: Backend[EntryStore],
) -> None:
    store = shared_entry_backend.open()
    try:
        store.put({"@id": "urn:counter", "n": 0})
        bumpers = [run_child(shared_entry_backend, BUMPER, "40") for _ in range(3)]
        for bumper in bumpers:
            out, _ = bumper.communicate(timeout=600)
            assert bumper.returncode == 0
            assert out.split() == ["done"]
        assert store.get_node("urn:counter") == {"@id": "urn:counter", "n": 120}
    finally:
        store.close()
