"""Hyperspace: hybrid search; filters bind every arm, hits explain themselves.

How the dense index follows L0 is the contract suite's (``contracts/test_vector_index.py``).
"""

from __future__ import annotations

import json
import re
import sys
import time
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from threadpoolctl import threadpool_info, threadpool_limits

from gliding_core import HashEmbedder, HybridSearch, InvalidInputError, Memory, Record
from gliding_core.config import DenseConfig, MemoryConfig, SearchConfig, SearchOptions
from gliding_core.errors import ConfigError
from gliding_core.hyperspace import following, search, vectors
from gliding_core.memory import MANIFEST_FILE
from gliding_core.store.filters import SearchFilters


@pytest.fixture
def memory() -> Iterator[Memory]:
    with Memory(embedder=HashEmbedder()) as value:
        yield value


def _knowledge(memory: Memory) -> None:
    memory.store.put_many(
        [
            Record(
                {"@id": "urn:jwt", "@type": "Decision", "text": "Sign JWT tokens with RS256 keys"},
                tags=["auth", "security"],
                named_graph="g:decisions",
                importance=0.9,
            ),
            Record(
                {"@id": "urn:pool", "@type": "Decision", "text": "Database connection pool of 20"},
                tags=["db"],
                named_graph="g:decisions",
                importance=0.4,
            ),
            Record(
                {"@id": "urn:task", "@type": "Task", "text": "Rotate the JWT signing keys monthly"},
                tags=["auth"],
                named_graph="g:tasks",
                importance=0.7,
            ),
            Record(
                {"@id": "urn:note", "@type": "Note", "text": "Lunch order for the offsite"},
                tags=["misc"],
                importance=0.1,
            ),
        ]
    )


def test_hits_are_ranked_and_explained_per_arm(memory: Memory) -> None:
    _knowledge(memory)
    hits = memory.search("JWT signing keys", k=3)
    assert {h.iri for h in hits[:2]} == {"urn:jwt", "urn:task"}
    top = hits[0]
    assert set(top.arms) >= {"lexical", "dense", "fused", "rerank"}
    assert top.arms["lexical"].rank >= 1
    assert top.arms["lexical"].score > 0
    assert -1.0 <= top.arms["dense"].score <= 1.0
    assert top.score == top.arms["rerank"].score
    assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)


@pytest.mark.parametrize(
    ("filters", "allowed"),
    [
        (SearchFilters(tags_all=("auth", "security")), {"urn:jwt"}),
        (SearchFilters(tags_any=("db", "misc")), {"urn:pool", "urn:note"}),
        (SearchFilters(types=("Task",)), {"urn:task"}),
        (SearchFilters(named_graph="g:decisions"), {"urn:jwt", "urn:pool"}),
        (SearchFilters(min_importance=0.5), {"urn:jwt", "urn:task"}),
        (SearchFilters(max_importance=0.5), {"urn:pool", "urn:note"}),
    ],
)
def test_filters_bind_every_arm(memory: Memory, filters: SearchFilters, allowed: set[str]) -> None:
    _knowledge(memory)
    for query in ("JWT keys", "database pool", "offsite lunch"):
        ranked = memory.hyperspace.arms(query, 10, filters)
        for arm, hits in ranked.items():
            assert {iri for iri, _ in hits} <= allowed, arm
        assert {h.iri for h in memory.search(query, 10, filters=filters)} <= allowed


def test_a_search_that_matches_nothing_returns_no_hits() -> None:
    with Memory(embedder=HashEmbedder()) as empty:
        assert empty.search("anything", 3) == []
        empty.store.put({"@id": "urn:n:1", "text": "x"}, tags=["a"])
        assert empty.search("anything", 3, filters=SearchFilters(tags_all=("b",))) == []


def test_time_range_filter(memory: Memory) -> None:
    memory.store.put({"@id": "urn:old", "text": "release notes"})
    cut = time.time()
    time.sleep(0.01)
    memory.store.put({"@id": "urn:new", "text": "release checklist"})
    assert [h.iri for h in memory.search("release", 5, filters=SearchFilters(since=cut))] == [
        "urn:new"
    ]
    assert [h.iri for h in memory.search("release", 5, filters=SearchFilters(until=cut))] == [
        "urn:old"
    ]


