"""Erasure contract: deleting many entries, scrubbing, forgetting a task's inputs and messages.

Every test runs on each implementation in ``conftest``'s tables (entry stores, dense indexes,
supplementary queues, coordination stores): ``Memory.forget`` and the expiry sweep reach the
layers only through these methods. That a scrubbed file holds no byte of what was deleted is
each implementation's own test, for it reads the backend's files: SQLite's in
``tests/test_core/store/test_scrub.py``, PostgreSQL's (the data directory of the server the
suite starts) in ``tests/test_core/test_forget_postgres.py``.
"""

from __future__ import annotations

from typing import Any

import pytest

from gliding_core import (
    EntryStore,
    HashEmbedder,
    InvalidInputError,
    Record,
    SupplementaryQueue,
    VectorIndex,
)
from gliding_core.blackboard.coordination.messages import MessageBoard
from gliding_core.blackboard.coordination.protocol import CoordinationStore
from gliding_core.store.filters import SearchFilters
from tests.test_core.contracts.conftest import Backend, IndexBackend

TASK_A, TASK_B = "urn:task:a", "urn:task:b"


def _fill(store: EntryStore) -> None:
    store.put_many(
        [
            Record({"@id": "urn:e:1", "text": "alpha words", "about": {"@id": "urn:e:2"}}),
            Record({"@id": "urn:e:2", "text": "beta words", "@type": "Note"}, tags=["t"]),
            Record({"@id": "urn:e:3", "text": "gamma words"}, tags=["t"], named_graph="urn:g"),
        ]
    )


# -- EntryStore.delete_many and scrub ------------------------------------------------------------


def test_delete_many_returns_what_existed_in_the_order_given(entry_store: EntryStore) -> None:
    _fill(entry_store)
    before = entry_store.change_sequence()
    gone = entry_store.delete_many(["urn:e:3", "urn:missing", "urn:e:1", "urn:e:3"])
    assert gone == ["urn:e:3", "urn:e:1"]
    assert entry_store.count() == 1
    assert entry_store.neighbours("urn:e:2", direction="in") == []  # e:1's edge went with it
    assert entry_store.search_ids("words") == [("urn:e:2", pytest.approx(1.0, abs=10))]
    assert entry_store.tag_counts() == {"t": 1}
    assert entry_store.graph_counts() == {}
    changes = entry_store.changes_since(before)
    assert [(iri, text) for _, iri, text in changes] == [("urn:e:3", None), ("urn:e:1", None)]


def test_delete_many_is_one_transaction(entry_store: EntryStore) -> None:
    _fill(entry_store)
    deleted: list[str] = []

    def delete_then_fail() -> None:
        with entry_store.transaction():
            deleted.extend(entry_store.delete_many(["urn:e:1", "urn:e:2"]))
            raise RuntimeError("roll back")

    with pytest.raises(RuntimeError):
        delete_then_fail()
    assert deleted == ["urn:e:1", "urn:e:2"]
    assert entry_store.count() == 3
    assert {iri for iri, _ in entry_store.search_ids("alpha beta")} == {"urn:e:1", "urn:e:2"}


@pytest.mark.parametrize("bad", ["urn:e:1", [""], ["two words"], [3], None])
def test_delete_many_refuses_bad_input_and_deletes_nothing(
    entry_store: EntryStore, bad: Any
) -> None:
    _fill(entry_store)
    with pytest.raises(InvalidInputError):
        entry_store.delete_many(bad)
    assert entry_store.count() == 3


def test_delete_many_forgets_the_access_counts(entry_store: EntryStore) -> None:
    _fill(entry_store)
    entry_store.get("urn:e:1")
    entry_store.delete_many(["urn:e:1"])
    entry_store.put({"@id": "urn:e:1", "text": "alpha again"})
    entry = entry_store.get("urn:e:1")
    assert entry is not None
    assert entry.access_count == 1  # this read only: the old count went with the entry


def test_scrub_keeps_every_live_entry_and_index(entry_store: EntryStore) -> None:
    _fill(entry_store)
    entry_store.delete_many(["urn:e:1"])
    before = {iri: entry_store.get_many([iri])[iri] for iri in ("urn:e:2", "urn:e:3")}
    sequence = entry_store.change_sequence()
    entry_store.scrub()
    assert entry_store.get_many(["urn:e:2", "urn:e:3"]) == before
    assert entry_store.change_sequence() == sequence
    assert entry_store.search_ids("alpha") == []
    assert [iri for iri, _ in entry_store.search_ids("gamma")] == ["urn:e:3"]
    assert entry_store.matching(SearchFilters(tags_any=("t",))) == ["urn:e:2", "urn:e:3"]
    entry_store.put({"@id": "urn:e:4", "text": "delta words"})  # and it goes on working
    assert entry_store.count() == 3


