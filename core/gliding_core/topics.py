"""L1, above the sessions: the topic coherence monitor, which compresses a topic left behind.

A boundary lies before turn ``i`` when the similarity between the block of ``window`` turns
ending at ``i - 1`` and the block of up to ``window`` turns starting at ``i`` is below the
threshold (0.4). With ``window=1`` this is plain adjacent-turn similarity; wider blocks
average out single off-topic remarks (``gliding-horse bench topics`` measures both). On a new
boundary the monitor publishes ``TOPIC_SHIFT`` and compresses the old topic: its turns are
marked to be evicted first and, while the chain is above ``proactive_fill`` of its budget,
evicted at once (archived in L0 as always).

The background thread checks every ``interval_s`` seconds and stops when ``stop()`` is called.

Invariants: the monitor sits above ``gliding_core.session`` and uses only its public methods (a
copy of the chain, ``Session.compress_topic``); a boundary is reported once per session.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from gliding_core.bus import EventBus, EventType
from gliding_core.config import TopicConfig
from gliding_core.hyperspace.vectors import Vector, as_vector, cosine
from gliding_core.session import Session, Turn

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Boundary:
    """A topic boundary before the turn at ``index``, with the similarity that marked it."""

    index: int
    similarity: float


def boundaries(
    embeddings: Sequence[Vector | Sequence[float] | None], *, threshold: float, window: int
) -> list[Boundary]:
    """Return the topic boundaries of a sequence of embeddings (missing ones are skipped)."""
    present = [(i, as_vector(e)) for i, e in enumerate(embeddings) if e is not None]
    found = []
    # A gap is judged once a whole block follows it, so a boundary, once found, stays found.
    for position in range(1, len(present) - window + 1):
        left = [v for _, v in present[max(0, position - window) : position]]
        right = [v for _, v in present[position : position + window]]
        value = cosine(np.mean(left, axis=0), np.mean(right, axis=0))
        if value is not None and value < threshold:
            found.append(Boundary(present[position][0], value))
    return _separate(found, window)


def _separate(found: list[Boundary], window: int) -> list[Boundary]:
    """Keep the deepest boundary of each run of boundaries closer than ``window`` turns."""
    kept: list[Boundary] = []
    for boundary in found:
        if kept and boundary.index - kept[-1].index < window:
            if boundary.similarity < kept[-1].similarity:
                kept[-1] = boundary
            continue
        kept.append(boundary)
    return kept


class TopicMonitor:
    """Watch sessions for topic shifts, on demand and on a background thread.

    Args:
        bus: where ``TOPIC_SHIFT`` events go.
        config: threshold, window, interval and proactive fill.
        sessions: returns the sessions to watch (the memory's open sessions).
    """

    def __init__(
        self, bus: EventBus, config: TopicConfig, sessions: Callable[[], list[Session]]
    ) -> None:
        self.bus, self.config, self._sessions = bus, config, sessions
        self._seen: dict[str, set[str]] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def check(self, session: Session) -> list[Boundary]:
        """Find the session's new topic boundaries now; compress the old topic if one is new."""
        turns = session.turns
        found = boundaries(
            [t.embedding for t in turns], threshold=self.config.threshold, window=self.config.window
        )
        with self._lock:
            seen = self._seen.setdefault(session.iri, set())
            new = [b for b in found if turns[b.index].l0_archive_iri not in seen]
            seen.update(turns[b.index].l0_archive_iri for b in new)
        if new:
            self._compress(session, new[-1], turns[new[-1].index])
        return new

    def _compress(self, session: Session, boundary: Boundary, first: Turn) -> None:
        old, evicted = session.compress_topic(first.l0_archive_iri, self.config.proactive_fill)
        self.bus.publish(
            EventType.TOPIC_SHIFT,
            {
                "session": session.iri,
                "before": first.l0_archive_iri,
                "similarity": boundary.similarity,
                "old_topic_turns": [t.l0_archive_iri for t in old],
                "evicted": [t.l0_archive_iri for t in evicted],
            },
            task_iri=session.task_iri,
            source="topic-monitor",
        )

    def check_all(self) -> int:
        """Check every watched session; return how many boundaries were new."""
        return sum(len(self.check(s)) for s in self._sessions())

    def start(self) -> None:
        """Start the background checks (no-op when running or when ``interval_s`` is 0)."""
        if self.config.interval_s <= 0 or (self._thread and self._thread.is_alive()):
            return
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="gliding-topic-monitor", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        """Stop the background checks and wait for the thread to end."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)
            self._thread = None

    def _run(self) -> None:
        while not self._stop.wait(self.config.interval_s):
            try:
                self.check_all()
            except Exception:  # the monitor must outlive a failing check
                logger.exception("topic check failed")
