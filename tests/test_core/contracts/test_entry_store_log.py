"""EntryStore contract, the change log: sequence numbers of text changes, catch-up reads,
watermarks, and listeners that hear of commits only.

A derived index (the dense index, the Poincaré index) catches up from ``changes_since(n)`` and
records where it got to as a watermark; these tests pin down what it may rely on, on every
implementation, including another process's writes on a shared one.
"""

from __future__ import annotations

import threading

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gliding_core import EntryStore, InvalidInputError
from gliding_core.store.protocol import Change
from tests.test_core.contracts.conftest import Backend, run_child


def test_an_empty_store_has_no_changes(entry_store: EntryStore) -> None:
    assert entry_store.change_sequence() == 0
    assert entry_store.changes_since(0) == []


def test_each_change_of_text_takes_the_next_sequence(entry_store: EntryStore) -> None:
    entry_store.put({"@id": "urn:a", "text": "first"})
    entry_store.put({"@id": "urn:b", "text": "second"})
    assert entry_store.change_sequence() == 2
    assert entry_store.changes_since(0) == [(1, "urn:a", "first"), (2, "urn:b", "second")]
    assert entry_store.changes_since(1) == [(2, "urn:b", "second")]
    assert entry_store.changes_since(2) == []


def test_a_changed_text_moves_the_iri_to_the_head_of_the_log(entry_store: EntryStore) -> None:
    entry_store.put_many([{"@id": "urn:a", "text": "one"}, {"@id": "urn:b", "text": "two"}])
    entry_store.put({"@id": "urn:a", "note": "added"})
    assert entry_store.changes_since(0) == [(2, "urn:b", "two"), (3, "urn:a", "added\none")]


def test_writes_that_leave_the_text_alone_are_not_logged(entry_store: EntryStore) -> None:
    entry_store.put({"@id": "urn:a", "text": "same"}, tags=["x"])
    entry_store.put({"@id": "urn:a", "text": "same"}, tags=["y"], importance=0.9)
    entry_store.retag("urn:a", remove=["x"])
    entry_store.get("urn:a")
    entry_store.put({"@id": "urn:link", "about": {"@id": "urn:a"}})  # no text at all
    assert entry_store.change_sequence() == 1


def test_a_deletion_is_logged_with_no_text(entry_store: EntryStore) -> None:
    entry_store.put({"@id": "urn:a", "text": "doomed"})
    entry_store.put({"@id": "urn:link", "about": {"@id": "urn:a"}})
    assert entry_store.delete("urn:a") is True
    assert entry_store.delete("urn:link") is True  # had no text, but a deletion is always logged
    assert entry_store.delete("urn:never") is False
    assert entry_store.changes_since(0) == [(2, "urn:a", None), (3, "urn:link", None)]
    entry_store.put({"@id": "urn:a", "text": "back"})
    assert entry_store.changes_since(0) == [(3, "urn:link", None), (4, "urn:a", "back")]


def test_changes_since_pages_with_limit(entry_store: EntryStore) -> None:
    entry_store.put_many({"@id": f"urn:p:{i}", "text": f"page {i}"} for i in range(25))
    first = entry_store.changes_since(0, limit=10)
    rest = entry_store.changes_since(first[-1][0], limit=100)
    assert [seq for seq, _, _ in first + rest] == list(range(1, 26))
    assert [iri for _, iri, _ in first + rest] == [f"urn:p:{i}" for i in range(25)]


def test_a_rolled_back_transaction_logs_nothing(entry_store: EntryStore) -> None:
    entry_store.put({"@id": "urn:kept", "text": "kept"})

    def abandon() -> None:
        with entry_store.transaction():
            entry_store.put({"@id": "urn:lost", "text": "lost"})
            entry_store.delete("urn:kept")
            raise RuntimeError("abandon")

    with pytest.raises(RuntimeError, match="abandon"):
        abandon()
    assert entry_store.change_sequence() == 1
    assert entry_store.changes_since(0) == [(1, "urn:kept", "kept")]


