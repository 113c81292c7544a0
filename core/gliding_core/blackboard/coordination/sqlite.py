"""L2: the coordination store in SQLite: leases, tasks, agents and messages in one database file.

The graph holds what agents know; this database holds how they coordinate, because that state
must be transactional across threads and processes: a lease is granted under ``BEGIN
IMMEDIATE``, so two processes of one machine never both get an exclusive lease, and the fencing
token counter never goes back. It implements ``CoordinationStore`` (``coordination.protocol``),
whose rules it holds as follows.

Where it lives: ``blackboard.sqlite3`` in the memory's directory for ``Memory.open(path)``
(``CoordinationDB.in_directory``), a private in-memory database for ``Memory()``.

Invariants:
- One connection per ``CoordinationDB``, used under one re-entrant lock: a lease grant is a
  transaction of a few statements (tens of microseconds), so threads gain nothing from a
  connection each but would pay SQLite's file locking between them; other processes open
  their own ``CoordinationDB`` on the file, and WAL plus a busy timeout serialise the writers
  of all processes.
- Every write is one transaction (``write()``); a nested ``write()`` on the same thread is a
  savepoint of the outer one, so it commits and rolls back with it; a nested ``read()`` sees it.
- The tables are created when the database opens, in one transaction, so processes opening a
  new file at once create them once.
- Tokens and sequences come from ``AUTOINCREMENT`` keys, which SQLite never hands out twice in
  one file, even after their rows are deleted.
- SQLite exceptions leave through ``gliding_core.boundary`` as ``StorageError``; SQL is built
  from constants (and validated integers), every value travels as a parameter.
"""

from __future__ import annotations

import json
import os
import sqlite3
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from gliding_core.blackboard.coordination.protocol import Commit, check_commit
from gliding_core.blackboard.coordination.records import (
    Agent,
    AgentStatus,
    FirstGrant,
    Lease,
    LeaseMode,
    Message,
    Task,
    TaskStatus,
)
from gliding_core.blackboard.coordination.rows import (
    AGENT_COLUMNS,
    LEASE_COLUMNS,
    MESSAGE_COLUMNS,
    TASK_COLUMNS,
    agent_of,
    agent_row,
    granted,
    lease_of,
    message_of,
    task_of,
)
from gliding_core.boundary import translated
from gliding_core.config import CoordinationConfig
from gliding_core.errors import ClosedError, InvalidInputError
from gliding_core.jsonld import preview
from gliding_core.store.connections import set_wal

COORDINATION_FILE = "blackboard.sqlite3"

