"""L2 coherence: a change counter in shared memory, read by every process of one directory file.

The counter is 8 bytes of a small file beside the directory's database, mapped into each
process. Reading it costs a memory load, which is what lets a read validate its copy on every
call. Only the directory writes it, inside the SQLite write transaction that commits the
change, so writes are serialised across processes by SQLite's own lock.

Invariants: the counter never decreases while the file exists; it is written and read as one
aligned 8-byte word, in the machine's byte order (the processes sharing it share the machine);
``SQLiteDirectory`` pairs it with a copy of its value inside the database,
so a counter left raised by a failed commit, or a file lost or reset, costs extra checks only.
Do not delete the file while processes use the directory: each would keep its own mapping.
"""

from __future__ import annotations

import mmap
import os
from pathlib import Path

from gliding_core.errors import StorageError

_SIZE = 8  # one 64-bit word


class SharedCounter:
    """A 64-bit counter in a memory-mapped file.

    Args:
        path: the counter's file (created, 8 zero bytes, when missing).
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        try:
            descriptor = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                if os.fstat(descriptor).st_size < _SIZE:
                    # Growing to 8 bytes is idempotent, so processes creating it at once agree.
                    os.ftruncate(descriptor, _SIZE)
                self._map = mmap.mmap(descriptor, _SIZE)
            finally:
                os.close(descriptor)
            # A typed view of the word: indexing it copies the 8 aligned bytes with one fixed-size
            # copy (one load or store on 64-bit machines), three times faster than a slice.
            self._word = memoryview(self._map).cast("q")
        except OSError as exc:
            raise StorageError(f"cannot map the change counter {str(path)!r}: {exc}") from exc

    def value(self) -> int:
        """Return the counter."""
        value: int = self._word[0]
        return value

    def set(self, value: int) -> None:
        """Set the counter (the caller holds the directory's write transaction)."""
        self._word[0] = value

    def close(self) -> None:
        """Unmap the file."""
        self._word.release()
        self._map.close()
