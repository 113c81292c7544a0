"""The blackboard's storage layout: flat nodes translated directly, one bookkeeping quad a node."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyoxigraph as ox
import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as st

from gliding_core import InvalidInputError, InvalidNodeError, StorageError
from gliding_core.blackboard.board import Blackboard
from gliding_core.blackboard.flat import flat_triples
from gliding_core.blackboard.graph import EmbeddedGraph, GraphBackend, SparqlEndpoint
from gliding_core.blackboard.rdf import may_skolemise, processed_rdf, rdf_of
from gliding_core.blackboard.vocabulary import (
    META,
    META_GRAPH,
    SKOLEM_PREFIX,
    area_graph,
    meta,
)
from gliding_core.config import BlackboardConfig
from gliding_core.jsonld import parse_node

TASK = "urn:task:layout"
GRAPH = ox.NamedNode(area_graph(TASK, "execution"))

# Keys and IRIs a node may hold, the plain ones and those whose reading depends on the context.
keys = st.one_of(
    st.sampled_from(["summary", "status", "a-b", "_x", "type", "id", "Step"]),
    st.sampled_from(["gh", "xsd", "gh:link", "xsd:int", "x.y", "1st", "-x", "", "has space"]),
    st.sampled_from(["@value", "@language", "@list", "@set", "@reverse", "@index", "@nest"]),
    st.sampled_from(["http://example.org/p", "urn:p:1", "é"]),
    st.from_regex(r"[A-Za-z_][A-Za-z0-9_-]{0,8}", fullmatch=True),
)
iris = st.one_of(
    st.sampled_from(["urn:x:1", "http://example.org/a/b?c=d#e", "https://a.example/%7e"]),
    st.sampled_from(["http://a/b/../c", "http://a/./b", "gh:foo", "xsd:string", "_:b0"]),
    st.sampled_from(["urn:x:é", "urn:x y", "relative", "http://[::1]/x", "mailto:a@b.c"]),
    st.from_regex(r"urn:[a-z]{1,5}:[A-Za-z0-9._~:/?#@!$&'()*+,;=%-]{0,12}", fullmatch=True),
)
scalars = st.one_of(
    st.text(max_size=12),
    st.integers(min_value=-(2**60), max_value=2**60),
    st.integers(min_value=-(2**54), max_value=2**54),
    st.booleans(),
    st.floats(allow_nan=False, allow_infinity=False),
    st.none(),
)
values = st.recursive(
    st.one_of(scalars, st.builds(lambda i: {"@id": i}, iris)),
    lambda inner: st.one_of(
        st.lists(inner, max_size=3),
        st.dictionaries(st.sampled_from(["@id", "@value", "@type", "name"]), inner, max_size=2),
    ),
    max_leaves=6,
)
types = st.one_of(
    st.sampled_from(["Step", "Task", "gh:Step", "xsd:string", "urn:t:1", "gh", "", "1x"]),
    st.lists(st.sampled_from(["Step", "Plan", "gh:Plan", "urn:t:2"]), max_size=3),
)


@st.composite
def nodes(draw: st.DrawFn) -> dict[str, Any]:
    node: dict[str, Any] = {"@id": draw(iris)}
    if draw(st.booleans()):
        node["@type"] = draw(types)
    node.update(draw(st.dictionaries(keys, values, max_size=4)))
    return node


@settings(max_examples=400, deadline=None)
@given(nodes())
def test_the_direct_path_gives_exactly_the_processors_quads(node: dict[str, Any]) -> None:
    try:
        parsed, content, _, _ = parse_node(node)
    except InvalidNodeError:
        return  # refused before any translation
    direct = flat_triples(parsed, GRAPH)
    event("direct" if direct is not None else "processor")
    try:
        processed = list(processed_rdf(parsed, GRAPH, content))
    except InvalidInputError:  # the processor refuses it
        assert direct is None, parsed
        return
    if direct is not None:
        assert direct == processed, parsed


@settings(max_examples=400, deadline=None)
@given(nodes())
def test_a_node_whose_text_may_not_skolemise_has_no_blank_node(node: dict[str, Any]) -> None:
    # A rewrite removes the old node's skolemised quads only when ``may_skolemise`` says it
    # may have some: a wrong "no" would leave them behind.
    try:
        parsed, content, _, _ = parse_node(node)
        processed = processed_rdf(parsed, GRAPH, content)
    except (InvalidNodeError, InvalidInputError):
        return  # refused: never stored
    skolemised = any(
        isinstance(term, ox.NamedNode) and term.value.startswith(SKOLEM_PREFIX)
        for quad in processed
        for term in (quad.subject, quad.object)
    )
    event("skolemised" if skolemised else "plain")
    if skolemised:
        assert may_skolemise(content), parsed


@pytest.mark.parametrize(
    "node",
    [
        {"@id": "urn:n:1", "part": {"name": "a blank node"}},
        {"@id": "urn:n:1", "link": {"@id": "_:b0"}},
        {"@id": "urn:n:1", "@type": "_:b0"},
        {"@id": "urn:n:1", "@context": {"@vocab": "urn:v:"}, "summary": "s"},
    ],
)
def test_nodes_with_blank_nodes_may_skolemise(node: dict[str, Any]) -> None:
    _, content, _, _ = parse_node(node)
    assert may_skolemise(content)
    assert not may_skolemise(parse_node({"@id": "urn:n:1", "@type": "Step", "n": 1})[1])


@pytest.mark.parametrize(
    "node",
    [
        {"@id": "urn:n:1", "@type": "Step", "summary": "s1"},
        {"@id": "urn:n:2", "@type": ["Step", "Plan"], "count": 3, "done": False},
        {"@id": "urn:n:3", "link": [{"@id": "urn:n:1"}, {"@id": "urn:n:2"}], "tags": ["a", "b"]},
    ],
)
def test_flat_nodes_take_the_direct_path(node: dict[str, Any]) -> None:
    direct = flat_triples(node, GRAPH)
    assert direct is not None
    assert direct == list(processed_rdf(node, GRAPH))
    assert list(rdf_of(node, GRAPH.value)) == direct


@pytest.mark.parametrize(
    "node",
    [
        {"@id": "urn:n:1", "@context": {"@vocab": "urn:v:"}, "summary": "s"},
        {"@id": "gh:n", "summary": "s"},
        {"@id": "urn:n:1", "gh:summary": "s"},
        {"@id": "urn:n:1", "ratio": 0.5},
        {"@id": "urn:n:1", "note": {"@value": "x", "@language": "en"}},
        {"@id": "urn:n:1", "part": {"name": "a blank node"}},
    ],
)
def test_other_nodes_go_through_the_processor(node: dict[str, Any]) -> None:
    assert flat_triples(node, GRAPH) is None


@pytest.fixture(params=["memory", "disk", "server"])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[GraphBackend]:
    value: GraphBackend
    if request.param == "memory":
        value = EmbeddedGraph()
    elif request.param == "disk":
        value = EmbeddedGraph(tmp_path / "graph")
    else:
        value = SparqlEndpoint(request.getfixturevalue("oxigraph_server"))
        value.update("CLEAR ALL")
    yield value
    value.close()


def _all_quads(backend: GraphBackend) -> list[tuple[str, str, str, str]]:
    result = backend.query("SELECT ?s ?p ?o ?g WHERE { GRAPH ?g { ?s ?p ?o } }")
    return sorted((r["s"], r["p"], r["o"], r["g"]) for r in result.values())


def test_a_node_costs_its_triples_and_one_bookkeeping_quad(backend: GraphBackend) -> None:
    board = Blackboard(backend, config=BlackboardConfig(flush_interval_s=0.0))
    node = {"@id": "urn:n:1", "@type": "Step", "summary": "s1"}
    board.write([node], task=TASK, area="execution")
    stored = _all_quads(backend)
    assert len(stored) == 3
    assert [q[1] for q in stored if q[1].startswith(META)] == [META + "dirty"]


def _legacy_quads(node: dict[str, Any], graph: str, generation: int, dirty: bool) -> list[ox.Quad]:
    """The quads the earlier layout wrote for a node: its RDF, record, graph and mark."""
    content = json.dumps(node, sort_keys=True, separators=(",", ":"))
    record = json.dumps({"content": content, "generation": generation, "tags": ["t"]})
    subject, meta_graph = ox.NamedNode(node["@id"]), ox.NamedNode(META_GRAPH)
    quads = list(rdf_of(node, graph))
    quads.append(ox.Quad(subject, ox.NamedNode(META + "record"), ox.Literal(record), meta_graph))
    quads.append(ox.Quad(subject, ox.NamedNode(META + "graph"), ox.NamedNode(graph), meta_graph))
    if dirty:
        true = ox.Literal("true", datatype=ox.NamedNode("http://www.w3.org/2001/XMLSchema#boolean"))
        quads.append(ox.Quad(subject, ox.NamedNode(META + "dirty"), true, meta_graph))
    return quads


def test_a_store_of_the_earlier_layout_is_read_in_the_new_one(backend: GraphBackend) -> None:
    plan, execution = area_graph(TASK, "plan"), area_graph(TASK, "execution")
    backend.extend(
        _legacy_quads({"@id": "urn:n:dirty", "@type": "Plan"}, plan, 3, dirty=True)
        + _legacy_quads({"@id": "urn:n:clean", "summary": "done"}, execution, 1, dirty=False)
    )
    tombstone = json.dumps({"generation": 5, "deleted": True})
    backend.extend(
        [ox.Quad(ox.NamedNode("urn:n:gone"), ox.NamedNode(META + "record"), ox.Literal(tombstone),
                 ox.NamedNode(META_GRAPH))]
    )  # fmt: skip
    board = Blackboard(backend, config=BlackboardConfig(flush_interval_s=0.0))
    assert not any(q[1] == META + "graph" for q in _all_quads(backend))
    dirty, clean = board.read("urn:n:dirty"), board.read("urn:n:clean")
    assert dirty is not None
    assert clean is not None
    assert (dirty.graph, dirty.generation, dirty.tags, dirty.dirty) == (plan, 3, ("t",), True)
    assert (clean.graph, clean.generation, clean.dirty) == (execution, 1, False)
    assert [n.iri for n in board.nodes.dirty()] == ["urn:n:dirty"]
    assert [n.iri for n in board.by_task(TASK)] == ["urn:n:clean", "urn:n:dirty"]
    assert board.read("urn:n:gone") is None
    assert board.write([{"@id": "urn:n:gone"}], task=TASK, area="plan")[0].generation == 6
    assert board.write([{"@id": "urn:n:dirty"}], task=TASK, area="plan")[0].generation == 4


def test_a_nodes_own_triple_with_a_bookkeeping_predicate_is_not_its_record(
    backend: GraphBackend,
) -> None:
    board = Blackboard(backend, config=BlackboardConfig(flush_interval_s=0.0))
    node = {"@id": "urn:n:1", META + "dirty": "not a record", META + "record": "nor this"}
    board.write([node], task=TASK, area="execution")
    board.nodes.forget_cache()
    found = board.read("urn:n:1")
    assert found is not None
    assert found.generation == 1
    assert found.node == node
    assert [n.iri for n in board.nodes.dirty()] == ["urn:n:1"]
    board.nodes.mark_clean([found])
    board.nodes.forget_cache()
    assert board.nodes.dirty() == []
    again = board.read("urn:n:1")
    assert again is not None
    assert not again.dirty
    assert again.node == node


def test_a_new_iri_costs_a_store_probe_only_at_a_server(
    backend: GraphBackend, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An embedded store knows its recorded IRIs; a server's store is probed for each."""
    board = Blackboard(backend, config=BlackboardConfig(flush_interval_s=0.0))
    board.write([{"@id": "urn:n:old", "summary": "v1"}], task=TASK, area="execution")
    board.delete(["urn:n:old"])
    probes: list[list[str]] = []
    probe = backend.quads_about

    def counted(subjects: Any, predicates: Any) -> list[ox.Quad]:
        probes.append(list(subjects))
        return probe(subjects, predicates)

    monkeypatch.setattr(backend, "quads_about", counted)
    board.nodes.forget_cache()
    board.write([{"@id": "urn:n:new", "summary": "v1"}], task=TASK, area="execution")
    assert board.read("urn:n:missing") is None
    at_server = isinstance(backend, SparqlEndpoint)
    assert probes == ([["urn:n:new"], ["urn:n:missing"]] if at_server else [])
    probes.clear()
    again = board.write([{"@id": "urn:n:old", "summary": "v2"}], task=TASK, area="execution")
    assert again[0].generation == 2  # the tombstone's generation continues
    assert probes == [["urn:n:old"]]  # a recorded IRI the cache lost is read from the store


