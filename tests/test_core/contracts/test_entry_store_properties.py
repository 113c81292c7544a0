"""EntryStore contract, properties: odd input is stored as given or refused; the merge laws.

Odd but plausible input (lone surrogates, control characters, deep nesting, huge strings, numpy
scalars, wrong types, dict subclasses, NaN and infinity) goes to every write and read. Each call
either succeeds, and a write then reads back equal, or raises a ``GlidingError``; nothing else
escapes, and a refused write leaves the store as it was. Storing an ``@id`` again merges by the
laws of ``gliding_core.jsonld``. One store serves all of a test's examples, as a long-lived
store would.
"""

from __future__ import annotations

import json
import math
import uuid
from typing import Any

from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from gliding_core import EntryStore
from tests.test_core.input_strategies import (
    EXAMPLES,
    attempt,
    iris,
    nodes,
    numbers,
    plain,
    put_arguments,
    state,
    tag_lists,
    texts,
)

# The examples share the test's store: the fixture is made once per test, on purpose.
FIXTURED = settings(
    EXAMPLES, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture]
)


@FIXTURED
@given(arguments=put_arguments())
def test_a_put_is_stored_as_given_or_refused_leaving_the_store_unchanged(
    entry_store: EntryStore, arguments: list[Any]
) -> None:
    node, tags, importance, graph, metadata = arguments
    before = state(entry_store)
    existed = _given_iri(node) in entry_store  # a node as JSON text names its IRI too
    ok, iri = attempt(
        lambda: entry_store.put(
            node, tags=tags, importance=importance, named_graph=graph, metadata=metadata
        )
    )
    event("accepted" if ok else f"refused: {type(iri).__name__}")
    if not ok:
        assert state(entry_store) == before
        return
    entry = entry_store.get_many([iri])[iri]
    if not existed:  # a merge reads back merged; a new entry reads back as given
        expected = json.loads(node) if isinstance(node, str) else plain(node)
        expected.setdefault("@id", iri)
        assert entry.node == expected
        assert entry.tags == tuple(dict.fromkeys(tags or ()))
        assert entry.named_graph == graph
        assert entry.metadata == plain(metadata or {})
        if importance is not None:
            assert entry.importance == float(importance)
    assert type(entry.importance) is float
    assert math.isfinite(entry.importance)


def _given_iri(node: object) -> object:
    """The ``@id`` of a node given as a mapping or as JSON text (``None`` when it has none)."""
    if isinstance(node, str):
        try:
            node = json.loads(node)
        except ValueError:
            return None
    return node.get("@id") if isinstance(node, dict) else None


@FIXTURED
@given(items=st.lists(st.one_of(nodes(), put_arguments().map(lambda a: a[0])), max_size=4))
def test_put_many_writes_all_or_nothing(entry_store: EntryStore, items: list[Any]) -> None:
    before = state(entry_store)
    ok, written = attempt(lambda: entry_store.put_many(items))
    if ok:
        assert set(written) <= set(entry_store.get_many(written))
    else:
        assert state(entry_store) == before


@FIXTURED
@given(iri=st.one_of(iris, numbers, st.none()), add=tag_lists, remove=tag_lists)
def test_retag_delete_and_get_take_any_iri(
    entry_store: EntryStore, iri: Any, add: Any, remove: Any
) -> None:
    entry_store.put({"@id": "urn:x:1", "text": "present"})
    before = state(entry_store)
    ok, entry = attempt(lambda: entry_store.retag(iri, add=add or (), remove=remove or ()))
    if ok:
        assert set(entry.tags) >= set(add or ()) - set(remove or ())
        assert not set(entry.tags) & set(remove or ())
    else:
        assert state(entry_store) == before
    attempt(lambda: entry_store.get(iri))
    attempt(lambda: entry_store.get_node(iri))
    attempt(lambda: entry_store.neighbours(iri))
    attempt(lambda: entry_store.get_many([iri]))
    if attempt(lambda: entry_store.delete(iri))[0]:
        assert iri not in entry_store


