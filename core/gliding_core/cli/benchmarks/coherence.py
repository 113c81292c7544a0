"""Benchmark of L2 coherence: tokens and stale reads against Token Coherence on the same traces.

The peer is ``agent-coherence`` (import name ``ccs``, the ``bench`` extra), driven through its
public ``CoherenceAdapterCore`` with each of its strategies; ours is ``Coherence``.
Both replay one seeded trace per run (its canonical workload: 4 agents, 40 ticks, 3 artifacts,
action probability 0.75; at each tick each agent acts with that probability on an artifact
chosen uniformly, writing with the write probability, else reading) under the same cost rules:
a read that must fetch costs what it fetches, a hit nothing, an invalidation signal 12 tokens,
and a writer whose copy is stale fetches first. Workloads:

- ``canonical``: opaque artifacts of 4,096 tokens; any fetch costs the whole artifact.
- ``structured``: each artifact a JSON-LD node of 40 properties, about 4,096 tokens in all,
  each write changing 1 to 4 properties; every text is counted exactly (``TokenCounter``). The
  peer refetches the whole node; ours sends what its copy needs (``render_shared``'s rules).

A read is stale when it returns a version older than the artifact's last committed one.
Invariant: both coordinators see exactly the same actions and contents; figures are means over
the seeds (stale reads: totals).
"""

from __future__ import annotations

import random
import statistics
import tempfile
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

from gliding_core.bus import Event, EventType
from gliding_core.coherence.context import shown
from gliding_core.coherence.coordinator import Coherence
from gliding_core.coherence.directory import Directory, LocalDirectory
from gliding_core.coherence.node_sources import DictNodeSource
from gliding_core.coherence.sqlite_directory import SQLiteDirectory
from gliding_core.errors import EntryNotFoundError
from gliding_core.jsonld import Node, canonical_json
from gliding_core.tokens import TokenCounter

SEED = 20260305
AGENTS, TICKS, ARTIFACT_TOKENS = 4, 40, 4_096
ARTIFACTS = ("plan.md", "design.md", "state.json")
ACTION_PROBABILITY = 0.75
WRITE_PROBABILITIES = (0.05, 0.10, 0.25, 0.50)
INVALIDATION_TOKENS = 12
PROPERTIES = 40
STRATEGIES = ("lazy", "lease", "access_count", "eager", "broadcast")
SYLLABLES = ("ka", "lo", "mi", "ne", "ru", "sa", "ti", "vo", "ze", "pa", "do", "gi", "hu", "be")


@dataclass(frozen=True, slots=True)
class Step:
    """One action of a trace; ``value`` is the artifact after a write (``None`` for a read)."""

    tick: int
    agent: str
    artifact: int
    value: Node | None


@dataclass
class Tally:
    """What one coordinator spent on one trace (``whole``/``change``/``signals``: ours only)."""

    tokens: int = 0
    stale_reads: int = 0
    whole: int = 0
    change: int = 0
    signals: int = 0


# -- traces --------------------------------------------------------------------------------------


def actions(seed: int, write_probability: float) -> list[tuple[int, int, int, bool]]:
    """Return the trace's ``(tick, agent, artifact, is_write)`` actions, drawn as the peer does."""
    rng = random.Random(seed)
    drawn = []
    for tick in range(TICKS):
        for agent in range(AGENTS):
            if rng.random() < ACTION_PROBABILITY:
                artifact = rng.choice(range(len(ARTIFACTS)))
                drawn.append((tick, agent, artifact, rng.random() < write_probability))
    return drawn


def _words(rng: random.Random, count: int) -> str:
    return " ".join(
        "".join(rng.choice(SYLLABLES) for _ in range(rng.randint(1, 3))) for _ in range(count)
    )


def structured_node(name: str, rng: random.Random, counter: TokenCounter) -> Node:
    """Return a node of ``PROPERTIES`` text properties whose canonical JSON is 4,096 tokens."""
    node: Node = {"@id": f"urn:artifact:{name}", "@type": "Artifact"}
    for index in range(PROPERTIES):
        node[f"p{index:02d}"] = _words(rng, rng.randint(25, 55))
    last = f"p{PROPERTIES - 1:02d}"
    while (excess := counter.count(canonical_json(node)) - ARTIFACT_TOKENS) != 0:
        tokens = counter.count(node[last])
        if excess > 0:
            node[last] = counter.truncate(node[last], max(1, tokens - excess))
        else:
            node[last] = f"{node[last]} {_words(rng, max(1, -excess // 2))}"
    return node


