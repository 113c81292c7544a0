"""L2: blackboard nodes: validation, JSON-LD to RDF, generations, the cache and the single writer.

A node is a JSON-LD object with an absolute ``@id``, kept in exactly one named graph. Writing it
puts its RDF (read by a JSON-LD processor under the project's context) into that graph, and
its bookkeeping (its JSON text, generation, graph, tags, dirty mark) into ``META_GRAPH``.

Invariants:
- One writer per store: every write, delete and clean-mark takes ``NodeStore``'s lock, reads
  the old state and writes the new one as one SPARQL update (pyoxigraph 0.5.13 on disk loses
  concurrent read-modify-write updates; one lock made them exact, so the lock is kept for the
  in-memory store and the endpoint too).
- A call is atomic: a batch is validated whole (JSON, ``@id``, size, count) before anything is
  written, then goes to the store as one update, so it is all there or none of it.
- Generations are per node, start at 1 and increase by one on every write; a deletion leaves a
  tombstone that keeps the generation, so a node written again continues from it.
- Blank nodes are skolemised to IRIs derived from the node's IRI and their position, so a
  rewrite removes exactly the old node's triples and nothing lingers.
- The cache holds what the store holds (written after the update succeeds); a miss reads the
  bookkeeping from the store. Events are published after the commit, outside the lock, and
  carry IRI, graph and generation (the seam of the MESI directory).
- A node describes itself: ``@graph`` and ``@included`` are refused; an embedded object with its
  own ``@id`` adds triples about that IRI, which a rewrite of either node may remove.
"""

from __future__ import annotations

import hashlib
import json
import threading
import uuid
from collections import OrderedDict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pyoxigraph as ox

from gliding_core.blackboard.graph import Dataset, GraphBackend, QueryResult, Term, term_value
from gliding_core.blackboard.vocabulary import (
    META_GRAPH,
    SKOLEM_PREFIX,
    meta,
    with_context,
)
from gliding_core.boundary import translated
from gliding_core.bus import EventBus, EventType
from gliding_core.errors import ContentTooLargeError, InvalidInputError, InvalidNodeError
from gliding_core.jsonld import Node, canonical_json, is_label, parse_canonical, parse_node, preview

MINTED_PREFIX = "urn:uuid:"
_XSD_INTEGER = ox.NamedNode("http://www.w3.org/2001/XMLSchema#integer")
_TRUE = str(ox.Literal("true", datatype=ox.NamedNode("http://www.w3.org/2001/XMLSchema#boolean")))
_META = str(ox.NamedNode(META_GRAPH))
_P_JSON, _P_GENERATION, _P_GRAPH, _P_TAGS, _P_DIRTY = (
    str(ox.NamedNode(meta(name))) for name in ("json", "generation", "graph", "tags", "dirty")
)
_REFUSED_KEYS = ("@graph", "@included")


@dataclass(frozen=True, slots=True)
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
    tags: tuple[str, ...] = ()
    dirty: bool = True

    @property
    def node(self) -> Node:
        """The JSON-LD node (a fresh dict on every call)."""
        return parse_canonical(self.content)


@dataclass(frozen=True, slots=True)
class NodeWrite:
    """A validated request to write one node into one graph."""

    iri: str
    content: str
    graph: str
    tags: tuple[str, ...]
    quads: str  # the node's triples in that graph, as SPARQL data

    @classmethod
    def check(cls, node: object, graph: str, tags: Sequence[str], *, max_bytes: int) -> NodeWrite:
        """Validate a node for ``graph`` and turn it into RDF; nothing is written.

        Raises:
            InvalidNodeError: not a JSON object, no absolute ``@id``, refused keys, or JSON-LD
                the processor rejects (a remote ``@context`` among them).
            ContentTooLargeError: the node's JSON is over ``max_bytes``.
        """
        parsed, content, _ = parse_node(node)
        if "@id" not in parsed:
            parsed = {"@id": MINTED_PREFIX + str(uuid.uuid4()), **parsed}
            content = canonical_json(parsed)
        iri = check_iri(parsed["@id"], "@id")
        size = len(content.encode("utf-8"))
        if size > max_bytes:
            raise ContentTooLargeError(
                f"node {iri!r} is {size} bytes of JSON, over the blackboard's limit of {max_bytes}"
            )
        for key in _REFUSED_KEYS:
            if key in parsed:
                raise InvalidNodeError(f"node {iri!r}: {key} is not allowed in a blackboard node")
        return cls(iri, content, check_iri(graph, "graph"), check_tags(tags), _quads(parsed))