def test_scrub_of_a_reopened_store_finds_the_deletions(
    shared_entry_backend: Backend[EntryStore],
) -> None:
    first = shared_entry_backend.open()
    try:
        _fill(first)
        first.delete_many(["urn:e:2"])
    finally:
        first.close()
    second = shared_entry_backend.open()
    try:
        second.scrub()
        assert second.count() == 2
        assert [iri for iri, _ in second.search_ids("words")] != []
        assert "urn:e:2" not in second
    finally:
        second.close()


# -- VectorIndex.remove and scrub ----------------------------------------------------------------


@pytest.fixture
def dense(index_backend: IndexBackend) -> Any:
    store = index_backend.store.open()
    index = index_backend.open(store, HashEmbedder(64))
    yield store, index
    index.close()
    store.close()


def test_remove_drops_vectors_at_once_and_counts_what_was_held(dense: Any) -> None:
    store, index = dense
    _fill(store)
    assert index.count() == 3
    assert index.remove(["urn:e:1", "urn:missing"]) == 1
    assert index.count() == 2
    assert "urn:e:1" not in {iri for iri, _ in index.query("alpha words", 5)}


def test_scrub_leaves_the_index_equal_to_l0(dense: Any) -> None:
    store, index = dense
    _fill(store)
    store.delete_many(["urn:e:2"])
    index.remove(["urn:e:2"])
    index.scrub()
    assert isinstance(index, VectorIndex)
    assert index.count() == 2
    assert {iri for iri, _ in index.query("words", 5)} == {"urn:e:1", "urn:e:3"}
    assert index.behind() == 0
    store.put({"@id": "urn:e:5", "text": "epsilon"})  # it goes on following L0
    assert "urn:e:5" in {iri for iri, _ in index.query("epsilon", 5)}


# -- SupplementaryQueue.forget -------------------------------------------------------------------


def test_forget_deletes_every_input_of_the_task_and_no_other(queue: SupplementaryQueue) -> None:
    first = queue.put(TASK_A, "first Qzone")
    queue.take_pending(TASK_A, consumer="agent")
    second = queue.put(TASK_A, "second Qztwo")
    other = queue.put(TASK_B, "another task's input")
    assert queue.forget(TASK_A) == [first.iri, second.iri]
    assert queue.history(TASK_A) == []
    assert queue.pending_count(TASK_A) == 0
    assert [item.iri for item in queue.history(TASK_B)] == [other.iri]
    assert queue.store.search_ids("Qzone Qztwo") == []
    assert queue.forget(TASK_A) == []


def test_forget_of_a_bad_task_is_refused(queue: SupplementaryQueue) -> None:
    queue.put(TASK_A, "stays")
    with pytest.raises(InvalidInputError):
        queue.forget("not an iri")
    assert queue.pending_count(TASK_A) == 1


# -- CoordinationStore: MessageRecords.forget_task and scrub -------------------------------------


def test_forget_task_deletes_the_task_messages_only(
    coordination_store: CoordinationStore,
) -> None:
    board = MessageBoard(coordination_store)
    board.publish("chat", {"text": "for a"}, task=TASK_A)
    board.publish("chat", {"text": "for b"}, task=TASK_B)
    board.publish("chat", {"text": "for nobody"})
    latest = board.publish("chat", {"text": "for a again"}, task=TASK_A).sequence
    with coordination_store.write("forgetting") as tx:
        assert tx.messages.forget_task(TASK_A) == 2
        assert tx.messages.latest() == latest - 1
    with coordination_store.read("reading") as tx:
        texts = [m.payload["text"] for m in tx.messages.since(0)]
    assert texts == ["for b", "for nobody"]
    assert board.publish("chat", {"text": "next"}).sequence > latest  # never reused
    coordination_store.scrub()
    with coordination_store.read("reading") as tx:
        assert [m.payload["text"] for m in tx.messages.since(0)] == ["for b", "for nobody", "next"]
