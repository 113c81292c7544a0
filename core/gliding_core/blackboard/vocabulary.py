"""L2: the blackboard's vocabulary, its JSON-LD context, graph naming and the offline loader.

One namespace is written and queried: every node is read by a JSON-LD processor under
``CONTEXT`` (``@vocab`` is ``VOCAB``), so a plain property ``status`` becomes ``gh:status`` and a
type ``Task`` becomes ``gh:Task``, and every SPARQL query the project ships uses ``PREFIXES``,
where ``gh:`` is the same ``VOCAB`` (the reference wrote one namespace and queried another).

Invariants:
- No document is ever fetched from the network: a node's ``@context`` is inline or the
  project's own ``CONTEXT_URL`` (replaced by ``CONTEXT`` before parsing); any other URL is
  refused, and ``document_loader`` (for pyld) serves ``CONTEXT_URL`` and refuses the rest.
- ``area_graph`` is a bijection between (task IRI, area) and named-graph IRIs; ``graph_area``
  inverts it. The blackboard's bookkeeping lives in ``META_GRAPH`` (tombstones) and in one
  bookkeeping graph per node graph (``bookkeeping_graph``, inverted by ``bookkept_graph``),
  never in an area graph; ``is_bookkeeping`` tells them apart.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any
from urllib.parse import quote, unquote

from gliding_core.errors import InvalidInputError, InvalidNodeError
from gliding_core.jsonld import preview, validate_iri

VOCAB = "https://w3id.org/gliding-horse/vocab#"
META = "https://w3id.org/gliding-horse/meta#"
CONTEXT_URL = "https://w3id.org/gliding-horse/context.jsonld"
RDF_TYPE = "http://www.w3.org/1999/02/22-rdf-syntax-ns#type"
XSD = "http://www.w3.org/2001/XMLSchema#"

# Compact on purpose: L3 projections carry it, and their budget is a few hundred bytes.
CONTEXT: dict[str, Any] = {"@vocab": VOCAB, "gh": VOCAB, "xsd": XSD}

PREFIXES: dict[str, str] = {
    "gh": VOCAB,
    "ghm": META,
    "rdf": "http://www.w3.org/1999/02/22-rdf-syntax-ns#",
    "xsd": XSD,
}

# The prologue of every query the project ships (and the one to give your own queries).
PROLOGUE = "".join(f"PREFIX {name}: <{iri}>\n" for name, iri in PREFIXES.items())

AREAS = (
    "plan",
    "execution",
    "review",
    "decision",
    "knowledge",
    "tasks",
    "agents",
    "messages",
    "shared",
)

_GRAPH_PREFIX = "urn:gliding-horse:graph:"
AREA_GRAPH_PREFIX = _GRAPH_PREFIX
"""What the IRI of every area graph (``area_graph``) starts with."""
META_GRAPH = "urn:gliding-horse:meta"
SKOLEM_PREFIX = "urn:gliding-horse:genid:"


BOOKKEEPING_PREFIX = META_GRAPH + ":"


def term(name: str) -> str:
    """Return the IRI of a vocabulary term (``term("status")`` is ``gh:status``)."""
    return VOCAB + name


def meta(name: str) -> str:
    """Return the IRI of a bookkeeping predicate of the meta graph."""
    return META + name


def check_area(area: object) -> str:
    """Return ``area`` if it is one of ``AREAS``."""
    if not isinstance(area, str) or area not in AREAS:
        raise InvalidInputError(f"unknown blackboard area {preview(area)}; known: {list(AREAS)}")
    return area


def area_graph(task_iri: str, area: str) -> str:
    """Return the named-graph IRI of a task's area.

    Raises:
        InvalidInputError: ``task_iri`` is not an IRI or ``area`` is not one of ``AREAS``.
    """
    if not isinstance(task_iri, str) or not isinstance(area, str):
        validate_iri(task_iri, what="task IRI")
        check_area(area)
    return _area_graph(task_iri, area)


@functools.lru_cache(maxsize=4096)  # every checked operation names its graph
def _area_graph(task_iri: str, area: str) -> str:
    validate_iri(task_iri, what="task IRI")
    return f"{_GRAPH_PREFIX}{check_area(area)}:{quote(task_iri, safe='')}"


def graph_area(graph: str) -> tuple[str, str] | None:
    """Return the ``(task IRI, area)`` a named graph belongs to, or ``None`` for other graphs."""
    if not isinstance(graph, str) or not graph.startswith(_GRAPH_PREFIX):
        return None
    return _graph_area(graph)


@functools.lru_cache(maxsize=4096)
def _graph_area(graph: str) -> tuple[str, str] | None:
    area, sep, encoded = graph[len(_GRAPH_PREFIX) :].partition(":")
    if not sep or area not in AREAS or not encoded:
        return None
    return unquote(encoded), area


def area_in_task(graph: str, task: str) -> str | None:
    """Return the area of ``task`` that ``graph`` is, or ``None`` (another task's, or no area)."""
    place = graph_area(graph)
    return place[1] if place is not None and place[0] == task else None


@functools.lru_cache(maxsize=4096)  # every node write names its bookkeeping graph
def bookkeeping_graph(graph: str) -> str:
    """Return the graph that holds the records of the nodes of ``graph`` (an absolute IRI)."""
    return BOOKKEEPING_PREFIX + quote(graph, safe="")


def bookkept_graph(name: str) -> str | None:
    """Return the node graph whose records ``name`` holds, or ``None`` for other graphs."""
    if not name.startswith(BOOKKEEPING_PREFIX):
        return None
    return _unquoted(name[len(BOOKKEEPING_PREFIX) :])


@functools.lru_cache(maxsize=4096)  # every record read from the store names its graph
def _unquoted(text: str) -> str:
    return unquote(text)


def is_bookkeeping(graph: str) -> bool:
    """Return whether ``graph`` holds the blackboard's bookkeeping (never nodes)."""
    return graph == META_GRAPH or graph.startswith(BOOKKEEPING_PREFIX)


def with_context(node: Mapping[str, Any]) -> dict[str, Any]:
    """Return ``node`` with the context it is read under, never one that must be fetched.

    A node without ``@context`` gets ``CONTEXT``; ``CONTEXT_URL`` is replaced by ``CONTEXT``;
    inline contexts (objects, or lists of objects and ``CONTEXT_URL``) are kept.

    Raises:
        InvalidNodeError: the context names any other URL.
    """
    if "@context" not in node:
        return {"@context": CONTEXT, **node}
    return {**node, "@context": _offline(node["@context"], node.get("@id"))}


def _offline(context: object, iri: object) -> object:
    if context == CONTEXT_URL:
        return CONTEXT
    if isinstance(context, list):
        return [_offline(item, iri) for item in context]
    if context is None or isinstance(context, dict):
        if isinstance(context, dict) and "@import" in context:
            raise InvalidNodeError(f"node {iri!r}: @import of a remote context is not allowed")
        return context
    raise InvalidNodeError(
        f"node {iri!r}: @context {preview(context)} would be fetched from the network;"
        f" use an inline context or {CONTEXT_URL!r}"
    )


def document_loader(url: str, options: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Serve ``CONTEXT_URL`` to a JSON-LD processor (pyld) and refuse every other URL.

    Raises:
        InvalidInputError: ``url`` is not the project's context (nothing is fetched).
    """
    if url != CONTEXT_URL:
        raise InvalidInputError(f"remote JSON-LD document {url!r} is not loaded (offline)")
    return {
        "contentType": "application/ld+json",
        "contextUrl": None,
        "documentUrl": url,
        "document": {"@context": dict(CONTEXT)},
    }
