"""L2: blackboard nodes: validation, JSON-LD to RDF, generations, the cache and the single writer.

A node is a JSON-LD object with an absolute ``@id``, kept in exactly one named graph. Writing it
puts its RDF (read by a JSON-LD processor under the project's context, or for a flat node by
``flat_triples``, which gives the same quads) into that graph, and its bookkeeping, one quad,
into that graph's bookkeeping graph (``bookkeeping_graph``): ``<iri> ghm:dirty "record"`` while
L0 has not seen its last version, ``<iri> ghm:clean "record"`` after, the record being its JSON
text, generation and tags. The bookkeeping graph names the node's graph, the predicate its
state: one quad instead of three (record, graph, dirty mark), each quad costing 20-30 us on
disk. A deleted node leaves a tombstone ``<iri> ghm:record "{generation, deleted}"`` in
``META_GRAPH``. A store written in the earlier layout (record, ``ghm:graph`` and dirty mark in
``META_GRAPH``) is rewritten in this one by one update when a ``NodeStore`` opens it.

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
- Blank nodes are skolemised to IRIs derived from the node's IRI and their position, so a
  rewrite removes exactly the old node's triples and nothing lingers.
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
- A node describes itself: ``@graph`` and ``@included`` are refused; an embedded object with its
  own ``@id`` adds triples about that IRI, which a rewrite of either node may remove.
"""

from __future__ import annotations

import functools
import hashlib
import json
import json.encoder
import threading
import uuid
from collections import OrderedDict
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, NamedTuple, Protocol

import pyoxigraph as ox

from gliding_core.blackboard.flat import flat_triples
from gliding_core.blackboard.graph import (
    Dataset,
    GraphBackend,
    QueryResult,
    quads_text,
    term_value,
)
from gliding_core.blackboard.vocabulary import (
    BOOKKEEPING_PREFIX,
    CONTEXT,
    META_GRAPH,
    SKOLEM_PREFIX,
    bookkeeping_graph,
    bookkept_graph,
    meta,
    with_context,
)
from gliding_core.boundary import translated
from gliding_core.bus import EventBus, EventType
from gliding_core.errors import ContentTooLargeError, InvalidInputError, InvalidNodeError
from gliding_core.jsonld import (
    DEFAULT_MAX_DEPTH,
    Node,
    canonical_json,
    is_label,
    parse_canonical,
    parse_node,
    preview,
)

MINTED_PREFIX = "urn:uuid:"
_META = ox.NamedNode(META_GRAPH)
_RECORD, _GRAPH, _DIRTY, _CLEAN = (
    ox.NamedNode(meta(name)) for name in ("record", "graph", "dirty", "clean")
)
_BOOKKEEPING = (_RECORD.value, _DIRTY.value, _CLEAN.value)  # the predicates of a look-up
_ENCODE = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False).encode
_QUOTED = json.encoder.encode_basestring  # ``_ENCODE`` of a str, without its Python wrapper
_CONTEXT_OPENING = '{"@context":' + canonical_json(CONTEXT) + ","  # CONTEXT is a constant
_set = object.__setattr__  # how the frozen classes below set their fields


