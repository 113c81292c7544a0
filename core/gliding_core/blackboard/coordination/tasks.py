"""L2: the task registry of the blackboard: a tree of tasks with dependencies.

A task has at most one parent (the task it is a part of) and any number of dependencies (tasks
that must complete before it starts). Both relations are "waits for" edges: a task waits for
its dependencies before it starts and for its children before it completes, so the layers of a
task's DAG (``layers``) put dependencies before dependents and children before their parent.

Status transitions (``TRANSITIONS``; the tests enumerate it):

=========  ===================================  ========================================
from       to                                   why
=========  ===================================  ========================================
pending    running                              started: every dependency is completed
pending    failed                               cancelled before it started
running    completed                            done: every child is completed or failed
running    failed                               gave up
running    pending                              requeued (its agent was lost)
failed     pending                              retried
completed  (none)                               final
=========  ===================================  ========================================

The rows live in the coordination store (``coordination.protocol``); every decision below (the
transitions, the cycle check, what a release or a collection may delete) is made here, inside
the store's transaction, so it holds on every backend alike.

Invariants:
- The "waits for" relation has no cycle: a dependency that would close one is refused with
  ``TaskCycleError`` carrying the cycle, and nothing is written (the reference dropped cycles
  silently when sorting).
- A task's parent is registered before it, and is pending or running; dependencies are added
  to pending tasks only, on registered tasks.
- Each change is one transaction; its ``revision`` increases with every change of the task.
- Released and collected tasks are deleted with every edge that names them; a failed task that
  an unfinished task still depends on is kept (it may be retried).
- The registry frees only its own state (rows and Task mirror nodes; the mirror writes a dirty
  Task node back to L0 before deleting it) and announces ``TASK_RELEASED``: the blackboard,
  which owns the areas and the write-back, frees a released task's working memory on that
  event (``Blackboard.release_tasks``: flush to L0, delete the areas' nodes, unregister the
  agents), so the registry works without a blackboard and knows nothing of its areas.
- While tasks are mirrored, task IRIs are absolute IRIs (``check_task_iri``), refused before
  anything is written; without a mirror any name without spaces is a task's name.
- Tasks are mirrored into the graph as ``Task`` nodes in the ``tasks`` area of their root task
  (one graph per task tree); the mirror is refreshed from the store after each change, one change
  at a time, so it converges on the committed state.

Events (when a bus is given): ``TASK_REGISTERED`` (``iri``, ``parent``, ``depends_on``),
``TASK_STATUS_CHANGED`` (``iri``, ``previous``, ``status``, ``revision``) and
``TASK_RELEASED`` (``iris``), each with ``task_iri`` set to the task (or the released root).
"""

from __future__ import annotations

import graphlib
import threading
from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from gliding_core.blackboard.coordination.checks import (
    check_name,
    check_seconds,
    check_task_iri,
    parse_choice,
)
from gliding_core.blackboard.coordination.protocol import (
    CoordinationStore,
    NodeMirror,
    TaskRecords,
    forget_nodes,
    mirror_nodes,
)
from gliding_core.blackboard.coordination.records import Task, TaskStatus
from gliding_core.bus import EventBus, EventType
from gliding_core.errors import (
    InvalidInputError,
    InvalidTransitionError,
    TaskCycleError,
    TaskNotFoundError,
)
from gliding_core.jsonld import preview

__all__ = [
    "FINISHED",
    "TASKS_AREA",
    "TRANSITIONS",
    "Task",
    "TaskRegistry",
    "TaskStatus",
    "check_status",
]

TASKS_AREA = "tasks"

_P, _R, _C, _F = TaskStatus.PENDING, TaskStatus.RUNNING, TaskStatus.COMPLETED, TaskStatus.FAILED

TRANSITIONS: Mapping[TaskStatus, frozenset[TaskStatus]] = {
    _P: frozenset({_R, _F}),
    _R: frozenset({_C, _F, _P}),
    _F: frozenset({_P}),
    _C: frozenset(),
}
"""The statuses each status may change to (see the table of the module)."""

FINISHED = frozenset({_C, _F})
"""The statuses of a task that no longer runs."""


