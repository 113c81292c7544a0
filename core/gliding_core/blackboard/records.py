"""L2: blackboard node records: what the store holds under an IRI, and how it is laid out.

A node is a JSON-LD object with an absolute ``@id``, kept in exactly one named graph. Writing it
puts its RDF (``rdf_of``) into that graph, and its bookkeeping, one quad, into that graph's
bookkeeping graph (``bookkeeping_graph``): ``<iri> ghm:dirty "record"`` while L0 has not seen its
last version, ``<iri> ghm:clean "record"`` after, the record being its JSON text, generation,
tags and the ids of its last writes (``writeids``). The bookkeeping graph names the node's graph,
the predicate its state: one quad instead of three (record, graph, dirty mark), each quad costing
20-30 us on disk. A deleted node leaves a tombstone ``<iri> ghm:record "{generation, deleted,
writes}"`` in ``META_GRAPH``. A store written in the
earlier layout (record, ``ghm:graph`` and dirty mark in ``META_GRAPH``) is rewritten in this one
by one update when a ``NodeStore`` opens it (``upgrade_layout``).

Invariants:
- A record holds the whole node: ``BoardNode`` is read back from its one bookkeeping quad
  (``read_records``), its content the exact text written (escaped once, as a JSON string).
- Only a literal under a state predicate in a bookkeeping graph, or a tombstone in
  ``META_GRAPH``, is a record: a node's own triple that uses a bookkeeping predicate is never
  read as one. Met with a tombstone, a live record wins (a write leaves none beside it).
- The ids of a node's last writes travel in its record, so they are stored in the very update
  that writes the node (a record of the earlier layout, without them, has none). They are made
  of letters, digits, ``.``, ``_`` and ``-`` only (``writeids`` checks every id given), so the
  record lists them unescaped; a list read back with any other character is dropped whole.
- ``removal`` takes out all that a node's write put in: its triples by subject in its graph
  (whatever drifted in too), its skolemised blank nodes by their exact quads, its record or
  tombstone by subject.
"""

from __future__ import annotations

import functools
import json
import json.encoder
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import pyoxigraph as ox

from gliding_core.blackboard.graph import Dataset, GraphBackend, quads_text, term_value
from gliding_core.blackboard.rdf import graph_node, may_skolemise, rdf_of
from gliding_core.blackboard.vocabulary import (
    BOOKKEEPING_PREFIX,
    META_GRAPH,
    SKOLEM_PREFIX,
    bookkeeping_graph,
    bookkept_graph,
    meta,
)
from gliding_core.jsonld import Node, parse_canonical

_META = ox.NamedNode(META_GRAPH)
_RECORD, _GRAPH, _DIRTY, _CLEAN = (
    ox.NamedNode(meta(name)) for name in ("record", "graph", "dirty", "clean")
)
_BOOKKEEPING = (_RECORD.value, _DIRTY.value, _CLEAN.value)  # the predicates of a look-up
_ENCODE = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False).encode
_QUOTED = json.encoder.encode_basestring  # ``_ENCODE`` of a str, without its Python wrapper
_ID_CHARACTERS = re.compile(r"[A-Za-z0-9._-]*")  # of write ids (``writeids``), one after another
_set = object.__setattr__  # how the frozen class below sets its fields


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
        writes: the ids of the node's last writes and deletes, newest first (``writeids``;
            not compared: the same node read back is equal whatever history it carries).
    """

    iri: str
    content: str
    graph: str
    generation: int
    tags: tuple[str, ...]
    dirty: bool
    writes: tuple[str, ...] = field(compare=False, repr=False)

    def __init__(
        self,
        iri: str,
        content: str,
        graph: str,
        generation: int,
        tags: tuple[str, ...] = (),
        dirty: bool = True,
        writes: tuple[str, ...] = (),
    ) -> None:
        # Written out: the generated ``__init__`` of a frozen class looks ``object.__setattr__``
        # up for every field (twice the time, and one is built for every write).
        _set(self, "iri", iri)
        _set(self, "content", content)
        _set(self, "graph", graph)
        _set(self, "generation", generation)
        _set(self, "tags", tags)
        _set(self, "dirty", dirty)
        _set(self, "writes", writes)

    @property
    def node(self) -> Node:
        """The JSON-LD node (a fresh dict on every call)."""
        return parse_canonical(self.content)

    @property
    def write_id(self) -> str | None:
        """The id of the write that made this generation (``None``: not recorded)."""
        return self.writes[0] if self.writes else None

    def quads(self) -> list[ox.Quad]:
        """Return the node's bookkeeping quad (its record, in its graph's bookkeeping graph)."""
        return [bookkeeping_quad(self, ox.NamedNode(self.iri))]


def bookkeeping_quad(node: BoardNode, subject: ox.NamedNode) -> ox.Quad:
    """Return the node's bookkeeping quad, for ``subject`` (its IRI as a term, built once)."""
    record = (  # the content is JSON text already: only escaped once, as a string
        f'{{"content":{_QUOTED(node.content)},"generation":{node.generation},'
        f'"tags":{_ENCODE(list(node.tags)) if node.tags else "[]"},'
        f'"writes":{_ids_text(node.writes)}}}'
    )
    where = _bookkeeping_node(node.graph)
    return ox.Quad(subject, _DIRTY if node.dirty else _CLEAN, ox.Literal(record), where)


