"""L2 coherence: the copies a coordinator keeps, and the steps every one of its paths shares.

``CoherentCopies`` is the base of ``CoherenceCoordinator``: it holds the coordinator's state (the
source, the directory, the bus, the copies this process holds, its own changes) and the moves that
reads, writes and commits are made of: a copy stepped through the table (``_step``), a record moved
to the source's state (``_moved_to``), a stale write refused (``_refuse``), a single write's
invalidations announced (``_announce``; ``finish`` inlines it), a directory update with its own
changes noted, and the transitions that clean or drop a copy (write-back, eviction, lease expiry, a
lost agent).

Invariants:
- Every dirty value is written back (``write_back``) before its copy is downgraded, dropped or
  overwritten: ``_step`` performs its row's write-back before the copy's state moves, inside the
  directory's transaction, so a write-back that fails moves nothing.
- A record never moves back: a source reporting an older generation than its record holds is
  refused (``InvalidInputError``), and a record moved forward leaves no other copy valid.
- The copies this process holds are plain tuples of atoms, each replaced whole (with a
  ``LocalDirectory``, whose tokens are ints, the collector stops tracking them); a write-back,
  an eviction or a lapsed lease forgets the agent's held copy, so its next read asks the
  directory.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Hashable, Iterable
from typing import TypeVar

import orjson

from gliding_core.bus import EventBus, EventType
from gliding_core.coherence.directory import Directory, LocalDirectory, NodeRecord
from gliding_core.coherence.node_sources import NodeSource, refused
from gliding_core.coherence.own_changes import OwnChanges, touched_nodes
from gliding_core.coherence.protocol import TRANSITIONS, Action, CopyEvent
from gliding_core.errors import InvalidInputError, StaleWriteError
from gliding_core.jsonld import Node, canonical_json, preview, validate_iri
from gliding_core.store.entry import MesiState

WriteBack = Callable[[str, Node, int], None]
"""Persist ``(iri, value, generation)`` to L0."""

LeaseCheck = Callable[[str, str], bool]
"""Answer whether ``(agent, iri)``'s agent holds a Write lease on the node."""

T = TypeVar("T")

_Held = tuple[int, bytes, Hashable]
"""An agent's copy as this process holds it: its generation, its value's JSON text (UTF-8:
orjson parses bytes faster than str), and the directory token it was current at; replaced
whole, never changed. A plain tuple, not a class: one is kept per copy, and the collector
stops tracking a tuple of atoms, so with a ``LocalDirectory`` (int tokens) the copies kept
cost no collection work (the shared directory's ``_UNVOUCHED`` token keeps them tracked)."""


def _encoded(value: Node) -> bytes:
    """Return ``value`` as JSON bytes for ``orjson.loads`` (orjson: ten times faster to write)."""
    try:
        return orjson.dumps(value)
    except TypeError:  # what orjson cannot write (an integer over 64 bits) the encoder can
        return canonical_json(value).encode()


def check_agent(agent: object) -> str:
    """Return ``agent`` if it is a non-empty name; ``InvalidInputError`` otherwise."""
    if not isinstance(agent, str) or not agent.strip():
        raise InvalidInputError(f"agent must be a non-empty name, got {preview(agent)}")
    return agent


