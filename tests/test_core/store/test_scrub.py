"""L0 on SQLite: a scrubbed file holds no byte of a deleted entry, whatever SQLite's build does.

Debian's SQLite is built with ``SECURE_DELETE`` on; many builds (python.org's, macOS's) are not.
The writer here turns it off first, as such a build would have it, so the test shows what
``scrub`` itself must do: zero the freed pages, merge the full-text index, truncate the log.
"""

from __future__ import annotations

from pathlib import Path

from gliding_core import L0Store, Record

WORDS = [b"Qzdeletedword", b"qzdeletedword", b"X9988776"]


def _fill(store: L0Store) -> None:
    store._db.writer.execute("PRAGMA secure_delete = OFF")  # as on a build without it
    store.put_many(
        [Record({"@id": f"urn:keep:{i}", "text": f"kept text {i} " * 20}) for i in range(200)]
    )
    store.put_many(
        [
            Record({"@id": f"urn:gone:{i}", "text": f"Qzdeletedword X9988776 number {i} " * 10})
            for i in range(100)
        ]
    )


def _holding(path: Path) -> list[str]:
    return [
        f.name
        for f in sorted(path.parent.iterdir())
        if f.is_file() and any(word in f.read_bytes() for word in WORDS)
    ]


def test_deleted_text_stays_in_the_file_without_a_scrub(tmp_path: Path) -> None:
    path = tmp_path / "l0.sqlite3"
    with L0Store(path) as store:
        _fill(store)
        store.delete_many([f"urn:gone:{i}" for i in range(100)])
        store._db.writer.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    assert _holding(path)  # the scan finds what a plain delete leaves


def test_a_scrub_leaves_no_byte_of_deleted_text_in_any_file(tmp_path: Path) -> None:
    path = tmp_path / "l0.sqlite3"
    with L0Store(path) as store:
        _fill(store)
        reader = L0Store(path)  # another handle, idle: it must not keep the log alive
        assert reader.count() == 300
        store.delete_many([f"urn:gone:{i}" for i in range(100)])
        store.scrub()
        assert _holding(path) == []  # while open
        assert store.count() == 200
        assert len(store.search_ids("kept", limit=500)) == 200
        reader.close()
    assert _holding(path) == []
    with L0Store(path) as store:
        assert store.integrity_check() == "ok"
        assert store.search_ids("Qzdeletedword") == []