def test_neighbouring_turns_lift_an_answer_without_the_query_words(memory: Memory) -> None:
    turns = [
        "What colour did you paint the kitchen in spring?",
        "A warm sunflower yellow, finally done.",
        "Did you see the football match yesterday?",
        "Yes, a draw, very boring.",
    ]
    for i, text in enumerate(turns):
        node: dict[str, Any] = {"@id": f"urn:t{i}", "text": text}
        if i % 2:
            node["previous"] = {"@id": f"urn:t{i - 1}"}
        memory.store.put(node)
    hits = [h.iri for h in memory.search("kitchen paint colour", 2)]
    assert hits[0] == "urn:t0"
    assert "urn:t1" in hits  # found through the question before it


def test_weights_change_the_mix(memory: Memory) -> None:
    _knowledge(memory)
    lexical_only = memory.search("JWT", 4, lexical_weight=1.0, dense_weight=0.0)
    assert lexical_only[0].iri in {"urn:jwt", "urn:task"}
    # The lunch note shares no word with the query: only the dense arm can rank it.
    dense_only = memory.search("JWT", 4, lexical_weight=0.0, dense_weight=1.0, rerank=False)
    by_words = memory.search("JWT", 4, lexical_weight=1.0, dense_weight=0.0, rerank=False)
    assert [h.score for h in dense_only] != [h.score for h in by_words]


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda m: m.search(""), "non-empty"),
        (lambda m: m.search("x", 0), "k must be"),
        (lambda m: m.search("x", filters={"tags": ["a"]}), "SearchFilters"),
        (lambda m: SearchFilters(tags_all="auth"), "tags_all"),
        (lambda m: SearchFilters(min_importance=0.9, max_importance=0.1), "empty"),
        (lambda m: SearchFilters(since=5.0, until=1.0), "time range"),
        (lambda m: SearchFilters(since=float("nan")), "since"),
    ],
)
def test_bad_search_input_is_named(memory: Memory, call: Any, message: str) -> None:
    with pytest.raises(InvalidInputError, match=message):
        call(memory)


def test_a_persistent_memory_keeps_its_index_and_reports_its_embedder(tmp_path: Path) -> None:
    with Memory.open(tmp_path, embedder=HashEmbedder()) as memory:
        _knowledge(memory)
        assert memory.embedder_name == "hash-256"
    manifest = json.loads((tmp_path / MANIFEST_FILE).read_text())
    assert manifest == {"embedder": "hash-256"}
    with Memory.open(tmp_path, embedder=HashEmbedder()) as again:
        assert again.index.count() == 4
        assert again.search("JWT signing", 1)[0].iri in {"urn:jwt", "urn:task"}
    with Memory.open(tmp_path, embedder=HashEmbedder(dimension=64)) as changed:
        assert changed.index.count() == 4  # rebuilt with the new embedder
        assert json.loads((tmp_path / MANIFEST_FILE).read_text()) == {"embedder": "hash-64"}


CHROMA_CLIENT = """
import sys
from gliding_core import HashEmbedder, Memory, MemoryConfig
config = MemoryConfig(chroma_host="127.0.0.1", chroma_port=int(sys.argv[1]))
with Memory(config=config, embedder=HashEmbedder()) as memory:
    memory.store.put({"@id": "urn:jwt", "text": "Sign JWT tokens with RS256 keys"})
    memory.store.put({"@id": "urn:pool", "text": "Database connection pool of 20"})
    print(memory.index.count(), memory.search("JWT signing keys", 1)[0].iri)
"""


