"""The SQLite store's write path: the canonical JSON it writes and the rows of a new entry.

The merge laws themselves (what storing an ``@id`` again does) hold for every ``EntryStore``:
they are in the contract suite, ``contracts/test_entry_store_properties.py``.
"""

from __future__ import annotations

import json
import math
from enum import Enum
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from gliding_core import MesiState, Record
from gliding_core.jsonld import _fast_canonical, canonical_json
from gliding_core.store.staging import Rows, new_entry

IRI = "urn:law"
KEYS = st.sampled_from(["name", "status", "count", "text", "link", "nested"])
LABELS = st.text(alphabet="abcxyz", min_size=1, max_size=3)
VALUES: st.SearchStrategy[Any] = st.one_of(
    st.text(max_size=12),
    st.integers(-5, 5),
    st.booleans(),
    st.lists(st.text(max_size=4), max_size=3),
    st.builds(lambda target: {"@id": f"urn:{target}"}, LABELS),
)
PROPERTIES = st.dictionaries(KEYS, VALUES, max_size=5)
TYPES = st.lists(st.sampled_from(["A", "B", "C", "D"]), max_size=3, unique=True)
IMPORTANCE = st.floats(0.0, 1.0)


def _node(properties: dict[str, Any], types: list[str]) -> dict[str, Any]:
    node: dict[str, Any] = {"@id": IRI, **properties}
    if types:
        node["@type"] = types
    return node


WRITE = st.tuples(PROPERTIES, TYPES, st.lists(LABELS, max_size=4), IMPORTANCE)


json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats()
    | st.text(),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4)
    ),
    max_leaves=20,
)


@settings(max_examples=500, deadline=None)
@given(node=st.dictionaries(st.text(max_size=8), json_values, max_size=6))
def test_the_fast_canonical_form_is_exactly_the_standard_one(node: dict[str, Any]) -> None:
    """Where the fast path answers, it writes what the standard encoder writes, byte for byte,
    and parses back to the same node."""
    fast = _fast_canonical(node)
    if fast is None:
        return
    parsed, content, _depth = fast
    assert content == canonical_json(node)
    assert parsed == json.loads(content)


class Colour(Enum):
    RED = "red"


class Size(str, Enum):
    BIG = "big"


class Name(str):
    pass


class Count(int):
    pass


odd_values = st.recursive(
    json_values
    | st.uuids()
    | st.datetimes()
    | st.sampled_from([Colour.RED, Size.BIG, math.nan, math.inf, -0.0, 1e16, 1e-5])
    | st.builds(Name, st.text(max_size=4))
    | st.builds(Count, st.integers(-3, 3)),
    lambda children: (
        st.lists(children, max_size=3)
        | st.lists(children, max_size=3).map(tuple)
        | st.dictionaries(st.text(max_size=4) | st.integers(0, 3), children, max_size=3)
    ),
    max_leaves=12,
)


@settings(max_examples=500, deadline=None)
@given(node=st.dictionaries(st.text(max_size=8), odd_values, max_size=5))
def test_values_beyond_plain_json_take_the_standard_path(node: dict[str, Any]) -> None:
    """Values orjson writes but the standard encoder refuses or writes otherwise (a UUID, a
    datetime, an Enum, NaN, a float, a tuple, a subclass, a non-str key) never pass the fast
    path with a different text: either it declines, or it writes what the standard one does."""
    fast = _fast_canonical(node)
    if fast is None:
        return
    assert fast[1] == canonical_json(node)


@settings(max_examples=200, deadline=None)
@given(
    write=WRITE,
    context=st.none() | st.just({"@vocab": "https://schema.org/"}),
    metadata=st.dictionaries(st.sampled_from(["a", "b"]), st.integers(0, 3), max_size=2),
    graph=st.none() | st.just("g:one"),
    state=st.none() | st.sampled_from(list(MesiState)),
    has_importance=st.booleans(),
)
def test_a_new_entry_written_directly_gets_the_rows_of_a_staged_one(
    write: tuple[Any, ...],
    context: dict[str, str] | None,
    metadata: dict[str, int],
    graph: str | None,
    state: MesiState | None,
    has_importance: bool,
) -> None:
    """A batch of new, distinct entries skips staging; the rows must be the same either way."""
    properties, types, tags, importance = write
    node = _node(properties, types)
    if context is not None:
        node["@context"] = context
    record = Record(
        node,
        tags=tags,
        importance=importance if has_importance else None,
        named_graph=graph,
        metadata=metadata,
        mesi_state=state,
    )
    staged, direct = Rows(), Rows()
    staged.add(
        new_entry(7, record.node, record.content, record, default_importance=0.5, now=12.5),
        12.5,
    )
    chosen = 0.5 if record.importance is None else record.importance
    direct.add_new(7, record.node, record.content, record, importance=chosen, now=12.5)
    assert direct == staged
