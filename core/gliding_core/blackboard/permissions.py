"""L2: who may do what on the blackboard: role x area x operation, as data.

The default matrix is the design's, with its two levels split into the four operations: a role that
could write an area may create, read, update and delete there; a role that could read it may read.
The reference wrote coordination state as the system, outside the matrix; here agents reach it
through their handles, so every role also reads the task and agent areas, changes its task's status
(update on ``tasks``), and publishes and reads coordination messages; the planner also registers
subtasks::

    role   area        operations
    plan   plan        create read update delete
    plan   knowledge   read
    do     execution   create read update delete
    do     knowledge   read
    check  review      create read update delete
    check  execution   read
    act    decision    create read update delete
    act    review      read
    all    tasks       read update (plan: create too)
    all    agents      read
    all    messages    create read

Invariants:
- What the matrix does not grant is refused: an unknown role, area or operation has no rights.
- ``system`` is not a role of the matrix: the blackboard itself writes as the system, outside
  it, and no agent handle can be made with that role.
- The matrix is immutable once built; a different one is passed in whole (configurable).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from enum import Enum

from gliding_core.blackboard.vocabulary import AREAS, check_area
from gliding_core.errors import InvalidInputError, PermissionDeniedError
from gliding_core.jsonld import preview


class Operation(str, Enum):
    """An operation on a node of an area."""

    CREATE = "create"
    READ = "read"
    UPDATE = "update"
    DELETE = "delete"

    @classmethod
    def parse(cls, value: object) -> Operation:
        """Return the operation named by ``value`` (a member or its name)."""
        if isinstance(value, cls):
            return value
        if isinstance(value, str):
            for op in cls:
                if value.strip().lower() == op.value:
                    return op
        raise InvalidInputError(
            f"unknown operation {preview(value)}; expected one of {[o.value for o in cls]}"
        )


_ALL = frozenset(Operation)
_READ = frozenset({Operation.READ})

_C, _R, _U = Operation.CREATE, Operation.READ, Operation.UPDATE
_COORDINATION = {
    "tasks": frozenset({_R, _U}),
    "agents": _READ,
    "messages": frozenset({_C, _R}),
}

DEFAULT_MATRIX: Mapping[str, Mapping[str, frozenset[Operation]]] = {
    "plan": {
        "plan": _ALL,
        "knowledge": _READ,
        **_COORDINATION,
        "tasks": frozenset({_C, _R, _U}),
    },
    "do": {"execution": _ALL, "knowledge": _READ, **_COORDINATION},
    "check": {"review": _ALL, "execution": _READ, **_COORDINATION},
    "act": {"decision": _ALL, "review": _READ, **_COORDINATION},
}

# Other names of the four roles (the reference's abbreviations and aliases).
ROLE_ALIASES = {
    "pa": "plan",
    "planner": "plan",
    "da": "do",
    "executor": "do",
    "ca": "check",
    "reviewer": "check",
    "aa": "act",
    "decision": "act",
}

Rules = Mapping[str, Mapping[str, Iterable[Operation | str]]]


class PermissionMatrix:
    """The rights of each role on each area.

    Args:
        rules: ``{role: {area: [operation, ...]}}``; the default matrix when omitted.

    Raises:
        InvalidInputError: a role is empty or ``system``, an area or an operation is unknown.
    """

    def __init__(self, rules: Rules | None = None) -> None:
        source = DEFAULT_MATRIX if rules is None else rules
        if not isinstance(source, Mapping):
            raise InvalidInputError(f"permission rules must be a mapping, got {preview(source)}")
        self._rules: dict[str, dict[str, frozenset[Operation]]] = {}
        for role, areas in source.items():
            name = _role_name(role)
            if not isinstance(areas, Mapping):
                raise InvalidInputError(f"rules of role {role!r} must be a mapping of areas")
            self._rules[name] = {
                check_area(area): frozenset(Operation.parse(op) for op in _ops(ops, role, area))
                for area, ops in areas.items()
            }

    @property
    def roles(self) -> list[str]:
        """The roles the matrix knows, sorted."""
        return sorted(self._rules)

    def role(self, name: object) -> str:
        """Return the matrix's name for a role (aliases resolved).

        Raises:
            InvalidInputError: the matrix does not know the role.
        """
        key = _role_name(name)
        key = ROLE_ALIASES.get(key, key)
        if key not in self._rules:
            raise InvalidInputError(f"unknown role {name!r}; the matrix knows {self.roles}")
        return key

    def allows(self, role: str, area: str, operation: Operation | str) -> bool:
        """Return whether ``role`` may perform ``operation`` on nodes of ``area``."""
        key = ROLE_ALIASES.get(role, role)
        op = operation if isinstance(operation, Operation) else Operation.parse(operation)
        return op in self._rules.get(key, {}).get(area, frozenset())

    def check(self, role: str, area: str, operation: Operation | str, *, graph: str) -> None:
        """Raise ``PermissionDeniedError`` unless ``role`` may do ``operation`` in ``area``."""
        op = operation if isinstance(operation, Operation) else Operation.parse(operation)
        if not self.allows(role, area, op):
            raise PermissionDeniedError(
                f"role {role!r} may not {op.value} in the {area!r} area (graph {graph})",
                role=role,
                graph=graph,
                operation=op.value,
            )

    def areas(self, role: str, operation: Operation | str = Operation.READ) -> list[str]:
        """Return the areas where ``role`` may perform ``operation``, in ``AREAS`` order."""
        return [a for a in AREAS if self.allows(role, a, operation)]

    def as_dict(self) -> dict[str, dict[str, list[str]]]:
        """Return the matrix as plain data (for display and configuration files)."""
        return {
            role: {area: sorted(op.value for op in ops) for area, ops in areas.items()}
            for role, areas in sorted(self._rules.items())
        }


def _role_name(role: object) -> str:
    if not isinstance(role, str) or not role.strip():
        raise InvalidInputError(f"a role must be a non-empty string, got {preview(role)}")
    name = role.strip().lower()
    if name == "system":
        raise InvalidInputError("'system' is the blackboard itself, not a role of the matrix")
    return name


def _ops(ops: object, role: object, area: object) -> Iterable[object]:
    if isinstance(ops, (str, bytes)) or not isinstance(ops, Iterable):
        raise InvalidInputError(
            f"operations of role {role!r} on area {area!r} must be a list, got {preview(ops)}"
        )
    return ops
