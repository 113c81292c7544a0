"""L3: running a frame and framing its triples as compact JSON-LD nodes.

The CONSTRUCT's triples become expanded JSON-LD (as a processor's ``fromRdf`` with native
types would make them: ``xsd:integer``, ``xsd:double`` and ``xsd:boolean`` become JSON numbers
and booleans), which pyld compacts under the blackboard's compact ``CONTEXT`` with the offline
document loader. The frame's selected nodes are then the top-level nodes, each embedding the
objects it links to (up to ``MAX_DEPTH`` levels, never a node inside itself); pyld's own
``frame`` is not used because it took seconds for a few hundred triples.

Each node version is compacted once (a memo keyed by the node's expanded JSON, which is all
its compaction depends on).

Invariants: nothing is fetched from the network; the ``SELECTED`` mark and skolem IRIs (the
blackboard's names for anonymous objects) never appear in the output; the nodes come in a
stable order (the task first, then by IRI), so the same graph always frames the same way.
"""

from __future__ import annotations

import json
import threading
from collections import OrderedDict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pyoxigraph as ox
from pyld import jsonld  # type: ignore[import-untyped]

from gliding_core.blackboard.board import Blackboard
from gliding_core.blackboard.sparql import TaskRoots
from gliding_core.blackboard.vocabulary import (
    CONTEXT,
    RDF_TYPE,
    SKOLEM_PREFIX,
    VOCAB,
    XSD,
    document_loader,
)
from gliding_core.boundary import translated
from gliding_core.projection.frames import SELECTED, Frame, uses

MAX_DEPTH = 4
EMBED_DEPTH = 3
_NATIVE = {XSD + "integer": int, XSD + "double": float, XSD + "decimal": float}
_BOOLEAN = XSD + "boolean"
_STRING = XSD + "string"
# The input is built expanded from the triples, so pyld need not expand it again.
_OPTIONS = {"documentLoader": document_loader, "graph": True, "skipExpansion": True}
_MEMO_SIZE = 20_000
_JSON = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"))


@dataclass(frozen=True, slots=True)
class FrameResult:
    """What a frame returned: its nodes framed, and every IRI they were made of.

    Attributes:
        nodes: the selected nodes as compact JSON-LD objects, nested objects embedded.
        iris: every subject the result was built from (selected and embedded nodes): the
            nodes whose change makes the result stale.
    """

    nodes: tuple[dict[str, Any], ...]
    iris: frozenset[str]


def run_frame(
    board: Blackboard,
    frame: Frame,
    task: str,
    params: Mapping[str, object],
    *,
    areas: Sequence[str] | None = None,
    roots: TaskRoots | None = None,
) -> FrameResult:
    """Run ``frame`` over ``task``'s graphs with ``params`` bound; return its framed nodes.

    ``areas`` narrows the graphs read to those of the frame's areas it names (an agent's
    readable areas); the frame's own areas when omitted. The ``tasks`` area is the one of the
    root of the task's tree, found by ``roots`` (a new ``TaskRoots`` of ``board`` when
    omitted: give one to remember roots across runs).
    """
    roots = TaskRoots(board) if roots is None else roots
    scope = frame.areas if areas is None else areas
    graphs = roots.graphs(task, scope)
    root = roots.root(task) if uses(frame.where, "area_tasks") else None
    bindings = dict(frame.bindings(task, params, root=root))
    if not graphs:
        return FrameResult((), frozenset())
    chosen = board.query(frame.selection, graphs=graphs, bindings=bindings)
    picked = {str(r["node"]): None for r in chosen.rows if isinstance(r.get("node"), ox.NamedNode)}
    nodes = " ".join(picked)
    if not nodes:
        return FrameResult((), frozenset())
    text = frame.construct(nodes)
    # The store refuses to bind a variable the query does not use.
    used = {k: v for k, v in bindings.items() if uses(text, k)}
    result = board.query(text, graphs=graphs, bindings=used)
    expanded, selected = expand(result.triples)
    if frame.embed:
        _read_embedded(board, graphs, expanded, {VOCAB + link for link in frame.embed})
    return FrameResult(frame_nodes(expanded, selected, task, frame.max_nodes), frozenset(expanded))