def check_iri(value: object, what: str) -> str:
    """Return ``value`` if it is an absolute IRI."""
    if not isinstance(value, str):
        raise InvalidNodeError(f"{what} must be an absolute IRI string, got {preview(value)}")
    try:
        ox.NamedNode(value)
    except ValueError as exc:
        raise InvalidNodeError(f"{what} must be an absolute IRI, got {value!r} ({exc})") from exc
    return value


def check_tags(tags: object) -> tuple[str, ...]:
    """Return the tags, de-duplicated in order, if each is a non-empty printable string."""
    if isinstance(tags, (str, bytes)) or not isinstance(tags, Iterable):
        raise InvalidInputError(f"tags must be a list of strings, got {preview(tags)}")
    checked = []
    for tag in tags:
        if not is_label(tag):
            raise InvalidInputError(f"each tag must be a non-empty string, got {preview(tag)}")
        checked.append(tag)
    return tuple(dict.fromkeys(checked))


def _quads(node: Node) -> str:
    """Return the node's triples as N-Triples lines, blank nodes skolemised deterministically."""
    document = canonical_json(with_context(node))
    with translated("oxigraph", f"reading node {node['@id']!r} as JSON-LD"):
        quads = list(ox.parse(document, format=ox.RdfFormat.JSON_LD))
    labels: dict[str, str] = {}
    stem = f"{SKOLEM_PREFIX}{hashlib.sha1(node['@id'].encode()).hexdigest()[:20]}:"
    lines = []
    for quad in quads:
        if not isinstance(quad.graph_name, ox.DefaultGraph):
            raise InvalidNodeError(f"node {node['@id']!r} puts triples into another graph")
        terms = [_skolem(t, labels, stem) for t in (quad.subject, quad.predicate, quad.object)]
        lines.append(" ".join(terms) + " .")
    return "\n".join(lines)


def _skolem(term: Any, labels: dict[str, str], stem: str) -> str:
    if isinstance(term, ox.BlankNode):
        if term.value not in labels:
            labels[term.value] = str(ox.NamedNode(f"{stem}{len(labels)}"))
        return labels[term.value]
    return str(term)


def _literal(text: str) -> str:
    return str(ox.Literal(text))


def _integer(value: int) -> str:
    return str(ox.Literal(str(value), datatype=_XSD_INTEGER))


def _values(iris: Iterable[str]) -> str:
    return " ".join(str(ox.NamedNode(iri)) for iri in iris)


