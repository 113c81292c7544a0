"""L2 coherence: the directory, the one place that holds every agent's copy state of every node.

Per node the directory records its generation, its value at that generation, which agents hold
a copy and, per copy, its MESI state and the generation it was read or written at; it keeps a
few past values so a reader can be sent the change instead of the whole node. This module holds
the ``Directory`` protocol, the records it speaks (``NodeRecord``, ``Copy``), the checks and
steps every backend shares (``check_keep``, ``check_new_record``, ``changed_records``,
``one_record``, ``versions_to_keep``, ``versions_to_drop``, ``UNVOUCHED``, ``STATE_OF_LETTER``)
and the in-process backend, ``LocalDirectory`` (a dict under a lock). ``SQLiteDirectory``
(``coherence.sqlite_directory``) is the backend shared by the processes of one machine; a
server database is another class of the same protocol, run through the same contract suite
(``tests/test_core/contracts/test_directory.py``).

What every backend must hold (the contract suite checks each):
- ``update`` and ``update_many`` are atomic: the change function sees one consistent record
  (one per node) and its result is written whole or not at all, serialised with every other
  update of every handle and process on the same storage (a lock; ``BEGIN IMMEDIATE`` across
  processes). A change that raises writes nothing.
- A node's generation never decreases, and a change keeps the IRIs it was given: anything
  else is refused with ``InvalidInputError`` (``check_new_record``, ``changed_records``) and
  nothing is written.
- ``token()`` changes whenever anything in the directory changed since it was last taken, by
  any handle or process, and on ``touch()`` (a change of the source the directory could not
  see); it stays put while nothing changes. It is cheap, because every read validates its copy
  with it: a counter, across processes one in shared memory (``gliding_core.coherence.epoch``)
  or one moved by a pushed notification, so a read asks nothing of the storage when nothing
  changed. A token returned with a snapshot or an update vouches for exactly that state: while
  ``token()`` still equals it, nothing has changed since. A backend that cannot vouch (a change
  in flight) returns a token equal to nothing, which costs a check, never a stale read.
- Records handed out are values: equal to the stored ones, their copies the caller's own.
- Kept versions are bounded: at most ``keep_versions`` past values per node, and none older
  than the oldest generation a copy of that node still refers to.
- A closed directory raises ``ClosedError``.

``LocalDirectory`` keeps each record as a flat tuple of atoms and its value apart (nothing per
node for the garbage collector to track); every record it hands out is built anew (its copies
the caller's own; its value shared, never to be changed) and equal to the one stored.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple, Protocol, TypeVar, runtime_checkable

import orjson

from gliding_core.errors import ClosedError, InvalidInputError
from gliding_core.jsonld import Node, canonical_json, parse_canonical, preview
from gliding_core.store.entry import MesiState

T = TypeVar("T")

DEFAULT_KEEP_VERSIONS = 8

STATE_OF_LETTER = {state.value: state for state in MesiState}
"""Each MESI state by the letter a backend stores it as (``MesiState.value``)."""


class _Unvouched:
    """A token equal to nothing: no cached copy may be trusted on it."""

    def __eq__(self, other: object) -> bool:
        return False

    def __hash__(self) -> int:
        return 0


UNVOUCHED: Hashable = _Unvouched()
"""The token of a backend that cannot vouch for a state (a change in flight, pushes not
arriving): it equals nothing, so a copy checked against it is read again, never served stale."""


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
        return self.at(self.generation, self.value, Copy(agent, state, generation))

    def without_copy(self, agent: str) -> NodeRecord:
        """Return this record with ``agent``'s copy removed."""
        copies = {a: c for a, c in self.copies.items() if a != agent}
        return NodeRecord(self.iri, self.generation, self.value, copies)

    def at(self, generation: int, value: Node | None, copy: Copy | None = None) -> NodeRecord:
        """Return this record moved to ``generation`` holding ``value``, with ``copy`` set if
        given (its agent's; the other copies unchanged): a write's record, built once."""
        copies = self.copies
        if copy is not None:
            copies = dict(copies)
            copies[copy.agent] = copy
        return NodeRecord(self.iri, generation, value, copies)


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


