"""L0: a PostgreSQL database as the stores use it: a connection pool in one named schema,
errors translated, secrets kept out of every message, and the schema's version kept in it.

``Database(url, schema=...)`` takes any libpq connection string (``postgresql://user@host/db``,
a unix socket as ``postgresql://user@/db?host=/run/dir``, or ``key=value`` pairs) and opens a
``psycopg_pool`` pool of autocommit connections whose ``search_path`` is the schema, so several
memories share one database, each in a schema of its own. The password never travels in the
connection string the pool keeps: it goes to libpq as a separate argument, ``display`` shows
the rest, and ``translated`` removes it from any message that would still carry it.

``statements`` counts the statements the pool's connections have sent (each ``execute``,
``executemany`` and ``COPY``; several statements sent as one string, one round trip, count
once): a figure that load does not move, by which tests and benchmarks pin how many times an
operation goes to the server. ``Transaction`` sends a transaction's opening with its first
statement and its trailing writes with its ``COMMIT``; ``locked`` is such a transaction under
an advisory lock, and ``Database.joining`` lends one to the reads of another store.

``prepare`` creates the schema and a component's tables, or upgrades them in place, in one
transaction under an advisory lock, so processes that open a new schema at once create it once.
It needs no superuser: an ordinary role that owns the database (or holds ``CREATE`` on it) may
create schemas and tables. What the role may not do is reported as a ``ConfigError`` naming the
statement an administrator must run (``require_extension`` does the same for an extension,
such as ``vector``, which is not a trusted one).

Why no call waits for ever: a server that closes or refuses connections fails a call at once,
but one that hangs with its connections open (a stopped process, a paused machine, a network
partition) answers nothing, and libpq would wait for its answer for ever. So every wait of a
connection for the server is bounded on the client (``BoundedConnection``): when half the
timeout passes with no answer, a new connection is tried (a probe); a server that answers it is
alive and busy (a long statement, a lock wait that its own ``lock_timeout`` ends), and the wait
goes on, probing again each half timeout; one that does not answer within the other half is
taken to be gone, the connection is dropped and the call fails with ``SilentServerError`` (a
``DatabaseUnavailableError`` once translated), about one timeout after it was made. The pool
replaces the dropped connection once the server answers again. A server-side
``statement_timeout`` could not do this (a stopped server enforces nothing) and would cut the
long statements of a live one. TCP keepalives and ``tcp_user_timeout`` (when the URL sets none)
let the kernel find a dead peer of an idle or sending connection, such as the coherence
listener's.

Invariants: no message, ``repr`` or log line of this module holds the password; every psycopg
or pool exception leaves as a ``GlidingError`` (``boundary``'s ``postgresql`` table); no wait
for the server outlasts about ``DatabaseSettings.timeout_s`` unless the server answers probes.
"""

from __future__ import annotations

import hashlib
import logging
import math
import re
import threading
import time
from collections.abc import Callable, Generator, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager, suppress
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Literal, TypeVar, cast

import psycopg
import psycopg_pool
from psycopg import errors as pg_errors
from psycopg.abc import PQGen
from psycopg.conninfo import conninfo_to_dict, make_conninfo
from psycopg.waiting import Ready, Wait

from gliding_core.boundary import translate
from gliding_core.errors import ConfigError, GlidingError, InvalidInputError
from gliding_core.jsonld import preview

logger = logging.getLogger(__name__)

_SCHEMA_NAME = re.compile(r"[a-z_][a-z0-9_]{0,62}")
_SECRETS = ("password", "sslpassword")
_VERSIONS = """
CREATE TABLE IF NOT EXISTS schema_versions (
    component text COLLATE "C" PRIMARY KEY,
    version integer NOT NULL
)
"""

Migration = tuple[int, str, Callable[[psycopg.Connection[Any]], None]]
"""One step of a component's schema: the version it makes, what it does, and how."""

_T = TypeVar("_T")
_WAKE_S = 0.1  # how often a wait for the server wakes to look at its deadline (psycopg's own)
_KEEPALIVE_COUNT = 3


class SilentServerError(psycopg.OperationalError):
    """The server took a statement and neither answered it nor a new connection within the
    timeout: it is stopped, hung or cut off. The connection was dropped."""


