"""CLI: the blackboard on PostgreSQL with its agents split over OS processes.

For each process count (1, 2 and 4 by default) ``agents`` agents (4) are dealt over that many
worker processes, each a plain interpreter (``python -c``) opening one memory in PostgreSQL
(its own schema per count) with its blackboard at one ``oxigraph serve``, as the workers of a
fleet do. The parent sends every worker the same command at once and reads their answers; a
rate is the agents' total over the slowest worker's time. The phases, in order:

- ``bare``: each agent thread sends ``nodes / agents`` bare SPARQL updates (one ``INSERT DATA``
  of one node's RDF a call) to the same server: the floor under a handle's write there.
- ``writes``: as many fresh nodes, one a call, through each agent's handle (permissions,
  leases, the directory's transaction, the store's update, the pushes).
- ``reads``: each agent reads its nodes again ``rounds`` times (cached reads: a copy checked
  against the directory's token).
- ``leases``: each agent takes and releases a Write lease on each of ``lease_samples`` of its
  nodes through its handle, timing each pair (p50, p95 over every agent).
- ``invalidation`` (two processes or more): the first agent writes ``shared`` nodes every other
  agent holds a copy of, one every ``_PAUSE_S``; each other worker notes when the push dropped
  its copies (``COPIES_INVALIDATED`` with ``"pushed": True`` on its bus), and the latency is
  that moment less the moment the write returned in the writer's process (their clocks are the
  machine's monotonic clock; a push that arrived before the write returned counts 0, and
  ``invalidations_missed`` counts copies no push reached).
- ``stale``: for ``stale_seconds`` the first agent writes the shared nodes round after round
  while every other agent reads them; a read is stale when it returned a generation older than
  one whose write had returned before the read began (the writer's log against the readers').
"""

from __future__ import annotations

import bisect
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from gliding_core.errors import ConfigError, StorageError

if TYPE_CHECKING:
    from gliding_core.memory import Memory

PROCESSES = (1, 2, 4)
AGENTS = 4
TASK = "urn:bench:fleet"
_PAUSE_S = 0.01
_RAW_GRAPH = "urn:bench:fleet:raw"

Reply = dict[str, Any]


def now_ns() -> int:
    """The machine's monotonic clock (one clock for every process of the machine, on Linux)."""
    if hasattr(time, "CLOCK_MONOTONIC"):
        return time.clock_gettime_ns(time.CLOCK_MONOTONIC)
    return time.time_ns()


