"""L2: the agents of the blackboard: who works on which task in which role, and who is alive.

An agent registers with a role and a task, reports its status, and beats: each heartbeat
renews every lease it holds. An agent silent for longer than its heartbeat timeout (the
``heartbeat_timeout_s`` setting unless given at registration) is lost: the sweeper marks it
Error, releases its leases and publishes ``AGENT_LOST``, so a crashed agent cannot keep a
resource (the reference had the detection call but no default and no sweeper).

Statuses (the design's set) and transitions (``TRANSITIONS``): a live agent (Idle, Working,
Waiting) may take any status, including its own (to report a new operation); Completed and
Error are final for that registration. An agent that was marked Error and comes back is told so
(``InvalidTransitionError`` on its next heartbeat) and registers again, which starts a new
``incarnation``: its old leases are gone, and the fencing tokens of any lease it had are
stale, so it cannot overwrite what its successors wrote.

Invariants:
- Each change is one transaction; a heartbeat updates the agent and renews its leases in the
  same one. Finishing (Completed), being lost (Error) and unregistering release the agent's
  leases right after the agent's row changes (if the process dies in between, the leases
  expire by their TTL).
- The sweeper (which also deletes expired leases) runs on one daemon thread, started by the
  first registration when ``sweep_interval_s`` > 0 and stopped by ``close()``; ``sweep()``
  does the same on demand.
  A sweep re-checks each agent's silence inside its transaction, so an agent of another
  process that beat meanwhile is left alone.
- Agents are mirrored into the graph as ``Agent`` nodes in the ``agents`` area of their task;
  the mirror is refreshed from SQLite after each change.

Events (when a bus is given; ``source`` is the agent's name, ``task_iri`` its task):
``AGENT_REGISTERED`` (``name``, ``role``, ``incarnation``), ``AGENT_STATUS_CHANGED``
(``name``, ``previous``, ``status``, ``operation``) and ``AGENT_LOST`` (``name``, ``role``,
``silent_s``, ``released``: the resources of the leases it lost).
"""

from __future__ import annotations

import logging
import sqlite3
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import Enum
from typing import Any
from urllib.parse import quote

from gliding_core.blackboard.coordination.database import (
    CoordinationDB,
    NodeMirror,
    check_name,
    check_seconds,
    check_task_iri,
    forget_nodes,
    mirror_nodes,
    parse_choice,
)
from gliding_core.blackboard.coordination.leases import LeaseTable
from gliding_core.bus import EventBus, EventType
from gliding_core.errors import (
    AgentNotFoundError,
    ClosedError,
    InvalidInputError,
    InvalidTransitionError,
)
from gliding_core.jsonld import check_text, preview

logger = logging.getLogger(__name__)

_SCHEMA = """
CREATE TABLE IF NOT EXISTS agents (
    name TEXT PRIMARY KEY,
    role TEXT NOT NULL,
    task TEXT NOT NULL,
    status TEXT NOT NULL
        CHECK (status IN ('Idle', 'Working', 'Waiting', 'Completed', 'Error')),
    operation TEXT,
    registered_at REAL NOT NULL,
    last_heartbeat REAL NOT NULL,
    timeout_s REAL NOT NULL,
    incarnation INTEGER NOT NULL,
    revision INTEGER NOT NULL
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS agents_by_task ON agents (task);
"""
_COLUMNS = (
    "name, role, task, status, operation, registered_at, last_heartbeat, timeout_s, "
    "incarnation, revision"
)
AGENTS_AREA = "agents"
AGENT_IRI_PREFIX = "urn:gliding-horse:agent:"


class AgentStatus(str, Enum):
    """What an agent is doing (the design's five states)."""

    IDLE = "Idle"
    WORKING = "Working"
    WAITING = "Waiting"
    COMPLETED = "Completed"
    ERROR = "Error"


LIVE = frozenset({AgentStatus.IDLE, AgentStatus.WORKING, AgentStatus.WAITING})
"""The statuses of an agent that is expected to beat."""

