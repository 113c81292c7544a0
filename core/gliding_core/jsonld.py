"""L0: JSON-LD node rules: validation, types, references, text, and the merge by ``@id``.

Pure functions over plain ``dict`` nodes; the store calls them and owns all I/O. This module is
also the input boundary for strings and nesting: every check a public function makes on a text,
a name or a node starts here.

Input invariants:
- A node accepted by ``parse_node`` is nested at most ``max_depth`` deep, encodes as UTF-8 (no
  lone surrogate in any key or value), and its ``@id`` and every string ``@id`` it refers to
  is a usable IRI. Every walker here is iterative, so no node, however deep, exhausts the
  interpreter's stack; the JSON codecs (which recurse in C) only ever see nodes within the limit.
- An IRI holds no whitespace and no control character (Unicode category Cc); a label (tag, type,
  named graph) is not blank and holds no Cc, Zl or Zp character; neither holds a lone surrogate.
- ``preview`` never raises, whatever it is given, and its result always encodes as UTF-8.

Merge laws (an ``@id`` names one node, so storing it again updates that node rather than adding
a second), checked by property-based tests:
- properties merge key by key and the new value wins, except the text keys (``text`` by
  default), where the longer string is kept;
- ``@type`` values are united, existing ones first; ``@context`` comes from the new node when it
  has one.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import json.scanner
import re
import reprlib
import unicodedata
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import orjson

from gliding_core.errors import InvalidInputError, InvalidNodeError, NodeTooDeepError

Node = dict[str, Any]

# How deep a node may nest (the node itself is depth 1, an object or array in it depth 2 ...).
# The JSON encoder and decoder recurse in C, one interpreter frame per level: a node read back
# from inside a deep call stack (a framework's callbacks, a recursive agent) must still leave
# room under the recursion limit of 1,000. Real JSON-LD nests a handful of levels.
DEFAULT_MAX_DEPTH = 64
# No setting may go above this: orjson's own limit. A store set this high reads its deepest
# nodes back only from call stacks some 700 frames short of the recursion limit.
MAX_DEPTH_CEILING = 255

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


class _Preview(reprlib.Repr):
    """``reprlib.Repr`` showing a dict's keys in their order, as ``repr`` does (not sorted)."""

    def repr_dict(self, x: dict[Any, Any], level: int) -> str:
        if not x:
            return "{}"
        if level <= 0:
            return "{...}"
        pieces = [
            f"{self.repr1(key, level - 1)}: {self.repr1(value, level - 1)}"
            for key, value in itertools.islice(x.items(), self.maxdict)
        ]
        if len(x) > self.maxdict:
            pieces.append("...")
        return "{" + ", ".join(pieces) + "}"


_REPR = _Preview()
_REPR.maxlevel = 3  # reprlib recurses; three levels cannot exhaust a stack
_REPR.maxstring = _PREVIEW
_REPR.maxother = _PREVIEW
_REPR.maxdict = _REPR.maxlist = _REPR.maxtuple = _REPR.maxset = 6


def preview(value: object) -> str:
    """Return a short ``repr`` of ``value`` for error messages; never raises.

    Built-in containers are cut at three levels and a few items, so a huge or deeply nested
    value costs little; a value whose ``repr`` fails is shown by its type. Lone surrogates and
    control characters come out escaped, so the result always encodes as UTF-8.
    """
    try:
        text = _REPR.repr(value) if type(value) in _SHALLOW else _subclass_repr(value)
    except Exception:  # a broken __repr__, an int too long to print ...
        text = f"<{type(value).__name__} object>"
    if len(text) > _PREVIEW:
        text = text[: _PREVIEW - 3] + "..."
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


def _subclass_repr(value: object) -> str:
    """The ``repr`` of a value of a type reprlib does not know, bounded for built-in subclasses."""
    shallow: object
    if isinstance(value, str):
        shallow = str(value[:_PREVIEW])
    elif isinstance(value, dict):
        shallow = dict(value)
    elif isinstance(value, (list, tuple)):
        shallow = list(value)
    else:
        return repr(value)
    return f"{type(value).__name__}({_REPR.repr(shallow)})"


