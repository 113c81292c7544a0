"""LangGraph store on the gliding memory: namespaces are L0 named graphs, items are L0 entries.

Invariants:
- A namespace ``(a, b)`` is the named graph ``urn:gliding:langgraph:a/b``, each label
  percent-encoded (so ``/`` in a label is ``%2F``); an item is the entry ``<graph>#<key>``, its
  key percent-encoded, typed ``LangGraphItem``. Both encodings are reversible and injective.
- The entry's metadata holds the value whole (a re-put replaces it, keeps ``created_at`` and
  the item's place, and bumps ``updated_at``); ``get`` returns a value equal to the one put
  (values must survive JSON). The entry's text is the texts of the indexed fields alone
  (``store_index``: the ``index`` argument of ``put``, else the ``IndexConfig`` fields, else the
  whole value), every one of them (the entry's own index fields, ``Record.index``, name them
  all, so the memory's default of text-like values does not apply); ``index=False`` leaves it
  without text: found by ``get`` and filters, never ranked by a query.
- TTL as LangGraph's stores: ``ttl`` minutes on ``put`` (``TTLConfig.default_ttl`` when not
  given) sets when the item expires; a ``get`` or ``search`` that returns it pushes that back by
  its TTL when ``refresh_ttl`` (``TTLConfig.refresh_on_read``, by default on). Its L0 entry
  expires with it (``EntryStore`` TTL), so the memory's background sweep deletes it without
  being asked (``sweep_ttl`` does it at once). Until then, as LangGraph's SQLite and PostgreSQL
  stores, an expired item is still returned and listed (its namespace too) unless
  ``TTLConfig.omit_expired`` is on (it is off by default, as LangGraph's): the store reads L0's
  expired entries not yet swept (``include_expired``). A read does not bring an expired item
  back (no refresh); a ``put`` of its key does, keeping its ``created_at`` (with
  ``omit_expired``, where reads no longer see it, the ``put`` writes a new item, last in its
  namespace as a deleted and re-put one in ``InMemoryStore``). An expired item
  is ranked by a query only with an ``index`` embedder of the store's own; the memory's
  hybrid search no longer indexes it, so it comes after the ranked items, unscored.
- A namespace exists while it holds an item (deleting its last item forgets it).
- Order, as ``InMemoryStore``: search lists namespaces in the order they received their first
  item, and each namespace's items in the order their keys were first written;
  ``list_namespaces`` sorts.
- Search never crosses namespaces: a query is ranked among the items under the prefix alone
  (the SQL filter of both search arms names their graphs), and without the memory's per-graph
  prior, so an item's score never depends on another namespace's items; with an ``embed`` of
  its own the score is the cosine of the query and the item's best text, the same in any
  search. A namespace per user
  (``("memories", user_id)``, LangMem's template) is that user's scope: a search under it never
  returns another user's item; a search under a shorter prefix is the caller naming them all.
- With a ``scope_template``, an item of a namespace that matches it carries the scope's tag
  (``gliding_core.store.scope``), like the turns of that user's agent.
- As LangGraph's stores: a namespace path given as a list is its tuple; a dotted filter key
  that is not a key of the value is a path into it; the ``"langgraph"`` root is refused by
  ``put`` alone (``BaseStore.put``), not by ``batch``.
- A batch is validated whole first, answers its reads from the state before the batch, then
  applies its writes (the last one per key wins) in one L0 transaction: all of them or none.
"""

from __future__ import annotations

import asyncio
import json
import math
import threading
import time
import weakref
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import datetime, timezone
from typing import Any
from urllib.parse import quote, unquote

from langgraph.store.base import (
    BaseStore,
    GetOp,
    IndexConfig,
    InvalidNamespaceError,
    Item,
    ListNamespacesOp,
    MatchCondition,
    Op,
    PutOp,
    Result,
    SearchItem,
    SearchOp,
    TTLConfig,
    validate_op_namespace,
)

from gliding_core import ContentTooLargeError, Entry, InvalidInputError, Memory, SearchFilters
from gliding_core.jsonld import canonical_json, preview
from gliding_core.retention.erasure import ForgetReport
from gliding_core.store.scope import Kind, Scope
from gliding_langchain.store_index import ItemIndex, check_fields

