"""L0 store: writes, reads, queries, indexes, deletion and input validation."""

from __future__ import annotations

import hashlib
import json
import math
import sqlite3
from pathlib import Path

import pytest

from gliding_core import (
    ClosedError,
    ContentTooLargeError,
    Edge,
    EntryNotFoundError,
    InvalidInputError,
    InvalidNodeError,
    L0Store,
    MesiState,
    Record,
    StoreConfig,
)
from gliding_core.store.sqlite import MINTED_IRI_PREFIX, SCHEMA_VERSION


def test_put_returns_the_iri_and_get_returns_every_field(store: L0Store) -> None:
    node = {
        "@id": "urn:t:1",
        "@type": "Task",
        "@context": {"@vocab": "https://ex.org/"},
        "text": "x",
    }
    iri = store.put(node, tags=["a", "b"], importance=0.8, named_graph="g:1", metadata={"k": 1})
    entry = store.get(iri)
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


def test_node_given_as_json_text_is_stored(store: L0Store) -> None:
    iri = store.put('{"@id": "urn:t:json", "text": "from text"}')
    assert store.get_node(iri) == {"@id": "urn:t:json", "text": "from text"}


def test_node_without_id_gets_a_minted_iri(store: L0Store) -> None:
    first = store.put({"text": "anonymous"})
    second = store.put({"text": "anonymous"})
    assert first.startswith(MINTED_IRI_PREFIX)
    assert first != second
    assert store.get_node(first) == {"@id": first, "text": "anonymous"}


def test_a_record_with_a_minted_iri_is_not_changed(store: L0Store) -> None:
    record = Record({"text": "anonymous"})
    store.put_many([record, record])
    assert "@id" not in record.node
    assert store.count() == 2


def test_get_of_a_missing_iri_is_none(store: L0Store) -> None:
    assert store.get("urn:missing") is None
    assert store.get_node("urn:missing") is None
    assert "urn:missing" not in store


def test_a_read_counts_the_access_persistently(tmp_path: Path) -> None:
    path = tmp_path / "l0.sqlite3"
    with L0Store(path) as store:
        store.put({"@id": "urn:t:read", "text": "x"})
        first = store.get("urn:t:read")
        second = store.get("urn:t:read")
    assert first is not None
    assert second is not None
    assert (first.access_count, second.access_count) == (1, 2)
    assert second.last_accessed >= first.last_accessed
    with L0Store(path) as reopened:
        again = reopened.get("urn:t:read")
    assert again is not None
    assert again.access_count == 3
    assert again.generation == 1  # reads are not changes


def test_merge_on_same_id(store: L0Store) -> None:
    store.put(
        {"@id": "urn:m", "@type": "Person", "name": "Ada", "text": "a long description"},
        tags=["x", "y"],
        importance=0.5,
        metadata={"source": "a", "keep": True},
    )
    store.put(
        {"@id": "urn:m", "@type": "Employee", "name": "Ada L.", "dept": "R&D", "text": "short"},
        tags=["y", "z"],
        importance=0.7,
        metadata={"source": "b"},
    )
    entry = store.get("urn:m")
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
    assert [e.iri for e in store.by_type("Employee")] == ["urn:m"]
    assert [e.iri for e in store.by_tags(["z"])] == ["urn:m"]


def test_merge_without_importance_keeps_the_stored_one(store: L0Store) -> None:
    store.put({"@id": "urn:m"}, importance=0.9)
    store.put({"@id": "urn:m", "extra": 1})
    entry = store.get("urn:m")
    assert entry is not None
    assert entry.importance == 0.9


def test_storing_the_same_node_again_is_not_a_change(store: L0Store) -> None:
    node = {"@id": "urn:same", "text": "t"}
    store.put(node, tags=["a"])
    before = store.get("urn:same")
    store.put(node, tags=["a"])
    after = store.get("urn:same")
    assert before is not None
    assert after is not None
    assert (after.generation, after.content_hash) == (before.generation, before.content_hash)


def test_generation_increases_on_every_change(store: L0Store) -> None:
    store.put({"@id": "urn:g", "v": 1})
    store.put({"@id": "urn:g", "v": 2})
    store.put({"@id": "urn:g"}, tags=["t"])
    store.put({"@id": "urn:g"}, named_graph="g:other")
    entry = store.set_mesi_state("urn:g", "M")
    assert entry.generation == 5
    assert entry.mesi_state is MesiState.MODIFIED


