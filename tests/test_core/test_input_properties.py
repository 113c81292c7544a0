"""Property: every input to the public write API is accepted and reads back, or is refused.

Odd but plausible inputs (lone surrogates, control characters, deep nesting, huge strings,
numpy scalars, wrong types, dict subclasses, NaN and infinity) go to the store, the search,
the filters, sessions, supplementary inputs and ``Memory.open``. Each call either succeeds,
and a write then reads back equal, or raises a ``GlidingError``; nothing else escapes, and a
refused write leaves the store as it was.
"""

from __future__ import annotations

import json
import math
import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, event, given, settings
from hypothesis import strategies as st

from gliding_core import GlidingError, HashEmbedder, L0Store, Memory, MemoryConfig
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


@pytest.fixture(scope="module")
def store() -> Iterator[L0Store]:
    with L0Store(":memory:") as value:
        yield value


@pytest.fixture(scope="module")
def memory() -> Iterator[Memory]:
    with Memory(embedder=HashEmbedder()) as value:
        yield value


def state(store: L0Store) -> list[tuple[Any, ...]]:
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


@EXAMPLES
@given(arguments=put_arguments())
def test_a_put_is_stored_as_given_or_refused_leaving_the_store_unchanged(
    store: L0Store, arguments: list[Any]
) -> None:
    node, tags, importance, graph, metadata = arguments
    before = state(store)
    iri_given = isinstance(node, dict) and isinstance(node.get("@id"), str)
    existed = iri_given and node["@id"] in store
    ok, iri = attempt(
        lambda: store.put(
            node, tags=tags, importance=importance, named_graph=graph, metadata=metadata
        )
    )
    event("accepted" if ok else f"refused: {type(iri).__name__}")
    if not ok:
        assert state(store) == before
        return
    entry = store.get_many([iri])[iri]
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


@EXAMPLES
@given(items=st.lists(st.one_of(nodes(), put_arguments().map(lambda a: a[0])), max_size=4))
def test_put_many_writes_all_or_nothing(store: L0Store, items: list[Any]) -> None:
    before = state(store)
    ok, written = attempt(lambda: store.put_many(items))
    if ok:
        assert set(written) <= set(store.get_many(written))
    else:
        assert state(store) == before


@EXAMPLES
@given(iri=st.one_of(iris, numbers, st.none()), add=tag_lists, remove=tag_lists)
def test_retag_delete_and_get_take_any_iri(store: L0Store, iri: Any, add: Any, remove: Any) -> None:
    store.put({"@id": "urn:x:1", "text": "present"})
    before = state(store)
    ok, entry = attempt(lambda: store.retag(iri, add=add or (), remove=remove or ()))
    if ok:
        assert set(entry.tags) >= set(add or ()) - set(remove or ())
        assert not set(entry.tags) & set(remove or ())
    else:
        assert state(store) == before
    attempt(lambda: store.get(iri))
    attempt(lambda: store.get_node(iri))
    attempt(lambda: store.neighbours(iri))
    attempt(lambda: store.get_many([iri]))
    attempt(lambda: store.set_mesi_state(iri, "M"))
    if attempt(lambda: store.delete(iri))[0]:
        assert iri not in store


@EXAMPLES
@given(
    query=st.one_of(texts, numbers, st.none()),
    names=tag_lists,
    limit=st.one_of(st.none(), st.integers(-2, 5), numbers),
)
def test_reads_take_any_query_names_and_limit(
    store: L0Store, query: Any, names: Any, limit: Any
) -> None:
    store.put({"@id": "urn:x:2", "text": "some searchable words"}, tags=["t"])
    attempt(lambda: store.search_text(query, limit=10 if limit is None else limit))
    attempt(lambda: store.search_ids(query))
    attempt(lambda: store.by_tags(names, limit=limit))
    attempt(lambda: store.by_tags(names, match="any"))
    attempt(lambda: store.by_type(names))
    attempt(lambda: store.by_graph(query))
    attempt(lambda: store.by_prefix(query))
    attempt(lambda: store.by_importance(query, limit))  # type: ignore[arg-type]
    attempt(lambda: store.linked(["urn:x:2"], names))
    attempt(lambda: store.contents(names))


filter_fields = st.fixed_dictionaries(
    {},
    optional={
        "tags_all": tag_lists,
        "tags_any": tag_lists,
        "types": tag_lists,
        "named_graph": graphs,
        "min_importance": importances,
        "max_importance": importances,
        "since": st.one_of(numbers, texts),
        "until": st.one_of(numbers, texts),
    },
)


