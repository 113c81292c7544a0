"""`gliding-horse bench coherence`: the traces are the peer's, the figures have the shape
docs/benchmarks.md quotes, and on a short run the targets hold."""

from __future__ import annotations

import io
import json
import warnings
from pathlib import Path
from typing import Any

import pytest

from gliding_core.cli import main
from gliding_core.cli.benchmarks import coherence
from gliding_core.tokens import TokenCounter

pytest.importorskip("ccs", reason="agent-coherence is in the bench extra")


@pytest.fixture(scope="module")
def counter() -> TokenCounter:
    return TokenCounter()


@pytest.fixture(scope="module")
def figures(counter: TokenCounter) -> dict[str, Any]:
    return coherence.run(seeds=2, write_probabilities=[0.25], counter=counter)


def test_the_trace_draws_the_actions_the_peer_draws() -> None:
    from ccs.simulation.engine import SimulationEngine

    config = {
        "simulation": {"num_agents": 4, "duration_ticks": 40, "seed": 1},
        "scenario": {
            "name": "canonical",
            "workload": "custom",
            "action_probability": 0.75,
            "write_probability": 0.25,
        },
        "network": {"latency_ticks": 1, "message_loss_rate": 0.0},
        "artifacts": [{"id": n, "size_tokens": 4096} for n in coherence.ARTIFACTS],
    }
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        metrics = SimulationEngine(config, strategy_name="lazy", seed=7).run()
    drawn = coherence.actions(7, 0.25)
    assert (metrics.total_actions, metrics.write_actions) == (
        len(drawn),
        sum(1 for *_, is_write in drawn if is_write),
    )


def test_structured_artifacts_are_forty_properties_of_4096_tokens(counter: TokenCounter) -> None:
    initial, steps = coherence.trace(3, 0.5, structured=True, counter=counter)
    for node in initial:
        assert len([k for k in node if not k.startswith("@")]) == coherence.PROPERTIES
        assert counter.count(coherence.canonical_json(node)) == coherence.ARTIFACT_TOKENS
    writes = [s for s in steps if s.value is not None]
    assert writes
    values = list(initial)
    for step in writes:
        old, values[step.artifact] = values[step.artifact], step.value
        assert step.value is not None
        assert 1 <= sum(1 for k in old if old[k] != step.value[k]) <= 4


def test_the_figures_have_the_issue_shape_and_meet_the_targets(figures: dict[str, Any]) -> None:
    workloads = figures["workloads"]
    assert set(workloads) == {"canonical-0.25", "structured-0.25"}
    for name, workload in workloads.items():
        assert workload["baseline"] > 0
        ours, lazy = workload["gliding"], workload["agent-coherence-lazy"]
        for strategy in coherence.STRATEGIES:
            assert {"tokens", "stale_reads"} <= set(workload[f"agent-coherence-{strategy}"])
        assert ours["stale_reads"] == 0
        parts = ours["whole_tokens"] + ours["change_tokens"] + ours["signals_tokens"]
        assert ours["tokens"] == pytest.approx(parts)
        limit = 1.02 if name.startswith("canonical") else 0.5
        assert ours["tokens"] <= limit * lazy["tokens"], name
    assert workloads["canonical-0.25"]["baseline"] == 1_966_080
    assert figures["read_path"]["sqlite_hit_per_s"] > 0


def test_the_command_writes_the_json(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, figures: dict[str, Any]
) -> None:
    monkeypatch.setattr(coherence, "run", lambda **_: figures)
    out = io.StringIO()
    assert (
        main(["bench", "coherence", "--seeds", "2", "--json", str(tmp_path / "c.json")], out) == 0
    )
    assert json.loads((tmp_path / "c.json").read_text()) == json.loads(json.dumps(figures))
    assert "Coherence structured-0.25" in out.getvalue()
    assert "agent-coherence-lazy" in out.getvalue()
