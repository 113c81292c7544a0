"""L3: intent-driven prefetch: what an agent is about to need, paged into the blackboard.

On an intent change (a new plan step, a new task for an agent, entities mentioned in the
latest message; ``listen`` takes them from the memory bus) the prefetcher walks two hops
breadth-first from the entities involved, over L0 edges (references between entries, both
directions) and blackboard links (references in the nodes' JSON, both directions), and scores
each entity reached ``0.5 ** hops``, summed over the starting entities (a start counts once
per entity, at its first, shortest visit). The ``top_k`` best not already on the blackboard
nor queued are paged in by a background worker: the L0 entry is written, clean, into the
task's ``knowledge`` area, where the role frames see it.

Invariants:
- The queue is bounded (``queue_size``): a full queue drops the new request (counted) rather
  than block the agent; an IRI is queued at most once at a time.
- A failed load is retried after ``backoff_s * 2 ** attempt`` seconds, ``retries`` times, then
  dropped (counted); an entry L0 does not hold is not retried.
- The worker is drained (the reference's queue never was) and stops on ``close()`` or when the
  blackboard closes (it looks every ``poll_s`` while idle); ``close()`` waits for it.
- A paged-in node is written clean (not dirty): it is L0's copy, never written back unchanged.
"""

from __future__ import annotations

import heapq
import itertools
import json
import logging
import re
import threading
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import pyoxigraph as ox

from gliding_core.blackboard.board import Blackboard
from gliding_core.blackboard.validation import check_iri, is_iri
from gliding_core.blackboard.vocabulary import area_graph, graph_area
from gliding_core.bus import Event, EventBus, EventType, Subscription
from gliding_core.checks import check_count
from gliding_core.errors import ClosedError, GlidingError, InvalidInputError
from gliding_core.jsonld import node_references, preview
from gliding_core.store.protocol import EntryStore

logger = logging.getLogger(__name__)

DECAY = 0.5
PAGE_AREA = "knowledge"
_MENTION = re.compile(r"(?:urn|https?|iri):[^\s\"'<>(){}\[\],]+")


@dataclass(frozen=True, slots=True)
class PrefetchStats:
    """What the prefetcher has done."""

    requested: int
    loaded: int
    missing: int
    retried: int
    failed: int
    dropped: int
    queued: int


@dataclass(frozen=True, slots=True)
class _Job:
    task: str
    iri: str
    attempt: int = 0


