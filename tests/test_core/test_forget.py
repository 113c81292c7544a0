"""Forgetting on request: a scope's data leaves every layer and every file, the rest stays."""

from __future__ import annotations

import ctypes
import struct
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from gliding_core import (
    Conversation,
    HashEmbedder,
    InvalidInputError,
    Memory,
    MemoryConfig,
    Scope,
    TopicConfig,
)
from gliding_core.config import DenseConfig
from gliding_core.hyperspace.backends import CachedEmbedder
from gliding_core.hyperspace.windows import text_windows
from gliding_core.memory import CHROMA_DIR, POINCARE_FILE
from gliding_core.retention.erasure import ForgetReport, scope_entries
from gliding_core.storage import EMBEDDING_CACHE_FILE
from gliding_core.view.chatlog import ChatLog
from tests.test_core.held_embedder import HeldEmbedder, cache_forgets

CONFIG = MemoryConfig(topics=TopicConfig(interval_s=0))
ALICE, BOB = Scope.user("alice"), Scope.user("bob")
# Words no other text holds, so a byte scan finds them only where the forgotten data stayed.
SECRET = "Qzpassport X1234567 Qzsecretword"
KEPT = "Bobkeepword Y7654321"


def marks(text: str) -> list[bytes]:
    """The byte sequences a trace of ``text`` would show: each distinctive word, as written
    and lowercased (the full-text index keeps terms lowercased)."""
    words = [w for w in text.split() if any(c.isdigit() for c in w) or w.startswith("Qz")]
    return [form for w in words for form in (w.encode(), w.lower().encode())]


def files_holding(directory: Path, needles: list[bytes]) -> dict[str, list[bytes]]:
    """Every file under ``directory`` that holds one of ``needles``, with the ones it holds."""
    found: dict[str, list[bytes]] = {}
    for path in sorted(p for p in directory.rglob("*") if p.is_file()):
        data = path.read_bytes()
        held = [needle for needle in needles if needle in data]
        if held:
            found[str(path.relative_to(directory))] = held
    return found


def fill(memory: Memory, scope: Scope, text: str, tag: str) -> None:
    """Give ``scope`` data in every layer: chat log, turns, delivered and pending inputs, a
    note, a trained structure index, and its task's blackboard nodes and messages."""
    conversation = Conversation(memory, scope=scope)
    log = ChatLog(conversation)
    log.append(
        [
            {"role": "user", "content": f"Remember this: {text}", "id": f"{tag}-1"},
            {"role": "assistant", "content": f"Noted, {text}.", "id": f"{tag}-2"},
        ]
    )
    for i in range(30):  # enough pages that freed ones are not all reused
        conversation.record([{"role": "user", "content": f"{tag} filler {i} {text}"}])
    memory.supplements.put(scope.task_iri, f"delivered input {text}")
    delivered = conversation.deliver()
    log.append([{"role": "user", "content": delivered[0].content, "supplement": delivered[0].iri}])
    memory.supplements.put(scope.task_iri, f"pending input {text}")
    memory.store.put({"@type": "Note", "text": f"note {text}"}, tags=[scope.tag])
    board = memory.blackboard
    board.write(
        [{"@id": f"urn:ex:{tag}/plan", "@type": "Plan", "text": f"plan {text}"}],
        task=scope.task_iri,
        area="plan",
    )
    board.flush()
    board.coordination.messages.publish("chat", {"text": text}, task=scope.task_iri)


@pytest.fixture
def memory(tmp_path: Path) -> Iterator[Memory]:
    with Memory.open(tmp_path, config=CONFIG, embedder=HashEmbedder()) as value:
        yield value


