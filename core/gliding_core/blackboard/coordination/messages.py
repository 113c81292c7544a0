"""L2: coordination messages between the agents of a task: durable, ordered, pushed and read.

A message has a topic, an optional task and sender, and a JSON object as payload. Publishing
stores it in the coordination store under the next ``sequence`` and then pushes it, in this
process, to the subscribers whose topic and task match (through the memory's event bus, as a
``COORDINATION_MESSAGE`` event). Readers in any process catch up with ``read_since(cursor)``:
every message after the cursor, in order, with no cap other than the caller's ``limit`` (the
reference polled and stopped at 50).

Invariants:
- Sequences strictly increase and are never reused (the store's promise), even after
  ``prune``; a cursor is the last sequence its reader has seen.
- A message is validated whole (topic, task, sender, a JSON-serialisable object payload of at
  most ``max_message_bytes``, nested at most ``DEFAULT_MAX_DEPTH`` deep, valid Unicode) before
  anything is written; a stored message never changes.
- Pushes in this process follow the order of the sequences: storing and pushing happen under
  one lock, so subscribers run on the publishing thread, one message at a time. A subscriber
  may publish (the lock is re-entrant); it should not block on another thread that publishes.
  A failing subscriber is logged by the bus; the message stands.
- With a mirror, a message about a task is also a ``CoordinationMessage`` node in the task's
  ``messages`` area (its payload as a JSON string), so queries see the conversation.
"""

from __future__ import annotations

import json
import threading
import uuid
from collections.abc import Callable, Mapping
from typing import Any

from gliding_core.blackboard.coordination.checks import check_name, check_task_iri
from gliding_core.blackboard.coordination.protocol import (
    CoordinationStore,
    NodeMirror,
    mirror_nodes,
)
from gliding_core.blackboard.coordination.records import Message
from gliding_core.bus import Event, EventBus, EventType, Subscription
from gliding_core.errors import ContentTooLargeError, InvalidInputError, NodeTooDeepError
from gliding_core.jsonld import DEFAULT_MAX_DEPTH, check_text, nesting_depth, preview

__all__ = ["MESSAGES_AREA", "Message", "MessageBoard"]

MESSAGES_AREA = "messages"
_FIELDS = frozenset(("sequence", "iri", "topic", "task", "sender", "payload", "created_at"))


