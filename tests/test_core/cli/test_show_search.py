"""``gliding-horse show DIR IRI`` and ``gliding-horse search DIR QUERY``, driven as a user does."""

from __future__ import annotations

import io
import re
from pathlib import Path

import pytest

from gliding_core import Conversation, HashEmbedder, Memory, MemoryConfig, Scope
from gliding_core.cli import main

LARGE = "".join(f"line {i}: the pump reads {i * 3} bar. " for i in range(60_000)) + "finale"


def run(*argv: str) -> tuple[int, str]:
    out = io.StringIO()
    code = main(list(argv), out=out)
    return code, out.getvalue()


@pytest.fixture
def directory(tmp_path: Path) -> Path:
    """A memory directory with a plain entry, a large one, and two users' chats."""
    config = MemoryConfig(embedder="hash")
    with Memory.open(tmp_path, config=config, embedder=HashEmbedder()) as memory:
        memory.store.put(
            {"@id": "urn:note:1", "@type": "Note", "text": "The pump is in the cellar."},
            tags=["plant"],
            named_graph="graph:notes",
            metadata={"source": "walkthrough"},
        )
        memory.store.put_text({"@id": "urn:log:pump", "@type": "Log"}, LARGE)
        for user, text in [("alice", "My pump hums at night"), ("bob", "My pump leaks")]:
            chat = Conversation(memory, scope=Scope.user(user))
            chat.record([{"role": "user", "content": text, "id": f"m-{user}"}])
    return tmp_path


def test_show_prints_an_entry(directory: Path) -> None:
    code, text = run("show", str(directory), "urn:note:1")
    assert code == 0
    for shown in (
        "urn:note:1",
        "Note",
        "plant",
        "graph:notes",
        "The pump is in the cellar.",
        "walkthrough",
        "26 characters (whole)",
    ):
        assert shown in text


def test_show_says_a_large_text_is_in_parts_and_full_prints_it(directory: Path) -> None:
    code, text = run("show", str(directory), "urn:log:pump")
    assert code == 0
    assert f"{len(LARGE):,} characters (kept in parts" in text
    assert "finale" not in text
    code, text = run("show", str(directory), "urn:log:pump", "--full")
    assert code == 0
    assert LARGE in text


def test_show_counts_no_read(directory: Path) -> None:
    run("show", str(directory), "urn:note:1")
    _, text = run("show", str(directory), "urn:note:1")
    assert re.search(r"^reads +0$", text, re.MULTILINE)


def test_search_finds_every_entry_or_one_users(directory: Path) -> None:
    code, text = run("search", str(directory), "pump")
    assert code == 0
    for iri in ("urn:note:1", "urn:log:pump", "My pump hums", "My pump leaks"):
        assert iri in text
    code, text = run("search", str(directory), "pump", "--user", "alice")
    assert code == 0
    assert "My pump hums" in text
    assert "leaks" not in text
    assert "urn:note:1" not in text  # an entry of no scope is no user's
    assert "scope user:alice" in text


def test_search_covers_a_large_text_to_its_end(directory: Path) -> None:
    code, text = run("search", str(directory), "finale")
    assert code == 0
    assert "urn:log:pump" in text


def test_missing_memory_or_entry_fails_cleanly(
    directory: Path, tmp_path_factory: pytest.TempPathFactory, capsys: pytest.CaptureFixture[str]
) -> None:
    empty = tmp_path_factory.mktemp("empty")
    assert run("show", str(empty), "urn:note:1")[0] == 2
    assert "holds no memory" in capsys.readouterr().err
    assert run("search", str(empty), "pump")[0] == 2
    assert run("show", str(directory), "urn:none")[0] == 2
    assert "no entry has the IRI 'urn:none'" in capsys.readouterr().err
    assert run("show", str(directory), "not an iri")[0] == 2  # a typed error, one line
    assert run("search", str(directory), "pump", "--user", "")[0] == 2
