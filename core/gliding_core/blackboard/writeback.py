"""L2 -> L0: dirty blackboard nodes written back to the durable store, critical ones through.

Every node write marks the node dirty (in the graph's bookkeeping, in the same update as the
node). ``WriteBack.flush`` copies dirty nodes to L0 in batches, one L0 transaction per batch,
then clears their dirty marks where the generation has not moved meanwhile (a node rewritten
during a flush stays dirty and goes in the next one). A node carrying a critical tag
(``emphasis``, ``user_intent``, ``confirmed_fact`` by default) is flushed before the write
that made it returns (write-through). Flushes also run on a timer, on task completion and on
close.

An L0 entry written by a flush is exactly the node: ``EntryStore.replace_many`` (L0's ``put``
merges by ``@id``, which would keep removed properties and tags), with the node's tags, its
graph as ``named_graph`` and ``{"l2_generation": n}`` as metadata, one L0 transaction a batch.
L0's own bookkeeping of the entry goes on: its creation time and access statistics stay, its
generation continues, and its full-text, type and edge indexes and change log follow the new
content.

What a crash (SIGKILL, power kept) may lose:
- write-through: nothing that was written; the write returned after L0 committed.
- write-back, blackboard on disk: nothing; dirty marks are on disk with the nodes, and the next
  open of the blackboard flushes them (``recover``).
- write-back, blackboard in memory: the changes since the last flush (at most one timer
  interval of writes, plus a task not yet completed).
- write-back, blackboard at a SPARQL server: as on disk; the dirty marks are in the server's
  store with the nodes, and the next ``Blackboard.open`` of the endpoint flushes them (the
  server itself must keep its store: ``oxigraph serve`` on a directory does).
A node flushed to L0 and not yet marked clean is flushed again after a crash: the same entry.

With coherence (``gliding_core.blackboard.writes``) this is the one path to L0: the
coordinator's write-back of a dirty copy flushes that node here, and every flush ends with
``on_flushed``, which takes the flushed nodes' ``MODIFIED`` copies to ``EXCLUSIVE`` or ``SHARED``.

Invariants: flushes are serialised (one at a time), so L0 never receives an older generation of
a node after a newer one; a failed L0 batch leaves its nodes dirty; a store shared by processes
is read from the store, not the cache, for a flush. With a store shared by processes a flush's
read, L0 write and clean marks are also one step among every process's writes (``exclusive``:
the coherence directory's transaction, which every write of the store runs in): clearing a
dirty mark reads the node's record and writes it back clean, so another process's write
landing between the two would be undone (its record replaced by the older one, which the
directory has moved past), and its write-back would be overtaken in L0 by the older value.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable, Sequence

from gliding_core.blackboard.nodes import NodeStore
from gliding_core.blackboard.records import BoardNode
from gliding_core.bus import EventBus, EventType
from gliding_core.store.entry import Record
from gliding_core.store.protocol import EntryStore

logger = logging.getLogger(__name__)

DEFAULT_CRITICAL_TAGS = frozenset({"emphasis", "user_intent", "confirmed_fact"})

Exclusive = Callable[[Sequence[str], Callable[[], list[BoardNode]]], list[BoardNode]]
"""Run a flush of the nodes ``iris`` (the callable) where no process writes them meanwhile;
return what it returns."""


class WriteBack:
    """Copies dirty blackboard nodes to L0.

    Args:
        nodes: the blackboard's node layer.
        store: the L0 store written to.
        critical_tags: tags that make a write go through to L0 before it returns.
        batch: how many nodes one L0 transaction takes.
        bus: where ``MEMORY_WRITE_BACK`` events go.
    """

    def __init__(
        self,
        nodes: NodeStore,
        store: EntryStore,
        *,
        critical_tags: Iterable[str] = DEFAULT_CRITICAL_TAGS,
        batch: int = 500,
        bus: EventBus | None = None,
    ) -> None:
        self.nodes, self.store, self.bus = nodes, store, bus
        self.critical_tags = frozenset(critical_tags)
        self.batch = batch
        self._lock = threading.Lock()
        self._timer: threading.Thread | None = None
        self._stop = threading.Event()
        self.on_flushed: Callable[[Sequence[BoardNode]], None] | None = None
        """Called with the nodes of each flush after it (the coherence's ``written_back``)."""
        self.exclusive: Exclusive | None = None
        """Where a flush runs when other processes write the store too (the write path's
        ``flush_exclusive``: inside the coherence directory's transaction); ``None``: here."""

    def is_critical(self, node: BoardNode) -> bool:
        """Return whether the node's tags ask for write-through."""
        return not self.critical_tags.isdisjoint(node.tags)

    def after_write(self, written: Sequence[BoardNode]) -> int:
        """Write the critical nodes among ``written`` through to L0; return how many."""
        critical = [node for node in written if self.is_critical(node)]
        return self.flush_nodes(critical) if critical else 0

    def flush(self, graphs: Sequence[str] | None = None) -> int:
        """Flush every dirty node (of ``graphs`` when given) to L0; return how many."""
        return self.flush_nodes(self.nodes.dirty(graphs))

    def flush_nodes(self, nodes: Sequence[BoardNode]) -> int:
        """Write ``nodes`` to L0 as exact entries, batch by batch; return how many."""
        if not nodes:
            return 0
        iris = [n.iri for n in nodes]
        if self.exclusive is None:
            pending = self._flush(iris)
        else:
            pending = self.exclusive(iris, lambda: self._flush(iris))
        if self.bus is not None:
            for start in range(0, len(pending), self.batch):
                chunk = pending[start : start + self.batch]
                self.bus.publish(
                    EventType.MEMORY_WRITE_BACK,
                    {"iris": [n.iri for n in chunk], "count": len(chunk)},
                    source="blackboard",
                )
        if pending and self.on_flushed is not None:
            self.on_flushed(pending)
        return len(pending)

    def _flush(self, iris: Sequence[str]) -> list[BoardNode]:
        """Flush the dirty nodes among ``iris`` as the store holds them now; return them."""
        with self._lock:
            # Re-read under the lock: a flush that ran meanwhile may have written them. A store
            # shared by processes is read from the store itself (see ``NodeStore.mark_clean``).
            current = self.nodes.get_many(iris, fresh=self.nodes.check is not None)
            pending = [current[iri] for iri in iris if iri in current and current[iri].dirty]
            for start in range(0, len(pending), self.batch):
                chunk = pending[start : start + self.batch]
                self._write_entries(chunk)
                self.nodes.mark_clean(chunk)
        return pending

    def _write_entries(self, chunk: Sequence[BoardNode]) -> None:
        records = [
            Record(
                node.content,
                tags=node.tags,
                named_graph=node.graph,
                metadata={"l2_generation": node.generation},
            )
            for node in chunk
        ]
        self.store.replace_many(records)

    def start(self, interval_s: float) -> None:
        """Flush every ``interval_s`` seconds on a daemon thread until ``stop()``."""
        if interval_s <= 0 or self._timer is not None:
            return
        self._stop.clear()
        self._timer = threading.Thread(
            target=self._run, args=(interval_s,), name="gliding-blackboard-flush", daemon=True
        )
        self._timer.start()

    def _run(self, interval_s: float) -> None:
        while not self._stop.wait(interval_s):
            try:
                self.flush()
            except Exception:
                logger.exception("timed flush of the blackboard to L0 failed; nodes stay dirty")

    def stop(self) -> None:
        """Stop the timer thread (waiting for a flush in progress); stopping twice is harmless."""
        self._stop.set()
        if self._timer is not None:
            self._timer.join()
            self._timer = None
