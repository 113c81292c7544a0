"""L0: JSON-LD node rules: validation, types, references, text, and the merge by ``@id``.

Pure functions over plain ``dict`` nodes; the store calls them and owns all I/O.

Merge laws (seed 000, section 二), checked by property-based tests:
- properties merge key by key and the new value wins, except the text keys (``text`` by
  default), where the longer string is kept;
- ``@type`` values are united, existing ones first; ``@context`` comes from the new node when it
  has one.
"""

from __future__ import annotations

import hashlib
import json
import json.scanner
import re
from collections.abc import Mapping
from typing import Any

import orjson

from gliding_core.errors import InvalidNodeError

Node = dict[str, Any]

_RESERVED_TEXT_KEYS = frozenset({"@id", "@context", "@type"})
_PREVIEW = 80
_SPACE = re.compile(r"\s")
# Never updated: each digest starts from a copy, cheaper than creating a new hash object.
_SHA256 = hashlib.sha256()
_ORJSON_OPTIONS = orjson.OPT_SORT_KEYS | orjson.OPT_PASSTHROUGH_SUBCLASS
# One encoder for every canonical serialisation: building one per call costs more than encoding.
_ENCODER = json.JSONEncoder(
    sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
)
# The decoder's scanner without ``json.loads``' wrapping (type and whitespace checks, two calls):
# text written by ``canonical_json`` needs none of it, and is parsed once per write.
# (The stubs type the scanner's argument as a scanner; it is a decoder.)
_SCAN = json.scanner.make_scanner(json.JSONDecoder())  # type: ignore[arg-type]


def preview(value: object) -> str:
    """Return a short ``repr`` of ``value`` for error messages."""
    text = repr(value)
    return text if len(text) <= _PREVIEW else text[: _PREVIEW - 3] + "..."


def parse_node(value: object) -> tuple[Node, str, tuple[str, ...]]:
    """Validate a JSON-LD node given as a mapping or as JSON text.

    Returns:
        The node as a new dict, its canonical JSON text and its ``@type`` values.

    Raises:
        InvalidNodeError: ``value`` is not JSON, not an object, not JSON-serialisable, or has an
            ``@id`` or ``@type`` of the wrong kind.
    """
    if isinstance(value, (str, bytes, bytearray)):
        try:
            value = json.loads(value)
        except (ValueError, UnicodeDecodeError) as exc:
            raise InvalidNodeError(f"node is not valid JSON: {preview(value)} ({exc})") from exc
    if isinstance(value, dict):  # a concrete type first: cheaper than the abstract one
        mapping = value
    elif isinstance(value, Mapping):
        mapping = dict(value)
    else:
        raise InvalidNodeError(
            f"node must be a JSON object, got {type(value).__name__}: {preview(value)}"
        )
    fast = _fast_canonical(mapping)
    if fast is not None:
        node, content = fast
    else:
        try:
            content = canonical_json(mapping)
        except (TypeError, ValueError) as exc:
            message = f"node is not JSON-serialisable: {preview(value)} ({exc})"
            raise InvalidNodeError(message) from exc
        node = parse_canonical(content)
    if "@id" in node:
        validate_iri(node["@id"], what="@id")
    return node, content, tuple(node_types(node))


def _fast_canonical(mapping: dict[str, Any]) -> tuple[Node, str] | None:
    """The node and its canonical JSON by orjson, when that is exactly ``canonical_json``'s.

    Exact for the plain JSON types orjson and the standard encoder write alike: str keys, str,
    int (64-bit), bool, None, dict and list. A float (orjson writes exponents differently), any
    other type (orjson would accept a datetime or a UUID the standard encoder refuses) or an
    encoding error sends the node down the standard path, which decides.
    """
    try:
        raw = orjson.dumps(mapping, option=_ORJSON_OPTIONS)
    except (orjson.JSONEncodeError, TypeError):
        return None
    if not _plain(mapping):
        return None
    node: Node = orjson.loads(raw)
    return node, raw.decode()


def _plain(value: Any) -> bool:
    """Whether ``value`` holds only dicts, lists, str, int, bool and None.

    Run on what orjson has just written: it has refused non-str keys and ints beyond 64 bits,
    so neither is checked again here.
    """
    stack = [value]
    pop, push = stack.pop, stack.extend
    while stack:
        item = pop()
        kind = type(item)
        if kind is str or kind is int or kind is bool or item is None:
            continue
        if kind is dict:
            push(item.values())
        elif kind is list:
            push(item)
        else:
            return False
    return True


def validate_iri(value: object, *, what: str = "IRI") -> str:
    """Return ``value`` if it is a usable IRI: a non-empty string without whitespace."""
    if not isinstance(value, str):
        raise InvalidNodeError(
            f"{what} must be a string, got {type(value).__name__}: {preview(value)}"
        )
    # Printable text holds no whitespace but the space; only other text needs the search.
    if not value or " " in value or (not value.isprintable() and _SPACE.search(value)):
        raise InvalidNodeError(
            f"{what} must be non-empty and contain no whitespace, got {preview(value)}"
        )
    return value


