"""Property: every input to the public write API is accepted and reads back, or is refused.

Odd but plausible inputs (lone surrogates, control characters, deep nesting, huge strings,
numpy scalars, wrong types, dict subclasses, NaN and infinity) go to the search, the filters,
sessions, supplementary inputs and ``Memory.open``. Each call either succeeds, and a write then
reads back equal, or raises a ``GlidingError``; nothing else escapes, and a refused write
leaves the store as it was. The same for the L0 store's own calls is in its contract suite
(``contracts/test_entry_store_properties.py``), on every implementation.
"""

from __future__ import annotations

import math
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, assume, event, given, settings
from hypothesis import strategies as st

from gliding_core import HashEmbedder, Memory, MemoryConfig
from gliding_core.store.filters import SearchFilters
from tests.test_core.input_strategies import (
    EXAMPLES,
    attempt,
    good_iris,
    graphs,
    importances,
    iris,
    metadatas,
    mixed,
    numbers,
    state,
    tag_lists,
    texts,
    words,
)


@pytest.fixture(scope="module")
def memory() -> Iterator[Memory]:
    with Memory(embedder=HashEmbedder()) as value:
        yield value


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
