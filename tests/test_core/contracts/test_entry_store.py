"""EntryStore contract: writes, merges, exact replaces, reads, queries, search, refusals.

Every test runs on each implementation in ``conftest.ENTRY_STORES``; tests that reopen the
storage run on the shared ones. The change log is in ``test_entry_store_log.py``, threads and
processes in ``test_entry_store_concurrency.py``, odd input and the merge laws in
``test_entry_store_properties.py``.
"""

from __future__ import annotations

import hashlib
import json
import math
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gliding_core import (
    ClosedError,
    ConfigError,
    ContentTooLargeError,
    Edge,
    EntryNotFoundError,
    EntryStore,
    InvalidInputError,
    InvalidNodeError,
    MesiState,
    Record,
    filters_from_dict,
)
from gliding_core.store.filters import SearchFilters
from gliding_core.store.protocol import MINTED_IRI_PREFIX
from tests.test_core.contracts.conftest import Backend

# -- writes and reads --------------------------------------------------------------------------


def test_the_handle_is_an_entry_store(entry_store: EntryStore) -> None:
    assert isinstance(entry_store, EntryStore)


def test_put_returns_the_iri_and_get_returns_every_field(entry_store: EntryStore) -> None:
    node = {
        "@id": "urn:t:1",
        "@type": "Task",
        "@context": {"@vocab": "https://ex.org/"},
        "text": "x",
    }
    iri = entry_store.put(
        node, tags=["a", "b"], importance=0.8, named_graph="g:1", metadata={"k": 1}
    )
    entry = entry_store.get(iri)
    assert iri == "urn:t:1"
    assert entry is not None
    assert entry.node == node
    assert json.loads(entry.content) == node
    assert entry.importance == 0.8
    assert entry.tags == ("a", "b")
    assert entry.metadata == {"k": 1}
    assert entry.named_graph == "g:1"
    assert entry.jsonld_types == ("Task",)
    assert json.loads(entry.jsonld_context or "null") == {"@vocab": "https://ex.org/"}
    assert entry.mesi_state is MesiState.SHARED
    assert entry.content_hash == hashlib.sha256(entry.content.encode()).hexdigest()
    assert entry.generation == 1
    assert entry.created_at <= entry.last_accessed


def test_node_given_as_json_text_is_stored(entry_store: EntryStore) -> None:
    iri = entry_store.put('{"@id": "urn:t:json", "text": "from text"}')
    assert entry_store.get_node(iri) == {"@id": "urn:t:json", "text": "from text"}


def test_node_without_id_gets_a_minted_iri(entry_store: EntryStore) -> None:
    first = entry_store.put({"text": "anonymous"})
    second = entry_store.put({"text": "anonymous"})
    assert first.startswith(MINTED_IRI_PREFIX)
    assert first != second
    assert entry_store.get_node(first) == {"@id": first, "text": "anonymous"}


def test_a_record_with_a_minted_iri_is_not_changed(entry_store: EntryStore) -> None:
    record = Record({"text": "anonymous"})
    entry_store.put_many([record, record])
    assert "@id" not in record.node
    assert entry_store.count() == 2


def test_get_of_a_missing_iri_is_none(entry_store: EntryStore) -> None:
    assert entry_store.get("urn:missing") is None
    assert entry_store.get_node("urn:missing") is None
    assert "urn:missing" not in entry_store


def test_a_read_counts_the_access_and_the_count_outlives_the_handle(
    shared_entry_backend: Backend[EntryStore],
) -> None:
    store = shared_entry_backend.open()
    try:
        store.put({"@id": "urn:t:read", "text": "x"})
        first = store.get("urn:t:read")
        second = store.get("urn:t:read")
    finally:
        store.close()
    assert first is not None
    assert second is not None
    assert (first.access_count, second.access_count) == (1, 2)
    assert second.last_accessed >= first.last_accessed
    reopened = shared_entry_backend.open()
    try:
        again = reopened.get("urn:t:read")
    finally:
        reopened.close()
    assert again is not None
    assert again.access_count == 3
    assert again.generation == 1  # reads are not changes


def test_merge_on_same_id(entry_store: EntryStore) -> None:
    entry_store.put(
        {"@id": "urn:m", "@type": "Person", "name": "Ada", "text": "a long description"},
        tags=["x", "y"],
        importance=0.5,
        metadata={"source": "a", "keep": True},
    )
    entry_store.put(
        {"@id": "urn:m", "@type": "Employee", "name": "Ada L.", "dept": "R&D", "text": "short"},
        tags=["y", "z"],
        importance=0.7,
        metadata={"source": "b"},
    )
    entry = entry_store.get("urn:m")
    assert entry is not None
    assert entry.tags == ("x", "y", "z")
    assert math.isclose(entry.importance, 0.6)
    assert entry.jsonld_types == ("Person", "Employee")
    assert entry.node == {
        "@id": "urn:m",
        "@type": ["Person", "Employee"],
        "name": "Ada L.",
        "dept": "R&D",
        "text": "a long description",
    }
    assert entry.metadata == {"source": "b", "keep": True}
    assert entry.generation == 2
    assert [e.iri for e in entry_store.by_type("Employee")] == ["urn:m"]
    assert [e.iri for e in entry_store.by_tags(["z"])] == ["urn:m"]


