"""Shared fixtures: real in-process engines, never mocks."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

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
