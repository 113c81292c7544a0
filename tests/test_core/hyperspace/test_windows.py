"""Hyperspace: a long text is embedded in overlapping windows that cover it, and found by any.

The embedder here reads only the first words of a text, as a real model reads a bounded number
of word pieces (all-MiniLM-L6-v2: 256) and drops the rest: without windows, a fact at the end
of a long text is invisible to the dense arm.
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Iterator, Sequence

import pytest

from gliding_core import DenseConfig, HashEmbedder, Memory, MemoryConfig
from gliding_core.errors import ConfigError
from gliding_core.hyperspace.windows import WINDOW_SEPARATOR, text_windows

READS = 40  # words the embedder reads of each text


class ReadsTheBeginning(HashEmbedder):
    """The hash embedder reading only a text's first ``READS`` words, like a bounded model."""

    def embed_documents(self, texts: Sequence[str]) -> list[list[float]]:
        return super().embed_documents([" ".join(t.split()[:READS]) for t in texts])


WINDOWS = DenseConfig(window_words=32, window_overlap=8, max_windows=16)
FACT = "the spare key hides under the blue flowerpot by the garage"
VOCABULARY = ["river", "mountain", "coffee", "budget", "meeting"]
VOCABULARY += ["painting", "violin", "harbour", "winter", "garden"]


def _filler(rng: random.Random, words: int) -> str:
    return " ".join(rng.choice(VOCABULARY) for _ in range(words))


def _long_items(memory: Memory) -> None:
    rng = random.Random(7)
    for i in range(6):
        text = _filler(rng, 200)
        if i == 3:
            text += " " + FACT  # only in the last window
        memory.store.put({"@id": f"urn:long:{i}", "text": text})


def _memory(windows: DenseConfig) -> Memory:
    return Memory(config=MemoryConfig(dense=windows), embedder=ReadsTheBeginning())


@pytest.fixture
def memory() -> Iterator[Memory]:
    with _memory(WINDOWS) as value:
        yield value


def _vector_ids(memory: Memory) -> list[str]:
    return list(memory.index._ids())  # type: ignore[attr-defined]


def test_a_fact_only_in_the_last_window_is_found_by_the_dense_arm(memory: Memory) -> None:
    _long_items(memory)
    assert memory.index.query("where does the spare key hide", 1)[0][0] == "urn:long:3"
    hits = memory.search("where does the spare key hide", 3, lexical_weight=0.0)
    assert hits[0].iri == "urn:long:3"
    assert hits[0].arms["dense"].rank == 1


def test_one_window_reads_the_beginning_only() -> None:
    """The same items with one window per entry: the fact is past what the model reads."""
    with _memory(DenseConfig(window_words=32, window_overlap=8, max_windows=1)) as memory:
        _long_items(memory)
        found = dict(memory.index.query("where does the spare key hide", 6))
        assert max(found, key=lambda iri: found[iri]) != "urn:long:3"


def test_a_windowed_item_stays_one_entry(memory: Memory) -> None:
    _long_items(memory)
    assert memory.store.count() == 6
    assert memory.index.count() == 6
    assert len(_vector_ids(memory)) > 6  # the windows are vectors, not entries
    for iris in (
        [iri for iri, _ in memory.index.query("spare key garage", 6)],
        [h.iri for h in memory.search("spare key garage", 6)],
        list(memory.index.similarities("spare key garage", ["urn:long:3", "urn:long:0"])),
    ):
        assert all(WINDOW_SEPARATOR not in iri for iri in iris)
        assert len(iris) == len(set(iris))
    exact = memory.index.similarities("where does the spare key hide", ["urn:long:3"])
    dense = dict(memory.index.query("where does the spare key hide", 6))
    assert exact["urn:long:3"] == pytest.approx(dense["urn:long:3"], abs=1e-5)


