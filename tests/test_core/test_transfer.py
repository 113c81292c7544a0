"""Export and import: a memory carried out as JSON Lines and back in, exactly; a hostile file
writes nothing."""

from __future__ import annotations

import errno
import io
import json
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

import pytest

from gliding_core import (
    Conversation,
    HashEmbedder,
    Memory,
    MemoryConfig,
    Scope,
    TopicConfig,
)
from gliding_core.errors import InvalidInputError, MalformedImportError, StorageError
from gliding_core.hyperspace.backends import CachedEmbedder
from gliding_core.retention import transfer
from gliding_core.retention.transfer import (
    FORMAT,
    MAX_LINE_BYTES,
    VERIFY_SAMPLE,
    VERSION,
    ImportReport,
)
from gliding_core.view.chatlog import ChatLog

CONFIG = MemoryConfig(topics=TopicConfig(interval_s=0))
QUERIES = ["crate code", "blue bicycle", "dock schedule", "plan the release", "alice"]


class CountingEmbedder(HashEmbedder):
    """The hash embedder, counting the texts it is asked to embed."""

    def __init__(self) -> None:
        super().__init__()
        self.texts: list[str] = []

    def embed_documents(self, texts: Sequence[str]) -> list[list[float]]:
        self.texts += list(texts)
        return super().embed_documents(texts)


def fill(memory: Memory) -> None:
    for user, words in (("alice", "blue bicycle"), ("bob", "crate code 5521")):
        conversation = Conversation(memory, scope=Scope.user(user))
        ChatLog(conversation).append(
            [
                {"role": "user", "content": f"{user} asks about the {words}", "id": f"{user}1"},
                {"role": "assistant", "content": f"The {words} is noted.", "id": f"{user}2"},
            ]
        )
        memory.supplements.put(Scope.user(user).task_iri, f"{user} adds: the dock schedule")
        conversation.deliver()
    memory.store.put(
        {
            "@id": "urn:ex:note",
            "@type": "Note",
            "text": "plan the release",
            "about": {"@id": "urn:ex:x"},
        },
        tags=["decision", "scope:user:alice"],
        importance=0.9,
        named_graph="urn:kg:notes",
        metadata={"source": "meeting", "n": [1, 2]},
    )
    memory.store.put({"@id": "urn:ex:brief", "text": "expires later"}, ttl=3_600)
    memory.store.put({"@id": "urn:ex:bare", "count": 3})  # no text
    memory.blackboard.write(
        [{"@id": "urn:ex:plan", "@type": "Plan", "text": "release plan draft"}],
        task="urn:task:release",
        area="plan",
    )
    memory.blackboard.flush()


def snapshot(memory: Memory) -> list[tuple[Any, ...]]:
    entries = [e for batch in memory.store.scan_entries() for e in batch]
    expiry = memory.store.expires_at([e.iri for e in entries])
    return sorted(
        (
            e.iri,
            e.content,
            e.tags,
            e.named_graph,
            e.importance,
            e.created_at,
            e.metadata,
            e.mesi_state,
            expiry.get(e.iri),
        )
        for e in entries
    )


def results(memory: Memory) -> list[list[tuple[str, float]]]:
    return [[(h.iri, round(h.score, 6)) for h in memory.search(q, 8)] for q in QUERIES]


@pytest.fixture
def exported(tmp_path: Path) -> tuple[Path, list[tuple[Any, ...]], list[Any]]:
    with Memory.open(tmp_path / "source", config=CONFIG, embedder=HashEmbedder()) as memory:
        fill(memory)
        path = tmp_path / "memory.jsonl"
        count = memory.export_jsonl(path)
        before, ranked = snapshot(memory), results(memory)
    assert count == len(before)
    return path, before, ranked


def test_import_into_an_empty_memory_gives_back_every_entry_and_the_same_search(
    tmp_path: Path, exported: tuple[Path, list[tuple[Any, ...]], list[Any]]
) -> None:
    path, before, ranked = exported
    embedder = CountingEmbedder()
    with Memory.open(tmp_path / "copy", config=CONFIG, embedder=embedder) as memory:
        report = memory.import_jsonl(path)
        verified = list(embedder.texts)  # the sample checked against the embedder, once each
        assert report.vectors_kept
        assert report.skipped == ()
        assert len(report.imported) == len(before)
        assert snapshot(memory) == before
        assert results(memory) == ranked
        entry_texts = {t for b in memory.store.scan_texts() for _, t in b}
        assert 0 < len(verified) == len(set(verified)) <= VERIFY_SAMPLE
        assert set(verified) <= entry_texts
        # No entry text was embedded after the sample: the file's vectors were used.
        assert [t for t in embedder.texts if t in entry_texts] == verified