IRI_PREFIX = "urn:gliding:langgraph:"
ITEM_TYPE = "LangGraphItem"
ORDER = "langgraph_namespace_order"  # entry metadata: the place of the item's namespace
WRITTEN = "langgraph_written_at"  # entry metadata: when the item was last put
CREATED = "langgraph_created_at"  # entry metadata: when the item was first put
VALUE = "langgraph_value"  # entry metadata: the item's value
EXPIRES = "langgraph_expires_at"  # entry metadata: when the item expires (None: never)
TTL = "langgraph_ttl_minutes"  # entry metadata: the item's TTL (None: none)
TEXTS = "indexed"  # node property: the texts of the indexed fields

Namespace = tuple[str, ...]

_PLACEHOLDERS: dict[str, Kind] = {"{user_id}": "user", "{thread_id}": "thread"}
_COMPARISONS = ("$gt", "$gte", "$lt", "$lte")
_OPERATORS = frozenset({"$eq", "$ne", *_COMPARISONS})


class GlidingStore(BaseStore):
    """A LangGraph ``BaseStore`` whose items live in a gliding ``Memory``'s L0 store.

    Items are full L0 entries: durable with ``Memory.open(path)``, and searchable when
    ``search`` is given a ``query``: by the memory's hybrid search (words and meaning), or by
    the cosine of an ``index`` embedder of the store's own, as LangGraph's stores rank.

    Args:
        memory: the memory that keeps the items; the store does not close it.
        scope_template: the namespaces that belong to a scope, as LangMem writes them:
            ``("memories", "{user_id}")`` puts the items of ``("memories", "alice")`` in
            ``Scope.user("alice")`` (``{thread_id}`` names a thread), so that user's agent
            recalls them and no other scope reads them. Items of other namespaces are of no
            scope.
        index: LangGraph's ``IndexConfig``: ``fields`` (JSON paths; the whole value by default)
            are what a query searches; ``embed`` (an ``Embeddings``, a function of texts, a
            provider string, or the memory's embedder) ranks them by cosine; ``dims`` is
            checked, not needed.
        ttl: LangGraph's ``TTLConfig``: ``default_ttl`` minutes, ``refresh_on_read``,
            ``omit_expired`` (off: reads return expired items until they are swept, as
            LangGraph's stores do; on: never). Expired items are deleted by the memory's
            background sweep, every
            ``StoreConfig.expiry.sweep_interval_s`` (``sweep_interval_minutes`` is the memory's
            to set, not the store's); ``sweep_ttl`` deletes them at once.
        clock: the time source (seconds) of timestamps and TTLs; tests pass a fake one.

    Example:
        >>> with Memory() as memory:
        ...     store = GlidingStore(memory)
        ...     store.put(("users", "42"), "prefs", {"theme": "dark"})
        ...     store.get(("users", "42"), "prefs").value
        {'theme': 'dark'}
    """

    __slots__ = (
        "_batchers",
        "_batchers_lock",
        "_clock",
        "_index",
        "index_config",
        "memory",
        "scope_template",
        "ttl_config",
    )

    supports_ttl = True

    def __init__(
        self,
        memory: Memory,
        *,
        scope_template: Namespace | None = None,
        index: IndexConfig | None = None,
        ttl: TTLConfig | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        if not isinstance(memory, Memory):
            raise InvalidInputError(f"memory must be a gliding Memory, got {preview(memory)}")
        if not callable(clock):
            raise InvalidInputError(f"clock must be callable, got {preview(clock)}")
        self.memory = memory
        self.scope_template = _check_template(scope_template)
        self._index = ItemIndex(index, memory.embedder)
        self.index_config = index
        self.ttl_config = _check_ttl_config(ttl)
        self._clock = clock
        self._batchers: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _Batcher] = (
            weakref.WeakKeyDictionary()
        )
        self._batchers_lock = threading.Lock()

    def sweep_ttl(self) -> int:
        """Delete the expired items (in one L0 transaction) and return how many there were."""
        now = self._clock()
        expired = [
            entry.iri
            for graph in self._graphs(include_expired=True)
            for entry in self.memory.store.by_graph(graph, include_expired=True)
            if _is_item(entry) and not _is_live(entry, now)
        ]
        with self.memory.store.transaction():
            for iri in expired:
                self.memory.store.delete(iri)
        return len(expired)

    def forget(self, prefix: Namespace) -> ForgetReport:
        """Erase every item under the namespace ``prefix`` from every layer, for good.

        ``delete`` removes an item from the store; this also leaves no byte of the items in the
        memory's files (``Memory.forget`` of their entries). ``("memories", "alice")`` forgets
        alice's memories; ``()`` every item of the store. Returns what each layer removed.

        Raises:
            InvalidInputError: ``prefix`` is not a tuple of strings.
        """
        if not isinstance(prefix, tuple) or not all(isinstance(p, str) for p in prefix):
            raise InvalidInputError(f"prefix must be a tuple of strings, got {preview(prefix)}")
        iris = [  # expired items not yet swept too: their bytes are in the files until then
            entry.iri
            for graph in self._graphs(include_expired=True)
            if decode_graph(graph)[: len(prefix)] == prefix
            for entry in self.memory.store.by_graph(graph, include_expired=True)
            if _is_item(entry)
        ]
        return self.memory.forget(iris) if iris else ForgetReport(target="iris")

    @property
    def shows_expired(self) -> bool:
        """Whether reads return expired items not yet swept (``TTLConfig.omit_expired`` off,
        LangGraph's default)."""
        return not (self.ttl_config or {}).get("omit_expired", False)

    def scope_of(self, namespace: Namespace) -> Scope | None:
        """Return the scope ``namespace`` belongs to by ``scope_template``, or ``None``."""
        template = self.scope_template
        if template is None or len(namespace) != len(template):
            return None
        found: Scope | None = None
        for want, label in zip(template, namespace, strict=True):
            if want in _PLACEHOLDERS:
                found = Scope(_PLACEHOLDERS[want], label)
            elif want != label:
                return None
        return found

    def batch(self, ops: Iterable[Op]) -> list[Result]:
        """Run ``ops`` (reads against the state before the batch, then the writes) in order.

        Raises:
            InvalidNamespaceError: a namespace breaks LangGraph's rules.
            InvalidInputError: any other argument is invalid; nothing was written.
        """
        batch = [_normalised(op) for op in ops]
        limit = self.memory.store.config.max_content_bytes
        for op in batch:
            _check_op(op, limit)
        now = self._clock()
        refresh: dict[str, float] = {}
        results = [self._read(op, now, refresh) for op in batch]
        writes = {(op.namespace, op.key): op for op in batch if isinstance(op, PutOp)}
        texts = {address: self._texts(op) for address, op in writes.items()}
        self._index.warm([text for found in texts.values() for text in found])
        written = {item_iri(*address) for address in writes}
        refresh = {iri: ttl for iri, ttl in refresh.items() if iri not in written}
        if writes or refresh:
            self._write(list(writes.values()), texts, refresh, now)
        return results

    def _texts(self, op: PutOp) -> list[str]:
        return [] if op.value is None else self._index.texts(op.value, op.index)

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        """Run the ops as ``batch`` does, merged with those of the concurrent calls.

        The L0 store and the dense index are synchronous, so a batch runs in a worker thread;
        the calls made on one event loop while a batch runs are merged into the next one (as
        LangGraph's async stores merge them), so thousands of concurrent calls cost a few
        batches, not a thread hop each. Each call's ops are checked before they join: a bad
        call fails alone.
        """
        checked = [_normalised(op) for op in ops]
        limit = self.memory.store.config.max_content_bytes
        for op in checked:
            _check_op(op, limit)
        loop = asyncio.get_running_loop()
        with self._batchers_lock:
            batcher = self._batchers.get(loop)
            if batcher is None:
                batcher = self._batchers[loop] = _Batcher(self.batch)
        return await batcher.submit(checked)

    def __repr__(self) -> str:
        return f"GlidingStore({self.memory!r})"

    # -- reads ---------------------------------------------------------------------------------

    def _read(self, op: Op, now: float, refresh: dict[str, float]) -> Result:
        """Answer a read; note in ``refresh`` the TTL of each item it returns to refresh."""
        found: list[tuple[Entry, float | None]]
        if isinstance(op, GetOp):
            item = self._get(op.namespace, op.key, now)
            found = [] if item is None else [(item, None)]
        elif isinstance(op, SearchOp):
            found = self._search(op, now)
        elif isinstance(op, ListNamespacesOp):
            return self._list_namespaces(op, now)
        else:
            return None
        if op.refresh_ttl:
            for entry, _ in found:
                ttl = entry.metadata.get(TTL)
                if isinstance(ttl, (int, float)):
                    refresh[entry.iri] = float(ttl)
        if isinstance(op, GetOp):
            return _to_item(found[0][0]) if found else None
        return [_to_hit(entry, score) for entry, score in found]

    def _get(self, namespace: Namespace, key: str, now: float) -> Entry | None:
        iri = item_iri(namespace, key)
        entry = self.memory.store.get(iri)  # counts the read
        if entry is None and self.shows_expired:
            entry = self.memory.store.get_many([iri], include_expired=True).get(iri)
        if entry is None or not _is_item(entry) or not self._visible(entry, now):
            return None
        return entry

    def _visible(self, entry: Entry, now: float) -> bool:
        """Whether a read returns the item of ``entry``: live, or expired but shown."""
        return self.shows_expired or _is_live(entry, now)

    def _search(self, op: SearchOp, now: float) -> list[tuple[Entry, float | None]]:
        """Return the page of items under the prefix that reads see and pass the filter, with
        their scores, ranked by the query when there is one."""
        entries = [
            entry
            for entry in self._entries_under(op.namespace_prefix, now)
            if _passes(_value(entry), op.filter)
        ]
        if not op.query or not op.query.strip():
            return [(entry, None) for entry in entries[op.offset : op.offset + op.limit]]
        by_iri = {entry.iri: entry for entry in entries}
        if self._index.semantic:
            items = [(entry.iri, _item_texts(entry)) for entry in entries]
            scores = self._index.scores(op.query, items)
        else:
            graphs = tuple(dict.fromkeys(str(entry.named_graph) for entry in entries))
            scores = self._rank(op.query, graphs, set(by_iri), op.offset + op.limit)
        ranked: list[tuple[Entry, float | None]] = [
            (by_iri[iri], score) for iri, score in scores.items()
        ]
        # Entries without text have no score; like InMemoryStore, they come after the ranked.
        ranked += [(entry, None) for entry in entries if entry.iri not in scores]
        return ranked[op.offset : op.offset + op.limit]

    def _rank(
        self, query: str, graphs: tuple[str, ...], allowed: set[str], wanted: int
    ) -> dict[str, float]:
        """Return the hybrid search scores of the ``allowed`` items (all in ``graphs``), best
        first, at least ``wanted`` of them when there are; the search widens until it has them."""
        if not graphs:
            return {}
        counts = self._graphs()
        total = sum(counts.get(graph, 0) for graph in graphs)
        filters = SearchFilters(types=(ITEM_TYPE,), named_graphs=graphs)
        k = min(max(wanted, 1), max(total, 1))
        while True:
            # group_weight 0: a namespace holding a strong match lifts none of its items.
            hits = self.memory.search(query, k, filters=filters, group_weight=0.0)
            scores = {hit.iri: hit.score for hit in hits if hit.iri in allowed}
            if len(scores) >= wanted or k >= total:
                return scores
            k = min(k * 4, total)

    def _list_namespaces(self, op: ListNamespacesOp, now: float) -> list[Namespace]:
        namespaces = [
            decode_graph(graph)
            for graph in self._graphs()
            if any(_is_item(e) and self._visible(e, now) for e in self._items_of(graph))
        ]
        for condition in op.match_conditions or ():
            namespaces = [ns for ns in namespaces if _matches_path(condition, ns)]
        if op.max_depth is not None:
            namespaces = [ns[: op.max_depth] for ns in namespaces]
        return sorted(set(namespaces))[op.offset : op.offset + op.limit]

    def _graphs(self, *, include_expired: bool | None = None) -> dict[str, int]:
        """Return the named graphs of this store's namespaces, with their item counts (the
        expired items not yet swept among them when ``include_expired``, by default when the
        store shows them)."""
        if include_expired is None:
            include_expired = self.shows_expired
        counts = self.memory.store.graph_counts(include_expired=include_expired)
        return {graph: n for graph, n in counts.items() if graph.startswith(IRI_PREFIX)}

    def _items_of(self, graph: str, limit: int | None = None) -> list[Entry]:
        """Return the entries of ``graph`` that reads see, oldest first."""
        return self.memory.store.by_graph(graph, limit=limit, include_expired=self.shows_expired)

    def _entries_under(self, prefix: Namespace, now: float) -> list[Entry]:
        """Return the items under ``prefix`` that reads see: namespaces in their order, items
        in key order."""
        groups = []
        for graph in self._graphs():
            if decode_graph(graph)[: len(prefix)] == prefix:
                entries = [
                    e for e in self._items_of(graph) if _is_item(e) and self._visible(e, now)
                ]
                if entries:
                    groups.append((_order_of(entries[0]), graph, entries))
        groups.sort(key=lambda group: (group[0], group[1]))
        return [entry for _, _, entries in groups for entry in entries]

    # -- writes --------------------------------------------------------------------------------

    def _write(
        self,
        ops: Sequence[PutOp],
        texts: Mapping[tuple[Namespace, str], list[str]],
        refresh: Mapping[str, float],
        now: float,
    ) -> None:
        store = self.memory.store
        with store.transaction():
            known = store.get_many(
                [item_iri(op.namespace, op.key) for op in ops], include_expired=True
            )
            for op in ops:
                iri, graph = item_iri(op.namespace, op.key), namespace_graph(op.namespace)
                if op.value is None:
                    store.delete(iri)
                    continue
                old = known.get(iri)
                if old is not None and not self._visible(old, now):
                    # Gone to every read: its key is written anew, last of its namespace (a
                    # namespace left with nothing else to show takes the last place).
                    store.delete(iri)
                    old = None
                created = old.metadata.get(CREATED, now) if old is not None else now
                scope = self.scope_of(op.namespace)
                ttl = None if op.ttl is None else float(op.ttl)
                # L0 expires the entry itself (every read then misses it, and the memory's
                # sweep deletes it); a re-put without a TTL takes an earlier one away.
                seconds = math.inf if ttl is None and old is not None else None
                store.put(
                    {"@id": iri, "@type": ITEM_TYPE, TEXTS: texts[(op.namespace, op.key)]},
                    # Every text of the indexed fields, text-like or not: the caller chose them.
                    index=[TEXTS],
                    tags=[scope.tag] if scope is not None else [],
                    named_graph=graph,
                    metadata={
                        ORDER: self._namespace_order(graph, now),
                        WRITTEN: now,
                        CREATED: created,
                        VALUE: dict(op.value),
                        TTL: ttl,
                        EXPIRES: None if ttl is None else now + ttl * 60,
                    },
                    ttl=seconds if ttl is None else ttl * 60,
                )
            for iri, minutes in refresh.items():
                if iri in store:
                    store.put(
                        {"@id": iri}, metadata={EXPIRES: now + minutes * 60}, ttl=minutes * 60
                    )

    def _namespace_order(self, graph: str, now: float) -> int:
        """Return the place of the namespace ``graph``: its own while it shows an item, else
        after every namespace that does."""
        first = self._first_shown(graph, now)
        if first is not None:
            return _order_of(first)
        shown = [self._first_shown(other, now) for other in self._graphs()]
        return 1 + max((_order_of(entry) for entry in shown if entry is not None), default=0)

    def _first_shown(self, graph: str, now: float) -> Entry | None:
        """Return the oldest item of ``graph`` that reads see, if any."""

        def shown(entry: Entry) -> bool:
            return _is_item(entry) and self._visible(entry, now)

        oldest = self._items_of(graph, limit=1)  # nearly always shown: read the rest if not
        if not oldest or shown(oldest[0]):
            return oldest[0] if oldest else None
        return next((entry for entry in self._items_of(graph) if shown(entry)), None)


