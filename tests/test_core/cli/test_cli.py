"""The ``gliding-horse`` command, driven the way a user drives it."""

from __future__ import annotations

import io
import json
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from gliding_core.cli import main


def run(*argv: str) -> tuple[int, str]:
    out = io.StringIO()
    code = main(list(argv), out=out)
    return code, out.getvalue()


def test_demo_shows_merge_queries_search_and_neighbours() -> None:
    code, text = run("demo")
    assert code == 0
    for heading in (
        "Merge",
        "Tags: backend AND checkout",
        "Named graph",
        "Type Person",
        "Text search",
        "Neighbours",
        "Tokens",
    ):
        assert heading in text
    assert "security, backend, pci" in text  # tags united by the merge
    assert "decision/idempotency" in text
    # The LangChain part ends the demo: budgeted model calls, the note, the recalled fact.
    assert "LangChain agent on the memory" in text
    assert "arrives" in text
    assert "Your booking reference is QX-4471." in text
    # ... then four role agents on one task hand over through the blackboard.
    assert "handovers: plan -> do -> check -> act; final board correct: yes" in text
    assert "the note sent while the doer worked reached: do (1 agent" in text


def test_inspect_shows_tables_of_a_memory_directory(tmp_path: Path) -> None:
    assert run("demo", "--path", str(tmp_path))[0] == 0
    code, text = run("inspect", str(tmp_path), "--recent", "1000")
    assert code == 0
    assert "entries" in text
    assert "10" in text
    assert "graph:decisions" in text
    assert "embedder" in text
    assert "local:all-MiniLM-L6-v2" in text or "hash-256" in text
    assert "Person" in text
    assert "urn:demo:decision/postgres" in text


def test_inspect_of_a_directory_without_memory_fails_cleanly(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _ = run("inspect", str(tmp_path / "nothing"))
    assert code == 2
    assert "holds no memory" in capsys.readouterr().err


def test_bench_l0_prints_and_writes_figures(tmp_path: Path) -> None:
    out = tmp_path / "l0.json"
    code, text = run("bench", "l0", "--entries", "500", "--queries", "50", "--json", str(out))
    assert code == 0
    figures = json.loads(out.read_text())
    assert figures["entries"] == 500
    assert figures["batched_put_per_s"] > 0
    assert figures["tag_query_hits_mean"] == 100
    for key in ("get_p95_ms", "tag_query_p95_ms", "text_search_p95_ms", "peak_rss_mb"):
        assert key in text


def test_bench_l0_on_postgresql_runs_beside_sqlite(tmp_path: Path, postgres_url: str) -> None:
    out = tmp_path / "l0.json"
    code, text = run(
        *("bench", "l0", "--entries", "500", "--queries", "50", "--backend", "postgresql"),
        *("--database-url", postgres_url, "--json", str(out)),
    )
    assert code == 0
    figures = json.loads(out.read_text())
    for backend in ("sqlite", "postgresql"):
        assert figures[backend]["entries"] == 500
        assert figures[backend]["tag_query_hits_mean"] == 100
        assert figures[backend]["batched_put_per_s"] > 0
    assert "pg/sqlite" in text
    assert postgres_url not in text
    with psycopg.connect(postgres_url) as conn:  # the benchmark's schema is dropped
        left = conn.execute("SELECT count(*) FROM pg_namespace WHERE nspname LIKE 'bench_%'")
        assert left.fetchone() == (0,)


def test_bench_l0_readers_prints_a_row_per_reader_count(tmp_path: Path) -> None:
    out = tmp_path / "readers.json"
    code, text = run(
        "bench", "l0", "--entries", "300", "--readers", "1,2", "--seconds", "1", "--json", str(out)
    )
    assert code == 0
    figures = json.loads(out.read_text())
    assert list(figures["readers"]) == ["1", "2"]
    for phase in figures["readers"].values():
        assert phase["reads_per_s"] > 0
        assert phase["get_p95_ms"] >= phase["get_p50_ms"] > 0
    assert figures["readers"]["1"]["reads_per_s_vs_first"] == 1.0
    assert set(figures["get_during_held_write_ms"]) == {"median", "max"}
    assert "get while another thread holds" in text
    assert "search p95 ms" in text


@pytest.mark.parametrize("readers", [[], ["--readers", "1"]])
def test_bench_l0_refuses_an_unwritable_output_before_running(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], readers: list[str]
) -> None:
    missing = tmp_path / "no" / "such" / "l0.json"
    code, text = run("bench", "l0", "--entries", "100000", *readers, "--json", str(missing))
    assert (code, text) == (2, "")
    assert str(missing) in capsys.readouterr().err
    code, _ = run("bench", "l0", "--entries", "100000", "--json", str(tmp_path))
    assert code == 2


def test_bad_numbers_are_rejected_by_the_parser(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(["bench", "l0", "--entries", "zero"])
    assert info.value.code == 2
    assert "positive integer" in capsys.readouterr().err


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as stop:
        run("--version")
    assert stop.value.code == 0
    assert capsys.readouterr().out.startswith("gliding-horse 0.")


def test_help_shows_defaults(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        run("bench", "search", "--help")
    assert "(default: 10000)" in capsys.readouterr().out


@pytest.mark.parametrize("where", ["missing/figures.json", "."])
def test_an_unwritable_output_path_is_refused_before_the_run(
    where: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    target = tmp_path / where
    code, text = run(
        "bench", "poincare", "--edges", str(tmp_path / "none.tsv"), "--json", str(target)
    )
    assert code == 2
    assert text == ""
    assert "--json" in capsys.readouterr().err


def test_every_option_has_help_and_shows_its_default() -> None:
    """Each option of each subcommand explains itself in --help (its default included)."""
    import argparse

    from gliding_core.cli.command import _parser

    def walk(parser: argparse.ArgumentParser) -> Iterator[tuple[str, argparse.Action]]:
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for name, child in action.choices.items():
                    yield from ((f"{name} {n}", a) for n, a in walk(child))
            elif action.option_strings and action.dest not in ("help", "version"):
                yield action.option_strings[-1], action

    missing = [name for name, action in walk(_parser()) if not action.help]
    assert missing == []
