"""L0 (SQLite): a store written before index fields is upgraded in place and keeps its text."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from gliding_core import L0Store
from gliding_core.store.sqlite import SCHEMA_VERSION


def _ids(store: L0Store, query: str) -> list[str]:
    return [iri for iri, _ in store.search_ids(query, limit=10)]


def _as_version_5(path: Path) -> None:
    """Make the file what the version before index fields wrote: no column, version 5."""
    conn = sqlite3.connect(path)
    try:
        conn.execute("ALTER TABLE entries DROP COLUMN index_fields")
        conn.execute("PRAGMA user_version = 5")
        conn.commit()
    finally:
        conn.close()


def test_entries_of_an_older_store_keep_every_value_until_written_again(tmp_path: Path) -> None:
    path = tmp_path / "l0.sqlite3"
    with L0Store(path) as store:  # written as before: every string and number is text
        store.put({"@id": "urn:a", "text": "plain words", "source": "urn:src:zebra"}, index=["$"])
        store.put({"@id": "urn:b", "text": "other words", "n": 1234}, index=["$"])
    _as_version_5(path)
    with L0Store(path) as store:
        assert store.indexed_with(["urn:a", "urn:b"]) == {"urn:a": ("$",), "urn:b": ("$",)}
        assert _ids(store, "zebra") == ["urn:a"]
        assert _ids(store, "1234") == ["urn:b"]
        assert {iri for _, iri, _ in store.changes_since(0)} == {"urn:a", "urn:b"}
        # A write without index fields moves the entry to the default; the old text goes out.
        store.put({"@id": "urn:a", "note": "seen"})
        assert _ids(store, "zebra") == []
        assert _ids(store, "plain") == ["urn:a"]
        assert store.indexed_with(["urn:a"]) == {"urn:a": None}
        assert store.delete("urn:b")
        assert _ids(store, "1234") == []
        assert _ids(store, "other") == []
        assert store.integrity_check() == "ok"
    conn = sqlite3.connect(path)
    try:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION == 6
    finally:
        conn.close()


def test_a_new_store_stores_nothing_for_the_default(tmp_path: Path) -> None:
    path = tmp_path / "l0.sqlite3"
    with L0Store(path) as store:
        store.put({"@id": "urn:a", "text": "words"})
        store.put({"@id": "urn:b", "text": "words"}, index=["text"])
    conn = sqlite3.connect(path)
    try:
        rows = dict(conn.execute("SELECT iri, index_fields FROM entries").fetchall())
    finally:
        conn.close()
    assert rows == {"urn:a": None, "urn:b": '["text"]'}
