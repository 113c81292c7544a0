"""L2 coherence: the directory on PostgreSQL, shared by every process and machine of a fleet,
with every change pushed to the other processes (LISTEN/NOTIFY).

``PostgresDirectory`` implements the ``Directory`` protocol (``coherence.directory``) over tables
prefixed ``coherence_`` in a memory's schema (``store.postgres.database``), beside the
coordination store's.

How an update is serialised: it is a ``locked`` transaction (``store.postgres.database``): it
begins ``READ COMMITTED`` and first takes the directory's advisory lock (its key derived from
the schema), which every update of every process takes first, so updates run one at a time,
whole; as the lock is taken before any record is read, and each statement of a ``READ
COMMITTED`` transaction sees what was committed before it started, the change function sees
the records as the previous update left them. An update that changes a record raises the epoch
by one in the same transaction and sends ``NOTIFY`` on the schema's channel, which PostgreSQL
delivers when (and only if) the transaction commits, in commit order.

An update is two round trips to the database whatever it changes: the opening (limits, lock,
clock) with the read of its records and the epoch, and every write of the changed records with
the epoch's move, the notification and the ``COMMIT``. While the change function runs, the
thread's reads of the token are the epoch the update holds (no other process can move it), and
the transaction is lent to the reads of the database's other stores (``Database.joining``), so a
check the change makes (the blackboard's of a node's leases) is one statement in it.

The token: the epoch, an integer that moves by one on every change, so ``OwnChanges`` can
tell a coordinator's own runs of changes from another's. ``consistency`` says where
``token()`` reads it:

- ``"strict"`` (the default): from the database, one single-row read (tens of microseconds on
  a local socket). A read that starts after any process committed a change sees the token
  move: no copy is served stale, as the protocol requires ("token() changes whenever
  anything changed since, by any process").
- ``"pushed"``: from the counter the listener moves on each notification, a memory load. A
  change in another process reaches this one as fast as the notification does (milliseconds)
  and a copy may be served in that window: for readers that accept it in exchange for reads
  that ask nothing of the database. While the listener is not connected (it reconnects on its
  own) the token equals nothing, so every read asks the directory.

The push: every handle runs a listener thread on a connection of its own (``LISTEN``), which
moves the pushed counter and calls the handle's subscribers (``subscribe``) with a
``DirectoryChange`` (the new token and the IRIs whose records another handle changed), so a
process learns that its copies were invalidated without reading: the blackboard can mark them
and tell its agents at once. A notification lost while the listener was away is made up for by
a ``DirectoryChange`` naming no IRIs ("anything may have changed") when it is back.

Durability: as the database's ``synchronous_commit`` says (on by default), which the directory
needs, unlike SQLite's (``synchronous = NORMAL``): a power loss ends every process holding
copies, but the clients of a server outlive its crash, and an epoch lost with it would be
given again to another state while copies vouched by the lost one are still held.

Invariants (beyond the protocol's):
- A node's generation never decreases: a trigger refuses it in the database too.
- A snapshot is one statement (record and epoch on one snapshot), so the token it returns
  vouches for exactly that record; an update's token is the epoch it holds the lock on.
- A notification is at most ``MAX_PAYLOAD`` bytes: one naming too many IRIs names none.
- SQL is built from constants; every value travels as a parameter.
"""

from __future__ import annotations

import json
import logging
import threading
import uuid
from collections.abc import Callable, Hashable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager, suppress
from typing import Any, Literal, Protocol, TypeVar

import psycopg

from gliding_core.coherence.directory import (
    DEFAULT_KEEP_VERSIONS,
    STATE_OF_LETTER,
    UNVOUCHED,
    Copy,
    DirectoryChange,
    NodeRecord,
    changed_records,
    check_keep,
    copies_ended,
    one_record,
)
from gliding_core.errors import ClosedError, InvalidInputError
from gliding_core.jsonld import Node, canonical_json, parse_canonical, preview
from gliding_core.store.postgres.database import (
    Database,
    DatabaseSettings,
    Migration,
    Transaction,
    lock_key,
    locked,
)

