"""L2: the names the blackboard's queries use: graphs of task areas, task roots, types.

The checks of SPARQL text are ``sparql_check``'s.

Invariants:
- The graphs a read of a task's areas sees are ``task_graphs``'s: each area's graph of the
  task, except the ``tasks`` area, which is its root task's (tasks are mirrored into the
  ``tasks`` area of their tree's root, so every task of a tree reads the ``Task`` nodes of the
  tree). ``TaskRoots`` finds the root in the task registry; a task not registered is its own
  root, and a registered task's root, which does not change while it is registered, is looked
  up once (until a task is released: it may come back under another root).
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import TYPE_CHECKING, Protocol

from gliding_core.blackboard.coordination.tasks import TASKS_AREA
from gliding_core.blackboard.vocabulary import AREAS, VOCAB, area_graph, check_area
from gliding_core.errors import InvalidInputError, TaskNotFoundError
from gliding_core.jsonld import preview

if TYPE_CHECKING:
    from gliding_core.blackboard.board import Blackboard

MIRRORED_AREAS = frozenset({"tasks", "agents", "messages"})
"""Areas the coordination layer writes; agents reach them through their handle's operations."""


class FenceChecker(Protocol):
    """What a guarded write needs from the lease table (``LeaseTable.check_fence``)."""

    def check_fence(self, resource: str, holder: str, token: int) -> None:
        """Raise unless ``token`` is the newest one granted for ``resource`` to ``holder``."""
        ...


def type_iri(name: str) -> str:
    """Return the IRI of a type given as a vocabulary term (``"Task"``) or an absolute IRI."""
    if not isinstance(name, str) or not name:
        raise InvalidInputError(f"a type must be a non-empty string, got {preview(name)}")
    return name if ":" in name else VOCAB + name


def task_graphs(task: str, areas: Sequence[str] = AREAS, *, root: str | None = None) -> list[str]:
    """Return the named graphs of a task's areas; the ``tasks`` area is ``root``'s when given.

    Args:
        task: the task's IRI.
        areas: the areas, in the order of the graphs returned.
        root: the root of the task's tree, whose ``tasks`` graph holds the tree's ``Task``
            nodes (``TaskRoots.root``); the task's own ``tasks`` graph when ``None``.
    """
    tree = task if root is None else root
    return [area_graph(tree if a == TASKS_AREA else task, check_area(a)) for a in areas]


_ROOTS_KEPT = 4096  # roots remembered by one TaskRoots (a projector reads many tasks)


class TaskRoots:
    """The root of each task's tree, from a blackboard's task registry.

    A registered task's root does not change while it is registered, so it is looked up once,
    and every root kept is forgotten when the board sees a task released
    (``Blackboard.task_releases`` moves): a released task may be registered again under
    another parent. A task the registry does not hold (or a blackboard without one) is its
    own root, and is looked up again next time (it may be registered under a parent
    meanwhile).

    Args:
        board: the blackboard whose coordination layer holds the task registry.
    """

    def __init__(self, board: Blackboard) -> None:
        self.board = board
        self._known: dict[str, str] = {}
        self._releases = board.task_releases  # the board's count when ``_known`` was begun
        self._lock = threading.Lock()

    def root(self, task: str) -> str:
        """Return the IRI of the root of ``task``'s tree (``task`` itself when unregistered)."""
        releases = self.board.task_releases
        if releases != self._releases:  # a released task may be registered again elsewhere
            with self._lock:
                self._known.clear()
                self._releases = releases
        known = self._known.get(task)
        if known is not None:
            return known
        coordination = self.board.coordination
        if coordination is None:
            return task
        try:
            root = coordination.tasks.get(task).root
        except TaskNotFoundError:
            return task
        with self._lock:
            if len(self._known) >= _ROOTS_KEPT:
                self._known.pop(next(iter(self._known)))
            self._known[task] = root
        return root

    def graphs(self, task: str, areas: Sequence[str]) -> list[str]:
        """Return the graphs a read of ``task``'s ``areas`` sees (``task_graphs`` with its root).

        The registry is consulted only when ``areas`` holds the ``tasks`` area.
        """
        if TASKS_AREA not in areas:
            return task_graphs(task, areas)
        return task_graphs(task, areas, root=self.root(task))
