"""L0: what the SQL stores share: the entry columns, a row read back as an ``Entry``, and the
checks of the arguments their queries take.

Both stores (SQLite, PostgreSQL) name the entries table's columns alike and select them in the
order of ``COLUMNS``, so one function turns a row into an ``Entry``. Tags and types are stored
joined by ``staging.SEPARATOR``.

Invariant: every check returns the value it was given (or its clean form) or raises
``InvalidInputError`` naming it; none touches a database.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from gliding_core.errors import InvalidInputError
from gliding_core.jsonld import check_text, preview
from gliding_core.store.entry import Entry, MesiState
from gliding_core.store.filters import prefix_bound as prefix_bound
from gliding_core.store.staging import SEPARATOR

COLUMNS = (
    "iri, content, importance, access_count, created_at, last_accessed, updated_at, tags, "
    "metadata, mesi_state, content_hash, named_graph, jsonld_context, jsonld_types, generation"
)
QUALIFIED = ", ".join(f"e.{name.strip()}" for name in COLUMNS.split(","))
"""``COLUMNS`` on the alias ``e`` of the entries table."""

ACCESS_POSITIONS = {"iri": 0, "count": 3, "last": 5}
"""Where a row of ``COLUMNS`` holds the IRI, the access count and the last access time."""

LARGEST_LIMIT = 2**63 - 1  # the largest 64-bit integer: a larger limit means no limit

_STATES = {state.value: state for state in MesiState}


def to_entry(row: Sequence[Any]) -> Entry:
    """Return the ``Entry`` of a row of ``COLUMNS``."""
    return Entry(
        iri=row[0],
        content=row[1],
        importance=row[2],
        access_count=row[3],
        created_at=row[4],
        last_accessed=row[5],
        updated_at=row[6],
        tags=split(row[7]),
        metadata={} if row[8] == "{}" else json.loads(row[8]),
        mesi_state=_STATES[row[9]],
        content_hash=row[10],
        named_graph=row[11],
        jsonld_context=row[12],
        jsonld_types=split(row[13]),
        generation=row[14],
    )


def state_of(letter: str) -> MesiState:
    """Return the MESI state stored as ``letter``."""
    return _STATES[letter]


def split(joined: str) -> tuple[str, ...]:
    """Return the tags or types stored joined by ``SEPARATOR``."""
    return tuple(joined.split(SEPARATOR)) if joined else ()


def check_names(values: object, what: str) -> list[str]:
    """Return ``values``, a non-empty list of non-empty strings, each once, in order."""
    if isinstance(values, (str, bytes)) or not isinstance(values, Sequence) or not values:
        raise InvalidInputError(
            f"{what} must be a non-empty list of strings, got {preview(values)}"
        )
    for value in values:
        if not isinstance(value, str) or not value:
            raise InvalidInputError(
                f"each of {what} must be a non-empty string, got {preview(value)}"
            )
        check_text(value, what=f"each of {what}")
    return list(dict.fromkeys(values))


def check_sequence(value: object, what: str) -> int:
    """Return ``value`` if it is an int >= 0 (a change sequence)."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise InvalidInputError(f"{what} must be an int >= 0, got {preview(value)}")
    return value


def entries_of(include_expired: object) -> str:
    """Return what a read selects entries from: the view of the live entries (both stores
    name it ``live_entries``), or, with ``include_expired``, the table of every entry not yet
    swept.

    Raises:
        InvalidInputError: ``include_expired`` is not a bool.
    """
    if not isinstance(include_expired, bool):
        raise InvalidInputError(f"include_expired must be a bool, got {preview(include_expired)}")
    return "entries" if include_expired else "live_entries"


def check_limit(limit: object) -> int:
    """Return ``limit`` if it is an int >= 1, capped at ``LARGEST_LIMIT``."""
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
        raise InvalidInputError(f"limit must be an int >= 1, got {preview(limit)}")
    return min(limit, LARGEST_LIMIT)
