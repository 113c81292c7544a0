"""Attention: the supplementary-input queue: input sent to a task while its agent runs.

``SupplementaryQueue`` is what sessions, the model view and the adapters need of it;
``SupplementaryInputStore`` implements it on any ``EntryStore``, keeping each input as an L0
entry. The protocol's contract (its suite is ``tests/test_core/contracts/``) is the invariants
below, and one rule more: ``take_pending`` joins the transaction of the queue's L0 store that the
calling thread has open, so a session that takes the inputs and archives them as turns in one
``store.transaction()`` (``Session.start_cycle``) commits or rolls back both together. An
implementation therefore lives in the same database as the L0 store it is paired with (``store``).

Invariants:
- Zero loss: ``put`` returns only after the input is committed to L0, so a crash between
  ``put`` and delivery loses nothing; the next ``take_pending`` after a restart delivers it.
- Exactly once: ``take_pending`` reads and marks the pending inputs in one L0 transaction that
  excludes the task's other consumers (SQLite's write transactions exclude each other; a store
  whose writers run side by side takes a lock per task, as ``PostgresSupplementaryQueue``
  does), so concurrent consumers (threads or processes) never both receive an input.
- Order: inputs are delivered in the order their ``put`` committed, so each producer's inputs
  arrive in the order it sent them.
- Audit: consumed inputs are kept, marked with when and by whom they were consumed.
- Input: content is text that encodes as UTF-8; producer and consumer are labels (no control
  character); relevance is a finite real number in [0, 1], kept as a float.
"""

from __future__ import annotations

import asyncio
import threading
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from gliding_core.bus import EventBus, EventType
from gliding_core.checks import check_real
from gliding_core.errors import InvalidInputError
from gliding_core.jsonld import check_label, check_text, preview, validate_iri
from gliding_core.store.entry import Entry
from gliding_core.store.parts import is_head
from gliding_core.store.protocol import EntryStore

PENDING = "supplement:pending"
CONSUMED = "supplement:consumed"
IRI_PREFIX = "urn:gliding:supplement:"


@dataclass(frozen=True, slots=True)
class SupplementaryInput:
    """One supplementary input and its delivery state."""

    iri: str
    task_iri: str
    content: str
    producer: str | None
    relevance_score: float | None
    created_at: float
    consumed: bool
    consumed_at: float | None
    consumed_by: str | None


@runtime_checkable
class SupplementaryQueue(Protocol):
    """Per-task supplementary inputs: zero loss, exactly once, in order, audited (the module)."""

    @property
    def store(self) -> EntryStore:
        """The L0 store whose transactions ``take_pending`` joins."""
        ...

    def put(
        self,
        task_iri: str,
        content: str,
        *,
        producer: str | None = None,
        relevance: float | None = None,
    ) -> SupplementaryInput:
        """Store an input for the task's next cycle; return it once it is committed."""
        ...

    def take_pending(
        self, task_iri: str, *, consumer: str | None = None, limit: int | None = None
    ) -> list[SupplementaryInput]:
        """Return the task's pending inputs, oldest first, and mark them consumed (kept)."""
        ...

    async def take_pending_async(
        self, task_iri: str, *, consumer: str | None = None, limit: int | None = None
    ) -> list[SupplementaryInput]:
        """``take_pending`` for asyncio code, never blocking the event loop."""
        ...

    def snapshot(self, task_iri: str) -> list[SupplementaryInput]:
        """Return the task's pending inputs, oldest first, without consuming them."""
        ...

    def pending_count(self, task_iri: str) -> int:
        """Return how many inputs wait for the task."""
        ...

    def history(self, task_iri: str) -> list[SupplementaryInput]:
        """Return every input of the task, consumed or not, oldest first."""
        ...

    def wait(self, task_iri: str, timeout: float) -> bool:
        """Block until the task has a pending input (``True``) or ``timeout`` seconds pass."""
        ...

    def forget(self, task_iri: str) -> list[str]:
        """Delete every input of the task, pending or consumed, in one transaction; return
        their IRIs (the audit trail goes too: this is erasure on request)."""
        ...


