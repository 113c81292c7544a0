"""The lexical arm's pruned search (``store.pruning``): with ``defer_exactly`` it answers only
when its bound proves the answer the full query's (best matches and scores), and otherwise the
full query runs; by default it also answers when a row would need more than one occurrence of
the deferred words to rank, which a constructed case shows can differ from the full query.

FTS5's own full query is the oracle: every search runs again with the pruning off
(``defer_common_words = 0``) on the same store.
"""

from __future__ import annotations

import random
import time
from collections.abc import Iterator

import pytest

from gliding_core.config import MemoryConfig, StoreConfig
from gliding_core.errors import ConfigError, GlidingError
from gliding_core.store.lexical import K1
from gliding_core.store.postings import varints
from gliding_core.store.pruning import fts5_idf
from gliding_core.store.sqlite import L0Store
from tests.test_core.store.full_query import full_query as _full


def _same(pruned: list[tuple[str, float]], full: list[tuple[str, float]]) -> None:
    """The same entries with the same scores; only entries of equal score may swap places."""
    assert len(pruned) == len(full)
    assert [s for _, s in pruned] == pytest.approx([s for _, s in full], rel=1e-12)
    assert sorted(pruned, key=lambda h: (-round(h[1], 9), h[0])) == [
        (iri, pytest.approx(score, rel=1e-12))
        for iri, score in sorted(full, key=lambda h: (-round(h[1], 9), h[0]))
    ]


EXACT = StoreConfig(defer_common_words=1, defer_exactly=True)


@pytest.fixture
def store() -> Iterator[L0Store]:
    """1,000 entries: "common" in 299 of them, "zebra" in 20 (5 of those with "common"),
    "quokka" in 12, the rest filler of their own words."""
    with L0Store(":memory:", config=EXACT) as s:
        nodes = []
        for i in range(1_000):
            words = [f"filler{i}", f"padding{i % 37}"]
            if i % 10 < 3 and i >= 20:
                words.append("common")
            if i < 20:
                words.append("zebra")
                if i % 4 == 0:
                    words.append("common")
            if 500 <= i < 512:
                words.append("quokka")
            nodes.append({"@id": f"urn:p:{i}", "text": " ".join(words)})
        s.put_many(nodes)
        yield s


def test_the_bound_applies_and_the_best_matches_are_the_full_querys(store: L0Store) -> None:
    before = store.pruned_searches
    pruned = store.search_ids("zebra common", limit=10)
    assert store.pruned_searches == before + 1  # answered by the pruned search
    _same(pruned, _full(store, "zebra common", 10))
    # The entries holding both words lead, with both words' score.
    assert {iri for iri, _ in pruned[:5]} == {f"urn:p:{i}" for i in range(0, 20, 4)}


def test_whole_entries_come_in_the_same_order(store: L0Store) -> None:
    pruned = [(h.entry.iri, h.score) for h in store.search_text("common zebra", limit=8)]
    setting, store.defer_common_words = store.defer_common_words, 0
    try:
        full = [(h.entry.iri, h.score) for h in store.search_text("common zebra", limit=8)]
    finally:
        store.defer_common_words = setting
    _same(pruned, full)


def test_too_few_rare_matches_run_the_full_query(store: L0Store) -> None:
    # 20 entries hold "zebra": the 30 best must include entries holding "common" alone.
    before = store.pruned_searches
    pruned = store.search_ids("zebra common", limit=30)
    assert store.pruned_searches == before
    _same(pruned, _full(store, "zebra common", 30))
    assert len(pruned) == 30


def test_a_query_of_rare_words_is_unaffected(store: L0Store) -> None:
    before = store.pruned_searches
    found = store.search_ids("zebra quokka", limit=50)
    assert store.pruned_searches == before  # nothing common to defer: the full query ran
    assert found == _full(store, "zebra quokka", 50)
    assert len(found) == 32


def _one_common_word(entries: int, threshold: int) -> L0Store:
    """ "common" in 301 of ``entries`` entries, "zebra" in one of them."""
    config = StoreConfig(defer_common_words=threshold, defer_exactly=True)
    s = L0Store(":memory:", config=config)
    s.put_many(
        [
            {"@id": f"urn:t:{i}", "text": "common" if i < 300 else "plain filler text"}
            for i in range(entries - 1)
        ]
        + [{"@id": "urn:t:rare", "text": "zebra common"}]
    )
    return s


