"""L2 coherence: the coordinator an agent's handle calls to read and write shared nodes.

It executes the transition table of ``gliding_core.coherence.protocol`` against a
``Directory`` (copy states, generations, recent values) and a ``NodeSource`` (where committed
values live: the blackboard, or a small source of ``gliding_core.coherence.sources``).

Invariants:
- No stale read: a read is served from a copy only if the directory, checked through its
  change token, still holds that copy valid at the node's current generation; otherwise it goes
  to the directory and, on a miss, to the source. A process that missed an announcement still
  sees the token move.
- Optimistic concurrency: a write names the generation it is based on; if the node has moved
  on it is refused with ``StaleWriteError`` carrying the current generation and value, nothing
  is written and the writer's copy becomes ``INVALID``. An agent for which ``holds_write_lease``
  answers true is never refused this way.
- Every dirty value is written back (``write_back``) before its copy is downgraded, dropped or
  overwritten; a write tagged with a critical tag is written through before ``write`` returns.
- A write that invalidated other copies publishes ``COPIES_INVALIDATED`` on the bus, after its
  transition committed; a write from ``EXCLUSIVE`` or ``MODIFIED`` publishes nothing.
- ``commit`` changes several nodes in one directory transaction (``Directory.update_many``),
  all or nothing, for a source that writes batches (the blackboard); the same rules hold per
  node, and a write from outside every agent's cache (the system's) invalidates every copy.
- ``commit_group`` commits several writers' changes of disjoint nodes in one transaction and
  one source step (a ``GroupSource``, made once by its caller); each is decided as if alone
  (a refused one changes nothing at the source and fails only itself), and each is completed
  by ``finish`` on its writer's thread.
- A lone change that needs none of a group's steps (``_plain``: an agent's, not refused, each
  node at the source as its record holds it, no stale base, no other valid copy) is written
  by a direct path with the same checks in the same transaction, and leaves exactly the
  records, events, refusals and held copies the group's path leaves (a test runs both).
- The copies this process holds are plain tuples of atoms, each replaced whole (with a
  ``LocalDirectory``, whose tokens are ints, the collector stops tracking them).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from types import MappingProxyType
from typing import Any, Generic, Literal, NamedTuple, Protocol, TypeVar

import orjson

from gliding_core.bus import EventBus, EventType
from gliding_core.coherence.directory import Copy, Directory, LocalDirectory, NodeRecord
from gliding_core.coherence.protocol import TRANSITIONS, Action, CopyEvent, transition
from gliding_core.coherence.sources import NodeSource, check_generation, refused
from gliding_core.entry import MesiState
from gliding_core.errors import (
    EntryNotFoundError,
    InvalidInputError,
    InvalidNodeError,
    StaleWriteError,
)
from gliding_core.jsonld import (
    Node,
    canonical_json,
    parse_node,
    preview,
    validate_iri,
)

logger = logging.getLogger(__name__)

CRITICAL_TAGS = frozenset({"emphasis", "user_intent", "confirmed_fact"})
"""Tags whose writes are written through to L0 before the write returns (seed 000, 六)."""

WriteBack = Callable[[str, Node, int], None]
"""Persist ``(iri, value, generation)`` to L0."""

LeaseCheck = Callable[[str, str], bool]
"""Answer whether ``(agent, iri)``'s agent holds a Write lease on the node."""

SourceStep = Callable[[Mapping[str, NodeRecord]], Mapping[str, tuple[Node | None, int]]]
"""One step of a batch commit at the source: the nodes' records in, their (value or ``None``
when absent, generation) out."""

Kind = Literal["hit", "change", "whole"]
T = TypeVar("T")
Owner = TypeVar("Owner")

_INVALID = MesiState.INVALID  # an enum member read from its class costs a lookup each time
_NOT_LEASED: frozenset[str] = frozenset()
_new_tuple = tuple.__new__  # builds a named tuple without its ``__new__`` (a Python call)
_NOBODY: Mapping[str, list[str]] = MappingProxyType({})


def _local_write(state: MesiState, shared: bool) -> tuple[MesiState, bool]:
    row = TRANSITIONS[state, CopyEvent.LOCAL_WRITE, shared]
    return row.state, Action.ANNOUNCE_INVALIDATION in row.actions