class MessageBoard:
    """The coordination messages of one coordination store.

    Args:
        db: the coordination store (shared with the other registries).
        bus: the event bus that pushes messages to subscribers; a private one when omitted.
        mirror: where messages about a task are mirrored as graph nodes; none when omitted.
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
        self.db, self.mirror = db, mirror
        self.bus = bus if bus is not None else EventBus(history=0)
        self._order = threading.RLock()

    def publish(
        self,
        topic: str,
        payload: Mapping[str, Any] | None = None,
        *,
        task: str | None = None,
        sender: str | None = None,
    ) -> Message:
        """Store a message and push it to the matching subscribers of this process.

        Raises:
            InvalidInputError: a bad topic, task or sender (with a mirror, a task that is no
                absolute IRI: ``check_task_iri``), or a payload that is not a JSON object
                (``ContentTooLargeError`` when it is over ``max_message_bytes``); nothing is
                stored then.
        """
        topic = check_name(topic, "topic")
        mirrored = self.mirror is not None
        task = None if task is None else check_task_iri(task, "task IRI", mirrored=mirrored)
        sender = None if sender is None else check_name(sender, "sender")
        text = self._encode(payload)
        with self._order:
            with self.db.write(f"publishing a message on {topic!r}") as tx:
                now, iri = tx.now(), f"urn:uuid:{uuid.uuid4()}"
                sequence = tx.messages.append(
                    iri=iri, topic=topic, task=task, sender=sender, payload=text, now=now
                )
            message = Message(sequence, iri, topic, task, sender, json.loads(text), now)
            if task is not None:
                mirror_nodes(self.mirror, task, MESSAGES_AREA, [message.node()])
            self.bus.publish(
                EventType.COORDINATION_MESSAGE, message.as_dict(), task_iri=task, source=sender
            )
        return message

    def _encode(self, payload: object) -> str:
        if payload is None:
            payload = {}
        if not isinstance(payload, Mapping):
            raise InvalidInputError(f"payload must be a JSON object, got {preview(payload)}")
        try:  # bounded before the (recursive) encoder sees it, and every reader decodes it
            nesting_depth(payload, DEFAULT_MAX_DEPTH, what="payload")
            text = json.dumps(dict(payload), ensure_ascii=False, allow_nan=False)
        except NodeTooDeepError:
            raise InvalidInputError(
                f"payload nests more than {DEFAULT_MAX_DEPTH} levels deep: {preview(payload)}"
            ) from None
        except (TypeError, ValueError) as exc:
            raise InvalidInputError(
                f"payload is not JSON-serialisable ({exc}): {preview(payload)}"
            ) from None
        if not text.isascii():  # stores hold UTF-8: a lone surrogate, found, is named
            check_text(text, what="payload", locate=payload)
        limit = self.db.config.max_message_bytes
        size = len(text.encode("utf-8"))
        if size > limit:
            raise ContentTooLargeError(
                f"message payload is {size} bytes, over the limit of {limit}: {preview(payload)}"
            )
        return text

    def read_since(
        self,
        cursor: int = 0,
        *,
        topic: str | None = None,
        task: str | None = None,
        limit: int | None = None,
    ) -> list[Message]:
        """Return the messages after sequence ``cursor`` (of ``topic`` and ``task``), in order.

        Args:
            cursor: the last sequence already seen (0: from the start).
            topic, task: keep only the messages of this topic and this task.
            limit: the most messages to return; all of them when ``None``.
        """
        if isinstance(cursor, bool) or not isinstance(cursor, int) or cursor < 0:
            raise InvalidInputError(f"cursor must be an int >= 0, got {preview(cursor)}")
        if limit is not None and (
            isinstance(limit, bool) or not isinstance(limit, int) or limit < 1
        ):
            raise InvalidInputError(f"limit must be an int >= 1 or None, got {preview(limit)}")
        topic = None if topic is None else check_name(topic, "topic")
        task = None if task is None else check_name(task, "task IRI")
        with self.db.read("reading coordination messages") as tx:
            return tx.messages.since(cursor, topic=topic, task=task, limit=limit)

    def latest(self) -> int:
        """Return the sequence of the newest message (0 when there is none)."""
        with self.db.read("reading the newest message") as tx:
            return tx.messages.latest()

    def subscribe(
        self,
        callback: Callable[[Message], None],
        *,
        topic: str | None = None,
        task: str | None = None,
    ) -> Subscription:
        """Call ``callback`` with each message published in this process on ``topic``/``task``.

        Returns the bus subscription; ``cancel()`` it to stop.
        """
        if not callable(callback):
            raise InvalidInputError(f"callback must be callable, got {preview(callback)}")
        topic = None if topic is None else check_name(topic, "topic")
        task = None if task is None else check_name(task, "task IRI")

        def deliver(event: Event) -> None:
            if set(event.payload) != _FIELDS:
                return  # another publisher's event of the same type: not a stored message
            message = Message(**event.payload)
            if (topic is None or message.topic == topic) and (task is None or message.task == task):
                callback(message)

        return self.bus.subscribe(deliver, [EventType.COORDINATION_MESSAGE])

    def prune(self, up_to: int) -> int:
        """Delete the messages up to sequence ``up_to`` (included); return how many."""
        if isinstance(up_to, bool) or not isinstance(up_to, int) or up_to < 0:
            raise InvalidInputError(f"up_to must be an int >= 0, got {preview(up_to)}")
        with self.db.write("pruning coordination messages") as tx:
            return tx.messages.prune(up_to)