def test_the_dense_index_can_live_in_a_chroma_server(chroma_server: int) -> None:
    # In a child process: chromadb's HTTP client leaves sockets for the garbage collector.
    import subprocess
    import sys

    result = subprocess.run(
        [sys.executable, "-W", "ignore::ResourceWarning", "-c", CHROMA_CLIENT, str(chroma_server)],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    assert result.stdout.split() == ["2", "urn:jwt"]


def test_results_say_which_arms_ran_and_that_the_index_is_current(memory: Memory) -> None:
    _knowledge(memory)
    hits = memory.search("JWT signing keys", 2)
    assert isinstance(hits, list)
    assert hits.arms == ("lexical", "dense")
    assert hits.index_behind == 0
    assert "index_behind=0" in repr(hits)
    lexical = HybridSearch(memory.store, None).search("JWT signing keys", 2)
    assert lexical.arms == ("lexical",)
    assert {h.iri for h in lexical} <= {"urn:jwt", "urn:task"}


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"vector_weight": 1.0}, "unknown search setting 'vector_weight'"),
        ({"dense_weight": -1.0}, "dense_weight=-1.0"),
        ({"lexical_weight": float("nan")}, "lexical_weight=nan"),
        ({"lexical_weight": "1"}, "lexical_weight='1'"),
        ({"candidates": 0}, "candidates=0"),
        ({"pool": 10**6}, "pool=1000000"),
        ({"rerank": "yes"}, "rerank='yes'"),
        ({"rrf_k": 0}, "rrf_k=0"),
        ({"context_weight": -0.1}, "context_weight=-0.1"),
        ({"group_top": 0}, "group_top=0"),
        ({"group_decay": 1.5}, "group_decay=1.5"),
        ({"group_decay": -0.1}, "group_decay=-0.1"),
        ({"normalise": "minmax"}, "normalise='minmax'"),
        ({"hubness_correction": 1}, "hubness_correction=1"),
        ({"speaker_weight": -0.1}, "speaker_weight=-0.1"),
        ({"speaker_weight": float("inf")}, "speaker_weight=inf"),
        ({"speaker_fields": "speaker"}, "speaker_fields='speaker'"),
        ({"speaker_fields": ["@id"]}, "holds '@id'"),
        ({"speaker_fields": [""]}, "holds ''"),
        ({"speaker_fields": [7]}, "holds 7"),
        ({"speaker_fields": ["a\x00b"]}, "speaker_fields"),
        ({"speaker_fields": [f"f{i}" for i in range(17)]}, "17 names, over 16"),
    ],
)
def test_bad_search_settings_are_named(memory: Memory, options: Any, message: str) -> None:
    """A bad per-call option and the same value in MemoryConfig are refused alike, by name."""
    with pytest.raises(ConfigError, match=re.escape(message)):
        memory.search("x", **options)
    if "vector_weight" not in options:
        with pytest.raises(ConfigError, match=re.escape(message)):
            MemoryConfig(search=SearchConfig(**options))


def test_search_settings_from_the_config_apply_and_calls_override_them() -> None:
    config = MemoryConfig(search=SearchConfig(lexical_weight=0.0, rerank=False))
    with Memory(config=config, embedder=HashEmbedder()) as memory:
        _knowledge(memory)
        hits = memory.search("JWT signing keys", 4)
        assert set(hits[0].arms) >= {"fused"}
        assert "rerank" not in hits[0].arms
        # With the lexical arm weighed 0, its ranks still explain a hit but give it no score.
        dense = {h.iri: h.arms["dense"].rank for h in hits}
        assert list(dense) == sorted(dense, key=lambda iri: dense[iri])
        again = memory.search("JWT signing keys", 4, rerank=True)
        assert "rerank" in again[0].arms
    assert memory.config.search.rerank is False  # a call changes nothing for the next


def test_search_options_name_every_setting() -> None:
    assert set(SearchOptions.__annotations__) == set(SearchConfig.model_fields)
    assert SearchConfig().weights == {"lexical": 0.75, "dense": 1.0}


def test_dense_windows_must_advance() -> None:
    with pytest.raises(ConfigError, match="window_overlap=40 must be below window_words=40"):
        DenseConfig(window_words=40, window_overlap=40)
    with pytest.raises(ConfigError, match="max_windows=0"):
        DenseConfig(max_windows=0)


