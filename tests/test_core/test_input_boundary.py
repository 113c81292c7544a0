"""The input boundary: odd input is refused with a typed error naming it, before any write.

Each kind of odd input has a test here: nesting depth, lone surrogates, control characters,
label sizes, numpy numbers; then the error boundary's tables, row by row.
"""

from __future__ import annotations

import fractions
import sqlite3
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pytest

from gliding_core import (
    ContentTooLargeError,
    GlidingError,
    HashEmbedder,
    InvalidInputError,
    InvalidNodeError,
    L0Store,
    Memory,
    NodeTooDeepError,
    Record,
    Scope,
    StoreConfig,
    SupplementaryInputStore,
)
from gliding_core.boundary import TABLES, rows, translate, translated
from gliding_core.errors import StorageError
from gliding_core.jsonld import DEFAULT_MAX_DEPTH, nesting_depth, node_facets, preview
from gliding_core.store.filters import MAX_NESTING, MAX_TERMS, SearchFilters
from gliding_core.store.retrieval import filters_from_dict

SURROGATE = "\ud800"


@pytest.fixture
def store() -> Iterator[L0Store]:
    with L0Store(":memory:") as value:
        yield value


@pytest.fixture
def memory() -> Iterator[Memory]:
    with Memory(embedder=HashEmbedder()) as value:
        yield value


def nested(depth: int, *, iri: str = "urn:deep") -> dict[str, Any]:
    """Return a node that nests ``depth`` levels deep (the node itself is level 1)."""
    node: dict[str, Any] = {"@id": iri, "text": "the bottom"}
    for _ in range(depth - 1):
        node = {"@id": iri, "a": {k: v for k, v in node.items() if k != "@id"}}
    return node


def from_deep_stack(frames: int, call: Callable[[], Any]) -> Any:
    """Run ``call`` from inside ``frames`` frames of recursion."""
    if frames == 0:
        return call()
    return from_deep_stack(frames - 1, call)


# -- nesting depth ---------------------------------------------------------------------------


def test_the_depth_is_counted_without_recursion() -> None:
    assert nesting_depth(nested(1), 10) == 1
    assert nesting_depth(nested(7), 10) == 7
    assert nesting_depth({"a": [[{}]]}, 10) == 4
    with pytest.raises(NodeTooDeepError, match="more than 10 levels"):
        nesting_depth(nested(100_000), 10)


@pytest.mark.parametrize("depth", [DEFAULT_MAX_DEPTH + 1, 256, 900, 5_000, 100_000])
def test_a_node_over_the_limit_is_refused_and_nothing_is_written(
    store: L0Store, depth: int
) -> None:
    store.put({"@id": "urn:other", "text": "kept"})
    with pytest.raises(NodeTooDeepError) as caught:
        store.put(nested(depth))
    assert "levels deep" in str(caught.value)
    assert isinstance(caught.value, InvalidNodeError)
    assert store.count() == 1
    assert store.get("urn:deep") is None


def test_the_limit_is_named_with_the_depth(store: L0Store) -> None:
    with pytest.raises(NodeTooDeepError, match=r"'urn:deep'.* 65 levels deep.* limit of 64"):
        store.put(nested(65))


def test_a_node_over_the_limit_given_as_json_text_is_refused(store: L0Store) -> None:
    with pytest.raises(NodeTooDeepError):
        store.put('{"@id": "urn:deep", "a": ' + "[" * 100_000 + "]" * 100_000 + "}")
    with pytest.raises(NodeTooDeepError):
        store.put('{"@id": "urn:deep", "a": ' + "[" * 200 + "]" * 200 + "}")
    assert store.count() == 0


def test_a_self_containing_node_is_refused_as_too_deep(store: L0Store) -> None:
    node: dict[str, Any] = {"@id": "urn:loop"}
    node["self"] = node
    with pytest.raises(NodeTooDeepError):
        store.put(node)


