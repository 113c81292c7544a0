"""The lexical arm's BM25 computed from the full-text index's postings (``store.postings``):
the same rows with the same scores, to the bit, as FTS5's own ``bm25()``, as texts are
written, replaced, deleted and expire, from this handle or another; and FTS5's query wherever
the postings cannot say (a word of several terms, a word the vocabulary may have split
otherwise, an old snapshot, rowids too sparse to keep).

FTS5's own full query is the oracle: every search runs again with the pruned search off
(``defer_common_words = 0``) on the same store.
"""

from __future__ import annotations

import random
import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from gliding_core.config import StoreConfig
from gliding_core.store import pruning
from gliding_core.store import sqlite as sqlite_store
from gliding_core.store.postings import RowLengths, varints
from gliding_core.store.sqlite import L0Store
from tests.test_core.store.full_query import full_query as _full

# Words in at most 150 entries are never deferred here, so every phrase is scored from the
# postings; the store must hold 20 x 150 = 3,000 entries for the path to apply at all.
THRESHOLD = 150
CONFIG = StoreConfig(defer_common_words=THRESHOLD, defer_exactly=True)
VOCABULARY = [f"w{i}" for i in range(400)]
WEIGHTS = [1 / (rank + 1) for rank in range(len(VOCABULARY))]


def _text(rng: random.Random, length: int | None = None) -> str:
    return " ".join(rng.choices(VOCABULARY, WEIGHTS, k=length or rng.randint(3, 30)))


def _nodes(rng: random.Random, count: int, start: int = 0) -> list[dict[str, str]]:
    return [{"@id": f"urn:r:{i}", "text": _text(rng)} for i in range(start, start + count)]


def _queries(rng: random.Random, count: int) -> Iterator[str]:
    for _ in range(count):
        yield " ".join(rng.sample(VOCABULARY[60:300], rng.randint(1, 4)))


def _agree(store: L0Store, rng: random.Random, count: int, limit: int = 100) -> None:
    before = store.scored_searches
    for query in _queries(rng, count):
        assert store.search_ids(query, limit=limit) == _full(store, query, limit), query
    assert store.scored_searches == before + count


@pytest.fixture
def store(tmp_path: Path) -> Iterator[L0Store]:
    rng = random.Random(7)
    with L0Store(tmp_path / "l0.sqlite3", config=CONFIG) as s:
        s.put_many(_nodes(rng, 3_000))
        yield s


def test_scores_and_order_are_fts5s_to_the_bit(store: L0Store) -> None:
    _agree(store, random.Random(1), 200)
    assert store.pruned_searches == 0  # nothing was deferred: every phrase scored here


def test_long_texts_absent_words_and_shared_stems_score_as_in_fts5(store: L0Store) -> None:
    rng = random.Random(2)
    # Lengths of 128 tokens and more take two bytes in FTS5's record of them.
    store.put_many([{"@id": f"urn:long:{i}", "text": _text(rng, 150 + i)} for i in range(40)])
    store.put_many(
        [{"@id": f"urn:paint:{i}", "text": f"painting w{60 + i} painted"} for i in range(5)]
    )
    before = store.scored_searches
    for query in ("w70 w71", "w70 nowhere", "painting painted w61", "zzz w75", "w250"):
        assert store.search_ids(query, limit=50) == _full(store, query, 50), query
    assert store.scored_searches == before + 5


def test_lengths_follow_replaced_deleted_and_new_texts(store: L0Store) -> None:
    rng = random.Random(3)
    _agree(store, rng, 20)
    loads = store._lengths.loads
    # Texts made far longer and far shorter, entries deleted, entries added.
    store.put_many([{"@id": f"urn:r:{i}", "text": _text(rng, 120)} for i in range(0, 300, 3)])
    store.put_many([{"@id": f"urn:r:{i}", "text": "w25"} for i in range(1, 300, 3)])
    for i in range(2, 300, 3):
        store.delete(f"urn:r:{i}")
    store.put_many(_nodes(rng, 500, start=3_000))
    _agree(store, rng, 100)
    assert store._lengths.loads == loads  # caught up from the change log, not read again


def test_another_handles_writes_are_caught_up(store: L0Store) -> None:
    rng = random.Random(4)
    _agree(store, rng, 10)
    assert store.path is not None
    loads = store._lengths.loads
    with L0Store(store.path, config=CONFIG) as other:
        other.put_many([{"@id": f"urn:r:{i}", "text": _text(rng, 90)} for i in range(200)])
        other.put_many(_nodes(rng, 200, start=5_000))
    _agree(store, rng, 60)
    assert store._lengths.loads == loads  # caught up, not read again