_SCHEMA = """
CREATE TABLE IF NOT EXISTS leases (
    resource TEXT NOT NULL,
    holder TEXT NOT NULL,
    mode TEXT NOT NULL CHECK (mode IN ('read', 'write', 'exclusive')),
    token INTEGER NOT NULL,
    depth INTEGER NOT NULL CHECK (depth > 0),
    ttl_s REAL NOT NULL,
    acquired_at REAL NOT NULL,
    expires_at REAL NOT NULL,
    PRIMARY KEY (resource, holder)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS leases_by_holder ON leases (holder);
CREATE TABLE IF NOT EXISTS lease_grants (
    token INTEGER PRIMARY KEY AUTOINCREMENT,
    resource TEXT NOT NULL,
    fenced INTEGER NOT NULL CHECK (fenced IN (0, 1)),
    UNIQUE (resource, fenced)
);
CREATE TABLE IF NOT EXISTS tasks (
    iri TEXT PRIMARY KEY,
    parent TEXT,
    root TEXT NOT NULL,
    status TEXT NOT NULL CHECK (status IN ('pending', 'running', 'completed', 'failed')),
    created_at REAL NOT NULL,
    updated_at REAL NOT NULL,
    revision INTEGER NOT NULL
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS tasks_by_parent ON tasks (parent) WHERE parent IS NOT NULL;
CREATE INDEX IF NOT EXISTS tasks_by_status ON tasks (status);
CREATE TABLE IF NOT EXISTS task_dependencies (
    task TEXT NOT NULL, depends_on TEXT NOT NULL, PRIMARY KEY (task, depends_on)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS task_dependents ON task_dependencies (depends_on);
CREATE TABLE IF NOT EXISTS agents (
    name TEXT PRIMARY KEY,
    role TEXT NOT NULL,
    task TEXT NOT NULL,
    status TEXT NOT NULL
        CHECK (status IN ('Idle', 'Working', 'Waiting', 'Completed', 'Error')),
    operation TEXT,
    registered_at REAL NOT NULL,
    last_heartbeat REAL NOT NULL,
    timeout_s REAL NOT NULL,
    incarnation INTEGER NOT NULL,
    revision INTEGER NOT NULL
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS agents_by_task ON agents (task);
CREATE TABLE IF NOT EXISTS messages (
    sequence INTEGER PRIMARY KEY AUTOINCREMENT,
    iri TEXT NOT NULL UNIQUE,
    topic TEXT NOT NULL,
    task TEXT,
    sender TEXT,
    payload TEXT NOT NULL,
    created_at REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS messages_by_topic ON messages (topic, sequence);
CREATE INDEX IF NOT EXISTS messages_by_task ON messages (task, sequence) WHERE task IS NOT NULL;
"""
# lease_grants keeps the newest grant per resource and kind (fenced or not): each grant
# replaces the row of its kind, and AUTOINCREMENT gives the new row a rowid above every rowid
# ever used, so one statement both takes the next token and, for Write and Exclusive, moves
# the fence. Tokens never go back, even after every row is replaced or deleted.


class CoordinationDB:
    """The coordination store in a SQLite database.

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
        self._tx = SQLiteTx(self._conn, clock)
        try:
            self.ensure_schema(_SCHEMA)
        except BaseException:
            self._conn.close()
            raise

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
                # frame instead of rewriting pages, which keeps a grant near 30 us. The switch
                # waits for processes that open a new file at the same time (``set_wal``).
                set_wal(conn, busy_timeout_ms=self.config.busy_timeout_ms)
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
    def write(self, doing: str, *, commit: Commit = "sync") -> Iterator[SQLiteTx]:
        """Run the block as one write transaction (a savepoint when nested on this thread).

        Args:
            doing: what the block does, for the message of a translated SQLite error.
            commit: accepted and checked, then ignored: every commit is as durable as the
                ``synchronous`` pragma (``CoordinationConfig.durability``) says, which a
                transaction cannot change.
        """
        check_commit(commit)
        with self._lock:
            self._check_open()
            conn = self._conn
            with translated("sqlite", doing):
                nested = self._depth > 0
                conn.execute("SAVEPOINT nested" if nested else "BEGIN IMMEDIATE")
                self._depth += 1
                try:
                    yield self._tx
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
    def read(self, doing: str) -> Iterator[SQLiteTx]:
        """Run the block's queries under the lock, translating SQLite errors."""
        with self._lock:
            self._check_open()
            with translated("sqlite", doing):
                yield self._tx

    def _check_open(self) -> None:
        if self._closed:
            raise ClosedError("the coordination database is closed")

    def scrub(self) -> None:
        """Rewrite the database with its freed pages zeroed and truncate its log.

        SQLite keeps a deleted row's bytes in free pages and in the write-ahead log; this
        leaves none (``secure_delete``, ``VACUUM``, a truncating checkpoint).
        """
        with self._lock:
            self._check_open()
            with translated("sqlite", "scrubbing the coordination database"):
                self._conn.execute("PRAGMA secure_delete = ON")
                try:
                    self._conn.execute("VACUUM")
                    if self.path is not None:
                        self._conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
                finally:
                    self._conn.execute("PRAGMA secure_delete = OFF")

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


