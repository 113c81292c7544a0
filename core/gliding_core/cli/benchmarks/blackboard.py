"""Benchmark of the L2 blackboard: node writes and reads, CONSTRUCT latency, leases, flush.

Three backends: embedded pyoxigraph in memory, on disk, and ``oxigraph serve`` on a loopback
port (started here, in a temporary directory). For each, 1, 4 and 16 agent threads write nodes
one per call through their agent handles (permissions checked), then as many again ``BATCH``
(10) a call (``batched_writes_per_s``, nodes a second; fresh IRIs, the same nodes' shape and
handles), read the first ones back from the cache and, after emptying it, from the store; the
baseline, in the same run, writes the same nodes' RDF straight into the backend (``extend``,
one node a call: no validation, bookkeeping, cache or events), the floor under the blackboard
on that backend; then 10,000 linked nodes are loaded and 1-hop and 2-hop CONSTRUCTs from
random nodes are timed (p50/p95). Leases and the flush to L0 are timed once. Synthetic,
deterministic data (seeded).

The agent figures are taken through the board's coordinator, with the directory a memory would give
it: a dict in this process for the embedded graphs, in memory and on disk, whose one process owns
the files; a SQLite file shared by the processes at the server. Beside each agent
count's single-node write rate, three diagnostics of the same phase (they change nothing it
measures): ``write_cpu_us``, the process's CPU time a write (user and system, all threads),
``write_switches``, its voluntary context switches a write (POSIX), ``write_writer_switches``,
those of the writing threads alone (Linux's per-thread count; the store's own threads and the main
thread left out: 0 where there is none), and ``write_group``, the mean number of writes the board's
commit queue committed together. ``coherence`` compares cached reads through one agent's handle
(coherence on: its copy checked with the coordinator) with a reader of this module that reads the
board's cache and checks the agent's right as a handle does, without a coordinator (off), on two
boards holding the same nodes, timed in alternation, best of ``_ROUNDS`` each, so the machine's
load weighs on both alike: ``ratio`` = on / off.

The agent phases and the baseline are run ``repeats`` times (3), in rounds (the baseline, then
1, 4 and 16 agents, each on a fresh store), so that a slow spell of the shared machine weighs
on every count alike; each figure is the median of its rounds, taken figure by figure (the CPU
time a write and the rate may come from different rounds), and ``writes_per_s_runs`` and
``baseline_writes_per_s_runs`` list every round's rate (measured: one 2,000-write phase on disk
gave 3,700 to 5,700 writes/s on the same tree within minutes).

Each agent count starts from a collected heap (``gc.collect()`` before its board opens): the
boards of the phases before it leave reference cycles (about 20,000 objects after the memory
backend), and the full collection they trigger otherwise lands in whichever phase comes next
(measured: 0.2 s inside the disk backend's one-agent phase, a quarter of its writes' time).
"""

from __future__ import annotations

import contextlib
import gc
import random
import resource
import statistics
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pyoxigraph as ox

from gliding_core.blackboard.board import AgentHandle, Blackboard
from gliding_core.blackboard.graph import EmbeddedGraph, GraphBackend, SparqlEndpoint
from gliding_core.blackboard.permissions import Operation
from gliding_core.blackboard.rdf import rdf_of
from gliding_core.blackboard.records import BoardNode
from gliding_core.blackboard.vocabulary import PROLOGUE, area_in_task
from gliding_core.cli.benchmarks.leases import lease_benchmark
from gliding_core.coherence.sqlite_directory import SQLiteDirectory
from gliding_core.config import BlackboardConfig
from gliding_core.errors import ConfigError, PermissionDeniedError, StorageError
from gliding_core.store.sqlite import L0Store
from gliding_core.testing import oxigraph_server

TASK = "urn:bench:task"
_RAW_GRAPH = "urn:bench:raw"
AGENTS = (1, 4, 16)
BATCH = 10
BACKENDS = ("memory", "disk", "server")
_CONFIG = BlackboardConfig(flush_interval_s=0.0)
_ROUNDS = 25
ONE_HOP = PROLOGUE + (
    "CONSTRUCT { ?start gh:link ?next . ?next gh:summary ?summary }"
    " WHERE { ?start gh:link ?next . ?next gh:summary ?summary }"
)
TWO_HOP = PROLOGUE + (
    "CONSTRUCT { ?start gh:link ?a . ?a gh:link ?b . ?b gh:summary ?summary }"
    " WHERE { ?start gh:link ?a . ?a gh:link ?b . ?b gh:summary ?summary }"
)


