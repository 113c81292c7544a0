"""L0: the entry store on PostgreSQL (``EntryStore``), one memory shared by many processes.

``PostgresEntryStore(url, schema=...)`` keeps the same entries, indexes and change log as the
SQLite store, in the tables of ``store.postgres.schema``, and keeps the same contract
(``store.protocol``); what differs is how it keeps it with many writers at once.

Invariants:
- A write request is validated whole before its transaction starts; a batch is one
  transaction. A write that has returned is committed (its log flushed when
  ``StoreConfig.durability`` is ``"full"``: ``synchronous_commit``).
- A merge reads the stored entries ``FOR UPDATE``, in IRI order, so two writers merging into one
  entry take turns (no merge is lost) and two batches never deadlock on their rows. Two writers
  creating one new IRI at once: the second's insert fails on the unique IRI, and its write runs
  again, merging into the first's entry. A write that loses a deadlock or that race is redone,
  up to ``_ATTEMPTS`` times, inside its own savepoint.
- Every index (tags, types, edges, the lexical postings and their counts) is written in the
  same transaction as its entry.
- The change log: a commit that changes text takes its sequence numbers at the very end, under
  a transaction-level advisory lock that it holds through its ``COMMIT``. So numbers follow the
  order of commits: when a reader sees number N, every change numbered below N is already
  visible to it, and ``changes_since(n)`` never misses a change committed later below n. A
  PostgreSQL sequence would not do: its numbers are given out when asked for, not at commit,
  so a transaction holding 7 may commit after one holding 8, and a reader that applied 8 would
  never see 7. The price is that commits changing text pass the lock one at a time, for their
  last statements and their commit; the writes before run in parallel. ``text_stats``, the
  lexical index's counts, changes only under the same lock, so that row is never contended.
- Reads never wait for writers (MVCC): each read is one statement on a snapshot of the last
  commit; a thread inside its own transaction reads on that transaction's connection and sees
  its own writes, while every other thread sees the store as before until the commit.
- A read writes nothing: ``get`` counts itself in an in-memory buffer (``store.access``); a timer
  thread writes the buffer now and then in a transaction of its own, unsynced, with a short lock
  timeout (a row a writer holds is tried again at the next flush, never waited for long), and
  ``close`` writes what is left. A crash loses at most those buffered counts.
- SQL is built from constants only; every value travels as a parameter; the schema is a
  validated name set as each connection's ``search_path``.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import threading
import time
import weakref
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Literal, TypeVar

import numpy as np
import numpy.typing as npt
import psycopg
from psycopg import errors as pg_errors

from gliding_core.config import StoreConfig, setting_value
from gliding_core.errors import (
    ClosedError,
    EntryNotFoundError,
    GlidingError,
    InvalidInputError,
    InvalidNodeError,
    StorageError,
)
from gliding_core.fields import IndexFields, decode, indexed_text
from gliding_core.jsonld import (
    Node,
    check_iris,
    check_label,
    check_text,
    encodes_as_utf8,
    node_references,
    parse_canonical,
    preview,
    validate_iri,
)
from gliding_core.store.access import AccessBuffer
from gliding_core.store.columns import (
    ACCESS_POSITIONS,
    COLUMNS,
    QUALIFIED,
    check_limit,
    check_names,
    check_sequence,
    entries_of,
    prefix_bound,
    split,
    state_of,
    to_entry,
)
from gliding_core.store.entry import (
    Edge,
    Entry,
    MesiState,
    Record,
    Restored,
    TextHit,
    check_importance,
    records_of,
)
from gliding_core.store.filters import POSTGRESQL, SearchFilters
from gliding_core.store.lexical import query_terms
from gliding_core.store.parts import fits_whole, headed, searches_text, text_record
from gliding_core.store.postgres.database import Database, DatabaseSettings, lock_key
from gliding_core.store.postgres.lexical import (
    POSTINGS,
    Postings,
    array_literal,
    best_sql,
    ranked,
)
from gliding_core.store.postgres.parts import drop_parts, read_parts, write_parts
from gliding_core.store.postgres.schema import (
    BLOCK,
    COMPONENT,
    COPY_ESCAPED,
    COPY_ESCAPES,
    MIGRATIONS,
    NOW,
    live,
)
from gliding_core.store.protocol import Change, Direction
from gliding_core.store.staging import (
    SEPARATOR,
    Request,
    Rows,
    Staged,
    check_tags,
    collector_paused,
    default_ttl,
    index_of,
    new_entry,
    restage,
    stage,
    write_requests,
)

logger = logging.getLogger(__name__)

T = TypeVar("T")

_ATTEMPTS = 5  # a write that loses a deadlock or an insert race is redone this many times
_SPARE = 16  # ids sent beyond a text search's limit, for entries that expired meanwhile
# A filtered text search checks its best candidates by key first, this many times its limit;
# when too few pass, it reads the ids of the entries passing the filter, if fewer than half
# the candidates left (and at most ``_FEW_ALLOWED``) do, and checks only the candidates among
# them: a narrow filter, such as one user's tag in a memory of many users.
_FIRST_CHECKED = 10
_FEW_ALLOWED = 5_000
_ACCESS_LOCK_TIMEOUT = "250ms"  # how long a flush of access counts waits for a writer's row

_LOAD = (
    "SELECT id, iri, content, content_hash, importance, created_at, tags, metadata, mesi_state,"
    " named_graph, generation, jsonld_types, index_fields FROM entries"
    " WHERE iri = ANY(string_to_array(%s::text, ' ')) ORDER BY iri FOR UPDATE"
)
_COPY_ENTRIES = (
    "entries (content, importance, updated_at, tags, metadata, mesi_state, content_hash,"
    " named_graph, jsonld_context, jsonld_types, generation, id, iri, created_at, last_accessed)"
)
_UPDATE_ENTRIES = (
    "UPDATE entries AS e SET content = u.content, importance = u.importance,"
    " updated_at = u.updated_at, tags = u.tags, metadata = u.metadata,"
    " mesi_state = u.mesi_state, content_hash = u.content_hash, named_graph = u.named_graph,"
    " jsonld_context = u.jsonld_context, jsonld_types = u.jsonld_types,"
    " generation = u.generation FROM unnest(%s::text[], %s::float8[], %s::float8[], %s::text[],"
    " %s::text[], %s::text[], %s::text[], %s::text[], %s::text[], %s::text[], %s::bigint[],"
    " %s::bigint[]) AS u(content, importance, updated_at, tags, metadata, mesi_state,"
    " content_hash, named_graph, jsonld_context, jsonld_types, generation, id) WHERE e.id = u.id"
)
_INSERT_LABELS = (
    "INSERT INTO {table} ({column}, entry_id) SELECT * FROM unnest(%s::text[], %s::bigint[])"
    " ON CONFLICT DO NOTHING"
)
_DELETE_LABELS = (
    "DELETE FROM {table} AS t USING unnest(%s::text[], %s::bigint[]) AS d(label, id)"
    " WHERE t.{column} = d.label AND t.entry_id = d.id"
)
_INSERT_EDGES = (
    "INSERT INTO edges (source_id, predicate, target)"
    " SELECT * FROM unnest(%s::bigint[], %s::text[], %s::text[]) ON CONFLICT DO NOTHING"
)
# Each IRI takes the sequence number of its last change in the transaction: the head of the
# log (read after the lock is held, so it is every earlier commit's) plus its position.
_LOG = (
    "INSERT INTO changes (seq, iri) SELECT head.seq + u.position, u.iri"
    " FROM unnest(string_to_array(%s::text, ' '), string_to_array(%s::text, ' ')::bigint[])"
    " AS u(iri, position),"
    " (SELECT COALESCE(max(seq), 0) AS seq FROM changes) AS head"
    " ON CONFLICT (iri) DO UPDATE SET seq = excluded.seq"
)
_HEAD = "SELECT COALESCE(max(seq), 0) FROM changes"
# The IRIs a read asks for, as one parameter: the IRIs joined by spaces (an IRI holds none).
# One string to send, where a list is dumped element by element (most of a search's cost of
# sending its parameters).
_IRIS = "ANY(string_to_array(%s::text, ' '))"
# The store's tables, which ``scrub`` rewrites.
_TABLES = (
    "entries",
    "entry_tags",
    "entry_types",
    "edges",
    "postings",
    "text_stats",
    "entry_expiry",
    "entry_parts",
    "changes",
    "watermarks",
)


def _retryable(exc: psycopg.Error) -> bool:
    """Whether a failed write may simply run again: it lost a deadlock, or a race to insert
    a new IRI (it then finds the other writer's entry and merges into it)."""
    if isinstance(exc, pg_errors.UniqueViolation):
        return exc.diag.constraint_name == "entries_iri_key"
    return isinstance(exc, (pg_errors.DeadlockDetected, pg_errors.SerializationFailure))


@dataclass
class _Transaction:
    """A thread's open transaction: its connection and what its commit must record."""

    conn: psycopg.Connection[Any]
    changes: list[Change] = field(default_factory=list)  # for the listeners, after the commit
    relogged: list[str] = field(default_factory=list)  # IRIs for the change log, in order
    documents: int = 0  # change of the number of entries with text
    tokens: int = 0  # change of their total length

    def mark(self) -> tuple[int, int, int, int]:
        return len(self.changes), len(self.relogged), self.documents, self.tokens

    def rewind(self, mark: tuple[int, int, int, int]) -> None:
        """Forget what a rolled-back savepoint recorded."""
        del self.changes[mark[0] :]
        del self.relogged[mark[1] :]
        self.documents, self.tokens = mark[2], mark[3]


class PostgresEntryStore:
    """The durable store of JSON-LD entries on PostgreSQL: an ``EntryStore`` many processes share.

    Args:
        url: a libpq connection string: ``postgresql://user:password@host:5432/db``, a unix
            socket as ``postgresql://user@/db?host=/run/dir``, or ``key=value`` pairs. Its
            password appears in no ``repr``, message or log line.
        schema: the PostgreSQL schema of this memory (created when missing); memories in one
            database keep to schemas of their own.
        config: store settings; ``busy_timeout_ms`` is how long a statement waits for a lock
            and ``durability`` whether a commit waits for its log to be flushed.
        settings: the connection pool's size and timeouts (their lock timeout and commit
            durability come from ``config``).

    Raises:
        ConfigError: the URL cannot be parsed, the role may not create the schema or its
            tables (the message names the statement to have run), or the schema was written by
            a newer gliding-horse.
        StorageError: PostgreSQL cannot be reached within the pool's timeout.

    Safe to share between threads; any number of processes may open the same schema.
    """

    # Reads borrow connections of the pool: a search's independent reads run at once, each
    # in a server process of its own.
    concurrent_reads = True

    def __init__(
        self,
        url: str,
        *,
        schema: str = "gliding",
        config: StoreConfig | None = None,
        settings: DatabaseSettings | None = None,
    ) -> None:
        self.config = config or StoreConfig()
        self.stop_words = self.config.stop_words
        settings = dataclasses.replace(
            settings or DatabaseSettings(),
            lock_timeout_ms=self.config.busy_timeout_ms,
            synchronous_commit=self.config.durability == "full",
        )
        self._db = Database(url, schema=schema, settings=settings)
        try:
            self._db.prepare(COMPONENT, MIGRATIONS)
        except BaseException:
            self._db.close()
            raise
        self.schema = self._db.schema
        self._log_key = lock_key(self.schema, "l0-change-log")
        self._local = threading.local()
        self._listeners: list[Callable[[list[Change]], None]] = []
        self._access = AccessBuffer(**ACCESS_POSITIONS)
        self._closed = False
        self._flusher: threading.Thread | None = None
        self._flusher_lock = threading.Lock()
        self._stop, self._wake = threading.Event(), threading.Event()
        self._finalizer = weakref.finalize(
            self, _shut, self._db, self._access, self._stop, self._wake
        )

    # -- lifecycle -----------------------------------------------------------------------------

    @property
    def database(self) -> str:
        """The connection string, its password replaced by ``***``."""
        return self._db.display

    @property
    def db(self) -> Database:
        """The database and pool this store works in: what a component kept in the same
        schema (the pgvector index) shares, so it needs no connections of its own."""
        self._check_open()
        return self._db

    def __repr__(self) -> str:
        return f"PostgresEntryStore({self._db.display!r}, schema={self.schema!r})"

    def close(self) -> None:
        """Write the buffered access statistics and close the pool; closing twice is harmless.

        Later calls raise ``ClosedError``.
        """
        self._closed = True
        self._finalizer()
        with self._flusher_lock:
            flusher = self._flusher
        if flusher is not None and flusher is not threading.current_thread():
            flusher.join()

    def __enter__(self) -> PostgresEntryStore:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def _check_open(self) -> None:
        if self._closed:
            raise ClosedError("the L0 store is closed")

    # -- transactions --------------------------------------------------------------------------

    @contextmanager
    def transaction(self) -> Iterator[None]:
        """Group every write made inside the block into one transaction: all of them or none.

        The block holds one connection of the pool; other threads write beside it (waiting
        only for the entries it locks) and read the store as it was before the block.
        """
        with self._db.translated("writing to the L0 store"), self._writing():
            yield

    @property
    def stop_words(self) -> frozenset[str]:
        """The words a full-text query leaves out unless nothing else is left (``StoreConfig``'s
        at first; a new value is checked as there, and a bad one leaves it as it was)."""
        return self._stop_words

    @stop_words.setter
    def stop_words(self, value: frozenset[str]) -> None:
        self._stop_words: frozenset[str] = setting_value(StoreConfig, "stop_words", value)

    def in_transaction(self) -> bool:
        """Whether the calling thread is inside a write transaction of this store."""
        return getattr(self._local, "tx", None) is not None

    def hold(self, purpose: str) -> None:
        """Take the lock named ``purpose`` (in this schema) until the calling thread's
        transaction ends: another transaction that asks for it, in any process, waits until
        then (at most ``StoreConfig.busy_timeout_ms``, then ``StorageError``).

        Raises:
            InvalidInputError: ``purpose`` is not a label, or the thread is in no transaction
                (a lock outside one would end with the statement).
        """
        check_label(purpose, what="lock purpose")
        tx: _Transaction | None = getattr(self._local, "tx", None)
        if tx is None:
            raise InvalidInputError(
                f"hold({purpose!r}) needs a transaction: call it inside store.transaction()"
            )
        with self._db.translated(f"waiting for the lock {purpose!r}"):
            tx.conn.execute(
                "SELECT pg_advisory_xact_lock(%s)", (lock_key(self.schema, "hold:" + purpose),)
            )

    @contextmanager
    def _writing(self) -> Iterator[_Transaction]:
        """Yield the calling thread's transaction: a new one, or a savepoint in its own.

        The outermost transaction records its change log and counts before its commit; the
        listeners hear of its changes after the commit.
        """
        self._check_open()
        tx: _Transaction | None = getattr(self._local, "tx", None)
        if tx is not None:
            mark = tx.mark()
            try:
                with tx.conn.transaction():
                    yield tx
            except BaseException:
                tx.rewind(mark)
                raise
            return
        with self._db.connection() as conn:
            tx = _Transaction(conn)
            self._local.tx = tx
            try:
                with conn.transaction():
                    yield tx
                    self._record(tx)
            finally:
                self._local.tx = None
        if tx.changes:
            self._notify(tx.changes)

    def _record(self, tx: _Transaction) -> None:
        """Record a transaction's changes of text in the log and its counts, under the lock.

        The lock is held to the end of the commit (see the module docstring).
        """
        if not tx.relogged and not tx.documents and not tx.tokens:
            return
        conn = tx.conn
        with conn.pipeline():
            conn.execute("SELECT pg_advisory_xact_lock(%s)", (self._log_key,))
            if tx.documents or tx.tokens:
                conn.execute(
                    "UPDATE text_stats SET documents = documents + %s, tokens = tokens + %s",
                    (tx.documents, tx.tokens),
                )
            if tx.relogged:
                positions = {iri: n for n, iri in enumerate(tx.relogged, 1)}  # the last wins
                conn.execute(_LOG, (" ".join(positions), " ".join(map(str, positions.values()))))

    def _write(self, doing: str, work: Callable[[_Transaction], T]) -> T:
        """Run ``work`` in the calling thread's transaction (or a new one); redo it when it
        lost a deadlock or a race to insert a new IRI."""
        with self._db.translated(doing):
            for attempt in range(1, _ATTEMPTS + 1):
                try:
                    with self._writing() as tx:
                        return work(tx)
                except (
                    pg_errors.UniqueViolation,
                    pg_errors.DeadlockDetected,
                    pg_errors.SerializationFailure,
                ) as exc:
                    if attempt == _ATTEMPTS or not _retryable(exc):
                        raise
                    logger.debug("%s: attempt %d lost a race (%s); again", doing, attempt, exc)
        raise AssertionError("unreachable: the last attempt returns or raises")

    # -- writes --------------------------------------------------------------------------------

    def put(
        self,
        node: object,
        *,
        tags: Sequence[str] = (),
        importance: float | None = None,
        named_graph: str | None = None,
        metadata: Mapping[str, Any] | None = None,
        mesi_state: MesiState | str | None = None,
        ttl: float | None = None,
        index: Literal[False] | Sequence[str] | None = None,
    ) -> str:
        """Store a JSON-LD node (a mapping or JSON text), merged into the entry of its ``@id``;
        with ``ttl``, the entry expires that many seconds from now by the server's clock
        (``math.inf``: never; without, it keeps its expiry); ``index`` as ``Record.index``."""
        record = Record(
            node,
            tags=tags,
            importance=importance,
            named_graph=named_graph,
            metadata=metadata,
            mesi_state=mesi_state,
            ttl=ttl,
            index=index,
        )
        return self._checked_many([record], "put", merge=True)[0]

    def put_many(self, records: Iterable[Record | Mapping[str, Any] | str]) -> list[str]:
        """Store many nodes in one transaction; return their IRIs, in order."""
        return self._checked_many(records, "put_many", merge=True)

    def replace(
        self,
        node: object,
        *,
        tags: Sequence[str] = (),
        importance: float | None = None,
        named_graph: str | None = None,
        metadata: Mapping[str, Any] | None = None,
        mesi_state: MesiState | str | None = None,
        ttl: float | None = None,
        index: Literal[False] | Sequence[str] | None = None,
    ) -> str:
        """Store a node as exactly the entry of its ``@id`` (nothing merges); return its IRI
        (``ttl`` and ``index`` as ``put``'s)."""
        record = Record(
            node,
            tags=tags,
            importance=importance,
            named_graph=named_graph,
            metadata=metadata,
            mesi_state=mesi_state,
            ttl=ttl,
            index=index,
        )
        return self._checked_many([record], "replace", merge=False)[0]

    def replace_many(self, records: Iterable[Record | Mapping[str, Any] | str]) -> list[str]:
        """Replace many entries in one transaction (see ``replace``); return their IRIs."""
        return self._checked_many(records, "replace_many", merge=False)

    def put_text(
        self,
        node: object,
        text: str,
        *,
        tags: Sequence[str] = (),
        importance: float | None = None,
        named_graph: str | None = None,
        metadata: Mapping[str, Any] | None = None,
        index: Literal[False] | Sequence[str] | None = None,
    ) -> str:
        """Store ``node`` with ``text`` under its ``"text"`` key, whatever the size of ``text``.

        When the node with its text is within ``max_content_bytes`` this is ``put``. Otherwise
        the node keeps a head of the text (``text_head_bytes``) and the whole text is stored in
        parts beside the entry (``store.postgres.parts``), in one transaction; the entry then
        becomes exactly this node (as ``replace``). ``full_text`` gives the text back.
        ``index`` is ``put``'s, checked against the node as stored (with the head); a search
        finds the whole text only when the index fields take ``"text"``.

        Raises:
            InvalidInputError: ``text`` is not a string that encodes as UTF-8, a text to be
                kept in parts holds a NUL (PostgreSQL's text cannot), or an option is invalid
                (a path of ``index`` selecting nothing among them); InvalidNodeError,
                ContentTooLargeError: as ``put`` for the node without its text.
        """
        record = text_record(
            node,
            text,
            tags=tags,
            importance=importance,
            named_graph=named_graph,
            metadata=metadata,
            index=index,
        )
        limit = self.config.max_content_bytes
        whole = fits_whole(record, text, limit)
        if whole is not None:
            return self._checked_many([whole], "put_text", merge=True)[0]
        nul = text.find("\x00")
        if nul >= 0:  # parts are kept as text, which PostgreSQL cannot hold a NUL in
            iri = record.node.get("@id")
            raise InvalidInputError(
                f"the text of {'a new node' if iri is None else preview(iri)} holds a NUL"
                f" character at position {nul}: PostgreSQL cannot keep it in a text stored"
                f" in parts (one within max_content_bytes, {limit}, is kept whole)"
            )
        head = headed(record, text, self.config.text_head_bytes, limit)

        def work(tx: _Transaction) -> str:
            (iri,) = self._checked_many([head], "put_text", merge=False)
            row = tx.conn.execute(
                "SELECT id, index_fields FROM entries WHERE iri = %s", (iri,)
            ).fetchone()
            assert row is not None  # written just now, in this transaction
            searched = searches_text(head.node, decode(row[1]))
            write_parts(tx.conn, tx, int(row[0]), text, limit, searched=searched)
            return iri

        self._check_open()
        return self._write("writing a text in parts to the L0 store", work)

    def full_text(self, iri: str) -> str | None:
        """Return the whole text of the entry of ``iri``, or ``None`` when there is no entry.

        The text written under ``"text"``, joined from its parts when it was stored in parts
        (``put_text``); for a node without a string ``"text"``, its searchable text (under its
        index fields). Counts no read.
        """
        validate_iri(iri)
        with self._reading() as conn:
            row = conn.execute(
                f"SELECT id, content, index_fields FROM entries AS e WHERE iri = %s"
                f" AND {live('e.id')}",
                (iri,),
            ).fetchone()
            if row is None:
                return None
            text = read_parts(conn, row[0])
        if text is not None:
            return text
        node = parse_canonical(row[1])
        value = node.get("text")
        return value if isinstance(value, str) else indexed_text(node, decode(row[2]))

    def _checked_many(
        self, records: Iterable[Record | Mapping[str, Any] | str], what: str, *, merge: bool
    ) -> list[str]:
        with collector_paused():  # a batch makes many small objects and no cycles
            batch = write_requests(records_of(records, what=what), self.config)
            _check_keys(batch)
            self._check_open()
            now = time.time()
            self._write(
                "writing to the L0 store", lambda tx: self._write_batch(tx, batch, merge, now)
            )
        return [node["@id"] for node, _, _ in batch]

    def _write_batch(
        self, tx: _Transaction, requests: list[Request], merge: bool, now: float
    ) -> None:
        """Stage a batch against the stored entries and write it (see ``store.staging``).

        An expired entry among them is deleted first (as ``delete`` does), so the write starts
        a new entry rather than reviving it. Then each request's expiry is set.
        """
        conn = tx.conn
        iris = [node["@id"] for node, _, _ in requests]
        staged = _load(conn, iris)
        if staged:
            expired = _expired(conn, [entry.id for entry in staged.values()])
            if expired:
                gone = [iri for iri, entry in staged.items() if entry.id in expired]
                self._delete_rows(tx, gone)
                for iri in gone:
                    del staged[iri]
                    self._access.forget(iri)
        known = set(staged)
        new = len({iri for iri in iris if iri not in staged})
        ids = iter(_new_ids(conn, new))
        rows = Rows()
        default = self.config.default_importance
        by_type = self.config.index_fields
        fresh = not staged and new == len(iris)
        if fresh:
            for node, content, record in requests:
                importance = default if record.importance is None else record.importance
                fields = None
                if record.index is not None or by_type:
                    fields = index_of(record, node, record.types, by_type)
                rows.add_new(
                    next(ids),
                    node,
                    content,
                    record,
                    importance=importance,
                    now=now,
                    index_fields=fields,
                )
        else:
            self._stage(staged, requests, ids, merge, now)
            for entry in staged.values():
                if entry.changed:
                    rows.add(entry, now)
        self._write_rows(tx, rows, fresh=fresh)
        _set_expiry(conn, self._expiries(requests, known), relative=True)

    def _expiries(self, requests: list[Request], known: set[str]) -> dict[str, float | None]:
        """The TTL each request sets (``None``: none any more), by IRI; the last one wins.

        A request with a TTL sets it; a new entry without one gets the configured default.
        """
        settings = self.config.expiry
        defaults = bool(settings.default_s or settings.by_graph or settings.by_scope)
        out: dict[str, float | None] = {}
        for node, _, record in requests:
            iri = node["@id"]
            ttl = record.ttl
            if ttl is None and defaults and iri not in known and iri not in out:
                ttl = default_ttl(record, settings)
            if ttl is not None:
                out[iri] = None if math.isinf(ttl) else ttl
        return out

    def _stage(
        self,
        staged: dict[str, Staged],
        requests: list[Request],
        ids: Iterator[int],
        merge: bool,
        now: float,
    ) -> None:
        by_type = self.config.index_fields
        for node, content, record in requests:
            entry = staged.get(node["@id"])
            if entry is None:
                staged[node["@id"]] = new_entry(
                    next(ids),
                    node,
                    content,
                    record,
                    default_importance=self.config.default_importance,
                    now=now,
                    index_fields=index_of(record, node, record.types, by_type),
                )
            elif not merge:
                restage(entry, node, content, record, by_type=by_type)
            else:
                stage(
                    entry,
                    node,
                    record,
                    text_keys=self.config.text_keys,
                    max_bytes=self.config.max_content_bytes,
                    max_depth=self.config.max_depth,
                    by_type=by_type,
                )

    @staticmethod
    def _write_rows(tx: _Transaction, rows: Rows, *, fresh: bool = False) -> None:
        """Write a batch's rows: its entries, and every index brought in line with them.

        ``fresh``: every row is of an entry created here (``Rows.add_new``), so nothing is
        updated or taken out, and no row is looked over for that.
        """
        conn = tx.conn
        added = Postings()
        for entry_id, text in rows.texts:
            tx.tokens += added.add(entry_id, text)
        tx.documents += len(rows.texts)
        if fresh:
            # A new entry's types and references are distinct (``node_types`` and
            # ``node_facets`` give each once) and its id is new: all of them are new rows.
            new_types, new_edges = rows.types, rows.edges
        else:
            new_types, new_edges = _take_out(tx, rows)
        # The rows below are all new (what they replace was deleted above, and an entry created
        # here has a new id): COPY them, the fastest way in, outside the pipeline (which COPY
        # may not join). The index rows go as text, which costs the client least.
        _copy(conn, _COPY_ENTRIES, rows.created)
        _copy_labels(conn, "entry_tags (tag, entry_id)", rows.tags)
        _copy_labels(conn, "entry_types (type, entry_id)", new_types)
        if new_edges:
            sources, predicates, targets = zip(*new_edges, strict=True)
            _copy_text(
                conn,
                "edges (source_id, predicate, target)",
                map(_EDGE, sources, _fields(predicates), _fields(targets)),
            )
        added.insert(conn)
        if rows.fields:  # after the COPY: some of them are entries created here
            conn.execute(
                "UPDATE entries AS e SET index_fields = f.fields"
                " FROM unnest(%s::text[], %s::bigint[]) AS f(fields, id) WHERE e.id = f.id",
                ([fields for fields, _ in rows.fields], [entry_id for _, entry_id in rows.fields]),
            )
        tx.relogged += rows.relogged
        tx.changes += rows.changes

    def retag(self, iri: str, *, add: Sequence[str] = (), remove: Sequence[str] = ()) -> Entry:
        """Add and remove tags of an entry; return the entry as it now is.

        Raises:
            EntryNotFoundError: no entry has ``iri``.
        """
        validate_iri(iri)
        adding = check_tags(Record({"@id": iri}, tags=add).tags, self.config)
        removing = set(Record({"@id": iri}, tags=remove).tags)

        def work(tx: _Transaction) -> Entry:
            conn = tx.conn
            row = conn.execute(
                f"SELECT id, tags FROM entries AS e WHERE iri = %s AND {live('e.id')} FOR UPDATE",
                (iri,),
            ).fetchone()
            if row is None:
                raise EntryNotFoundError(f"no L0 entry has the IRI {iri!r}")
            entry_id, old = row[0], split(row[1])
            tags = tuple(t for t in dict.fromkeys(old + adding) if t not in removing)
            if tags != old:
                conn.execute(
                    "UPDATE entries SET tags = %s, updated_at = %s, generation = generation + 1"
                    " WHERE id = %s",
                    (SEPARATOR.join(tags), time.time(), entry_id),
                )
                gone = [(t, entry_id) for t in old if t not in tags]
                _labels(conn, _DELETE_LABELS, "entry_tags", "tag", gone)
                new = [(t, entry_id) for t in tags if t not in old]
                _labels(conn, _INSERT_LABELS, "entry_tags", "tag", new)
            found = conn.execute(f"SELECT {COLUMNS} FROM entries WHERE id = %s", (entry_id,))
            return to_entry(self._access.overlay(found.fetchall())[0])

        return self._write("retagging an L0 entry", work)

    def delete(self, iri: str) -> bool:
        """Delete an entry from the store and from every index; return whether it existed."""
        validate_iri(iri)
        return bool(self.delete_many([iri]))

    def delete_many(self, iris: Sequence[str]) -> list[str]:
        """Delete entries from the store and every index, in one transaction.

        Returns the IRIs that existed (and are gone now), in the order given; the others are
        left out. Each deletion is a change of the change log, like ``delete``'s.

        Raises:
            InvalidInputError: ``iris`` is not a list of IRIs.
        """
        unique = check_iris(iris)
        deleted = self._write("deleting L0 entries", lambda tx: self._delete_rows(tx, unique))
        for iri in deleted:
            self._access.forget(iri)
        return deleted

    @staticmethod
    def _delete_rows(tx: _Transaction, iris: Sequence[str]) -> list[str]:
        """Delete the entries of ``iris`` (expired or not) and their index rows inside ``tx``;
        return the IRIs found, in the order given. Rows are locked in IRI order, as merges
        lock them."""
        conn = tx.conn
        rows = conn.execute(
            "SELECT id, iri, tags, jsonld_types, content, index_fields FROM entries"
            " WHERE iri = ANY(%s::text[]) ORDER BY iri FOR UPDATE",
            (list(iris),),
        ).fetchall()
        if not rows:
            return []
        order = {iri: position for position, iri in enumerate(iris)}
        rows.sort(key=lambda row: order[row[1]])
        removed = Postings()
        tags: list[tuple[str, int]] = []
        types: list[tuple[str, int]] = []
        for entry_id, _, tag_text, type_text, content, fields in rows:
            text = _searchable(content, fields)
            if text:
                tx.tokens -= removed.add(entry_id, text)
                tx.documents -= 1
            tags += [(tag, entry_id) for tag in split(tag_text)]
            types += [(kind, entry_id) for kind in split(type_text)]
        ids = [row[0] for row in rows]
        removed.delete(conn)
        drop_parts(conn, tx, ids)
        with conn.pipeline():
            conn.execute("DELETE FROM edges WHERE source_id = ANY(%s::bigint[])", (ids,))
            conn.execute("DELETE FROM entries WHERE id = ANY(%s::bigint[])", (ids,))
            conn.execute("DELETE FROM entry_expiry WHERE entry_id = ANY(%s::bigint[])", (ids,))
            _labels(conn, _DELETE_LABELS, "entry_tags", "tag", tags)
            _labels(conn, _DELETE_LABELS, "entry_types", "type", types)
        gone = [row[1] for row in rows]
        tx.relogged += gone
        tx.changes += [(iri, None) for iri in gone]
        return gone

    def restore_many(self, items: Sequence[Restored]) -> list[str]:
        """Write entries back exactly as exported, in one transaction; return their IRIs.

        Each becomes exactly its record (as ``replace``), with the creation time and the expiry
        given (none: it never expires, whatever the configured defaults); an entry of the same
        IRI is replaced.

        Raises:
            InvalidInputError: an item is not a ``Restored`` or its times are not finite.
        """
        checked = list(items) if isinstance(items, (list, tuple)) else None
        if checked is None or not all(isinstance(item, Restored) for item in checked):
            raise InvalidInputError(f"items must be a list of Restored, got {preview(items)}")
        for item in checked:
            for value in (item.created_at, item.expires_at):
                if value is not None and not _finite(value):
                    raise InvalidInputError(f"a time must be a finite number, got {preview(value)}")
        batch = write_requests([item.record for item in checked], self.config)
        _check_keys(batch)
        iris = [node["@id"] for node, _, _ in batch]
        self._check_open()
        now = time.time()

        def work(tx: _Transaction) -> None:
            self._write_batch(tx, batch, False, now)
            times = {iri: item for iri, item in zip(iris, checked, strict=True)}  # the last wins
            tx.conn.execute(
                "UPDATE entries AS e SET created_at = u.created,"
                " last_accessed = GREATEST(e.last_accessed, u.created)"
                " FROM unnest(%s::text[], %s::float8[]) AS u(iri, created) WHERE e.iri = u.iri",
                (list(times), [item.created_at for item in times.values()]),
            )
            expiries = {iri: item.expires_at for iri, item in times.items()}
            _set_expiry(tx.conn, expiries, relative=False)

        self._write("restoring L0 entries", work)
        return iris

    def scan_entries(self, batch: int = 1_000) -> Iterator[list[Entry]]:
        """Yield every live entry, oldest first, in batches (to export the store)."""
        size, last = check_limit(batch), 0
        while True:
            with self._reading() as conn:
                rows = conn.execute(
                    f"SELECT id, {COLUMNS} FROM live_entries WHERE id > %s ORDER BY id LIMIT %s",
                    (last, size),
                ).fetchall()
            if not rows:
                return
            last = rows[-1][0]
            yield [to_entry(row[1:]) for row in rows]

    def expires_at(self, iris: Sequence[str]) -> dict[str, float]:
        """Return when each live entry among ``iris`` that has a TTL expires (UNIX seconds)."""
        sql = (
            "SELECT e.iri, x.expires_at FROM live_entries AS e JOIN entry_expiry AS x"
            f" ON x.entry_id = e.id WHERE e.iri = {_IRIS}"
        )
        return dict(self._over(iris, sql))

    def sweep_expired(self, *, limit: int = 1_000) -> list[Entry]:
        """Delete up to ``limit`` expired entries in one transaction (as ``delete`` does:
        every index, the access statistics, the change log); return them as they were,
        soonest expired first.

        Entries another transaction holds are skipped (``SKIP LOCKED``): sweepers in several
        processes share the work rather than wait for each other, and a writer holding an
        expired entry deletes it itself.
        """
        count = check_limit(limit)

        def work(tx: _Transaction) -> list[Any]:
            rows = tx.conn.execute(
                f"SELECT {QUALIFIED} FROM entries AS e JOIN entry_expiry AS x"
                f" ON x.entry_id = e.id WHERE x.expires_at <= {NOW}"
                " ORDER BY x.expires_at, e.id LIMIT %s FOR UPDATE OF e SKIP LOCKED",
                (count,),
            ).fetchall()
            self._delete_rows(tx, [row[0] for row in rows])
            return rows

        rows = self._write("sweeping expired L0 entries", work)
        for row in rows:
            self._access.forget(row[0])
        return [to_entry(row) for row in rows]

    def scrub(self) -> None:
        """Make what was deleted unrecoverable from the store's tables.

        PostgreSQL keeps a deleted row's bytes in its table's pages (a dead tuple) until they
        are reused, and a plain ``VACUUM`` leaves them in the pages' free space and the
        indexes. This rewrites the store's tables, their TOAST tables and indexes into new
        files (``VACUUM FULL``), dropping the old ones, and then the planner's statistics
        (``Database.rewrite``), after writing the buffered access statistics. Each table is
        locked while it is copied: readers and writers of the store wait for it (at most
        ``StoreConfig.busy_timeout_ms`` for the lock, then ``StorageError``). What the memory
        cannot reach is the server administrator's: the write-ahead log until it is recycled,
        replicas, backups and archives, and the blocks a file system keeps after a file is
        removed.

        Raises:
            InvalidInputError: the calling thread is inside a transaction of this store (a
                ``VACUUM`` cannot run in one, and would wait for that transaction's locks).
            StorageError: PostgreSQL failed, or a lock was not granted in time.
        """
        if self.in_transaction():
            raise InvalidInputError("scrub() cannot run inside store.transaction()")
        self.flush_access()
        self._db.rewrite(_TABLES, "scrubbing the L0 store")

    # -- the change log ------------------------------------------------------------------------

    def change_sequence(self) -> int:
        """Return the sequence number of the last committed change of text (0 when none)."""
        with self._reading("reading the L0 change log") as conn:
            head: int = _one(conn.execute(_HEAD))
        return head

    def changes_since(
        self, sequence: int, *, limit: int = 1000
    ) -> list[tuple[int, str, str | None]]:
        """Return the changes of text after ``sequence``, oldest first: ``(seq, iri, text)``.

        ``text`` is the entry's current text; ``None`` when it is deleted or has no text.
        """
        start, count = check_sequence(sequence, "sequence"), check_limit(limit)
        with self._reading("reading the L0 change log") as conn:
            rows = conn.execute(
                "SELECT c.seq, c.iri, e.content, e.index_fields FROM changes AS c"
                " LEFT JOIN live_entries AS e ON e.iri = c.iri WHERE c.seq > %s ORDER BY c.seq"
                " LIMIT %s",
                (start, count),
            ).fetchall()
        return [
            (seq, iri, None if content is None else _searchable(content, fields) or None)
            for seq, iri, content, fields in rows
        ]

    def watermark(self, name: str) -> int:
        """Return the change sequence the derived index ``name`` has applied (0 when none)."""
        (key,) = check_names([name], "name")
        with self._reading("reading an L0 watermark") as conn:
            row = conn.execute("SELECT sequence FROM watermarks WHERE name = %s", (key,))
            found = row.fetchone()
        return 0 if found is None else int(found[0])

    def set_watermark(self, name: str, sequence: int) -> None:
        """Record that the derived index ``name`` has applied every change up to ``sequence``.

        A watermark never goes back: a value below the stored one is ignored.

        Raises:
            InvalidInputError: ``sequence`` is negative, not an int, or past the last change.
        """
        (key,) = check_names([name], "name")
        value = check_sequence(sequence, "sequence")

        def work(tx: _Transaction) -> None:
            head = _one(tx.conn.execute(_HEAD))
            if value > head:
                raise InvalidInputError(
                    f"watermark {value} of {key!r} is past the last change, {head}"
                )
            tx.conn.execute(
                "INSERT INTO watermarks (name, sequence) VALUES (%s, %s) ON CONFLICT (name)"
                " DO UPDATE SET sequence = GREATEST(watermarks.sequence, excluded.sequence)",
                (key, value),
            )

        self._write("writing an L0 watermark", work)

    def subscribe(self, listener: Callable[[list[Change]], None]) -> Callable[[], None]:
        """Call ``listener`` with the text changes of each commit made through this handle;
        return a function that cancels the subscription. A failing listener is logged."""
        self._listeners.append(listener)
        return lambda: self._listeners.remove(listener) if listener in self._listeners else None

    def _notify(self, changes: list[Change]) -> None:
        for listener in list(self._listeners):
            try:
                listener(changes)
            except Exception:
                logger.exception("L0 change listener %r failed", listener)

    # -- reads ---------------------------------------------------------------------------------

    @contextmanager
    def _reading(self, doing: str = "reading the L0 store") -> Iterator[psycopg.Connection[Any]]:
        """Yield a connection to read on: this thread's transaction's, or one of the pool's."""
        self._check_open()
        tx: _Transaction | None = getattr(self._local, "tx", None)
        with self._db.translated(doing):
            if tx is not None:
                yield tx.conn
            else:
                with self._db.connection() as conn:
                    yield conn

    def _read_entries(
        self, sql: str, params: Sequence[Any], *, counted: str | None = None, prepare: bool = False
    ) -> list[Any]:
        """Run a query of entry rows; return them with the buffered access statistics added.

        ``counted``: the IRI of an entry whose read is counted, if the query finds it. A read
        that overlapped a write of the buffer runs again (see ``store.access``).
        """
        while True:
            epoch = self._access.settled()
            with self._reading() as conn:
                rows = conn.execute(sql, params, prepare=prepare or None).fetchall()
            adjusted = self._access.apply(rows, epoch, counted=counted, now=time.time())
            if adjusted is not None:
                break
        if counted is not None and adjusted:
            self._wake_flusher()
        return adjusted

    def get(self, iri: str) -> Entry | None:
        """Return the entry for ``iri``, or ``None``; counts the read (buffered, see above)."""
        validate_iri(iri)
        rows = self._read_entries(
            f"SELECT {COLUMNS} FROM live_entries WHERE iri = %s", (iri,), counted=iri
        )
        return to_entry(rows[0]) if rows else None

    def get_node(self, iri: str) -> Node | None:
        """Return the JSON-LD node stored under ``iri``, or ``None``; counts the read."""
        entry = self.get(iri)
        return None if entry is None else entry.node

    def get_many(self, iris: Sequence[str], *, include_expired: bool = False) -> dict[str, Entry]:
        """Return the entries of ``iris`` that exist, by IRI, without counting them as reads
        (``include_expired``: and the expired ones not yet swept)."""
        unique = check_iris(iris)
        relation = entries_of(include_expired)
        rows = self._read_entries(
            f"SELECT {COLUMNS} FROM {relation} WHERE iri = {_IRIS}", (" ".join(unique),)
        )
        return {row[0]: to_entry(row) for row in rows}

    def __contains__(self, iri: object) -> bool:
        if not isinstance(iri, str) or not encodes_as_utf8(iri) or "\x00" in iri:
            return False
        with self._reading() as conn:
            found = conn.execute("SELECT 1 FROM live_entries WHERE iri = %s", (iri,))
            return found.fetchone() is not None

    def count(self) -> int:
        """Return the number of entries."""
        with self._reading() as conn:
            value: int = _one(conn.execute("SELECT count(*) FROM live_entries"))
        return value

    def by_tags(
        self, tags: Sequence[str], *, match: Literal["all", "any"] = "all", limit: int | None = None
    ) -> list[Entry]:
        """Return the entries carrying all (or any) of ``tags``, oldest first."""
        wanted = check_names(tags, "tags")
        if match not in ("all", "any"):
            raise InvalidInputError(f"match must be 'all' or 'any', got {match!r}")
        having = f"HAVING count(*) = {len(wanted)}" if match == "all" else ""
        return self._select(
            "JOIN (SELECT entry_id FROM entry_tags WHERE tag = ANY(%s::text[]) GROUP BY entry_id"
            f" {having}) AS t ON t.entry_id = e.id ORDER BY e.id",
            [wanted],
            limit,
        )

    def by_graph(
        self, named_graph: str, *, limit: int | None = None, include_expired: bool = False
    ) -> list[Entry]:
        """Return the entries in the named graph, oldest first (``include_expired``: and the
        expired ones not yet swept)."""
        (graph,) = check_names([named_graph], "named_graph")
        return self._select(
            "WHERE e.named_graph = %s ORDER BY e.id",
            [graph],
            limit,
            relation=entries_of(include_expired),
        )

    def by_type(self, types: str | Sequence[str], *, limit: int | None = None) -> list[Entry]:
        """Return the entries having any of the JSON-LD ``types``, oldest first."""
        wanted = check_names([types] if isinstance(types, str) else types, "types")
        return self._select(
            "WHERE e.id IN (SELECT entry_id FROM entry_types WHERE type = ANY(%s::text[]))"
            " ORDER BY e.id",
            [wanted],
            limit,
        )

    def by_prefix(self, prefix: str, *, limit: int | None = None) -> list[Entry]:
        """Return the entries whose IRI starts with ``prefix`` (taken literally), in IRI order."""
        if not isinstance(prefix, str) or not prefix:
            raise InvalidInputError(f"prefix must be a non-empty string, got {preview(prefix)}")
        check_text(prefix, what="prefix")
        if "\x00" in prefix:  # starts no IRI (none holds a control character), nor can be sent
            return self._select("WHERE FALSE", [], limit)
        upper = prefix_bound(prefix)  # a range on the unique IRI index
        if upper is None:
            return self._select("WHERE e.iri >= %s ORDER BY e.iri", [prefix], limit)
        return self._select(
            "WHERE e.iri >= %s AND e.iri < %s ORDER BY e.iri", [prefix, upper], limit
        )

    def by_importance(
        self, minimum: float = 0.0, maximum: float = 1.0, *, limit: int | None = None
    ) -> list[Entry]:
        """Return the entries with importance in [minimum, maximum], most important first."""
        low, high = check_importance(minimum), check_importance(maximum)
        if low > high:
            raise InvalidInputError(f"importance range is empty: minimum {low} > maximum {high}")
        return self._select(
            "WHERE e.importance BETWEEN %s AND %s ORDER BY e.importance DESC, e.id",
            [low, high],
            limit,
        )

    def recent(self, *, limit: int = 10) -> list[Entry]:
        """Return the most recently changed entries, newest first."""
        return self._select("ORDER BY e.updated_at DESC, e.id DESC", [], limit)

    def contents(self, iris: Sequence[str]) -> dict[str, str]:
        """Return the stored JSON-LD text of the existing entries among ``iris``, by IRI."""
        rows = self._over(iris, f"SELECT iri, content FROM live_entries WHERE iri = {_IRIS}")
        return dict(rows)

    def searchable_texts(self, iris: Sequence[str]) -> dict[str, str]:
        """Return the searchable text (under its index fields) of the existing entries among
        ``iris`` that have one, by IRI: what the lexical and the dense index hold."""
        sql = f"SELECT iri, content, index_fields FROM live_entries WHERE iri = {_IRIS}"
        texts = {iri: _searchable(content, f) for iri, content, f in self._over(iris, sql)}
        return {iri: text for iri, text in texts.items() if text}

    def indexed_with(self, iris: Sequence[str]) -> dict[str, IndexFields]:
        """Return the index fields of the existing entries among ``iris``, by IRI (``None``:
        the default, the text-like values)."""
        sql = f"SELECT iri, index_fields FROM live_entries WHERE iri = {_IRIS}"
        return {iri: decode(fields) for iri, fields in self._over(iris, sql)}

    def graphs_of(self, iris: Sequence[str]) -> dict[str, str]:
        """Return the named graph of each entry among ``iris`` that has one, by IRI."""
        sql = f"SELECT iri, named_graph FROM live_entries WHERE iri = {_IRIS}"
        return {iri: graph for iri, graph in self._over(iris, sql) if graph is not None}

    def _over(self, iris: Sequence[str], sql: str, params: Sequence[Any] = ()) -> list[Any]:
        """Run ``sql``, whose last parameter is ``iris`` (``_IRIS``); return the rows."""
        unique = check_iris(iris)
        with self._reading() as conn:
            return conn.execute(sql, (*params, " ".join(unique))).fetchall()

    def neighbours(self, iri: str, *, direction: Direction = "both") -> list[Edge]:
        """Return the references from (``"out"``), to (``"in"``) or around (``"both"``) ``iri``."""
        validate_iri(iri)
        if direction not in ("out", "in", "both"):
            raise InvalidInputError(f"direction must be 'out', 'in' or 'both', got {direction!r}")
        join = "SELECT e.iri, g.predicate, g.target FROM edges AS g JOIN live_entries AS e"
        edges: list[Edge] = []
        with self._reading() as conn:
            if direction in ("out", "both"):
                rows = conn.execute(
                    f"{join} ON e.id = g.source_id WHERE e.iri = %s ORDER BY g.predicate, g.target",
                    (iri,),
                ).fetchall()
                edges.extend(Edge(*row) for row in rows)
            if direction in ("in", "both"):
                rows = conn.execute(
                    f"{join} ON e.id = g.source_id WHERE g.target = %s ORDER BY e.iri, g.predicate",
                    (iri,),
                ).fetchall()
                edges.extend(Edge(*row) for row in rows)
        return edges

    def linked(self, iris: Sequence[str], predicates: Sequence[str]) -> list[tuple[str, str]]:
        """Return ``(iri, neighbour)`` pairs joined by an edge under one of ``predicates``, in
        either direction, for the given IRIs."""
        wanted = check_names(predicates, "predicates")
        join = "FROM edges AS g JOIN live_entries AS e ON e.id = g.source_id"
        where = "WHERE g.predicate = ANY(%s::text[]) AND"
        outgoing = f"SELECT e.iri, g.target {join} {where} e.iri = {_IRIS}"
        incoming = f"SELECT g.target, e.iri {join} {where} g.target = {_IRIS}"
        # One statement, one round trip: the outgoing pairs, then the incoming ones.
        sql = f"{outgoing} UNION ALL {incoming}"
        unique = " ".join(check_iris(iris))
        with self._reading() as conn:
            rows = conn.execute(sql, (wanted, unique, wanted, unique)).fetchall()
        return [(row[0], row[1]) for row in rows]

    def hierarchy(self, predicates: Sequence[str]) -> list[tuple[str, str]]:
        """Return (child, parent) pairs: each entry under each of its types, and each link
        under ``predicates`` from its source to its target."""
        wanted = check_names(predicates, "predicates")
        with self._reading() as conn:
            typed = conn.execute(
                "SELECT e.iri, t.type FROM entry_types AS t JOIN live_entries AS e"
                " ON e.id = t.entry_id"
            ).fetchall()
            linked = conn.execute(
                "SELECT e.iri, g.target FROM edges AS g JOIN live_entries AS e"
                " ON e.id = g.source_id"
                " WHERE g.predicate = ANY(%s::text[])",
                (wanted,),
            ).fetchall()
        return [(child, parent) for child, parent in typed + linked]

    def tag_counts(self) -> dict[str, int]:
        """Return the number of entries per tag, most used first."""
        return self._counts(
            f"SELECT tag, count(*) AS n FROM entry_tags AS t WHERE {live('t.entry_id')}"
            " GROUP BY tag"
        )

    def graph_counts(self, *, include_expired: bool = False) -> dict[str, int]:
        """Return the number of entries per named graph, largest first (``include_expired``:
        the expired ones not yet swept counted too)."""
        return self._counts(
            f"SELECT named_graph, count(*) AS n FROM {entries_of(include_expired)}"
            " WHERE named_graph IS NOT NULL GROUP BY named_graph"
        )

    def type_counts(self) -> dict[str, int]:
        """Return the number of entries per JSON-LD type, most used first."""
        return self._counts(
            f"SELECT type, count(*) AS n FROM entry_types AS t WHERE {live('t.entry_id')}"
            " GROUP BY type"
        )

    def _counts(self, sql: str) -> dict[str, int]:
        with self._reading() as conn:
            rows = conn.execute(sql + " ORDER BY n DESC, 1").fetchall()
        return {name: n for name, n in rows}

    def _select(
        self,
        clause: str,
        params: Sequence[Any],
        limit: int | None,
        *,
        relation: str = "live_entries",
    ) -> list[Entry]:
        sql = f"SELECT {QUALIFIED} FROM {relation} AS e {clause}"
        args = list(params)
        if limit is not None:
            sql += " LIMIT %s"
            args.append(check_limit(limit))
        return [to_entry(row) for row in self._read_entries(sql, args)]

    def scan_texts(self, batch: int = 1_000) -> Iterator[list[tuple[str, str]]]:
        """Yield ``(iri, text)`` of every entry with text, in batches (to rebuild an index)."""
        size, last = check_limit(batch), 0
        while True:
            with self._reading() as conn:
                rows = conn.execute(
                    "SELECT id, iri, content, index_fields FROM live_entries"
                    " WHERE id > %s ORDER BY id LIMIT %s",
                    (last, size),
                ).fetchall()
            if not rows:
                return
            last = rows[-1][0]
            texts = [(iri, _searchable(content, fields)) for _, iri, content, fields in rows]
            yield [(iri, text) for iri, text in texts if text]

    # -- search --------------------------------------------------------------------------------

    def search_text(
        self, query: str, *, limit: int = 10, filters: SearchFilters | None = None
    ) -> list[TextHit]:
        """Full-text search over the entries' text, ranked by BM25 as FTS5 ranks (best first).

        The query is split into words; an entry holding any of them is a candidate. Words in
        ``stop_words`` are left out unless nothing else is left.
        """
        rows = self._bm25(query, limit, filters, ids_only=False)
        return [
            TextHit(entry=to_entry(row[:-1]), score=row[-1], rank=rank)
            for rank, row in enumerate(rows, start=1)
        ]

    def search_ids(
        self, query: str, *, limit: int = 10, filters: SearchFilters | None = None
    ) -> list[tuple[str, float]]:
        """``search_text`` returning only ``(iri, score)`` pairs: the lexical arm of search."""
        return [(row[0], row[1]) for row in self._bm25(query, limit, filters, ids_only=True)]

    def _bm25(
        self, query: str, limit: int, filters: SearchFilters | None, *, ids_only: bool
    ) -> list[Any]:
        if not isinstance(query, str):
            raise InvalidInputError(f"query must be a string, got {preview(query)}")
        count = check_limit(limit)
        if filters is not None and not isinstance(filters, SearchFilters):
            raise InvalidInputError(f"filters must be SearchFilters, got {preview(filters)}")
        terms = query_terms(query, self.stop_words)
        if not terms:
            self._check_open()
            return []
        condition: str | None = None
        checked: str | None = None
        params: list[Any] = []
        checked_params: list[Any] = []
        if filters is not None and not filters.empty:
            # Each candidate is checked against its own row (``probe``); the entries passing
            # are collected (``_allowed``) by the condition's other form.
            condition, params = filters.sql(POSTGRESQL)
            checked, checked_params = filters.sql(POSTGRESQL, probe=True)
        tx: _Transaction | None = getattr(self._local, "tx", None)
        pending = (0, 0) if tx is None else (tx.documents, tx.tokens)
        with self._reading("searching the L0 store") as conn:
            blocks = conn.execute(POSTINGS, (list(terms),), prepare=True, binary=True).fetchall()
        try:
            ids, scores = ranked(blocks, terms, pending)
        except ValueError as exc:
            raise StorageError(f"the L0 store's full-text index is damaged: {exc}") from exc
        sql = best_sql("e.iri" if ids_only else QUALIFIED, checked)
        rows: list[Any] = []
        # Without a filter the best few suffice, unless some of them have expired meanwhile;
        # with one, the best few times the limit are checked first (see ``_FIRST_CHECKED``).
        step = count + _SPARE if condition is None else count * _FIRST_CHECKED
        sent = 0
        while sent < len(ids) and len(rows) < count:
            chosen, places = ids[sent : sent + step], np.arange(sent, min(sent + step, len(ids)))
            at_most = min(_FEW_ALLOWED, (len(ids) - sent) // 2)
            if sent and condition is not None and at_most >= count:  # maybe a narrow filter
                allowed = self._allowed(condition, params, at_most)
                if allowed is not None:  # only the candidates it allows
                    places = np.flatnonzero(np.isin(ids[sent:], allowed)) + sent
                    chosen = ids[places]
                    step = len(ids)
            args = [array_literal(chosen.tolist()), *checked_params, count - len(rows)]
            if ids_only:
                with self._reading("searching the L0 store") as conn:
                    found = conn.execute(sql, args, prepare=condition is None).fetchall()
            else:
                found = self._read_entries(sql, args, prepare=condition is None)
            rows += [(*row[:-1], float(scores[places[row[-1] - 1]])) for row in found]
            sent = len(ids) if step == len(ids) else sent + len(chosen)
            step = len(ids)
        return rows

    def _allowed(
        self, condition: str, params: Sequence[Any], at_most: int
    ) -> npt.NDArray[np.int64] | None:
        """Return the ids of the live entries passing a filter (``condition`` on ``e``), or
        ``None`` when more than ``at_most`` do (reading no more than one beyond it)."""
        sql = f"SELECT e.id FROM live_entries AS e WHERE {condition} LIMIT %s"
        with self._reading("searching the L0 store") as conn:
            found = conn.execute(sql, [*params, at_most + 1]).fetchall()
        if len(found) > at_most:
            return None
        return np.fromiter((row[0] for row in found), np.int64, len(found))

    def matching(
        self, filters: SearchFilters, iris: Sequence[str] | None = None, *, limit: int | None = None
    ) -> list[str]:
        """Return the IRIs (among ``iris``, when given, in their order; else oldest first) of
        the entries that pass ``filters`` (the first ``limit``, when given)."""
        if not isinstance(filters, SearchFilters):
            raise InvalidInputError(f"filters must be SearchFilters, got {preview(filters)}")
        most = None if limit is None else check_limit(limit)
        condition, params = filters.sql(POSTGRESQL)
        if iris is None:
            with self._reading() as conn:
                rows = conn.execute(
                    f"SELECT e.iri FROM live_entries AS e WHERE {condition} ORDER BY e.id LIMIT %s",
                    [*params, most],
                ).fetchall()
            return [row[0] for row in rows]
        probed, probed_params = filters.sql(POSTGRESQL, probe=True)  # each checked by its row
        sql = f"SELECT e.iri FROM live_entries AS e WHERE {probed} AND e.iri = {_IRIS}"
        found = {row[0] for row in self._over(iris, sql, probed_params)}
        return [iri for iri in dict.fromkeys(iris) if iri in found][:most]

    # -- access statistics ---------------------------------------------------------------------

    def _wake_flusher(self) -> None:
        """Start the thread that writes the buffered statistics, or wake it when many wait."""
        if self._flusher is None:
            with self._flusher_lock:
                if self._flusher is None and not self._closed:
                    flusher = threading.Thread(
                        target=_flush_periodically,
                        args=(
                            weakref.ref(self),
                            self._stop,
                            self._wake,
                            self.config.access_flush_interval_s,
                        ),
                        name=f"gliding-pg-access-{id(self):x}",
                        daemon=True,
                    )
                    flusher.start()
                    self._flusher = flusher
        if len(self._access) >= self.config.access_buffer_limit:
            self._wake.set()

    def flush_access(self) -> int:
        """Write the buffered access statistics now; return how many entries they covered."""
        self._check_open()
        return _write_access(self._db, self._access)

    # -- checks --------------------------------------------------------------------------------

    def integrity_check(self) -> str:
        """Check that every index agrees with the entries; return ``"ok"`` or what disagrees.

        Reads the whole store (for tests and for verifying a copy).
        """
        with self._reading("checking the L0 store") as conn, conn.transaction():
            conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")  # one snapshot
            return _integrity(conn)


# -- module helpers --------------------------------------------------------------------------------


def _searchable(content: str, fields: str | None) -> str:
    """The searchable text of a stored entry: its content under its stored index fields."""
    return indexed_text(parse_canonical(content), decode(fields))


def _load(conn: psycopg.Connection[Any], iris: list[str]) -> dict[str, Staged]:
    """Return the stored entries among ``iris``, locked and staged for merging.

    The IRIs go as one text, joined by spaces (an IRI holds none: ``validate_iri``), which
    the client makes in C where a list parameter costs a step of Python per IRI.
    """
    found: dict[str, Staged] = {}
    for row in conn.execute(_LOAD, (" ".join(dict.fromkeys(iris)),)).fetchall():
        tags, node = split(row[6]), parse_canonical(row[2])
        found[row[1]] = Staged(
            id=row[0],
            iri=row[1],
            node=node,
            content=row[2],
            types=split(row[11]),
            content_hash=row[3],
            importance=row[4],
            created_at=row[5],
            tags=tags,
            metadata=json.loads(row[7]),
            mesi_state=state_of(row[8]),
            named_graph=row[9],
            generation=row[10],
            in_database=True,
            indexed_hash=row[3],
            indexed_node=node,
            indexed_tags=tags,
            indexed_types=split(row[11]),
            index_fields=row[12],
            indexed_fields=row[12],
        )
    return found


def _check_keys(batch: list[Request]) -> None:
    """Refuse a batch in which a node refers to another under a key holding a NUL: the key is
    kept as an edge's predicate, in a text, which PostgreSQL cannot hold a NUL in (the node's
    JSON escapes it). Only a node whose JSON holds an escaped NUL is looked into.

    Raises:
        InvalidNodeError: naming the node and the key.
    """
    for node, content, _ in batch:
        if "\\u0000" in content:
            for predicate, _ in node_references(node):
                if "\x00" in predicate:
                    raise InvalidNodeError(
                        f"the node {node['@id']!r} refers to another under the key"
                        f" {predicate!r}, which holds a NUL character: PostgreSQL cannot"
                        " keep it as a link's name"
                    )


def _expired(conn: psycopg.Connection[Any], ids: list[int]) -> set[int]:
    """The ids among ``ids`` of entries that have expired."""
    rows = conn.execute(
        f"SELECT entry_id FROM entry_expiry WHERE entry_id = ANY(%s::bigint[])"
        f" AND expires_at <= {NOW}",
        (ids,),
    ).fetchall()
    return {row[0] for row in rows}


def _set_expiry(
    conn: psycopg.Connection[Any], expiries: dict[str, float | None], *, relative: bool
) -> None:
    """Set the expiry of the entries of ``expiries``' IRIs: ``None`` removes it; else a TTL
    counted from now by the server's clock (``relative``) or a time (UNIX seconds)."""
    if not expiries:
        return
    timed = {iri: at for iri, at in expiries.items() if at is not None}
    start = NOW + " + " if relative else ""
    with conn.pipeline():
        if timed:
            conn.execute(
                f"INSERT INTO entry_expiry (entry_id, expires_at) SELECT e.id, {start}u.at"
                " FROM unnest(%s::text[], %s::float8[]) AS u(iri, at)"
                " JOIN entries AS e ON e.iri = u.iri ORDER BY e.id"
                " ON CONFLICT (entry_id) DO UPDATE SET expires_at = excluded.expires_at",
                (list(timed), list(timed.values())),
            )
        untimed = [iri for iri, at in expiries.items() if at is None]
        if untimed:
            conn.execute(
                "DELETE FROM entry_expiry WHERE entry_id IN"
                " (SELECT id FROM entries WHERE iri = ANY(%s::text[]))",
                (untimed,),
            )


def _finite(value: object) -> bool:
    return not isinstance(value, bool) and isinstance(value, (int, float)) and math.isfinite(value)


def _new_ids(conn: psycopg.Connection[Any], count: int) -> list[int]:
    if not count:
        return []
    rows = conn.execute(
        "SELECT nextval('entry_ids') FROM generate_series(1, %s)", (count,)
    ).fetchall()
    return [row[0] for row in rows]


def _take_out(
    tx: _Transaction, rows: Rows
) -> tuple[list[tuple[str, int]], list[tuple[int, str, str]]]:
    """Update the stored entries among a batch's rows and take their old index rows out;
    return the type and edge rows of the entries created here, which are new rows.

    The old postings go before the new ones are written: a document is in one block at most.
    """
    conn = tx.conn
    removed = Postings()
    for entry_id, text in rows.old_texts:
        tx.tokens -= removed.add(entry_id, text)
    tx.documents -= len(rows.old_texts)
    drop_parts(conn, tx, rows.retexted)  # a text changed: its parts no longer complete it
    removed.delete(conn)
    # The types and edges of the entries created here are new rows (once each: a node may
    # name one twice); those of stored entries may meet rows already there.
    created = {row[11] for row in rows.created}
    new_types = list(dict.fromkeys(row for row in rows.types if row[1] in created))
    types = [row for row in rows.types if row[1] not in created]
    new_edges = list(dict.fromkeys(row for row in rows.edges if row[0] in created))
    edges = [row for row in rows.edges if row[0] not in created]
    with conn.pipeline():
        if rows.updated:
            conn.execute(_UPDATE_ENTRIES, _columns(rows.updated))
        _labels(conn, _DELETE_LABELS, "entry_tags", "tag", rows.old_tags)
        if rows.unindexed:
            conn.execute(
                "DELETE FROM edges WHERE source_id = ANY(%s::bigint[])",
                ([entry_id for (entry_id,) in rows.unindexed],),
            )
        _labels(conn, _DELETE_LABELS, "entry_types", "type", rows.old_types)
        _labels(conn, _INSERT_LABELS, "entry_types", "type", types)
        if edges:
            conn.execute(_INSERT_EDGES, _columns(edges))
    return new_types, new_edges


def _columns(rows: Sequence[Sequence[Any]]) -> list[list[Any]]:
    """The columns of ``rows``, each a list (what an array parameter takes)."""
    return [list(column) for column in zip(*rows, strict=True)]


def _labels(
    conn: psycopg.Connection[Any],
    template: str,
    table: str,
    column: str,
    rows: Sequence[tuple[str, int]],
) -> None:
    """Insert or delete ``(label, entry id)`` rows of the tag or type index."""
    if rows:
        conn.execute(template.format(table=table, column=column), _columns(rows))


def _copy(conn: psycopg.Connection[Any], target: str, rows: Sequence[Sequence[Any]]) -> None:
    """Insert ``rows`` into ``target`` (a table and its columns) with ``COPY``."""
    if rows:
        with conn.cursor() as cursor, cursor.copy(f"COPY {target} FROM STDIN") as copy:
            for row in rows:
                copy.write_row(row)


def _fields(values: Sequence[str]) -> Sequence[str]:
    """``values`` as fields of ``COPY``'s text form: as they are, unless one holds a character
    that form escapes (looked for in them all joined, in C: a batch seldom has one)."""
    joined = "".join(values)
    if any(char in joined for char in COPY_ESCAPED):
        return [value.translate(COPY_ESCAPES) for value in values]
    return values


_LABEL = "{0}\t{1}\n".format  # a line of a label index: label, entry id
_EDGE = "{0}\t{1}\t{2}\n".format  # a line of the edges: source id, predicate, target


def _copy_labels(
    conn: psycopg.Connection[Any], target: str, rows: Sequence[tuple[str, int]]
) -> None:
    """Insert ``(label, entry id)`` rows into ``target`` (a label index and its columns)."""
    if rows:
        labels, ids = zip(*rows, strict=True)
        _copy_text(conn, target, map(_LABEL, _fields(labels), ids))


def _copy_text(conn: psycopg.Connection[Any], target: str, lines: Iterable[str]) -> None:
    """Insert rows given as lines of ``COPY``'s text form into ``target``, in one write."""
    data = "".join(lines)
    if data:
        with conn.cursor() as cursor, cursor.copy(f"COPY {target} FROM STDIN") as copy:
            copy.write(data)


def _one(cursor: psycopg.Cursor[Any]) -> Any:
    row = cursor.fetchone()
    assert row is not None
    return row[0]


def _flush_periodically(
    store_ref: weakref.ref[PostgresEntryStore],
    stop: threading.Event,
    wake: threading.Event,
    interval: float,
) -> None:
    """Write a store's buffered access statistics every ``interval`` seconds, until it closes."""
    while True:
        wake.wait(interval)
        wake.clear()
        store = store_ref()
        if stop.is_set() or store is None:
            return
        try:
            store.flush_access()
        except GlidingError as exc:
            logger.warning(
                "cannot write the L0 access statistics yet (%s); they stay buffered", exc
            )
        del store


def _write_access(db: Database, access: AccessBuffer) -> int:
    """Add the buffered statistics to the database in a transaction of their own; return how
    many entries they covered. Unsynced, and with a short lock timeout (see the module)."""
    if not len(access):
        return 0
    rows = access.take()
    try:
        with (
            db.translated("writing the L0 access statistics"),
            db.connection() as conn,
            conn.transaction(),
        ):
            conn.execute("SET LOCAL synchronous_commit = off")
            conn.execute(f"SET LOCAL lock_timeout = '{_ACCESS_LOCK_TIMEOUT}'")
            conn.execute(
                "UPDATE entries AS e SET access_count = e.access_count + a.n,"
                " last_accessed = GREATEST(e.last_accessed, a.at)"
                " FROM unnest(%s::bigint[], %s::float8[], %s::text[]) AS a(n, at, iri)"
                " WHERE e.iri = a.iri",
                _columns(sorted(rows, key=lambda row: row[2])),  # one lock order
            )
            access.committing()
    except BaseException:
        access.abandoned()
        raise
    access.committed()
    return len(rows)


def _shut(db: Database, access: AccessBuffer, stop: threading.Event, wake: threading.Event) -> None:
    """Close a store: stop its flusher, write the buffered statistics, close the pool."""
    stop.set()
    wake.set()
    try:
        _write_access(db, access)
    except GlidingError:
        logger.exception("cannot write the L0 access statistics on close; they are lost")
    finally:
        db.close()


def _integrity(conn: psycopg.Connection[Any]) -> str:
    """Compare every index with what the entries say it should hold."""
    want_tags: set[tuple[Any, ...]] = set()
    want_types: set[tuple[Any, ...]] = set()
    postings = Postings()
    documents = tokens = 0
    for entry_id, content, tags, types, fields in conn.execute(
        "SELECT id, content, tags, jsonld_types, index_fields FROM entries"
    ):
        want_tags.update((tag, entry_id) for tag in split(tags))
        want_types.update((kind, entry_id) for kind in split(types))
        text = _searchable(content, fields)
        if text:
            length = postings.add(entry_id, text)
            documents, tokens = documents + 1, tokens + length
    for entry_id, text in conn.execute(
        "SELECT entry_id, string_agg(text, '' ORDER BY part) FROM entry_parts GROUP BY entry_id"
        " HAVING min(part) >= 0"  # a text kept in parts but not searched has no postings
    ):
        length = postings.add(-entry_id, text)
        documents, tokens = documents + 1, tokens + length
    problems = []
    for name, want, sql in (
        ("tag index", want_tags, "SELECT tag, entry_id FROM entry_tags"),
        ("type index", want_types, "SELECT type, entry_id FROM entry_types"),
    ):
        have = {tuple(row) for row in conn.execute(sql)}
        if have != want:
            problems.append(f"{name}: {len(want - have)} missing, {len(have - want)} extra")
    problems += _blocks_problems(conn, postings.rows())
    stats = conn.execute("SELECT documents, tokens FROM text_stats").fetchall()
    if stats != [(documents, tokens)]:
        problems.append(f"text_stats {stats} != {[(documents, tokens)]}")
    return "ok" if not problems else "; ".join(problems)


def _blocks_problems(
    conn: psycopg.Connection[Any], want: list[tuple[str, int, int, int]]
) -> list[str]:
    """Compare the lexical index with the postings ``want`` (by term and id); check that each
    block is well formed: its arrays of one length, from 1 to ``BLOCK``, its ids ascending,
    ``low`` and ``high`` its first and last."""
    have = conn.execute(
        "SELECT p.term, u.id, u.frequency, u.length FROM postings AS p"
        " CROSS JOIN LATERAL unnest(p.ids, p.frequencies, p.lengths) AS u(id, frequency, length)"
        " ORDER BY 1, 2"
    ).fetchall()
    problems = []
    if have != want:
        missing, extra = set(want) - set(have), set(have) - set(want)
        problems.append(
            f"postings: {len(missing)} missing, {len(extra)} extra,"
            f" {len(have) - len(set(have))} repeated"
        )
    malformed = _one(
        conn.execute(
            "SELECT count(*) FROM postings WHERE NOT (cardinality(ids) BETWEEN 1 AND %s"
            " AND cardinality(frequencies) = cardinality(ids)"
            " AND cardinality(lengths) = cardinality(ids)"
            " AND low = ids[1] AND high = ids[cardinality(ids)]"
            " AND ids = ARRAY(SELECT DISTINCT i FROM unnest(ids) AS i ORDER BY i))",
            (BLOCK,),
        )
    )
    if malformed:
        problems.append(f"postings: {malformed} malformed blocks")
    return problems