class _Batcher:
    """Merges the ``abatch`` calls of one event loop into batches run one at a time in a worker
    thread: calls that arrive while a batch runs go together into the next."""

    def __init__(self, run: Callable[[list[Op]], list[Result]]) -> None:
        self._run = run
        self._pending: list[tuple[list[Op], asyncio.Future[list[Result]]]] = []
        self._draining: asyncio.Task[None] | None = None

    async def submit(self, ops: list[Op]) -> list[Result]:
        future: asyncio.Future[list[Result]] = asyncio.get_running_loop().create_future()
        self._pending.append((ops, future))
        if self._draining is None or self._draining.done():
            self._draining = asyncio.get_running_loop().create_task(self._drain())
        return await future

    async def _drain(self) -> None:
        while self._pending:
            await asyncio.sleep(0)  # the calls made in this turn of the loop join too
            taken, self._pending = self._pending, []
            merged = [op for ops, _ in taken for op in ops]
            try:
                results = await asyncio.to_thread(self._run, merged)
            except Exception as exc:
                await self._alone(taken, exc)
                continue
            start = 0
            for ops, future in taken:
                if not future.done():
                    future.set_result(results[start : start + len(ops)])
                start += len(ops)

    async def _alone(
        self, taken: list[tuple[list[Op], asyncio.Future[list[Result]]]], error: Exception
    ) -> None:
        """A merged batch failed: run each call's ops alone, so only a failing call fails."""
        if len(taken) == 1:
            if not taken[0][1].done():
                taken[0][1].set_exception(error)
            return
        for ops, future in taken:
            try:
                results = await asyncio.to_thread(self._run, ops)
            except Exception as exc:
                if not future.done():
                    future.set_exception(exc)
            else:
                if not future.done():
                    future.set_result(results)