@dataclass(frozen=True, slots=True)
class DirectoryChange:
    """A change another handle of a shared directory committed, as it was pushed to this one.

    Attributes:
        token: the directory's token after the change.
        iris: the nodes whose records changed (empty: the token moved, no record did);
            ``None`` when not known (too many to name, or pushes were missed while the
            connection that receives them was lost): anything may have changed.
        moved: those of ``iris`` whose generation or value moved: every copy of them is stale.
        lost: ``(iri, agent)`` copies that went from valid to invalid (or were dropped) on a
            node that did not move (a lapsed lease, an eviction, a lost agent); the other
            records of ``iris`` changed copy states only (another agent's read, a write-back),
            which leaves every valid copy valid.
    """

    token: int
    iris: tuple[str, ...] | None
    moved: tuple[str, ...] = ()
    lost: tuple[tuple[str, str], ...] = ()


@runtime_checkable
class PushingDirectory(Protocol):
    """A directory that pushes every other handle's changes to its subscribers (a process's
    copies are dropped when another commits, not only found stale on their next read)."""

    @property
    def listening(self) -> bool:
        """Whether pushes arrive now (while not, copies are only checked on read)."""
        ...

    def subscribe(self, callback: Callable[[DirectoryChange], None]) -> Callable[[], None]:
        """Call ``callback`` with each change another handle commits; return its cancel."""
        ...


def copies_ended(old: NodeRecord, new: NodeRecord) -> list[str]:
    """Return the agents whose valid copy in ``old`` is invalid or gone in ``new``."""
    ended = []
    for agent, copy in old.copies.items():
        if copy.state is MesiState.INVALID:
            continue
        now = new.copies.get(agent)
        if now is None or now.state is MesiState.INVALID:
            ended.append(agent)
    return ended


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


def versions_to_drop(record: NodeRecord, kept: list[int], keep_versions: int) -> list[int]:
    """Return which of the past generations ``kept`` a backend deletes after ``record`` was
    written (those ``versions_to_keep`` leaves out), in the order of ``kept``."""
    keep = versions_to_keep(record, kept, keep_versions)
    return [g for g in kept if g not in keep]


def one_record(
    iri: str, change: Callable[[NodeRecord], tuple[NodeRecord, T]]
) -> Callable[[dict[str, NodeRecord]], tuple[dict[str, NodeRecord], T]]:
    """Return ``change`` of ``iri``'s record as a change of ``update_many`` (by IRI), so a
    backend's ``update`` is its ``update_many`` of one node."""

    def one(records: dict[str, NodeRecord]) -> tuple[dict[str, NodeRecord], T]:
        new, result = change(records[iri])
        return {new.iri: new}, result

    return one


_Kept = tuple[Any, ...]  # (int, then str, str, int per copy: no closer type says so)
"""A record as ``LocalDirectory`` keeps it, its value aside: its generation, then each copy's
agent, state letter and generation, in one flat tuple of atoms. Not the record: the collector
stops tracking a tuple of atoms at its first collection (a tuple holding a tuple needs one
collection more per level, and one holding a dict, even an untracked one, stays tracked, hence
the values kept apart), so a directory of many nodes costs no collection work, where a record,
its copies' dict and each copy would each be tracked for good."""

_LETTERS = {state: state.value for state in MesiState}


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
        copies[agent] = Copy(agent, STATE_OF_LETTER[letter], generation)
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
            return self._read(iri)

    def _read(self, iri: str) -> NodeRecord:
        """Return ``iri``'s record as kept (a new one); the lock is held, the directory open."""
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
            self._check_open()
            old = self._read(iri)
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
            self._check_open()
            old = {iri: self._read(iri) for iri in iris}  # by IRI: a repeated one read once
            new, result = change(dict(old))
            changed = changed_records(old, new)
            for record in changed:
                self._store(old[record.iri], record)
            if changed:
                self._token = next(self._changes)
            return result, self._token

    def _store(self, old: NodeRecord, new: NodeRecord) -> None:
        versions = self._versions.get(new.iri, {})
        past = list(versions)
        passed = old.value if old.generation < new.generation else None  # now a past value
        if passed is not None:
            past.append(old.generation)
        if past:  # a node first written here has none: nothing to keep or prune
            keep = versions_to_keep(new, past, self._keep)
            if passed is not None and old.generation in keep:  # (else no copy reads it)
                versions[old.generation] = _version_text(passed)
            for generation in [g for g in versions if g not in keep]:
                del versions[generation]
            if versions:
                self._versions[new.iri] = versions
            else:
                self._versions.pop(new.iri, None)
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