@functools.lru_cache(maxsize=4096)  # a few graphs take every write: their terms are kept
def _bookkeeping_node(graph: str) -> ox.NamedNode:
    return ox.NamedNode(bookkeeping_graph(graph))


class Tombstone:
    """The record of a deleted node: its last generation, kept so a rewrite continues it, and
    the ids of its last writes and deletes (the delete's first), newest first."""

    __slots__ = ("generation", "writes")

    def __init__(self, generation: int, writes: tuple[str, ...] = ()) -> None:
        self.generation = generation
        self.writes = writes

    def quads(self, iri: str) -> list[ox.Quad]:
        """Return the tombstone's quad, for the node ``iri``."""
        record = json.dumps(
            {"generation": self.generation, "deleted": True, "writes": list(self.writes)}
        )
        return [ox.Quad(ox.NamedNode(iri), _RECORD, ox.Literal(record), _META)]


class Absent(Tombstone):
    """The cache's knowledge that the store has nothing under an IRI (exact: one writer)."""

    def __init__(self) -> None:
        super().__init__(0)


Known = BoardNode | Tombstone
"""What the store holds under an IRI: a node, a tombstone, or nothing (``Absent``)."""
ABSENT = Absent()  # immutable: one instance serves every IRI the store has nothing under


def read_records(backend: GraphBackend, iris: Sequence[str]) -> dict[str, Known]:
    """Read the bookkeeping of ``iris`` from the store (an IRI without any is left out)."""
    found: dict[str, Known] = {}
    for quad in backend.quads_about(iris, _BOOKKEEPING):
        known = _from_quad(quad)
        iri = term_value(quad.subject)
        if known is not None and not isinstance(found.get(iri), BoardNode):
            found[iri] = known  # a live record wins over a tombstone (none is left)
    return found


def _from_quad(quad: ox.Quad) -> Known | None:
    """The node or tombstone a bookkeeping quad records (``None`` for any other quad)."""
    where = term_value(quad.graph_name)  # type: ignore[arg-type]
    if quad.predicate == _RECORD:
        if where != META_GRAPH:
            return None
        stone = json.loads(term_value(quad.object))
        return Tombstone(int(stone["generation"]), _writes(stone))
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
        quad.predicate == _DIRTY,
        _writes(record),
    )


def _writes(record: Mapping[str, object]) -> tuple[str, ...]:
    """The write ids a record lists (none in a record of the earlier layout, nor where one is
    not made of the characters of an id: ``_ids_text`` writes them unescaped)."""
    found = record.get("writes")
    if type(found) is not list or not found:
        return ()
    try:
        joined = "".join(found)
    except TypeError:  # not all strings
        return ()
    return tuple(found) if _ID_CHARACTERS.fullmatch(joined) is not None else ()


def _ids_text(writes: tuple[str, ...]) -> str:
    """Return write ids as a JSON list (they need no escaping: ``writeids``, ``_writes``).

    Built by hand: the encoder took 4-6 us for 8 ids, the join 0.4.
    """
    return '["' + '","'.join(writes) + '"]' if writes else "[]"