T = TypeVar("T")
logger = logging.getLogger(__name__)

COMPONENT = "coherence"
MAX_PAYLOAD = 7_000
"""The most bytes of a notification's payload (PostgreSQL's limit is 8,000)."""

IDLE_LIMIT_MS = 30_000
"""How long an update may stop between two statements before the server ends its session (and
frees the directory's lock for every other process): a change function that fetches a node from a
slow source stays well inside it; a process paused inside an update does not stall the fleet."""

LISTENER_NAME = "gliding-horse coherence listener"
"""The ``application_name`` of the listeners' connections (as ``pg_stat_activity`` shows it)."""

Consistency = Literal["strict", "pushed"]

_TABLES = """
CREATE TABLE coherence_nodes (
    iri text COLLATE "C" PRIMARY KEY,
    generation bigint NOT NULL CHECK (generation >= 0),
    value text
);
CREATE TABLE coherence_copies (
    iri text COLLATE "C" NOT NULL,
    agent text COLLATE "C" NOT NULL,
    state text NOT NULL CHECK (state IN ('M', 'E', 'S', 'I')),
    generation bigint NOT NULL,
    PRIMARY KEY (iri, agent)
);
CREATE INDEX coherence_copies_by_agent ON coherence_copies (agent, iri);
CREATE TABLE coherence_versions (
    iri text COLLATE "C" NOT NULL,
    generation bigint NOT NULL,
    value text NOT NULL,
    PRIMARY KEY (iri, generation)
);
CREATE TABLE coherence_epoch (
    id integer PRIMARY KEY CHECK (id = 0),
    epoch bigint NOT NULL
);
INSERT INTO coherence_epoch (id, epoch) VALUES (0, 0);
CREATE FUNCTION coherence_generation_never_decreases() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.generation < OLD.generation THEN
        RAISE EXCEPTION 'a node generation never decreases: % at % -> %',
            OLD.iri, OLD.generation, NEW.generation;
    END IF;
    RETURN NEW;
END
$$;
CREATE TRIGGER coherence_generation_never_decreases
BEFORE UPDATE OF generation ON coherence_nodes
FOR EACH ROW EXECUTE FUNCTION coherence_generation_never_decreases();
"""


def _create_tables(conn: psycopg.Connection[Any]) -> None:
    conn.execute(_TABLES)


def _lock_by_key(conn: psycopg.Connection[Any]) -> None:
    """Nothing to change in the tables: the version says that updates take the advisory lock
    (no longer the epoch row's), so that a gliding-horse that locks the row refuses the schema."""


MIGRATIONS: list[Migration] = [
    (1, "create the coherence tables", _create_tables),
    (2, "serialise updates under an advisory lock", _lock_by_key),
]
"""The coherence tables' versions; ``Database.prepare`` runs the ones a schema lacks."""


class _Held(threading.local):
    """The epoch this thread's update holds the lock at (``None``: no update open here)."""

    epoch: int | None = None


def channel_of(schema: str) -> str:
    """Return the notification channel of the directory in ``schema`` (a plain identifier)."""
    return f"gliding_coherence_{lock_key(schema, COMPONENT) & 0xFFFF_FFFF_FFFF_FFFF:016x}"