class SQLiteTx:
    """A transaction of a ``CoordinationDB``: its record stores over the one connection.

    One per database, handed out by every ``write()`` and ``read()`` (the database's lock
    makes its transactions one at a time). ``connection`` is SQLite's own, for tests and tools.
    """

    __slots__ = ("_clock", "agents", "connection", "leases", "messages", "tasks")

    def __init__(self, conn: sqlite3.Connection, clock: Callable[[], float]) -> None:
        self.connection = conn
        self._clock = clock
        self.leases = SQLiteLeases(conn, clock)
        self.tasks = SQLiteTasks(conn)
        self.agents = SQLiteAgents(conn)
        self.messages = SQLiteMessages(conn)

    def now(self) -> float:
        """Return the coordination clock."""
        return self._clock()


# -- leases ------------------------------------------------------------------------------------


class SQLiteLeases:
    """The ``LeaseRecords`` of a ``CoordinationDB`` (tables ``leases`` and ``lease_grants``)."""

    __slots__ = ("_clock", "_conn")

    def __init__(self, conn: sqlite3.Connection, clock: Callable[[], float]) -> None:
        self._conn = conn
        self._clock = clock

    def _leases(self, where: str, values: tuple[object, ...]) -> list[Lease]:
        query = f"SELECT {LEASE_COLUMNS} FROM leases WHERE {where}"
        return [lease_of(row) for row in self._conn.execute(query, values)]

    def on(self, resource: str) -> list[Lease]:
        """Return every lease row on ``resource``, by holder."""
        return self._leases("resource = ? ORDER BY holder", (resource,))

    def on_any(self, resources: Sequence[str]) -> list[Lease]:
        """Return every lease row on any of ``resources``, by resource then holder (the
        names go as one JSON array: no bound on their number)."""
        if not resources:
            return []
        return self._leases(
            "resource IN (SELECT value FROM json_each(?)) ORDER BY resource, holder",
            (json.dumps(list(resources)),),
        )

    def live(self, resource: str, holder: str, now: float) -> Lease | None:
        """Return ``holder``'s live lease on ``resource``, if any."""
        row = self._conn.execute(
            f"SELECT {LEASE_COLUMNS} FROM leases"
            " WHERE resource = ? AND holder = ? AND expires_at > ?",
            (resource, holder, now),
        ).fetchone()
        return None if row is None else lease_of(row)

    def live_on(self, resource: str, now: float) -> list[Lease]:
        """Return the live leases on ``resource``, by token."""
        return self._leases("resource = ? AND expires_at > ? ORDER BY token", (resource, now))

    def live_all(self, now: float, holder: str | None = None) -> list[Lease]:
        """Return the live leases (of ``holder``), by resource then holder."""
        if holder is None:
            return self._leases("expires_at > ? ORDER BY resource, holder", (now,))
        return self._leases(
            "expires_at > ? AND holder = ? ORDER BY resource, holder", (now, holder)
        )

    def newest_token(self, resource: str) -> int | None:
        """Return the fence of ``resource``, if any."""
        row = self._conn.execute(
            "SELECT token FROM lease_grants WHERE resource = ? AND fenced = 1", (resource,)
        ).fetchone()
        return None if row is None else int(row[0])

    def grant(self, lease: Lease, *, fenced: bool) -> Lease:
        """Store ``lease`` with the next token (moving the fence when ``fenced``)."""
        cursor = self._conn.execute(
            "INSERT OR REPLACE INTO lease_grants (resource, fenced) VALUES (?, ?)",
            (lease.resource, int(fenced)),
        )
        token = int(cursor.lastrowid or 0)
        self._conn.execute(
            f"INSERT OR REPLACE INTO leases ({LEASE_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            (
                lease.resource,
                lease.holder,
                lease.mode.value,
                token,
                lease.depth,
                lease.ttl_s,
                lease.acquired_at,
                lease.expires_at,
            ),
        )
        return granted(lease, token)

    def grant_if_free(
        self,
        resource: str,
        holder: str,
        mode: LeaseMode,
        ttl_s: float,
        *,
        blocking: frozenset[LeaseMode],
        fenced: bool,
    ) -> FirstGrant:
        """Grant a first lease if no live row is ``holder``'s or of a ``blocking`` mode (the
        statements of the rows' read, the expired rows' deletion and ``grant``, under the
        transaction's write lock)."""
        now = self._clock()
        seen = self.on(resource)
        if any(_stands_in_way(lease, holder, blocking, now) for lease in seen):
            return FirstGrant(None, seen, now)
        self.delete_expired_on(resource, now)
        lease = Lease(resource, holder, mode, 0, 1, ttl_s, now, now + ttl_s)
        return FirstGrant(self.grant(lease, fenced=fenced), seen, now)

    def deepen(self, resource: str, holder: str, expires_at: float) -> None:
        """Add one acquisition to the lease row and set its expiry."""
        self._conn.execute(
            "UPDATE leases SET depth = depth + 1, expires_at = ? WHERE resource = ? AND holder = ?",
            (expires_at, resource, holder),
        )

    def set_expiry(self, resource: str, holder: str, expires_at: float) -> None:
        """Set the expiry of the lease row."""
        self._conn.execute(
            "UPDATE leases SET expires_at = ? WHERE resource = ? AND holder = ?",
            (expires_at, resource, holder),
        )

    def renew_all(self, holder: str, now: float) -> int:
        """Renew every live lease of ``holder`` by its TTL from ``now``; return how many."""
        cursor = self._conn.execute(
            "UPDATE leases SET expires_at = ? + ttl_s WHERE holder = ? AND expires_at > ?",
            (now, holder, now),
        )
        return cursor.rowcount

    def decrement(self, resource: str, holder: str) -> None:
        """Take one acquisition off the lease row."""
        self._conn.execute(
            "UPDATE leases SET depth = depth - 1 WHERE resource = ? AND holder = ?",
            (resource, holder),
        )

    def delete(self, resource: str, holder: str) -> None:
        """Delete the lease row, if any."""
        self._conn.execute(
            "DELETE FROM leases WHERE resource = ? AND holder = ?", (resource, holder)
        )

    def delete_expired_on(self, resource: str, now: float) -> None:
        """Delete the expired lease rows on ``resource``."""
        self._conn.execute(
            "DELETE FROM leases WHERE resource = ? AND expires_at <= ?", (resource, now)
        )

    def remove_holder(self, holder: str) -> list[Lease]:
        """Delete every lease row of ``holder``; return them by resource."""
        removed = self._leases("holder = ? ORDER BY resource", (holder,))
        if removed:
            self._conn.execute("DELETE FROM leases WHERE holder = ?", (holder,))
        return removed

    def remove_expired(self, now: float) -> list[Lease]:
        """Delete every expired lease row; return them by resource then holder."""
        removed = self._leases("expires_at <= ? ORDER BY resource, holder", (now,))
        if removed:
            self._conn.execute("DELETE FROM leases WHERE expires_at <= ?", (now,))
        return removed