def _node(i: int, total: int) -> dict[str, Any]:
    return {
        "@id": f"urn:bench:n{i}",
        "@type": "Step",
        "summary": f"step {i} of the benchmark task",
        "status": "done" if i % 3 else "running",
        "link": [
            {"@id": f"urn:bench:n{(i * 7 + 1) % total}"},
            {"@id": f"urn:bench:n{(i * 13 + 5) % total}"},
        ],
    }


def _in_threads(count: int, work: Callable[[int], None]) -> float:
    """Run ``work(thread_index)`` on ``count`` threads at once; return the seconds taken."""
    start = threading.Barrier(count + 1)

    def run(index: int) -> None:
        start.wait()
        work(index)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(count)]
    for thread in threads:
        thread.start()
    began = time.perf_counter()
    start.wait()
    for thread in threads:
        thread.join()
    return time.perf_counter() - began


def _agent_figures(board: Blackboard, agents: int, nodes: int) -> dict[str, float]:
    per_agent = max(1, nodes // agents)
    handles = [board.agent(f"agent-{a}", role="do", task=TASK) for a in range(agents)]
    iris = [[f"urn:bench:a{a}:{i}" for i in range(per_agent)] for a in range(agents)]

    writer_switches: list[int] = []

    def write(a: int) -> None:
        began = _thread_switches()
        for i, iri in enumerate(iris[a]):
            handles[a].write([{"@id": iri, "@type": "Step", "summary": f"s{i}"}], area="execution")
        writer_switches.append(_thread_switches() - began)  # (list.append: atomic)

    def write_batched(a: int) -> None:
        for start in range(0, per_agent, BATCH):
            batch = [
                {"@id": f"{iri}:b", "@type": "Step", "summary": f"s{start + i}"}
                for i, iri in enumerate(iris[a][start : start + BATCH])
            ]
            handles[a].write(batch, area="execution")

    def read(a: int) -> None:
        for iri in iris[a]:
            handles[a].read(iri)

    def reread(a: int) -> None:
        for _ in range(rounds):
            read(a)

    rounds = 10
    total = per_agent * agents
    before = _write_counters(board)
    written = _in_threads(agents, write)
    diagnostics = _write_diagnostics(before, _write_counters(board), total)
    diagnostics["write_writer_switches"] = round(sum(writer_switches) / total, 2)
    batched = _in_threads(agents, write_batched)
    hits = _in_threads(agents, reread)
    board.nodes.forget_cache()
    misses = _in_threads(agents, read)
    return {
        "writes_per_s": round(total / written),
        "batched_writes_per_s": round(total / batched),
        "reads_per_s": round(total * rounds / hits),
        "reads_miss_per_s": round(total / misses),
        **diagnostics,
    }


def _thread_switches() -> int:
    """The calling thread's voluntary context switches so far (0 without a per-thread count)."""
    who = getattr(resource, "RUSAGE_THREAD", None)  # Linux
    return 0 if who is None else resource.getrusage(who).ru_nvcsw


def _write_counters(board: Blackboard) -> tuple[float, int, int, int]:
    """CPU seconds, voluntary switches, and the commit queue's groups and jobs, so far."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    queue = board.writes.queue  # a diagnostic
    groups, jobs = queue.groups, queue.jobs
    return usage.ru_utime + usage.ru_stime, usage.ru_nvcsw, groups, jobs


def _write_diagnostics(
    before: tuple[float, int, int, int], after: tuple[float, int, int, int], writes: int
) -> dict[str, float]:
    """What a write cost between two ``_write_counters`` readings (see the module docstring)."""
    cpu, switches, groups, jobs = (b - a for a, b in zip(before, after, strict=True))
    return {
        "write_cpu_us": round(cpu / writes * 1e6, 1),
        "write_switches": round(switches / writes, 2),
        "write_group": round(jobs / groups, 2) if groups else 0.0,
    }


def _baseline_writes_per_s(backend: GraphBackend, nodes: int) -> float:
    """Raw writes of the same nodes' RDF (no validation, bookkeeping or cache): the floor."""
    quads = [
        rdf_of({"@id": f"urn:bench:raw{i}", "@type": "Step", "summary": f"s{i}"}, _RAW_GRAPH)
        for i in range(nodes)
    ]
    began = time.perf_counter()
    for node in quads:
        backend.extend(node)
    return round(nodes / (time.perf_counter() - began))


def _percentile(values: Sequence[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))]


