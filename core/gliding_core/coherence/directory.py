"""L2 coherence: the directory, the one place that holds every agent's copy state of every node.

Per node the directory records its generation, its value at that generation, which agents hold
a copy and, per copy, its MESI state and the generation it was read or written at; it keeps a
few past values so a reader can be sent the change instead of the whole node. Two backends of
one ``Directory`` protocol: ``LocalDirectory`` (a dict under a lock, one process) and
``SQLiteDirectory`` (a file shared by the processes of one machine).

Invariants:
- ``update`` and ``update_many`` are atomic: the change function sees one consistent record
  (one per node) and its result is written whole or not at all (a lock; ``BEGIN IMMEDIATE``
  across processes).
- A node's generation never decreases (the SQLite backend also enforces it with a trigger).
- ``token()`` changes whenever anything in the directory changed since it was last taken, by
  any process, and on ``touch()`` (a change of the source the directory could not see); it is
  cheap (a counter; across processes one in shared memory, see
  ``gliding_core.coherence.epoch``), so a read validates its copy without a query when nothing
  changed. A token returned with a snapshot or an update vouches for exactly that state: while
  ``token()`` still equals it, nothing has changed since.
- A transition's ``COMMIT`` never checkpoints the WAL (``wal_autocheckpoint = 0``): a thread of
  the directory's own does it every ``CHECKPOINT_EVERY`` commits (``WalCheckpoints``), so a
  checkpoint's sync no longer stalls every writer of the process behind the directory's lock.
- Kept versions are bounded: at most ``keep_versions`` past values per node, and none older
  than the oldest generation a copy of that node still refers to.
- ``LocalDirectory`` keeps each record as a flat tuple of atoms and its value apart (nothing
  per node for the garbage collector to track); every record it hands out is built anew (its
  copies the caller's own; its value shared, never to be changed) and equal to the one stored.
"""

from __future__ import annotations

import itertools
import sqlite3
import threading
from collections.abc import Callable, Hashable, Mapping, Sequence
from pathlib import Path
from typing import Any, NamedTuple, Protocol, TypeVar

import orjson

from gliding_core.boundary import translated
from gliding_core.coherence.checkpoint import WalCheckpoints
from gliding_core.coherence.epoch import SharedCounter
from gliding_core.errors import ClosedError, InvalidInputError
from gliding_core.jsonld import Node, canonical_json, parse_canonical, preview
from gliding_core.store.entry import MesiState

T = TypeVar("T")

DEFAULT_KEEP_VERSIONS = 8


class Copy(NamedTuple):
    """One agent's copy of one node: its MESI state and the generation it holds.

    Immutable. A named tuple, like ``NodeRecord``: several are built on every write, and a
    frozen dataclass costs three times as much to build.
    """

    agent: str
    state: MesiState
    generation: int


class _RecordFields(NamedTuple):
    iri: str
    generation: int
    value: Node | None
    copies: Mapping[str, Copy]


class NodeRecord(_RecordFields):
    """What the directory knows about one node (generation 0: it has never been seen).

    Attributes: ``iri``, ``generation``, ``value`` (``None``: absent or deleted) and
    ``copies`` (by agent). Immutable: a change returns a new record. A named tuple, not a
    frozen dataclass: several are built on every write, and a frozen dataclass costs three
    times as much to build.
    """

    __slots__ = ()

    def __new__(
        cls,
        iri: str,
        generation: int = 0,
        value: Node | None = None,
        copies: Mapping[str, Copy] | None = None,
    ) -> NodeRecord:
        # (A named tuple's defaults are shared objects: each record gets copies of its own.)
        return super().__new__(cls, iri, generation, value, {} if copies is None else copies)

    def holders(self, *, besides: str | None = None) -> list[Copy]:
        """Return the valid (M, E, S) copies, leaving out ``besides``'s."""
        return [
            c
            for c in self.copies.values()
            if c.agent != besides and c.state is not MesiState.INVALID
        ]

    def with_copy(self, agent: str, state: MesiState, generation: int) -> NodeRecord:
        """Return this record with ``agent``'s copy set."""
        copies = dict(self.copies)
        copies[agent] = Copy(agent, state, generation)
        return NodeRecord(self.iri, self.generation, self.value, copies)

    def without_copy(self, agent: str) -> NodeRecord:
        """Return this record with ``agent``'s copy removed."""
        copies = {a: c for a, c in self.copies.items() if a != agent}
        return NodeRecord(self.iri, self.generation, self.value, copies)

    def at(self, generation: int, value: Node | None) -> NodeRecord:
        """Return this record moved to ``generation`` holding ``value`` (copies unchanged)."""
        return NodeRecord(self.iri, generation, value, self.copies)


