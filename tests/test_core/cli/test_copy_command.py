"""``gliding-horse copy``: a memory moved from a directory to PostgreSQL and back, verified.

The round trip runs on the session's real PostgreSQL (``postgres_url``) in a schema of the
test's own; the other tests copy between directories (the same code, without a server) unless
they say otherwise. Faults are real: a row deleted or rewritten in the target's real store
between the commit and the verification, a source row damaged in its SQLite file.
"""

from __future__ import annotations

import io
import os
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

import pytest

from gliding_core import Conversation, HashEmbedder, Memory, MemoryConfig, Scope, TopicConfig
from gliding_core.cli import main
from gliding_core.config import StoreConfig
from gliding_core.errors import (
    CopyVerificationError,
    GlidingError,
    InvalidInputError,
    MalformedImportError,
    TargetNotEmptyError,
)
from gliding_core.retention import copying
from gliding_core.retention.copying import Place, copy_memory
from gliding_core.storage import STORE_FILE
from gliding_core.store.protocol import EntryStore
from gliding_core.view.chatlog import ChatLog

CONFIG = MemoryConfig(embedder="hash", topics=TopicConfig(interval_s=0))
SECRET = "s3cret-Pa55word"
BIG = "The archive holds the whole of it. " * 40_000  # over a megabyte: kept in parts
ALICE = Scope.user("alice")


def run(*argv: str) -> tuple[int, str]:
    out = io.StringIO()
    code = main(list(argv), out=out)
    return code, out.getvalue()


def fill(memory: Memory) -> None:
    """Something of every kind a user keeps: chat, turns, inputs, a flush, a text in parts."""
    conversation = Conversation(memory, scope=ALICE)
    ChatLog(conversation).append(
        [
            {"role": "user", "content": "alice asks about the blue bicycle", "id": "a1"},
            {"role": "assistant", "content": "The blue bicycle is noted.", "id": "a2"},
        ]
    )
    memory.supplements.put(ALICE.task_iri, "alice adds: the dock schedule")
    conversation.deliver()  # consumed, with its audit
    memory.supplements.put(ALICE.task_iri, "alice adds: bring the crate code")  # pending
    memory.store.put(
        {"@id": "urn:ex:note", "@type": "Note", "text": "plan the release"},
        tags=["decision", ALICE.tag],
        importance=0.9,
        named_graph="urn:kg:notes",
        metadata={"source": "meeting", "n": [1, 2.5]},
    )
    memory.store.put({"@id": "urn:ex:brief", "text": "expires later"}, ttl=3_600)
    memory.store.put({"@id": "urn:ex:bare", "count": 3})  # no text
    memory.store.put_text({"@id": "urn:ex:archive", "@type": "Document"}, BIG, tags=["doc"])
    memory.blackboard.write(
        [{"@id": "urn:ex:plan", "@type": "Plan", "text": "release plan draft"}],
        task="urn:task:release",
        area="plan",
    )
    memory.blackboard.flush()


def snapshot(store: EntryStore) -> list[tuple[Any, ...]]:
    """Everything a copy promises to carry, of every live entry."""
    entries = [e for batch in store.scan_entries() for e in batch]
    expiry = store.expires_at([e.iri for e in entries])
    return sorted(
        (
            e.iri,
            e.content,
            sorted(e.tags),
            e.named_graph,
            e.importance,
            e.created_at,
            e.metadata,
            e.mesi_state,
            expiry.get(e.iri),
            store.full_text(e.iri),
        )
        for e in entries
    )


def open_l0(place: Path | str, schema: str | None = None) -> Memory:
    config = (
        CONFIG if schema is None else MemoryConfig(**{**dict(CONFIG), "database_schema": schema})
    )
    return Memory.open(place, config=config, embedder=HashEmbedder(), engines=False)


def state(place: Path | str, schema: str | None = None) -> list[tuple[Any, ...]]:
    with open_l0(place, schema) as memory:
        return snapshot(memory.store)


@pytest.fixture
def source(tmp_path: Path) -> Path:
    path = tmp_path / "source"
    with Memory.open(path, config=CONFIG, embedder=HashEmbedder()) as memory:
        fill(memory)
    return path


def with_password(url: str) -> str:
    """``url`` with a password in its user part (the test server trusts local users: it is
    sent and ignored)."""
    scheme, _, rest = url.partition("://")
    user, at, host = rest.partition("@")
    assert at
    return f"{scheme}://{user.partition(':')[0]}:{SECRET}@{host}"


# -- the round trip ----------------------------------------------------------------------------