_SHALLOW = frozenset({str, bytes, dict, list, tuple, set, frozenset, int, float, bool, type(None)})


# A validated node: a new dict, its canonical JSON, its ``@type`` values and its depth. A plain
# tuple, not a named one: it is built for every node written, and a named one costs more.
ParsedNode = tuple[Node, str, tuple[str, ...], int]


def parse_node(value: object, *, max_depth: int = MAX_DEPTH_CEILING) -> ParsedNode:
    """Validate a JSON-LD node given as a mapping or as JSON text.

    Returns:
        The node as a new dict, its canonical JSON text, its ``@type`` values and its depth.

    Raises:
        InvalidNodeError: ``value`` is not JSON, not an object, not JSON-serialisable, holds a
            lone surrogate, has an ``@id`` or ``@type`` of the wrong kind, or refers to an
            ``@id`` that is no usable IRI.
        NodeTooDeepError: ``value`` nests deeper than ``max_depth``.
    """
    if isinstance(value, (str, bytes, bytearray)):
        value = _loads(value, max_depth)
    if isinstance(value, dict):  # a concrete type first: cheaper than the abstract one
        mapping = value
    elif isinstance(value, Mapping):
        mapping = dict(value)
    else:
        raise InvalidNodeError(
            f"node must be a JSON object, got {type(value).__name__}: {preview(value)}"
        )
    fast = _fast_canonical(mapping, max_depth)
    if fast is not None:
        node, content, depth = fast
    else:
        depth = nesting_depth(mapping, max_depth)
        check_string_keys(mapping, what="node", error=InvalidNodeError)
        try:
            content = canonical_json(mapping)
        except (TypeError, ValueError) as exc:
            message = f"node is not JSON-serialisable: {preview(value)} ({exc})"
            raise InvalidNodeError(message) from exc
        if not content.isascii():
            check_text(content, what="node", error=InvalidNodeError, locate=mapping)
        node = parse_canonical(content)
        _check_references(node)
    if "@id" in node:
        validate_iri(node["@id"], what="@id")
    return node, content, tuple(node_types(node)), depth


def _loads(text: str | bytes | bytearray, max_depth: int) -> Any:
    """Parse JSON text; text nested too deep for the (recursive) decoder is refused as such."""
    try:
        return json.loads(text)
    except RecursionError:
        raise NodeTooDeepError(
            f"node nests too deep to parse, over the limit of {max_depth} levels"
            f" (StoreConfig.max_depth): {preview(text)}"
        ) from None
    except (ValueError, UnicodeDecodeError) as exc:
        raise InvalidNodeError(f"node is not valid JSON: {preview(text)} ({exc})") from exc


def nesting_depth(value: object, limit: int, *, what: str = "node") -> int:
    """Return how deep ``value`` nests (a scalar 0, ``{}`` 1, ``{"a": []}`` 2 ...), iteratively.

    Dicts, lists and tuples count as levels (the JSON encoder writes tuples as arrays).

    Raises:
        NodeTooDeepError: ``value`` nests deeper than ``limit``; the walk stops there.
    """
    level: list[Any] = [value] if isinstance(value, (dict, list, tuple)) else []
    depth = 0
    while level:
        depth += 1
        if depth > limit:
            setting = "MAX_DEPTH_CEILING" if limit == MAX_DEPTH_CEILING else "StoreConfig.max_depth"
            raise NodeTooDeepError(
                f"{what} nests more than {limit} levels deep, over the limit of {limit}"
                f" ({setting}): {preview(value)}"
            )
        below: list[Any] = []
        for container in level:
            items = container.values() if isinstance(container, dict) else container
            below += [item for item in items if isinstance(item, (dict, list, tuple))]
        level = below
    return depth