def test_the_file_has_a_header_and_one_entry_per_line(
    exported: tuple[Path, list[tuple[Any, ...]], list[Any]],
) -> None:
    path, before, _ = exported
    lines = path.read_text(encoding="utf-8").splitlines()
    header = json.loads(lines[0])
    assert header["format"] == FORMAT
    assert header["version"] == VERSION
    assert header["embedder"] == "hash-256"
    assert len(lines) == len(before) + 1
    note = next(json.loads(x) for x in lines[1:] if '"urn:ex:note"' in x)
    assert note["entry"]["@id"] == "urn:ex:note"
    assert note["tags"] == ["decision", "scope:user:alice"]
    assert note["graph"] == "urn:kg:notes"
    assert note["importance"] == 0.9
    assert note["scope"] == "user:alice"
    assert isinstance(note["created"], float)
    kinds = {t for x in lines[1:] for t in json.loads(x)["entry"].get("@type", [])}
    kinds |= {json.loads(x)["entry"].get("@type") for x in lines[1:]} - {None}  # type: ignore[arg-type]
    assert {"Turn", "SupplementaryInput", "Plan", "Note"} <= kinds  # sessions, inputs, board


def test_another_embedder_computes_the_vectors_again(
    tmp_path: Path, exported: tuple[Path, list[tuple[Any, ...]], list[Any]]
) -> None:
    path, before, _ = exported
    other = HashEmbedder(64)
    with Memory.open(tmp_path / "copy", config=CONFIG, embedder=other) as memory:
        report = memory.import_jsonl(path)
        assert not report.vectors_kept
        assert snapshot(memory) == before
        assert memory.index.count() == sum(len(b) for b in memory.store.scan_texts())
        assert "crate code" in memory.search("crate code", 3)[0].entry.node["text"]


def test_a_scope_export_holds_that_scope_only(tmp_path: Path) -> None:
    with Memory.open(tmp_path / "m", config=CONFIG, embedder=HashEmbedder()) as memory:
        fill(memory)
        out = io.StringIO()
        count = memory.export_jsonl(out, scope=Scope.user("bob"))
    lines = out.getvalue().splitlines()
    assert json.loads(lines[0])["scope"] == "user:bob"
    assert count == len(lines) - 1 >= 3
    text = out.getvalue()
    assert "bob asks" in text
    assert "alice" not in text
    assert "release" not in text


# -- a hostile or broken file ------------------------------------------------------------------


def _file(tmp_path: Path, exported: Path, bad: str, at: int = 2) -> Path:
    lines = exported.read_text(encoding="utf-8").splitlines()
    lines.insert(at, bad)
    path = tmp_path / "bad.jsonl"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


GOOD = {"entry": {"@id": "urn:ex:new", "text": "fine"}, "created": 1.0}
BAD_LINES = {
    "not json": "{not json",
    "an array": "[1, 2]",
    "deep nesting": "[" * 100_000 + "]" * 100_000,
    "deep node": json.dumps({**GOOD, "entry": {"@id": "urn:x", "v": _deep}})
    if (_deep := json.loads("[" * 200 + "]" * 200)) is not None
    else "",
    "unknown key": json.dumps({**GOOD, "extra": 1}),
    "no id": json.dumps({**GOOD, "entry": {"text": "x"}}),
    "bad id": json.dumps({**GOOD, "entry": {"@id": "two words"}}),
    "importance out of range": json.dumps({**GOOD, "importance": 2}),
    "created not a number": json.dumps({**GOOD, "created": "yesterday"}),
    "created missing": json.dumps({"entry": {"@id": "urn:ex:new"}}),
    "NaN": '{"entry": {"@id": "urn:ex:new"}, "created": NaN}',
    "created too large for a float": json.dumps({**GOOD, "created": 10**400}),
    "importance too large for a float": json.dumps({**GOOD, "importance": 10**400}),
    "expires too large for a float": json.dumps({**GOOD, "expires": 10**400}),
    "embedding too large for a float": json.dumps({**GOOD, "embedding": [10**400] * 256}),
    "tags a string": json.dumps({**GOOD, "tags": "a,b"}),
    "tag with a control character": json.dumps({**GOOD, "tags": ["a\u0007"]}),
    "state unknown": json.dumps({**GOOD, "state": "Q"}),
    "metadata a list": json.dumps({**GOOD, "metadata": [1]}),
    "embedding of the wrong size": json.dumps({**GOOD, "embedding": [0.5, 0.5]}),
    "embedding of strings": json.dumps({**GOOD, "embedding": ["a"] * 256}),
    "lone surrogate": '{"entry": {"@id": "urn:ex:new", "text": "\\ud800"}, "created": 1.0}',
    "too long": json.dumps({**GOOD, "entry": {"@id": "urn:x", "text": "x" * MAX_LINE_BYTES}}),
}


