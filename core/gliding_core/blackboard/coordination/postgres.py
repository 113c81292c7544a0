"""L2: the coordination store on PostgreSQL: leases, tasks, agents and messages that every
process and machine of a fleet shares.

``PostgresCoordinationStore`` implements ``CoordinationStore`` (``coordination.protocol``) over
tables prefixed ``coordination_`` in a memory's schema (``store.postgres.database``: one pool,
one named schema, errors translated with no password in them). The registries decide over
its rows exactly as over SQLite's; what this module adds is how the rules hold between
processes that share nothing but the database.

Why writes are serialisable across processes: every ``write()`` is a ``locked`` transaction
(``store.postgres.database``): it begins ``READ COMMITTED`` and, before its first read, takes a
transaction-level advisory lock that is the storage's own (its key is derived from the schema),
held until ``COMMIT`` or ``ROLLBACK``. So the writes of every
handle and process on one schema run one at a time, whole: a grant reads the holders and
inserts its lease with no other write in between, and at most one Write or Exclusive lease on
a node is ever live. ``READ COMMITTED`` matters: each statement takes its snapshot when it
starts, after the lock was granted, so it sees everything the previous holder of the lock
committed (PostgreSQL makes a commit visible before it releases the transaction's locks). A
``REPEATABLE READ`` or ``SERIALIZABLE`` transaction would take its snapshot at the lock
statement itself, before the wait, and could decide on rows the previous holder had changed;
the level is therefore set on every ``BEGIN``, not left to the server's default. The lock is
one per storage, as SQLite's write lock is per file: the decisions read across rows (a grant
reads every holder of a resource, a dependency reads the whole task graph), which row locks
could not cover without locking rows that do not exist yet.

Why tokens and sequences never go back: they come from PostgreSQL sequences (``CACHE 1``),
whose values are never handed out twice, even after a rollback, a deleted row or a restart,
and which are taken under the write lock, so a later commit always holds a larger one. The
fence of a resource is a row (``coordination_fences``) written in the grant's transaction: a
grant rolled back leaves the fence where it was.

Reads do not take the lock: a ``read()`` outside a write is one ``REPEATABLE READ READ ONLY``
transaction, a consistent snapshot that never waits for a writer. Inside a ``write()`` of the
same thread it joins the write (its connection); a nested ``write()`` is a savepoint. A
``write()`` opened inside a ``read()`` of the same thread runs on a connection of its own
(the read's snapshot could not take the lock soundly). A ``read()`` on a thread to which the
database lends a transaction (``Database.joining``: the coherence directory's update, while the
blackboard checks a write's leases in it) reads in that transaction, each statement on its own
snapshot: the reads made there are one statement each, or the fence check's two, which read a
token that only grows and a lease that names it.

Round trips: a transaction's opening (its level, limits, lock and clock) goes to the server
with its first statement, and the lease writes whose answer is not read go with the next
statement or the ``COMMIT`` (``store.postgres.database.Transaction``): a lease's grant is two
round trips when nobody holds the resource (the opening with the grant in one statement,
``grant_if_free``; the ``COMMIT`` with the flush after it; a re-entrant, upgrading, voiding or
refused request goes on in the same transaction from the rows that statement read), its
release two (the opening with the leases, the deletion with the ``COMMIT``).

The clock: ``clock=None`` (the default) reads the database server's clock, once per
transaction (with its first query, once a write holds the lock), so workers on several
machines measure lease expiry and heartbeats on one clock; tests pass a fake one.

Durability: a commit is as durable as the database's ``synchronous_commit`` says
(``DatabaseSettings``, on by default), whatever ``CoordinationConfig.durability`` says. SQLite's
``"normal"`` may lose the last commits only to a power loss, which ends every process that saw
them; the clients of a server outlive a crash of the server, and a grant lost with it would
hand its token (or a message its sequence) out again while its first holder still runs.

A write's ``commit`` (``coordination.protocol.Commit``) changes when that durability comes, not
whether, where the lease table asks (``coordination.leases`` gives the reasons):

- ``"sync"`` (every write but the lease table's): PostgreSQL's own synchronous commit, which
  waits for the log's flush before it releases the transaction's locks, the storage's lock
  with them. Each write then holds every other write of the schema for one flush of the disk.
- ``"flush"`` (a grant): the commit does not wait for the flush (``synchronous_commit`` off for
  the transaction), so the lock is free as soon as the commit is in the log; in the same round
  trip, an empty log message flushed on request (``pg_logical_emit_message(..., flush =>
  true)``, PostgreSQL 17 and later) flushes the log up to itself, the commit included, and only
  then does ``write()`` return. The write is durable before its caller learns of it, as with a
  synchronous commit; what changes is that others may see it a moment before that, and that
  concurrent writers' flushes are no longer made one after another under the lock (they share
  flushes, as concurrent commits do). Before PostgreSQL 17, with synchronous standbys, or with
  a pool whose commits are not synchronous, it is a ``"sync"``.
- ``"async"`` (a release): the commit does not wait for the flush, which the server makes
  within three times ``wal_writer_delay`` (0.6 s by default); a crash of the server may lose it.

Why seeing a write before it is durable, or losing an ``"async"`` one, can never undo a later
write: the log is flushed in order, so a flush that makes any later commit durable makes this
one durable too. A crash loses a suffix of the commits, never one commit from the middle: no
transaction that read a lost write (a grant that found a lease released, say) survives without
it.

A writer that stops inside its transaction (a process paused or stopped between two
statements) would hold the lock of every other process: the server ends its session after half
the busy timeout (``idle_in_transaction_session_timeout``, set for each write), its transaction
rolls back, and it gets a ``StorageError`` if it ever resumes.

Invariants:
- A transaction holds one pooled connection from its ``BEGIN`` to its end; a thread never holds
  two but for a write opened inside its own read.
- A lock wait longer than ``CoordinationConfig.busy_timeout_ms`` fails with ``StorageError``
  (PostgreSQL's ``lock_timeout``), never waits for ever.
- SQL is built from constants (and integers computed here); every value travels as a
  parameter (bound on the client by psycopg when it goes with other statements); the schema
  is the connection's ``search_path``.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from typing import Any

import psycopg

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
    MESSAGE_COLUMNS,
    TASK_COLUMNS,
    agent_of,
    agent_row,
    granted,
    message_of,
    task_of,
)
from gliding_core.blackboard.coordination.rows import LEASE_COLUMNS as _LEASE_COLUMNS
from gliding_core.blackboard.coordination.rows import lease_of as _lease
from gliding_core.config import CoordinationConfig
from gliding_core.errors import ClosedError, InvalidInputError
from gliding_core.jsonld import preview
from gliding_core.store.postgres.database import (
    SERVER_CLOCK,
    Database,
    DatabaseSettings,
    Migration,
    Transaction,
    lock_key,
    locked,
    transaction,
)

COMPONENT = "coordination"

_FLUSH_ON_REQUEST = 170_000
"""The first server version whose ``pg_logical_emit_message`` flushes the log on request."""

_ASYNC_COMMIT = "set_config('synchronous_commit', 'off', true)"
"""An ``"async"`` write's own setting: its commit does not wait for the log's flush."""

_COMMIT_UNLESS_STANDBYS = (
    "set_config('synchronous_commit', CASE current_setting('synchronous_standby_names')"
    " WHEN '' THEN 'off' ELSE current_setting('synchronous_commit') END, true)"
)
"""A ``"flush"`` write's own setting: its commit does not wait for the local flush, which
follows it; with synchronous standbys configured it waits as the session says (a standby's
acknowledgement cannot be asked for after the commit)."""

_COMMIT_THEN_FLUSH = (
    "SELECT set_config('gliding.flush_after_commit', (current_setting('synchronous_commit')"
    " = 'off' AND pg_current_xact_id_if_assigned() IS NOT NULL)::text, false); COMMIT;"
    " SELECT pg_logical_emit_message(false, 'gliding-horse', ''::text, true)"
    " WHERE current_setting('gliding.flush_after_commit') = 'true'"
)
"""A ``"flush"`` write's ending, one round trip: whether its commit will need a flush (it has
a transaction id, so it writes a commit record, which nobody waits for), the ``COMMIT``, then
an empty log message flushed at once (``flush => true``), which flushes the log up to itself
and so up to the commit before it; a transaction that wrote nothing flushes nothing."""

_TABLES = """
CREATE SEQUENCE coordination_tokens CACHE 1;
CREATE SEQUENCE coordination_sequences CACHE 1;
CREATE TABLE coordination_leases (
    resource text COLLATE "C" NOT NULL,
    holder text COLLATE "C" NOT NULL,
    mode text NOT NULL CHECK (mode IN ('read', 'write', 'exclusive')),
    token bigint NOT NULL,
    depth integer NOT NULL CHECK (depth > 0),
    ttl_s double precision NOT NULL,
    acquired_at double precision NOT NULL,
    expires_at double precision NOT NULL,
    PRIMARY KEY (resource, holder)
);
CREATE INDEX coordination_leases_by_holder ON coordination_leases (holder);
CREATE TABLE coordination_fences (
    resource text COLLATE "C" PRIMARY KEY,
    token bigint NOT NULL
);
CREATE TABLE coordination_tasks (
    iri text COLLATE "C" PRIMARY KEY,
    parent text COLLATE "C",
    root text COLLATE "C" NOT NULL,
    status text NOT NULL CHECK (status IN ('pending', 'running', 'completed', 'failed')),
    created_at double precision NOT NULL,
    updated_at double precision NOT NULL,
    revision bigint NOT NULL
);
CREATE INDEX coordination_tasks_by_parent ON coordination_tasks (parent)
    WHERE parent IS NOT NULL;