def test_merge_without_importance_keeps_the_stored_one(entry_store: EntryStore) -> None:
    entry_store.put({"@id": "urn:m"}, importance=0.9)
    entry_store.put({"@id": "urn:m", "extra": 1})
    entry = entry_store.get("urn:m")
    assert entry is not None
    assert entry.importance == 0.9


def test_storing_the_same_node_again_is_not_a_change(entry_store: EntryStore) -> None:
    node = {"@id": "urn:same", "text": "t"}
    entry_store.put(node, tags=["a"])
    before = entry_store.get("urn:same")
    entry_store.put(node, tags=["a"])
    after = entry_store.get("urn:same")
    assert before is not None
    assert after is not None
    assert (after.generation, after.content_hash) == (before.generation, before.content_hash)


def test_put_many_merges_duplicates_within_the_batch(entry_store: EntryStore) -> None:
    iris = entry_store.put_many(
        [
            Record({"@id": "urn:d", "a": 1}, tags=["one"]),
            {"@id": "urn:e"},
            Record({"@id": "urn:d", "b": 2}, tags=["two"]),
        ]
    )
    assert iris == ["urn:d", "urn:e", "urn:d"]
    entry = entry_store.get("urn:d")
    assert entry is not None
    assert entry.node == {"@id": "urn:d", "a": 1, "b": 2}
    assert entry.tags == ("one", "two")
    assert entry_store.count() == 2


def test_a_large_batch_reaches_every_index(entry_store: EntryStore) -> None:
    """Rows go to SQLite many per statement: sizes off the statement boundaries lose none."""
    count = 1_003  # 66 and 499 rows per statement for entries and tags: both leave a remainder
    entry_store.put_many(
        Record(
            {
                "@id": f"urn:n:{i}",
                "@type": ["Item", f"Kind{i % 3}"],
                "text": f"word{i} shared",
                "next": {"@id": f"urn:n:{i + 1}"},
                "also": [{"@id": "urn:hub"}],
            },
            tags=["all", f"mod-{i % 5}", f"t{i}"],
            importance=(i % 10) / 10,
        )
        for i in range(count)
    )
    assert entry_store.count() == count
    assert len(entry_store.by_tags(["all"])) == count
    assert [e.iri for e in entry_store.by_tags(["t1002"])] == ["urn:n:1002"]
    assert len(entry_store.by_tags(["mod-4"])) == len(range(4, count, 5))
    assert len(entry_store.by_type("Item")) == count
    assert len(entry_store.by_type("Kind2")) == len(range(2, count, 3))
    assert len(entry_store.neighbours("urn:hub", direction="in")) == count
    assert entry_store.neighbours("urn:n:1002", direction="out") == [
        Edge("urn:n:1002", "also", "urn:hub"),
        Edge("urn:n:1002", "next", "urn:n:1003"),
    ]
    assert [h.entry.iri for h in entry_store.search_text("word1002")] == ["urn:n:1002"]
    assert len(entry_store.by_importance(0.9, 1.0)) == len(range(9, count, 10))
    last = entry_store.get("urn:n:1002")
    assert last is not None
    assert last.tags == ("all", "mod-2", "t1002")
    assert last.jsonld_types == ("Item", "Kind0")
    assert last.access_count == 1


@pytest.mark.store_config(max_content_bytes=100)
def test_put_many_validates_every_item_before_checking_sizes(entry_store: EntryStore) -> None:
    """An invalid item is reported even after an oversized one, and nothing is written."""
    with pytest.raises(InvalidNodeError, match="@type"):
        entry_store.put_many([{"@id": "urn:a", "text": "x" * 200}, {"@id": "urn:b", "@type": 5}])
    assert entry_store.count() == 0


@pytest.mark.store_config(max_content_bytes=200)
def test_put_many_is_one_transaction(entry_store: EntryStore) -> None:
    entry_store.put({"@id": "urn:big", "text": "x" * 100})
    with pytest.raises(ContentTooLargeError, match="urn:big"):
        # The third record merges into urn:big and grows it over the limit.
        entry_store.put_many(
            [{"@id": "urn:ok1"}, {"@id": "urn:ok2"}, {"@id": "urn:big", "more": "y" * 100}]
        )
    assert entry_store.count() == 1
    assert entry_store.get_node("urn:big") == {"@id": "urn:big", "text": "x" * 100}


# -- the exact write, replace --------------------------------------------------------------

OLD = {
    "@id": "urn:r:1",
    "@type": ["Note", "Draft"],
    "text": "the heron waits by the weir",
    "extra": "lingering marigold",
    "about": {"@id": "urn:r:topic"},
}
NEW = {"@id": "urn:r:1", "@type": "Note", "text": "the heron flies"}


def test_replace_leaves_nothing_of_the_old_entry(entry_store: EntryStore) -> None:
    entry_store.put(OLD, tags=["draft", "keep"], named_graph="urn:g:1", metadata={"a": 1})
    entry_store.replace(NEW, tags=["keep", "final"], named_graph="urn:g:2", metadata={"b": 2})
    entry = entry_store.get("urn:r:1")
    assert entry is not None
    assert entry.node == NEW
    assert entry.tags == ("keep", "final")
    assert entry.jsonld_types == ("Note",)
    assert entry.named_graph == "urn:g:2"
    assert entry.metadata == {"b": 2}
    assert [e.iri for e in entry_store.by_tags(["draft"])] == []
    assert [e.iri for e in entry_store.by_tags(["final"])] == ["urn:r:1"]
    assert [e.iri for e in entry_store.by_type("Draft")] == []
    assert entry_store.by_graph("urn:g:1") == []
    assert entry_store.neighbours("urn:r:1", direction="out") == []
    assert entry_store.search_text("marigold") == []
    assert entry_store.search_text("weir") == []
    assert [hit.entry.iri for hit in entry_store.search_text("flies")] == ["urn:r:1"]