class PostgresDirectory:
    """The directory in a PostgreSQL schema, shared by every process that opens it.

    Args:
        database: the memory's database (pool and schema); the tables are created or upgraded
            in its schema when missing.
        keep_versions: how many past values to keep per node for changes.
        consistency: where ``token()`` reads the epoch: ``"strict"`` (the database: no read
            is ever served stale) or ``"pushed"`` (the listener's counter; see the module).
        owns_database: whether ``close()`` closes ``database`` too.
    """

    remote_writers = True
    """Other processes change this directory too (readers that cache check ``token()``)."""

    def __init__(
        self,
        database: Database,
        *,
        keep_versions: int = DEFAULT_KEEP_VERSIONS,
        consistency: Consistency = "strict",
        owns_database: bool = False,
    ) -> None:
        if not isinstance(database, Database):
            raise InvalidInputError(f"database must be a Database, got {preview(database)}")
        self.database, self.owns_database = database, owns_database
        self._closed = False
        self._subscribers: list[Callable[[DirectoryChange], None]] = []
        self._subscribers_lock = threading.Lock()
        self._held = _Held()
        try:
            if consistency not in ("strict", "pushed"):
                raise InvalidInputError(
                    f"consistency must be 'strict' or 'pushed', got {preview(consistency)}"
                )
            self._keep = check_keep(keep_versions)
            self.consistency: Consistency = consistency
            self.channel = channel_of(database.schema)
            self._lock_key = lock_key(database.schema, COMPONENT)
            self.origin = uuid.uuid4().hex
            """This handle's name in its notifications, so its listener skips its own."""
            database.prepare(COMPONENT, MIGRATIONS)
            self._listener = _Listener(self)
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
        keep_versions: int = DEFAULT_KEEP_VERSIONS,
        consistency: Consistency = "strict",
    ) -> PostgresDirectory:
        """Open the directory in ``schema`` of the database at ``url`` with a pool of its own,
        closed with the directory."""
        database = Database(url, schema=schema, settings=settings)
        return cls(
            database, keep_versions=keep_versions, consistency=consistency, owns_database=True
        )

    # -- the token ----------------------------------------------------------------------------

    def token(self) -> Hashable:
        """Return the epoch: the database's (strict) or the listener's (pushed); inside an
        update of this thread, the epoch it holds the lock at (the database's, as nobody else
        may change it meanwhile)."""
        self._check_open()
        if self.consistency == "pushed":
            return self._listener.token()
        held = self._held.epoch
        if held is not None:
            return held
        with (
            self.database.translated("reading the coherence token"),
            self.database.connection() as conn,
        ):
            return _epoch(conn, "SELECT epoch FROM coherence_epoch WHERE id = 0")

    def subscribe(self, callback: Callable[[DirectoryChange], None]) -> Callable[[], None]:
        """Call ``callback`` on the listener's thread with each change another handle commits
        (in commit order); return a function that cancels it. A failing callback is logged."""
        if not callable(callback):
            raise InvalidInputError(f"callback must be callable, got {preview(callback)}")
        with self._subscribers_lock:
            self._subscribers.append(callback)

        def cancel() -> None:
            with self._subscribers_lock:
                if callback in self._subscribers:
                    self._subscribers.remove(callback)

        return cancel

    def announce(self, change: DirectoryChange) -> None:
        """Tell every subscriber of ``change`` (the listener's call, from its thread); a
        subscriber that raises is logged and the others are told still."""
        with self._subscribers_lock:
            subscribers = list(self._subscribers)
        for callback in subscribers:
            try:
                callback(change)
            except Exception:
                logger.exception("a coherence directory subscriber failed")

    @property
    def listening(self) -> bool:
        """Whether the listener is connected now: changes are pushed to the subscribers (while
        not, a change is missed, and ``DirectoryChange(token, None)`` follows its return)."""
        return self._listener.listening

    # -- records ------------------------------------------------------------------------------

    def record(self, iri: str) -> NodeRecord:
        """Return a snapshot of ``iri``'s record."""
        return self.snapshot(iri)[0]

    def snapshot(self, iri: str) -> tuple[NodeRecord, int]:
        """Return a snapshot of ``iri``'s record and the epoch it was read at (one statement)."""
        self._check_open()
        with (
            self.database.translated(f"reading the coherence record of {iri!r}"),
            self.database.connection() as conn,
        ):
            records, epoch = _read(conn, [iri], with_epoch=True)
        # Every change up to the snapshot's epoch is committed: a pushed counter behind it may
        # move up to it (a copy vouched at an older token is checked again either way).
        self._listener.saw(epoch)
        return records[iri], epoch

    def update(
        self, iri: str, change: Callable[[NodeRecord], tuple[NodeRecord, T]]
    ) -> tuple[T, int]:
        """Apply ``change`` to ``iri``'s record in one transaction under the directory's lock."""

        return self.update_many([iri], one_record(iri, change))

    def update_many(
        self,
        iris: Sequence[str],
        change: Callable[[dict[str, NodeRecord]], tuple[dict[str, NodeRecord], T]],
    ) -> tuple[T, int]:
        """Apply ``change`` to several records in one transaction under the directory's lock.

        The token returned is the epoch this transaction left: while it holds the lock nobody
        else commits a change. Two round trips (see the module).
        """
        wanted = list(dict.fromkeys(iris))
        self._check_open()
        with (
            self.database.translated(f"updating the coherence records of {wanted[:3]}"),
            self.database.connection() as conn,
            self._locked(conn) as tx,
        ):
            old, epoch = _read(tx, wanted, with_epoch=True)
            with self._holding(epoch), self.database.joining(tx):
                new, result = change(dict(old))
            changed = changed_records(old, new)
            if changed:
                epoch = self._commit_change(tx, epoch, old, changed)
        if changed:
            self._listener.saw(epoch)
        return result, epoch

    def _locked(self, conn: psycopg.Connection[Any]) -> AbstractContextManager[Transaction]:
        """An update's transaction: under the directory's lock, its opening reading the clock
        (for the reads lent it)."""
        return locked(conn, self._lock_key, idle_ms=IDLE_LIMIT_MS, clock=True)

    @contextmanager
    def _holding(self, epoch: int) -> Iterator[None]:
        """Answer this thread's ``token()`` with ``epoch`` in the block."""
        before, self._held.epoch = self._held.epoch, epoch
        try:
            yield
        finally:
            self._held.epoch = before

    def touch(self) -> int:
        """Move the epoch as a change would, changing no record; tell every other handle."""
        self._check_open()
        with (
            self.database.translated("moving the coherence token"),
            self.database.connection() as conn,
            self._locked(conn) as tx,
        ):
            epoch = _epoch(tx, "SELECT epoch FROM coherence_epoch WHERE id = 0")
            epoch = self._commit_change(tx, epoch, {}, [])
        self._listener.saw(epoch)
        return epoch

    def _commit_change(
        self,
        tx: Transaction,
        epoch: int,
        old: dict[str, NodeRecord],
        changed: list[NodeRecord],
    ) -> int:
        """Write ``changed``, raise the epoch and queue the notification (sent at commit): all
        deferred, to go with the ``COMMIT``."""
        if changed:
            _write(tx, old, changed, self._keep)
        epoch += 1
        iris = [record.iri for record in changed]
        moved, lost = _what_ended(old, changed)
        message = {"t": epoch, "o": self.origin, "n": iris, "m": moved, "x": lost}
        payload = json.dumps(message, ensure_ascii=False)
        if len(payload.encode("utf-8", "surrogatepass")) > MAX_PAYLOAD:
            payload = json.dumps({"t": epoch, "o": self.origin, "n": None})
        tx.defer(
            "WITH moved AS (UPDATE coherence_epoch SET epoch = %s WHERE id = 0 RETURNING 1)"
            " SELECT pg_notify(%s, %s) FROM moved",
            (epoch, self.channel, payload),
        )
        return epoch

    def version(self, iri: str, generation: int) -> Node | None:
        """Return ``iri``'s value at ``generation`` if it is still kept."""
        self._check_open()
        with (
            self.database.translated(f"reading a kept version of {iri!r}"),
            self.database.connection() as conn,
        ):
            row = conn.execute(
                "SELECT value FROM coherence_nodes WHERE iri = %s AND generation = %s"
                " UNION ALL SELECT value FROM coherence_versions"
                " WHERE iri = %s AND generation = %s LIMIT 1",
                (iri, generation, iri, generation),
            ).fetchone()
        return None if row is None or row[0] is None else parse_canonical(row[0])

    def holdings(self, agent: str) -> list[str]:
        """Return the IRIs of the nodes ``agent`` holds a copy of, sorted."""
        self._check_open()
        with (
            self.database.translated(f"listing the copies of {agent!r}"),
            self.database.connection() as conn,
        ):
            rows = conn.execute(
                "SELECT iri FROM coherence_copies WHERE agent = %s ORDER BY iri", (agent,)
            ).fetchall()
        return [str(iri) for (iri,) in rows]

    # -- closing ------------------------------------------------------------------------------

    def close(self) -> None:
        """Stop the listener and release the database (when owned); twice is harmless."""
        if self._closed:
            return
        self._closed = True
        self._listener.stop()
        if self.owns_database:
            self.database.close()

    def __enter__(self) -> PostgresDirectory:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"PostgresDirectory({self.database!r}, consistency={self.consistency!r})"

    def _check_open(self) -> None:
        if self._closed:
            raise ClosedError("the coherence directory was used after close()")


