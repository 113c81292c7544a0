"""`gliding-horse bench blackboard`: the figures docs/benchmarks.md quotes, and the JSON shape."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from gliding_core.cli import main
from gliding_core.cli.benchmarks import blackboard
from gliding_core.errors import ConfigError


def test_the_json_has_the_promised_shape(tmp_path: Path) -> None:
    out = io.StringIO()
    target = tmp_path / "figures.json"
    code = main(
        [
            "bench",
            "blackboard",
            "--nodes",
            "32",
            "--construct-nodes",
            "200",
            "--queries",
            "5",
            "--lease-seconds",
            "0.2",
            "--repeats",
            "2",
            "--json",
            str(target),
        ],
        out,
    )
    assert code == 0
    figures = json.loads(target.read_text())
    assert set(figures) == {"backends", "leases", "flush_per_s"}
    assert set(figures["backends"]) == {"memory", "disk", "server"}
    for backend in figures["backends"].values():
        assert set(backend["agents"]) == {"1", "4", "16"}
        for run in backend["agents"].values():
            assert run["writes_per_s"] > 0
            assert len(run["writes_per_s_runs"]) == 2
            assert min(run["writes_per_s_runs"]) <= run["writes_per_s"]
            assert run["writes_per_s"] <= max(run["writes_per_s_runs"])
            assert run["batched_writes_per_s"] > 0
            assert run["reads_per_s"] > 0
            assert run["reads_miss_per_s"] > 0
            assert 0 <= run["write_writer_switches"] <= run["write_switches"] + 1  # (rounded)
        assert backend["baseline_writes_per_s"] > 0
        assert len(backend["baseline_writes_per_s_runs"]) == 2
        for hops in ("1hop", "2hop"):
            assert 0 < backend[f"construct_{hops}_p50_ms"] <= backend[f"construct_{hops}_p95_ms"]
    assert set(figures["leases"]) == {
        "acquire_release_p50_ms",
        "acquire_release_p95_ms",
        "contended_grants_per_s",
    }
    assert figures["flush_per_s"] > 0
    assert "CONSTRUCT" in out.getvalue()
    assert "writes/s (10 a call)" in out.getvalue()


def test_an_unknown_backend_is_refused() -> None:
    with pytest.raises(ConfigError, match="'cloud'"):
        blackboard.run(backends=["cloud"])


@pytest.mark.parametrize("repeats", [0, -1, 1.5, True, "3"])
def test_a_bad_repeat_count_is_refused(repeats: object) -> None:
    with pytest.raises(ConfigError, match="repeats"):
        blackboard.run(backends=["memory"], repeats=repeats)  # type: ignore[arg-type]