@pytest.mark.parametrize("name", sorted(BAD_LINES))
def test_a_bad_line_is_named_and_nothing_is_written(
    tmp_path: Path, exported: tuple[Path, list[tuple[Any, ...]], list[Any]], name: str
) -> None:
    path = _file(tmp_path, exported[0], BAD_LINES[name], at=3)
    with Memory.open(tmp_path / "copy", config=CONFIG, embedder=HashEmbedder()) as memory:
        report = _line_4_refused_then_skipped(memory, path, "line 4")
        assert len(report.imported) == len(exported[1])


def _line_4_refused_then_skipped(memory: Memory, path: Path, match: str) -> ImportReport:
    """Import ``path``, whose line 4 is bad: refused whole, then imported around that line."""
    with pytest.raises(MalformedImportError, match=match) as caught:
        memory.import_jsonl(path)
    assert [n for n, _ in caught.value.problems] == [4]
    assert memory.store.count() == 0
    report = memory.import_jsonl(path, skip_bad=True)
    assert [n for n, _ in report.skipped] == [4]
    return report


def test_an_entry_given_twice_is_a_bad_line_not_the_last_one_winning(
    tmp_path: Path, exported: tuple[Path, list[tuple[Any, ...]], list[Any]]
) -> None:
    once = _file(tmp_path, exported[0], json.dumps(GOOD), at=2)
    path = _file(tmp_path, once, json.dumps({**GOOD, "entry": {**GOOD["entry"], "text": "new"}}), 3)
    with Memory.open(tmp_path / "copy", config=CONFIG, embedder=HashEmbedder()) as memory:
        report = _line_4_refused_then_skipped(memory, path, "came before, on line 3")
        assert report.imported.count("urn:ex:new") == 1
        entry = memory.store.get("urn:ex:new")
        assert entry is not None
        assert entry.node["text"] == "fine"  # the first, kept whole


@pytest.mark.parametrize(
    "header",
    [
        "",
        "{}",
        json.dumps({"format": "other", "version": 1, "embedder": "x"}),
        json.dumps({"format": FORMAT, "version": 99, "embedder": "x"}),
        json.dumps({"format": FORMAT, "version": 1}),
        json.dumps({"format": FORMAT, "version": 1, "embedder": "x", "dimension": -1}),
        json.dumps({"format": FORMAT, "version": 1, "embedder": "x", "more": 1}),
        json.dumps({"format": FORMAT, "version": 1, "embedder": "x", "entries": "3"}),
        json.dumps({"format": FORMAT, "version": 1, "embedder": "x", "entries": -1}),
    ],
)
def test_a_bad_header_refuses_the_file_even_when_skipping(
    tmp_path: Path, exported: tuple[Path, list[tuple[Any, ...]], list[Any]], header: str
) -> None:
    lines = exported[0].read_text(encoding="utf-8").splitlines()
    path = tmp_path / "bad.jsonl"
    path.write_text("\n".join([header, *lines[1:]]) + "\n", encoding="utf-8")
    with Memory.open(tmp_path / "copy", config=CONFIG, embedder=HashEmbedder()) as memory:
        with pytest.raises(MalformedImportError, match="line 1"):
            memory.import_jsonl(path, skip_bad=True)
        assert memory.store.count() == 0


def test_a_file_cut_short_at_a_line_end_is_refused(
    tmp_path: Path, exported: tuple[Path, list[tuple[Any, ...]], list[Any]]
) -> None:
    lines = exported[0].read_text(encoding="utf-8").splitlines()
    entries = len(exported[1])
    path = tmp_path / "short.jsonl"
    path.write_text("\n".join(lines[:3]) + "\n", encoding="utf-8")  # the header and 2 entries
    with Memory.open(tmp_path / "copy", config=CONFIG, embedder=HashEmbedder()) as memory:
        with pytest.raises(MalformedImportError, match=f"{entries} entries, 2 came") as caught:
            memory.import_jsonl(path)
        assert [n for n, _ in caught.value.problems] == [4]
        assert memory.store.count() == 0
        report = memory.import_jsonl(path, skip_bad=True)  # what came, with the gap listed
        assert len(report.imported) == 2
        assert [n for n, _ in report.skipped] == [4]


def test_a_file_that_is_not_utf8_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_bytes(b'{"format": "gliding-horse-memory"}\n\xff\xfe\n')
    with Memory(config=CONFIG, embedder=HashEmbedder()) as memory:
        with pytest.raises(MalformedImportError, match="UTF-8"):
            memory.import_jsonl(path)
        assert memory.store.count() == 0


def test_a_failing_write_leaves_nothing(
    tmp_path: Path, exported: tuple[Path, list[tuple[Any, ...]], list[Any]]
) -> None:
    # The last line is too large for this memory's store: checked before any write.
    from gliding_core.config import StoreConfig

    small = MemoryConfig(topics=TopicConfig(interval_s=0), store=StoreConfig(max_content_bytes=64))
    with Memory(config=small, embedder=HashEmbedder()) as memory:
        with pytest.raises(MalformedImportError):
            memory.import_jsonl(exported[0])
        assert memory.store.count() == 0


