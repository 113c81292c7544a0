"""One owner per memory directory: the lock file, L0-only processes, sharing through a server."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from gliding_core import (
    ConfigError,
    DirectoryInUseError,
    HashEmbedder,
    IndexMismatchError,
    Memory,
    MemoryConfig,
    SearchFilters,
)
from gliding_core.store.ownership import LOCK_FILE, OwnerLock, holder_pid


def _run(script: str, *args: object, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-W", "ignore::ResourceWarning", "-c", script, *map(str, args)],
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def _found_by_both_arms(memory: Memory, iri: str, text: str) -> bool:
    ranked = memory.hyperspace.arms(text, 10, SearchFilters())
    return all(iri in {found for found, _ in ranked[arm]} for arm in ("lexical", "dense"))


SECOND_OWNER = """
import sys
from gliding_core import DirectoryInUseError, HashEmbedder, Memory
try:
    Memory.open(sys.argv[1], embedder=HashEmbedder(64))
except DirectoryInUseError as exc:
    print(exc.pid)
    print(exc)
"""


def test_a_second_full_open_fails_typed_and_leaves_the_owner_untouched(tmp_path: Path) -> None:
    with Memory.open(tmp_path, embedder=HashEmbedder(64)) as owner:
        owner.store.put({"@id": "urn:before", "text": "written by the owner first"})
        result = _run(SECOND_OWNER, tmp_path)
        pid, message = result.stdout.split("\n", 1)
        assert int(pid) == os.getpid()
        assert f"process {os.getpid()}" in message
        assert "engines=False" in message
        assert "chroma_host" in message
        assert holder_pid(tmp_path) == os.getpid()
        owner.store.put({"@id": "urn:after", "text": "written by the owner after"})
        assert _found_by_both_arms(owner, "urn:before", "written by the owner first")
        assert _found_by_both_arms(owner, "urn:after", "written by the owner after")
    assert holder_pid(tmp_path) is None  # released on close


def test_a_second_open_in_the_same_process_is_refused(tmp_path: Path) -> None:
    with Memory.open(tmp_path, embedder=HashEmbedder(64)):
        with pytest.raises(DirectoryInUseError, match="this process") as caught:
            Memory.open(tmp_path, embedder=HashEmbedder(64))
        assert caught.value.pid == os.getpid()
    with Memory.open(tmp_path, embedder=HashEmbedder(64)) as again:  # free after close
        assert again.owner is not None
        assert again.owner.held


DYING_OWNER = """
import os, signal, sys
from gliding_core import HashEmbedder, Memory
memory = Memory.open(sys.argv[1], embedder=HashEmbedder(64))
memory.store.put({"@id": "urn:dead", "text": "the owner died holding the lock"})
os.kill(os.getpid(), signal.SIGKILL)
"""


def test_the_lock_dies_with_its_process(tmp_path: Path) -> None:
    assert _run(DYING_OWNER, tmp_path).returncode == -9
    with Memory.open(tmp_path, embedder=HashEmbedder(64)) as memory:
        assert memory.store.count() == 1
        assert _found_by_both_arms(memory, "urn:dead", "the owner died holding the lock")


def test_the_lock_file_alone(tmp_path: Path) -> None:
    lock = OwnerLock.acquire(tmp_path)
    with pytest.raises(DirectoryInUseError):
        OwnerLock.acquire(tmp_path)
    lock.release()
    lock.release()  # twice is harmless
    with OwnerLock.acquire(tmp_path) as again:
        assert again.held
        assert (tmp_path / LOCK_FILE).read_text().strip() == str(os.getpid())
    assert not again.held


L0_WRITER = """
import sys
from gliding_core import ConfigError, HashEmbedder, Memory
with Memory.open(sys.argv[1], embedder=HashEmbedder(64), engines=False) as memory:
    assert memory.owner is None
    memory.store.put_many(
        [{"@id": f"urn:web:{i}", "text": f"supplied by the web handler {i}"} for i in range(40)]
    )
    memory.store.delete("urn:owner:0")
    hits = memory.search("supplied web handler 7", 3)
    try:
        memory.index
    except ConfigError:
        print("no index")
    print(",".join(hits.arms), hits[0].iri if hits else None)
