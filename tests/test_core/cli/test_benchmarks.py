"""The benchmark commands, run on a small LoCoMo-shaped fixture (the real data never ships)."""

from __future__ import annotations

import io
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any, ClassVar

import pytest

from gliding_core import Memory
from gliding_core.cli import main
from gliding_core.cli.benchmarks import recall, search
from gliding_core.cli.benchmarks.conversations import Turn, load
from gliding_core.cli.benchmarks.stages import STAGES
from gliding_core.hyperspace.embedders import Embedder, HashEmbedder
from gliding_core.hyperspace.index import VectorIndex
from gliding_core.hyperspace.vectors import Vector
from gliding_core.tokens import TokenCounter

TOPICS = [
    [
        "I adopted a puppy named Max",
        "Max chews every shoe in the house",
        "Puppy training starts Monday",
    ],
    ["My pottery class made a bowl", "The glaze on the bowl cracked", "Pottery is relaxing for me"],
    ["We hiked the lake trail", "The lake trail was muddy after rain", "Next hike is in the hills"],
    [
        "I started a new job at the bank",
        "The bank job has long hours",
        "My manager at the bank is kind",
    ],
]


def _conversation(
    sample: str, speakers: tuple[str, str], topics: list[list[str]]
) -> dict[str, Any]:
    conversation: dict[str, Any] = {"speaker_a": speakers[0], "speaker_b": speakers[1]}
    qa = []
    observation: dict[str, Any] = {}
    summary: dict[str, str] = {}
    for number, lines in enumerate(topics, start=1):
        observation[f"session_{number}_observation"] = {
            speakers[0]: [[f"{speakers[0]} said: {lines[0]}", f"D{number}:1"]],
            speakers[1]: [[f"{speakers[1]} said: {lines[1]}", [f"D{number}:2", f"D{number}:5"]]],
        }
        summary[f"session_{number}_summary"] = f"{speakers[0]} and {speakers[1]}: " + ". ".join(
            lines
        )
        conversation[f"session_{number}_date_time"] = f"1:56 pm on {number} May, 2023"
        turns = []
        for i, line in enumerate(lines * 2):
            turns.append({"speaker": speakers[i % 2], "dia_id": f"D{number}:{i + 1}", "text": line})
        turns[1]["blip_caption"] = "a photo"
        conversation[f"session_{number}"] = turns
        qa.append(
            {
                "question": f"What about {lines[0].split()[-1]}?",
                "answer": "x",
                "evidence": [f"D{number}:1"],
                "category": 4,
            }
        )
    qa.append({"question": "Unanswerable?", "answer": "none", "evidence": [], "category": 5})
    return {
        "sample_id": sample,
        "conversation": conversation,
        "qa": qa,
        "observation": observation,
        "session_summary": summary,
    }


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("locomo") / "mini.json"
    path.write_text(
        json.dumps(
            [
                _conversation("conv-a", ("Ann", "Bo"), TOPICS[:2]),
                _conversation("conv-b", ("Cy", "Di"), TOPICS[2:]),
            ]
        )
    )
    return path


def run(*argv: str) -> tuple[int, str]:
    out = io.StringIO()
    return main(list(argv), out=out), out.getvalue()


def test_bench_tokens(data: Path, tmp_path: Path) -> None:
    out = tmp_path / "tokens.json"
    code, text = run(
        "bench",
        "tokens",
        "--data",
        str(data),
        "--budgets",
        "60,200",
        "--embedder",
        "hash",
        "--json",
        str(out),
    )
    assert code == 0
    assert "saving %" in text
    figures = json.loads(out.read_text())
    assert figures["conversations"] == ["conv-a", "conv-b"]
    small, large = figures["budgets"]["60"], figures["budgets"]["200"]
    assert small["prompt_tokens_max"] <= 60 + 10  # the chat framing of one system message
    assert small["prompt_tokens_mean"] < small["full_history_tokens_mean"]
    assert 0 < small["saving_pct"] < 100
    assert large["evidence_in_window"] >= small["evidence_in_window"]
    assert small["questions"] == 4  # category 5 is left out


def test_bench_topics(data: Path) -> None:
    code, text = run(
        "bench", "topics", "--data", str(data), "--sequences", "4", "--embedder", "hash"
    )
    assert code == 0
    for method in ("gliding", "adjacent", "texttiling"):
        assert method in text