# -- texts kept in parts ---------------------------------------------------------------------

BIG = "".join(f"line {i} of the long tool result, with ünïcode {i % 97}.\n" for i in range(60_000))
TAIL_WORD = "zanzibarquokka"  # only at the very end of the text, far past the head


def _with_a_long_text(tmp_path: Path) -> tuple[Path, list[tuple[Any, ...]]]:
    with Memory.open(tmp_path / "source", config=CONFIG, embedder=HashEmbedder()) as memory:
        fill(memory)
        memory.store.put_text(
            {"@id": "urn:ex:long", "@type": "ToolResult"},
            BIG + TAIL_WORD,
            tags=["tool"],
            importance=0.7,
        )
        assert memory.store.full_text("urn:ex:long") == BIG + TAIL_WORD
        path = tmp_path / "memory.jsonl"
        memory.export_jsonl(path)
        before = snapshot(memory)
    return path, before


def test_a_text_kept_in_parts_travels_whole(tmp_path: Path) -> None:
    path, before = _with_a_long_text(tmp_path)
    lines = path.read_text(encoding="utf-8").splitlines()
    assert json.loads(lines[0])["version"] == VERSION
    entry_at = next(i for i, x in enumerate(lines) if '"urn:ex:long"' in x)
    count = json.loads(lines[entry_at])["text_parts"]
    assert count >= 3  # about 3.4 MB of text, a megabyte a line
    parts = [json.loads(x) for x in lines[entry_at + 1 : entry_at + 1 + count]]
    assert [p["part"] for p in parts] == list(range(count))
    assert "".join(p["text"] for p in parts) == BIG + TAIL_WORD
    with Memory.open(tmp_path / "copy", config=CONFIG, embedder=HashEmbedder()) as memory:
        report = memory.import_jsonl(path)
        assert report.skipped == ()
        assert snapshot(memory) == before
        assert memory.store.full_text("urn:ex:long") == BIG + TAIL_WORD
        assert [h.entry.iri for h in memory.store.search_text(TAIL_WORD)] == ["urn:ex:long"]


def test_a_version_1_file_still_imports(
    tmp_path: Path, exported: tuple[Path, list[tuple[Any, ...]], list[Any]]
) -> None:
    path, before, _ = exported
    lines = path.read_text(encoding="utf-8").splitlines()
    header = {**json.loads(lines[0]), "version": 1}
    old = tmp_path / "v1.jsonl"
    old.write_text("\n".join([json.dumps(header), *lines[1:]]) + "\n", encoding="utf-8")
    with Memory.open(tmp_path / "copy", config=CONFIG, embedder=HashEmbedder()) as memory:
        memory.import_jsonl(old)
        assert snapshot(memory) == before


def _broken(lines: list[str], how: str) -> list[str]:
    at = next(i for i, x in enumerate(lines) if '"urn:ex:long"' in x)
    count = json.loads(lines[at])["text_parts"]
    first, last = at + 1, at + count
    if how == "a part missing":
        return lines[:last] + lines[last + 1 :]
    if how == "parts swapped":
        return [*lines[:first], lines[first + 1], lines[first], *lines[first + 2 :]]
    if how == "a part too many":
        return [*lines[: last + 1], json.dumps({"part": count, "text": "x"}), *lines[last + 1 :]]
    if how == "a part with no entry":
        return [*lines[:2], json.dumps({"part": 0, "text": "stray"}), *lines[2:]]
    if how == "a part with more keys":
        extra = {**json.loads(lines[first]), "entry": {"@id": "urn:ex:sneak"}}
        return [*lines[:first], json.dumps(extra), *lines[first + 1 :]]
    if how == "a part that is not text":
        return [*lines[:first], json.dumps({"part": 0, "text": 5}), *lines[first + 1 :]]
    if how == "parts announced for a text that is whole":
        short = json.loads(lines[2])
        short["text_parts"] = 1
        return [*lines[:2], json.dumps(short), json.dumps({"part": 0, "text": "x"}), *lines[3:]]
    if how == "a count that is not a count":
        entry = json.loads(lines[at])
        entry["text_parts"] = "3"
        return [*lines[:at], json.dumps(entry), *lines[at + 1 :]]
    raise AssertionError(how)