def check_status(value: object) -> TaskStatus:
    """Return ``value`` as a ``TaskStatus`` (a member or its value, in any case)."""
    return parse_choice(TaskStatus, value, "task status")


class TaskRegistry:
    """The tasks of one coordination store.

    Args:
        db: the coordination store (shared with the other registries).
        bus: where task events are published; none when omitted.
        mirror: where tasks are mirrored as graph nodes; none when omitted.
    """

    def __init__(
        self,
        db: CoordinationStore,
        *,
        bus: EventBus | None = None,
        mirror: NodeMirror | None = None,
    ) -> None:
        if not isinstance(db, CoordinationStore):
            raise InvalidInputError(f"db must be a CoordinationStore, got {preview(db)}")
        self.db, self.bus, self.mirror = db, bus, mirror
        self._mirror_lock = threading.Lock()

    # -- registering -------------------------------------------------------------------------

    def register(
        self, iri: str, *, parent: str | None = None, depends_on: Iterable[str] = ()
    ) -> Task:
        """Register a pending task under ``parent`` that waits for ``depends_on``.

        With a graph mirror (a blackboard attached) every IRI given must be an absolute IRI,
        since the task becomes a node named by it; without one any name without spaces will do
        (the registry is the coordination store alone, and its callers and tests name tasks as
        they like).

        Raises:
            InvalidInputError: the IRI is taken, is not an absolute IRI while mirrored (nothing
                is written then), or the parent is completed or failed.
            TaskNotFoundError: the parent or a dependency is not registered.
            TaskCycleError: a dependency waits, directly or not, for the new task's parent.
        """
        mirrored = self.mirror is not None
        iri = check_task_iri(iri, "task IRI", mirrored=mirrored)
        parent = None if parent is None else check_task_iri(parent, "parent IRI", mirrored=mirrored)
        dependencies = _names(depends_on, "dependency IRI", mirrored=mirrored)
        with self.db.write(f"registering task {iri!r}") as tx:
            tasks = tx.tasks
            if tasks.get(iri) is not None:
                raise InvalidInputError(f"task {iri!r} is already registered")
            root = iri
            if parent is not None:
                above = _existing(tasks, parent)
                if above.status in FINISHED:
                    raise InvalidInputError(
                        f"cannot add task {iri!r} under {parent!r}: the parent is "
                        f"{above.status.value}"
                    )
                root = above.root
            tasks.insert(iri, parent=parent, root=root, now=tx.now())
            for dependency in dependencies:
                _link(tasks, iri, dependency)
            task = _existing(tasks, iri)
        self._refresh([iri])
        self._publish(
            EventType.TASK_REGISTERED,
            iri,
            {"iri": iri, "parent": parent, "depends_on": list(task.depends_on)},
        )
        return task

    def add_dependency(self, task: str, depends_on: str) -> Task:
        """Make pending ``task`` wait for ``depends_on``; adding an existing edge is harmless.

        Raises:
            TaskCycleError: ``depends_on`` already waits for ``task``; nothing is written.
            InvalidTransitionError: ``task`` has started or finished.
        """
        task, depends_on = check_name(task, "task IRI"), check_name(depends_on, "dependency IRI")
        with self.db.write(f"adding a dependency to task {task!r}") as tx:
            current = _existing(tx.tasks, task)
            if current.status is not _P:
                raise InvalidTransitionError(
                    f"cannot add a dependency to task {task!r}: it is {current.status.value}",
                    current=current.status.value,
                    requested=current.status.value,
                )
            if depends_on not in current.depends_on:
                _link(tx.tasks, task, depends_on)
                tx.tasks.touch(task, tx.now())
            updated = _existing(tx.tasks, task)
        self._refresh([task])
        return updated

    def remove_dependency(self, task: str, depends_on: str) -> bool:
        """Stop ``task`` waiting for ``depends_on``; return whether it did."""
        task, depends_on = check_name(task, "task IRI"), check_name(depends_on, "dependency IRI")
        with self.db.write(f"removing a dependency of task {task!r}") as tx:
            _existing(tx.tasks, task)
            removed = tx.tasks.unlink(task, depends_on)
            if removed:
                tx.tasks.touch(task, tx.now())
        self._refresh([task])
        return removed

    # -- status --------------------------------------------------------------------------------

    def set_status(self, iri: str, status: TaskStatus | str) -> Task:
        """Move a task to ``status`` if ``TRANSITIONS`` allows it.

        Raises:
            InvalidTransitionError: the table forbids it, a dependency of a task being started
                is not completed, or a child of a task being completed is unfinished.
        """
        iri, target = check_name(iri, "task IRI"), check_status(status)
        with self.db.write(f"changing the status of task {iri!r}") as tx:
            current = _existing(tx.tasks, iri)
            _check_transition(tx.tasks, current, target)
            tx.tasks.set_status(iri, target, tx.now())
            task = _existing(tx.tasks, iri)
        self._refresh([iri])
        payload = {"iri": iri, "previous": current.status.value, "status": target.value}
        self._publish(EventType.TASK_STATUS_CHANGED, iri, {**payload, "revision": task.revision})
        return task

    def start(self, iri: str) -> Task:
        """Move a pending task whose dependencies are completed to running."""
        return self.set_status(iri, _R)

    def complete(self, iri: str) -> Task:
        """Move a running task whose children are finished to completed."""
        return self.set_status(iri, _C)

    def fail(self, iri: str) -> Task:
        """Move a pending or running task to failed."""
        return self.set_status(iri, _F)

    # -- reading -------------------------------------------------------------------------------

    def get(self, iri: str) -> Task:
        """Return the task ``iri``, or raise ``TaskNotFoundError``."""
        iri = check_name(iri, "task IRI")
        with self.db.read(f"reading task {iri!r}") as tx:
            return _existing(tx.tasks, iri)

    def __contains__(self, iri: object) -> bool:
        if not isinstance(iri, str):
            return False
        with self.db.read(f"looking up task {iri!r}") as tx:
            return tx.tasks.get(iri) is not None

    def tasks(self, *, status: TaskStatus | str | None = None) -> list[Task]:
        """Return every task (of ``status`` when given), in IRI order."""
        wanted = None if status is None else check_status(status)
        with self.db.read("listing tasks") as tx:
            return tx.tasks.all(wanted)

    def children(self, iri: str) -> list[Task]:
        """Return the direct children of ``iri``, in IRI order."""
        iri = check_name(iri, "task IRI")
        with self.db.read(f"reading the children of {iri!r}") as tx:
            _existing(tx.tasks, iri)
            return [_existing(tx.tasks, child) for child in tx.tasks.children(iri)]

    def dependents(self, iri: str) -> list[str]:
        """Return the tasks that wait for ``iri`` to complete, in IRI order."""
        iri = check_name(iri, "task IRI")
        with self.db.read(f"reading the dependents of {iri!r}") as tx:
            _existing(tx.tasks, iri)
            return tx.tasks.dependents(iri)

    def subtree(self, iri: str) -> list[str]:
        """Return ``iri`` and its descendants, breadth first (siblings in IRI order)."""
        iri = check_name(iri, "task IRI")
        with self.db.read(f"reading the subtree of {iri!r}") as tx:
            _existing(tx.tasks, iri)
            return _subtree(tx.tasks, iri)

    def ready(self, *, under: str | None = None) -> list[Task]:
        """Return the pending tasks whose dependencies are all completed (within ``under``)."""
        scope = None if under is None else set(self.subtree(under))
        with self.db.read("finding the ready tasks") as tx:
            ready = tx.tasks.ready()
        return [task for task in ready if scope is None or task.iri in scope]

    def layers(self, iri: str) -> list[list[str]]:
        """Return the DAG around ``iri`` in layers: each waits only for earlier layers.

        The DAG holds ``iri``, its descendants, and every task linked to them by dependencies
        (both ways, transitively); each layer is sorted. Sorting is ``graphlib``'s.
        """
        iri = check_name(iri, "task IRI")
        with self.db.read(f"reading the DAG of {iri!r}") as tx:
            _existing(tx.tasks, iri)
            waits = _component(tx.tasks, iri)
        sorter = graphlib.TopologicalSorter(waits)
        sorter.prepare()  # no cycle: every edge was checked when it was added
        layers: list[list[str]] = []
        while sorter.is_active():
            layer = sorted(sorter.get_ready())
            layers.append(layer)
            sorter.done(*layer)
        return layers

    # -- releasing -----------------------------------------------------------------------------

    def release(self, iri: str) -> list[str]:
        """Delete a completed task and its finished subtree; return the released IRIs.

        The rows are deleted in one transaction, then the Task nodes leave the mirror, then
        ``TASK_RELEASED`` is published; a blackboard attached to the same bus frees the areas
        of every released task before this returns (see ``Blackboard.release_tasks``: a failed
        flush to L0 is logged there and deletes nothing from the board; the release stands).
        The tasks' coordination messages stay in the message log.

        Raises:
            InvalidTransitionError: the task is not completed, a descendant is unfinished, or
                an unfinished task outside the subtree depends on a failed task inside it.
        """
        iri = check_name(iri, "task IRI")
        with self.db.write(f"releasing task {iri!r}") as tx:
            root = _existing(tx.tasks, iri)
            if root.status is not _C:
                raise InvalidTransitionError(
                    f"only a completed task can be released; {iri!r} is {root.status.value}",
                    current=root.status.value,
                    requested="released",
                )
            released = _subtree(tx.tasks, iri)
            _check_releasable(tx.tasks, released)
            tx.tasks.delete(released)
        self._forget(released)
        self._publish(EventType.TASK_RELEASED, iri, {"iris": released})
        return released

    def gc(self, *, older_than_s: float = 0.0) -> list[str]:
        """Delete finished tasks (finished ``older_than_s`` ago) whose subtrees are finished.

        A failed task that an unfinished task depends on is kept, and so are its ancestors.
        The collected tasks are freed on the blackboard as released ones are (``release``).
        Returns the collected IRIs, sorted.
        """
        age = check_seconds(older_than_s, "older_than_s", allow_zero=True)
        with self.db.write("collecting finished tasks") as tx:
            collected = _collectable(tx.tasks, tx.now() - age)
            tx.tasks.delete(collected)
        self._forget(collected)
        if collected:
            self._publish(EventType.TASK_RELEASED, None, {"iris": collected})
        return collected

    # -- the graph mirror ----------------------------------------------------------------------

    def remirror(self) -> int:
        """Mirror every task into the graph again (after a mirror failure); return how many."""
        with self.db.read("listing tasks") as tx:
            iris = [task.iri for task in tx.tasks.all()]
        self._refresh(iris)
        return len(iris)

    def _refresh(self, iris: Sequence[str]) -> None:
        """Mirror the committed state of ``iris``; one refresh at a time, so the last one wins."""
        if self.mirror is None:
            return
        with self._mirror_lock:
            with self.db.read("reading tasks to mirror") as tx:
                found = [tx.tasks.get(iri) for iri in iris]
            by_root: dict[str, list[dict[str, Any]]] = {}
            for task in found:
                if task is not None:
                    by_root.setdefault(task.root, []).append(task.node())
            for root, nodes in by_root.items():
                mirror_nodes(self.mirror, root, TASKS_AREA, nodes)

    def _forget(self, iris: Sequence[str]) -> None:
        with self._mirror_lock:
            forget_nodes(self.mirror, iris)

    def _publish(self, kind: EventType, iri: str | None, payload: dict[str, Any]) -> None:
        if self.bus is not None:
            self.bus.publish(kind, payload, task_iri=iri)


