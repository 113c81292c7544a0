"""L2 coherence: batch and group commits, several nodes and several writers in one transaction.

``GroupCommits`` is the part of a coordinator (``Coherence.commits``) that commits for a source
that writes batches (the blackboard): ``commit`` for one writer's change of several nodes, and
``change``, ``commit_group`` and ``finish`` for the changes of several writers queued together.
The rules of a single write (``Coherence.write``) hold here for each node. It works on the
coordinator's directory, record moves (``moves``), held copies (``copies``) and own changes
(``own_changes``), which it is given.

Invariants:
- ``commit`` changes several nodes in one directory transaction (``Directory.update_many``),
  all or nothing, for a source that writes batches (the blackboard); the same rules hold per
  node, and a write from outside every agent's cache (the system's) invalidates every copy.
- ``commit_group`` commits several writers' changes of disjoint nodes in one transaction and
  one source step (a ``GroupSource``, made once by its caller); each is decided as if alone
  (a refused one changes nothing at the source and fails only itself), and each is completed
  by ``finish`` on its writer's thread. A lone change is a group of one: it takes the same
  path.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping, Sequence
from types import MappingProxyType
from typing import Generic, Protocol, TypeVar

from gliding_core.bus import EventBus, EventType
from gliding_core.coherence.copies import HeldCopies, check_agent
from gliding_core.coherence.directory import Copy, Directory, NodeRecord
from gliding_core.coherence.moves import RecordMoves
from gliding_core.coherence.node_sources import check_generation, refused
from gliding_core.coherence.own_changes import OwnChanges, touched_nodes
from gliding_core.coherence.protocol import TRANSITIONS, Action, CopyEvent
from gliding_core.errors import InvalidInputError, StaleWriteError
from gliding_core.jsonld import Node, validate_iri
from gliding_core.store.entry import MesiState

LeaseCheck = Callable[[str, str], bool]
"""Answer whether ``(agent, iri)``'s agent holds a Write lease on the node."""

SourceStep = Callable[[Mapping[str, NodeRecord]], Mapping[str, tuple[Node | None, int]]]
"""One step of a batch commit at the source: the nodes' records in, their (value or ``None``
when absent, generation) out."""

T = TypeVar("T")
Owner = TypeVar("Owner")

_NOT_LEASED: frozenset[str] = frozenset()
_NOBODY: Mapping[str, list[str]] = MappingProxyType({})


class Change(Generic[Owner]):
    """One writer's change of several nodes, decided alone inside a group commit.

    Made by ``GroupCommits.change``. ``owner`` is the caller's own (what it queued
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


def _present(record: NodeRecord) -> int:
    """Return the generation of the node as it exists now (0: absent, or deleted)."""
    return record.generation if record.value is not None else 0


def _stale(based: int | None, present: int, iri: str, leased: frozenset[str]) -> bool:
    """Return whether ``iri``'s base ``based`` is stale: given, not the node's ``present``
    generation, and not covered by a write lease the writer holds."""
    return based is not None and based != present and iri not in leased


def _results(results: Sequence[T], wanted: int) -> Sequence[T]:
    """Return a group's source step results; ``InvalidInputError`` unless one per change."""
    if len(results) != wanted:
        raise InvalidInputError(
            f"a group's source step returned {len(results)} results for {wanted} changes"
        )
    return results


def announce(
    bus: EventBus, iri: str, generation: int, writer: str | None, agents: list[str]
) -> None:
    """Publish that ``writer``'s write of ``iri`` at ``generation`` invalidated ``agents``."""
    bus.publish(
        EventType.COPIES_INVALIDATED,
        {"iri": iri, "generation": generation, "writer": writer, "agents": agents},
        source="coherence",
    )


class GroupCommits:
    """The batch and group commits of a coherence coordinator (``Coherence.commits``).

    Args:
        directory: the coordinator's directory.
        moves: its record moves (with its write-back).
        held: the copies its agents hold in this process.
        own: the directory changes it committed itself.
        bus: where invalidations are announced.
        holds_lease: whether an agent holds a Write lease on a node.
    """

    def __init__(
        self,
        directory: Directory,
        *,
        moves: RecordMoves,
        held: HeldCopies,
        own: OwnChanges,
        bus: EventBus,
        holds_lease: LeaseCheck,
    ) -> None:
        self.directory, self.moves, self.held, self.own = directory, moves, held, own
        self.bus, self.holds_lease = bus, holds_lease

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
        writer = None if agent is None else check_agent(agent)
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
                if based is not None and self.holds_lease(agent, iri):
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

        def step(given: dict[str, NodeRecord]) -> tuple[dict[str, NodeRecord], list[str]]:
            return self._group_change(changes, source, given)

        touched, token = self.directory.update_many(sorted(self._disjoint(changes)), step)
        written: list[str] = []
        for change in changes:
            change.token = token
            if change.states is not None:
                written += change.states
        self.own.committed(token, touched, written)

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
                    self.held.forget((change.agent, iri))
            raise refusal if refusal is not None else InvalidInputError("change not committed")
        agent, token, announced = change.agent, change.token, change.announced
        for iri, (value, generation) in states.items():
            if agent is not None:
                if value is None:
                    self.held.forget((agent, iri))
                else:
                    self.held.remember((agent, iri), generation, value, token)
            if announced[iri]:
                announce(self.bus, iri, generation, agent, announced[iri])

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
        records = dict(given)
        for iri, record in given.items():
            value, generation = now[iri]
            if value is not None or record.generation != 0:  # else absent and never seen
                records[iri] = self.moves.synced(record, value, generation)
        accepted = [change for change in changes if self._admit(change, records)]
        if accepted:
            results = _results(source.apply(accepted, records), len(accepted))
            for change, states in zip(accepted, results, strict=True):
                self._wrote(change, states, records)
        return records, touched_nodes(given, records)

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
                    records[iri] = self.moves.refuse(agent, records[iri], 0)[0]
            return False
        others: dict[str, list[str]] = {}
        for iri in bases:
            record = records[iri]
            others[iri] = [c.agent for c in record.holders(besides=agent)]
            for other in others[iri]:
                record = self.moves.step(record, other, CopyEvent.REMOTE_WRITE)
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
            return record.at(
                generation, None, Copy(agent, MesiState.INVALID, mine.generation)
            ), others
        state = MesiState.INVALID if mine is None else mine.state
        # The table itself, as ``RecordMoves.step`` reads it: ``transition`` validates a
        # caller's state and event, and these are the record's own.
        row = TRANSITIONS[state, CopyEvent.LOCAL_WRITE, bool(others)]
        new = record.at(generation, value, Copy(agent, row.state, generation))
        return new, (others if Action.ANNOUNCE_INVALIDATION in row.actions else [])