@pytest.mark.parametrize(
    "how",
    [
        "a part missing",
        "parts swapped",
        "a part too many",
        "a part with no entry",
        "a part with more keys",
        "a part that is not text",
        "parts announced for a text that is whole",
        "a count that is not a count",
    ],
)
def test_broken_part_lines_write_nothing(tmp_path: Path, how: str) -> None:
    path, _ = _with_a_long_text(tmp_path)
    lines = _broken(path.read_text(encoding="utf-8").splitlines(), how)
    bad = tmp_path / "bad.jsonl"
    bad.write_text("\n".join(lines) + "\n", encoding="utf-8")
    with Memory.open(tmp_path / "copy", config=CONFIG, embedder=HashEmbedder()) as memory:
        with pytest.raises(MalformedImportError):
            memory.import_jsonl(bad)
        assert memory.store.count() == 0
        report = memory.import_jsonl(bad, skip_bad=True)
        assert report.skipped
        # What was taken in is whole: no entry came in with a head and no parts behind it.
        for iri in report.imported:
            entry = memory.store.get(iri)
            assert entry is not None
            text = entry.node.get("text")
            if isinstance(text, str) and "kept in parts" in text:
                assert memory.store.full_text(iri) == BIG + TAIL_WORD


def test_index_fields_travel_with_their_entries(tmp_path: Path) -> None:
    path = tmp_path / "memory.jsonl"
    with Memory(config=CONFIG, embedder=HashEmbedder()) as memory:
        node = {"@id": "urn:ex:d", "title": "Harbour", "body": "ferries"}
        memory.store.put(node, index=["title"])
        memory.store.put({"@id": "urn:ex:h", "text": "hidden words"}, index=False)
        memory.store.put({"@id": "urn:ex:p", "text": "plain words", "ref": "P-17"})
        memory.export_jsonl(path)
    lines = {
        line["entry"]["@id"]: line
        for line in map(json.loads, path.read_text(encoding="utf-8").splitlines()[1:])
    }
    assert lines["urn:ex:d"]["index"] == ["title"]
    assert lines["urn:ex:h"]["index"] is False
    assert "index" not in lines["urn:ex:p"]
    assert "embedding" not in lines["urn:ex:h"]  # no text, no vector
    with Memory(config=CONFIG, embedder=HashEmbedder()) as memory:
        memory.import_jsonl(path)
        store = memory.store
        assert store.indexed_with(["urn:ex:d", "urn:ex:h", "urn:ex:p"]) == {
            "urn:ex:d": ("title",),
            "urn:ex:h": False,
            "urn:ex:p": None,
        }
        assert [iri for iri, _ in store.search_ids("harbour")] == ["urn:ex:d"]
        assert store.search_ids("ferries") == []
        assert store.search_ids("hidden") == []
        assert memory.index.count() == 2  # the hidden entry has no vector


def test_an_import_refuses_bad_index_fields(tmp_path: Path) -> None:
    path = tmp_path / "memory.jsonl"
    with Memory(config=CONFIG, embedder=HashEmbedder()) as memory:
        memory.store.put({"@id": "urn:ex:d", "title": "Harbour"}, index=["title"])
        memory.export_jsonl(path)
    header, line = path.read_text(encoding="utf-8").splitlines()
    for bad in ('"title"', '["a..b"]', "[1]", '["nope"]', 'true, "x": 1'):
        hostile = tmp_path / "hostile.jsonl"
        hostile.write_text(header + "\n" + line.replace('["title"]', bad) + "\n", "utf-8")
        with Memory(config=CONFIG, embedder=HashEmbedder()) as memory:
            with pytest.raises(MalformedImportError):
                memory.import_jsonl(hostile)
            assert memory.store.get("urn:ex:d") is None


def test_a_text_kept_in_parts_travels_with_its_own_index_fields(tmp_path: Path) -> None:
    path = tmp_path / "memory.jsonl"
    fields: dict[str, tuple[str, ...] | Literal[False]] = {
        "urn:ex:titled": ("title",),
        "urn:ex:hidden": False,
    }
    with Memory.open(tmp_path / "source", config=CONFIG, embedder=HashEmbedder()) as memory:
        for iri, index in fields.items():
            node = {"@id": iri, "@type": "ToolResult", "title": f"Harbour {iri[7:]}"}
            memory.store.put_text(node, BIG + TAIL_WORD, index=index)
        memory.export_jsonl(path)
    lines = [json.loads(x) for x in path.read_text(encoding="utf-8").splitlines()[1:]]
    exported = {x["entry"]["@id"]: x for x in lines if "entry" in x}
    assert exported["urn:ex:titled"]["index"] == ["title"]
    assert exported["urn:ex:hidden"]["index"] is False
    assert all(exported[iri]["text_parts"] >= 3 for iri in fields)
    with Memory.open(tmp_path / "copy", config=CONFIG, embedder=HashEmbedder()) as memory:
        memory.import_jsonl(path)
        store = memory.store
        assert store.indexed_with(list(fields)) == fields
        assert store.search_ids(TAIL_WORD) == []  # neither is searched by its text
        assert [iri for iri, _ in store.search_ids("harbour")] == ["urn:ex:titled"]
        assert store.full_text("urn:ex:hidden") == BIG + TAIL_WORD