class SupplementaryInputStore:
    """Per-task supplementary inputs, persisted as entries of an L0 store: a
    ``SupplementaryQueue``.

    Args:
        store: the L0 store that keeps the inputs.
        bus: where ``USER_SUPPLEMENTARY_INPUT`` events are published, if given.
    """

    def __init__(self, store: EntryStore, bus: EventBus | None = None) -> None:
        self.store = store
        self.bus = bus
        self._arrived = threading.Condition()

    def put(
        self,
        task_iri: str,
        content: str,
        *,
        producer: str | None = None,
        relevance: float | None = None,
    ) -> SupplementaryInput:
        """Store an input for the task's next cycle; safe from any thread at any time."""
        validate_iri(task_iri, what="task IRI")
        if not isinstance(content, str) or not content.strip():
            raise InvalidInputError(
                f"input content must be a non-empty string, got {preview(content)}"
            )
        check_text(content, what="input content")
        if producer is not None:
            check_label(producer, what="producer")
        if relevance is not None:
            relevance = check_real(relevance, what="relevance")
            if not 0.0 <= relevance <= 1.0:
                raise InvalidInputError(f"relevance must be in [0, 1], got {preview(relevance)}")
        now = time.time()
        node = {
            "@id": IRI_PREFIX + str(uuid.uuid4()),
            "@type": "SupplementaryInput",
            "task": {"@id": task_iri},
            "status": "pending",
            "created": now,
        }
        if producer is not None:
            node["producer"] = producer
        if relevance is not None:
            node["relevance"] = float(relevance)
        # put_text: an input of any size is kept whole (a large one in parts beside its entry).
        self.store.put_text(node, content, tags=[PENDING, _task_tag(task_iri)], importance=0.8)
        item = _from_node({**node, "text": content}, consumed=False)
        with self._arrived:
            self._arrived.notify_all()
        if self.bus is not None:
            self.bus.publish(
                EventType.USER_SUPPLEMENTARY_INPUT,
                {"iri": item.iri, "content": content, "producer": producer},
                task_iri=task_iri,
                source=producer,
            )
        return item

    def take_pending(
        self, task_iri: str, *, consumer: str | None = None, limit: int | None = None
    ) -> list[SupplementaryInput]:
        """Return the task's pending inputs, oldest first, and mark them consumed (kept)."""
        validate_iri(task_iri, what="task IRI")
        if consumer is not None:
            check_label(consumer, what="consumer")
        now = time.time()
        taken = []
        with self.store.transaction():
            self._exclude_other_consumers(task_iri)
            for entry in self._pending_entries(task_iri, limit):
                marks = {"status": "consumed", "consumedAt": now}
                if consumer is not None:
                    marks["consumedBy"] = consumer
                self.store.put({"@id": entry.iri, **marks})
                self.store.retag(entry.iri, add=[CONSUMED], remove=[PENDING])
                taken.append(_from_node({**self._whole(entry), **marks}, consumed=True))
        return taken

    def _exclude_other_consumers(self, task_iri: str) -> None:
        """Make the calling thread's transaction the task's only consumer until it ends.

        Nothing to do on a store whose write transactions already exclude each other (SQLite's
        ``BEGIN IMMEDIATE``); a store where they run side by side takes a lock here.
        """
        del task_iri

    def snapshot(self, task_iri: str) -> list[SupplementaryInput]:
        """Return the task's pending inputs without consuming them (for checkpoints)."""
        validate_iri(task_iri, what="task IRI")
        entries = self._pending_entries(task_iri, None)
        return [_from_node(self._whole(e), consumed=False) for e in entries]

    def pending_count(self, task_iri: str) -> int:
        """Return how many inputs wait for the task."""
        return len(self.snapshot(task_iri))

    def history(self, task_iri: str) -> list[SupplementaryInput]:
        """Return every input of the task, consumed or not, oldest first (the audit trail)."""
        validate_iri(task_iri, what="task IRI")
        entries = self.store.by_tags([_task_tag(task_iri)])
        return [_from_node(self._whole(e), consumed=CONSUMED in e.tags) for e in entries]

    def wait(self, task_iri: str, timeout: float) -> bool:
        """Block until the task has a pending input or ``timeout`` seconds pass.

        A put through this object wakes the wait at once; one through another handle or
        process is found when the wait looks again, at the latest when ``timeout`` ends.
        """
        validate_iri(task_iri, what="task IRI")
        if check_real(timeout, what="timeout") < 0:
            raise InvalidInputError(f"timeout must be >= 0 seconds, got {preview(timeout)}")
        deadline = time.monotonic() + timeout
        with self._arrived:
            while not self.snapshot(task_iri):
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                self._arrived.wait(remaining)
        return True

    def forget(self, task_iri: str) -> list[str]:
        """Delete every input of the task, pending or consumed, in one transaction; return
        their IRIs, oldest first (the audit trail goes too: this is erasure on request).

        It excludes the task's consumers as ``take_pending`` does, so a consumer running at
        the same moment either took its inputs before (and they are deleted now) or finds none:
        it never marks an input consumed after it was deleted, which would write it back.
        """
        validate_iri(task_iri, what="task IRI")
        with self.store.transaction():
            self._exclude_other_consumers(task_iri)
            iris = [entry.iri for entry in self.store.by_tags([_task_tag(task_iri)])]
            return self.store.delete_many(iris)

    async def take_pending_async(
        self, task_iri: str, *, consumer: str | None = None, limit: int | None = None
    ) -> list[SupplementaryInput]:
        """``take_pending`` for asyncio code: runs in a worker thread, never blocks the loop."""
        return await asyncio.to_thread(self.take_pending, task_iri, consumer=consumer, limit=limit)

    def _whole(self, entry: Entry) -> dict[str, object]:
        """The entry's node with its whole text (joined from its parts when it has some)."""
        node = entry.node
        if not is_head(node.get("text")):
            return node
        return {**node, "text": self.store.full_text(entry.iri) or ""}

    def _pending_entries(self, task_iri: str, limit: int | None) -> list[Entry]:
        return self.store.by_tags([PENDING, _task_tag(task_iri)], limit=limit)