def test_hubness_correction_keeps_a_crowd_of_alike_entries_from_winning_by_number(
    memory: Memory,
) -> None:
    """Ten copies of one short line sit closer to the query than the one entry that answers
    it; measured among the candidates, each copy is close to nine others and loses half of
    that closeness, and the entry that stands apart comes first."""
    crowd = [{"@id": f"urn:hub:{i}", "text": "alice garden"} for i in range(10)]
    memory.put_many([*crowd, {"@id": "urn:answer", "text": "alice plants roses in her garden"}])
    dense_only = {"lexical_weight": 0.0, "context_weight": 0.0, "group_weight": 0.0}
    plain = memory.search("alice garden roses", 11, hubness_correction=False, **dense_only)
    corrected = memory.search("alice garden roses", 11, **dense_only)
    assert [h.iri for h in plain].index("urn:answer") == 10
    assert corrected[0].iri == "urn:answer"
    assert corrected[0].arms["dense"].score == plain[10].arms["dense"].score  # raw, explained


def test_group_decay_lets_other_sessions_answer_beside_the_best_one(memory: Memory) -> None:
    """One session holds the best match and four turns about something else; two other
    sessions hold weaker matches. With the whole graph gain for every member, the best
    session's unrelated turns fill the first places; with each further member keeping half of
    the previous one's gain, the other sessions' matches come right after the best."""
    said = [
        ("s1", "a", "yoga yoga class"),
        *[("s1", x, f"we had lunch at the cafe number {x}") for x in "bcde"],
        ("s2", "a", "after work on tuesday she went to a yoga class with a friend downtown"),
        ("s3", "a", "on a trip to the coast she joined a yoga retreat by the sea with her aunt"),
    ]
    memory.store.put_many(
        [Record({"@id": f"urn:{s}:{x}", "text": text}, named_graph=f"g:{s}") for s, x, text in said]
    )
    lexical = {"dense_weight": 0.0, "context_weight": 0.0}
    whole = [h.iri for h in memory.search("yoga", 3, **lexical)]
    halved = [h.iri for h in memory.search("yoga", 3, group_decay=0.5, **lexical)]
    assert whole == ["urn:s1:a", "urn:s1:b", "urn:s1:c"]
    assert halved[0] == "urn:s1:a"
    assert set(halved[1:]) == {"urn:s2:a", "urn:s3:a"}
    hits = memory.search("yoga", 8, group_decay=0.5)
    gains = sorted(
        (h.arms["group"].score for h in hits if h.iri.startswith("urn:s1:")), reverse=True
    )
    assert gains == pytest.approx([gains[0] / 2**j for j in range(5)])  # explained per hit


def _conversation(memory: Memory, field: str = "speaker") -> None:
    """Turns of two speakers: Bo's answer, and Ann's turns that name Bo and share more of the
    question's words."""
    turns = [
        ("urn:t:1", "Ann", "Bo, did you paint the lake at sunrise?"),
        ("urn:t:2", "Bo", "Yes, I did it last summer with oils"),
        ("urn:t:3", "Ann", "Bo paints so well, that lake painting is great"),
        ("urn:t:4", "Ann", "I went running by the lake"),
    ]
    memory.store.put_many(
        [Record({"@id": iri, "text": text, field: who}, index=["text"]) for iri, who, text in turns]
    )


def test_a_query_naming_a_speaker_prefers_what_that_speaker_said(memory: Memory) -> None:
    """ "What did Bo paint?" is answered by Bo's turn, not by Ann's turns that name Bo; with
    the prior off, the words decide and Ann's turns come first."""
    _conversation(memory)
    off = [h.iri for h in memory.search("What did Bo paint?", 4, speaker_weight=0.0)]
    on = memory.search("What did Bo paint?", 4, speaker_weight=1.0)
    assert off.index("urn:t:2") > 0
    assert on[0].iri == "urn:t:2"
    assert set(on[0].arms) >= {"speaker", "rerank"}  # explained: the gain it had
    assert on[0].score == on[0].arms["rerank"].score  # the re-rank's score holds it
    assert all("speaker" not in h.arms for h in on[1:])
    # Not named: nothing changes (case aside; a word that only begins with the name is not it).
    for query in ("What did bob paint?", "Who painted the lake?"):
        plain = [(h.iri, h.score) for h in memory.search(query, 4, speaker_weight=0.0)]
        assert [(h.iri, h.score) for h in memory.search(query, 4, speaker_weight=1.0)] == plain
    assert memory.search("what did BO paint", 1, speaker_weight=1.0)[0].iri == "urn:t:2"