def test_a_shorter_rewrite_or_a_delete_drops_the_windows(memory: Memory) -> None:
    _long_items(memory)
    memory.store.replace({"@id": "urn:long:3", "text": "a short note now"})
    memory.search("note", 1)  # the index catches up before a search
    assert not [i for i in _vector_ids(memory) if i.startswith("urn:long:3" + WINDOW_SEPARATOR)]
    memory.store.delete("urn:long:0")
    memory.search("note", 1)
    assert not [i for i in _vector_ids(memory) if i.startswith("urn:long:0")]
    assert memory.index.count() == 5


def test_filtered_dense_search_scores_windows_too(memory: Memory) -> None:
    _long_items(memory)
    allowed = ["urn:long:3", "urn:long:4"]
    assert memory.index.query("where does the spare key hide", 2, allowed=allowed)[0][0] == (
        "urn:long:3"
    )


@pytest.mark.parametrize("words", [1, 32, 33, 100, 392, 393, 5_000])
def test_windows_cover_the_text_overlapping_and_bounded(words: int) -> None:
    text = " ".join(f"w{i}" for i in range(words))
    windows = text_windows(text, WINDOWS)
    assert len(windows) <= WINDOWS.max_windows
    if words <= WINDOWS.window_words:
        assert windows == [text]
        return
    spans = [[int(w[1:]) for w in window.split()] for window in windows]
    assert spans[0][0] == 0
    assert spans[-1][-1] == words - 1
    for before, after in itertools.pairwise(spans):
        assert after == list(range(after[0], after[-1] + 1))  # contiguous
        assert after[0] <= before[-1] - WINDOWS.window_overlap + 1  # they overlap enough
    if words <= 392:  # 16 windows of 32 words advancing by 24
        assert all(len(span) == WINDOWS.window_words for span in spans)


def test_a_memory_on_postgresql_embeds_windows_too(postgres_url: str, postgres_schema: str) -> None:
    """The windows belong to the shared base of the dense indexes: pgvector holds them too."""
    config = MemoryConfig(dense=WINDOWS, database_schema=postgres_schema)
    with Memory.open(postgres_url, config=config, embedder=ReadsTheBeginning()) as memory:
        _long_items(memory)
        hits = memory.search("where does the spare key hide", 3, lexical_weight=0.0)
        assert hits[0].iri == "urn:long:3"
        assert memory.index.count() == 6
        assert len(_vector_ids(memory)) > 6
        memory.store.replace({"@id": "urn:long:3", "text": "a short note now"})
        memory.search("note", 1)
        assert not [i for i in _vector_ids(memory) if i.startswith("urn:long:3" + WINDOW_SEPARATOR)]


CHAT = [
    ("urn:chat:1", "Did you enjoy the violin concert at the harbour last winter?", None),
    ("urn:chat:2", "Yes, it was great!", "urn:chat:1"),
    ("urn:chat:3", "I planted tulips and roses in the garden this morning.", None),
    ("urn:chat:4", "Nice, that sounds lovely.", "urn:chat:3"),
]


def _chat(memory: Memory) -> None:
    for iri, text, previous in CHAT:
        node: dict[str, object] = {"@id": iri, "text": text}
        if previous is not None:
            node["previous"] = {"@id": previous}
        memory.store.put(node)


def test_a_short_reply_is_embedded_after_the_turn_it_answers() -> None:
    question = "how was the violin concert"
    with _memory(DenseConfig(context_words=6)) as memory:
        _chat(memory)
        found = memory.index.similarities(question, ["urn:chat:2", "urn:chat:4"])
        # The reply is found by what it answers; the other reply, after the garden, is not.
        assert found["urn:chat:2"] > found["urn:chat:4"]
        ranked = [iri for iri, _ in memory.index.query(question, 4)]
        assert ranked.index("urn:chat:2") < ranked.index("urn:chat:4")
        # Only its vector changes: L0 and the lexical index keep its own text.
        assert memory.store.searchable_texts(["urn:chat:2"]) == {"urn:chat:2": CHAT[1][1]}
        assert "urn:chat:2" not in [h.entry.iri for h in memory.store.search_text("violin")]
        # Read back from the embedding cache by L0's texts, the vectors are the same.
        memory.index._forget()  # type: ignore[attr-defined]
        again = memory.index.similarities(question, ["urn:chat:2", "urn:chat:4"])
        assert again == pytest.approx(found, abs=1e-6)
    with _memory(DenseConfig()) as memory:  # the default: every text alone
        _chat(memory)
        alone = memory.index.similarities(question, ["urn:chat:2"])["urn:chat:2"]
        assert alone < found["urn:chat:2"]


