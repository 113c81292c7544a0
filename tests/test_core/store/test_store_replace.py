"""L0's exact write, ``replace``: nothing of the old entry lingers, its history goes on."""

from __future__ import annotations

import pytest

from gliding_core import ContentTooLargeError, InvalidInputError, InvalidNodeError, L0Store
from gliding_core.config import StoreConfig
from gliding_core.store.entry import MesiState, Record

OLD = {
    "@id": "urn:r:1",
    "@type": ["Note", "Draft"],
    "text": "the heron waits by the weir",
    "extra": "lingering marigold",
    "about": {"@id": "urn:r:topic"},
}
NEW = {"@id": "urn:r:1", "@type": "Note", "text": "the heron flies"}


def test_replace_leaves_nothing_of_the_old_entry(store: L0Store) -> None:
    store.put(OLD, tags=["draft", "keep"], named_graph="urn:g:1", metadata={"a": 1})
    store.replace(NEW, tags=["keep", "final"], named_graph="urn:g:2", metadata={"b": 2})
    entry = store.get("urn:r:1")
    assert entry is not None
    assert entry.node == NEW
    assert entry.tags == ("keep", "final")
    assert entry.jsonld_types == ("Note",)
    assert entry.named_graph == "urn:g:2"
    assert entry.metadata == {"b": 2}
    assert [e.iri for e in store.by_tags(["draft"])] == []
    assert [e.iri for e in store.by_tags(["final"])] == ["urn:r:1"]
    assert [e.iri for e in store.by_type("Draft")] == []
    assert store.by_graph("urn:g:1") == []
    assert store.neighbours("urn:r:1", direction="out") == []
    assert store.search_text("marigold") == []
    assert store.search_text("weir") == []
    assert [hit.entry.iri for hit in store.search_text("flies")] == ["urn:r:1"]


def test_replace_continues_the_generation_and_keeps_the_creation_time(store: L0Store) -> None:
    store.put(OLD, tags=["draft"], importance=0.9)
    store.set_mesi_state("urn:r:1", MesiState.MODIFIED)
    before = store.get("urn:r:1")
    assert before is not None
    store.replace(NEW)
    after = store.get("urn:r:1")
    assert after is not None
    assert after.generation == before.generation + 1
    assert after.created_at == before.created_at
    assert after.access_count == before.access_count + 1  # the reads go on counting
    assert (after.importance, after.mesi_state) == (0.9, MesiState.MODIFIED)  # not given: kept
    store.replace(NEW)  # the same entry again: no change, no new generation
    again = store.get("urn:r:1")
    assert again is not None
    assert again.generation == after.generation
    store.replace(NEW, importance=0.2, mesi_state="shared")
    set_ = store.get("urn:r:1")
    assert set_ is not None
    assert (set_.importance, set_.mesi_state, set_.generation) == (
        0.2,
        MesiState.SHARED,
        after.generation + 1,
    )


def test_replace_logs_the_change_for_derived_indexes(store: L0Store) -> None:
    store.put(OLD)
    sequence = store.change_sequence()
    store.replace(NEW)
    assert store.changes_since(sequence) == [(sequence + 1, "urn:r:1", "the heron flies")]
    sequence = store.change_sequence()
    store.replace({**NEW, "extra": "x"}, tags=["t"])  # text grows: logged again
    assert [change[1] for change in store.changes_since(sequence)] == ["urn:r:1"]
    sequence = store.change_sequence()
    store.replace({**NEW, "extra": "x"})  # only a tag removed: the text did not change
    assert store.changes_since(sequence) == []


def test_replace_of_a_new_entry_is_a_put_and_a_batch_is_ordered(store: L0Store) -> None:
    assert store.replace_many([Record(OLD, tags=["a"]), Record(NEW, tags=["b"])]) == [
        "urn:r:1",
        "urn:r:1",
    ]
    entry = store.get("urn:r:1")
    assert entry is not None
    assert (entry.node, entry.tags, entry.generation) == (NEW, ("b",), 2)
    minted = store.replace({"text": "no id"})
    assert minted.startswith("urn:uuid:")
    assert store.get_node(minted) == {"@id": minted, "text": "no id"}


def test_a_bad_replace_writes_nothing() -> None:
    with L0Store(config=StoreConfig(max_content_bytes=200)) as store:
        store.put(OLD)
        with pytest.raises(InvalidNodeError):
            store.replace_many([Record(NEW), {"@id": 3}])
        with pytest.raises(ContentTooLargeError):
            store.replace_many([NEW, {"@id": "urn:r:2", "text": "x" * 300}])
        with pytest.raises(InvalidInputError, match="iterable of records"):
            store.replace_many(NEW)  # type: ignore[arg-type]
        assert store.get_node("urn:r:1") == OLD
        assert store.get("urn:r:2") is None