def read_inputs(store: EntryStore, iris: Sequence[str]) -> dict[str, SupplementaryInput]:
    """Return the supplementary inputs among ``iris`` that ``store`` holds, by IRI, each with
    its whole text (what a session rebuilt from L0 needs of the inputs it took)."""
    wanted = [iri for iri in iris if isinstance(iri, str) and iri.startswith(IRI_PREFIX)]
    out: dict[str, SupplementaryInput] = {}
    for iri, entry in store.get_many(wanted).items():
        if "SupplementaryInput" not in entry.jsonld_types:
            continue
        node = entry.node
        if is_head(node.get("text")):
            node = {**node, "text": store.full_text(iri) or ""}
        out[iri] = _from_node(node, consumed=CONSUMED in entry.tags)
    return out


def _task_tag(task_iri: str) -> str:
    return f"task:{task_iri}"


def _from_node(node: dict[str, object], *, consumed: bool) -> SupplementaryInput:
    task = node.get("task")
    return SupplementaryInput(
        iri=str(node["@id"]),
        task_iri=str(task.get("@id")) if isinstance(task, dict) else "",
        content=str(node.get("text", "")),
        producer=_text(node.get("producer")),
        relevance_score=_number(node.get("relevance")),
        created_at=_number(node.get("created")) or 0.0,
        consumed=consumed,
        consumed_at=_number(node.get("consumedAt")),
        consumed_by=_text(node.get("consumedBy")),
    )


def _text(value: object) -> str | None:
    return value if isinstance(value, str) else None


def _number(value: object) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None