def test_replace_continues_the_generation_and_keeps_the_creation_time(
    entry_store: EntryStore,
) -> None:
    entry_store.put(OLD, tags=["draft"], importance=0.9)
    before = entry_store.get("urn:r:1")
    assert before is not None
    entry_store.replace(NEW)
    after = entry_store.get("urn:r:1")
    assert after is not None
    assert after.generation == before.generation + 1
    assert after.created_at == before.created_at
    assert after.access_count == before.access_count + 1  # the reads go on counting
    assert after.importance == 0.9  # not given: kept
    entry_store.replace(NEW)  # the same entry again: no change, no new generation
    again = entry_store.get("urn:r:1")
    assert again is not None
    assert again.generation == after.generation
    entry_store.replace(NEW, importance=0.2)
    set_ = entry_store.get("urn:r:1")
    assert set_ is not None
    assert (set_.importance, set_.generation) == (0.2, after.generation + 1)


def test_replace_logs_the_change_for_derived_indexes(entry_store: EntryStore) -> None:
    entry_store.put(OLD)
    sequence = entry_store.change_sequence()
    entry_store.replace(NEW)
    assert entry_store.changes_since(sequence) == [(sequence + 1, "urn:r:1", "the heron flies")]
    sequence = entry_store.change_sequence()
    entry_store.replace({**NEW, "extra": "x"}, tags=["t"])  # text grows: logged again
    assert [change[1] for change in entry_store.changes_since(sequence)] == ["urn:r:1"]
    sequence = entry_store.change_sequence()
    entry_store.replace({**NEW, "extra": "x"})  # only a tag removed: the text did not change
    assert entry_store.changes_since(sequence) == []


def test_replace_of_a_new_entry_is_a_put_and_a_batch_is_ordered(entry_store: EntryStore) -> None:
    assert entry_store.replace_many([Record(OLD, tags=["a"]), Record(NEW, tags=["b"])]) == [
        "urn:r:1",
        "urn:r:1",
    ]
    entry = entry_store.get("urn:r:1")
    assert entry is not None
    assert (entry.node, entry.tags, entry.generation) == (NEW, ("b",), 2)
    minted = entry_store.replace({"text": "no id"})
    assert minted.startswith("urn:uuid:")
    assert entry_store.get_node(minted) == {"@id": minted, "text": "no id"}


@pytest.mark.store_config(max_content_bytes=200)
def test_a_bad_replace_writes_nothing(entry_store: EntryStore) -> None:
    entry_store.put(OLD)
    with pytest.raises(InvalidNodeError):
        entry_store.replace_many([Record(NEW), {"@id": 3}])
    with pytest.raises(ContentTooLargeError):
        entry_store.replace_many([NEW, {"@id": "urn:r:2", "text": "x" * 300}])
    with pytest.raises(InvalidInputError, match="iterable of records"):
        entry_store.replace_many(NEW)  # type: ignore[arg-type]
    assert entry_store.get_node("urn:r:1") == OLD
    assert entry_store.get("urn:r:2") is None


# -- queries and search ---------------------------------------------------------------------


def test_tag_queries_all_and_any(entry_store: EntryStore) -> None:
    entry_store.put({"@id": "urn:1"}, tags=["a", "b"])
    entry_store.put({"@id": "urn:2"}, tags=["b", "c"])
    entry_store.put({"@id": "urn:3"}, tags=["c"])
    assert [e.iri for e in entry_store.by_tags(["b"])] == ["urn:1", "urn:2"]
    assert [e.iri for e in entry_store.by_tags(["b", "c"])] == ["urn:2"]
    assert [e.iri for e in entry_store.by_tags(["a", "c"], match="any")] == [
        "urn:1",
        "urn:2",
        "urn:3",
    ]
    assert [e.iri for e in entry_store.by_tags(["b", "c"], match="any", limit=1)] == ["urn:1"]
    assert entry_store.by_tags(["nothing"]) == []


def test_graph_type_prefix_and_importance_queries(entry_store: EntryStore) -> None:
    entry_store.put({"@id": "urn:p:1", "@type": "Person"}, named_graph="g:people", importance=0.2)
    entry_store.put({"@id": "urn:p:2", "@type": ["Person", "Admin"]}, named_graph="g:people")
    entry_store.put({"@id": "urn:t:1", "@type": "Task"}, named_graph="g:tasks", importance=0.9)
    assert [e.iri for e in entry_store.by_graph("g:people")] == ["urn:p:1", "urn:p:2"]
    assert [e.iri for e in entry_store.by_type("Admin")] == ["urn:p:2"]
    assert [e.iri for e in entry_store.by_type(["Admin", "Task"])] == ["urn:p:2", "urn:t:1"]
    assert [e.iri for e in entry_store.by_prefix("urn:p:")] == ["urn:p:1", "urn:p:2"]
    assert [e.iri for e in entry_store.by_prefix("urn:")] == ["urn:p:1", "urn:p:2", "urn:t:1"]
    assert [e.iri for e in entry_store.by_importance(0.5)] == ["urn:t:1", "urn:p:2"]
    assert [e.iri for e in entry_store.by_importance(0.0, 0.3)] == ["urn:p:1"]
    assert entry_store.graph_counts() == {"g:people": 2, "g:tasks": 1}
    assert entry_store.type_counts() == {"Person": 2, "Admin": 1, "Task": 1}