def test_bench_locomo_shape(data: Path, tmp_path: Path) -> None:
    out = tmp_path / "locomo.json"
    code, _ = run("bench", "locomo", "--data", str(data), "--embedder", "hash", "--json", str(out))
    assert code == 0
    figures = json.loads(out.read_text())
    assert figures["conversations"] == ["conv-a", "conv-b"]
    assert figures["questions"] == 4
    keys = {
        "recall@5",
        "recall@10",
        "recall@20",
        "budget_recall@500",
        "budget_recall@1000",
        "budget_recall@2000",
        "context_tokens_mean",
        "context_tokens@500",
        "context_tokens@1000",
        "context_tokens@2000",
        "ingest_p50_ms",
        "ingest_p95_ms",
        "search_p50_ms",
        "search_p95_ms",
    }
    own = {"gliding", "lexical", "dense", "recent"}
    # The framework methods join when their extras are installed (entry points).
    assert own <= set(figures["methods"])
    for name in own:
        method = figures["methods"][name]
        assert set(method) == keys
        assert 0.0 <= method["recall@10"] <= 1.0
    for name in set(figures["methods"]) - own:
        assert "recall@10" not in figures["methods"][name]
        assert 0.0 <= figures["methods"][name]["budget_recall@1000"] <= 1.0
    assert figures["methods"]["gliding"]["recall@20"] >= figures["methods"]["recent"]["recall@5"]
    # Both shapes by default; the mixed memory runs the memory's own methods only.
    assert set(figures["shapes"]) == {"turns", "mixed"}
    assert set(figures["shapes"]["mixed"]["methods"]) == own
    assert figures["shapes"]["mixed"]["questions"] == 4


def test_a_turn_stored_as_said_is_searched_by_its_words_not_its_date(data: Path) -> None:
    conversation = load(data)[0]
    _, node, _, text, _ = recall._items(conversation, "urn:t:", "turns", "said")[0]
    # Who said what is the text; the session's date and the speaker are properties.
    assert node["text"] == "Ann: I adopted a puppy named Max"
    assert node["date"] == "1:56 pm on 1 May, 2023"
    assert node["speaker"] == "Ann"
    assert text == conversation.turns[0].line  # a hit still costs its whole line, date and all
    line = recall._items(conversation, "urn:t:", "turns", "line")[0][1]
    assert line["text"] == "[1:56 pm on 1 May, 2023] Ann: I adopted a puppy named Max"
    with Memory(embedder=HashEmbedder()) as memory:
        memory.store.put(node, index=recall.TEXT_FIELDS)
        assert memory.store.searchable_texts([node["@id"]]) == {node["@id"]: node["text"]}
        assert memory.store.search_text("2023") == []
        stored = memory.store.get_node(node["@id"])
        assert stored is not None
        assert stored["date"] == node["date"]  # kept, not searched


def test_bench_locomo_turn_text(data: Path, tmp_path: Path) -> None:
    out = tmp_path / "said.json"
    code, _ = run(
        "bench",
        "locomo",
        "--data",
        str(data),
        "--embedder",
        "hash",
        "--search-only",
        "--turn-text",
        "said",
        "--json",
        str(out),
    )
    assert code == 0
    figures = json.loads(out.read_text())
    assert figures["turn_text"] == "said"
    assert figures["methods"]["gliding"]["recall@10"] > 0
    with pytest.raises(ValueError, match="turn text"):
        recall.run(data, HashEmbedder(), turn_text="speech")


def test_an_item_citing_an_evidence_turn_counts_as_finding_it() -> None:
    into: dict[str, list[float]] = {}
    tokens = {"D1:1": 10, "D1:2": 10, "obs-0": 5, "sum-1": 600}
    cover = {
        "D1:1": frozenset({"D1:1"}),
        "D1:2": frozenset({"D1:2"}),
        "obs-0": frozenset({"D1:2"}),
        "sum-1": frozenset({"D1:1", "D1:2"}),
    }
    recall._score(into, ["D1:1", "D1:2"], ["obs-0", "sum-1", "D1:1"], tokens, cover)
    assert into["recall@5"] == [1.0]  # the summary covers both
    assert into["budget_recall@500"] == [0.5]  # the summary does not fit: only the observation
    assert into["budget_recall@1000"] == [1.0]


