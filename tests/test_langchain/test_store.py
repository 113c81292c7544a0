"""GlidingStore: LangGraph's BaseStore on a real gliding Memory, checked against InMemoryStore."""

from __future__ import annotations

import asyncio
import math
import re
import time
from collections.abc import Callable, Iterator
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, rule
from langchain_core.embeddings import DeterministicFakeEmbedding
from langgraph.store.base import (
    GetOp,
    InvalidNamespaceError,
    Item,
    ListNamespacesOp,
    MatchCondition,
    PutOp,
    SearchOp,
)
from langgraph.store.memory import InMemoryStore

from gliding_core import (
    ContentTooLargeError,
    HashEmbedder,
    InvalidInputError,
    Memory,
    MemoryConfig,
    StoreConfig,
)
from gliding_core.config import ExpiryConfig
from gliding_langchain.store import (
    ITEM_TYPE,
    TEXTS,
    VALUE,
    GlidingStore,
    decode_graph,
    item_iri,
    namespace_graph,
)


@pytest.fixture
def memory() -> Iterator[Memory]:
    """An in-memory gliding Memory with the fast hash embedder."""
    with Memory(embedder=HashEmbedder()) as value:
        yield value


@pytest.fixture
def store(memory: Memory) -> GlidingStore:
    return GlidingStore(memory)


def keys(items: list[Any]) -> list[tuple[tuple[str, ...], str]]:
    return [(item.namespace, item.key) for item in items]


# -- put / get / delete ------------------------------------------------------------------------


def test_put_then_get_returns_the_value_and_utc_timestamps(store: GlidingStore) -> None:
    value = {"text": "likes dark mode", "n": 3, "nested": {"list": [1, "two", None, True]}}
    store.put(("users", "42"), "prefs", value)
    item = store.get(("users", "42"), "prefs")
    assert isinstance(item, Item)
    assert (item.namespace, item.key, item.value) == (("users", "42"), "prefs", value)
    assert item.created_at.tzinfo == timezone.utc
    assert item.created_at <= item.updated_at <= datetime.now(timezone.utc)
    assert store.get(("users", "42"), "missing") is None
    assert store.get(("users",), "prefs") is None


def test_the_item_is_one_typed_entry_in_the_namespace_graph(
    store: GlidingStore, memory: Memory
) -> None:
    store.put(("users", "42"), "prefs", {"theme": "dark"})
    entry = memory.store.get(item_iri(("users", "42"), "prefs"))
    assert entry is not None
    assert entry.named_graph == namespace_graph(("users", "42"))
    assert entry.jsonld_types == (ITEM_TYPE,)
    assert entry.metadata[VALUE] == {"theme": "dark"}
    assert entry.node[TEXTS] == ["dark"]


def test_a_re_put_replaces_the_value_and_keeps_created_at(store: GlidingStore) -> None:
    store.put(("docs",), "a", {"text": "a much longer first text", "old": 1})
    store.put(("docs",), "b", {"text": "second"})
    first = store.get(("docs",), "a")
    store.put(("docs",), "a", {"text": "short"})
    again = store.get(("docs",), "a")
    assert first is not None
    assert again is not None
    assert again.value == {"text": "short"}  # no merge: "old" is gone, the shorter text wins
    assert again.created_at == first.created_at
    assert again.updated_at > first.updated_at
    assert keys(store.search(("docs",))) == [(("docs",), "a"), (("docs",), "b")]


def test_an_identical_re_put_still_counts_as_an_update(store: GlidingStore) -> None:
    store.put(("docs",), "a", {"text": "same"})
    first = store.get(("docs",), "a")
    store.put(("docs",), "a", {"text": "same"})
    again = store.get(("docs",), "a")
    assert first is not None
    assert again is not None
    assert again.updated_at > first.updated_at


def test_delete_removes_the_item_and_an_emptied_namespace(store: GlidingStore) -> None:
    store.put(("docs",), "a", {"text": "hello"})
    store.put(("notes",), "a", {"text": "hello"})
    store.delete(("docs",), "a")
    store.delete(("docs",), "never-there")
    assert store.get(("docs",), "a") is None
    assert store.list_namespaces() == [("notes",)]
    assert store.search(("docs",), query="hello") == []


def test_labels_and_keys_are_encoded_reversibly(store: GlidingStore) -> None:
    odd = ("a/b", "50% #1", "ünïcode sp ace")
    store.put(odd, "k/e#y %20", {"v": 1})
    store.put(("a", "b"), "k", {"v": 2})
    assert store.get(odd, "k/e#y %20") == store.search(odd)[0]
    assert sorted(store.list_namespaces()) == [("a", "b"), odd]


@given(st.lists(st.text(min_size=1).filter(lambda s: "." not in s and "\x00" not in s), min_size=1))
def test_namespace_graph_encoding_round_trips(labels: list[str]) -> None:
    namespace = tuple(label.encode("utf-8", "replace").decode() for label in labels)
    graph = namespace_graph(namespace)
    assert decode_graph(graph) == namespace
    assert not any(c.isspace() for c in item_iri(namespace, " a key "))


def test_entries_that_are_not_items_are_ignored(store: GlidingStore, memory: Memory) -> None:
    memory.store.put({"@id": "urn:ex:1", "text": "hello world"}, named_graph="urn:ex:graph")
    store.put(("docs",), "a", {"text": "hello"})
    assert store.list_namespaces() == [("docs",)]
    assert keys(store.search((), query="hello world")) == [(("docs",), "a")]


# -- search ------------------------------------------------------------------------------------


@pytest.fixture
def filled(store: GlidingStore) -> GlidingStore:
    store.put(("users", "1"), "a", {"n": 1, "kind": "note", "tags": ["x"]})
    store.put(("users", "2"), "b", {"n": 2, "kind": "fact", "tags": ["x", "y"]})
    store.put(("users", "1"), "c", {"n": 3, "kind": "note", "meta": {"lang": "en"}})
    store.put(("usersx",), "d", {"n": 4, "kind": "note"})
    return store