def test_prefix_query_treats_like_and_glob_characters_literally(entry_store: EntryStore) -> None:
    entry_store.put({"@id": "urn:a%_*[x]:1"})
    entry_store.put({"@id": "urn:ab:1"})
    assert [e.iri for e in entry_store.by_prefix("urn:a%_*[")] == ["urn:a%_*[x]:1"]


@pytest.mark.parametrize("prefix", ["\x00", "urn:a\x00", "urn:\x00b", "urn:\t"])
def test_a_prefix_holding_a_control_character_finds_nothing(
    entry_store: EntryStore, prefix: str
) -> None:
    """No IRI holds a control character, so a prefix holding one (a NUL, which PostgreSQL's
    text cannot hold) starts none: every store answers with nothing, none with an error."""
    entry_store.put({"@id": "urn:a"})
    entry_store.put({"@id": "urn:ab"})
    assert entry_store.by_prefix(prefix) == []
    assert entry_store.by_prefix(prefix, limit=1) == []
    with pytest.raises(InvalidInputError, match="limit"):
        entry_store.by_prefix(prefix, limit=0)


def test_text_search_ranks_by_bm25(entry_store: EntryStore) -> None:
    entry_store.put({"@id": "urn:1", "text": "the login page times out after a deploy"})
    entry_store.put({"@id": "urn:2", "text": "login login login: the login form"})
    entry_store.put({"@id": "urn:3", "text": "billing export runs nightly"})
    entry_store.put({"@id": "urn:4", "title": "Nested", "body": {"summary": "timeouts in billing"}})
    hits = entry_store.search_text("login")
    assert [hit.entry.iri for hit in hits] == ["urn:2", "urn:1"]  # term frequency counts
    assert [hit.rank for hit in hits] == [1, 2]
    assert hits[0].score > hits[1].score > 0
    # A rare term in a short entry outranks a common term in a longer one (IDF, length).
    hits = entry_store.search_text("login timeouts")
    assert hits[0].entry.iri == "urn:4"
    assert {hit.entry.iri for hit in hits} == {"urn:1", "urn:2", "urn:4"}
    assert entry_store.search_text("billing", limit=1)[0].entry.iri in {"urn:3", "urn:4"}


def test_a_text_search_without_filters_ranks_as_one_that_passes_everything(
    entry_store: EntryStore,
) -> None:
    # Many more matches than the limit, each of its own length (so of its own score): the
    # best few must be the same whether or not a filter is given that every entry passes.
    entry_store.put_many(
        [
            Record({"@id": f"urn:m:{i}", "text": "common " + "filler " * i}, importance=0.5)
            for i in range(120)
        ]
    )
    entry_store.put({"@id": "urn:m:rare", "text": "rare common words"}, importance=0.5)
    everything = SearchFilters(min_importance=0.0)
    for query, limit in (("common", 7), ("common rare", 5), ("filler", 30)):
        plain = entry_store.search_ids(query, limit=limit)
        assert plain == entry_store.search_ids(query, limit=limit, filters=everything)
        assert [h.entry.iri for h in entry_store.search_text(query, limit=limit)] == [
            iri for iri, _ in plain
        ]
        assert len(plain) == limit
    assert entry_store.search_ids("common rare", limit=1)[0][0] == "urn:m:rare"


def test_text_search_matches_word_forms_and_skips_stop_words(entry_store: EntryStore) -> None:
    entry_store.put({"@id": "urn:paint", "text": "Melanie painted a sunrise last year"})
    entry_store.put({"@id": "urn:other", "text": "What is the plan for the weekend?"})
    assert [h.entry.iri for h in entry_store.search_text("When did she paint the sunrises?")] == [
        "urn:paint"
    ]
    # A query of stop words alone still searches for them.
    assert [h.entry.iri for h in entry_store.search_text("the")] == ["urn:other"]


@pytest.mark.parametrize("value", ["the", ["the"], None, frozenset({1}), True])
def test_stop_words_set_on_a_handle_are_checked_as_the_config_checks_them(
    entry_store: EntryStore, value: object
) -> None:
    """A careless assignment (a string, whose letters would be the stop words; a list; no
    set at all) is refused with a ``ConfigError`` naming the setting and leaves the words."""
    entry_store.put({"@id": "urn:other", "text": "What is the plan for the weekend?"})
    words = entry_store.stop_words
    with pytest.raises(ConfigError, match="stop_words"):
        entry_store.stop_words = value  # type: ignore[misc]
    assert entry_store.stop_words == words
    entry_store.stop_words = frozenset({"plan"})  # type: ignore[misc]
    assert [h.entry.iri for h in entry_store.search_text("the plan")] == ["urn:other"]
    assert entry_store.stop_words == frozenset({"plan"})


def test_text_search_takes_any_text_safely(entry_store: EntryStore) -> None:
    entry_store.put({"@id": "urn:q", "text": 'quote " and NEAR( AND OR * ^'})
    assert entry_store.search_text('" ( * ^ : -') == []
    assert [h.entry.iri for h in entry_store.search_text("NEAR(")] == ["urn:q"]
    assert [h.entry.iri for h in entry_store.search_text('quote"')] == ["urn:q"]
    assert entry_store.search_text("   ") == []