class _FirstTurns:
    """A context method for the harness: the first turns that fit, whatever the question."""

    closed: ClassVar[list[str]] = []

    def __init__(
        self, turns: Sequence[Turn], *, tokens: TokenCounter, embedder: Embedder, budgets: Any
    ) -> None:
        self.turns, self.tokens = list(turns), tokens

    def context(self, question: str, budget: int) -> list[str]:
        kept: list[str] = []
        for turn in self.turns:
            if sum(self.tokens.count_many([*kept, turn.line])) > budget:
                break
            kept.append(turn.line)
        return kept

    def close(self) -> None:
        _FirstTurns.closed.append(self.turns[0].dia_id)


def test_recall_scores_a_context_method_by_the_evidence_lines_it_returns(data: Path) -> None:
    figures = recall.run(data, HashEmbedder(), methods=(), context_methods={"first": _FirstTurns})

    first = figures["methods"]["first"]
    # Every question's evidence is the first turn of a session, and each conversation (two
    # sessions of six short turns) fits in 500 tokens: all evidence is found.
    assert first["budget_recall@500"] == 1.0
    assert 0 < first["context_tokens@500"] <= 500
    assert first["over_budget@500"] == 0.0
    assert "recall@10" not in first
    assert len(_FirstTurns.closed) == 2  # one method per conversation, each closed


def test_the_framework_methods_are_registered_as_entry_points() -> None:
    found, skipped = recall.discover()

    assert {"langchain-trim", "llamaindex-memory"} <= set(found) | set(skipped)


def test_bench_search(tmp_path: Path) -> None:
    out = tmp_path / "search.json"
    code, _ = run(
        "bench",
        "search",
        "--entries",
        "300",
        "--queries",
        "20",
        "--embedders",
        "hash",
        "--exact-sample",
        "5",
        "--json",
        str(out),
    )
    assert code == 0
    [figures] = json.loads(out.read_text())
    assert figures["embedder"] == "hash-256"
    assert figures["ingest_per_s"] > 0
    assert figures["online_per_s"] > 0  # the last tenth, embedded as each batch commits
    assert figures["search_p95_ms"] >= figures["search_p50_ms"] > 0
    # Every stage is reported, and the stages account for the whole of each search.
    stages = figures["stages"]
    assert set(stages) == {key for key, _ in STAGES}
    assert all(stages[key]["mean"] > 0 for key in ("embed", "lexical", "dense", "fetch"))
    on_its_thread = [s["mean"] for key, s in stages.items() if not key.endswith("_beside")]
    assert sum(on_its_thread) == pytest.approx(figures["search_mean_ms"])
    # SQLite reads one statement after the other: nothing is read beside the search.
    assert all(s["mean"] == 0 for key, s in stages.items() if key.endswith("_beside"))
    # 300 entries: the approximate index finds the exact ten best, but now and then one: over
    # the hash embedder's nearly orthogonal vectors its graph walk misses one of the 50 in
    # about one run of 30 (7 of 200 runs; at that rate two in one run come once in 1,500).
    recall = figures["dense_recall"]
    assert recall["queries"] == 5
    assert all(recall[key] >= 0.96 for key in ("recall@10", "recall@10_in_100", "recall@10_ties"))
    # The lexical arm's pruned search is compared with the full one on the same queries.
    agreement = figures["lexical_agreement"]
    assert agreement["queries"] == 20
    assert agreement["recall@10"] == agreement["recall@100"] == 1.0
    assert 0 <= agreement["scored"] <= 1
    assert 0 < agreement["p50_ms"] <= agreement["p95_ms"]
    assert 0 < agreement["full_p50_ms"] <= agreement["full_p95_ms"]


def test_bench_search_reuses_a_store_it_built(tmp_path: Path) -> None:
    where = tmp_path / "store"
    arguments = ("bench", "search", "--entries", "200", "--queries", "10", "--embedders")
    first, second = tmp_path / "first.json", tmp_path / "second.json"
    code, _ = run(*arguments, "hash", "--store", str(where), "--json", str(first))
    assert code == 0
    code, text = run(*arguments, "hash", "--store", str(where), "--json", str(second))
    assert code == 0
    [built], [reused] = json.loads(first.read_text()), json.loads(second.read_text())
    assert built["ingest_per_s"] > 0
    assert reused["ingest_per_s"] is None
    assert "(reused)" in text
    assert reused["search_p50_ms"] > 0
    # Another size, or a directory holding something else, is refused rather than overwritten.
    larger = ("bench", "search", "--entries", "300", "--embedders", "hash")
    code, _ = run(*larger, "--store", str(where))
    assert code != 0
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "file").write_text("x")
    code, _ = run(*arguments, "hash", "--store", str(tmp_path / "other"))
    assert code != 0
    code, _ = run(*arguments, "hash,local", "--store", str(tmp_path / "new"))
    assert code != 0