@pytest.mark.parametrize(
    ("bad", "named"),
    [
        ('[["title"]]', "['title']"),
        ("[null]", "None"),
        ('{"title": true}', "title"),
        ("7", "7"),
        (json.dumps([f"f{n}" for n in range(100_000)]), "100000 field paths"),
        (json.dumps(["x" * 600]), "600 characters"),
        (json.dumps([".".join(["a"] * 40)]), "40 steps"),
        ('["@id"]', "@id"),
    ],
    ids=["nested", "null", "a mapping", "a number", "huge", "long", "deep path", "a keyword"],
)
def test_hostile_index_fields_are_named_and_nothing_is_written(
    tmp_path: Path, bad: str, named: str
) -> None:
    """On an entry whole and on one whose text comes in parts: the line is refused with the
    value named, and neither entry (nor a part) is written."""
    path = tmp_path / "memory.jsonl"
    with Memory.open(tmp_path / "source", config=CONFIG, embedder=HashEmbedder()) as memory:
        memory.store.put({"@id": "urn:ex:d", "title": "Harbour"}, index=["title"])
        memory.store.put_text({"@id": "urn:ex:p", "title": "Quay"}, BIG, index=["title"])
        memory.export_jsonl(path)
    text = path.read_text(encoding="utf-8")
    assert text.count('"index": ["title"]') == 2
    hostile = tmp_path / "hostile.jsonl"
    hostile.write_text(text.replace('"index": ["title"]', f'"index": {bad}'), encoding="utf-8")
    with Memory.open(tmp_path / "copy", config=CONFIG, embedder=HashEmbedder()) as memory:
        with pytest.raises(MalformedImportError) as caught:
            memory.import_jsonl(hostile)
        assert {n for n, _ in caught.value.problems} >= {2, 3}
        assert named in str(caught.value)
        assert memory.store.count() == 0
        report = memory.import_jsonl(hostile, skip_bad=True)  # the rest: nothing but parts
        assert report.imported == ()
        assert memory.store.count() == 0
        assert memory.store.full_text("urn:ex:p") is None


# -- the file's vectors are untrusted ----------------------------------------------------------


def _cache(memory: Memory) -> CachedEmbedder:
    cache = memory.embedder
    assert isinstance(cache, CachedEmbedder)
    return cache


def _with_vector(path: Path, iri: str, vector: list[float], out: Path) -> int:
    """Write ``path`` to ``out`` with ``iri``'s vector replaced; return that entry's line."""
    lines = path.read_text(encoding="utf-8").splitlines()
    at = next(i for i, x in enumerate(lines) if f'"@id": "{iri}"' in x)
    record = json.loads(lines[at])
    assert len(record["embedding"]) == len(vector)
    record["embedding"] = vector
    lines[at] = json.dumps(record)
    out.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return at + 1


def test_a_forged_vector_refuses_the_file_naming_its_entry(
    tmp_path: Path, exported: tuple[Path, list[tuple[Any, ...]], list[Any]]
) -> None:
    """The note's vector is set to the one of a query the note has nothing to do with: every
    vector of the file is checked here (fewer texts than the sample), so the forgery is found,
    and nothing is written: no entry, no vector, not even with ``skip_bad``."""
    path = exported[0]
    lines = path.read_text(encoding="utf-8").splitlines()
    assert sum('"embedding"' in x for x in lines) <= VERIFY_SAMPLE
    forged = HashEmbedder().embed_query("crate code")
    hostile = tmp_path / "hostile.jsonl"
    number = _with_vector(path, "urn:ex:note", forged, hostile)
    with Memory.open(tmp_path / "copy", config=CONFIG, embedder=HashEmbedder()) as memory:
        for skip_bad in (False, True):
            with pytest.raises(MalformedImportError, match="urn:ex:note") as caught:
                memory.import_jsonl(hostile, skip_bad=skip_bad)
            assert [n for n, _ in caught.value.problems] == [number]
            assert f"line {number}" in str(caught.value)
            assert memory.store.count() == 0
            assert _cache(memory).missing(["plan the release"]) == ["plan the release"]
        report = memory.import_jsonl(hostile, keep_vectors=False)  # the way round it
        assert not report.vectors_kept
        assert snapshot(memory) == exported[1]
        assert results(memory) == exported[2]  # the note's vector is its own


def test_a_text_given_two_vectors_by_the_file_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "memory.jsonl"
    with Memory(config=CONFIG, embedder=HashEmbedder()) as memory:
        for iri in ("urn:ex:a", "urn:ex:b"):
            memory.store.put({"@id": iri, "text": "the same words twice"})
        memory.export_jsonl(path)
    hostile = tmp_path / "hostile.jsonl"
    number = _with_vector(path, "urn:ex:b", HashEmbedder().embed_query("other"), hostile)
    with Memory(config=CONFIG, embedder=HashEmbedder()) as memory:
        with pytest.raises(MalformedImportError, match="urn:ex:b") as caught:
            memory.import_jsonl(hostile)
        assert [n for n, _ in caught.value.problems] == [number] == [3]
        assert memory.store.count() == 0