CREATE INDEX coordination_tasks_by_status ON coordination_tasks (status);
CREATE TABLE coordination_task_dependencies (
    task text COLLATE "C" NOT NULL,
    depends_on text COLLATE "C" NOT NULL,
    PRIMARY KEY (task, depends_on)
);
CREATE INDEX coordination_task_dependents ON coordination_task_dependencies (depends_on);
CREATE TABLE coordination_agents (
    name text COLLATE "C" PRIMARY KEY,
    role text NOT NULL,
    task text COLLATE "C" NOT NULL,
    status text NOT NULL CHECK (status IN ('Idle', 'Working', 'Waiting', 'Completed', 'Error')),
    operation text,
    registered_at double precision NOT NULL,
    last_heartbeat double precision NOT NULL,
    timeout_s double precision NOT NULL,
    incarnation bigint NOT NULL,
    revision bigint NOT NULL
);
CREATE INDEX coordination_agents_by_task ON coordination_agents (task);
CREATE TABLE coordination_messages (
    sequence bigint PRIMARY KEY,
    iri text COLLATE "C" NOT NULL UNIQUE,
    topic text COLLATE "C" NOT NULL,
    task text COLLATE "C",
    sender text,
    payload text NOT NULL,
    created_at double precision NOT NULL
);
CREATE INDEX coordination_messages_by_topic ON coordination_messages (topic, sequence);
CREATE INDEX coordination_messages_by_task ON coordination_messages (task, sequence)
    WHERE task IS NOT NULL;
