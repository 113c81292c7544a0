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
import re
from collections.abc import Mapping
from typing import Any

from gliding_core.errors import InvalidNodeError

Node = dict[str, Any]

_RESERVED_TEXT_KEYS = frozenset({"@id", "@context", "@type"})
_PREVIEW = 80
_SPACE = re.compile(r"\s")
# One encoder for every canonical serialisation: building one per call costs more than encoding.
_ENCODER = json.JSONEncoder(
    sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
)


def preview(value: object) -> str:
    """Return a short ``repr`` of ``value`` for error messages."""
    text = repr(value)
    return text if len(text) <= _PREVIEW else text[: _PREVIEW - 3] + "..."


def parse_node(value: object) -> tuple[Node, str]:
    """Validate a JSON-LD node given as a mapping or as JSON text.

    Returns:
        The node as a new dict, and its canonical JSON text.

    Raises:
        InvalidNodeError: ``value`` is not JSON, not an object, not JSON-serialisable, or has an
            ``@id`` or ``@type`` of the wrong kind.
    """
    if isinstance(value, (str, bytes, bytearray)):
        try:
            value = json.loads(value)
        except (ValueError, UnicodeDecodeError) as exc:
            raise InvalidNodeError(f"node is not valid JSON: {preview(value)} ({exc})") from exc
    if not isinstance(value, Mapping):
        raise InvalidNodeError(
            f"node must be a JSON object, got {type(value).__name__}: {preview(value)}"
        )
    try:
        content = canonical_json(value if isinstance(value, dict) else dict(value))
    except (TypeError, ValueError) as exc:
        raise InvalidNodeError(f"node is not JSON-serialisable: {preview(value)} ({exc})") from exc
    node: Node = json.loads(content)
    if "@id" in node:
        validate_iri(node["@id"], what="@id")
    node_types(node)
    return node, content


def validate_iri(value: object, *, what: str = "IRI") -> str:
    """Return ``value`` if it is a usable IRI: a non-empty string without whitespace."""
    if not isinstance(value, str):
        raise InvalidNodeError(
            f"{what} must be a string, got {type(value).__name__}: {preview(value)}"
        )
    if not value or _SPACE.search(value):
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


def content_hash(content: str) -> str:
    """Return the SHA-256 hex digest of ``content``."""
    return hashlib.sha256(content.encode("utf-8")).hexdigest()


def node_types(node: Mapping[str, Any]) -> list[str]:
    """Return the node's ``@type`` values as a list (empty when it has none)."""
    raw = node.get("@type")
    if raw is None:
        return []
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


def node_references(node: Mapping[str, Any]) -> list[tuple[str, str]]:
    """Return the ``(predicate, target IRI)`` pairs for every ``{"@id": ...}`` the node refers to.

    References nested in lists and in embedded objects count; the predicate is the key the
    reference sits under. Self-references are left out.
    """
    own = node.get("@id")
    found: dict[tuple[str, str], None] = {}
    # An explicit stack of (key, value): no recursion, and plain values cost one type check.
    stack = [(key, value) for key, value in node.items() if key not in _RESERVED_TEXT_KEYS]
    while stack:
        key, value = stack.pop()
        if isinstance(value, dict):
            target = value.get("@id")
            if isinstance(target, str) and target and target != own:
                found[(key, target)] = None
            stack.extend(
                (inner_key, inner)
                for inner_key, inner in value.items()
                if inner_key not in _RESERVED_TEXT_KEYS and isinstance(inner, (dict, list))
            )
        elif isinstance(value, list):
            stack.extend((key, item) for item in value if isinstance(item, (dict, list)))
    return sorted(found)


def node_text(node: Mapping[str, Any]) -> str:
    """Return the searchable text of a node: its string and number values, in key order."""
    parts: list[str] = []
    for key, value in node.items():
        if key not in _RESERVED_TEXT_KEYS:
            _collect_text(value, parts)
    return "\n".join(parts)


def _collect_text(value: Any, parts: list[str]) -> None:
    if isinstance(value, str):
        if value:
            parts.append(value)
    elif isinstance(value, bool) or value is None:
        return
    elif isinstance(value, (int, float)):
        parts.append(str(value))
    elif isinstance(value, list):
        for item in value:
            _collect_text(item, parts)
    elif isinstance(value, dict):
        for key, inner in value.items():
            if key not in _RESERVED_TEXT_KEYS:
                _collect_text(inner, parts)


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
    return merged
