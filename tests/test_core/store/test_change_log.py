"""L0Store's change log: the schema upgrade that brings it to a version-2 file.

What the change log promises (sequence numbers, catch-up reads, watermarks, other processes'
writes) is the L0 contract suite's (``contracts/test_entry_store_log.py``).
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

from gliding_core import L0Store


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
