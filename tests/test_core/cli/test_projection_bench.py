"""`gliding-horse bench projection` and `bench prefetch`, at small sizes: shape and sense."""

from __future__ import annotations

import io
import json
import random
from pathlib import Path

from gliding_core.cli import main
from gliding_core.cli.benchmarks import prefetch, projection
from gliding_core.projection import SHIPPED


def test_bench_projection_json_shape(tmp_path: Path) -> None:
    out = io.StringIO()
    target = tmp_path / "projection.json"
    argv = ["bench", "projection", "--nodes", "60,120", "--repeat", "2", "--views", "10,300"]
    argv += ["--changes", "200"]
    assert main([*argv, "--json", str(target)], out=out) == 0
    figures = json.loads(target.read_text())
    assert set(figures["frames"]) == {f.name for f in SHIPPED}
    for frame in figures["frames"].values():
        assert frame["cached_p95_ms"] >= 0
        assert frame["cold_p95_ms"] >= frame["cold_p50_ms"]
        assert set(frame["by_nodes"]) == {"60", "120"}
    for key in ("invalidation_us", "invalidation_p95_us", "invalidation_hot_us"):
        assert set(figures[key]) == {"10", "300"}
        assert all(us > 0 for us in figures[key].values())
    assert 0.5 < figures["budget_fit_share"] <= 1.0
    assert figures["tokens_mean"] < figures["raw_tokens_mean"]
    assert "L3 frame latency" in out.getvalue()


def test_synthetic_tasks_have_every_frame_something() -> None:
    nodes = projection.task_nodes("urn:ex:t", 200, random.Random(1))
    assert sum(len(v) for v in nodes.values()) == 200
    assert {"tasks", "plan", "execution", "review", "decision", "knowledge"} <= set(nodes)


def test_bench_prefetch_json_shape(tmp_path: Path) -> None:
    out = io.StringIO()
    target = tmp_path / "prefetch.json"
    argv = ["bench", "prefetch", "--tasks", "2", "--entities", "20", "--steps", "3"]
    assert main([*argv, "--think", "1", "--json", str(target)], out=out) == 0
    figures = json.loads(target.read_text())
    off, on = figures["without_prefetch"], figures["with_prefetch"]
    assert off["prefetched"] == 0
    assert off["reads"] == on["reads"] == 6
    assert on["needed"] == off["needed"]
    assert on["hit_rate"] >= off["hit_rate"]
    assert 0 < on["prefetched"] <= 5 * 6
    assert "with_prefetch" in out.getvalue()


def test_the_trace_is_seeded() -> None:
    first = prefetch.trace(2, 15, 3, 3, random.Random(4))
    second = prefetch.trace(2, 15, 3, 3, random.Random(4))
    assert first == second
    _, plan = first
    assert all(len(named) == 2 for _, _, named, _ in plan)
    assert all(not set(named) & set(needed) for _, _, named, needed in plan)
