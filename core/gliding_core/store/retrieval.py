"""L0: what a retriever reads by default, and metadata filters in the frameworks' dict style.

Both adapters' retrievers take their defaults and their filter translation from here, so they
cannot drift: ``DEFAULT_K`` results; knowledge entries only (``knowledge_filters``: no chat
turn, chat message or supplementary input) unless chat turns are asked for; and a metadata
filter written as langchain-chroma writes one (a LlamaIndex ``MetadataFilters`` is converted to
this form by its adapter) becomes one ``SearchFilters``.

The dict form (``filters_from_dict``): ``{"tags": "decision"}`` is equality; an operator dict
(``{"importance": {"$gte": 0.5}}``) applies operators; ``{"$and": [...]}`` and ``{"$or": [...]}``
nest; several keys in one dict are joined with AND. The fields are those of a result's
metadata that L0 filters on:

==============  ================================================================
field           operators
==============  ================================================================
``tags``        ``$eq`` / ``$contains`` (carries it), ``$in`` (any of), ``$all``,
                ``$ne`` / ``$nin`` (carries none of)
``types``       ``$eq`` / ``$contains``, ``$in`` (any of), ``$ne`` / ``$nin``
``named_graph`` ``$eq``, ``$in``
``importance``  ``$eq``, ``$gt``, ``$gte``, ``$lt``, ``$lte``
``created_at``  ``$eq``, ``$gt``, ``$gte``, ``$lt``, ``$lte`` (UNIX seconds)
==============  ================================================================

Invariants: a filter that L0 cannot express exactly is refused with ``InvalidInputError``
naming the bad key, operator or value, never approximated; strict bounds are exact (the next
float after the bound); the translation is pure (no store access).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

from gliding_core.errors import InvalidInputError
from gliding_core.jsonld import preview
from gliding_core.store.filters import MAX_NESTING, SearchFilters
from gliding_core.store.scope import UNREAD_TYPES

DEFAULT_K = 4  # results per query, in both adapters (LangChain's vector-store default)

# The JSON-LD types of conversation records: an L1 turn archive, a LangChain chat message.
CHAT_TYPES = ("Turn", "ChatMessage")

FIELDS = ("tags", "types", "named_graph", "importance", "created_at")
_LABEL_OPERATORS = {
    "tags": ("$eq", "$contains", "$in", "$all", "$ne", "$nin"),
    "types": ("$eq", "$contains", "$in", "$ne", "$nin"),
    "named_graph": ("$eq", "$in"),
}
_RANGE_OPERATORS = ("$eq", "$gt", "$gte", "$lt", "$lte")
_RANGES = {"importance": ("min_importance", "max_importance"), "created_at": ("since", "until")}


def knowledge_filters(*, include_turns: bool = False) -> SearchFilters:
    """Return the filter of what a retriever reads by default: knowledge, not conversation.

    Args:
        include_turns: also read chat turns and chat messages (supplementary inputs never).
    """
    excluded = UNREAD_TYPES if include_turns else (*CHAT_TYPES, *UNREAD_TYPES)
    return SearchFilters(exclude_types=excluded)


def check_k(value: object, what: str = "k") -> int:
    """Return ``value`` when it is an int >= 1.

    Raises:
        InvalidInputError: it is not (the message names it).
    """
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise InvalidInputError(f"{what} must be an int >= 1, got {preview(value)}")
    return value


def combine(*parts: SearchFilters | None) -> SearchFilters:
    """Return the filter that passes what every given filter passes (``None`` passes all)."""
    given = tuple(part for part in parts if part is not None and not part.empty)
    if not given:
        return SearchFilters()
    return given[0] if len(given) == 1 else SearchFilters(all_of=given)


def filters_from_dict(spec: object) -> SearchFilters:
    """Return the ``SearchFilters`` of a metadata filter in langchain-chroma's dict style.

    Raises:
        InvalidInputError: ``spec`` is not a dict, or names a field, operator or value that L0
            cannot filter on exactly (the message names it).
    """
    return _from_dict(spec, 1)


def _from_dict(spec: object, level: int) -> SearchFilters:
    """``filters_from_dict`` of a filter ``level`` deep in ``$and`` / ``$or`` (1: the top)."""
    if not isinstance(spec, Mapping) or not all(isinstance(key, str) for key in spec):
        raise InvalidInputError(f"a filter must be a dict with string keys, got {preview(spec)}")
    parts = [_clause(key, value, level) for key, value in spec.items()]
    return combine(*parts)


def _clause(key: str, value: object, level: int) -> SearchFilters:
    if key in ("$and", "$or"):
        if not isinstance(value, (list, tuple)) or not value:
            raise InvalidInputError(
                f"{key} takes a non-empty list of filters, got {preview(value)}"
            )
        if level >= MAX_NESTING:  # refused before recursing, however deep it goes on
            raise InvalidInputError(
                f"filters nest more than {MAX_NESTING} levels deep ($and, $or): {preview(value)}"
            )
        nested = tuple(_from_dict(item, level + 1) for item in value)
        return SearchFilters(all_of=nested) if key == "$and" else SearchFilters(any_of=nested)
    if key not in FIELDS:
        raise InvalidInputError(
            f"cannot filter on {key!r}: L0 filters on {', '.join(FIELDS)}, $and and $or"
        )
    conditions = value if _is_operator_dict(value) else {"$eq": value}
    assert isinstance(conditions, Mapping)
    return combine(*(_condition(key, op, arg) for op, arg in conditions.items()))


def _is_operator_dict(value: object) -> bool:
    return isinstance(value, Mapping) and any(str(k).startswith("$") for k in value)


def _condition(field: str, operator: object, argument: object) -> SearchFilters:
    allowed = _LABEL_OPERATORS.get(field, _RANGE_OPERATORS)
    if operator not in allowed:
        raise InvalidInputError(
            f"{field} takes the operators {', '.join(allowed)}, got {preview(operator)}"
        )
    if field in _RANGES:
        return _range(field, str(operator), argument)
    return _LABEL_BUILDERS[(field, str(operator))](_labels(field, operator, argument))


def _labels(field: str, operator: object, argument: object) -> tuple[str, ...]:
    several = operator in ("$in", "$all", "$nin")
    items = argument if several else [argument]
    if isinstance(items, str) or not isinstance(items, (list, tuple)) or not items:
        raise InvalidInputError(
            f"{field} {operator} takes a non-empty list of strings, got {preview(argument)}"
        )
    if not all(isinstance(item, str) and item for item in items):
        raise InvalidInputError(
            f"{field} {operator} compares with non-empty strings, got {preview(argument)}"
        )
    return tuple(items)


_LABEL_BUILDERS: dict[tuple[str, str], Callable[[tuple[str, ...]], SearchFilters]] = {
    ("tags", "$eq"): lambda v: SearchFilters(tags_all=v),
    ("tags", "$contains"): lambda v: SearchFilters(tags_all=v),
    ("tags", "$all"): lambda v: SearchFilters(tags_all=v),
    ("tags", "$in"): lambda v: SearchFilters(tags_any=v),
    ("tags", "$ne"): lambda v: SearchFilters(exclude_tags=v),
    ("tags", "$nin"): lambda v: SearchFilters(exclude_tags=v),
    ("types", "$eq"): lambda v: SearchFilters(types=v),
    ("types", "$contains"): lambda v: SearchFilters(types=v),
    ("types", "$in"): lambda v: SearchFilters(types=v),
    ("types", "$ne"): lambda v: SearchFilters(exclude_types=v),
    ("types", "$nin"): lambda v: SearchFilters(exclude_types=v),
    ("named_graph", "$eq"): lambda v: SearchFilters(named_graph=v[0]),
    ("named_graph", "$in"): lambda v: SearchFilters(named_graphs=v),
}


def _range(field: str, operator: str, argument: object) -> SearchFilters:
    if isinstance(argument, bool) or not isinstance(argument, (int, float)):
        raise InvalidInputError(
            f"{field} {operator} compares with a number, got {preview(argument)}"
        )
    try:
        bound = float(argument)
    except OverflowError:  # an int beyond any float
        bound = math.inf
    if not math.isfinite(bound):
        raise InvalidInputError(
            f"{field} {operator} needs a finite number, got {preview(argument)}"
        )
    low_name, high_name = _RANGES[field]
    low = {"$eq": bound, "$gte": bound, "$gt": math.nextafter(bound, math.inf)}.get(operator)
    high = {"$eq": bound, "$lte": bound, "$lt": math.nextafter(bound, -math.inf)}.get(operator)
    options: dict[str, Any] = {}
    if low is not None:
        options[low_name] = low
    if high is not None:
        options[high_name] = high
    return SearchFilters(**options)