def test_search_lists_by_namespace_then_key_order_with_paging(filled: GlidingStore) -> None:
    everything = [(("users", "1"), "a"), (("users", "1"), "c"), (("users", "2"), "b")]
    assert keys(filled.search(("users",))) == everything  # ("usersx",) is not under ("users",)
    assert keys(filled.search(("users",), limit=2, offset=1)) == everything[1:3]
    assert keys(filled.search(("users",), offset=5)) == []
    assert [item.score for item in filled.search(("users",))] == [None, None, None]
    assert len(filled.search(())) == 4


@pytest.mark.parametrize(
    ("where", "expected"),
    [
        ({"kind": "note"}, ["a", "c", "d"]),
        ({"kind": {"$ne": "note"}}, ["b"]),
        ({"n": {"$gt": 1, "$lte": 3}}, ["c", "b"]),  # namespace order first
        ({"n": {"$gte": 3}}, ["c", "d"]),
        ({"n": {"$lt": 2}}, ["a"]),
        ({"n": {"$eq": 2}, "kind": "fact"}, ["b"]),
        ({"tags": ["x", "y"]}, ["b"]),
        ({"meta": {"lang": "en"}}, ["c"]),
        ({"missing": {"$gt": 0}}, []),  # InMemoryStore raises here; no match is kinder
    ],
)
def test_search_filters_like_in_memory_store(
    filled: GlidingStore, where: dict[str, Any], expected: list[str]
) -> None:
    assert [item.key for item in filled.search((), filter=where)] == expected


def test_query_search_ranks_by_hybrid_search(store: GlidingStore) -> None:
    store.put(("docs",), "paint", {"text": "she spent the weekend painting watercolours"})
    store.put(("docs",), "rust", {"text": "the borrow checker rejected my code"})
    store.put(("docs",), "blank", {"flag": True})  # no text: found, but never scored
    store.put(("other",), "paint", {"text": "painting watercolours"})
    hits = store.search(("docs",), query="painting watercolours")
    assert [item.key for item in hits] == ["paint", "rust", "blank"]
    scores = [item.score for item in hits]
    assert isinstance(scores[0], float)
    assert isinstance(scores[1], float)
    assert scores[0] > scores[1]
    assert scores[2] is None
    assert [item.key for item in store.search(("docs",), query="painting", limit=1)] == ["paint"]
    assert [i.key for i in store.search(("docs",), query="code", filter={"flag": True})] == [
        "blank"
    ]


def test_index_false_and_index_fields_decide_what_a_query_searches(
    store: GlidingStore, memory: Memory
) -> None:
    store.put(("docs",), "hidden", {"text": "painting"}, index=False)
    store.put(("docs",), "field", {"title": "painting", "body": "boats"}, index=["body"])
    store.put(("docs",), "plain", {"title": "painting"})
    hits = store.search(("docs",), query="painting")
    # Matched through an indexed field only ("field" ranks by its body); unindexed comes last.
    assert [(item.key, item.score is not None) for item in hits] == [
        ("plain", True),
        ("field", True),
        ("hidden", False),
    ]
    assert hits[0].score > hits[1].score  # type: ignore[operator]
    assert [item.key for item in store.search(("docs",), query="boats", limit=1)] == ["field"]
    assert store.get(("docs",), "hidden") is not None  # still there for get and filters
    assert [i.key for i in store.search(("docs",), filter={"text": "painting"})] == ["hidden"]
    # The memory's full-text index holds only the indexed text too.
    words = memory.store.search_ids("painting", limit=5)
    assert [iri for iri, _ in words] == [item_iri(("docs",), "plain")]
    # A re-put with index=False takes the text out.
    store.put(("docs",), "plain", {"title": "painting"}, index=False)
    assert memory.store.search_ids("painting", limit=5) == []


def test_a_field_named_by_index_is_searched_even_when_not_text_like(
    store: GlidingStore, memory: Memory
) -> None:
    # The memory's default leaves identifiers and dates out; the fields a caller names are in.
    store.put(("docs",), "a", {"code": "INV-2023-0042", "date": "1999-12-31"}, index=["code"])
    store.put(("docs",), "b", {"code": "INV-2023-0042", "body": "an invoice"}, index=["body"])
    store.put(("docs",), "c", {"code": "ZX-81"})  # the whole value: LangGraph's default
    iri = item_iri(("docs",), "a")
    assert [i for i, _ in memory.store.search_ids("INV-2023-0042", limit=5)] == [iri]
    assert memory.store.search_ids("1999-12-31", limit=5) == []
    assert [i for i, _ in memory.store.search_ids("ZX-81", limit=5)] == [item_iri(("docs",), "c")]
    assert [item.key for item in store.search(("docs",), query="INV-2023-0042", limit=1)] == ["a"]
    # A merge without index fields (as a TTL refresh) keeps those the put gave.
    memory.store.put({"@id": iri}, metadata={"seen": True})
    assert memory.store.indexed_with([iri]) == {iri: ("indexed",)}
    assert [i for i, _ in memory.store.search_ids("INV-2023-0042", limit=5)] == [iri]


def test_query_search_widens_until_it_has_the_page(store: GlidingStore) -> None:
    for i in range(30):
        store.put(("noise",), f"n{i}", {"text": f"painting number {i}"})
    store.put(("wanted",), "w", {"text": "painting number 99"})
    assert keys(store.search(("wanted",), query="painting number")) == [(("wanted",), "w")]


# -- list_namespaces ---------------------------------------------------------------------------


