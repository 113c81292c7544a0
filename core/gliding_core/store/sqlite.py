"""L0: the durable store on SQLite (``EntryStore``). Every memory is a JSON-LD entry; nothing
stored is lost.

Invariants:
- A write that has returned is committed (and, with ``durability="full"``, synced to disk).
- A write request is validated whole before the transaction starts; a batch is one transaction,
  so a failure anywhere writes nothing.
- Storing an ``@id`` that exists merges into the entry (see ``gliding_core.jsonld``);
  ``replace`` instead makes it exactly the node given (nothing of the old one lingers: not a
  property, not a tag), keeping its creation time and continuing its generation. The
  ``generation`` increases on every change of content, tags, types, graph, importance, metadata
  or MESI state. Access statistics are not changes.
- The tag, type, graph, edge and full-text indexes always agree with the entries table: they are
  written in the same transaction as the entry.
- Every committed change of an entry's text (written with a different text, or deleted)
  takes the next number of the change log, in the same transaction; the log keeps each
  IRI's latest change, so ``change_sequence`` only grows and ``changes_since(n)`` gives a
  derived index all it needs to catch up from ``n``. Watermarks never decrease.
- Reads never wait for the writer: each thread reads on its own connection, on a snapshot of
  the last commit (WAL), beside the one writer (``gliding_core.store.connections``). Inside its own
  write transaction a thread reads on the writer and sees its uncommitted writes.
- A read writes nothing. ``get`` counts itself (access count, last access) in an in-memory
  buffer (``gliding_core.store.access``) that every read of this store adds in at once; a timer
  thread writes the buffer every ``access_flush_interval_s`` (sooner past
  ``access_buffer_limit`` entries) in a transaction of its own, unsynced, and ``close``
  writes what is left. A crash loses at most those buffered counts (with
  ``durability="full"``, a power loss also those written since the last synced commit),
  never an entry or any other write. Other stores on the same file see the counts once
  written.
- A text over ``max_content_bytes`` written with ``put_text`` is kept whole beside its entry
  (``gliding_core.store.parts``): the node holds a head, the full-text index all of it (when
  the entry's index fields take its text), and the parts go when the entry's ``"text"``
  changes or the entry is deleted. ``put`` refuses a node over the limit.
- SQL is built from constants only; every value travels as a parameter.

In memory: ``L0Store()`` keeps its database in a private temporary file (WAL, never synced,
removed on close or when the store is collected), not in SQLite's ``:memory:``. A private
memory database has one connection and no WAL, so every reader would queue behind the writer
(as before: a ``count`` waited 0.51 s behind a 0.5 s transaction). A shared-cache memory
database (``file:...?mode=memory&cache=shared``) does give each thread a connection, but
locks whole tables: measured, a read of a table another connection is writing fails at once
with "database table is locked" (SQLite's busy handler does not apply), so a reader would
have to wait for the whole write transaction again. The temporary file gives the in-memory
store the same parallel readers as a file store; its pages stay in the OS's cache. The
measured cost: a bare key look-up on one thread, 50,000 a second against 84,000 in a private
memory database (SQLite alone; a whole ``get`` parses JSON too, and measured about the same
CPU time either way).
"""

from __future__ import annotations

import functools
import json
import logging
import math
import os
import shutil
import sqlite3
import tempfile
import threading
import time
import weakref
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from itertools import chain
from typing import Any, Literal

import numpy as np

from gliding_core.boundary import translate, translated
from gliding_core.config import StoreConfig, setting_value
from gliding_core.errors import (
    ClosedError,
    EntryNotFoundError,
    GlidingError,
    InvalidInputError,
    StorageError,
)
from gliding_core.fields import LEGACY, IndexFields, decode, encode, indexed_text
from gliding_core.jsonld import (
    Node,
    check_iris,
    check_label,
    check_text,
    encodes_as_utf8,
    node_text,
    parse_canonical,
    preview,
    validate_iri,
)
from gliding_core.store.access import AccessBuffer, write_buffered
from gliding_core.store.columns import COLUMNS as _COLUMNS
from gliding_core.store.columns import QUALIFIED as _QUALIFIED
from gliding_core.store.columns import check_limit as _check_limit
from gliding_core.store.columns import check_names as _check_names
from gliding_core.store.columns import check_sequence as _check_sequence
from gliding_core.store.columns import entries_of as _entries_of
from gliding_core.store.columns import prefix_bound, state_of
from gliding_core.store.columns import split as _split
from gliding_core.store.columns import to_entry as _to_entry
from gliding_core.store.connections import Connections, open_reader, set_wal
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
from gliding_core.store.filters import SearchFilters
from gliding_core.store.lexical import query_words
from gliding_core.store.parts import (
    PARTS_SCHEMA,
    drop_parts,
    fits_whole,
    has_parts,
    read_parts,
    searches_text,
    text_record,
    write_parts,
)
from gliding_core.store.parts import (
    headed as head_record,
)
from gliding_core.store.postings import POSTINGS_TABLE, RowLengths, log_head
from gliding_core.store.protocol import Change, Direction
from gliding_core.store.pruning import TERMS_TABLE, applies, top_matches
from gliding_core.store.staging import (
    SEPARATOR,
    Request,
    Rows,
    Staged,
    check_tags,
    collector_paused,
    index_of,
    new_entry,
    restage,
    stage,
    write_requests,
)
from gliding_core.store.staging import default_ttl as _default_ttl

logger = logging.getLogger(__name__)

SCHEMA_VERSION = 6  # 2: contentless full-text index; 3: change log, watermarks; 4: expiry;
# 5: the live view probes the expiry table per row; 6: index fields

_LIVE_VIEW = """
CREATE VIEW IF NOT EXISTS live_entries AS SELECT * FROM entries AS e WHERE NOT EXISTS (
    SELECT 1 FROM entry_expiry AS x
    WHERE x.entry_id = e.id AND x.expires_at <= (julianday('now') - 2440587.5) * 86400.0
);
"""
_SCHEMA = f"""
CREATE TABLE IF NOT EXISTS entries (
    id INTEGER PRIMARY KEY,
    iri TEXT NOT NULL UNIQUE,
    content TEXT NOT NULL,
    importance REAL NOT NULL,
    access_count INTEGER NOT NULL DEFAULT 0,
    created_at REAL NOT NULL,
    last_accessed REAL NOT NULL,
    updated_at REAL NOT NULL,
    tags TEXT NOT NULL,
    metadata TEXT NOT NULL,
    mesi_state TEXT NOT NULL CHECK (mesi_state IN ('M', 'E', 'S', 'I')),
    content_hash TEXT NOT NULL,
    named_graph TEXT,
    jsonld_context TEXT,
    jsonld_types TEXT NOT NULL,
    generation INTEGER NOT NULL,
    index_fields TEXT
);
CREATE INDEX IF NOT EXISTS entries_by_graph ON entries (named_graph) WHERE named_graph IS NOT NULL;
CREATE INDEX IF NOT EXISTS entries_by_importance ON entries (importance);
CREATE TABLE IF NOT EXISTS entry_tags (
    tag TEXT NOT NULL, entry_id INTEGER NOT NULL, PRIMARY KEY (tag, entry_id)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS entry_types (
    type TEXT NOT NULL, entry_id INTEGER NOT NULL, PRIMARY KEY (type, entry_id)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS edges (
    source_id INTEGER NOT NULL, predicate TEXT NOT NULL, target TEXT NOT NULL,
    PRIMARY KEY (source_id, predicate, target)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS edges_by_target ON edges (target);
CREATE TABLE IF NOT EXISTS changes (seq INTEGER PRIMARY KEY, iri TEXT NOT NULL UNIQUE);
CREATE TABLE IF NOT EXISTS watermarks (
    name TEXT PRIMARY KEY, sequence INTEGER NOT NULL
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS entry_expiry (
    entry_id INTEGER PRIMARY KEY, expires_at REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS entry_expiry_by_time ON entry_expiry (expires_at);
{_LIVE_VIEW}
"""
# Expiry: an entry with a TTL has a row in ``entry_expiry``; from the moment it expires every
# read leaves it out, because every read goes through the view ``live_entries`` (the entries
# less those expired at the statement's clock); a sweep deletes it later through ``delete``'s
# path. A table beside the entries rather than a column: most entries never expire. The view
# probes that table's key once per row it returns: a get costs one lookup more, where a
# ``NOT IN`` list of the expired ids was built anew by every statement (a get took 1.8 times
# as long, and 7 times with a thousand entries expiring).
_NOW = "(julianday('now') - 2440587.5) * 86400.0"  # SQLite's clock as UNIX seconds
_EXPIRED = f"SELECT entry_id FROM entry_expiry WHERE expires_at <= {_NOW}"
# The change log holds one row per IRI: its latest change of text. The sequence is the rowid, so
# the head is the last key of the table's B-tree (no scan), and a replaced row always gets a
# sequence above every other: a reader that has applied up to N misses nothing after N.
# Porter stemming: a question about "painting" finds the turn that says "painted". Contentless:
# the text is derived from the entry's content, so a second copy would only slow every write;
# taking an entry's text out of the index means giving the old text back ("delete" command).
TEXT_TOKENIZER = "porter unicode61 remove_diacritics 2"  # L3 ranks frame artifacts with it too
_TEXT_INDEX = f"""
CREATE VIRTUAL TABLE IF NOT EXISTS entry_text USING fts5 (
    text, content = '', tokenize = '{TEXT_TOKENIZER}'
);
"""