# -- the decisions over the rows (each runs inside the caller's read or write) -----------------


def _names(values: Iterable[str], what: str, *, mirrored: bool) -> list[str]:
    if isinstance(values, str) or not isinstance(values, Iterable):
        raise InvalidInputError(f"{what}s must be an iterable of IRIs, got {preview(values)}")
    return list(dict.fromkeys(check_task_iri(v, what, mirrored=mirrored) for v in values))


def _existing(tasks: TaskRecords, iri: str) -> Task:
    task = tasks.get(iri)
    if task is None:
        raise TaskNotFoundError(f"no task is registered as {iri!r}")
    return task


def _waits_for(tasks: TaskRecords, iri: str) -> list[str]:
    """What ``iri`` waits for: its dependencies and its children."""
    return tasks.dependencies(iri) + tasks.children(iri)


def _link(tasks: TaskRecords, task: str, dependency: str) -> None:
    """Add the edge ``task`` waits for ``dependency`` unless it closes a cycle."""
    _existing(tasks, dependency)
    cycle = _path(tasks, dependency, task)
    if cycle is not None:
        chain = (task, *cycle)
        raise TaskCycleError(
            f"task {task!r} cannot depend on {dependency!r}: that closes the cycle "
            + " -> ".join(chain),
            cycle=chain,
        )
    tasks.link(task, dependency)


