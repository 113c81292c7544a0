"""Base: the checks every layer runs on what it is given, and a JSON value walked within limits.

``check_real``, ``check_count`` and ``check_list`` return a number, a count or a list when the
value is one, and otherwise raise an ``InvalidInputError`` naming the value (settings, L0
records, search filters, the blackboard's batches and the views all use them).

What a model sends (a tool call's arguments, the calls in its reply) reaches code that spends
one interpreter frame per level of nesting (``json.dumps``, ``repr``, pydantic) or time per
character (a tokenizer). ``check_json_value`` looks at such a value first and refuses it, with
an ``InvalidInputError`` naming where, at the first of:

- a container nested deeper than ``limits.depth`` (the value itself is level 1);
- more than ``limits.values`` keys, items and scalars in all (a container's size is counted
  before its items are, so a list of millions is refused without being walked);
- more than ``limits.chars`` characters of text (keys and strings together);
- something JSON has not: a key that is no string, a float that is not finite, an integer
  beyond 64 bits, text holding a lone surrogate, any other type (a tuple, bytes, an object).

Its users: ``tools.arguments`` (a tool call's arguments, before a tool reads them) and
``framing`` (the calls a message record keeps, before a view counts them or the archive stores
them).

Invariants: the walk visits at most ``limits.values`` values and ``limits.depth`` levels,
whatever it is given, so it never exhausts the stack or the time; it raises nothing but
``InvalidInputError``; it changes nothing.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from typing import Any

from gliding_core.errors import InvalidInputError
from gliding_core.jsonld import check_text, preview

_INT_RANGE = range(-(2**63), 2**63)  # SQLite's INTEGER
_PATH = 80  # the longest path a message shows
# Where a value is: ``None`` for the value walked, else its container's place and its key.
_Place = tuple[Any, "str | int"] | None


def check_real(value: object, *, what: str) -> float:
    """Return ``value`` as a float if it is a finite real number (not a bool).

    Any ``numbers.Real`` counts: ``int``, ``float``, ``fractions.Fraction`` and numpy's scalar
    types (a ``float32`` as well as a ``float64``).

    Raises:
        InvalidInputError: the message names ``what`` and the value.
    """
    if type(value) is float:
        number = value
    elif isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise InvalidInputError(f"{what} must be a real number, got {preview(value)}")
    else:
        try:
            number = float(value)
        except (TypeError, ValueError, OverflowError) as exc:
            raise InvalidInputError(f"{what} must be a real number, got {preview(value)}") from exc
    if not math.isfinite(number):
        raise InvalidInputError(f"{what} must be finite, got {preview(value)}")
    return number


def check_count(value: object, *, what: str, minimum: int) -> int:
    """Return ``value`` if it is an int (not a bool) of at least ``minimum``.

    Raises:
        InvalidInputError: the message names ``what`` and the value.
    """
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise InvalidInputError(f"{what} must be an int >= {minimum}, got {preview(value)}")
    return value


def check_list(value: object, *, what: str) -> list[Any]:
    """Return ``value`` as a list if it is a list, a tuple, a set or another sequence or set.

    A string (or bytes) is refused, though it is a sequence: its characters would be taken for
    the items, and the error would name the first one instead of the value. A mapping, an
    iterator (used up by a look) or a scalar is refused too.

    Raises:
        InvalidInputError: the message names ``what`` and the value.
    """
    if type(value) is list:  # most calls: no abstract-type check
        return value
    if type(value) is tuple or (
        isinstance(value, (Sequence, AbstractSet))
        and not isinstance(value, (str, bytes, bytearray))
    ):
        return list(value)
    raise InvalidInputError(f"{what} must be a list (or a tuple, a set), got {preview(value)}")


@dataclass(frozen=True, slots=True)
class JsonLimits:
    """The limits of one kind of JSON value.

    Attributes:
        depth: how deep containers may nest (the value itself is level 1).
        values: how many keys, items and scalars it may hold in all.
        chars: how many characters of text (keys and strings) it may hold.
        name: what a message calls these limits (``"the limit for tool arguments"``).
    """

    depth: int
    values: int
    chars: int
    name: str


def check_json_value(value: object, limits: JsonLimits, *, what: str) -> None:
    """Refuse ``value`` if it is over ``limits`` or holds what JSON has not; walk it iteratively.

    Args:
        value: the value (a mapping or a list; a scalar is checked as one).
        limits: its limits.
        what: what it is, as the subject of a plural verb (``"the arguments of read_node"``).

    Raises:
        InvalidInputError: the first problem found, with the path (``$.a[2]``) where it is.
    """
    budget = _Budget(limits, what)
    # Each entry: a value, its level, and where it is (its container's place and its key or
    # index; ``None`` for the value itself), spelled out as a path only for a message.
    stack: list[tuple[Any, int, _Place]] = [(value, 1, None)]
    while stack:
        item, depth, place = stack.pop()
        kind = type(item)  # the exact JSON types first: a type check costs less than isinstance
        if kind is str:
            budget.text(item, place)
        elif kind is dict:
            stack += budget.members(item, place, depth)
        elif kind is list:
            stack += budget.items(item, place, depth)
        elif kind is int:
            if item not in _INT_RANGE:
                _check_number(item, place, what)
        elif kind is bool or item is None:
            continue
        elif isinstance(item, str):
            budget.text(item, place)
        elif isinstance(item, Mapping):
            stack += budget.members(item, place, depth)
        elif isinstance(item, list):
            stack += budget.items(item, place, depth)
        else:
            _check_number(item, place, what)


def _check_number(value: object, place: _Place, what: str) -> None:
    """Refuse a scalar that is no integer of 64 bits or finite float."""
    if isinstance(value, int):
        if value not in _INT_RANGE:
            raise InvalidInputError(
                f"{what} hold an integer out of range at {_path(place)} (integers must fit in"
                f" 64 bits): {preview(value)}"
            )
    elif isinstance(value, float):
        if not math.isfinite(value):
            raise InvalidInputError(
                f"{what} hold {value!r} at {_path(place)}, which JSON has not (numbers must be"
                " finite)"
            )
    else:
        raise InvalidInputError(
            f"{what} hold a {type(value).__name__} at {_path(place)}, no JSON value:"
            f" {preview(value)}"
        )


class _Budget:
    """What a walk over one value has spent of its limits."""

    __slots__ = ("chars", "limits", "values", "what")

    def __init__(self, limits: JsonLimits, what: str) -> None:
        self.limits = limits
        self.what = what
        self.values = 0
        self.chars = 0

    def enter(self, size: int, place: _Place, depth: int) -> None:
        limits = self.limits
        if depth > limits.depth:
            raise InvalidInputError(
                f"{self.what} nest more than {limits.depth} levels deep at {_path(place)}"
                f" ({limits.name}); send a flatter value"
            )
        self.values += size
        if self.values > limits.values:
            raise InvalidInputError(
                f"{self.what} hold more than {limits.values:,} values (at {_path(place)};"
                f" {limits.name}); send fewer"
            )

    def members(
        self, mapping: Mapping[Any, Any], place: _Place, depth: int
    ) -> list[tuple[Any, int, _Place]]:
        """Spend a mapping's size and its keys' text; return its values to walk."""
        self.enter(len(mapping), place, depth)
        below: list[tuple[Any, int, _Place]] = []
        for key, inner in mapping.items():
            if not isinstance(key, str):
                raise InvalidInputError(
                    f"{self.what} have a key that is no string at {_path(place)}:"
                    f" {preview(key)} (JSON object keys are strings)"
                )
            self.text(key, place)
            below.append((inner, depth + 1, (place, key)))
        return below

    def items(self, items: list[Any], place: _Place, depth: int) -> list[tuple[Any, int, _Place]]:
        """Spend a list's size; return its items to walk."""
        self.enter(len(items), place, depth)
        return [(inner, depth + 1, (place, index)) for index, inner in enumerate(items)]

    def text(self, value: str, place: _Place) -> None:
        self.chars += len(value)
        if self.chars > self.limits.chars:
            raise InvalidInputError(
                f"{self.what} hold more than {self.limits.chars:,} characters of text (at"
                f" {_path(place)}; {self.limits.name}); send less"
            )
        if not value.isascii():
            check_text(value, what=f"the text at {_path(place)} of {self.what}")


def _path(place: _Place) -> str:
    """The path (``$.a[2]``) of a place, cut to what a message can show."""
    steps: list[str | int] = []
    while place is not None:
        place, step = place
        steps.append(step)  # as many as the levels allowed: an error stops the walk there
    parts = ["$"]
    for step in reversed(steps):
        if isinstance(step, int):
            parts.append(f"[{step}]")
        elif step.isidentifier() and len(step) <= 40:
            parts.append(f".{step}")
        else:
            parts.append(f"[{preview(step)}]")
    path = "".join(parts)
    return path if len(path) <= _PATH else f"{path[: _PATH - 3]}..."