def _changed(node: Node, rng: random.Random) -> Node:
    """Return ``node`` with 1 to 4 of its properties rewritten (about the same length)."""
    new = dict(node)
    keys = [k for k in node if not k.startswith("@")]
    for key in rng.sample(keys, rng.randint(1, 4)):
        new[key] = _words(rng, max(1, len(str(node[key]).split())))
    return new


def trace(
    seed: int, write_probability: float, *, structured: bool, counter: TokenCounter
) -> tuple[list[Node], list[Step]]:
    """Return a run's initial artifacts and its steps, the value of every write included."""
    rng = random.Random(f"{seed}-contents")
    if structured:
        values = [structured_node(name, rng, counter) for name in ARTIFACTS]
    else:
        values = [{"@id": f"urn:artifact:{name}", "version": 1} for name in ARTIFACTS]
    initial = [dict(v) for v in values]
    steps = []
    for tick, agent, artifact, is_write in actions(seed, write_probability):
        value = None
        if is_write:
            old = values[artifact]
            value = _changed(old, rng) if structured else {**old, "version": old["version"] + 1}
            values[artifact] = value
        steps.append(Step(tick, f"agent_{agent}", artifact, value))
    return initial, steps


# -- ours ----------------------------------------------------------------------------------------


def run_gliding(
    initial: Sequence[Node], steps: Sequence[Step], cost: Callable[[Any], int]
) -> Tally:
    """Replay ``steps`` on a ``Coherence``; ``cost`` prices a reading."""
    coordinator = Coherence(DictNodeSource(), LocalDirectory())
    tally = Tally()

    def on_invalidation(event: Event) -> None:
        tally.signals += INVALIDATION_TOKENS * len(event.payload["agents"])

    coordinator.bus.subscribe(on_invalidation, [EventType.COPIES_INVALIDATED])
    iris = [str(v["@id"]) for v in initial]
    for iri, value in zip(iris, initial, strict=True):
        coordinator.source.put(iri, value, 0)
    committed = [1] * len(iris)
    for step in steps:
        iri = iris[step.artifact]
        # A writer reads first: it changes what it has seen, so a stale copy is fetched.
        reading = coordinator.read(step.agent, iri)
        spent = cost(reading)
        if reading.kind == "whole":
            tally.whole += spent
        else:
            tally.change += spent
        tally.stale_reads += reading.generation < committed[step.artifact]
        if step.value is not None:
            committed[step.artifact] = coordinator.write(
                step.agent, iri, step.value, based_on=reading.generation
            )
    tally.tokens = tally.whole + tally.change + tally.signals
    return tally


# -- the peer ------------------------------------------------------------------------------------


def run_peer(
    strategy: str,
    initial: Sequence[Node],
    steps: Sequence[Step],
    size: Callable[[str], int],
) -> Tally:
    """Replay ``steps`` on agent-coherence's ``CoherenceAdapterCore`` with ``strategy``."""
    from ccs.adapters.base import CoherenceAdapterCore

    with warnings.catch_warnings():
        # 0.15.0 warns once per process that crash recovery is on by default; it is left on.
        warnings.simplefilter("ignore", RuntimeWarning)
        core = CoherenceAdapterCore(strategy_name=strategy)
    names = sorted({step.agent for step in steps} | {f"agent_{i}" for i in range(AGENTS)})
    for name in names:
        core.register_agent(name)
    ids = []
    for value in initial:
        text = canonical_json(value)
        ids.append(
            core.register_artifact(name=value["@id"], content=text, size_tokens=size(text)).id
        )
    tally = Tally()
    for tick in range(TICKS):
        for step in (s for s in steps if s.tick == tick):
            _peer_step(core, ids, step, tally, size, len(names))
        if core.strategy.broadcasts_every_tick():
            tally.tokens += _broadcast(core, ids, names, tick, size)
    return tally


