"""EntryStore contract for export and import: ``scan_entries`` gives every live entry oldest
first; ``restore_many`` writes entries back exactly, in one transaction."""

from __future__ import annotations

import math
import time

import pytest

from gliding_core import EntryStore, InvalidInputError, MesiState, Record
from gliding_core.retention.transfer import restore_whole
from gliding_core.store.entry import Restored


def _restored(i: int, **fields: object) -> Restored:
    record = Record(
        {"@id": f"urn:r:{i}", "@type": "Note", "text": f"restored {i}", "link": {"@id": "urn:t"}},
        tags=["t", f"n{i}"],
        importance=0.25,
        named_graph="urn:g",
        metadata={"k": i},
        mesi_state="E",
    )
    return Restored(record, **{"created_at": 1_000.0 + i, **fields})  # type: ignore[arg-type]


def test_scan_entries_gives_every_live_entry_oldest_first(entry_store: EntryStore) -> None:
    entry_store.put_many([Record({"@id": f"urn:s:{i}"}) for i in range(5)])
    entry_store.put({"@id": "urn:s:gone"}, ttl=0.01)
    time.sleep(0.05)
    batches = list(entry_store.scan_entries(batch=2))
    assert [len(b) for b in batches] == [2, 2, 1]
    assert [e.iri for b in batches for e in b] == [f"urn:s:{i}" for i in range(5)]


def test_restore_many_writes_entries_back_exactly(entry_store: EntryStore) -> None:
    entry_store.put({"@id": "urn:r:0", "text": "an older version", "other": 1}, tags=["old"])
    expires = time.time() + 3_600
    iris = entry_store.restore_many([_restored(0), _restored(1, expires_at=expires)])
    assert iris == ["urn:r:0", "urn:r:1"]
    for i in (0, 1):
        entry = entry_store.get(f"urn:r:{i}")
        assert entry is not None
        assert entry.node == {
            "@id": f"urn:r:{i}",
            "@type": "Note",
            "text": f"restored {i}",
            "link": {"@id": "urn:t"},
        }
        assert entry.tags == ("t", f"n{i}")
        assert entry.importance == 0.25
        assert entry.named_graph == "urn:g"
        assert entry.metadata == {"k": i}
        assert entry.mesi_state == MesiState.EXCLUSIVE
        assert entry.created_at == 1_000.0 + i
    assert entry_store.expires_at(iris) == {"urn:r:1": expires}
    assert [iri for iri, _ in entry_store.search_ids("restored")] != []
    assert {e.source for e in entry_store.neighbours("urn:t", direction="in")} == set(iris)


@pytest.mark.store_config(expiry={"default_s": 60.0})
def test_restore_many_keeps_the_file_expiry_not_the_default(entry_store: EntryStore) -> None:
    entry_store.restore_many([_restored(0)])
    assert entry_store.expires_at(["urn:r:0"]) == {}


@pytest.mark.parametrize("bad", ["x", [Record({"@id": "urn:x"})], [None]])
def test_restore_many_refuses_what_is_not_restored_entries(
    entry_store: EntryStore, bad: object
) -> None:
    with pytest.raises(InvalidInputError):
        entry_store.restore_many(bad)  # type: ignore[arg-type]
    assert entry_store.count() == 0


@pytest.mark.parametrize("when", [math.inf, math.nan, "1", True])
def test_restore_many_refuses_bad_times_and_writes_nothing(
    entry_store: EntryStore, when: object
) -> None:
    with pytest.raises(InvalidInputError):
        entry_store.restore_many([_restored(0), _restored(1, created_at=when)])
    assert entry_store.count() == 0


@pytest.mark.store_config(max_content_bytes=4_096, text_head_bytes=512)
@pytest.mark.parametrize("index", [("title",), False, ("text",)], ids=["title", "none", "text"])
def test_a_text_in_parts_is_restored_with_its_own_index_fields(
    entry_store: EntryStore, index: object
) -> None:
    """Import and copy write an entry back (``restore_many``), then its whole text in parts
    (``restore_whole``): the entry keeps the index fields it was exported with."""
    text = "harbour tide tables, line by line. " * 400 + "zanzibar"
    node = {"@id": "urn:r:long", "@type": "Note", "title": "Brest"}
    entry_store.put_text(node, text, index=index)  # type: ignore[arg-type]  # parametrized
    entry = entry_store.get("urn:r:long")
    fields = entry_store.indexed_with(["urn:r:long"])["urn:r:long"]
    assert entry is not None
    assert fields == index
    item = Restored(
        Record(entry.node, tags=entry.tags, named_graph=entry.named_graph, index=fields),
        created_at=entry.created_at,
    )
    assert entry_store.delete("urn:r:long")
    with entry_store.transaction():
        entry_store.restore_many([item])
        restore_whole(entry_store, item, text)
    assert entry_store.indexed_with(["urn:r:long"]) == {"urn:r:long": index}
    assert entry_store.full_text("urn:r:long") == text
    found = [iri for iri, _ in entry_store.search_ids("zanzibar")]
    assert found == (["urn:r:long"] if index == ("text",) else [])
    found = [iri for iri, _ in entry_store.search_ids("brest")]
    assert found == (["urn:r:long"] if index == ("title",) else [])