def is_label(value: object) -> bool:
    """Return whether ``value`` can be a tag or a type: non-empty, no control characters."""
    return isinstance(value, str) and bool(value.strip()) and value.isprintable()


def canonical_json(node: Mapping[str, Any]) -> str:
    """Serialise ``node`` deterministically (sorted keys, no spaces, no NaN)."""
    return _ENCODER.encode(node)


def parse_canonical(content: str) -> Node:
    """Parse a node's canonical JSON text, as written by ``canonical_json`` (not checked)."""
    node: Node = _SCAN(content, 0)[0]
    return node


def content_hash(content: str) -> str:
    """Return the SHA-256 hex digest of ``content``."""
    digest = _SHA256.copy()
    digest.update(content.encode("utf-8"))
    return digest.hexdigest()


def node_types(node: Mapping[str, Any]) -> list[str]:
    """Return the node's ``@type`` values as a list (empty when it has none)."""
    raw = node.get("@type")
    if raw is None:
        return []
    if type(raw) is str and raw.isprintable() and raw.strip():
        return [raw]
    values = [raw] if isinstance(raw, str) else raw
    if not isinstance(values, list) or not all(is_label(v) for v in values):
        raise InvalidNodeError(
            f"@type must be a string or a list of non-empty strings without control characters,"
            f" got {preview(raw)}"
        )
    return list(dict.fromkeys(values))


def node_context(node: Mapping[str, Any]) -> str | None:
    """Return the node's ``@context`` serialised as JSON text, or ``None``."""
    if "@context" not in node:
        return None
    return canonical_json({"@context": node["@context"]})[len('{"@context":') : -1]


def node_facets(node: Mapping[str, Any]) -> tuple[list[tuple[str, str]], str]:
    """Return the node's references and searchable text, walking the node once.

    A plain tuple, not a named one: the store calls this for every node it writes.

    ``references`` are the sorted ``(predicate, target IRI)`` pairs for every ``{"@id": ...}``
    the node refers to, in lists and embedded objects too; the predicate is the key the
    reference sits under, and self-references are left out. ``text`` is the node's string and
    number values joined by newlines, in key order.
    """
    own = node.get("@id")
    found: dict[tuple[str, str], None] = {}
    parts: list[str] = []
    for key, value in node.items():
        if key in _RESERVED_TEXT_KEYS:
            continue
        # Top-level strings are most of the values of most nodes: no call for them.
        kind = type(value)
        if kind is str:
            if value:
                parts.append(value)
        elif kind is dict and len(value) == 1 and "@id" in value:
            # A bare reference, {"@id": ...}: the other common value, also without a call.
            target = value["@id"]
            if isinstance(target, str) and target and target != own:
                found[(key, target)] = None
        else:
            _walk(key, value, own, found, parts)
    references = sorted(found) if len(found) > 1 else list(found)
    return references, "\n".join(parts)


def _walk(
    key: str, value: Any, own: object, found: dict[tuple[str, str], None], parts: list[str]
) -> None:
    if isinstance(value, str):
        if value:
            parts.append(value)
    elif isinstance(value, dict):
        target = value.get("@id")
        if isinstance(target, str) and target and target != own:
            found[(key, target)] = None
        for inner_key, inner in value.items():
            if inner_key not in _RESERVED_TEXT_KEYS:
                _walk(inner_key, inner, own, found, parts)
    elif isinstance(value, list):
        for item in value:
            _walk(key, item, own, found, parts)
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        parts.append(str(value))


def node_references(node: Mapping[str, Any]) -> list[tuple[str, str]]:
    """Return the ``(predicate, target IRI)`` pairs the node refers to (see ``node_facets``)."""
    return node_facets(node)[0]


def node_text(node: Mapping[str, Any]) -> str:
    """Return the searchable text of a node: its string and number values, in key order."""
    return node_facets(node)[1]


def merge_nodes(
    old: Mapping[str, Any], new: Mapping[str, Any], *, text_keys: frozenset[str]
) -> Node:
    """Merge ``new`` into ``old`` by the L0 rules and return the result as a new dict."""
    merged: Node = dict(old)
    for key, value in new.items():
        if key == "@type":
            continue
        previous = merged.get(key)
        if key in text_keys and isinstance(previous, str) and isinstance(value, str):
            merged[key] = previous if len(previous) > len(value) else value
        else:
            merged[key] = value
    types = list(dict.fromkeys(node_types(old) + node_types(new)))
    # Keep the written shape ("A" or ["A"]) when the union adds nothing to one side.
    if types == node_types(new) and "@type" in new:
        merged["@type"] = new["@type"]
    elif types != node_types(old):
        merged["@type"] = types
    # In key order, as the node reads back from its canonical JSON: its text is then the same
    # now and when the store later recomputes it to take it out of the full-text index.
    return dict(sorted(merged.items()))