def test_forgetting_a_user_leaves_no_byte_of_their_text_in_any_file(tmp_path: Path) -> None:
    with Memory.open(tmp_path, config=CONFIG, embedder=HashEmbedder()) as memory:
        fill(memory, ALICE, SECRET, "a")
        fill(memory, BOB, KEPT, "b")
        memory.structure.train()
        assert memory.store.search_ids("Qzpassport")  # indexed everywhere before
        assert files_holding(tmp_path, marks(SECRET))  # the scan does find what is there
        report = memory.forget(ALICE)
        bob_hits = [h.iri for h in memory.search("Bobkeepword", 50, filters=BOB.filters())]
        memory.blackboard.flush()  # bob's message node, written back at close otherwise
        kept = memory.store.count()
    assert files_holding(tmp_path, marks(SECRET)) == {}
    assert isinstance(report, ForgetReport)
    assert report.target == "user:alice"
    assert report.kinds["Turn"] >= 32
    assert report.kinds["SupplementaryInput"] >= 2
    assert report.inputs == 2  # the delivered one and the pending one
    assert report.blackboard_nodes >= 2
    assert report.messages == 1
    assert report.vectors >= 32
    assert report.structure >= 32
    assert report.embeddings >= 32
    assert set(report.scrubbed) >= {"l0", "dense", "blackboard", "coordination"}
    assert report.skipped == ()
    with Memory.open(tmp_path, config=CONFIG, embedder=HashEmbedder()) as memory:
        assert memory.store.count() == kept
        assert memory.store.search_ids("Qzpassport X1234567") == []
        assert not any("Qz" in h.entry.content for h in memory.search("Qzpassport", 50))
        assert scope_entries(memory.store, ALICE) == []
        again = [h.iri for h in memory.search("Bobkeepword", 50, filters=BOB.filters())]
        assert again == bob_hits
        assert len(again) >= 30  # bob's data is intact
        assert memory.index.count() == sum(1 for batch in memory.store.scan_texts() for _ in batch)
        assert memory.blackboard.read("urn:ex:b/plan") is not None
        assert memory.blackboard.read("urn:ex:a/plan") is None
    assert files_holding(tmp_path, marks(KEPT))  # bob's bytes are still on disk


def test_the_turn_that_delivered_an_input_carries_the_scope_tag(memory: Memory) -> None:
    conversation = Conversation(memory, scope=ALICE)
    memory.supplements.put(ALICE.task_iri, "an input for alice")
    (item,) = conversation.deliver()
    turn = conversation.input_turn(item.iri)
    assert turn is not None
    entry = memory.store.get(turn)
    assert entry is not None
    assert ALICE.tag in entry.tags


def test_an_untagged_delivered_turn_is_found_through_its_task(memory: Memory) -> None:
    # As written before such turns carried the scope's tag.
    session = memory.session(ALICE.task_iri)
    memory.supplements.put(ALICE.task_iri, "an old input Qzoldinput")
    session.start_cycle(memory.supplements)
    (turn,) = session.turns
    assert ALICE.tag not in memory.store.get(turn.l0_archive_iri).tags  # type: ignore[union-attr]
    report = memory.forget(ALICE)
    assert turn.l0_archive_iri in report.entries
    assert session.turns == []
    assert session.taken_inputs == {}
    assert memory.store.search_ids("Qzoldinput") == []


def test_forgetting_a_thread_leaves_the_user_scope_alone(memory: Memory) -> None:
    thread = Scope.thread("t1")
    Conversation(memory, scope=thread).record([{"role": "user", "content": "thread words"}])
    Conversation(memory, scope=ALICE).record([{"role": "user", "content": "user words"}])
    report = memory.forget(thread)
    assert report.kinds == {"Turn": 1, "SessionState": 1}  # the turn, and its session's state
    assert [h.entry.node["text"] for h in memory.search("words", 5)] == ["user words"]


def test_forgetting_a_list_of_iris_removes_exactly_those(memory: Memory) -> None:
    a = memory.store.put({"@id": "urn:ex:a", "text": "alpha Qzalpha", "parent": {"@id": "urn:x"}})
    b = memory.store.put({"@id": "urn:ex:b", "text": "beta"})
    memory.search("alpha", 5)  # the dense index has both
    report = memory.forget([a, "urn:ex:missing"])
    assert report.entries == (a,)
    assert report.target == "iris"
    assert report.vectors == 1
    assert a not in memory.store
    assert b in memory.store
    assert memory.store.neighbours("urn:x", direction="in") == []  # its edges went too
    assert [iri for iri, _ in memory.index.query("alpha", 5)] == [b]


def test_forgetting_drops_the_turns_from_open_sessions(memory: Memory) -> None:
    conversation = Conversation(memory, scope=ALICE)
    conversation.record([{"role": "user", "content": "first Qzfirst", "id": "m1"}])
    session = conversation.session
    assert len(session.turns) == 1
    report = memory.forget(ALICE)
    assert report.session_turns == 1
    assert session.turns == []
    conversation.record([{"role": "user", "content": "first Qzfirst", "id": "m1"}])
    assert memory.store.search_ids("Qzfirst") == []  # a resent message is not archived again