def test_an_embedded_store_larger_than_the_cache_is_looked_up(tmp_path: Path) -> None:
    """The recorded IRIs are read at open only while they fit the cache; past it, probes."""
    small = BlackboardConfig(flush_interval_s=0.0, cache_nodes=2)
    with Blackboard(EmbeddedGraph(tmp_path / "g"), config=small) as board:
        board.write([{"@id": f"urn:n:{i}"} for i in range(2)], task=TASK, area="plan")
        assert board.nodes._recorded == {"urn:n:0", "urn:n:1"}
        board.write([{"@id": "urn:n:2"}], task=TASK, area="plan")
        assert board.nodes._recorded is None  # dropped once past the cache's size
        board.nodes.forget_cache()
        assert board.write([{"@id": "urn:n:0"}], task=TASK, area="plan")[0].generation == 2
    with Blackboard(EmbeddedGraph(tmp_path / "g"), config=small) as board:
        assert board.nodes._recorded is None
        assert board.write([{"@id": "urn:n:2"}], task=TASK, area="plan")[0].generation == 2
        assert board.write([{"@id": "urn:n:3"}], task=TASK, area="plan")[0].generation == 1
        assert board.nodes._recorded is None
    with Blackboard(EmbeddedGraph(tmp_path / "g"), config=BlackboardConfig()) as board:
        assert board.nodes._recorded == {f"urn:n:{i}" for i in range(4)}


