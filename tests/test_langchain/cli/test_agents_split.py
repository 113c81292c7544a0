"""``bench agents --processes``: gliding's agents on one PostgreSQL memory in 2 and 4 processes."""

from __future__ import annotations

import io
import json
from typing import Any

import pytest

from gliding_core.cli import main
from gliding_core.errors import InvalidInputError
from gliding_langchain.cli import agents_bench as bench
from gliding_langchain.cli.agents_split import SPLITS, Shared

SAME = ("tokens_per_task", "tokens_per_call_mean", "tokens_per_call_p95", "model_calls", "writes")


@pytest.fixture(scope="module")
def figures(postgres_url: str, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """One tiny run through the command: the embedded baseline, 1, 2 and 4 processes."""
    target = tmp_path_factory.mktemp("agents") / "agents.json"
    out = io.StringIO()
    code = main(
        ["bench", "agents", "--tasks", "1", "--seed", "0", "--methods", "gliding",
         "--processes", "1,2,4", "--database-url", postgres_url, "--json", str(target)],
        out=out,
    )  # fmt: skip
    assert code == 0, out.getvalue()
    assert "gliding/pg/4p" in out.getvalue()
    found: dict[str, Any] = json.loads(target.read_text())
    return found


def test_two_and_four_processes_take_the_tokens_and_reach_the_correctness_of_one(
    figures: dict[str, Any],
) -> None:
    methods = figures["methods"]
    names = ("gliding/pg/1p", "gliding/pg/2p", "gliding/pg/4p")
    one, two, four = (methods[name] for name in names)
    assert (one["processes"], two["processes"], four["processes"]) == (1, 2, 4)
    for name in names:
        found = methods[name]
        assert found["tasks_correct"] == 1, figures["problems"][name]
        assert found["stale_reads"] == 0
        assert found["refused_writes"] == 0
    # The same views call for call: a process sees the others' writes before its next turn
    # (with 4, every agent's writes reach three other processes).
    assert {k: two[k] for k in SAME} == {k: one[k] for k in SAME}
    assert {k: four[k] for k in SAME} == {k: one[k] for k in SAME}
    assert {k: one[k] for k in SAME} == {k: methods["gliding"][k] for k in SAME}
    assert figures["processes"] == [1, 2, 4]
    assert not {"gliding/pg/2p", "gliding/pg/4p"} & set(figures["gliding_vs_best_other"])


def test_a_split_the_harness_has_not_is_refused_before_anything_runs() -> None:
    assert set(SPLITS) == {1, 2, 4}
    with pytest.raises(InvalidInputError, match="3"):
        bench.run(tasks=1, methods=["gliding"], processes=[3], database_url="postgresql:///x")


def test_the_database_url_stays_out_of_the_workers_settings_repr() -> None:
    shared = Shared("postgresql://bench:s3cret@localhost/db", "s", "http://x", 1, 0.5, True)
    assert "s3cret" not in repr(shared)


def test_a_worker_that_cannot_open_the_memory_is_a_typed_error(postgres_url: str) -> None:
    from gliding_core.cli.benchmarks import agents as work
    from gliding_langchain.cli.agents_split import BenchWorkerError, run_split

    if "/postgres?" not in postgres_url:  # a server of the user's: its URL has another form
        pytest.skip("the URL names no database this test knows how to replace")
    missing = postgres_url.replace("/postgres?", "/no_such_database?")
    with pytest.raises(BenchWorkerError, match="exited"):
        run_split(
            work.generate(1, seed=0),
            processes=2,
            url=missing,
            endpoint="http://127.0.0.1:9",
            schema="bench_agents_missing",
            budget=1_200,
            window_share=0.5,
            economy=True,
        )