def test_set_mesi_state_of_a_missing_entry_is_a_lookup_error(store: L0Store) -> None:
    with pytest.raises(EntryNotFoundError, match="urn:none"):
        store.set_mesi_state("urn:none", MesiState.INVALID)
    with pytest.raises(LookupError):
        store.set_mesi_state("urn:none", "I")


def test_put_many_merges_duplicates_within_the_batch(store: L0Store) -> None:
    iris = store.put_many(
        [
            Record({"@id": "urn:d", "a": 1}, tags=["one"]),
            {"@id": "urn:e"},
            Record({"@id": "urn:d", "b": 2}, tags=["two"]),
        ]
    )
    assert iris == ["urn:d", "urn:e", "urn:d"]
    entry = store.get("urn:d")
    assert entry is not None
    assert entry.node == {"@id": "urn:d", "a": 1, "b": 2}
    assert entry.tags == ("one", "two")
    assert store.count() == 2


def test_a_large_batch_reaches_every_index(store: L0Store) -> None:
    """Rows go to SQLite many per statement: sizes off the statement boundaries lose none."""
    count = 1_003  # 66 and 499 rows per statement for entries and tags: both leave a remainder
    store.put_many(
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
    assert store.count() == count
    assert len(store.by_tags(["all"])) == count
    assert [e.iri for e in store.by_tags(["t1002"])] == ["urn:n:1002"]
    assert len(store.by_tags(["mod-4"])) == len(range(4, count, 5))
    assert len(store.by_type("Item")) == count
    assert len(store.by_type("Kind2")) == len(range(2, count, 3))
    assert len(store.neighbours("urn:hub", direction="in")) == count
    assert store.neighbours("urn:n:1002", direction="out") == [
        Edge("urn:n:1002", "also", "urn:hub"),
        Edge("urn:n:1002", "next", "urn:n:1003"),
    ]
    assert [h.entry.iri for h in store.search_text("word1002")] == ["urn:n:1002"]
    assert len(store.by_importance(0.9, 1.0)) == len(range(9, count, 10))
    last = store.get("urn:n:1002")
    assert last is not None
    assert last.tags == ("all", "mod-2", "t1002")
    assert last.jsonld_types == ("Item", "Kind0")
    assert last.access_count == 1


def test_put_many_validates_every_item_before_checking_sizes() -> None:
    """An invalid item is reported even after an oversized one, and nothing is written."""
    with L0Store(config=StoreConfig(max_content_bytes=100)) as small:
        with pytest.raises(InvalidNodeError, match="@type"):
            small.put_many([{"@id": "urn:a", "text": "x" * 200}, {"@id": "urn:b", "@type": 5}])
        assert small.count() == 0


def test_put_many_is_one_transaction(store: L0Store) -> None:
    config_limit = StoreConfig(max_content_bytes=200)
    with L0Store(config=config_limit) as small:
        small.put({"@id": "urn:big", "text": "x" * 100})
        with pytest.raises(ContentTooLargeError, match="urn:big"):
            # The third record merges into urn:big and grows it over the limit.
            small.put_many(
                [{"@id": "urn:ok1"}, {"@id": "urn:ok2"}, {"@id": "urn:big", "more": "y" * 100}]
            )
        assert small.count() == 1
        assert small.get_node("urn:big") == {"@id": "urn:big", "text": "x" * 100}


def test_tag_queries_all_and_any(store: L0Store) -> None:
    store.put({"@id": "urn:1"}, tags=["a", "b"])
    store.put({"@id": "urn:2"}, tags=["b", "c"])
    store.put({"@id": "urn:3"}, tags=["c"])
    assert [e.iri for e in store.by_tags(["b"])] == ["urn:1", "urn:2"]
    assert [e.iri for e in store.by_tags(["b", "c"])] == ["urn:2"]
    assert [e.iri for e in store.by_tags(["a", "c"], match="any")] == ["urn:1", "urn:2", "urn:3"]
    assert [e.iri for e in store.by_tags(["b", "c"], match="any", limit=1)] == ["urn:1"]
    assert store.by_tags(["nothing"]) == []


def test_graph_type_prefix_and_importance_queries(store: L0Store) -> None:
    store.put({"@id": "urn:p:1", "@type": "Person"}, named_graph="g:people", importance=0.2)
    store.put({"@id": "urn:p:2", "@type": ["Person", "Admin"]}, named_graph="g:people")
    store.put({"@id": "urn:t:1", "@type": "Task"}, named_graph="g:tasks", importance=0.9)
    assert [e.iri for e in store.by_graph("g:people")] == ["urn:p:1", "urn:p:2"]
    assert [e.iri for e in store.by_type("Admin")] == ["urn:p:2"]
    assert [e.iri for e in store.by_type(["Admin", "Task"])] == ["urn:p:2", "urn:t:1"]
    assert [e.iri for e in store.by_prefix("urn:p:")] == ["urn:p:1", "urn:p:2"]
    assert [e.iri for e in store.by_prefix("urn:")] == ["urn:p:1", "urn:p:2", "urn:t:1"]
    assert [e.iri for e in store.by_importance(0.5)] == ["urn:t:1", "urn:p:2"]
    assert [e.iri for e in store.by_importance(0.0, 0.3)] == ["urn:p:1"]
    assert store.graph_counts() == {"g:people": 2, "g:tasks": 1}
    assert store.type_counts() == {"Person": 2, "Admin": 1, "Task": 1}


def test_prefix_query_treats_like_and_glob_characters_literally(store: L0Store) -> None:
    store.put({"@id": "urn:a%_*[x]:1"})
    store.put({"@id": "urn:ab:1"})
    assert [e.iri for e in store.by_prefix("urn:a%_*[")] == ["urn:a%_*[x]:1"]


def test_text_search_ranks_by_bm25(store: L0Store) -> None:
    store.put({"@id": "urn:1", "text": "the login page times out after a deploy"})
    store.put({"@id": "urn:2", "text": "login login login: the login form"})
    store.put({"@id": "urn:3", "text": "billing export runs nightly"})
    store.put({"@id": "urn:4", "title": "Nested", "body": {"summary": "timeouts in billing"}})
    hits = store.search_text("login")
    assert [hit.entry.iri for hit in hits] == ["urn:2", "urn:1"]  # term frequency counts
    assert [hit.rank for hit in hits] == [1, 2]
    assert hits[0].score > hits[1].score > 0
    # A rare term in a short entry outranks a common term in a longer one (IDF, length).
    hits = store.search_text("login timeouts")
    assert hits[0].entry.iri == "urn:4"
    assert {hit.entry.iri for hit in hits} == {"urn:1", "urn:2", "urn:4"}
    assert store.search_text("billing", limit=1)[0].entry.iri in {"urn:3", "urn:4"}


def test_text_search_matches_word_forms_and_skips_stop_words(store: L0Store) -> None:
    store.put({"@id": "urn:paint", "text": "Melanie painted a sunrise last year"})
    store.put({"@id": "urn:other", "text": "What is the plan for the weekend?"})
    assert [h.entry.iri for h in store.search_text("When did she paint the sunrises?")] == [
        "urn:paint"
    ]
    # A query of stop words alone still searches for them.
    assert [h.entry.iri for h in store.search_text("the")] == ["urn:other"]


def test_text_search_takes_any_text_safely(store: L0Store) -> None:
    store.put({"@id": "urn:q", "text": 'quote " and NEAR( AND OR * ^'})
    assert store.search_text('" ( * ^ : -') == []
    assert [h.entry.iri for h in store.search_text("NEAR(")] == ["urn:q"]
    assert [h.entry.iri for h in store.search_text('quote"')] == ["urn:q"]
    assert store.search_text("   ") == []


def test_references_are_edges_in_both_directions(store: L0Store) -> None:
    store.put(
        {
            "@id": "urn:task",
            "owner": {"@id": "urn:alice"},
            "watchers": [{"@id": "urn:bob"}, {"@id": "urn:alice"}],
            "step": {"detail": {"blockedBy": {"@id": "urn:other"}}},
            "self": {"@id": "urn:task"},
        }
    )
    store.put({"@id": "urn:review", "about": {"@id": "urn:task"}})
    assert store.neighbours("urn:task", direction="out") == [
        Edge("urn:task", "blockedBy", "urn:other"),
        Edge("urn:task", "owner", "urn:alice"),
        Edge("urn:task", "watchers", "urn:alice"),
        Edge("urn:task", "watchers", "urn:bob"),
    ]
    assert store.neighbours("urn:task", direction="in") == [Edge("urn:review", "about", "urn:task")]
    assert store.neighbours("urn:alice") == [
        Edge("urn:task", "owner", "urn:alice"),
        Edge("urn:task", "watchers", "urn:alice"),
    ]


def test_edges_follow_a_merge(store: L0Store) -> None:
    store.put({"@id": "urn:t", "owner": {"@id": "urn:a"}})
    store.put({"@id": "urn:t", "owner": {"@id": "urn:b"}})
    assert store.neighbours("urn:t", direction="out") == [Edge("urn:t", "owner", "urn:b")]
    assert store.neighbours("urn:a") == []


def test_delete_removes_the_entry_from_every_index(store: L0Store) -> None:
    store.put(
        {"@id": "urn:gone", "@type": "Task", "text": "vanishing words", "to": {"@id": "urn:x"}},
        tags=["doomed"],
        named_graph="g:doomed",
        importance=0.99,
    )
    store.put({"@id": "urn:stays", "text": "other"}, tags=["doomed"])
    assert store.delete("urn:gone") is True
    assert store.get("urn:gone") is None
    assert [e.iri for e in store.by_tags(["doomed"])] == ["urn:stays"]
    assert store.by_graph("g:doomed") == []
    assert store.by_type("Task") == []
    assert store.by_prefix("urn:gone") == []
    assert store.by_importance(0.9) == []
    assert store.search_text("vanishing") == []
    assert store.neighbours("urn:x") == []
    assert store.tag_counts() == {"doomed": 1}
    assert store.graph_counts() == {}
    assert store.type_counts() == {}
    assert store.delete("urn:gone") is False
    # A new entry with the same IRI starts fresh.
    store.put({"@id": "urn:gone", "text": "back"})
    entry = store.get("urn:gone")
    assert entry is not None
    assert (entry.tags, entry.generation) == ((), 1)


def _indexed_words(path: Path) -> list[str]:
    """Return every word occurrence the full-text index of the store at ``path`` holds."""
    conn = sqlite3.connect(path)
    try:
        conn.execute("CREATE VIRTUAL TABLE temp.words USING fts5vocab(main, entry_text, instance)")
        return [row[0] for row in conn.execute("SELECT term FROM temp.words ORDER BY term")]
    finally:
        conn.close()


def test_the_text_index_gives_back_every_word_on_merge_and_delete(tmp_path: Path) -> None:
    # The index keeps no copy of the text; a merge or delete must give back exactly the words
    # written, including after a merge added keys that sort before the existing ones.
    path = tmp_path / "store.sqlite3"
    with L0Store(path) as store:
        store.put({"@id": "urn:a", "zeta": "last key", "text": "first words"})
        store.put({"@id": "urn:a", "alpha": "sorts first", "text": "longer replacement words"})
        store.put_many([{"@id": "urn:b", "text": "bee one"}, {"@id": "urn:b", "aa": "bee two"}])
        store.put({"@id": "urn:c", "n": 7})
        assert [hit.entry.iri for hit in store.search_text("sorts")] == ["urn:a"]
        assert [hit.entry.iri for hit in store.search_text("two")] == ["urn:b"]
        assert [hit.entry.iri for hit in store.search_text("replacement")] == ["urn:a"]
        assert "last" in _indexed_words(path)
        for iri in ("urn:a", "urn:b", "urn:c"):
            assert store.delete(iri) is True
        assert _indexed_words(path) == []
        assert store.search_text("words bee sorts") == []


def test_a_version_1_store_gets_a_contentless_text_index(tmp_path: Path) -> None:
    path = tmp_path / "store.sqlite3"
    with L0Store(path) as store:
        store.put({"@id": "urn:old", "text": "painted fences"})
    conn = sqlite3.connect(path)
    conn.executescript(
        "DROP TABLE entry_text;"
        "CREATE VIRTUAL TABLE entry_text USING fts5 (text, tokenize = 'porter unicode61');"
        "INSERT INTO entry_text (rowid, text) VALUES (1, 'painted fences');"
        "PRAGMA user_version = 1;"
    )
    conn.close()
    with L0Store(path) as store:
        assert [hit.entry.iri for hit in store.search_text("painting")] == ["urn:old"]
        assert store.delete("urn:old") is True
        assert store.search_text("painting") == []
    assert _indexed_words(path) == []
    conn = sqlite3.connect(path)
    assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    conn.close()


def test_values_that_look_like_sql_are_stored_literally(store: L0Store) -> None:
    hostile = "x'); DROP TABLE entries; --"
    store.put({"@id": "urn:" + "sql'--", "text": hostile}, tags=[hostile], named_graph=hostile)
    assert [e.iri for e in store.by_tags([hostile])] == ["urn:sql'--"]
    assert [e.iri for e in store.by_graph(hostile)] == ["urn:sql'--"]
    assert store.count() == 1


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
    ],
)
def test_bad_nodes_are_typed_errors_and_write_nothing(
    store: L0Store, node: object, message: str
) -> None:
    with pytest.raises(InvalidNodeError, match=message):
        store.put(node)
    assert store.count() == 0


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
        ({"mesi_state": "X"}, "'X'"),
    ],
)
def test_bad_options_are_typed_errors_naming_the_value(
    store: L0Store, options: dict[str, object], message: str
) -> None:
    with pytest.raises(InvalidInputError, match=message):
        store.put({"@id": "urn:bad"}, **options)  # type: ignore[arg-type]
    assert store.count() == 0