def test_the_speaker_fields_are_the_configured_properties_and_names_may_be_lists() -> None:
    config = MemoryConfig(search=SearchConfig(speaker_weight=1.0, speaker_fields=("who",)))
    with Memory(config=config, embedder=HashEmbedder()) as memory:
        _conversation(memory, field="who")
        assert memory.search("What did Bo paint?", 1)[0].iri == "urn:t:2"
        assert memory.search("What did Bo paint?", 1, speaker_fields=["speaker"])[0].iri != (
            "urn:t:2"
        )
        memory.store.put_many(
            [
                Record(
                    {"@id": "urn:doc", "text": "a report on oils", "author": ["Al", "Mo Li"]},
                    index=["text"],
                ),
                Record({"@id": "urn:other", "text": "a report on oils by Mo Li"}),
                Record({"@id": "urn:odd", "text": "a report on oils", "author": {"n": "Mo Li"}}),
            ]
        )
        hits = memory.search("report by mo li", 3, speaker_fields=["author"])
        assert hits[0].iri == "urn:doc"  # two words in a row, from a list of names
        assert "speaker" not in {arm for h in hits if h.iri == "urn:odd" for arm in h.arms}
        assert (
            "speaker" not in memory.search("report by li mo", 1, speaker_fields=["author"])[0].arms
        )


def test_a_speaker_field_of_any_script_is_read() -> None:
    config = MemoryConfig(search=SearchConfig(speaker_weight=1.0, speaker_fields=("говорит",)))
    with Memory(config=config, embedder=HashEmbedder()) as memory:
        _conversation(memory, field="говорит")
        assert memory.search("What did Bo paint?", 1)[0].iri == "urn:t:2"


def test_a_query_of_many_words_against_long_names_is_answered(memory: Memory) -> None:
    """The names are found by where the query's words stand, not by sliding every name over
    every word; a value too long to be a name is passed over."""
    memory.store.put_many(
        [
            Record(
                {"@id": f"urn:w:{i}", "text": f"bo word{i}", "speaker": "bo " * 40}, index=["text"]
            )
            for i in range(150)
        ]
        + [Record({"@id": "urn:w:long", "text": "bo", "speaker": "bo " * 200}, index=["text"])]
    )
    query = "bo " * 2_000 + "word7"
    hits = memory.search(query, 200, speaker_weight=1.0)
    assert "speaker" in hits[0].arms
    assert "speaker" not in next(h for h in hits if h.iri == "urn:w:long").arms


