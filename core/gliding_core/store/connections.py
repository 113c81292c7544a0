"""L0: the SQLite connections of one store: one writer, and one reader per thread.

In WAL mode a reader works on a snapshot of the last commit and never waits for the writer,
but only on a connection of its own: SQLite serialises the statements of one connection.
So each thread that reads gets its own connection, and every write goes through the one
writer connection under ``lock`` (other processes are kept in line by SQLite's file lock).

Invariants:
- A reader connection is used by its own thread only; its lock is otherwise taken only by
  ``close_readers``, which so waits for a read in progress.
- Inside its own write transaction a thread reads on the writer (``owner``), so it sees its
  uncommitted writes.
- The connection of a thread that has ended is closed when another thread opens a reader,
  so connections never outnumber the live reading threads plus those ended since.
- Once ``closed`` is set nothing opens again and every use raises ``ClosedError``.
"""

from __future__ import annotations

import sqlite3
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from gliding_core.boundary import translated
from gliding_core.errors import ClosedError

_READER_CACHE_KIB = -16384  # 16 MiB of page cache per reading thread
_READER_MMAP_BYTES = 256 * 2**20


def set_wal(conn: sqlite3.Connection, *, busy_timeout_ms: int) -> None:
    """Put the database of ``conn`` in WAL mode, waiting up to ``busy_timeout_ms`` for others.

    Switching a new file to WAL takes an exclusive lock, and SQLite answers "database is
    locked" at once, without its busy handler, when another connection opening the same new
    file holds a lock meanwhile (processes opening a new memory directory together). So the
    switch is tried again, with a short growing pause, until it is done or the time is up;
    once one connection has switched, the others find the file in WAL already.
    """
    deadline = time.monotonic() + busy_timeout_ms / 1000
    pause = 0.001
    while True:
        try:
            conn.execute("PRAGMA journal_mode = WAL").fetchall()
            return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) and "busy" not in str(exc):
                raise
            if time.monotonic() + pause > deadline:
                raise
        time.sleep(pause)
        pause = min(pause * 2, 0.05)


def open_reader(file: str, *, busy_timeout_ms: int) -> sqlite3.Connection:
    """Open a connection for one thread's reads of the database ``file``."""
    with translated("sqlite", f"opening a reader of the L0 store at {file}"):
        conn = sqlite3.connect(
            file,
            isolation_level=None,
            check_same_thread=False,  # close() closes it from another thread
            timeout=busy_timeout_ms / 1000,
        )
        conn.execute(f"PRAGMA busy_timeout = {int(busy_timeout_ms)}")
        conn.execute("PRAGMA query_only = ON")
        # Each connection has its own page cache; a mapped file shares the OS's pages
        # between the readers instead of copying them into each cache.
        conn.execute(f"PRAGMA cache_size = {_READER_CACHE_KIB}")
        conn.execute(f"PRAGMA mmap_size = {_READER_MMAP_BYTES}")
    return conn


@dataclass(slots=True)
class _Reader:
    conn: sqlite3.Connection
    lock: threading.Lock = field(default_factory=threading.Lock)


class Connections:
    """The writer connection of a store and the reader connections of its threads.

    Args:
        writer: the connection every write goes through (opened, schema in place).
        open_reader: makes a new reader connection on the same database.
    """

    def __init__(
        self, writer: sqlite3.Connection, open_reader: Callable[[], sqlite3.Connection]
    ) -> None:
        self.writer = writer
        self.lock = threading.RLock()  # held by the writing thread for a whole transaction
        self.owner: int | None = None  # the thread inside a write transaction
        self.closed = False  # no new reads or writes
        self.writer_closed = False
        self._open_reader = open_reader
        self._local = threading.local()
        self._readers: dict[threading.Thread, _Reader] = {}
        self._registry = threading.Lock()

    @contextmanager
    def reader(self) -> Iterator[sqlite3.Connection]:
        """Yield the connection this thread reads on, holding it for the block."""
        if self.owner == threading.get_ident():
            yield self.writer  # this thread holds ``lock``: it is inside its transaction
            return
        reader: _Reader | None = getattr(self._local, "reader", None)
        if reader is None:
            reader = self._new_reader()
        with reader.lock:
            if self.closed:
                raise ClosedError("the L0 store is closed")
            yield reader.conn

    def _new_reader(self) -> _Reader:
        with self._registry:
            if self.closed:
                raise ClosedError("the L0 store is closed")
            for ended in [thread for thread in self._readers if not thread.is_alive()]:
                self._readers.pop(ended).conn.close()
            reader = _Reader(self._open_reader())
            self._readers[threading.current_thread()] = reader
        self._local.reader = reader
        return reader

    def reader_count(self) -> int:
        """Return how many reader connections are open."""
        with self._registry:
            return len(self._readers)

    def close_readers(self) -> None:
        """Mark the connections closed and close every reader, after its read in progress."""
        with self._registry:
            self.closed = True
            readers, self._readers = list(self._readers.values()), {}
        for reader in readers:
            with reader.lock:
                reader.conn.close()

    def close_writer(self) -> None:
        """Close the writer connection (after ``close_readers``)."""
        with self.lock:
            self.closed = self.writer_closed = True
            self.writer.close()
