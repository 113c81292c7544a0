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


def test_export_then_import_carries_a_memory_to_a_new_directory(
    directory: Path, tmp_path: Path
) -> None:
    out = tmp_path / "out.jsonl"
    code, text = run("export", str(directory), str(out), "--scope", "user:bob")
    assert code == 0
    assert "exported 2 entries" in text  # bob's turn and his L1 session's state
    copy = tmp_path / "copy"
    code, text = run("import", str(out), str(copy))
    assert code == 0
    assert "imported 2 entries" in text
    assert "vectors kept" in text
    (only,) = _texts(copy)
    assert "Qzbobword" in only


def test_import_of_a_bad_file_names_the_line_and_writes_nothing(
    directory: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out.jsonl"
    assert run("export", str(directory), str(out))[0] == 0
    lines = out.read_text(encoding="utf-8").splitlines()
    out.write_text("\n".join([*lines[:2], "{broken", *lines[2:]]) + "\n", encoding="utf-8")
    copy = tmp_path / "copy"
    code, _ = run("import", str(out), str(copy))
    assert code == 2
    assert "line 3" in capsys.readouterr().err
    assert _texts(copy) == set()
    code, _ = run("import", str(out), str(copy), "--skip-bad")
    assert code == 0
    assert "skipped line 3" in capsys.readouterr().err
    assert len(_texts(copy)) == 3


def test_export_refuses_a_bad_scope(directory: Path, tmp_path: Path) -> None:
    with pytest.raises(SystemExit):
        run("export", str(directory), str(tmp_path / "o.jsonl"), "--scope", "alice")
