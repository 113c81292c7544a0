"""L0Store beyond the EntryStore contract: the retired MESI column, the full-text index's own
words, schema upgrades and WAL.

What every L0 store does (writes, merges, reads, queries, search, refusals) is the contract
suite's, ``tests/test_core/contracts/``, which runs on this store too.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings

from gliding_core import EntryNotFoundError, InvalidInputError, L0Store, MesiState
from gliding_core.store.sqlite import SCHEMA_VERSION
from tests.test_core.input_strategies import attempt, iris, numbers, state


def test_generation_increases_on_every_change(store: L0Store) -> None:
    store.put({"@id": "urn:g", "v": 1})
    store.put({"@id": "urn:g", "v": 2})
    store.put({"@id": "urn:g"}, tags=["t"])
    store.put({"@id": "urn:g"}, named_graph="g:other")
    logged = store.change_sequence()
    entry = store.set_mesi_state("urn:g", "M")
    assert entry.generation == 5
    assert entry.mesi_state is MesiState.MODIFIED
    assert store.change_sequence() == logged  # not a change of text


def test_set_mesi_state_of_a_missing_entry_is_a_lookup_error(store: L0Store) -> None:
    with pytest.raises(EntryNotFoundError, match="urn:none"):
        store.set_mesi_state("urn:none", MesiState.INVALID)
    with pytest.raises(LookupError):
        store.set_mesi_state("urn:none", "I")


def test_a_bad_mesi_state_is_refused_naming_it(store: L0Store) -> None:
    with pytest.raises(InvalidInputError, match="'X'"):
        store.put({"@id": "urn:bad"}, mesi_state="X")
    assert store.count() == 0


@settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(iri=iris | numbers)
def test_set_mesi_state_takes_any_iri(store: L0Store, iri: Any) -> None:
    store.put({"@id": "urn:x:1", "text": "present"})
    before = state(store)
    ok, entry = attempt(lambda: store.set_mesi_state(iri, "M"))
    if ok:
        assert entry.mesi_state is MesiState.MODIFIED
    else:
        assert state(store) == before


def test_replace_keeps_the_mesi_state_unless_given(store: L0Store) -> None:
    store.put({"@id": "urn:r:1", "text": "the heron waits"}, importance=0.9)
    store.set_mesi_state("urn:r:1", MesiState.MODIFIED)
    before = store.get("urn:r:1")
    assert before is not None
    store.replace({"@id": "urn:r:1", "text": "the heron flies"})
    after = store.get("urn:r:1")
    assert after is not None
    assert (after.mesi_state, after.generation) == (MesiState.MODIFIED, before.generation + 1)
    store.replace({"@id": "urn:r:1", "text": "the heron flies"}, mesi_state="shared")
    set_ = store.get("urn:r:1")
    assert set_ is not None
    assert (set_.mesi_state, set_.generation) == (MesiState.SHARED, after.generation + 1)


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


def test_file_store_uses_wal_and_survives_reopen(tmp_path: Path) -> None:
    path = tmp_path / "l0.sqlite3"
    with L0Store(path) as store:
        store.put({"@id": "urn:keep", "text": "kept"}, tags=["t"])
    with sqlite3.connect(path) as raw:
        assert raw.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    with L0Store(path) as store:
        assert store.get_node("urn:keep") == {"@id": "urn:keep", "text": "kept"}
        assert store.integrity_check() == "ok"