class Directory(Protocol):
    """Where copy states, generations and recent values of shared nodes live."""

    def token(self) -> Hashable:
        """Return a value that differs from any earlier one if anything changed since."""
        ...

    def record(self, iri: str) -> NodeRecord:
        """Return a snapshot of ``iri``'s record."""
        ...

    def snapshot(self, iri: str) -> tuple[NodeRecord, Hashable]:
        """Return a snapshot of ``iri``'s record and the token that vouches for it."""
        ...

    def update(
        self, iri: str, change: Callable[[NodeRecord], tuple[NodeRecord, T]]
    ) -> tuple[T, Hashable]:
        """Apply ``change`` to ``iri``'s record atomically.

        Returns:
            The change's result and the ``token()`` as it stands right after the update (no
            other change can fall between the two).
        """
        ...

    def update_many(
        self,
        iris: Sequence[str],
        change: Callable[[dict[str, NodeRecord]], tuple[dict[str, NodeRecord], T]],
    ) -> tuple[T, Hashable]:
        """Apply ``change`` to the records of several nodes atomically (all or none written).

        ``change`` receives the records of ``iris`` by IRI and returns the records to store
        (any of them; those left out stay as they were) with its result.

        Returns:
            The change's result and the ``token()`` right after the update.
        """
        ...

    def version(self, iri: str, generation: int) -> Node | None:
        """Return ``iri``'s value at ``generation`` if it is still kept."""
        ...

    def touch(self) -> Hashable:
        """Move the token as a change would, changing no record; return the new token.

        For a source changed around the directory (a write whose outcome is unknown): every
        copy vouched at an older token is checked again, in every process.
        """
        ...

    def holdings(self, agent: str) -> list[str]:
        """Return the IRIs of the nodes ``agent`` holds a copy of (in any state), sorted."""
        ...

    def close(self) -> None:
        """Release the backend; later calls raise ``ClosedError``."""
        ...


def check_keep(keep_versions: object) -> int:
    """Return ``keep_versions`` if it is an int >= 1."""
    if isinstance(keep_versions, bool) or not isinstance(keep_versions, int) or keep_versions < 1:
        raise InvalidInputError(f"keep_versions must be an int >= 1, got {preview(keep_versions)}")
    return keep_versions


def check_new_record(old: NodeRecord, new: NodeRecord) -> None:
    """Refuse a change that renames the node or moves its generation back."""
    if new.iri != old.iri or new.generation < old.generation:
        raise InvalidInputError(
            f"a directory change must keep the IRI and never lower the generation: "
            f"{old.iri!r} at {old.generation} -> {new.iri!r} at {new.generation}"
        )


def changed_records(
    old: Mapping[str, NodeRecord], new: Mapping[str, NodeRecord]
) -> list[NodeRecord]:
    """Return the records of ``new`` that differ from ``old``, each checked by ``check_new_record``.

    Raises:
        InvalidInputError: ``new`` holds a node that ``old`` does not (it was not in the update).
    """
    changed = []
    for iri, record in new.items():
        before = old.get(iri)
        if before is None:
            raise InvalidInputError(f"a directory change returned {iri!r}, not one of its nodes")
        if record is before:  # records are immutable: the same object is the same record
            continue
        if record.iri != before.iri or record.generation < before.generation:
            check_new_record(before, record)  # raises
        # A new generation differs without comparing the values (dicts) and copies.
        if record.generation != before.generation or record != before:
            changed.append(record)
    return changed


def _version_text(value: Node) -> str:
    """Return a kept value as JSON text (orjson: ten times faster than ``canonical_json``).

    Only ``version`` reads it back (``parse_canonical`` parses any JSON); what orjson cannot
    write (an integer over 64 bits) the canonical encoder does.
    """
    try:
        return orjson.dumps(value).decode()
    except TypeError:
        return canonical_json(value)