def test_a_large_store_reads_its_lengths_ahead_when_opened(store: L0Store) -> None:
    assert store._warming is None  # it was empty when opened
    assert store.path is not None
    with L0Store(store.path, config=CONFIG) as again:
        assert again._warming is not None
        again._warming.join(timeout=30)
        assert again._lengths.loads == 1  # read before any search
        _agree(again, random.Random(8), 10)
        assert again._lengths.loads == 1
    with L0Store(store.path, config=StoreConfig(defer_common_words=0)) as off:
        assert off._warming is None  # nothing to score from the postings
    with L0Store(store.path, config=StoreConfig(defer_common_words=THRESHOLD * 2)) as small:
        assert small._warming is None  # too few rows for that threshold


def test_a_store_closed_while_it_reads_its_lengths_closes(store: L0Store) -> None:
    assert store.path is not None
    for _ in range(5):
        again = L0Store(store.path, config=CONFIG)
        again.close()  # whether or not the read ahead began, ended or failed
        assert again._warming is not None
        assert not again._warming.is_alive()  # close waited for it


def test_expired_entries_stay_out(store: L0Store) -> None:
    store.put({"@id": "urn:r:ttl", "text": "w60 w61 w62"}, ttl=0.001)
    time.sleep(0.01)
    before = store.scored_searches
    found = store.search_ids("w60 w61 w62", limit=100)
    assert store.scored_searches == before + 1
    assert "urn:r:ttl" not in {iri for iri, _ in found}
    assert found == _full(store, "w60 w61 w62", 100)


def test_a_word_of_several_terms_is_left_to_fts5(store: L0Store) -> None:
    store.put_many([{"@id": f"urn:s:{i}", "text": f"snake_case w70 x{i}"} for i in range(3)])
    before = store.scored_searches
    found = store.search_ids("snake_case w70", limit=20)
    assert store.scored_searches == before
    assert found == _full(store, "snake_case w70", 20)


