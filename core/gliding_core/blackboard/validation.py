"""L2: blackboard node validation: a node checked and turned into RDF before anything is written.

A write request (``NodeWrite``) is a node that passed every check: a JSON object (its
canonical text kept), an absolute ``@id`` (one is minted, ``urn:uuid:...``, when it has none:
from the write's id and the node's place in its batch when the write has one, so a retry of the
write mints the same IRIs),
within the size limit, with its graph and tags checked and its RDF read (``rdf_of``).

Invariants:
- A node is validated whole (JSON, ``@id``, size, graph, tags, RDF) before anything is
  written: a bad node fails with a typed error naming it, and no request is made of it.
- A node describes itself: ``@graph`` and ``@included`` are refused; an embedded object with its
  own ``@id`` adds triples about that IRI, which a rewrite of either node may remove.
"""

from __future__ import annotations

import functools
import uuid
from collections.abc import Sequence
from typing import NamedTuple

import pyoxigraph as ox

from gliding_core.blackboard.rdf import rdf_of
from gliding_core.checks import check_list
from gliding_core.errors import ContentTooLargeError, InvalidInputError, InvalidNodeError
from gliding_core.jsonld import (
    DEFAULT_MAX_DEPTH,
    Node,
    canonical_json,
    is_label,
    parse_node,
    preview,
)

MINTED_PREFIX = "urn:uuid:"
_MINTED = uuid.UUID("5b1f0c3e-6d1a-4c55-9a36-0f0c2f8e7d41")  # the namespace of minted IRIs


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
        return checked_write(node, checked_graph(graph), check_tags(tags), max_bytes)


def checked_write(
    node: object,
    graph: str,
    tags: tuple[str, ...],
    max_bytes: int,
    write_id: str | None = None,
    index: int = 0,
) -> NodeWrite:
    """Validate a node as ``NodeWrite.check`` does, for a ``graph`` and ``tags`` already checked.

    For a batch: its graph and tags are checked once, its nodes each (``NodeStore.prepare``).
    A node without ``@id`` gets one minted from ``write_id`` and its ``index`` in the batch
    (random without a ``write_id``).
    """
    parsed, content, _, _ = parse_node(node, max_depth=DEFAULT_MAX_DEPTH)
    iri = parsed.get("@id")  # a string if present (``parse_node`` checked it)
    if iri is None:
        minted = uuid.uuid4() if write_id is None else uuid.uuid5(_MINTED, f"{write_id}/{index}")
        iri = MINTED_PREFIX + str(minted)
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
    try:
        triples = rdf_of(parsed, graph, content, subject)
    except InvalidNodeError:
        raise
    except InvalidInputError as exc:  # the processor refused it (a scoped remote context...)
        raise InvalidNodeError(f"node {iri!r} is not JSON-LD this blackboard reads: {exc}") from exc
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
    """Return the tags, de-duplicated in order, if they are a list (``check_list``: a tuple or
    a set too) of non-empty printable strings."""
    checked = check_list(tags, what="tags")
    if not checked:  # most writes: no tags
        return ()
    for tag in checked:
        if not is_label(tag):
            raise InvalidInputError(f"each tag must be a non-empty string, got {preview(tag)}")
    return tuple(dict.fromkeys(checked))


@functools.lru_cache(maxsize=4096)  # a batch's graph is checked once per node: remembered
def checked_graph(graph: object) -> str:
    """Return ``graph`` if it is an absolute IRI (``check_iri``), cheaply when it is one."""
    return graph if isinstance(graph, str) and is_iri(graph) else check_iri(graph, "graph")


@functools.lru_cache(maxsize=4096)  # a few graphs take every write
def is_iri(text: str) -> bool:
    """Whether ``text`` is an absolute IRI (``check_iri`` says why not)."""
    try:
        check_iri(text, "graph")
    except InvalidNodeError:
        return False
    return True