"""


_TABLE_NAMES = (
    "coordination_leases",
    "coordination_fences",
    "coordination_tasks",
    "coordination_task_dependencies",
    "coordination_agents",
    "coordination_messages",
)
"""The coordination tables, which ``scrub`` rewrites."""


def _create_tables(conn: psycopg.Connection[Any]) -> None:
    conn.execute(_TABLES)


MIGRATIONS: list[Migration] = [(1, "create the coordination tables", _create_tables)]
"""The coordination tables' versions; ``Database.prepare`` runs the ones a schema lacks."""


@dataclass(slots=True)
class _Frame:
    """One transaction open on a thread: its connection, kind and savepoint depth."""

    conn: Transaction
    writing: bool
    tx: PostgresTx
    savepoints: int = 0


class _Frames(threading.local):
    """The transactions open on the current thread, innermost last."""

    def __init__(self) -> None:
        self.stack: list[_Frame] = []


class PostgresCoordinationStore:
    """The coordination store in a PostgreSQL schema, shared by every process that opens it.

    Args:
        database: the memory's database (pool and schema); the tables are created or upgraded
            in its schema when missing.
        config: coordination settings; ``CoordinationConfig()`` when omitted.
        clock: the coordination clock (seconds since the epoch); ``None`` reads the database
            server's clock, one clock for every machine.
        owns_database: whether ``close()`` closes ``database`` too.

    Safe to share between threads; any number of processes may open the same schema.
    """

    def __init__(
        self,
        database: Database,
        *,
        config: CoordinationConfig | None = None,
        clock: Callable[[], float] | None = None,
        owns_database: bool = False,
    ) -> None:
        if not isinstance(database, Database):
            raise InvalidInputError(f"database must be a Database, got {preview(database)}")
        self.database, self.owns_database = database, owns_database
        self._closed = False
        self._frames = _Frames()
        self._lock_key = lock_key(database.schema, COMPONENT)
        try:
            if clock is not None and not callable(clock):
                raise InvalidInputError(f"clock must be callable or None, got {preview(clock)}")
            if config is not None and not isinstance(config, CoordinationConfig):
                raise InvalidInputError(
                    f"config must be a CoordinationConfig, got {preview(config)}"
                )
            self.config = config or CoordinationConfig()
            self.clock = clock
            # lock_timeout 0 would wait for ever: a zero busy timeout waits the least it can.
            self._lock_timeout_ms = max(1, int(self.config.busy_timeout_ms))
            # A writer that stops between two statements (paused, stopped, hung) is ended by the
            # server after half the busy timeout, so the lock it holds comes free before the
            # other writers' waits run out.
            self._idle_limit_ms = max(1_000, self._lock_timeout_ms // 2)
            database.prepare(COMPONENT, MIGRATIONS)
        except BaseException:
            if owns_database:
                database.close()
            raise

    @classmethod
    def open(
        cls,
        url: str,
        *,
        schema: str = "gliding",
        settings: DatabaseSettings | None = None,
        config: CoordinationConfig | None = None,
        clock: Callable[[], float] | None = None,
    ) -> PostgresCoordinationStore:
        """Open the store in ``schema`` of the database at ``url`` (a libpq connection string)
        with a pool of its own, closed with the store."""
        database = Database(url, schema=schema, settings=settings)
        return cls(database, config=config, clock=clock, owns_database=True)

    @property
    def closed(self) -> bool:
        """Whether ``close()`` was called."""
        return self._closed

    def _check_open(self) -> None:
        if self._closed:
            raise ClosedError("the coordination store is closed")

    @contextmanager
    def write(self, doing: str, *, commit: Commit = "sync") -> Iterator[PostgresTx]:
        """Run the block as one write transaction under the storage's lock (a savepoint when
        nested in a write of this thread).

        Args:
            doing: what the block does, for the message of a translated PostgreSQL error.
            commit: how durable the commit must be (see the module); a nested write commits
                with its outer one, as that one says.
        """
        check_commit(commit)
        self._check_open()
        stack = self._frames.stack
        with self.database.translated(doing):
            if stack and stack[-1].writing:
                with self._savepoint(stack[-1]) as tx:
                    yield tx
            else:
                with self._transaction(writing=True, commit=commit) as tx:
                    yield tx

    @contextmanager
    def read(self, doing: str) -> Iterator[PostgresTx]:
        """Run the block's reads on one snapshot (joining an open transaction of this thread)."""
        self._check_open()
        stack = self._frames.stack
        with self.database.translated(doing):
            if stack:
                yield stack[-1].tx
                return
            joined = self.database.joined()
            if joined is not None:
                with self._framed(joined, writing=False) as tx:
                    yield tx
            else:
                with self._transaction(writing=False) as tx:
                    yield tx

    @contextmanager
    def _transaction(self, *, writing: bool, commit: Commit = "sync") -> Iterator[PostgresTx]:
        # The opening (BEGIN, a write's limits and the lock, and the server's clock as the
        # transaction starts, once it holds the lock, when it is the coordination clock) goes
        # with the transaction's first statement.
        clock = self.clock is None
        with self.database.connection() as conn:
            if writing:
                settings, ending = self._commit(conn, commit)
                opened = locked(
                    conn,
                    self._lock_key,
                    idle_ms=self._idle_limit_ms,
                    lock_timeout_ms=self._lock_timeout_ms,
                    clock=clock,
                    settings=settings,
                    ending=ending,
                )
            else:
                opened = transaction(
                    conn, "BEGIN ISOLATION LEVEL REPEATABLE READ, READ ONLY", clock=clock
                )
            with opened as txn, self._framed(txn, writing=writing) as tx:
                yield tx

    def _commit(self, conn: psycopg.Connection[Any], commit: Commit) -> tuple[list[str], str]:
        """The opening's settings and the ending of a write committed as ``commit`` says (see
        the module): a ``"flush"`` is a ``"sync"`` where the server cannot flush on request
        (before PostgreSQL 17) or the pool's commits are not synchronous anyway."""
        if commit == "async":
            return [_ASYNC_COMMIT], "COMMIT"
        if (
            commit == "flush"
            and self.database.settings.synchronous_commit
            and conn.info.server_version >= _FLUSH_ON_REQUEST
        ):
            return [_COMMIT_UNLESS_STANDBYS], _COMMIT_THEN_FLUSH
        return [], "COMMIT"

    @contextmanager
    def _framed(self, txn: Transaction, *, writing: bool) -> Iterator[PostgresTx]:
        """The block as the thread's innermost transaction, in ``txn``."""
        frame = _Frame(txn, writing, PostgresTx(txn, self.clock))
        stack = self._frames.stack
        stack.append(frame)
        try:
            yield frame.tx
        finally:
            stack.pop()

    @contextmanager
    def _savepoint(self, frame: _Frame) -> Iterator[PostgresTx]:
        frame.savepoints += 1
        name = f"nested_{frame.savepoints}"
        txn = frame.conn
        txn.execute(f"SAVEPOINT {name}")  # (with what waited: none of it is the block's)
        try:
            yield frame.tx
        except BaseException:
            txn.discard()  # the block's writes not sent yet
            _quietly(txn, f"ROLLBACK TO SAVEPOINT {name}; RELEASE SAVEPOINT {name}")
            raise
        finally:
            frame.savepoints -= 1
        txn.defer(f"RELEASE SAVEPOINT {name}")

    def scrub(self) -> None:
        """Make deleted records unrecoverable from the store's tables.

        PostgreSQL keeps a deleted row's bytes in its table's pages until they are reused, and
        an index keeps its keys: this rewrites the coordination tables and their indexes into
        new files (``VACUUM FULL``), dropping the old ones, and then the planner's statistics
        (``Database.rewrite``). Each table is locked while it is
        copied (writers and readers wait; the scrub waits for the lock at most the database's
        lock timeout). The
        write-ahead log, replicas and backups are the server administrator's.

        Raises:
            InvalidInputError: the calling thread is inside a transaction of this store.
            StorageError: PostgreSQL failed, or a lock was not granted in time.
        """
        self._check_open()
        if self._frames.stack:
            raise InvalidInputError("scrub() cannot run inside a coordination transaction")
        self.database.rewrite(_TABLE_NAMES, "scrubbing the coordination store")

    def close(self) -> None:
        """Close the store (and its database when it owns it); twice is harmless."""
        if not self._closed:
            self._closed = True
            if self.owns_database:
                self.database.close()

    def __enter__(self) -> PostgresCoordinationStore:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"PostgresCoordinationStore({self.database!r})"


def _quietly(conn: Transaction, statement: str) -> None:
    """Roll back after a failure, keeping the failure: a connection that broke cannot roll
    back, and the pool discards it when it comes back."""
    with suppress(psycopg.Error):
        conn.execute(statement)


class PostgresTx:
    """A transaction of a ``PostgresCoordinationStore``: its record stores over one
    ``Transaction`` (one connection)."""

    __slots__ = ("_clock", "_now", "_txn", "agents", "leases", "messages", "tasks")

    def __init__(self, txn: Transaction, clock: Callable[[], float] | None) -> None:
        self._txn = txn
        self._clock = clock
        self._now: float | None = None
        self.leases = PostgresLeases(txn, self)
        self.tasks = PostgresTasks(txn)
        self.agents = PostgresAgents(txn)
        self.messages = PostgresMessages(txn)

    @property
    def connection(self) -> psycopg.Connection[Any]:
        """psycopg's own connection, inside the transaction (for tests and tools)."""
        self._txn.open()
        return self._txn.conn

    def fixed_clock(self) -> float | None:
        """Return the store's own clock's reading, or ``None`` when it is the server's."""
        return None if self._clock is None else self._clock()

    def set_now(self, now: float) -> None:
        """Make ``now`` the transaction's reading of the server's clock (a statement read it
        after the lock, as the opening does), unless the store has a clock of its own."""
        if self._clock is None:
            self._now = now

    def now(self) -> float:
        """Return the coordination clock (by default the server's, as the transaction began:
        read by its opening, sent now if it was not)."""
        if self._clock is not None:
            return self._clock()
        if self._now is None:
            self._txn.open()
            self._now = self._txn.clock
        if self._now is None:  # a transaction whose opening did not read it
            row = self._txn.execute(f"SELECT {SERVER_CLOCK}").fetchone()
            assert row is not None
            self._now = float(row[0])
        return self._now


# -- leases ------------------------------------------------------------------------------------


class PostgresLeases:
    """The ``LeaseRecords`` of a transaction (``coordination_leases``, ``coordination_fences``)."""

    __slots__ = ("_conn", "_tx")

    def __init__(self, conn: Transaction, tx: PostgresTx) -> None:
        self._conn = conn
        self._tx = tx

    def _leases(self, where: str, values: tuple[object, ...]) -> list[Lease]:
        query = f"SELECT {_LEASE_COLUMNS} FROM coordination_leases WHERE {where}"
        return [_lease(row) for row in self._conn.execute(query, values)]

    def on(self, resource: str) -> list[Lease]:
        """Return every lease row on ``resource``, by holder."""
        return self._leases("resource = %s ORDER BY holder", (resource,))

    def on_any(self, resources: Sequence[str]) -> list[Lease]:
        """Return every lease row on any of ``resources``, by resource then holder."""
        if not resources:
            return []
        return self._leases(
            "resource = ANY(%s::text[]) ORDER BY resource, holder", (list(resources),)
        )

    def live(self, resource: str, holder: str, now: float) -> Lease | None:
        """Return ``holder``'s live lease on ``resource``, if any."""
        found = self._leases(
            "resource = %s AND holder = %s AND expires_at > %s", (resource, holder, now)
        )
        return found[0] if found else None

    def live_on(self, resource: str, now: float) -> list[Lease]:
        """Return the live leases on ``resource``, by token."""
        return self._leases("resource = %s AND expires_at > %s ORDER BY token", (resource, now))

    def live_all(self, now: float, holder: str | None = None) -> list[Lease]:
        """Return the live leases (of ``holder``), by resource then holder."""
        if holder is None:
            return self._leases("expires_at > %s ORDER BY resource, holder", (now,))
        return self._leases(
            "expires_at > %s AND holder = %s ORDER BY resource, holder", (now, holder)
        )

    def newest_token(self, resource: str) -> int | None:
        """Return the fence of ``resource``, if any."""
        row = self._conn.execute(
            "SELECT token FROM coordination_fences WHERE resource = %s", (resource,)
        ).fetchone()
        return None if row is None else int(row[0])

    def grant(self, lease: Lease, *, fenced: bool) -> Lease:
        """Store ``lease`` with the next token (moving the fence when ``fenced``), in one
        statement: the token is taken once and written to the lease and the fence."""
        row = self._conn.execute(
            "WITH taken AS (SELECT nextval('coordination_tokens') AS token),"
            " fence AS (INSERT INTO coordination_fences (resource, token)"
            " SELECT %s, token FROM taken WHERE %s"
            " ON CONFLICT (resource) DO UPDATE SET token = excluded.token)"
            f" INSERT INTO coordination_leases ({_LEASE_COLUMNS})"
            " SELECT %s, %s, %s, token, %s, %s, %s, %s FROM taken"
            " ON CONFLICT (resource, holder) DO UPDATE"
            " SET mode = excluded.mode, token = excluded.token, depth = excluded.depth,"
            " ttl_s = excluded.ttl_s, acquired_at = excluded.acquired_at,"
            " expires_at = excluded.expires_at RETURNING token",
            (
                lease.resource,
                fenced,
                lease.resource,
                lease.holder,
                lease.mode.value,
                lease.depth,
                lease.ttl_s,
                lease.acquired_at,
                lease.expires_at,
            ),
        ).fetchone()
        assert row is not None
        return granted(lease, int(row[0]))

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
        """Grant a first lease if no live row is ``holder``'s or of a ``blocking`` mode, in one
        statement (``_FIRST_GRANT``), which goes with the transaction's opening: the rows'
        read, the clock, the expired rows' deletion, the token, the fence and the lease.

        The transaction's clock is the statement's from then on (``now()`` reads it), read after
        the lock was granted, as the opening's is.
        """
        clock = self._tx.fixed_clock()
        values = {
            "resource": resource,
            "holder": holder,
            "mode": mode.value,
            "ttl": ttl_s,
            "blocking": sorted(blocked.value for blocked in blocking),
            "fenced": fenced,
            "clock": clock,
        }
        query = _FIRST_GRANT.format(
            now=SERVER_CLOCK if clock is None else "%(clock)s::double precision"
        )
        rows = self._conn.execute(query, values).fetchall()
        token, now = rows[0][4], float(rows[0][7])
        self._tx.set_now(now)
        seen = sorted((_lease(row[1:]) for row in rows[1:]), key=_order)
        if token is None:
            return FirstGrant(None, seen, now)
        granted = Lease(resource, holder, mode, int(token), 1, ttl_s, now, now + ttl_s)
        return FirstGrant(granted, seen, now)

    def deepen(self, resource: str, holder: str, expires_at: float) -> None:
        """Add one acquisition to the lease row and set its expiry."""
        self._conn.defer(
            "UPDATE coordination_leases SET depth = depth + 1, expires_at = %s"
            " WHERE resource = %s AND holder = %s",
            (expires_at, resource, holder),
        )

    def set_expiry(self, resource: str, holder: str, expires_at: float) -> None:
        """Set the expiry of the lease row."""
        self._conn.defer(
            "UPDATE coordination_leases SET expires_at = %s WHERE resource = %s AND holder = %s",
            (expires_at, resource, holder),
        )

    def renew_all(self, holder: str, now: float) -> int:
        """Renew every live lease of ``holder`` by its TTL from ``now``; return how many."""
        cursor = self._conn.execute(
            "UPDATE coordination_leases SET expires_at = %s + ttl_s"
            " WHERE holder = %s AND expires_at > %s",
            (now, holder, now),
        )
        return cursor.rowcount

    def decrement(self, resource: str, holder: str) -> None:
        """Take one acquisition off the lease row."""
        self._conn.defer(
            "UPDATE coordination_leases SET depth = depth - 1 WHERE resource = %s AND holder = %s",
            (resource, holder),
        )

    def delete(self, resource: str, holder: str) -> None:
        """Delete the lease row, if any."""
        self._conn.defer(
            "DELETE FROM coordination_leases WHERE resource = %s AND holder = %s",
            (resource, holder),
        )

    def delete_expired_on(self, resource: str, now: float) -> None:
        """Delete the expired lease rows on ``resource``."""
        self._conn.defer(
            "DELETE FROM coordination_leases WHERE resource = %s AND expires_at <= %s",
            (resource, now),
        )

    def remove_holder(self, holder: str) -> list[Lease]:
        """Delete every lease row of ``holder``; return them by resource."""
        return self._remove("holder = %s", (holder,))

    def remove_expired(self, now: float) -> list[Lease]:
        """Delete every expired lease row; return them by resource then holder."""
        return self._remove("expires_at <= %s", (now,))

    def _remove(self, where: str, values: tuple[object, ...]) -> list[Lease]:
        rows = self._conn.execute(
            f"DELETE FROM coordination_leases WHERE {where} RETURNING {_LEASE_COLUMNS}", values
        ).fetchall()
        return sorted((_lease(row) for row in rows), key=lambda lease: _order(lease))


_FIRST_GRANT = (
    "WITH clock AS (SELECT {now} AS now),"
    f" seen AS (SELECT {_LEASE_COLUMNS} FROM coordination_leases WHERE resource = %(resource)s),"
    " free AS (SELECT clock.now FROM clock WHERE NOT EXISTS (SELECT 1 FROM seen"
    " WHERE seen.expires_at > clock.now"
    " AND (seen.holder = %(holder)s OR seen.mode = ANY(%(blocking)s::text[])))),"
    " gone AS (DELETE FROM coordination_leases AS l USING free"
    " WHERE l.resource = %(resource)s AND l.holder <> %(holder)s AND l.expires_at <= free.now),"
    " taken AS (SELECT nextval('coordination_tokens') AS token, free.now FROM free),"
    " fence AS (INSERT INTO coordination_fences (resource, token)"
    " SELECT %(resource)s, token FROM taken WHERE %(fenced)s"
    " ON CONFLICT (resource) DO UPDATE SET token = excluded.token),"
    f" granted AS (INSERT INTO coordination_leases ({_LEASE_COLUMNS})"
    " SELECT %(resource)s, %(holder)s, %(mode)s, token, 1, %(ttl)s::double precision, now,"
    " now + %(ttl)s::double precision"
    " FROM taken ON CONFLICT (resource, holder) DO UPDATE"
    " SET mode = excluded.mode, token = excluded.token, depth = excluded.depth,"
    " ttl_s = excluded.ttl_s, acquired_at = excluded.acquired_at,"
    " expires_at = excluded.expires_at RETURNING token)"
    " SELECT 0, NULL::text, NULL::text, NULL::text, (SELECT token FROM granted), NULL::integer,"
    " NULL::double precision, (SELECT now FROM clock), NULL::double precision"
    f" UNION ALL SELECT 1, {_LEASE_COLUMNS} FROM seen ORDER BY 1"
)
"""``grant_if_free`` in one statement: the first row carries the token granted (``NULL``:
none) and the clock; the others are the resource's rows before it. Every CTE sees the
statement's one snapshot, taken after the storage's lock was granted (the opening went
first), and the data-modifying ones run whether or not the query reads them: the expired
rows of others go only when the grant is made (``free`` has a row), the token is taken only
then, and the holder's own expired row is replaced by the grant (not deleted beside it: one
statement may change a row once)."""


def _order(lease: Lease) -> tuple[bytes, bytes]:
    """Sort key of leases by resource then holder, in code point order (as ``COLLATE "C"``)."""
    return (
        lease.resource.encode("utf-8", "surrogatepass"),
        lease.holder.encode("utf-8", "surrogatepass"),
    )


# -- tasks -------------------------------------------------------------------------------------


class PostgresTasks:
    """The ``TaskRecords`` of a transaction (``coordination_tasks`` and their dependencies)."""

    __slots__ = ("_conn",)

    def __init__(self, conn: Transaction) -> None:
        self._conn = conn

    def _column(self, query: str, *values: object) -> list[str]:
        return [str(row[0]) for row in self._conn.execute(query + " ORDER BY 1", values)]

    def _tasks(self, where: str, *values: object) -> list[Task]:
        """The tasks matching ``where`` (on ``t``), by IRI, each with its sorted dependencies."""
        rows = self._conn.execute(
            "SELECT t.iri, t.parent, t.root, t.status, t.created_at, t.updated_at, t.revision,"
            " coalesce((SELECT array_agg(d.depends_on ORDER BY d.depends_on)"
            " FROM coordination_task_dependencies AS d WHERE d.task = t.iri), '{}')"
            f" FROM coordination_tasks AS t {where} ORDER BY t.iri",
            values,
        ).fetchall()
        return [task_of(row[:-1], row[-1]) for row in rows]

    def get(self, iri: str) -> Task | None:
        """Return the task ``iri``, if it is registered."""
        found = self._tasks("WHERE t.iri = %s", iri)
        return found[0] if found else None

    def insert(self, iri: str, *, parent: str | None, root: str, now: float) -> None:
        """Store a new pending task."""
        self._conn.execute(
            f"INSERT INTO coordination_tasks ({TASK_COLUMNS})"
            " VALUES (%s, %s, %s, 'pending', %s, %s, 1)",
            (iri, parent, root, now, now),
        )

    def all(self, status: TaskStatus | None = None) -> list[Task]:
        """Return every task (of ``status``), by IRI."""
        if status is None:
            return self._tasks("")
        return self._tasks("WHERE t.status = %s", status.value)

    def children(self, iri: str) -> list[str]:
        """Return the children of ``iri``."""
        return self._column("SELECT iri FROM coordination_tasks WHERE parent = %s", iri)

    def unfinished_children(self, iri: str) -> list[str]:
        """Return the pending or running children of ``iri``."""
        return self._column(
            "SELECT iri FROM coordination_tasks"
            " WHERE parent = %s AND status IN ('pending', 'running')",
            iri,
        )

    def dependencies(self, iri: str) -> list[str]:
        """Return what ``iri`` depends on."""
        return self._column(
            "SELECT depends_on FROM coordination_task_dependencies WHERE task = %s", iri
        )

    def dependents(self, iri: str) -> list[str]:
        """Return what depends on ``iri``."""
        return self._column(
            "SELECT task FROM coordination_task_dependencies WHERE depends_on = %s", iri
        )

    def unfinished_dependents(self, iri: str) -> list[str]:
        """Return the pending or running tasks that depend on ``iri``."""
        return self._column(
            "SELECT d.task FROM coordination_task_dependencies AS d"
            " JOIN coordination_tasks AS t ON t.iri = d.task"
            " WHERE d.depends_on = %s AND t.status IN ('pending', 'running')",
            iri,
        )

    def ready(self) -> list[Task]:
        """Return the pending tasks whose dependencies are all completed, by IRI."""
        return self._tasks(
            "WHERE t.status = 'pending' AND NOT EXISTS (SELECT 1"
            " FROM coordination_task_dependencies AS d"
            " JOIN coordination_tasks AS u ON u.iri = d.depends_on"
            " WHERE d.task = t.iri AND u.status <> 'completed')"
        )

    def finished_before(self, time: float) -> list[str]:
        """Return the completed or failed tasks last updated at or before ``time``."""
        return self._column(
            "SELECT iri FROM coordination_tasks"
            " WHERE status IN ('completed', 'failed') AND updated_at <= %s",
            time,
        )

    def link(self, task: str, depends_on: str) -> None:
        """Store the edge ``task`` depends on ``depends_on``."""
        self._conn.execute(
            "INSERT INTO coordination_task_dependencies (task, depends_on) VALUES (%s, %s)"
            " ON CONFLICT DO NOTHING",
            (task, depends_on),
        )

    def unlink(self, task: str, depends_on: str) -> bool:
        """Delete the edge; return whether there was one."""
        cursor = self._conn.execute(
            "DELETE FROM coordination_task_dependencies WHERE task = %s AND depends_on = %s",
            (task, depends_on),
        )
        return cursor.rowcount > 0

    def touch(self, iri: str, now: float) -> None:
        """Record a change of ``iri``."""
        self._conn.execute(
            "UPDATE coordination_tasks SET updated_at = %s, revision = revision + 1 WHERE iri = %s",
            (now, iri),
        )

    def set_status(self, iri: str, status: TaskStatus, now: float) -> None:
        """Set the status of ``iri``."""
        self._conn.execute(
            "UPDATE coordination_tasks SET status = %s, updated_at = %s,"
            " revision = revision + 1 WHERE iri = %s",
            (status.value, now, iri),
        )

    def delete(self, iris: Iterable[str]) -> None:
        """Delete the tasks and every edge naming them."""
        doomed = list(iris)
        if not doomed:
            return
        self._conn.execute("DELETE FROM coordination_tasks WHERE iri = ANY(%s)", (doomed,))
        self._conn.execute(
            "DELETE FROM coordination_task_dependencies"
            " WHERE task = ANY(%s) OR depends_on = ANY(%s)",
            (doomed, doomed),
        )


# -- agents ------------------------------------------------------------------------------------


class PostgresAgents:
    """The ``AgentRecords`` of a transaction (``coordination_agents``)."""

    __slots__ = ("_conn",)

    def __init__(self, conn: Transaction) -> None:
        self._conn = conn

    def _one(self, query: str, values: tuple[object, ...]) -> Agent | None:
        row = self._conn.execute(query, values).fetchone()
        return None if row is None else agent_of(row)

    def find(self, name: str) -> Agent | None:
        """Return the agent ``name``, if it is registered."""
        return self._one(
            f"SELECT {AGENT_COLUMNS} FROM coordination_agents WHERE name = %s", (name,)
        )

    def insert(self, agent: Agent) -> None:
        """Store ``agent``, replacing a row of the same name."""
        self._conn.execute(
            f"INSERT INTO coordination_agents ({AGENT_COLUMNS})"
            " VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s) ON CONFLICT (name) DO UPDATE"
            " SET role = excluded.role, task = excluded.task, status = excluded.status,"
            " operation = excluded.operation, registered_at = excluded.registered_at,"
            " last_heartbeat = excluded.last_heartbeat, timeout_s = excluded.timeout_s,"
            " incarnation = excluded.incarnation, revision = excluded.revision",
            agent_row(agent),
        )

    def beat(
        self, name: str, status: AgentStatus, operation: str | None, now: float
    ) -> Agent | None:
        """Record a heartbeat; return the agent as it is now."""
        return self._one(
            "UPDATE coordination_agents SET status = %s,"
            " operation = COALESCE(%s, operation), last_heartbeat = %s,"
            f" revision = revision + 1 WHERE name = %s RETURNING {AGENT_COLUMNS}",
            (status.value, operation, now, name),
        )

    def set_status(self, name: str, status: AgentStatus) -> Agent | None:
        """Set the status of ``name``; return the agent as it is now."""
        return self._one(
            "UPDATE coordination_agents SET status = %s, revision = revision + 1"
            f" WHERE name = %s RETURNING {AGENT_COLUMNS}",
            (status.value, name),
        )

    def delete(self, name: str) -> bool:
        """Delete the agent ``name``; return whether it was registered."""
        cursor = self._conn.execute("DELETE FROM coordination_agents WHERE name = %s", (name,))
        return cursor.rowcount > 0

    def all(self) -> list[Agent]:
        """Return every registered agent, by name."""
        rows = self._conn.execute(f"SELECT {AGENT_COLUMNS} FROM coordination_agents ORDER BY name")
        return [agent_of(row) for row in rows]


# -- messages ----------------------------------------------------------------------------------


class PostgresMessages:
    """The ``MessageRecords`` of a transaction (``coordination_messages``)."""

    __slots__ = ("_conn",)

    def __init__(self, conn: Transaction) -> None:
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
        """Store a message; return its sequence (from a sequence, never handed out twice)."""
        row = self._conn.execute(
            f"INSERT INTO coordination_messages ({MESSAGE_COLUMNS})"
            " VALUES (nextval('coordination_sequences'), %s, %s, %s, %s, %s, %s)"
            " RETURNING sequence",
            (iri, topic, task, sender, payload, now),
        ).fetchone()
        assert row is not None
        return int(row[0])

    def since(
        self,
        cursor: int,
        *,
        topic: str | None = None,
        task: str | None = None,
        limit: int | None = None,
    ) -> list[Message]:
        """Return the messages after ``cursor`` (of ``topic`` and ``task``), by sequence."""
        where: list[str] = ["sequence > %s"]
        values: list[object] = [cursor]
        if topic is not None:
            where.append("topic = %s")
            values.append(topic)
        if task is not None:
            where.append("task = %s")
            values.append(task)
        query = f"SELECT {MESSAGE_COLUMNS} FROM coordination_messages"
        query += f" WHERE {' AND '.join(where)} ORDER BY sequence"
        if limit is not None:
            query += f" LIMIT {int(limit)}"
        return [message_of(row) for row in self._conn.execute(query, values)]

    def latest(self) -> int:
        """Return the newest sequence stored (0 when there is none)."""
        row = self._conn.execute("SELECT max(sequence) FROM coordination_messages").fetchone()
        return int(row[0] or 0) if row is not None else 0

    def prune(self, up_to: int) -> int:
        """Delete the messages up to ``up_to``; return how many."""
        cursor = self._conn.execute(
            "DELETE FROM coordination_messages WHERE sequence <= %s", (up_to,)
        )
        return cursor.rowcount

    def forget_task(self, task: str) -> int:
        """Delete every message of ``task``; return how many (their sequences are never
        given out again: they come from a sequence)."""
        cursor = self._conn.execute("DELETE FROM coordination_messages WHERE task = %s", (task,))
        return cursor.rowcount