def _read_embedded(
    board: Blackboard,
    graphs: list[str],
    expanded: dict[str, dict[str, Any]],
    links: set[str],
) -> None:
    """Add to ``expanded`` the objects under ``links``, and theirs, ``EMBED_DEPTH`` levels down.

    Each level is one query by subject, its IRIs taken from the store's own answers.
    """
    frontier = _targets(expanded.values(), expanded, links)
    for _ in range(EMBED_DEPTH):
        if not frontier:
            return
        subjects = " ".join(str(ox.NamedNode(iri)) for iri in sorted(frontier))
        result = board.query(
            f"CONSTRUCT {{ ?s ?p ?o }} WHERE {{ VALUES ?s {{ {subjects} }} ?s ?p ?o }}",
            graphs=graphs,
        )
        found, _ = expand(result.triples)
        for iri, node in found.items():
            expanded.setdefault(iri, node)
        frontier = _targets(found.values(), expanded, None)


def _targets(
    nodes: Iterable[Mapping[str, Any]], known: Mapping[str, Any], links: set[str] | None
) -> set[str]:
    """Return the IRIs ``nodes`` link to (under ``links``, or any property) not yet known."""
    found = set()
    for node in nodes:
        for key, values in node.items():
            if key.startswith("@") or (links is not None and key not in links):
                continue
            for value in values:
                target = value.get("@id")
                if isinstance(target, str) and target not in known and not target.startswith("_:"):
                    found.add(target)
    return found


def expand(triples: Iterable[ox.Triple]) -> tuple[dict[str, dict[str, Any]], list[str]]:
    """Return the triples as expanded JSON-LD nodes by subject, and the selected subjects."""
    nodes: dict[str, dict[str, Any]] = {}
    selected: dict[str, None] = {}
    for triple in triples:
        subject = _name(triple.subject)
        predicate = triple.predicate.value
        if predicate == SELECTED:
            selected[subject] = None
            continue
        node = nodes.setdefault(subject, {"@id": subject})
        if predicate == RDF_TYPE:
            node.setdefault("@type", []).append(_name(triple.object))
        else:
            node.setdefault(predicate, []).append(_value(triple.object))
    for subject in selected:
        nodes.setdefault(subject, {"@id": subject})
    return nodes, list(selected)


def _name(term: Any) -> str:
    """Return the JSON-LD name of an IRI or a blank node."""
    if isinstance(term, ox.BlankNode):
        return "_:" + term.value
    return str(term.value)


def _value(term: Any) -> dict[str, Any]:
    if isinstance(term, ox.NamedNode):
        return {"@id": term.value}
    if isinstance(term, ox.BlankNode):
        return {"@id": "_:" + term.value}
    datatype = term.datatype.value
    if term.language:
        return {"@value": term.value, "@language": term.language}
    if datatype in _NATIVE:
        try:
            return {"@value": _NATIVE[datatype](term.value)}
        except ValueError:
            return {"@value": term.value, "@type": datatype}
    if datatype == _BOOLEAN and term.value in ("true", "false"):
        return {"@value": term.value == "true"}
    if datatype == _STRING:
        return {"@value": term.value}
    return {"@value": term.value, "@type": datatype}


