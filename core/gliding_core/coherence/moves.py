"""L2 coherence: the moves of a node's directory record that every path of the coordinator makes.

A record moves when a copy steps through the transition table (``step``, which performs the
row's write-back first), when it follows the source to a newer generation (``moved_to``,
``synced``), and when a stale write is refused (``refuse``). Reads, single writes, group
commits, write-backs and evictions are made of these moves; apart from the write-back the table
asks for, each is a pure function of the record.

Invariants:
- Every dirty value is written back (``write_back``) before its copy is downgraded, dropped or
  overwritten: ``step`` performs its row's write-back before the copy's state moves, inside the
  directory's transaction, so a write-back that fails moves nothing.
- A record never moves back: a source reporting an older generation than its record holds is
  refused (``InvalidInputError``), and a record moved forward leaves no other copy valid.
"""

from __future__ import annotations

from collections.abc import Callable

from gliding_core.coherence.directory import NodeRecord
from gliding_core.coherence.node_sources import refused
from gliding_core.coherence.protocol import TRANSITIONS, Action, CopyEvent
from gliding_core.errors import InvalidInputError, StaleWriteError
from gliding_core.jsonld import Node
from gliding_core.store.entry import MesiState

WriteBack = Callable[[str, Node, int], None]
"""Persist ``(iri, value, generation)`` to L0."""


class RecordMoves:
    """The record moves of one coordinator, with the write-back its table rows perform.

    Args:
        write_back: persists a dirty value to L0 (``None``: dirty values stay at the source).
    """

    def __init__(self, write_back: WriteBack | None) -> None:
        self.write_back = write_back

    def step(self, record: NodeRecord, agent: str, event: CopyEvent) -> NodeRecord:
        """Apply ``event`` to ``agent``'s copy in ``record``, performing the row's write-back."""
        copy = record.copies.get(agent)
        state = MesiState.INVALID if copy is None else copy.state
        row = TRANSITIONS[state, event, bool(record.holders(besides=agent))]
        dirty = Action.WRITE_BACK in row.actions and record.value is not None
        if dirty and self.write_back is not None:
            self.write_back(record.iri, dict(record.value or {}), record.generation)
        if copy is None:
            return record
        return record.with_copy(agent, row.state, copy.generation)

    def moved_to(self, record: NodeRecord, value: Node, generation: int) -> NodeRecord:
        """Return ``record`` at the source's ``generation`` (every other copy invalid if moved)."""
        if generation < record.generation:
            raise InvalidInputError(
                f"the node source moved {record.iri!r} back from generation "
                f"{record.generation} to {generation}"
            )
        if generation > record.generation:
            for other in record.holders():
                record = self.step(record, other.agent, CopyEvent.REMOTE_WRITE)
        return record.at(generation, value)

    def synced(self, record: NodeRecord, value: Node | None, generation: int) -> NodeRecord:
        """Return ``record`` moved to the source's state (``value`` ``None``: absent)."""
        if value is None and record.generation == 0:
            return record  # absent, and never seen
        if value is record.value and generation == record.generation:
            return record  # the record's own value (the source hands it back): nothing moved
        if value is not None:
            return self.moved_to(record, value, generation)
        if generation < record.generation:
            return self.moved_to(record, {}, generation)  # raises: moved back
        if generation > record.generation or record.value is not None:
            for other in record.holders():
                record = self.step(record, other.agent, CopyEvent.REMOTE_WRITE)
        return record.at(generation, None)

    def refuse(
        self, agent: str, record: NodeRecord, based_on: int
    ) -> tuple[NodeRecord, StaleWriteError]:
        """Return ``record`` with ``agent``'s copy invalid, and the refusal of its stale write."""
        error = refused(record.iri, based_on, record.generation, record.value)
        mine = record.copies.get(agent)
        if mine is not None and mine.state is not MesiState.INVALID:
            record = self.step(record, agent, CopyEvent.REMOTE_WRITE)
        return record, error