def test_a_node_at_the_limit_reads_back_from_a_deep_call_stack(store: L0Store) -> None:
    node = nested(DEFAULT_MAX_DEPTH)
    from_deep_stack(800, lambda: store.put(node))
    entry = from_deep_stack(800, lambda: store.get("urn:deep"))
    assert entry is not None
    assert from_deep_stack(800, lambda: entry.node) == node
    assert from_deep_stack(800, lambda: node_facets(entry.node))[1] == "the bottom"
    assert [hit.entry.iri for hit in store.search_text("bottom")] == ["urn:deep"]
    assert from_deep_stack(800, lambda: store.delete("urn:deep"))


def test_the_depth_limit_is_configurable(store: L0Store) -> None:
    with L0Store(":memory:", config=StoreConfig(max_depth=3)) as shallow:
        shallow.put(nested(3))
        with pytest.raises(NodeTooDeepError, match="limit of 3"):
            shallow.put(nested(4, iri="urn:four"))
        with pytest.raises(NodeTooDeepError, match="metadata"):
            shallow.put({"@id": "urn:m"}, metadata={"a": {"b": {"c": {}}}})
        assert shallow.count() == 1
    with L0Store(":memory:", config=StoreConfig(max_depth=200)) as deep:
        deep.put(nested(200))
        assert deep.get_node("urn:deep") == nested(200)


@pytest.mark.parametrize("value", [0, 256, 10_000])
def test_the_depth_setting_has_bounds(value: int) -> None:
    with pytest.raises(GlidingError, match="max_depth"):
        StoreConfig(max_depth=value)


def test_a_merge_deeper_than_the_limit_is_refused(tmp_path: Any) -> None:
    path = tmp_path / "l0.sqlite"
    with L0Store(path, config=StoreConfig(max_depth=10)) as store:
        store.put(nested(10))
    with L0Store(path, config=StoreConfig(max_depth=5)) as store:
        before = store.get_many(["urn:deep"])
        with pytest.raises(NodeTooDeepError, match="merge"):
            store.put({"@id": "urn:deep", "note": "a shallow addition"})
        assert store.get_many(["urn:deep"]) == before


# -- lone surrogates --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("call", "where"),
    [
        (lambda s: s.put({"@id": "urn:" + SURROGATE}), "@id"),
        (lambda s: s.put({"@id": "urn:a", "text": "x" + SURROGATE}), r"\$\.text"),
        (lambda s: s.put({"@id": "urn:a", "k" + SURROGATE: "x"}), "key"),
        (lambda s: s.put({"@id": "urn:a", "list": ["ok", {"deep": SURROGATE}]}), r"list\[1\]"),
        (lambda s: s.put({"@id": "urn:a", "x": 1.5, "t": SURROGATE}), r"\$\.t"),
        (lambda s: s.put({"@id": "urn:a"}, named_graph="g" + SURROGATE), "named_graph"),
        (lambda s: s.put({"@id": "urn:a"}, tags=["t" + SURROGATE]), "tag"),
        (lambda s: s.put({"@id": "urn:a"}, metadata={"m": SURROGATE}), "metadata"),
        (lambda s: s.put({"@id": "urn:a", "@type": SURROGATE}), "@type"),
        (lambda s: s.put({"@id": "urn:a", "ref": {"@id": "urn:" + SURROGATE}}), "@id"),
        (lambda s: s.put_many([{"@id": "urn:ok"}, {"@id": "urn:" + SURROGATE}]), "@id"),
        (lambda s: s.get("urn:" + SURROGATE), "IRI"),
        (lambda s: s.delete("urn:" + SURROGATE), "IRI"),
        (lambda s: s.retag("urn:x", add=[SURROGATE]), "tag"),
        (lambda s: s.by_tags([SURROGATE]), "tags"),
        (lambda s: s.by_graph(SURROGATE), "named_graph"),
        (lambda s: s.by_type([SURROGATE]), "types"),
        (lambda s: s.by_prefix("urn:" + SURROGATE), "prefix"),
        (lambda s: s.get_many(["urn:" + SURROGATE]), "IRIs"),
        (lambda s: s.contents(["urn:" + SURROGATE]), "IRIs"),
        (lambda s: s.neighbours("urn:" + SURROGATE), "IRI"),
    ],
)
def test_a_lone_surrogate_in_a_store_call_is_refused_naming_where(
    store: L0Store, call: Callable[[L0Store], Any], where: str
) -> None:
    store.put({"@id": "urn:x", "text": "kept"})
    with pytest.raises(InvalidInputError, match=where) as caught:
        call(store)
    assert "surrogate" in str(caught.value)
    str(caught.value).encode("utf-8")  # the message itself is printable anywhere
    assert store.count() == 1