_MAX_PARAMETERS = 999  # per statement: SQLite's default bound before 3.32.0
_CHUNK = 500  # IRIs per "IN (...)" look-up, well under SQLite's bound on parameters
_PROBED_LABELS = 8  # the most labels ``matching`` looks up per given entry
_INSERT_TEXT = "INSERT INTO entry_text (rowid, text) VALUES (?, ?)"
_DELETE_TEXT = "INSERT INTO entry_text (entry_text, rowid, text) VALUES ('delete', ?, ?)"


class L0Store:
    """The durable store of JSON-LD entries, on SQLite: an ``EntryStore``.

    Args:
        path: the database file; ``None`` or ``":memory:"`` keeps the store in memory (in a
            private temporary file, removed on close: see the module docstring).
        config: store settings; the defaults of ``StoreConfig`` when omitted.

    Safe to share between threads: reads run in parallel, beside one writer. Several
    processes may open the same file.
    """

    # A search sends its reads one by one here: run beside each other (each thread has a
    # connection of its own) they were no faster at 100,000 entries (p50 14.5 against 14.3 ms,
    # p95 20.0 against 20.1; the rows are built holding the GIL the re-rank's vectors wait for).
    concurrent_reads = False

    def __init__(
        self, path: str | os.PathLike[str] | None = None, config: StoreConfig | None = None
    ):
        self.config = config or StoreConfig()
        self.path = None if path is None or str(path) == ":memory:" else os.fspath(path)
        self._listeners: list[Callable[[list[Change]], None]] = []
        self._changes: list[Change] = []
        self.stop_words = self.config.stop_words
        self.defer_common_words = self.config.defer_common_words
        self.defer_exactly = self.config.defer_exactly
        self.pruned_searches = 0  # full-text searches the pruned search answered (a statistic)
        self.scored_searches = 0  # full-text searches scored from the postings (a statistic)
        self._lengths = RowLengths()  # the full-text rows' lengths, read on first need
        self._scratch = None if self.path else tempfile.mkdtemp(prefix="gliding-l0-")
        self._file = self.path or os.path.join(self._scratch or "", "l0.sqlite3")
        try:
            writer = self._connect()
        except BaseException:
            _remove(self._scratch)
            raise
        # Not a bound method: the finalizer below must not hold the store.
        self._db = Connections(
            writer,
            functools.partial(open_reader, self._file, busy_timeout_ms=self.config.busy_timeout_ms),
        )
        self._access = AccessBuffer(iri=0, count=3, last=5)  # positions in _COLUMNS
        self._flusher: threading.Thread | None = None
        self._flusher_lock = threading.Lock()
        self._stop, self._wake = threading.Event(), threading.Event()
        # Runs once: on close(), when the store is collected unclosed, or at interpreter exit.
        self._finalizer = weakref.finalize(
            self,
            _shut,
            self._db,
            self._access,
            self._stop,
            self._wake,
            self._scratch,
            self._sync_level,
        )
        self._warming: threading.Thread | None = None
        if self.path is not None and applies(writer, self.defer_common_words):
            # A large store's first search need not wait for its texts' lengths (0.77 s at
            # 1,000,000 entries): they are read on a thread of their own at once.
            self._warming = threading.Thread(
                target=_read_lengths,
                args=(self._db, self._lengths),
                name="gliding-l0-lengths",
                daemon=True,
            )
            self._warming.start()

    # -- lifecycle -----------------------------------------------------------------------------

    def _connect(self) -> sqlite3.Connection:
        """Open the writer connection and bring the schema up to date."""
        with translated("sqlite", f"opening the L0 store at {self.path or ':memory:'}"):
            # isolation_level=None: transactions are begun explicitly (BEGIN IMMEDIATE), so a
            # read-modify-write merge holds the write lock from its first read.
            conn = sqlite3.connect(
                self._file,
                isolation_level=None,
                check_same_thread=False,
                timeout=self.config.busy_timeout_ms / 1000,
            )
            try:
                self._prepare(conn)
            except BaseException:
                conn.close()
                raise
        return conn

    def _prepare(self, conn: sqlite3.Connection) -> None:
        """Set the writer's pragmas and create or upgrade the schema."""
        conn.execute(f"PRAGMA busy_timeout = {int(self.config.busy_timeout_ms)}")
        # WAL lets readers run beside one writer and keeps a commit to one appended frame.
        set_wal(conn, busy_timeout_ms=self.config.busy_timeout_ms)
        conn.execute(f"PRAGMA synchronous = {self._sync_level}")
        # A larger page cache keeps the B-tree interiors of a 100,000-entry store in memory;
        # SQLite grows it only as pages are used, so a small store stays small.
        conn.execute("PRAGMA cache_size = -65536")
        # Checkpoint the log every ~40 MiB rather than every 4 MiB: pages rewritten by
        # successive batches (index interiors) are copied into the database once, not each time.
        conn.execute("PRAGMA wal_autocheckpoint = 10000")
        # One script, one transaction: processes opening a new file at once create it once.
        conn.executescript(
            f"BEGIN IMMEDIATE;{_SCHEMA}{PARTS_SCHEMA}{_TEXT_INDEX}{TERMS_TABLE}{POSTINGS_TABLE}"
            "COMMIT;"
        )
        if conn.execute("PRAGMA user_version").fetchone()[0] < SCHEMA_VERSION:
            _upgrade(conn)

    @property
    def _sync_level(self) -> str:
        if self.path is None:
            return "OFF"  # a memory store promises nothing once the process ends
        return "FULL" if self.config.durability == "full" else "NORMAL"

    def close(self) -> None:
        """Write the buffered access statistics and close the database; closing twice is harmless.

        Later calls raise ``ClosedError``. Waits for a write or read in progress.
        """
        self._finalizer()
        with self._flusher_lock:  # a flusher being started is joined only once it runs
            flusher = self._flusher
        if flusher is not None and flusher is not threading.current_thread():
            flusher.join()
        if self._warming is not None:  # it ends once the readers are closed, if not before
            self._warming.join()

    def __enter__(self) -> L0Store:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"L0Store(path={self.path or ':memory:'!r})"

    @contextmanager
    def _session(self) -> Iterator[sqlite3.Connection]:
        """Hold the writer, translate SQLite errors, and wrap the block in one transaction.

        A write inside another write (the same thread holds the writer) becomes a savepoint,
        so it commits with, and rolls back with, the outer transaction. Listeners hear of the
        committed changes after the outermost commit, outside the lock.
        """
        committed: list[Change] = []
        db = self._db
        with db.lock:
            if db.closed:
                raise ClosedError("the L0 store is closed")
            conn = db.writer
            nested = conn.in_transaction
            try:
                mark = len(self._changes)
                conn.execute("SAVEPOINT nested" if nested else "BEGIN IMMEDIATE")
                db.owner = threading.get_ident()
                try:
                    yield conn
                except BaseException:
                    del self._changes[mark:]
                    if nested:
                        conn.execute("ROLLBACK TO nested")
                        conn.execute("RELEASE nested")
                    else:
                        conn.execute("ROLLBACK")
                    raise
                conn.execute("RELEASE nested" if nested else "COMMIT")
                if not nested:
                    committed, self._changes = self._changes, []
            except sqlite3.Error as exc:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                self._changes.clear()
                raise _translated(exc, "writing to the L0 store") from exc
            finally:
                if not nested:
                    db.owner = None
        if committed:
            self._notify(committed)

    @contextmanager
    def _reading(self) -> Iterator[sqlite3.Connection]:
        """Yield this thread's reader (the writer inside this thread's write transaction)."""
        with translated("sqlite", "reading the L0 store"), self._db.reader() as conn:
            yield conn

    def _read_entries(
        self, read: Callable[[sqlite3.Connection], list[Any]], *, counted: str | None = None
    ) -> list[Any]:
        """Run ``read``; return its entry rows with the buffered access statistics added.

        ``counted``: the IRI of an entry whose read is counted, if ``read`` finds it. A read
        that overlapped a commit of buffered statistics runs again (see
        ``gliding_core.store.access``).
        """
        while True:
            epoch = self._access.settled()
            with self._reading() as conn:
                rows = read(conn)
                adjusted = self._access.apply(rows, epoch, counted=counted, now=time.time())
            if adjusted is not None:
                break
        if counted is not None and adjusted:
            self._wake_flusher()
        return adjusted

    def _wake_flusher(self) -> None:
        """Start the thread that writes the buffered statistics, or wake it when many wait."""
        if self._flusher is None:
            with self._flusher_lock:
                if self._flusher is None and not self._db.closed:
                    flusher = threading.Thread(
                        target=_flush_periodically,
                        args=(
                            weakref.ref(self),
                            self._stop,
                            self._wake,
                            self.config.access_flush_interval_s,
                        ),
                        name=f"gliding-l0-access-{id(self):x}",
                        daemon=True,
                    )
                    flusher.start()  # before it is published: close joins only started threads
                    self._flusher = flusher
        if len(self._access) >= self.config.access_buffer_limit:
            self._wake.set()

    def flush_access(self) -> int:
        """Write the buffered access statistics now; return how many entries they covered.

        The store does this by itself every ``access_flush_interval_s`` and on close.
        """
        if self._db.closed:
            raise ClosedError("the L0 store is closed")
        return write_buffered(self._db, self._access, sync=self._sync_level)

    def subscribe(self, listener: Callable[[list[Change]], None]) -> Callable[[], None]:
        """Call ``listener`` with the committed text changes of each write; return a canceller.

        A change is ``(iri, text)`` for an entry whose text was written and ``(iri, None)`` for
        a deleted entry. A failing listener is logged; the write it follows stands.
        """
        self._listeners.append(listener)
        return lambda: self._listeners.remove(listener) if listener in self._listeners else None

    def _notify(self, changes: list[Change]) -> None:
        for listener in list(self._listeners):
            try:
                listener(changes)
            except Exception:
                logger.exception("L0 change listener %r failed", listener)

    # -- the change log ------------------------------------------------------------------------

    def change_sequence(self) -> int:
        """Return the sequence number of the last committed change of text (0 when none)."""
        with self._reading() as conn:
            return log_head(conn)

    def changes_since(
        self, sequence: int, *, limit: int = 1000
    ) -> list[tuple[int, str, str | None]]:
        """Return the changes of text after ``sequence``, oldest first: ``(seq, iri, text)``.

        The log keeps each IRI's latest change only, so an IRI appears once; ``text`` is the
        entry's current text, ``None`` when the entry is deleted or has no text any more.
        A derived index applies them in order and records the last ``seq`` with
        ``set_watermark``.
        """
        start, count = _check_sequence(sequence, "sequence"), _check_limit(limit)
        with self._reading() as conn:
            rows = conn.execute(
                "SELECT c.seq, c.iri, e.content, e.index_fields FROM changes AS c"
                " LEFT JOIN live_entries AS e ON e.iri = c.iri"
                " WHERE c.seq > ? ORDER BY c.seq LIMIT ?",
                (start, count),
            ).fetchall()
        return [
            (seq, iri, None if content is None else _text(content, fields) or None)
            for seq, iri, content, fields in rows
        ]

    def watermark(self, name: str) -> int:
        """Return the change sequence the derived index ``name`` has applied (0 when none)."""
        (key,) = _check_names([name], "name")
        with self._reading() as conn:
            row = conn.execute("SELECT sequence FROM watermarks WHERE name = ?", (key,)).fetchone()
        return 0 if row is None else int(row[0])

    def set_watermark(self, name: str, sequence: int) -> None:
        """Record that the derived index ``name`` has applied every change up to ``sequence``.

        A watermark never goes back: a value below the stored one is ignored.

        Raises:
            InvalidInputError: ``sequence`` is negative, not an int, or past the last change.
        """
        (key,) = _check_names([name], "name")
        value = _check_sequence(sequence, "sequence")
        with self._session() as conn:
            head = log_head(conn)
            if value > head:
                raise InvalidInputError(
                    f"watermark {value} of {key!r} is past the last change, {head}"
                )
            conn.execute(
                "INSERT INTO watermarks (name, sequence) VALUES (?, ?) ON CONFLICT (name)"
                " DO UPDATE SET sequence = max(sequence, excluded.sequence)",
                (key, value),
            )

    @contextmanager
    def transaction(self) -> Iterator[None]:
        """Group every write made inside the block into one transaction: all of them or none.

        The block holds the writer, so other threads' writes wait for it (keep it short);
        their reads do not, and see the store as it was before the block. Reads inside the
        block, on this thread, see its writes.
        """
        with self._session():
            yield

    @property
    def stop_words(self) -> frozenset[str]:
        """The words a full-text query leaves out unless nothing else is left (``StoreConfig``'s
        at first; a new value is checked as there, and a bad one leaves it as it was)."""
        return self._stop_words

    @stop_words.setter
    def stop_words(self, value: frozenset[str]) -> None:
        self._stop_words: frozenset[str] = setting_value(StoreConfig, "stop_words", value)

    @property
    def defer_common_words(self) -> int:
        """``StoreConfig.defer_common_words`` of this handle (checked as there when set)."""
        return self._defer_common_words

    @defer_common_words.setter
    def defer_common_words(self, value: int) -> None:
        self._defer_common_words: int = setting_value(StoreConfig, "defer_common_words", value)

    @property
    def defer_exactly(self) -> bool:
        """``StoreConfig.defer_exactly`` of this handle (checked as there when set)."""
        return self._defer_exactly

    @defer_exactly.setter
    def defer_exactly(self, value: bool) -> None:
        self._defer_exactly: bool = setting_value(StoreConfig, "defer_exactly", value)

    def in_transaction(self) -> bool:
        """Whether the calling thread is inside a write transaction of this store.

        Its reads then see its own writes, which may still roll back (and whose change
        sequence numbers would then be given out again): a derived index waits for the commit.
        """
        return self._db.owner == threading.get_ident()

    def hold(self, purpose: str) -> None:
        """Hold the lock named ``purpose`` until the calling thread's transaction ends.

        SQLite's write transactions (``BEGIN IMMEDIATE``) already exclude every other writer of
        the file, in any process, and begin on the last commit: holding one is holding every
        purpose, so only the call is checked.

        Raises:
            InvalidInputError: ``purpose`` is not a label, or the thread is in no transaction.
        """
        check_label(purpose, what="lock purpose")
        if not self.in_transaction():
            raise InvalidInputError(
                f"hold({purpose!r}) needs a transaction: call it inside store.transaction()"
            )

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
        """Store a JSON-LD node (a mapping or JSON text) and return its IRI.

        A node without ``@id`` gets a minted ``urn:uuid:`` IRI. A node whose ``@id`` exists is
        merged into the entry; ``importance`` is then averaged with the stored one. ``index``
        says which properties feed search (``Record.index``; by default those
        ``StoreConfig.index_fields`` gives the node's types, else its text-like values).

        Raises:
            InvalidNodeError: the node is not a JSON object or its ``@id``/``@type`` is malformed.
            InvalidInputError: an option is invalid, or a path of ``index`` selects nothing in
                the (merged) node.
            ContentTooLargeError: the (merged) node exceeds ``max_content_bytes``.
        """
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
        """Store many nodes in one transaction and return their IRIs, in order.

        Items are ``Record`` objects, or nodes given as mappings or JSON text. Every item is
        validated before anything is written; if any write fails, none is kept.
        """
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
        """Store a JSON-LD node as exactly the entry of its ``@id``; return its IRI.

        Unlike ``put``, nothing merges: the entry's properties, tags, graph and metadata become
        those given (what the node lacks is gone, from the indexes too). An existing entry
        keeps its creation time, and its generation goes on from where it was. ``importance``
        and ``mesi_state`` are set when given and kept otherwise.

        Raises:
            InvalidNodeError, InvalidInputError, ContentTooLargeError: as ``put``.
        """
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
        parts beside the entry (``gliding_core.store.parts``), in one transaction; the entry
        then becomes exactly this node (as ``replace``). ``full_text`` gives the text back.
        ``index`` is ``put``'s, checked against the node as stored (with the head); a search
        finds the whole text only when the index fields take ``"text"``.

        Raises:
            InvalidInputError: ``text`` is not a string that encodes as UTF-8, or an option is
                invalid (a path of ``index`` selecting nothing among them); InvalidNodeError,
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
        headed = head_record(record, text, self.config.text_head_bytes, limit)
        with self._session() as conn:
            (iri,) = self._checked_many([headed], "put_text", merge=False)
            entry_id, stored = conn.execute(
                "SELECT id, index_fields FROM entries WHERE iri = ?", (iri,)
            ).fetchone()
            searched = searches_text(headed.node, decode(stored))
            write_parts(conn, entry_id, text, limit, searched=searched)
        return iri

    def full_text(self, iri: str) -> str | None:
        """Return the whole text of the entry of ``iri``, or ``None`` when there is no entry.

        The text written under ``"text"``, joined from its parts when it was stored in parts
        (``put_text``); for a node without a string ``"text"``, its searchable text (under its
        index fields). Counts no read.
        """
        validate_iri(iri)
        with self._reading() as conn:
            row = conn.execute(
                "SELECT id, content, index_fields FROM entries WHERE iri = ?", (iri,)
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
        """Check that ``records`` is an iterable of records, then store them (``_put_many``)."""
        with collector_paused():
            return self._put_many(records_of(records, what=what), merge=merge)

    def _put_many(self, records: list[Record], *, merge: bool = True) -> list[str]:
        # Every item is validated, then every size checked, before anything is written.
        requests = write_requests(records, self.config)
        iris = [node["@id"] for node, _, _ in requests]
        now = time.time()
        with self._session() as conn:
            self._purge_expired(conn, iris)
            staged = self._load(conn, iris)
            known = set(staged)
            next_id: int = conn.execute("SELECT COALESCE(MAX(id), 0) + 1 FROM entries").fetchone()[
                0
            ]
            rows = Rows()
            default = self.config.default_importance
            by_type = self.config.index_fields
            if not staged and len(set(iris)) == len(iris):
                # All new and distinct: nothing merges, so rows come straight from the requests.
                for entry_id, (node, content, record) in enumerate(requests, next_id):
                    importance = default if record.importance is None else record.importance
                    fields = None
                    if record.index is not None or by_type:
                        fields = index_of(record, node, record.types, by_type)
                    rows.add_new(
                        entry_id,
                        node,
                        content,
                        record,
                        importance=importance,
                        now=now,
                        index_fields=fields,
                    )
            else:
                for node, content, record in requests:
                    entry = staged.get(node["@id"])
                    if entry is None:
                        fields = index_of(record, node, record.types, by_type)
                        entry = new_entry(
                            next_id,
                            node,
                            content,
                            record,
                            default_importance=default,
                            now=now,
                            index_fields=fields,
                        )
                        staged[node["@id"]] = entry
                        next_id += 1
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
                for entry in staged.values():
                    if entry.changed:
                        rows.add(entry, now)
            self._write(conn, rows)
            self._set_expiry(conn, self._expiries(requests, known, now))
        return iris

    def _expiries(
        self, requests: list[Request], known: set[str], now: float
    ) -> dict[str, float | None]:
        """The expiry each request sets (``None``: none any more), by IRI; the last one wins.

        A request with a TTL sets it; a new entry without one gets the configured default.
        """
        settings = self.config.expiry
        defaults = bool(settings.default_s or settings.by_graph or settings.by_scope)
        out: dict[str, float | None] = {}
        for node, _, record in requests:
            iri = node["@id"]
            ttl = record.ttl
            if ttl is None and defaults and iri not in known and iri not in out:
                ttl = _default_ttl(record, settings)
            if ttl is not None:
                out[iri] = None if math.isinf(ttl) else now + ttl
        return out

    def _set_expiry(self, conn: sqlite3.Connection, expiries: dict[str, float | None]) -> None:
        if not expiries:
            return
        ids = dict(
            (iri, entry_id)
            for entry_id, iri in _chunked(
                conn, list(expiries), "SELECT id, iri FROM entries WHERE iri IN ({holes})"
            )
        )
        conn.executemany(
            "INSERT OR REPLACE INTO entry_expiry (entry_id, expires_at) VALUES (?, ?)",
            [(ids[iri], at) for iri, at in expiries.items() if at is not None],
        )
        conn.executemany(
            "DELETE FROM entry_expiry WHERE entry_id = ?",
            [(ids[iri],) for iri, at in expiries.items() if at is None],
        )

    def _purge_expired(self, conn: sqlite3.Connection, iris: Sequence[str]) -> None:
        """Delete the expired entries among ``iris`` first: a write never revives one."""
        if conn.execute(
            f"SELECT 1 FROM entry_expiry WHERE expires_at <= {_NOW} LIMIT 1"
        ).fetchone():
            sql = f"SELECT iri FROM entries WHERE id IN ({_EXPIRED}) AND iri IN ({{holes}})"
            expired = [row[0] for row in _chunked(conn, list(iris), sql)]
            for start in range(0, len(expired), _CHUNK):
                self._delete_rows(conn, expired[start : start + _CHUNK])

    @staticmethod
    def _load(conn: sqlite3.Connection, iris: list[str]) -> dict[str, Staged]:
        """Return the stored entries among ``iris``, staged for merging."""
        found: dict[str, Staged] = {}
        unique = list(dict.fromkeys(iris))
        for start in range(0, len(unique), _CHUNK):
            chunk = unique[start : start + _CHUNK]
            rows = conn.execute(
                "SELECT id, iri, content, content_hash, importance, created_at, tags, metadata,"
                " mesi_state, named_graph, generation, jsonld_types, index_fields FROM entries"
                f" WHERE iri IN ({', '.join('?' * len(chunk))})",
                chunk,
            ).fetchall()
            for row in rows:
                tags = _split(row[6])
                node = parse_canonical(row[2])
                found[row[1]] = Staged(
                    id=row[0],
                    iri=row[1],
                    node=node,
                    content=row[2],
                    types=_split(row[11]),
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
                    indexed_types=_split(row[11]),
                    index_fields=row[12],
                    indexed_fields=row[12],
                )
        return found

    def _write(self, conn: sqlite3.Connection, rows: Rows) -> None:
        """Write a batch's rows: its entries, and every index brought in line with them."""
        _insert(
            conn,
            "INSERT INTO entries (content, importance, updated_at, tags, metadata, mesi_state,"
            " content_hash, named_graph, jsonld_context, jsonld_types, generation, id, iri,"
            " created_at, last_accessed)",
            rows.created,
        )
        conn.executemany(
            "UPDATE entries SET content = ?, importance = ?, updated_at = ?, tags = ?,"
            " metadata = ?, mesi_state = ?, content_hash = ?, named_graph = ?,"
            " jsonld_context = ?, jsonld_types = ?, generation = ? WHERE id = ?",
            rows.updated,
        )
        conn.executemany("UPDATE entries SET index_fields = ? WHERE id = ?", rows.fields)
        _insert(conn, "INSERT OR IGNORE INTO entry_tags (tag, entry_id)", rows.tags)
        conn.executemany("DELETE FROM entry_tags WHERE tag = ? AND entry_id = ?", rows.old_tags)
        conn.executemany("DELETE FROM edges WHERE source_id = ?", rows.unindexed)
        conn.executemany(_DELETE_TEXT, rows.old_texts)
        conn.executemany("DELETE FROM entry_types WHERE type = ? AND entry_id = ?", rows.old_types)
        _insert(conn, "INSERT INTO entry_types (type, entry_id)", rows.types)
        _insert(conn, "INSERT INTO edges (source_id, predicate, target)", rows.edges)
        # Not the full-text index: one statement per row is faster there (FTS5 buffers the
        # rows of a transaction itself).
        conn.executemany(_INSERT_TEXT, rows.texts)
        _log(conn, rows.relogged)
        drop_parts(conn, rows.retexted)
        self._changes.extend(rows.changes)

    def retag(self, iri: str, *, add: Sequence[str] = (), remove: Sequence[str] = ()) -> Entry:
        """Add and remove tags of an entry (a merge only ever adds); return the updated entry.

        Raises:
            EntryNotFoundError: no entry has ``iri``.
        """
        validate_iri(iri)
        adding = check_tags(Record({"@id": iri}, tags=add).tags, self.config)
        removing = set(Record({"@id": iri}, tags=remove).tags)
        with self._session() as conn:
            row = conn.execute("SELECT id, tags FROM live_entries WHERE iri = ?", (iri,)).fetchone()
            if row is None:
                raise EntryNotFoundError(f"no L0 entry has the IRI {iri!r}")
            old = _split(row[1])
            tags = tuple(t for t in dict.fromkeys(old + adding) if t not in removing)
            if tags != old:
                conn.execute(
                    "UPDATE entries SET tags = ?, updated_at = ?, generation = generation + 1"
                    " WHERE id = ?",
                    (SEPARATOR.join(tags), time.time(), row[0]),
                )
                conn.executemany(
                    "DELETE FROM entry_tags WHERE tag = ? AND entry_id = ?",
                    [(t, row[0]) for t in old if t not in tags],
                )
                conn.executemany(
                    "INSERT OR IGNORE INTO entry_tags (tag, entry_id) VALUES (?, ?)",
                    [(t, row[0]) for t in tags if t not in old],
                )
            result = conn.execute(f"SELECT {_COLUMNS} FROM entries WHERE id = ?", (row[0],))
            return _to_entry(self._access.overlay(result.fetchall())[0])

    def set_mesi_state(self, iri: str, state: MesiState | str) -> Entry:
        """Set the MESI state of an entry and return the updated entry.

        Raises:
            EntryNotFoundError: no entry has ``iri``.
        """
        validate_iri(iri)
        new_state = MesiState.parse(state)
        with self._session() as conn:
            rows = conn.execute(
                f"UPDATE entries SET mesi_state = ?, updated_at = ?,"
                f" generation = generation + (mesi_state != ?) WHERE iri = ?"
                f" AND id NOT IN ({_EXPIRED}) RETURNING {_COLUMNS}",
                (new_state.value, time.time(), new_state.value, iri),
            ).fetchall()
            if not rows:
                raise EntryNotFoundError(f"no L0 entry has the IRI {iri!r}")
            return _to_entry(self._access.overlay(rows)[0])

    def delete(self, iri: str) -> bool:
        """Delete an entry from the store and from every index; return whether it existed."""
        validate_iri(iri)
        return bool(self.delete_many([iri]))

    def delete_many(self, iris: Sequence[str]) -> list[str]:
        """Delete entries from the store and every index, in one transaction.

        Returns the IRIs that existed (and are gone now), in the order given; the others are
        left out. Each deletion is a change of the change log, like ``delete``.

        Raises:
            InvalidInputError: ``iris`` is not a list of IRIs.
        """
        unique = check_iris(iris)
        deleted: list[str] = []
        with self._session() as conn:
            for start in range(0, len(unique), _CHUNK):
                deleted += self._delete_rows(conn, unique[start : start + _CHUNK])
        return deleted

    def _delete_rows(self, conn: sqlite3.Connection, iris: Sequence[str]) -> list[str]:
        """Delete the entries of ``iris`` (at most ``_CHUNK``) inside the writer's transaction."""
        holes = ", ".join("?" * len(iris))
        rows = conn.execute(
            "SELECT id, iri, tags, jsonld_types, content, index_fields FROM entries"
            f" WHERE iri IN ({holes})",
            list(iris),
        ).fetchall()
        order = {iri: position for position, iri in enumerate(iris)}
        rows.sort(key=lambda row: order[row[1]])
        for entry_id, iri, tags, types, content, fields in rows:
            text = _text(content, fields)
            if text:
                conn.execute(_DELETE_TEXT, (entry_id, text))
            drop_parts(conn, [entry_id])
            conn.execute("DELETE FROM edges WHERE source_id = ?", (entry_id,))
            conn.execute("DELETE FROM entries WHERE id = ?", (entry_id,))
            conn.execute("DELETE FROM entry_expiry WHERE entry_id = ?", (entry_id,))
            conn.executemany(
                "DELETE FROM entry_tags WHERE tag = ? AND entry_id = ?",
                [(tag, entry_id) for tag in _split(tags)],
            )
            conn.executemany(
                "DELETE FROM entry_types WHERE type = ? AND entry_id = ?",
                [(t, entry_id) for t in _split(types)],
            )
            self._changes.append((iri, None))
            self._access.forget(iri)
        gone = [row[1] for row in rows]
        _log(conn, gone)
        return gone

    def restore_many(self, items: Sequence[Restored]) -> list[str]:
        """Write entries back exactly as exported, in one transaction; return their IRIs.

        Each becomes exactly its record (as ``replace``), with the creation time and the expiry
        given; an entry of the same IRI is replaced.

        Raises:
            InvalidInputError: an item is not a ``Restored`` or its times are not finite.
        """
        checked = list(items) if isinstance(items, (list, tuple)) else None
        if checked is None or not all(isinstance(i, Restored) for i in checked):
            raise InvalidInputError(f"items must be a list of Restored, got {preview(items)}")
        for item in checked:
            for value in (item.created_at, item.expires_at):
                if value is not None and not _finite(value):
                    raise InvalidInputError(f"a time must be a finite number, got {preview(value)}")
        with self._session() as conn, collector_paused():
            iris = self._put_many([item.record for item in checked], merge=False)
            conn.executemany(
                "UPDATE entries SET created_at = ?, last_accessed = max(last_accessed, ?)"
                " WHERE iri = ?",
                [
                    (item.created_at, item.created_at, iri)
                    for item, iri in zip(checked, iris, strict=True)
                ],
            )
            self._set_expiry(
                conn, {iri: item.expires_at for item, iri in zip(checked, iris, strict=True)}
            )
        return iris

    def scan_entries(self, batch: int = 1_000) -> Iterator[list[Entry]]:
        """Yield every live entry, oldest first, in batches (to export the store)."""
        size = _check_limit(batch)
        last = 0
        while True:
            with self._reading() as conn:
                rows = conn.execute(
                    f"SELECT id, {_COLUMNS} FROM live_entries WHERE id > ? ORDER BY id LIMIT ?",
                    (last, size),
                ).fetchall()
            if not rows:
                return
            last = rows[-1][0]
            yield [_to_entry(row[1:]) for row in rows]

    def expires_at(self, iris: Sequence[str]) -> dict[str, float]:
        """Return when each live entry among ``iris`` that has a TTL expires (UNIX seconds)."""
        sql = (
            "SELECT e.iri, x.expires_at FROM live_entries AS e JOIN entry_expiry AS x"
            " ON x.entry_id = e.id WHERE e.iri IN ({holes})"
        )
        return dict(self._over(iris, sql))

    def sweep_expired(self, *, limit: int = 1_000) -> list[Entry]:
        """Delete up to ``limit`` expired entries in one transaction (as ``delete`` does:
        every index, the access statistics, the change log); return them as they were,
        soonest expired first."""
        count = _check_limit(limit)
        with self._session() as conn:
            rows = conn.execute(
                f"SELECT {_COLUMNS} FROM entries WHERE id IN (SELECT entry_id FROM entry_expiry"
                f" WHERE expires_at <= {_NOW} ORDER BY expires_at LIMIT ?)",
                (count,),
            ).fetchall()
            iris = [row[0] for row in rows]
            for start in range(0, len(iris), _CHUNK):
                self._delete_rows(conn, iris[start : start + _CHUNK])
        return [_to_entry(row) for row in rows]

    def scrub(self) -> None:
        """Make what was deleted unrecoverable from the store's files.

        SQLite keeps a deleted row's bytes in free pages and in the write-ahead log, and the
        full-text index keeps the terms of a deleted text until its segments are merged. This
        merges the full-text index ('optimize'), rewrites the database with freed pages
        zeroed (``secure_delete`` and ``VACUUM``), and checkpoints and truncates the log. It
        takes the writer for as long as a copy of the database takes; readers go on.

        Raises:
            StorageError: SQLite failed (a reader of another process holding an old snapshot
                keeps the log from being truncated: its bytes go at the next checkpoint).
        """
        self.flush_access()
        db = self._db
        with db.lock, translated("sqlite", "scrubbing the L0 store"):
            if db.closed:
                raise ClosedError("the L0 store is closed")
            conn = db.writer
            conn.execute("PRAGMA secure_delete = ON")
            try:
                conn.execute("BEGIN IMMEDIATE")
                try:
                    conn.execute("INSERT INTO entry_text (entry_text) VALUES ('optimize')")
                except BaseException:
                    conn.execute("ROLLBACK")
                    raise
                conn.execute("COMMIT")
                conn.execute("VACUUM")
                busy = conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()[0]
            finally:
                conn.execute("PRAGMA secure_delete = OFF")
        if busy:
            logger.warning(
                "the L0 log of %s could not be truncated (a reader holds a snapshot); deleted "
                "bytes stay in it until its next checkpoint",
                self,
            )

    # -- reads ---------------------------------------------------------------------------------

    def get(self, iri: str) -> Entry | None:
        """Return the entry for ``iri``, or ``None``; counts the read (access count, last access).

        The read writes nothing: its count is buffered (see the module docstring) and is in
        the returned entry and in every later read at once.
        """
        validate_iri(iri)
        rows = self._read_entries(
            lambda conn: conn.execute(
                f"SELECT {_COLUMNS} FROM live_entries WHERE iri = ?", (iri,)
            ).fetchall(),
            counted=iri,
        )
        return _to_entry(rows[0]) if rows else None

    def get_node(self, iri: str) -> Node | None:
        """Return the JSON-LD node stored under ``iri``, or ``None``; counts the read."""
        entry = self.get(iri)
        return None if entry is None else entry.node

    def __contains__(self, iri: object) -> bool:
        if not isinstance(iri, str) or not encodes_as_utf8(iri):
            return False
        with self._reading() as conn:
            return (
                conn.execute("SELECT 1 FROM live_entries WHERE iri = ?", (iri,)).fetchone()
                is not None
            )

    def count(self) -> int:
        """Return the number of entries."""
        with self._reading() as conn:
            value: int = conn.execute("SELECT COUNT(*) FROM live_entries").fetchone()[0]
        return value

    def by_tags(
        self, tags: Sequence[str], *, match: Literal["all", "any"] = "all", limit: int | None = None
    ) -> list[Entry]:
        """Return the entries carrying all (or any) of ``tags``, oldest first."""
        wanted = _check_names(tags, "tags")
        if match not in ("all", "any"):
            raise InvalidInputError(f"match must be 'all' or 'any', got {match!r}")
        marks = ", ".join("?" * len(wanted))
        having = f"HAVING COUNT(*) = {len(wanted)}" if match == "all" else ""
        return self._select(
            f"JOIN (SELECT entry_id FROM entry_tags WHERE tag IN ({marks}) GROUP BY entry_id"
            f" {having}) AS t ON t.entry_id = e.id ORDER BY e.id",
            wanted,
            limit,
        )

    def by_graph(
        self, named_graph: str, *, limit: int | None = None, include_expired: bool = False
    ) -> list[Entry]:
        """Return the entries in the named graph, oldest first (``include_expired``: and the
        expired ones not yet swept)."""
        (graph,) = _check_names([named_graph], "named_graph")
        return self._select(
            "WHERE e.named_graph = ? ORDER BY e.id",
            [graph],
            limit,
            relation=_entries_of(include_expired),
        )

    def by_type(self, types: str | Sequence[str], *, limit: int | None = None) -> list[Entry]:
        """Return the entries having any of the JSON-LD ``types``, oldest first."""
        wanted = _check_names([types] if isinstance(types, str) else types, "types")
        marks = ", ".join("?" * len(wanted))
        return self._select(
            f"WHERE e.id IN (SELECT entry_id FROM entry_types WHERE type IN ({marks}))"
            " ORDER BY e.id",
            wanted,
            limit,
        )

    def by_prefix(self, prefix: str, *, limit: int | None = None) -> list[Entry]:
        """Return the entries whose IRI starts with ``prefix``, in IRI order."""
        if not isinstance(prefix, str) or not prefix:
            raise InvalidInputError(f"prefix must be a non-empty string, got {preview(prefix)}")
        check_text(prefix, what="prefix")
        # A range on the unique IRI index; the upper bound is the prefix's successor string.
        upper = prefix_bound(prefix)
        if upper is None:
            return self._select("WHERE e.iri >= ? ORDER BY e.iri", [prefix], limit)
        return self._select("WHERE e.iri >= ? AND e.iri < ? ORDER BY e.iri", [prefix, upper], limit)

    def by_importance(
        self, minimum: float = 0.0, maximum: float = 1.0, *, limit: int | None = None
    ) -> list[Entry]:
        """Return the entries with importance in [minimum, maximum], most important first."""
        low, high = check_importance(minimum), check_importance(maximum)
        if low > high:
            raise InvalidInputError(f"importance range is empty: minimum {low} > maximum {high}")
        return self._select(
            "WHERE e.importance BETWEEN ? AND ? ORDER BY e.importance DESC, e.id",
            [low, high],
            limit,
        )

    def recent(self, *, limit: int = 10) -> list[Entry]:
        """Return the most recently changed entries, newest first."""
        return self._select("ORDER BY e.updated_at DESC, e.id DESC", [], limit)

    def search_text(
        self, query: str, *, limit: int = 10, filters: SearchFilters | None = None
    ) -> list[TextHit]:
        """Full-text search over the entries' text, ranked by BM25 (best first).

        The query is split into words; an entry matching any of them is a candidate. Words in
        ``stop_words`` are left out unless nothing else is left.
        """
        rows = self._bm25(query, limit, filters, ids_only=False)
        return [
            TextHit(entry=_to_entry(row[:-1]), score=row[-1], rank=rank)
            for rank, row in enumerate(rows, start=1)
        ]

    def search_ids(
        self, query: str, *, limit: int = 10, filters: SearchFilters | None = None
    ) -> list[tuple[str, float]]:
        """``search_text`` returning only ``(iri, score)`` pairs: the lexical arm of search."""
        return [(row[0], row[1]) for row in self._bm25(query, limit, filters, ids_only=True)]

    def contents(self, iris: Sequence[str]) -> dict[str, str]:
        """Return the stored JSON-LD text of the existing entries among ``iris``, by IRI."""
        return dict(
            self._over(iris, "SELECT iri, content FROM live_entries WHERE iri IN ({holes})")
        )

    def searchable_texts(self, iris: Sequence[str]) -> dict[str, str]:
        """Return the searchable text (under its index fields) of the existing entries among
        ``iris`` that have one, by IRI: what the full-text and the dense index hold."""
        sql = "SELECT iri, content, index_fields FROM live_entries WHERE iri IN ({holes})"
        texts = {iri: _text(content, fields) for iri, content, fields in self._over(iris, sql)}
        return {iri: text for iri, text in texts.items() if text}

    def indexed_with(self, iris: Sequence[str]) -> dict[str, IndexFields]:
        """Return the index fields of the existing entries among ``iris``, by IRI (``None``:
        the default, the text-like values)."""
        sql = "SELECT iri, index_fields FROM live_entries WHERE iri IN ({holes})"
        return {iri: decode(fields) for iri, fields in self._over(iris, sql)}

    def graphs_of(self, iris: Sequence[str]) -> dict[str, str]:
        """Return the named graph of each entry among ``iris`` that has one, by IRI."""
        sql = "SELECT iri, named_graph FROM live_entries WHERE iri IN ({holes})"
        return {iri: graph for iri, graph in self._over(iris, sql) if graph is not None}

    def _over(
        self, iris: Sequence[str], sql: str, params: Sequence[Any] = (), *, size: int = _CHUNK
    ) -> list[Any]:
        """Run ``sql`` (whose ``{holes}`` takes the IRIs) over ``iris`` in chunks of ``size``;
        return the rows.

        ``params`` are bound before the IRIs.
        """
        with self._reading() as conn:
            return _chunked(conn, iris, sql, params, size=size)

    def _bm25(
        self, query: str, limit: int, filters: SearchFilters | None, *, ids_only: bool
    ) -> list[Any]:
        if not isinstance(query, str):
            raise InvalidInputError(f"query must be a string, got {preview(query)}")
        content = query_words(query, self.stop_words)
        if not content:
            return []
        expression = " OR ".join('"' + w.replace('"', '""') + '"' for w in content)
        limits = filters or SearchFilters()
        condition, params = limits.sql()
        columns = "e.iri" if ids_only else _QUALIFIED
        # Unfiltered, the best ``limit`` are chosen from the full-text index alone and only
        # they are joined with their entries (see ``_top_ranked``).
        bound = _check_limit(limit)
        args = (expression, bound) if limits.empty else (expression, *params, bound)

        def read(conn: sqlite3.Connection) -> list[Any]:
            if limits.empty:
                # One snapshot for the best rows and their entries: an entry deleted between
                # them (its id given to a new entry) is not read for another. Not the writer's
                # transaction: its texts may be rolled back, and the lengths only move forward.
                writer = conn.in_transaction
                if not writer:
                    conn.execute("BEGIN")
                try:
                    top = None
                    if not has_parts(conn):
                        top = top_matches(
                            conn,
                            content,
                            bound,
                            expired=_EXPIRED,
                            min_deferred=self.defer_common_words,
                            exact=self.defer_exactly,
                            lengths=None if writer else self._lengths,
                        )
                    if top is not None:
                        self.pruned_searches += top.deferred
                        self.scored_searches += top.scored
                        return _in_order(conn, columns, top.rows)
                finally:
                    if not writer:
                        conn.execute("COMMIT")
            parted = has_parts(conn)
            if limits.empty:
                return conn.execute(_top_ranked(columns, parted=parted), args).fetchall()
            return conn.execute(_ranked(columns, condition, parted=parted), args).fetchall()

        if ids_only:
            with self._reading() as conn:
                return read(conn)
        return self._read_entries(read)

    def matching(
        self, filters: SearchFilters, iris: Sequence[str] | None = None, *, limit: int | None = None
    ) -> list[str]:
        """Return the IRIs (among ``iris``, when given) of the entries that pass ``filters``
        (the first ``limit``, when given)."""
        if not isinstance(filters, SearchFilters):
            raise InvalidInputError(f"filters must be SearchFilters, got {preview(filters)}")
        most = None if limit is None else _check_limit(limit)
        # Given IRIs, each one's labels are looked up by key, unless the filter names so many
        # labels that collecting their entries once a statement costs less.
        probe = iris is not None and filters.label_lookups() <= _PROBED_LABELS
        condition, params = filters.sql(probe=probe)
        if iris is None:
            with self._reading() as conn:
                rows = conn.execute(
                    f"SELECT e.iri FROM live_entries AS e WHERE {condition} ORDER BY e.id LIMIT ?",
                    [*params, -1 if most is None else most],
                ).fetchall()
            return [row[0] for row in rows]
        sql = f"SELECT e.iri FROM live_entries AS e WHERE {condition} AND e.iri IN ({{holes}})"
        # Collected, the labels' entries are gathered once a statement: fewer, larger ones.
        found = {row[0] for row in self._over(iris, sql, params, size=_CHUNK if probe else 4_000)}
        return [iri for iri in dict.fromkeys(iris) if iri in found][:most]

    def get_many(self, iris: Sequence[str], *, include_expired: bool = False) -> dict[str, Entry]:
        """Return the entries of ``iris`` that exist, by IRI, without counting them as reads
        (``include_expired``: and the expired ones not yet swept)."""
        relation = _entries_of(include_expired)
        sql = f"SELECT {_COLUMNS} FROM {relation} WHERE iri IN ({{holes}})"
        rows = self._read_entries(lambda conn: _chunked(conn, iris, sql))
        return {row[0]: _to_entry(row) for row in rows}

    def scan_texts(self, batch: int = 1_000) -> Iterator[list[tuple[str, str]]]:
        """Yield ``(iri, text)`` of every entry with text, in batches (to rebuild an index)."""
        last = 0
        while True:
            with self._reading() as conn:
                rows = conn.execute(
                    "SELECT id, iri, content, index_fields FROM live_entries"
                    " WHERE id > ? ORDER BY id LIMIT ?",
                    (last, batch),
                ).fetchall()
            if not rows:
                return
            last = rows[-1][0]
            texts = [(iri, _text(content, fields)) for _, iri, content, fields in rows]
            yield [(iri, text) for iri, text in texts if text]

    def neighbours(self, iri: str, *, direction: Direction = "both") -> list[Edge]:
        """Return the references from (``"out"``), to (``"in"``) or around (``"both"``) ``iri``."""
        validate_iri(iri)
        if direction not in ("out", "in", "both"):
            raise InvalidInputError(f"direction must be 'out', 'in' or 'both', got {direction!r}")
        edges: list[Edge] = []
        with self._reading() as conn:
            if direction in ("out", "both"):
                rows = conn.execute(
                    "SELECT e.iri, g.predicate, g.target FROM edges AS g JOIN live_entries AS e"
                    " ON e.id = g.source_id WHERE e.iri = ? ORDER BY g.predicate, g.target",
                    (iri,),
                ).fetchall()
                edges.extend(Edge(*row) for row in rows)
            if direction in ("in", "both"):
                rows = conn.execute(
                    "SELECT e.iri, g.predicate, g.target FROM edges AS g JOIN live_entries AS e"
                    " ON e.id = g.source_id WHERE g.target = ? ORDER BY e.iri, g.predicate",
                    (iri,),
                ).fetchall()
                edges.extend(Edge(*row) for row in rows)
        return edges

    def linked(self, iris: Sequence[str], predicates: Sequence[str]) -> list[tuple[str, str]]:
        """Return ``(iri, neighbour)`` pairs joined by an edge under one of ``predicates``, in
        either direction, for the given IRIs (one query per chunk, for search expansion)."""
        wanted = _check_names(predicates, "predicates")
        marks = ", ".join("?" * len(wanted))
        join = "FROM edges AS g JOIN live_entries AS e ON e.id = g.source_id"
        where = f"WHERE g.predicate IN ({marks}) AND"
        outgoing = f"SELECT e.iri, g.target {join} {where} e.iri IN ({{holes}})"
        incoming = f"SELECT g.target, e.iri {join} {where} g.target IN ({{holes}})"
        rows = self._over(iris, outgoing, wanted) + self._over(iris, incoming, wanted)
        return [(row[0], row[1]) for row in rows]

    def hierarchy(self, predicates: Sequence[str]) -> list[tuple[str, str]]:
        """Return (child, parent) pairs: each entry under each of its types, and each link
        under ``predicates`` from its source to its target."""
        wanted = _check_names(predicates, "predicates")
        marks = ", ".join("?" * len(wanted))
        with self._reading() as conn:
            typed = conn.execute(
                "SELECT e.iri, t.type FROM entry_types AS t JOIN live_entries AS e"
                " ON e.id = t.entry_id"
            ).fetchall()
            linked = conn.execute(
                "SELECT e.iri, g.target FROM edges AS g JOIN live_entries AS e"
                f" ON e.id = g.source_id WHERE g.predicate IN ({marks})",
                wanted,
            ).fetchall()
        return [(child, parent) for child, parent in typed + linked]

    def tag_counts(self) -> dict[str, int]:
        """Return the number of entries per tag, most used first."""
        return self._counts(
            f"SELECT tag, COUNT(*) AS n FROM entry_tags WHERE entry_id NOT IN ({_EXPIRED})"
            " GROUP BY tag"
        )

    def graph_counts(self, *, include_expired: bool = False) -> dict[str, int]:
        """Return the number of entries per named graph, largest first (``include_expired``:
        the expired ones not yet swept counted too)."""
        return self._counts(
            f"SELECT named_graph, COUNT(*) AS n FROM {_entries_of(include_expired)}"
            " WHERE named_graph IS NOT NULL GROUP BY named_graph"
        )

    def type_counts(self) -> dict[str, int]:
        """Return the number of entries per JSON-LD type, most used first."""
        return self._counts(
            f"SELECT type, COUNT(*) AS n FROM entry_types WHERE entry_id NOT IN ({_EXPIRED})"
            " GROUP BY type"
        )

    def integrity_check(self) -> str:
        """Run SQLite's ``PRAGMA integrity_check`` and return its verdict (``"ok"`` when sound)."""
        with self._reading() as conn:
            rows = conn.execute("PRAGMA integrity_check").fetchall()
        return "\n".join(str(row[0]) for row in rows)

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
        sql = f"SELECT {_QUALIFIED} FROM {relation} AS e {clause}"
        args = list(params)
        if limit is not None:
            sql += " LIMIT ?"
            args.append(_check_limit(limit))
        rows = self._read_entries(lambda conn: conn.execute(sql, args).fetchall())
        return [_to_entry(row) for row in rows]


def _flush_periodically(
    store_ref: weakref.ref[L0Store], stop: threading.Event, wake: threading.Event, interval: float
) -> None:
    """Write a store's buffered access statistics every ``interval`` seconds, until it closes.

    Holds the store only while writing, so an unclosed store can still be collected.
    """
    while True:
        wake.wait(interval)
        wake.clear()
        store = store_ref()
        if stop.is_set() or store is None:
            return
        try:
            store.flush_access()
        except GlidingError:
            logger.exception("cannot write the L0 access statistics; they stay buffered")
        del store


def _shut(
    db: Connections,
    access: AccessBuffer,
    stop: threading.Event,
    wake: threading.Event,
    scratch: str | None,
    sync: str,
) -> None:
    """Close a store: its readers, then the buffered statistics, then its writer and files."""
    stop.set()
    wake.set()
    with db.lock:
        db.close_readers()  # after this no read can record an access
        try:
            write_buffered(db, access, sync=sync)
        except GlidingError:
            logger.exception("cannot write the L0 access statistics on close; they are lost")
        db.close_writer()
    _remove(scratch)


def _remove(scratch: str | None) -> None:
    if scratch is not None:
        shutil.rmtree(scratch, ignore_errors=True)


def _translated(exc: sqlite3.Error, doing: str) -> GlidingError:
    error = translate("sqlite", exc, doing)
    return error if error is not None else StorageError(f"{doing} failed: {exc}")


def _parameters(conn: sqlite3.Connection) -> int:
    """The most parameters one statement binds on ``conn`` (``_MAX_PARAMETERS`` where Python
    cannot ask)."""
    ask = getattr(conn, "getlimit", None)  # Python 3.11 and later
    which = getattr(sqlite3, "SQLITE_LIMIT_VARIABLE_NUMBER", None)
    return _MAX_PARAMETERS if ask is None or which is None else int(ask(which))


def _chunked(
    conn: sqlite3.Connection,
    iris: Sequence[str],
    sql: str,
    params: Sequence[Any] = (),
    *,
    size: int = _CHUNK,
) -> list[Any]:
    """Run ``sql`` (whose ``{holes}`` takes IRIs) over ``iris`` in chunks of ``size`` (fewer
    when this SQLite binds fewer parameters); return the rows."""
    rows: list[Any] = []
    unique = check_iris(iris)
    if size + len(params) > _MAX_PARAMETERS:  # past the bound every SQLite takes: ask
        size = max(1, min(size, _parameters(conn) - len(params)))
    for start in range(0, len(unique), size):
        chunk = unique[start : start + size]
        holes = ", ".join("?" * len(chunk))
        rows += conn.execute(sql.format(holes=holes), [*params, *chunk]).fetchall()
    return rows


def _read_lengths(db: Connections, lengths: RowLengths) -> None:
    """Read the full-text rows' lengths in a read transaction of a reader of ``db``; a store
    closed meanwhile (or any failure) leaves them to the first search."""
    try:
        with db.reader() as conn:
            conn.execute("BEGIN")
            try:
                lengths.gather(conn, np.zeros(0, dtype=np.int64))
            finally:
                conn.execute("COMMIT")
    except Exception as exc:
        logger.debug("the full-text rows' lengths were not read ahead: %s", exc)


def _upgrade(conn: sqlite3.Connection) -> None:
    """Bring a store written by an earlier version to ``SCHEMA_VERSION``, in one transaction."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        # Read inside the transaction: another process may have upgraded the file meanwhile.
        version = conn.execute("PRAGMA user_version").fetchone()[0]
        if version < 2:
            # Version 1 kept a copy of the text in the full-text index: rebuild it contentless.
            conn.execute("DROP TABLE entry_text")
            conn.execute(_TEXT_INDEX)
            stored = conn.execute("SELECT id, content FROM entries")
            texts = (
                (entry_id, node_text(parse_canonical(content))) for entry_id, content in stored
            )
            conn.executemany(_INSERT_TEXT, ((entry_id, text) for entry_id, text in texts if text))
        if version < 6:
            # Entries written before index fields were searched by every string and number
            # value; they keep that text (and their embeddings) until written again.
            if "index_fields" not in {row[1] for row in conn.execute("PRAGMA table_info(entries)")}:
                conn.execute("ALTER TABLE entries ADD COLUMN index_fields TEXT")
            conn.execute("UPDATE entries SET index_fields = ?", (encode(LEGACY, derived=True),))
        # 4: the expiry table and the live view are made by the schema script itself.
        if version == 4:  # the view of version 4 built the list of expired ids per statement
            conn.execute("DROP VIEW live_entries")
            conn.execute(_LIVE_VIEW)
        if version < 3:
            # Every entry with text is a change an index that has applied nothing must catch up.
            stored = conn.execute("SELECT iri, content FROM entries ORDER BY id")
            while rows := stored.fetchmany(_CHUNK):  # a chunk at a time: memory stays flat
                _log(conn, [iri for iri, content in rows if node_text(parse_canonical(content))])
        conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")


def _text(content: str, fields: str | None) -> str:
    """The searchable text of a stored entry: its content under its stored index fields."""
    return indexed_text(parse_canonical(content), decode(fields))


def _finite(value: object) -> bool:
    return not isinstance(value, bool) and isinstance(value, (int, float)) and math.isfinite(value)


def _ranked(columns: str, condition: str, *, parted: bool) -> str:
    """The full-text query: ``columns`` and the score of the entries matching, best first.

    With texts in parts (``parted``) an entry may match on two rows (its node's text, and its
    whole text under the negated rowid): it is ranked once, by the better of them. A word may
    match thousands of entries: the expired ones are left out by one list of their ids built
    for the statement, not by a probe per match as the live view does for a look-up.
    """
    if not parted:
        return (
            f"SELECT {columns}, -bm25(entry_text) AS score FROM entry_text"
            " JOIN entries AS e ON e.id = entry_text.rowid"
            f" WHERE entry_text MATCH ? AND e.id NOT IN ({_EXPIRED}) AND {condition}"
            " ORDER BY bm25(entry_text) LIMIT ?"
        )
    return (
        # Materialised: bm25() is refused in a query SQLite would flatten into the aggregate.
        "WITH hits AS MATERIALIZED (SELECT rowid AS id, -bm25(entry_text) AS score"
        " FROM entry_text WHERE entry_text MATCH ?),"
        " m AS (SELECT abs(id) AS id, max(score) AS score FROM hits GROUP BY abs(id))"
        f" SELECT {columns}, m.score FROM m JOIN entries AS e ON e.id = m.id"
        f" WHERE e.id NOT IN ({_EXPIRED}) AND {condition} ORDER BY m.score DESC LIMIT ?"
    )


def _in_order(conn: sqlite3.Connection, columns: str, ranked: list[tuple[int, float]]) -> list[Any]:
    """``columns`` and the score of the entries of ``ranked`` (``(id, score)``), in its order."""
    rows: dict[int, tuple[Any, ...]] = {}
    for start in range(0, len(ranked), _CHUNK):
        ids = [i for i, _ in ranked[start : start + _CHUNK]]
        holes = ", ".join("?" * len(ids))
        sql = f"SELECT e.id, {columns} FROM entries AS e WHERE e.id IN ({holes})"
        rows.update((row[0], row[1:]) for row in conn.execute(sql, ids))
    return [(*rows[i], score) for i, score in ranked if i in rows]


def _top_ranked(columns: str, *, parted: bool) -> str:
    """The full-text query without filters: the best ``limit`` matches, then their entries.

    A common word matches a large part of a big store (a word in 3 % of the entries of a
    million is 30,000 matches). Every match is scored whatever the query, but only the best
    ``limit`` need their entry: they are chosen from the index alone (the expired left out by
    one list of their ids, as in ``_ranked``) and joined after, so a query reads its entries'
    rows ``limit`` times rather than once per match. The ranking is ``_ranked``'s.
    """
    if not parted:
        return (
            "WITH top AS MATERIALIZED (SELECT rowid AS id, -bm25(entry_text) AS score"
            f" FROM entry_text WHERE entry_text MATCH ? AND rowid NOT IN ({_EXPIRED})"
            " ORDER BY score DESC LIMIT ?)"
            f" SELECT {columns}, top.score FROM top JOIN entries AS e ON e.id = top.id"
            " ORDER BY top.score DESC"
        )
    return (
        "WITH hits AS MATERIALIZED (SELECT rowid AS id, -bm25(entry_text) AS score"
        " FROM entry_text WHERE entry_text MATCH ?),"
        " top AS MATERIALIZED (SELECT abs(id) AS id, max(score) AS score FROM hits"
        f" WHERE abs(id) NOT IN ({_EXPIRED}) GROUP BY abs(id) ORDER BY 2 DESC LIMIT ?)"
        f" SELECT {columns}, top.score FROM top JOIN entries AS e ON e.id = top.id"
        " ORDER BY top.score DESC"
    )


def _log(conn: sqlite3.Connection, iris: Sequence[str]) -> None:
    """Give each of ``iris`` the next sequence numbers of the change log, in order.

    Runs inside the write transaction that changes their text, so the log and the entries
    commit together; writers are serialised (``BEGIN IMMEDIATE``), so the head read here is
    the head every other writer sees.
    """
    if not iris:
        return
    head = log_head(conn)
    _insert(
        conn,
        "INSERT OR REPLACE INTO changes (seq, iri)",
        [(seq, iri) for seq, iri in enumerate(iris, head + 1)],
    )


def _insert(conn: sqlite3.Connection, head: str, rows: Sequence[tuple[object, ...]]) -> None:
    """Run ``head VALUES ...`` over ``rows``, many rows per statement.

    One statement per row costs a statement reset, a step and a release and re-take of the GIL
    for each row; a statement of many rows pays them once. Statements hold at most 999
    parameters, SQLite's default bound before 3.32.0 (later versions allow 32,766).
    """
    if not rows:
        return
    width = len(rows[0])
    per = _MAX_PARAMETERS // width
    single = "(" + ", ".join("?" * width) + ")"
    whole = len(rows) - len(rows) % per
    if whole:
        statement = f"{head} VALUES {', '.join([single] * per)}"
        for start in range(0, whole, per):
            conn.execute(statement, list(chain.from_iterable(rows[start : start + per])))
    if whole < len(rows):
        conn.executemany(f"{head} VALUES {single}", rows[whole:])
