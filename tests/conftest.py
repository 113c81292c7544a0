"""Shared fixtures: real in-process engines, never mocks."""

from __future__ import annotations

import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from gliding_core import L0Store


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


def _oxigraph_binary() -> str:
    beside = Path(sys.executable).with_name("oxigraph")
    found = str(beside) if beside.is_file() else shutil.which("oxigraph")
    if found is None:
        pytest.fail("the `oxigraph` server is not installed (pip install 'gliding-horse[dev]')")
    return found


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


@pytest.fixture(scope="session")
def oxigraph_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A real `oxigraph serve` on a free loopback port, in a temporary directory; its URL."""
    directory = tmp_path_factory.mktemp("oxigraph")
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    log = (directory / "server.log").open("wb")
    process = subprocess.Popen(
        [_oxigraph_binary(), "serve", "-l", str(directory / "data"), "-b", f"127.0.0.1:{port}"],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        _wait_until_answering(url, process)
        yield url
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        log.close()


def _wait_until_answering(url: str, process: subprocess.Popen[bytes]) -> None:
    for _ in range(200):
        if process.poll() is not None:
            pytest.fail(f"oxigraph serve exited with {process.returncode}")
        try:
            response = httpx.post(
                f"{url}/query",
                content=b"ASK {}",
                headers={"content-type": "application/sparql-query"},
                timeout=1.0,
            )
            if response.status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.05)
    pytest.fail("oxigraph serve did not answer within 10 s")