def test_list_namespaces_matches_in_memory_store_semantics(store: GlidingStore) -> None:
    for namespace in [("a", "b", "c"), ("a", "b", "d", "e"), ("a", "b", "d", "i"), ("a", "c", "f")]:
        store.put(namespace, "k", {"v": 1})
    assert store.list_namespaces(prefix=("a", "b"), max_depth=3) == [
        ("a", "b", "c"),
        ("a", "b", "d"),
    ]
    assert store.list_namespaces(suffix=("f",)) == [("a", "c", "f")]
    assert store.list_namespaces(prefix=("a", "*", "d")) == [
        ("a", "b", "d", "e"),
        ("a", "b", "d", "i"),
    ]
    assert store.list_namespaces(max_depth=1) == [("a",)]
    assert store.list_namespaces(limit=2, offset=1) == [("a", "b", "d", "e"), ("a", "b", "d", "i")]
    assert store.batch([ListNamespacesOp(match_conditions=())]) == [store.list_namespaces()]


# -- batches and async -------------------------------------------------------------------------


def test_a_batch_reads_before_it_writes_and_the_last_put_wins(store: GlidingStore) -> None:
    store.put(("docs",), "a", {"v": 0})
    results = store.batch(
        [
            PutOp(("docs",), "a", {"v": 1}),
            GetOp(("docs",), "a"),
            PutOp(("docs",), "b", {"v": 2}),
            PutOp(("docs",), "a", {"v": 3}),
            SearchOp(("docs",)),
        ]
    )
    assert results[0] is None
    assert results[2] is None
    assert results[3] is None
    assert isinstance(results[1], Item)
    assert results[1].value == {"v": 0}
    assert isinstance(results[4], list)
    assert len(results[4]) == 1
    assert [item.value for item in store.search(("docs",))] == [{"v": 3}, {"v": 2}]


async def test_async_operations(store: GlidingStore) -> None:
    await store.aput(("users", "1"), "a", {"text": "async painting"})
    await store.aput(("users", "2"), "b", {"text": "other"})
    item = await store.aget(("users", "1"), "a")
    assert item is not None
    assert item.value == {"text": "async painting"}
    hits = await store.asearch(("users",), query="painting")
    assert hits[0].key == "a"
    assert hits[0].score is not None
    assert keys(await store.asearch(("users",), filter={"text": "other"})) == [
        (("users", "2"), "b")
    ]
    assert await store.alist_namespaces(prefix=("users",)) == [("users", "1"), ("users", "2")]
    await store.adelete(("users", "1"), "a")
    assert await store.aget(("users", "1"), "a") is None
    with pytest.raises(InvalidInputError):
        await store.asearch(("users",), limit=0)


def test_items_survive_close_and_reopen(tmp_path: Path) -> None:
    with Memory.open(tmp_path, embedder=HashEmbedder()) as memory:
        store = GlidingStore(memory)
        store.put(("users", "1"), "a", {"text": "kept across restarts", "n": 1})
        store.put(("users", "2"), "b", {"text": "also kept"})
        before = store.get(("users", "1"), "a")
    with Memory.open(tmp_path, embedder=HashEmbedder()) as memory:
        store = GlidingStore(memory)
        assert store.get(("users", "1"), "a") == before
        assert store.list_namespaces() == [("users", "1"), ("users", "2")]
        assert store.search(("users",), query="restarts")[0].key == "a"
        store.put(("users", "0"), "c", {"text": "new"})  # a new namespace goes last
        assert [item.key for item in store.search(())] == ["a", "b", "c"]


# -- bad input ---------------------------------------------------------------------------------


def assert_nothing_written(memory: Memory, before: int) -> None:
    assert memory.store.count() == before


@pytest.mark.parametrize(
    "namespace",
    [(), ("langgraph", "x"), ("a.b",), ("",), ("a", ""), ("nul\x00",)],
)
def test_put_rejects_a_bad_namespace(
    store: GlidingStore, memory: Memory, namespace: tuple[str, ...]
) -> None:
    with pytest.raises(InvalidNamespaceError):
        store.put(namespace, "k", {"v": 1})
    assert_nothing_written(memory, 0)


def test_batch_ops_are_validated_like_the_public_methods(store: GlidingStore) -> None:
    with pytest.raises(InvalidNamespaceError):
        store.batch([GetOp(("a.b",), "k")])
    with pytest.raises(InvalidNamespaceError):
        store.batch([SearchOp(("",))])
    with pytest.raises(InvalidNamespaceError):
        store.list_namespaces(prefix=("a.b",))
    with pytest.raises(InvalidInputError, match="key"):
        store.batch([GetOp(("a",), 3)])  # type: ignore[arg-type]
    with pytest.raises(InvalidInputError, match="namespace"):
        store.batch([GetOp("abc", "k")])  # type: ignore[arg-type]
    with pytest.raises(InvalidInputError, match="operation"):
        store.batch(["get"])  # type: ignore[list-item]


@pytest.mark.parametrize(
    "value",
    [
        ["not", "a", "dict"],
        "text",
        {1: "int key"},
        {"t": ("a", "tuple")},
        {"x": math.nan},
        {"x": object()},
        {"x": "\ud800"},
    ],
)
def test_put_rejects_a_value_json_would_change(
    store: GlidingStore, memory: Memory, value: Any
) -> None:
    with pytest.raises(InvalidInputError, match="value"):
        store.put(("docs",), "k", value)
    assert_nothing_written(memory, 0)


@pytest.mark.parametrize(
    "arguments",
    [
        {"limit": 0},
        {"limit": -1},
        {"limit": True},
        {"limit": "3"},
        {"offset": -1},
        {"query": 3},
        {"filter": "kind=note"},
        {"filter": {"n": {"$regex": "x"}}},
        {"filter": {"n": {"$gt": "many"}}},
    ],
)
def test_search_rejects_bad_arguments(store: GlidingStore, arguments: dict[str, Any]) -> None:
    with pytest.raises(InvalidInputError):
        store.search(("docs",), **arguments)


@pytest.mark.parametrize(
    "arguments", [{"limit": 0}, {"offset": -2}, {"max_depth": 0}, {"max_depth": 1.5}]
)
def test_list_namespaces_rejects_bad_arguments(
    store: GlidingStore, arguments: dict[str, Any]
) -> None:
    with pytest.raises(InvalidInputError):
        store.list_namespaces(**arguments)
    with pytest.raises(InvalidInputError, match="match_type"):
        store.batch([ListNamespacesOp((MatchCondition("middle", ("a",)),))])  # type: ignore[arg-type]


