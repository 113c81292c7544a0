"""L2: the node store: the cache, generations, the single writer and change events.

``NodeStore`` keeps the nodes of one ``GraphBackend``: it validates batches of nodes
(``validation``), writes them as their RDF (``rdf``) and records (``records``), caches what the
store holds, numbers each node's versions and publishes the changes.

Invariants:
- One writer per store: every write, delete and clean-mark takes ``NodeStore``'s lock, reads
  the old state and writes the new one as one SPARQL update (pyoxigraph 0.5.13 on disk loses
  concurrent read-modify-write updates; one lock made them exact, so the lock is kept for the
  in-memory store and the endpoint too). The cache is exact under it: one process writes a
  store (RocksDB's lock ensures it on disk; for a server it is the deployment's rule until the
  MESI directory coordinates several).
- A call is atomic: a batch is validated whole (JSON, ``@id``, size, count) before anything is
  written, then goes to the store as one update, so it is all there or none of it. Several
  callers' batches written together (``write_batches``, the group commit) are one update too,
  each batch's generations and events as if it had been written alone, in turn.
- Generations are per node, start at 1 and increase by one on every write; a deletion leaves a
  tombstone that keeps the generation, so a node written again continues from it.
- Every write and delete carries a write id (the caller's, or a new one), stored in the records
  it writes, in the same update (``writeids``): after a lost reply the records say whether it
  landed.
- A store update that fails drops its nodes from the cache, whatever failed: one whose reply
  was lost (``WriteOutcomeUnknownError``) may have changed them, and their next read goes to
  the store.
- The cache holds what the store holds (written after the update succeeds), including that an
  IRI has nothing (exact under the single writer, so a new node costs one look-up at most); a miss
  reads the bookkeeping from the store, and is not cached when a write of this process was
  cached while it read (the read may predate the write). Events are published after the
  commit, outside the lock, and carry IRI, graph and generation (the seam of the MESI
  directory); an update that moved the node to another graph also names the graph it left
  (``previous_graph``); a caller committing inside a larger transaction collects them
  (``events=``) and publishes them after it.
- An embedded store (memory, disk) has this process as its single writer, so the IRIs it holds
  a record or tombstone of are known here: read once when the ``NodeStore`` opens (about 0.8 s
  for 100,000 nodes on disk), then every IRI written is added before its write (a failed write
  leaves a harmless extra). An IRI outside that set has nothing in the store: no look-up (a
  new node on disk saved 20-50 us). A server's store is looked up, and so is an embedded one
  once it holds more records than the cache holds nodes (``cache_size``): the set is then
  dropped, so its memory and the open time stay those of a full cache.
- A cache hit takes no lock: it is one dict look-up of an entry (value and stamp in one
  immutable object; a node or tombstone this process wrote is its own entry, stamped
  ``WRITTEN_HERE``) that a writer replaces whole after its update, so it returns the store's
  value at some moment of the call (the lock, taken by every reading thread, queued them
  behind each other under the GIL).
- A store shared by processes (a SPARQL server) is not written by this process alone, so its
  cache is checked (``check``, a ``CacheCheck``): an entry is served only while the shared
  change token, taken before the look-up, still equals the one it was vouched with (a token
  taken before the store was read, or one the directory gave for its generation), and is
  otherwise compared with the shared generations (the coherence directory) and read again
  when they differ. A vouch stamps the very entry it checked: one replaced meanwhile keeps
  its replacement's stamp.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Protocol

import pyoxigraph as ox

from gliding_core.blackboard.graph import Dataset, GraphBackend, QueryResult, quads_text, term_value
from gliding_core.blackboard.records import (
    ABSENT,
    Absent,
    BoardNode,
    Known,
    Tombstone,
    bookkeeping_quad,
    marked_dirty,
    marks_removal,
    read_records,
    recorded_in,
    recorded_iris,
    removal,
    upgrade_layout,
)
from gliding_core.blackboard.validation import (
    NodeWrite,
    check_iri,
    check_tags,
    checked_graph,
    checked_write,
)
from gliding_core.blackboard.writeids import DELETED, new_write_id, outcome_unknown, pushed
from gliding_core.bus import EventBus, EventType
from gliding_core.checks import check_list
from gliding_core.errors import ContentTooLargeError, WriteOutcomeUnknownError


class CacheCheck(Protocol):
    """Whether a cache entry of a store shared by processes is still current."""

    def token(self) -> Hashable:
        """Return the shared change token (it moves whenever any process changed a node)."""
        ...

    def vouch(
        self, iri: str, generation: int, exists: bool, stamp: Hashable | None
    ) -> Hashable | None:
        """Return the token that vouches for an entry at ``(generation, exists)``, or ``None``
        when the entry is not current (or cannot be told so now): it is read again.

        ``stamp`` is the token the entry was last vouched at, ``WRITTEN_HERE`` when this
        process wrote it, or ``None``.
        """
        ...


class _WrittenHere:
    """The stamp of an entry this process wrote (inside the shared directory's transaction)."""

    def __repr__(self) -> str:
        return "WRITTEN_HERE"


WRITTEN_HERE = _WrittenHere()


Announce = Callable[[], None]
"""A deferred publication of a write's events."""


def node_states(known: Mapping[str, Known]) -> dict[str, tuple[BoardNode | None, int]]:
    """Return each IRI's node (``None``: absent or deleted) and generation (0: never), from
    what the store holds under it (``NodeStore.known``)."""
    return {
        iri: (state if isinstance(state, BoardNode) else None, state.generation)
        for iri, state in known.items()
    }


def _silent() -> None:
    """The publication of a write made with no bus: nothing."""


@dataclass(frozen=True, slots=True)
class _Entry:
    """A cache entry: what the store holds under an IRI, with the token that vouches for it.

    Never changed in place, only replaced whole: a reader that takes one from the dict without
    the lock gets a value together with the stamp it was vouched at. What this process wrote
    is cached bare (a ``Known``, stamped ``WRITTEN_HERE``): one object less kept per node
    written, for the garbage collector to go through (``_opened`` reads either).
    """

    known: Known
    stamp: Hashable | None  # a ``check`` token, ``WRITTEN_HERE``, or ``None`` (unvouched)


_Cached = _Entry | BoardNode | Tombstone  # a bare ``Known`` was written here


def _opened(entry: _Cached) -> tuple[Known, Hashable | None]:
    """The value of a cache entry and the stamp that vouches for it."""
    if isinstance(entry, _Entry):
        return entry.known, entry.stamp
    return entry, WRITTEN_HERE


class NodeStore:
    """The node layer over one ``GraphBackend``: the cache, the generations and the writer.

    Args:
        backend: the quad store.
        max_node_bytes: the largest node JSON accepted.
        max_batch: the most nodes one call may write.
        cache_size: how many nodes the cache keeps (least recently used leave first).
        bus: where change events go (none when ``None``).
    """

    def __init__(
        self,
        backend: GraphBackend,
        *,
        max_node_bytes: int = 262_144,
        max_batch: int = 10_000,
        cache_size: int = 100_000,
        bus: EventBus | None = None,
    ) -> None:
        self.backend = backend
        self.max_node_bytes, self.max_batch, self.cache_size = max_node_bytes, max_batch, cache_size
        self.bus = bus
        self.writer = threading.RLock()
        self.check: CacheCheck | None = None
        self.before_store: Callable[[], None] | None = None
        """Called right before a write's store update (which releases the GIL): the board's
        commit queue wakes a thread there, to run beside it (``CommitQueue.storing``)."""
        self._cache: OrderedDict[str, _Cached] = OrderedDict()
        self._writes = 0  # writes cached so far: a read begun before one is not cached
        self._cache_lock = threading.Lock()
        # An embedded store has this process as its one writer (RocksDB's lock; in memory by
        # construction), so which IRIs it keeps a record of is known here: a new IRI then
        # costs no store probe (20-50 us on disk). A server's store keeps the probe.
        self._recorded: set[str] | None = None
        with self.writer:
            upgrade_layout(backend)
            if backend.kind != "server":  # read once, at open (see ``recorded_iris``)
                self._recorded = recorded_iris(backend, cache_size)

    # -- writes ------------------------------------------------------------------------------

    def prepare(
        self, nodes: object, graph: str, tags: object = (), *, write_id: str | None = None
    ) -> list[NodeWrite]:
        """Validate a batch of nodes for one graph (see ``NodeWrite.check``).

        ``nodes`` is a list (``check_list``: a tuple or a set too) of JSON-LD objects, ``tags``
        a list of tags (``check_tags``). ``write_id``: the write's id, which a node without
        ``@id`` gets its IRI minted from.
        """
        batch = check_list(nodes, what="nodes")
        # The batch's graph and tags once, not once a node (the same values for every node).
        target, checked_tags, limit = checked_graph(graph), check_tags(tags), self.max_node_bytes
        requests = [
            checked_write(n, target, checked_tags, limit, write_id, index)
            for index, n in enumerate(batch)
        ]
        if len(requests) > self.max_batch:
            raise ContentTooLargeError(
                f"a batch of {len(requests)} nodes is over the limit of {self.max_batch} per call"
            )
        return requests

    def write(
        self,
        requests: Sequence[NodeWrite],
        *,
        source: str | None = None,
        dirty: bool = True,
        events: list[Announce] | None = None,
        write_id: str | None = None,
    ) -> list[BoardNode]:
        """Write validated nodes in one transaction; return them as stored, in order.

        ``events``, when given, collects the publication of the write's events instead of
        publishing them (for a caller inside a transaction of its own). ``write_id``: the
        write's id (a new one when ``None``).

        Raises:
            WriteOutcomeUnknownError: the store may have applied the write and its answer was
                lost; the error names the write's id, to retry it with.
        """
        if not requests:
            return []
        wid = new_write_id() if write_id is None else write_id
        try:
            [(written, announce)] = self.write_batches([(requests, source, wid)], dirty=dirty)
        except WriteOutcomeUnknownError as exc:
            raise outcome_unknown(wid, [r.iri for r in requests], exc) from exc
        if events is None:
            announce()
        else:
            events.append(announce)
        return written

    def write_batches(
        self, batches: Sequence[tuple[Sequence[NodeWrite], str | None, str]], *, dirty: bool = True
    ) -> list[tuple[list[BoardNode], Announce]]:
        """Write several callers' batches in one transaction, as if one after the other.

        Each batch is ``(requests, source, write_id)``; a node in several batches gets one
        generation per write, in order, and the store keeps the last (with each write's id in
        its record). Returns, per batch, its nodes as stored (in its order) and the publication
        of its events, for its caller to make after the commit.

        Raises:
            WriteOutcomeUnknownError: the store may have applied the update and its answer was
                lost (from the backend: it names no write).
        """
        with self.writer:
            old = self._current([r.iri for requests, _, _ in batches for r in requests])
            latest: dict[str, Known] = dict(old)  # every IRI's newest state so far
            final: dict[str, tuple[NodeWrite, BoardNode]] = {}  # each IRI's last write
            done: list[tuple[list[BoardNode], Announce]] = []
            for requests, source, write_id in batches:
                before = {r.iri: latest[r.iri] for r in requests} if self.bus is not None else {}
                written: dict[str, BoardNode] = {}
                for request in requests:
                    iri = request.iri
                    prior = latest[iri]
                    node = BoardNode(
                        iri,
                        request.content,
                        request.graph,
                        prior.generation + 1,  # a tombstone's generation continues
                        request.tags,
                        dirty,
                        pushed(write_id, prior.writes),
                    )
                    written[iri] = latest[iri] = node
                    final[iri] = (request, node)
                distinct = list(written.values())  # in the batch's order
                if len(distinct) == len(requests):
                    nodes = distinct
                else:  # an IRI repeats: each request gets its node
                    nodes = [written[r.iri] for r in requests]
                done.append((nodes, self._announcer(distinct, before, source)))
            self._store_writes(old, list(final.values()))
        return done

    def _store_writes(
        self, old: Mapping[str, Known], final: Sequence[tuple[NodeWrite, BoardNode]]
    ) -> None:
        """Replace the old nodes with the final ones in one update (the writer is held)."""
        nodes: list[BoardNode] = []
        quads: list[ox.Quad] = []
        for request, node in final:
            nodes.append(node)
            quads += request.triples
            quads.append(bookkeeping_quad(node, request.subject))  # the term is not built again
        recorded = self._recorded
        if recorded is not None:  # before the write: a superset if it fails
            recorded.update(node.iri for node in nodes)
            if len(recorded) > self.cache_size:
                self._recorded = None  # too many to keep: the store is looked up
        stored = {k: v for k, v in old.items() if not isinstance(v, Absent)}
        if self.before_store is not None:
            self.before_store()
        try:
            if stored:
                self.backend.update(f"{removal(stored)} ;\nINSERT DATA {{ {quads_text(quads)} }}")
            else:  # only new nodes: nothing to take out, a plain (atomic) insert
                self.backend.extend(quads)
        except BaseException:
            self.forget(old)  # a lost reply may have left them changed: read them again
            raise
        self._remember_written(nodes)

    def _announcer(
        self, nodes: list[BoardNode], old: Mapping[str, Known], source: str | None
    ) -> Announce:
        if self.bus is None:  # no bus: no event, and nothing to keep for one
            return _silent

        def announce() -> None:
            self._publish_writes(nodes, old, source)

        return announce

    def delete(
        self,
        iris: Sequence[str],
        *,
        source: str | None = None,
        events: list[Announce] | None = None,
        write_id: str | None = None,
    ) -> list[BoardNode]:
        """Delete nodes (their generations stay as tombstones); return those that existed.

        ``events`` collects the publications as in ``write``; ``write_id`` is the delete's id
        (a new one when ``None``), kept in the tombstones.

        Raises:
            WriteOutcomeUnknownError: the store may have applied the delete and its answer was
                lost; the error names the delete's id, to retry it with.
        """
        checked = [check_iri(iri, "IRI") for iri in iris]
        wid = new_write_id() if write_id is None else write_id
        try:
            gone = self._delete(checked, DELETED + wid)
        except WriteOutcomeUnknownError as exc:
            raise outcome_unknown(wid, checked, exc, delete=True) from exc

        def announce() -> None:
            for node in gone:
                self._publish(EventType.NODE_DELETED, node, source)

        if events is None:
            announce()
        else:
            events.append(announce)
        return gone

    def _delete(self, checked: Sequence[str], mark: str) -> list[BoardNode]:
        """Replace the existing nodes among ``checked`` by tombstones listing ``mark``."""
        with self.writer:
            old = {k: v for k, v in self._current(checked).items() if isinstance(v, BoardNode)}
            if old:
                tombstones = {
                    iri: Tombstone(node.generation, pushed(mark, node.writes))
                    for iri, node in old.items()
                }
                quads = [q for iri, t in tombstones.items() for q in t.quads(iri)]
                try:
                    self.backend.update(f"{removal(old)} ;\nINSERT DATA {{ {quads_text(quads)} }}")
                except BaseException:
                    self.forget(old)  # a lost reply may have deleted them: read them again
                    raise
                with self._cache_lock:
                    self._cache.update(tombstones)  # bare: written here
                    self._writes += 1
        return list(old.values())

    def mark_clean(self, nodes: Sequence[BoardNode]) -> None:
        """Clear the dirty mark of nodes whose generation has not moved since they were read."""
        if not nodes:
            return
        with self.writer:
            # A shared store is read again: its cache is vouched for by the coherence
            # directory, which a flush (holding the writer) must not wait for.
            current = self._current([n.iri for n in nodes], fresh=self.check is not None)
            clean = []
            for node in nodes:
                now = current.get(node.iri)
                if isinstance(now, BoardNode) and now.generation == node.generation and now.dirty:
                    clean.append(replace(now, dirty=False))
            if not clean:
                return
            quads = [q for node in clean for q in node.quads()]
            self.backend.update(f"{marks_removal(clean)} ;\nINSERT DATA {{ {quads_text(quads)} }}")
            self._remember_written(clean)

    # -- reads -------------------------------------------------------------------------------

    def get(self, iri: str, *, token: Hashable | None = None) -> BoardNode | None:
        """Return the node with ``iri`` (the cache first), or ``None``.

        ``token``: the shared check's token as the caller read it at the start of its read
        (``None``: read it here), for a caller that vouches something else with the same read.
        """
        # No lock on a hit: one dict look-up is atomic, and a writer replaces an entry (value
        # and stamp together) in one store after its update committed, so the entry seen is
        # the store's at some moment during this call. A lock here, taken by every reading
        # thread, queued them behind one another (thousands of context switches per 20,000
        # reads with 4 threads). Shared (``check``), the token is taken first: an entry
        # stamped with it was read from the store after every change the token covers.
        check = self.check
        if token is None and check is not None:
            token = check.token()
        entry = self._cache.get(iri)
        if entry is not None:
            known, stamp = _opened(entry)
            if check is None or stamp == token:
                self._touch(iri)
                return known if isinstance(known, BoardNode) else None
        return self.get_many([check_iri(iri, "IRI")]).get(iri)

    def _touch(self, iri: str) -> None:
        """Mark ``iri`` recently used, without the lock (an entry evicted meanwhile is gone)."""
        try:
            self._cache.move_to_end(iri)
        except KeyError:
            return

    def get_many(self, iris: Sequence[str], *, fresh: bool = False) -> dict[str, BoardNode]:
        """Return the existing nodes among ``iris``, by IRI (``fresh``: read from the store)."""
        return {
            k: v for k, v in self._current(iris, fresh=fresh).items() if isinstance(v, BoardNode)
        }

    def get_listed(self, iris: Sequence[str]) -> list[BoardNode]:
        """Return the existing nodes among ``iris``, in the order of ``iris``."""
        found = self.get_many(iris)
        return [found[iri] for iri in iris if iri in found]

    def known(self, iris: Sequence[str], *, fresh: bool = False) -> dict[str, Known]:
        """Return what the store holds under each IRI: a node, a tombstone or ``Absent``,
        with the ids of its last writes (``fresh``: read from the store)."""
        return self._current(iris, fresh=fresh)

    def states(self, iris: Sequence[str]) -> dict[str, tuple[BoardNode | None, int]]:
        """Return each IRI's node (``None``: absent or deleted) and generation (0: never)."""
        return node_states(self._current(iris))

    def iris_in(self, graphs: Sequence[str]) -> list[str]:
        """Return the IRIs of the nodes kept in ``graphs``, sorted."""
        return sorted(recorded_in(self.backend, graphs))

    def iris_of_type(self, type_iri: str, graphs: Sequence[str]) -> list[str]:
        """Return the IRIs of nodes typed ``type_iri`` in ``graphs``, sorted."""
        if not graphs:
            return []
        kind = ox.NamedNode(check_iri(type_iri, "type"))
        result = self.backend.query(
            f"SELECT DISTINCT ?s WHERE {{ GRAPH ?g {{ ?s a {kind} }} }}",
            dataset=Dataset((), tuple(graphs)),
        )
        return sorted(term_value(row["s"]) for row in result.rows)

    def dirty(self, graphs: Sequence[str] | None = None) -> list[BoardNode]:
        """Return the nodes changed since their last flush (in ``graphs`` when given)."""
        iris = marked_dirty(self.backend, graphs)
        wanted = None if graphs is None else set(graphs)
        return [
            node
            for node in self.get_many(iris).values()
            if node.dirty and (wanted is None or node.graph in wanted)
        ]

    def query(self, text: str, **options: Any) -> QueryResult:
        """Run a query on the backend (see ``GraphBackend.query``)."""
        return self.backend.query(text, **options)

    def forget_cache(self) -> None:
        """Empty the cache (the next reads go to the store)."""
        with self._cache_lock:
            self._cache.clear()

    def forget(self, iris: Iterable[str]) -> None:
        """Drop ``iris`` from the cache (their next read goes to the store)."""
        with self._cache_lock:
            for iri in iris:
                self._cache.pop(iri, None)

    def doubted(self, iris: Iterable[str]) -> None:
        """Forget nodes a write of unknown outcome may have changed, and say so on the bus.

        Their next read goes to the store; the views built from them are invalidated
        (``CACHE_INVALIDATE`` with their ``iris``). Called outside any transaction.
        """
        doubted = list(dict.fromkeys(iris))
        self.forget(doubted)
        if self.bus is not None and doubted:
            self.bus.publish(EventType.CACHE_INVALIDATE, {"iris": doubted}, source="blackboard")

    def announce_landed(self, nodes: Sequence[BoardNode], source: str | None) -> None:
        """Publish the events of a write found landed on its retry (its own were never sent)."""
        for node in nodes:
            kind = EventType.NODE_CREATED if node.generation == 1 else EventType.NODE_UPDATED
            self._publish(kind, node, source)

    def cached(self, iri: str) -> bool:
        """Return whether ``iri`` is in the cache."""
        with self._cache_lock:
            return iri in self._cache

    # -- internals ---------------------------------------------------------------------------

    def _current(self, iris: Sequence[str], *, fresh: bool = False) -> dict[str, Known]:
        """Return what the store holds under ``iris`` (the cache first, unless ``fresh``)."""
        found: dict[str, Known] = {}
        missing = []
        check = self.check
        token = None if check is None else check.token()
        unvouched: dict[str, _Cached] = {}
        with self._cache_lock:
            writes = self._writes
            for iri in iris:
                entry = None if fresh else self._cache.get(iri)
                if entry is None:
                    missing.append(iri)
                    continue
                self._cache.move_to_end(iri)
                found[iri], stamp = _opened(entry)
                if check is not None and stamp != token:
                    unvouched[iri] = entry
        if check is not None and unvouched:
            missing += self._vouch(check, unvouched, found)
        recorded = self._recorded if check is None else None
        if missing and recorded is not None:  # never recorded: absent, no probe, not cached
            probed = []
            for iri in missing:
                if iri in recorded:
                    probed.append(iri)
                else:
                    found[iri] = ABSENT
            missing = probed
        if missing:
            loaded = self._load(list(dict.fromkeys(missing)))
            for iri in missing:
                loaded.setdefault(iri, Absent())
            found.update(loaded)
            self._remember(loaded, stamp=token, since=writes)
        return found

    def _vouch(
        self, check: CacheCheck, entries: Mapping[str, _Cached], found: dict[str, Known]
    ) -> list[str]:
        """Stamp the ``entries`` that are current; return (and drop from ``found``) the others.

        An entry replaced meanwhile keeps its replacement: the stamp vouches for the value
        it was checked with only.
        """
        stale = []
        vouched = {}
        for iri, entry in entries.items():
            known, held = _opened(entry)
            stamp = check.vouch(iri, known.generation, isinstance(known, BoardNode), held)
            if stamp is None:
                stale.append(iri)
                del found[iri]
            else:
                vouched[iri] = _Entry(known, stamp)
        with self._cache_lock:
            for iri, entry in vouched.items():
                if self._cache.get(iri) is entries[iri]:
                    self._cache[iri] = entry
        return stale

    def _load(self, iris: Sequence[str]) -> dict[str, Known]:
        """Read the bookkeeping of ``iris`` from the store (``read_records``)."""
        return read_records(self.backend, iris)

    def _remember(self, by_iri: Mapping[str, Known], *, stamp: Hashable | None, since: int) -> None:
        """Cache what was read from the store, vouched by ``stamp`` (the token taken before it
        was read, or ``None``).

        A read is not cached when this process wrote since it began (``since``, the write
        count then): it may be older than the write, which the cache already holds.
        """
        with self._cache_lock:
            if since != self._writes:
                return
            self._cache.update({iri: _Entry(known, stamp) for iri, known in by_iri.items()})
            self._evict()

    def _remember_written(self, nodes: Iterable[BoardNode]) -> None:
        """Cache nodes this process has just stored (bare: stamped ``WRITTEN_HERE``)."""
        with self._cache_lock:
            self._writes += 1
            cache = self._cache
            for node in nodes:
                cache[node.iri] = node
                cache.move_to_end(node.iri)
            self._evict()

    def _evict(self) -> None:
        """Drop the least recently used entries past ``cache_size`` (the cache lock is held)."""
        cache = self._cache
        while len(cache) > self.cache_size:
            cache.popitem(last=False)

    def _publish_writes(
        self, nodes: list[BoardNode], old: Mapping[str, Known], source: str | None
    ) -> None:
        if self.bus is None:  # no bus: no event is built
            return
        for node in nodes:
            before = old.get(node.iri)
            if not isinstance(before, BoardNode):
                self._publish(EventType.NODE_CREATED, node, source)
            elif before.graph != node.graph:  # moved: views of the graph it left are stale too
                self._publish(EventType.NODE_UPDATED, node, source, previous_graph=before.graph)
            else:
                self._publish(EventType.NODE_UPDATED, node, source)

    def _publish(self, kind: EventType, node: BoardNode, source: str | None, **extra: str) -> None:
        if self.bus is not None:
            self.bus.publish(
                kind,
                {"iri": node.iri, "graph": node.graph, "generation": node.generation, **extra},
                source=source,
            )