class _Lossy:
    """A dense index that loses every other hit of its nearest-neighbour answers."""

    def __init__(self, index: VectorIndex) -> None:
        self.index = index

    def refresh(self, *, wait: bool = False) -> int:
        return self.index.refresh(wait=wait)

    def vector(self, text: str | Vector) -> Vector:
        return self.index.vector(text)

    def vectors(self, iris: Sequence[str]) -> dict[str, Vector]:
        return self.index.vectors(iris)

    def query(self, text: str | Vector, n: int) -> list[tuple[str, float]]:
        return self.index.query(text, n)[::2]


def test_the_dense_recall_counts_what_an_index_misses() -> None:
    # Each text mixes three words in counts of its own proportions: no two entries are equally
    # near a query, so the exact ten best are one set.
    counts = [(a, c) for a in range(1, 51) for c in range(1, 5)]
    texts = [" ".join(["alpha"] * a + ["beta"] + ["gamma"] * c) for a, c in counts]
    with Memory(embedder=HashEmbedder()) as memory:
        memory.put_many([{"@id": f"urn:d:{i}", "text": t} for i, t in enumerate(texts)])
        queries = ["alpha", "beta gamma", "alpha gamma gamma"]
        whole = search.dense_recall(memory.store, memory.index, queries, batch=50)
        halved: Any = _Lossy(memory.index)  # as much of a VectorIndex as dense_recall uses
        lossy = search.dense_recall(memory.store, halved, queries, batch=50)
    assert whole == {
        "queries": 3,
        "recall@10": 1.0,
        "recall@10_in_100": 1.0,
        "recall@10_ties": 1.0,
    }
    assert lossy is not None
    assert lossy["recall@10"] <= 0.6
    assert lossy["recall@10_ties"] <= 0.6  # no ties here: a miss is a miss either way
    assert search.dense_recall(memory.store, memory.index, []) is None


def test_missing_data_is_a_clean_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _ = run("bench", "locomo", "--data", str(tmp_path / "none.json"), "--embedder", "hash")
    assert code == 2
    assert "cannot read LoCoMo data" in capsys.readouterr().err


def test_bench_search_on_postgresql_beside_sqlite(
    data: Path, tmp_path: Path, postgres_url: str
) -> None:
    out = tmp_path / "search.json"
    code, text = run(
        *("bench", "search", "--entries", "300", "--queries", "20", "--embedders", "hash"),
        *("--backend", "postgresql", "--database-url", postgres_url, "--data", str(data)),
        *("--json", str(out), "--filtered", "5"),
    )
    assert code == 0
    assert postgres_url not in text
    figures = json.loads(out.read_text())
    assert [r["backend"] for r in figures["speed"]] == ["sqlite", "postgresql"]
    for r in figures["speed"]:  # each filter timed on each backend, and printed
        assert set(r["filtered"]) == {"a rare tag", "1 in 7", "any of 50 rare"}
        assert all(cut["p95_ms"] >= cut["p50_ms"] > 0 for cut in r["filtered"].values())
    assert text.count("Filtered, ") == 6
    assert all(r["search_p95_ms"] >= r["search_p50_ms"] > 0 for r in figures["speed"])
    # On PostgreSQL the lexical arm, the links and the candidates' entries are read beside the
    # search's thread, and timed there.
    beside = figures["speed"][1]["stages"]
    assert all(beside[f"{key}_beside"]["mean"] > 0 for key in ("lexical", "links", "fetch"))
    assert beside["lexical"]["mean"] == 0
    lite, pg = figures["recall"]["sqlite"], figures["recall"]["postgresql"]
    assert set(lite) == set(pg) == {"gliding", "lexical", "dense"}
    for method in lite:  # the same ranking on both backends: the same recall
        assert pg[method]["recall@10"] == pytest.approx(lite[method]["recall@10"], abs=0.01)
        assert pg[method]["budget_recall@1000"] == pytest.approx(
            lite[method]["budget_recall@1000"], abs=0.01
        )