def test_a_word_is_deferred_from_the_threshold_on() -> None:
    with _one_common_word(7_000, 302) as s:
        s.search_ids("zebra common", limit=1)
        assert s.pruned_searches == 0  # "common" matches 301 entries, fewer than 302
        s.defer_common_words = 301
        assert s.search_ids("zebra common", limit=1)[0][0] == "urn:t:rare"
        assert s.pruned_searches == 1


def test_a_small_store_never_looks_its_words_up() -> None:
    # 6,000 entries, under twenty times the threshold of 301: the full query runs.
    with _one_common_word(6_000, 301) as s:
        s.search_ids("zebra common", limit=1)
        assert s.pruned_searches == 0
        s.defer_common_words = 300  # 6,000 = 20 x 300
        s.search_ids("zebra common", limit=1)
        assert s.pruned_searches == 1


def _long_rare_and_short_common(config: StoreConfig) -> L0Store:
    """ "mid" in 100 long entries, rarer than "common" in 300 short ones."""
    padding = " ".join(f"pad{j}" for j in range(60))
    s = L0Store(":memory:", config=config)
    s.put_many(
        [{"@id": f"urn:c:{i}", "text": f"common c{i}"} for i in range(300)]
        + [{"@id": f"urn:m:{i}", "text": f"mid {padding}"} for i in range(100)]
        + [{"@id": f"urn:f:{i}", "text": f"filler f{i}"} for i in range(600)]
    )
    return s


def test_a_bound_that_does_not_hold_falls_back() -> None:
    # "common" is deferred; but a long entry's share of "mid" is small, the tenth best of them
    # does not beat the bound of "common", and entries holding "common" alone are the best.
    with _long_rare_and_short_common(EXACT) as s:
        pruned = s.search_ids("mid common", limit=10)
        assert s.pruned_searches == 0
        _same(pruned, _full(s, "mid common", 10))
        assert all(iri.startswith("urn:c:") for iri, _ in pruned)


def test_the_default_answers_without_the_proof_and_can_differ() -> None:
    # The default trusts that a row holding only deferred words once each at average length
    # scores below one holding the rarest kept word: this store is built to break that.
    with _long_rare_and_short_common(StoreConfig(defer_common_words=1)) as s:
        assert not s.defer_exactly
        pruned = s.search_ids("mid common", limit=10)
        assert s.pruned_searches == 1
        assert all(iri.startswith("urn:m:") for iri, _ in pruned)
        assert all(iri.startswith("urn:c:") for iri, _ in _full(s, "mid common", 10))


def test_the_default_agrees_with_the_full_query_on_zipf_text() -> None:
    # Texts of words drawn by Zipf's law, queries of three words as the search benchmark's.
    rng = random.Random(11)
    vocabulary = [f"w{i}" for i in range(2_000)]
    weights = [1 / (rank + 1) for rank in range(len(vocabulary))]
    with L0Store(":memory:", config=StoreConfig(defer_common_words=1)) as s:
        s.put_many(
            [
                {"@id": f"urn:z:{i}", "text": " ".join(rng.choices(vocabulary, weights, k=18))}
                for i in range(5_000)
            ]
        )
        found = total = 0
        for _ in range(100):
            query = " ".join(rng.sample(vocabulary[5:500], 3))
            pruned, full = s.search_ids(query, limit=10), _full(s, query, 10)
            found += len({i for i, _ in pruned} & {i for i, _ in full})
            total += len(full)
        assert s.pruned_searches >= 10
        assert found / total >= 0.95  # 0.963 measured: a few rows holding common words only


def test_expired_entries_stay_out(store: L0Store) -> None:
    store.put({"@id": "urn:p:0", "text": "zebra common extra0"}, ttl=0.001)
    time.sleep(0.01)
    pruned = store.search_ids("zebra common", limit=10)
    assert "urn:p:0" not in {iri for iri, _ in pruned}
    _same(pruned, _full(store, "zebra common", 10))


def test_a_word_of_several_terms_is_never_deferred(store: L0Store) -> None:
    store.put_many([{"@id": f"urn:s:{i}", "text": f"snake_case common x{i}"} for i in range(3)])
    pruned = store.search_ids("snake_case common", limit=3)
    _same(pruned, _full(store, "snake_case common", 3))
    assert {iri for iri, _ in pruned} == {f"urn:s:{i}" for i in range(3)}


