"""L0Store's change log: the schema upgrade that brings it to a version-2 file.

What the change log promises (sequence numbers, catch-up reads, watermarks, other processes'
writes) is the L0 contract suite's (``contracts/test_entry_store_log.py``).
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

from gliding_core import L0Store
from gliding_core.store.sqlite import SCHEMA_VERSION


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
    assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    conn.close()


def test_a_version_3_store_is_upgraded_to_expire_entries(tmp_path: Path) -> None:
    path = tmp_path / "l0.sqlite3"
    with L0Store(path) as store:
        store.put({"@id": "urn:one", "text": "one"})
    conn = sqlite3.connect(path)
    conn.executescript("DROP VIEW live_entries; DROP TABLE entry_expiry; PRAGMA user_version = 3;")
    conn.close()
    with L0Store(path) as store:
        assert store.get("urn:one") is not None
        store.put({"@id": "urn:two", "text": "two"}, ttl=3_600)
        assert list(store.expires_at(["urn:one", "urn:two"])) == ["urn:two"]


_VERSION_4_VIEW = """
CREATE VIEW live_entries AS SELECT * FROM entries WHERE id NOT IN (
    SELECT entry_id FROM entry_expiry WHERE expires_at <= (julianday('now') - 2440587.5) * 86400.0
);
"""


def _plan(conn: sqlite3.Connection, sql: str) -> str:
    return " | ".join(row[3] for row in conn.execute(f"EXPLAIN QUERY PLAN {sql}", ("urn:one",)))


def test_a_version_4_store_gets_the_live_view_that_probes_per_row(tmp_path: Path) -> None:
    path = tmp_path / "l0.sqlite3"
    with L0Store(path) as store:
        store.put({"@id": "urn:one", "text": "one"})
        store.put({"@id": "urn:gone", "text": "gone"}, ttl=3_600)
    conn = sqlite3.connect(path)
    conn.executescript(f"DROP VIEW live_entries; {_VERSION_4_VIEW} PRAGMA user_version = 4;")
    conn.execute("UPDATE entry_expiry SET expires_at = 0")  # urn:gone expired long ago
    conn.commit()
    assert "LIST SUBQUERY" in _plan(conn, "SELECT iri FROM live_entries WHERE iri = ?")
    conn.close()
    with L0Store(path) as store:
        assert store.get("urn:one") is not None
        assert store.get("urn:gone") is None
    conn = sqlite3.connect(path)
    assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    # A get reads one row and probes the expiry table's key for it; it builds no list of every
    # expired id first (that list made a get of a 100,000-entry store 1.8 times as slow).
    plan = _plan(conn, "SELECT iri FROM live_entries WHERE iri = ?")
    assert "LIST SUBQUERY" not in plan
    assert "CORRELATED" in plan
    conn.close()