def _what_ended(
    old: dict[str, NodeRecord], changed: list[NodeRecord]
) -> tuple[list[str], list[list[str]]]:
    """The nodes of ``changed`` that moved, and the ``[iri, agent]`` copies that ended on the
    others (what a notification tells the other processes to drop)."""
    moved: list[str] = []
    lost: list[list[str]] = []
    for record in changed:
        before = old[record.iri]
        if record.generation != before.generation or record.value != before.value:
            moved.append(record.iri)
        else:
            lost += [[record.iri, agent] for agent in copies_ended(before, record)]
    return moved, lost


def _epoch(conn: _Executes, query: str) -> int:
    row = conn.execute(query).fetchone()
    if row is None:
        raise ClosedError("the coherence epoch row is missing: the schema was dropped")
    return int(row[0])


def _write(
    tx: Transaction, old: dict[str, NodeRecord], changed: list[NodeRecord], keep: int
) -> None:
    """Defer the writes of the changed records, set-based (a few statements for any number of
    records): their rows, their copies gone and changed, and the past values they keep."""
    tx.defer(
        "INSERT INTO coherence_nodes (iri, generation, value)"
        " SELECT * FROM unnest(%s::text[], %s::bigint[], %s::text[])"
        " ON CONFLICT (iri) DO UPDATE SET generation = excluded.generation,"
        " value = excluded.value",
        (
            [r.iri for r in changed],
            [r.generation for r in changed],
            [None if r.value is None else canonical_json(r.value) for r in changed],
        ),
    )
    gone = [(r.iri, agent) for r in changed for agent in old[r.iri].copies if agent not in r.copies]
    if gone:
        tx.defer(
            "DELETE FROM coherence_copies AS c USING unnest(%s::text[], %s::text[]) AS g(iri,"
            " agent) WHERE c.iri = g.iri AND c.agent = g.agent",
            ([iri for iri, _ in gone], [agent for _, agent in gone]),
        )
    copies = [
        (r.iri, c)
        for r in changed
        for c in r.copies.values()
        if old[r.iri].copies.get(c.agent) != c
    ]
    if copies:
        tx.defer(
            "INSERT INTO coherence_copies (iri, agent, state, generation)"
            " SELECT * FROM unnest(%s::text[], %s::text[], %s::text[], %s::bigint[])"
            " ON CONFLICT (iri, agent) DO UPDATE SET state = excluded.state,"
            " generation = excluded.generation",
            (
                [iri for iri, _ in copies],
                [c.agent for _, c in copies],
                [c.state.value for _, c in copies],
                [c.generation for _, c in copies],
            ),
        )
    moved = [r for r in changed if r.generation != old[r.iri].generation > 0]
    if moved:
        _keep_versions(tx, old, moved, keep)


