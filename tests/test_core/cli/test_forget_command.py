"""``gliding-horse forget``: asks on a terminal, needs --yes elsewhere, and forgets for good."""

from __future__ import annotations

import io
import sys
from pathlib import Path

import pytest

from gliding_core import Conversation, HashEmbedder, Memory, MemoryConfig, Scope, TopicConfig
from gliding_core.cli import main

CONFIG = MemoryConfig(topics=TopicConfig(interval_s=0))


def run(*argv: str) -> tuple[int, str]:
    out = io.StringIO()
    code = main(list(argv), out=out)
    return code, out.getvalue()


@pytest.fixture
def directory(tmp_path: Path) -> Path:
    with Memory.open(tmp_path, config=CONFIG, embedder=HashEmbedder()) as memory:
        for user in ("alice", "bob"):
            Conversation(memory, scope=Scope.user(user)).record(
                [{"role": "user", "content": f"{user} says Qz{user}word"}]
            )
        memory.store.put({"@id": "urn:ex:note", "text": "a loose note Qznote"})
    return tmp_path


def _texts(directory: Path) -> set[str]:
    with Memory.open(directory, config=CONFIG, embedder=HashEmbedder(), engines=False) as memory:
        return {text for batch in memory.store.scan_texts() for _, text in batch}


class Terminal(io.StringIO):
    """A terminal's standard input with the user's answer typed in (the edge: a person)."""

    def isatty(self) -> bool:
        return True


def test_forget_with_yes_erases_the_user_and_reports_per_layer(directory: Path) -> None:
    code, text = run("forget", str(directory), "--user", "alice", "--yes")
    assert code == 0
    assert "Forgot user:alice" in text
    assert "L0 entries" in text
    assert "dense vectors" in text
    texts = _texts(directory)
    assert not any("Qzalice" in t for t in texts)
    assert any("Qzbob" in t for t in texts)
    assert not any(b"Qzalice" in p.read_bytes() for p in directory.rglob("*") if p.is_file())


def test_forget_off_a_terminal_without_yes_forgets_nothing(
    directory: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(sys, "stdin", io.StringIO("y\n"))  # a pipe, not a person
    code, _ = run("forget", str(directory), "--user", "alice")
    assert code == 2
    assert "--yes" in capsys.readouterr().err
    assert any("Qzalice" in t for t in _texts(directory))


@pytest.mark.parametrize(("answer", "forgotten"), [("y\n", True), ("n\n", False), ("\n", False)])
def test_forget_on_a_terminal_asks_first(
    directory: Path, monkeypatch: pytest.MonkeyPatch, answer: str, forgotten: bool
) -> None:
    monkeypatch.setattr(sys, "stdin", Terminal(answer))
    with pytest.raises(SystemExit):  # one target at a time
        run("forget", str(directory), "--thread", "nobody", "--iri", "urn:ex:note")
    code, _ = run("forget", str(directory), "--iri", "urn:ex:note")
    assert code == (0 if forgotten else 2)
    assert any("Qznote" in t for t in _texts(directory)) is not forgotten


def test_forget_of_a_directory_without_a_memory_is_an_error(tmp_path: Path) -> None:
    code, _ = run("forget", str(tmp_path / "none"), "--user", "alice", "--yes")
    assert code == 2
    assert not (tmp_path / "none").exists()
