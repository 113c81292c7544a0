"""Base: index fields, which values of a node are its searchable text.

An entry's text is what both search arms see: the full-text index (BM25) of the L0 store and
the dense index (embeddings). ``indexed_text`` computes it, and every store and the dense index
call it, so the two arms always search the same text. What goes in it is set per entry by its
index fields (``IndexFields``):

- ``None``, the default: the node's text-like values (``is_text_like``), in key order;
- ``False``: nothing; the entry is found by ``get`` and by filters (tags, types, graph), never
  by a search;
- a tuple of field paths: every string and number the paths select, text-like or not, in the
  order of the paths (a path that selects a list or an object selects everything in it).

Field paths are LangGraph's (``BaseStore.put(index=[...])``): ``"text"``, a nested field
``"author.name"``, an element of a list ``"turns[0]"``, the last one ``"turns[-1]"``, each one
``"turns[*].text"``, and ``"$"``, the whole node (every string and number value: what every
entry was searched by before index fields existed). A key step on a list applies to each of its
elements (a JSON-LD property may hold one value or several). A key holding ``.``, ``[`` or ``]``
cannot be named. ``@id``, ``@context`` and ``@type`` are never text, wherever they are.

Text-like, generically: a string holding a letter that is not an IRI (``scheme:rest`` without
a space), not an identifier (one word holding a digit or one of ``@ / _ # \\``: ``D1:3``,
``a1b2``, a UUID, an e-mail address, a file path), and so not a number or a date written in
digits (``2023-05-07``, ``12:30``, ``2023-05-07T10:00Z``). Numbers and booleans are not
text-like, nor values under a JSON-LD keyword other than ``@value`` (``@language``). A date in
words (``8 May 2023``) is text-like: name the fields of such a type to leave it out.

Invariants: ``indexed_text`` is a pure function of the node and its index fields, and stays
so: the SQLite store's full-text index takes an entry's text out by giving the same text back,
so a change to ``is_text_like`` or to the path rules changes the text of stored entries and
must come with a store upgrade that rebuilds their text. Paths are checked (size, syntax,
count) before anything uses them.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from functools import lru_cache
from typing import Any, Literal

from gliding_core.errors import InvalidInputError
from gliding_core.jsonld import label_problem, node_facets, node_text, preview

IndexFields = Literal[False] | tuple[str, ...] | None
"""What an entry's text is made of: ``None`` the text-like values, ``False`` nothing, or the
values the field paths select."""

WHOLE = "$"
LEGACY: IndexFields = (WHOLE,)
"""Every string and number value: the text of entries stored before index fields existed."""

MAX_PATHS = 64  # per entry or per type: a node has a handful of text fields
MAX_PATH_CHARS = 512
MAX_STEPS = 32

_STEP = re.compile(r"([^.\[\]]+)((?:\[(?:-?\d{1,9}|\*)\])*)")
_INDEX = re.compile(r"\[(-?\d{1,9}|\*)\]")
_NEVER = frozenset({"@id", "@context", "@type"})
_LETTER = re.compile(r"[^\W\d_]")
_SPACE = re.compile(r"\s")
_IRI = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*:\S")
_ID_MARK = re.compile(r"[\d@/_#\\]")

Step = str | int | None
"""One step of a path: a key, a list position (negative from the end), or ``None``: each one."""


def is_text_like(value: str) -> bool:
    """Return whether a string is text rather than an IRI, an identifier, a number or a date.

    See the module docstring for the rule.
    """
    if value.isalpha():
        return True  # one word of letters: the common case, without a search
    if _LETTER.search(value) is None:
        return False
    if " " in value or _SPACE.search(value) is not None:  # words: most text, without a search
        return True
    return _IRI.match(value) is None and _ID_MARK.search(value) is None  # one word


def indexed_text(node: Mapping[str, Any], fields: IndexFields) -> str:
    """Return the searchable text of ``node`` under its index fields (see the module).

    Texts are joined by newlines. ``fields`` must have been checked (``check_index``).
    """
    if fields is None:
        return node_facets(node, is_text_like)[1]
    if fields is False:
        return ""
    if fields == LEGACY:
        return node_text(node)
    out: list[str] = []
    for path in fields:
        for value in select(node, path):
            _every(value, out)
    return "\n".join(out)


def indexed_facets(
    node: Mapping[str, Any], fields: IndexFields
) -> tuple[list[tuple[str, str]], str]:
    """Return the node's references (``node_facets``) and its ``indexed_text``.

    One walk of the node for the default and the legacy fields: the store calls this for
    every node it writes.
    """
    if fields is None:
        return node_facets(node, is_text_like)
    references, whole = node_facets(node)
    return references, whole if fields == LEGACY else indexed_text(node, fields)


def select(node: Mapping[str, Any], path: str) -> list[Any]:
    """Return the values ``path`` selects in ``node``, in document order."""
    if path == WHOLE:
        return [node]
    values: list[Any] = [node]
    for step in parse_path(path):
        values = [found for value in values for found in _step(value, step)]
    return values


def _step(value: Any, step: Step) -> list[Any]:
    if isinstance(step, str):
        if isinstance(value, dict):
            return [value[step]] if step in value and step not in _NEVER else []
        if isinstance(value, list):
            return [v[step] for v in value if isinstance(v, dict) and step in v]
        return []
    if not isinstance(value, list):
        return []
    if step is None:
        return list(value)
    return [value[step]] if -len(value) <= step < len(value) else []


def _every(value: Any, parts: list[str]) -> None:
    """Append every string and number under ``value`` to ``parts`` (the keywords left out)."""
    stack: list[Any] = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            if item:
                parts.append(item)
        elif isinstance(item, dict):
            stack += reversed([v for k, v in item.items() if k not in _NEVER])
        elif isinstance(item, list):
            stack += reversed(item)
        elif isinstance(item, (int, float)) and not isinstance(item, bool):
            parts.append(str(item))


# -- checking ------------------------------------------------------------------------------------


@lru_cache(maxsize=4_096)
def parse_path(path: str) -> tuple[Step, ...]:
    """Return the steps of a field path.

    Raises:
        InvalidInputError: the path is malformed, too long or too deep (named in the message).
    """
    if path == WHOLE:
        return ()
    if len(path) > MAX_PATH_CHARS:
        raise InvalidInputError(
            f"index field {preview(path)} is {len(path)} characters, over {MAX_PATH_CHARS}"
        )
    steps: list[Step] = []
    for piece in path.split("."):
        match = _STEP.fullmatch(piece)
        if match is None or match.group(1).strip() != match.group(1):
            raise InvalidInputError(
                f"index field {preview(path)} is not a field path at {preview(piece)}: use"
                " 'key', 'a.b', 'list[0]', 'list[-1]', 'list[*].key' or '$'"
            )
        key = match.group(1)
        if key in _NEVER:
            raise InvalidInputError(f"index field {preview(path)} names {key}, which is never text")
        steps.append(key)
        for position in _INDEX.findall(match.group(2)):
            steps.append(None if position == "*" else int(position))
    if len(steps) > MAX_STEPS:
        raise InvalidInputError(
            f"index field {preview(path)} has {len(steps)} steps, over {MAX_STEPS}"
        )
    return tuple(steps)


def check_index(value: object, *, what: str = "index") -> IndexFields:
    """Return an ``index`` argument as ``IndexFields``: ``None``/``True`` the default,
    ``False`` nothing, or a non-empty list (or tuple) of field paths, each once.

    Raises:
        InvalidInputError: anything else, a path that is not a string or is malformed, or
            more than ``MAX_PATHS`` paths (the bad value named).
    """
    if value is None or value is True:
        return None
    if value is False:
        return False
    if isinstance(value, (str, bytes)) or not isinstance(value, (list, tuple)):
        raise InvalidInputError(
            f"{what} must be False, None or a list of field paths, got {preview(value)}"
        )
    if not value:
        raise InvalidInputError(f"{what} is an empty list: give field paths, or False")
    if len(value) > MAX_PATHS:
        raise InvalidInputError(f"{what} has {len(value)} field paths, over {MAX_PATHS}")
    for path in value:
        if not isinstance(path, str) or not path:
            raise InvalidInputError(f"{what} holds {preview(path)}: not a field path")
        parse_path(path)
    return tuple(dict.fromkeys(value))


def check_by_type(value: object) -> dict[str, Literal[False] | tuple[str, ...]]:
    """Return a per-``@type`` table of index fields: type -> ``False`` or field paths.

    Raises:
        InvalidInputError: not a mapping, a type that is not a label, or a value that is not
            ``False`` or a list of field paths (named in the message).
    """
    if not isinstance(value, Mapping):
        raise InvalidInputError(
            f"index fields by type must be a mapping of @type to paths, got {preview(value)}"
        )
    out: dict[str, Literal[False] | tuple[str, ...]] = {}
    for key, fields in value.items():
        problem = label_problem(key)
        if problem is not None:
            raise InvalidInputError(
                f"index fields by type: the @type {preview(key)} is not a label ({problem})"
            )
        checked = check_index(fields, what=f"index fields of @type {key!r}")
        if checked is None:
            raise InvalidInputError(
                f"index fields of @type {key!r} must be False or a list of field paths,"
                f" got {preview(fields)}"
            )
        out[key] = checked
    return out


def unselected(node: Mapping[str, Any], fields: IndexFields) -> list[str]:
    """Return the paths of ``fields`` that select nothing in ``node`` (a misspelt field)."""
    if not isinstance(fields, tuple):
        return []
    return [path for path in fields if not select(node, path)]


def for_types(
    types: Sequence[str], by_type: Mapping[str, Literal[False] | tuple[str, ...]]
) -> IndexFields:
    """Return the index fields the per-type table gives an entry of ``types``.

    ``None`` (the default) when no type is in the table; the paths of every listed type,
    united in the order of the types; ``False`` when every listed type says ``False``.
    """
    found = [by_type[t] for t in types if t in by_type]
    if not found:
        return None
    paths = [path for fields in found if fields is not False for path in fields]
    return tuple(dict.fromkeys(paths)) if paths else False


# -- stored form ---------------------------------------------------------------------------------

DERIVED = "~"
"""Marks stored index fields that the entry's types gave (or ``LEGACY``), not a write: a later
write without ``index`` decides them again, where it keeps those a write gave."""


def encode(fields: IndexFields, *, derived: bool = False) -> str | None:
    """Return index fields as stored beside an entry: ``None`` for the default, else JSON
    (after ``DERIVED`` when they were not given by a write)."""
    if fields is None:
        return None
    text = json.dumps(fields if fields is False else list(fields), separators=(",", ":"))
    return DERIVED + text if derived else text


def given(stored: str | None) -> bool:
    """Whether stored index fields were given by a write (see ``DERIVED``)."""
    return stored is not None and not stored.startswith(DERIVED)


@lru_cache(maxsize=1_024)
def decode(stored: object) -> IndexFields:
    """Return the index fields stored as ``stored`` (see ``encode``).

    ``stored`` is whatever the row holds: a damaged one may hold anything (SQLite keeps a
    number or bytes in a text column).

    Raises:
        InvalidInputError: the stored form is not one ``encode`` writes (a damaged row).
    """
    if stored is None:
        return None
    if not isinstance(stored, str):
        raise InvalidInputError(f"the stored index fields are not text: {preview(stored)}")
    try:
        value = json.loads(stored.removeprefix(DERIVED))
    except ValueError:
        value = stored
    except RecursionError:
        raise InvalidInputError(
            f"the stored index fields nest too deep: {preview(stored)}"
        ) from None
    return check_index(value, what="the stored index fields")