def _keep_versions(
    tx: Transaction, old: dict[str, NodeRecord], moved: list[NodeRecord], keep: int
) -> None:
    """Defer keeping the past values of nodes whose generation moved: the value each left, and
    of the values kept the ``keep`` newest from the oldest generation a copy still holds
    (``versions_to_keep``, in SQL)."""
    left = [
        (r.iri, r.generation, canonical_json(r.value))
        for r in (old[m.iri] for m in moved)
        if r.value is not None
    ]
    if left:
        tx.defer(
            "INSERT INTO coherence_versions (iri, generation, value)"
            " SELECT * FROM unnest(%s::text[], %s::bigint[], %s::text[])"
            " ON CONFLICT (iri, generation) DO UPDATE SET value = excluded.value",
            tuple(list(column) for column in zip(*left, strict=True)),
        )
    oldest = [min((c.generation for c in r.copies.values()), default=r.generation) for r in moved]
    tx.defer(
        "DELETE FROM coherence_versions AS v"
        " USING unnest(%s::text[], %s::bigint[], %s::bigint[]) AS w(iri, oldest, generation)"
        " WHERE v.iri = w.iri AND (v.generation < w.oldest OR v.generation >= w.generation"
        " OR v.generation NOT IN (SELECT k.generation FROM coherence_versions AS k"
        " WHERE k.iri = w.iri AND k.generation >= w.oldest AND k.generation < w.generation"
        " ORDER BY k.generation DESC LIMIT %s))",
        ([r.iri for r in moved], oldest, [r.generation for r in moved], keep),
    )