class _OverdueError(Exception):
    """A wait for the server passed its deadline (raised to stop psycopg's wait loop)."""


class BoundedConnection(psycopg.Connection[Any]):
    """A psycopg connection whose waits for the server end (see the module: why no call
    waits for ever).

    ``Database`` sets ``patience_s`` (how long a wait goes before the server is probed) and
    ``answers`` (the probe); a connection without them waits as psycopg's does.
    """

    patience_s: float | None = None
    answers: Callable[[], bool] | None = None
    shown: str = "PostgreSQL"

    def wait(self, gen: PQGen[_T], interval: float = _WAKE_S, timeout: float | None = None) -> _T:
        """Consume ``gen`` (psycopg's protocol); with ``timeout`` given, as psycopg does.

        Raises:
            SilentServerError: the server answered neither ``gen`` nor a probe in time.
        """
        patience, answers = self.patience_s, self.answers
        if timeout is not None or patience is None or answers is None:
            if timeout is None:
                return super().wait(gen, interval)
            return super().wait(gen, interval, timeout)
        try:
            waiting = _Resumable(gen, next(gen))
        except StopIteration as done:
            return cast(_T, done.value)
        while True:
            try:
                return cast(_T, super().wait(waiting.until(time.monotonic() + patience), interval))
            except _OverdueError:
                pass
            if not answers():
                self.pgconn.finish()  # its state is unknown: nothing may use it again
                raise SilentServerError(
                    f"{self.shown} took a statement and answered neither it nor a new"
                    f" connection within {2 * patience:g} s: the server is stopped, hung or"
                    " cut off"
                )


class _Resumable:
    """A psycopg generator that may be waited for in several goes: ``until(deadline)`` is a
    generator driving it from where the last go stopped, which raises ``_OverdueError`` when it is
    woken with nothing ready after ``deadline``."""

    __slots__ = ("gen", "state")

    def __init__(self, gen: PQGen[Any], state: Wait) -> None:
        self.gen, self.state = gen, state

    def until(self, deadline: float) -> Generator[Wait, Ready | int, Any]:
        while True:
            ready = yield self.state
            if not ready and time.monotonic() >= deadline:
                raise _OverdueError
            try:
                self.state = self.gen.send(ready)
            except StopIteration as done:
                return done.value


class _Tally:
    """A count shared by threads."""

    def __init__(self) -> None:
        self.value = 0
        self._lock = threading.Lock()

    def add(self) -> None:
        with self._lock:
            self.value += 1


class _Connection(BoundedConnection):
    """A connection of the pool: its waits end (``BoundedConnection``), and it knows the tally
    its cursors count their statements on, and the session settings ``session_setting`` gave
    it."""

    tally: _Tally | None = None
    settings: dict[str, str] | None = None


def session_setting(conn: psycopg.Connection[Any], name: str, value: str) -> None:
    """Set the server setting ``name`` to ``value`` for the rest of ``conn``'s session.

    A statement the first time a connection of the pool is given the value, none after (the
    connection remembers it): a query that needs a setting of its own then costs no round
    trip of a ``SET LOCAL`` and its transaction. Every user of ``name`` must set it through
    here. ``conn`` must be outside a transaction (a rollback would undo the setting unseen).
    """
    known = conn.settings if isinstance(conn, _Connection) else None
    if known is not None and known.get(name) == value:
        return
    conn.execute("SELECT set_config(%s, %s, false)", (name, value))
    if known is not None:
        known[name] = value


class _CountingCursor(psycopg.Cursor[Any]):
    """A cursor that counts each statement it sends (``Database.statements``)."""

    def _count(self) -> None:
        tally = getattr(self.connection, "tally", None)
        if tally is not None:
            tally.add()

    def execute(self, query: Any, params: Any = None, **options: Any) -> Any:
        self._count()
        return super().execute(query, params, **options)

    def executemany(self, query: Any, params_seq: Any, **options: Any) -> None:
        self._count()
        super().executemany(query, params_seq, **options)

    @contextmanager
    def copy(self, statement: Any, params: Any = None, **options: Any) -> Iterator[Any]:
        self._count()
        with super().copy(statement, params, **options) as copy:
            yield copy