def test_forged_vectors_beyond_the_sample_are_found(tmp_path: Path) -> None:
    """A file of many more texts than the sample, each vector forged: the random sample finds
    one, names it, and nothing is written."""
    path = tmp_path / "memory.jsonl"
    with Memory(config=CONFIG, embedder=HashEmbedder()) as memory:
        for n in range(4 * VERIFY_SAMPLE):
            memory.store.put({"@id": f"urn:ex:n{n}", "text": f"note number {n} on the dock"})
        memory.export_jsonl(path)
    lines = path.read_text(encoding="utf-8").splitlines()
    forged = HashEmbedder().embed_query("crate code")
    for at in range(1, len(lines)):
        record = json.loads(lines[at])
        record["embedding"] = forged
        lines[at] = json.dumps(record)
    hostile = tmp_path / "hostile.jsonl"
    hostile.write_text("\n".join(lines) + "\n", encoding="utf-8")
    with Memory(config=CONFIG, embedder=HashEmbedder()) as memory:
        with pytest.raises(MalformedImportError, match=r"urn:ex:n\d+") as caught:
            memory.import_jsonl(hostile)
        assert len(caught.value.problems) == 1
        assert memory.store.count() == 0
        assert _cache(memory).missing(["note number 0 on the dock"]) != []


def test_a_file_cannot_change_the_vector_of_a_text_the_memory_holds(tmp_path: Path) -> None:
    """The memory holds "the dock schedule"; a file brings a new entry of that text whose
    vector is the one of "crate code 5521" (it is not sampled: the cache has the text). The
    text keeps its own vector, in the cache and in the index, and a search for the crate
    scores the file's entry as the memory's own of the same text (the forged vector scored
    it 1.0 against 0.0)."""
    dock, crate = "the dock schedule for monday", "crate code 5521 at the gate"
    path = tmp_path / "memory.jsonl"
    with Memory(config=CONFIG, embedder=HashEmbedder()) as memory:
        memory.store.put({"@id": "urn:ex:sneak", "text": dock})
        memory.export_jsonl(path)
    hostile = tmp_path / "hostile.jsonl"
    _with_vector(path, "urn:ex:sneak", HashEmbedder().embed_query(crate), hostile)
    honest = HashEmbedder().embed_query(dock)
    embedder = CountingEmbedder()
    with Memory(config=CONFIG, embedder=embedder) as memory:
        memory.store.put({"@id": "urn:ex:dock", "text": dock})
        memory.store.put({"@id": "urn:ex:crate", "text": crate})
        memory.index.refresh(wait=True)
        report = memory.import_jsonl(hostile)
        assert report.imported == ("urn:ex:sneak",)
        assert embedder.texts.count(dock) == 1  # when the memory's own entry was written
        memory.index.refresh(wait=True)
        assert _cache(memory).embed_documents([dock])[0] == pytest.approx(honest, abs=1e-6)
        vectors = memory.index.vectors(["urn:ex:dock", "urn:ex:sneak"])
        for iri in ("urn:ex:dock", "urn:ex:sneak"):
            assert list(vectors[iri]) == pytest.approx(honest, abs=1e-6)
        similar = memory.index.similarities(crate, ["urn:ex:crate", "urn:ex:sneak"])
        assert similar["urn:ex:crate"] > similar["urn:ex:sneak"]
        scores = {hit.iri: hit.score for hit in memory.search("crate code 5521", 3)}
        assert max(scores, key=scores.__getitem__) == "urn:ex:crate"
        assert scores["urn:ex:sneak"] == pytest.approx(scores["urn:ex:dock"])  # was 1.0 vs 0.0


def test_an_honest_file_of_many_texts_embeds_only_the_sample(tmp_path: Path) -> None:
    path = tmp_path / "memory.jsonl"
    count = 5 * VERIFY_SAMPLE
    with Memory(config=CONFIG, embedder=HashEmbedder()) as memory:
        for n in range(count):
            memory.store.put({"@id": f"urn:ex:n{n}", "text": f"note number {n} on the dock"})
        memory.export_jsonl(path)
        ranked = [[h.iri for h in memory.search(f"note number {n}", 5)] for n in (3, 40)]
    embedder = CountingEmbedder()
    with Memory(config=CONFIG, embedder=embedder) as memory:
        report = memory.import_jsonl(path)
        assert report.vectors_kept
        assert len(embedder.texts) == len(set(embedder.texts)) == VERIFY_SAMPLE
        memory.index.refresh(wait=True)
        assert memory.index.count() == count
        assert len(embedder.texts) == VERIFY_SAMPLE  # the rest came from the file
        assert [[h.iri for h in memory.search(f"note number {n}", 5)] for n in (3, 40)] == ranked


