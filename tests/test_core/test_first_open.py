"""Processes (and threads) opening a new memory directory together all succeed.

Four processes, started once, open a brand-new directory with ``Memory.open(dir,
engines=False)`` at the same instant (a barrier releases them together), round after round on
fresh directories: every open succeeds and each process's write is there afterwards. Setting
WAL and creating the schemas of a new directory's databases wait for each other. The same race
between threads, each with connections of its own, is cheaper to run many times: SQLite locks
the file the same way, and it failed about one open in a hundred before (``set_wal``). Each
SQLite file of a directory is raced on its own too (L0, the embedding cache, the coordination
store, the coherence directory and its node source), by threads and by processes.
"""

from __future__ import annotations

import multiprocessing
import threading
from multiprocessing.synchronize import Barrier
from pathlib import Path
from typing import Any

from gliding_core import CachedEmbedder, HashEmbedder, L0Store, Memory, MemoryConfig
from gliding_core.blackboard.coordination.sqlite import CoordinationDB
from gliding_core.coherence.node_sources import SQLiteNodeSource
from gliding_core.coherence.sqlite_directory import SQLiteDirectory

PROCESSES = 4
ROUNDS = 12
CONFIG = MemoryConfig(embedder="hash")  # no model to load: the opens are what is measured


def _open_together(worker: int, root: str, barrier: Barrier, results: Any) -> None:
    """Each round: wait for the others, open the round's new directory, write, report."""
    for round_ in range(ROUNDS):
        barrier.wait()
        try:
            directory = Path(root) / f"round-{round_}"
            with Memory.open(directory, config=CONFIG, engines=False) as memory:
                memory.store.put({"@id": f"urn:open:{round_}:{worker}", "text": "opened"})
            results.put((round_, worker, "ok"))
        except Exception as exc:  # reported to the test, which names it
            results.put((round_, worker, f"{type(exc).__name__}: {exc}"))


def test_concurrent_first_opens_of_a_directory_all_succeed(tmp_path: Path) -> None:
    context = multiprocessing.get_context("spawn")
    barrier = context.Barrier(PROCESSES)
    results = context.Queue()
    workers = [
        context.Process(target=_open_together, args=(n, str(tmp_path), barrier, results))
        for n in range(PROCESSES)
    ]
    for worker in workers:
        worker.start()
    outcomes = [results.get(timeout=300) for _ in range(PROCESSES * ROUNDS)]
    for worker in workers:
        worker.join(timeout=60)

    failed = [outcome for outcome in outcomes if outcome[2] != "ok"]
    assert failed == []
    for round_ in range(ROUNDS):
        with Memory.open(tmp_path / f"round-{round_}", config=CONFIG, engines=False) as memory:
            assert all(f"urn:open:{round_}:{n}" in memory.store for n in range(PROCESSES))


def _race(open_one: Any, paths: list[Path]) -> list[str]:
    """Open each path from four threads released together; return the failures."""
    failures: list[str] = []

    def opener(path: Path, barrier: threading.Barrier) -> None:
        barrier.wait()
        try:
            open_one(path).close()
        except Exception as exc:  # collected for the assertion
            failures.append(f"{type(exc).__name__}: {exc}")

    for path in paths:
        barrier = threading.Barrier(PROCESSES)
        threads = [threading.Thread(target=opener, args=(path, barrier)) for _ in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    return failures


def test_threads_opening_a_new_l0_file_together_all_succeed(tmp_path: Path) -> None:
    paths = [tmp_path / f"l0-{n}.sqlite3" for n in range(300)]
    assert _race(L0Store, paths) == []
    with L0Store(paths[0]) as store:
        assert store.integrity_check() == "ok"


def test_threads_opening_a_new_embedding_cache_together_all_succeed(tmp_path: Path) -> None:
    paths = [tmp_path / f"cache-{n}.sqlite3" for n in range(300)]
    assert _race(lambda path: CachedEmbedder(HashEmbedder(), path), paths) == []


def test_threads_opening_a_new_coordination_file_together_all_succeed(tmp_path: Path) -> None:
    paths = [tmp_path / f"coordination-{n}.sqlite3" for n in range(300)]
    assert _race(CoordinationDB, paths) == []


def test_threads_opening_a_new_coherence_directory_together_all_succeed(tmp_path: Path) -> None:
    paths = [tmp_path / f"directory-{n}.sqlite3" for n in range(300)]
    assert _race(SQLiteDirectory, paths) == []


def test_threads_opening_a_new_node_source_together_all_succeed(tmp_path: Path) -> None:
    paths = [tmp_path / f"nodes-{n}.sqlite3" for n in range(300)]
    assert _race(SQLiteNodeSource, paths) == []


PIECES: dict[str, Any] = {
    "coordination": CoordinationDB,
    "directory": SQLiteDirectory,
    "node-source": SQLiteNodeSource,
}
PIECE_FILES = 60  # new files per piece that the processes open together, one at a time


def _open_pieces_together(root: str, barrier: Barrier, results: Any) -> None:
    """For each piece and each of its new files: wait for the others, open it, close it."""
    failures: list[str] = []
    for name, open_one in PIECES.items():
        for n in range(PIECE_FILES):
            barrier.wait()
            try:
                open_one(Path(root) / f"{name}-{n}.sqlite3").close()
            except Exception as exc:  # reported to the test, which names it
                failures.append(f"{name} {n}: {type(exc).__name__}: {exc}")
    results.put(failures)


def test_processes_opening_each_new_file_of_a_directory_together_all_succeed(
    tmp_path: Path,
) -> None:
    context = multiprocessing.get_context("spawn")
    barrier = context.Barrier(PROCESSES, timeout=120)  # no worker waits for a dead one for ever
    results = context.Queue()
    workers = [
        context.Process(target=_open_pieces_together, args=(str(tmp_path), barrier, results))
        for _ in range(PROCESSES)
    ]
    for worker in workers:
        worker.start()
    failures = [failure for _ in workers for failure in results.get(timeout=300)]
    for worker in workers:
        worker.join(timeout=60)
    assert failures == []