@dataclass(frozen=True, slots=True)
class DatabaseSettings:
    """How a store reaches its database.

    Attributes:
        max_connections: the most connections the pool opens.
        timeout_s: how long a caller waits for a connection (made or free) before a
            ``StorageError``; also libpq's connect timeout, and about how long a statement
            waits for a server that answers neither it nor a new connection (see the module).
        lock_timeout_ms: how long a statement waits for a lock another transaction holds
            before failing (0: for ever).
        synchronous_commit: whether a commit waits for its write-ahead log to be flushed;
            without, a crash of the server (not of the client) may lose the last commits.
    """

    max_connections: int = 10
    timeout_s: float = 10.0
    lock_timeout_ms: int = 30_000
    synchronous_commit: bool = True

    def __post_init__(self) -> None:
        if isinstance(self.max_connections, bool) or not isinstance(self.max_connections, int):
            raise InvalidInputError(
                f"max_connections must be an int, got {preview(self.max_connections)}"
            )
        if not 1 <= self.max_connections <= 1_000:
            raise InvalidInputError(
                f"max_connections must be in [1, 1000], got {self.max_connections}"
            )
        if isinstance(self.timeout_s, bool) or not isinstance(self.timeout_s, (int, float)):
            raise InvalidInputError(f"timeout_s must be a number, got {preview(self.timeout_s)}")
        if not 0.1 <= self.timeout_s <= 3_600:
            raise InvalidInputError(f"timeout_s must be in [0.1, 3600], got {self.timeout_s}")
        if not isinstance(self.lock_timeout_ms, int) or self.lock_timeout_ms < 0:
            raise InvalidInputError(
                f"lock_timeout_ms must be an int >= 0, got {preview(self.lock_timeout_ms)}"
            )


def check_schema(name: object) -> str:
    """Return ``name`` if it can name a memory's schema: lower-case letters, digits and ``_``,
    not starting with a digit, at most 63 characters, not one of PostgreSQL's own."""
    if not isinstance(name, str) or not _SCHEMA_NAME.fullmatch(name):
        raise InvalidInputError(
            "schema must be 1 to 63 lower-case letters, digits or underscores, not starting"
            f" with a digit, got {preview(name)}"
        )
    if name.startswith("pg_") or name in ("public", "information_schema"):
        raise InvalidInputError(f"schema {name!r} is PostgreSQL's own: choose another name")
    return name


def lock_key(schema: str, purpose: str) -> int:
    """Return the advisory lock key of ``purpose`` in ``schema`` (a signed 64-bit integer)."""
    digest = hashlib.blake2b(f"gliding:{schema}:{purpose}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big", signed=True)


SERVER_CLOCK = "extract(epoch FROM clock_timestamp())::double precision"
"""The server's clock, in seconds since the epoch, as a column of a query."""


def bind(conn: psycopg.Connection[Any], query: str, params: Any = None) -> str:
    """Return ``query`` with ``params`` bound into it on the client (psycopg's client-side
    binding: each value adapted and quoted by libpq's rules for the connection), so that it
    can travel in one string with other statements."""
    if params is None:
        return query
    return psycopg.ClientCursor(conn).mogrify(query, params)


