"""L2: what an agent's lease needs, and which leases stand in an agent's way.

A lease needs the right it protects, on a node of the agent's own task: a Read lease the right
to read the node's area, a Write or Exclusive lease the right to update it (a mirrored area,
which agents never write, is never leased for writing). An IRI with no node yet may be leased
in any mode by a role that may create in some area of its task (no area is named: the node
may go to any), first come, first served.

A lease never protects anything against another task, nor a right its holder lacks: when a
write or delete checks the leases on a node, a lease whose holder (a registered agent) works on
another task, or whose role may not update the area the node is in or goes to, does not block
it; a lease of a holder that is no registered agent (code that took it through the lease table)
does. A lease on an existing node ends such leases when it is granted (``LeaseTable``'s
``void``). So an agent squatting on a node, or on an IRI before its node exists, never blocks
the owner's write, and once the node exists, not the owner's lease either.

A refusal (its message, its ``holders``) names no agent of another task: such a holder is
``OTHER_TASK_HOLDER``. A refused lease does not say where the node is (which area, whether
another task holds it).

Invariants: the rules read only the permission matrix, the node as the blackboard holds it
(before a grant) and the agent registry, so a check of a write's leases (under the
blackboard's single writer) and a ``void`` (inside the lease table's transaction) take no lock
but the coordination database's, which is always the innermost.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from gliding_core.blackboard.coordination.leases import (
    Lease,
    LeaseMode,
    Void,
    check_mode,
    conflict_error,
)
from gliding_core.blackboard.permissions import Operation, PermissionMatrix
from gliding_core.blackboard.records import BoardNode
from gliding_core.blackboard.sparql import MIRRORED_AREAS
from gliding_core.blackboard.validation import check_iri
from gliding_core.blackboard.vocabulary import area_in_task
from gliding_core.errors import (
    AgentNotFoundError,
    LeaseConflictError,
    LeaseTimeoutError,
    PermissionDeniedError,
)

if TYPE_CHECKING:
    from gliding_core.blackboard.board import Blackboard
    from gliding_core.blackboard.coordination.agents import Agent

OTHER_TASK_HOLDER = "(an agent of another task)"
"""How a refusal names the holder of a conflicting lease who works on another task."""


class LeaseRights:
    """The lease rules of one agent: its role on its task, on a blackboard.

    Args:
        board: the blackboard (its matrix, its nodes, its coordination layer's agents).
        role: the agent's role (as the matrix names it).
        task: the agent's task.
    """

    def __init__(self, board: Blackboard, *, role: str, task: str) -> None:
        self.board, self.role, self.task = board, role, task

    def leasable(self, resource: object, mode: object) -> tuple[str, LeaseMode, Void | None]:
        """Return the IRI and mode of a lease the agent may take, and the leases it ends.

        Raises:
            InvalidInputError: ``resource`` is not an IRI or ``mode`` no lease mode.
            PermissionDeniedError: the IRI is a node of another task, or of an area where the
                role lacks the right the mode protects, or (no node) the role may create in no
                area; the message names no area and no other task.
        """
        iri, asked = check_iri(resource, "lease resource"), check_mode(mode)
        node = self.board.read(iri)
        operation = Operation.READ if asked is LeaseMode.READ else Operation.UPDATE
        if node is None:
            if creatable(self.board.permissions, self.role):
                return iri, asked, None
            areas: list[str] = []
        else:
            areas = self.areas_of(node)
        if areas and self._may(areas[0], operation):
            return iri, asked, lambda lease: not self.guards(lease, areas)
        raise PermissionDeniedError(
            f"role {self.role!r} may not take a {asked.value} lease on {iri!r}: a lease needs"
            f" the right it protects ({operation.value}) on a node of the agent's task"
            f" {self.task!r}, or (no node yet) a role that may create in its task",
            role=self.role,
            graph="*",
            operation=operation.value,
        )

    def guards(self, lease: Lease, areas: Sequence[str]) -> bool:
        """Return whether ``lease`` protects a right its holder has on a node of the task.

        ``areas``: where the node is (or goes). A holder that is no registered agent (code
        using the lease table) is trusted.
        """
        holder = self._holder(lease.holder)
        if holder is None:
            return True
        if holder.task != self.task:
            return False
        operation = Operation.READ if lease.mode is LeaseMode.READ else Operation.UPDATE
        return any(self.board.permissions.allows(holder.role, a, operation) for a in areas)

    def areas_of(self, node: BoardNode) -> list[str]:
        """Return ``[area]`` of the task that holds ``node``, or ``[]`` (another task's)."""
        area = area_in_task(node.graph, self.task)
        return [] if area is None else [area]

    def shown(self, error: LeaseConflictError, mode: LeaseMode) -> LeaseConflictError:
        """Return ``error`` with every holder of another task named ``OTHER_TASK_HOLDER``."""
        holders = tuple(
            (name if self._may_name(name) else OTHER_TASK_HOLDER, held)
            for name, held in error.holders
        )
        if holders == error.holders:
            return error
        timed_out = isinstance(error, LeaseTimeoutError)
        return conflict_error(error.resource, mode, holders, timed_out=timed_out)

    def _may(self, area: str, operation: Operation) -> bool:
        """Return whether the role may ``operation`` in ``area`` (an update: not mirrored)."""
        if operation is Operation.UPDATE and area in MIRRORED_AREAS:
            return False
        return self.board.permissions.allows(self.role, area, operation)

    def _may_name(self, name: str) -> bool:
        """Return whether a holder may be named to the agent: not an agent of another task."""
        holder = self._holder(name)
        return holder is None or holder.task == self.task

    def _holder(self, name: str) -> Agent | None:
        """Return the registered agent ``name``, or ``None`` (a holder that is no agent; a
        board without a coordination layer registers none)."""
        coordination = self.board.coordination
        if coordination is None:
            return None
        try:
            return coordination.agents.get(name)
        except AgentNotFoundError:
            return None


def creatable(matrix: PermissionMatrix, role: str) -> list[str]:
    """Return the areas where ``role`` may create nodes (agents never write mirrored ones)."""
    return [a for a in matrix.areas(role, Operation.CREATE) if a not in MIRRORED_AREAS]