def test_a_bad_op_anywhere_in_a_batch_writes_nothing(store: GlidingStore, memory: Memory) -> None:
    with pytest.raises(InvalidInputError):
        store.batch([PutOp(("docs",), "a", {"v": 1}), SearchOp(("docs",), limit=0)])
    assert_nothing_written(memory, 0)


def test_a_failing_write_rolls_the_whole_batch_back() -> None:
    config = MemoryConfig(store=StoreConfig(max_content_bytes=200))
    with Memory(config=config, embedder=HashEmbedder()) as memory:
        store = GlidingStore(memory)
        with pytest.raises(ContentTooLargeError):
            store.batch([PutOp(("docs",), "a", {"v": 1}), PutOp(("docs",), "b", {"v": "x" * 500})])
        assert_nothing_written(memory, 0)
        assert store.search(("docs",)) == []


def test_the_store_needs_a_memory() -> None:
    with pytest.raises(InvalidInputError, match="memory"):
        GlidingStore("memory")  # type: ignore[arg-type]


# -- differential: the same operations on InMemoryStore ----------------------------------------

NAMESPACES = [("a",), ("a", "b"), ("a", "b", "c"), ("a", "c"), ("b",), ("x/y",), ("x", "y")]
PREFIXES = [(), ("a",), ("a", "b"), ("b",), ("x",), ("x/y",), ("zzz",)]
WORDS = ["apple", "river", "stone", "cloud"]

values = st.fixed_dictionaries(
    {"n": st.integers(-3, 3), "s": st.sampled_from(["x", "y", "z"])},
    optional={
        "t": st.lists(st.sampled_from(WORDS), min_size=1, max_size=3).map(" ".join),
        "l": st.lists(st.integers(0, 2), max_size=2),
        "d": st.fixed_dictionaries({"k": st.sampled_from(["p", "q"])}),
        "b": st.booleans(),
        "f": st.floats(-2, 2, allow_nan=False),
    },
)
filters = st.one_of(
    st.none(),
    st.fixed_dictionaries({"s": st.sampled_from(["x", "y"])}),
    st.fixed_dictionaries({"s": st.sampled_from(["$eq", "$ne"]).map(lambda op: {op: "x"})}),
    st.fixed_dictionaries(
        {"n": st.dictionaries(st.sampled_from(["$gt", "$gte", "$lt", "$lte"]), st.integers(-3, 3))}
    ),
    st.fixed_dictionaries({"l": st.lists(st.integers(0, 2), max_size=2)}),
    st.fixed_dictionaries({"d": st.fixed_dictionaries({"k": st.just("p")})}),
)
conditions = st.lists(st.sampled_from(["a", "b", "c", "*", "x/y"]), max_size=2).map(tuple)


def forget_empty_namespaces(reference: InMemoryStore) -> None:
    """InMemoryStore keeps a namespace once read or emptied; GlidingStore keeps one while it
    holds an item (like the database stores), so the model forgets empty ones."""
    for namespace in [ns for ns, items in reference._data.items() if not items]:
        del reference._data[namespace]


def summary(items: list[Any]) -> list[tuple[tuple[str, ...], str, dict[str, Any]]]:
    return [(item.namespace, item.key, item.value) for item in items]


def address(item: tuple[tuple[str, ...], str, dict[str, Any]]) -> tuple[tuple[str, ...], str]:
    return item[0], item[1]


class StoreMachine(RuleBasedStateMachine):
    """Random operations on GlidingStore and InMemoryStore must agree."""

    def __init__(self) -> None:
        super().__init__()
        self.memory = Memory(embedder=HashEmbedder())
        self.store = GlidingStore(self.memory)
        self.reference = InMemoryStore()

    def teardown(self) -> None:
        self.memory.close()

    @rule(namespace=st.sampled_from(NAMESPACES), key=st.sampled_from("pqr"), value=values)
    def put(self, namespace: tuple[str, ...], key: str, value: dict[str, Any]) -> None:
        self.store.put(namespace, key, value)
        self.reference.put(namespace, key, value)

    @rule(namespace=st.sampled_from(NAMESPACES), key=st.sampled_from("pqr"))
    def delete(self, namespace: tuple[str, ...], key: str) -> None:
        self.store.delete(namespace, key)
        self.reference.delete(namespace, key)
        forget_empty_namespaces(self.reference)

    @rule(namespace=st.sampled_from(NAMESPACES), key=st.sampled_from("pqr"))
    def get(self, namespace: tuple[str, ...], key: str) -> None:
        got, expected = self.store.get(namespace, key), self.reference.get(namespace, key)
        forget_empty_namespaces(self.reference)
        assert (got is None) == (expected is None)
        if got is not None and expected is not None:
            assert summary([got]) == summary([expected])
            assert got.created_at <= got.updated_at

    @rule(
        prefix=st.sampled_from(PREFIXES),
        where=filters,
        limit=st.integers(1, 6),
        offset=st.integers(0, 4),
    )
    def search(
        self, prefix: tuple[str, ...], where: dict[str, Any] | None, limit: int, offset: int
    ) -> None:
        got = self.store.search(prefix, filter=where, limit=limit, offset=offset)
        expected = self.reference.search(prefix, filter=where, limit=limit, offset=offset)
        assert summary(got) == summary(expected)

    @rule(prefix=st.sampled_from(PREFIXES), where=filters, query=st.sampled_from(WORDS))
    def search_by_query(
        self, prefix: tuple[str, ...], where: dict[str, Any] | None, query: str
    ) -> None:
        got = self.store.search(prefix, query=query, filter=where, limit=100)
        expected = self.reference.search(prefix, query=query, filter=where, limit=100)
        assert sorted(summary(got), key=address) == sorted(summary(expected), key=address)

    @rule(
        prefix=conditions,
        suffix=conditions,
        max_depth=st.none() | st.integers(1, 3),
        limit=st.integers(1, 5),
        offset=st.integers(0, 3),
    )
    def list_namespaces(
        self,
        prefix: tuple[str, ...],
        suffix: tuple[str, ...],
        max_depth: int | None,
        limit: int,
        offset: int,
    ) -> None:
        arguments: dict[str, Any] = {
            "prefix": prefix,
            "suffix": suffix,
            "max_depth": max_depth,
            "limit": limit,
            "offset": offset,
        }
        got = self.store.list_namespaces(**arguments)
        assert got == self.reference.list_namespaces(**arguments)


