"""L3: the view cache: materialised frame results, invalidated through a reverse index.

A view is one frame's result for one task and one set of parameters: its framed nodes, the
IRIs it was built from, the graphs it was read from, and the budgeted projections already
fitted from it. Two indexes point back at views: node IRI -> views built from that node, and
graph -> views read from that graph.

Invalidation (``listen`` subscribes it to the memory bus; any producer of these events works):
- ``CACHE_INVALIDATE`` / ``COPIES_INVALIDATED`` (the coherence layer's, with an ``iri`` or a
  list of ``iris``): exactly the views built from it.
- ``NODE_CREATED``, ``NODE_UPDATED`` and ``NODE_DELETED`` (with the node's graph): the views
  built from it and the views read from its graph, since a new, changed or deleted node may
  change what a frame selects even when no view holds it, and whether other views hold it
  says nothing about this one (a frame selecting artifacts without a review at their version).

Invariants:
- Invalidating a node costs time in the number of views it is in or read from its graph (one
  task's area), never in the number of views cached nor in their sizes: dict lookups, then a
  flag per view (an index entry is checked when used; a view leaves the indexes when it is
  replaced, evicted or dropped).
- A view never serves a node older than the latest committed write: a result computed while a
  write it depends on was being announced is not cached (``put`` checks the invalidations
  since the query began, and refuses when it cannot see back that far).
- At most ``max_views`` views are kept; the least recently used leave first.
- Safe from several threads (one lock; event handlers run on the publisher's thread).
"""

from __future__ import annotations

import threading
from collections import OrderedDict, deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from gliding_core.bus import Event, EventBus, EventType, Subscription
from gliding_core.errors import InvalidInputError
from gliding_core.jsonld import preview
from gliding_core.projection.budget import Projection

ViewKey = tuple[str, str, tuple[tuple[str, str], ...]]
_RECENT = 8_192
# The coherence layer (issue 13) announces a write that invalidated agents' copies as
# COPIES_INVALIDATED (with ``iri`` and ``generation``); by name, so no import of that layer.
COPIES_INVALIDATED = "COPIES_INVALIDATED"
INVALIDATING = (
    EventType.NODE_CREATED.value,
    EventType.NODE_UPDATED.value,
    EventType.NODE_DELETED.value,
    EventType.CACHE_INVALIDATE.value,
    COPIES_INVALIDATED,
)


def view_key(task: str, frame: str, params: Mapping[str, object]) -> ViewKey:
    """Return the key of a view: task, frame, and the parameters given (sorted)."""
    pairs = tuple(sorted((k, str(v)) for k, v in params.items() if v is not None))
    return (task, frame, pairs)


@dataclass(slots=True, eq=False)
class View:
    """One materialised frame result (hashed by identity: the indexes hold views)."""

    key: ViewKey
    nodes: tuple[dict[str, Any], ...]
    iris: frozenset[str]
    graphs: tuple[str, ...]
    size: int
    valid: bool = True
    fitted: dict[int, Projection] = field(default_factory=dict)


class CacheStats(NamedTuple):
    """What the view cache holds and how it has been used."""

    views: int
    valid: int
    invalid: int
    bytes: int
    hits: int
    misses: int
    invalidations: int