# -- encoding ----------------------------------------------------------------------------------


def namespace_graph(namespace: Namespace) -> str:
    """Return the named-graph IRI of ``namespace``."""
    return IRI_PREFIX + "/".join(quote(label, safe="") for label in namespace)


def item_iri(namespace: Namespace, key: str) -> str:
    """Return the entry IRI of the item ``key`` in ``namespace``."""
    return namespace_graph(namespace) + "#" + quote(key, safe="")


def decode_graph(graph: str) -> Namespace:
    """Return the namespace whose named-graph IRI is ``graph`` (the inverse of
    ``namespace_graph``)."""
    labels = graph[len(IRI_PREFIX) :]
    return tuple(unquote(label) for label in labels.split("/")) if labels else ()


def _is_item(entry: Entry) -> bool:
    return (
        ITEM_TYPE in entry.jsonld_types
        and entry.named_graph is not None
        and isinstance(entry.metadata.get(VALUE), dict)
    )


def _is_live(entry: Entry, now: float) -> bool:
    expires = entry.metadata.get(EXPIRES)
    return not isinstance(expires, (int, float)) or expires > now


def _value(entry: Entry) -> dict[str, Any]:
    value = entry.metadata[VALUE]
    assert isinstance(value, dict)
    return value


def _item_texts(entry: Entry) -> list[str]:
    texts = entry.node.get(TEXTS)
    return [t for t in texts if isinstance(t, str)] if isinstance(texts, list) else []