def versions_to_keep(record: NodeRecord, kept: list[int], keep_versions: int) -> set[int]:
    """Return which past generations of a node stay kept after ``record`` was written."""
    oldest = min((c.generation for c in record.copies.values()), default=record.generation)
    wanted = sorted(g for g in kept if oldest <= g < record.generation)
    return set(wanted[-keep_versions:])


_Kept = tuple[Any, ...]  # (int, then str, str, int per copy: no closer type says so)
"""A record as ``LocalDirectory`` keeps it, its value aside: its generation, then each copy's
agent, state letter and generation, in one flat tuple of atoms. Not the record: the collector
stops tracking a tuple of atoms at its first collection (a tuple holding a tuple needs one
collection more per level, and one holding a dict, even an untracked one, stays tracked, hence
the values kept apart), so a directory of many nodes costs no collection work, where a record,
its copies' dict and each copy would each be tracked for good."""

_LETTERS = {state: state.value for state in MesiState}
_BY_LETTER = {state.value: state for state in MesiState}


def _kept(record: NodeRecord) -> _Kept:
    """Return ``record`` (its value aside) as ``LocalDirectory`` keeps it."""
    kept: list[Any] = [record.generation]
    for copy in record.copies.values():
        kept += (copy.agent, _LETTERS[copy.state], copy.generation)
    return tuple(kept)


def _record(iri: str, kept: _Kept, value: Node | None) -> NodeRecord:
    """Return the record of ``iri`` kept as ``kept`` (a new one: each caller's own)."""
    copies: dict[str, Copy] = {}
    for index in range(1, len(kept), 3):
        agent, letter, generation = kept[index : index + 3]
        copies[agent] = Copy(agent, _BY_LETTER[letter], generation)
    return NodeRecord(iri, kept[0], value, copies)


class LocalDirectory:
    """The directory of one process: a dict under a lock.

    Args:
        keep_versions: how many past values to keep per node for changes.
    """

    def __init__(self, *, keep_versions: int = DEFAULT_KEEP_VERSIONS) -> None:
        self._keep = check_keep(keep_versions)
        self._lock = threading.RLock()
        self._records: dict[str, _Kept] = {}
        self._values: dict[str, Node] = {}  # each node's value at its generation, if any
        self._versions: dict[str, dict[int, str]] = {}
        self._changes = itertools.count(1)
        self._token = 0
        self._closed = False

    def token(self) -> Hashable:
        """Return the change counter."""
        self._check_open()
        return self._token

    def record(self, iri: str) -> NodeRecord:
        """Return a snapshot of ``iri``'s record."""
        with self._lock:
            self._check_open()
            kept = self._records.get(iri)
            return NodeRecord(iri) if kept is None else _record(iri, kept, self._values.get(iri))

    def snapshot(self, iri: str) -> tuple[NodeRecord, Hashable]:
        """Return a snapshot of ``iri``'s record and the counter, taken together."""
        with self._lock:
            return self.record(iri), self._token

    def update(
        self, iri: str, change: Callable[[NodeRecord], tuple[NodeRecord, T]]
    ) -> tuple[T, Hashable]:
        """Apply ``change`` to ``iri``'s record under the lock; return its result and token."""
        with self._lock:
            old = self.record(iri)
            new, result = change(old)
            check_new_record(old, new)
            if new != old:
                self._store(old, new)
                self._token = next(self._changes)
            return result, self._token

    def update_many(
        self,
        iris: Sequence[str],
        change: Callable[[dict[str, NodeRecord]], tuple[dict[str, NodeRecord], T]],
    ) -> tuple[T, Hashable]:
        """Apply ``change`` to several records under the lock; return its result and token."""
        with self._lock:
            old = {iri: self.record(iri) for iri in iris}  # by IRI: a repeated one read once
            new, result = change(dict(old))
            changed = changed_records(old, new)
            for record in changed:
                self._store(old[record.iri], record)
            if changed:
                self._token = next(self._changes)
            return result, self._token

    def _store(self, old: NodeRecord, new: NodeRecord) -> None:
        versions = self._versions.get(new.iri)
        if old.value is not None and old.generation < new.generation:
            versions = self._versions.setdefault(new.iri, {})
            versions[old.generation] = _version_text(old.value)
        if versions:  # a node first written here has none: nothing to prune
            keep = versions_to_keep(new, list(versions), self._keep)
            for generation in [g for g in versions if g not in keep]:
                del versions[generation]
        self._records[new.iri] = _kept(new)
        if new.value is None:
            self._values.pop(new.iri, None)
        else:
            self._values[new.iri] = new.value

    def version(self, iri: str, generation: int) -> Node | None:
        """Return ``iri``'s value at ``generation`` if it is still kept."""
        with self._lock:
            self._check_open()
            kept, value = self._records.get(iri), self._values.get(iri)
            if kept is not None and kept[0] == generation and value is not None:
                return dict(value)
            text = self._versions.get(iri, {}).get(generation)
            return None if text is None else parse_canonical(text)

    def touch(self) -> Hashable:
        """Move the change counter, changing no record; return it."""
        with self._lock:
            self._check_open()
            self._token = next(self._changes)
            return self._token

    def holdings(self, agent: str) -> list[str]:
        """Return the IRIs of the nodes ``agent`` holds a copy of, sorted."""
        with self._lock:
            self._check_open()
            return sorted(iri for iri, kept in self._records.items() if agent in kept[1::3])

    def close(self) -> None:
        """Forget everything; later calls raise ``ClosedError``."""
        with self._lock:
            self._closed = True
            self._records.clear()
            self._values.clear()
            self._versions.clear()

    def _check_open(self) -> None:
        if self._closed:
            raise ClosedError("the coherence directory was used after close()")