def test_a_lone_surrogate_in_a_session_supplement_or_search_is_refused(memory: Memory) -> None:
    session = memory.session("urn:task:1")
    calls: list[Callable[[], Any]] = [
        lambda: session.add_turn("user", "hello " + SURROGATE),
        lambda: session.add_turn("user" + SURROGATE, "hello"),
        lambda: session.add_turn("user", "hello", metadata={"k": SURROGATE}),
        lambda: session.set_task_goal("goal " + SURROGATE),
        lambda: session.context("query " + SURROGATE),
        lambda: memory.session("urn:task:" + SURROGATE),
        lambda: memory.session("urn:task:2", agent="a" + SURROGATE),
        lambda: memory.supplements.put("urn:task:1", "input " + SURROGATE),
        lambda: memory.supplements.put("urn:task:1", "input", producer="p" + SURROGATE),
        lambda: memory.supplements.put("urn:task:" + SURROGATE, "input"),
        lambda: memory.supplements.take_pending("urn:task:1", consumer="c" + SURROGATE),
        lambda: memory.search("query " + SURROGATE),
        lambda: memory.search("query", filters=SearchFilters(tags_any=(SURROGATE,))),
        lambda: HashEmbedder().embed_documents(["text " + SURROGATE]),
    ]
    before = memory.store.count()
    for call in calls:
        with pytest.raises(InvalidInputError, match="surrogate"):
            call()
    assert memory.store.count() == before
    assert session.turns == []


@pytest.mark.parametrize(
    ("arguments", "named"),
    [
        ({"task_iri": ["urn:task:1"]}, "task IRI"),
        ({"task_iri": "urn:task:1", "agent": ["a"]}, "agent"),
        ({"task_iri": "urn:task:1", "agent": {"a": 1}}, "agent"),
        ({"task_iri": "urn:task:1", "config": 3}, "config"),
        ({"task_iri": "urn:task:1", "policy": "SA"}, "policy"),
    ],
    ids=["task-list", "agent-list", "agent-dict", "config-int", "policy-str"],
)
def test_a_session_of_odd_arguments_is_refused_and_none_is_kept(
    memory: Memory, arguments: dict[str, Any], named: str
) -> None:
    with pytest.raises(InvalidInputError, match=named):
        memory.session(**arguments)
    assert memory.sessions() == []
    memory.session("urn:task:1").add_turn("user", "hello")  # the good session works
    with pytest.raises(InvalidInputError, match=named):  # and is not asked for with them
        memory.session(**arguments)
    assert memory.session("urn:task:1").context().tokens > 0


def test_text_may_hold_control_characters_and_reads_back(store: L0Store) -> None:
    node = {"@id": "urn:a", "text": "tab\there\nnul\x00bell\x07"}
    store.put(node)
    assert store.get_node("urn:a") == node


# -- control characters and sizes in IRIs, tags and graphs -----------------------------------


@pytest.mark.parametrize("char", ["\x00", "\x01", "\x1f", "\x7f", "\x85", "\u2028", "\t"])
def test_control_characters_are_refused_in_iris_tags_and_graphs(store: L0Store, char: str) -> None:
    for call in (
        lambda: store.put({"@id": f"urn:a{char}b"}),
        lambda: store.put({"@id": "urn:a", "ref": {"@id": f"urn:b{char}"}}),
        lambda: store.put({"@id": "urn:a"}, named_graph=f"g{char}"),
        lambda: store.put({"@id": "urn:a"}, tags=[f"t{char}"]),
        lambda: SearchFilters(named_graph=f"g{char}"),
        lambda: SearchFilters(tags_all=(f"t{char}",)),
    ):
        with pytest.raises(InvalidInputError) as caught:
            call()
        assert repr(char)[1:-1] in str(caught.value)  # the message names the character
    assert store.count() == 0