class _Executes(Protocol):
    def execute(self, query: str, params: Any = ...) -> psycopg.Cursor[Any]: ...


def _read(
    conn: _Executes, iris: list[str], *, with_epoch: bool
) -> tuple[dict[str, NodeRecord], int]:
    """Read the records of ``iris`` (and the epoch) in one statement, on one snapshot."""
    if not iris and with_epoch:
        return {}, _epoch(conn, "SELECT epoch FROM coherence_epoch WHERE id = 0")
    rows = conn.execute(
        "SELECT n.iri, n.generation, n.value, c.agent, c.state, c.generation,"
        + (" (SELECT epoch FROM coherence_epoch WHERE id = 0)" if with_epoch else " 0")
        + " FROM unnest(%s::text[]) AS w(iri)"
        " LEFT JOIN coherence_nodes AS n ON n.iri = w.iri"
        " LEFT JOIN coherence_copies AS c ON c.iri = n.iri",
        (iris,),
    ).fetchall()
    found: dict[str, tuple[int, Node | None, dict[str, Copy]]] = {}
    for iri, generation, value, agent, state, copied_at, _ in rows:
        if iri is None:
            continue
        entry = found.get(iri)
        if entry is None:
            parsed = None if value is None else parse_canonical(value)
            entry = found[iri] = (int(generation), parsed, {})
        if agent is not None:
            entry[2][agent] = Copy(agent, STATE_OF_LETTER[state], int(copied_at))
    records = {}
    for iri in iris:
        entry = found.get(iri)
        records[iri] = NodeRecord(iri) if entry is None else NodeRecord(iri, *entry)
    return records, int(rows[0][6]) if rows else 0


def _change_of(epoch: int, iris: Any, moved: Any, lost: Any) -> DirectoryChange:
    """The change a notification's fields describe (``TypeError``/``ValueError`` if malformed).

    A sender that names no moved nodes (``m`` missing) is taken to have moved every node named.
    """
    if iris is None:
        return DirectoryChange(epoch, None)
    named = tuple(str(iri) for iri in iris)
    if moved is None:
        return DirectoryChange(epoch, named, named)
    ended = tuple((str(iri), str(agent)) for iri, agent in (lost or ()))
    return DirectoryChange(epoch, named, tuple(str(iri) for iri in moved), ended)