def percentile(values: Sequence[float], share: float) -> float:
    """Return the value below which ``share`` of ``values`` lie (nearest rank)."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))]


# -- the parent ----------------------------------------------------------------------------------


def run(
    url: str,
    endpoint: str,
    *,
    processes: Sequence[int] = PROCESSES,
    agents: int = AGENTS,
    nodes: int = 2_000,
    rounds: int = 5,
    lease_samples: int = 200,
    shared: int = 100,
    stale_seconds: float = 2.0,
    clear: bool = False,
) -> dict[str, Any]:
    """Run the benchmark on the database at ``url`` and the SPARQL server at ``endpoint``.

    Args:
        clear: empty the SPARQL server before each process count (only a server the caller
            started for the run: it holds nothing else).

    Raises:
        ConfigError: a process count that is not an int from 1 to ``agents``.
        StorageError: a worker failed (with the end of what it wrote on standard error).
    """
    counts = check_processes(processes, agents)
    figures: dict[str, Any] = {"agents": agents, "nodes": nodes, "processes": {}}
    for count in counts:
        if clear:
            _clear(endpoint)
        with _workers(url, endpoint, count, agents) as workers:
            figures["processes"][str(count)] = _figures(
                workers,
                agents=agents,
                nodes=nodes,
                rounds=rounds,
                lease_samples=lease_samples,
                shared=shared,
                stale_seconds=stale_seconds,
            )
    return figures


def check_processes(processes: Sequence[int], agents: int) -> list[int]:
    """Return the process counts if each is an int from 1 to ``agents``, else ``ConfigError``."""
    counts = list(processes)
    for count in counts:
        if isinstance(count, bool) or not isinstance(count, int) or not 1 <= count <= agents:
            raise ConfigError(f"process counts must be ints from 1 to {agents}, got {count!r}")
    return counts


def _clear(endpoint: str) -> None:
    from gliding_core.blackboard.graph import SparqlEndpoint

    with contextlib.closing(SparqlEndpoint(endpoint)) as server:
        server.update("CLEAR ALL")


class _Worker:
    """One worker process, its agents named ``agent-N``; commands as JSON lines."""

    def __init__(self, process: subprocess.Popen[str], errors: IO[str]) -> None:
        self.process, self.errors = process, errors

    def send(self, command: dict[str, Any]) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(json.dumps(command) + "\n")
        self.process.stdin.flush()

    def reply(self) -> Reply:
        assert self.process.stdout is not None
        line = self.process.stdout.readline()
        answer: Reply | None = json.loads(line) if line.strip() else None
        if answer is None or "error" in answer:
            self.errors.seek(0)
            raise StorageError(
                f"a blackboard benchmark worker failed ({answer or 'it exited'}):"
                f" {self.errors.read()[-2_000:]}"
            )
        return answer


def _all(workers: Sequence[_Worker], commands: Sequence[dict[str, Any]]) -> list[Reply]:
    """Send each worker its command at once, then read every answer."""
    for worker, command in zip(workers, commands, strict=True):
        worker.send(command)
    return [worker.reply() for worker in workers]


@contextlib.contextmanager
def _workers(url: str, endpoint: str, count: int, agents: int) -> Iterator[list[_Worker]]:
    """Start ``count`` workers on a fresh schema, the agents dealt round-robin; drop it after."""
    schema = f"bench_{uuid.uuid4().hex[:12]}"
    env = {**os.environ, "PYTHONPATH": _import_path(), "GLIDING_DATABASE_URL": url}
    code = "from gliding_core.cli.benchmarks.blackboard_processes import main; main()"
    workers: list[_Worker] = []
    with contextlib.ExitStack() as stack:
        try:
            for number in range(count):
                names = [f"agent-{a}" for a in range(number, agents, count)]
                errors = stack.enter_context(tempfile.TemporaryFile("w+"))
                process = subprocess.Popen(
                    [sys.executable, "-c", code, schema, endpoint, ",".join(names)],
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,
                    stderr=errors,
                    text=True,
                    env=env,
                )
                workers.append(_Worker(process, errors))
            for worker in workers:
                worker.reply()  # ready
            yield workers
        finally:
            for worker in workers:
                if worker.process.stdin is not None:
                    with contextlib.suppress(OSError):
                        worker.process.stdin.close()
            for worker in workers:
                try:
                    worker.process.wait(timeout=120)
                except subprocess.TimeoutExpired:
                    worker.process.kill()
                    worker.process.wait()
                if worker.process.stdout is not None:
                    worker.process.stdout.close()
            _drop_schema(url, schema)


def _drop_schema(url: str, schema: str) -> None:
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


def _import_path() -> str:
    """A PYTHONPATH under which the workers import this very ``gliding_core``."""
    here = str(Path(__file__).resolve().parents[2])
    inherited = os.environ.get("PYTHONPATH")
    return here if not inherited else os.pathsep.join((here, inherited))


def _figures(
    workers: list[_Worker],
    *,
    agents: int,
    nodes: int,
    rounds: int,
    lease_samples: int,
    shared: int,
    stale_seconds: float,
) -> dict[str, Any]:
    per_agent = max(1, nodes // agents)
    total = per_agent * agents

    def rate(op: str, done: int, **args: Any) -> int:
        """``done`` operations over the slowest worker's seconds for them."""
        replies = _all(workers, [{"op": op, **args}] * len(workers))
        return round(done / max(float(r["seconds"]) for r in replies))

    bare = rate("bare", total, count=per_agent)
    writes = rate("write", total, count=per_agent)
    reads = rate("read", total * rounds, rounds=rounds)
    timings = [t for r in _all(workers, [{"op": "leases", "count": lease_samples}] * len(workers))
               for t in r["timings"]]  # fmt: skip
    run_tag = uuid.uuid4().hex[:12]  # a SPARQL server given by the caller may hold earlier runs
    iris = [f"urn:bench:fleet:{run_tag}:shared:{i}" for i in range(shared)]
    _all(workers[:1], [{"op": "share", "iris": iris}])
    _all(workers, [{"op": "hold", "iris": iris}] * len(workers))
    figures: dict[str, Any] = {
        "writes_per_s": writes,
        "bare_updates_per_s": bare,
        "writes_vs_bare": round(writes / bare, 3) if bare else 0.0,
        "cached_reads_per_s": reads,
        "lease_acquire_release_p50_ms": round(statistics.median(timings), 3),
        "lease_acquire_release_p95_ms": round(percentile(timings, 0.95), 3),
    }
    if len(workers) > 1:
        figures.update(_invalidation(workers, iris))
    figures.update(_stale(workers, iris, stale_seconds))
    return figures