class ViewCache:
    """Materialised views with a reverse index from nodes (and graphs) to views.

    Args:
        max_views: the most views kept (least recently used leave first).
    """

    def __init__(self, *, max_views: int = 10_000) -> None:
        if isinstance(max_views, bool) or not isinstance(max_views, int) or max_views < 1:
            raise InvalidInputError(f"max_views must be an int >= 1, got {preview(max_views)}")
        self.max_views = max_views
        self._views: OrderedDict[ViewKey, View] = OrderedDict()
        self._by_node: dict[str, set[View]] = {}
        self._by_graph: dict[str, set[View]] = {}
        self._by_task: dict[str, set[View]] = {}
        self._lock = threading.Lock()
        self._hits = self._misses = self._invalidations = self._sequence = 0
        self._recent: deque[tuple[int, str]] = deque(maxlen=_RECENT)

    @property
    def sequence(self) -> int:
        """The number of invalidation events seen so far (a query notes it before it runs)."""
        with self._lock:
            return self._sequence

    def get(self, key: ViewKey) -> View | None:
        """Return the valid view of ``key``, or ``None`` (a miss)."""
        with self._lock:
            view = self._views.get(key)
            if view is None or not view.valid:
                self._misses += 1
                return None
            self._views.move_to_end(key)
            self._hits += 1
            return view

    def put(
        self,
        key: ViewKey,
        nodes: tuple[dict[str, Any], ...],
        iris: frozenset[str],
        graphs: Iterable[str],
        *,
        since: int,
        size: int = 0,
    ) -> View:
        """Store a view computed from a query begun at invalidation ``since``; return it.

        The view is returned unstored (and invalid) when a node or graph it was built from
        was invalidated after ``since``.
        """
        view = View(key, nodes, iris, tuple(graphs), size)
        with self._lock:
            if self._changed_since(since, view):
                view.valid = False
                return view
            self._remove(key)
            self._views[key] = view
            self._index(view)
            while len(self._views) > self.max_views:
                self._remove(next(iter(self._views)))
        return view

    def _changed_since(self, since: int, view: View) -> bool:
        if since == self._sequence:
            return False
        if not self._recent or self._recent[0][0] > since + 1:
            return True  # the record does not reach back to the query's start: be safe
        names = view.iris | {*view.graphs, view.key[0]}
        return any(seq > since and name in names for seq, name in self._recent)

    def invalidate(self, iri: str) -> int:
        """Invalidate the views built from node ``iri``; return how many."""
        with self._lock:
            return self._invalidate(self._by_node, iri)

    def invalidate_graph(self, graph: str) -> int:
        """Invalidate the views read from ``graph``; return how many."""
        with self._lock:
            return self._invalidate(self._by_graph, graph)

    def invalidate_task(self, task: str) -> int:
        """Invalidate every view of ``task``; return how many."""
        with self._lock:
            return self._invalidate(self._by_task, task)

    def holds(self, iri: str) -> bool:
        """Return whether a valid view was built from node ``iri``."""
        with self._lock:
            return any(view.valid for view in self._by_node.get(iri, ()))

    def _invalidate(self, index: dict[str, set[View]], name: str) -> int:
        """Invalidate the views ``index`` files under ``name``; return how many were valid.

        Only the entry of ``name`` is removed: the view's other entries stay until the view
        leaves the cache (visiting them would cost the view's size, not its count), and an
        entry of an invalid view is simply skipped.
        """
        self._sequence += 1
        self._recent.append((self._sequence, name))
        views = index.pop(name, None)
        if not views:
            return 0
        count = 0
        for view in views:
            if view.valid:
                view.valid = False
                if view.fitted:
                    view.fitted.clear()
                count += 1
        self._invalidations += count
        return count

    def _index(self, view: View) -> None:
        for iri in view.iris:
            self._by_node.setdefault(iri, set()).add(view)
        for graph in view.graphs:
            self._by_graph.setdefault(graph, set()).add(view)
        self._by_task.setdefault(view.key[0], set()).add(view)

    def _unindex(self, view: View) -> None:
        for index, names in (
            (self._by_node, view.iris),
            (self._by_graph, view.graphs),
            (self._by_task, (view.key[0],)),
        ):
            for name in names:
                views = index.get(name)
                if views is not None:
                    views.discard(view)
                    if not views:
                        del index[name]

    def _remove(self, key: ViewKey) -> None:
        view = self._views.pop(key, None)
        if view is not None:
            view.valid = False
            self._unindex(view)

    def drop_invalid(self) -> int:
        """Remove the invalid views; return how many."""
        with self._lock:
            gone = [k for k, v in self._views.items() if not v.valid]
            for key in gone:
                self._remove(key)
            return len(gone)

    def clear(self) -> None:
        """Remove every view (the counters stay)."""
        with self._lock:
            self._views.clear()
            self._by_node.clear()
            self._by_graph.clear()
            self._by_task.clear()
            self._sequence += 1
            self._recent.clear()  # a query running now cannot be cached: record lost

    def stats(self) -> CacheStats:
        """Return the cache's figures."""
        with self._lock:
            valid = sum(1 for v in self._views.values() if v.valid)
            size = sum(v.size for v in self._views.values())
            return CacheStats(
                len(self._views),
                valid,
                len(self._views) - valid,
                size,
                self._hits,
                self._misses,
                self._invalidations,
            )

    # -- events ------------------------------------------------------------------------------

    def listen(self, bus: EventBus) -> Subscription:
        """Invalidate views on the bus's node and coherence events; return the subscription."""
        return bus.subscribe(self.on_event, INVALIDATING)

    def on_event(self, event: Event) -> None:
        """Apply one node or coherence event (see the module docstring)."""
        payload = event.payload
        iris = payload.get("iris")
        if isinstance(iris, (list, tuple)):
            for iri in iris:
                if isinstance(iri, str):
                    self.invalidate(iri)
            return
        iri, graph = payload.get("iri"), payload.get("graph")
        if event.type == EventType.NODE_CREATED.value:
            if isinstance(graph, str):
                self.invalidate_graph(graph)
            return
        if not isinstance(iri, str):
            return
        with self._lock:
            self._invalidate(self._by_node, iri)  # the views holding it, now invalid
            if event.type != EventType.CACHE_INVALIDATE.value and isinstance(graph, str):
                # A changed or deleted node may change what a frame selects even where no view
                # holds it (a selection on values, or on other nodes: FILTER NOT EXISTS), so
                # the views read from its graph go too, whether or not other views hold it.
                self._invalidate(self._by_graph, graph)
