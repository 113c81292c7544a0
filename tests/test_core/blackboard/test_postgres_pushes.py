"""Pushed invalidation across OS processes: a write committed by one worker drops the copies
every other worker holds of the node as the directory's notification arrives, without their
reading it; a server restart loses the pushes for a while (reads are checked meanwhile) and the
board is subscribed again once its directory reconnects.

The other workers are child processes (``push_child.py``) opening the memory as a deployment
does, on the session's PostgreSQL (or the faults test's own, which may be stopped) and the
session's ``oxigraph serve``. A child's waits poll what it holds with a bounded wait (a
liveness bound: no timing is asserted).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gliding_core import BlackboardConfig, Memory, MemoryConfig
from gliding_core.bus import Event, EventType
from tests.test_core.test_memory_postgres_faults import StoppableServer

REPOSITORY = Path(__file__).resolve().parents[3]
CHILD = Path(__file__).with_name("push_child.py")


def _config(schema: str, endpoint: str, timeout_s: float = 5.0) -> MemoryConfig:
    return MemoryConfig(
        embedder="hash",
        database_schema=schema,
        database_timeout_s=timeout_s,
        blackboard=BlackboardConfig(endpoint=endpoint, flush_interval_s=0.0),
    )


class Worker:
    """A worker process with one agent, driven through its stdin and stdout."""

    def __init__(self, url: str, schema: str, endpoint: str, task: str, name: str) -> None:
        env = {
            **os.environ,
            "PYTHONPATH": os.pathsep.join([str(REPOSITORY), str(REPOSITORY / "core")]),
            "GLIDING_DATABASE_URL": url,
        }
        self.process = subprocess.Popen(
            [sys.executable, str(CHILD), schema, endpoint, task, name, "2.0"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=env,
        )
        self.ready = self.answer()

    def answer(self) -> dict[str, Any]:
        assert self.process.stdout is not None
        line = self.process.stdout.readline()
        assert line, f"the worker exited ({self.process.poll()})"
        answer: dict[str, Any] = json.loads(line)
        return answer

    def __call__(self, op: str, **args: Any) -> dict[str, Any]:
        assert self.process.stdin is not None
        self.process.stdin.write(json.dumps({"op": op, **args}) + "\n")
        self.process.stdin.flush()
        answer = self.answer()
        assert "error" not in answer, answer
        return answer

    def stop(self) -> None:
        if self.process.stdin is not None:
            self.process.stdin.close()
        try:
            self.process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        if self.process.stdout is not None:
            self.process.stdout.close()


@pytest.fixture
def names() -> tuple[str, str]:
    """A task and a node of the test's own (the SPARQL server is shared by the session)."""
    tag = uuid.uuid4().hex[:12]
    return f"urn:task:push-{tag}", f"urn:push:{tag}"


def test_a_write_in_one_process_drops_the_copies_of_the_others_without_a_read(
    postgres_url: str, postgres_schema: str, oxigraph_server: str, names: tuple[str, str]
) -> None:
    task, node = names
    other = f"{node}:other"
    with Memory.open(postgres_url, config=_config(postgres_schema, oxigraph_server)) as memory:
        writer = memory.agent("writer", role="do", task=task)
        writer.write(
            [{"@id": node, "text": "one"}, {"@id": other, "text": "kept"}], area="execution"
        )
        workers = [
            Worker(postgres_url, postgres_schema, oxigraph_server, task, f"reader-{n}")
            for n in range(2)
        ]
        try:
            assert [w.ready for w in workers] == [{"ready": True}, {"ready": True}]
            for worker in workers:
                assert worker("read", iri=node) == {"generation": 1, "text": "one", "held": True}
                assert worker("read", iri=other)["held"]

            [written] = writer.write([{"@id": node, "text": "two"}], area="execution")
            assert written.generation == 2

            for number, worker in enumerate(workers):
                answer = worker("wait_dropped", iri=node)
                # Dropped by the push, naming this process's agent, before any read of it.
                assert answer["dropped"], answer
                assert answer["pushes"] == [[f"reader-{number}"]]
                assert worker("state", iri=node) == {"state": "I"}
                assert worker("held", iri=other)["held"]  # a node nobody wrote stays held
                assert worker("read", iri=node) == {"generation": 2, "text": "two", "held": True}
            # The writer's own copy is not dropped by its own change coming back.
            assert memory.blackboard.coherence.holds_copy("writer", node)
        finally:
            for worker in workers:
                worker.stop()