def _stamp(entry: Entry, key: str) -> datetime:
    value = entry.metadata.get(key)
    seconds = float(value) if isinstance(value, (int, float)) else entry.created_at
    return datetime.fromtimestamp(seconds, tz=timezone.utc)


def _order_of(entry: Entry) -> int:
    value = entry.metadata.get(ORDER, 0)
    return value if isinstance(value, int) else 0


def _to_item(entry: Entry) -> Item:
    """Return the entry as a LangGraph item (``_is_item`` holds for it)."""
    assert entry.named_graph is not None
    return Item(
        namespace=decode_graph(entry.named_graph),
        key=unquote(entry.iri.rpartition("#")[2]),
        value=_value(entry),
        created_at=_stamp(entry, CREATED),
        updated_at=_stamp(entry, WRITTEN),
    )


def _to_hit(entry: Entry, score: float | None = None) -> SearchItem:
    """Return the entry as a search result, with its score when it was ranked."""
    item = _to_item(entry)
    return SearchItem(
        item.namespace, item.key, item.value, item.created_at, item.updated_at, score=score
    )


# -- validation --------------------------------------------------------------------------------


def _check_template(template: object) -> Namespace | None:
    """Accept a namespace with exactly one ``{user_id}`` or ``{thread_id}`` label."""
    if template is None:
        return None
    if not isinstance(template, tuple) or not all(isinstance(t, str) and t for t in template):
        raise InvalidInputError(
            f"scope_template must be a tuple of labels, got {preview(template)}"
        )
    if sum(label in _PLACEHOLDERS for label in template) != 1:
        raise InvalidInputError(
            f"scope_template needs one {{user_id}} or {{thread_id}} label, got {preview(template)}"
        )
    return template