@dataclass(frozen=True, slots=True, init=False)
class BoardNode:
    """One node on the blackboard, as last written (an immutable snapshot).

    Attributes:
        iri: the node's ``@id``.
        content: its canonical JSON text, exactly as written.
        graph: the named graph it lives in.
        generation: 1 on its first write, one more on every later one.
        tags: its tags (a critical tag makes the write go through to L0).
        dirty: whether it changed since it was last flushed to L0.
    """

    iri: str
    content: str
    graph: str
    generation: int
    tags: tuple[str, ...]
    dirty: bool

    def __init__(
        self,
        iri: str,
        content: str,
        graph: str,
        generation: int,
        tags: tuple[str, ...] = (),
        dirty: bool = True,
    ) -> None:
        # Written out: the generated ``__init__`` of a frozen class looks ``object.__setattr__``
        # up for every field (twice the time, and one is built for every write).
        _set(self, "iri", iri)
        _set(self, "content", content)
        _set(self, "graph", graph)
        _set(self, "generation", generation)
        _set(self, "tags", tags)
        _set(self, "dirty", dirty)

    @property
    def node(self) -> Node:
        """The JSON-LD node (a fresh dict on every call)."""
        return parse_canonical(self.content)

    def quads(self) -> list[ox.Quad]:
        """Return the node's bookkeeping quad (its record, in its graph's bookkeeping graph)."""
        return [self._record(ox.NamedNode(self.iri))]

    def _record(self, subject: ox.NamedNode) -> ox.Quad:
        """The bookkeeping quad, for ``subject`` (the node's IRI as a term, built once)."""
        record = (  # the content is JSON text already: only escaped once, as a string
            f'{{"content":{_QUOTED(self.content)},"generation":{self.generation},'
            f'"tags":{_ENCODE(list(self.tags)) if self.tags else "[]"}}}'
        )
        where = _bookkeeping_node(self.graph)
        return ox.Quad(subject, _DIRTY if self.dirty else _CLEAN, ox.Literal(record), where)


class NodeWrite(NamedTuple):
    """A validated request to write one node into one graph (an immutable record).

    A named tuple: one is built for every node written, at a third of a frozen dataclass's
    cost (whose generated ``__init__`` sets each field through ``object.__setattr__``). It is
    not hashable (it holds the parsed node, a dict), and compares every field.
    """

    iri: str
    content: str
    graph: str
    tags: tuple[str, ...]
    triples: tuple[ox.Quad, ...]
    """The node's RDF, in ``graph``."""
    node: Node
    """The node as parsed (a dict of its own, equal to ``parse_canonical(content)``)."""
    subject: ox.NamedNode
    """``iri`` as a term (built once: the record's quad uses it too)."""

    @classmethod
    def check(cls, node: object, graph: str, tags: Sequence[str], *, max_bytes: int) -> NodeWrite:
        """Validate a node for ``graph`` and turn it into RDF; nothing is written.

        Raises:
            InvalidNodeError: not a JSON object, no absolute ``@id``, refused keys, or JSON-LD
                the processor rejects (a remote ``@context`` among them).
            ContentTooLargeError: the node's JSON is over ``max_bytes``.
        """
        return _checked_write(node, _checked_graph(graph), check_tags(tags), max_bytes)


def _checked_write(node: object, graph: str, tags: tuple[str, ...], max_bytes: int) -> NodeWrite:
    """Validate a node as ``NodeWrite.check`` does, for a ``graph`` and ``tags`` already checked.

    For a batch: its graph and tags are checked once, its nodes each (see ``prepare``).
    """
    parsed, content, _, _ = parse_node(node, max_depth=DEFAULT_MAX_DEPTH)
    iri = parsed.get("@id")  # a string if present (``parse_node`` checked it)
    if iri is None:
        iri = MINTED_PREFIX + str(uuid.uuid4())
        parsed = {"@id": iri, **parsed}
        content = canonical_json(parsed)
    try:
        subject = ox.NamedNode(iri)
    except ValueError:
        subject = _iri_term(iri, "@id")  # raises, saying why
    # ASCII text (most nodes) is as many bytes as characters: no encoded copy to measure.
    size = len(content) if content.isascii() else len(content.encode("utf-8"))
    if size > max_bytes:
        raise ContentTooLargeError(
            f"node {iri!r} is {size} bytes of JSON, over the blackboard's limit of {max_bytes}"
        )
    if "@graph" in parsed or "@included" in parsed:
        key = "@graph" if "@graph" in parsed else "@included"
        raise InvalidNodeError(f"node {iri!r}: {key} is not allowed in a blackboard node")
    triples = rdf_of(parsed, graph, content, subject)
    return NodeWrite(iri, content, graph, tags, triples, parsed, subject)


def check_iri(value: object, what: str) -> str:
    """Return ``value`` if it is an absolute IRI."""
    _iri_term(value, what)
    return value  # type: ignore[return-value]  # _iri_term checked it is a str


