"""L2 coherence: the directory in a SQLite file, shared by the processes of one machine.

``SQLiteDirectory`` implements the ``Directory`` protocol (``coherence.directory``) over tables
prefixed ``coherence_``, so the file can be the blackboard's (``blackboard.sqlite3`` in the
memory directory), with its change token in shared memory (``coherence.epoch``).

Invariants (beyond the protocol's):
- A transition is one ``BEGIN IMMEDIATE`` transaction: it holds the write lock of every
  process from its first read, so no two processes interleave.
- A node's generation never decreases: a trigger refuses it in the file too.
- The token is the shared counter, paired with the epoch the last commit wrote in the
  database: a commit raises the counter before it commits, so no process takes the old counter
  for the new state, and a counter left raised by a failed commit vouches for nothing until the
  next change (``UNVOUCHED``).
- A transition's ``COMMIT`` never checkpoints the WAL (``wal_autocheckpoint = 0``): a thread of
  the directory's own does it every ``CHECKPOINT_EVERY`` commits (``WalCheckpoints``), so a
  checkpoint's sync no longer stalls every writer of the process behind the directory's lock.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Callable, Hashable, Sequence
from pathlib import Path
from typing import TypeVar

from gliding_core.boundary import translated
from gliding_core.coherence.checkpoint import WalCheckpoints
from gliding_core.coherence.directory import (
    DEFAULT_KEEP_VERSIONS,
    STATE_OF_LETTER,
    UNVOUCHED,
    Copy,
    NodeRecord,
    changed_records,
    check_keep,
    one_record,
    versions_to_drop,
)
from gliding_core.coherence.epoch import SharedCounter
from gliding_core.errors import ClosedError, InvalidInputError
from gliding_core.jsonld import Node, canonical_json, parse_canonical, preview
from gliding_core.store.connections import set_wal

T = TypeVar("T")

_SCHEMA = """
CREATE TABLE IF NOT EXISTS coherence_nodes (
    iri TEXT PRIMARY KEY,
    generation INTEGER NOT NULL CHECK (generation >= 0),
    value TEXT
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS coherence_copies (
    iri TEXT NOT NULL,
    agent TEXT NOT NULL,
    state TEXT NOT NULL CHECK (state IN ('M', 'E', 'S', 'I')),
    generation INTEGER NOT NULL,
    PRIMARY KEY (iri, agent)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS coherence_copies_by_agent ON coherence_copies (agent, iri);
CREATE TABLE IF NOT EXISTS coherence_versions (
    iri TEXT NOT NULL,
    generation INTEGER NOT NULL,
    value TEXT NOT NULL,
    PRIMARY KEY (iri, generation)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS coherence_epoch (
    id INTEGER PRIMARY KEY CHECK (id = 0),
    epoch INTEGER NOT NULL
);
INSERT OR IGNORE INTO coherence_epoch (id, epoch) VALUES (0, 0);
CREATE TRIGGER IF NOT EXISTS coherence_generation_never_decreases
BEFORE UPDATE OF generation ON coherence_nodes WHEN NEW.generation < OLD.generation
BEGIN SELECT RAISE(ABORT, 'a node generation never decreases'); END;
"""


class SQLiteDirectory:
    """The directory in a SQLite file shared by the processes of one machine.

    Its tables are prefixed ``coherence_``, so the file can be the blackboard's
    (``blackboard.sqlite3`` in the memory directory); it opens its own connection.

    Args:
        path: the database file (created when missing).
        keep_versions: how many past values to keep per node for changes.
        busy_timeout_s: how long a transition waits for another process's transaction.
    """

    def __init__(
        self,
        path: str | Path,
        *,
        keep_versions: int = DEFAULT_KEEP_VERSIONS,
        busy_timeout_s: float = 30.0,
    ) -> None:
        if not isinstance(path, (str, Path)) or not str(path):
            raise InvalidInputError(f"directory path must be a str or Path, got {preview(path)}")
        self.path = Path(path)
        self._keep = check_keep(keep_versions)
        self._lock = threading.RLock()
        self._closed = False
        with translated("sqlite", f"opening the coherence directory {str(self.path)!r}"):
            # isolation_level=None: transactions are begun explicitly, so a transition holds the
            # write lock (BEGIN IMMEDIATE) from its first read and no two processes interleave.
            self._conn = sqlite3.connect(
                self.path, isolation_level=None, check_same_thread=False, timeout=busy_timeout_s
            )
            # WAL: readers of other processes never wait for a transition. NORMAL sync: a
            # committed transition survives a process crash; the directory describes copies
            # held by live processes, which a power loss ends anyway. The switch waits for
            # processes that open a new directory at the same time (``set_wal``).
            set_wal(self._conn, busy_timeout_ms=round(busy_timeout_s * 1000))
            self._conn.execute("PRAGMA synchronous = NORMAL")
            # Checkpoints run on a thread of their own (``WalCheckpoints``), not inside the
            # COMMIT of a transition, which holds the lock every writer of the process waits on.
            self._conn.execute("PRAGMA wal_autocheckpoint = 0")
            self._conn.executescript(f"BEGIN IMMEDIATE;{_SCHEMA}COMMIT;")
        self._checkpoints = WalCheckpoints(self.path)
        self._epoch = SharedCounter(self.path.with_name(self.path.name + "-coherence-epoch"))

    def token(self) -> Hashable:
        """Return the shared change counter (a memory load: this runs on every read)."""
        self._check_open()
        return self._epoch.value()

    def record(self, iri: str) -> NodeRecord:
        """Return a snapshot of ``iri``'s record."""
        return self.snapshot(iri)[0]

    def snapshot(self, iri: str) -> tuple[NodeRecord, Hashable]:
        """Return a snapshot of ``iri``'s record and the token that vouches for it.

        The counter is read first, then the snapshot with the epoch its last commit wrote. Equal,
        they vouch for the snapshot: a later commit raises the counter before it commits. Not
        equal (a commit in flight, or one that failed after raising the counter), nothing does.
        """
        with self._lock, translated("sqlite", f"reading the coherence record of {iri!r}"):
            self._check_open()
            seen = self._epoch.value()
            self._conn.execute("BEGIN")
            try:
                committed = self._committed_epoch()
                record = self._read(iri)
            finally:
                self._conn.execute("COMMIT")
        return record, (seen if committed == seen else UNVOUCHED)

    def update(
        self, iri: str, change: Callable[[NodeRecord], tuple[NodeRecord, T]]
    ) -> tuple[T, Hashable]:
        """Apply ``change`` to ``iri``'s record in one ``BEGIN IMMEDIATE`` transaction.

        A change raises the shared counter before it commits (and writes the same epoch in the
        transaction), so no process can take the old counter for the new state. The token
        returned is that epoch: while this transaction holds the write lock nobody else commits.
        """
        return self.update_many([iri], one_record(iri, change))

    def update_many(
        self,
        iris: Sequence[str],
        change: Callable[[dict[str, NodeRecord]], tuple[dict[str, NodeRecord], T]],
    ) -> tuple[T, Hashable]:
        """Apply ``change`` to several records in one ``BEGIN IMMEDIATE`` transaction."""
        wanted = list(dict.fromkeys(iris))
        with self._lock, translated("sqlite", f"updating the coherence records of {wanted[:3]}"):
            self._check_open()
            self._conn.execute("BEGIN IMMEDIATE")
            try:
                committed, shared = self._committed_epoch(), self._epoch.value()
                old = {iri: self._read(iri) for iri in wanted}
                new, result = change(dict(old))
                changed = changed_records(old, new)
                token: Hashable = committed if shared == committed else UNVOUCHED
                if changed:
                    token = max(committed, shared) + 1
                    self._epoch.set(token)
                    self._conn.execute(
                        "UPDATE coherence_epoch SET epoch = ? WHERE id = 0", (token,)
                    )
                    for record in changed:
                        self._write(old[record.iri], record)
                self._conn.execute("COMMIT")
            except BaseException:
                self._conn.execute("ROLLBACK")
                raise
        if changed:
            self._checkpoints.committed()
        return result, token

    def touch(self) -> Hashable:
        """Move the shared counter in one ``BEGIN IMMEDIATE`` transaction, changing no record.

        As a transition that changes a record does: the counter is raised before the commit,
        and the committed epoch written with it.
        """
        with self._lock, translated("sqlite", "moving the coherence token"):
            self._check_open()
            self._conn.execute("BEGIN IMMEDIATE")
            try:
                token = max(self._committed_epoch(), self._epoch.value()) + 1
                self._epoch.set(token)
                self._conn.execute("UPDATE coherence_epoch SET epoch = ? WHERE id = 0", (token,))
                self._conn.execute("COMMIT")
            except BaseException:
                self._conn.execute("ROLLBACK")
                raise
        self._checkpoints.committed()
        return token

    def _committed_epoch(self) -> int:
        row = self._conn.execute("SELECT epoch FROM coherence_epoch WHERE id = 0").fetchone()
        epoch: int = row[0]
        return epoch

    def _read(self, iri: str) -> NodeRecord:
        row = self._conn.execute(
            "SELECT generation, value FROM coherence_nodes WHERE iri = ?", (iri,)
        ).fetchone()
        if row is None:
            return NodeRecord(iri)
        copies = {
            agent: Copy(agent, STATE_OF_LETTER[state], generation)
            for agent, state, generation in self._conn.execute(
                "SELECT agent, state, generation FROM coherence_copies WHERE iri = ?", (iri,)
            )
        }
        value = None if row[1] is None else parse_canonical(row[1])
        return NodeRecord(iri, row[0], value, copies)

    def _write(self, old: NodeRecord, new: NodeRecord) -> None:
        conn, iri = self._conn, new.iri
        value = None if new.value is None else canonical_json(new.value)
        conn.execute(
            "INSERT INTO coherence_nodes (iri, generation, value) VALUES (?, ?, ?)"
            " ON CONFLICT (iri) DO UPDATE SET generation = excluded.generation,"
            " value = excluded.value",
            (iri, new.generation, value),
        )
        # Each statement costs 5-20 us inside the transaction every writer waits on: an empty
        # batch is not sent, and a node never seen before (generation 0) has no kept versions.
        gone = [(iri, agent) for agent in old.copies if agent not in new.copies]
        if gone:
            conn.executemany("DELETE FROM coherence_copies WHERE iri = ? AND agent = ?", gone)
        changed = [
            (iri, c.agent, c.state.value, c.generation)
            for c in new.copies.values()
            if old.copies.get(c.agent) != c
        ]
        if changed:
            conn.executemany(
                "INSERT OR REPLACE INTO coherence_copies (iri, agent, state, generation)"
                " VALUES (?, ?, ?, ?)",
                changed,
            )
        if new.generation != old.generation and old.generation > 0:
            self._keep_versions(old, new)

    def _keep_versions(self, old: NodeRecord, new: NodeRecord) -> None:
        conn, iri = self._conn, new.iri
        if old.value is not None:
            conn.execute(
                "INSERT OR REPLACE INTO coherence_versions (iri, generation, value)"
                " VALUES (?, ?, ?)",
                (iri, old.generation, canonical_json(old.value)),
            )
        kept = [
            g
            for (g,) in conn.execute(
                "SELECT generation FROM coherence_versions WHERE iri = ?", (iri,)
            )
        ]
        dropped = [(iri, g) for g in versions_to_drop(new, kept, self._keep)]
        if dropped:
            conn.executemany(
                "DELETE FROM coherence_versions WHERE iri = ? AND generation = ?", dropped
            )

    def version(self, iri: str, generation: int) -> Node | None:
        """Return ``iri``'s value at ``generation`` if it is still kept."""
        with self._lock, translated("sqlite", f"reading a kept version of {iri!r}"):
            self._check_open()
            row = self._conn.execute(
                "SELECT value FROM coherence_nodes WHERE iri = ? AND generation = ?"
                " UNION ALL SELECT value FROM coherence_versions WHERE iri = ? AND generation = ?",
                (iri, generation, iri, generation),
            ).fetchone()
            return None if row is None or row[0] is None else parse_canonical(row[0])

    def holdings(self, agent: str) -> list[str]:
        """Return the IRIs of the nodes ``agent`` holds a copy of, sorted."""
        with self._lock, translated("sqlite", f"listing the copies of {agent!r}"):
            self._check_open()
            rows = self._conn.execute(
                "SELECT iri FROM coherence_copies WHERE agent = ? ORDER BY iri", (agent,)
            )
            return [iri for (iri,) in rows]

    def close(self) -> None:
        """Close the connection; later calls raise ``ClosedError``. Closing twice is harmless."""
        with self._lock:
            if not self._closed:
                self._closed = True
                self._checkpoints.close()
                self._conn.close()
                self._epoch.close()

    def __enter__(self) -> SQLiteDirectory:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _check_open(self) -> None:
        if self._closed:
            raise ClosedError(f"the coherence directory {str(self.path)!r} was used after close()")
