"""Benchmark of the blackboard's leases: acquire+release latency alone, grants under contention.

Uncontended: one process acquires and releases a Write lease ``samples`` times on a file
database (a new resource each time, as agents lease nodes), timing each pair. Contended:
``processes`` processes (spawned, each with its own ``CoordinationDB`` on the same file) loop
for ``seconds`` acquiring a Write lease on one shared resource, waiting for it when another
holds it, and releasing it at once; the figure is the total number of grants per second.
"""

from __future__ import annotations

import multiprocessing
import os
import statistics
import time
from multiprocessing.queues import Queue
from multiprocessing.synchronize import Event as EventType
from pathlib import Path

from gliding_core.blackboard.coordination import COORDINATION_FILE, CoordinationDB, check_seconds
from gliding_core.blackboard.leases import LeaseMode, LeaseTable
from gliding_core.errors import InvalidInputError
from gliding_core.jsonld import preview

SHARED_RESOURCE = "urn:gliding-horse:bench:shared"
_WARM_UP = 100
_START_TIMEOUT_S = 120.0


def lease_benchmark(
    directory: str | os.PathLike[str],
    *,
    processes: int = 4,
    seconds: float = 2.0,
    samples: int = 2_000,
) -> dict[str, float]:
    """Measure leases in a database under ``directory``; return the three lease figures.

    Returns:
        ``acquire_release_p50_ms`` and ``acquire_release_p95_ms`` (uncontended, one process)
        and ``contended_grants_per_s`` (``processes`` processes on one resource).
    """
    for name, value in (("processes", processes), ("samples", samples)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise InvalidInputError(f"{name} must be an int >= 1, got {preview(value)}")
    seconds = check_seconds(seconds, "seconds")
    path = Path(directory) / COORDINATION_FILE
    timings = _uncontended(path, samples)
    return {
        "acquire_release_p50_ms": _percentile(timings, 50),
        "acquire_release_p95_ms": _percentile(timings, 95),
        "contended_grants_per_s": _contended(path, processes, seconds) / seconds,
    }


def _uncontended(path: Path, samples: int) -> list[float]:
    with CoordinationDB(path) as db:
        leases = LeaseTable(db)
        for index in range(_WARM_UP):
            leases.try_acquire(f"urn:gliding-horse:bench:warm:{index}", "bench", LeaseMode.WRITE)
            leases.release(f"urn:gliding-horse:bench:warm:{index}", "bench")
        timings = []
        for index in range(samples):
            resource = f"urn:gliding-horse:bench:node:{index}"
            start = time.perf_counter()
            leases.try_acquire(resource, "bench", LeaseMode.WRITE)
            leases.release(resource, "bench")
            timings.append((time.perf_counter() - start) * 1_000)
    return timings


def _contended(path: Path, processes: int, seconds: float) -> int:
    context = multiprocessing.get_context("spawn")
    ready: Queue[int] = context.Queue()
    results: Queue[int] = context.Queue()
    go = context.Event()
    workers = [
        context.Process(
            target=_contend, args=(str(path), f"bench-{n}", seconds, ready, go, results)
        )
        for n in range(processes)
    ]
    for worker in workers:
        worker.start()
    try:
        for _ in workers:
            ready.get(timeout=_START_TIMEOUT_S)
        go.set()
        return sum(results.get(timeout=seconds + _START_TIMEOUT_S) for _ in workers)
    finally:
        for worker in workers:
            worker.join(timeout=_START_TIMEOUT_S)
            if worker.is_alive():
                worker.kill()
                worker.join()


def _contend(
    path: str,
    holder: str,
    seconds: float,
    ready: Queue[int],
    go: EventType,
    results: Queue[int],
) -> None:
    """Grant, release and count on the shared resource until the time is up (a child process)."""
    with CoordinationDB(path) as db:
        leases = LeaseTable(db)
        ready.put(os.getpid())
        go.wait()
        grants, deadline = 0, time.monotonic() + seconds
        while (left := deadline - time.monotonic()) > 0:
            try:
                leases.acquire(SHARED_RESOURCE, holder, LeaseMode.WRITE, timeout_s=left)
            except TimeoutError:
                break
            leases.release(SHARED_RESOURCE, holder)
            grants += 1
    results.put(grants)


def _percentile(values: list[float], percent: int) -> float:
    if len(values) == 1:
        return values[0]
    return statistics.quantiles(values, n=100, method="inclusive")[percent - 1]
