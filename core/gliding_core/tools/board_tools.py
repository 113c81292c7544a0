"""Tools: the blackboard operations an agent calls as tools, each a JSON-ready result or a refusal.

Both adapters' blackboard tool sets (LangChain's ``BlackboardToolkit``, LlamaIndex's
``BlackboardToolSpec``) call these functions with the ``AgentHandle`` they were built with, so
the agent's name, role and task are bound once and never an argument the model fills in. Each
operation goes through the handle, so the permission matrix and the leases apply as they do
to code.

A refusal the model can act on (``PermissionDeniedError``, ``StaleWriteError``,
``LeaseConflictError``, ``FencingTokenError``, bad input) is turned by ``board_refusal`` into a
message saying what to do: the node's current generation to base a retry on, who holds the
lease.

A write whose outcome is unknown (``WriteOutcomeUnknownError``: the store's answer was lost) is
made again once, with its write id, before the model hears of it: the retry returns the node
the write committed if it landed, and is applied once if it did not. Only when the retry fails
too is the model told the outcome is unknown, and to read the node before writing it again. No
tool deletes.

``project_frame`` needs a ``Scheduler`` over the handle's blackboard (``memory.scheduler``);
the tool sets offer it when they are given one. Its result carries the generation of every
blackboard node the view quotes that the agent may read, so the turn that archives it can be
marked stale when one of them moves on (``gliding_core.view.stale_turns``); a node the view only
references and the agent may not read (another area, another task) gets none.

Invariants: a tool acts only as its handle may; a write based on a generation the node has
moved past changes nothing; a write is applied at most once, whatever answers are lost; every
result is a JSON-ready dict or list.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from gliding_core.blackboard.coordination.tasks import Task
from gliding_core.blackboard.handle import AgentHandle
from gliding_core.blackboard.records import BoardNode
from gliding_core.errors import (
    GlidingError,
    InvalidInputError,
    LeaseConflictError,
    PermissionDeniedError,
    StaleWriteError,
    StorageError,
    WriteOutcomeUnknownError,
)
from gliding_core.jsonld import preview
from gliding_core.projection.scheduler import Scheduler

_VIEW_TRIES = 3


def check_handle(handle: object) -> AgentHandle:
    """Return ``handle`` when it is an ``AgentHandle``.

    Raises:
        InvalidInputError: it is not.
    """
    if not isinstance(handle, AgentHandle):
        raise InvalidInputError(f"handle must be an AgentHandle, got {preview(handle)}")
    return handle


def read_node(handle: AgentHandle, iri: str) -> dict[str, Any]:
    """Return a node of the agent's task with its generation (``found`` says if it exists)."""
    node = handle.read(iri)
    return {"found": False, "id": iri} if node is None else _node(node)


def write_node(
    handle: AgentHandle,
    node: Mapping[str, Any],
    *,
    area: str,
    based_on: int | None = None,
    lease_token: int | None = None,
) -> dict[str, Any]:
    """Write one node into an area, refused when it moved past ``based_on``; return it.

    Args:
        handle: the writing agent.
        node: the JSON-LD node (with its ``@id``).
        area: the area of the agent's task it goes to.
        based_on: the generation the change was made from (0: the node must not exist yet);
            ``None`` writes whatever the node's generation.
        lease_token: the token of the agent's lease on the node, if it holds one.

    A write whose outcome is unknown is made again once by its write id (it returns what
    landed); a write refused as stale because the node already holds exactly ``node`` (a
    call sent again) returns the node as committed.

    Raises:
        StaleWriteError: the node's generation is not ``based_on`` (it carries the current).
        PermissionDeniedError, LeaseConflictError, FencingTokenError: as ``AgentHandle.write``.
        WriteOutcomeUnknownError: the store's answer was lost, and its answer to the retry
            with the write's id too: the write may or may not have been applied.
    """
    if not isinstance(node, Mapping) or not isinstance(node.get("@id"), str):
        raise InvalidInputError(f"node must be a JSON object with an @id, got {preview(node)}")
    write = functools.partial(
        handle.write, [node], area=area, lease_token=lease_token, based_on=based_on
    )
    try:
        written = write()
    except WriteOutcomeUnknownError as unknown:
        written = _retried(write, unknown)
    except StaleWriteError as stale:
        # A model that sends a call again (its first answer was lost to it) finds the node
        # already as it asked: that is the committed write, not a conflict to merge.
        if not _holds(stale, node):
            raise
        again = handle.read(stale.iri)
        if again is None or again.generation != stale.current_generation:
            raise
        written = [again]
    return _node(written[0])


def _holds(stale: StaleWriteError, node: Mapping[str, Any]) -> bool:
    """Whether the value a stale write was refused against is exactly the node it wrote."""
    current = stale.current_value
    return current is not None and _canonical(current) == _canonical(node)


def _canonical(value: object) -> str:
    return json.dumps(value, sort_keys=True, ensure_ascii=False, default=str)


def _retried(
    write: Callable[..., list[BoardNode]], unknown: WriteOutcomeUnknownError
) -> list[BoardNode]:
    """Make a write whose outcome is unknown again, by its id, once.

    Returns what the write committed if it landed, else what the retry wrote. A definite
    refusal of the retry (a stale base, a lease) means the write did not land: it is raised.

    Raises:
        WriteOutcomeUnknownError: the write has no id to retry by, or the retry got no
            answer either (it may still have landed).
    """
    if unknown.write_id is None:  # raised below the handle: nothing to retry by
        raise unknown
    try:
        return write(write_id=unknown.write_id)
    except StorageError as again:
        raise WriteOutcomeUnknownError(
            f"{unknown} Its retry failed too: {again}",
            write_id=unknown.write_id,
            iris=unknown.iris,
        ) from again