def test_a_write_in_a_worker_reaches_this_process_and_views_built_from_the_node(
    postgres_url: str, postgres_schema: str, oxigraph_server: str, names: tuple[str, str]
) -> None:
    """The push is published on this process's bus, where the L3 view cache listens."""
    task, node = names
    with Memory.open(postgres_url, config=_config(postgres_schema, oxigraph_server)) as memory:
        reader = memory.agent("here", role="do", task=task)
        pushed: list[dict[str, Any]] = []

        def on_invalidated(event: Event) -> None:
            if event.payload.get("pushed"):
                pushed.append(dict(event.payload))

        memory.bus.subscribe(on_invalidated, [EventType.COPIES_INVALIDATED])
        worker = Worker(postgres_url, postgres_schema, oxigraph_server, task, "there")
        try:
            assert worker("write", iri=node, text="one")["generation"] == 1
            assert _until(lambda: any(p["iri"] == node for p in pushed))  # its creation
            pushed.clear()
            read = reader.read(node)
            assert read is not None
            assert memory.blackboard.coherence.holds_copy("here", node)
            assert worker("write", iri=node, text="two")["generation"] == 2
            coherence = memory.blackboard.coherence
            assert _until(lambda: not coherence.holds_copy("here", node))
            assert [p["agents"] for p in pushed if p["iri"] == node] == [["here"]]
            again = reader.read(node)
            assert again is not None
            assert (again.generation, again.node["text"]) == (2, "two")
        finally:
            worker.stop()


def test_a_closed_board_is_no_longer_told(
    postgres_url: str, postgres_schema: str, oxigraph_server: str, names: tuple[str, str]
) -> None:
    task, node = names
    config = _config(postgres_schema, oxigraph_server)
    with Memory.open(postgres_url, config=config) as writer_memory:
        writer = writer_memory.agent("writer", role="do", task=task)
        writer.write([{"@id": node, "text": "one"}], area="execution")
        closed = Memory.open(postgres_url, config=config)
        seen: list[Event] = []
        closed.bus.subscribe(seen.append, [EventType.COPIES_INVALIDATED])
        closed.agent("gone", role="do", task=task).read(node)
        board = closed.blackboard
        assert board.pushed
        closed.close()
        assert not board.pushed
        worker = Worker(postgres_url, postgres_schema, oxigraph_server, task, "open")
        try:
            worker("read", iri=node)
            writer.write([{"@id": node, "text": "two"}], area="execution")
            assert worker("wait_dropped", iri=node)["dropped"]  # the push went out
            assert seen == []  # and the closed board was not told
        finally:
            worker.stop()


def _until(done: Any, bound_s: float = 60.0) -> bool:
    """Poll ``done()`` until it is true or ``bound_s`` passed (a liveness bound)."""
    import time

    deadline = time.monotonic() + bound_s
    while not done():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.005)
    return True


@pytest.fixture(scope="module")
def server() -> Iterator[StoppableServer]:
    """A PostgreSQL of this module's own, which a test may stop (the session's is shared)."""
    directory = Path(tempfile.mkdtemp(prefix="gliding-pgpush-"))
    directory.chmod(0o755)  # the server runs as a user of its own when the tests run as root
    value = StoppableServer(directory)
    try:
        yield value
    finally:
        value.start()
        value.cleanup()
        shutil.rmtree(directory, ignore_errors=True)


def test_a_restart_falls_back_to_checks_on_read_and_the_board_is_told_again(
    server: StoppableServer, oxigraph_server: str, names: tuple[str, str]
) -> None:
    task, node = names
    schema = f"test_{uuid.uuid4().hex[:16]}"
    memory = Memory.open(server.url, config=_config(schema, oxigraph_server, timeout_s=2.0))
    worker: Worker | None = None
    try:
        writer = memory.agent("writer", role="do", task=task)
        writer.write([{"@id": node, "text": "one"}], area="execution")
        worker = Worker(server.url, schema, oxigraph_server, task, "reader")
        assert worker("read", iri=node)["held"]

        server.crash()
        assert worker("wait_pushed", pushed=False) == {"reached": True}  # the listener is lost
        server.start()
        _retry(lambda: writer.write([{"@id": node, "text": "two"}], area="execution"))
        # Whether or not this worker's listener is back yet, its read is checked: not stale.
        answer = _retry_worker(worker, "read", iri=node)
        assert (answer["generation"], answer["text"]) == (2, "two")

        assert worker("wait_pushed", pushed=True) == {"reached": True}  # reconnected
        assert worker("read", iri=node)["held"]
        before = len(worker("held", iri=node)["pushes"])  # (the reconnection's drop among them)
        writer.write([{"@id": node, "text": "three"}], area="execution")
        answer = worker("wait_dropped", iri=node, after=before)  # the same subscription, told
        assert answer["dropped"], answer
        answer = worker("read", iri=node)
        assert (answer["generation"], answer["text"]) == (3, "three")
    finally:
        server.start()
        if worker is not None:
            worker.stop()
        memory.close()


def _retry(call: Any, attempts: int = 30) -> Any:
    """Call ``call`` until it stops failing with ``DatabaseUnavailableError``."""
    from gliding_core import DatabaseUnavailableError

    for _ in range(attempts - 1):
        try:
            return call()
        except DatabaseUnavailableError:
            continue
    return call()


def _retry_worker(worker: Worker, op: str, attempts: int = 30, **args: Any) -> dict[str, Any]:
    """Run ``op`` in the worker until it stops failing with ``DatabaseUnavailableError``."""
    assert worker.process.stdin is not None
    for _ in range(attempts):
        worker.process.stdin.write(json.dumps({"op": op, **args}) + "\n")
        worker.process.stdin.flush()
        answer = worker.answer()
        if answer.get("error") != "DatabaseUnavailableError":
            assert "error" not in answer, answer
            return answer
    raise AssertionError(f"the worker's {op} kept failing: {answer}")