class Transaction:
    """A transaction on one connection that goes to the server as few times as it can.

    Its opening (``BEGIN``, then one ``SELECT`` of the transaction's limits, lock and clock)
    is not sent alone: it goes with the first statement (``execute``), and the statements
    whose answer nobody reads (``defer``) go with the next statement or the ``COMMIT``. Such a
    string of statements is one round trip, its values bound on the client (``bind``); a
    statement failing in it fails the ones after it, and the transaction. Nothing is sent for
    a transaction that ran no statement.

    Args:
        conn: an idle autocommit connection, the transaction's for its whole life.
        begin: the ``BEGIN`` statement.
        columns: the columns of the opening ``SELECT`` (limits, a lock), in order.
        clock: whether the opening also reads the server's clock (``clock``).
        ending: what ends it: ``COMMIT``, maybe with statements after it that go in the same
            round trip (they run after the commit, outside the transaction).
    """

    __slots__ = ("_clock_wanted", "_deferred", "_ending", "_opening", "clock", "conn", "opened")

    def __init__(
        self,
        conn: psycopg.Connection[Any],
        begin: str,
        columns: Sequence[str] = (),
        *,
        clock: bool = False,
        ending: str = "COMMIT",
    ) -> None:
        selected = [*columns, SERVER_CLOCK] if clock else [*columns] or ["1"]
        self.conn = conn
        self._opening = [begin, "SELECT " + ", ".join(selected)]
        self._ending = ending
        self._clock_wanted = clock
        self._deferred: list[str] = []
        self.opened = False
        """Whether the opening was sent (the transaction is open on the server)."""
        self.clock: float | None = None
        """The server's clock as the opening ran (``clock=True``, once opened)."""

    def execute(self, query: str, params: Any = None) -> psycopg.Cursor[Any]:
        """Run ``query`` in the transaction (with whatever waits to be sent); return its
        cursor, on the query's result."""
        if self.opened and not self._deferred:
            return self.conn.execute(query, params)
        return self._send(bind(self.conn, query, params))

    def defer(self, query: str, params: Any = None) -> None:
        """Send ``query`` with the transaction's next statement or its ``COMMIT``: for a
        statement whose answer (rows, count) nobody reads. It fails the transaction there."""
        self._deferred.append(bind(self.conn, query, params))

    def discard(self) -> None:
        """Drop the deferred statements not sent yet (a savepoint's block, rolled back)."""
        self._deferred = []

    def open(self) -> None:
        """Send the opening now (with what waits) if it was not sent."""
        if not self.opened:
            self._send(None)

    def _send(self, last: str | None) -> psycopg.Cursor[Any]:
        opening = [] if self.opened else self._opening
        parts = [*opening, *self._deferred]
        if last is not None:
            parts.append(last)
        self._deferred = []
        self.opened = True
        cursor = self.conn.execute("; ".join(parts))
        if opening:
            cursor.nextset()  # past the BEGIN, to the opening's SELECT
            row = cursor.fetchone()
            if self._clock_wanted and row is not None:
                self.clock = float(row[-1])
        while cursor.nextset():  # to the last statement's result
            pass
        return cursor

    def commit(self) -> None:
        """Send the deferred statements and ``COMMIT`` as one round trip (with the opening if
        only deferred statements were made; nothing if none was); on a failure, roll back and
        raise it."""
        if not self.opened and not self._deferred:
            return
        parts = [*([] if self.opened else self._opening), *self._deferred, self._ending]
        self._deferred = []
        self.opened = True
        try:
            self.conn.execute("; ".join(parts))
        except BaseException:
            self.rollback()
            raise

    def rollback(self) -> None:
        """Roll back (nothing if the transaction never opened), keeping the failure that
        called for it: a connection that broke cannot roll back, and the pool drops it."""
        self._deferred = []
        if self.opened:
            self.opened = False
            with suppress(psycopg.Error):
                self.conn.execute("ROLLBACK")


@contextmanager
def transaction(
    conn: psycopg.Connection[Any],
    begin: str,
    columns: Sequence[str] = (),
    *,
    clock: bool = False,
    ending: str = "COMMIT",
) -> Iterator[Transaction]:
    """Run the block as one ``Transaction`` on ``conn``: committed (by ``ending``) when it
    ends, rolled back when it raises."""
    tx = Transaction(conn, begin, columns, clock=clock, ending=ending)
    try:
        yield tx
    except BaseException:
        tx.rollback()
        raise
    tx.commit()


