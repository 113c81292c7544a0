"""L2: the checks of what callers pass to the coordination registries (names, seconds, choices).

Every registry validates its arguments with these before it opens a transaction, so a bad
value is refused naming it and nothing is written; every backend of the coordination store
then stores only values these accepted (no whitespace, no lone surrogate, bounded length).

Invariants: the checks read nothing but their arguments; each raises ``InvalidInputError``
naming the bad value.
"""

from __future__ import annotations

import re
from enum import Enum
from typing import TypeVar

from gliding_core.blackboard.validation import check_iri
from gliding_core.errors import InvalidInputError, InvalidNodeError
from gliding_core.jsonld import check_text, preview

MAX_NAME_LENGTH = 2_048
_SPACE = re.compile(r"\s")


def check_name(value: object, what: str) -> str:
    """Return ``value`` if it is a usable name or IRI: a non-empty string without whitespace,
    that every backend can store (no lone surrogate: ``jsonld.check_text``)."""
    if not isinstance(value, str) or not value or _SPACE.search(value) is not None:
        raise InvalidInputError(
            f"{what} must be a non-empty string without spaces, got {preview(value)}"
        )
    if len(value) > MAX_NAME_LENGTH:
        raise InvalidInputError(
            f"{what} is longer than {MAX_NAME_LENGTH} characters: {preview(value)}"
        )
    return check_text(value, what=what)


def check_task_iri(value: object, what: str, *, mirrored: bool) -> str:
    """Return ``value`` if it can name a task: a name (``check_name``), and an absolute IRI
    when ``mirrored``.

    A mirrored task is a node whose ``@id`` is its IRI (and an agent's node links to its task),
    so a name the graph cannot hold is refused here, before anything is written, instead of
    failing later in the mirror, where the failure is only logged. Without a mirror the
    registries keep the coordination store alone, and any name will do.

    Raises:
        InvalidInputError: ``value`` is not a name, or (mirrored) not an absolute IRI.
    """
    name = check_name(value, what)
    if mirrored:
        try:
            check_iri(name, what)
        except InvalidNodeError as exc:
            raise InvalidInputError(
                f"{what} must be an absolute IRI (such as 'urn:task:1') while tasks are "
                f"mirrored into the graph, got {preview(name)}"
            ) from exc
    return name


def check_seconds(value: object, what: str, *, allow_zero: bool = False) -> float:
    """Return ``value`` as a float if it is a finite number of seconds (> 0, or >= 0)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InvalidInputError(f"{what} must be a number of seconds, got {preview(value)}")
    seconds = float(value)
    low_ok = seconds >= 0 if allow_zero else seconds > 0
    if not low_ok or seconds != seconds or seconds == float("inf"):
        bound = ">= 0" if allow_zero else "> 0"
        raise InvalidInputError(f"{what} must be finite and {bound}, got {preview(value)}")
    return seconds


Choice = TypeVar("Choice", bound=Enum)


def parse_choice(kind: type[Choice], value: object, what: str) -> Choice:
    """Return ``value`` as a member of the enum ``kind``: a member, or its value in any case.

    Raises:
        InvalidInputError: ``value`` names no member (the message lists the known values).
    """
    if isinstance(value, kind):
        return value
    if isinstance(value, str):
        for member in kind:
            if str(member.value).lower() == value.lower():
                return member
    known = ", ".join(str(member.value) for member in kind)
    raise InvalidInputError(f"{what} must be one of {known}, got {preview(value)}")
