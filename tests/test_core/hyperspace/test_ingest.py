"""Batch ingest: per-node tags, graph and importance; embedding deferred to the background.

With ``embed="later"`` a batch returns once L0 has committed; until the dense index has caught
up, searches find the new entries by words, and say how far behind the index is.
"""

from __future__ import annotations

import fcntl
import os
import pty
import select
import struct
import sys
import termios
import threading
from collections.abc import Iterator

import pytest

from gliding_core import (
    InvalidInputError,
    Memory,
    MemoryConfig,
    Record,
    SearchFilters,
)
from tests.test_core.held_embedder import HeldEmbedder


@pytest.fixture
def embedder() -> HeldEmbedder:
    return HeldEmbedder()


@pytest.fixture
def memory(embedder: HeldEmbedder) -> Iterator[Memory]:
    with Memory(embedder=embedder) as value:
        yield value


def _records() -> list[Record | dict[str, str]]:
    return [
        Record(
            {"@id": "urn:n:1", "text": "the harbour ferry leaves at dawn"},
            tags=["travel"],
            named_graph="g:trips",
            importance=0.9,
        ),
        Record({"@id": "urn:n:2", "text": "violin lessons on thursday"}, tags=["music"]),
        {"@id": "urn:n:3", "text": "a plain node takes the defaults"},
    ]


def test_records_carry_their_own_tags_graph_and_importance(memory: Memory) -> None:
    assert memory.put_many(_records()) == ["urn:n:1", "urn:n:2", "urn:n:3"]
    first, second, third = (memory.store.get(f"urn:n:{i}") for i in (1, 2, 3))
    assert first is not None
    assert second is not None
    assert third is not None
    assert (first.tags, first.named_graph, first.importance) == (("travel",), "g:trips", 0.9)
    assert second.tags == ("music",)
    assert third.importance == memory.store.config.default_importance
    hits = memory.search("ferry", 3, filters=SearchFilters(tags_any=("travel",)))
    assert [h.iri for h in hits] == ["urn:n:1"]


def test_embed_later_returns_before_the_index_and_searches_say_so(
    memory: Memory, embedder: HeldEmbedder
) -> None:
    embedder.gate.clear()  # the embedding API stalls from now on
    iris = memory.put_many(_records(), embed="later")
    assert iris == ["urn:n:1", "urn:n:2", "urn:n:3"]
    assert memory.store.count() == 3  # L0 has committed
    assert embedder.waiting.wait(60)  # the background catch-up is stuck in the embedder
    during = memory.search("harbour ferry", 3)
    assert during.index_behind > 0
    assert memory.index.catching_up
    assert "urn:n:1" in [h.iri for h in during]  # found by words meanwhile
    assert "dense" not in during[0].arms
    embedder.gate.set()
    assert memory.index.refresh(wait=True) == 0
    after = memory.search("harbour ferry", 3)
    assert after.index_behind == 0
    assert after[0].iri == "urn:n:1"
    assert after[0].arms["dense"].rank >= 1
    assert memory.index.count() == 3


def test_embed_now_returns_with_the_index_current(memory: Memory) -> None:
    memory.put_many(_records())
    assert memory.index.behind() == 0
    assert not memory.index.catching_up


def test_embed_now_waits_for_a_catch_up_under_way(memory: Memory, embedder: HeldEmbedder) -> None:
    """Another batch is being embedded in the background: a batch written with embed="now"
    returns once the index has embedded it too, after that one."""
    embedder.gate.clear()
    memory.put_many(_records(), embed="later")
    assert embedder.waiting.wait(60)  # the background catch-up holds the index
    returned = threading.Event()

    def release() -> None:
        returned.wait(2)  # (a put_many that waits is let go after 2 s)
        embedder.gate.set()

    opener = threading.Thread(target=release)
    opener.start()
    memory.put_many([{"@id": "urn:n:4", "text": "the night bus to the airport"}])
    behind = memory.index.behind()
    returned.set()
    opener.join(60)
    assert behind == 0
    hits = memory.search("night bus airport", 1, lexical_weight=0.0)
    assert hits[0].iri == "urn:n:4"
    assert "dense" in hits[0].arms


def test_a_closed_memory_stops_a_pending_catch_up(embedder: HeldEmbedder) -> None:
    memory = Memory(embedder=embedder)
    embedder.gate.clear()
    memory.put_many(_records(), embed="later")
    assert embedder.waiting.wait(60)
    embedder.gate.set()
    memory.close()  # waits for the chunk under way, applies no more
    background = memory.index._background  # type: ignore[attr-defined]
    background.join(60)
    assert not memory.index.catching_up
    memory.index.refresh_later()  # a closed index starts nothing
    assert not memory.index.catching_up


# -- the progress bar ----------------------------------------------------------------------------

END = "<end of the test's output>"


