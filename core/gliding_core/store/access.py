"""L0: access statistics that reads record in memory and the writer later writes.

A read does not write: ``get`` adds one to its entry's count in this buffer, and the store's
writer adds the buffered counts to the database now and then (``write_buffered``: ``take``,
then ``committing`` / ``committed``, or ``abandoned`` when the write fails). What the store
returns is the stored count plus what this buffer holds, so a read sees its own count at once.

Invariants:
- A recorded read is in exactly one place: pending here, being written (still here, and
  not yet visible to any reader's snapshot), or committed to the database. A failed write
  puts its counts back as pending; nothing is dropped but by ``forget`` (a deleted entry).
- ``overlay`` never counts a read twice or misses one: a reader takes the ``epoch`` before
  its snapshot and gives it back to ``apply``; if a write of the buffer committed in between
  (so the snapshot may or may not hold it), ``apply`` refuses and the reader reads again.
  Readers wait only while such a commit is running (a commit of unsynced pages).
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

from gliding_core.boundary import translated
from gliding_core.store.connections import Connections

Row = Sequence[Any]


class AccessBuffer:
    """Buffered access counts and last-access times, by IRI.

    Args:
        iri: the position of the IRI in the entry rows given to ``apply`` and ``overlay``.
        count: the position of the access count.
        last: the position of the last-access time.
    """

    def __init__(self, *, iri: int, count: int, last: int) -> None:
        self._iri, self._count, self._last = iri, count, last
        self._cond = threading.Condition(threading.Lock())
        self._pending: dict[str, list[Any]] = {}  # IRI -> [count, last access]
        self._writing: dict[str, list[Any]] = {}
        self._committing = False
        self._epoch = 0

    def __len__(self) -> int:
        """Return how many entries have counts pending."""
        return len(self._pending)

    def settled(self) -> int:
        """Return the epoch to hand to ``apply``, once no write of the buffer is committing."""
        with self._cond:
            while self._committing:
                self._cond.wait()
            return self._epoch

    def apply(
        self, rows: list[Row], epoch: int, *, counted: str | None = None, now: float = 0.0
    ) -> list[Row] | None:
        """Record a read of ``counted`` (when ``rows`` found it) and return ``overlay(rows)``.

        Returns ``None``, recording nothing, when a write of the buffer committed since
        ``epoch`` was taken: the caller reads again.
        """
        with self._cond:
            if self._committing or epoch != self._epoch:
                return None
            if counted is not None and rows:
                self._add(self._pending, counted, 1, now)
            return self._overlay(rows)

    def overlay(self, rows: list[Row]) -> list[Row]:
        """Return ``rows`` with the buffered counts added (the caller holds the writer)."""
        with self._cond:
            return self._overlay(rows)

    def forget(self, iri: str) -> None:
        """Drop the pending counts of a deleted entry."""
        with self._cond:
            self._pending.pop(iri, None)

    def take(self) -> list[tuple[int, float, str]]:
        """Start writing the pending counts; return ``(count, last access, iri)`` rows."""
        with self._cond:
            for iri, (count, last) in self._pending.items():
                self._add(self._writing, iri, count, last)
            self._pending = {}
            return [(count, last, iri) for iri, (count, last) in self._writing.items()]

    def committing(self) -> None:
        """Say that the transaction writing the taken counts is committing now."""
        with self._cond:
            self._committing = True

    def committed(self) -> None:
        """Say that the taken counts are in the database."""
        with self._cond:
            self._writing = {}
            self._epoch += 1
            self._committing = False
            self._cond.notify_all()

    def abandoned(self) -> None:
        """Say that writing the taken counts failed: they are pending again."""
        with self._cond:
            for iri, (count, last) in self._writing.items():
                self._add(self._pending, iri, count, last)
            self._writing = {}
            self._committing = False
            self._cond.notify_all()

    def _overlay(self, rows: list[Row]) -> list[Row]:
        if not self._pending and not self._writing:
            return rows
        key, at_count, at_last = self._iri, self._count, self._last
        result: list[Row] = []
        for row in rows:
            pending, writing = self._pending.get(row[key]), self._writing.get(row[key])
            if pending is None and writing is None:
                result.append(row)
                continue
            values = list(row)
            for extra in (pending, writing):
                if extra is not None:
                    values[at_count] += extra[0]
                    values[at_last] = max(values[at_last], extra[1])
            result.append(tuple(values))
        return result

    @staticmethod
    def _add(into: dict[str, list[Any]], iri: str, count: int, last: float) -> None:
        held = into.get(iri)
        if held is None:
            into[iri] = [count, last]
        else:
            held[0] += count
            held[1] = max(held[1], last)


def write_buffered(db: Connections, access: AccessBuffer, *, sync: str) -> int:
    """Add the buffered statistics to the database, on the writer; return how many entries.

    ``sync`` is the writer's ``synchronous`` level, put back after the write.

    A transaction of its own, committed without a sync (``synchronous = NORMAL``): the next
    synced commit carries it to the disk, and a crash before then loses only these counts.
    """
    with db.lock:
        conn = db.writer
        # Inside this thread's own transaction, the next flush writes them.
        if db.writer_closed or db.owner is not None or not len(access):
            return 0
        rows = access.take()
        relax = sync == "FULL"
        try:
            with translated("sqlite", "writing the L0 access statistics"):
                if relax:
                    conn.execute("PRAGMA synchronous = NORMAL")
                try:
                    conn.execute("BEGIN IMMEDIATE")
                    conn.executemany(
                        "UPDATE entries SET access_count = access_count + ?,"
                        " last_accessed = max(last_accessed, ?) WHERE iri = ?",
                        rows,
                    )
                    access.committing()
                    conn.execute("COMMIT")
                finally:
                    if conn.in_transaction:
                        conn.execute("ROLLBACK")
                    if relax:
                        conn.execute("PRAGMA synchronous = FULL")
        except BaseException:
            access.abandoned()
            raise
        access.committed()
    return len(rows)