def marks_removal(nodes: Sequence[BoardNode]) -> str:
    """Return the update operations that take the dirty records of ``nodes`` out."""
    by_graph: dict[str, list[str]] = {}
    for node in nodes:
        by_graph.setdefault(bookkeeping_graph(node.graph), []).append(str(ox.NamedNode(node.iri)))
    # VALUES inside the GRAPH block: an endpoint then starts from the subjects.
    return " ;\n".join(
        f"DELETE {{ GRAPH {ox.NamedNode(where)} {{ ?s {_DIRTY} ?record }} }} WHERE {{ GRAPH"
        f" {ox.NamedNode(where)} {{ VALUES ?s {{ {' '.join(subjects)} }} ?s {_DIRTY} ?record }} }}"
        for where, subjects in by_graph.items()
    )


def removal(old: Mapping[str, Known]) -> str:
    """Return the update operations that take the old nodes' triples and bookkeeping out.

    Each node's triples are removed by subject in its graph (whatever drifted in is removed
    too), its skolemised blank nodes by their exact quads, its record (or tombstone) by subject.
    """
    parts = []
    skolems: list[ox.Quad] = []
    for iri, known in old.items():
        subject = ox.NamedNode(iri)
        if isinstance(known, BoardNode):
            graph = graph_node(known.graph)  # (the graphs' terms are built once, kept)
            parts.append(f"DELETE WHERE {{ GRAPH {graph} {{ {subject} ?p ?o }} }}")
            if may_skolemise(known.content):  # (else its RDF is not worked out again)
                skolems += [
                    q
                    for q in rdf_of(known.node, known.graph)
                    if term_value(q.subject).startswith(SKOLEM_PREFIX)
                ]
            where = _bookkeeping_node(known.graph)
            parts.append(f"DELETE WHERE {{ GRAPH {where} {{ {subject} ?state ?record }} }}")
        else:
            parts.append(f"DELETE WHERE {{ GRAPH {_META} {{ {subject} ?p ?o }} }}")
    if skolems:
        parts.append(f"DELETE DATA {{ {quads_text(skolems)} }}")
    return " ;\n".join(parts)


def recorded_in(backend: GraphBackend, graphs: Sequence[str]) -> set[str]:
    """Return the IRIs that hold a record in the bookkeeping graphs of ``graphs``."""
    found: set[str] = set()
    for graph in graphs:
        where = ox.NamedNode(bookkeeping_graph(graph))
        result = backend.query(
            f"SELECT ?s WHERE {{ GRAPH {where} {{ ?s ?state ?record }} }}",
            dataset=Dataset((), (where.value,)),
        )
        found.update(term_value(row["s"]) for row in result.rows)
    return found


def marked_dirty(backend: GraphBackend, graphs: Sequence[str] | None) -> list[str]:
    """Return the IRIs, sorted, of the dirty records (in the graphs ``graphs`` when given)."""
    dataset = None if graphs is None else Dataset((), tuple(map(bookkeeping_graph, graphs)))
    result = backend.query(
        f"SELECT DISTINCT ?s WHERE {{ GRAPH ?g {{ ?s {_DIRTY} ?record }} }}", dataset=dataset
    )
    return sorted(term_value(row["s"]) for row in result.rows)


def recorded_iris(backend: GraphBackend, bound: int) -> set[str] | None:
    """Return the subjects of every record and tombstone in the store (``None`` over ``bound``).

    One text from the store (about 8 us a node on disk, 0.8 s for 100,000): decoding each
    IRI is the cost, the concatenation saves a Python object per row. IRIs hold no space.
    The bound keeps the open time and the set's memory to those of a full cache. (A count
    first, to spare a store over the bound reading IRIs it then drops, was measured: the
    scan is most of the cost, 0.29 s of 0.58 at a bound of 50,000, and a store within the
    bound, the usual one, paid both: 1.6 s instead of 1.0 for 100,000 nodes.)
    """
    result = backend.query(f"{_RECORDED}{bound + 1} }}")
    joined = result.rows[0].get("all") if result.rows else None
    text = "" if joined is None else term_value(joined)
    found = set(text.split(" ")) if text else set()
    return None if len(found) > bound else found


def upgrade_layout(backend: GraphBackend) -> None:
    """Rewrite bookkeeping of the earlier layout (record, graph, mark) in this one."""
    legacy = backend.query(
        f"ASK {{ GRAPH {_META} {{ ?s {_GRAPH} ?g }} }}", dataset=Dataset((), (META_GRAPH,))
    )
    if legacy.boolean:
        backend.update(_UPGRADE)


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