TRANSITIONS: Mapping[AgentStatus, frozenset[AgentStatus]] = {
    **{status: frozenset(AgentStatus) for status in LIVE},
    AgentStatus.COMPLETED: frozenset(),
    AgentStatus.ERROR: frozenset(),
}
"""The statuses each status may change to: a live agent any, a finished one none."""


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


def check_status(value: object) -> AgentStatus:
    """Return ``value`` as an ``AgentStatus`` (a member or its name, in any case)."""
    return parse_choice(AgentStatus, value, "agent status")


class AgentRegistry:
    """The agents of one coordination database, with the sweeper of silent ones.

    Args:
        db: the coordination database (shared with the other registries).
        leases: the lease table of the same database, whose leases heartbeats renew and the
            sweeper releases; leases are left alone when omitted.
        bus: where agent events are published; none when omitted.
        mirror: where agents are mirrored as graph nodes; none when omitted.
    """

    def __init__(
        self,
        db: CoordinationDB,
        *,
        leases: LeaseTable | None = None,
        bus: EventBus | None = None,
        mirror: NodeMirror | None = None,
    ) -> None:
        if not isinstance(db, CoordinationDB):
            raise InvalidInputError(f"db must be a CoordinationDB, got {preview(db)}")
        if leases is not None and (not isinstance(leases, LeaseTable) or leases.db is not db):
            raise InvalidInputError(f"leases must be a LeaseTable of {db!r}, got {preview(leases)}")
        self.db, self.leases, self.bus, self.mirror = db, leases, bus, mirror
        self._mirror_lock = threading.Lock()
        self._sweeper_lock = threading.Lock()
        self._stop = threading.Event()
        self._sweeper: threading.Thread | None = None
        db.ensure_schema(_SCHEMA)

    # -- registering -------------------------------------------------------------------------

    def register(
        self,
        name: str,
        *,
        role: str,
        task: str,
        heartbeat_timeout_s: float | None = None,
    ) -> Agent:
        """Register an Idle agent; registering a live agent again with the same role and task
        is a heartbeat, and registering a Completed or Error one starts a new incarnation.

        The name needs no IRI (the agent's node is ``agent_iri(name)``, percent-encoded); the
        task must be an absolute IRI while agents are mirrored (the node links to it and lives
        in its graph), any name without spaces otherwise (see ``check_task_iri``).

        Raises:
            InvalidInputError: the name is live in another role or on another task, or the
                task is not an absolute IRI while mirrored; nothing is written then.
        """
        name, role = check_name(name, "agent name"), check_name(role, "role")
        task = check_task_iri(task, "task IRI", mirrored=self.mirror is not None)
        timeout = (
            self.db.config.heartbeat_timeout_s
            if heartbeat_timeout_s is None
            else check_seconds(heartbeat_timeout_s, "heartbeat_timeout_s")
        )
        with self.db.write(f"registering agent {name!r}") as conn:
            known = _find(conn, name)
            fresh = known is None or known.status not in LIVE
            if known is not None and not fresh:
                if (known.role, known.task) != (role, task):
                    raise InvalidInputError(
                        f"agent {name!r} is live as {known.role!r} on {known.task!r}; "
                        f"it cannot register as {role!r} on {task!r}"
                    )
                agent = self._apply(conn, known, known.status, None)  # a heartbeat
            else:
                agent = _insert(conn, name, role, task, timeout, known, self.db.clock())
        self._refresh([name])
        if fresh:
            payload = {"name": name, "role": role, "incarnation": agent.incarnation}
            self._publish(EventType.AGENT_REGISTERED, agent, payload)
        self._start_sweeper()
        return agent

    def unregister(self, name: str) -> bool:
        """Forget an agent and release its leases; return whether it was registered."""
        name = check_name(name, "agent name")
        with self.db.write(f"unregistering agent {name!r}") as conn:
            removed = conn.execute("DELETE FROM agents WHERE name = ?", (name,)).rowcount
        if self.leases is not None:
            self.leases.release_all(name)
        with self._mirror_lock:
            forget_nodes(self.mirror, [agent_iri(name)])
        return bool(removed)

    # -- beating and status ------------------------------------------------------------------

    def heartbeat(
        self,
        name: str,
        *,
        status: AgentStatus | str | None = None,
        operation: str | None = None,
    ) -> Agent:
        """Record that the agent is alive and renew its leases, in one transaction.

        Args:
            name: the agent.
            status: a new status to report, if any (see ``set_status``).
            operation: what it is doing now, if it says.

        Raises:
            InvalidTransitionError: the agent is Completed, or was lost (marked Error): it
                must register again.
        """
        return self._change(name, status, operation)

    def set_status(
        self, name: str, status: AgentStatus | str, *, operation: str | None = None
    ) -> Agent:
        """Change the agent's status (which is also a heartbeat).

        Completed and Error release the agent's leases.
        """
        return self._change(name, check_status(status), operation)

    def _change(
        self,
        name: str,
        status: AgentStatus | str | None,
        operation: str | None,
    ) -> Agent:
        name = check_name(name, "agent name")
        target = None if status is None else check_status(status)
        if operation is not None:
            check_text(operation, what="operation")
        with self.db.write(f"recording a heartbeat of agent {name!r}") as conn:
            before = _existing(conn, name)
            after = before.status if target is None else target
            agent = self._apply(conn, before, after, operation)
        if after not in LIVE and self.leases is not None:
            self.leases.release_all(name)
        self._refresh([name])
        if after is not before.status:
            self._publish(
                EventType.AGENT_STATUS_CHANGED,
                agent,
                {
                    "name": name,
                    "previous": before.status.value,
                    "status": after.value,
                    "operation": agent.operation,
                },
            )
        return agent

    def _apply(
        self, conn: sqlite3.Connection, before: Agent, after: AgentStatus, operation: str | None
    ) -> Agent:
        """Record a heartbeat with status ``after`` (renewing the leases of a live agent)."""
        _check_transition(before, after)
        conn.execute(
            "UPDATE agents SET status = ?, operation = COALESCE(?, operation), "
            "last_heartbeat = ?, revision = revision + 1 WHERE name = ?",
            (after.value, operation, self.db.clock(), before.name),
        )
        if self.leases is not None and after in LIVE:
            self.leases.renew_all(before.name)
        return _existing(conn, before.name)

    # -- reading -------------------------------------------------------------------------------

    def get(self, name: str) -> Agent:
        """Return the agent ``name``, or raise ``AgentNotFoundError``."""
        name = check_name(name, "agent name")
        with self.db.read(f"reading agent {name!r}") as conn:
            return _existing(conn, name)

    def agents(
        self,
        *,
        task: str | None = None,
        role: str | None = None,
        status: AgentStatus | str | None = None,
    ) -> list[Agent]:
        """Return the registered agents (filtered by task, role and status), by name."""
        wanted = None if status is None else check_status(status)
        task = None if task is None else check_name(task, "task IRI")
        role = None if role is None else check_name(role, "role")
        with self.db.read("listing agents") as conn:
            rows = conn.execute(f"SELECT {_COLUMNS} FROM agents ORDER BY name").fetchall()
        found = [_agent(row) for row in rows]
        return [
            agent
            for agent in found
            if (task is None or agent.task == task)
            and (role is None or agent.role == role)
            and (wanted is None or agent.status is wanted)
        ]

    def silent(self) -> list[Agent]:
        """Return the live agents silent for longer than their timeout (changing nothing)."""
        now = self.db.clock()
        return [agent for agent in self.agents() if agent.silent_at(now)]

    # -- the sweeper ---------------------------------------------------------------------------

    def sweep(self) -> list[Agent]:
        """Mark every silent agent Error, release its leases and publish ``AGENT_LOST``.

        Also deletes every expired lease (publishing ``LEASE_EXPIRED``), so leases on
        resources nobody asks for again do not linger. Returns the agents marked, as they are
        now.
        """
        lost = []
        for candidate in self.silent():
            agent = self._lose(candidate.name)
            if agent is not None:
                lost.append(agent)
        if self.leases is not None:
            self.leases.expire()
        return lost

    def _lose(self, name: str) -> Agent | None:
        with self.db.write(f"marking agent {name!r} lost") as conn:
            before = _find(conn, name)
            now = self.db.clock()
            if before is None or not before.silent_at(now):
                return None  # it beat (or went away) since the candidates were read
            conn.execute(
                "UPDATE agents SET status = 'Error', revision = revision + 1 WHERE name = ?",
                (name,),
            )
            agent = _existing(conn, name)
        released = [] if self.leases is None else self.leases.release_all(name)
        self._refresh([name])
        silent_s = now - before.last_heartbeat
        logger.warning("agent %r was silent for %.1f s: marked Error", name, silent_s)
        self._publish(
            EventType.AGENT_LOST,
            agent,
            {
                "name": name,
                "role": agent.role,
                "silent_s": silent_s,
                "released": [lease.resource for lease in released],
            },
        )
        return agent

    @property
    def sweeper_running(self) -> bool:
        """Whether the background sweeper thread is alive."""
        return self._sweeper is not None and self._sweeper.is_alive()

    def _start_sweeper(self) -> None:
        interval = self.db.config.sweep_interval_s
        with self._sweeper_lock:
            if interval <= 0 or self._sweeper is not None or self._stop.is_set():
                return
            self._sweeper = threading.Thread(
                target=self._sweep_forever,
                args=(interval,),
                name="gliding-horse-agent-sweeper",
                daemon=True,
            )
            self._sweeper.start()

    def _sweep_forever(self, interval: float) -> None:
        while not self._stop.wait(interval):
            try:
                self.sweep()
            except ClosedError:
                return
            except Exception:
                logger.exception("the agent sweeper failed; it tries again in %.1f s", interval)

    def close(self) -> None:
        """Stop the sweeper thread (the database is closed by its owner); twice is harmless."""
        self._stop.set()
        with self._sweeper_lock:
            sweeper, self._sweeper = self._sweeper, None
        if sweeper is not None and sweeper is not threading.current_thread():
            sweeper.join()

    # -- the graph mirror and events -----------------------------------------------------------

    def remirror(self) -> int:
        """Mirror every agent into the graph again (after a mirror failure); return how many."""
        names = [agent.name for agent in self.agents()]
        self._refresh(names)
        return len(names)

    def _refresh(self, names: Sequence[str]) -> None:
        if self.mirror is None:
            return
        with self._mirror_lock:
            with self.db.read("reading agents to mirror") as conn:
                found = [_find(conn, name) for name in names]
            for agent in found:
                if agent is not None:
                    mirror_nodes(self.mirror, agent.task, AGENTS_AREA, [agent.node()])

    def _publish(self, kind: EventType, agent: Agent, payload: dict[str, Any]) -> None:
        if self.bus is not None:
            self.bus.publish(kind, payload, task_iri=agent.task, source=agent.name)