StoreMachine.TestCase.settings = settings(max_examples=40, stateful_step_count=15, deadline=None)
TestStoreAgainstInMemoryStore = StoreMachine.TestCase


# -- differential with an index config, index arguments and TTL --------------------------------


class Clock:
    """A settable time source (seconds)."""

    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


def embed_texts(texts: list[str]) -> list[list[float]]:
    """The embedding function both stores are given (deterministic, no model)."""
    return HashEmbedder(64).embed_documents(texts)


INDEXES: list[Any] = [None, False, ["t"], ["s", "d.k"], ["t", "n"], ["missing"]]


class IndexedStoreMachine(RuleBasedStateMachine):
    """With an embedder, index arguments and TTLs, GlidingStore and InMemoryStore agree (the
    model deletes an item once its TTL has passed, as a sweep would: the store omits expired
    items)."""

    def __init__(self) -> None:
        super().__init__()
        self.memory = Memory(embedder=HashEmbedder())
        self.clock = Clock()
        config: Any = {"dims": 64, "embed": embed_texts, "fields": ["$"]}
        self.store = GlidingStore(
            self.memory, index=config, clock=self.clock, ttl={"omit_expired": True}
        )
        self.reference = InMemoryStore(index=config)
        self.expiry: dict[tuple[tuple[str, ...], str], tuple[float, float]] = {}

    def teardown(self) -> None:
        self.memory.close()

    def refresh(self, items: list[Any]) -> None:
        for item in items:
            address = (item.namespace, item.key)
            if address in self.expiry:
                minutes = self.expiry[address][1]
                self.expiry[address] = (self.clock.now + minutes * 60, minutes)

    @rule(
        namespace=st.sampled_from(NAMESPACES[:4]),
        key=st.sampled_from("pq"),
        value=values,
        index=st.sampled_from(INDEXES),
        ttl=st.sampled_from([None, 1.0, 5.0]),
    )
    def put(
        self,
        namespace: tuple[str, ...],
        key: str,
        value: dict[str, Any],
        index: Any,
        ttl: float | None,
    ) -> None:
        self.store.put(namespace, key, value, index=index, ttl=ttl)
        # InMemoryStore keeps an item's old vectors when a re-put indexes less; drop them.
        self.reference._vectors[namespace].pop(key, None)
        self.reference.put(namespace, key, value, index=index)
        self.expiry.pop((namespace, key), None)
        if ttl is not None:
            self.expiry[(namespace, key)] = (self.clock.now + ttl * 60, ttl)

    @rule(minutes=st.sampled_from([0.5, 2.0, 6.0]))
    def tick(self, minutes: float) -> None:
        self.clock.now += minutes * 60
        for address, (expires, _) in list(self.expiry.items()):
            if expires <= self.clock.now:
                self.reference.delete(*address)
                del self.expiry[address]
        forget_empty_namespaces(self.reference)

    @rule(namespace=st.sampled_from(NAMESPACES[:4]), key=st.sampled_from("pq"))
    def get(self, namespace: tuple[str, ...], key: str) -> None:
        got, expected = self.store.get(namespace, key), self.reference.get(namespace, key)
        forget_empty_namespaces(self.reference)
        assert (got is None) == (expected is None)
        if got is not None and expected is not None:
            assert summary([got]) == summary([expected])
            self.refresh([got])

    @rule(
        prefix=st.sampled_from(PREFIXES[:4]),
        query=st.sampled_from([*WORDS, "x", "p"]),
        limit=st.integers(1, 8),
    )
    def search_by_query(self, prefix: tuple[str, ...], query: str, limit: int) -> None:
        got = self.store.search(prefix, query=query, limit=limit)
        expected = self.reference.search(prefix, query=query, limit=limit)

        def ranked(items: list[Any]) -> list[Any]:
            scored = [(round(i.score, 4) if i.score is not None else None, i) for i in items]
            return sorted(
                ((s, i.namespace, i.key, i.value) for s, i in scored),
                key=lambda row: (row[0] is None, -(row[0] or 0.0), row[1], row[2]),
            )

        assert ranked(got) == ranked(expected)
        scores = [item.score for item in got if item.score is not None]
        assert scores == sorted(scores, reverse=True)
        self.refresh(got)

    @rule()
    def list_namespaces(self) -> None:
        assert self.store.list_namespaces() == self.reference.list_namespaces()


IndexedStoreMachine.TestCase.settings = settings(
    max_examples=60, stateful_step_count=20, deadline=None
)
TestIndexedStoreAgainstInMemoryStore = IndexedStoreMachine.TestCase


# -- TTL ---------------------------------------------------------------------------------------


@pytest.fixture
def clock() -> Clock:
    return Clock()


def test_an_item_expires_after_its_ttl_and_a_read_refreshes_it(
    memory: Memory, clock: Clock
) -> None:
    store = GlidingStore(memory, clock=clock, ttl={"omit_expired": True})
    assert store.supports_ttl
    store.put(("docs",), "a", {"text": "short lived"}, ttl=5)
    store.put(("docs",), "b", {"text": "kept"})
    clock.now += 4 * 60
    assert store.get(("docs",), "a") is not None  # refreshes: expires 5 minutes from now
    clock.now += 4 * 60
    assert [item.key for item in store.search(("docs",), query="lived")][:1] == ["a"]
    clock.now += 4 * 60
    assert store.get(("docs",), "a", refresh_ttl=False) is not None
    clock.now += 2 * 60
    assert store.get(("docs",), "a") is None
    assert [item.key for item in store.search(("docs",))] == ["b"]
    assert memory.store.get(item_iri(("docs",), "a")) is not None  # until a sweep
    assert store.sweep_ttl() == 1
    assert memory.store.get(item_iri(("docs",), "a")) is None
    assert store.sweep_ttl() == 0