class CoherentCopies:
    """The state of a coherence coordinator, and the transitions all of its paths share.

    The chain is ``CoherentCopies`` <- ``GroupCommits`` <- ``CoherenceCoordinator``, which
    documents the arguments; not built on its own. A method here is the coordinator's own
    (looked up like one defined on it: no hop, no call added).
    """

    def __init__(
        self,
        source: NodeSource,
        directory: Directory | None,
        *,
        bus: EventBus | None,
        write_back: WriteBack | None,
        holds_write_lease: LeaseCheck | None,
    ) -> None:
        for name, fn in (("write_back", write_back), ("holds_write_lease", holds_write_lease)):
            if fn is not None and not callable(fn):
                raise InvalidInputError(f"{name} must be callable, got {fn!r}")
        self.source = source
        self.directory: Directory = directory if directory is not None else LocalDirectory()
        self.bus = bus if bus is not None else EventBus()
        self._write_back = write_back
        self._holds_lease = holds_write_lease or (lambda agent, iri: False)
        self._lock = threading.Lock()
        self._held: dict[tuple[str, str], _Held] = {}
        self._own = OwnChanges()

    # -- the table, executed ---------------------------------------------------------------------

    def _step(self, record: NodeRecord, agent: str, event: CopyEvent) -> NodeRecord:
        """Apply ``event`` to ``agent``'s copy in ``record``, performing the row's write-back."""
        copy = record.copies.get(agent)
        state = MesiState.INVALID if copy is None else copy.state
        row = TRANSITIONS[state, event, bool(record.holders(besides=agent))]
        dirty = Action.WRITE_BACK in row.actions and record.value is not None
        if dirty and self._write_back is not None:
            self._write_back(record.iri, dict(record.value or {}), record.generation)
        if copy is None:
            return record
        return record.with_copy(agent, row.state, copy.generation)

    def _moved_to(self, record: NodeRecord, value: Node, generation: int) -> NodeRecord:
        """Return ``record`` at the source's ``generation`` (every other copy invalid if moved)."""
        if generation < record.generation:
            raise InvalidInputError(
                f"the node source moved {record.iri!r} back from generation "
                f"{record.generation} to {generation}"
            )
        if generation > record.generation:
            for other in record.holders():
                record = self._step(record, other.agent, CopyEvent.REMOTE_WRITE)
        return record.at(generation, value)

    def _refuse(
        self, agent: str, record: NodeRecord, based_on: int
    ) -> tuple[NodeRecord, StaleWriteError]:
        """Return ``record`` with ``agent``'s copy invalid, and the refusal of its stale write."""
        error = refused(record.iri, based_on, record.generation, record.value)
        mine = record.copies.get(agent)
        if mine is not None and mine.state is not MesiState.INVALID:
            record = self._step(record, agent, CopyEvent.REMOTE_WRITE)
        return record, error

    def _announce(self, iri: str, generation: int, writer: str | None, agents: list[str]) -> None:
        """Publish that ``writer``'s write of ``iri`` at ``generation`` invalidated ``agents``."""
        self.bus.publish(
            EventType.COPIES_INVALIDATED,
            {"iri": iri, "generation": generation, "writer": writer, "agents": agents},
            source="coherence",
        )

    # -- write-back, eviction, lease expiry, crash ---------------------------------------------

    def write_back(self, agent: str, iri: str) -> None:
        """Write ``agent``'s dirty copy of ``iri`` back to L0 (M -> E or S); clean copies: no-op."""
        key = (check_agent(agent), validate_iri(iri))
        self._update(iri, lambda r: (self._step(r, agent, CopyEvent.WRITE_BACK), None))
        # The next read revalidates against the directory (cheap): a token taken here could
        # bless a copy that another agent's write invalidated before this call.
        self._forget(key)

    def evict(self, agent: str, iri: str) -> None:
        """Drop ``agent``'s copy of ``iri``, writing a dirty one back first."""
        self._drop(check_agent(agent), validate_iri(iri), CopyEvent.EVICTION)

    def expire_lease(self, agent: str, iri: str) -> None:
        """Invalidate the copy ``agent`` held under a lease that lapsed (dirty: written back)."""
        self._drop(check_agent(agent), validate_iri(iri), CopyEvent.LEASE_EXPIRY)

    def drop_agent(self, agent: str) -> list[str]:
        """Evict every copy ``agent`` holds (it left or crashed); return their IRIs."""
        iris = self.directory.holdings(check_agent(agent))
        for iri in iris:
            self._drop(agent, iri, CopyEvent.EVICTION)
        return iris

    def _drop(self, agent: str, iri: str, event: CopyEvent) -> None:
        def change(record: NodeRecord) -> tuple[NodeRecord, None]:
            if agent not in record.copies:
                return record, None
            record = self._step(record, agent, event)
            # An evicted copy is gone (a later read sends the node whole); a lapsed lease keeps
            # the generation the agent saw, so its next read is sent the change.
            return (record.without_copy(agent) if event is CopyEvent.EVICTION else record), None

        self._update(iri, change)
        self._forget((agent, iri))

    # -- the directory, with this coordinator's own changes noted -------------------------------

    def vouch_own(self, held: Hashable, now: Hashable, iri: str) -> bool:
        """Return whether what was current for ``iri`` at token ``held`` still is at ``now``,
        known without the directory (every change since was this coordinator's, none of ``iri``).
        """
        return self._own.vouch(held, now, iri)

    def last_own(self, iri: str) -> int | None:
        """Return the token of this coordinator's last write of ``iri`` at the source, if known.

        What a source of this process holds for ``iri`` because it wrote it is current at that
        token (the token is noted only after the write's transaction, so until then ``None``
        or an older token answers, which ``vouch_own`` refuses).
        """
        return self._own.written.get(iri)

    def _update(
        self, iri: str, change: Callable[[NodeRecord], tuple[NodeRecord, T]]
    ) -> tuple[T, Hashable]:
        def many(records: dict[str, NodeRecord]) -> tuple[dict[str, NodeRecord], T]:
            new, result = change(records[iri])
            return {iri: new}, result

        return self._update_many([iri], many)

    def _update_many(
        self,
        iris: list[str],
        change: Callable[[dict[str, NodeRecord]], tuple[dict[str, NodeRecord], T]],
    ) -> tuple[T, Hashable]:
        touched: list[str] = []

        def noted(records: dict[str, NodeRecord]) -> tuple[dict[str, NodeRecord], T]:
            old = dict(records)
            new, result = change(records)
            touched.extend(touched_nodes(old, new))
            return new, result

        result, token = self.directory.update_many(iris, noted)
        if touched:  # the token is this transaction's own: nobody else committed in it
            self._own.record(token, touched)
        return result, token

    # -- the process-local copies ----------------------------------------------------------------

    def _remember(
        self, key: tuple[str, str], generation: int, value: Node, token: Hashable
    ) -> None:
        """Hold ``value`` as ``key``'s copy at ``generation``, current at directory ``token``."""
        held = (generation, _encoded(value), token)
        with self._lock:
            self._held[key] = held

    def _forget(self, key: tuple[str, str]) -> None:
        """Drop ``key``'s held copy, if any: the agent's next read asks the directory."""
        with self._lock:
            self._held.pop(key, None)

    def forget_nodes(self, iris: Iterable[str]) -> None:
        """Drop every agent's held copy of ``iris``: their next reads ask the directory.

        For nodes the source may have changed without the directory (a write whose outcome is
        unknown): a held copy would otherwise be served while the directory's token stands.
        """
        gone = set(iris)
        with self._lock:
            for key in [key for key in self._held if key[1] in gone]:
                del self._held[key]