class _Compacted:
    """Nodes compacted before, by their expanded JSON; least recently used first out.

    A node's compaction depends on nothing but its expanded form (the context is fixed), so
    a node is compacted once per version: a cold projection after a write compacts the node
    that changed, not the whole frame again.
    """

    def __init__(self, size: int = _MEMO_SIZE) -> None:
        self.size = size
        self._nodes: OrderedDict[str, dict[str, Any]] = OrderedDict()
        self._lock = threading.Lock()

    def compact(self, expanded: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
        """Return ``expanded``'s nodes compacted, in order (pyld for those not seen before)."""
        nodes = list(expanded)
        keys = [_JSON.encode(node) for node in nodes]
        with self._lock:
            found = [self._nodes.get(key) for key in keys]
            for key, node in zip(keys, found, strict=True):
                if node is not None:
                    self._nodes.move_to_end(key)
        missing = [i for i, node in enumerate(found) if node is None]
        if missing:
            made = _pyld_compact([nodes[i] for i in missing])
            if len(made) != len(missing):  # pyld merged or dropped a node: keep nothing
                return made + [n for n in found if n is not None]
            with self._lock:
                for i, node in zip(missing, made, strict=True):
                    found[i] = self._nodes[keys[i]] = node
                while len(self._nodes) > self.size:
                    self._nodes.popitem(last=False)
        return [node for node in found if node is not None]

    def clear(self) -> None:
        """Forget every compaction."""
        with self._lock:
            self._nodes.clear()


def _pyld_compact(nodes: list[Mapping[str, Any]]) -> list[dict[str, Any]]:
    with translated("jsonld", "compacting a projection"):
        document = jsonld.compact(nodes, {"@context": CONTEXT}, _OPTIONS)
    graph: list[dict[str, Any]] = document.get("@graph", [])
    return graph


_COMPACTED = _Compacted()


def forget_compactions() -> None:
    """Forget the remembered compactions."""
    _COMPACTED.clear()


def compact(expanded: Iterable[Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    """Compact expanded nodes with pyld under ``CONTEXT``; return them by ``@id``.

    The compacted nodes are shared with the memo of compactions: treat them as read-only.
    """
    return {node["@id"]: node for node in _COMPACTED.compact(expanded)}


def frame_nodes(
    expanded: Mapping[str, Mapping[str, Any]], selected: list[str], task: str, limit: int
) -> tuple[dict[str, Any], ...]:
    """Return the selected nodes, compacted, each embedding the objects it links to."""
    if not selected:
        return ()
    order = sorted(selected, key=lambda iri: (iri != task, iri))[:limit]
    by_id = compact(expanded[iri] for iri in _reachable(expanded, order))
    return tuple(_embed(by_id[iri], by_id, (iri,)) for iri in order if iri in by_id)


def _reachable(expanded: Mapping[str, Mapping[str, Any]], roots: list[str]) -> list[str]:
    """Return ``roots`` and the subjects they link to (within ``MAX_DEPTH`` hops), in order."""
    seen = dict.fromkeys(roots)
    frontier = list(roots)
    for _ in range(MAX_DEPTH):
        following = []
        for iri in frontier:
            for key, values in expanded[iri].items():
                if key.startswith("@"):
                    continue
                for value in values:
                    target = value.get("@id")
                    if target in expanded and target not in seen:
                        seen[target] = None
                        following.append(target)
        frontier = following
    return list(seen)


def _embed(node: Mapping[str, Any], by_id: Mapping[str, Any], path: tuple[str, ...]) -> Any:
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key == "@id":
            if not value.startswith(SKOLEM_PREFIX):
                out[key] = value
        elif key.startswith("@"):
            out[key] = value
        else:
            embedded = _embed_value(value, by_id, path)
            if embedded is not _DROP:
                out[key] = embedded
    return out


_DROP = object()


def _embed_value(value: Any, by_id: Mapping[str, Any], path: tuple[str, ...]) -> Any:
    if isinstance(value, list):
        items = [_embed_value(item, by_id, path) for item in value]
        kept = [item for item in items if item is not _DROP]
        return kept if kept else _DROP
    if isinstance(value, dict) and set(value) == {"@id"}:
        target = value["@id"]
        if target in by_id and target not in path and len(path) <= MAX_DEPTH:
            return _embed(by_id[target], by_id, (*path, target))
        if target.startswith(SKOLEM_PREFIX):  # an anonymous object the frame did not embed
            return _DROP
    return value