def _iri_term(value: object, what: str) -> ox.NamedNode:
    """Return ``value`` as a term if it is an absolute IRI (``check_iri``)."""
    if not isinstance(value, str):
        raise InvalidNodeError(f"{what} must be an absolute IRI string, got {preview(value)}")
    try:
        return ox.NamedNode(value)
    except ValueError as exc:
        raise InvalidNodeError(f"{what} must be an absolute IRI, got {value!r} ({exc})") from exc


def check_tags(tags: object) -> tuple[str, ...]:
    """Return the tags, de-duplicated in order, if each is a non-empty printable string."""
    if tags == () and type(tags) is tuple:  # most writes: no tags (no abstract-type check)
        return ()
    if isinstance(tags, (str, bytes)) or not isinstance(tags, Iterable):
        raise InvalidInputError(f"tags must be a list of strings, got {preview(tags)}")
    checked = []
    for tag in tags:
        if not is_label(tag):
            raise InvalidInputError(f"each tag must be a non-empty string, got {preview(tag)}")
        checked.append(tag)
    return tuple(dict.fromkeys(checked))


def rdf_of(
    node: Node, graph: str, content: str | None = None, subject: ox.NamedNode | None = None
) -> tuple[ox.Quad, ...]:
    """Return the node's RDF in ``graph``, its blank nodes skolemised deterministically.

    A blank node becomes ``urn:gliding-horse:genid:<digest of the node IRI>:<n>``, numbered in
    the processor's (deterministic) output order, so the same node always gives the same quads.
    ``content``, when given, must be ``canonical_json(node)``: it saves serialising the node
    again (the document read is the same text either way). ``subject``, when given, must be
    ``NamedNode(node["@id"])``: the term is then not built again. A flat node (see
    ``flat_triples``) is translated directly, to the quads the processor would give.
    """
    name = _graph_node(graph)
    if "@context" not in node:
        flat = flat_triples(node, name, subject)
        if flat is not None:
            return tuple(flat)
    return processed_rdf(node, name, content)


def processed_rdf(
    node: Node, name: ox.NamedNode, content: str | None = None
) -> tuple[ox.Quad, ...]:
    """Return the node's RDF in the graph ``name`` as the JSON-LD processor reads it."""
    document = _document(node, content)
    with translated("oxigraph", f"reading node {node['@id']!r} as JSON-LD"):
        parsed = list(ox.parse(document, format=ox.RdfFormat.JSON_LD))
    blank = False
    for quad in parsed:
        if not isinstance(quad.graph_name, ox.DefaultGraph):
            raise InvalidNodeError(f"node {node['@id']!r} puts triples into another graph")
        blank = (
            blank or isinstance(quad.subject, ox.BlankNode) or isinstance(quad.object, ox.BlankNode)
        )
    if not blank:  # the usual node: its triples as they are
        return tuple(ox.Quad(q.subject, q.predicate, q.object, name) for q in parsed)
    labels: dict[str, ox.NamedNode] = {}
    stem = f"{SKOLEM_PREFIX}{hashlib.sha1(node['@id'].encode()).hexdigest()[:20]}:"

    def skolem(term: Any) -> Any:
        if isinstance(term, ox.BlankNode):
            if term.value not in labels:
                labels[term.value] = ox.NamedNode(f"{stem}{len(labels)}")
            return labels[term.value]
        return term

    return tuple(ox.Quad(skolem(q.subject), q.predicate, skolem(q.object), name) for q in parsed)


@functools.lru_cache(maxsize=4096)  # a batch's graph is checked once per node: remembered
def _checked_graph(graph: object) -> str:
    """Return ``graph`` if it is an absolute IRI (``check_iri``), cheaply when it is one."""
    return graph if isinstance(graph, str) and _is_iri(graph) else check_iri(graph, "graph")


@functools.lru_cache(maxsize=4096)  # a few graphs take every write
def _is_iri(text: str) -> bool:
    """Whether ``text`` is an absolute IRI (``check_iri`` says why not)."""
    try:
        check_iri(text, "graph")
    except InvalidNodeError:
        return False
    return True


@functools.lru_cache(maxsize=4096)  # a few graphs take every write: their terms are kept
def _graph_node(graph: str) -> ox.NamedNode:
    return ox.NamedNode(graph)


