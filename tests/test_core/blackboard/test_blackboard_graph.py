"""The blackboard's graph: one contract, run on embedded memory, embedded disk and a server."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyoxigraph as ox
import pytest
from pyld import jsonld

from gliding_core import (
    ContentTooLargeError,
    EventBus,
    EventType,
    InvalidInputError,
    InvalidNodeError,
    L0Store,
    StorageError,
)
from gliding_core.blackboard.board import Blackboard
from gliding_core.blackboard.graph import EmbeddedGraph, GraphBackend, SparqlEndpoint
from gliding_core.blackboard.vocabulary import (
    CONTEXT,
    CONTEXT_URL,
    PROLOGUE,
    VOCAB,
    area_graph,
    document_loader,
    graph_area,
)
from gliding_core.config import BlackboardConfig

TASK = "iri://task/t1"
OTHER = "iri://task/t2"


def make_backend(kind: str, tmp_path: Path, request: pytest.FixtureRequest) -> GraphBackend:
    """A fresh, empty backend of ``kind``."""
    if kind == "memory":
        return EmbeddedGraph()
    if kind == "disk":
        return EmbeddedGraph(tmp_path / "graph")
    endpoint = SparqlEndpoint(request.getfixturevalue("oxigraph_server"))
    endpoint.update("CLEAR ALL")
    return endpoint


@pytest.fixture(params=["memory", "disk", "server"])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[GraphBackend]:
    value = make_backend(request.param, tmp_path, request)
    yield value
    value.close()


@pytest.fixture
def bus() -> EventBus:
    return EventBus()


@pytest.fixture
def board(backend: GraphBackend, bus: EventBus, store: L0Store) -> Iterator[Blackboard]:
    value = Blackboard(backend, store=store, bus=bus, config=BlackboardConfig(flush_interval_s=0.0))
    yield value
    value.close()


def plan(iri: str, **properties: Any) -> dict[str, Any]:
    return {"@id": iri, "@type": "Plan", **properties}


def test_a_node_reads_back_as_written_from_the_cache_and_from_the_store(
    board: Blackboard,
) -> None:
    node = plan("urn:p:1", summary="draft", steps=[1, 2], owner={"@id": "urn:agent:a"})
    [written] = board.write([node], task=TASK, area="plan", tags=["draft"])
    assert written.generation == 1
    assert written.graph == area_graph(TASK, "plan")
    assert board.read("urn:p:1") == written
    board.nodes.forget_cache()
    again = board.read("urn:p:1")
    assert again == written
    assert again is not None
    assert again.node == node
    assert again.tags == ("draft",)
    assert board.read("urn:p:missing") is None


def test_generations_increase_and_survive_a_delete(board: Blackboard, bus: EventBus) -> None:
    seen: list[tuple[str, dict[str, Any]]] = []
    bus.subscribe(lambda e: seen.append((e.type, dict(e.payload))))
    for step in range(3):
        board.write([plan("urn:p:1", step=step)], task=TASK, area="plan")
    assert board.delete(["urn:p:1"]) == 1
    assert board.read("urn:p:1") is None
    board.nodes.forget_cache()
    [again] = board.write([plan("urn:p:1")], task=TASK, area="plan")
    assert again.generation == 4
    graph = area_graph(TASK, "plan")
    assert seen == [
        (EventType.NODE_CREATED.value, {"iri": "urn:p:1", "graph": graph, "generation": 1}),
        (EventType.NODE_UPDATED.value, {"iri": "urn:p:1", "graph": graph, "generation": 2}),
        (EventType.NODE_UPDATED.value, {"iri": "urn:p:1", "graph": graph, "generation": 3}),
        (EventType.NODE_DELETED.value, {"iri": "urn:p:1", "graph": graph, "generation": 3}),
        (EventType.NODE_CREATED.value, {"iri": "urn:p:1", "graph": graph, "generation": 4}),
    ]


def triples_in(board: Blackboard, graph: str) -> set[str]:
    result = board.query("CONSTRUCT { ?s ?p ?o } WHERE { ?s ?p ?o }", graphs=[graph])
    return {str(t) for t in result.triples}


def test_a_rewrite_leaves_no_old_triples_behind(board: Blackboard) -> None:
    board.write(
        [plan("urn:p:1", summary="a", detail={"note": "nested", "deeper": {"x": 1}})],
        task=TASK,
        area="plan",
    )
    graph = area_graph(TASK, "plan")
    assert len(triples_in(board, graph)) == 6  # type, summary, detail, note, deeper, x
    board.write([plan("urn:p:1", status="done")], task=TASK, area="plan")
    assert triples_in(board, graph) == {
        f"<urn:p:1> <http://www.w3.org/1999/02/22-rdf-syntax-ns#type> <{VOCAB}Plan>",
        f'<urn:p:1> <{VOCAB}status> "done"',
    }
    board.delete(["urn:p:1"])
    assert triples_in(board, graph) == set()


def test_a_node_moved_to_another_area_leaves_the_old_one(board: Blackboard) -> None:
    board.write([plan("urn:p:1", summary="a")], task=TASK, area="plan")
    [moved] = board.write([plan("urn:p:1", summary="b")], task=TASK, area="shared")
    assert moved.generation == 2
    assert triples_in(board, area_graph(TASK, "plan")) == set()
    assert [n.iri for n in board.by_task(TASK, ["shared"])] == ["urn:p:1"]


def test_a_batch_is_all_or_nothing(board: Blackboard) -> None:
    good = plan("urn:p:good")
    for bad, error in [
        ({"@id": "not an iri"}, InvalidNodeError),
        ({"@id": "relative"}, InvalidNodeError),
        ("not json", InvalidNodeError),
        ({"@id": "urn:p:g", "@graph": [{"@id": "urn:x", "p": 1}]}, InvalidNodeError),
        ({"@id": "urn:p:big", "text": "x" * 300_000}, ContentTooLargeError),
    ]:
        with pytest.raises(error) as caught:
            board.write([good, bad], task=TASK, area="plan")
        assert "urn:p:good" not in str(caught.value)
        assert board.read("urn:p:good") is None
    assert board.by_task(TASK) == []


def test_a_batch_over_the_count_limit_is_refused(backend: GraphBackend) -> None:
    board = Blackboard(backend, config=BlackboardConfig(max_batch_nodes=3))
    with pytest.raises(ContentTooLargeError, match="4 nodes"):
        board.write([plan(f"urn:p:{i}") for i in range(4)], task=TASK, area="plan")
    assert len(board.write([plan(f"urn:p:{i}") for i in range(3)], task=TASK, area="plan")) == 3


def test_bad_write_arguments_name_the_value(board: Blackboard) -> None:
    with pytest.raises(InvalidInputError, match="'nowhere'"):
        board.write([plan("urn:p:1")], task=TASK, area="nowhere")
    with pytest.raises(InvalidInputError, match="task= and area="):
        board.write([plan("urn:p:1")], task=TASK)
    with pytest.raises(InvalidInputError, match=r"^nodes must be a list"):
        board.write(plan("urn:p:1"), task=TASK, area="plan")  # type: ignore[arg-type]
    with pytest.raises(InvalidInputError, match="bookkeeping"):
        board.write([plan("urn:p:1")], graph="urn:gliding-horse:meta")
    with pytest.raises(InvalidInputError, match="tag"):
        board.write([plan("urn:p:1")], task=TASK, area="plan", tags=[""])


def test_reads_by_type_task_and_graph(board: Blackboard) -> None:
    board.write([plan("urn:p:1"), plan("urn:p:2")], task=TASK, area="plan")
    board.write([{"@id": "urn:r:1", "@type": ["Review", "Plan"]}], task=TASK, area="review")
    board.write([plan("urn:p:other")], task=OTHER, area="plan")
    assert [n.iri for n in board.by_type("Plan", task=TASK)] == ["urn:p:1", "urn:p:2", "urn:r:1"]
    assert [n.iri for n in board.by_type(VOCAB + "Review")] == ["urn:r:1"]
    assert [n.iri for n in board.by_type("Plan")] == [
        "urn:p:1",
        "urn:p:2",
        "urn:p:other",
        "urn:r:1",
    ]
    assert [n.iri for n in board.by_task(TASK)] == ["urn:p:1", "urn:p:2", "urn:r:1"]
    assert [n.iri for n in board.by_graph(area_graph(OTHER, "plan"))] == ["urn:p:other"]


def test_what_is_written_is_found_by_the_shipped_vocabulary(board: Blackboard) -> None:
    board.write(
        [{"@id": "urn:task:1", "@type": "Task", "status": "running", "parent": {"@id": TASK}}],
        task=TASK,
        area="tasks",
    )
    found = board.query(
        PROLOGUE + "SELECT ?t ?status ?p WHERE { ?t a gh:Task ; gh:status ?status ; gh:parent ?p }",
        graphs=[area_graph(TASK, "tasks")],
        bindings={"p": ox.NamedNode(TASK)},
    )
    assert found.values() == [{"t": "urn:task:1", "status": "running", "p": TASK}]
    construct = board.query(
        PROLOGUE + "CONSTRUCT { ?t gh:status ?s } WHERE { ?t a gh:Task ; gh:status ?s }"
    )
    assert [str(t) for t in construct.triples] == [f'<urn:task:1> <{VOCAB}status> "running"']
    assert board.query(PROLOGUE + "ASK { ?t a gh:Task }").boolean is True
    assert [n.iri for n in board.by_type("Task", task=TASK)] == ["urn:task:1"]


def test_a_dataset_overrides_what_the_query_text_names(board: Blackboard) -> None:
    board.write([plan("urn:p:1")], task=TASK, area="plan")
    board.write([plan("urn:p:2")], task=TASK, area="review")
    review = area_graph(TASK, "review")
    plan_graph = area_graph(TASK, "plan")
    for text in [
        "SELECT ?s WHERE { ?s ?p ?o }",
        f"SELECT ?s FROM <{plan_graph}> WHERE {{ ?s ?p ?o }}",
        f"SELECT ?s FROM NAMED <{plan_graph}> WHERE {{ GRAPH ?g {{ ?s ?p ?o }} }}",
        f"SELECT ?s WHERE {{ GRAPH <{plan_graph}> {{ ?s ?p ?o }} }}",
        "SELECT ?s WHERE { GRAPH <urn:gliding-horse:meta> { ?s ?p ?o } }",
    ]:
        rows = board.query(text, graphs=[review]).values()
        assert {row["s"] for row in rows} <= {"urn:p:2"}, text


def test_a_bad_query_is_a_typed_error(board: Blackboard) -> None:
    with pytest.raises(InvalidInputError):
        board.query("SELECT WHERE {")
    with pytest.raises(InvalidInputError, match="SERVICE"):
        board.query("SELECT * WHERE { SERVICE <http://127.0.0.1:9/q> { ?s ?p ?o } }")
    with pytest.raises(InvalidInputError, match="pyoxigraph term"):
        board.query("SELECT ?s WHERE { ?s ?p ?o }", bindings={"s": "urn:x"})  # type: ignore[dict-item]


def test_one_writer_loses_no_update_under_threads(board: Blackboard) -> None:
    def bump(worker: int) -> None:
        for step in range(50):
            board.write([plan("urn:p:counter", by=worker, step=step)], task=TASK, area="plan")

    threads = [threading.Thread(target=bump, args=(w,)) for w in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    board.nodes.forget_cache()
    node = board.read("urn:p:counter")
    assert node is not None
    assert node.generation == 200
    assert len(triples_in(board, area_graph(TASK, "plan"))) == 3  # type, by, step


def test_the_cache_is_bounded_and_misses_read_the_store(backend: GraphBackend) -> None:
    board = Blackboard(backend, config=BlackboardConfig(cache_nodes=2))
    board.write([plan(f"urn:p:{i}", i=i) for i in range(5)], task=TASK, area="plan")
    assert [board.nodes.cached(f"urn:p:{i}") for i in range(5)] == [False] * 3 + [True] * 2
    node = board.read("urn:p:0")
    assert node is not None
    assert node.node["i"] == 0
    assert board.nodes.cached("urn:p:0")


def test_the_disk_graph_keeps_nodes_across_opens(tmp_path: Path) -> None:
    with Blackboard(EmbeddedGraph(tmp_path / "graph")) as board:
        board.write([plan("urn:p:1", summary="kept")], task=TASK, area="plan")
    with Blackboard(EmbeddedGraph(tmp_path / "graph")) as board:
        node = board.read("urn:p:1")
        assert node is not None
        assert node.node["summary"] == "kept"
        assert node.generation == 1


def test_a_second_open_of_a_disk_graph_is_a_storage_error(tmp_path: Path) -> None:
    first = EmbeddedGraph(tmp_path / "graph")
    with pytest.raises(StorageError):
        EmbeddedGraph(tmp_path / "graph")
    first.close()


def test_an_unreachable_server_is_a_storage_error() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    endpoint = SparqlEndpoint(f"http://127.0.0.1:{port}", timeout_s=2.0)
    with pytest.raises(StorageError):
        endpoint.query("ASK {}")
    endpoint.close()


def test_graph_names_round_trip() -> None:
    graph = area_graph("iri://task/a#c", "review")
    assert graph_area(graph) == ("iri://task/a#c", "review")
    assert graph_area("urn:other") is None
    ox.NamedNode(graph)  # a valid IRI
    with pytest.raises(InvalidInputError):
        area_graph(TASK, "nowhere")


class NetworkWatch:
    """Records (and refuses) every outgoing connection."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.attempts: list[object] = []

        def refuse(sock: socket.socket, address: object) -> None:
            self.attempts.append(address)
            raise OSError("network refused by the test")

        monkeypatch.setattr(socket.socket, "connect", refuse)
        monkeypatch.setattr(socket.socket, "connect_ex", refuse)


