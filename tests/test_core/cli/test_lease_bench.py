"""The lease benchmark (``bench blackboard``'s lease figures): its three figures, its errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from gliding_core.blackboard.coordination.leases import LeaseTable
from gliding_core.blackboard.coordination.sqlite import CoordinationDB
from gliding_core.cli.benchmarks.leases import contended_grants, lease_benchmark
from gliding_core.errors import InvalidInputError, StorageError


def test_the_lease_benchmark_reports_its_three_figures(tmp_path: Path) -> None:
    figures = lease_benchmark(tmp_path, processes=2, seconds=0.2, samples=20)
    assert set(figures) == {
        "acquire_release_p50_ms",
        "acquire_release_p95_ms",
        "contended_grants_per_s",
    }
    assert 0 < figures["acquire_release_p50_ms"] <= figures["acquire_release_p95_ms"]
    assert figures["contended_grants_per_s"] > 0
    with CoordinationDB(tmp_path / "blackboard.sqlite3") as db:
        assert LeaseTable(db).leases() == []  # every grant was released


def test_a_failing_benchmark_process_is_reported_with_its_error(tmp_path: Path) -> None:
    with pytest.raises(StorageError, match="lease benchmark process failed"):
        contended_grants(tmp_path / "missing" / "blackboard.sqlite3", 1, 0.1)


@pytest.mark.parametrize(
    "kwargs", [{"processes": 0}, {"samples": True}, {"seconds": 0}, {"seconds": "1"}]
)
def test_the_lease_benchmark_refuses_bad_arguments(
    tmp_path: Path, kwargs: dict[str, object]
) -> None:
    with pytest.raises(InvalidInputError):
        lease_benchmark(tmp_path, **kwargs)  # type: ignore[arg-type]