def _path(tasks: TaskRecords, start: str, goal: str) -> tuple[str, ...] | None:
    """Return a "waits for" path from ``start`` to ``goal`` (both included), if there is one."""
    came_from: dict[str, str | None] = {start: None}
    queue = deque([start])
    while queue:
        here = queue.popleft()
        if here == goal:
            path = [here]
            while (before := came_from[path[-1]]) is not None:
                path.append(before)
            return tuple(reversed(path))
        for there in _waits_for(tasks, here):
            if there not in came_from:
                came_from[there] = here
                queue.append(there)
    return None


def _check_transition(tasks: TaskRecords, task: Task, target: TaskStatus) -> None:
    current = task.status
    problem = ""
    if target not in TRANSITIONS[current]:
        allowed = ", ".join(sorted(s.value for s in TRANSITIONS[current])) or "nothing"
        problem = f"a {current.value} task may become {allowed}"
    elif target is _R:
        waiting = [d for d in task.depends_on if _existing(tasks, d).status is not _C]
        if waiting:
            problem = f"it waits for {', '.join(map(repr, waiting))} to complete"
    elif target is _C:
        unfinished = tasks.unfinished_children(task.iri)
        if unfinished:
            problem = f"its children {', '.join(map(repr, unfinished))} are unfinished"
    if problem:
        raise InvalidTransitionError(
            f"task {task.iri!r} cannot become {target.value}: {problem}",
            current=current.value,
            requested=target.value,
        )