def check_string_keys(
    value: object, *, what: str, error: type[InvalidInputError] = InvalidInputError
) -> None:
    """Refuse a mapping anywhere in ``value`` with a key that is not a string, iteratively.

    JSON's keys are strings: the encoder would write ``1``, ``True`` or ``None`` as ``"1"``,
    ``"true"``, ``"null"``, changing what is kept, and ``{1: "a", "1": "b"}`` would lose one.

    Raises:
        InvalidInputError: (or ``error``) naming the key and the mapping holding it.
    """
    stack: list[Any] = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, Mapping):
            for key, inner in item.items():
                if type(key) is not str:
                    raise error(
                        f"{what} holds a key that is not a string, {preview(key)}, in"
                        f" {preview(item)}: JSON keys are strings"
                    )
                if isinstance(inner, (Mapping, list, tuple)):
                    stack.append(inner)
        elif isinstance(item, (list, tuple)):
            stack += [inner for inner in item if isinstance(inner, (Mapping, list, tuple))]


def _check_references(node: Node) -> None:
    """Refuse a string ``@id`` nested in the node that is not a usable IRI."""
    stack: list[Any] = [v for k, v in node.items() if k != "@id"]
    while stack:
        item = stack.pop()
        if type(item) is dict:
            target = item.get("@id")
            if isinstance(target, str):
                validate_iri(target, what="a referenced @id")
            stack += item.values()
        elif type(item) is list:
            stack += item


def _fast_canonical(
    mapping: dict[str, Any], max_depth: int = MAX_DEPTH_CEILING
) -> tuple[Node, str, int] | None:
    """The node, its canonical JSON and its depth by orjson, when that is ``canonical_json``'s.

    Exact for the plain JSON types orjson and the standard encoder write alike: str keys, str,
    int (64-bit), bool, None, dict and list. A float (orjson writes exponents differently), any
    other type (orjson would accept a datetime or a UUID the standard encoder refuses), an
    encoding error (a lone surrogate, over 255 levels), a node deeper than ``max_depth`` or a
    nested ``@id`` that may be no IRI sends the node down the standard path, which decides.
    Never raises.
    """
    try:
        raw = orjson.dumps(mapping, option=_ORJSON_OPTIONS)
    except (orjson.JSONEncodeError, TypeError):
        return None
    depth = _plain_depth(mapping, max_depth)
    if depth < 0:
        return None
    node: Node = orjson.loads(raw)
    return node, raw.decode(), depth


def _plain_depth(mapping: dict[str, Any], limit: int) -> int:
    """The depth of ``mapping`` if the fast path may take it, else -1.

    It may when the mapping nests at most ``limit`` deep, holds only dicts, lists, str, int,
    bool and None, and each nested string ``@id`` is printable without spaces. Run on what
    orjson has just written: it has refused non-str keys, ints beyond 64 bits and lone
    surrogates, so none is checked again here. Walks level by level, without recursion.
    """
    for item in mapping.values():  # a flat mapping (most nodes): scalars only, depth 1
        kind = type(item)
        if not (kind is str or kind is int or kind is bool or item is None):
            break
    else:
        return 1 if limit >= 1 else -1
    level: list[Any] = [mapping]
    depth = 0
    while level:
        depth += 1
        if depth > limit:
            return -1
        below: list[Any] = []
        push = below.append
        for container in level:
            if type(container) is dict:
                if depth > 1 and "@id" in container:
                    target = container["@id"]
                    if type(target) is str and (
                        not target or " " in target or not target.isprintable()
                    ):
                        return -1
                container = container.values()
            for item in container:
                kind = type(item)
                if kind is str or kind is int or kind is bool or item is None:
                    continue
                if kind is dict or kind is list:
                    push(item)
                else:
                    return -1
        level = below
    return depth


