"""The Poincaré structural index: training, queries, persistence, and the memory's hierarchy."""

from __future__ import annotations

import io
import json
from collections import defaultdict
from pathlib import Path

import numpy as np
import pytest

from gliding_core import HashEmbedder, InvalidInputError, Memory, Record
from gliding_core.cli import main
from gliding_core.hyperspace.poincare import PoincareIndex, PoincareSettings, reconstruction


def tree() -> list[tuple[str, str]]:
    """A closure of a small taxonomy: animal > {mammal, bird} > species."""
    parents = {
        "mammal": "animal",
        "bird": "animal",
        "dog": "mammal",
        "cat": "mammal",
        "whale": "mammal",
        "sparrow": "bird",
        "eagle": "bird",
        "owl": "bird",
    }
    edges = []
    for child in parents:
        node = child
        while node in parents:
            edges.append((child, parents[node]))
            node = parents[node]
    return edges


@pytest.fixture(scope="module")
def trained() -> PoincareIndex:
    return PoincareIndex(PoincareSettings(dimension=5, epochs=600, seed=1)).fit(tree())


def test_training_reconstructs_the_hierarchy(trained: PoincareIndex) -> None:
    relations: dict[str, set[str]] = defaultdict(set)
    for child, parent in tree():
        relations[child].add(parent)
    mean_rank, average_precision = reconstruction(trained, relations, trained.nodes)
    assert average_precision > 0.9
    assert mean_rank < 1.5
    # General nodes sit nearer the centre of the ball than specific ones.
    assert trained.norm("animal") < trained.norm("mammal") < trained.norm("dog")
    assert all(np.linalg.norm(v) < 1.0 for v in trained.vectors)


def test_similar_finds_the_family(trained: PoincareIndex) -> None:
    near = [name for name, _ in trained.similar("dog", 3)]
    assert "mammal" in near
    assert not {"sparrow", "eagle", "owl"} & set(near)
    assert trained.distance("dog", "cat") < trained.distance("dog", "owl")


def test_save_and_load(trained: PoincareIndex, tmp_path: Path) -> None:
    path = tmp_path / "index.npz"
    trained.save(path)
    loaded = PoincareIndex.load(path)
    assert loaded.nodes == trained.nodes
    assert np.allclose(loaded.vectors, trained.vectors)
    assert loaded.settings == trained.settings


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: PoincareIndex(PoincareSettings(dimension=0)), "dimension"),
        (lambda: PoincareIndex(PoincareSettings(learning_rate=0)), "learning_rate"),
        (lambda: PoincareIndex().fit([("a", "a")]), "at least one edge"),
        (lambda: PoincareIndex().fit([("a",)]), "pair"),
    ],
)
def test_bad_input_is_named(call: object, message: str) -> None:
    with pytest.raises(InvalidInputError, match=message):
        call()  # type: ignore[operator]


def test_queries_name_unknown_nodes(trained: PoincareIndex) -> None:
    with pytest.raises(InvalidInputError, match="unicorn"):
        trained.similar("unicorn")
    with pytest.raises(InvalidInputError, match="k must be"):
        trained.similar("dog", 0)


def _hierarchy(memory: Memory) -> None:
    memory.store.put_many(
        [
            Record({"@id": "urn:task/epic", "@type": "Epic", "text": "Checkout with saved cards"}),
            Record(
                {
                    "@id": "urn:task/api",
                    "@type": "Task",
                    "text": "Payments API",
                    "parent": {"@id": "urn:task/epic"},
                }
            ),
            Record(
                {
                    "@id": "urn:task/ui",
                    "@type": "Task",
                    "text": "Checkout page",
                    "parent": {"@id": "urn:task/epic"},
                }
            ),
            Record(
                {
                    "@id": "urn:task/api-tests",
                    "@type": "Task",
                    "text": "Payments API tests",
                    "parent": {"@id": "urn:task/api"},
                }
            ),
            Record({"@id": "urn:note/lunch", "@type": "Note", "text": "Payments team lunch"}),
        ]
    )


def test_the_memory_trains_on_its_own_hierarchy_and_keeps_it(tmp_path: Path) -> None:
    with Memory.open(tmp_path, embedder=HashEmbedder()) as memory:
        _hierarchy(memory)
        edges = memory.structure.edges()
        assert ("urn:task/api-tests", "urn:task/api") in edges
        assert ("urn:task/api", "Task") in edges
        memory.structure.train(PoincareSettings(dimension=5, epochs=40))
        near = [n for n, _ in memory.structure.similar("urn:task/api-tests", 3)]
        assert "urn:task/api" in near
        dual = memory.structure.dual_search(
            memory.hyperspace, "payments", 3, alpha=0.5, anchor="urn:task/api"
        )
        assert dual[0].hit.iri in {"urn:task/api", "urn:task/api-tests"}
        assert all(0.0 <= d.structure <= 1.0 for d in dual)
    with Memory.open(tmp_path, embedder=HashEmbedder()) as again:
        assert "urn:task/api" in again.structure.index  # type: ignore[operator]


def test_an_untrained_index_says_so() -> None:
    with Memory(embedder=HashEmbedder()) as memory:
        with pytest.raises(InvalidInputError, match="not trained"):
            memory.structure.similar("urn:x")
        with pytest.raises(InvalidInputError, match="no hierarchy"):
            memory.structure.train()


def test_bench_poincare_against_gensim(tmp_path: Path) -> None:
    # A closure of a 4-ary tree of depth 3 (85 nodes): enough non-neighbours for 10 negatives.
    parent = {f"n{i}": f"n{(i - 1) // 4}" for i in range(1, 85)}
    lines = []
    for child in parent:
        node = child
        while node in parent:
            lines.append(f"{child}\t{parent[node]}\n")
            node = parent[node]
    edges = tmp_path / "edges.tsv"
    edges.write_text("".join(lines))
    out, figures = io.StringIO(), tmp_path / "out.json"
    code = main(
        [
            "bench",
            "poincare",
            "--edges",
            str(edges),
            "--dim",
            "5",
            "--epochs",
            "5",
            "--json",
            str(figures),
        ],
        out=out,
    )
    assert code == 0
    methods = json.loads(figures.read_text())["methods"]
    assert set(methods) == {"gliding", "gensim"}
    for figures_of in methods.values():
        assert set(figures_of) == {"map", "mean_rank", "train_s"}
        assert 0.0 < figures_of["map"] <= 1.0