def _stands_in_way(lease: Lease, holder: str, blocking: frozenset[LeaseMode], now: float) -> bool:
    """Whether ``lease`` is live and ``holder``'s own or of a ``blocking`` mode."""
    return lease.expires_at > now and (lease.holder == holder or lease.mode in blocking)


# -- tasks -------------------------------------------------------------------------------------


class SQLiteTasks:
    """The ``TaskRecords`` of a ``CoordinationDB`` (tables ``tasks``, ``task_dependencies``)."""

    __slots__ = ("_conn",)

    def __init__(self, conn: sqlite3.Connection) -> None:
        self._conn = conn

    def _column(self, query: str, *values: object) -> list[str]:
        return sorted(str(row[0]) for row in self._conn.execute(query, values))

    def _task(self, row: tuple[Any, ...]) -> Task:
        return task_of(row, self.dependencies(row[0]))

    def _tasks(self, query: str, *values: object) -> list[Task]:
        rows = self._conn.execute(query, values).fetchall()
        return [self._task(row) for row in rows]

    def get(self, iri: str) -> Task | None:
        """Return the task ``iri``, if it is registered."""
        row = self._conn.execute(
            f"SELECT {TASK_COLUMNS} FROM tasks WHERE iri = ?", (iri,)
        ).fetchone()
        return None if row is None else self._task(row)

    def insert(self, iri: str, *, parent: str | None, root: str, now: float) -> None:
        """Store a new pending task."""
        self._conn.execute(
            f"INSERT INTO tasks ({TASK_COLUMNS}) VALUES (?, ?, ?, 'pending', ?, ?, 1)",
            (iri, parent, root, now, now),
        )

    def all(self, status: TaskStatus | None = None) -> list[Task]:
        """Return every task (of ``status``), by IRI."""
        query = f"SELECT {TASK_COLUMNS} FROM tasks"
        if status is None:
            return self._tasks(f"{query} ORDER BY iri")
        return self._tasks(f"{query} WHERE status = ? ORDER BY iri", status.value)

    def children(self, iri: str) -> list[str]:
        """Return the children of ``iri``."""
        return self._column("SELECT iri FROM tasks WHERE parent = ?", iri)

    def unfinished_children(self, iri: str) -> list[str]:
        """Return the pending or running children of ``iri``."""
        return self._column(
            "SELECT iri FROM tasks WHERE parent = ? AND status IN ('pending', 'running')", iri
        )

    def dependencies(self, iri: str) -> list[str]:
        """Return what ``iri`` depends on."""
        return self._column("SELECT depends_on FROM task_dependencies WHERE task = ?", iri)

    def dependents(self, iri: str) -> list[str]:
        """Return what depends on ``iri``."""
        return self._column("SELECT task FROM task_dependencies WHERE depends_on = ?", iri)

    def unfinished_dependents(self, iri: str) -> list[str]:
        """Return the pending or running tasks that depend on ``iri``."""
        return self._column(
            "SELECT d.task FROM task_dependencies AS d JOIN tasks AS t ON t.iri = d.task "
            "WHERE d.depends_on = ? AND t.status IN ('pending', 'running')",
            iri,
        )

    def ready(self) -> list[Task]:
        """Return the pending tasks whose dependencies are all completed, by IRI."""
        return self._tasks(
            f"SELECT {TASK_COLUMNS} FROM tasks AS t WHERE status = 'pending' AND NOT EXISTS ("
            "SELECT 1 FROM task_dependencies AS d JOIN tasks AS u ON u.iri = d.depends_on "
            "WHERE d.task = t.iri AND u.status != 'completed') ORDER BY iri"
        )

    def finished_before(self, time: float) -> list[str]:
        """Return the completed or failed tasks last updated at or before ``time``."""
        return self._column(
            "SELECT iri FROM tasks WHERE status IN ('completed', 'failed') AND updated_at <= ?",
            time,
        )

    def link(self, task: str, depends_on: str) -> None:
        """Store the edge ``task`` depends on ``depends_on``."""
        self._conn.execute(
            "INSERT OR IGNORE INTO task_dependencies (task, depends_on) VALUES (?, ?)",
            (task, depends_on),
        )

    def unlink(self, task: str, depends_on: str) -> bool:
        """Delete the edge; return whether there was one."""
        cursor = self._conn.execute(
            "DELETE FROM task_dependencies WHERE task = ? AND depends_on = ?", (task, depends_on)
        )
        return cursor.rowcount > 0

    def touch(self, iri: str, now: float) -> None:
        """Record a change of ``iri``."""
        self._conn.execute(
            "UPDATE tasks SET updated_at = ?, revision = revision + 1 WHERE iri = ?", (now, iri)
        )

    def set_status(self, iri: str, status: TaskStatus, now: float) -> None:
        """Set the status of ``iri``."""
        self._conn.execute(
            "UPDATE tasks SET status = ?, updated_at = ?, revision = revision + 1 WHERE iri = ?",
            (status.value, now, iri),
        )

    def delete(self, iris: Iterable[str]) -> None:
        """Delete the tasks and every edge naming them."""
        for iri in iris:
            self._conn.execute("DELETE FROM tasks WHERE iri = ?", (iri,))
            self._conn.execute(
                "DELETE FROM task_dependencies WHERE task = ? OR depends_on = ?", (iri, iri)
            )