def test_ttl_config_gives_a_default_and_can_turn_refresh_off(memory: Memory, clock: Clock) -> None:
    store = GlidingStore(
        memory,
        ttl={"default_ttl": 1, "refresh_on_read": False, "omit_expired": True},
        clock=clock,
    )
    store.put(("a",), "k", {"v": 1})
    store.put(("b",), "k", {"v": 2}, ttl=None)  # no TTL for this one
    clock.now += 50
    assert store.get(("a",), "k") is not None
    clock.now += 20
    assert store.get(("a",), "k") is None
    assert store.get(("a",), "k", refresh_ttl=True) is None
    assert store.list_namespaces() == [("b",)]  # an expired item's namespace is not listed


def test_an_expired_item_written_again_takes_the_last_place_as_a_new_one(
    memory: Memory, clock: Clock
) -> None:
    """With ``omit_expired`` an expired item is gone to every read: written again, it is a new
    item (last of its namespace, and its namespace last if nothing else of it is shown), as
    ``InMemoryStore`` orders an item deleted and put again (found by the differential test)."""
    store = GlidingStore(memory, clock=clock, ttl={"omit_expired": True})
    reference = InMemoryStore()
    value = {"n": 0, "s": "x"}
    for namespace, key, ttl in [(("a", "c"), "p", 1), (("b",), "q", 1), (("b",), "r", None)]:
        store.put(namespace, key, value, index=False, ttl=ttl)
        reference.put(namespace, key, value)
    gone = store.get(("a", "c"), "p")
    clock.now += 2 * 60
    for namespace, key in [(("a", "c"), "p"), (("b",), "q")]:
        reference.delete(namespace, key)
    del reference._data[("a", "c")]  # emptied: forgotten, as the store forgets it
    for namespace, key in [(("a",), "p"), (("a", "c"), "p"), (("b",), "q")]:
        store.put(namespace, key, value, index=False)
        reference.put(namespace, key, value)

    def order(items: list[Any]) -> list[tuple[tuple[str, ...], str]]:
        return [(item.namespace, item.key) for item in items]

    got = order(store.search((), query="apple", limit=8))
    assert got == order(reference.search((), query="apple", limit=8))
    assert got == [(("b",), "r"), (("b",), "q"), (("a",), "p"), (("a", "c"), "p")]
    assert order(store.search((), limit=2, offset=1)) == got[1:3]
    again = store.get(("a", "c"), "p")
    assert gone is not None
    assert again is not None
    assert again.created_at > gone.created_at  # a new item, not the expired one brought back


def test_a_re_put_sets_the_ttl_anew(memory: Memory, clock: Clock) -> None:
    store = GlidingStore(memory, clock=clock)
    store.put(("docs",), "a", {"v": 1}, ttl=1)
    store.put(("docs",), "a", {"v": 2})
    clock.now += 3600
    item = store.get(("docs",), "a")
    assert item is not None
    assert item.value == {"v": 2}


BRIEF = 0.001  # minutes: 60 ms, an L0 TTL that passes in the test


def _unswept() -> Memory:
    """A memory that runs no background sweep: expired entries stay until swept by hand."""
    config = MemoryConfig(store=StoreConfig(expiry=ExpiryConfig(sweep_interval_s=0)))
    return Memory(config=config, embedder=HashEmbedder())


def _wait_until_expired(memory: Memory, iris: list[str]) -> None:
    """Wait until L0 itself hides ``iris`` (its own clock): they are expired, not swept."""
    deadline = time.monotonic() + 60  # a guard against a hang, not a timing
    while any(iri in memory.store for iri in iris):
        assert time.monotonic() < deadline, "the entries never expired"
        time.sleep(0.02)
    assert memory.store.get_many(iris, include_expired=True).keys() == set(iris)


def test_without_omit_expired_reads_show_expired_items_until_the_sweep() -> None:
    """LangGraph's stores show an expired item until their sweep deletes it (``omit_expired``
    is off by default): every read answers as ``InMemoryStore``, whose items never expire."""
    config: Any = {"dims": 64, "embed": embed_texts, "fields": ["$"]}
    puts = [
        (("docs", "a"), "k1", {"text": "painting boats", "n": 1}, BRIEF),
        (("docs", "a"), "k2", {"text": "rust compiler", "n": 2}, None),
        (("docs", "b"), "k3", {"text": "painting at dawn", "n": 3}, BRIEF),
        (("other",), "k4", {"text": "kept", "n": 4}, None),
    ]
    with _unswept() as memory:
        store = GlidingStore(memory, index=config)
        reference = InMemoryStore(index=config)
        for namespace, key, value, ttl in puts:
            store.put(namespace, key, value, ttl=ttl)
            reference.put(namespace, key, value)
        expired = [item_iri(("docs", "a"), "k1"), item_iri(("docs", "b"), "k3")]
        _wait_until_expired(memory, expired)

        def scored(items: list[Any]) -> list[Any]:
            return [(i.namespace, i.key, round(i.score, 4)) for i in items]

        calls: list[Callable[[Any], Any]] = [
            lambda s: summary([s.get(("docs", "a"), "k1")]),
            lambda s: summary([s.get(("docs", "b"), "k3", refresh_ttl=False)]),
            lambda s: s.list_namespaces(),
            lambda s: s.list_namespaces(prefix=("docs",), max_depth=2),
            lambda s: summary(s.search(("docs",))),
            lambda s: summary(s.search(("docs",), filter={"n": {"$gte": 2}})),
            lambda s: summary(s.search(("docs",), limit=1, offset=1)),
            lambda s: scored(s.search(("docs",), query="painting")),
            lambda s: summary(s.batch([GetOp(("docs", "a"), "k1")])),
        ]
        for call in calls:
            assert call(store) == call(reference)
        assert memory.store.get(expired[0]) is None  # L0's own reads still hide them

        omitting = GlidingStore(memory, index=config, ttl={"omit_expired": True})
        assert omitting.get(("docs", "a"), "k1") is None
        assert omitting.list_namespaces() == [("docs", "a"), ("other",)]
        assert summary(omitting.search(("docs",))) == summary([reference.get(("docs", "a"), "k2")])

        # A read brought nothing back (no refresh of an expired item); the sweep deletes them.
        assert store.sweep_ttl() == 2
        assert store.get(("docs", "a"), "k1") is None
        assert store.list_namespaces() == [("docs", "a"), ("other",)]
        assert memory.store.get_many(expired, include_expired=True) == {}