def locked(
    conn: psycopg.Connection[Any],
    key: int,
    *,
    idle_ms: int,
    lock_timeout_ms: int | None = None,
    clock: bool = False,
    settings: Sequence[str] = (),
    ending: str = "COMMIT",
) -> AbstractContextManager[Transaction]:
    """Return a ``transaction`` on ``conn`` that holds the advisory lock ``key`` until its end.

    It begins ``READ COMMITTED`` (set here, not left to the server's default: each statement
    then takes its snapshot after the lock was granted, and so sees everything the lock's
    previous holder committed; a ``REPEATABLE READ`` snapshot would be taken at the lock
    statement, before its wait), and its opening sets its limits and takes the lock before any
    statement of the block runs.

    Args:
        conn: an idle autocommit connection.
        key: the lock (``lock_key``).
        idle_ms: how long the transaction may stop between two statements before the server
            ends its session, freeing the lock for the others.
        lock_timeout_ms: how long a statement waits for a lock (``None``: the connection's).
        clock: whether the opening reads the server's clock (``Transaction.clock``).
        settings: more columns of the opening, before the lock (``set_config(..., true)`` of
            the transaction's own settings, such as its ``synchronous_commit``).
        ending: the transaction's ``ending`` (``Transaction``).
    """
    columns = [f"set_config('idle_in_transaction_session_timeout', '{int(idle_ms)}ms', true)"]
    if lock_timeout_ms is not None:
        columns.append(f"set_config('lock_timeout', '{int(lock_timeout_ms)}ms', true)")
    columns.extend(settings)
    columns.append(f"pg_advisory_xact_lock({int(key)})")
    begin = "BEGIN ISOLATION LEVEL READ COMMITTED"
    return transaction(conn, begin, columns, clock=clock, ending=ending)


class _Lent(threading.local):
    """The transaction a thread lends to the stores of its database (``Database.joining``)."""

    tx: Transaction | None = None