class Terminal:
    """A real pseudo-terminal of 24 x 80 (a new one has no size, and a bar is drawn to the
    terminal's width), to put in place of standard error."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.monkeypatch = monkeypatch
        self.master, follower = pty.openpty()
        fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 80, 0, 0))
        self.stream = os.fdopen(follower, "w")

    def attach(self) -> None:
        """Make it standard error, in the test's body (pytest's capture replaces standard
        error again when the test's call begins, after its fixtures)."""
        self.monkeypatch.setattr(sys, "stderr", self.stream)

    def shown(self) -> str:
        """What was written to it so far."""
        self.stream.write(END + "\n")
        self.stream.flush()
        seen = b""
        while END.encode() not in seen:  # a pty passes output on asynchronously
            assert select.select([self.master], [], [], 60)[0], "the terminal got no output"
            seen += os.read(self.master, 65_536)
        return seen.decode(errors="replace").replace(END, "")

    def close(self) -> None:
        self.monkeypatch.undo()
        self.stream.close()
        os.close(self.master)


@pytest.fixture
def terminal(monkeypatch: pytest.MonkeyPatch) -> Iterator[Terminal]:
    value = Terminal(monkeypatch)
    yield value
    value.close()


def _many(n: int) -> list[Record]:
    return [Record({"@id": f"urn:m:{i}", "text": f"note {i} about the ferry"}) for i in range(n)]


def test_a_terminal_shows_the_embedding_progress(memory: Memory, terminal: Terminal) -> None:
    terminal.attach()
    memory.put_many(_many(300))
    shown = terminal.shown()
    assert "embedding" in shown
    assert "/300" in shown
    assert memory.index.behind() == 0


def test_progress_false_shows_nothing_on_a_terminal(memory: Memory, terminal: Terminal) -> None:
    terminal.attach()
    memory.put_many(_many(300), progress=False)
    assert terminal.shown().strip() == ""
    assert memory.index.count() == 300


def test_progress_true_shows_the_bar_in_a_pipe_and_none_shows_none(
    memory: Memory, capsys: pytest.CaptureFixture[str]
) -> None:
    memory.put_many(_many(10))  # standard error captured by pytest: not a terminal
    assert capsys.readouterr().err == ""
    memory.put_many(_many(300)[10:], progress=True)
    err = capsys.readouterr().err
    assert "embedding" in err
    assert "/290" in err


def test_embed_later_shows_no_bar(memory: Memory, capsys: pytest.CaptureFixture[str]) -> None:
    memory.put_many(_many(10), embed="later", progress=True)  # nothing embedded in the call
    assert memory.index.refresh(wait=True) == 0
    assert capsys.readouterr().err == ""


def test_an_iterator_of_records_is_counted_without_a_total(
    memory: Memory, capsys: pytest.CaptureFixture[str]
) -> None:
    assert len(memory.put_many(iter(_many(140)), progress=True)) == 140
    assert "embedding" in capsys.readouterr().err
    assert memory.index.count() == 140


@pytest.mark.parametrize(
    "records", ['{"@id": "urn:x", "text": "one"}', {"@id": "urn:x"}, None, 5, 2.5]
)
def test_one_node_instead_of_many_is_refused_with_or_without_a_bar(
    memory: Memory, records: object
) -> None:
    for progress in (True, False):
        with pytest.raises(InvalidInputError, match="put_many takes an iterable of records"):
            memory.put_many(records, progress=progress)  # type: ignore[arg-type]
    with pytest.raises(InvalidInputError, match="put_many takes an iterable of records"):
        memory.put_many(records, embed="later")  # type: ignore[arg-type]
    assert memory.store.count() == 0


@pytest.mark.parametrize("progress", ["yes", 1, 0, "", [], "None"])
def test_a_bad_progress_is_named_and_nothing_is_written(memory: Memory, progress: object) -> None:
    with pytest.raises(InvalidInputError, match="progress must be True, False or None"):
        memory.put_many(_records(), progress=progress)  # type: ignore[arg-type]
    assert memory.store.count() == 0


@pytest.mark.parametrize("embed", ["soon", None, True, ""])
def test_a_bad_embed_mode_is_named_and_nothing_is_written(memory: Memory, embed: object) -> None:
    with pytest.raises(InvalidInputError, match="embed must be 'now' or 'later'"):
        memory.put_many(_records(), embed=embed)  # type: ignore[arg-type]
    assert memory.store.count() == 0


def test_embed_later_on_postgresql(
    postgres_url: str, postgres_schema: str, embedder: HeldEmbedder
) -> None:
    """A memory in PostgreSQL defers its embedding the same way (pgvector behind)."""
    config = MemoryConfig(database_schema=postgres_schema)
    with Memory.open(postgres_url, config=config, embedder=embedder) as memory:
        embedder.gate.clear()
        memory.put_many(_records(), embed="later")
        assert embedder.waiting.wait(60)
        during = memory.search("harbour ferry", 3)
        assert during.index_behind > 0
        assert [h.iri for h in during][:1] == ["urn:n:1"]  # by words meanwhile
        embedder.gate.set()
        assert memory.index.refresh(wait=True) == 0
        after = memory.search("harbour ferry", 3)
        assert after.index_behind == 0
        assert after[0].arms["dense"].rank >= 1
