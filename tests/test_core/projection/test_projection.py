"""L3 frames: each shipped frame over a plan/do/check/act round, scoping, binding, registration."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pyoxigraph as ox
import pytest
from pyld import jsonld

from gliding_core import FrameNotFoundError, InvalidInputError
from gliding_core.blackboard.board import Blackboard, EmbeddedGraph
from gliding_core.blackboard.vocabulary import VOCAB, document_loader
from gliding_core.bus import EventBus
from gliding_core.projection import SHIPPED, Frame, Projector
from gliding_core.projection.frames import ParamKind
from gliding_core.tokens import TokenCounter

TASK = "urn:ex:task:login"
OTHER = "urn:ex:task:billing"


def pdca_round(board: Blackboard, task: str, tag: str) -> dict[str, str]:
    """Write what a plan/do/check/act round writes; return the IRIs by what they are."""
    iris = {name: f"{task}/{name}" for name in ("plan", "step", "art", "res", "rev", "dec")}
    iris |= {"err": f"{task}/err", "5w": f"{task}/5w", "fact": f"{task}/fact", "task": task}
    board.write(
        [
            {
                "@id": task,
                "@type": "Task",
                "summary": f"{tag}: build the feature",
                "goal": f"{tag} goal",
                "successCriteria": f"{tag} tests pass",
                "status": "running",
            },
            {"@id": iris["5w"], "@type": "FiveW2H", "what": f"{tag} what", "why": "users"},
        ],
        task=task,
        area="tasks",
    )
    board.write(
        [{"@id": iris["fact"], "@type": "Fact", "summary": f"{tag} known fact"}],
        task=task,
        area="knowledge",
    )
    board.write(
        [
            {"@id": iris["plan"], "@type": "Plan", "task": {"@id": task}, "summary": f"{tag} plan"},
            {
                "@id": iris["step"],
                "@type": "PlanStep",
                "plan": {"@id": iris["plan"]},
                "summary": f"{tag} write the form",
                "instructions": "use html",
                "inputData": {"format": "html", "detail": {"width": 3}},
            },
        ],
        task=task,
        area="plan",
    )
    board.write(
        [
            {
                "@id": iris["art"],
                "@type": "Artifact",
                "summary": f"{tag} form.html",
                "storagePath": "/src/form.html",
                "results": {"@id": iris["res"]},
            },
            {"@id": iris["res"], "@type": "TestRun", "summary": f"{tag} 3 passed", "passed": 3},
            {"@id": iris["err"], "@type": "Error", "agent": "do-1", "errorType": "Timeout"},
        ],
        task=task,
        area="execution",
    )
    board.write(
        [{"@id": iris["rev"], "@type": "Review", "summary": f"{tag} ok", "verdict": "pass"}],
        task=task,
        area="review",
    )
    board.write(
        [{"@id": iris["dec"], "@type": "Decision", "summary": f"{tag} merge", "decision": "go"}],
        task=task,
        area="decision",
    )
    return iris


# What each shipped frame must show of a round (by the keys of ``pdca_round``).
EXPECTED = {
    "summary_only": {"task", "fact", "plan", "step", "art", "res", "rev", "dec"},
    "pa_init": {"task", "plan", "fact"},
    "da_input": {"plan", "step"},
    "ca_review": {"task", "art"},
    "aa_decision": {"rev", "dec"},
    "health_check": {"task"},
    "error_analysis": {"err"},
    "reference_only": {"task", "5w", "fact", "plan", "step", "art", "res", "err", "rev", "dec"},
    "5w2h_summary": {"5w"},
}


@pytest.fixture
def board() -> Iterator[Blackboard]:
    with Blackboard(EmbeddedGraph(), bus=EventBus()) as value:
        yield value


@pytest.fixture
def rounds(board: Blackboard) -> tuple[dict[str, str], dict[str, str]]:
    return pdca_round(board, TASK, "login"), pdca_round(board, OTHER, "billing")


@pytest.fixture
def projector(board: Blackboard, counter: TokenCounter) -> Iterator[Projector]:
    value = Projector(board, counter)
    yield value
    value.close()


@pytest.fixture(scope="module")
def counter() -> TokenCounter:
    return TokenCounter()


def test_nine_frames_ship() -> None:
    assert [f.name for f in SHIPPED] == list(EXPECTED)


@pytest.mark.parametrize("name", list(EXPECTED))
def test_each_frame_shows_its_round_and_nothing_of_another_task(
    projector: Projector, rounds: tuple[dict[str, str], dict[str, str]], name: str
) -> None:
    mine, theirs = rounds
    projection = projector.project(TASK, name, budget=4_000)
    assert projection.step == "full"
    assert set(projection.iris) == {mine[k] for k in EXPECTED[name]}
    text = projection.text
    assert "billing" not in text
    assert OTHER not in text
    assert not set(theirs.values()) & set(projection.iris)


def test_projection_is_json_ld_a_processor_reads(
    projector: Projector, rounds: tuple[dict[str, str], dict[str, str]]
) -> None:
    mine, _ = rounds
    projection = projector.project(TASK, "da_input", budget=4_000)
    expanded = jsonld.expand(projection.document, {"documentLoader": document_loader})
    step = next(n for n in expanded if n["@id"] == mine["step"])
    assert step["@type"] == [VOCAB + "PlanStep"]
    assert step[VOCAB + "instructions"] == [{"@value": "use html"}]
    # The nested object is embedded (no skolem IRI) down to its own nested object.
    nested = json.loads(projection.text)["@graph"][1]["inputData"]
    assert nested == {"format": "html", "detail": {"width": 3}}
    assert "genid" not in projection.text
    assert "selected" not in projection.text


def test_parameters_narrow_the_frame(
    projector: Projector, board: Blackboard, rounds: tuple[dict[str, str], dict[str, str]]
) -> None:
    mine, _ = rounds
    board.write(
        [{"@id": f"{TASK}/art2", "@type": "Artifact", "summary": "second"}],
        task=TASK,
        area="execution",
    )
    every = projector.project(TASK, "ca_review", budget=4_000)
    one = projector.project(TASK, "ca_review", budget=4_000, params={"artifact": mine["art"]})
    assert f"{TASK}/art2" in every.iris
    assert set(one.iris) == {TASK, mine["art"]}
    nobody = projector.project(TASK, "error_analysis", params={"agent": "someone-else"})
    assert nobody.iris == ()


def test_a_literal_that_tries_to_close_the_query_is_only_a_literal(
    projector: Projector, board: Blackboard, rounds: tuple[dict[str, str], dict[str, str]]
) -> None:
    hostile = 'do-1" } } ; DROP ALL ; SELECT * WHERE { ?s ?p ?o } #'
    projection = projector.project(TASK, "error_analysis", params={"agent": hostile})
    assert projection.iris == ()
    board.write(
        [{"@id": f"{TASK}/err2", "@type": "Error", "agent": hostile}], task=TASK, area="execution"
    )
    again = projector.project(TASK, "error_analysis", params={"agent": hostile})
    assert again.iris == (f"{TASK}/err2",)
    assert len(board.by_task(TASK)) == 11  # nothing was dropped


def test_an_iri_parameter_must_be_an_iri(projector: Projector) -> None:
    with pytest.raises(InvalidInputError, match="plan"):
        projector.project(TASK, "da_input", params={"plan": "not an iri> } #"})
    with pytest.raises(InvalidInputError, match="frame 'da_input' takes parameters"):
        projector.project(TASK, "da_input", params={"artifact": "urn:ex:a"})
    with pytest.raises(InvalidInputError, match="task IRI"):
        projector.project("no task", "da_input")
    with pytest.raises(FrameNotFoundError, match="plan_detail"):
        projector.project(TASK, "plan_detail")
    with pytest.raises(InvalidInputError, match="exclude"):
        projector.project(TASK, "da_input", exclude="urn:ex:a")  # type: ignore[arg-type]


def test_users_register_frames_the_same_way(
    projector: Projector, rounds: tuple[dict[str, str], dict[str, str]]
) -> None:
    mine, _ = rounds
    frame = Frame(
        "verdicts",
        "reviews with a given verdict",
        "?node a gh:Review ; gh:verdict ?verdict .",
        "?node gh:verdict ?verdict .",
        params={"verdict": ParamKind.LITERAL},
        areas=("review",),
    )
    projector.register(frame)
    assert projector.project(TASK, "verdicts", params={"verdict": "pass"}).iris == (mine["rev"],)
    assert projector.project(TASK, "verdicts", params={"verdict": "fail"}).iris == ()
    with pytest.raises(InvalidInputError, match="exists"):
        projector.register(frame)


@pytest.mark.parametrize(
    ("where", "message"),
    [
        ("?node a ?t . } INSERT DATA { <urn:a> <urn:b> <urn:c> } #", "does not parse|UPDATE"),
        ("?node a ?t . SERVICE <http://evil/> { ?node ?p ?o }", "SERVICE"),
    ],
)
def test_a_frame_must_be_a_local_query(where: str, message: str) -> None:
    with pytest.raises(InvalidInputError, match=message):
        Frame("bad", "", where, "?node a ?t .")


def test_frame_fields_are_checked() -> None:
    with pytest.raises(InvalidInputError, match="name"):
        Frame("no spaces allowed", "", "?node a ?t .", "")
    with pytest.raises(InvalidInputError, match="max_nodes"):
        Frame("x", "", "?node a ?t .", "", max_nodes=0)
    with pytest.raises(InvalidInputError, match="kind"):
        Frame("x", "", "?node a ?t .", "", params={"p": "number"})
    with pytest.raises(InvalidInputError, match="area"):
        Frame("x", "", "?node a ?t .", "", areas=("attic",))


def test_bindings_are_terms_not_text() -> None:
    frame = next(f for f in SHIPPED if f.name == "error_analysis")
    bound = frame.bindings(TASK, {"agent": "agent-zq7"})
    assert bound == {"agent": ox.Literal("agent-zq7")}
    assert "zq7" not in frame.sparql


def test_frames_project_the_same_over_a_sparql_endpoint(
    oxigraph_server: str, counter: TokenCounter
) -> None:
    """The endpoint binds parameters with a trailing VALUES clause: the same answers."""
    from gliding_core.blackboard.graph import SparqlEndpoint

    endpoint = SparqlEndpoint(oxigraph_server)
    endpoint.update("CLEAR ALL")
    texts: dict[str, list[str]] = {}
    for kind, backend in (("memory", EmbeddedGraph()), ("server", endpoint)):
        with Blackboard(backend) as board:
            mine = pdca_round(board, TASK, "login")
            pdca_round(board, OTHER, "billing")
            projector = Projector(board, counter)
            texts[kind] = [projector.project(TASK, n, budget=4_000).text for n in EXPECTED]
            texts[kind].append(
                projector.project(TASK, "ca_review", params={"artifact": mine["art"]}).text
            )
            texts[kind].append(
                projector.project(TASK, "error_analysis", params={"agent": "do-1"}).text
            )
    assert texts["server"] == texts["memory"]


def test_a_processor_error_is_a_gliding_error() -> None:
    from gliding_core.projection.compaction import compact

    with pytest.raises(InvalidInputError, match="compacting a projection"):
        compact([{"@id": "urn:ex:a", VOCAB + "p": [{"@list": [{"@list": "x"}]}]}])


@pytest.mark.parametrize("budget", [60, 150, 4_000])
def test_remembered_compactions_and_counts_project_as_a_fresh_process(
    projector: Projector, rounds: tuple[dict[str, str], dict[str, str]], budget: int
) -> None:
    """Each frame, with nothing remembered and with everything remembered: the same text."""
    from gliding_core.projection.projector import forget

    for frame in SHIPPED:
        forget()
        projector.cache.clear()
        fresh = projector.project(TASK, frame.name, budget=budget)
        projector.cache.clear()
        remembered = projector.project(TASK, frame.name, budget=budget)
        assert remembered.text == fresh.text
        assert remembered.tokens == fresh.tokens


def test_a_changed_node_is_compacted_again(
    projector: Projector, board: Blackboard, rounds: tuple[dict[str, str], dict[str, str]]
) -> None:
    mine, _ = rounds
    before = projector.project(TASK, "da_input", budget=4_000)
    node = board.read(mine["step"])
    assert node is not None
    board.write([{**node.node, "instructions": "use markdown"}], graph=node.graph)
    after = projector.project(TASK, "da_input", budget=4_000)
    assert "use html" in before.text
    assert "use markdown" in after.text
    assert "use html" not in after.text