def test_references_are_edges_in_both_directions(entry_store: EntryStore) -> None:
    entry_store.put(
        {
            "@id": "urn:task",
            "owner": {"@id": "urn:alice"},
            "watchers": [{"@id": "urn:bob"}, {"@id": "urn:alice"}],
            "step": {"detail": {"blockedBy": {"@id": "urn:other"}}},
            "self": {"@id": "urn:task"},
        }
    )
    entry_store.put({"@id": "urn:review", "about": {"@id": "urn:task"}})
    assert entry_store.neighbours("urn:task", direction="out") == [
        Edge("urn:task", "blockedBy", "urn:other"),
        Edge("urn:task", "owner", "urn:alice"),
        Edge("urn:task", "watchers", "urn:alice"),
        Edge("urn:task", "watchers", "urn:bob"),
    ]
    assert entry_store.neighbours("urn:task", direction="in") == [
        Edge("urn:review", "about", "urn:task")
    ]
    assert entry_store.neighbours("urn:alice") == [
        Edge("urn:task", "owner", "urn:alice"),
        Edge("urn:task", "watchers", "urn:alice"),
    ]


def test_edges_follow_a_merge(entry_store: EntryStore) -> None:
    entry_store.put({"@id": "urn:t", "owner": {"@id": "urn:a"}})
    entry_store.put({"@id": "urn:t", "owner": {"@id": "urn:b"}})
    assert entry_store.neighbours("urn:t", direction="out") == [Edge("urn:t", "owner", "urn:b")]
    assert entry_store.neighbours("urn:a") == []


def test_delete_removes_the_entry_from_every_index(entry_store: EntryStore) -> None:
    entry_store.put(
        {"@id": "urn:gone", "@type": "Task", "text": "vanishing words", "to": {"@id": "urn:x"}},
        tags=["doomed"],
        named_graph="g:doomed",
        importance=0.99,
    )
    entry_store.put({"@id": "urn:stays", "text": "other"}, tags=["doomed"])
    assert entry_store.delete("urn:gone") is True
    assert entry_store.get("urn:gone") is None
    assert [e.iri for e in entry_store.by_tags(["doomed"])] == ["urn:stays"]
    assert entry_store.by_graph("g:doomed") == []
    assert entry_store.by_type("Task") == []
    assert entry_store.by_prefix("urn:gone") == []
    assert entry_store.by_importance(0.9) == []
    assert entry_store.search_text("vanishing") == []
    assert entry_store.neighbours("urn:x") == []
    assert entry_store.tag_counts() == {"doomed": 1}
    assert entry_store.graph_counts() == {}
    assert entry_store.type_counts() == {}
    assert entry_store.delete("urn:gone") is False
    # A new entry with the same IRI starts fresh.
    entry_store.put({"@id": "urn:gone", "text": "back"})
    entry = entry_store.get("urn:gone")
    assert entry is not None
    assert (entry.tags, entry.generation) == ((), 1)


def test_recent_lists_the_latest_changes_first(entry_store: EntryStore) -> None:
    entry_store.put({"@id": "urn:1"})
    entry_store.put({"@id": "urn:2"})
    entry_store.put({"@id": "urn:1", "changed": True})
    assert [e.iri for e in entry_store.recent(limit=2)] == ["urn:1", "urn:2"]


def test_retag_adds_and_removes_tags_in_every_index(entry_store: EntryStore) -> None:
    entry_store.put({"@id": "urn:r"}, tags=["pending", "task:1"])
    entry = entry_store.retag("urn:r", add=["done"], remove=["pending"])
    assert entry.tags == ("task:1", "done")
    assert entry.generation == 2
    assert entry_store.by_tags(["pending"]) == []
    assert [e.iri for e in entry_store.by_tags(["done", "task:1"])] == ["urn:r"]
    assert entry_store.retag("urn:r", add=["done"]).generation == 2  # no change, no new generation
    with pytest.raises(EntryNotFoundError):
        entry_store.retag("urn:none", add=["x"])
    with pytest.raises(InvalidInputError):
        entry_store.retag("urn:r", add=[""])


# -- filters: what a dict filter means, evaluated in Python, against what the store selects -----

TAGS = ["a", "b", "c"]
TYPES = ["Note", "Fact"]
GRAPHS = ["urn:g:1", "urn:g:2"]
ENTRIES = [
    {"tags": tags, "type": kind, "graph": graph, "importance": importance}
    for tags in ([], ["a"], ["b"], ["a", "b"], ["c"])
    for kind in TYPES
    for graph in GRAPHS
    for importance in (0.25, 0.5, 0.75)
]


def holds(entry: dict[str, Any], spec: dict[str, Any]) -> bool:
    """The meaning of a dict filter, evaluated in Python (the oracle)."""
    return all(_clause(entry, key, value) for key, value in spec.items())


def _clause(entry: dict[str, Any], key: str, value: Any) -> bool:
    if key == "$and":
        return all(holds(entry, part) for part in value)
    if key == "$or":
        return any(holds(entry, part) for part in value)
    conditions = value if isinstance(value, dict) else {"$eq": value}
    return all(_test(entry, key, op, arg) for op, arg in conditions.items())


