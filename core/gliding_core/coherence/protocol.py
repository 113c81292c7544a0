"""L2 coherence: the MESI protocol of one agent's copy of a shared node, as a table of data.

A row maps ``(state of this agent's copy, event, whether another agent holds a valid copy)`` to
the copy's next state and the actions the coordinator performs, in order. An agent without a
copy is in ``INVALID``. The table is total (every state x event x sharing has a row), pure (no
row reads anything but its key) and is what the coordinator executes; the tests enumerate it.

What the states mean here: the blackboard holds every committed value, so a ``MODIFIED`` copy is
one whose last write is on the blackboard but not yet written back to L0; ``EXCLUSIVE`` and
``SHARED`` copies are clean, ``EXCLUSIVE`` with no other valid copy.

Invariants the rows keep (checked by the tests over random runs): at most one copy of a node is
``MODIFIED`` or ``EXCLUSIVE``, and then every other copy is ``INVALID``; a write takes the
writer's copy to ``MODIFIED`` and every other copy to ``INVALID``; only an ``EXCLUSIVE`` (or
already ``MODIFIED``) writer stays off the bus; a dirty copy is written back before it is
downgraded, dropped or overwritten by another agent.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from gliding_core.errors import InvalidInputError
from gliding_core.jsonld import preview
from gliding_core.store.entry import MesiState

# The protocol's own letters.
M, E, S, I = MesiState.MODIFIED, MesiState.EXCLUSIVE, MesiState.SHARED, MesiState.INVALID  # noqa: E741


class CopyEvent(str, Enum):
    """What happens to one agent's copy of a node."""

    LOCAL_READ = "local_read"  # this agent reads the node
    LOCAL_WRITE = "local_write"  # this agent commits a write to the node
    REMOTE_READ = "remote_read"  # another agent read-misses on the node
    REMOTE_WRITE = "remote_write"  # another agent commits a write to the node
    WRITE_BACK = "write_back"  # this agent's dirty value is written back to L0
    EVICTION = "eviction"  # this agent drops its copy (or the agent is gone)
    LEASE_EXPIRY = "lease_expiry"  # the lease this agent held the copy under lapsed


class Action(str, Enum):
    """What the coordinator does when a row fires, in the row's order."""

    FETCH = "fetch"  # bring the current value to this agent (whole, or the change)
    WRITE_BACK = "write_back"  # write the node's current value back to L0 first
    ANNOUNCE_INVALIDATION = "announce_invalidation"  # other copies to I, published on the bus


@dataclass(frozen=True, slots=True)
class Transition:
    """The result of one row: the copy's next state and the actions to perform, in order."""

    state: MesiState
    actions: tuple[Action, ...] = ()


FETCH, WRITE_BACK, ANNOUNCE = Action.FETCH, Action.WRITE_BACK, Action.ANNOUNCE_INVALIDATION
_R, _W = CopyEvent.LOCAL_READ, CopyEvent.LOCAL_WRITE
_RR, _RW = CopyEvent.REMOTE_READ, CopyEvent.REMOTE_WRITE
_WB, _EV, _LX = CopyEvent.WRITE_BACK, CopyEvent.EVICTION, CopyEvent.LEASE_EXPIRY

# (state, event): (next state and actions when no other agent holds a valid copy,
#                  next state and actions when another agent does).
_ROWS: dict[tuple[MesiState, CopyEvent], tuple[Transition, Transition]] = {
    # A read hit changes nothing; a miss fetches, alone -> E, beside other holders -> S (the
    # other holders' REMOTE_READ rows write a MODIFIED copy back first).
    (M, _R): (Transition(M), Transition(M)),
    (E, _R): (Transition(E), Transition(E)),
    (S, _R): (Transition(S), Transition(S)),
    (I, _R): (Transition(E, (FETCH,)), Transition(S, (FETCH,))),
    # A write ends in M. From E or M nobody else holds a valid copy: no bus traffic. From S or
    # I the other valid copies are invalidated and that is announced. A write never fetches:
    # it names the generation it is based on, and a stale base is refused instead.
    (M, _W): (Transition(M), Transition(M, (ANNOUNCE,))),
    (E, _W): (Transition(M), Transition(M, (ANNOUNCE,))),
    (S, _W): (Transition(M), Transition(M, (ANNOUNCE,))),
    (I, _W): (Transition(M), Transition(M, (ANNOUNCE,))),
    # Another agent's read miss: a MODIFIED copy is written back first; both end up SHARED.
    (M, _RR): (Transition(S, (WRITE_BACK,)), Transition(S, (WRITE_BACK,))),
    (E, _RR): (Transition(S), Transition(S)),
    (S, _RR): (Transition(S), Transition(S)),
    (I, _RR): (Transition(I), Transition(I)),
    # Another agent's write: every copy becomes INVALID, a dirty one written back first.
    (M, _RW): (Transition(I, (WRITE_BACK,)), Transition(I, (WRITE_BACK,))),
    (E, _RW): (Transition(I), Transition(I)),
    (S, _RW): (Transition(I), Transition(I)),
    (I, _RW): (Transition(I), Transition(I)),
    # Write-back: M -> E (alone) or S (beside other readers); a clean copy has nothing to do.
    (M, _WB): (Transition(E, (WRITE_BACK,)), Transition(S, (WRITE_BACK,))),
    (E, _WB): (Transition(E), Transition(E)),
    (S, _WB): (Transition(S), Transition(S)),
    (I, _WB): (Transition(I), Transition(I)),
    # Eviction and lease expiry drop the copy; a dirty one is written back first, so a crashed
    # or silent agent loses nothing it committed.
    (M, _EV): (Transition(I, (WRITE_BACK,)), Transition(I, (WRITE_BACK,))),
    (E, _EV): (Transition(I), Transition(I)),
    (S, _EV): (Transition(I), Transition(I)),
    (I, _EV): (Transition(I), Transition(I)),
    (M, _LX): (Transition(I, (WRITE_BACK,)), Transition(I, (WRITE_BACK,))),
    (E, _LX): (Transition(I), Transition(I)),
    (S, _LX): (Transition(I), Transition(I)),
    (I, _LX): (Transition(I), Transition(I)),
}

TRANSITIONS: dict[tuple[MesiState, CopyEvent, bool], Transition] = {
    (state, event, shared): rows[int(shared)]
    for (state, event), rows in _ROWS.items()
    for shared in (False, True)
}
"""The protocol: ``(state, event, another agent holds a valid copy) -> Transition``."""


def transition(state: MesiState, event: CopyEvent, *, others_hold: bool) -> Transition:
    """Return the row for a copy in ``state`` meeting ``event``.

    Args:
        state: the copy's state (``INVALID`` when the agent holds no copy).
        event: what happens to the copy.
        others_hold: whether another agent holds a valid (M, E or S) copy of the node.
    """
    if not isinstance(others_hold, bool):
        raise InvalidInputError(f"others_hold must be a bool, got {preview(others_hold)}")
    try:
        kind = CopyEvent(event)
    except ValueError:
        known = [e.value for e in CopyEvent]
        raise InvalidInputError(f"unknown copy event {preview(event)}; known: {known}") from None
    return TRANSITIONS[MesiState.parse(state), kind, others_hold]


def is_valid(state: MesiState) -> bool:
    """Return whether a copy in ``state`` may be served without fetching (M, E or S)."""
    return state is not MesiState.INVALID