def _agent(row: tuple[Any, ...]) -> Agent:
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


def _insert(
    conn: sqlite3.Connection,
    name: str,
    role: str,
    task: str,
    timeout_s: float,
    known: Agent | None,
    now: float,
) -> Agent:
    """Write a new registration (a new incarnation of a finished agent)."""
    incarnation = 1 if known is None else known.incarnation + 1
    conn.execute(
        f"INSERT OR REPLACE INTO agents ({_COLUMNS}) VALUES (?, ?, ?, 'Idle', NULL, ?, ?, ?, ?, 1)",
        (name, role, task, now, now, timeout_s, incarnation),
    )
    return _existing(conn, name)


def _find(conn: sqlite3.Connection, name: str) -> Agent | None:
    row = conn.execute(f"SELECT {_COLUMNS} FROM agents WHERE name = ?", (name,)).fetchone()
    return None if row is None else _agent(row)


def _existing(conn: sqlite3.Connection, name: str) -> Agent:
    agent = _find(conn, name)
    if agent is None:
        raise AgentNotFoundError(f"no agent is registered as {name!r}")
    return agent


def _check_transition(agent: Agent, target: AgentStatus) -> None:
    if target in TRANSITIONS[agent.status]:
        return
    hint = " (it was lost: register it again)" if agent.status is AgentStatus.ERROR else ""
    raise InvalidTransitionError(
        f"agent {agent.name!r} is {agent.status.value}{hint}; it cannot become {target.value}",
        current=agent.status.value,
        requested=target.value,
    )