def _test(entry: dict[str, Any], key: str, op: str, arg: Any) -> bool:
    if key == "importance":
        x = entry["importance"]
        return {"$eq": x == arg, "$gt": x > arg, "$gte": x >= arg, "$lt": x < arg}.get(op, x <= arg)
    have = {"tags": entry["tags"], "types": [entry["type"]], "named_graph": [entry["graph"]]}[key]
    many = arg if isinstance(arg, list) else [arg]
    if op in ("$eq", "$contains", "$all"):
        return all(v in have for v in many)
    if op == "$in":
        return any(v in have for v in many)
    return not any(v in have for v in many)  # $ne, $nin


leaf = st.one_of(
    st.builds(lambda t: {"tags": t}, st.sampled_from(TAGS)),
    st.builds(
        lambda op, t: {"tags": {op: t}},
        st.sampled_from(["$eq", "$contains", "$ne"]),
        st.sampled_from(TAGS),
    ),
    st.builds(
        lambda op, ts: {"tags": {op: ts}},
        st.sampled_from(["$in", "$all", "$nin"]),
        st.lists(st.sampled_from(TAGS), min_size=1, max_size=2),
    ),
    st.builds(
        lambda op, t: {"types": {op: t}}, st.sampled_from(["$eq", "$ne"]), st.sampled_from(TYPES)
    ),
    st.builds(lambda g: {"named_graph": {"$in": g}}, st.lists(st.sampled_from(GRAPHS), min_size=1)),
    st.builds(lambda g: {"named_graph": g}, st.sampled_from(GRAPHS)),
    st.builds(
        lambda op, x: {"importance": {op: x}},
        st.sampled_from(["$eq", "$gt", "$gte", "$lt", "$lte"]),
        st.sampled_from([0.25, 0.5, 0.75]),
    ),
)
specs = st.recursive(
    leaf,
    lambda inner: st.builds(
        lambda op, parts: {op: parts},
        st.sampled_from(["$and", "$or"]),
        st.lists(inner, min_size=1, max_size=3),
    ),
    max_leaves=6,
)


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(spec=specs)
def test_a_dict_filter_selects_what_it_means(entry_store: EntryStore, spec: dict[str, Any]) -> None:
    if not entry_store.count():  # the examples share the test's store: filled once
        entry_store.put_many(
            Record(
                {"@id": f"urn:e:{i}", "@type": entry["type"], "text": "x"},
                tags=entry["tags"],
                named_graph=entry["graph"],
                importance=entry["importance"],
            )
            for i, entry in enumerate(ENTRIES)
        )
    filters = filters_from_dict(spec)
    chosen = set(entry_store.matching(filters))
    expected = {f"urn:e:{i}" for i, entry in enumerate(ENTRIES) if holds(entry, spec)}
    assert chosen == expected
    # Among given IRIs (checked entry by entry), in their order; and the oldest first, limited.
    given = [*[f"urn:e:{i}" for i in range(len(ENTRIES))][::-2], "urn:e:absent"]
    assert entry_store.matching(filters, given) == [iri for iri in given if iri in expected]
    oldest = sorted(expected, key=lambda iri: int(iri.rsplit(":", 1)[1]))
    assert entry_store.matching(filters, limit=2) == oldest[:2]
    assert entry_store.matching(filters, given, limit=1) == [i for i in given if i in expected][:1]


def test_filters_check_given_entries_as_they_select_all(entry_store: EntryStore) -> None:
    # Given IRIs, each entry's labels are looked up by its key (``SearchFilters.sql(probe=
    # True)``); without, the entries holding them are collected: both choose the same.
    labels = [("a", "Note"), ("b", "Fact"), ("a", "Fact"), ("ab", "Note"), ("c", "Note")]
    entry_store.put_many(
        Record({"@id": f"urn:e:{i}", "@type": kind, "text": "x"}, tags=list(tags))
        for i, (tags, kind) in enumerate(labels)
    )
    for filters in [
        SearchFilters(tags_all=("a", "b")),
        SearchFilters(tags_any=("b", "c")),
        SearchFilters(types=("Fact",)),
        SearchFilters(exclude_tags=("a",)),
        SearchFilters(exclude_types=("Note",)),
        SearchFilters(exclude_tag_prefixes=("a",)),
        SearchFilters(any_of=(SearchFilters(tags_all=("a",)), SearchFilters(types=("Fact",)))),
        SearchFilters(all_of=(SearchFilters(exclude_tags=("c",)), SearchFilters(tags_any=("a",)))),
        SearchFilters(any_of=tuple(SearchFilters(tags_any=(tag,)) for tag in "abcdefghij")),
        SearchFilters(
            any_of=tuple(SearchFilters(types=(kind,)) for kind in "abcdefgh"), tags_any=("a",)
        ),
    ]:
        every = entry_store.matching(filters)
        given = [f"urn:e:{i}" for i in (4, 3, 2, 1, 0, 9)]
        assert entry_store.matching(filters, given) == [i for i in given if i in every], filters
    # Alternatives naming only tags are looked up as one: what each would choose, together.
    tags = SearchFilters(any_of=(SearchFilters(tags_any=("a",)), SearchFilters(tags_any=("c",))))
    assert entry_store.matching(tags) == ["urn:e:0", "urn:e:2", "urn:e:3", "urn:e:4"]
    mixed = SearchFilters(any_of=(*tags.any_of, SearchFilters(types=("Fact",), tags_any=("b",))))
    assert entry_store.matching(mixed) == [f"urn:e:{i}" for i in range(5)]
    with pytest.raises(InvalidInputError, match="limit"):
        entry_store.matching(SearchFilters(), limit=0)
    with pytest.raises(InvalidInputError, match="filters"):
        entry_store.matching({"tags_any": ["a"]}, ["urn:e:0"])  # type: ignore[arg-type]
    with pytest.raises(InvalidInputError, match="probe"):
        SearchFilters(tags_any=("a",)).sql(probe="yes")  # type: ignore[arg-type]