class _Tombstone:
    """The cache's record of a deleted node: its last generation."""

    __slots__ = ("generation",)

    def __init__(self, generation: int) -> None:
        self.generation = generation


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
        self._cache: OrderedDict[str, BoardNode | _Tombstone] = OrderedDict()
        self._cache_lock = threading.Lock()

    # -- writes ------------------------------------------------------------------------------

    def prepare(self, nodes: object, graph: str, tags: Sequence[str] = ()) -> list[NodeWrite]:
        """Validate a batch of nodes for one graph (see ``NodeWrite.check``)."""
        if isinstance(nodes, (str, bytes, Mapping)) or not isinstance(nodes, Iterable):
            raise InvalidInputError(
                f"nodes must be a list of JSON-LD objects, got {preview(nodes)}"
            )
        requests = [NodeWrite.check(n, graph, tags, max_bytes=self.max_node_bytes) for n in nodes]
        if len(requests) > self.max_batch:
            raise ContentTooLargeError(
                f"a batch of {len(requests)} nodes is over the limit of {self.max_batch} per call"
            )
        return requests

    def write(
        self, requests: Sequence[NodeWrite], *, source: str | None = None, dirty: bool = True
    ) -> list[BoardNode]:
        """Write validated nodes as one update; return them as stored, in order."""
        if not requests:
            return []
        with self.writer:
            old = self._current([r.iri for r in requests])
            written: dict[str, BoardNode] = {}
            for request in requests:
                previous = written.get(request.iri) or old.get(request.iri)
                generation = (previous.generation if previous is not None else 0) + 1
                written[request.iri] = BoardNode(
                    request.iri, request.content, request.graph, generation, request.tags, dirty
                )
            final = {r.iri: r for r in requests}
            self.backend.update(_write_update(final, written, old))
            self._remember(written.values())
        results = [written[r.iri] for r in requests]
        self._publish_writes(list(written.values()), old, source)
        return results

    def delete(self, iris: Sequence[str], *, source: str | None = None) -> list[BoardNode]:
        """Delete nodes (their generations stay as tombstones); return those that existed."""
        checked = [check_iri(iri, "IRI") for iri in iris]
        with self.writer:
            old = {k: v for k, v in self._current(checked).items() if isinstance(v, BoardNode)}
            if old:
                self.backend.update(_delete_update(old))
                with self._cache_lock:
                    for iri, node in old.items():
                        self._cache[iri] = _Tombstone(node.generation)
        for node in old.values():
            self._publish(EventType.NODE_DELETED, node, source)
        return list(old.values())

    def mark_clean(self, nodes: Sequence[BoardNode]) -> None:
        """Clear the dirty mark of nodes whose generation has not moved since they were read."""
        if not nodes:
            return
        rows = " ".join(f"({ox.NamedNode(n.iri)} {_integer(n.generation)})" for n in nodes)
        update = (
            f"DELETE {{ GRAPH {_META} {{ ?s {_P_DIRTY} ?d }} }}"
            f" WHERE {{ VALUES (?s ?g) {{ {rows} }}"
            f" GRAPH {_META} {{ ?s {_P_GENERATION} ?g ; {_P_DIRTY} ?d }} }}"
        )
        with self.writer:
            self.backend.update(update)
            with self._cache_lock:
                for node in nodes:
                    cached = self._cache.get(node.iri)
                    if isinstance(cached, BoardNode) and cached.generation == node.generation:
                        self._cache[node.iri] = BoardNode(
                            cached.iri,
                            cached.content,
                            cached.graph,
                            cached.generation,
                            cached.tags,
                            dirty=False,
                        )

    # -- reads -------------------------------------------------------------------------------

    def get(self, iri: str) -> BoardNode | None:
        """Return the node with ``iri`` (the cache first), or ``None``."""
        with self._cache_lock:
            cached = self._cache.get(iri)
            if cached is not None:
                self._cache.move_to_end(iri)
                return cached if isinstance(cached, BoardNode) else None
        found = self.get_many([check_iri(iri, "IRI")])
        return found.get(iri)

    def get_many(self, iris: Sequence[str]) -> dict[str, BoardNode]:
        """Return the existing nodes among ``iris``, by IRI."""
        return {k: v for k, v in self._current(iris).items() if isinstance(v, BoardNode)}

    def iris_in(self, graphs: Sequence[str]) -> list[str]:
        """Return the IRIs of the nodes kept in ``graphs``, sorted."""
        if not graphs:
            return []
        result = self.backend.query(
            f"SELECT ?s WHERE {{ VALUES ?g {{ {_values(graphs)} }} GRAPH {_META}"
            f" {{ ?s {_P_GRAPH} ?g ; {_P_JSON} ?j }} }}",
            dataset=Dataset((), (META_GRAPH,)),
        )
        return sorted(term_value(row["s"]) for row in result.rows)

    def iris_of_type(self, type_iri: str, graphs: Sequence[str]) -> list[str]:
        """Return the IRIs of nodes typed ``type_iri`` in ``graphs``, sorted."""
        if not graphs:
            return []
        result = self.backend.query(
            "SELECT DISTINCT ?s ?type WHERE { GRAPH ?g { ?s a ?type } }",
            dataset=Dataset((), tuple(graphs)),
            bindings={"type": ox.NamedNode(check_iri(type_iri, "type"))},
        )
        return sorted(term_value(row["s"]) for row in result.rows)

    def dirty(self, graphs: Sequence[str] | None = None) -> list[BoardNode]:
        """Return the nodes changed since their last flush (in ``graphs`` when given)."""
        scope = "" if graphs is None else f"VALUES ?g {{ {_values(graphs)} }}"
        if graphs is not None and not graphs:
            return []
        result = self.backend.query(
            f"SELECT ?s WHERE {{ {scope} GRAPH {_META} {{ ?s {_P_DIRTY} ?d ; {_P_GRAPH} ?g }} }}",
            dataset=Dataset((), (META_GRAPH,)),
        )
        iris = sorted(term_value(row["s"]) for row in result.rows)
        return [n for n in self._load(iris).values() if isinstance(n, BoardNode) and n.dirty]

    def query(self, text: str, **options: Any) -> QueryResult:
        """Run a query on the backend (see ``GraphBackend.query``)."""
        return self.backend.query(text, **options)

    def forget_cache(self) -> None:
        """Empty the cache (the next reads go to the store)."""
        with self._cache_lock:
            self._cache.clear()

    def cached(self, iri: str) -> bool:
        """Return whether ``iri`` is in the cache."""
        with self._cache_lock:
            return iri in self._cache

    # -- internals ---------------------------------------------------------------------------

    def _current(self, iris: Sequence[str]) -> dict[str, BoardNode | _Tombstone]:
        found: dict[str, BoardNode | _Tombstone] = {}
        missing = []
        with self._cache_lock:
            for iri in iris:
                cached = self._cache.get(iri)
                if cached is None:
                    missing.append(iri)
                else:
                    self._cache.move_to_end(iri)
                    found[iri] = cached
        if missing:
            loaded = self._load(list(dict.fromkeys(missing)))
            found.update(loaded)
            self._remember(loaded.values())
        return found

    def _load(self, iris: Sequence[str]) -> dict[str, BoardNode | _Tombstone]:
        """Read the bookkeeping of ``iris`` from the store."""
        if not iris:
            return {}
        result = self.backend.query(
            "SELECT ?s ?json ?generation ?graph ?tags ?dirty"
            f" WHERE {{ VALUES ?s {{ {_values(iris)} }}"
            f" GRAPH {_META} {{ ?s {_P_GENERATION} ?generation ; {_P_GRAPH} ?graph ."
            f" OPTIONAL {{ ?s {_P_JSON} ?json }} OPTIONAL {{ ?s {_P_TAGS} ?tags }}"
            f" OPTIONAL {{ ?s {_P_DIRTY} ?dirty }} }} }}",
            dataset=Dataset((), (META_GRAPH,)),
        )
        found: dict[str, BoardNode | _Tombstone] = {}
        for row in result.rows:
            found[term_value(row["s"])] = _from_row(row)
        return found

    def _remember(self, nodes: Iterable[BoardNode | _Tombstone]) -> None:
        with self._cache_lock:
            for node in nodes:
                if isinstance(node, BoardNode):
                    self._cache[node.iri] = node
                    self._cache.move_to_end(node.iri)
            while len(self._cache) > self.cache_size:
                self._cache.popitem(last=False)

    def _publish_writes(
        self, nodes: list[BoardNode], old: Mapping[str, Any], source: str | None
    ) -> None:
        for node in nodes:
            existed = isinstance(old.get(node.iri), BoardNode)
            kind = EventType.NODE_UPDATED if existed else EventType.NODE_CREATED
            self._publish(kind, node, source)

    def _publish(self, kind: EventType, node: BoardNode, source: str | None) -> None:
        if self.bus is not None:
            self.bus.publish(
                kind,
                {"iri": node.iri, "graph": node.graph, "generation": node.generation},
                source=source,
            )