def _construct_figures(board: Blackboard, nodes: int, queries: int, seed: int) -> dict[str, float]:
    for start in range(0, nodes, 1_000):
        batch = [_node(i, nodes) for i in range(start, min(nodes, start + 1_000))]
        board.write(batch, task=TASK, area="execution")
    doer = board.agent("reader", role="do", task=TASK)
    rng = random.Random(seed)
    figures: dict[str, float] = {}
    for name, text in (("1hop", ONE_HOP), ("2hop", TWO_HOP)):
        latencies = []
        for _ in range(queries):
            origin = ox.NamedNode(f"urn:bench:n{rng.randrange(nodes)}")
            began = time.perf_counter()
            # The area the nodes are in: at a server each graph of the dataset costs about
            # 2 ms (a union default graph), so a frame names the areas it reads.
            result = doer.query(text, areas=["execution"], bindings={"start": origin})
            latencies.append((time.perf_counter() - began) * 1000)
            if not result.triples:
                raise StorageError(f"the {name} CONSTRUCT found nothing from {origin}")
        figures[f"construct_{name}_p50_ms"] = round(statistics.median(latencies), 3)
        figures[f"construct_{name}_p95_ms"] = round(_percentile(latencies, 0.95), 3)
    return figures


def _backend(kind: str, directory: Path, server: str | None) -> GraphBackend:
    if kind == "memory":
        return EmbeddedGraph()
    if kind == "disk":
        return EmbeddedGraph(tempfile.mkdtemp(dir=directory))
    if server is None:
        raise ConfigError("no SPARQL server for the server backend")
    endpoint = SparqlEndpoint(server)
    endpoint.update("CLEAR ALL")
    return endpoint


def _board(kind: str, directory: Path, server: str | None) -> Blackboard:
    """A fresh blackboard on ``kind``, with the coherence directory a memory would give it."""
    shared = None
    if kind == "server":
        shared = SQLiteDirectory(Path(tempfile.mkdtemp(dir=directory)) / "coherence.sqlite3")
    backend = _backend(kind, directory, server)
    return Blackboard(backend, config=_CONFIG, directory=shared)


def _backend_figures(
    kind: str,
    directory: Path,
    server: str | None,
    *,
    nodes: int,
    construct_nodes: int,
    queries: int,
    seed: int,
    repeats: int,
) -> dict[str, Any]:
    runs: dict[str, list[dict[str, float]]] = {str(count): [] for count in AGENTS}
    baselines = []
    for _ in range(repeats):  # each round: the floor, then every agent count, on fresh stores
        with contextlib.closing(_backend(kind, directory, server)) as raw:
            baselines.append(_baseline_writes_per_s(raw, nodes))
        for count in AGENTS:
            gc.collect()  # the earlier phases' garbage is not collected inside this one
            with _board(kind, directory, server) as board:
                runs[str(count)].append(_agent_figures(board, count, nodes))
    agents = {count: _medians(figures) for count, figures in runs.items()}
    baseline = statistics.median(baselines)
    coherence = _coherence_figures(kind, directory, server, min(nodes, 500))
    with _board(kind, directory, server) as board:
        constructs = _construct_figures(board, construct_nodes, queries, seed)
    return {
        "agents": agents,
        "baseline_writes_per_s": round(baseline),
        "baseline_writes_per_s_runs": baselines,
        "coherence": coherence,
        **constructs,
    }


def _medians(runs: Sequence[dict[str, float]]) -> dict[str, Any]:
    """Each figure's median over ``runs`` (one agent count's rounds), with every write rate."""
    figures: dict[str, Any] = {
        name: round(statistics.median(run[name] for run in runs), 2) for name in runs[0]
    }
    for name in ("writes_per_s", "reads_per_s", "reads_miss_per_s", "batched_writes_per_s"):
        figures[name] = round(figures[name])
    figures["writes_per_s_runs"] = [run["writes_per_s"] for run in runs]
    return figures