_SCHEMA = """
CREATE TABLE IF NOT EXISTS coherence_nodes (
    iri TEXT PRIMARY KEY,
    generation INTEGER NOT NULL CHECK (generation >= 0),
    value TEXT
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS coherence_copies (
    iri TEXT NOT NULL,
    agent TEXT NOT NULL,
    state TEXT NOT NULL CHECK (state IN ('M', 'E', 'S', 'I')),
    generation INTEGER NOT NULL,
    PRIMARY KEY (iri, agent)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS coherence_copies_by_agent ON coherence_copies (agent, iri);
CREATE TABLE IF NOT EXISTS coherence_versions (
    iri TEXT NOT NULL,
    generation INTEGER NOT NULL,
    value TEXT NOT NULL,
    PRIMARY KEY (iri, generation)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS coherence_epoch (
    id INTEGER PRIMARY KEY CHECK (id = 0),
    epoch INTEGER NOT NULL
);
INSERT OR IGNORE INTO coherence_epoch (id, epoch) VALUES (0, 0);
CREATE TRIGGER IF NOT EXISTS coherence_generation_never_decreases
BEFORE UPDATE OF generation ON coherence_nodes WHEN NEW.generation < OLD.generation
BEGIN SELECT RAISE(ABORT, 'a node generation never decreases'); END;
"""

_STATES = _BY_LETTER


class _Unvouched:
    """A token equal to nothing: no cached copy may be trusted on it."""

    def __eq__(self, other: object) -> bool:
        return False

    def __hash__(self) -> int:
        return 0


_UNVOUCHED = _Unvouched()


