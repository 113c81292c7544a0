"""L2: the coordination records as database rows, read the same way by every backend.

Each table of a coordination store (SQLite's, PostgreSQL's) holds one kind of record in the
same columns, in the same order: the ``*_COLUMNS`` lists name them for a backend's ``SELECT``,
``INSERT`` and ``RETURNING``, and the functions here turn a row of them into its record
(``records``) and a record back into the row to store. A backend writes its own SQL; what a
row means is decided here once, so a record read from either database is the same value.

Invariants: a row is a tuple in its ``*_COLUMNS`` order; statuses and modes are stored as their
enum values; a message's payload is stored as JSON text.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import replace
from typing import Any

from gliding_core.blackboard.coordination.records import (
    Agent,
    AgentStatus,
    Lease,
    LeaseMode,
    Message,
    Task,
    TaskStatus,
)

LEASE_COLUMNS = "resource, holder, mode, token, depth, ttl_s, acquired_at, expires_at"
TASK_COLUMNS = "iri, parent, root, status, created_at, updated_at, revision"
AGENT_COLUMNS = (
    "name, role, task, status, operation, registered_at, last_heartbeat, timeout_s, "
    "incarnation, revision"
)
MESSAGE_COLUMNS = "sequence, iri, topic, task, sender, payload, created_at"


def lease_of(row: Iterable[Any]) -> Lease:
    """Return the lease a row of ``LEASE_COLUMNS`` holds."""
    resource, holder, mode, token, depth, ttl_s, acquired_at, expires_at = row
    return Lease(resource, holder, LeaseMode(mode), token, depth, ttl_s, acquired_at, expires_at)


def granted(lease: Lease, token: int) -> Lease:
    """Return ``lease`` as stored with the fencing token its grant took."""
    return replace(lease, token=token)


def task_of(row: Iterable[Any], depends_on: Iterable[str]) -> Task:
    """Return the task a row of ``TASK_COLUMNS`` holds, waiting for ``depends_on`` (sorted)."""
    iri, parent, root, status, created_at, updated_at, revision = row
    return Task(
        iri,
        TaskStatus(status),
        parent,
        root,
        tuple(depends_on),
        created_at,
        updated_at,
        revision,
    )


def agent_of(row: Iterable[Any]) -> Agent:
    """Return the agent a row of ``AGENT_COLUMNS`` holds."""
    name, role, task, status, operation, registered, beat, timeout, incarnation, revision = row
    return Agent(
        name,
        role,
        task,
        AgentStatus(status),
        operation,
        registered,
        beat,
        timeout,
        incarnation,
        revision,
    )


def agent_row(agent: Agent) -> tuple[object, ...]:
    """Return ``agent`` as a row of ``AGENT_COLUMNS``."""
    return (
        agent.name,
        agent.role,
        agent.task,
        agent.status.value,
        agent.operation,
        agent.registered_at,
        agent.last_heartbeat,
        agent.timeout_s,
        agent.incarnation,
        agent.revision,
    )


def message_of(row: Iterable[Any]) -> Message:
    """Return the message a row of ``MESSAGE_COLUMNS`` holds (its payload parsed)."""
    sequence, iri, topic, task, sender, payload, created_at = row
    return Message(sequence, iri, topic, task, sender, json.loads(payload), created_at)
