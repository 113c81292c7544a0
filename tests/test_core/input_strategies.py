"""Hypothesis strategies of odd but plausible input, and the helpers that judge a call with it.

Shared by ``test_input_properties.py`` (sessions, search, supplementary inputs, ``Memory.open``)
and the entry-store contract suite (``contracts/test_entry_store_properties.py``).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import numpy as np
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

from gliding_core import EntryStore, GlidingError
from gliding_core.store.filters import SearchFilters

EXAMPLES = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


class Subdict(dict[str, Any]):
    """A dict subclass, as frameworks hand out (it must be stored as a plain dict)."""


class Opaque:
    """No JSON value at all."""


def _nest(depth: int) -> dict[str, Any]:
    value: dict[str, Any] = {"leaf": "x"}
    for _ in range(depth - 1):
        value = {"a": value}
    return value


SPECIAL_TEXT = [
    "",
    " ",
    "\ud800",
    "a\udfffb",
    "\x00",
    "nul\x00inside",
    "\x1f",
    "\x7f",
    "\u2028",
    "tab\tand\nnewline",
    "caf\u00e9",
    "\U0001f468\u200d\U0001f469",
    "\u00a0",
]

words = st.text(st.characters(categories=("L", "N")), min_size=1, max_size=8)
texts = st.one_of(
    words,
    st.text(st.characters(exclude_categories=()), max_size=12),  # surrogates and controls too
    st.sampled_from(SPECIAL_TEXT),
    st.just("t" * 2_049),  # over the label size limit
)
good_iris = st.one_of(
    st.sampled_from(["urn:x:1", "urn:x:2", "urn:x:3"]),  # repeated: merges happen
    st.builds(lambda t: f"urn:x:{t}", words),
)
iris = st.one_of(good_iris, good_iris, st.builds(lambda t: f"urn:x:{t}", texts), texts)
numbers = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.just(10**400),  # too large for a float
    st.sampled_from(
        [np.float32(0.5), np.float64(0.25), np.int64(1), np.bool_(True), True, 0.0, 1.0, -0.0]
    ),
)
leaves = st.one_of(
    texts,
    numbers,
    st.none(),
    st.sampled_from([b"bytes", Opaque(), {1, 2}, (1, "tuple")]),
    st.builds(lambda: 10**5_000),
)
values = st.recursive(
    leaves,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3),
        st.dictionaries(texts, inner, max_size=3),
        st.builds(Subdict, st.dictionaries(texts, inner, max_size=2)),
        st.builds(lambda v: {"@id": v}, iris),
    ),
    max_leaves=8,
)
deep = st.sampled_from([3, 63, 64, 300, 3_000]).map(_nest)  # 64 here is 65 in a node
huge = st.just("x " * (1 << 19))  # over the content size limit
fine = st.one_of(
    words,
    st.integers(-(10**6), 10**6),
    st.floats(allow_nan=False, allow_infinity=False),
    st.booleans(),
    st.none(),
    st.lists(words, max_size=3),
    st.builds(lambda t: {"@id": f"urn:x:{t}"}, words),
)
# Mostly plausible properties, so that about half the nodes are accepted; each odd one fails.
properties = st.dictionaries(
    st.one_of(words, words, words, texts),
    st.one_of(fine, fine, fine, fine, fine, fine, values, deep, huge),
    max_size=4,
)
types = st.one_of(
    words, words, st.lists(words, max_size=2), texts, st.lists(texts, max_size=2), numbers
)


@st.composite
def nodes(draw: st.DrawFn) -> Any:
    """A node as a mapping (maybe a subclass), as JSON text, or as something else entirely."""
    node: dict[str, Any] = draw(properties)
    if draw(st.booleans()):
        node["@id"] = draw(st.one_of(good_iris, good_iris, good_iris, iris, numbers))
    if draw(st.booleans()):
        node["@type"] = draw(types)
    shape = draw(st.sampled_from(["dict"] * 6 + ["subclass", "json", "other"]))
    if shape == "subclass":
        return Subdict(node)
    if shape == "json":
        try:
            return json.dumps(node)
        except (TypeError, ValueError, RecursionError):
            return "{not json"
    if shape == "other":
        return draw(st.one_of(values, st.just([node])))
    return node


tag_lists = st.one_of(
    st.lists(words, max_size=3),
    st.lists(words, max_size=3),
    st.lists(words, max_size=3),
    st.lists(words, max_size=3),
    st.lists(texts, max_size=3),
    st.tuples(texts),
    texts,
    st.none(),
    st.sampled_from([[1], {"a"}, [None], ("ok",)]),
)
importances = st.one_of(st.none(), st.none(), st.floats(0, 1), numbers, texts)
graphs = st.one_of(st.none(), st.none(), words, texts, numbers)
metadatas = st.one_of(
    st.none(),
    st.none(),
    st.dictionaries(words, fine, max_size=3),
    st.dictionaries(texts, st.one_of(values, deep), max_size=3),
    texts,
    numbers,
)


def state(store: EntryStore) -> list[tuple[Any, ...]]:
    """Everything a write could change, entry by entry."""
    entries = store.get_many(store.matching(SearchFilters()))
    return sorted(
        (e.iri, e.content, e.tags, e.importance, e.named_graph, str(e.metadata), e.generation)
        for e in entries.values()
    )


def attempt(call: Callable[[], Any]) -> tuple[bool, Any]:
    """Run ``call``; return ``(True, result)``, or ``(False, error)`` for a GlidingError."""
    try:
        return True, call()
    except GlidingError as error:
        str(error).encode("utf-8")  # the message can be printed and logged anywhere
        return False, error


def plain(value: Any) -> Any:
    """``value`` as it reads back from JSON (what an accepted write must read back as)."""
    return json.loads(json.dumps(value, allow_nan=False))


@st.composite
def mixed(draw: st.DrawFn, plausible: list[Any], odd: list[Any]) -> list[Any]:
    """Arguments drawn all plausible, with one odd, or all odd, a third of the time each."""
    arguments = [draw(strategy) for strategy in plausible]
    mode = draw(st.sampled_from(["plausible", "one odd", "all odd"]))
    if mode == "one odd":
        position = draw(st.integers(0, len(odd) - 1))
        arguments[position] = draw(odd[position])
    elif mode == "all odd":
        arguments = [draw(strategy) for strategy in odd]
    return arguments


@st.composite
def put_arguments(draw: st.DrawFn) -> list[Any]:
    """``put``'s five arguments: all plausible, one odd, or all odd, a third of the time each."""
    plain_node = st.fixed_dictionaries(
        {"@id": good_iris}, optional={"@type": words, "text": words, "n": fine, "ref": fine}
    )
    arguments = [
        draw(plain_node),
        draw(st.lists(words, max_size=3)),
        draw(st.one_of(st.none(), st.floats(0, 1))),
        draw(st.one_of(st.none(), words)),
        draw(st.one_of(st.none(), st.dictionaries(words, fine, max_size=2))),
    ]
    odd = [nodes(), tag_lists, importances, graphs, metadatas]
    mode = draw(st.sampled_from(["plausible", "one odd", "all odd"]))
    if mode == "one odd":
        position = draw(st.integers(0, len(odd) - 1))
        arguments[position] = draw(odd[position])
    elif mode == "all odd":
        arguments = [draw(strategy) for strategy in odd]
    return arguments
