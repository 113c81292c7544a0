"""The fast paths of a node write read the same JSON-LD text, and make the same RDF, as the
plain ones they replace."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyoxigraph as ox
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gliding_core.blackboard.flat import flat_triples
from gliding_core.blackboard.graph import EmbeddedGraph
from gliding_core.blackboard.nodes import NodeStore
from gliding_core.blackboard.rdf import _document, rdf_of
from gliding_core.blackboard.validation import NodeWrite
from gliding_core.blackboard.vocabulary import CONTEXT_URL, with_context
from gliding_core.errors import InvalidNodeError, NodeTooDeepError
from gliding_core.jsonld import canonical_json, parse_node

GRAPH = "urn:test:graph"
keys = st.one_of(
    st.sampled_from(["@id", "@type", "@base", "@context!", "!", "#k", "A", "summary", "@"]),
    st.text(max_size=4),
)
scalars = st.one_of(st.text(max_size=4), st.integers(-9, 9), st.booleans(), st.floats(-2, 2))
nodes = st.dictionaries(keys, st.one_of(scalars, st.lists(scalars, max_size=2)), max_size=5)


@settings(max_examples=300, deadline=None)
@given(nodes)
def test_the_spliced_document_is_the_encoders_text(node: dict[str, Any]) -> None:
    assert _document(node, canonical_json(node)) == canonical_json(with_context(node))


@pytest.mark.parametrize(
    "node",
    [
        {"@id": "urn:test:a", "@type": "Step", "summary": "s"},
        {"@id": "urn:test:b", "!first": "sorts before @context", "n": 1.5},
        {"@id": "urn:test:c", "@context": CONTEXT_URL, "status": "done"},
        {"@id": "urn:test:d", "part": {"name": "a blank node"}, "link": {"@id": "urn:test:a"}},
    ],
)
def test_a_checked_write_has_the_processors_rdf(node: dict[str, Any]) -> None:
    checked = NodeWrite.check(node, GRAPH, (), max_bytes=10_000)
    assert checked.triples == rdf_of(node, GRAPH)
    assert checked.triples == rdf_of(node, GRAPH, canonical_json(node))


flat_nodes = st.fixed_dictionaries(
    {"@id": st.sampled_from(["urn:test:a", "https://example.org/n#1"])},
    optional={
        "@type": st.one_of(st.sampled_from(["Step", "Task"]), st.lists(st.just("Step"))),
        "summary": st.one_of(st.text(max_size=5), st.integers(-3, 3), st.booleans()),
        "link": st.just({"@id": "urn:test:b"}),
        "many": st.lists(st.text(max_size=2), min_size=1, max_size=3),
    },
)


@settings(max_examples=200, deadline=None)
@given(flat_nodes)
def test_a_given_subject_term_gives_the_same_flat_quads(node: dict[str, Any]) -> None:
    graph = ox.NamedNode(GRAPH)
    assert flat_triples(node, graph, ox.NamedNode(node["@id"])) == flat_triples(node, graph)


def test_a_checked_write_keeps_its_subject_term_for_every_quad() -> None:
    node = {"@id": "urn:test:a", "@type": "Step", "summary": "s"}
    checked = NodeWrite.check(node, GRAPH, (), max_bytes=10_000)
    assert checked.subject == ox.NamedNode("urn:test:a")
    assert {quad.subject for quad in checked.triples} == {checked.subject}


def test_records_written_with_the_request_s_term_read_back_after_reopening(tmp_path: Path) -> None:
    store = NodeStore(EmbeddedGraph(tmp_path / "graph"))
    store.write(store.prepare([{"@id": "urn:test:a", "summary": 'with "quotes" \\ é'}], GRAPH))
    [tagged] = store.write(store.prepare([{"@id": "urn:test:b"}], GRAPH, ["emphasis", "x"]))
    store.mark_clean([tagged])
    store.backend.close()
    store = NodeStore(EmbeddedGraph(tmp_path / "graph"))
    a, b = store.get("urn:test:a"), store.get("urn:test:b")
    assert a is not None
    assert b is not None
    assert (a.node["summary"], a.generation, a.tags, a.dirty) == ('with "quotes" \\ é', 1, (), True)
    assert (b.content, b.generation, b.dirty) == ('{"@id":"urn:test:b"}', 1, False)
    assert b.tags == ("emphasis", "x")
    store.backend.close()


def test_nodes_and_tombstones_written_here_are_served_from_the_cache(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    store = NodeStore(EmbeddedGraph())
    store.write(store.prepare([{"@id": "urn:test:c", "v": 1}], GRAPH))
    store.delete(["urn:test:c"])

    def unread(iris: Any) -> Any:
        raise AssertionError(f"{iris} were read from the store, not the cache")

    monkeypatch.setattr(store, "_load", unread)
    assert store.get("urn:test:c") is None  # the tombstone, cached as written
    [again] = store.write(store.prepare([{"@id": "urn:test:c", "v": 2}], GRAPH))
    assert again.generation == 2  # the tombstone kept generation 1: it continues
    assert store.get("urn:test:c") == again
    assert store.states(["urn:test:c"]) == {"urn:test:c": (again, 2)}


@pytest.mark.parametrize(
    ("node", "message"),
    [
        ({"@id": "urn:a b"}, "whitespace"),
        ({"@id": ""}, "non-empty"),
        ({"@id": 5}, "string"),
        ({"@id": "urn:a\u2028"}, "whitespace"),
        ({"@id": "urn:a", "@type": "A\nB"}, "@type"),
        ({"@id": "urn:a", "@type": " "}, "@type"),
        ({"@id": "urn:a", "@type": 3}, "@type"),
    ],
)
def test_the_inline_checks_of_a_node_refuse_what_the_full_ones_do(
    node: dict[str, Any], message: str
) -> None:
    with pytest.raises(InvalidNodeError, match=message):
        parse_node(node)


def test_a_flat_node_deeper_than_the_limit_is_refused() -> None:
    assert parse_node({"@id": "urn:a", "n": 1}, max_depth=1)[3] == 1
    with pytest.raises(NodeTooDeepError):
        parse_node({"@id": "urn:a", "n": 1}, max_depth=0)
