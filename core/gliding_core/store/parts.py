"""L0: texts of any size, kept in parts beside their entry (the SQLite side of ``put_text``).

An entry's node is bounded (``StoreConfig.max_content_bytes``), yet a turn, a tool result or a
pasted document may be larger, and the memory promises to keep every byte. ``put_text`` stores
such a text in two places, in one transaction:

- the entry's node holds a head of the text under ``"text"`` (at most
  ``StoreConfig.text_head_bytes`` UTF-8 bytes, ending with a note of how much is left out):
  what a read of the node, the change log and so the dense index see. The dense index embeds a
  bounded part of every entry this way;
- the whole text, in parts of at most ``max_content_bytes`` each, in the ``entry_parts`` table,
  and in the full-text index as a second row of the entry (its rowid negated), so a word
  anywhere in the text finds the entry. Search ranks an entry by the better of its two rows.
  The second row is there only when the entry's index fields take its ``"text"``
  (``searches_text``): an entry written with ``index=False``, or with fields that leave its text
  out, is not found by a word of it. Such an entry's parts carry a marker row
  (``UNSEARCHED``, no text), so that taking them out later takes no row out of the index that
  was never put in (the full-text index cannot tell: it keeps no copy of the text).

The parts live exactly as long as the text they complete: a later write that changes the
entry's ``"text"`` (``put``, ``replace``, ``put_text``) or deletes the entry takes them out, of
the full-text index too. ``full_text`` joins them back.

The pure helpers (``split_text``, ``head_of``, ``is_head``) are every implementation's: the head
and its note are part of the contract, so a reader of entries (the supplementary-input queue)
knows a head from its note, whatever the backend. The SQL helpers run on a connection the SQLite
store holds; every value travels as a parameter.
"""

from __future__ import annotations

import re
import sqlite3
from collections.abc import Mapping, Sequence
from typing import Any, Literal

from gliding_core.errors import InvalidInputError
from gliding_core.fields import IndexFields, indexed_text
from gliding_core.jsonld import Node, canonical_json, check_text, preview
from gliding_core.store.entry import Record

PARTS_SCHEMA = """
CREATE TABLE IF NOT EXISTS entry_parts (
    entry_id INTEGER NOT NULL, part INTEGER NOT NULL, text TEXT NOT NULL,
    PRIMARY KEY (entry_id, part)
);
"""
# An ordinary rowid table: its parts run to a megabyte each, which a WITHOUT ROWID table
# would copy into its B-tree's interior pages.

UNSEARCHED = -1
"""The part number of the marker row of a text in parts that is not in the full-text index."""
HEAD_NOTE = "\n[... {left} more characters of this text are kept in parts: store.full_text]"
_HEAD_END = re.compile(
    r"\n\[\.\.\. \d+ more characters of this text are kept in parts: store\.full_text\]\Z"
)
_INSERT_TEXT = "INSERT INTO entry_text (rowid, text) VALUES (?, ?)"
_DELETE_TEXT = "INSERT INTO entry_text (entry_text, rowid, text) VALUES ('delete', ?, ?)"
_CHUNK = 500


def split_text(text: str, part_bytes: int) -> list[str]:
    """Cut ``text`` into parts of at most ``part_bytes`` UTF-8 bytes, on character boundaries."""
    data = text.encode("utf-8")
    parts: list[str] = []
    start = 0
    while start < len(data):
        end = min(start + part_bytes, len(data))
        while end < len(data) and (data[end] & 0xC0) == 0x80:  # inside a character: back off
            end -= 1
        parts.append(data[start:end].decode("utf-8"))
        start = end
    return parts


def head_of(text: str, limit_bytes: int) -> str:
    """Return the head of ``text`` an entry keeps: at most ``limit_bytes`` UTF-8 bytes, with the
    note of what is left out (the note alone when there is no room for text)."""
    note_room = len(HEAD_NOTE.format(left=len(text)).encode("utf-8"))
    room = max(0, limit_bytes - note_room)
    cut = text.encode("utf-8")[:room].decode("utf-8", errors="ignore")
    return cut + HEAD_NOTE.format(left=len(text) - len(cut))


def is_head(text: object) -> bool:
    """Whether ``text`` may be the head of a text kept in parts (it ends with the note)."""
    return isinstance(text, str) and _HEAD_END.search(text) is not None


def searches_text(node: Mapping[str, Any], fields: IndexFields) -> bool:
    """Whether the index fields ``fields`` put ``node``'s ``"text"`` in its searchable text
    (then the whole text of a text kept in parts is searched too)."""
    without = {key: value for key, value in node.items() if key != "text"}
    return indexed_text(node, fields) != indexed_text(without, fields)