def _peer_step(
    core: Any, ids: Sequence[Any], step: Step, tally: Tally, size: Callable[[str], int], n: int
) -> None:
    from ccs.core.states import MESIState

    artifact, agent = ids[step.artifact], step.agent
    entry = core.runtime(agent).cache.get(artifact)
    if entry is None or core.strategy.requires_refresh(entry, now_tick=step.tick):
        tally.tokens += size(core.registry.get_content(artifact) or "")
    if step.value is None:
        response = core.read(agent_name=agent, artifact_id=artifact, now_tick=step.tick)
        current = core.registry.get_artifact(artifact)
        tally.stale_reads += current is not None and response.version < current.version
        return
    writer = core.agent_id_for(agent)
    states = core.registry.get_state_map(artifact)
    others = sum(1 for p, s in states.items() if p != writer and s != MESIState.INVALID)
    text = canonical_json(step.value)
    core.write(agent_name=agent, artifact_id=artifact, content=text, now_tick=step.tick)
    if core.strategy.broadcasts_content_on_commit():
        tally.tokens += size(text) * (n - 1)  # the adapter pushes the content to every peer
    elif core.strategy.invalidates_peers_on_commit():
        tally.tokens += INVALIDATION_TOKENS * others


def _broadcast(
    core: Any, ids: Sequence[Any], names: Sequence[str], tick: int, size: Callable[[str], int]
) -> int:
    """Push every artifact to every agent, as the broadcast strategy does each tick."""
    spent = 0
    for artifact in ids:
        meta, content = core.registry.get_artifact(artifact), core.registry.get_content(artifact)
        for name in names:
            core.runtime(name).handle_update(
                artifact_id=artifact, version=meta.version, content=content, now_tick=tick
            )
            spent += size(content)
    return spent


def first_seed(write_probability: float) -> int:
    """Return the first seed of a workload's runs.

    The peer's scenario files seed each write probability one further (0.05 from 20260305,
    0.10 from 20260306, ...): that is how its published lazy totals come out of its simulator.
    """
    if write_probability in WRITE_PROBABILITIES:
        return SEED + WRITE_PROBABILITIES.index(write_probability)
    return SEED


def run_simulator(write_probability: float, seeds: Sequence[int]) -> dict[str, float]:
    """Return the peer's own simulator's lazy figures (its invalidations land a tick later)."""
    from ccs.simulation.engine import SimulationEngine

    config = {
        "simulation": {"num_agents": AGENTS, "duration_ticks": TICKS, "seed": SEED},
        "scenario": {
            "name": "canonical",
            "workload": "custom",
            "action_probability": ACTION_PROBABILITY,
            "write_probability": write_probability,
        },
        "network": {"latency_ticks": 1, "message_loss_rate": 0.0},
        "artifacts": [
            {"id": n, "size_tokens": ARTIFACT_TOKENS, "mutable": True} for n in ARTIFACTS
        ],
    }
    totals, stale = [], 0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        for seed in seeds:
            metrics = SimulationEngine(config, strategy_name="lazy", seed=seed).run()
            totals.append(metrics.tokens_fetch + metrics.tokens_invalidation)
            stale += metrics.stale_reads
    return {"tokens": float(statistics.mean(totals)), "stale_reads": stale}


# -- the run -------------------------------------------------------------------------------------


def run(
    *,
    seeds: int = 10,
    write_probabilities: Sequence[float] = WRITE_PROBABILITIES,
    strategies: Sequence[str] = STRATEGIES,
    counter: TokenCounter | None = None,
) -> dict[str, Any]:
    """Run both workloads at each write probability; return the figures (JSON-ready)."""
    counter = counter or TokenCounter()
    sizes: dict[str, int] = {}

    def size(text: str) -> int:
        if text not in sizes:
            sizes[text] = counter.count(text)
        return sizes[text]

    workloads: dict[str, Any] = {}
    for structured in (False, True):
        for p in write_probabilities:
            name = f"{'structured' if structured else 'canonical'}-{p:.2f}"
            workloads[name] = _workload(structured, p, seeds, strategies, counter, size)
    starts = {f"{p:.2f}": first_seed(p) for p in write_probabilities}
    return {
        "seeds": seeds,
        "first_seeds": starts,
        "workloads": workloads,
        "read_path": read_path(),
    }