class Database:
    """A PostgreSQL database reached through a pool, in one named schema.

    Args:
        url: a libpq connection string (URI or ``key=value``); its password stays private.
        schema: the schema this handle works in (see ``check_schema``).
        settings: pool size, timeouts and commit durability.

    Raises:
        ConfigError: the connection string cannot be parsed.
        StorageError: no connection could be made within ``settings.timeout_s``.
    """

    def __init__(self, url: str, *, schema: str, settings: DatabaseSettings | None = None):
        self.schema = check_schema(schema)
        self.settings = settings or DatabaseSettings()
        public, self._secrets = _split_secrets(url)
        self.display = make_conninfo(**public) + (" password=***" if self._secrets else "")
        self.identifier = f'"{self.schema}"'
        self._conninfo = make_conninfo(**public)
        self._kwargs: dict[str, Any] = {
            **self._secrets,
            **_keepalives(public, self.settings.timeout_s),
            "autocommit": True,
            "connect_timeout": max(1, round(self.settings.timeout_s)),
            "application_name": "gliding-horse",
        }
        self._tally = _Tally()
        self._lent = _Lent()
        self.pool: psycopg_pool.ConnectionPool[_Connection] = psycopg_pool.ConnectionPool(
            self._conninfo,
            connection_class=_Connection,
            kwargs=self._kwargs,
            min_size=1,
            max_size=self.settings.max_connections,
            open=False,
            configure=self._configure,
            timeout=self.settings.timeout_s,
            # A connection attempt that keeps failing (the server is down) is given up after
            # this long, and the next caller starts a new one at once: the pool's back-off
            # never grows past the timeout, so work resumes within about one timeout of the
            # server coming back (the default, five minutes, would let the back-off reach
            # minutes).
            reconnect_timeout=self.settings.timeout_s,
            name=f"gliding-{self.schema}",
        )
        with self.translated(f"connecting to PostgreSQL ({self.display})"):
            self.pool.open(wait=True, timeout=self.settings.timeout_s)

    def __repr__(self) -> str:
        return f"Database({self.display!r}, schema={self.schema!r})"

    @property
    def statements(self) -> int:
        """How many statements the pool's connections have sent (see the module docstring)."""
        return self._tally.value

    def _configure(self, conn: _Connection) -> None:
        """Set a new connection's schema, lock timeout, commit durability and bounded waits,
        and count its statements from then on.

        Prepared statements (psycopg prepares a statement run often) keep one generic plan:
        every statement of the stores is a lookup by parameters, and planning the BM25 one
        anew for each query, as PostgreSQL would for its array parameters, costs several times
        its execution.
        """
        settings = self.settings
        conn.patience_s, conn.answers, conn.shown = (
            settings.timeout_s / 2,
            self._answers,
            (f"PostgreSQL at {self.display}"),
        )
        conn.execute(
            "SELECT set_config('search_path', %s, false), set_config('lock_timeout', %s, false),"
            " set_config('synchronous_commit', %s, false),"
            " set_config('plan_cache_mode', 'force_generic_plan', false)",
            (
                self.identifier,
                f"{settings.lock_timeout_ms}ms",
                "on" if settings.synchronous_commit else "off",
            ),
        )
        conn.cursor_factory = _CountingCursor
        conn.tally, conn.settings = self._tally, {}

    def _answers(self) -> bool:
        """Whether the server answers a new connection within half the timeout (libpq's
        connect timeout is whole seconds, at least 2): a refusal (``FATAL``: too many clients,
        starting up) is an answer; only silence is not."""
        probe_s = max(2, math.ceil(self.settings.timeout_s / 2))
        kwargs = {**self._kwargs, "connect_timeout": probe_s}
        kwargs["application_name"] = "gliding-horse probe"
        try:
            psycopg.connect(self._conninfo, **kwargs).close()
        except psycopg.Error as exc:
            return "FATAL" in str(exc)
        return True

    @contextmanager
    def connection(self) -> Iterator[BoundedConnection]:
        """Lend a connection of the pool for the block (idle, autocommit)."""
        with self.pool.connection() as conn:
            yield conn

    def joined(self) -> Transaction | None:
        """Return the transaction this thread lends to the stores of the database, if any."""
        return self._lent.tx

    @contextmanager
    def joining(self, tx: Transaction) -> Iterator[None]:
        """Lend ``tx`` to the reads this thread makes in the block through the stores of this
        database (``joined``): a store that reads in one statement asks in ``tx``, saving the
        round trips of a transaction of its own (and a second connection). Such a read sees
        what ``tx`` sees: each statement its own snapshot (``READ COMMITTED``), taken as it
        starts; a failing read fails ``tx``."""
        before, self._lent.tx = self._lent.tx, tx
        try:
            yield
        finally:
            self._lent.tx = before

    def connect(self, application_name: str) -> BoundedConnection:
        """Open a connection of the caller's own, outside the pool, set up as the pool's are
        (autocommit, the schema, bounded waits); the caller closes it."""
        kwargs = {**self._kwargs, "application_name": application_name}
        conn = _Connection.connect(self._conninfo, **kwargs)
        try:
            self._configure(conn)
        except BaseException:
            conn.close()
            raise
        return conn

    def translated(self, doing: str) -> _Translated:
        """Return a context that turns psycopg's and the pool's exceptions into
        ``GlidingError``s saying what was being done, with no secret in them."""
        return _Translated(doing, tuple(self._secrets.values()))

    def close(self) -> None:
        """Close every connection of the pool; closing twice is harmless."""
        self.pool.close()

    def rewrite(self, tables: Sequence[str], doing: str) -> None:
        """Rewrite ``tables`` of the schema, their TOAST tables and indexes, into new files,
        then the planner's statistics: what ``scrub`` does so no deleted row stays in a file.

        PostgreSQL keeps a deleted row's bytes in its pages (a dead tuple) until a ``VACUUM``,
        and a plain ``VACUUM`` frees the space without overwriting it: the bytes stay in the
        page's free space and in the indexes' pages. ``VACUUM FULL`` copies the live rows into
        new files and drops the old ones. ``ANALYZE`` then samples the live rows; the values
        it sampled before the deletion (a short text, a term) are left in ``pg_statistic`` as
        dead tuples, so that catalog is rewritten too: the database's owner may, any other role
        needs ``MAINTAIN`` on it (without it PostgreSQL skips it with a warning, logged here).
        Each table is locked while it is copied (its readers and writers wait, at most the
        lock timeout, then ``StorageError``).

        Raises:
            StorageError: PostgreSQL failed, or a lock was not granted in time.
        """
        skipped: list[str] = []

        def note(diagnostic: psycopg.errors.Diagnostic) -> None:
            if diagnostic.severity_nonlocalized == "WARNING":
                skipped.append(str(diagnostic.message_primary))

        with self.translated(doing), self.connection() as conn:
            for table in tables:
                conn.execute(f"VACUUM (FULL, ANALYZE) {table}")
            conn.add_notice_handler(note)
            try:
                conn.execute("VACUUM (FULL) pg_catalog.pg_statistic")
            finally:
                conn.remove_notice_handler(note)
        if skipped:
            logger.warning(
                "the planner statistics (pg_statistic) were not rewritten: %s; values sampled"
                " from deleted rows may stay in its files (GRANT MAINTAIN ON pg_statistic to"
                " the memory's role, or run it as the database's owner)",
                "; ".join(skipped),
            )

    def prepare(self, component: str, migrations: Sequence[Migration]) -> int:
        """Create or upgrade ``component``'s tables in the schema; return the version found.

        Each migration runs once, in order, in one transaction with the rest: a failed
        upgrade leaves the schema as it was.

        Raises:
            ConfigError: the role may not create the schema or its tables (the message names
                the statement an administrator must run), or the schema was written by a newer
                version of gliding-horse.
        """
        latest = migrations[-1][0]
        with (
            self.translated(f"preparing the schema {self.schema!r}"),
            self.connection() as conn,
            conn.transaction(),
        ):
            conn.execute("SELECT pg_advisory_xact_lock(%s)", (lock_key(self.schema, "schema"),))
            self._create_schema(conn)
            conn.execute(_VERSIONS)
            row = conn.execute(
                "SELECT version FROM schema_versions WHERE component = %s", (component,)
            ).fetchone()
            found = 0 if row is None else int(row[0])
            if found > latest:
                raise ConfigError(
                    f"the schema {self.schema!r} holds {component} version {found}, newer than"
                    f" this gliding-horse knows ({latest}): upgrade gliding-horse"
                )
            for version, doing, migrate in migrations:
                if version > found:
                    with self._privileged(conn, doing):
                        migrate(conn)
            conn.execute(
                "INSERT INTO schema_versions (component, version) VALUES (%s, %s)"
                " ON CONFLICT (component) DO UPDATE SET version = excluded.version",
                (component, latest),
            )
        return found

    def _create_schema(self, conn: psycopg.Connection[Any]) -> None:
        exists = conn.execute(
            "SELECT 1 FROM pg_namespace WHERE nspname = %s", (self.schema,)
        ).fetchone()
        if exists is not None:
            return
        role, database = _whoami(conn)
        try:
            with conn.transaction():
                conn.execute(f"CREATE SCHEMA {self.identifier}")
        except pg_errors.InsufficientPrivilege as exc:
            raise ConfigError(
                f"the role {role!r} may not create the schema {self.schema!r} in the database"
                f" {database!r}: have an administrator run"
                f' CREATE SCHEMA {self.identifier} AUTHORIZATION "{role}";'
                " (or give the role CREATE on the database)"
            ) from exc

    @contextmanager
    def _privileged(self, conn: psycopg.Connection[Any], doing: str) -> Iterator[None]:
        """Run a migration; a privilege it lacks becomes a ``ConfigError`` naming the grant."""
        try:
            with conn.transaction():
                yield
        except pg_errors.InsufficientPrivilege as exc:
            role, database = _whoami(conn)
            raise ConfigError(
                f"the role {role!r} may not {doing} in the schema {self.schema!r} of the"
                f" database {database!r}: have an administrator run"
                f' GRANT USAGE, CREATE ON SCHEMA {self.identifier} TO "{role}";'
                f" (PostgreSQL said: {exc.diag.message_primary})"
            ) from exc

    def require_extension(self, name: str) -> str:
        """Make sure the extension ``name`` is installed in the database; return the schema
        that holds its types and operators (to name them qualified: a memory's connections
        search only the memory's schema).

        A new extension goes into ``public`` when that schema exists, not into the memory's
        schema, where dropping the memory would drop it under the other memories' feet.

        Raises:
            ConfigError: it is not, and this role may not install it (an extension that is
                not trusted needs a superuser): the message names the statement to have run.
        """
        _identifier(name)
        with (
            self.translated(f"checking the PostgreSQL extension {name!r}"),
            self.connection() as conn,
        ):
            found = _extension_schema(conn, name)
            if found is not None:
                return found
            public = conn.execute("SELECT 1 FROM pg_namespace WHERE nspname = 'public'")
            where = " SCHEMA public" if public.fetchone() is not None else ""
            try:
                with conn.transaction():
                    conn.execute(
                        "SELECT pg_advisory_xact_lock(%s)", (lock_key("", f"extension:{name}"),)
                    )
                    conn.execute(f'CREATE EXTENSION IF NOT EXISTS "{name}"{where}')
            except pg_errors.InsufficientPrivilege as exc:
                role, database = _whoami(conn)
                raise ConfigError(
                    f"the PostgreSQL extension {name!r} is not installed in the database"
                    f" {database!r} and the role {role!r} may not install it: have an"
                    f' administrator run CREATE EXTENSION "{name}"{where}; in that database'
                ) from exc
            installed = _extension_schema(conn, name)
            assert installed is not None
            return installed