# -- agents ------------------------------------------------------------------------------------


class SQLiteAgents:
    """The ``AgentRecords`` of a ``CoordinationDB`` (table ``agents``)."""

    __slots__ = ("_conn",)

    def __init__(self, conn: sqlite3.Connection) -> None:
        self._conn = conn

    def find(self, name: str) -> Agent | None:
        """Return the agent ``name``, if it is registered."""
        row = self._conn.execute(
            f"SELECT {AGENT_COLUMNS} FROM agents WHERE name = ?", (name,)
        ).fetchone()
        return None if row is None else agent_of(row)

    def insert(self, agent: Agent) -> None:
        """Store ``agent``, replacing a row of the same name."""
        self._conn.execute(
            f"INSERT OR REPLACE INTO agents ({AGENT_COLUMNS})"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            agent_row(agent),
        )

    def beat(
        self, name: str, status: AgentStatus, operation: str | None, now: float
    ) -> Agent | None:
        """Record a heartbeat; return the agent as it is now."""
        self._conn.execute(
            "UPDATE agents SET status = ?, operation = COALESCE(?, operation), "
            "last_heartbeat = ?, revision = revision + 1 WHERE name = ?",
            (status.value, operation, now, name),
        )
        return self.find(name)

    def set_status(self, name: str, status: AgentStatus) -> Agent | None:
        """Set the status of ``name``; return the agent as it is now."""
        self._conn.execute(
            "UPDATE agents SET status = ?, revision = revision + 1 WHERE name = ?",
            (status.value, name),
        )
        return self.find(name)

    def delete(self, name: str) -> bool:
        """Delete the agent ``name``; return whether it was registered."""
        return self._conn.execute("DELETE FROM agents WHERE name = ?", (name,)).rowcount > 0

    def all(self) -> list[Agent]:
        """Return every registered agent, by name."""
        rows = self._conn.execute(f"SELECT {AGENT_COLUMNS} FROM agents ORDER BY name")
        return [agent_of(row) for row in rows]


