"""L2: the RDF of a flat node without the JSON-LD processor (the blackboard's fast path).

Most blackboard nodes are flat: an ``@id``, a ``@type`` or two, and properties whose values are
strings, whole numbers, booleans or references ``{"@id": ...}``. For them, what the JSON-LD
processor produces under the project's ``CONTEXT`` is plain: each property ``key`` becomes the
predicate ``VOCAB + key``, each type ``T`` the triple ``rdf:type VOCAB + T``, a string an
``xsd:string`` literal, a whole number an ``xsd:integer`` literal in its decimal form, a boolean
an ``xsd:boolean``, a reference the IRI it names; types come first, sorted, then the
properties in key order, each list in its order. ``flat_triples`` writes those quads directly
(about a tenth of the processor's time) and declines every node whose reading depends on
anything more.

Invariants:
- ``flat_triples`` returns exactly the quads ``pyoxigraph.parse`` gives for the node's JSON-LD
  document under ``CONTEXT``, in the same order, duplicates included (a property-based test
  checks it against the processor), or ``None``, and then the caller asks the processor.
- It declines (``None``) on: an ``@context``; any other keyword; a key or type that is no plain
  term (letters, digits, ``_`` and ``-``, not starting with a digit or ``-``) or that the
  context defines (``gh``, ``xsd``: they are prefixes, not vocabulary terms); an IRI whose
  scheme the context defines (``gh:x`` would be a compact IRI), a blank node label, or one that
  is not a plain absolute IRI; a float, a null, a number of 2**53 or more in size, nested
  lists, an object other than ``{"@id": IRI}``, an empty list.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping
from typing import Any

import pyoxigraph as ox

from gliding_core.blackboard.vocabulary import CONTEXT, RDF_TYPE, VOCAB, XSD

_TERM = re.compile(r"[A-Za-z_][A-Za-z0-9_-]*")
# An absolute IRI of ASCII characters that need no escape and no resolution: a scheme, then no
# space, quote, angle bracket, brace, backslash or other character an IRI may not hold.
_PLAIN_IRI = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*):[A-Za-z0-9._~:/?#\[\]@!$&'()*+,;=%-]+")
_DEFINED = frozenset(CONTEXT)  # terms of the context: never read as vocabulary terms
_LARGEST = 2**53  # the processor reads numbers as doubles: whole ones exact below this
_TYPE = ox.NamedNode(RDF_TYPE)
_INTEGER = ox.NamedNode(XSD + "integer")
_BOOLEAN = ox.NamedNode(XSD + "boolean")
_TRUE, _FALSE = ox.Literal("true", datatype=_BOOLEAN), ox.Literal("false", datatype=_BOOLEAN)


def flat_triples(
    node: Mapping[str, Any], graph: ox.NamedNode, subject: ox.NamedNode | None = None
) -> list[ox.Quad] | None:
    """Return the node's quads in ``graph`` if it is flat, else ``None`` (ask the processor).

    ``node`` is a parsed node (``parse_node``'s dict) with an ``@id``; its keys are visited in
    sorted order, the order of its canonical text, which the processor reads. ``subject``, when
    given, is ``NamedNode(node["@id"])``, built by the caller already (it is not built again).
    """
    if subject is None:
        subject = _iri(node.get("@id"))
        if subject is None:
            return None
    elif not _plain(node.get("@id")):
        return None
    quads: list[ox.Quad] = []
    for key in sorted(node):
        value = node[key]
        if key == "@id":
            continue
        if key == "@type":
            if not _add_types(quads, subject, value, graph):
                return None
            continue
        predicate = _term(key)
        if predicate is None or not _add_values(quads, subject, predicate, value, graph):
            return None
    return quads


def _add_types(
    quads: list[ox.Quad], subject: ox.NamedNode, value: Any, graph: ox.NamedNode
) -> bool:
    if type(value) is str:  # most nodes: one type
        term = _term(value)
        if term is not None:
            quads.append(ox.Quad(subject, _TYPE, term, graph))
        return term is not None
    values = value if type(value) is list else [value]
    if not values or not all(type(kind) is str for kind in values):
        return False
    terms = [_term(kind) for kind in sorted(values)]  # the processor writes types in IRI order
    if None in terms:
        return False
    quads.extend(ox.Quad(subject, _TYPE, term, graph) for term in terms if term is not None)
    return True


def _add_values(
    quads: list[ox.Quad],
    subject: ox.NamedNode,
    predicate: ox.NamedNode,
    value: Any,
    graph: ox.NamedNode,
) -> bool:
    if type(value) is not list:  # most properties: one value
        term = _object(value)
        if term is not None:
            quads.append(ox.Quad(subject, predicate, term, graph))
        return term is not None
    if not value:
        return False
    for item in value:
        term = _object(item)
        if term is None:
            return False
        quads.append(ox.Quad(subject, predicate, term, graph))
    return True


def _object(value: Any) -> ox.NamedNode | ox.Literal | None:
    kind = type(value)
    if kind is str:
        return ox.Literal(value)
    if kind is bool:
        return _TRUE if value else _FALSE
    if kind is int:
        return ox.Literal(str(value), datatype=_INTEGER) if -_LARGEST < value < _LARGEST else None
    if kind is dict and len(value) == 1:
        return _iri(value.get("@id"))
    return None


@functools.lru_cache(maxsize=4096)  # a vocabulary's few terms name every node's properties
def _term(name: str) -> ox.NamedNode | None:
    """The IRI of a plain vocabulary term, ``None`` for any other name."""
    if _TERM.fullmatch(name) is None or name in _DEFINED:
        return None
    return ox.NamedNode(VOCAB + name)


def _plain(value: Any) -> bool:
    """Whether ``value`` is an IRI the processor reads as it is (see ``_PLAIN_IRI``)."""
    if type(value) is not str:
        return False
    match = _PLAIN_IRI.fullmatch(value)
    return match is not None and match.group(1) not in _DEFINED


def _iri(value: Any) -> ox.NamedNode | None:
    if not _plain(value):
        return None
    try:
        return ox.NamedNode(value)
    except ValueError:
        return None