def _extension_schema(conn: psycopg.Connection[Any], name: str) -> str | None:
    row = conn.execute(
        "SELECT n.nspname FROM pg_extension AS e JOIN pg_namespace AS n"
        " ON n.oid = e.extnamespace WHERE e.extname = %s",
        (name,),
    ).fetchone()
    return None if row is None else str(row[0])


class _Translated:
    """``boundary.translated`` for PostgreSQL, with the connection's secrets taken out."""

    __slots__ = ("doing", "secrets")

    def __init__(self, doing: str, secrets: tuple[str, ...]) -> None:
        self.doing, self.secrets = doing, secrets

    def __enter__(self) -> None:
        return None

    def __exit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> Literal[False]:
        if exc is None or not isinstance(exc, Exception) or isinstance(exc, GlidingError):
            return False
        error = translate("postgresql", exc, self.doing)
        if error is None:
            return False
        message = str(error)
        if any(secret in message for secret in self.secrets):
            message = redact(message, self.secrets)
            raise type(error)(message) from None  # the original's text holds the secret too
        raise error from exc


def redact(text: str, secrets: Sequence[str]) -> str:
    """Return ``text`` with each of ``secrets`` replaced by ``***``."""
    for secret in secrets:
        if secret:
            text = text.replace(secret, "***")
    return text


