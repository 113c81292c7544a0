"""L2 coherence: a change counter in shared memory, read by every process of one directory file.

The counter is 8 bytes of a small file beside the directory's database, mapped into each
process. Reading it costs a memory load, which is what lets a read validate its copy on every
call. Only the directory writes it, inside the SQLite write transaction that commits the
change, so writes are serialised across processes by SQLite's own lock.

Invariants: the counter never decreases while the file exists; it is written and read as one
aligned 8-byte word; ``SQLiteDirectory`` pairs it with a copy of its value inside the database,
so a counter left raised by a failed commit, or a file lost or reset, costs extra checks only.
Do not delete the file while processes use the directory: each would keep its own mapping.
"""

from __future__ import annotations

import mmap
import os
import struct
from pathlib import Path

from gliding_core.errors import StorageError

_FORMAT = struct.Struct("<q")


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
                if os.fstat(descriptor).st_size < _FORMAT.size:
                    # Growing to 8 bytes is idempotent, so processes creating it at once agree.
                    os.ftruncate(descriptor, _FORMAT.size)
                self._map = mmap.mmap(descriptor, _FORMAT.size)
            finally:
                os.close(descriptor)
        except OSError as exc:
            raise StorageError(f"cannot map the change counter {str(path)!r}: {exc}") from exc

    def value(self) -> int:
        """Return the counter."""
        # A slice is one 8-byte copy of an aligned word (a single load on 64-bit machines);
        # struct.unpack_from would read the mapping byte by byte, and could see half a write.
        value: int = _FORMAT.unpack(self._map[0:8])[0]
        return value

    def set(self, value: int) -> None:
        """Set the counter (the caller holds the directory's write transaction)."""
        self._map[0:8] = _FORMAT.pack(value)

    def close(self) -> None:
        """Unmap the file."""
        self._map.close()