def _check_ttl_config(config: object) -> TTLConfig | None:
    """Accept LangGraph's ``TTLConfig``: a dict of its keys with numbers and booleans."""
    if config is None:
        return None
    if not isinstance(config, Mapping):
        raise InvalidInputError(f"ttl must be a TTLConfig dict, got {preview(config)}")
    known = ("refresh_on_read", "omit_expired", "default_ttl", "sweep_interval_minutes")
    for key, value in config.items():
        if key not in known:
            raise InvalidInputError(f"unknown TTL setting {key!r}; use {', '.join(known)}")
        if key in ("refresh_on_read", "omit_expired") and not isinstance(value, bool):
            raise InvalidInputError(f"{key} must be a bool, got {preview(value)}")
        if key not in ("refresh_on_read", "omit_expired") and value is not None:
            _check_minutes(value, key)
    return TTLConfig(**config)  # type: ignore[typeddict-item]


def _check_minutes(value: object, what: str) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
        raise InvalidInputError(f"{what} must be a number of minutes > 0, got {preview(value)}")
    try:
        seconds = float(value) * 60  # what the entry's expiry is counted in
    except OverflowError:  # an int beyond any float
        seconds = math.inf
    if not math.isfinite(seconds):
        raise InvalidInputError(f"{what} must be finite, got {preview(value)}")