class SQLiteDirectory:
    """The directory in a SQLite file shared by the processes of one machine.

    Its tables are prefixed ``coherence_``, so the file can be the blackboard's
    (``blackboard.sqlite3`` in the memory directory); it opens its own connection.

    Args:
        path: the database file (created when missing).
        keep_versions: how many past values to keep per node for changes.
        busy_timeout_s: how long a transition waits for another process's transaction.
    """

    def __init__(
        self,
        path: str | Path,
        *,
        keep_versions: int = DEFAULT_KEEP_VERSIONS,
        busy_timeout_s: float = 30.0,
    ) -> None:
        if not isinstance(path, (str, Path)) or not str(path):
            raise InvalidInputError(f"directory path must be a str or Path, got {preview(path)}")
        self.path = Path(path)
        self._keep = check_keep(keep_versions)
        self._lock = threading.RLock()
        self._closed = False
        with translated("sqlite", f"opening the coherence directory {str(self.path)!r}"):
            # isolation_level=None: transactions are begun explicitly, so a transition holds the
            # write lock (BEGIN IMMEDIATE) from its first read and no two processes interleave.
            self._conn = sqlite3.connect(
                self.path, isolation_level=None, check_same_thread=False, timeout=busy_timeout_s
            )
            # WAL: readers of other processes never wait for a transition. NORMAL sync: a
            # committed transition survives a process crash; the directory describes copies
            # held by live processes, which a power loss ends anyway.
            self._conn.execute("PRAGMA journal_mode = WAL")
            self._conn.execute("PRAGMA synchronous = NORMAL")
            # Checkpoints run on a thread of their own (``WalCheckpoints``), not inside the
            # COMMIT of a transition, which holds the lock every writer of the process waits on.
            self._conn.execute("PRAGMA wal_autocheckpoint = 0")
            self._conn.executescript(f"BEGIN IMMEDIATE;{_SCHEMA}COMMIT;")
        self._checkpoints = WalCheckpoints(self.path)
        self._epoch = SharedCounter(self.path.with_name(self.path.name + "-coherence-epoch"))

    def token(self) -> Hashable:
        """Return the shared change counter (a memory load: this runs on every read)."""
        self._check_open()
        return self._epoch.value()

    def record(self, iri: str) -> NodeRecord:
        """Return a snapshot of ``iri``'s record."""
        return self.snapshot(iri)[0]

    def snapshot(self, iri: str) -> tuple[NodeRecord, Hashable]:
        """Return a snapshot of ``iri``'s record and the token that vouches for it.

        The counter is read first, then the snapshot with the epoch its last commit wrote. Equal,
        they vouch for the snapshot: a later commit raises the counter before it commits. Not
        equal (a commit in flight, or one that failed after raising the counter), nothing does.
        """
        with self._lock, translated("sqlite", f"reading the coherence record of {iri!r}"):
            self._check_open()
            seen = self._epoch.value()
            self._conn.execute("BEGIN")
            try:
                committed = self._committed_epoch()
                record = self._read(iri)
            finally:
                self._conn.execute("COMMIT")
        return record, (seen if committed == seen else _UNVOUCHED)

    def update(
        self, iri: str, change: Callable[[NodeRecord], tuple[NodeRecord, T]]
    ) -> tuple[T, Hashable]:
        """Apply ``change`` to ``iri``'s record in one ``BEGIN IMMEDIATE`` transaction.

        A change raises the shared counter before it commits (and writes the same epoch in the
        transaction), so no process can take the old counter for the new state. The token
        returned is that epoch: while this transaction holds the write lock nobody else commits.
        """

        def one(records: dict[str, NodeRecord]) -> tuple[dict[str, NodeRecord], T]:
            new, result = change(records[iri])
            return {new.iri: new}, result

        return self.update_many([iri], one)

    def update_many(
        self,
        iris: Sequence[str],
        change: Callable[[dict[str, NodeRecord]], tuple[dict[str, NodeRecord], T]],
    ) -> tuple[T, Hashable]:
        """Apply ``change`` to several records in one ``BEGIN IMMEDIATE`` transaction."""
        wanted = list(dict.fromkeys(iris))
        with self._lock, translated("sqlite", f"updating the coherence records of {wanted[:3]}"):
            self._check_open()
            self._conn.execute("BEGIN IMMEDIATE")
            try:
                committed, shared = self._committed_epoch(), self._epoch.value()
                old = {iri: self._read(iri) for iri in wanted}
                new, result = change(dict(old))
                changed = changed_records(old, new)
                token: Hashable = committed if shared == committed else _UNVOUCHED
                if changed:
                    token = max(committed, shared) + 1
                    self._epoch.set(token)
                    self._conn.execute(
                        "UPDATE coherence_epoch SET epoch = ? WHERE id = 0", (token,)
                    )
                    for record in changed:
                        self._write(old[record.iri], record)
                self._conn.execute("COMMIT")
            except BaseException:
                self._conn.execute("ROLLBACK")
                raise
        if changed:
            self._checkpoints.committed()
        return result, token

    def touch(self) -> Hashable:
        """Move the shared counter in one ``BEGIN IMMEDIATE`` transaction, changing no record.

        As a transition that changes a record does: the counter is raised before the commit,
        and the committed epoch written with it.
        """
        with self._lock, translated("sqlite", "moving the coherence token"):
            self._check_open()
            self._conn.execute("BEGIN IMMEDIATE")
            try:
                token = max(self._committed_epoch(), self._epoch.value()) + 1
                self._epoch.set(token)
                self._conn.execute("UPDATE coherence_epoch SET epoch = ? WHERE id = 0", (token,))
                self._conn.execute("COMMIT")
            except BaseException:
                self._conn.execute("ROLLBACK")
                raise
        self._checkpoints.committed()
        return token

    def _committed_epoch(self) -> int:
        row = self._conn.execute("SELECT epoch FROM coherence_epoch WHERE id = 0").fetchone()
        epoch: int = row[0]
        return epoch

    def _read(self, iri: str) -> NodeRecord:
        row = self._conn.execute(
            "SELECT generation, value FROM coherence_nodes WHERE iri = ?", (iri,)
        ).fetchone()
        if row is None:
            return NodeRecord(iri)
        copies = {
            agent: Copy(agent, _STATES[state], generation)
            for agent, state, generation in self._conn.execute(
                "SELECT agent, state, generation FROM coherence_copies WHERE iri = ?", (iri,)
            )
        }
        value = None if row[1] is None else parse_canonical(row[1])
        return NodeRecord(iri, row[0], value, copies)

    def _write(self, old: NodeRecord, new: NodeRecord) -> None:
        conn, iri = self._conn, new.iri
        value = None if new.value is None else canonical_json(new.value)
        conn.execute(
            "INSERT INTO coherence_nodes (iri, generation, value) VALUES (?, ?, ?)"
            " ON CONFLICT (iri) DO UPDATE SET generation = excluded.generation,"
            " value = excluded.value",
            (iri, new.generation, value),
        )
        # Each statement costs 5-20 us inside the transaction every writer waits on: an empty
        # batch is not sent, and a node never seen before (generation 0) has no kept versions.
        gone = [(iri, agent) for agent in old.copies if agent not in new.copies]
        if gone:
            conn.executemany("DELETE FROM coherence_copies WHERE iri = ? AND agent = ?", gone)
        changed = [
            (iri, c.agent, c.state.value, c.generation)
            for c in new.copies.values()
            if old.copies.get(c.agent) != c
        ]
        if changed:
            conn.executemany(
                "INSERT OR REPLACE INTO coherence_copies (iri, agent, state, generation)"
                " VALUES (?, ?, ?, ?)",
                changed,
            )
        if new.generation != old.generation and old.generation > 0:
            self._keep_versions(old, new)

    def _keep_versions(self, old: NodeRecord, new: NodeRecord) -> None:
        conn, iri = self._conn, new.iri
        if old.value is not None:
            conn.execute(
                "INSERT OR REPLACE INTO coherence_versions (iri, generation, value)"
                " VALUES (?, ?, ?)",
                (iri, old.generation, canonical_json(old.value)),
            )
        kept = [
            g
            for (g,) in conn.execute(
                "SELECT generation FROM coherence_versions WHERE iri = ?", (iri,)
            )
        ]
        keep = versions_to_keep(new, kept, self._keep)
        dropped = [(iri, g) for g in kept if g not in keep]
        if dropped:
            conn.executemany(
                "DELETE FROM coherence_versions WHERE iri = ? AND generation = ?", dropped
            )

    def version(self, iri: str, generation: int) -> Node | None:
        """Return ``iri``'s value at ``generation`` if it is still kept."""
        with self._lock, translated("sqlite", f"reading a kept version of {iri!r}"):
            self._check_open()
            row = self._conn.execute(
                "SELECT value FROM coherence_nodes WHERE iri = ? AND generation = ?"
                " UNION ALL SELECT value FROM coherence_versions WHERE iri = ? AND generation = ?",
                (iri, generation, iri, generation),
            ).fetchone()
            return None if row is None or row[0] is None else parse_canonical(row[0])

    def holdings(self, agent: str) -> list[str]:
        """Return the IRIs of the nodes ``agent`` holds a copy of, sorted."""
        with self._lock, translated("sqlite", f"listing the copies of {agent!r}"):
            self._check_open()
            rows = self._conn.execute(
                "SELECT iri FROM coherence_copies WHERE agent = ? ORDER BY iri", (agent,)
            )
            return [iri for (iri,) in rows]

    def close(self) -> None:
        """Close the connection; later calls raise ``ClosedError``. Closing twice is harmless."""
        with self._lock:
            if not self._closed:
                self._closed = True
                self._checkpoints.close()
                self._conn.close()
                self._epoch.close()

    def __enter__(self) -> SQLiteDirectory:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _check_open(self) -> None:
        if self._closed:
            raise ClosedError(f"the coherence directory {str(self.path)!r} was used after close()")
