"""Bad input on the blackboard's public methods: a typed error naming it, the same everywhere."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pyoxigraph as ox
import pytest

from gliding_core import EventBus, InvalidInputError, L0Store
from gliding_core.blackboard.board import Blackboard
from gliding_core.blackboard.coordination.registries import Coordination
from gliding_core.blackboard.coordination.sqlite import CoordinationDB
from gliding_core.blackboard.graph import EMPTY_GRAPH, EmbeddedGraph, GraphBackend
from gliding_core.blackboard.vocabulary import is_bookkeeping
from gliding_core.config import BlackboardConfig
from gliding_core.errors import InvalidNodeError
from gliding_core.jsonld import preview
from tests.test_core.blackboard.test_blackboard_graph import make_backend

TASK = "iri://task/t1"
ALL = "SELECT ?s ?p ?o WHERE { { ?s ?p ?o } UNION { GRAPH ?g { ?s ?p ?o } } }"


@pytest.fixture(params=["memory", "disk", "server"])
def board(request: pytest.FixtureRequest, tmp_path: Path, store: L0Store) -> Iterator[Blackboard]:
    backend: GraphBackend = make_backend(request.param, tmp_path, request)
    value = Blackboard(backend, store=store, config=BlackboardConfig(flush_interval_s=0.0))
    value.write([{"@id": "urn:n:1", "@type": "Plan"}], task=TASK, area="plan")
    yield value
    value.close()


@pytest.mark.parametrize(
    ("graphs", "named"),
    [("urn:g", "'urn:g'"), (["bad iri"], "'bad iri'"), ([5], "5"), (5, "5"), ([None], "None")],
)
def test_a_query_over_bad_graphs_is_refused_naming_them(
    board: Blackboard, graphs: Any, named: str
) -> None:
    with pytest.raises(InvalidInputError, match=named) as refused:
        board.query(ALL, graphs=graphs)
    assert type(refused.value) is InvalidInputError  # not a backend's error translated


@pytest.mark.parametrize("name", ["bad name", "", "?s", "1-x"])
def test_a_binding_of_a_bad_variable_name_is_refused_naming_it(
    board: Blackboard, name: str
) -> None:
    with pytest.raises(InvalidInputError, match=repr(name).replace("?", r"\?")):
        board.query(ALL, bindings={name: ox.NamedNode("urn:n:1")})


def test_a_query_over_no_graph_sees_nothing_on_every_backend(board: Blackboard) -> None:
    assert board.query(ALL).rows  # the node and its bookkeeping are there
    assert board.query(ALL, graphs=[]).rows == ()
    assert board.query("ASK { GRAPH ?g { ?s ?p ?o } }", graphs=[]).boolean is False
    assert board.query("CONSTRUCT { ?s ?p ?o } WHERE { ?s ?p ?o }", graphs=[]).triples == ()
    assert is_bookkeeping(EMPTY_GRAPH)  # a name the blackboard refuses to write nodes into
    with pytest.raises(InvalidInputError, match="bookkeeping"):
        board.write([{"@id": "urn:n:2"}], graph=EMPTY_GRAPH)


def test_an_agent_reading_one_area_sees_only_it(board: Blackboard) -> None:
    board.write([{"@id": "urn:n:k", "@type": "Fact"}], task=TASK, area="knowledge")
    planner = board.agent("p", role="plan", task=TASK)
    rows = planner.query("SELECT ?s WHERE { ?s a ?t }", areas=["knowledge"]).values()
    assert rows == [{"s": "urn:n:k"}]


def _calls(board: Blackboard) -> dict[str, tuple[Callable[[], object], str]]:
    """Each public method given a bad sequence or name, with what the message must name.

    Several were refused before the audit too (tags, nodes, read, by_graph...): kept here so
    that every public method that takes a sequence or a name is checked in one place.
    """
    return {
        "delete a string": (
            lambda: board.delete("urn:n:1"),
            "a list (or a tuple, a set), got 'urn:n:1'",
        ),
        "delete an int": (lambda: board.delete(5), "5"),  # type: ignore[arg-type]
        "delete a bad IRI": (lambda: board.delete(["urn:n:1", "no iri"]), "'no iri'"),
        "delete with a bad source": (
            lambda: board.delete(["urn:n:1"], source=5),  # type: ignore[arg-type]
            "5",
        ),
        "forget a string": (
            lambda: board.forget("urn:n:1"),
            "a list (or a tuple, a set), got 'urn:n:1'",
        ),
        "read_many a string": (
            lambda: board.read_many("urn:n:1"),
            "a list (or a tuple, a set), got 'urn:n:1'",
        ),
        "read_many an int": (lambda: board.read_many(5), "5"),  # type: ignore[arg-type]
        "by_task areas a string": (
            lambda: board.by_task(TASK, areas="plan"),
            "areas must be a list (or a tuple, a set), got 'plan'",
        ),
        "by_type areas a string": (
            lambda: board.by_type("Plan", task=TASK, areas="plan"),
            "areas must be a list (or a tuple, a set), got 'plan'",
        ),
        "write with a source int": (
            lambda: board.write([{"@id": "urn:n:3"}], task=TASK, area="plan", source=5),  # type: ignore[arg-type]
            "5",
        ),
        "write with a blank source": (
            lambda: board.write([{"@id": "urn:n:3"}], task=TASK, area="plan", source=" "),
            "' '",
        ),
        "write tags a string": (
            lambda: board.write([{"@id": "urn:n:3"}], task=TASK, area="plan", tags="draft"),
            "'draft'",
        ),
        "write nodes a dict": (
            lambda: board.write({"@id": "urn:n:3"}, task=TASK, area="plan"),  # type: ignore[arg-type]
            "urn:n:3",
        ),
        "mirror nodes a dict": (lambda: board.mirror(TASK, "plan", {"@id": "urn:n:3"}), "urn:n:3"),  # type: ignore[arg-type]
        "read an int": (lambda: board.read(5), "5"),  # type: ignore[arg-type]
        "by_graph a bad IRI": (lambda: board.by_graph("no iri"), "'no iri'"),
        "by_task a bad task": (lambda: board.by_task(5), "5"),  # type: ignore[arg-type]
        "by_type an int": (lambda: board.by_type(5), "5"),  # type: ignore[arg-type]
        "flush a bad task": (lambda: board.flush(task=5), "5"),  # type: ignore[arg-type]
        "agent a bad name": (lambda: board.agent(5, role="plan", task=TASK), "5"),  # type: ignore[arg-type]
        "agent a bad task": (lambda: board.agent("a", role="plan", task="no iri"), "'no iri'"),
    }


@pytest.mark.parametrize("label", list(_calls(Blackboard.__new__(Blackboard))))
def test_every_public_method_refuses_a_bad_sequence_or_name_naming_it(
    board: Blackboard, label: str
) -> None:
    call, named = _calls(board)[label]
    with pytest.raises(InvalidInputError, match=re.escape(named)):
        call()
    assert board.read("urn:n:1") is not None  # nothing deleted
    assert board.read("urn:n:3") is None  # nothing written
    assert board.flush() == 1  # only the fixture's node was ever dirty


def test_a_board_without_write_back_checks_the_task_it_flushes() -> None:
    with Blackboard(EmbeddedGraph()) as board:
        with pytest.raises(InvalidInputError, match="5"):
            board.flush(task=5)  # type: ignore[arg-type]
        assert board.flush(task=TASK) == 0


@pytest.mark.parametrize(
    "context",
    [
        {"term": {"@id": "urn:v:term", "@context": "https://example.org/remote.jsonld"}},
        {"@vocab": "urn:v:", "Kind": {"@id": "urn:v:Kind", "@context": "https://example.org/c"}},
    ],
)
def test_a_scoped_remote_context_is_an_invalid_node(board: Blackboard, context: Any) -> None:
    node = {"@context": context, "@id": "urn:n:scoped", "term": {"x": 1}, "@type": "Kind"}
    with pytest.raises(InvalidNodeError, match="urn:n:scoped"):
        board.write([node], task=TASK, area="plan")
    assert board.read("urn:n:scoped") is None


def test_by_type_without_a_task_keeps_to_the_areas_it_is_given(board: Blackboard) -> None:
    other = "iri://task/t2"
    board.write([{"@id": "urn:n:4", "@type": "Plan"}], task=other, area="plan")
    board.write([{"@id": "urn:n:5", "@type": "Plan"}], task=other, area="knowledge")
    board.write([{"@id": "urn:n:6", "@type": "Plan"}], graph="urn:graph:free")
    every = ["urn:n:1", "urn:n:4", "urn:n:5", "urn:n:6"]
    assert [n.iri for n in board.by_type("Plan")] == every
    assert [n.iri for n in board.by_type("Plan", areas=["plan"])] == ["urn:n:1", "urn:n:4"]
    assert [n.iri for n in board.by_type("Plan", areas=["knowledge"])] == ["urn:n:5"]
    with pytest.raises(InvalidInputError, match="'nope'"):
        board.by_type("Plan", areas=["nope"])


@pytest.mark.parametrize("path", [5, b"graph", 1.5])
def test_opening_a_blackboard_at_a_bad_path_is_refused_naming_it(path: object) -> None:
    with pytest.raises(InvalidInputError, match=repr(path)):
        Blackboard.open(path)  # type: ignore[arg-type]


def test_a_refused_option_leaves_the_graph_directory_free(tmp_path: Path) -> None:
    with pytest.raises(InvalidInputError) as refused:
        Blackboard.open(tmp_path / "graph", config=5)
    # The error's traceback holds the half-built board, and that its graph: still not locked.
    assert refused.traceback
    with Blackboard.open(tmp_path / "graph") as board:
        assert board.backend.kind == "disk"


def test_no_area_is_no_node_on_every_backend(board: Blackboard) -> None:
    board.write([{"@id": "urn:n:7", "@type": "Plan"}], task=TASK, area="execution")
    assert board.by_task(TASK, areas=[]) == []
    assert board.by_type("Plan", task=TASK, areas=[]) == []
    assert board.nodes.dirty([]) == []  # the write-back of no graph writes nothing
    assert [n.iri for n in board.by_task(TASK, areas=["plan"])] == ["urn:n:1"]


@pytest.mark.parametrize(
    ("option", "value"),
    [
        ("config", 5),
        ("store", "l0.sqlite3"),
        ("bus", object()),
        ("permissions", {"do": {"execution": ["read"]}}),
        ("coordination", "x"),
    ],
)
def test_an_option_of_the_wrong_kind_is_refused_naming_it(option: str, value: object) -> None:
    bus = EventBus()
    coordination = Coordination(CoordinationDB(None), bus=bus)
    options: dict[str, Any] = {"bus": bus, "coordination": coordination, option: value}
    with pytest.raises(
        InvalidInputError, match=f"^{option} must be .*got {re.escape(preview(value))}"
    ):
        Blackboard(EmbeddedGraph(), **options)
    if option != "coordination":  # nothing was attached: the registries mirror nowhere
        assert coordination.mirror is None
        assert coordination.tasks.mirror is None
    coordination.close()