@functools.lru_cache(maxsize=4096)
def _bookkeeping_node(graph: str) -> ox.NamedNode:
    return ox.NamedNode(bookkeeping_graph(graph))


def _document(node: Node, content: str | None) -> str:
    """The JSON-LD text the processor reads: ``canonical_json(with_context(node))``.

    A node without ``@context`` whose keys all sort after it gets the context spliced in
    front of its own canonical text (the same characters the encoder would write).
    """
    if content is not None and node and "@context" not in node and min(node) > "@context":
        return _CONTEXT_OPENING + content[1:]
    return canonical_json(with_context(node))


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


def _silent() -> None:
    """The publication of a write made with no bus: nothing."""


class _Tombstone:
    """The record of a deleted node: its last generation, kept so a rewrite continues it."""

    __slots__ = ("generation",)

    def __init__(self, generation: int) -> None:
        self.generation = generation

    def quads(self, iri: str) -> list[ox.Quad]:
        record = json.dumps({"generation": self.generation, "deleted": True})
        return [ox.Quad(ox.NamedNode(iri), _RECORD, ox.Literal(record), _META)]


class _Absent(_Tombstone):
    """The cache's knowledge that the store has nothing under an IRI (exact: one writer)."""

    def __init__(self) -> None:
        super().__init__(0)


_Known = BoardNode | _Tombstone
_ABSENT = _Absent()  # immutable: one instance serves every IRI the store has nothing under


@dataclass(frozen=True, slots=True)
class _Entry:
    """A cache entry: what the store holds under an IRI, with the token that vouches for it.

    Never changed in place, only replaced whole: a reader that takes one from the dict without
    the lock gets a value together with the stamp it was vouched at. What this process wrote
    is cached bare (a ``_Known``, stamped ``WRITTEN_HERE``): one object less kept per node
    written, for the garbage collector to go through (``_opened`` reads either).
    """

    known: _Known
    stamp: Hashable | None  # a ``check`` token, ``WRITTEN_HERE``, or ``None`` (unvouched)


_Cached = _Entry | BoardNode | _Tombstone  # a bare ``_Known`` was written here


