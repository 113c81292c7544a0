"""L0 change log: sequence numbers of text changes, catch-up reads, watermarks, the v3 upgrade."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gliding_core import InvalidInputError, L0Store


def test_an_empty_store_has_no_changes(store: L0Store) -> None:
    assert store.change_sequence() == 0
    assert store.changes_since(0) == []


def test_each_change_of_text_takes_the_next_sequence(store: L0Store) -> None:
    store.put({"@id": "urn:a", "text": "first"})
    store.put({"@id": "urn:b", "text": "second"})
    assert store.change_sequence() == 2
    assert store.changes_since(0) == [(1, "urn:a", "first"), (2, "urn:b", "second")]
    assert store.changes_since(1) == [(2, "urn:b", "second")]
    assert store.changes_since(2) == []


def test_a_changed_text_moves_the_iri_to_the_head_of_the_log(store: L0Store) -> None:
    store.put_many([{"@id": "urn:a", "text": "one"}, {"@id": "urn:b", "text": "two"}])
    store.put({"@id": "urn:a", "note": "added"})
    assert store.changes_since(0) == [(2, "urn:b", "two"), (3, "urn:a", "added\none")]


def test_writes_that_leave_the_text_alone_are_not_logged(store: L0Store) -> None:
    store.put({"@id": "urn:a", "text": "same"}, tags=["x"])
    store.put({"@id": "urn:a", "text": "same"}, tags=["y"], importance=0.9)
    store.retag("urn:a", remove=["x"])
    store.set_mesi_state("urn:a", "M")
    store.get("urn:a")
    store.put({"@id": "urn:link", "about": {"@id": "urn:a"}})  # no text at all
    assert store.change_sequence() == 1


def test_a_deletion_is_logged_with_no_text(store: L0Store) -> None:
    store.put({"@id": "urn:a", "text": "doomed"})
    store.put({"@id": "urn:link", "about": {"@id": "urn:a"}})
    assert store.delete("urn:a") is True
    assert store.delete("urn:link") is True  # had no text, but a deletion is always logged
    assert store.delete("urn:never") is False
    assert store.changes_since(0) == [(2, "urn:a", None), (3, "urn:link", None)]
    store.put({"@id": "urn:a", "text": "back"})
    assert store.changes_since(0) == [(3, "urn:link", None), (4, "urn:a", "back")]


def test_changes_since_pages_with_limit(store: L0Store) -> None:
    store.put_many({"@id": f"urn:p:{i}", "text": f"page {i}"} for i in range(25))
    first = store.changes_since(0, limit=10)
    rest = store.changes_since(first[-1][0], limit=100)
    assert [seq for seq, _, _ in first + rest] == list(range(1, 26))
    assert [iri for _, iri, _ in first + rest] == [f"urn:p:{i}" for i in range(25)]


def test_a_rolled_back_transaction_logs_nothing(store: L0Store) -> None:
    store.put({"@id": "urn:kept", "text": "kept"})

    def abandon() -> None:
        with store.transaction():
            store.put({"@id": "urn:lost", "text": "lost"})
            store.delete("urn:kept")
            raise RuntimeError("abandon")

    with pytest.raises(RuntimeError, match="abandon"):
        abandon()
    assert store.change_sequence() == 1
    assert store.changes_since(0) == [(1, "urn:kept", "kept")]


def test_a_transaction_logs_its_writes_together(store: L0Store) -> None:
    with store.transaction():
        store.put({"@id": "urn:a", "text": "one"})
        store.put({"@id": "urn:a", "text": "one, longer"})
        store.put({"@id": "urn:b", "text": "two"})
    assert store.changes_since(0) == [(2, "urn:a", "one, longer"), (3, "urn:b", "two")]


def test_a_watermark_is_kept_and_never_goes_back(tmp_path: Path) -> None:
    path = tmp_path / "l0.sqlite3"
    with L0Store(path) as store:
        store.put_many({"@id": f"urn:w:{i}", "text": "w"} for i in range(5))
        assert store.watermark("dense:test") == 0
        store.set_watermark("dense:test", 4)
        store.set_watermark("dense:test", 2)  # lower: ignored
        store.set_watermark("other", 5)
        assert store.watermark("dense:test") == 4
    with L0Store(path) as reopened:
        assert reopened.watermark("dense:test") == 4
        assert reopened.watermark("other") == 5
        assert reopened.watermark("never-set") == 0


@pytest.mark.parametrize("sequence", [-1, 1.5, "3", True, None])
def test_a_bad_sequence_is_refused(store: L0Store, sequence: object) -> None:
    with pytest.raises(InvalidInputError, match="sequence"):
        store.changes_since(sequence)  # type: ignore[arg-type]
    with pytest.raises(InvalidInputError, match="sequence"):
        store.set_watermark("dense:x", sequence)  # type: ignore[arg-type]
    assert store.watermark("dense:x") == 0


def test_a_watermark_past_the_log_is_refused(store: L0Store) -> None:
    store.put({"@id": "urn:a", "text": "a"})
    with pytest.raises(InvalidInputError, match="past the last change, 1"):
        store.set_watermark("dense:x", 2)
    assert store.watermark("dense:x") == 0


@pytest.mark.parametrize("name", ["", 7, None, b"dense"])
def test_a_bad_watermark_name_is_refused(store: L0Store, name: object) -> None:
    with pytest.raises(InvalidInputError, match="name"):
        store.watermark(name)  # type: ignore[arg-type]
    with pytest.raises(InvalidInputError, match="name"):
        store.set_watermark(name, 0)  # type: ignore[arg-type]


def test_a_bad_limit_is_refused(store: L0Store) -> None:
    with pytest.raises(InvalidInputError, match="limit"):
        store.changes_since(0, limit=0)


def test_a_version_2_store_is_upgraded_with_its_texts_in_the_log(tmp_path: Path) -> None:
    path = tmp_path / "l0.sqlite3"
    with L0Store(path) as store:
        store.put({"@id": "urn:one", "text": "one"})
        store.put({"@id": "urn:bare", "about": {"@id": "urn:one"}})
        store.put({"@id": "urn:two", "text": "two"})
    conn = sqlite3.connect(path)
    conn.executescript("DROP TABLE changes; DROP TABLE watermarks; PRAGMA user_version = 2;")
    conn.close()
    with L0Store(path) as store:
        assert store.changes_since(0) == [(1, "urn:one", "one"), (2, "urn:two", "two")]
        assert store.watermark("dense:x") == 0
        store.put({"@id": "urn:three", "text": "three"})
        assert store.change_sequence() == 3
    conn = sqlite3.connect(path)
    assert conn.execute("PRAGMA user_version").fetchone()[0] == 3
    conn.close()


WRITER = textwrap.dedent(
    """
    import sys
    from gliding_core import L0Store

    with L0Store(sys.argv[1]) as store:
        store.put_many({"@id": f"urn:other:{i}", "text": f"from afar {i}"} for i in range(3))
        store.delete("urn:mine")
    """
)


def test_another_process_writes_appear_in_the_log(tmp_path: Path) -> None:
    path = tmp_path / "l0.sqlite3"
    with L0Store(path) as store:
        store.put({"@id": "urn:mine", "text": "here"})
        seen = store.change_sequence()
        subprocess.run([sys.executable, "-c", WRITER, str(path)], check=True, timeout=120)
        assert store.change_sequence() == seen + 4
        assert store.changes_since(seen) == [
            (2, "urn:other:0", "from afar 0"),
            (3, "urn:other:1", "from afar 1"),
            (4, "urn:other:2", "from afar 2"),
            (5, "urn:mine", None),
        ]


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


def _apply(store: L0Store, op: tuple[str, str, str]) -> None:
    kind, iri, value = op
    if kind == "delete":
        store.delete(iri)
    elif kind == "note":
        store.put({"@id": iri, "note": value})
    else:
        store.put({"@id": iri, "text": value} if value else {"@id": iri})


def _catch_up(store: L0Store, index: dict[str, str], since: int) -> int:
    for seq, iri, text in store.changes_since(since, limit=7):
        if text is None:
            index.pop(iri, None)
        else:
            index[iri] = text
        since = seq
    return since if since == store.change_sequence() else _catch_up(store, index, since)


@settings(max_examples=60, deadline=None)
@given(before=_OPS, after=_OPS)
def test_catching_up_from_any_watermark_gives_the_current_texts(
    before: list[tuple[str, str, str]], after: list[tuple[str, str, str]]
) -> None:
    with L0Store() as store:
        for op in before:
            _apply(store, op)
        index: dict[str, str] = {}
        mark = _catch_up(store, index, 0)
        for op in after:
            _apply(store, op)
        _catch_up(store, index, mark)
        truth = {iri: text for batch in store.scan_texts() for iri, text in batch}
        assert index == truth