def test_keep_vectors_must_be_a_bool(
    tmp_path: Path, exported: tuple[Path, list[tuple[Any, ...]], list[Any]]
) -> None:
    with Memory(config=CONFIG, embedder=HashEmbedder()) as memory:
        with pytest.raises(InvalidInputError, match="keep_vectors"):
            memory.import_jsonl(exported[0], keep_vectors="no")  # type: ignore[arg-type]
        assert memory.store.count() == 0


@pytest.mark.parametrize("value", ["no", 1, None])
def test_skip_bad_must_be_a_bool(tmp_path: Path, value: Any) -> None:
    path = _file(tmp_path, _with_one_entry(tmp_path), "{not json")
    with Memory(config=CONFIG, embedder=HashEmbedder()) as memory:
        with pytest.raises(InvalidInputError, match="skip_bad"):
            memory.import_jsonl(path, skip_bad=value)
        assert memory.store.count() == 0


def _with_one_entry(tmp_path: Path) -> Path:
    path = tmp_path / "one.jsonl"
    with Memory(config=CONFIG, embedder=HashEmbedder()) as memory:
        memory.store.put({"@id": "urn:ex:one", "text": "one entry"})
        memory.export_jsonl(path)
    return path


def test_a_path_holding_a_nul_byte_is_refused(tmp_path: Path) -> None:
    with Memory(config=CONFIG, embedder=HashEmbedder()) as memory:
        memory.store.put({"@id": "urn:ex:a", "text": "kept"})
        with pytest.raises(InvalidInputError, match="cannot write"):
            memory.export_jsonl(f"{tmp_path}/a\0b.jsonl")
        with pytest.raises(InvalidInputError, match="cannot read"):
            memory.import_jsonl(f"{tmp_path}/a\0b.jsonl")
        assert memory.store.count() == 1
    assert list(tmp_path.iterdir()) == []


def test_an_export_onto_a_directory_is_refused_and_leaves_no_file(tmp_path: Path) -> None:
    target = tmp_path / "a directory"
    target.mkdir()
    with Memory(config=CONFIG, embedder=HashEmbedder()) as memory:
        memory.store.put({"@id": "urn:ex:a", "text": "kept"})
        with pytest.raises(InvalidInputError, match="cannot write"):
            memory.export_jsonl(target)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a directory"]
    assert list(target.iterdir()) == []


class _FullDisk(io.StringIO):
    """A file whose writes fail as on a full disk, after ``room`` characters."""

    def __init__(self, name: Path, room: int) -> None:
        super().__init__()
        name.touch()
        self.name, self.room = str(name), room

    def write(self, text: str) -> int:
        if self.tell() + len(text) > self.room:
            raise OSError(errno.ENOSPC, "No space left on device")
        return super().write(text)


def test_an_export_that_fills_the_disk_is_a_storage_error_and_leaves_no_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = tmp_path / "out.jsonl"
    with Memory(config=CONFIG, embedder=HashEmbedder()) as memory:
        memory.store.put_many([{"@id": f"urn:ex:{i}", "text": f"kept {i}"} for i in range(20)])
        opened = lambda path, *args, **kwargs: _FullDisk(Path(path), room=600)  # noqa: E731
        monkeypatch.setattr(transfer, "open", opened, raising=False)
        with pytest.raises(StorageError, match="No space left"):
            memory.export_jsonl(target)
        monkeypatch.undo()
        assert list(tmp_path.iterdir()) == []  # neither the file nor its partial one
        with pytest.raises(StorageError, match="No space left"):  # an open text file too
            memory.export_jsonl(_FullDisk(tmp_path / "given.jsonl", room=600))


def test_an_export_to_a_binary_file_is_refused(tmp_path: Path) -> None:
    with Memory(config=CONFIG, embedder=HashEmbedder()) as memory:
        memory.store.put({"@id": "urn:ex:a", "text": "kept"})
        out = io.BytesIO()
        with pytest.raises(InvalidInputError, match="text file"):
            memory.export_jsonl(out)  # type: ignore[arg-type]
        assert out.getvalue() == b""
        with open(tmp_path / "out.jsonl", "wb") as binary, pytest.raises(InvalidInputError):
            memory.export_jsonl(binary)  # type: ignore[arg-type]
        for made in (tempfile.NamedTemporaryFile, tempfile.SpooledTemporaryFile):
            with made(dir=tmp_path) as wrapped, pytest.raises(InvalidInputError, match="text"):
                memory.export_jsonl(wrapped)  # type: ignore[arg-type]
        with tempfile.NamedTemporaryFile("w+", dir=tmp_path) as text:  # a text one is fine
            assert memory.export_jsonl(text) == 1
