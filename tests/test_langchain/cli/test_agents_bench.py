"""``gliding-horse bench agents``: four create_agent agents sharing state four ways, tiny runs."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest

from gliding_core.cli import main
from gliding_core.cli.benchmarks import agents as work
from gliding_core.errors import InvalidInputError
from gliding_core.framing import PER_MESSAGE, ChatFraming
from gliding_core.tokens import TokenCounter
from gliding_langchain.cli import agents_bench as bench

KEYS = {"tokens_per_call_mean", "tokens_per_call_p95", "tokens_per_task", "stale_reads"}


@pytest.fixture(scope="module")
def figures() -> dict[str, Any]:
    return bench.run(tasks=2, seed=1)


def test_every_method_reports_the_figures_of_the_json_shape(figures: dict[str, Any]) -> None:
    assert set(figures["methods"]) == set(bench.METHODS)
    for name, method in figures["methods"].items():
        assert KEYS | {"tasks_correct"} <= set(method), name
        assert method["tokens_per_call_p95"] >= method["tokens_per_call_mean"] > 0
        assert method["tasks_correct"] == 2, figures["problems"][name]


def test_gliding_meets_its_targets(figures: dict[str, Any]) -> None:
    gliding = figures["methods"]["gliding"]
    assert gliding["stale_reads"] == 0
    assert gliding["tasks_correct"] == figures["tasks"]
    assert gliding["tokens_per_call_p95"] <= figures["budget"]  # every view within its budget
    (ratio,) = figures["gliding_vs_best_other"].values()
    assert ratio <= 0.5


def test_store_agents_acting_on_what_they_read_earlier_make_stale_reads(
    figures: dict[str, Any],
) -> None:
    # A store agent works through what it read; a commit in between makes its act stale.
    assert figures["methods"]["langgraph-store"]["stale_reads"] > 0
    # The whole history is always current: nothing stale, but every call carries all of it.
    shared = figures["methods"]["shared-history"]
    assert shared["stale_reads"] == 0
    assert shared["tokens_per_task"] > 2 * figures["methods"]["gliding"]["tokens_per_task"]


def test_the_peer_answers_hits_by_reference_so_it_costs_less_than_the_plain_store(
    figures: dict[str, Any],
) -> None:
    plain, peer = figures["methods"]["langgraph-store"], figures["methods"]["agent-coherence"]
    assert peer["model_calls"] == plain["model_calls"]  # the same work
    assert peer["tokens_per_task"] < plain["tokens_per_task"]


def test_a_run_repeats() -> None:
    first = bench.run(tasks=1, seed=5, methods=["shared-history", "gliding"])
    again = bench.run(tasks=1, seed=5, methods=["shared-history", "gliding"])
    shared, repeated = (run["methods"]["shared-history"] for run in (first, again))
    assert shared.pop("wall_s") > 0  # the one figure measured, not counted
    repeated.pop("wall_s")
    assert shared == repeated
    one, two = first["methods"]["gliding"], again["methods"]["gliding"]
    for key in ("model_calls", "writes", "stale_reads", "tasks_correct"):
        assert one[key] == two[key]
    # L0 stamps entries with the wall clock, which can reorder two turns of one L1 context
    # (a token or two in a task of thousands); the work itself repeats exactly.
    assert abs(one["tokens_per_task"] - two["tokens_per_task"]) <= 0.001 * one["tokens_per_task"]


def test_tokens_are_counted_on_what_the_model_received() -> None:
    task = work.generate(1, seed=0)[0]
    recorder = bench.Recorder()
    method = bench.GlidingMethod(recorder, budget=900)
    try:
        total = bench.run_task(method, task, recorder, ChatFraming(TokenCounter()))
        assert work.check_task(task, method.final_state(task)) == []
        views = {role: list(middleware.views) for role, middleware in method.views.items()}
    finally:
        method.close()
    assert total == sum(recorder.calls)
    for role, calls in recorder.by_role.items():
        assert len(calls) == len(views[role])
        for view, tokens in zip(views[role], calls, strict=True):
            # The model got the view, with the memory text joined to its system message (one
            # message's framing less than the view's separate memory message).
            assert 0 <= view.tokens - tokens <= PER_MESSAGE + 1
            assert tokens <= 900


def test_an_unknown_method_is_refused() -> None:
    with pytest.raises(InvalidInputError, match="no method 'nope'"):
        bench.run(tasks=1, methods=["nope"])


def test_the_command_prints_the_table_and_writes_the_json(tmp_path: Path) -> None:
    path = tmp_path / "agents.json"
    out = io.StringIO()
    code = main(
        ["bench", "agents", "--tasks", "1", "--methods", "langgraph-store,gliding", "--json",
         str(path)],
        out=out,
    )  # fmt: skip
    assert code == 0
    assert "Multi-agent sharing" in out.getvalue()
    assert "gliding tokens per task / langgraph-store's" in out.getvalue()
    written = json.loads(path.read_text())
    assert set(written["methods"]) == {"langgraph-store", "gliding"}
    assert set(written["methods"]["gliding"]) >= KEYS