def test_a_transaction_logs_its_writes_together(entry_store: EntryStore) -> None:
    with entry_store.transaction():
        entry_store.put({"@id": "urn:a", "text": "one"})
        entry_store.put({"@id": "urn:a", "text": "one, longer"})
        entry_store.put({"@id": "urn:b", "text": "two"})
    assert entry_store.changes_since(0) == [(2, "urn:a", "one, longer"), (3, "urn:b", "two")]


def test_a_watermark_is_kept_and_never_goes_back(shared_entry_backend: Backend[EntryStore]) -> None:
    store = shared_entry_backend.open()
    try:
        store.put_many({"@id": f"urn:w:{i}", "text": "w"} for i in range(5))
        assert store.watermark("dense:test") == 0
        store.set_watermark("dense:test", 4)
        store.set_watermark("dense:test", 2)  # lower: ignored
        store.set_watermark("other", 5)
        assert store.watermark("dense:test") == 4
    finally:
        store.close()
    reopened = shared_entry_backend.open()
    try:
        assert reopened.watermark("dense:test") == 4
        assert reopened.watermark("other") == 5
        assert reopened.watermark("never-set") == 0
    finally:
        reopened.close()


@pytest.mark.parametrize("sequence", [-1, 1.5, "3", True, None])
def test_a_bad_sequence_is_refused(entry_store: EntryStore, sequence: object) -> None:
    with pytest.raises(InvalidInputError, match="sequence"):
        entry_store.changes_since(sequence)  # type: ignore[arg-type]
    with pytest.raises(InvalidInputError, match="sequence"):
        entry_store.set_watermark("dense:x", sequence)  # type: ignore[arg-type]
    assert entry_store.watermark("dense:x") == 0


def test_a_watermark_past_the_log_is_refused(entry_store: EntryStore) -> None:
    entry_store.put({"@id": "urn:a", "text": "a"})
    with pytest.raises(InvalidInputError, match="past the last change, 1"):
        entry_store.set_watermark("dense:x", 2)
    assert entry_store.watermark("dense:x") == 0


@pytest.mark.parametrize("name", ["", 7, None, b"dense"])
def test_a_bad_watermark_name_is_refused(entry_store: EntryStore, name: object) -> None:
    with pytest.raises(InvalidInputError, match="name"):
        entry_store.watermark(name)  # type: ignore[arg-type]
    with pytest.raises(InvalidInputError, match="name"):
        entry_store.set_watermark(name, 0)  # type: ignore[arg-type]


def test_a_bad_limit_is_refused(entry_store: EntryStore) -> None:
    with pytest.raises(InvalidInputError, match="limit"):
        entry_store.changes_since(0, limit=0)


def test_listeners_hear_of_commits_only(entry_store: EntryStore) -> None:
    heard: list[list[Change]] = []
    cancel = entry_store.subscribe(heard.append)
    with entry_store.transaction():
        entry_store.put({"@id": "urn:a", "text": "one"})
        entry_store.put({"@id": "urn:b", "text": "two"})
        assert heard == []  # not before the commit
    assert heard == [[("urn:a", "one"), ("urn:b", "two")]]

    def abandon() -> None:
        with entry_store.transaction():
            entry_store.put({"@id": "urn:lost", "text": "lost"})
            raise RuntimeError("abandon")

    with pytest.raises(RuntimeError, match="abandon"):
        abandon()
    entry_store.put({"@id": "urn:a", "note": "no new text"}, tags=["t"])
    entry_store.delete("urn:b")
    assert heard[1:] == [[("urn:a", "no new text\none")], [("urn:b", None)]]
    cancel()
    entry_store.put({"@id": "urn:c", "text": "unheard"})
    assert len(heard) == 3