def _from_row(row: Mapping[str, Term]) -> BoardNode | _Tombstone:
    generation = int(term_value(row["generation"]))
    if "json" not in row:
        return _Tombstone(generation)
    tags = tuple(json.loads(term_value(row["tags"]))) if "tags" in row else ()
    return BoardNode(
        term_value(row["s"]),
        term_value(row["json"]),
        term_value(row["graph"]),
        generation,
        tags,
        dirty="dirty" in row,
    )


def _write_update(
    requests: Mapping[str, NodeWrite],
    written: Mapping[str, BoardNode],
    old: Mapping[str, BoardNode | _Tombstone],
) -> str:
    """One update: the old triples and bookkeeping out, the new ones in."""
    parts = []
    replaced = {iri: node for iri, node in old.items() if isinstance(node, BoardNode)}
    if replaced:
        parts.append(_delete_update(replaced, keep_generation=False))
    tombstones = [iri for iri in old if iri not in replaced]
    if tombstones:  # their bookkeeping goes; the generation comes back, one higher, below
        parts.append(_delete_meta(tombstones))
    data = []
    for iri, request in requests.items():
        node = written[iri]
        if request.quads:
            data.append(f"GRAPH {ox.NamedNode(request.graph)} {{ {request.quads} }}")
        bookkeeping = [
            f"{_P_JSON} {_literal(node.content)}",
            f"{_P_GENERATION} {_integer(node.generation)}",
            f"{_P_GRAPH} {ox.NamedNode(node.graph)}",
            f"{_P_TAGS} {_literal(json.dumps(list(node.tags)))}",
        ]
        if node.dirty:
            bookkeeping.append(f"{_P_DIRTY} {_TRUE}")
        data.append(f"GRAPH {_META} {{ {ox.NamedNode(iri)} {' ; '.join(bookkeeping)} . }}")
    parts.append(f"INSERT DATA {{ {' '.join(data)} }}")
    return " ;\n".join(parts)