class Prefetcher:
    """Pages the entities an agent is about to need from L0 into the blackboard.

    Args:
        board: the blackboard paged into.
        store: the L0 store paged from (and whose edges are walked).
        hops: how far the walk goes (2).
        top_k: how many entities one intent change loads at most (5).
        queue_size: the most loads waiting.
        retries: how many times a failed load is tried again.
        backoff_s: the first retry's delay (doubling each time).
        poll_s: how often the idle worker looks whether the blackboard closed.
        start: start the worker now (else on the first request).
    """

    def __init__(
        self,
        board: Blackboard,
        store: EntryStore,
        *,
        hops: int = 2,
        top_k: int = 5,
        queue_size: int = 256,
        retries: int = 3,
        backoff_s: float = 0.05,
        poll_s: float = 0.5,
        start: bool = False,
    ) -> None:
        self.board, self.store = board, store
        self.hops = check_count(hops, what="hops", minimum=1)
        self.top_k = check_count(top_k, what="top_k", minimum=1)
        self.queue_size = check_count(queue_size, what="queue_size", minimum=1)
        self.retries = check_count(retries, what="retries", minimum=0)
        if not isinstance(backoff_s, (int, float)) or backoff_s < 0 or poll_s <= 0:
            raise InvalidInputError("backoff_s must be >= 0 and poll_s > 0 seconds")
        self.backoff_s, self.poll_s = float(backoff_s), float(poll_s)
        self._heap: list[tuple[float, int, _Job]] = []
        self._order = itertools.count()
        self._pending: set[str] = set()
        self._active = 0
        self._cond = threading.Condition()
        self._stopped = False
        self._thread: threading.Thread | None = None
        self._counts = dict.fromkeys(("requested", "loaded", "missing", "retried", "failed"), 0)
        self._counts["dropped"] = 0
        self.loaded: list[str] = []  # every IRI paged in, in order (for the benchmark)
        if start:
            self.start()

    # -- scoring -----------------------------------------------------------------------------

    def related(self, entities: Sequence[str]) -> list[tuple[str, float]]:
        """Return the entities within ``hops`` of ``entities``, best first, starts excluded.

        An entity's score is the sum over starting entities of ``0.5 ** hops`` at its first
        (shortest) visit from each start.
        """
        starts = list(dict.fromkeys(check_iri(e, "entity IRI") for e in entities))
        scores: dict[str, float] = {}
        cache: dict[str, set[str]] = {}
        for start in starts:
            for iri, hop in self._walk(start, cache):
                scores[iri] = scores.get(iri, 0.0) + DECAY**hop
        for start in starts:
            scores.pop(start, None)
        return sorted(scores.items(), key=lambda item: (-item[1], item[0]))

    def _walk(self, start: str, cache: dict[str, set[str]]) -> Iterable[tuple[str, int]]:
        seen = {start}
        frontier = [start]
        for hop in range(1, self.hops + 1):
            following = []
            for iri in frontier:
                for neighbour in sorted(self._neighbours(iri, cache)):
                    if neighbour not in seen:
                        seen.add(neighbour)
                        following.append(neighbour)
                        yield neighbour, hop
            frontier = following

    def _neighbours(self, iri: str, cache: dict[str, set[str]]) -> set[str]:
        if iri not in cache:
            found = {edge.target for edge in self.store.neighbours(iri, direction="out")}
            found |= {edge.source for edge in self.store.neighbours(iri, direction="in")}
            node = self.board.read(iri)
            if node is not None:
                found |= {target for _, target in node_references(node.node)}
            found |= self._linking(iri)
            found.discard(iri)
            cache[iri] = found
        return cache[iri]

    def _linking(self, iri: str) -> set[str]:
        """Return the blackboard nodes whose triples point at ``iri``."""
        result = self.board.query(
            "SELECT DISTINCT ?s ?target WHERE { ?s ?p ?target }",
            bindings={"target": ox.NamedNode(iri)},
        )
        return {str(row["s"].value) for row in result.rows if isinstance(row["s"], ox.NamedNode)}

    # -- intents -----------------------------------------------------------------------------

    def on_intent(self, task: str, entities: Sequence[str]) -> list[str]:
        """Queue the ``top_k`` entities related to ``entities`` not yet on the blackboard.

        Returns:
            The IRIs queued, best first.
        """
        check_iri(task, "task IRI")
        wanted: list[str] = []
        for iri, _ in self.related(entities):
            if len(wanted) >= self.top_k:
                break
            if iri in self._pending or self.board.read(iri) is not None or iri not in self.store:
                continue
            wanted.append(iri)
        return [iri for iri in wanted if self._enqueue(_Job(task, iri), time.monotonic())]

    def on_message(self, task: str, text: str) -> list[str]:
        """Queue what is related to the IRIs mentioned in a message (see ``on_intent``)."""
        if not isinstance(text, str):
            raise InvalidInputError(f"message must be a string, got {preview(text)}")
        mentioned = [m.rstrip(".;:") for m in _MENTION.findall(text)]
        valid = [m for m in mentioned if is_iri(m)]
        return self.on_intent(task, valid) if valid else []

    def on_task(self, task: str) -> list[str]:
        """Queue what is related to a task an agent was just given."""
        return self.on_intent(task, [task])

    def listen(self, bus: EventBus) -> list[Subscription]:
        """Turn the bus's intent changes into prefetches; return the subscriptions.

        A plan step created on the blackboard (its links: the entities of the step), an agent
        registered on a task (``AGENT_REGISTERED``) and a coordination message of a task (the
        IRIs it mentions) are intent changes.
        """
        return [
            bus.subscribe(self._on_node, [EventType.NODE_CREATED.value]),
            bus.subscribe(self._on_agent, [EventType.AGENT_REGISTERED.value]),
            bus.subscribe(self._on_message, [EventType.COORDINATION_MESSAGE.value]),
        ]

    def _on_node(self, event: Event) -> None:
        place = graph_area(str(event.payload.get("graph")))
        iri = event.payload.get("iri")
        if place is None or place[1] != "plan" or not isinstance(iri, str) or self._stopped:
            return
        if event.source == "prefetch":
            return
        self.on_intent(place[0], [iri])  # hop 1: what the step links to; hop 2: theirs

    def _on_agent(self, event: Event) -> None:
        if event.task_iri is not None and not self._stopped:
            self.on_task(event.task_iri)

    def _on_message(self, event: Event) -> None:
        if event.task_iri is not None and not self._stopped:
            self.on_message(event.task_iri, json.dumps(event.payload.get("payload", {})))

    # -- the queue and the worker ------------------------------------------------------------

    def _enqueue(self, job: _Job, due: float) -> bool:
        with self._cond:
            if self._stopped:
                raise ClosedError("the prefetcher is closed")
            if len(self._heap) >= self.queue_size:
                self._counts["dropped"] += 1
                return False
            if job.attempt == 0:
                if job.iri in self._pending:
                    return False
                self._counts["requested"] += 1
            self._pending.add(job.iri)
            heapq.heappush(self._heap, (due, next(self._order), job))
            self._cond.notify_all()
        self.start()
        return True

    def start(self) -> None:
        """Start the worker thread (once)."""
        with self._cond:
            if self._thread is not None or self._stopped:
                return
            self._thread = threading.Thread(target=self._run, name="gliding-prefetch", daemon=True)
            self._thread.start()

    def _next(self) -> _Job | None:
        with self._cond:
            while not self._stopped:
                if self.board.closed:
                    self._stopped = True
                    break
                now = time.monotonic()
                if self._heap and self._heap[0][0] <= now:
                    job = heapq.heappop(self._heap)[2]
                    self._active += 1
                    return job
                wait = self._heap[0][0] - now if self._heap else self.poll_s
                self._cond.wait(min(wait, self.poll_s))
            self._cond.notify_all()
            return None

    def _run(self) -> None:
        while (job := self._next()) is not None:
            retry = False
            try:
                retry = self._load(job)
            except Exception:  # a worker must not die: the error is logged and counted
                logger.exception("prefetch of %s failed", job.iri)
            with self._cond:
                self._active -= 1
                if not retry:
                    self._pending.discard(job.iri)
                self._cond.notify_all()

    def _load(self, job: _Job) -> bool:
        """Page one entity in; return whether it must be retried."""
        try:
            entry = self.store.get(job.iri)
            if entry is None:
                self._count("missing")
                return False
            if self.board.read(job.iri) is None:
                nodes = self.board.nodes
                requests = nodes.prepare([entry.node], area_graph(job.task, PAGE_AREA))
                nodes.write(requests, source="prefetch", dirty=False)
                with self._cond:
                    self.loaded.append(job.iri)
            self._count("loaded")
            return False
        except ClosedError:
            return False
        except GlidingError as exc:
            return self._retry(job, exc)

    def _retry(self, job: _Job, exc: Exception) -> bool:
        if job.attempt >= self.retries:
            logger.warning("prefetch of %s dropped after %d tries: %s", job.iri, job.attempt, exc)
            self._count("failed")
            return False
        self._count("retried")
        due = time.monotonic() + self.backoff_s * 2**job.attempt
        with self._cond:
            heapq.heappush(
                self._heap, (due, next(self._order), _Job(job.task, job.iri, job.attempt + 1))
            )
            self._cond.notify_all()
        return True

    def _count(self, name: str) -> None:
        with self._cond:
            self._counts[name] += 1

    def drain(self, timeout: float | None = None) -> bool:
        """Wait until nothing is queued or loading; return whether it got there in time."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            while self._heap or self._active:
                if self._stopped:
                    return False
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    return False
                self._cond.wait(left if left is not None else self.poll_s)
            return True

    def stats(self) -> PrefetchStats:
        """Return the prefetcher's counts."""
        with self._cond:
            return PrefetchStats(**self._counts, queued=len(self._heap))

    def close(self) -> None:
        """Stop the worker (what is queued is dropped) and wait for it; twice is harmless."""
        with self._cond:
            self._stopped = True
            self._heap.clear()
            self._pending.clear()
            self._cond.notify_all()
            thread, self._thread = self._thread, None
        if thread is not None and thread is not threading.current_thread():
            thread.join()

    def __enter__(self) -> Prefetcher:
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.close()
