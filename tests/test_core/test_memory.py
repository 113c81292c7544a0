"""The Memory facade: in memory, under a directory, as a context manager."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gliding_core import (
    ClosedError,
    ConfigError,
    GlidingError,
    HashEmbedder,
    InvalidInputError,
    L0Store,
    Memory,
    MemoryConfig,
    StorageError,
    StoreConfig,
    TokenCounter,
)
from gliding_core.memory import CHROMA_DIR, EMBEDDING_CACHE_FILE, MANIFEST_FILE, STORE_FILE
from gliding_core.store.ownership import LOCK_FILE, holder_pid


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


def _descriptors() -> int:
    return len(os.listdir("/proc/self/fd"))


@pytest.fixture(scope="module")
def warm(tmp_path_factory: pytest.TempPathFactory) -> None:
    """Open a memory once, so that what stays loaded (Chroma's runtime) is not counted."""
    with Memory.open(tmp_path_factory.mktemp("warm"), embedder=HashEmbedder(64)) as memory:
        memory.store.put({"@id": "urn:warm", "text": "warm up"})
        memory.search("warm", 1)


# Each case: what to break, the error it raises, a word of its message.
_BROKEN = [
    (lambda d: (d / "file").write_text("x") and d / "file" / "below", InvalidInputError, "file"),
    (lambda d: d / ("x" * 300), StorageError, "cannot create"),
    (lambda d: _put(d, MANIFEST_FILE, b"{not json"), StorageError, "memory.json"),
    (lambda d: _put(d, MANIFEST_FILE, b"[1, 2]"), StorageError, "memory.json"),
    (lambda d: _put(d, MANIFEST_FILE, b'{"embedder": 3}'), StorageError, "memory.json"),
    (lambda d: _put(d, MANIFEST_FILE + "/x", b""), StorageError, "memory.json"),
    (lambda d: _put(d, EMBEDDING_CACHE_FILE, b"\x00garbage" * 512), StorageError, "cache"),
    (lambda d: _put(d, STORE_FILE, b"\x00garbage" * 512), StorageError, "L0"),
    (
        lambda d: _put(d, CHROMA_DIR, b"a file where Chroma keeps a directory"),
        StorageError,
        "Chroma",
    ),
    (lambda d: _put(d, LOCK_FILE + "/x", b""), StorageError, "lock"),
]


@pytest.mark.usefixtures("warm")
@pytest.mark.parametrize(("arrange", "error", "message"), _BROKEN)
def test_a_failed_open_is_typed_and_leaves_nothing_open(
    tmp_path: Path, arrange: Any, error: type[Exception], message: str
) -> None:
    where = tmp_path / "memory"
    where.mkdir()
    target = arrange(where) or where
    before = _descriptors()
    with pytest.raises(error, match=message):
        Memory.open(target, embedder=HashEmbedder(64))
    assert _descriptors() == before
    assert not (where / LOCK_FILE).is_file() or holder_pid(where) is None  # released


def _put(directory: Path, name: str, data: bytes) -> Path:
    path = directory / name
    path.parent.mkdir(parents=True, exist_ok=True)
    if name.endswith("/x"):
        return directory
    path.write_bytes(data)
    return directory


@pytest.mark.parametrize("config", [{"embedder": "hash"}, "hash", 3, MemoryConfig, StoreConfig()])
def test_a_config_of_the_wrong_type_is_named(tmp_path: Path, config: object) -> None:
    with pytest.raises(InvalidInputError, match="config must be a MemoryConfig"):
        Memory.open(tmp_path, config=config)  # type: ignore[arg-type]
    assert list(tmp_path.iterdir()) == []  # nothing was written


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"embedder": "hash"}, "embedder must"),
        ({"summarizer": len}, "summarizer must"),
        ({"engines": "no"}, "engines must"),
    ],
)
def test_other_arguments_of_the_wrong_type_are_named(
    tmp_path: Path, kwargs: dict[str, Any], message: str
) -> None:
    with pytest.raises(InvalidInputError, match=message):
        Memory.open(tmp_path, **kwargs)


def test_a_fixed_directory_opens_after_a_failed_open(tmp_path: Path) -> None:
    (tmp_path / EMBEDDING_CACHE_FILE).write_bytes(b"not a database at all" * 100)
    with pytest.raises(StorageError, match="embedding cache"):
        Memory.open(tmp_path, embedder=HashEmbedder(64))
    (tmp_path / EMBEDDING_CACHE_FILE).unlink()
    with Memory.open(tmp_path, embedder=HashEmbedder(64)) as memory:  # the lock was released
        memory.store.put({"@id": "urn:ok", "text": "opened after the repair"})


_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3)
    ),
    max_leaves=6,
)
_NAMES = st.text(
    st.characters(blacklist_categories=("Cs",), blacklist_characters="/\x00"),
    min_size=1,
    max_size=12,
).filter(lambda name: name not in (".", ".."))


@st.composite
def _odd_open(draw: st.DrawFn) -> tuple[Any, Any, Any, Any, Any]:
    """A path (relative to a fresh directory), a manifest, a config, a cache file, a store file."""
    kind = draw(st.sampled_from(["name", "nested", "file", "under-file", "odd"]))
    name = draw(_NAMES)
    path: Any = {"name": name, "nested": f"{name}/{draw(_NAMES)}", "file": "a-file"}.get(kind)
    if kind == "under-file":
        path = f"a-file/{name}"
    if kind == "odd":
        path = draw(st.sampled_from(["", "x\x00y", b"bytes", 7, None, "x" * 300, object()]))
    manifest = draw(
        st.none() | _JSON.map(lambda v: json.dumps(v).encode()) | st.binary(max_size=40)
    )
    config = draw(st.sampled_from([None, MemoryConfig(embedder="hash"), {"embedder": "hash"}, 1]))
    cache = draw(st.none() | st.binary(max_size=200))
    store = draw(st.none() | st.binary(max_size=200))
    return path, manifest, config, cache, store


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@pytest.mark.usefixtures("warm")
@given(case=_odd_open())
def test_open_either_opens_or_raises_a_gliding_error(case: tuple[Any, ...]) -> None:
    path, manifest, config, cache, store = case
    with tempfile.TemporaryDirectory() as scratch:
        root = Path(scratch)
        (root / "a-file").write_text("a file, not a directory")
        target = root / path if isinstance(path, str) and path else path
        usable = isinstance(path, str) and path and "\x00" not in path and len(path) < 255
        if usable and target.parent.is_dir() and not target.exists():
            target.mkdir()
            for name, data in ((MANIFEST_FILE, manifest), (EMBEDDING_CACHE_FILE, cache)):
                if data is not None:
                    (target / name).write_bytes(data)
            if store is not None:
                (target / STORE_FILE).write_bytes(store)
        before = _descriptors()
        try:
            memory = Memory.open(target, config=config, embedder=HashEmbedder(32))
        except GlidingError:
            pass
        else:
            with memory:
                memory.store.put({"@id": "urn:probe", "text": "an odd open worked"})
                assert memory.search("odd open", 1)[0].iri == "urn:probe"
        assert _descriptors() == before