@EXAMPLES
@given(
    query=st.one_of(texts, numbers), fields=filter_fields, k=st.one_of(st.integers(-1, 5), numbers)
)
def test_search_with_any_filters_answers_or_refuses(
    memory: Memory, query: Any, fields: dict[str, Any], k: Any
) -> None:
    memory.store.put({"@id": "urn:x:3", "text": "hybrid search finds words"}, tags=["t"])
    ok, filters = attempt(lambda: SearchFilters(**fields))
    if ok:
        for name in ("min_importance", "max_importance", "since", "until"):
            value = getattr(filters, name)
            assert value is None or (type(value) is float and math.isfinite(value))
        attempt(lambda: memory.store.matching(filters))
    event("filters built" if ok else "filters refused")
    ok, hits = attempt(lambda: memory.search(query, k, filters=filters if ok else None))
    event("searched" if ok else "search refused")
    if ok:
        assert all(hit.entry.iri in memory.store for hit in hits)


@EXAMPLES
@given(
    arguments=mixed(
        [good_iris, words, words, st.none(), st.none(), st.none()],
        [
            st.one_of(iris, numbers),
            st.one_of(texts, numbers),
            st.one_of(texts, numbers, st.none()),
            importances,
            metadatas,
            st.one_of(numbers, texts),
        ],
    )
)
def test_a_turn_is_archived_as_given_or_refused(memory: Memory, arguments: list[Any]) -> None:
    task, role, content, relevance, metadata, at = arguments
    ok, session = attempt(
        lambda: memory.session(task, role="SA" if isinstance(role, str) else role)
    )
    if not ok:
        return
    before, turns = state(memory.store), session.turns
    ok, turn = attempt(
        lambda: session.add_turn(role, content, relevance=relevance, metadata=metadata, at=at)
    )
    event("accepted" if ok else f"refused: {type(turn).__name__}")
    if ok:
        assert memory.store.get_node(turn.l0_archive_iri)["text"] == content  # type: ignore[index]
        assert turn in session.turns or turn.l0_archive_iri in session.weak_refs
    else:
        assert state(memory.store) == before
        assert session.turns == turns
    attempt(lambda: session.context(content))
    attempt(lambda: session.set_task_goal(content))


@EXAMPLES
@given(
    arguments=mixed(
        [good_iris, words, st.none(), st.none(), st.none(), st.none()],
        [
            st.one_of(iris, numbers),
            st.one_of(texts, numbers, st.none()),
            st.one_of(texts, numbers),
            importances,
            st.one_of(texts, numbers),
            st.one_of(st.integers(-1, 3), numbers),
        ],
    )
)
def test_a_supplement_is_delivered_as_given_or_refused(
    memory: Memory, arguments: list[Any]
) -> None:
    task, content, producer, relevance, consumer, limit = arguments
    before = state(memory.store)
    ok, item = attempt(
        lambda: memory.supplements.put(task, content, producer=producer, relevance=relevance)
    )
    event("accepted" if ok else f"refused: {type(item).__name__}")
    if not ok:
        assert state(memory.store) == before
        return
    ok, taken = attempt(
        lambda: memory.supplements.take_pending(task, consumer=consumer, limit=limit)
    )
    if ok and limit is None:
        assert [(i.iri, i.content, i.producer) for i in taken] == [(item.iri, content, producer)]
    attempt(lambda: memory.supplements.take_pending(task))  # leave nothing pending


# -- Memory.open -----------------------------------------------------------------------------

MANIFESTS = [None, "", "{", "[]", '"text"', '{"embedder": 5}', "\x00\x01", '{"embedder": null}']


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    layout=st.sampled_from(["missing", "directory", "file", "parent-is-file", "nested"]),
    manifest=st.sampled_from(MANIFESTS),
    config=st.one_of(
        st.none(),
        st.just({"store": {}}),
        st.just("config"),
        st.just(MemoryConfig()),
        st.integers(),
    ),
    name=st.one_of(st.just("memory"), texts.filter(lambda t: "/" not in t)),
)
def test_memory_open_opens_or_refuses(
    layout: str, manifest: str | None, config: Any, name: str
) -> None:
    root = Path(tempfile.mkdtemp())
    try:
        path: Any = root / (name or "memory")
        try:  # a name the file system itself refuses cannot be laid out: no case to test
            if layout == "directory":
                path.mkdir(exist_ok=True)
            elif layout == "file":
                path.write_text("not a directory")
        except (OSError, UnicodeError, ValueError):
            assume(False)
        if layout == "parent-is-file":
            (root / "parent").write_text("a file")
            path = root / "parent" / "memory"
        elif layout == "nested":
            path = root / "a" / "b" / "memory"
        if manifest is not None and layout == "directory":
            (path / "memory.json").write_text(manifest, errors="surrogateescape")
        ok, opened = attempt(lambda: Memory.open(path, config=config, embedder=HashEmbedder()))
        if ok:
            with opened:
                opened.store.put({"@id": "urn:x:open", "text": "opened"})
                assert "urn:x:open" in opened.store
    finally:
        shutil.rmtree(root, ignore_errors=True)