def test_a_word_in_most_entries_is_deferred_whatever_its_count() -> None:
    # "the" is in every entry: FTS5's idf is 1e-6, its bound about zero.
    config = StoreConfig(defer_common_words=1, defer_exactly=True, stop_words=frozenset())
    with L0Store(":memory:", config=config) as s:
        s.put_many(
            [{"@id": f"urn:m:{i}", "text": f"the w{i} {'rare' * (i < 15)}"} for i in range(400)]
        )
        pruned = s.search_ids("the rare", limit=10)
        assert s.pruned_searches == 1
        _same(pruned, _full(s, "the rare", 10))


def test_random_queries_agree_with_the_full_query() -> None:
    rng = random.Random(7)
    vocabulary = [f"w{i}" for i in range(400)]
    weights = [1 / (rank + 1) for rank in range(len(vocabulary))]
    with L0Store(":memory:", config=EXACT) as s:
        s.put_many(
            [
                {
                    "@id": f"urn:r:{i}",
                    "text": " ".join(rng.choices(vocabulary, weights, k=rng.randint(3, 30))),
                }
                for i in range(3_000)
            ]
        )
        for _ in range(150):
            words = rng.sample(vocabulary[:200], rng.randint(2, 4))
            limit = rng.choice([1, 10, 100])
            query = " ".join(words)
            _same(s.search_ids(query, limit=limit), _full(s, query, limit))
        assert s.pruned_searches > 20  # the bound held often enough to be tested


@pytest.mark.parametrize("value", [-1, "many", 1.5, None])
def test_the_setting_is_validated(value: object) -> None:
    with pytest.raises(GlidingError, match="defer_common_words"):
        StoreConfig(defer_common_words=value)  # type: ignore[arg-type]
    with pytest.raises(GlidingError, match="defer_exactly"):
        StoreConfig(defer_exactly=value)  # type: ignore[arg-type]


def test_the_bound_is_above_any_score_a_word_gives() -> None:
    # One entry holding the word many times in a short text comes nearest to the bound.
    with L0Store(":memory:", config=StoreConfig(defer_common_words=0)) as s:
        s.put_many([{"@id": f"urn:b:{i}", "text": f"other{i} more{i}"} for i in range(99)])
        s.put({"@id": "urn:b:x", "text": " ".join(["zebra"] * 500)})
        [(_, score)] = s.search_ids("zebra", limit=1)
        assert score < fts5_idf(100, 1) * (K1 + 1)
        assert score > 0.8 * fts5_idf(100, 1) * (K1 + 1)


@pytest.mark.parametrize(
    ("data", "value"),
    [(b"\x05", 5), (b"\x81\x00", 128), (b"\xff\xff\xff\xff\xff\xff\xff\xff\xff", 2**64 - 1)],
)
def test_varints_are_read_as_sqlite_writes_them(data: bytes, value: int) -> None:
    assert varints(data, 1) == [value]
    assert varints(data[:-1], 1) == []


@pytest.mark.parametrize("value", [-1, True, 2.5, "5000", None, 10**10, float("nan")])
def test_defer_common_words_is_validated(value: object) -> None:
    with pytest.raises(ConfigError, match="defer_common_words"):
        StoreConfig(defer_common_words=value)  # type: ignore[arg-type]


@pytest.mark.parametrize("value", [1, 0, "yes", None, 1.0])
def test_defer_exactly_is_validated(value: object) -> None:
    with pytest.raises(ConfigError, match="defer_exactly"):
        StoreConfig(defer_exactly=value)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("name", "value"),
    [("defer_common_words", -1), ("defer_common_words", "5"), ("defer_exactly", 1)],
)
def test_the_settings_changed_on_a_store_are_validated(name: str, value: object) -> None:
    """The benchmark and a user tune a live store by its attributes: checked as the config."""
    store = L0Store()
    try:
        before = getattr(store, name)
        with pytest.raises(ConfigError, match=name):
            setattr(store, name, value)
        assert getattr(store, name) == before
    finally:
        store.close()


@pytest.mark.parametrize(
    "store", [{"defer_common_words": "5"}, {"defer_exactly": "false"}, {"defer_often": 1}]
)
def test_the_settings_given_as_a_mapping_are_validated_too(store: dict[str, object]) -> None:
    """A memory's settings read from a file come as mappings: no string becomes a number."""
    with pytest.raises(ConfigError, match=next(iter(store))):
        MemoryConfig(store=store)  # type: ignore[arg-type]