_LOCAL_WRITES = {
    state: (_local_write(state, False), _local_write(state, True)) for state in MesiState
}
"""The table's ``LOCAL_WRITE`` rows by the writer's state, alone and beside other holders:
the writer's next state and whether the write announces the invalidations (read on every
write: one look-up by state, not by a key of three)."""


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


_Held = tuple[int, bytes, Hashable]
"""An agent's copy as this process holds it: its generation, its value's JSON text (UTF-8:
orjson parses bytes faster than str), and the directory token it was current at; replaced
whole, never changed. A plain tuple, not a class: one is kept per copy, and the collector
stops tracking a tuple of atoms, so with a ``LocalDirectory`` (int tokens) the copies kept
cost no collection work (the shared directory's ``_UNVOUCHED`` token keeps them tracked)."""


class Change(Generic[Owner]):
    """One writer's change of several nodes, decided alone inside a group commit.

    Made by ``CoherenceCoordinator.change``. ``owner`` is the caller's own (what it queued
    the change for); the coordinator never reads it. Inside the group's transaction the
    source's ``current`` may set ``refusal`` (its own check refused the change: rights,
    fences), and ``commit_group`` sets it when a base generation is stale; a committed change
    gets ``states`` (per node its new value, ``None``: gone, and generation) and
    ``announced`` (per node the agents whose copies it invalidated); after the transaction
    ``token`` is the directory's token right after it. ``finish`` completes it.
    """

    __slots__ = ("agent", "announced", "bases", "leased", "owner", "refusal", "states", "token")

    def __init__(
        self, agent: str | None, bases: dict[str, int | None], leased: frozenset[str], owner: Owner
    ) -> None:
        self.agent, self.bases, self.leased, self.owner = agent, bases, leased, owner
        self.refusal: Exception | None = None
        self.states: dict[str, tuple[Node | None, int]] | None = None
        self.announced: Mapping[str, list[str]] = _NOBODY
        self.token: Hashable = None


class GroupSource(Protocol[Owner]):
    """The source's two steps of a group commit, called inside the directory's transaction.

    One object for every commit (the blackboard makes it once): the steps take the group's
    changes as arguments, so nothing is built for them per write.
    """

    def current(
        self, records: Mapping[str, NodeRecord], changes: Sequence[Change[Owner]]
    ) -> Mapping[str, tuple[Node | None, int]]:
        """Return every node's state at the source (value, ``None``: absent, and generation);
        set the ``refusal`` of each change the source's own check refuses."""
        ...

    def apply(
        self, changes: Sequence[Change[Owner]], records: Mapping[str, NodeRecord]
    ) -> Sequence[Mapping[str, tuple[Node | None, int]]]:
        """Write the accepted ``changes`` at once; return each one's nodes' new states, in
        order (``records``: the group's records as the changes are applied)."""
        ...


class _CommitSteps:
    """The two ``SourceStep`` callables of one ``commit``, as a ``GroupSource``."""

    __slots__ = ("apply_step", "current_step")

    def __init__(self, current: SourceStep, apply: SourceStep) -> None:
        self.current_step, self.apply_step = current, apply

    def current(
        self, records: Mapping[str, NodeRecord], changes: Sequence[Change[None]]
    ) -> Mapping[str, tuple[Node | None, int]]:
        return self.current_step(records)

    def apply(
        self, changes: Sequence[Change[None]], records: Mapping[str, NodeRecord]
    ) -> list[Mapping[str, tuple[Node | None, int]]]:
        [change] = changes
        return [self.apply_step({iri: records[iri] for iri in change.bases})]