class _Uncoherent:
    """What an agent's read costs without a coordinator: the baseline of ``coherence``.

    A handle's read without its copy: the node from the board's cache, its area found in the
    agent's task and the role's right to read there checked, the grant kept as a handle keeps
    it (the board's coherent handle does the same, then validates its copy).
    """

    def __init__(self, board: Blackboard, role: str) -> None:
        self.board, self.role = board, role
        self.grants: dict[str, str] = {}  # area -> graph, as a handle caches its grants

    def read(self, iri: str) -> BoardNode | None:
        node = self.board.read(iri)
        if node is None:
            return None
        area = area_in_task(node.graph, TASK)
        if area is None:
            raise PermissionDeniedError(
                f"{node.iri!r} is not in an area of {TASK!r}",
                role=self.role,
                graph=node.graph,
                operation="read",
            )
        if area not in self.grants:
            self.board.permissions.check(self.role, area, Operation.READ, graph=node.graph)
            self.grants[area] = node.graph
        return node


def _coherence_figures(
    kind: str, directory: Path, server: str | None, nodes: int
) -> dict[str, float]:
    """Cached reads through a handle (on) and without a coordinator (off), in alternation."""
    best = {True: 0.0, False: 0.0}
    iris = {c: [f"urn:bench:c{int(c)}:{i}" for i in range(nodes)] for c in (False, True)}
    with contextlib.ExitStack() as stack:
        boards = {c: stack.enter_context(_board(kind, directory, server)) for c in best}
        handles = {c: board.agent("reader", role="do", task=TASK) for c, board in boards.items()}
        readers: dict[bool, AgentHandle | _Uncoherent] = {
            True: handles[True],
            False: _Uncoherent(boards[False], "do"),
        }
        for coherent, handle in handles.items():  # after both opened: a server starts cleared
            batch = [{"@id": iri, "@type": "Step", "summary": "s"} for iri in iris[coherent]]
            handle.write(batch, area="execution")
            for iri in iris[coherent]:
                readers[coherent].read(iri)
        for _ in range(_ROUNDS):
            for coherent, reader in readers.items():
                began = time.perf_counter()
                for _ in range(2):
                    for iri in iris[coherent]:
                        reader.read(iri)
                best[coherent] = max(best[coherent], 2 * nodes / (time.perf_counter() - began))
    return {
        "reads_per_s": round(best[True]),
        "reads_per_s_off": round(best[False]),
        "ratio": round(best[True] / best[False], 3),
    }


def _flush_per_s(directory: Path, nodes: int) -> float:
    with L0Store(directory / "flush.sqlite3") as store:
        board = Blackboard(EmbeddedGraph(), store=store, config=_CONFIG)
        for start in range(0, nodes, 1_000):
            batch = [_node(i, nodes) for i in range(start, min(nodes, start + 1_000))]
            board.write(batch, task=TASK, area="execution")
        began = time.perf_counter()
        flushed = board.flush()
        elapsed = time.perf_counter() - began
        board.close()
    return round(flushed / elapsed)


def _lease_figures(directory: Path, seconds: float) -> dict[str, float]:
    figures: dict[str, float] = lease_benchmark(directory, processes=4, seconds=seconds)
    return figures


def run(
    *,
    nodes: int = 2_000,
    construct_nodes: int = 10_000,
    queries: int = 200,
    backends: Sequence[str] = BACKENDS,
    lease_seconds: float = 2.0,
    seed: int = 0,
    repeats: int = 3,
) -> dict[str, Any]:
    """Run the benchmark and return the figures (the shape ``bench blackboard --json`` writes).

    Raises:
        ConfigError: an unknown backend, or ``repeats`` not an int >= 1.
    """
    unknown = [b for b in backends if b not in BACKENDS]
    if unknown:
        raise ConfigError(f"unknown blackboard backends {unknown}; known: {list(BACKENDS)}")
    if isinstance(repeats, bool) or not isinstance(repeats, int) or repeats < 1:
        raise ConfigError(f"repeats must be an int >= 1, got {repeats!r}")
    with tempfile.TemporaryDirectory(prefix="gliding-bench-") as temporary:
        directory = Path(temporary)
        with contextlib.ExitStack() as stack:
            server = None
            if "server" in backends:
                server = stack.enter_context(oxigraph_server(directory / "server"))
            figures: dict[str, Any] = {"backends": {}}
            for kind in backends:
                figures["backends"][kind] = _backend_figures(
                    kind,
                    directory,
                    server,
                    nodes=nodes,
                    construct_nodes=construct_nodes,
                    queries=queries,
                    seed=seed,
                    repeats=repeats,
                )
        figures["leases"] = _lease_figures(directory, lease_seconds)
        figures["flush_per_s"] = _flush_per_s(directory, construct_nodes)
    return figures