def _check_op(op: object, max_bytes: int) -> None:
    """Raise a typed error naming the bad value when ``op`` cannot run."""
    if isinstance(op, (GetOp, PutOp)):
        _check_address(op.namespace, op.key)
        if isinstance(op, PutOp) and op.value is not None:
            _check_writable(op.namespace)
            _check_value(op.value, max_bytes)
            if op.index not in (None, False):
                check_fields(op.index, "index")
            if op.ttl is not None:
                _check_minutes(op.ttl, "ttl")
    elif isinstance(op, SearchOp):
        _check_page(op.limit, op.offset)
        if not isinstance(op.namespace_prefix, tuple):
            raise InvalidInputError(
                f"namespace_prefix must be a tuple, got {preview(op.namespace_prefix)}"
            )
        if op.query is not None and not isinstance(op.query, str):
            raise InvalidInputError(f"query must be a string or None, got {preview(op.query)}")
        _check_filter(op.filter)
    elif isinstance(op, ListNamespacesOp):
        _check_page(op.limit, op.offset)
        _check_conditions(op.match_conditions)
        if op.max_depth is not None and not _is_count(op.max_depth, 1):
            raise InvalidInputError(f"max_depth must be an int >= 1, got {preview(op.max_depth)}")
    else:
        raise InvalidInputError(f"unknown store operation {preview(op)}")
    validate_op_namespace(op)


def _check_address(namespace: object, key: object) -> None:
    if not isinstance(namespace, tuple):
        raise InvalidInputError(f"namespace must be a tuple of strings, got {preview(namespace)}")
    validate_op_namespace(GetOp(namespace, ""))
    for label in namespace:
        _check_text(label, "namespace label")
    _check_text(key, "key")


def _check_writable(namespace: Namespace) -> None:
    """Refuse an empty namespace for an item (``put`` applies LangGraph's other rules, such
    as the reserved ``"langgraph"`` root, which LangGraph's stores take through ``batch``)."""
    if not namespace:
        raise InvalidNamespaceError("Namespace cannot be empty.")


def _normalised(op: Op) -> Op:
    """Read a namespace path given as a list as the tuple it stands for, as LangGraph's stores
    do (``search(["docs"])``, ``list_namespaces(prefix=["docs"])``); anything else is left to
    the checks."""
    if isinstance(op, SearchOp) and _is_path(op.namespace_prefix):
        return op._replace(namespace_prefix=tuple(op.namespace_prefix))
    if isinstance(op, ListNamespacesOp) and isinstance(op.match_conditions, (list, tuple)):
        conditions = tuple(
            MatchCondition(match_type=c.match_type, path=tuple(c.path))
            if isinstance(c, MatchCondition) and _is_path(c.path)
            else c
            for c in op.match_conditions
        )
        return op._replace(match_conditions=conditions)
    return op


def _is_path(value: object) -> bool:
    return isinstance(value, list) and all(isinstance(label, str) for label in value)


def _check_text(value: object, what: str) -> None:
    if not isinstance(value, str):
        raise InvalidInputError(f"{what} must be a string, got {preview(value)}")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise InvalidInputError(f"{what} is not valid Unicode: {preview(value)}") from exc


def _check_value(value: object, max_bytes: int) -> None:
    """Accept a mapping with string keys that JSON gives back equal (what ``get`` returns),
    no larger than the L0 store's content limit."""
    if not isinstance(value, Mapping):
        raise InvalidInputError(f"value must be a dict, got {preview(value)}")
    try:
        text = json.dumps(dict(value), allow_nan=False, ensure_ascii=False)
        text.encode("utf-8")
        same = json.loads(text) == dict(value)
    except (TypeError, ValueError) as exc:  # UnicodeEncodeError is a ValueError
        raise InvalidInputError(
            f"value is not JSON-serialisable: {preview(value)} ({exc})"
        ) from exc
    if not same:
        raise InvalidInputError(
            f"value does not survive JSON unchanged (non-string keys or tuples?): {preview(value)}"
        )
    size = len(canonical_json(dict(value)).encode("utf-8"))
    if size > max_bytes:
        raise ContentTooLargeError(
            f"value of {size} bytes is over the store's limit of {max_bytes}: {preview(value)}"
        )


def _is_count(value: object, minimum: int) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= minimum


def _check_page(limit: object, offset: object) -> None:
    if not _is_count(limit, 1):
        raise InvalidInputError(f"limit must be an int >= 1, got {preview(limit)}")
    if not _is_count(offset, 0):
        raise InvalidInputError(f"offset must be an int >= 0, got {preview(offset)}")


