"""The Memory facade: in memory, under a directory, as a context manager."""

from __future__ import annotations

from pathlib import Path

import pytest

from gliding_core import (
    ClosedError,
    ConfigError,
    InvalidInputError,
    L0Store,
    Memory,
    MemoryConfig,
    StoreConfig,
    TokenCounter,
)
from gliding_core.memory import STORE_FILE


def test_memory_lives_in_memory_by_default() -> None:
    with Memory() as memory:
        memory.store.put({"@id": "urn:x", "text": "hello world"})
        assert memory.directory is None
        assert memory.store.path is None
        assert memory.count_tokens("hello world") == 2


def test_open_keeps_everything_under_one_directory(tmp_path: Path) -> None:
    where = tmp_path / "nested" / "memory"
    with Memory.open(where) as memory:
        memory.store.put({"@id": "urn:kept"}, tags=["t"])
    assert (where / STORE_FILE).is_file()
    with Memory.open(where) as again:
        assert [e.iri for e in again.store.by_tags(["t"])] == ["urn:kept"]


def test_closing_closes_the_store() -> None:
    memory = Memory()
    memory.close()
    memory.close()
    with pytest.raises(ClosedError):
        memory.store.count()


def test_collaborators_can_be_passed_in() -> None:
    store, tokens = L0Store(), TokenCounter()
    with Memory(store=store, tokens=tokens) as memory:
        assert memory.store is store
        assert memory.tokens is tokens


def test_config_reaches_the_store(tmp_path: Path) -> None:
    config = MemoryConfig(store=StoreConfig(max_content_bytes=10_000, durability="normal"))
    with Memory.open(tmp_path, config=config) as memory:
        assert memory.store.config.max_content_bytes == 10_000


def test_open_on_a_file_is_a_typed_error(tmp_path: Path) -> None:
    file = tmp_path / "file.txt"
    file.write_text("x")
    with pytest.raises(InvalidInputError, match="not a directory"):
        Memory.open(file)
    with pytest.raises(InvalidInputError, match="non-empty path"):
        Memory.open("")


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (lambda: StoreConfig(max_content_bytes=0), "max_content_bytes"),
        (lambda: StoreConfig(durability="sometimes"), "sometimes"),
        (lambda: StoreConfig(default_importance=2.0), "default_importance"),
        (lambda: StoreConfig(unknown=1), "unknown"),
        (lambda: MemoryConfig(token_encoding=""), "token_encoding"),
    ],
)
def test_bad_settings_are_config_errors_naming_the_field(build: object, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        build()  # type: ignore[operator]