def test_a_word_the_vocabulary_lacks_but_fts5_finds_is_left_to_fts5(
    store: L0Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Were this process's tokenizer to split a word otherwise than FTS5 does, the vocabulary
    # would not hold the term it gives: FTS5's query is then the only right answer.
    real = pruning.tokens
    monkeypatch.setattr(
        pruning, "tokens", lambda word: ["misread"] if word == "w80" else real(word)
    )
    before = store.scored_searches
    found = store.search_ids("w80 w81", limit=50)
    assert store.scored_searches == before
    assert found == _full(store, "w80 w81", 50)
    assert any(iri for iri, _ in found)


def test_words_of_too_many_occurrences_are_left_to_fts5(
    store: L0Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The postings are read whole into memory, one row an occurrence: a word repeated in a
    # few long texts counts every time (20 rows hold "w71" 2,000 times each).
    store.put_many([{"@id": f"urn:rep:{i}", "text": "w71 " * 2_000} for i in range(20)])
    query = "w70 w71"
    monkeypatch.setattr(pruning, "MOST_POSTINGS", 39_000)
    before = store.scored_searches
    assert store.search_ids(query, limit=50) == _full(store, query, 50)
    assert store.scored_searches == before
    monkeypatch.setattr(pruning, "MOST_POSTINGS", 1_000_000)
    assert store.search_ids(query, limit=50) == _full(store, query, 50)
    assert store.scored_searches == before + 1


class UndoneError(Exception):
    """Raised to roll a transaction back."""


def test_a_search_inside_a_transaction_rolled_back_leaves_the_lengths_right(
    store: L0Store,
) -> None:
    # A search inside the writer's transaction sees its uncommitted texts; were the lengths to
    # follow them, the rolled-back sequences would be given again to other texts and the
    # lengths would stay those of the texts that never were.
    rng = random.Random(6)
    _agree(store, rng, 5)

    def written_searched_and_undone() -> None:
        with store.transaction():
            store.put_many([{"@id": f"urn:r:{i}", "text": _text(rng, 100)} for i in range(50)])
            store.put_many(_nodes(rng, 50, start=9_000))
            store.search_ids("w70 w71 w72", limit=100)
            raise UndoneError

    with pytest.raises(UndoneError):
        written_searched_and_undone()
    store.put_many([{"@id": f"urn:r:{i}", "text": "w75"} for i in range(50, 150)])
    _agree(store, rng, 60)


def test_a_reader_older_than_the_lengths_falls_back(store: L0Store) -> None:
    assert store.path is not None
    store.search_ids("w90 w91", limit=10)  # the lengths are read
    old = sqlite3.connect(store.path)
    try:
        old.execute("BEGIN")
        old.execute("SELECT count(*) FROM entries").fetchone()  # its snapshot starts here
        store.put({"@id": "urn:r:newer", "text": "w90 w91 w92"})
        store.search_ids("w90 w91", limit=10)  # the lengths catch up past that snapshot
        ids = np.array([1, 2, 3], dtype=np.int64)
        assert store._lengths.gather(old, ids) is None
        # Through a search on that snapshot: FTS5 scores it, as that snapshot holds it.
        top = pruning.top_matches(
            old,
            ["w90", "w91"],
            10,
            expired="SELECT 0 WHERE 0",
            min_deferred=THRESHOLD,
            lengths=store._lengths,
        )
        assert top is None or not top.scored
    finally:
        old.close()


def test_rowids_too_sparse_to_keep_fall_back(tmp_path: Path) -> None:
    rng = random.Random(5)
    config = StoreConfig(defer_common_words=5, defer_exactly=True)
    with L0Store(tmp_path / "l0.sqlite3", config=config) as s:
        s.put_many(_nodes(rng, 3_000))
        for i in range(2_800):  # 200 rows left, the highest rowid 3,000
            s.delete(f"urn:r:{i}")
        for query in _queries(rng, 20):
            assert s.search_ids(query, limit=10) == _full(s, query, 10)
        assert s._lengths.loads == 0  # refused: FTS5 scored every query
        assert s._lengths._refused == s.change_sequence()  # and not looked at every search


def test_the_pruned_search_scores_its_kept_words_from_the_postings(tmp_path: Path) -> None:
    # "common" in 301 entries is deferred; "zebra" is scored from the postings, and the rows
    # holding both get FTS5's whole score.
    config = StoreConfig(defer_common_words=300)
    with L0Store(tmp_path / "l0.sqlite3", config=config) as s:
        s.put_many(
            [
                {"@id": f"urn:t:{i}", "text": "common" if i < 300 else f"plain filler {i % 50}"}
                for i in range(6_999)
            ]
            + [{"@id": "urn:t:rare", "text": "zebra common"}]
            + [{"@id": f"urn:t:z{i}", "text": f"zebra {i}"} for i in range(20)]
        )
        found = s.search_ids("zebra common", limit=5)
        assert (s.pruned_searches, s.scored_searches) == (1, 1)
        assert found[0][0] == "urn:t:rare"
        full = _full(s, "zebra common", 5)
        assert [iri for iri, _ in found] == [iri for iri, _ in full]
        assert [score for _, score in found] == pytest.approx([score for _, score in full])


def test_the_statistics_start_at_zero(tmp_path: Path) -> None:
    with L0Store(tmp_path / "l0.sqlite3") as s:
        assert (s.pruned_searches, s.scored_searches) == (0, 0)
        assert isinstance(s._lengths, RowLengths)


@pytest.mark.parametrize(
    ("data", "count", "values"),
    [
        (b"\x05", 1, [5]),
        (b"\x81\x00\x07", 2, [128, 7]),
        (b"\xff" * 8 + b"\x01", 1, [(2**56 - 1) << 8 | 1]),
        (b"\x81", 1, []),  # ends inside its first varint
        (b"\x03\x81", 2, [3]),  # ends inside its second
        (b"", 1, []),
    ],
)
def test_varints_are_read_as_sqlite_writes_them(data: bytes, count: int, values: list[int]) -> None:
    assert varints(data, count) == values


def test_an_entry_deleted_as_its_rows_are_read_is_not_read_for_another(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The best rows and their entries are read in one snapshot: the newest entry deleted and
    its id given to a new entry between the two is not returned as that new entry."""
    config = StoreConfig(defer_common_words=1)
    with L0Store(tmp_path / "l0.sqlite3", config=config) as store:
        store.put_many([{"@id": f"urn:r:{i}", "text": f"alpha {i}"} for i in range(30)])
        store.put({"@id": "urn:last", "text": "alpha zeta"})
        in_order = sqlite_store._in_order
        calls: list[int] = []

        def overtaken(*args: Any) -> Any:
            if not calls:  # another thread's writes land between the two reads
                calls.append(1)
                store.delete("urn:last")
                store.put({"@id": "urn:new", "text": "unrelated words"})  # the same id
            return in_order(*args)

        monkeypatch.setattr(sqlite_store, "_in_order", overtaken)
        before = store.scored_searches
        hits = store.search_ids("zeta", limit=5)
        assert store.scored_searches == before + 1  # scored from the postings
        assert calls
        assert [iri for iri, _ in hits] in (["urn:last"], [])
        assert "urn:new" not in [iri for iri, _ in store.search_ids("zeta", limit=5)]
