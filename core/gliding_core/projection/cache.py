"""L3: the view cache: materialised frame results, invalidated through a reverse index.

A view is one frame's result for one task and one set of parameters (and, read as an agent,
the graphs its role may read): its framed nodes, the IRIs it was built from, the graphs it
was read from, and the budgeted projections already fitted from it. Indexes point back at
views: node IRI -> views built from that node, graph -> views read from that graph (and the
graph's stamp), task -> its views.

Invalidation (``listen`` subscribes it to the memory bus; any producer of these events works):
- ``NODE_CREATED``, ``NODE_UPDATED`` and ``NODE_DELETED`` with a ``graph``: every view read
  from that graph (and from ``previous_graph``, the graph a moved node left). A new or changed
  node may now match a frame whose view does not hold it yet (and a deletion may let another
  node match a frame that excludes it), so holding the node is not the test; and every view
  holding the node read its graph, since a node's triples live in its one graph.
- ``CACHE_INVALIDATE``, ``COPIES_INVALIDATED`` (the coherence layer's, with an ``iri`` or a
  list of ``iris``), and a node event without a graph: exactly the views built from the node.

Invariants:
- A graph's event costs one dict write, never time in the number of views cached nor in their
  sizes: each indexed graph has a stamp, the sequence number of its last invalidation, and a
  view is valid while every graph it was read from is stamped no later than the sequence its
  query began at (``View.since``; ``get`` checks the few graphs of the view). A node's
  invalidation, and ``invalidate_graph`` and ``invalidate_task`` (which return counts), cost
  one index lookup and a flag per view under the name: a node's or task's entry is popped when
  used and the view's other entries are left (an invalid view is skipped there); a graph's
  entry stays, as its stamp's reference. ``View.valid`` is ``False`` once the cache knows the
  view invalid; a graph's event is found by the next look at the view (``get``, ``holds``,
  ``stats``, ``drop_invalid``, eviction), which counts it once in ``invalidations``. A view
  leaves the indexes when it is replaced, evicted or dropped (a graph no view reads any more
  loses its stamp), and its fitted projections go with it (an invalid view is never served,
  so they need no clearing before).
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

ViewKey = tuple[str, str, tuple[tuple[str, str], ...], tuple[str, ...]]
_RECENT = 8_192
# The coherence layer announces a write that invalidated agents' copies as
# COPIES_INVALIDATED (with ``iri`` and ``generation``); by name, so no import of that layer.
COPIES_INVALIDATED = "COPIES_INVALIDATED"
INVALIDATING = (
    EventType.NODE_CREATED.value,
    EventType.NODE_UPDATED.value,
    EventType.NODE_DELETED.value,
    EventType.CACHE_INVALIDATE.value,
    COPIES_INVALIDATED,
)
# The blackboard's node events: they name the node's graph, whose views they invalidate.
_BY_GRAPH = frozenset(
    {EventType.NODE_CREATED.value, EventType.NODE_UPDATED.value, EventType.NODE_DELETED.value}
)


def view_key(
    task: str, frame: str, params: Mapping[str, object], areas: Iterable[str] = ()
) -> ViewKey:
    """Return the key of a view: task, frame, the parameters given (sorted), the areas read.

    Views read from different areas of a task are different views: one read for a role
    that may see more is never served to a role that may see less.
    """
    pairs = tuple(sorted((k, str(v)) for k, v in params.items() if v is not None))
    return (task, frame, pairs, tuple(areas))


@dataclass(slots=True, eq=False)
class View:
    """One materialised frame result (hashed by identity: the indexes hold views).

    Its nodes share structure with the memo of compactions: read them, never change them.
    ``valid`` is ``False`` once the cache knows the view invalid (a graph's event is found
    lazily: ``ViewCache.get`` is the test); ``since`` is the invalidation sequence its query
    began at.
    """

    key: ViewKey
    nodes: tuple[dict[str, Any], ...]
    iris: frozenset[str]
    graphs: tuple[str, ...]
    size: int
    valid: bool = True
    fitted: dict[int, Projection] = field(default_factory=dict)
    since: int = 0


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
        self._stamps: dict[str, int] = {}  # per graph of _by_graph: its last invalidation
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
            if view is None or not self._alive(view):
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
        view = View(key, nodes, iris, tuple(graphs), size, since=since)
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
        for seq, name in reversed(self._recent):  # newest first: only those after ``since``
            if seq <= since:
                return False
            if name in names:
                return True
        return False

    def invalidate(self, iri: str) -> int:
        """Invalidate the views built from node ``iri``; return how many were valid."""
        with self._lock:
            return self._invalidate(self._by_node, iri, count=True)

    def invalidate_graph(self, graph: str) -> int:
        """Invalidate the views read from ``graph``; return how many were valid."""
        with self._lock:
            views = self._by_graph.get(graph, ())
            self._settle(views)
            flagged = 0
            for view in views:  # the entry stays: it is the graph's stamp's reference count
                if view.valid:
                    view.valid = False
                    flagged += 1
            self._invalidations += flagged
            self._stamp(graph)
            return flagged

    def invalidate_task(self, task: str) -> int:
        """Invalidate every view of ``task``; return how many were valid."""
        with self._lock:
            return self._invalidate(self._by_task, task, count=True)

    def holds(self, iri: str) -> bool:
        """Return whether a valid view was built from node ``iri``."""
        with self._lock:
            return any(self._alive(view) for view in self._by_node.get(iri, ()))

    def _invalidate(self, index: dict[str, set[View]], name: str, *, count: bool = False) -> int:
        """Invalidate the views ``index`` files under ``name``; return how many were valid.

        Only the entry of ``name`` is removed: the view's other entries stay until the view
        leaves the cache (visiting them would cost the view's size, not its count), and an
        entry of an invalid view is simply skipped. With ``count``, a view a graph's event
        already made invalid is found first, so it is not counted again.
        """
        self._sequence += 1
        self._recent.append((self._sequence, name))
        views = index.pop(name, None)
        if not views:
            return 0
        if count:
            self._settle(views)
        flagged = 0
        for view in views:
            if view.valid:
                view.valid = False
                flagged += 1
        self._invalidations += flagged
        return flagged

    def _stamp(self, graph: str) -> None:
        """Invalidate the views read from ``graph`` by one write: its stamp (see the module)."""
        self._sequence += 1
        self._recent.append((self._sequence, graph))
        stamps = self._stamps
        if graph in stamps:
            stamps[graph] = self._sequence

    def _alive(self, view: View) -> bool:
        """Return whether ``view`` is valid, flagging (and counting) it when a stamp says not."""
        if not view.valid:
            return False
        stamps, since = self._stamps, view.since
        for graph in view.graphs:
            if stamps.get(graph, 0) > since:
                view.valid = False
                self._invalidations += 1
                return False
        return True

    def _settle(self, views: Iterable[View]) -> None:
        """Flag the views that a graph's stamp made invalid (so a count sees them)."""
        for view in views:
            self._alive(view)

    def _index(self, view: View) -> None:
        for iri in view.iris:
            self._by_node.setdefault(iri, set()).add(view)
        for graph in view.graphs:
            self._by_graph.setdefault(graph, set()).add(view)
            self._stamps.setdefault(graph, 0)
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
                        if index is self._by_graph:
                            self._stamps.pop(name, None)

    def _remove(self, key: ViewKey) -> None:
        view = self._views.pop(key, None)
        if view is not None:
            self._alive(view)  # an invalidation not yet found is counted
            view.valid = False
            self._unindex(view)

    def drop_invalid(self) -> int:
        """Remove the invalid views; return how many."""
        with self._lock:
            gone = [k for k, v in self._views.items() if not self._alive(v)]
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
            self._stamps.clear()
            self._sequence += 1
            self._recent.clear()  # a query running now cannot be cached: record lost

    def stats(self) -> CacheStats:
        """Return the cache's figures."""
        with self._lock:
            valid = sum(1 for v in self._views.values() if self._alive(v))
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
            with self._lock:
                for iri in iris:
                    if isinstance(iri, str):
                        self._invalidate(self._by_node, iri)
            return
        graph = payload.get("graph")
        with self._lock:
            if event.type in _BY_GRAPH and isinstance(graph, str):
                self._stamp(graph)
                previous = payload.get("previous_graph")
                if isinstance(previous, str) and previous != graph:
                    self._stamp(previous)
                return
            iri = payload.get("iri")
            if isinstance(iri, str):
                self._invalidate(self._by_node, iri)