def _invalidation(workers: list[_Worker], iris: list[str]) -> dict[str, Any]:
    """The pushes' latency: from each write's return to each other worker's copies dropped."""
    _all(workers, [{"op": "watch"}] * len(workers))
    [written] = _all(workers[:1], [{"op": "write_shared", "iris": iris, "pause_s": _PAUSE_S}])
    returned = {iri: at for iri, _, at in written["log"]}
    latencies: list[float] = []
    missed = 0
    for answer in _all(workers[1:], [{"op": "pushed", "iris": iris}] * (len(workers) - 1)):
        for iri in iris:
            at = answer["at"].get(iri)
            if at is None:
                missed += 1
            else:
                latencies.append(max(0, at - returned[iri]) / 1e6)
    return {
        "invalidation_p50_ms": round(statistics.median(latencies), 3) if latencies else None,
        "invalidation_p95_ms": round(percentile(latencies, 0.95), 3) if latencies else None,
        "invalidations_missed": missed,
    }


def _stale(workers: list[_Worker], iris: list[str], seconds: float) -> dict[str, Any]:
    """Reads during a writer's rounds, each checked against the writes returned before it."""
    commands = [{"op": "stale", "iris": iris, "seconds": seconds, "writer": n == 0}
                for n in range(len(workers))]  # fmt: skip
    replies = _all(workers, commands)
    committed: dict[str, list[tuple[int, int]]] = {iri: [] for iri in iris}
    for iri, generation, at in replies[0]["log"]:
        committed[iri].append((at, generation))
    for log in committed.values():
        log.sort()
    reads = stale = 0
    for reply in replies:
        for iri, generation, began in reply["reads"]:
            reads += 1
            log = committed[iri]
            before = bisect.bisect_left(log, (began, -1))  # writes returned before the read
            newest = max((g for _, g in log[:before]), default=0)
            stale += generation < newest
    return {"stale_reads": stale, "checked_reads": reads, "checked_writes": len(replies[0]["log"])}


# -- a worker ------------------------------------------------------------------------------------


def main() -> None:
    """A worker: ``SCHEMA ENDPOINT AGENTS`` (comma-separated), the URL in the environment."""
    from gliding_core import BlackboardConfig, Memory, MemoryConfig

    schema, endpoint, names = sys.argv[1], sys.argv[2], sys.argv[3].split(",")
    config = MemoryConfig(
        embedder="hash",
        database_schema=schema,
        blackboard=BlackboardConfig(endpoint=endpoint, flush_interval_s=0.0),
    )
    with Memory.open(os.environ["GLIDING_DATABASE_URL"], config=config) as memory:
        worker = _Agents(memory, names, endpoint, schema)
        _answer({"ready": True})
        for line in sys.stdin:
            command = json.loads(line)
            try:
                _answer(worker.run(command))
            except Exception as exc:
                _answer({"error": f"{type(exc).__name__}: {exc}"})
                raise


def _answer(reply: Reply) -> None:
    sys.stdout.write(json.dumps(reply) + "\n")
    sys.stdout.flush()


def _threads(count: int, work: Callable[[int], None]) -> float:
    """Run ``work(index)`` on ``count`` threads started together; return the seconds taken."""
    start = threading.Barrier(count + 1)
    failures: list[BaseException] = []

    def run(index: int) -> None:
        start.wait()
        try:
            work(index)
        except BaseException as exc:
            failures.append(exc)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(count)]
    for thread in threads:
        thread.start()
    start.wait()
    began = time.perf_counter()
    for thread in threads:
        thread.join()
    if failures:
        raise failures[0]
    return time.perf_counter() - began


