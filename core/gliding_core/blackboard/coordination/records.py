"""L2: the values the coordination store holds: leases, tasks, agents and messages.

These are what a ``CoordinationStore`` reads and writes (``coordination.protocol``) and what
the registries hand their callers. They carry no decision: the compatibility of lease modes,
fencing, task transitions and agent liveness rules live in the registries
(``leases``, ``tasks``, ``agents``, ``messages``), shared by every backend.

Invariants: every value is immutable (a frozen dataclass); times are seconds on the
coordination clock; a value built by one backend equals the one another backend builds from
the same row.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import Enum
from typing import Any
from urllib.parse import quote

from gliding_core.blackboard.coordination.checks import check_name

AGENT_IRI_PREFIX = "urn:gliding-horse:agent:"


# -- leases ------------------------------------------------------------------------------------


class LeaseMode(str, Enum):
    """How a lease shares its resource (see the compatibility table of ``leases``)."""

    READ = "read"
    WRITE = "write"
    EXCLUSIVE = "exclusive"


@dataclass(frozen=True, slots=True)
class Lease:
    """A lease as granted or last renewed.

    Attributes:
        resource: what is leased (a node IRI, a file, any name).
        holder: who holds it (an agent name).
        mode: how it is shared.
        token: the fencing token of its grant.
        depth: how many acquisitions by the holder it stands for (each needs a release).
        ttl_s: how long each renewal keeps it alive.
        acquired_at: when it was granted (coordination clock).
        expires_at: when it expires unless renewed.
    """

    resource: str
    holder: str
    mode: LeaseMode
    token: int
    depth: int
    ttl_s: float
    acquired_at: float
    expires_at: float

    def payload(self) -> dict[str, object]:
        """Return the event payload describing this lease."""
        return {
            "resource": self.resource,
            "holder": self.holder,
            "mode": self.mode.value,
            "token": self.token,
        }


@dataclass(frozen=True, slots=True)
class FirstGrant:
    """What ``LeaseRecords.grant_if_free`` did.

    Attributes:
        lease: the lease granted, or ``None`` when a live row stood in its way.
        seen: every row on the resource before it (expired ones included), by holder.
        now: the coordination clock it read (the transaction's ``now()``).
    """

    lease: Lease | None
    seen: list[Lease]
    now: float


# -- tasks -------------------------------------------------------------------------------------


class TaskStatus(str, Enum):
    """Where a task stands."""

    PENDING = "pending"
    RUNNING = "running"
    COMPLETED = "completed"
    FAILED = "failed"


@dataclass(frozen=True, slots=True)
class Task:
    """A registered task.

    Attributes:
        iri: the task's IRI.
        status: where it stands.
        parent: the task it is part of, if any.
        root: the top of its tree (itself when it has no parent).
        depends_on: the tasks it waits for before it starts, sorted.
        created_at, updated_at: when it was registered and last changed (coordination clock).
        revision: increases with every change.
    """

    iri: str
    status: TaskStatus
    parent: str | None
    root: str
    depends_on: tuple[str, ...]
    created_at: float
    updated_at: float
    revision: int

    def node(self) -> dict[str, Any]:
        """Return the task as the JSON-LD node mirrored into the graph."""
        node: dict[str, Any] = {
            "@id": self.iri,
            "@type": "Task",
            "status": self.status.value,
            "createdAt": self.created_at,
            "updatedAt": self.updated_at,
            "revision": self.revision,
        }
        if self.parent is not None:
            node["parent"] = {"@id": self.parent}
        if self.depends_on:
            node["dependsOn"] = [{"@id": iri} for iri in self.depends_on]
        return node


# -- agents ------------------------------------------------------------------------------------


class AgentStatus(str, Enum):
    """What an agent is doing (the design's five states)."""

    IDLE = "Idle"
    WORKING = "Working"
    WAITING = "Waiting"
    COMPLETED = "Completed"
    ERROR = "Error"


LIVE = frozenset({AgentStatus.IDLE, AgentStatus.WORKING, AgentStatus.WAITING})
"""The statuses of an agent that is expected to beat."""


def agent_iri(name: str) -> str:
    """Return the IRI of the agent node named ``name`` (percent-encoded where needed)."""
    return AGENT_IRI_PREFIX + quote(check_name(name, "agent name"), safe="-._~!$&'()*+,;=:@/")


@dataclass(frozen=True, slots=True)
class Agent:
    """A registered agent.

    Attributes:
        name: its unique name (what holds its leases).
        role: its role (``plan``, ``do``, ``check``, ``act`` or any other).
        task: the IRI of the task it works on.
        status: what it is doing.
        operation: what it said it is doing, if anything.
        registered_at, last_heartbeat: when it registered and last beat (coordination clock).
        timeout_s: how long it may stay silent before it is lost.
        incarnation: how many times this name was registered.
        revision: increases with every change.
    """

    name: str
    role: str
    task: str
    status: AgentStatus
    operation: str | None
    registered_at: float
    last_heartbeat: float
    timeout_s: float
    incarnation: int
    revision: int

    @property
    def iri(self) -> str:
        """The IRI of the agent's node in the graph."""
        return agent_iri(self.name)

    def silent_at(self, now: float) -> bool:
        """Return whether a live agent has been silent for longer than its timeout at ``now``."""
        return self.status in LIVE and now - self.last_heartbeat > self.timeout_s

    def node(self) -> dict[str, Any]:
        """Return the agent as the JSON-LD node mirrored into the graph."""
        node: dict[str, Any] = {
            "@id": self.iri,
            "@type": "Agent",
            "name": self.name,
            "role": self.role,
            "status": self.status.value,
            "task": {"@id": self.task},
            "registeredAt": self.registered_at,
            "lastHeartbeat": self.last_heartbeat,
            "incarnation": self.incarnation,
            "revision": self.revision,
        }
        if self.operation is not None:
            node["operation"] = self.operation
        return node


# -- messages ----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Message:
    """A stored coordination message.

    Attributes:
        sequence: its place in the order of every message of the store.
        iri: its node IRI (``urn:uuid:...``).
        topic: what it is about (``progress``, ``resource-request`` ...).
        task: the task it concerns, if any.
        sender: who sent it (an agent name), if known.
        payload: its JSON object.
        created_at: when it was stored (coordination clock).
    """

    sequence: int
    iri: str
    topic: str
    task: str | None
    sender: str | None
    payload: Mapping[str, Any] = field(default_factory=dict)
    created_at: float = 0.0

    def as_dict(self) -> dict[str, Any]:
        """Return the message as a JSON-like dict (the payload of its bus event)."""
        return {
            "sequence": self.sequence,
            "iri": self.iri,
            "topic": self.topic,
            "task": self.task,
            "sender": self.sender,
            "payload": dict(self.payload),
            "created_at": self.created_at,
        }

    def node(self) -> dict[str, Any]:
        """Return the message as the JSON-LD node mirrored into the graph."""
        node: dict[str, Any] = {
            "@id": self.iri,
            "@type": "CoordinationMessage",
            "topic": self.topic,
            "sequence": self.sequence,
            "payloadJson": json.dumps(self.payload, sort_keys=True, ensure_ascii=False),
            "createdAt": self.created_at,
        }
        if self.task is not None:
            node["task"] = {"@id": self.task}
        if self.sender is not None:
            node["sender"] = self.sender
        return node
