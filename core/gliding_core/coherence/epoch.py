"""L2 coherence: a change counter in shared memory, read by every process of one directory file.

The counter is 8 bytes of a small file beside the directory's database, mapped into each
process. Reading it costs a memory load, which is what lets a read validate its copy on every
call. Only the directory writes it, inside the SQLite write transaction that commits the
change, so writes are serialised across processes by SQLite's own lock.

Invariant: the counter never decreases while the file exists; it is a hint that something may
have changed, and ``SQLiteDirectory`` pairs it with a copy of its value inside the database so
that a torn, lost or reset file can only cost extra checks, never a stale read.
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
        value: int = _FORMAT.unpack_from(self._map, 0)[0]
        return value

    def set(self, value: int) -> None:
        """Set the counter (the caller holds the directory's write transaction)."""
        _FORMAT.pack_into(self._map, 0, value)

    def close(self) -> None:
        """Unmap the file."""
        self._map.close()