def test_a_search_multiplies_its_vectors_on_one_blas_thread(
    memory: Memory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """OpenBLAS threads spin after a product and starve a local model's next embedding: the
    re-rank's products (the candidates' mutual cosines) run on one thread, and the caller's
    setting is back afterwards."""
    _knowledge(memory)
    seen: list[int] = []
    products = HybridSearch._hubness_corrected

    def spying(self: HybridSearch, scores: dict[str, float], pool: list[str], found: Any) -> Any:
        seen.extend(info["num_threads"] for info in threadpool_info() if info["user_api"] == "blas")
        return products(self, scores, pool, found)

    monkeypatch.setattr(HybridSearch, "_hubness_corrected", spying)
    with threadpool_limits(limits=2, user_api="blas"):
        memory.search("JWT signing keys", 3)
        after = [info["num_threads"] for info in threadpool_info() if info["user_api"] == "blas"]
    assert seen
    assert set(seen) == {1}
    assert set(after) == {2}


FILTERED_CASES = {
    # which of 200 entries are tagged, the patches; what the dense arm asks its index
    "narrow": (lambda i: i % 50 == 0, {}),  # 4 allowed: scored exactly, one restricted ask
    "broad": (lambda i: i % 2 == 0, {}),  # enough among the 20 nearest: one ask
    "sparse": (lambda i: i % 10 == 0, {}),  # too few there: one wider ask
    "sparse, narrow index": (lambda i: i % 10 == 0, {"widest": 30}),  # then a restricted ask
    "an index that stops short": (lambda i: i % 10 == 0, {"widest": 10}),  # (pgvector's beam)
}
TOPICS = [
    *("harbour", "crane", "orchard", "ladder", "lantern", "oil", "ferry", "ticket", "kettle"),
    *("spout", "meadow", "quarry", "violin", "pepper", "glacier", "saddle", "copper", "wren"),
]


@pytest.mark.parametrize("case", list(FILTERED_CASES))
def test_a_filtered_dense_arm_finds_the_best_allowed_entries_however_narrow(
    memory: Memory, monkeypatch: pytest.MonkeyPatch, case: str
) -> None:
    """The dense arm under a filter gives the allowed entries nearest the query, whether it
    scored the few allowed ones exactly, kept those passing among the index's nearest (asking
    again, wider, when few passed), or asked the index restricted to every allowed one."""
    tagged, patches = FILTERED_CASES[case]
    monkeypatch.setattr(following, "SCAN_LIMIT", -1)  # the index answers, not the scan
    monkeypatch.setattr(search, "EXACT_LIMIT", 5)
    if "widest" in patches:
        monkeypatch.setattr(memory.index, "widest_query", patches["widest"])
    memory.store.put_many(
        Record(
            {"@id": f"urn:d:{i}", "text": " ".join(TOPICS[(i * 7 + j * j) % 18] for j in range(4))},
            tags=["t"] if tagged(i) else [],
        )
        for i in range(200)
    )
    asked: list[tuple[int, bool]] = []
    query = memory.index.query

    def spying(text: Any, n: int, *, allowed: Any = None) -> Any:
        asked.append((n, allowed is not None))
        if allowed is None and "widest" in patches:  # an index returning no more than its widest
            return query(text, min(n, patches["widest"]))
        return query(text, n, allowed=allowed)

    monkeypatch.setattr(memory.index, "query", spying)
    vector = memory.index.vector("harbour crane ladder")
    got = memory.hyperspace._dense(vector, 5, SearchFilters(tags_any=("t",)))
    allowed = [f"urn:d:{i}" for i in range(200) if tagged(i)]
    exact = memory.index.similarities(vector, allowed)
    best = sorted(exact, key=lambda iri: (-exact[iri], iri))[:5]
    assert [iri for iri, _ in got] == best
    assert [score for _, score in got] == pytest.approx([exact[iri] for iri in best], abs=1e-5)
    nearest = [n for n, restricted in asked if not restricted]
    if case == "narrow":
        assert asked == [(5, True)]
    elif case == "broad":
        assert asked == [(20, False)]
    elif case == "sparse":
        assert len(nearest) == 2
        assert nearest[0] == 20 < nearest[1]
        assert all(not restricted for _, restricted in asked)
    elif case == "sparse, narrow index":
        assert asked[-1][1]
        assert all(n <= 30 for n in nearest)
    else:  # ten found of the twenty asked are not all the index holds: restricted next
        assert asked == [(20, False), (5, True)]


def test_a_blas_loaded_after_the_first_search_is_limited_too(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The BLAS libraries are found again once a module was imported since (a local model's
    library loads on its first use, after searches that limited the others)."""
    first = vectors._blas()
    assert vectors._blas() is first  # nothing imported: not looked for again
    monkeypatch.setitem(sys.modules, "gliding_test_new_module", types.ModuleType("new"))
    again = vectors._blas()
    assert again is not first
    assert vectors._blas() is again