class _OwnChanges:
    """The directory changes this coordinator committed itself, to re-vouch copies cheaply.

    Tokens ``since`` to ``top`` were all produced by this coordinator's own transactions (a
    token from anyone else, another process or coordinator, breaks the run), and ``touched``
    says the last of them that changed each node. A copy vouched at token ``h`` is still
    current at token ``now`` when ``now`` is ``top``, every token after ``h`` is in the run and
    none of them touched its node. ``touched`` is written before ``top`` moves, so a reader
    that sees ``top`` sees what led to it; any doubt answers no (the directory is asked).
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.since = self.top = -2
        self.touched: dict[str, int] = {}
        self.written: dict[str, int] = {}  # the last own token that wrote each node's value

    def record(self, token: Hashable, iris: Iterable[str]) -> None:
        """Note that this coordinator's transaction ending at ``token`` changed ``iris``."""
        self.committed(token, list(iris), [])

    def wrote(self, token: Hashable, iris: Iterable[str]) -> None:
        """Note that the transaction ending at ``token`` wrote the values of ``iris``."""
        self.committed(token, [], list(iris))

    def committed(self, token: Hashable, touched: list[str], written: list[str]) -> None:
        """Note that the transaction ending at ``token`` changed ``touched`` (its token then
        extends the run, or starts a new one after a gap: someone else's change, or out of
        order) and wrote the values of ``written``, under one lock."""
        if not isinstance(token, int):
            return
        with self._lock:
            if touched:  # else the token is not this transaction's own: no run extends
                for iri in touched:
                    self.touched[iri] = token
                if token == self.top + 1:
                    self.top = token
                else:
                    self.since = self.top = token
            for iri in written:
                self.written[iri] = token

    def vouch(self, held: Hashable, now: Hashable, iri: str) -> bool:
        """Return whether a copy of ``iri`` current at token ``held`` is current at ``now``."""
        return (
            isinstance(held, int)
            and isinstance(now, int)
            and now == self.top
            and held + 1 >= self.since
            and self.touched.get(iri, -1) <= held
        )


def _present(record: NodeRecord) -> int:
    """Return the generation of the node as it exists now (0: absent, or deleted)."""
    return record.generation if record.value is not None else 0


def _touched(old: Mapping[str, NodeRecord], new: Mapping[str, NodeRecord]) -> list[str]:
    """Return the nodes whose record ``new`` changes: exactly those the directory stores.

    It compares them alike (``changed_records``): records are immutable, so the same object
    is the same record, and another one is compared by value (an equal record built anew
    must not count: a token noted as this coordinator's own when the directory did not move
    could be another's change).
    """
    touched = []
    for iri, record in new.items():
        before = old.get(iri)
        if record is before:
            continue
        if before is None or record.generation != before.generation or record != before:
            touched.append(iri)
    return touched


def _plain(
    change: Change[Owner],
    given: Mapping[str, NodeRecord],
    now: Mapping[str, tuple[Node | None, int]],
) -> bool:
    """Return whether a lone change needs none of a group's steps before its write.

    So it is when it is an agent's, not refused by the source's check, each of its nodes is at
    the source as the directory's record holds it (the record's own value at its generation,
    or absent as its record says), no base is stale, and no other agent holds a valid copy: then
    syncing changes no record, its admission steps no copy (no write-back, nobody to tell),
    and its write only moves the writer's own copy.
    """
    agent = change.agent
    if agent is None or change.refusal is not None:
        return False
    bases, leased = change.bases, change.leased
    for iri, record in given.items():
        value, generation = now[iri]
        if value is not record.value or generation != record.generation:
            return False
        if _stale(bases[iri], generation if value is not None else 0, iri, leased):
            return False
        for copy in record.copies.values():  # (``record.holders(besides=agent)``, inline)
            if copy.state is not _INVALID and copy.agent != agent:
                return False
    return True


def _stale(based: int | None, present: int, iri: str, leased: frozenset[str]) -> bool:
    """Return whether ``iri``'s base ``based`` is stale: given, not the node's ``present``
    generation, and not covered by a write lease the writer holds (``_plain``, ``_admit``)."""
    return based is not None and based != present and iri not in leased


def _results(results: Sequence[T], wanted: int) -> Sequence[T]:
    """Return a group's source step results; ``InvalidInputError`` unless one per change."""
    if len(results) != wanted:
        raise InvalidInputError(
            f"a group's source step returned {len(results)} results for {wanted} changes"
        )
    return results