class _Agents:
    """The agents of one worker process and what each phase asks of them."""

    def __init__(self, memory: Memory, names: list[str], endpoint: str, tag: str) -> None:
        from gliding_core.blackboard.graph import SparqlEndpoint
        from gliding_core.bus import EventType

        self.memory, self.names = memory, names
        self.prefix = f"urn:bench:fleet:{tag}"  # one run's nodes (the schema is the run's)
        self.handles = [memory.agent(name, role="do", task=TASK) for name in names]
        self.raw = SparqlEndpoint(endpoint)
        self.mine: list[list[str]] = [[] for _ in names]
        self.pushed: dict[str, int] = {}
        self.watching = False
        memory.bus.subscribe(self._on_invalidated, [EventType.COPIES_INVALIDATED])

    def _on_invalidated(self, event: Any) -> None:
        if self.watching and event.payload.get("pushed"):
            self.pushed.setdefault(event.payload["iri"], now_ns())

    def run(self, command: dict[str, Any]) -> Reply:
        return dict(getattr(self, f"_{command.pop('op')}")(**command))

    def _bare(self, count: int) -> Reply:
        from gliding_core.blackboard.rdf import rdf_of

        def work(a: int) -> None:
            for i in range(count):
                node = {"@id": f"{self.prefix}:raw:{self.names[a]}:{i}", "summary": f"s{i}"}
                self.raw.extend(rdf_of(node, _RAW_GRAPH))

        return {"seconds": _threads(len(self.handles), work)}

    def _write(self, count: int) -> Reply:
        def work(a: int) -> None:
            handle = self.handles[a]
            for i in range(count):
                iri = f"{self.prefix}:{self.names[a]}:{i}"
                handle.write([{"@id": iri, "@type": "Step", "summary": f"s{i}"}], area="execution")
                self.mine[a].append(iri)

        return {"seconds": _threads(len(self.handles), work)}

    def _read(self, rounds: int) -> Reply:
        def work(a: int) -> None:
            handle = self.handles[a]
            for _ in range(rounds):
                for iri in self.mine[a]:
                    handle.read(iri)

        return {"seconds": _threads(len(self.handles), work)}

    def _leases(self, count: int) -> Reply:
        timings: list[list[float]] = [[] for _ in self.handles]

        def work(a: int) -> None:
            handle = self.handles[a]
            for iri in self.mine[a][:count]:
                began = time.perf_counter()
                handle.acquire(iri, mode="write")
                handle.release(iri)
                timings[a].append((time.perf_counter() - began) * 1_000)

        _threads(len(self.handles), work)
        return {"timings": [t for agent in timings for t in agent]}

    def _share(self, iris: list[str]) -> Reply:
        nodes = [{"@id": iri, "@type": "Step", "summary": "shared"} for iri in iris]
        self.handles[0].write(nodes, area="execution")
        return {}

    def _hold(self, iris: list[str]) -> Reply:
        for handle in self.handles:
            for iri in iris:
                handle.read(iri)
        return {}

    def _watch(self) -> Reply:
        self.pushed, self.watching = {}, True
        return {}

    def _write_shared(self, iris: list[str], pause_s: float) -> Reply:
        handle, log = self.handles[0], []
        for n, iri in enumerate(iris):
            [node] = handle.write([{"@id": iri, "summary": f"w{n}"}], area="execution")
            log.append((iri, node.generation, now_ns()))
            time.sleep(pause_s)
        return {"log": log}

    def _pushed(self, iris: list[str]) -> Reply:
        self.watching = False
        return {"at": {iri: self.pushed[iri] for iri in iris if iri in self.pushed}}

    def _stale(self, iris: list[str], seconds: float, writer: bool) -> Reply:
        writes: list[tuple[str, int, int]] = []
        reads: list[list[tuple[str, int, int]]] = [[] for _ in self.handles]
        deadline = time.monotonic() + seconds

        def work(a: int) -> None:
            handle = self.handles[a]
            n = 0
            while time.monotonic() < deadline:
                for iri in iris:
                    if writer and a == 0:
                        n += 1
                        [node] = handle.write([{"@id": iri, "summary": f"r{n}"}], area="execution")
                        writes.append((iri, node.generation, now_ns()))
                    else:
                        began = now_ns()
                        read = handle.read(iri)
                        reads[a].append((iri, 0 if read is None else read.generation, began))

        _threads(len(self.handles), work)
        return {"log": writes, "reads": [r for agent in reads for r in agent]}