def _split_secrets(url: object) -> tuple[dict[str, str], dict[str, str]]:
    """Return a connection string's parameters without its secrets, and the secrets."""
    if not isinstance(url, str) or not url.strip():
        raise InvalidInputError("the database URL must be a non-empty string")
    try:
        parameters = conninfo_to_dict(url)
    except psycopg.Error:
        # libpq's message quotes the string, password included: say only what is wrong.
        raise ConfigError(
            "the database URL is not a libpq connection string (postgresql://user@host/db,"
            " postgresql://user@/db?host=/socket/dir, or key=value pairs)"
        ) from None
    public = {key: str(value) for key, value in parameters.items() if key not in _SECRETS}
    secrets = {key: str(value) for key, value in parameters.items() if key in _SECRETS}
    return public, secrets


def _keepalives(public: dict[str, str], timeout_s: float) -> dict[str, int]:
    """libpq's TCP settings that find a dead peer within a few timeouts, for those the
    connection string leaves out: keepalives on an idle connection (the kernel gives up after
    the third unanswered one), and ``tcp_user_timeout`` on sent data that is never acknowledged.
    libpq ignores them on a unix socket."""
    every = max(1, math.ceil(timeout_s / 2))
    wanted = {
        "keepalives": 1,
        "keepalives_idle": every,
        "keepalives_interval": every,
        "keepalives_count": _KEEPALIVE_COUNT,
        "tcp_user_timeout": (_KEEPALIVE_COUNT + 1) * every * 1000,
    }
    return {key: value for key, value in wanted.items() if key not in public}


def _whoami(conn: psycopg.Connection[Any]) -> tuple[str, str]:
    row = conn.execute("SELECT current_user, current_database()").fetchone()
    assert row is not None
    return str(row[0]), str(row[1])


def _identifier(name: str) -> str:
    if not _SCHEMA_NAME.fullmatch(name):
        raise InvalidInputError(f"not an extension name: {preview(name)}")
    return name