def test_a_listener_that_fails_leaves_the_write_standing(entry_store: EntryStore) -> None:
    def failing(changes: list[Change]) -> None:
        raise RuntimeError("listener down")

    heard: list[list[Change]] = []
    entry_store.subscribe(failing)
    entry_store.subscribe(heard.append)
    entry_store.put({"@id": "urn:a", "text": "stands"})
    assert entry_store.get_node("urn:a") == {"@id": "urn:a", "text": "stands"}
    assert heard == [[("urn:a", "stands")]]


def test_a_second_handle_sees_the_first_ones_commits_and_log(
    shared_entry_backend: Backend[EntryStore],
) -> None:
    first, second = shared_entry_backend.open(), shared_entry_backend.open()
    try:
        inside, release = threading.Event(), threading.Event()

        def hold() -> None:
            with first.transaction():
                first.put({"@id": "urn:a", "text": "from the first handle"})
                inside.set()
                release.wait(timeout=60)

        writer = threading.Thread(target=hold)
        writer.start()
        try:
            assert inside.wait(timeout=60)
            uncommitted = (second.get("urn:a"), second.change_sequence())
        finally:
            release.set()
            writer.join()
        assert uncommitted == (None, 0)
        node = second.get_node("urn:a")
        assert node == {"@id": "urn:a", "text": "from the first handle"}
        assert second.changes_since(0) == [(1, "urn:a", "from the first handle")]
        second.delete("urn:a")
        assert "urn:a" not in first
        assert first.changes_since(1) == [(2, "urn:a", None)]
    finally:
        first.close()
        second.close()


WRITER = """
open_backend().put_many({"@id": f"urn:other:{i}", "text": f"from afar {i}"} for i in range(3))
store = open_backend()
store.delete("urn:mine")
store.close()
"""


def test_another_process_writes_appear_in_the_log(
    shared_entry_backend: Backend[EntryStore],
) -> None:
    store = shared_entry_backend.open()
    try:
        store.put({"@id": "urn:mine", "text": "here"})
        seen = store.change_sequence()
        child = run_child(shared_entry_backend, WRITER)
        child.communicate(timeout=120)
        assert child.returncode == 0
        assert store.change_sequence() == seen + 4
        assert store.changes_since(seen) == [
            (2, "urn:other:0", "from afar 0"),
            (3, "urn:other:1", "from afar 1"),
            (4, "urn:other:2", "from afar 2"),
            (5, "urn:mine", None),
        ]
    finally:
        store.close()


_IRIS = st.sampled_from([f"urn:h:{i}" for i in range(6)])
_OPS = st.lists(
    st.one_of(
        st.tuples(
            st.just("put"), _IRIS, st.sampled_from(["", "alpha", "beta gamma", "a longer text"])
        ),
        st.tuples(st.just("note"), _IRIS, st.sampled_from(["x", "y"])),
        st.tuples(st.just("delete"), _IRIS, st.just("")),
    ),
    max_size=30,
)


def _apply(store: EntryStore, op: tuple[str, str, str]) -> None:
    kind, iri, value = op
    if kind == "delete":
        store.delete(iri)
    elif kind == "note":
        store.put({"@id": iri, "note": value})
    else:
        store.put({"@id": iri, "text": value} if value else {"@id": iri})


def _catch_up(store: EntryStore, index: dict[str, str], since: int) -> int:
    for seq, iri, text in store.changes_since(since, limit=7):
        if text is None:
            index.pop(iri, None)
        else:
            index[iri] = text
        since = seq
    return since if since == store.change_sequence() else _catch_up(store, index, since)


# The examples share the test's store (what it held before is caught up from 0 like the rest).
@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(before=_OPS, after=_OPS)
def test_catching_up_from_any_watermark_gives_the_current_texts(
    entry_store: EntryStore, before: list[tuple[str, str, str]], after: list[tuple[str, str, str]]
) -> None:
    for op in before:
        _apply(entry_store, op)
    index: dict[str, str] = {}
    mark = _catch_up(entry_store, index, 0)
    for op in after:
        _apply(entry_store, op)
    _catch_up(entry_store, index, mark)
    truth = {iri: text for batch in entry_store.scan_texts() for iri, text in batch}
    assert index == truth
