"""L2: a blackboard node's RDF, the quads its JSON-LD stands for in its named graph.

A node's RDF is what a JSON-LD processor reads from it under the project's context, or for a
flat node what ``flat_triples`` gives (the same quads, without the processor), each quad put
into the node's graph.

Invariants:
- Blank nodes are skolemised to IRIs derived from the node's IRI and their position, so a
  rewrite removes exactly the old node's triples and nothing lingers.
- The same node always gives the same quads, in the same order (the processor's order is
  deterministic, and so is the skolem numbering that follows it).
- A node's triples go into its own graph only: a node whose JSON-LD names another graph is
  refused (``InvalidNodeError``).
"""

from __future__ import annotations

import functools
import hashlib
from typing import Any

import pyoxigraph as ox

from gliding_core.blackboard.flat import flat_triples
from gliding_core.blackboard.vocabulary import CONTEXT, SKOLEM_PREFIX, with_context
from gliding_core.boundary import translated
from gliding_core.errors import InvalidNodeError
from gliding_core.jsonld import Node, canonical_json

_CONTEXT_OPENING = '{"@context":' + canonical_json(CONTEXT) + ","  # CONTEXT is a constant


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
    name = graph_node(graph)
    if "@context" not in node:
        flat = flat_triples(node, name, subject)
        if flat is not None:
            return tuple(flat)
    return processed_rdf(node, name, content)


def may_skolemise(content: str) -> bool:
    """Return whether the node whose canonical JSON is ``content`` may have blank nodes in its
    RDF (which ``rdf_of`` skolemises): a cheap test of its text that never answers no wrongly.

    ``CONTEXT`` defines no list container and coerces no value, so a blank node comes only
    from a JSON object nested in the node (a node without ``@id``, a list or value object, a
    reverse property...), from a blank node label (``_:``) or from a context of the node's
    own; a text with no ``{`` past its opening brace, no ``_:`` and no ``@context`` has none.
    """
    return content.find("{", 1) >= 0 or "_:" in content or "@context" in content


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


@functools.lru_cache(maxsize=4096)  # a few graphs take every write: their terms are kept
def graph_node(graph: str) -> ox.NamedNode:
    """Return the term of ``graph`` (an IRI checked already), built once per graph."""
    return ox.NamedNode(graph)


def _document(node: Node, content: str | None) -> str:
    """The JSON-LD text the processor reads: ``canonical_json(with_context(node))``.

    A node without ``@context`` whose keys all sort after it gets the context spliced in
    front of its own canonical text (the same characters the encoder would write).
    """
    if content is not None and node and "@context" not in node and min(node) > "@context":
        return _CONTEXT_OPENING + content[1:]
    return canonical_json(with_context(node))