def validate_iri(value: object, *, what: str = "IRI") -> str:
    """Return ``value`` if it is a usable IRI: non-empty, no whitespace, no control character.

    Raises:
        InvalidNodeError: ``value`` is not a string, is empty, or holds whitespace, a control
            character or a lone surrogate (the message says which, and where).
    """
    if not isinstance(value, str):
        raise InvalidNodeError(
            f"{what} must be a string, got {type(value).__name__}: {preview(value)}"
        )
    # Printable text holds no whitespace but the space, no control character, no surrogate:
    # only other text needs the character-by-character look.
    if value and " " not in value and value.isprintable():
        return value
    if not value:
        raise InvalidNodeError(f"{what} must be non-empty, got {preview(value)}")
    for position, char in enumerate(value):
        kind = unicodedata.category(char)
        if _SPACE.match(char) or kind in ("Cc", "Cs"):
            name = "a lone surrogate" if kind == "Cs" else "whitespace or a control character"
            raise InvalidNodeError(
                f"{what} must contain no whitespace, control character or lone surrogate, got"
                f" {name} {char!r} at position {position} of {preview(value)}"
            )
    return value


def check_iris(iris: object, *, what: str = "IRIs") -> list[str]:
    """Return the distinct IRIs of a list of them, in order, each checked by ``validate_iri``."""
    if isinstance(iris, (str, bytes)) or not isinstance(iris, Sequence):
        raise InvalidInputError(f"{what} must be a list of strings, got {preview(iris)}")
    for iri in iris:
        if type(iri) is not str or " " in iri or not iri.isprintable() or not iri:
            validate_iri(iri, what=f"each of {what}")
    return list(dict.fromkeys(iris))


def check_text(
    value: object,
    *,
    what: str,
    error: type[InvalidInputError] = InvalidInputError,
    locate: object = None,
) -> str:
    """Return ``value`` if it is a string that encodes as UTF-8 (it holds no lone surrogate).

    Any other character is allowed: text may hold newlines, tabs or NUL.

    Args:
        value: the string to check.
        what: what the string is, for the message (``"turn content"``).
        error: the class raised.
        locate: a structure the string was serialised from: the message then names the key or
            value (by its path) that holds the surrogate.
    """
    if not isinstance(value, str):
        raise error(f"{what} must be a string, got {type(value).__name__}: {preview(value)}")
    if value.isascii():
        return value
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        where = _surrogate_path(locate) if locate is not None else None
        at = f" in {where}" if where else f" at position {exc.start}"
        raise error(
            f"{what} holds a lone surrogate {value[exc.start]!r}{at}: {preview(locate or value)}"
            " (text must be valid Unicode; decode bytes with errors='replace' first)"
        ) from exc
    return value


def _surrogate_path(value: object) -> str | None:
    """Return the path (``$.a[2]`` or a key) of the first string in ``value`` that is no UTF-8."""
    stack: list[tuple[str, object]] = [("$", value)]
    while stack:
        path, item = stack.pop()
        if isinstance(item, str):
            if not encodes_as_utf8(item):
                return path
        elif isinstance(item, Mapping):
            for key, inner in item.items():
                if isinstance(key, str) and not encodes_as_utf8(key):
                    return f"the key {key!r} of {path}"
                stack.append((f"{path}.{key}", inner))
        elif isinstance(item, (list, tuple)):
            stack += [(f"{path}[{i}]", inner) for i, inner in enumerate(item)]
    return None


def encodes_as_utf8(text: str) -> bool:
    """Return whether ``text`` encodes as UTF-8, that is, holds no lone surrogate."""
    if text.isascii():
        return True
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


# Besides control characters and surrogates, labels refuse the line and paragraph separators:
# a label is one line. Format characters (a zero-width joiner in an emoji, a direction mark) and
# other spaces (no-break space) are allowed: names in many scripts need them.
_LABEL_REFUSED = frozenset({"Cc", "Cs", "Zl", "Zp"})


def label_problem(value: object) -> str | None:
    """Return why ``value`` cannot be a tag, type or graph name, or ``None`` if it can."""
    if not isinstance(value, str):
        return f"a {type(value).__name__}, not a string"
    if value.isprintable():  # the usual case: no control character, no surrogate
        return None if value.strip() else "blank"
    if not value.strip():
        return "blank"
    for position, char in enumerate(value):
        kind = unicodedata.category(char)
        if kind in _LABEL_REFUSED:
            name = "a lone surrogate" if kind == "Cs" else "a control character or line break"
            return f"{name} {char!r} at position {position}"
    return None