# -- messages ----------------------------------------------------------------------------------


class SQLiteMessages:
    """The ``MessageRecords`` of a ``CoordinationDB`` (table ``messages``)."""

    __slots__ = ("_conn",)

    def __init__(self, conn: sqlite3.Connection) -> None:
        self._conn = conn

    def append(
        self,
        *,
        iri: str,
        topic: str,
        task: str | None,
        sender: str | None,
        payload: str,
        now: float,
    ) -> int:
        """Store a message; return its sequence (an ``AUTOINCREMENT`` key, never reused)."""
        cursor = self._conn.execute(
            f"INSERT INTO messages ({MESSAGE_COLUMNS}) VALUES (NULL, ?, ?, ?, ?, ?, ?)",
            (iri, topic, task, sender, payload, now),
        )
        return int(cursor.lastrowid or 0)

    def since(
        self,
        cursor: int,
        *,
        topic: str | None = None,
        task: str | None = None,
        limit: int | None = None,
    ) -> list[Message]:
        """Return the messages after ``cursor`` (of ``topic`` and ``task``), by sequence."""
        where: list[str] = ["sequence > ?"]
        values: list[object] = [cursor]
        if topic is not None:
            where.append("topic = ?")
            values.append(topic)
        if task is not None:
            where.append("task = ?")
            values.append(task)
        query = f"SELECT {MESSAGE_COLUMNS} FROM messages WHERE {' AND '.join(where)}"
        query += " ORDER BY sequence"
        if limit is not None:
            query += f" LIMIT {int(limit)}"
        return [message_of(row) for row in self._conn.execute(query, values)]

    def latest(self) -> int:
        """Return the newest sequence stored (0 when there is none)."""
        row = self._conn.execute("SELECT MAX(sequence) FROM messages").fetchone()
        return int(row[0] or 0)

    def prune(self, up_to: int) -> int:
        """Delete the messages up to ``up_to``; return how many."""
        return self._conn.execute("DELETE FROM messages WHERE sequence <= ?", (up_to,)).rowcount

    def forget_task(self, task: str) -> int:
        """Delete every message of ``task``; return how many."""
        return self._conn.execute("DELETE FROM messages WHERE task = ?", (task,)).rowcount