def test_a_memory_without_engines_says_what_it_could_not_reach(tmp_path: Path) -> None:
    with Memory.open(tmp_path, config=CONFIG, embedder=HashEmbedder()) as owner:
        Conversation(owner, scope=ALICE).record([{"role": "user", "content": "x Qzfar"}])
    with Memory.open(tmp_path, config=CONFIG, embedder=HashEmbedder(), engines=False) as other:
        report = other.forget(ALICE)
    assert report.kinds == {"Turn": 1, "SessionState": 1}  # the turn, and its session's state
    assert any(s.startswith("dense index") for s in report.skipped)


@pytest.mark.parametrize(
    "target", ["user:alice", "", [], [""], ["not an iri"], None, 3, {"user": "alice"}]
)
def test_a_bad_target_is_refused_and_nothing_is_forgotten(memory: Memory, target: object) -> None:
    memory.store.put({"@id": "urn:ex:a", "text": "stays"})
    with pytest.raises(InvalidInputError):
        memory.forget(target)  # type: ignore[arg-type]
    assert "urn:ex:a" in memory.store


def test_a_closed_memory_cannot_forget(tmp_path: Path) -> None:
    memory = Memory.open(tmp_path, config=CONFIG, embedder=HashEmbedder())
    memory.close()
    with pytest.raises(Exception, match="closed"):
        memory.forget(ALICE)


def test_a_forgotten_iri_leaves_chromas_files_and_the_structure_index(tmp_path: Path) -> None:
    marker = b"Qzmarkeriri"
    with Memory.open(tmp_path, config=CONFIG, embedder=HashEmbedder()) as memory:
        memory.store.put_many(
            [{"@id": f"urn:ex:keep{i}", "@type": "Doc", "text": f"kept {i}"} for i in range(50)]
        )
        memory.store.put({"@id": "urn:ex:Qzmarkeriri", "@type": "Doc", "text": "to forget"})
        memory.structure.train()
        assert memory.index.count() == 51
        assert files_holding(tmp_path / CHROMA_DIR, [marker])  # Chroma's log holds the id
        report = memory.forget(["urn:ex:Qzmarkeriri"])
        assert report.vectors == 1
        assert report.structure == 1
        assert memory.index.count() == 50
    assert files_holding(tmp_path / CHROMA_DIR, [marker]) == {}
    assert files_holding(tmp_path, [b"to forget"]) == {}
    assert marker not in (tmp_path / POINCARE_FILE).read_bytes()


def test_an_expired_entry_of_the_scope_is_forgotten_too(tmp_path: Path) -> None:
    with Memory.open(tmp_path, config=CONFIG, embedder=HashEmbedder()) as memory:
        memory.store.put_many(
            [{"@id": f"urn:ex:pad{i}", "text": f"padding {i}"} for i in range(100)]
        )
        memory.store.put(
            {"@id": "urn:ex:brief", "text": "expired Qzexpiredword"}, tags=[ALICE.tag], ttl=0.01
        )
        time.sleep(0.05)  # expired: invisible, not yet swept (the memory sweeps every 60 s)
        memory.forget(ALICE)
    assert files_holding(tmp_path, [b"Qzexpiredword", b"qzexpiredword"]) == {}


def _glibc() -> ctypes.CDLL:
    """The C library, when it is glibc (its ``mallopt`` takes ``M_PERTURB``); else skip."""
    try:
        libc = ctypes.CDLL("libc.so.6")
        libc.gnu_get_libc_version.restype = ctypes.c_char_p
        libc.gnu_get_libc_version()
    except (OSError, AttributeError):
        pytest.skip("needs glibc's mallopt")
    return libc


def spare_bytes(chroma: Path) -> bytes:
    """The bytes of every HNSW segment's level-0 file and lengths beyond its elements."""
    spare = b""
    for header in chroma.glob("*/header.bin"):
        fields = struct.unpack("<i6QiI3QdQ", header.read_bytes())
        capacity, count, width = fields[2], fields[3], fields[4]
        for name, size in (("data_level0.bin", width), ("length.bin", 4)):
            spare += (header.parent / name).read_bytes()[count * size : capacity * size]
    return spare


