"""Shared fixtures: real in-process engines, never mocks."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from gliding_core import L0Store
from gliding_core.benchmarks.blackboard import oxigraph_server as serve_oxigraph


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


@pytest.fixture(scope="session")
def oxigraph_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A real `oxigraph serve` on a free loopback port, data in a temporary directory; its URL.

    Started once for the session (the blackboard's tests clear it before each use) and
    stopped at teardown.
    """
    with serve_oxigraph(tmp_path_factory.mktemp("oxigraph") / "data") as url:
        yield url