def read_path(reads: int = 20_000, nodes: int = 10) -> dict[str, float]:
    """Return read hits per second through the coordinator, and a bare source read beside them.

    A hit validates the agent's copy with the directory's change token: a counter in one
    process, ``PRAGMA data_version`` on the SQLite file; a batch (``read_many``) checks once.
    """
    node = {"@type": "Task", "name": "write the report", "status": "running", "priority": 3}
    iris = [f"urn:task:{i}" for i in range(nodes)]
    figures: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as folder:
        directories: dict[str, Directory] = {
            "local": LocalDirectory(),
            "sqlite": SQLiteDirectory(Path(folder) / "blackboard.sqlite3"),
        }
        source = DictNodeSource()
        for name, directory in directories.items():
            coordinator = Coherence(source, directory)
            for iri in iris:
                coordinator.write(
                    name, iri, {"@id": iri, **node}, based_on=_generation(source, iri)
                )
            figures[f"{name}_hit_per_s"] = _rate(reads, partial(coordinator.read, name, iris[0]))
            batch = partial(coordinator.read_many, name, iris)
            figures[f"{name}_batch{nodes}_per_s"] = nodes * _rate(reads // nodes, batch)
            directory.close()
        figures["baseline_source_get_per_s"] = _rate(reads, partial(source.get, iris[0]))
    return {k: round(v) for k, v in figures.items()}


def _generation(source: DictNodeSource, iri: str) -> int:
    """Return ``iri``'s generation in ``source``, 0 when absent."""
    try:
        return source.get(iri)[1]
    except EntryNotFoundError:
        return 0


def _rate(calls: int, call: Callable[[], object]) -> float:
    started = time.perf_counter()
    for _ in range(calls):
        call()
    return calls / (time.perf_counter() - started)


def _workload(
    structured: bool,
    p: float,
    seeds: int,
    strategies: Sequence[str],
    counter: TokenCounter,
    size: Callable[[str], int],
) -> dict[str, Any]:
    def opaque(_: str) -> int:
        return ARTIFACT_TOKENS

    price = size if structured else opaque
    ours: list[Tally] = []
    peers: dict[str, list[Tally]] = {s: [] for s in strategies}
    baselines = []
    seconds = 0.0
    start = first_seed(p)
    for seed in range(start, start + seeds):
        initial, steps = trace(seed, p, structured=structured, counter=counter)
        baselines.append(AGENTS * TICKS * sum(price(canonical_json(v)) for v in initial))
        started = time.perf_counter()
        ours.append(run_gliding(initial, steps, _cost(structured, counter)))
        seconds += time.perf_counter() - started
        for strategy in strategies:
            peers[strategy].append(run_peer(strategy, initial, steps, price))
    figures: dict[str, Any] = {"baseline": statistics.mean(baselines)}
    figures["gliding"] = _summary(ours)
    for part in ("whole", "change", "signals"):
        figures["gliding"][f"{part}_tokens"] = statistics.mean(getattr(t, part) for t in ours)
    for strategy, tallies in peers.items():
        figures[f"agent-coherence-{strategy}"] = _summary(tallies)
    if "lazy" in peers:
        figures["gliding"]["vs_lazy"] = round(
            figures["gliding"]["tokens"] / figures["agent-coherence-lazy"]["tokens"], 4
        )
    if not structured:
        figures["agent-coherence-lazy-simulator"] = run_simulator(p, range(start, start + seeds))
    figures["gliding"]["replay_ms_per_run"] = round(1000 * seconds / seeds, 2)
    return figures


def _cost(structured: bool, counter: TokenCounter) -> Callable[[Any], int]:
    def priced(reading: Any) -> int:
        if reading.kind == "hit":
            return 0
        return shown(reading, counter).tokens if structured else ARTIFACT_TOKENS

    return priced


def _summary(tallies: Sequence[Tally]) -> dict[str, Any]:
    return {
        "tokens": statistics.mean(t.tokens for t in tallies),
        "stale_reads": sum(t.stale_reads for t in tallies),
    }