def test_a_longer_text_or_one_without_a_link_is_embedded_alone() -> None:
    question = "how was the violin concert"
    with _memory(DenseConfig(context_words=3)) as short, _memory(DenseConfig()) as plain:
        for memory in (short, plain):
            _chat(memory)
            memory.store.put({"@id": "urn:chat:5", "text": "Great!", "previous": "urn:none"})
        for iri in ("urn:chat:2", "urn:chat:5"):  # four words: over the limit; no such entry
            assert short.index.similarities(question, [iri]) == pytest.approx(
                plain.index.similarities(question, [iri]), abs=1e-6
            )


@pytest.mark.parametrize("value", [-1, 100_001, 2.5, "4", True])
def test_context_words_is_validated(value: object) -> None:
    with pytest.raises(ConfigError, match="context_words"):
        DenseConfig(context_words=value)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "link",
    ["two words", "", "urn:a\nb", "\u0000", 42, None, ["two words"], {"@id": 7}],
)
def test_a_link_that_names_no_entry_gives_no_context_and_the_index_keeps_up(link: object) -> None:
    """Anyone may write a ``previous`` of any value (a model's node): one that is no IRI is no
    context, and never stops the index from embedding this entry or those after it."""
    with _memory(DenseConfig(context_words=6)) as memory:
        memory.store.put({"@id": "urn:chat:1", "text": "how was the violin concert"})
        memory.store.put({"@id": "urn:chat:2", "text": "Great!", "previous": link})
        memory.store.put({"@id": "urn:chat:3", "text": "and the garden party after it"})
        assert memory.index.refresh(wait=True) == 0
        assert memory.index.count() == 3
        own = memory.store.searchable_texts(["urn:chat:2"])["urn:chat:2"]  # alone, no context
        assert memory.index.similarities(own, ["urn:chat:2"]) == pytest.approx(
            {"urn:chat:2": 1.0}, abs=1e-6
        )


def test_a_link_to_another_scope_gives_no_context() -> None:
    """A reply of one scope may name any entry as the one it follows: the text of an entry of
    another scope never goes into its vector (a search in its scope would rank by it)."""
    question = "how was the violin concert"
    with _memory(DenseConfig(context_words=6)) as memory:
        memory.store.put({"@id": "urn:bob:1", "text": question}, tags=["scope:user:bob"])
        memory.store.put({"@id": "urn:alice:1", "text": question}, tags=["scope:user:alice"])
        for name, follows in (("own", "urn:alice:1"), ("other", "urn:bob:1")):
            memory.store.put(
                {"@id": f"urn:alice:{name}", "text": "Great!", "previous": follows},
                tags=["scope:user:alice"],
            )
        memory.store.put({"@id": "urn:none:1", "text": "Great!", "previous": "urn:bob:1"})
        found = memory.index.similarities(
            question, ["urn:alice:own", "urn:alice:other", "urn:none:1"]
        )
        assert found["urn:alice:own"] > found["urn:alice:other"]  # its own scope's context
        for iri in ("urn:alice:other", "urn:none:1"):  # embedded alone
            own = memory.store.searchable_texts([iri])[iri]
            assert memory.index.similarities(own, [iri]) == pytest.approx({iri: 1.0}, abs=1e-6)
