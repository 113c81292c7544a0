"""MESI coherence under random runs: 2-5 agents, 1-4 nodes, every rule of the protocol, checked
after every step against the directory, the source and a shadow register of committed writes.

Four machines: one process with one directory object; one process with a SQLite directory per
agent group (two connections, as two processes would have); two real processes, the second
driven through a pipe, sharing the SQLite files; and three real processes sharing a directory
on PostgreSQL (its strict token: a read validates its copy against the database). Announcements
never cross a process (each has its own bus), so the last three also check that a read
validates its copy without them.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path
from typing import Any, ClassVar

import psycopg
import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
)

from gliding_core.coherence import (
    CoherenceCoordinator,
    DictNodeSource,
    LocalDirectory,
    SQLiteDirectory,
    SQLiteNodeSource,
)
from gliding_core.coherence.directory import Directory
from gliding_core.coherence.node_sources import NodeSource
from gliding_core.errors import EntryNotFoundError, StaleWriteError
from gliding_core.store.entry import MesiState
from tests.test_core.contracts.conftest import TEST_DATABASE_URL

CHILD = Path(__file__).with_name("coherence_child.py")
TAGS = st.sampled_from([(), ("draft",), ("confirmed_fact",)])
Answer = dict[str, Any]


class Local:
    """Agents served by a coordinator of this process."""

    def __init__(self, coordinator: CoherenceCoordinator, l0: dict[str, int]) -> None:
        self.coordinator, self.l0 = coordinator, l0
        self.leases: set[tuple[str, str]] = set()

    def run(self, op: str, **args: Any) -> Answer:
        try:
            if op == "read":
                reading = self.coordinator.read(args["agent"], args["iri"])
                return {"value": reading.value, "generation": reading.generation}
            if op == "write":
                key = (args["agent"], args["iri"])
                if args.pop("leased", False):
                    self.leases.add(key)
                try:
                    return {"generation": self.coordinator.write(**args)}
                finally:
                    self.leases.discard(key)
            getattr(self.coordinator, op)(**args)
            return {}
        except StaleWriteError as exc:
            return {
                "error": "StaleWriteError",
                "current_generation": exc.current_generation,
                "current_value": exc.current_value,
            }
        except EntryNotFoundError:
            return {"error": "EntryNotFoundError"}


class Remote:
    """Agents served by the child process, through its stdin and stdout."""

    def __init__(self, process: subprocess.Popen[str], l0: dict[str, int]) -> None:
        self.process, self.l0 = process, l0

    def run(self, op: str, **args: Any) -> Answer:
        assert self.process.stdin is not None
        assert self.process.stdout is not None
        self.process.stdin.write(json.dumps({"op": op, **args}) + "\n")
        self.process.stdin.flush()
        answer: Answer = json.loads(self.process.stdout.readline())
        for iri, generation in answer.pop("written_back"):
            self.l0[iri] = max(self.l0.get(iri, 0), generation)
        return answer


def coordinator(
    source: NodeSource, directory: Directory, l0: dict[str, int], group: Local | None = None
) -> Local:
    def write_back(iri: str, value: dict[str, Any], generation: int) -> None:
        l0[iri] = max(l0.get(iri, 0), generation)

    made = Local(CoherenceCoordinator(source, directory, write_back=write_back), l0)
    made.coordinator._holds_lease = lambda agent, iri: (agent, iri) in made.leases
    return made


class CoherenceMachine(RuleBasedStateMachine):
    """The rules and invariants; subclasses say where the agents run."""

    def __init__(self) -> None:
        super().__init__()
        self.folder = Path(tempfile.mkdtemp(prefix="coherence-"))
        self.l0: dict[str, int] = {}
        self.shadow: dict[str, tuple[int, dict[str, Any]]] = {}
        self.seen: dict[tuple[str, str], int] = {}
        self.highest: dict[str, int] = {}
        self.writes = 0

    def setup(self) -> tuple[Directory, NodeSource, list[Local | Remote]]:
        raise NotImplementedError

    @initialize(agents=st.integers(2, 5), nodes=st.integers(1, 4))
    def start(self, agents: int, nodes: int) -> None:
        self.agents = [f"agent-{i}" for i in range(agents)]
        self.nodes = [f"urn:node:{i}" for i in range(nodes)]
        self.directory, self.source, self.groups = self.setup()

    def group(self, agent: str) -> Local | Remote:
        return self.groups[self.agents.index(agent) % len(self.groups)]

    def teardown(self) -> None:
        self.close()
        shutil.rmtree(self.folder, ignore_errors=True)

    def close(self) -> None:
        self.directory.close()

    # -- rules ---------------------------------------------------------------------------------

    agent_index = st.integers(0, 4)
    node_index = st.integers(0, 3)

    def pick(self, a: int, n: int) -> tuple[str, str]:
        return self.agents[a % len(self.agents)], self.nodes[n % len(self.nodes)]

    @rule(a=agent_index, n=node_index)
    def read(self, a: int, n: int) -> None:
        agent, iri = self.pick(a, n)
        answer = self.group(agent).run("read", agent=agent, iri=iri)
        if iri not in self.shadow:
            assert answer == {"error": "EntryNotFoundError"}
            return
        generation, value = self.shadow[iri]
        assert answer == {"value": value, "generation": generation}, "a read was not the last write"
        self.seen[agent, iri] = generation

    def _write(
        self, agent: str, iri: str, based_on: int, tags: tuple[str, ...], leased: bool
    ) -> Answer:
        self.writes += 1
        value = {"@id": iri, "text": f"write {self.writes} by {agent}", "n": self.writes % 3}
        args = {"agent": agent, "iri": iri, "value": value, "based_on": based_on}
        answer = self.group(agent).run("write", tags=list(tags), leased=leased, **args)
        if "generation" in answer:
            self.shadow[iri] = (answer["generation"], value)
            self.seen[agent, iri] = answer["generation"]
        return answer

    @rule(a=agent_index, n=node_index, tags=TAGS)
    def write(self, a: int, n: int, tags: tuple[str, ...]) -> None:
        agent, iri = self.pick(a, n)
        current = self.shadow.get(iri, (0, None))[0]
        answer = self._write(agent, iri, current, tags, leased=False)
        assert answer == {"generation": current + 1}

    @precondition(lambda self: any(self.seen[k] < self.shadow[k[1]][0] for k in self.seen))
    @rule(data=st.data(), leased=st.booleans())
    def write_from_a_stale_copy(self, data: st.DataObject, leased: bool) -> None:
        stale = sorted(k for k in self.seen if self.seen[k] < self.shadow[k[1]][0])
        agent, iri = data.draw(st.sampled_from(stale))
        current, value = self.shadow[iri]
        answer = self._write(agent, iri, self.seen[agent, iri], (), leased=leased)
        if leased:  # a Write lease holder cannot be refused
            assert answer == {"generation": current + 1}
        else:
            assert answer == {
                "error": "StaleWriteError",
                "current_generation": current,
                "current_value": value,
            }
            copy = self.directory.record(iri).copies.get(agent)
            assert copy is None or copy.state is MesiState.INVALID

    @rule(a=agent_index, n=node_index)
    def write_back(self, a: int, n: int) -> None:
        agent, iri = self.pick(a, n)
        assert self.group(agent).run("write_back", agent=agent, iri=iri) == {}

    @rule(a=agent_index, n=node_index)
    def evict(self, a: int, n: int) -> None:
        agent, iri = self.pick(a, n)
        assert self.group(agent).run("evict", agent=agent, iri=iri) == {}
        assert agent not in self.directory.record(iri).copies

    @rule(a=agent_index, n=node_index)
    def lease_expiry(self, a: int, n: int) -> None:
        agent, iri = self.pick(a, n)
        assert self.group(agent).run("expire_lease", agent=agent, iri=iri) == {}

    @rule(a=agent_index)
    def crash(self, a: int) -> None:
        agent = self.agents[a % len(self.agents)]
        self.group(agent).run("drop_agent", agent=agent)
        assert self.directory.holdings(agent) == []

    # -- invariants ----------------------------------------------------------------------------

    @invariant()
    def single_writer_multiple_readers(self) -> None:
        for iri in getattr(self, "nodes", []):
            copies = self.directory.record(iri).copies.values()
            owners = [c for c in copies if c.state in (MesiState.MODIFIED, MesiState.EXCLUSIVE)]
            assert len(owners) <= 1, f"two owners of {iri}: {owners}"
            if owners:
                others = [c for c in copies if c is not owners[0]]
                assert all(c.state is MesiState.INVALID for c in others), list(copies)

    @invariant()
    def valid_copies_hold_the_current_value(self) -> None:
        for iri in getattr(self, "nodes", []):
            record = self.directory.record(iri)
            valid = [c for c in record.copies.values() if c.state is not MesiState.INVALID]
            if not valid:
                continue
            value, generation = self.source.get(iri)
            assert (record.value, record.generation) == (value, generation)
            assert all(c.generation == generation for c in valid), list(record.copies.values())
            assert (generation, value) == self.shadow[iri]

    @invariant()
    def generations_never_decrease(self) -> None:
        for iri in getattr(self, "nodes", []):
            generation = self.directory.record(iri).generation
            assert generation >= self.highest.get(iri, 0)
            self.highest[iri] = generation

    @invariant()
    def nothing_committed_is_lost(self) -> None:
        # A committed value is dirty only while one copy is MODIFIED; otherwise L0 has it.
        for iri, (generation, _) in self.shadow.items():
            copies = self.directory.record(iri).copies.values()
            if not any(c.state is MesiState.MODIFIED for c in copies):
                assert self.l0.get(iri) == generation, f"{iri} at {generation} not in L0"


MACHINE_SETTINGS = settings(
    max_examples=40,
    stateful_step_count=30,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)


class OneDirectory(CoherenceMachine):
    def setup(self) -> tuple[Directory, NodeSource, list[Local | Remote]]:
        directory, source = LocalDirectory(), DictNodeSource()
        return directory, source, [coordinator(source, directory, self.l0)]


class TwoConnections(CoherenceMachine):
    def setup(self) -> tuple[Directory, NodeSource, list[Local | Remote]]:
        path = self.folder / "blackboard.sqlite3"
        self.parts = [SQLiteDirectory(path), SQLiteDirectory(path)]
        self.nodes_source = SQLiteNodeSource(self.folder / "nodes.sqlite3")
        groups: list[Local | Remote] = [
            coordinator(self.nodes_source, d, self.l0) for d in self.parts
        ]
        return SQLiteDirectory(path), self.nodes_source, groups

    def close(self) -> None:
        super().close()
        for part in self.parts:
            part.close()
        self.nodes_source.close()


class TwoProcesses(TwoConnections):
    child: ClassVar[subprocess.Popen[str] | None] = None

    def setup(self) -> tuple[Directory, NodeSource, list[Local | Remote]]:
        directory, source, groups = super().setup()
        child = type(self).child
        assert child is not None
        remote = Remote(child, self.l0)
        paths = {"directory": str(self.folder / "blackboard.sqlite3")}
        remote.run("open", nodes=str(self.folder / "nodes.sqlite3"), **paths)
        return directory, source, [groups[0], remote]


class ThreeProcessesOnPostgres(CoherenceMachine):
    """This process and two children, each with its own ``PostgresDirectory`` on one schema
    (a new one per run), the node source a SQLite file they share."""

    url: ClassVar[str] = ""
    children: ClassVar[list[subprocess.Popen[str]]] = []

    def setup(self) -> tuple[Directory, NodeSource, list[Local | Remote]]:
        from gliding_core.coherence.postgres_directory import PostgresDirectory

        self.schema = f"test_{uuid.uuid4().hex[:16]}"
        self.mine = PostgresDirectory.open(self.url, schema=self.schema)
        self.nodes_source = SQLiteNodeSource(self.folder / "nodes.sqlite3")
        self.remotes = [Remote(child, self.l0) for child in self.children]
        for remote in self.remotes:
            remote.run(
                "open", nodes=str(self.folder / "nodes.sqlite3"), postgres_schema=self.schema
            )
        groups: list[Local | Remote] = [coordinator(self.nodes_source, self.mine, self.l0)]
        checker = PostgresDirectory.open(self.url, schema=self.schema)
        return checker, self.nodes_source, groups + list(self.remotes)

    def close(self) -> None:
        if hasattr(self, "directory"):  # not when the setup failed
            super().close()
        for remote in getattr(self, "remotes", []):
            remote.run("close")
        if hasattr(self, "mine"):
            self.mine.close()
            self.nodes_source.close()
            with psycopg.connect(self.url, autocommit=True) as conn:
                conn.execute(f'DROP SCHEMA IF EXISTS "{self.schema}" CASCADE')


def start_child(env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, str(CHILD)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )


def stop_child(process: subprocess.Popen[str]) -> None:
    assert process.stdin is not None
    process.stdin.close()
    process.wait(timeout=30)


@pytest.fixture(scope="module")
def child() -> Any:
    process = start_child()
    yield process
    stop_child(process)


def test_one_directory() -> None:
    OneDirectory.TestCase.settings = MACHINE_SETTINGS
    OneDirectory.TestCase().runTest()


def test_two_sqlite_connections() -> None:
    TwoConnections.TestCase.settings = settings(MACHINE_SETTINGS, max_examples=25)
    TwoConnections.TestCase().runTest()


def test_two_processes(child: subprocess.Popen[str]) -> None:
    TwoProcesses.child = child
    TwoProcesses.TestCase.settings = settings(MACHINE_SETTINGS, max_examples=15)
    TwoProcesses.TestCase().runTest()


def test_three_processes_on_postgres(postgres_url: str) -> None:
    env = {**os.environ, TEST_DATABASE_URL: postgres_url}
    children = [start_child(env) for _ in range(2)]
    try:
        ThreeProcessesOnPostgres.url = postgres_url
        ThreeProcessesOnPostgres.children = children
        ThreeProcessesOnPostgres.TestCase.settings = settings(MACHINE_SETTINGS, max_examples=10)
        ThreeProcessesOnPostgres.TestCase().runTest()
    finally:
        for process in children:
            stop_child(process)


def test_no_increment_is_lost_across_threads_and_processes(tmp_path: Path) -> None:
    import threading

    sys.path.insert(0, str(CHILD.parent))
    try:
        from coherence_child import increment
    finally:
        sys.path.remove(str(CHILD.parent))
    paths = {"directory": str(tmp_path / "bb.sqlite3"), "nodes": str(tmp_path / "nodes.sqlite3")}
    source = SQLiteNodeSource(paths["nodes"])
    directory = SQLiteDirectory(paths["directory"])
    here = CoherenceCoordinator(source, directory)
    iri, times = "urn:node:counter", 40
    here.write("setup", iri, {"@id": iri, "count": 0}, based_on=0)
    children = [
        subprocess.Popen(
            [sys.executable, str(CHILD)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
        )
        for _ in range(2)
    ]
    for number, process in enumerate(children):
        assert process.stdin is not None
        commands = [
            {"op": "open", **paths},
            {"op": "increment", "agent": f"p{number}", "iri": iri, "times": times},
        ]
        process.stdin.write("".join(json.dumps(c) + "\n" for c in commands))
        process.stdin.flush()
    threads = [
        threading.Thread(
            target=increment, args=(here,), kwargs={"agent": f"t{n}", "iri": iri, "times": times}
        )
        for n in range(2)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for process in children:
        out, _ = process.communicate(timeout=120)
        assert [json.loads(line).get("error") for line in out.splitlines()] == [None, None]
    assert here.read("setup", iri).value["count"] == 4 * times
    assert source.get(iri) == ({"@id": iri, "count": 4 * times}, 4 * times + 1)
    directory.close()
    source.close()


def test_no_increment_is_lost_across_threads_and_processes_on_postgres(
    postgres_url: str, tmp_path: Path
) -> None:
    import threading

    from gliding_core.coherence.postgres_directory import PostgresDirectory

    sys.path.insert(0, str(CHILD.parent))
    try:
        from coherence_child import increment
    finally:
        sys.path.remove(str(CHILD.parent))
    schema, nodes = f"test_{uuid.uuid4().hex[:16]}", str(tmp_path / "nodes.sqlite3")
    source = SQLiteNodeSource(nodes)
    directory = PostgresDirectory.open(postgres_url, schema=schema)
    here = CoherenceCoordinator(source, directory)
    iri, times = "urn:node:counter", 25
    here.write("setup", iri, {"@id": iri, "count": 0}, based_on=0)
    env = {**os.environ, TEST_DATABASE_URL: postgres_url}
    children = [start_child(env) for _ in range(2)]
    for number, process in enumerate(children):
        assert process.stdin is not None
        commands = [
            {"op": "open", "nodes": nodes, "postgres_schema": schema},
            {"op": "increment", "agent": f"p{number}", "iri": iri, "times": times},
        ]
        process.stdin.write("".join(json.dumps(c) + "\n" for c in commands))
        process.stdin.flush()
    threads = [
        threading.Thread(
            target=increment, args=(here,), kwargs={"agent": f"t{n}", "iri": iri, "times": times}
        )
        for n in range(2)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    try:
        for process in children:
            out, _ = process.communicate(timeout=300)
            assert [json.loads(line).get("error") for line in out.splitlines()] == [None, None]
        assert here.read("setup", iri).value["count"] == 4 * times
        assert source.get(iri) == ({"@id": iri, "count": 4 * times}, 4 * times + 1)
    finally:
        directory.close()
        source.close()
        with psycopg.connect(postgres_url, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
