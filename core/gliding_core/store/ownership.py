"""Memory directory: one owner process for the embedded engines, by an exclusive lock file.

The embedded engines of a memory directory (Chroma's files; the blackboard's Oxigraph store)
must not be opened by two processes at once: their files are not made for it. The owner holds
an exclusive ``flock`` on ``owner.lock`` in the directory and writes its PID there, so that a
second process is told who holds it. L0's SQLite file is not covered: any number of processes
may open it.

Invariants: the lock is held from ``acquire`` until ``release`` (or until the process dies, when
the operating system drops it, so a crashed owner never leaves a directory locked); the lock file
itself is never deleted (deleting it would let two processes lock two different files); a
failed acquire leaves no descriptor open.
"""

from __future__ import annotations

import errno
import fcntl
import logging
import os
import threading
from pathlib import Path

from gliding_core.errors import DirectoryInUseError, StorageError

logger = logging.getLogger(__name__)

LOCK_FILE = "owner.lock"

SHARING_ADVICE = (
    "one process owns a memory directory's embedded engines; other processes can open it "
    "with Memory.open(path, engines=False) for L0 work (storing and reading entries, lexical "
    "search), or every process can share the engines through servers: a Chroma server "
    "(MemoryConfig(chroma_host=..., chroma_port=...)) and, for the blackboard, a SPARQL endpoint"
)


class OwnerLock:
    """The exclusive lock on a memory directory's embedded engines, held by this process.

    Use ``OwnerLock.acquire(directory)``; ``release()`` (or leaving a ``with`` block) gives it
    up. Releasing twice is harmless.
    """

    def __init__(self, path: Path, descriptor: int) -> None:
        self.path = path
        self._descriptor: int | None = descriptor
        self._lock = threading.Lock()

    @classmethod
    def acquire(cls, directory: Path) -> OwnerLock:
        """Take the lock of ``directory`` without waiting.

        Raises:
            DirectoryInUseError: another open memory (in this or another process) holds it;
                the error names the holder's PID and how to share the directory.
            StorageError: the lock file cannot be created or locked.
        """
        path = directory / LOCK_FILE
        try:
            descriptor = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        except OSError as exc:
            raise StorageError(f"cannot create the lock file {str(path)!r}: {exc}") from exc
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            holder = _read_pid(descriptor)
            os.close(descriptor)
            if exc.errno in (errno.EWOULDBLOCK, errno.EACCES, errno.EAGAIN):
                raise _in_use(directory, holder) from None
            raise StorageError(f"cannot lock {str(path)!r}: {exc}") from exc
        try:
            os.ftruncate(descriptor, 0)
            os.pwrite(descriptor, f"{os.getpid()}\n".encode(), 0)
        except OSError as exc:  # the lock holds without the PID; only the message loses it
            logger.warning("cannot write the owner's PID into %s: %s", path, exc)
        return cls(path, descriptor)

    @property
    def held(self) -> bool:
        """Whether this object still holds the lock."""
        return self._descriptor is not None

    def release(self) -> None:
        """Give the lock up (the file stays, emptied of the PID)."""
        with self._lock:
            descriptor, self._descriptor = self._descriptor, None
        if descriptor is None:
            return
        try:
            os.ftruncate(descriptor, 0)
        except OSError:  # the next owner overwrites it anyway
            pass
        finally:
            os.close(descriptor)  # closing the last descriptor drops the flock

    def __enter__(self) -> OwnerLock:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.release()

    def __repr__(self) -> str:
        state = "held" if self.held else "released"
        return f"OwnerLock({str(self.path)!r}, {state})"


def holder_pid(directory: Path) -> int | None:
    """Return the PID written in ``directory``'s lock file, or ``None`` when it names none."""
    try:
        descriptor = os.open(directory / LOCK_FILE, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        return _read_pid(descriptor)
    finally:
        os.close(descriptor)


def _read_pid(descriptor: int) -> int | None:
    try:
        text = os.pread(descriptor, 32, 0).decode("ascii", "replace").strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None


def _in_use(directory: Path, pid: int | None) -> DirectoryInUseError:
    if pid == os.getpid():
        who = "this process (another Memory on it is open: share that object, or close it)"
    elif pid is not None:
        who = f"process {pid}"
    else:
        who = "another process"
    return DirectoryInUseError(
        f"the memory directory {str(directory)!r} is in use by {who}; {SHARING_ADVICE}", pid=pid
    )
