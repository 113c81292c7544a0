"""L2 coherence: WAL checkpoints of the SQLite directory, run off the writers' path.

SQLite checkpoints a WAL database inside the ``COMMIT`` that takes the log over 1,000 pages:
that commit copies the log into the database and syncs it, 5-30 ms on this machine's disk,
while its connection holds the directory's lock, so every writer of the process waits (measured
on the blackboard's on-disk writes: 1% of the commits, 64% of the time spent committing).
``WalCheckpoints`` runs the same PASSIVE checkpoint on a thread of its own, over a connection
of its own, when told that enough transactions committed; the directory's connection turns its
automatic checkpoints off.

Invariants:
- Nothing changes in what a commit guarantees: a WAL commit under ``synchronous = NORMAL`` is
  in the log when ``COMMIT`` returns; a checkpoint only moves committed pages into the
  database file, and a PASSIVE one never waits for, nor blocks, a writer or a reader.
- One thread and one connection per directory, started at the first request and ended by
  ``close`` (which waits for a running checkpoint); a failed checkpoint is logged and retried
  at the next request (the log then grows, as it would behind a long reader).
"""

from __future__ import annotations

import logging
import sqlite3
import threading
from pathlib import Path

from gliding_core.boundary import translated
from gliding_core.errors import GlidingError

logger = logging.getLogger(__name__)

CHECKPOINT_EVERY = 200
"""Commits between two checkpoints (a node write adds about 5 pages: SQLite's 1,000 pages)."""


class WalCheckpoints:
    """Checkpoint a WAL database on a background thread when asked.

    Args:
        path: the database file.
        every: the commits between two checkpoints.
    """

    def __init__(self, path: Path, *, every: int = CHECKPOINT_EVERY) -> None:
        self.path = path
        self.every = every
        self._commits = 0
        self._wanted = threading.Event()
        self._stopping = False
        self._lock = threading.Lock()  # guards the counter and the thread's start and stop
        self._thread: threading.Thread | None = None

    def committed(self) -> None:
        """Note one commit; every ``every`` commits, ask the thread for a checkpoint."""
        with self._lock:
            if self._stopping:
                return
            self._commits += 1
            if self._commits < self.every:
                return
            self._commits = 0
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name=f"wal-checkpoints:{self.path.name}", daemon=True
                )
                self._thread.start()
        self._wanted.set()

    def close(self) -> None:
        """Stop the thread after the checkpoint it may be running. Closing twice is harmless."""
        with self._lock:
            self._stopping = True
            thread = self._thread
        self._wanted.set()
        if thread is not None and thread is not threading.current_thread():
            thread.join()

    def _run(self) -> None:
        try:
            with translated("sqlite", f"opening {str(self.path)!r} for checkpoints"):
                connection = sqlite3.connect(self.path, isolation_level=None)
        except GlidingError:
            logger.warning("no WAL checkpoints for %s", self.path, exc_info=True)
            return
        try:
            while True:
                self._wanted.wait()
                self._wanted.clear()
                if self._stopping:
                    return
                self._checkpoint(connection)
        finally:
            connection.close()

    def _checkpoint(self, connection: sqlite3.Connection) -> None:
        try:
            with translated("sqlite", f"checkpointing the log of {str(self.path)!r}"):
                connection.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()
        except GlidingError:  # a background thread: logged, and tried again at the next request
            logger.warning("WAL checkpoint of %s failed", self.path, exc_info=True)