@FIXTURED
@given(
    query=st.one_of(texts, numbers, st.none()),
    names=tag_lists,
    limit=st.one_of(st.none(), st.integers(-2, 5), numbers),
)
def test_reads_take_any_query_names_and_limit(
    entry_store: EntryStore, query: Any, names: Any, limit: Any
) -> None:
    entry_store.put({"@id": "urn:x:2", "text": "some searchable words"}, tags=["t"])
    attempt(lambda: entry_store.search_text(query, limit=10 if limit is None else limit))
    attempt(lambda: entry_store.search_ids(query))
    attempt(lambda: entry_store.by_tags(names, limit=limit))
    attempt(lambda: entry_store.by_tags(names, match="any"))
    attempt(lambda: entry_store.by_type(names))
    attempt(lambda: entry_store.by_graph(query))
    attempt(lambda: entry_store.by_prefix(query))
    attempt(lambda: entry_store.by_importance(query, limit))  # type: ignore[arg-type]
    attempt(lambda: entry_store.linked(["urn:x:2"], names))
    attempt(lambda: entry_store.contents(names))


# -- the merge laws ------------------------------------------------------------------------------

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
WRITE = st.tuples(PROPERTIES, TYPES, st.lists(LABELS, max_size=4), IMPORTANCE)
LAWS = settings(deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


def _node(iri: str, properties: dict[str, Any], types: list[str]) -> dict[str, Any]:
    node: dict[str, Any] = {"@id": iri, **properties}
    if types:
        node["@type"] = types
    return node


def _store_both(
    store: EntryStore, first: tuple[Any, ...], second: tuple[Any, ...]
) -> dict[str, Any]:
    iri = f"urn:law:{uuid.uuid4().hex}"  # an entry of its own in the test's store
    for properties, types, tags, importance in (first, second):
        store.put(_node(iri, properties, types), tags=tags, importance=importance)
    entry = store.get(iri)
    assert entry is not None
    return {
        "node": entry.node,
        "tags": entry.tags,
        "types": entry.jsonld_types,
        "importance": entry.importance,
    }


@settings(LAWS, max_examples=150)
@given(first=WRITE, second=WRITE)
def test_merge_laws(
    entry_store: EntryStore, first: tuple[Any, ...], second: tuple[Any, ...]
) -> None:
    merged = _store_both(entry_store, first, second)
    (old_props, old_types, old_tags, old_imp), (new_props, new_types, new_tags, new_imp) = (
        first,
        second,
    )
    # Tags and types: united, existing first, no duplicates.
    assert merged["tags"] == tuple(dict.fromkeys(old_tags + new_tags))
    assert merged["types"] == tuple(dict.fromkeys(old_types + new_types))
    # Importance: the average.
    assert math.isclose(merged["importance"], (old_imp + new_imp) / 2)
    node = merged["node"]
    for key in set(old_props) | set(new_props):
        old, new = old_props.get(key), new_props.get(key)
        if key not in new_props:
            assert node[key] == old  # kept
        elif key == "text" and isinstance(old, str) and isinstance(new, str):
            assert node[key] == (old if len(old) > len(new) else new)  # the longer text kept
        else:
            assert node[key] == new  # the new value wins
    assert set(node) - {"@id", "@type"} == set(old_props) | set(new_props)


@settings(LAWS, max_examples=100)
@given(first=WRITE, second=WRITE)
def test_merge_is_order_independent_for_sets_and_importance(
    entry_store: EntryStore, first: tuple[Any, ...], second: tuple[Any, ...]
) -> None:
    forward = _store_both(entry_store, first, second)
    backward = _store_both(entry_store, second, first)
    assert set(forward["tags"]) == set(backward["tags"])
    assert set(forward["types"]) == set(backward["types"])
    assert math.isclose(forward["importance"], backward["importance"])
    # Keys present in only one of the writes end up the same either way.
    only_one = set(first[0]) ^ set(second[0])
    for key in only_one:
        assert forward["node"][key] == backward["node"][key]


@settings(LAWS, max_examples=100)
@given(write=WRITE)
def test_storing_the_same_write_twice_is_idempotent(
    entry_store: EntryStore, write: tuple[Any, ...]
) -> None:
    properties, types, tags, importance = write
    node = _node(f"urn:law:{uuid.uuid4().hex}", properties, types)
    entry_store.put(node, tags=tags, importance=importance)
    once = entry_store.get(node["@id"])
    entry_store.put(node, tags=tags, importance=importance)
    twice = entry_store.get(node["@id"])
    assert once is not None
    assert twice is not None
    assert (twice.content, twice.tags, twice.importance, twice.generation) == (
        once.content,
        once.tags,
        once.importance,
        once.generation,
    )
