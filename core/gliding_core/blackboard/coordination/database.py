"""L2: the coordination database of the blackboard (leases, tasks, agents, messages) in SQLite.

The graph holds what agents know; this database holds how they coordinate, because that state
must be transactional across threads and processes: a lease is granted under ``BEGIN
IMMEDIATE``, so two processes of one machine never both get an exclusive lease, and the fencing
token counter never goes back.

Where it lives: ``blackboard.sqlite3`` in the memory's directory for ``Memory.open(path)``
(``CoordinationDB.in_directory``), a private in-memory database for ``Memory()``.

Invariants:
- One connection per ``CoordinationDB``, used under one re-entrant lock: a lease grant is a
  transaction of a few statements (tens of microseconds), so threads gain nothing from a
  connection each but would pay SQLite's file locking between them; other processes open
  their own ``CoordinationDB`` on the file, and WAL plus a busy timeout serialise the writers
  of all processes.
- Every write is one transaction (``write()``); a nested ``write()`` on the same thread is a
  savepoint of the outer one, so it commits and rolls back with it.
- Nothing calls out of this module while holding the lock (no bus event, no graph mirror), so
  the lock is always the innermost one and cannot take part in a deadlock; the registries
  publish and mirror after the transaction.
- SQLite exceptions leave through ``gliding_core.boundary`` as ``StorageError``; SQL is built
  from constants (and validated integers), every value travels as a parameter.
- The graph mirror (``NodeMirror``) is derived state: SQLite is the truth, a mirror failure is
  logged and the change stands; the registries can mirror everything again (``remirror()``).
  A name the mirror could never write (a task IRI that is not an absolute IRI) is refused up
  front while a mirror is attached (``check_task_iri``), so that failure is not the silent one.
"""

from __future__ import annotations

import logging
import os
import re
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from enum import Enum
from pathlib import Path
from typing import Any, Protocol, TypeVar

from gliding_core.blackboard.validation import check_iri
from gliding_core.boundary import translated
from gliding_core.config import CoordinationConfig
from gliding_core.errors import ClosedError, InvalidInputError, InvalidNodeError
from gliding_core.jsonld import check_text, preview

logger = logging.getLogger(__name__)

COORDINATION_FILE = "blackboard.sqlite3"
MAX_NAME_LENGTH = 2_048
_SPACE = re.compile(r"\s")


class NodeMirror(Protocol):
    """Where the registries mirror tasks and agents as JSON-LD nodes, so graph queries see them.

    The blackboard implements it, writing as the system (outside agent permissions).
    """

    def mirror(self, task_iri: str, area: str, nodes: Sequence[Mapping[str, Any]]) -> None:
        """Write ``nodes`` (whole, replacing earlier versions) into the ``area`` of a task."""

    def forget(self, iris: Sequence[str]) -> None:
        """Remove the nodes with these IRIs from every graph."""