def test_the_bound_on_recorded_iris_counts_each_iri_once(tmp_path: Path) -> None:
    """A node whose own triple uses a bookkeeping predicate is one IRI, not two, at open."""
    small = BlackboardConfig(flush_interval_s=0.0, cache_nodes=2)
    with Blackboard(EmbeddedGraph(tmp_path / "g"), config=BlackboardConfig()) as board:
        board.write([{"@id": "urn:n:0", meta("dirty"): "its own"}], task=TASK, area="plan")
        board.write([{"@id": "urn:n:1"}], task=TASK, area="plan")
    with Blackboard(EmbeddedGraph(tmp_path / "g"), config=small) as board:
        assert board.nodes._recorded == {"urn:n:0", "urn:n:1"}
        board.write([{"@id": "urn:n:2"}], task=TASK, area="plan")
    with Blackboard(EmbeddedGraph(tmp_path / "g"), config=small) as board:
        assert board.nodes._recorded is None  # three IRIs, whatever order the rows come in
        assert board.write([{"@id": "urn:n:2"}], task=TASK, area="plan")[0].generation == 2


def test_a_failed_write_leaves_nothing_and_its_iri_is_looked_up_next_time(
    backend: GraphBackend, monkeypatch: pytest.MonkeyPatch
) -> None:
    board = Blackboard(backend, config=BlackboardConfig(flush_interval_s=0.0))
    extend = backend.extend

    def failing(quads: Any) -> None:
        raise StorageError("the store refused the write")

    monkeypatch.setattr(backend, "extend", failing)
    with pytest.raises(StorageError):
        board.write([{"@id": "urn:n:1", "summary": "lost"}], task=TASK, area="execution")
    monkeypatch.setattr(backend, "extend", extend)
    assert board.read("urn:n:1") is None
    written = board.write([{"@id": "urn:n:1", "summary": "kept"}], task=TASK, area="execution")
    assert written[0].generation == 1
    assert len(_all_quads(backend)) == 2  # one triple and one record: nothing of the failure


def test_a_tombstone_is_known_after_a_reopen(tmp_path: Path) -> None:
    config = BlackboardConfig(flush_interval_s=0.0)
    with Blackboard(EmbeddedGraph(tmp_path / "g"), config=config) as board:
        board.write([{"@id": "urn:n:1", "summary": "v1"}], task=TASK, area="plan")
        board.write([{"@id": "urn:n:1", "summary": "v2"}], task=TASK, area="plan")
        board.delete(["urn:n:1"])
    with Blackboard(EmbeddedGraph(tmp_path / "g"), config=config) as board:
        assert board.nodes._recorded == {"urn:n:1"}
        assert board.read("urn:n:1") is None
        again = board.write([{"@id": "urn:n:1", "summary": "v3"}], task=TASK, area="plan")
        assert again[0].generation == 3