def test_a_graph_prefix_leaves_out_exactly_the_graphs_that_start_with_it(
    entry_store: EntryStore,
) -> None:
    graphs = [None, "urn:g:", "urn:g:1", "urn:g:1:x", "urn:g;", "urn:h:1", "urn:f:9", "urn:g"]
    for i, graph in enumerate(graphs):
        entry_store.put({"@id": f"urn:e:{i}", "text": "x"}, named_graph=graph)
    kept = entry_store.matching(SearchFilters(exclude_graph_prefixes=("urn:g:",)))
    outside = [i for i, g in enumerate(graphs) if not (g or "").startswith("urn:g:")]
    assert kept == [f"urn:e:{i}" for i in outside]
    both = SearchFilters(exclude_graph_prefixes=("urn:g:", "urn:h"))
    assert entry_store.matching(both) == ["urn:e:0", "urn:e:4", "urn:e:6", "urn:e:7"]
    with pytest.raises(InvalidInputError, match="exclude_graph_prefixes"):
        SearchFilters(exclude_graph_prefixes="urn:g:")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("prefix", "labels"),
    [
        # The next code point is a surrogate (no string holds one): the range ends at U+E000.
        ("a\ud7ff", ["a\ud7ff", "a\ud7ffz", "a\ud7fe", "a\ue000", "b"]),
        # There is no next code point: the range ends at the next "a...", here "b".
        ("a\U0010ffff", ["a\U0010ffff", "a\U0010ffffz", "a\U0010fffe", "b", "bz"]),
    ],
)
def test_a_prefix_ending_at_an_edge_of_unicode_filters_like_any_other(
    entry_store: EntryStore, prefix: str, labels: list[str]
) -> None:
    """The filter, and ``by_prefix``, leave out (find) exactly what starts with the prefix."""
    for i, label in enumerate(labels):
        entry_store.put({"@id": f"urn:e:{i}", "text": "x"}, tags=[label], named_graph=label)
    outside = [f"urn:e:{i}" for i, label in enumerate(labels) if not label.startswith(prefix)]
    for filters in (
        SearchFilters(exclude_tag_prefixes=(prefix,)),
        SearchFilters(exclude_graph_prefixes=(prefix,)),
    ):
        assert entry_store.matching(filters) == outside
        assert entry_store.matching(filters, ["urn:e:1", "urn:e:3"]) == ["urn:e:3"]
        assert [iri for iri, _ in entry_store.search_ids("x", filters=filters)] == outside
    for label in labels:
        entry_store.put({"@id": f"urn:{label}", "text": "x"})
    found = [entry.iri for entry in entry_store.by_prefix(f"urn:{prefix}")]
    assert found == sorted(f"urn:{label}" for label in labels if label.startswith(prefix))


# -- transactions -------------------------------------------------------------------------


def test_a_transaction_groups_writes_all_or_none(entry_store: EntryStore) -> None:
    with entry_store.transaction():
        entry_store.put({"@id": "urn:a"})
        entry_store.put_many([{"@id": "urn:b"}, {"@id": "urn:c"}])
        assert entry_store.get("urn:a") is not None
    assert entry_store.count() == 3

    def failing() -> None:
        with entry_store.transaction():
            entry_store.put({"@id": "urn:d"})
            entry_store.delete("urn:a")
            raise RuntimeError("boom")

    with pytest.raises(RuntimeError, match="boom"):
        failing()
    assert entry_store.count() == 3
    assert "urn:a" in entry_store
    assert "urn:d" not in entry_store


@pytest.mark.store_config(max_content_bytes=200)
def test_a_failed_inner_write_rolls_back_only_itself(entry_store: EntryStore) -> None:
    entry_store.put({"@id": "urn:big", "text": "x" * 100})
    with entry_store.transaction():
        entry_store.put({"@id": "urn:kept"})
        with pytest.raises(ContentTooLargeError):
            # Fails inside the write, after urn:never was staged: only that write rolls back.
            entry_store.put_many([{"@id": "urn:never"}, {"@id": "urn:big", "more": "y" * 100}])
    assert "urn:kept" in entry_store
    assert "urn:never" not in entry_store
    assert entry_store.count() == 2


def test_a_transaction_opened_inside_another_joins_it(entry_store: EntryStore) -> None:
    def failing() -> None:
        with entry_store.transaction():
            entry_store.put({"@id": "urn:outer"})
            with entry_store.transaction():
                entry_store.put({"@id": "urn:inner"})
            assert entry_store.in_transaction()  # still inside the outer one
            raise RuntimeError("after the inner block")

    with pytest.raises(RuntimeError, match="after the inner block"):
        failing()
    assert entry_store.count() == 0  # the inner block committed nothing of its own