def test_directory_to_postgresql_and_back_gives_the_same_memory(
    source: Path,
    tmp_path: Path,
    postgres_url: str,
    postgres_schema: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    before = state(source)
    url = with_password(postgres_url)
    code, up = run("copy", str(source), url, "--target-schema", postgres_schema)
    assert code == 0, capsys.readouterr().err
    assert f"Copied {len(before)} entries" in up
    assert "verified" in up
    assert "1 texts in parts" in up
    for kind in ("supplementary inputs", "chat log", "blackboard flushes", "other entries"):
        assert kind in up
    assert state(postgres_url, postgres_schema) == before

    back = tmp_path / "back"
    code, down = run("copy", url, str(back), "--source-schema", postgres_schema)
    assert code == 0, capsys.readouterr().err
    assert state(back) == before
    captured = capsys.readouterr()
    assert SECRET not in up + down + captured.out + captured.err
    assert "***" in up  # the URL is shown, masked

    messages, pending = carried(source)
    assert messages[:2] == ["a1", "a2"]
    assert pending == ["alice adds: bring the crate code"]
    assert carried(back) == (messages, pending)
    with Memory.open(back, config=CONFIG, embedder=HashEmbedder()) as memory:
        assert memory.store.full_text("urn:ex:archive") == BIG
        results = memory.search("blue bicycle", 3)
        assert "dense" in results.arms  # the target's dense index follows its change log
        assert results


def carried(place: Path) -> tuple[list[str], list[str]]:
    """What the layers above read back: the chat log's messages, the pending inputs."""
    with open_l0(place) as memory:
        messages = ChatLog(Conversation(memory, scope=ALICE)).messages()
        pending = memory.supplements.snapshot(ALICE.task_iri)
        return [m.id for m in messages], [i.content for i in pending]


# -- the target ----------------------------------------------------------------------------------


def test_a_target_that_holds_entries_is_refused_and_left_alone(
    source: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    target = tmp_path / "target"
    with open_l0(target) as memory:
        memory.store.put({"@id": "urn:ex:own", "text": "the target's own entry"})
    before = state(target)
    code, _ = run("copy", str(source), str(target))
    assert code == 2
    assert "--merge" in capsys.readouterr().err
    assert state(target) == before
    with pytest.raises(TargetNotEmptyError) as caught:
        copy_memory(Place.parse(source), Place.parse(target), config=CONFIG)
    assert caught.value.entries == 1


def test_merge_copies_into_a_target_and_keeps_its_own_entries(source: Path, tmp_path: Path) -> None:
    target = tmp_path / "target"
    with open_l0(target) as memory:
        memory.store.put({"@id": "urn:ex:own", "text": "the target's own entry"})
        memory.store.put({"@id": "urn:ex:note", "text": "an older note of the same IRI"})
    code, text = run("copy", str(source), str(target), "--merge")
    assert code == 0
    assert "beside 2 it held" in text
    copied, merged = state(source), state(target)
    assert [row[0] for row in merged] == sorted([row[0] for row in copied] + ["urn:ex:own"])
    assert all(row in merged for row in copied)  # the source's note replaced the older one


# -- verification -------------------------------------------------------------------------------


def drop(iri: str) -> Callable[[EntryStore], None]:
    def hook(store: EntryStore) -> None:
        assert store.delete(iri)

    return hook


def alter(iri: str) -> Callable[[EntryStore], None]:
    def hook(store: EntryStore) -> None:
        store.replace({"@id": iri, "@type": "Note", "text": "plan the release, quietly changed"})

    return hook


def target_place(kind: str, tmp_path: Path, request: pytest.FixtureRequest) -> Place:
    if kind == "directory":
        return Place.parse(tmp_path / "target")
    url, schema = (
        request.getfixturevalue("postgres_url"),
        request.getfixturevalue("postgres_schema"),
    )
    return Place.parse(url, schema=schema)


@pytest.mark.parametrize("kind", ["directory", "postgresql"])
def test_a_row_the_target_lost_fails_the_copy_naming_it(
    kind: str, source: Path, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    target = target_place(kind, tmp_path, request)
    with pytest.raises(CopyVerificationError) as caught:
        copy_memory(Place.parse(source), target, config=CONFIG, before_verify=drop("urn:ex:note"))
    (difference,) = caught.value.differences
    assert difference.kind == "other entries"
    assert difference.missing == ("urn:ex:note",)
    assert difference.source_entries == difference.target_entries + 1
    assert "urn:ex:note" in str(caught.value)


@pytest.mark.parametrize("kind", ["directory", "postgresql"])
def test_a_row_the_target_altered_fails_the_copy_naming_it(
    kind: str, source: Path, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    target = target_place(kind, tmp_path, request)
    with pytest.raises(CopyVerificationError) as caught:
        copy_memory(Place.parse(source), target, config=CONFIG, before_verify=alter("urn:ex:note"))
    (difference,) = caught.value.differences
    assert difference.altered == ("urn:ex:note",)
    assert difference.source_entries == difference.target_entries


def test_a_text_in_parts_cut_short_fails_the_copy(source: Path, tmp_path: Path) -> None:
    def cut(store: EntryStore) -> None:
        store.put_text({"@id": "urn:ex:archive", "@type": "Document"}, BIG[:-1], tags=["doc"])

    with pytest.raises(CopyVerificationError) as caught:
        copy_memory(Place.parse(source), Place.parse(tmp_path / "t"), before_verify=cut)
    assert caught.value.differences[0].altered == ("urn:ex:archive",)


def test_index_fields_the_target_lost_fail_the_copy(source: Path, tmp_path: Path) -> None:
    def unindex(store: EntryStore) -> None:  # the same entry in all else, without its fields
        entry = store.get("urn:ex:note")
        assert entry is not None
        store.replace(
            entry.node,
            tags=entry.tags,
            importance=entry.importance,
            named_graph=entry.named_graph,
            metadata=entry.metadata,
            index=False,
        )

    with pytest.raises(CopyVerificationError) as caught:
        copy_memory(
            Place.parse(source), Place.parse(tmp_path / "t"), config=CONFIG, before_verify=unindex
        )
    assert caught.value.differences[0].altered == ("urn:ex:note",)


@pytest.mark.parametrize("kind", ["directory", "postgresql"])
def test_a_text_in_parts_keeps_its_own_index_fields_there_and_back(
    kind: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """Each entry of the source comes back with the index fields it was written with, a text
    in parts too: the copy writes its whole text again as the node it is, with its fields."""
    source = tmp_path / "source"
    fields: dict[str, list[str] | Literal[False]] = {
        "urn:ex:titled": ["title"],
        "urn:ex:hidden": False,
        "urn:ex:texted": ["text"],
    }
    with Memory.open(source, config=CONFIG, embedder=HashEmbedder()) as memory:
        for iri, index in fields.items():
            node = {"@id": iri, "@type": "Document", "title": f"title of {iri[7:]}"}
            memory.store.put_text(node, BIG + f" tail{iri[7:]}", index=index)
        want = memory.store.indexed_with(list(fields))
        found = {iri for iri, _ in memory.store.search_ids("archive", limit=10)}
    assert want == {iri: (False if f is False else tuple(f)) for iri, f in fields.items()}
    assert found == {"urn:ex:texted"}
    target = target_place(kind, tmp_path, request)
    report = copy_memory(Place.parse(source), target, config=CONFIG)
    assert report.texts_in_parts == 3
    back = tmp_path / "back"
    copy_memory(target, Place.parse(back), config=CONFIG)
    with open_l0(back) as memory:
        store = memory.store
        assert store.indexed_with(list(fields)) == want
        assert {iri for iri, _ in store.search_ids("archive", limit=10)} == {"urn:ex:texted"}
        assert [iri for iri, _ in store.search_ids("titled", limit=10)] == ["urn:ex:titled"]
        assert store.search_ids("tailhidden") == []
        for iri in fields:
            assert store.full_text(iri) == BIG + f" tail{iri[7:]}"


def test_an_entry_added_to_the_target_fails_a_copy_that_does_not_merge(
    source: Path, tmp_path: Path
) -> None:
    def add(store: EntryStore) -> None:
        store.put({"@id": "urn:ex:stowaway", "text": "not in the source"})

    with pytest.raises(CopyVerificationError) as caught:
        copy_memory(Place.parse(source), Place.parse(tmp_path / "t"), before_verify=add)
    assert caught.value.differences[0].extra == ("urn:ex:stowaway",)
    report = copy_memory(
        Place.parse(source), Place.parse(tmp_path / "u"), merge=True, before_verify=add
    )
    assert report.copied == len(state(source))  # with merge, the target may hold more


# -- bad arguments -------------------------------------------------------------------------------


def test_one_memory_as_source_and_target_is_refused(source: Path) -> None:
    with pytest.raises(InvalidInputError, match="one memory"):
        copy_memory(Place.parse(source), Place.parse(f"{source}/./"))
    code, _ = run("copy", str(source), str(source))
    assert code == 2


def test_one_database_schema_as_source_and_target_is_refused(
    postgres_url: str, postgres_schema: str
) -> None:
    with pytest.raises(InvalidInputError, match="one memory"):
        copy_memory(
            Place.parse(with_password(postgres_url), schema=postgres_schema),
            Place.parse(postgres_url, schema=postgres_schema),
        )


@pytest.mark.parametrize(
    "where", [f"mysql://root:{SECRET}@db/memory", f"https://user:{SECRET}@example.org/x"]
)
def test_an_unknown_scheme_is_refused_with_its_password_masked(
    where: str, source: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(InvalidInputError) as caught:
        Place.parse(where)
    assert SECRET not in str(caught.value)
    code, _ = run("copy", str(source), where)
    assert code == 2
    err = capsys.readouterr().err
    assert "neither a directory nor a PostgreSQL URL" in err
    assert SECRET not in err


def test_a_malformed_database_url_is_refused_with_its_password_masked(source: Path) -> None:
    with pytest.raises(InvalidInputError) as caught:
        Place.parse(f"postgresql://u:{SECRET}@host:port/db")
    assert SECRET not in str(caught.value)


@pytest.mark.parametrize("problem", ["missing", "a file", "no memory", "damaged store"])
def test_a_source_that_is_no_readable_memory_is_a_typed_error(
    problem: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    where = tmp_path / "source"
    if problem == "a file":
        where.write_text("not a memory")
    elif problem == "no memory":
        where.mkdir()
    elif problem == "damaged store":
        where.mkdir()
        (where / STORE_FILE).write_bytes(b"this is not a SQLite database" * 100)
    with pytest.raises(GlidingError):
        copy_memory(Place.parse(where), Place.parse(tmp_path / "target"), config=CONFIG)
    assert not (tmp_path / "target").exists()  # the directory the copy made is gone again
    code, _ = run("copy", str(where), str(tmp_path / "target"))
    assert code == 2
    assert capsys.readouterr().err.startswith("gliding-horse: error:")


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads any file")
def test_an_unreadable_source_directory_is_a_typed_error(source: Path, tmp_path: Path) -> None:
    source.chmod(0)
    try:
        with pytest.raises(InvalidInputError, match="cannot be read"):
            copy_memory(Place.parse(source), Place.parse(tmp_path / "target"), config=CONFIG)
    finally:
        source.chmod(0o755)


def test_a_directory_that_another_memory_runs_is_refused(source: Path, tmp_path: Path) -> None:
    with (
        Memory.open(source, config=CONFIG, embedder=HashEmbedder()),
        pytest.raises(GlidingError, match="in use"),
    ):
        copy_memory(Place.parse(source), Place.parse(tmp_path / "target"), config=CONFIG)


# -- a hostile source ----------------------------------------------------------------------------


def damage(directory: Path, iri: str, column: str, value: str) -> None:
    with sqlite3.connect(directory / STORE_FILE) as conn:
        assert conn.execute(f"UPDATE entries SET {column} = ? WHERE iri = ?", (value, iri)).rowcount
    conn.close()


def test_a_damaged_source_entry_writes_nothing_and_names_it(
    source: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(copying, "BATCH", 2)  # the bad entry comes after batches were written
    target = tmp_path / "target"
    with open_l0(target) as memory:
        memory.store.put({"@id": "urn:ex:own", "text": "the target's own entry"})
    before = state(target)
    damage(source, "urn:ex:bare", "content", '{"@id": "urn:ex:bare", "count": ')
    with pytest.raises(MalformedImportError) as caught:
        copy_memory(Place.parse(source), Place.parse(target), merge=True, config=CONFIG)
    assert "urn:ex:bare" in str(caught.value)
    assert len(caught.value.problems) == 1
    assert state(target) == before  # the batches before it were rolled back


@pytest.mark.parametrize(
    ("stored", "named"),
    [
        ('["a..b"]', "'a..b'"),
        ('{"text": 1}', "{'text': 1}"),
        ('["text", ["body"]]', "['body']"),
        ("[" * 100_000, "nest too deep"),
        (42, "got 42"),
        (b"\x00\xff", "not text"),
    ],
    ids=["malformed path", "a mapping", "nested", "deep", "a number", "bytes"],
)
def test_damaged_index_fields_in_the_source_write_nothing_and_name_the_entry(
    source: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, stored: object, named: str
) -> None:
    monkeypatch.setattr(copying, "BATCH", 2)  # batches before the damaged one were written
    target = tmp_path / "target"
    with open_l0(target) as memory:
        memory.store.put({"@id": "urn:ex:own", "text": "the target's own entry"})
    before = state(target)
    damage(source, "urn:ex:note", "index_fields", stored)  # type: ignore[arg-type]
    with pytest.raises(MalformedImportError) as caught:
        copy_memory(Place.parse(source), Place.parse(target), merge=True, config=CONFIG)
    assert len(caught.value.problems) == 1
    assert "urn:ex:note" in str(caught.value)
    assert named in str(caught.value)
    assert state(target) == before


def test_an_unreadable_source_row_writes_nothing(source: Path, tmp_path: Path) -> None:
    damage(source, "urn:ex:bare", "metadata", "{not json")
    with pytest.raises(MalformedImportError, match="cannot be read"):
        copy_memory(Place.parse(source), Place.parse(tmp_path / "target"), config=CONFIG)
    assert not (tmp_path / "target").exists()


def test_an_entry_over_the_targets_limits_writes_nothing(
    source: Path, tmp_path: Path, postgres_url: str, postgres_schema: str
) -> None:
    with open_l0(source) as memory:
        memory.store.put({"@id": "urn:ex:large", "text": "x" * 20_000})
    small = MemoryConfig(**{**dict(CONFIG), "store": StoreConfig(max_content_bytes=16_384)})
    target = Place.parse(postgres_url, schema=postgres_schema)
    with pytest.raises(MalformedImportError) as caught:
        copy_memory(Place.parse(source), target, config=small)
    assert "urn:ex:large" in str(caught.value)
    assert "16384 bytes" in str(caught.value)
    assert state(postgres_url, postgres_schema) == []


@pytest.mark.parametrize(
    ("iri", "write"),
    [
        (
            "urn:ex:nul-key",
            lambda store: store.put(
                {"@id": "urn:ex:nul-key", "see\x00also": {"@id": "urn:ex:note"}}
            ),
        ),
        (
            "urn:ex:nul-text",
            lambda store: store.put_text({"@id": "urn:ex:nul-text"}, BIG + "\x00"),
        ),
    ],
    ids=["a link's name", "a text in parts"],
)
def test_what_postgresql_cannot_hold_fails_a_copy_naming_it_and_writes_nothing(
    source: Path,
    postgres_url: str,
    postgres_schema: str,
    monkeypatch: pytest.MonkeyPatch,
    iri: str,
    write: Callable[[EntryStore], object],
) -> None:
    """A NUL that SQLite keeps and PostgreSQL's text cannot: the copy fails with a typed error
    naming the entry, and the batches written before it are rolled back."""
    monkeypatch.setattr(copying, "BATCH", 2)  # the bad entry comes after batches were written
    with open_l0(source) as memory:
        write(memory.store)
    target = Place.parse(postgres_url, schema=postgres_schema)
    with pytest.raises(InvalidInputError) as caught:
        copy_memory(Place.parse(source), target, config=CONFIG)
    assert iri in str(caught.value)
    assert "NUL" in str(caught.value)
    assert state(postgres_url, postgres_schema) == []


def test_a_database_source_without_the_schema_is_refused_and_not_created(
    postgres_url: str, postgres_schema: str, tmp_path: Path
) -> None:
    import psycopg

    with pytest.raises(InvalidInputError, match="no schema"):
        copy_memory(
            Place.parse(postgres_url, schema=postgres_schema),
            Place.parse(tmp_path / "target"),
            config=CONFIG,
        )
    with psycopg.connect(postgres_url) as conn:
        found = conn.execute(
            "SELECT 1 FROM pg_namespace WHERE nspname = %s", (postgres_schema,)
        ).fetchone()
    assert found is None
    assert not (tmp_path / "target").exists()


class Terminal(io.StringIO):
    """A terminal's standard error (the edge: a person watching)."""

    def isatty(self) -> bool:
        return True


def test_progress_shows_on_a_terminal_only(
    source: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    terminal = Terminal()
    monkeypatch.setattr("sys.stderr", terminal)
    code, _ = run("copy", str(source), str(tmp_path / "shown"))
    assert code == 0
    shown = terminal.getvalue()
    for phase in ("copy", "verify source", "verify target"):
        assert phase in shown
    assert "100%" in shown
    pipe = io.StringIO()
    monkeypatch.setattr("sys.stderr", pipe)
    code, _ = run("copy", str(source), str(tmp_path / "quiet"))
    assert code == 0
    assert pipe.getvalue() == ""