def _check_conditions(conditions: object) -> None:
    if conditions is not None and not isinstance(conditions, tuple):
        raise InvalidInputError(f"match_conditions must be a tuple, got {preview(conditions)}")
    for condition in conditions or ():
        if not isinstance(condition, MatchCondition) or not isinstance(condition.path, tuple):
            raise InvalidInputError(
                f"match condition must be a MatchCondition, got {preview(condition)}"
            )
        if condition.match_type not in ("prefix", "suffix"):
            raise InvalidInputError(
                f"match_type must be 'prefix' or 'suffix', got {preview(condition.match_type)}"
            )


def _check_filter(wanted: object) -> None:
    """Accept the filters ``InMemoryStore`` understands: values, nested dicts, operators."""
    if wanted is None:
        return
    if not isinstance(wanted, dict) or not all(isinstance(key, str) for key in wanted):
        raise InvalidInputError(f"filter must be a dict with string keys, got {preview(wanted)}")
    for value in wanted.values():
        _check_condition(value)


def _check_condition(wanted: object) -> None:
    if isinstance(wanted, (list, tuple)):
        for item in wanted:
            _check_condition(item)
    if not isinstance(wanted, dict):
        return
    if not all(isinstance(key, str) for key in wanted):
        raise InvalidInputError(f"filter keys must be strings, got {preview(wanted)}")
    if not any(key.startswith("$") for key in wanted):
        _check_filter(wanted)
        return
    for operator, argument in wanted.items():
        if operator not in _OPERATORS:
            raise InvalidInputError(
                f"unsupported filter operator {operator!r}; use one of {sorted(_OPERATORS)}"
            )
        if operator in _COMPARISONS and _number(argument) is None:
            raise InvalidInputError(f"{operator} needs a number, got {preview(argument)}")


# -- matching ----------------------------------------------------------------------------------


def _passes(value: dict[str, Any], wanted: dict[str, Any] | None) -> bool:
    """Return whether ``value`` meets the filter (``InMemoryStore``'s rules; a dotted key that
    is not a key of the value is a path into it, as LangGraph's SQLite and PostgreSQL stores
    read it: ``{"user.access-level": "nested"}``)."""
    return not wanted or all(_meets(_at(value, key), cond) for key, cond in wanted.items())


def _at(value: dict[str, Any], key: str) -> Any:
    """The value under ``key``, or along the dotted path ``key`` (``None`` when missing)."""
    if key in value or "." not in key:
        return value.get(key)
    found: Any = value
    for part in key.split("."):
        if not isinstance(found, dict) or part not in found:
            return None
        found = found[part]
    return found


def _meets(value: Any, wanted: Any) -> bool:
    if isinstance(wanted, dict):
        if any(key.startswith("$") for key in wanted):
            return all(_compare(value, op, argument) for op, argument in wanted.items())
        return isinstance(value, dict) and _passes(value, wanted)
    if isinstance(wanted, (list, tuple)):
        return (
            isinstance(value, (list, tuple))
            and len(value) == len(wanted)
            and all(_meets(v, w) for v, w in zip(value, wanted, strict=True))
        )
    return bool(value == wanted)


def _compare(value: Any, operator: str, argument: Any) -> bool:
    """Apply one operator; an order comparison with a non-number fails rather than raises."""
    if operator == "$eq":
        return bool(value == argument)
    if operator == "$ne":
        return bool(value != argument)
    left, right = _number(value), _number(argument)
    if left is None or right is None:
        return False
    if operator == "$gt":
        return left > right
    if operator == "$gte":
        return left >= right
    if operator == "$lt":
        return left < right
    return left <= right


def _number(value: object) -> float | None:
    """Return ``float(value)`` as ``InMemoryStore`` coerces it, or ``None`` when it cannot."""
    try:
        number = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError, OverflowError):
        return None
    return None if math.isnan(number) else number


def _matches_path(condition: MatchCondition, namespace: Namespace) -> bool:
    """Return whether ``namespace`` starts (``prefix``) or ends (``suffix``) with the
    condition's path, where ``*`` matches any label."""
    path = condition.path
    if len(namespace) < len(path):
        return False
    if not path:
        return True
    labels = namespace[: len(path)] if condition.match_type == "prefix" else namespace[-len(path) :]
    return all(want in ("*", label) for want, label in zip(path, labels, strict=True))