def _subtree(tasks: TaskRecords, iri: str) -> list[str]:
    order, queue = [iri], deque([iri])
    while queue:
        for child in tasks.children(queue.popleft()):
            order.append(child)
            queue.append(child)
    return order


def _component(tasks: TaskRecords, iri: str) -> dict[str, set[str]]:
    """Map each task of ``iri``'s DAG to the tasks of the DAG it waits for."""
    members = set(_subtree(tasks, iri))
    queue = deque(members)
    while queue:
        here = queue.popleft()
        linked = tasks.dependencies(here) + tasks.dependents(here) + tasks.children(here)
        for there in linked:
            if there not in members:
                members.add(there)
                queue.append(there)
    return {m: {w for w in _waits_for(tasks, m) if w in members} for m in members}


def _needed(tasks: TaskRecords, iris: Sequence[str]) -> list[tuple[str, str]]:
    """Return (failed task, unfinished dependent outside ``iris``) pairs."""
    inside = set(iris)
    pairs = []
    for iri in iris:
        if _existing(tasks, iri).status is not _F:
            continue
        pairs += [(iri, d) for d in tasks.unfinished_dependents(iri) if d not in inside]
    return pairs


def _check_releasable(tasks: TaskRecords, iris: Sequence[str]) -> None:
    unfinished = [iri for iri in iris if _existing(tasks, iri).status not in FINISHED]
    needed = _needed(tasks, iris)
    if unfinished or needed:
        reason = (
            f"{', '.join(map(repr, unfinished))} unfinished"
            if unfinished
            else f"{needed[0][1]!r} still depends on the failed {needed[0][0]!r}"
        )
        raise InvalidTransitionError(
            f"the subtree of {iris[0]!r} cannot be released: {reason}",
            current="completed",
            requested="released",
        )


def _collectable(tasks: TaskRecords, finished_before: float) -> list[str]:
    """Return the finished tasks whose subtrees are collectable, up to a fixed point."""
    candidates = set(tasks.finished_before(finished_before))
    candidates -= {failed for failed, _ in _needed(tasks, sorted(candidates))}
    collected: set[str] = set()
    changed = True
    while changed:
        changed = False
        for iri in sorted(candidates - collected):
            if all(child in collected for child in tasks.children(iri)):
                collected.add(iri)
                changed = True
    return sorted(collected)