def _delete_meta(nodes: Iterable[str]) -> str:
    return (
        f"DELETE {{ GRAPH {_META} {{ ?s ?p ?o }} }} WHERE {{ VALUES ?s {{ {_values(nodes)} }}"
        f" GRAPH {_META} {{ ?s ?p ?o }} }}"
    )


def _delete_update(nodes: Mapping[str, BoardNode], *, keep_generation: bool = True) -> str:
    """Remove the nodes' triples (skolemised ones included) and their bookkeeping."""
    rows = " ".join(f"({ox.NamedNode(n.iri)} {ox.NamedNode(n.graph)})" for n in nodes.values())
    parts = [
        f"DELETE {{ GRAPH ?g {{ ?s ?p ?o }} }} WHERE {{ VALUES (?s ?g) {{ {rows} }}"
        f" GRAPH ?g {{ ?s ?p ?o }} }}"
    ]
    skolems = []
    for node in nodes.values():
        lines = [
            line for line in _quads(node.node).splitlines() if line.startswith("<" + SKOLEM_PREFIX)
        ]
        if lines:
            skolems.append(f"GRAPH {ox.NamedNode(node.graph)} {{ {' '.join(lines)} }}")
    if skolems:
        parts.append(f"DELETE DATA {{ {' '.join(skolems)} }}")
    parts.append(_delete_meta(nodes))
    if keep_generation:
        tombstones = " ".join(
            f"{ox.NamedNode(n.iri)} {_P_GENERATION} {_integer(n.generation)} ;"
            f" {_P_GRAPH} {ox.NamedNode(n.graph)} ."
            for n in nodes.values()
        )
        parts.append(f"INSERT DATA {{ GRAPH {_META} {{ {tombstones} }} }}")
    return " ;\n".join(parts)
