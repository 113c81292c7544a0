"""L2: the agents of the blackboard: who works on which task in which role, and who is alive.

An agent registers with a role and a task, reports its status, and beats: each heartbeat
renews every lease it holds. An agent silent for longer than its heartbeat timeout (the
``heartbeat_timeout_s`` setting unless given at registration) is lost: the sweeper marks it
Error, releases its leases and publishes ``AGENT_LOST``, so a crashed agent cannot keep a
resource (the reference had the detection call but no default and no sweeper). Nor a name: a
registration under the name of a silent agent marks it lost first, whether or not this
process's sweeper has run yet (a new process over the store of a crashed one has none before
its first registration).

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
  the mirror is refreshed from the store after each change.

Events (when a bus is given; ``source`` is the agent's name, ``task_iri`` its task):
``AGENT_REGISTERED`` (``name``, ``role``, ``incarnation``), ``AGENT_STATUS_CHANGED``
(``name``, ``previous``, ``status``, ``operation``) and ``AGENT_LOST`` (``name``, ``role``,
``silent_s``, ``released``: the resources of the leases it lost).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping, Sequence
from typing import Any

from gliding_core.blackboard.coordination.checks import (
    check_name,
    check_seconds,
    check_task_iri,
    parse_choice,
)
from gliding_core.blackboard.coordination.leases import LeaseTable
from gliding_core.blackboard.coordination.protocol import (
    AgentRecords,
    CoordinationStore,
    NodeMirror,
    forget_nodes,
    mirror_nodes,
)
from gliding_core.blackboard.coordination.records import (
    AGENT_IRI_PREFIX,
    LIVE,
    Agent,
    AgentStatus,
    agent_iri,
)
from gliding_core.bus import EventBus, EventType
from gliding_core.errors import (
    AgentNotFoundError,
    ClosedError,
    InvalidInputError,
    InvalidTransitionError,
)
from gliding_core.jsonld import check_text, preview

__all__ = [
    "AGENTS_AREA",
    "AGENT_IRI_PREFIX",
    "LIVE",
    "TRANSITIONS",
    "Agent",
    "AgentRegistry",
    "AgentStatus",
    "agent_iri",
    "check_status",
]

logger = logging.getLogger(__name__)

AGENTS_AREA = "agents"

TRANSITIONS: Mapping[AgentStatus, frozenset[AgentStatus]] = {
    **{status: frozenset(AgentStatus) for status in LIVE},
    AgentStatus.COMPLETED: frozenset(),
    AgentStatus.ERROR: frozenset(),
}
"""The statuses each status may change to: a live agent any, a finished one none."""


def check_status(value: object) -> AgentStatus:
    """Return ``value`` as an ``AgentStatus`` (a member or its name, in any case)."""
    return parse_choice(AgentStatus, value, "agent status")


class AgentRegistry:
    """The agents of one coordination store, with the sweeper of silent ones.

    Args:
        db: the coordination store (shared with the other registries).
        leases: the lease table of the same store, whose leases heartbeats renew and the
            sweeper releases; leases are left alone when omitted.
        bus: where agent events are published; none when omitted.
        mirror: where agents are mirrored as graph nodes; none when omitted.
    """

    def __init__(
        self,
        db: CoordinationStore,
        *,
        leases: LeaseTable | None = None,
        bus: EventBus | None = None,
        mirror: NodeMirror | None = None,
    ) -> None:
        if not isinstance(db, CoordinationStore):
            raise InvalidInputError(f"db must be a CoordinationStore, got {preview(db)}")
        if leases is not None and (not isinstance(leases, LeaseTable) or leases.db is not db):
            raise InvalidInputError(f"leases must be a LeaseTable of {db!r}, got {preview(leases)}")
        self.db, self.leases, self.bus, self.mirror = db, leases, bus, mirror
        self._mirror_lock = threading.Lock()
        self._sweeper_lock = threading.Lock()
        self._stop = threading.Event()
        self._sweeper: threading.Thread | None = None

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

        A name whose agent has been silent for longer than its timeout (a crashed process's)
        is taken over: that agent is marked lost first, as the sweeper would mark it (Error,
        its leases released, ``AGENT_LOST``), and this one is its next incarnation.

        Raises:
            InvalidInputError: the name is live in another role or on another task (the
                message says how to proceed), or the task is not an absolute IRI while
                mirrored; nothing is written then.
        """
        name, role = check_name(name, "agent name"), check_name(role, "role")
        task = check_task_iri(task, "task IRI", mirrored=self.mirror is not None)
        timeout = (
            self.db.config.heartbeat_timeout_s
            if heartbeat_timeout_s is None
            else check_seconds(heartbeat_timeout_s, "heartbeat_timeout_s")
        )
        self._lose_if_silent(name)
        with self.db.write(f"registering agent {name!r}") as tx:
            known = tx.agents.find(name)
            fresh = known is None or known.status not in LIVE
            if known is not None and not fresh:
                if (known.role, known.task) != (role, task):
                    raise InvalidInputError(
                        _name_taken(known, tx.now(), f"register as {role!r} on {task!r}")
                    )
                agent = self._apply(tx.agents, known, known.status, None, tx.now())  # a beat
            else:
                incarnation = 1 if known is None else known.incarnation + 1
                now = tx.now()
                agent = Agent(
                    name, role, task, AgentStatus.IDLE, None, now, now, timeout, incarnation, 1
                )
                tx.agents.insert(agent)
        self._refresh([name])
        if fresh:
            payload = {"name": name, "role": role, "incarnation": agent.incarnation}
            self._publish(EventType.AGENT_REGISTERED, agent, payload)
        self._start_sweeper()
        return agent

    def refusal(self, name: str, *, role: str, task: str) -> str | None:
        """Return why ``register(name, role=role, task=task)`` would be refused, or ``None``.

        The refusal (the one ``register`` raises) is for a name that a live agent keeps in
        another role or on another task, and says how to proceed; an agent silent past its
        timeout keeps nothing. The name, role and task must be valid (``register`` checks
        them).
        """
        name, role = check_name(name, "agent name"), check_name(role, "role")
        task = check_name(task, "task IRI")
        with self.db.read(f"reading agent {name!r}") as tx:
            known, now = tx.agents.find(name), tx.now()
        if known is None or known.status not in LIVE or known.silent_at(now):
            return None
        if (known.role, known.task) == (role, task):
            return None
        return _name_taken(known, now, f"register as {role!r} on {task!r}")

    def unregister(self, name: str) -> bool:
        """Forget an agent and release its leases; return whether it was registered."""
        name = check_name(name, "agent name")
        with self.db.write(f"unregistering agent {name!r}") as tx:
            removed = tx.agents.delete(name)
        if self.leases is not None:
            self.leases.release_all(name)
        with self._mirror_lock:
            forget_nodes(self.mirror, [agent_iri(name)])
        return removed

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
        with self.db.write(f"recording a heartbeat of agent {name!r}") as tx:
            before = _existing(tx.agents, name)
            after = before.status if target is None else target
            agent = self._apply(tx.agents, before, after, operation, tx.now())
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
        self,
        agents: AgentRecords,
        before: Agent,
        after: AgentStatus,
        operation: str | None,
        now: float,
    ) -> Agent:
        """Record a heartbeat with status ``after`` (renewing the leases of a live agent, in a
        transaction nested in the caller's)."""
        _check_transition(before, after)
        agent = _found(agents.beat(before.name, after, operation, now), before.name)
        if self.leases is not None and after in LIVE:
            self.leases.renew_all(before.name)
        return agent

    # -- reading -------------------------------------------------------------------------------

    def get(self, name: str) -> Agent:
        """Return the agent ``name``, or raise ``AgentNotFoundError``."""
        name = check_name(name, "agent name")
        with self.db.read(f"reading agent {name!r}") as tx:
            return _existing(tx.agents, name)

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
        with self.db.read("listing agents") as tx:
            found = tx.agents.all()
        return [
            agent
            for agent in found
            if (task is None or agent.task == task)
            and (role is None or agent.role == role)
            and (wanted is None or agent.status is wanted)
        ]

    def silent(self) -> list[Agent]:
        """Return the live agents silent for longer than their timeout (changing nothing)."""
        with self.db.read("finding silent agents") as tx:
            now, found = tx.now(), tx.agents.all()
        return [agent for agent in found if agent.silent_at(now)]

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

    def _lose_if_silent(self, name: str) -> None:
        """Mark ``name`` lost now if its agent is silent past its timeout (or leave it)."""
        with self.db.read(f"reading agent {name!r}") as tx:
            known, now = tx.agents.find(name), tx.now()
        if known is not None and known.silent_at(now):
            self._lose(name)

    def _lose(self, name: str) -> Agent | None:
        with self.db.write(f"marking agent {name!r} lost") as tx:
            before = tx.agents.find(name)
            now = tx.now()
            if before is None or not before.silent_at(now):
                return None  # it beat (or went away) since the candidates were read
            agent = _found(tx.agents.set_status(name, AgentStatus.ERROR), name)
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
        """Stop the sweeper thread (the store is closed by its owner); twice is harmless."""
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
            with self.db.read("reading agents to mirror") as tx:
                found = [tx.agents.find(name) for name in names]
            for agent in found:
                if agent is not None:
                    mirror_nodes(self.mirror, agent.task, AGENTS_AREA, [agent.node()])

    def _publish(self, kind: EventType, agent: Agent, payload: dict[str, Any]) -> None:
        if self.bus is not None:
            self.bus.publish(kind, payload, task_iri=agent.task, source=agent.name)