def check_label(value: object, *, what: str) -> str:
    """Return ``value`` if it can be a tag, a type or a named graph (see ``label_problem``).

    Raises:
        InvalidInputError: the message names the value and what is wrong with it.
    """
    problem = label_problem(value)
    if problem is not None:
        raise InvalidInputError(
            f"{what} must be a non-empty string without control characters or lone surrogates,"
            f" got {problem}: {preview(value)}"
        )
    return value  # type: ignore[return-value]  # label_problem checked it is a str


def is_label(value: object) -> bool:
    """Return whether ``value`` can be a tag, a type or a named graph (see ``label_problem``)."""
    return label_problem(value) is None


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
    if not isinstance(values, list):
        raise InvalidNodeError(f"@type must be a string or a list of strings, got {preview(raw)}")
    for value in values:
        problem = label_problem(value)
        if problem is not None:
            raise InvalidNodeError(
                "@type must be a string or a list of non-empty strings without control"
                f" characters or lone surrogates, got {problem} in {preview(raw)}"
            )
    return list(dict.fromkeys(values))


def node_context(node: Mapping[str, Any]) -> str | None:
    """Return the node's ``@context`` serialised as JSON text, or ``None``."""
    if "@context" not in node:
        return None
    return canonical_json({"@context": node["@context"]})[len('{"@context":') : -1]


def node_facets(
    node: Mapping[str, Any], keep: Callable[[str], bool] | None = None
) -> tuple[list[tuple[str, str]], str]:
    """Return the node's references and searchable text, walking the node once.

    A plain tuple, not a named one: the store calls this for every node it writes.

    ``references`` are the sorted ``(predicate, target IRI)`` pairs for every ``{"@id": ...}``
    the node refers to, in lists and embedded objects too; the predicate is the key the
    reference sits under, and self-references are left out. ``text`` is the node's string and
    number values joined by newlines, in key order. With ``keep``, the text is the strings
    ``keep`` accepts instead, numbers left out, and nothing under a keyword other than
    ``@value`` (``gliding_core.fields``' text-like text, in the same walk as the references).
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
            if value and (keep is None or (_texty(key) and keep(value))):
                parts.append(value)
        elif kind is dict and len(value) == 1 and "@id" in value:
            # A bare reference, {"@id": ...}: the other common value, also without a call.
            target = value["@id"]
            if isinstance(target, str) and target and target != own:
                found[(key, target)] = None
        else:
            into = parts if keep is None or _texty(key) else None
            _walk(key, value, own, found, into, keep)
    references = sorted(found) if len(found) > 1 else list(found)
    return references, "\n".join(parts)


def _texty(key: str) -> bool:
    """Whether a value under ``key`` can be text-like (not under a keyword but ``@value``)."""
    return not key.startswith("@") or key == "@value"


def _walk(
    key: str,
    value: Any,
    own: object,
    found: dict[tuple[str, str], None],
    parts: list[str] | None,
    keep: Callable[[str], bool] | None,
) -> None:
    """Collect the references and text under ``value`` depth first, in key order, iteratively.

    ``parts`` is ``None`` under a key whose values are not text (see ``node_facets``).
    """
    stack: list[tuple[str, Any, list[str] | None]] = [(key, value, parts)]
    while stack:
        key, value, into = stack.pop()
        if isinstance(value, str):
            if value and into is not None and (keep is None or keep(value)):
                into.append(value)
        elif isinstance(value, dict):
            target = value.get("@id")
            if isinstance(target, str) and target and target != own:
                found[(key, target)] = None
            inner = [
                (k, v, into if keep is None or _texty(k) else None)
                for k, v in value.items()
                if k not in _RESERVED_TEXT_KEYS
            ]
            stack += reversed(inner)
        elif isinstance(value, list):
            stack += reversed([(key, item, into) for item in value])
        elif (
            keep is None
            and into is not None
            and isinstance(value, (int, float))
            and not isinstance(value, bool)
        ):
            into.append(str(value))


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