class _Listener:
    """The thread that listens on a directory's channel and keeps its pushed counter.

    It connects, ``LISTEN``s, reads the epoch (so nothing committed after the ``LISTEN`` can be
    missed and nothing before it is unknown), and from then on moves the counter on every
    notification and calls the directory's subscribers with the changes of other handles. A
    lost connection is taken again after a pause; meanwhile the counter vouches for nothing.
    """

    RETRY_S = 0.5

    def __init__(self, directory: PostgresDirectory) -> None:
        self._directory = directory
        self._lock = threading.Lock()
        self._top = -1
        self._listening = False
        self._stopping = threading.Event()
        self._ready = threading.Event()
        self._conn: psycopg.Connection[Any] | None = None
        self._thread = threading.Thread(
            target=self._run, name=f"coherence-listener-{directory.database.schema}", daemon=True
        )
        self._thread.start()
        self._ready.wait(directory.database.settings.timeout_s + 5)

    @property
    def listening(self) -> bool:
        """Whether the listener is connected and listening."""
        with self._lock:
            return self._listening

    def token(self) -> Hashable:
        """Return the pushed counter, or a token equal to nothing while not listening."""
        with self._lock:
            return self._top if self._listening else UNVOUCHED

    def saw(self, epoch: int) -> None:
        """Move the counter to ``epoch`` if it is ahead (read or committed by this handle)."""
        with self._lock:
            if self._listening and epoch > self._top:
                self._top = epoch

    def _run(self) -> None:
        first = True
        while not self._stopping.is_set():
            try:
                self._listen(first)
            except psycopg.Error as exc:
                if not self._stopping.is_set():
                    logger.warning(
                        "the coherence listener lost its connection (%s); reconnecting",
                        type(exc).__name__,
                    )
            finally:
                with self._lock:
                    self._listening = False
                self._ready.set()
                self._close_connection()
            first = False
            self._stopping.wait(self.RETRY_S)

    def _listen(self, first: bool) -> None:
        directory = self._directory
        # Set up as the pool's connections are: a server that stops answering ends its waits
        # (a SilentServerError, a psycopg error) and the listener connects again.
        conn = directory.database.connect(LISTENER_NAME)
        self._conn = conn
        conn.execute(f'LISTEN "{directory.channel}"')
        epoch = _epoch(
            conn, f"SELECT epoch FROM {directory.database.identifier}.coherence_epoch WHERE id = 0"
        )
        with self._lock:
            self._top = max(self._top, epoch)
        if not first:  # before ``listening`` says so: who sees it true was told of the gap
            directory.announce(DirectoryChange(epoch, None))
        with self._lock:
            self._listening = True
        self._ready.set()
        while not self._stopping.is_set():
            for notification in conn.notifies(timeout=1.0):
                if self._stopping.is_set():
                    return
                self._received(notification.payload)

    def _received(self, payload: str) -> None:
        try:
            message = json.loads(payload)
            epoch, origin, iris = int(message["t"]), message["o"], message["n"]
            change = _change_of(epoch, iris, message.get("m"), message.get("x"))
        except (ValueError, KeyError, TypeError):
            return  # not one of ours (a wake-up, or a stranger on the channel)
        with self._lock:
            if epoch > self._top:
                self._top = epoch
        if origin != self._directory.origin:
            self._directory.announce(change)

    def _close_connection(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            with suppress(psycopg.Error):
                conn.close()

    def stop(self) -> None:
        """Stop the thread: wake it with a notification of its own, and wait for it."""
        self._stopping.set()
        try:
            with self._directory.database.connection() as conn:
                conn.execute("SELECT pg_notify(%s, 'stop')", (self._directory.channel,))
        except Exception:
            pass
        self._thread.join(5)