def write_parts(
    conn: sqlite3.Connection, entry_id: int, text: str, part_bytes: int, *, searched: bool = True
) -> None:
    """Make ``text`` the parts of entry ``entry_id``, and its second full-text row when
    ``searched`` (else the ``UNSEARCHED`` marker)."""
    drop_parts(conn, [entry_id])
    rows = [(entry_id, number, part) for number, part in enumerate(split_text(text, part_bytes))]
    if not searched:
        rows.append((entry_id, UNSEARCHED, ""))
    conn.executemany("INSERT INTO entry_parts (entry_id, part, text) VALUES (?, ?, ?)", rows)
    if searched:
        conn.execute(_INSERT_TEXT, (-entry_id, text))


def drop_parts(conn: sqlite3.Connection, entry_ids: Sequence[int]) -> None:
    """Take the parts of the entries ``entry_ids`` out of the store and the full-text index."""
    for start in range(0, len(entry_ids), _CHUNK):
        chunk = list(entry_ids[start : start + _CHUNK])
        holes = ", ".join("?" * len(chunk))
        found = conn.execute(
            f"SELECT DISTINCT entry_id FROM entry_parts WHERE entry_id IN ({holes})", chunk
        ).fetchall()
        for (entry_id,) in found:
            text = read_parts(conn, entry_id)
            searched = not conn.execute(
                "SELECT EXISTS (SELECT 1 FROM entry_parts WHERE entry_id = ? AND part = ?)",
                (entry_id, UNSEARCHED),
            ).fetchone()[0]
            if text is not None and searched:
                # The full-text index keeps no copy of the text: taking it out needs it back.
                conn.execute(_DELETE_TEXT, (-entry_id, text))
            conn.execute("DELETE FROM entry_parts WHERE entry_id = ?", (entry_id,))


def read_parts(conn: sqlite3.Connection, entry_id: int) -> str | None:
    """Return the text stored in parts for entry ``entry_id``, or ``None`` when it has none."""
    rows = conn.execute(
        "SELECT text FROM entry_parts WHERE entry_id = ? AND part >= 0 ORDER BY part", (entry_id,)
    ).fetchall()
    return "".join(row[0] for row in rows) if rows else None


def has_parts(conn: sqlite3.Connection) -> bool:
    """Whether any entry of the store has a text in parts (search then ranks two rows each)."""
    found: int = conn.execute("SELECT EXISTS (SELECT 1 FROM entry_parts)").fetchone()[0]
    return found == 1


def text_record(
    node: object,
    text: object,
    *,
    tags: Sequence[str],
    importance: float | None,
    named_graph: str | None,
    metadata: Mapping[str, Any] | None,
    index: Literal[False] | Sequence[str] | None = None,
) -> Record:
    """Check ``put_text``'s arguments; return the record of ``node`` without ``text``.

    Raises:
        InvalidInputError: ``text`` is not a string that encodes as UTF-8, or an option (the
            index fields among them) is invalid; InvalidNodeError: ``node`` is not a JSON-LD
            object.
    """
    if not isinstance(text, str):
        raise InvalidInputError(f"text must be a string, got {preview(text)}")
    check_text(text, what="text")
    return Record(
        node,
        tags=tags,
        importance=importance,
        named_graph=named_graph,
        metadata=metadata,
        index=index,
    )


def fits_whole(record: Record, text: str, limit: int) -> Record | None:
    """``record`` with ``text`` under ``"text"`` when that node is within ``limit`` bytes."""
    whole = {**record.node, "text": text}
    if len(text) * 4 + len(record.content) <= limit or (
        len(canonical_json(whole).encode("utf-8")) <= limit
    ):
        return with_node(record, whole)
    return None


def headed(record: Record, text: str, head_bytes: int, limit: int) -> Record:
    """``record`` with the head of ``text``: within ``head_bytes``, and short enough that the
    node's JSON (where escapes may lengthen it) is within ``limit`` bytes."""
    room = min(head_bytes, limit - len(record.content.encode("utf-8")))
    while True:
        result = with_node(record, {**record.node, "text": head_of(text, max(0, room))})
        if room <= 0 or len(result.content.encode("utf-8")) <= limit:
            return result  # with no room at all, the write refuses the node as too large
        room //= 2


def with_node(record: Record, node: Node) -> Record:
    """``record`` with another node (its tags, importance, graph, metadata, TTL and index
    fields kept)."""
    return Record(
        node,
        tags=record.tags,
        importance=record.importance,
        named_graph=record.named_graph,
        metadata=record.metadata,
        ttl=record.ttl,
        index=record.index,
    )