def test_in_transaction_is_true_only_for_the_thread_inside_one(entry_store: EntryStore) -> None:
    import threading

    seen: list[bool] = []
    assert not entry_store.in_transaction()
    with entry_store.transaction():
        seen.append(entry_store.in_transaction())
        other = threading.Thread(target=lambda: seen.append(entry_store.in_transaction()))
        other.start()
        other.join()
    seen.append(entry_store.in_transaction())
    assert seen == [True, False, False]


# -- refusals -------------------------------------------------------------------------------


def test_values_that_look_like_sql_are_stored_literally(entry_store: EntryStore) -> None:
    hostile = "x'); DROP TABLE entries; --"
    entry_store.put(
        {"@id": "urn:" + "sql'--", "text": hostile}, tags=[hostile], named_graph=hostile
    )
    assert [e.iri for e in entry_store.by_tags([hostile])] == ["urn:sql'--"]
    assert [e.iri for e in entry_store.by_graph(hostile)] == ["urn:sql'--"]
    assert entry_store.count() == 1


@pytest.mark.parametrize(
    ("node", "message"),
    [
        ("{not json", "not valid JSON"),
        ("[1, 2]", "must be a JSON object"),
        (42, "must be a JSON object, got int"),
        ({"@id": 5}, "@id must be a string, got int"),
        ({"@id": ""}, "@id must be non-empty"),
        ({"@id": "urn:has space"}, "no whitespace"),
        ({"@type": 3}, "@type must be"),
        ({"@type": ["ok", ""]}, "@type must be"),
        ({"x": float("nan")}, "not JSON-serialisable"),
        ({"x": object()}, "not JSON-serialisable"),
        # JSON's keys are strings: these were kept as "1", "null", or lost one of two values.
        ({"@id": "urn:k", "a": {1: "x"}}, "key that is not a string, 1,"),
        ({"@id": "urn:k", "a": [{"b": {None: "x"}}]}, "key that is not a string, None,"),
        ({"@id": "urn:k", "a": {1: "x", "1": "y"}, "f": 0.5}, "key that is not a string"),
        ({"@id": "urn:k", True: "x"}, "key that is not a string, True,"),
    ],
)
def test_bad_nodes_are_typed_errors_and_write_nothing(
    entry_store: EntryStore, node: object, message: str
) -> None:
    with pytest.raises(InvalidNodeError, match=message):
        entry_store.put(node)
    assert entry_store.count() == 0


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"importance": 1.5}, "1.5"),
        ({"importance": -0.1}, "-0.1"),
        ({"importance": float("nan")}, "nan"),
        ({"importance": True}, "True"),
        ({"importance": "0.5"}, "'0.5'"),
        ({"tags": "single-string"}, "'single-string'"),
        ({"tags": ["ok", ""]}, "''"),
        ({"tags": ["bad\x1ftag"]}, "bad"),
        ({"named_graph": ""}, "named_graph"),
        ({"metadata": {"k": object()}}, "metadata"),
        ({"metadata": {1: "v"}}, "string keys"),
        ({"metadata": {"a": [{2: "v"}]}}, "key that is not a string, 2,"),
    ],
)
def test_bad_options_are_typed_errors_naming_the_value(
    entry_store: EntryStore, options: dict[str, object], message: str
) -> None:
    with pytest.raises(InvalidInputError, match=message):
        entry_store.put({"@id": "urn:bad"}, **options)  # type: ignore[arg-type]
    assert entry_store.count() == 0


@pytest.mark.store_config(max_content_bytes=64)
def test_content_over_the_limit_is_rejected_with_its_size(entry_store: EntryStore) -> None:
    with pytest.raises(ContentTooLargeError, match="over the limit of 64"):
        entry_store.put({"@id": "urn:big", "text": "é" * 40})
    assert entry_store.count() == 0


def test_a_bad_record_in_a_batch_writes_none(entry_store: EntryStore) -> None:
    with pytest.raises(InvalidNodeError):
        entry_store.put_many([{"@id": "urn:ok"}, "not json"])
    with pytest.raises(InvalidInputError, match="iterable of records"):
        entry_store.put_many({"@id": "urn:ok"})  # type: ignore[arg-type]
    assert entry_store.count() == 0


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda s: s.by_tags([]), "non-empty list"),
        (lambda s: s.by_tags("tag"), "non-empty list"),
        (lambda s: s.by_tags(["a"], match="some"), "'some'"),
        (lambda s: s.by_tags(["a"], limit=0), "limit"),
        (lambda s: s.by_graph(""), "named_graph"),
        (lambda s: s.by_type([]), "types"),
        (lambda s: s.by_prefix(""), "prefix"),
        (lambda s: s.by_importance(0.8, 0.2), "empty"),
        (lambda s: s.by_importance(2.0), "2.0"),
        (lambda s: s.search_text(None), "None"),
        (lambda s: s.search_text("x", limit=-3), "-3"),
        (lambda s: s.neighbours("urn:x", direction="up"), "'up'"),
        (lambda s: s.get(7), "int"),
        (lambda s: s.delete(""), "non-empty"),
    ],
)
def test_bad_query_arguments_are_typed_errors(
    entry_store: EntryStore, call: object, message: str
) -> None:
    with pytest.raises(InvalidInputError, match=message):
        call(entry_store)  # type: ignore[operator]


def test_a_closed_store_refuses_work(entry_backend: Backend[EntryStore]) -> None:
    store = entry_backend.open()
    store.close()
    store.close()
    with pytest.raises(ClosedError):
        store.put({"@id": "urn:x"})
    with pytest.raises(ClosedError):
        store.get("urn:x")