def diff(iri: str, old: Node, new: Node, generations: tuple[int, int]) -> NodeDelta:
    """Return the properties of ``new`` that differ from ``old``, and those it dropped."""
    changed = {k: v for k, v in new.items() if k not in old or old[k] != v}
    removed = tuple(sorted(k for k in old if k not in new))
    return NodeDelta(iri, generations[0], generations[1], changed, removed)


def _encoded(value: Node) -> bytes:
    """Return ``value`` as JSON bytes for ``orjson.loads`` (orjson: ten times faster to write)."""
    try:
        return orjson.dumps(value)
    except TypeError:  # what orjson cannot write (an integer over 64 bits) the encoder can
        return canonical_json(value).encode()


def _check_agent(agent: object) -> str:
    if not isinstance(agent, str) or not agent.strip():
        raise InvalidInputError(f"agent must be a non-empty name, got {preview(agent)}")
    return agent


class CoherenceCoordinator:
    """Keeps every agent's copies of shared nodes coherent (MESI with optimistic writes).

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
        self._write_back = write_back
        self._holds_lease = holds_write_lease or (lambda agent, iri: False)
        self.critical_tags = frozenset(critical_tags)
        self._lock = threading.Lock()
        self._held: dict[tuple[str, str], _Held] = {}
        self._own = _OwnChanges()

    # -- reads ---------------------------------------------------------------------------------

    def read(self, agent: str, iri: str) -> Reading:
        """Return the current value of ``iri`` for ``agent``, leaving ``agent`` a valid copy.

        Raises:
            EntryNotFoundError: the source has no node ``iri``.
        """
        agent = _check_agent(agent)
        return self._read(agent, validate_iri(iri), self.directory.token())

    def generation(self, agent: str, iri: str, *, token: Hashable | None = None) -> int:
        """Return the generation ``agent`` reads of ``iri``: ``read`` without building the value.

        For a caller that keeps the values itself (the blackboard's node cache) and needs the
        copy registered and validated, and the generation to check its own value against.
        ``token``: the directory's ``token()`` as the caller read it at the start of its read
        (``None``: read it here); a held copy it vouches is current as of that moment.

        Raises:
            EntryNotFoundError: the source has no node ``iri``.
        """
        key = (agent, iri)
        held = self._held.get(key)
        if held is not None:
            generation, text, vouched = held
            now = self.directory.token() if token is None else token
            if vouched == now:
                return generation
            if self._own.vouch(vouched, now, iri):
                self._held[key] = (generation, text, now)
                return generation
            # Something changed somewhere: still current if the directory says so (the held
            # text is that generation's value), re-vouched without encoding it again.
            record, vouched = self.directory.snapshot(iri)
            mine = record.copies.get(agent)
            if mine is not None and self._current(mine, record) and record.generation == generation:
                with self._lock:
                    self._held[key] = (generation, text, vouched)
                return generation
        return self.read(agent, iri).generation

    def read_many(self, agent: str, iris: Iterable[str]) -> list[Reading]:
        """Read several nodes for ``agent``, validating its copies with one change check.

        Each reading is the node's value as of the call's start or later: the one token taken
        first vouches for every copy it still matches.

        Raises:
            EntryNotFoundError: the source has no node of one of ``iris`` (earlier ones are
                read).
        """
        agent = _check_agent(agent)
        wanted = [validate_iri(iri) for iri in ([iris] if isinstance(iris, str) else iris)]
        token = self.directory.token()
        return [self._read(agent, iri, token) for iri in wanted]

    def _read(self, agent: str, iri: str, token: Hashable) -> Reading:
        key = (agent, iri)
        held = self._held.get(key)  # one dict lookup is atomic; writers hold the lock
        if held is not None:
            generation, text, vouched = held
            if vouched == token or self._own.vouch(vouched, token, iri):
                if vouched != token:
                    self._held[key] = (generation, text, token)
                return Reading(iri, orjson.loads(text), generation, "hit", generation)
        record, vouched = self.directory.snapshot(iri)
        mine = record.copies.get(agent)
        if mine is not None and self._current(mine, record) and record.value is not None:
            self._remember(key, record.generation, record.value, vouched)
            return Reading(iri, dict(record.value), record.generation, "hit", mine.generation)
        reading, after = self._update(iri, lambda r: self._read_change(agent, r))
        self._remember(key, reading.generation, reading.value, after)
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
        record = self._moved_to(record, value, generation)
        for other in record.holders(besides=agent):
            record = self._step(record, other.agent, CopyEvent.REMOTE_READ)
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

    def _moved_to(self, record: NodeRecord, value: Node, generation: int) -> NodeRecord:
        if generation < record.generation:
            raise InvalidInputError(
                f"the node source moved {record.iri!r} back from generation "
                f"{record.generation} to {generation}"
            )
        if generation > record.generation:
            for other in record.holders():
                record = self._step(record, other.agent, CopyEvent.REMOTE_WRITE)
        return record.at(generation, value)

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
        key = (_check_agent(agent), validate_iri(iri))
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
        leased = bool(self._holds_lease(agent, iri))
        outcome, token = self._update(
            iri, lambda r: self._write_change(agent, r, node, based_on, leased)
        )
        if isinstance(outcome, StaleWriteError):
            self._forget(key)
            raise outcome
        generation, invalidated = outcome
        self._own.wrote(token, [iri])
        self._remember(key, generation, node, token)
        if invalidated:
            self.bus.publish(
                EventType.COPIES_INVALIDATED,
                {"iri": iri, "generation": generation, "writer": agent, "agents": invalidated},
                source="coherence",
            )
        if critical:
            self.write_back(agent, iri)
        return generation

    def _write_change(
        self, agent: str, record: NodeRecord, node: Node, based_on: int, leased: bool
    ) -> tuple[NodeRecord, tuple[int, list[str]] | StaleWriteError]:
        record = self._known(record)
        for _ in range(2):  # a leased writer retries once if the node moved around the directory
            if record.generation != based_on and not leased:
                return self._refuse(agent, record, based_on)
            # Dirty copies of other agents are written back before the source moves on, so a
            # failing write-back leaves nothing half-done.
            others = [c.agent for c in record.holders(besides=agent)]
            stepped = record
            for other in others:
                stepped = self._step(stepped, other, CopyEvent.REMOTE_WRITE)
            try:
                generation = self.source.put(record.iri, node, record.generation)
            except StaleWriteError as exc:
                if exc.current_value is None:
                    return self._refuse(agent, record, based_on)
                record = self._moved_to(record, exc.current_value, exc.current_generation)
                continue
            mine = stepped.copies.get(agent)
            state = MesiState.INVALID if mine is None else mine.state
            row = transition(state, CopyEvent.LOCAL_WRITE, others_hold=bool(others))
            announced = others if Action.ANNOUNCE_INVALIDATION in row.actions else []
            stepped = stepped.at(generation, node)
            return stepped.with_copy(agent, row.state, generation), (generation, announced)
        return self._refuse(agent, record, based_on)

    def _known(self, record: NodeRecord) -> NodeRecord:
        """Return ``record``, or for a node the directory never saw, the source's state of it."""
        if record.generation > 0:
            return record
        try:
            value, generation = self.source.get(record.iri)
        except EntryNotFoundError:
            return record
        return self._moved_to(record, value, generation)

    def _refuse(
        self, agent: str, record: NodeRecord, based_on: int
    ) -> tuple[NodeRecord, StaleWriteError]:
        error = refused(record.iri, based_on, record.generation, record.value)
        mine = record.copies.get(agent)
        if mine is not None and mine.state is not MesiState.INVALID:
            record = self._step(record, agent, CopyEvent.REMOTE_WRITE)
        return record, error

    # -- batch commits (a source that writes several nodes at once) ------------------------------

    def commit(
        self,
        agent: str | None,
        bases: Mapping[str, int | None],
        current: SourceStep,
        apply: SourceStep,
    ) -> dict[str, int]:
        """Commit a change of several nodes, all or nothing, as one transition of each.

        ``current`` and then ``apply`` run inside the directory's transaction (one for all the
        nodes): ``current`` returns the source's state of the nodes and may refuse the change by
        raising (nothing is written then); ``apply`` makes the change at the source and returns
        the nodes' new state (a value of ``None``: deleted). Other agents' copies become
        ``INVALID`` (dirty ones written back first) and that is announced; the writer's copy of
        each node still present becomes ``MODIFIED``, of a deleted one ``INVALID``.

        Args:
            agent: the writer; ``None`` for a write from outside every agent's cache (the
                system's), which holds no copy afterwards.
            bases: every node of the change, with the generation the change was made from (0:
                the node must not exist) or ``None`` (unconditional).
            current: the source's state of the nodes, read in the transaction.
            apply: the change at the source.

        Raises:
            StaleWriteError: a node with a base has moved past it and ``agent`` holds no Write
                lease on it (the first such node, in IRI order); nothing was written and the
                writer's copies of the moved nodes are ``INVALID``.
        """
        change = self.change(agent, bases, None)
        self.commit_group([change], _CommitSteps(current, apply))
        self.finish(change)
        assert change.states is not None  # (``finish`` raised otherwise)
        return {iri: generation for iri, (_, generation) in change.states.items()}

    def change(
        self, agent: str | None, bases: Mapping[str, int | None], owner: Owner
    ) -> Change[Owner]:
        """Return a validated change of ``bases``'s nodes by ``agent``, for ``commit_group``.

        Args:
            agent: the writer (``None``: the system's write, see ``commit``).
            bases: every node of the change, with its base generation or ``None``.
            owner: the caller's own (``Change.owner``).
        """
        writer = None if agent is None else _check_agent(agent)
        checked: dict[str, int | None] = {}
        for iri, based in bases.items():
            checked[validate_iri(iri)] = based
            if based is not None:
                check_generation(based, what=f"the base generation of {iri!r}")
        return self.checked_change(writer, checked, owner)

    def checked_change(
        self, agent: str | None, bases: dict[str, int | None], owner: Owner
    ) -> Change[Owner]:
        """Return the change of ``bases``'s nodes by ``agent``, its input already validated.

        For a caller inside the package that validated the agent, the IRIs and the bases at
        its own boundary (the blackboard's writes) and hands over a ``bases`` of its own.
        """
        leased: list[str] = []
        if agent is not None:
            for iri, based in bases.items():
                # Unconditional writes (most) need no lease look-up.
                if based is not None and self._holds_lease(agent, iri):
                    leased.append(iri)
        return Change(agent, bases, frozenset(leased) if leased else _NOT_LEASED, owner)

    def commit_group(self, changes: Sequence[Change[Owner]], source: GroupSource[Owner]) -> None:
        """Commit several writers' changes in one directory transaction, each decided alone.

        The changes must touch disjoint nodes (``InvalidInputError`` otherwise): each is then
        decided exactly as if it were committed alone, in the group's order. Inside the
        transaction ``source.current`` reads the source's state of every node of the group and
        may refuse each change (rights, fences: its ``refusal``); then each change's bases are
        compared (a stale one is refused with ``StaleWriteError``) and a refused change changes
        nothing at the source; ``source.apply`` writes the accepted changes at once, returning
        each one's new states in order. A failure of either step rolls the whole transaction
        back and propagates. Each change is then completed by ``finish`` (on its writer's
        thread: it publishes).
        """
        # A partial of a bound method, not a closure: no cells, and one frame less per write.
        step = partial(self._group_change, changes, source)
        if len(changes) == 1:  # a lone change: no list of what it wrote gathered
            change = changes[0]
            touched, change.token = self.directory.update_many(sorted(change.bases), step)
            written = [] if change.states is None else list(change.states)
            self._own.committed(change.token, touched, written)
            return
        touched, token = self.directory.update_many(sorted(self._disjoint(changes)), step)
        written = []
        for change in changes:
            change.token = token
            if change.states is not None:
                written += change.states
        self._own.committed(token, touched, written)

    @staticmethod
    def _disjoint(changes: Sequence[Change[Owner]]) -> list[str]:
        """Return the IRIs of several changes; ``InvalidInputError`` if two share a node."""
        iris = [iri for change in changes for iri in change.bases]
        if len(set(iris)) != len(iris):
            raise InvalidInputError("the changes of a group commit must touch disjoint nodes")
        return iris

    def finish(self, change: Change[Owner]) -> None:
        """Complete a committed change: its copies noted, its invalidations announced.

        Raises:
            The change's refusal (``StaleWriteError``, or what the source's check raised); the
            writer's copies of its nodes are forgotten after a ``StaleWriteError``.
        """
        states = change.states
        if states is None:
            refusal = change.refusal
            if change.agent is not None and isinstance(refusal, StaleWriteError):
                for iri in change.bases:
                    self._forget((change.agent, iri))
            raise refusal if refusal is not None else InvalidInputError("change not committed")
        agent, token, announced = change.agent, change.token, change.announced
        for iri, (value, generation) in states.items():
            if agent is not None:
                if value is None:
                    self._forget((agent, iri))
                else:
                    self._remember((agent, iri), generation, value, token)
            if announced[iri]:
                self.bus.publish(
                    EventType.COPIES_INVALIDATED,
                    {
                        "iri": iri,
                        "generation": generation,
                        "writer": agent,
                        "agents": announced[iri],
                    },
                    source="coherence",
                )

    def _group_change(
        self,
        changes: Sequence[Change[Owner]],
        source: GroupSource[Owner],
        given: dict[str, NodeRecord],
    ) -> tuple[dict[str, NodeRecord], list[str]]:
        """The group's step in the directory: its new records, and the nodes they changed."""
        for change in changes:  # a group committed again alone starts afresh
            change.refusal = change.states = None
        now = source.current(given, changes)
        if len(changes) == 1 and _plain(changes[0], given, now):
            return self._plain_write(changes[0], _results(source.apply(changes, given), 1), given)
        records = dict(given)
        for iri, record in given.items():
            value, generation = now[iri]
            if value is not None or record.generation != 0:  # else absent and never seen
                records[iri] = self._synced(record, value, generation)
        accepted = [change for change in changes if self._admit(change, records)]
        if accepted:
            results = _results(source.apply(accepted, records), len(accepted))
            for index, change in enumerate(accepted):  # (``zip(strict=True)``: 4x the cost)
                self._wrote(change, results[index], records)
        return records, _touched(given, records)

    def _plain_write(
        self,
        change: Change[Owner],
        results: Sequence[Mapping[str, tuple[Node | None, int]]],
        given: dict[str, NodeRecord],
    ) -> tuple[dict[str, NodeRecord], list[str]]:
        """The step of a lone ``_plain`` change once written: what ``_group_change`` makes of
        it, without the steps it needs none of (syncing, admitting, stepping other copies)."""
        agent = change.agent
        assert agent is not None  # (``_plain``)
        states = results[0]
        records: dict[str, NodeRecord] = {}  # the written ones: the others stay as they were
        announced: dict[str, list[str]] = {}
        touched: list[str] = []  # (``_touched``, inline: the same test)
        for iri, (value, generation) in states.items():  # (no other holders: ``_plain``)
            record = given[iri]
            new, announced[iri] = self._written(agent, record, value, generation, [])
            records[iri] = new
            if new is not record and (new.generation != record.generation or new != record):
                touched.append(iri)
        change.states, change.announced = dict(states), announced
        return records, touched

    def _admit(self, change: Change[Owner], records: dict[str, NodeRecord]) -> bool:
        """Decide one change of a group: refused (its ``refusal`` says why), or accepted with
        the agents whose copies of each node it invalidates (``announced``; those copies
        stepped in ``records``)."""
        if change.refusal is not None:  # the source's own check refused it
            return False
        bases, agent = change.bases, change.agent
        stale = []
        for iri, based in bases.items():
            if _stale(based, _present(records[iri]), iri, change.leased):
                stale.append(iri)
        if stale:
            stale.sort()
            first = records[stale[0]]
            change.refusal = refused(first.iri, bases[stale[0]] or 0, _present(first), first.value)
            if agent is not None:
                for iri in stale:
                    records[iri] = self._refuse(agent, records[iri], 0)[0]
            return False
        others: dict[str, list[str]] = {}
        for iri in bases:
            record = records[iri]
            if not record.copies:  # the common case: a node no agent holds
                others[iri] = []
                continue
            others[iri] = [c.agent for c in record.holders(besides=agent)]
            for other in others[iri]:
                record = self._step(record, other, CopyEvent.REMOTE_WRITE)
            records[iri] = record
        change.announced = others
        return True

    def _wrote(
        self,
        change: Change[Owner],
        states: Mapping[str, tuple[Node | None, int]],
        records: dict[str, NodeRecord],
    ) -> None:
        """Take an accepted change's records to the states the source wrote; keep them on it."""
        agent, others = change.agent, change.announced
        announced: dict[str, list[str]] = {}
        for iri, (value, generation) in states.items():
            records[iri], announced[iri] = self._written(
                agent, records[iri], value, generation, others[iri]
            )
        change.states, change.announced = dict(states), announced

    def _written(
        self,
        agent: str | None,
        record: NodeRecord,
        value: Node | None,
        generation: int,
        others: list[str],
    ) -> tuple[NodeRecord, list[str]]:
        """Return ``record`` after its change to ``(value, generation)``, and whom to tell."""
        mine = None if agent is None else record.copies.get(agent)
        if agent is None or (value is None and mine is None):
            return record.at(generation, value), others
        if value is None:  # deleted: the deleter's copy goes too (it chose to drop the value)
            assert mine is not None
            return record.at(generation, None).with_copy(
                agent, MesiState.INVALID, mine.generation
            ), others
        state, announces = _LOCAL_WRITES[_INVALID if mine is None else mine.state][bool(others)]
        copies = dict(record.copies)  # moved and the writer's copy set: one record built
        copies[agent] = _new_tuple(Copy, (agent, state, generation))  # (no __new__'s frame)
        new = _new_tuple(NodeRecord, (record.iri, generation, value, copies))
        return new, (others if announces else [])

    def _synced(self, record: NodeRecord, value: Node | None, generation: int) -> NodeRecord:
        """Return ``record`` moved to the source's state (other copies invalid if it moved)."""
        if value is None and record.generation == 0:
            return record  # absent, and never seen
        if value is record.value and generation == record.generation:
            return record  # the record's own value (``current`` hands it back): nothing moved
        if value is not None:
            return self._moved_to(record, value, generation)
        if generation < record.generation:
            return self._moved_to(record, {}, generation)  # raises: moved back
        if generation > record.generation or record.value is not None:
            for other in record.holders():
                record = self._step(record, other.agent, CopyEvent.REMOTE_WRITE)
        return record.at(generation, None)

    # -- write-back, eviction, lease expiry, crash ---------------------------------------------

    def write_back(self, agent: str, iri: str) -> None:
        """Write ``agent``'s dirty copy of ``iri`` back to L0 (M -> E or S); clean copies: no-op."""
        key = (_check_agent(agent), validate_iri(iri))
        self._update(iri, lambda r: (self._step(r, agent, CopyEvent.WRITE_BACK), None))
        # The next read revalidates against the directory (cheap): a token taken here could
        # bless a copy that another agent's write invalidated before this call.
        self._forget(key)

    def evict(self, agent: str, iri: str) -> None:
        """Drop ``agent``'s copy of ``iri``, writing a dirty one back first."""
        self._drop(_check_agent(agent), validate_iri(iri), CopyEvent.EVICTION)

    def expire_lease(self, agent: str, iri: str) -> None:
        """Invalidate the copy ``agent`` held under a lease that lapsed (dirty: written back)."""
        self._drop(_check_agent(agent), validate_iri(iri), CopyEvent.LEASE_EXPIRY)

    def drop_agent(self, agent: str) -> list[str]:
        """Evict every copy ``agent`` holds (it left or crashed); return their IRIs."""
        iris = self.directory.holdings(_check_agent(agent))
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
            touched.extend(_touched(old, new))
            return new, result

        result, token = self.directory.update_many(iris, noted)
        if touched:  # the token is this transaction's own: nobody else committed in it
            self._own.record(token, touched)
        return result, token

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

    # -- the process-local copies ----------------------------------------------------------------

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

    def _remember(
        self, key: tuple[str, str], generation: int, value: Node, token: Hashable
    ) -> None:
        held = (generation, _encoded(value), token)
        with self._lock:
            self._held[key] = held

    def _forget(self, key: tuple[str, str]) -> None:
        with self._lock:
            self._held.pop(key, None)