def _name_taken(holder: Agent, now: float, wanted: str) -> str:
    """Return the message refusing a name that the live agent ``holder`` keeps, with the ways on.

    Args:
        holder: the live agent of that name.
        now: the coordination clock's time (how long ago it beat).
        wanted: what was refused (``"register as 'plan' on 'urn:t:2'"``).
    """
    silent = max(0.0, now - holder.last_heartbeat)
    return (
        f"agent {holder.name!r} is live as {holder.role!r} on {holder.task!r} (its last"
        f" heartbeat {silent:.1f} s ago, status {holder.status.value}); it cannot {wanted}."
        f" Give this agent another name; or wait until that agent completes, or falls silent"
        f" for {holder.timeout_s:g} s (a crashed process's agent: its name is free then);"
        f" or, if that agent is gone for good, unregister it"
        f" (memory.blackboard.coordination.agents.unregister({holder.name!r}))"
    )


def _found(agent: Agent | None, name: str) -> Agent:
    if agent is None:
        raise AgentNotFoundError(f"no agent is registered as {name!r}")
    return agent


def _existing(agents: AgentRecords, name: str) -> Agent:
    return _found(agents.find(name), name)


def _check_transition(agent: Agent, target: AgentStatus) -> None:
    if target in TRANSITIONS[agent.status]:
        return
    hint = " (it was lost: register it again)" if agent.status is AgentStatus.ERROR else ""
    raise InvalidTransitionError(
        f"agent {agent.name!r} is {agent.status.value}{hint}; it cannot become {target.value}",
        current=agent.status.value,
        requested=target.value,
    )