@pytest.mark.parametrize("label", ["caf\u00e9", "family \U0001f468\u200d\U0001f469", "a\u00a0b"])
def test_every_graph_and_tag_a_write_accepts_can_be_filtered(memory: Memory, label: str) -> None:
    memory.store.put({"@id": "urn:a", "text": "findable words"}, tags=[label], named_graph=label)
    for filters in (SearchFilters(named_graph=label), SearchFilters(tags_all=(label,))):
        assert [hit.entry.iri for hit in memory.search("findable", filters=filters)] == ["urn:a"]


def test_tags_and_graph_names_have_a_size_limit(store: L0Store) -> None:
    limit = store.config.max_label_bytes
    store.put({"@id": "urn:fits"}, tags=["t" * limit], named_graph="g" * limit)
    for call in (
        lambda: store.put({"@id": "urn:a"}, tags=["t" * (limit + 1)]),
        lambda: store.put({"@id": "urn:a"}, tags=["\u00e9" * (limit // 2 + 1)]),  # 2 bytes each
        lambda: store.put({"@id": "urn:a"}, named_graph="g" * (limit + 1)),
        lambda: store.retag("urn:fits", add=["t" * (limit + 1)]),
    ):
        with pytest.raises(ContentTooLargeError, match="max_label_bytes"):
            call()
    assert store.count() == 1
    assert store.get("urn:fits").tags == ("t" * limit,)


def test_metadata_has_the_content_size_limit(store: L0Store) -> None:
    with L0Store(":memory:", config=StoreConfig(max_content_bytes=1_000)) as small:
        with pytest.raises(ContentTooLargeError, match="metadata"):
            small.put({"@id": "urn:a"}, metadata={"m": "x" * 1_000})
        assert small.count() == 0


# -- numbers ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "value",
    [np.float32(0.25), np.float64(0.25), np.float16(0.25), fractions.Fraction(1, 4), 0.25],
)
def test_importance_takes_any_real_number_as_a_float(store: L0Store, value: Any) -> None:
    store.put({"@id": "urn:a"}, importance=value)
    entry = store.get("urn:a")
    assert entry is not None
    assert type(entry.importance) is float
    assert entry.importance == 0.25


@pytest.mark.parametrize("value", [np.int64(1), np.int8(0), np.uint16(1)])
def test_importance_takes_numpy_integers(store: L0Store, value: Any) -> None:
    assert Record({"@id": "urn:a"}, importance=value).importance == float(value)


@pytest.mark.parametrize(
    "value",
    [True, np.bool_(True), float("nan"), np.float32("inf"), "0.5", 1.5, -0.1, 0.5j, 10**400],
    ids=repr,
)
def test_importance_refuses_what_is_no_number_in_range(store: L0Store, value: Any) -> None:
    with pytest.raises(InvalidInputError, match="importance"):
        store.put({"@id": "urn:a"}, importance=value)
    assert store.count() == 0


def test_numpy_numbers_are_converted_in_filters_sessions_and_supplements(memory: Memory) -> None:
    filters = SearchFilters(min_importance=np.float32(0.1), since=np.int64(0))
    assert type(filters.min_importance) is float
    assert type(filters.since) is float
    memory.store.put({"@id": "urn:a", "text": "numbers"}, importance=0.5)
    assert [hit.entry.iri for hit in memory.search("numbers", filters=filters)] == ["urn:a"]
    turn = memory.session("urn:task:1").add_turn(
        "user", "hello", relevance=np.float32(0.5), at=np.float64(1e9)
    )
    assert type(turn.relevance_score) is float
    assert type(turn.created_at) is float
    item = SupplementaryInputStore(memory.store).put("urn:task:1", "x", relevance=np.float32(1))
    assert item.relevance_score == 1.0


@pytest.mark.parametrize("value", [float("nan"), float("inf"), np.float64("-inf"), True, "1"])
def test_times_must_be_finite_numbers(memory: Memory, value: Any) -> None:
    with pytest.raises(InvalidInputError):
        memory.session("urn:task:1").add_turn("user", "hello", at=value)
    with pytest.raises(InvalidInputError, match="since"):
        SearchFilters(since=value)


# -- error messages ---------------------------------------------------------------------------


class BrokenRepr:
    def __repr__(self) -> str:
        raise RuntimeError("no repr")


class SurrogateRepr:
    def __repr__(self) -> str:
        return "odd" + SURROGATE


@pytest.mark.parametrize(
    "value",
    [
        "x" * 10_000_000,
        SURROGATE,
        nested(100_000),
        BrokenRepr(),
        SurrogateRepr(),
        10**10_000,
        type("Sub", (dict,), {})(a=1),
        type("Sub", (str,), {})("s" * 1_000),
    ],
    ids=lambda value: type(value).__name__,
)
def test_a_preview_never_fails_and_always_encodes(value: object) -> None:
    text = preview(value)
    assert len(text) <= 80 * 4
    text.encode("utf-8")


@pytest.mark.parametrize(
    "value",
    [BrokenRepr(), SurrogateRepr(), nested(100_000), 10**10_000],
    ids=lambda value: type(value).__name__,
)
def test_a_bad_node_of_any_kind_is_refused_with_a_printable_message(
    store: L0Store, value: object
) -> None:
    with pytest.raises(InvalidNodeError) as caught:
        store.put({"@id": "urn:a", "value": value})
    str(caught.value).encode("utf-8")


# -- the error boundary's tables --------------------------------------------------------------


@pytest.mark.parametrize("backend", sorted(TABLES))
def test_every_row_of_every_table_maps_to_a_gliding_error(backend: Any) -> None:
    resolved = rows(backend)
    assert resolved, backend
    for kind, target in resolved:
        assert issubclass(kind, BaseException)
        assert issubclass(target, GlidingError)
        assert target is not GlidingError


@pytest.mark.parametrize(
    ("backend", "kind", "target"),
    [(backend, kind, target) for backend in sorted(TABLES) for kind, target in rows(backend)],  # type: ignore[arg-type]
)
def test_translated_reraises_each_row_with_its_cause(
    backend: Any, kind: type[BaseException], target: type[GlidingError]
) -> None:
    original = _instance(kind)
    with pytest.raises(GlidingError) as caught, translated(backend, "doing the thing"):
        raise original
    # The first matching row wins: it is this row's target, or an earlier, more specific one.
    first = next(t for k, t in rows(backend) if isinstance(original, k))
    assert type(caught.value) is first
    assert caught.value.__cause__ is original
    assert "doing the thing" in str(caught.value)
    assert backend in str(caught.value)


def _instance(kind: type[BaseException]) -> BaseException:
    """Return an instance of ``kind`` (backend classes differ in what they take)."""
    for args in ((), ("failed",)):
        try:
            return kind(*args)
        except TypeError:
            continue
    # httpx's errors take a request and response, keyword-only: build them bare.
    return kind.__new__(kind)


def test_translated_passes_unknown_exceptions_and_gliding_errors_through() -> None:
    with pytest.raises(KeyError), translated("sqlite", "reading"):
        raise KeyError("a programming error stays visible")
    own = InvalidInputError("already typed")
    with pytest.raises(InvalidInputError) as caught, translated("chroma", "upserting"):
        raise own
    assert caught.value is own
    assert caught.value.__cause__ is None
    assert translate("sqlite", own, "reading") is None


def test_translated_maps_a_real_sqlite_error() -> None:
    conn = sqlite3.connect(":memory:")
    with (
        pytest.raises(StorageError, match="selecting") as caught,
        translated("sqlite", "selecting"),
    ):
        conn.execute("SELECT * FROM no_such_table")
    assert isinstance(caught.value.__cause__, sqlite3.OperationalError)
    conn.close()


def test_an_unknown_backend_is_refused() -> None:
    with pytest.raises(InvalidInputError, match="unknown backend"):
        rows("redis")  # type: ignore[arg-type]


def test_a_prefix_just_below_the_surrogates_finds_its_entries(store: L0Store) -> None:
    """The range's upper bound skips the surrogates (hypothesis found it binding one)."""
    store.put({"@id": "urn:\ud7ffa"})
    store.put({"@id": "urn:\ue000"})
    assert [entry.iri for entry in store.by_prefix("urn:\ud7ff")] == ["urn:\ud7ffa"]


def test_huge_limits_mean_no_limit_and_a_huge_k_is_refused(memory: Memory) -> None:
    memory.store.put({"@id": "urn:a", "text": "limits"}, tags=["t"])
    assert len(memory.store.by_tags(["t"], limit=2**64)) == 1
    assert len(memory.store.search_text("limits", limit=10**30)) == 1
    with pytest.raises(InvalidInputError, match="k must be"):
        memory.search("limits", 2**32)


def _nest(levels: int, kind: str) -> SearchFilters:
    """A filter ``levels`` deep: ``kind`` (``any_of`` or ``all_of``) around a tag condition."""
    filters = SearchFilters(tags_all=("t",))
    for _ in range(levels - 1):
        filters = SearchFilters(**{kind: (filters, SearchFilters(min_importance=0.9))})
    return filters


@pytest.mark.parametrize("kind", ["any_of", "all_of"])
def test_filters_nested_past_the_limit_are_refused_and_those_at_it_search(
    memory: Memory, kind: str
) -> None:
    memory.store.put({"@id": "urn:a", "text": "nested words"}, tags=["t"], importance=0.95)
    at_limit = _nest(MAX_NESTING, kind)
    assert [hit.entry.iri for hit in memory.search("nested", filters=at_limit)] == ["urn:a"]
    assert memory.store.matching(at_limit) == ["urn:a"]
    for levels in (MAX_NESTING + 1, 40, 10_000):
        with pytest.raises(InvalidInputError, match=f"more than {MAX_NESTING} levels"):
            _nest(levels, kind)


@pytest.mark.parametrize(
    "make",  # each makes a chain of n conditions
    [
        lambda n: SearchFilters(exclude_tag_prefixes=tuple(f"p{i}" for i in range(n))),
        lambda n: SearchFilters(exclude_graph_prefixes=tuple(f"urn:g{i}" for i in range(n))),
        lambda n: SearchFilters(  # the group, its alternatives, the bound of one
            any_of=tuple(SearchFilters(min_importance=i / 10_000) for i in range(n - 2))
        ),
        lambda n: SearchFilters(  # the group, its one alternative, its prefixes
            all_of=(SearchFilters(exclude_tag_prefixes=tuple(f"p{i}" for i in range(n - 2))),)
        ),
    ],
)
def test_filters_joining_too_many_conditions_are_refused_and_those_at_the_limit_search(
    memory: Memory, make: Callable[[int], SearchFilters]
) -> None:
    # SQLite refuses an expression deeper than 1,000 ("Expression tree is too large"), which
    # reached the caller as a StorageError naming nothing it gave.
    memory.store.put({"@id": "urn:a", "text": "wide words"}, tags=["t"])
    at_limit = make(MAX_TERMS)
    assert [hit.entry.iri for hit in memory.search("wide", filters=at_limit)] == ["urn:a"]
    assert memory.store.matching(at_limit) == ["urn:a"]
    for count in (MAX_TERMS + 1, 2_000):
        with pytest.raises(InvalidInputError, match=f"over {MAX_TERMS}"):
            make(count)


def test_alternatives_naming_only_tags_are_one_condition_and_scopes_wrap_filters_at_the_limit(
    memory: Memory,
) -> None:
    """Alternatives that only name tags are one look-up (an ``any_of`` of 5,000 searches);
    the limits hold for the filter the store is given, the scope's own conditions with it."""
    memory.store.put({"@id": "urn:a", "text": "wide words"}, tags=["t7", Scope.user("u").tag])
    spec = {"$or": [{"tags": f"t{i}"} for i in range(800)]}
    assert memory.store.matching(filters_from_dict(spec)) == ["urn:a"]
    tags = SearchFilters(any_of=tuple(SearchFilters(tags_any=(f"t{i}",)) for i in range(5_000)))
    assert memory.store.matching(tags) == ["urn:a"]
    deep = {"tags": "t7"}
    for _ in range(10):  # a dict of two keys is two conditions joined: two levels a dict
        deep = {"tags": "t7", "$and": [deep]}
    wrapped = Scope.user("u").filters(base=filters_from_dict(deep))
    assert [hit.entry.iri for hit in memory.search("wide", filters=wrapped)] == ["urn:a"]


def test_a_preview_keeps_the_order_of_a_dict() -> None:
    assert preview({"role": "user", "content": "x"}) == "{'role': 'user', 'content': 'x'}"
