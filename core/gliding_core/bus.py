"""The memory bus: typed in-process events between the memory's layers and their observers.

Invariants:
- Publishing never fails because of a subscriber: a subscriber's exception is logged and the
  other subscribers still run.
- Any number of event types, known or custom: a type is a string, not a bit of a fixed mask.
- The history is bounded (``history`` most recent events) and sequence numbers increase.
- Safe from several threads: subscribers are called on the publishing thread, outside the lock.
"""

from __future__ import annotations

import itertools
import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from gliding_core.errors import InvalidInputError
from gliding_core.jsonld import preview

logger = logging.getLogger(__name__)


class EventType(str, Enum):
    """The event types the memory itself publishes; any other non-empty string works too."""

    USER_SUPPLEMENTARY_INPUT = "USER_SUPPLEMENTARY_INPUT"
    SUPPLEMENTARY_CONTEXT = "SUPPLEMENTARY_CONTEXT"
    TOPIC_SHIFT = "TOPIC_SHIFT"
    TURN_EVICTED = "TURN_EVICTED"
    TURN_PAGED_IN = "TURN_PAGED_IN"
    CACHE_INVALIDATE = "CACHE_INVALIDATE"
    # L2 blackboard nodes; the payload carries ``iri``, ``graph`` and ``generation``.
    NODE_CREATED = "NODE_CREATED"
    NODE_UPDATED = "NODE_UPDATED"
    NODE_DELETED = "NODE_DELETED"
    # Dirty blackboard nodes written to L0; the payload carries ``iris`` and ``count``.
    MEMORY_WRITE_BACK = "MEMORY_WRITE_BACK"
    # L2 coordination (leases, tasks, agents, messages); payloads are described in each module.
    LEASE_GRANTED = "LEASE_GRANTED"
    LEASE_RELEASED = "LEASE_RELEASED"
    LEASE_EXPIRED = "LEASE_EXPIRED"
    TASK_REGISTERED = "TASK_REGISTERED"
    TASK_STATUS_CHANGED = "TASK_STATUS_CHANGED"
    TASK_RELEASED = "TASK_RELEASED"
    AGENT_REGISTERED = "AGENT_REGISTERED"
    AGENT_STATUS_CHANGED = "AGENT_STATUS_CHANGED"
    AGENT_LOST = "AGENT_LOST"
    COORDINATION_MESSAGE = "COORDINATION_MESSAGE"
    # A write to a shared node invalidated other agents' copies (gliding_core.coherence).
    COPIES_INVALIDATED = "COPIES_INVALIDATED"


@dataclass(frozen=True, slots=True)
class Event:
    """One event: its type, what it is about, and a JSON-like payload."""

    type: str
    payload: Mapping[str, Any] = field(default_factory=dict)
    task_iri: str | None = None
    source: str | None = None
    timestamp: float = 0.0
    sequence: int = 0


Handler = Callable[[Event], None]


class Subscription:
    """A handle returned by ``EventBus.subscribe``; ``cancel()`` stops delivery."""

    def __init__(self, bus: EventBus, handler: Handler, types: frozenset[str] | None) -> None:
        self._bus, self.handler, self.types = bus, handler, types

    def matches(self, event: Event) -> bool:
        """Return whether this subscription wants ``event``."""
        return self.types is None or event.type in self.types

    def cancel(self) -> None:
        """Stop delivering events to this subscription; cancelling twice is harmless."""
        self._bus._remove(self)


class EventBus:
    """An in-process publish/subscribe bus with a bounded history.

    Args:
        history: how many recent events to keep for ``recent()``.
    """

    def __init__(self, history: int = 1_000) -> None:
        if isinstance(history, bool) or not isinstance(history, int) or history < 0:
            raise InvalidInputError(f"history must be an int >= 0, got {preview(history)}")
        self._lock = threading.Lock()
        self._subscriptions: list[Subscription] = []
        self._history: deque[Event] = deque(maxlen=history)
        self._sequence = itertools.count(1)

    def subscribe(self, handler: Handler, types: Iterable[str] | None = None) -> Subscription:
        """Call ``handler`` with every published event of ``types`` (all types when ``None``)."""
        if not callable(handler):
            raise InvalidInputError(f"handler must be callable, got {preview(handler)}")
        wanted = None if types is None else frozenset(_check_type(t) for t in types)
        subscription = Subscription(self, handler, wanted)
        with self._lock:
            self._subscriptions.append(subscription)
        return subscription

    def publish(
        self,
        type: str,
        payload: Mapping[str, Any] | None = None,
        *,
        task_iri: str | None = None,
        source: str | None = None,
    ) -> Event:
        """Publish an event to every matching subscriber and return it."""
        with self._lock:
            event = Event(
                type=_check_type(type),
                payload=dict(payload or {}),
                task_iri=task_iri,
                source=source,
                timestamp=time.time(),
                sequence=next(self._sequence),
            )
            self._history.append(event)
            targets = [s for s in self._subscriptions if s.matches(event)]
        for subscription in targets:
            try:
                subscription.handler(event)
            except Exception:
                logger.exception("event subscriber %r failed on %s", subscription.handler, event)
        return event

    def recent(self, type: str | None = None, *, limit: int | None = None) -> list[Event]:
        """Return the kept events (of ``type`` when given), oldest first."""
        with self._lock:
            events = [e for e in self._history if type is None or e.type == type]
        return events if limit is None else events[-limit:]

    def _remove(self, subscription: Subscription) -> None:
        with self._lock:
            if subscription in self._subscriptions:
                self._subscriptions.remove(subscription)


def _check_type(value: object) -> str:
    if isinstance(value, EventType):
        return value.value
    if not isinstance(value, str) or not value:
        raise InvalidInputError(f"event type must be a non-empty string, got {preview(value)}")
    return value
