"""L2 coherence: where shared nodes are stored, behind the narrow ``NodeSource`` seam.

The blackboard is the source the coordinator is meant for (``BoardSource`` in
``gliding_core.blackboard.shared_cache``; its writes are committed in batches and groups by
``gliding_core.blackboard.writes``); the two small sources here are complete stores of their
own, used by the tests, the benchmark and any caller that wants coherent copies without a
graph: ``DictNodeSource`` (one process) and ``SQLiteNodeSource`` (a file shared by processes).

Invariants: ``put`` is a compare-and-swap on the generation (a node that has moved past
``expected_generation`` is refused with ``StaleWriteError``, nothing written); a node's
generation starts at 1 and rises by exactly 1 per put; values are stored as canonical JSON,
so what ``get`` returns is a fresh copy.
"""

from __future__ import annotations

import sqlite3
import threading
from pathlib import Path
from typing import Protocol

from gliding_core.boundary import translated
from gliding_core.errors import ClosedError, EntryNotFoundError, InvalidInputError, StaleWriteError
from gliding_core.jsonld import Node, canonical_json, parse_canonical, preview
from gliding_core.store.connections import set_wal


class NodeSource(Protocol):
    """The storage of shared nodes with a generation per node (the blackboard, later)."""

    def get(self, iri: str) -> tuple[Node, int]:
        """Return ``iri``'s value and generation; ``EntryNotFoundError`` when absent."""
        ...

    def put(self, iri: str, value: Node, expected_generation: int) -> int:
        """Store ``value`` if ``iri`` is at ``expected_generation`` (0: absent); return the new one.

        Raises:
            StaleWriteError: the node is at another generation; nothing was written.
        """
        ...


def refused(iri: str, expected: int, current: int, value: Node | None) -> StaleWriteError:
    """Return the error for a put based on ``expected`` while ``iri`` is at ``current``."""
    return StaleWriteError(
        f"write to {iri!r} was based on generation {expected}, but the node is at generation "
        f"{current}; read it again and retry",
        iri=iri,
        based_on=expected,
        current_generation=current,
        current_value=value,
    )


def check_generation(value: object, *, what: str = "generation") -> int:
    """Return ``value`` if it is an int >= 0."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise InvalidInputError(f"{what} must be an int >= 0, got {preview(value)}")
    return value


class DictNodeSource:
    """Shared nodes in a dict under a lock (one process)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._nodes: dict[str, tuple[str, int]] = {}

    def get(self, iri: str) -> tuple[Node, int]:
        """Return ``iri``'s value and generation."""
        with self._lock:
            found = self._nodes.get(iri)
        if found is None:
            raise EntryNotFoundError(f"no shared node has the IRI {iri!r}")
        return parse_canonical(found[0]), found[1]

    def put(self, iri: str, value: Node, expected_generation: int) -> int:
        """Store ``value`` if ``iri`` is at ``expected_generation``; return the new generation."""
        check_generation(expected_generation, what="expected_generation")
        text = canonical_json(value)
        with self._lock:
            text_now, current = self._nodes.get(iri, ("", 0))
            if current != expected_generation:
                now = parse_canonical(text_now) if current else None
                raise refused(iri, expected_generation, current, now)
            self._nodes[iri] = (text, current + 1)
            return current + 1


class SQLiteNodeSource:
    """Shared nodes in a SQLite file (table ``coherence_source_nodes``) shared by processes.

    Use a file other than the directory's: the directory calls ``put`` inside its own
    transaction, and a second connection writing the same file would wait on that transaction.

    Args:
        path: the database file (created when missing).
    """

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._lock = threading.Lock()
        self._closed = False
        with translated("sqlite", f"opening the node source {str(self.path)!r}"):
            self._conn = sqlite3.connect(
                self.path, isolation_level=None, check_same_thread=False, timeout=30.0
            )
            # Processes opening a new file together wait for each other's switch to WAL.
            set_wal(self._conn, busy_timeout_ms=30_000)  # as the connection's timeout
            self._conn.execute("PRAGMA synchronous = NORMAL")
            self._conn.execute(
                "CREATE TABLE IF NOT EXISTS coherence_source_nodes (iri TEXT PRIMARY KEY,"
                " generation INTEGER NOT NULL, value TEXT NOT NULL) WITHOUT ROWID"
            )

    def get(self, iri: str) -> tuple[Node, int]:
        """Return ``iri``'s value and generation."""
        with self._lock, translated("sqlite", f"reading the shared node {iri!r}"):
            self._check_open()
            row = self._conn.execute(
                "SELECT value, generation FROM coherence_source_nodes WHERE iri = ?", (iri,)
            ).fetchone()
        if row is None:
            raise EntryNotFoundError(f"no shared node has the IRI {iri!r}")
        return parse_canonical(row[0]), row[1]

    def put(self, iri: str, value: Node, expected_generation: int) -> int:
        """Store ``value`` if ``iri`` is at ``expected_generation``; return the new generation."""
        check_generation(expected_generation, what="expected_generation")
        text = canonical_json(value)
        with self._lock, translated("sqlite", f"writing the shared node {iri!r}"):
            self._check_open()
            self._conn.execute("BEGIN IMMEDIATE")
            try:
                row = self._conn.execute(
                    "SELECT value, generation FROM coherence_source_nodes WHERE iri = ?", (iri,)
                ).fetchone()
                current = 0 if row is None else row[1]
                if current != expected_generation:
                    now = None if row is None else parse_canonical(row[0])
                    raise refused(iri, expected_generation, current, now)
                self._conn.execute(
                    "INSERT OR REPLACE INTO coherence_source_nodes (iri, generation, value)"
                    " VALUES (?, ?, ?)",
                    (iri, current + 1, text),
                )
                self._conn.execute("COMMIT")
            except BaseException:
                self._conn.execute("ROLLBACK")
                raise
        return current + 1

    def close(self) -> None:
        """Close the connection; later calls raise ``ClosedError``."""
        with self._lock:
            if not self._closed:
                self._closed = True
                self._conn.close()

    def _check_open(self) -> None:
        if self._closed:
            raise ClosedError(f"the node source {str(self.path)!r} was used after close()")