def test_the_rebuilt_index_leaves_no_uncleared_memory_in_its_files(tmp_path: Path) -> None:
    # Chroma writes a new index's files for their whole capacity from memory malloc did not
    # clear, which may hold a forgotten user's text (a clean-clone run once found it there).
    # glibc's M_PERTURB has malloc fill such memory with a known byte (0xA5 here) instead, and
    # a fixed mmap threshold keeps the index's allocation on the heap, where it applies: no
    # spare byte of the rebuilt index may still hold it.
    libc = _glibc()
    m_perturb, m_mmap_threshold = -6, -3
    with Memory.open(tmp_path, config=CONFIG, embedder=HashEmbedder()) as memory:
        fill(memory, ALICE, SECRET, "a")
        fill(memory, BOB, KEPT, "b")
        libc.mallopt(m_mmap_threshold, 32 << 20)
        libc.mallopt(m_perturb, 0x5A)
        try:
            memory.forget(ALICE)
        finally:
            libc.mallopt(m_perturb, 0)
            libc.mallopt(m_mmap_threshold, 128 << 10)
        spare = spare_bytes(tmp_path / CHROMA_DIR)
        assert spare  # the index has spare capacity, written in its files
        assert spare.count(0) == len(spare), f"{len(spare) - spare.count(0)} spare bytes kept"


def test_forgetting_an_entry_still_being_embedded_leaves_no_vector_in_the_cache(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    text = "Qzlatediagnosis of the patient"
    embedder = HeldEmbedder()
    forgotten = cache_forgets(monkeypatch)
    with Memory.open(tmp_path, config=CONFIG, embedder=embedder) as memory:
        memory.put_many([{"@id": "urn:ex:kept", "text": "another text"}])
        embedder.gate.clear()
        memory.put_many([{"@id": "urn:ex:late", "text": text}], embed="later")
        assert embedder.waiting.wait(60)  # the background catch-up holds the text
        worker = threading.Thread(target=memory.forget, args=(["urn:ex:late"],))
        worker.start()
        # The embedding under way ends once the cache has forgotten the text (or, when the
        # forget waits for it first, a little later).
        forgotten.wait(5)
        embedder.gate.set()
        worker.join(60)
        assert not worker.is_alive()
        assert "urn:ex:late" not in [h.iri for h in memory.search("Qzlatediagnosis", 5)]
    cache = CachedEmbedder(embedder, tmp_path / EMBEDDING_CACHE_FILE)
    try:
        assert cache.missing([text]) == [text]  # no vector of the forgotten text is left
    finally:
        cache.close()


@pytest.mark.parametrize("case", ["windows", "context"])
def test_forgetting_leaves_no_vector_of_the_texts_an_entry_was_embedded_as(
    tmp_path: Path, case: str
) -> None:
    """A long text is embedded in windows, a short reply after the end of the turn it answers
    (``DenseConfig.context_words``): the cache holds those texts' vectors, not the entry's."""
    dense = DenseConfig(context_words=20 if case == "context" else 0)
    config = MemoryConfig(topics=TopicConfig(interval_s=0), dense=dense)
    long = " ".join(f"Qzword{i}" for i in range(400))
    turn = "which ferry leaves for the island at dawn"
    reply = "Qzreply the seven o'clock one"
    embedder = HashEmbedder()
    with Memory.open(tmp_path, config=config, embedder=embedder) as memory:
        memory.store.put_many(
            [
                {"@id": "urn:ex:long", "text": long},
                {"@id": "urn:ex:turn", "text": turn},
                {"@id": "urn:ex:reply", "text": reply, "previous": {"@id": "urn:ex:turn"}},
            ]
        )
        memory.forget(["urn:ex:long", "urn:ex:turn", "urn:ex:reply"])
    if case == "windows":
        embedded = text_windows(long, dense)
        assert len(embedded) > 1
    else:
        embedded = [f"{turn}\n{reply}"]  # the reply after its context, as embedded
    cache = CachedEmbedder(embedder, tmp_path / EMBEDDING_CACHE_FILE)
    try:
        assert cache.missing(embedded) == embedded
    finally:
        cache.close()