def test_a_put_over_an_expired_item_shown_keeps_its_created_at() -> None:
    with _unswept() as memory:
        store, reference = GlidingStore(memory), InMemoryStore()
        store.put(("docs",), "a", {"v": 1}, ttl=BRIEF)
        reference.put(("docs",), "a", {"v": 1})
        first = store.get(("docs",), "a", refresh_ttl=False)
        assert first is not None
        _wait_until_expired(memory, [item_iri(("docs",), "a")])
        store.put(("docs",), "a", {"v": 2})
        reference.put(("docs",), "a", {"v": 2})
        again = store.get(("docs",), "a")
        assert again is not None
        assert summary([again]) == summary([reference.get(("docs",), "a")])
        assert again.created_at == first.created_at  # the same item, as InMemoryStore keeps it
        assert again.updated_at > first.updated_at
        assert store.sweep_ttl() == 0  # and it no longer expires


def test_a_query_without_an_embedder_of_the_store_lists_expired_items_unscored() -> None:
    with _unswept() as memory:
        store = GlidingStore(memory)
        store.put(("docs",), "gone", {"text": "painting watercolours"}, ttl=BRIEF)
        store.put(("docs",), "here", {"text": "painting watercolours at dawn"})
        _wait_until_expired(memory, [item_iri(("docs",), "gone")])
        hits = store.search(("docs",), query="painting watercolours")
        assert [(hit.key, hit.score is None) for hit in hits] == [("here", False), ("gone", True)]


def test_forget_of_a_namespace_takes_its_expired_items_too() -> None:
    with _unswept() as memory:
        store = GlidingStore(memory)
        store.put(("memories", "alice"), "old", {"text": "Qzexpired passport"}, ttl=BRIEF)
        store.put(("memories", "bob"), "note", {"text": "bob's"})
        iri = item_iri(("memories", "alice"), "old")
        _wait_until_expired(memory, [iri])
        report = store.forget(("memories", "alice"))
        assert "l0" in report.scrubbed  # the files were rewritten without it
        assert memory.store.get_many([iri], include_expired=True) == {}
        assert store.list_namespaces() == [("memories", "bob")]


@pytest.mark.parametrize(
    ("options", "named"),
    [
        ({"ttl": {"default_ttl": -1}}, "default_ttl"),
        ({"ttl": {"default_ttl": 10**400}}, "default_ttl"),
        ({"ttl": {"default_ttl": 1e307}}, "default_ttl"),
        ({"ttl": {"forever": True}}, "forever"),
        ({"ttl": {"refresh_on_read": "yes"}}, "refresh_on_read"),
        ({"ttl": "1h"}, "1h"),
        ({"index": {"dims": 0, "fields": ["t"]}}, "dims"),
        ({"index": {"fields": "text"}}, "text"),
        ({"index": {"colour": 1}}, "colour"),
        ({"index": {"embed": 3}}, "3"),
        ({"clock": 3}, "clock"),
    ],
)
def test_bad_store_settings_are_typed_errors(
    memory: Memory, options: dict[str, Any], named: str
) -> None:
    with pytest.raises(InvalidInputError, match=re.escape(named)):
        GlidingStore(memory, **options)


def test_bad_ttl_and_index_on_put_write_nothing(memory: Memory) -> None:
    store = GlidingStore(memory)
    for options in ({"ttl": 0}, {"ttl": math.inf}, {"index": "text"}, {"index": [3]}):
        with pytest.raises(InvalidInputError):
            store.put(("docs",), "a", {"v": 1}, **options)
    for minutes in (10**400, 1e307):  # over any float, or over it in seconds
        with pytest.raises(InvalidInputError, match="ttl"):
            store.put(("docs",), "a", {"v": 1}, ttl=minutes)
    assert_nothing_written(memory, 0)


# -- an embedder of the store's own ------------------------------------------------------------


def test_own_embedder_scores_are_cosines_the_same_in_any_search(memory: Memory) -> None:
    embeddings = DeterministicFakeEmbedding(size=32)
    store = GlidingStore(memory, index={"dims": 32, "embed": embeddings, "fields": ["text"]})
    store.put(("users", "1"), "a", {"text": "painting watercolours", "other": "boats"})
    store.put(("users", "2"), "b", {"text": "painting watercolours at dawn"})
    for i in range(5):  # another namespace full of near matches changes no score
        store.put(("users", "3"), f"n{i}", {"text": f"painting watercolours {i}"})
    alone = store.search(("users", "1"), query="painting watercolours")
    together = {item.key: item.score for item in store.search(("users",), query="painting")}
    wide = {
        item.key: item.score for item in store.search(("users",), query="painting watercolours")
    }
    assert alone[0].score == pytest.approx(1.0)  # the same text: cosine 1
    assert wide["a"] == pytest.approx(alone[0].score)
    assert set(together) == {"a", "b", "n0", "n1", "n2", "n3", "n4"}
    expected = store._index.scores("painting", [("x", ["painting watercolours"])])["x"]
    assert together["a"] == pytest.approx(expected)