def test_content_over_the_limit_is_rejected_with_its_size() -> None:
    with L0Store(config=StoreConfig(max_content_bytes=64)) as small:
        with pytest.raises(ContentTooLargeError, match="over the limit of 64"):
            small.put({"@id": "urn:big", "text": "é" * 40})
        assert small.count() == 0


def test_a_bad_record_in_a_batch_writes_none(store: L0Store) -> None:
    with pytest.raises(InvalidNodeError):
        store.put_many([{"@id": "urn:ok"}, "not json"])
    with pytest.raises(InvalidInputError, match="iterable of records"):
        store.put_many({"@id": "urn:ok"})  # type: ignore[arg-type]
    assert store.count() == 0


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
def test_bad_query_arguments_are_typed_errors(store: L0Store, call: object, message: str) -> None:
    with pytest.raises(InvalidInputError, match=message):
        call(store)  # type: ignore[operator]


def test_a_closed_store_refuses_work() -> None:
    store = L0Store()
    store.close()
    store.close()
    with pytest.raises(ClosedError):
        store.put({"@id": "urn:x"})
    with pytest.raises(ClosedError):
        store.get("urn:x")


def test_file_store_uses_wal_and_survives_reopen(tmp_path: Path) -> None:
    path = tmp_path / "l0.sqlite3"
    with L0Store(path) as store:
        store.put({"@id": "urn:keep", "text": "kept"}, tags=["t"])
    with sqlite3.connect(path) as raw:
        assert raw.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    with L0Store(path) as store:
        assert store.get_node("urn:keep") == {"@id": "urn:keep", "text": "kept"}
        assert store.integrity_check() == "ok"