"""


def test_an_l0_only_process_writes_while_the_owner_runs(tmp_path: Path) -> None:
    with Memory.open(tmp_path, embedder=HashEmbedder(64)) as owner:
        owner.store.put_many(
            [{"@id": f"urn:owner:{i}", "text": f"kept by the owner {i}"} for i in range(5)]
        )
        result = _run(L0_WRITER, tmp_path)
        assert result.returncode == 0, result.stderr
        assert result.stdout.split("\n")[:2] == ["no index", "lexical urn:web:7"]
        hits = owner.search("supplied by the web handler 12", 5)
        assert hits.index_behind == 0
        assert hits.arms == ("lexical", "dense")
        for i in range(40):
            assert _found_by_both_arms(owner, f"urn:web:{i}", f"supplied by the web handler {i}")
        assert "urn:owner:0" not in {iri for iri, _ in owner.index.query("kept by the owner 0", 5)}
        assert owner.index.count() == 44


def test_an_l0_only_memory_says_its_search_is_lexical(tmp_path: Path) -> None:
    with Memory.open(tmp_path, embedder=HashEmbedder(64), engines=False) as memory:
        memory.store.put({"@id": "urn:a", "text": "lexical only here"})
        hits = memory.search("lexical", 3)
        assert hits.arms == ("lexical",)
        assert [h.iri for h in hits] == ["urn:a"]
        with pytest.raises(ConfigError, match="engines=False"):
            _ = memory.index
        assert not (tmp_path / "chroma").exists()
        with Memory.open(tmp_path, embedder=HashEmbedder(64)) as owner:  # not locked by it
            assert _found_by_both_arms(owner, "urn:a", "lexical only here")


SERVER_WRITER = """
import sys
from gliding_core import HashEmbedder, Memory, MemoryConfig
path, port, name = sys.argv[1], int(sys.argv[2]), sys.argv[3]
config = MemoryConfig(chroma_host="127.0.0.1", chroma_port=port)
with Memory.open(path, config=config, embedder=HashEmbedder(64)) as memory:
    for i in range(30):
        memory.store.put({"@id": f"urn:{name}:{i}", "text": f"{name} wrote entry {i}"})
    print(memory.search(f"{name} wrote entry 3", 1)[0].iri)
"""
NAMES = ("alpha", "beta", "gamma")


def _write(memory: Memory, name: str) -> None:
    for i in range(30):
        memory.store.put({"@id": f"urn:{name}:{i}", "text": f"{name} wrote entry {i}"})


def test_three_processes_share_one_memory_through_a_chroma_server(
    tmp_path: Path, chroma_server: int
) -> None:
    config = MemoryConfig(chroma_host="127.0.0.1", chroma_port=chroma_server)
    writers = [
        subprocess.Popen(
            [
                sys.executable,
                "-W",
                "ignore::ResourceWarning",
                "-c",
                SERVER_WRITER,
                str(tmp_path),
                str(chroma_server),
                name,
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for name in NAMES[1:]
    ]
    # This process is the third writer, at the same time as the other two.
    with Memory.open(tmp_path, config=config, embedder=HashEmbedder(64)) as memory:
        assert memory.owner is None  # a server memory owns no embedded engine
        _write(memory, NAMES[0])
        for name, writer in zip(NAMES[1:], writers, strict=True):
            out, err = writer.communicate(timeout=180)
            assert writer.returncode == 0, err
            assert out.strip() == f"urn:{name}:3"
        for name in NAMES:
            for i in range(30):
                assert _found_by_both_arms(memory, f"urn:{name}:{i}", f"{name} wrote entry {i}")
        assert memory.index.count() == 90
    with pytest.raises(IndexMismatchError, match="hash-64"):  # never deletes the collection
        Memory.open(tmp_path, config=config, embedder=HashEmbedder(128))
    with Memory.open(tmp_path, config=config, embedder=HashEmbedder(64)) as again:
        assert again.index.count() == 90
        with Memory.open(tmp_path / "other", config=config, embedder=HashEmbedder(128)) as other:
            other.store.put({"@id": "urn:other", "text": "another memory on the same server"})
            assert other.index.count() == 1  # its own collection
            assert other.index.name != again.index.name
        assert again.index.count() == 90
