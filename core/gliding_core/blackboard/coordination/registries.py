"""L2: the coordination half of the blackboard in one object: leases, tasks, agents, messages.

``Coordination`` builds the four registries over one ``CoordinationStore`` (SQLite's
``CoordinationDB`` or any other backend) with one bus and one graph mirror, wired to each
other (heartbeats renew leases; the sweeper releases them), and closes them in order: the
sweeper stops before the store closes.

Invariants: every registry shares the store, the bus and the mirror given here; closing twice
is harmless; a store passed in ready-made is closed only when ``owns_db`` says so.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable

from gliding_core.blackboard.coordination.agents import AgentRegistry
from gliding_core.blackboard.coordination.leases import LeaseTable
from gliding_core.blackboard.coordination.messages import MessageBoard
from gliding_core.blackboard.coordination.protocol import CoordinationStore, NodeMirror
from gliding_core.blackboard.coordination.sqlite import CoordinationDB
from gliding_core.blackboard.coordination.tasks import TaskRegistry
from gliding_core.bus import EventBus
from gliding_core.config import CoordinationConfig
from gliding_core.errors import InvalidInputError
from gliding_core.jsonld import preview


class Coordination:
    """The leases, tasks, agents and messages of one coordination store.

    Args:
        db: the coordination store.
        bus: where every registry publishes; a new bus when omitted.
        mirror: where tasks, agents and task messages are mirrored as graph nodes.
        owns_db: whether ``close()`` closes ``db`` too.

    Example:
        >>> with Coordination.open(None) as coordination:
        ...     task = coordination.tasks.register("urn:task:1")
        ...     agent = coordination.agents.register("planner", role="plan", task=task.iri)
        ...     lease = coordination.leases.acquire("urn:node:1", agent.name, "write")
    """

    def __init__(
        self,
        db: CoordinationStore,
        *,
        bus: EventBus | None = None,
        mirror: NodeMirror | None = None,
        owns_db: bool = True,
    ) -> None:
        if not isinstance(db, CoordinationStore):
            raise InvalidInputError(f"db must be a CoordinationStore, got {preview(db)}")
        self.db, self.owns_db = db, owns_db
        self.bus = bus if bus is not None else EventBus()
        self.leases = LeaseTable(db, bus=self.bus)
        self.tasks = TaskRegistry(db, bus=self.bus, mirror=mirror)
        self.agents = AgentRegistry(db, leases=self.leases, bus=self.bus, mirror=mirror)
        self.messages = MessageBoard(db, bus=self.bus, mirror=mirror)

    @classmethod
    def open(
        cls,
        directory: str | os.PathLike[str] | None,
        *,
        config: CoordinationConfig | None = None,
        bus: EventBus | None = None,
        mirror: NodeMirror | None = None,
        clock: Callable[[], float] = time.time,
    ) -> Coordination:
        """Open the coordination of a memory directory (``blackboard.sqlite3``), or a private
        in-memory one when ``directory`` is ``None``; ``close()`` closes its database."""
        db = CoordinationDB.in_directory(directory, config=config, clock=clock)
        return cls(db, bus=bus, mirror=mirror, owns_db=True)

    @property
    def mirror(self) -> NodeMirror | None:
        """The graph mirror of tasks, agents and messages (settable, for a late blackboard)."""
        return self.tasks.mirror

    @mirror.setter
    def mirror(self, mirror: NodeMirror | None) -> None:
        self.tasks.mirror = self.agents.mirror = self.messages.mirror = mirror

    def remirror(self) -> int:
        """Mirror every task and agent into the graph again; return how many nodes."""
        return self.tasks.remirror() + self.agents.remirror()

    def close(self) -> None:
        """Stop the agent sweeper, then close the store if it is owned; twice is harmless."""
        self.agents.close()
        if self.owns_db:
            self.db.close()

    def __enter__(self) -> Coordination:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Coordination({self.db!r})"