def test_bench_ingest_reports_both_modes(tmp_path: Path) -> None:
    out = tmp_path / "ingest.json"
    code, text = run(
        "bench", "ingest", "--entries", "600", "--embedders", "hash", "--json", str(out)
    )
    assert code == 0
    assert "later: returned/s" in text
    (figures,) = json.loads(out.read_text())
    for key in ("now_returned_per_s", "now_indexed_per_s", "later_returned_per_s"):
        assert figures[key] > 0
    # Returning is never slower than returning after the embedding as well.
    assert figures["later_returned_per_s"] >= figures["later_indexed_per_s"]


def test_bench_blackboard_on_postgresql_with_agents_in_processes(
    tmp_path: Path, postgres_url: str, oxigraph_server: str
) -> None:
    out = tmp_path / "fleet.json"
    code, text = run(
        *("bench", "blackboard", "--backend", "postgresql", "--processes", "1,2"),
        *("--nodes", "16", "--shared", "4", "--stale-seconds", "0.3"),
        *("--database-url", postgres_url, "--endpoint", oxigraph_server, "--json", str(out)),
    )
    assert code == 0
    assert postgres_url not in text
    assert "invalidation p95 ms" in text
    figures = json.loads(out.read_text())
    assert set(figures["processes"]) == {"1", "2"}
    one, two = figures["processes"]["1"], figures["processes"]["2"]
    for f in (one, two):
        assert f["writes_per_s"] > 0
        assert f["bare_updates_per_s"] > 0
        assert f["cached_reads_per_s"] > 0
        assert f["lease_acquire_release_p95_ms"] >= f["lease_acquire_release_p50_ms"] > 0
        assert f["stale_reads"] == 0
        assert f["checked_reads"] > 0
        assert f["checked_writes"] > 0
    assert "invalidation_p95_ms" not in one  # one process: nothing crosses
    assert two["invalidations_missed"] == 0  # every copy of the other process was pushed
    assert two["invalidation_p95_ms"] >= two["invalidation_p50_ms"] >= 0


def test_bench_blackboard_refuses_more_processes_than_agents(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, _ = run("bench", "blackboard", "--backend", "postgresql", "--processes", "8",
                  "--database-url", "postgresql://nobody@/nowhere?host=/nonexistent")  # fmt: skip
    assert code != 0
    assert "process counts" in capsys.readouterr().err


def _files(directory: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(directory)): p.read_bytes() for p in directory.rglob("*") if p.is_file()
    }


def test_bench_search_refuses_a_store_directory_it_did_not_build_and_writes_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    arguments = ("bench", "search", "--entries", "200", "--queries", "10", "--embedders", "hash")
    other = tmp_path / "other"  # another memory: a user's, or another benchmark's
    with Memory.open(other, embedder=HashEmbedder()) as memory:
        memory.store.put({"@id": "urn:mine", "text": "a memory of someone else's"})
    garbage = tmp_path / "garbage"
    garbage.mkdir()
    (garbage / search.STORE_MARKER).write_bytes(b"\xff\xfe\x00 not a marker")
    not_json = tmp_path / "not-json"
    not_json.mkdir()
    (not_json / search.STORE_MARKER).write_text("{entries: 200", encoding="utf-8")
    emptied = tmp_path / "emptied"  # the marker of this very run, the store gone
    emptied.mkdir()
    key = {"entries": 200, "seed": 0, "embedder": HashEmbedder().name}
    (emptied / search.STORE_MARKER).write_text(json.dumps(key), encoding="utf-8")
    a_file = tmp_path / "a-file"
    a_file.write_text("not a directory")
    for where in (other, garbage, not_json, emptied, a_file, a_file / "under"):
        before = _files(where) if where.is_dir() else where.exists() and where.read_bytes()
        code, text = run(*arguments, "--store", str(where))
        assert (code, text) == (2, ""), where
        assert f"error: {str(where)!r}" in capsys.readouterr().err
        after = _files(where) if where.is_dir() else where.exists() and where.read_bytes()
        assert after == before or where is emptied
    assert a_file.read_text() == "not a directory"
    with Memory.open(other, embedder=HashEmbedder()) as memory:
        assert memory.store.count() == 1
    # The PostgreSQL benchmark keeps no directory: --store there is refused, not ignored.
    code, _ = run(*arguments, "--store", str(tmp_path / "new"), "--backend", "postgresql")
    assert code == 2
    assert "--store" in capsys.readouterr().err
    assert not (tmp_path / "new").exists()
