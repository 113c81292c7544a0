"""L2 coherence: the coordinator an agent's handle calls to read and write shared nodes.

``Coherence`` (also exported as ``CoherenceCoordinator``) executes the transition table of
``gliding_core.coherence.protocol`` against a ``Directory`` (copy states, generations, recent
values) and a ``NodeSource`` (where committed values live: the blackboard, or a small source of
``gliding_core.coherence.node_sources``). Its reads, single writes, write-backs, evictions,
lease expiries and lost agents are here; it is made of parts, each in its own module: the
copies its agents hold (``copies``), the record moves every path makes (``moves``), the
directory changes it committed itself (``own_changes``) and its batch and group commits
(``commits``, as ``Coherence.commits``).

Invariants:
- No stale read: a read is served from a copy only if the directory, checked through its
  change token, still holds that copy valid at the node's current generation; otherwise it goes
  to the directory and, on a miss, to the source. A process that missed an announcement still
  sees the token move.
- Optimistic concurrency: a write names the generation it is based on; if the node has moved
  on it is refused with ``StaleWriteError`` carrying the current generation and value, nothing
  is written and the writer's copy becomes ``INVALID``. An agent for which ``holds_write_lease``
  answers true is never refused this way.
- A write tagged with a critical tag is written through before ``write`` returns (its dirty
  value written back as every dirty value is: ``gliding_core.coherence.copies``).
- A write that invalidated other copies publishes ``COPIES_INVALIDATED`` on the bus, after its
  transition committed; a write from ``EXCLUSIVE`` or ``MODIFIED`` publishes nothing.
- A change another process committed, pushed by a shared directory (``changed_elsewhere``),
  drops this process's held copies of the nodes it moved, and the copies it ended (a lapsed
  lease, an eviction), at once and publishes ``COPIES_INVALIDATED`` for each such node
  (``"pushed": True``, naming the agents of this process whose copies went); another agent's
  read or a write-back, which leave every valid copy valid, drops nothing. It
  only ever drops: a read never depends on a push having arrived, since the token still
  decides what is served.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, NamedTuple, TypeVar

import orjson

from gliding_core.bus import EventBus, EventType
from gliding_core.coherence.commits import (
    Change,
    GroupCommits,
    GroupSource,
    LeaseCheck,
    Owner,
    SourceStep,
    announce,
)
from gliding_core.coherence.copies import HeldCopies, check_agent
from gliding_core.coherence.directory import Copy, Directory, LocalDirectory, NodeRecord
from gliding_core.coherence.moves import RecordMoves, WriteBack
from gliding_core.coherence.node_sources import NodeSource, check_generation
from gliding_core.coherence.own_changes import OwnChanges, touched_nodes
from gliding_core.coherence.protocol import Action, CopyEvent, transition
from gliding_core.errors import (
    EntryNotFoundError,
    InvalidInputError,
    InvalidNodeError,
    StaleWriteError,
)
from gliding_core.jsonld import Node, parse_node, preview, validate_iri
from gliding_core.store.entry import MesiState

CRITICAL_TAGS = frozenset({"emphasis", "user_intent", "confirmed_fact"})
"""Tags whose writes are written through to L0 before the write returns (seed 000, 六)."""

Kind = Literal["hit", "change", "whole"]

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class NodeDelta:
    """What differs between two generations of a node: changed or added values, removed keys."""

    iri: str
    from_generation: int
    to_generation: int
    changed: dict[str, Any]
    removed: tuple[str, ...]


class Reading(NamedTuple):
    """What a read returned to one agent (a named tuple: a read hit builds one per call).

    Attributes:
        value: the node at ``generation`` (a fresh copy).
        kind: ``hit`` (the agent already held this generation), ``change`` (it held an older
            one still kept: ``delta`` says what differs) or ``whole`` (it never saw the node,
            or its generation is no longer kept).
        seen_generation: the generation the agent's copy had before the read, if any.
    """

    iri: str
    value: Node
    generation: int
    kind: Kind
    seen_generation: int | None = None
    delta: NodeDelta | None = None


def diff(iri: str, old: Node, new: Node, generations: tuple[int, int]) -> NodeDelta:
    """Return the properties of ``new`` that differ from ``old``, and those it dropped."""
    changed = {k: v for k, v in new.items() if k not in old or old[k] != v}
    removed = tuple(sorted(k for k in old if k not in new))
    return NodeDelta(iri, generations[0], generations[1], changed, removed)


def _never_leased(agent: str, iri: str) -> bool:
    return False


class Coherence:
    """Keeps every agent's copies of shared nodes coherent (MESI with optimistic writes).

    Its parts: ``held`` (``HeldCopies``), ``moves`` (``RecordMoves``), ``own``
    (``OwnChanges``) and ``commits`` (``GroupCommits``: ``commit``, ``change``,
    ``checked_change``, ``commit_group`` and ``finish``, which are also methods of the
    coordinator).

    The source and ``write_back`` are called inside the directory's transaction, so a
    transition and its effects commit together or not at all; neither may write to the
    directory's own database file through another connection (it would wait on itself).

    Args:
        source: where committed values live.
        directory: where copy states live; a fresh ``LocalDirectory`` by default.
        bus: where invalidations are announced; a private bus by default.
        write_back: persists a node to L0; ``None`` keeps dirty values on the source only.
        holds_write_lease: whether an agent holds a Write lease on a node (never, by default).
        critical_tags: tags whose writes are written through.
    """

    def __init__(
        self,
        source: NodeSource,
        directory: Directory | None = None,
        *,
        bus: EventBus | None = None,
        write_back: WriteBack | None = None,
        holds_write_lease: LeaseCheck | None = None,
        critical_tags: Iterable[str] = CRITICAL_TAGS,
    ) -> None:
        for name, fn in (("write_back", write_back), ("holds_write_lease", holds_write_lease)):
            if fn is not None and not callable(fn):
                raise InvalidInputError(f"{name} must be callable, got {fn!r}")
        self.source = source
        self.directory: Directory = directory if directory is not None else LocalDirectory()
        self.bus = bus if bus is not None else EventBus()
        self.critical_tags = frozenset(critical_tags)
        self.holds_lease: LeaseCheck = holds_write_lease or _never_leased
        self.held = HeldCopies()
        self.moves = RecordMoves(write_back)
        self.own = OwnChanges()
        self.commits = GroupCommits(
            self.directory,
            moves=self.moves,
            held=self.held,
            own=self.own,
            bus=self.bus,
            holds_lease=self.holds_lease,
        )

    # -- reads ---------------------------------------------------------------------------------

    def read(self, agent: str, iri: str) -> Reading:
        """Return the current value of ``iri`` for ``agent``, leaving ``agent`` a valid copy.

        Raises:
            EntryNotFoundError: the source has no node ``iri``.
        """
        agent = check_agent(agent)
        return self._read(agent, validate_iri(iri), self.directory.token())

    def generation(self, agent: str, iri: str, *, token: Hashable | None = None) -> int:
        """Return the generation ``agent`` reads of ``iri`` (as ``read`` does).

        For a caller that keeps the values itself (the blackboard's node cache) and needs the
        copy registered and validated, and the generation to check its own value against.
        ``token``: the directory's ``token()`` as the caller read it at the start of its read
        (``None``: read it here); a held copy it vouches is current as of that moment.

        Raises:
            EntryNotFoundError: the source has no node ``iri``.
        """
        now = self.directory.token() if token is None else token
        if type(agent) is str and type(iri) is str:  # a held copy's key was checked when held
            held = self._vouched((agent, iri), now)
            if held is not None:
                return held[0]
        return self._read(check_agent(agent), validate_iri(iri), now).generation

    def read_many(self, agent: str, iris: Iterable[str]) -> list[Reading]:
        """Read several nodes for ``agent``, validating its copies with one change check.

        Each reading is the node's value as of the call's start or later: the one token taken
        first vouches for every copy it still matches.

        Raises:
            EntryNotFoundError: the source has no node of one of ``iris`` (earlier ones are
                read).
        """
        agent = check_agent(agent)
        wanted = [validate_iri(iri) for iri in ([iris] if isinstance(iris, str) else iris)]
        token = self.directory.token()
        return [self._read(agent, iri, token) for iri in wanted]

    def _vouched(self, key: tuple[str, str], token: Hashable) -> tuple[int, bytes] | None:
        """Return the generation and text of the copy ``key`` holds, if it is current as of
        ``token`` without asking the directory (vouched then, or only this process's own
        changes since, none of this node), else ``None``."""
        copies = self.held.by_key
        held = copies.get(key)  # one dict lookup is atomic; writers hold the lock
        if held is None:
            return None
        generation, text, vouched = held
        if vouched == token:
            return generation, text
        if not self.own.vouch(vouched, token, key[1]):
            return None
        copies[key] = (generation, text, token)
        return generation, text

    def _read(self, agent: str, iri: str, token: Hashable) -> Reading:
        key = (agent, iri)
        held = self._vouched(key, token)
        if held is not None:
            generation, text = held
            return Reading(iri, orjson.loads(text), generation, "hit", generation)
        record, vouched = self.directory.snapshot(iri)
        mine = record.copies.get(agent)
        if mine is not None and self._current(mine, record) and record.value is not None:
            self.held.remember(key, record.generation, record.value, vouched)
            return Reading(iri, dict(record.value), record.generation, "hit", mine.generation)
        reading, after = self._update(iri, lambda r: self._read_change(agent, r))
        self.held.remember(key, reading.generation, reading.value, after)
        return reading

    @staticmethod
    def _current(copy: Copy, record: NodeRecord) -> bool:
        return bool(copy.state is not MesiState.INVALID and copy.generation == record.generation)

    def _read_change(self, agent: str, record: NodeRecord) -> tuple[NodeRecord, Reading]:
        mine = record.copies.get(agent)
        if mine is not None and self._current(mine, record) and record.value is not None:
            return record, Reading(
                record.iri, dict(record.value), record.generation, "hit", mine.generation
            )
        # A miss always asks the source: a node written around the directory is caught here.
        value, generation = self.source.get(record.iri)
        record = self.moves.moved_to(record, value, generation)
        for other in record.holders(besides=agent):
            record = self.moves.step(record, other.agent, CopyEvent.REMOTE_READ)
        shared = bool(record.holders(besides=agent))
        row = transition(MesiState.INVALID, CopyEvent.LOCAL_READ, others_hold=shared)
        record = record.with_copy(agent, row.state, record.generation)
        return record, self._fetched(record, None if mine is None else mine.generation)

    def _fetched(self, record: NodeRecord, seen: int | None) -> Reading:
        assert record.value is not None
        value, generation = dict(record.value), record.generation
        old = None if seen is None else self.directory.version(record.iri, seen)
        if old is None or seen is None:
            return Reading(record.iri, value, generation, "whole", seen)
        delta = diff(record.iri, old, value, (seen, generation))
        return Reading(record.iri, value, generation, "change", seen, delta)

    # -- writes --------------------------------------------------------------------------------

    def write(
        self,
        agent: str,
        iri: str,
        value: object,
        *,
        based_on: int,
        tags: Iterable[str] = (),
    ) -> int:
        """Commit ``value`` as ``iri``'s next generation for ``agent``; return that generation.

        Args:
            agent: the writer.
            iri: the node (created when absent and ``based_on`` is 0).
            value: the whole new value, a JSON-LD node (mapping or JSON text).
            based_on: the generation the writer read and changed (0 for a new node).
            tags: the write's tags; one of ``critical_tags`` writes it through to L0.

        Raises:
            StaleWriteError: the node has moved past ``based_on`` (and ``agent`` holds no Write
                lease); nothing was written and ``agent``'s copy is now ``INVALID``.
        """
        key = (check_agent(agent), validate_iri(iri))
        node = parse_node(value)[0]
        if node.get("@id", iri) != iri:
            raise InvalidNodeError(
                f"the node's @id {node['@id']!r} is not the IRI written, {iri!r}"
            )
        check_generation(based_on, what="based_on")
        labels = list(tags) if not isinstance(tags, str) else [tags]
        if not all(isinstance(label, str) for label in labels):
            raise InvalidInputError(f"tags must be strings, got {preview(labels)}")
        critical = bool(self.critical_tags.intersection(labels))
        leased = bool(self.holds_lease(agent, iri))
        outcome, token = self._update(
            iri, lambda r: self._write_change(agent, r, node, based_on, leased)
        )
        if isinstance(outcome, StaleWriteError):
            self.held.forget(key)
            raise outcome
        generation, invalidated = outcome
        self.own.wrote(token, [iri])
        self.held.remember(key, generation, node, token)
        if invalidated:
            announce(self.bus, iri, generation, agent, invalidated)
        if critical:
            self.write_back(agent, iri)
        return generation

    def _write_change(
        self, agent: str, record: NodeRecord, node: Node, based_on: int, leased: bool
    ) -> tuple[NodeRecord, tuple[int, list[str]] | StaleWriteError]:
        record = self._known(record)
        for _ in range(2):  # a leased writer retries once if the node moved around the directory
            if record.generation != based_on and not leased:
                return self.moves.refuse(agent, record, based_on)
            # Dirty copies of other agents are written back before the source moves on, so a
            # failing write-back leaves nothing half-done.
            others = [c.agent for c in record.holders(besides=agent)]
            stepped = record
            for other in others:
                stepped = self.moves.step(stepped, other, CopyEvent.REMOTE_WRITE)
            try:
                generation = self.source.put(record.iri, node, record.generation)
            except StaleWriteError as exc:
                if exc.current_value is None:
                    return self.moves.refuse(agent, record, based_on)
                record = self.moves.moved_to(record, exc.current_value, exc.current_generation)
                continue
            mine = stepped.copies.get(agent)
            state = MesiState.INVALID if mine is None else mine.state
            row = transition(state, CopyEvent.LOCAL_WRITE, others_hold=bool(others))
            announced = others if Action.ANNOUNCE_INVALIDATION in row.actions else []
            stepped = stepped.at(generation, node)
            return stepped.with_copy(agent, row.state, generation), (generation, announced)
        return self.moves.refuse(agent, record, based_on)

    def _known(self, record: NodeRecord) -> NodeRecord:
        """Return ``record``, or for a node the directory never saw, the source's state of it."""
        if record.generation > 0:
            return record
        try:
            value, generation = self.source.get(record.iri)
        except EntryNotFoundError:
            return record
        return self.moves.moved_to(record, value, generation)

    # -- what the directory holds ------------------------------------------------------------------

    def copies(self, iri: str) -> dict[str, MesiState]:
        """Return every agent's state for ``iri``, as the directory holds it."""
        return {a: c.state for a, c in self.directory.record(validate_iri(iri)).copies.items()}

    def moved(self, seen: Mapping[str, int]) -> list[str]:
        """Return which of ``seen``'s nodes are no longer at the generation given (sorted).

        For what was built from shared nodes (an L1 turn, an L3 view): record the generation of
        each node it used, and ask here whether it has gone stale.
        """
        if not isinstance(seen, Mapping):
            raise InvalidInputError(f"seen must map IRIs to generations, got {preview(seen)}")
        stale = []
        for iri, generation in seen.items():
            check_generation(generation, what=f"the generation of {iri!r}")
            if self.directory.record(validate_iri(iri)).generation != generation:
                stale.append(iri)
        return sorted(stale)

    def delta(self, iri: str, from_generation: int) -> NodeDelta | None:
        """Return the change from ``from_generation`` to the current one, if still kept."""
        check_generation(from_generation, what="from_generation")
        record = self.directory.record(validate_iri(iri))
        old = self.directory.version(iri, from_generation)
        if old is None or record.value is None:
            return None
        return diff(iri, old, record.value, (from_generation, record.generation))

    # -- batch and group commits (``commits``) ------------------------------------------------

    def commit(
        self,
        agent: str | None,
        bases: Mapping[str, int | None],
        current: SourceStep,
        apply: SourceStep,
    ) -> dict[str, int]:
        """Commit a change of several nodes, all or nothing (``GroupCommits.commit``)."""
        return self.commits.commit(agent, bases, current, apply)

    def change(
        self, agent: str | None, bases: Mapping[str, int | None], owner: Owner
    ) -> Change[Owner]:
        """Return a validated change for ``commit_group`` (``GroupCommits.change``)."""
        return self.commits.change(agent, bases, owner)

    def checked_change(
        self, agent: str | None, bases: dict[str, int | None], owner: Owner
    ) -> Change[Owner]:
        """Return a change whose input is validated (``GroupCommits.checked_change``)."""
        return self.commits.checked_change(agent, bases, owner)

    def commit_group(self, changes: Sequence[Change[Owner]], source: GroupSource[Owner]) -> None:
        """Commit several writers' changes in one transaction (``GroupCommits.commit_group``)."""
        self.commits.commit_group(changes, source)

    def finish(self, change: Change[Owner]) -> None:
        """Complete a committed change (``GroupCommits.finish``)."""
        self.commits.finish(change)

    # -- write-back, eviction, lease expiry, crash ---------------------------------------------

    def write_back(self, agent: str, iri: str) -> None:
        """Write ``agent``'s dirty copy of ``iri`` back to L0 (M -> E or S); clean copies: no-op."""
        key = (check_agent(agent), validate_iri(iri))
        self._update(iri, lambda r: (self.moves.step(r, agent, CopyEvent.WRITE_BACK), None))
        # The next read revalidates against the directory (cheap): a token taken here could
        # bless a copy that another agent's write invalidated before this call.
        self.held.forget(key)

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
            record = self.moves.step(record, agent, event)
            # An evicted copy is gone (a later read sends the node whole); a lapsed lease keeps
            # the generation the agent saw, so its next read is sent the change.
            return (record.without_copy(agent) if event is CopyEvent.EVICTION else record), None

        self._update(iri, change)
        self.held.forget((agent, iri))

    def holds_copy(self, agent: str, iri: str) -> bool:
        """Return whether this process holds a copy of ``iri`` for ``agent`` to serve its reads
        from (once the directory's token vouches for it): ``False`` once the copy is invalid
        here (never read, evicted, refused, or dropped by another process's pushed write)."""
        return (check_agent(agent), validate_iri(iri)) in self.held.by_key

    def changed_elsewhere(
        self, moved: Sequence[str] | None, lost: Sequence[tuple[str, str]] = ()
    ) -> dict[str, list[str]]:
        """Drop this process's held copies of nodes another process moved (every copy when
        ``moved`` is ``None``: anything may have changed) and the ``(iri, agent)`` copies it
        ended; announce each moved node, and each node of which a copy went here, on the bus;
        return the agents whose copies were dropped, by IRI (the pushed directory's subscriber).
        """
        dropped = self.held.drop(moved, lost)
        named = list(dropped) if moved is None else list(dict.fromkeys([*moved, *dropped]))
        for iri in named:
            self.bus.publish(
                EventType.COPIES_INVALIDATED,
                {
                    "iri": iri,
                    "generation": None,
                    "writer": None,
                    "agents": dropped.get(iri, []),
                    "pushed": True,
                },
                source="coherence",
            )
        return dropped

    def forget_nodes(self, iris: Iterable[str]) -> None:
        """Drop every agent's held copy of ``iris``: their next reads ask the directory.

        For nodes the source may have changed without the directory (a write whose outcome is
        unknown): a held copy would otherwise be served while the directory's token stands.
        """
        self.held.forget_nodes(iris)

    # -- the directory, with this coordinator's own changes noted -------------------------------

    def vouch_own(self, held: Hashable, now: Hashable, iri: str) -> bool:
        """Return whether what was current for ``iri`` at token ``held`` still is at ``now``,
        known without the directory (every change since was this coordinator's, none of ``iri``).
        """
        return self.own.vouch(held, now, iri)

    def last_own(self, iri: str) -> int | None:
        """Return the token of this coordinator's last write of ``iri`` at the source, if known.

        What a source of this process holds for ``iri`` because it wrote it is current at that
        token (the token is noted only after the write's transaction, so until then ``None``
        or an older token answers, which ``vouch_own`` refuses).
        """
        return self.own.written.get(iri)

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
            self.own.record(token, touched)
        return result, token


CoherenceCoordinator = Coherence
"""The coordinator's earlier name, kept."""
