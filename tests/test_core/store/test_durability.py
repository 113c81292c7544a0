"""L0 durability and concurrency: SIGKILL mid-stream, many threads, readers beside a writer,
many processes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest

from gliding_core import L0Store, Record

WRITER = textwrap.dedent(
    """
    import sys
    from gliding_core import L0Store

    store = L0Store(sys.argv[1])
    prefix = sys.argv[2]
    count = int(sys.argv[3])
    for i in range(count):
        store.put(
            {"@id": f"urn:{prefix}:{i}", "text": f"write {i} of {prefix}"},
            tags=[prefix],
        )
        store.put({"@id": "urn:shared", f"by_{prefix}": i}, tags=[f"{prefix}-{i % 5}"])
        print(i, flush=True)  # acknowledged: put() has returned
    """
)


def _writer(path: Path, prefix: str, count: int) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", WRITER, str(path), prefix, str(count)],
        stdout=subprocess.PIPE,
        text=True,
    )


def test_every_acknowledged_write_survives_sigkill(tmp_path: Path) -> None:
    path = tmp_path / "l0.sqlite3"
    writer = _writer(path, "killed", 1_000_000)
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
    with L0Store(path) as store:
        assert store.integrity_check() == "ok"
        for i in range(acknowledged + 1):
            node = store.get_node(f"urn:killed:{i}")
            assert node == {"@id": f"urn:killed:{i}", "text": f"write {i} of killed"}
        shared = store.get_node("urn:shared")
        assert shared is not None
        assert shared["by_killed"] >= acknowledged
        # Nothing half-written: each entry's indexes agree with it.
        assert len(store.by_tags(["killed"])) == store.count() - 1


def test_many_threads_write_one_store(file_store: L0Store) -> None:
    errors: list[BaseException] = []

    def work(worker: int) -> None:
        try:
            for i in range(150):
                file_store.put({"@id": f"urn:t{worker}:{i}", "text": "thread"}, tags=["thread"])
                file_store.put({"@id": "urn:shared"}, tags=[f"w{worker}-{i}"])
                file_store.get(f"urn:t{worker}:{i}")
        except BaseException as exc:  # collected for the main thread
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(w,)) for w in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert file_store.count() == 4 * 150 + 1
    assert len(file_store.by_tags(["thread"])) == 4 * 150
    shared = file_store.get("urn:shared")
    assert shared is not None
    assert len(shared.tags) == 4 * 150  # no merge lost a tag
    assert shared.generation == 4 * 150


def test_readers_beside_a_writer_never_see_half_a_batch(file_store: L0Store) -> None:
    """Each reader works on a snapshot of a commit: a batch is all there or not at all."""
    batches, size = 30, 40
    seen: list[int] = []
    errors: list[BaseException] = []
    done = threading.Event()

    def read() -> None:
        try:
            while not done.is_set():
                count = file_store.count()
                tagged = len(file_store.by_tags(["batch"]))
                hits = len(file_store.search_ids("batched", limit=batches * size))
                seen.extend((count, tagged, hits))
        except BaseException as exc:  # collected for the main thread
            errors.append(exc)

    readers = [threading.Thread(target=read) for _ in range(3)]
    for reader in readers:
        reader.start()
    try:
        for b in range(batches):
            file_store.put_many(
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
    assert file_store.count() == batches * size


def test_many_processes_write_one_store(tmp_path: Path) -> None:
    path = tmp_path / "l0.sqlite3"
    writers = [_writer(path, f"p{k}", 120) for k in range(3)]
    for writer in writers:
        out, _ = writer.communicate(timeout=300)
        assert writer.returncode == 0
        assert out.split()[-1] == "119"
    with L0Store(path) as store:
        assert store.integrity_check() == "ok"
        for k in range(3):
            entries = store.by_tags([f"p{k}"])
            assert sorted(e.iri for e in entries) == sorted(f"urn:p{k}:{i}" for i in range(120))
        shared = store.get("urn:shared")
        assert shared is not None
        assert set(shared.tags) == {f"p{k}-{i}" for k in range(3) for i in range(5)}
        assert {shared.node[f"by_p{k}"] for k in range(3)} == {119}
        assert store.count() == 3 * 120 + 1


@pytest.mark.stress
def test_stress_four_processes_with_merges(tmp_path: Path) -> None:
    path = tmp_path / "l0.sqlite3"
    writers = [_writer(path, f"s{k}", 500) for k in range(4)]
    for writer in writers:
        writer.communicate(timeout=600)
        assert writer.returncode == 0
    with L0Store(path) as store:
        assert store.count() == 4 * 500 + 1
        assert store.integrity_check() == "ok"