class CoordinationDB:
    """The SQLite database of the blackboard's coordination state.

    Args:
        path: the database file; ``None`` or ``":memory:"`` keeps it private in memory.
        config: coordination settings; ``CoordinationConfig()`` when omitted.
        clock: the wall clock (seconds since the epoch) for lease expiry and heartbeats; tests
            pass a fake one. Processes sharing a file share the machine's wall clock.

    Safe to share between threads; several processes may open the same file.
    """

    def __init__(
        self,
        path: str | os.PathLike[str] | None = None,
        *,
        config: CoordinationConfig | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        if path is not None and not isinstance(path, (str, os.PathLike)):
            raise InvalidInputError(f"path must be a path or None, got {preview(path)}")
        if not callable(clock):
            raise InvalidInputError(f"clock must be callable, got {preview(clock)}")
        self.config = config or CoordinationConfig()
        self.path = None if path is None or str(path) == ":memory:" else os.fspath(path)
        self.clock = clock
        self._lock = threading.RLock()
        self._depth = 0
        self._schemas: set[str] = set()
        self._closed = False
        self._conn = self._connect()

    @classmethod
    def in_directory(
        cls,
        directory: str | os.PathLike[str] | None,
        *,
        config: CoordinationConfig | None = None,
        clock: Callable[[], float] = time.time,
    ) -> CoordinationDB:
        """Open the database of a memory directory, or a private one when ``directory`` is None."""
        path = None if directory is None else Path(directory) / COORDINATION_FILE
        return cls(path, config=config, clock=clock)

    def _connect(self) -> sqlite3.Connection:
        where = self.path or ":memory:"
        with translated("sqlite", f"opening the coordination database at {where}"):
            # isolation_level=None: transactions are begun explicitly with BEGIN IMMEDIATE, so a
            # grant's read of the current holders already holds the write lock of every process.
            conn = sqlite3.connect(
                where,
                isolation_level=None,
                check_same_thread=False,
                timeout=self.config.busy_timeout_ms / 1000,
            )
            conn.execute(f"PRAGMA busy_timeout = {int(self.config.busy_timeout_ms)}")
            if self.path is not None:
                # WAL: readers of other processes never block a grant, and a commit appends one
                # frame instead of rewriting pages, which keeps a grant near 30 us.
                conn.execute("PRAGMA journal_mode = WAL")
            sync = "FULL" if self.config.durability == "full" else "NORMAL"
            conn.execute(f"PRAGMA synchronous = {sync}")
        return conn

    def ensure_schema(self, script: str) -> None:
        """Run ``script`` (``CREATE ... IF NOT EXISTS``) once per database, in one transaction."""
        with self._lock:
            self._check_open()
            if script in self._schemas:
                return
            with translated("sqlite", "creating the coordination tables"):
                # One script, one transaction: processes opening a new file at once create it once.
                self._conn.executescript(f"BEGIN IMMEDIATE;{script}COMMIT;")
            self._schemas.add(script)

    @contextmanager
    def write(self, doing: str) -> Iterator[sqlite3.Connection]:
        """Run the block as one write transaction (a savepoint when nested on this thread).

        Args:
            doing: what the block does, for the message of a translated SQLite error.
        """
        with self._lock:
            self._check_open()
            conn = self._conn
            with translated("sqlite", doing):
                nested = self._depth > 0
                conn.execute("SAVEPOINT nested" if nested else "BEGIN IMMEDIATE")
                self._depth += 1
                try:
                    yield conn
                except BaseException:
                    if nested and conn.in_transaction:
                        conn.execute("ROLLBACK TO nested")
                        conn.execute("RELEASE nested")
                    elif conn.in_transaction:
                        conn.execute("ROLLBACK")
                    raise
                finally:
                    self._depth -= 1
                conn.execute("RELEASE nested" if nested else "COMMIT")

    @contextmanager
    def read(self, doing: str) -> Iterator[sqlite3.Connection]:
        """Run the block's queries under the lock, translating SQLite errors."""
        with self._lock:
            self._check_open()
            with translated("sqlite", doing):
                yield self._conn

    def _check_open(self) -> None:
        if self._closed:
            raise ClosedError("the coordination database is closed")

    @property
    def closed(self) -> bool:
        """Whether ``close()`` was called."""
        return self._closed

    def close(self) -> None:
        """Close the database; later calls raise ``ClosedError``. Closing twice is harmless."""
        with self._lock:
            if not self._closed:
                self._closed = True
                self._conn.close()

    def __enter__(self) -> CoordinationDB:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"CoordinationDB(path={self.path or ':memory:'!r})"


def mirror_nodes(
    mirror: NodeMirror | None, task_iri: str, area: str, nodes: Sequence[Mapping[str, Any]]
) -> None:
    """Mirror ``nodes`` if there is a mirror, logging (not raising) its failure."""
    if mirror is None or not nodes:
        return
    try:
        mirror.mirror(task_iri, area, nodes)
    except Exception:
        logger.exception("mirroring %d node(s) into %s/%s failed", len(nodes), task_iri, area)


def forget_nodes(mirror: NodeMirror | None, iris: Sequence[str]) -> None:
    """Remove ``iris`` from the mirror if there is one, logging (not raising) its failure."""
    if mirror is None or not iris:
        return
    try:
        mirror.forget(iris)
    except Exception:
        logger.exception("removing %d node(s) from the graph mirror failed", len(iris))


def check_name(value: object, what: str) -> str:
    """Return ``value`` if it is a usable name or IRI: a non-empty string without whitespace,
    that SQLite can store (no lone surrogate: ``jsonld.check_text``)."""
    if not isinstance(value, str) or not value or _SPACE.search(value) is not None:
        raise InvalidInputError(
            f"{what} must be a non-empty string without spaces, got {preview(value)}"
        )
    if len(value) > MAX_NAME_LENGTH:
        raise InvalidInputError(
            f"{what} is longer than {MAX_NAME_LENGTH} characters: {preview(value)}"
        )
    return check_text(value, what=what)


def check_task_iri(value: object, what: str, *, mirrored: bool) -> str:
    """Return ``value`` if it can name a task: a name (``check_name``), and an absolute IRI
    when ``mirrored``.

    A mirrored task is a node whose ``@id`` is its IRI (and an agent's node links to its task),
    so a name the graph cannot hold is refused here, before anything is written, instead of
    failing later in the mirror, where the failure is only logged. Without a mirror the
    registries keep SQLite alone, and any name will do.

    Raises:
        InvalidInputError: ``value`` is not a name, or (mirrored) not an absolute IRI.
    """
    name = check_name(value, what)
    if mirrored:
        try:
            check_iri(name, what)
        except InvalidNodeError as exc:
            raise InvalidInputError(
                f"{what} must be an absolute IRI (such as 'urn:task:1') while tasks are "
                f"mirrored into the graph, got {preview(name)}"
            ) from exc
    return name


def check_seconds(value: object, what: str, *, allow_zero: bool = False) -> float:
    """Return ``value`` as a float if it is a finite number of seconds (> 0, or >= 0)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InvalidInputError(f"{what} must be a number of seconds, got {preview(value)}")
    seconds = float(value)
    low_ok = seconds >= 0 if allow_zero else seconds > 0
    if not low_ok or seconds != seconds or seconds == float("inf"):
        bound = ">= 0" if allow_zero else "> 0"
        raise InvalidInputError(f"{what} must be finite and {bound}, got {preview(value)}")
    return seconds


Choice = TypeVar("Choice", bound=Enum)


def parse_choice(kind: type[Choice], value: object, what: str) -> Choice:
    """Return ``value`` as a member of the enum ``kind``: a member, or its value in any case.

    Raises:
        InvalidInputError: ``value`` names no member (the message lists the known values).
    """
    if isinstance(value, kind):
        return value
    if isinstance(value, str):
        for member in kind:
            if str(member.value).lower() == value.lower():
                return member
    known = ", ".join(str(member.value) for member in kind)
    raise InvalidInputError(f"{what} must be one of {known}, got {preview(value)}")