def _opened(entry: _Cached) -> tuple[_Known, Hashable | None]:
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
            self._upgrade()
            if backend.kind != "server":
                self._recorded = self._recorded_iris()

    def _upgrade(self) -> None:
        """Rewrite bookkeeping of the earlier layout (record, graph, mark) in this one."""
        legacy = self.backend.query(
            f"ASK {{ GRAPH {_META} {{ ?s {_GRAPH} ?g }} }}", dataset=Dataset((), (META_GRAPH,))
        )
        if legacy.boolean:
            self.backend.update(_UPGRADE)

    def _recorded_iris(self) -> set[str] | None:
        """Return the subjects of every record and tombstone in the store (read once, at open),
        or ``None`` when there are more than ``cache_size``: the store is then looked up.

        One text from the store (about 8 us a node on disk, 0.8 s for 100,000): decoding each
        IRI is the cost, the concatenation saves a Python object per row. IRIs hold no space.
        The bound keeps the open time and the set's memory to those of a full cache. (A count
        first, to spare a store over the bound reading IRIs it then drops, was measured: the
        scan is most of the cost, 0.29 s of 0.58 at a bound of 50,000, and a store within the
        bound, the usual one, paid both: 1.6 s instead of 1.0 for 100,000 nodes.)
        """
        result = self.backend.query(f"{_RECORDED}{self.cache_size + 1} }}")
        joined = result.rows[0].get("all") if result.rows else None
        text = "" if joined is None else term_value(joined)
        found = set(text.split(" ")) if text else set()
        return None if len(found) > self.cache_size else found

    # -- writes ------------------------------------------------------------------------------

    def prepare(self, nodes: object, graph: str, tags: Sequence[str] = ()) -> list[NodeWrite]:
        """Validate a batch of nodes for one graph (see ``NodeWrite.check``)."""
        if type(nodes) is not list and (  # a list passes (no abstract-type checks, ~1 us)
            isinstance(nodes, (str, bytes, Mapping)) or not isinstance(nodes, Iterable)
        ):
            raise InvalidInputError(
                f"nodes must be a list of JSON-LD objects, got {preview(nodes)}"
            )
        # The batch's graph and tags once, not once a node (the same values for every node).
        target, checked_tags, limit = _checked_graph(graph), check_tags(tags), self.max_node_bytes
        if type(nodes) is list and len(nodes) == 1:  # most calls: one node (no comprehension)
            requests = [_checked_write(nodes[0], target, checked_tags, limit)]
        else:
            requests = [_checked_write(n, target, checked_tags, limit) for n in nodes]
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
    ) -> list[BoardNode]:
        """Write validated nodes in one transaction; return them as stored, in order.

        ``events``, when given, collects the publication of the write's events instead of
        publishing them (for a caller inside a transaction of its own).
        """
        if not requests:
            return []
        [(written, announce)] = self.write_batches([(requests, source)], dirty=dirty)
        if events is None:
            announce()
        else:
            events.append(announce)
        return written

    def write_batches(
        self, batches: Sequence[tuple[Sequence[NodeWrite], str | None]], *, dirty: bool = True
    ) -> list[tuple[list[BoardNode], Announce]]:
        """Write several callers' batches in one transaction, as if one after the other.

        Each batch is ``(requests, source)``; a node in several batches gets one generation
        per write, in order, and the store keeps the last. Returns, per batch, its nodes as
        stored (in its order) and the publication of its events, for its caller to make after
        the commit.
        """
        with self.writer:
            old = self._current([r.iri for requests, _ in batches for r in requests])
            latest: dict[str, _Known] = dict(old)  # every IRI's newest state so far
            final: dict[str, tuple[NodeWrite, BoardNode]] = {}  # each IRI's last write
            done: list[tuple[list[BoardNode], Announce]] = []
            for requests, source in batches:
                before = {r.iri: latest[r.iri] for r in requests} if self.bus is not None else {}
                written: dict[str, BoardNode] = {}
                for request in requests:
                    iri = request.iri
                    node = BoardNode(
                        iri,
                        request.content,
                        request.graph,
                        latest[iri].generation + 1,  # a tombstone's generation continues
                        request.tags,
                        dirty,
                    )
                    written[iri] = latest[iri] = node
                    final[iri] = (request, node)
                nodes = list(written.values())  # in the batch's order, unless an IRI repeats
                if len(nodes) != len(requests):
                    nodes = [written[r.iri] for r in requests]
                done.append((nodes, self._announcer(list(written.values()), before, source)))
            self._store_writes(old, list(final.values()))
        return done

    def _store_writes(
        self, old: Mapping[str, _Known], final: Sequence[tuple[NodeWrite, BoardNode]]
    ) -> None:
        """Replace the old nodes with the final ones in one update (the writer is held)."""
        recorded = self._recorded
        if recorded is not None:  # before the write: a superset if it fails
            recorded.update([request.iri for request, _ in final])
            if len(recorded) > self.cache_size:
                self._recorded = None  # too many to keep: the store is looked up
        quads: list[ox.Quad] = []
        for request, node in final:
            quads += request.triples
            quads.append(node._record(request.subject))  # the request's term: not built again
        stored = {k: v for k, v in old.items() if not isinstance(v, _Absent)}
        if self.before_store is not None:
            self.before_store()
        if stored:
            self.backend.update(f"{_removal(stored)} ;\nINSERT DATA {{ {quads_text(quads)} }}")
        else:  # only new nodes: nothing to take out, a plain (atomic) insert
            self.backend.extend(quads)
        self._remember_written([node for _, node in final])

    def _announcer(
        self, nodes: list[BoardNode], old: Mapping[str, _Known], source: str | None
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
    ) -> list[BoardNode]:
        """Delete nodes (their generations stay as tombstones); return those that existed.

        ``events`` collects the publications as in ``write``.
        """
        checked = [check_iri(iri, "IRI") for iri in iris]
        with self.writer:
            old = {k: v for k, v in self._current(checked).items() if isinstance(v, BoardNode)}
            if old:
                tombstones = {iri: _Tombstone(node.generation) for iri, node in old.items()}
                quads = [q for iri, t in tombstones.items() for q in t.quads(iri)]
                self.backend.update(f"{_removal(old)} ;\nINSERT DATA {{ {quads_text(quads)} }}")
                with self._cache_lock:
                    self._cache.update(tombstones)  # bare: written here
                    self._writes += 1
        gone = list(old.values())

        def announce() -> None:
            for node in gone:
                self._publish(EventType.NODE_DELETED, node, source)

        if events is None:
            announce()
        else:
            events.append(announce)
        return gone

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
            self.backend.update(f"{_marks_removal(clean)} ;\nINSERT DATA {{ {quads_text(quads)} }}")
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

    def states(self, iris: Sequence[str]) -> dict[str, tuple[BoardNode | None, int]]:
        """Return each IRI's node (``None``: absent or deleted) and generation (0: never)."""
        return {
            iri: (known if isinstance(known, BoardNode) else None, known.generation)
            for iri, known in self._current(iris).items()
        }

    def iris_in(self, graphs: Sequence[str]) -> list[str]:
        """Return the IRIs of the nodes kept in ``graphs``, sorted."""
        found: set[str] = set()
        for graph in graphs:
            where = ox.NamedNode(bookkeeping_graph(graph))
            result = self.backend.query(
                f"SELECT ?s WHERE {{ GRAPH {where} {{ ?s ?state ?record }} }}",
                dataset=Dataset((), (where.value,)),
            )
            found.update(term_value(row["s"]) for row in result.rows)
        return sorted(found)

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
        dataset = None if graphs is None else Dataset((), tuple(map(bookkeeping_graph, graphs)))
        result = self.backend.query(
            f"SELECT DISTINCT ?s WHERE {{ GRAPH ?g {{ ?s {_DIRTY} ?record }} }}", dataset=dataset
        )
        iris = sorted(term_value(row["s"]) for row in result.rows)
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

    def cached(self, iri: str) -> bool:
        """Return whether ``iri`` is in the cache."""
        with self._cache_lock:
            return iri in self._cache

    # -- internals ---------------------------------------------------------------------------

    def _current(self, iris: Sequence[str], *, fresh: bool = False) -> dict[str, _Known]:
        """Return what the store holds under ``iris`` (the cache first, unless ``fresh``)."""
        found: dict[str, _Known] = {}
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
                    found[iri] = _ABSENT
            missing = probed
        if missing:
            loaded = self._load(list(dict.fromkeys(missing)))
            for iri in missing:
                loaded.setdefault(iri, _Absent())
            found.update(loaded)
            self._remember(loaded, stamp=token, since=writes)
        return found

    def _vouch(
        self, check: CacheCheck, entries: Mapping[str, _Cached], found: dict[str, _Known]
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

    def _load(self, iris: Sequence[str]) -> dict[str, _Known]:
        """Read the bookkeeping of ``iris`` from the store."""
        found: dict[str, _Known] = {}
        for quad in self.backend.quads_about(iris, _BOOKKEEPING):
            known = _from_quad(quad)
            iri = term_value(quad.subject)
            if known is not None and not isinstance(found.get(iri), BoardNode):
                found[iri] = known  # a live record wins over a tombstone (none is left)
        return found

    def _remember(
        self, by_iri: Mapping[str, _Known], *, stamp: Hashable | None, since: int
    ) -> None:
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
        self, nodes: list[BoardNode], old: Mapping[str, _Known], source: str | None
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


def _from_quad(quad: ox.Quad) -> _Known | None:
    """The node or tombstone a bookkeeping quad records (``None`` for any other quad)."""
    where = term_value(quad.graph_name)  # type: ignore[arg-type]
    if quad.predicate == _RECORD:
        if where != META_GRAPH:
            return None
        return _Tombstone(int(json.loads(term_value(quad.object))["generation"]))
    graph = bookkept_graph(where)
    if graph is None or not isinstance(quad.object, ox.Literal):
        return None  # a node's own triple that happens to use a bookkeeping predicate
    record = json.loads(quad.object.value)
    return BoardNode(
        term_value(quad.subject),
        record["content"],
        graph,
        int(record["generation"]),
        tuple(record["tags"]),
        dirty=quad.predicate == _DIRTY,
    )


def _marks_removal(nodes: Sequence[BoardNode]) -> str:
    """The update operations that take the dirty records of ``nodes`` out."""
    by_graph: dict[str, list[str]] = {}
    for node in nodes:
        by_graph.setdefault(bookkeeping_graph(node.graph), []).append(str(ox.NamedNode(node.iri)))
    # VALUES inside the GRAPH block: an endpoint then starts from the subjects.
    return " ;\n".join(
        f"DELETE {{ GRAPH {ox.NamedNode(where)} {{ ?s {_DIRTY} ?record }} }} WHERE {{ GRAPH"
        f" {ox.NamedNode(where)} {{ VALUES ?s {{ {' '.join(subjects)} }} ?s {_DIRTY} ?record }} }}"
        for where, subjects in by_graph.items()
    )


def _removal(old: Mapping[str, _Known]) -> str:
    """The update operations that take the old nodes' triples and bookkeeping out.

    Each node's triples are removed by subject in its graph (whatever drifted in is removed
    too), its skolemised blank nodes by their exact quads, its record (or tombstone) by subject.
    """
    parts = []
    skolems: list[ox.Quad] = []
    for iri, known in old.items():
        subject = ox.NamedNode(iri)
        if isinstance(known, BoardNode):
            parts.append(
                f"DELETE WHERE {{ GRAPH {ox.NamedNode(known.graph)} {{ {subject} ?p ?o }} }}"
            )
            skolems += [
                q
                for q in rdf_of(known.node, known.graph)
                if term_value(q.subject).startswith(SKOLEM_PREFIX)
            ]
            where = ox.NamedNode(bookkeeping_graph(known.graph))
            parts.append(f"DELETE WHERE {{ GRAPH {where} {{ {subject} ?state ?record }} }}")
        else:
            parts.append(f"DELETE WHERE {{ GRAPH {_META} {{ {subject} ?p ?o }} }}")
    if skolems:
        parts.append(f"DELETE DATA {{ {quads_text(skolems)} }}")
    return " ;\n".join(parts)


# Every IRI the store holds a record or tombstone of (a superset: a node's own triple with a
# bookkeeping predicate adds its subject too, which then costs a probe).
# DISTINCT: such a subject is counted once, so the bound counts IRIs, not quads (without it,
# a subject met twice within the bound could leave one beyond it out of a set taken whole).
_SUBJECTS = (
    "SELECT DISTINCT ?s WHERE {"
    f" GRAPH ?g {{ ?s ?state ?record }} VALUES ?state {{ {_RECORD} {_DIRTY} {_CLEAN} }}"
    " FILTER(isIRI(?s)) } LIMIT "
)
_RECORDED = 'SELECT (GROUP_CONCAT(STR(?s); separator=" ") AS ?all) WHERE { ' + _SUBJECTS

# The earlier layout (record, ``ghm:graph`` and dirty mark in META_GRAPH) in this one, at once.
# ENCODE_FOR_URI escapes what ``quote(..., safe="")`` escapes: the same bookkeeping graph IRI.
_UPGRADE = f"""
DELETE {{ GRAPH {_META} {{ ?s {_RECORD} ?record . ?s {_GRAPH} ?graph . ?s {_DIRTY} ?mark }} }}
INSERT {{ GRAPH ?where {{ ?s ?state ?record }} }}
WHERE {{
  GRAPH {_META} {{ ?s {_RECORD} ?record ; {_GRAPH} ?graph OPTIONAL {{ ?s {_DIRTY} ?mark }} }}
  BIND(IRI(CONCAT("{BOOKKEEPING_PREFIX}", ENCODE_FOR_URI(STR(?graph)))) AS ?where)
  BIND(IF(BOUND(?mark), {_DIRTY}, {_CLEAN}) AS ?state)
}}"""
