"""Benchmark of the blackboard's leases: acquire+release latency alone, grants under contention.

Uncontended: one process acquires and releases a Write lease ``samples`` times on a file
database (a new resource each time, as agents lease nodes), timing each pair. Contended:
``processes`` processes (each an interpreter with its own ``CoordinationDB`` on the file) loop
for ``seconds`` acquiring a Write lease on one shared resource, waiting for it when another
holds it, and releasing it at once; the figure is the total number of grants per second.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from gliding_core.blackboard.coordination.checks import check_seconds
from gliding_core.blackboard.coordination.leases import LeaseMode, LeaseTable
from gliding_core.blackboard.coordination.sqlite import COORDINATION_FILE, CoordinationDB
from gliding_core.errors import InvalidInputError, LeaseTimeoutError, StorageError
from gliding_core.jsonld import preview

SHARED_RESOURCE = "urn:gliding-horse:bench:shared"
_WARM_UP = 100


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
        "contended_grants_per_s": sum(contended_grants(path, processes, seconds)) / seconds,
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


def contended_grants(path: Path, processes: int, seconds: float) -> list[int]:
    """Run ``processes`` child processes contending for one lease; return each one's grants.

    The children are plain interpreters (``python -c``), not ``multiprocessing`` workers, so
    the benchmark runs from any caller (a script on stdin, a notebook) whatever its main module.
    """
    command = [sys.executable, "-c", _CHILD, os.fspath(path), "", str(seconds)]
    env = {**os.environ, "PYTHONPATH": _import_path()}
    children = []
    try:
        for number in range(processes):
            command[4] = f"bench-{number}"
            children.append(
                subprocess.Popen(
                    command,
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE,
                    text=True,
                    env=env,
                )
            )
        for child in children:
            _expect(child, "ready")
        for child in children:
            assert child.stdin is not None
            child.stdin.write("go\n")
            child.stdin.flush()
        return [int(_expect(child, "")) for child in children]
    finally:
        for child in children:
            child.kill()
            child.communicate()


def _expect(child: subprocess.Popen[str], wanted: str) -> str:
    """Read the child's next line (``wanted`` when given), or fail with what it printed."""
    assert child.stdout is not None
    line = child.stdout.readline().strip()
    if not line or (wanted and line != wanted):
        child.kill()
        _, errors = child.communicate()
        raise StorageError(
            f"a lease benchmark process failed (exit {child.returncode}): {errors[-2_000:]}"
        )
    return line


def _import_path() -> str:
    """Return a PYTHONPATH under which the children import this very ``gliding_core``."""
    here = str(Path(__file__).resolve().parents[2])  # the folder holding gliding_core
    inherited = os.environ.get("PYTHONPATH")
    return here if not inherited else os.pathsep.join((here, inherited))


_CHILD = """
import sys
from gliding_core.cli.benchmarks.leases import contend
contend(sys.argv[1], sys.argv[2], float(sys.argv[3]))
"""


def contend(path: str, holder: str, seconds: float) -> None:
    """Grant, release and count on the shared resource until the time is up (in a child).

    Prints ``ready`` once the database is open, waits for a line on stdin, then runs and
    prints its number of grants.
    """
    with CoordinationDB(path) as db:
        leases = LeaseTable(db)
        print("ready", flush=True)
        sys.stdin.readline()
        grants, deadline = 0, time.monotonic() + seconds
        while (left := deadline - time.monotonic()) > 0:
            try:
                leases.acquire(SHARED_RESOURCE, holder, LeaseMode.WRITE, timeout_s=left)
            except LeaseTimeoutError:
                break
            leases.release(SHARED_RESOURCE, holder)
            grants += 1
    print(grants, flush=True)


def _percentile(values: list[float], percent: int) -> float:
    if len(values) == 1:
        return values[0]
    return statistics.quantiles(values, n=100, method="inclusive")[percent - 1]