def test_no_context_is_fetched_from_the_network(
    monkeypatch: pytest.MonkeyPatch, store: L0Store
) -> None:
    watch = NetworkWatch(monkeypatch)
    board = Blackboard(EmbeddedGraph())
    for context in ["https://example.org/context.jsonld", {"@import": "https://example.org/c"}]:
        with pytest.raises(InvalidNodeError, match=r"network|remote"):
            board.write(
                [{"@context": context, "@id": "urn:x", "name": "n"}], task=TASK, area="plan"
            )
    [_node] = board.write(
        [{"@context": CONTEXT_URL, "@id": "urn:x", "@type": "Plan"}], task=TASK, area="plan"
    )
    assert [n.iri for n in board.by_type("Plan")] == ["urn:x"]
    expanded = jsonld.expand(
        {"@context": CONTEXT_URL, "@id": "urn:x", "status": "ok"},
        {"documentLoader": document_loader},
    )
    assert expanded == [{"@id": "urn:x", f"{VOCAB}status": [{"@value": "ok"}]}]
    with pytest.raises(jsonld.JsonLdError):
        jsonld.expand(
            {"@context": "https://example.org/other.jsonld", "name": "x"},
            {"documentLoader": document_loader},
        )
    assert watch.attempts == []
    assert CONTEXT["@vocab"] == VOCAB


def test_an_embedded_store_error_is_translated_or_raised_as_it_is() -> None:
    """A mapped pyoxigraph error becomes the project's error; any other is not swallowed."""
    graph = EmbeddedGraph()
    with pytest.raises(InvalidInputError, match="updating the blackboard graph failed"):
        graph.update("INSERT DATA { this is not SPARQL }")
    with pytest.raises(TypeError):  # not in the table: raised as pyoxigraph raised it
        graph.extend(["not a quad"])  # type: ignore[list-item]
    assert list(graph.store) == []  # nothing written by either
    graph.close()
