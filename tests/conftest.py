"""Shared fixtures: real in-process engines, never mocks."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from gliding_core import L0Store
from gliding_core.testing import oxigraph_server as serve_oxigraph


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