def query(handle: AgentHandle, sparql: str, *, areas: Sequence[str] | None = None) -> Any:
    """Run a read-only SPARQL query over the graphs the agent may read; return its answer."""
    result = handle.query(sparql, areas=areas)
    if result.form == "select":
        return {"variables": list(result.variables), "rows": result.values()}
    if result.form == "ask":
        return {"boolean": result.boolean}
    return {"triples": [str(triple) for triple in result.triples]}


def claim_task(handle: AgentHandle) -> dict[str, Any]:
    """Start the agent's task (move it to running); return it."""
    return _task(handle.start_task())


def complete_task(handle: AgentHandle) -> dict[str, Any]:
    """Complete the agent's task (its areas are flushed to L0); return it."""
    return _task(handle.complete_task())


def ready_tasks(handle: AgentHandle) -> list[dict[str, Any]]:
    """Return the pending tasks under the agent's task whose dependencies are all complete."""
    handle.task_status()  # the matrix's read on tasks
    coordination = handle.board.coordination
    if coordination is None:
        raise InvalidInputError("this blackboard has no task registry")
    return [_task(task) for task in coordination.tasks.ready(under=handle.task)]


def take_lease(handle: AgentHandle, resource: str, mode: str = "write") -> dict[str, Any]:
    """Take a lease on ``resource`` without waiting; return it with its fencing token.

    The lease needs the right it protects on a node of the agent's task (``acquire``).
    """
    lease = handle.acquire(resource, mode, timeout_s=0.0)
    return {"resource": lease.resource, "mode": str(lease.mode.value), "token": lease.token}


def release_lease(handle: AgentHandle, resource: str) -> dict[str, Any]:
    """Release the agent's lease on ``resource``; say whether it held one."""
    return {"resource": resource, "released": handle.release(resource)}


def post_message(
    handle: AgentHandle, topic: str, payload: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """Post a coordination message on the agent's task; return its sequence number."""
    message = handle.publish(topic, payload)
    return {"sequence": message.sequence, "topic": message.topic}


def read_messages(
    handle: AgentHandle, since: int = 0, *, topic: str | None = None
) -> list[dict[str, Any]]:
    """Return the task's messages after sequence ``since``, oldest first."""
    return [
        {"sequence": m.sequence, "topic": m.topic, "sender": m.sender, "payload": m.payload}
        for m in handle.messages(since, topic=topic)
    ]


def project_frame(
    handle: AgentHandle, scheduler: Scheduler, *, budget: int, query: str | None = None
) -> dict[str, Any]:
    """Return the agent's view of its task: its role's frame (L3), else L2, else L0.

    Read as the agent: only the areas its role may read are shown, L0 only as far as its
    task's scope and those areas (``Scheduler.read``), and a generation only for a node it
    may read (a reference to any other node is shown as written, with nothing of the node).

    Args:
        handle: the reading agent (its task and role choose the frame).
        scheduler: the scheduler over the handle's blackboard.
        budget: the most tokens the view may take.
        query: what to search L0 for when no level holds anything of the task.

    Raises:
        InvalidInputError: the scheduler is not over the handle's blackboard, or a bad budget.
    """
    if not isinstance(scheduler, Scheduler) or scheduler.board is not handle.board:
        raise InvalidInputError(
            f"scheduler must be a Scheduler over the handle's blackboard, got {preview(scheduler)}"
        )
    handle.task_status()  # the matrix's read on tasks: the view is of the agent's own task
    view = scheduler.read(handle.task, handle.role, budget=budget, query=query, agent=handle)
    # The generations are read between two projections that must agree, so a write announced
    # in between is caught; when the view keeps moving, the last ones read are older than it
    # (a turn quoting it goes stale too early, never too late).
    for _ in range(_VIEW_TRIES):
        found = scheduler.board_nodes(view.iris, agent=handle)
        again = scheduler.read(handle.task, handle.role, budget=budget, query=query, agent=handle)
        if again.text == view.text:
            break
        view = again
    return {
        "level": view.level,
        "frame": view.frame,
        "tokens": view.tokens,
        "view": view.text,
        "generations": {iri: found[iri].generation for iri in view.iris if iri in found},
    }


def board_refusal(error: GlidingError) -> str:
    """Return the text a tool gives the model for a refusal, saying what to do next."""
    if isinstance(error, StaleWriteError):
        generation = error.current_generation
        return (
            f"Error: stale write: {error.iri!r} is at generation {generation}, not"
            f" {error.based_on}: read it, merge your change and write again with"
            f" based_on={generation}. Its value at generation {generation}:"
            f" {json.dumps(error.current_value)}"
        )
    if isinstance(error, LeaseConflictError):
        holders = ", ".join(f"{holder} ({mode})" for holder, mode in error.holders)
        return (
            f"Error: {error}. Held by: {holders}; wait for them to release it, or work on another"
        )
    if isinstance(error, PermissionDeniedError):
        return f"Error: not permitted: {error}. Your role cannot do this; ask an agent who can"
    if isinstance(error, WriteOutcomeUnknownError):
        nodes = ", ".join(repr(iri) for iri in error.iris) or "the node"
        return (
            f"Error: the outcome of this write is unknown: the blackboard's answer was lost,"
            f" so it may or may not have been applied to {nodes}. Read the node"
            " (read_node) before you write it again: if it holds your change, the write"
            " landed; if not, write it again based on the generation you read"
        )
    return f"Error: {error}"


def _node(node: BoardNode) -> dict[str, Any]:
    return {
        "found": True,
        "id": node.iri,
        "generation": node.generation,
        "value": json.loads(node.content),
    }


def _task(task: Task) -> dict[str, Any]:
    return {"id": task.iri, "status": str(task.status.value)}