def test_recent_lists_the_latest_changes_first(store: L0Store) -> None:
    store.put({"@id": "urn:1"})
    store.put({"@id": "urn:2"})
    store.put({"@id": "urn:1", "changed": True})
    assert [e.iri for e in store.recent(limit=2)] == ["urn:1", "urn:2"]


def test_a_transaction_groups_writes_all_or_none(store: L0Store) -> None:
    with store.transaction():
        store.put({"@id": "urn:a"})
        store.put_many([{"@id": "urn:b"}, {"@id": "urn:c"}])
        assert store.get("urn:a") is not None
    assert store.count() == 3

    def failing() -> None:
        with store.transaction():
            store.put({"@id": "urn:d"})
            store.delete("urn:a")
            raise RuntimeError("boom")

    with pytest.raises(RuntimeError, match="boom"):
        failing()
    assert store.count() == 3
    assert "urn:a" in store
    assert "urn:d" not in store


def test_a_failed_inner_write_rolls_back_only_itself() -> None:
    with L0Store(config=StoreConfig(max_content_bytes=200)) as store:
        store.put({"@id": "urn:big", "text": "x" * 100})
        with store.transaction():
            store.put({"@id": "urn:kept"})
            with pytest.raises(ContentTooLargeError):
                # Fails inside the write, after urn:never was staged: a savepoint rolls back.
                store.put_many([{"@id": "urn:never"}, {"@id": "urn:big", "more": "y" * 100}])
        assert "urn:kept" in store
        assert "urn:never" not in store
        assert store.count() == 2


def test_retag_adds_and_removes_tags_in_every_index(store: L0Store) -> None:
    store.put({"@id": "urn:r"}, tags=["pending", "task:1"])
    entry = store.retag("urn:r", add=["done"], remove=["pending"])
    assert entry.tags == ("task:1", "done")
    assert entry.generation == 2
    assert store.by_tags(["pending"]) == []
    assert [e.iri for e in store.by_tags(["done", "task:1"])] == ["urn:r"]
    assert store.retag("urn:r", add=["done"]).generation == 2  # no change, no new generation
    with pytest.raises(EntryNotFoundError):
        store.retag("urn:none", add=["x"])
    with pytest.raises(InvalidInputError):
        store.retag("urn:r", add=[""])