def test_an_async_only_embed_is_refused(memory: Memory) -> None:
    async def embed(texts: list[str]) -> list[list[float]]:
        return [[1.0] for _ in texts]

    with pytest.raises(InvalidInputError, match="async"):
        GlidingStore(memory, index={"dims": 1, "embed": embed})


def test_a_failing_embedder_writes_nothing(memory: Memory) -> None:
    def broken(texts: list[str]) -> list[list[float]]:
        raise RuntimeError("embedding API down")

    store = GlidingStore(memory, index={"dims": 4, "embed": broken})
    with pytest.raises(RuntimeError, match="down"):
        store.put(("docs",), "a", {"text": "hello"})
    assert_nothing_written(memory, 0)


def test_the_memory_embedder_as_embed_ranks_by_hybrid_search(memory: Memory) -> None:
    store = GlidingStore(memory, index={"dims": 256, "embed": memory.embedder, "fields": ["t"]})
    assert not store._index.semantic
    store.put(("docs",), "a", {"t": "painting watercolours", "u": "rust"})
    store.put(("docs",), "b", {"t": "rust compiler", "u": "painting"})
    assert store.search(("docs",), query="painting")[0].key == "a"


def test_expired_items_are_swept_by_the_memory_without_being_asked() -> None:
    config = MemoryConfig(store=StoreConfig(expiry=ExpiryConfig(sweep_interval_s=0.05)))
    with Memory(config=config, embedder=HashEmbedder()) as memory:
        store = GlidingStore(memory)
        store.put(("docs",), "brief", {"text": "brief"}, ttl=0.001)  # minutes: 60 ms
        store.put(("docs",), "kept", {"text": "kept"})
        before = memory.store.change_sequence()
        deadline = time.monotonic() + 60  # a guard against a hang, not a timing
        while memory.store.change_sequence() == before and time.monotonic() < deadline:
            time.sleep(0.02)
        assert memory.store.change_sequence() > before  # the entry was deleted, not hidden
        assert store.get(("docs",), "brief") is None
        assert store.get(("docs",), "kept") is not None
        assert store.sweep_ttl() == 0


def test_the_reserved_root_is_refused_by_put_only_as_langgraph_does(
    store: GlidingStore, memory: Memory
) -> None:
    with pytest.raises(InvalidNamespaceError):
        store.put(("langgraph", "x"), "k", {"v": 1})
    reference = InMemoryStore()
    reference.batch([PutOp(("langgraph",), "k", {"v": 1})])  # LangGraph's own store takes it
    store.batch([PutOp(("langgraph",), "k", {"v": 1})])
    item = store.get(("langgraph",), "k")
    assert item is not None
    assert item.value == {"v": 1}


def test_a_namespace_path_given_as_a_list_is_read_as_its_tuple(store: GlidingStore) -> None:
    store.put(("docs", "a"), "k", {"text": "hello"})
    store.put(("other", "b"), "k", {"text": "hello"})
    assert store.list_namespaces(prefix=["docs"]) == [("docs", "a")]  # type: ignore[arg-type]
    assert store.list_namespaces(suffix=["b"]) == [("other", "b")]  # type: ignore[arg-type]
    found = store.search(["docs"])  # type: ignore[arg-type]
    assert [(i.namespace, i.key) for i in found] == [(("docs", "a"), "k")]
    assert store.search(["docs"], query="hello") != []  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="namespace"):  # InvalidNamespaceError, as LangGraph's
        store.search([1, 2])  # type: ignore[list-item]


def test_a_dotted_filter_key_is_a_path_into_the_value(store: GlidingStore) -> None:
    store.put(("docs",), "nested", {"user": {"access-level": "nested"}})
    store.put(("docs",), "flat", {"user.access-level": "flat"})
    store.put(("docs",), "none", {"user": "plain"})

    def keys(filter_: dict[str, Any]) -> list[str]:
        return [item.key for item in store.search(("docs",), filter=filter_)]

    assert keys({"user.access-level": "nested"}) == ["nested"]
    assert keys({"user.access-level": "flat"}) == ["flat"]  # a key of the value wins
    assert keys({"user.access-level": {"$ne": "nested"}}) == ["flat", "none"]
    assert keys({"user.missing.deeper": "x"}) == []


class CountingStore(GlidingStore):
    """The store, counting the batches it runs."""

    __slots__ = ("batches",)

    def batch(self, ops: Any) -> Any:
        self.batches += 1
        return super().batch(ops)


def test_thousands_of_concurrent_async_calls_are_merged_into_few_batches(memory: Memory) -> None:
    store = CountingStore(memory)
    store.batches = 0
    n = 1_500

    async def run() -> list[Any]:
        await asyncio.gather(
            *(store.aput(("docs", str(i % 7)), f"k{i}", {"n": i}) for i in range(n))
        )
        return await asyncio.gather(
            *(store.aget(("docs", str(i % 7)), f"k{i}") for i in range(n)),
            *(store.asearch(("docs", str(j)), limit=1_000) for j in range(7)),
            store.alist_namespaces(prefix=("docs",)),
        )

    results = asyncio.run(run())
    assert [item.value["n"] for item in results[:n]] == list(range(n))
    assert sum(len(found) for found in results[n : n + 7]) == n
    assert len(results[-1]) == 7
    assert store.batches < n // 10  # merged: a batch per turn of the loop, not per call


def test_a_bad_async_call_fails_alone(memory: Memory) -> None:
    store = GlidingStore(memory)

    async def run() -> list[Any]:
        return await asyncio.gather(
            store.aput(("docs",), "good", {"v": 1}),
            store.aput(("docs",), "bad", {"v": math.nan}),
            store.aput(("docs",), "also good", {"v": 2}),
            return_exceptions=True,
        )

    first, bad, last = asyncio.run(run())
    assert first is None
    assert last is None
    assert isinstance(bad, InvalidInputError)
    assert store.get(("docs",), "good") is not None
    assert store.get(("docs",), "also good") is not None
    assert store.get(("docs",), "bad") is None
