"""Properties of the node layer: after any writes and deletes, the graph holds exactly the RDF
of the live nodes (nothing lingers), and each node's generation counts its writes."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from gliding_core.blackboard.board import Blackboard
from gliding_core.blackboard.graph import EmbeddedGraph
from gliding_core.blackboard.rdf import rdf_of
from gliding_core.blackboard.vocabulary import area_graph
from gliding_core.config import BlackboardConfig

TASK = "iri://task/p"
IRIS = [f"urn:p:{i}" for i in range(3)]
AREAS = ["plan", "shared"]

scalars = st.one_of(st.text(max_size=5), st.integers(-5, 5), st.booleans())
values = st.recursive(
    scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3),
        st.dictionaries(st.sampled_from(["k", "m", "n"]), inner, min_size=1, max_size=2),
        st.builds(lambda i: {"@id": i}, st.sampled_from(IRIS)),
    ),
    max_leaves=6,
)
properties = st.dictionaries(st.sampled_from(["a", "b", "c"]), values, max_size=3)
steps = st.lists(
    st.one_of(
        st.tuples(st.just("write"), st.sampled_from(IRIS), st.sampled_from(AREAS), properties),
        st.tuples(st.just("delete"), st.sampled_from(IRIS), st.just(""), st.just({})),
    ),
    max_size=12,
)


@settings(max_examples=25, deadline=None)
@given(steps)
def test_the_graph_holds_exactly_the_live_nodes(script: list[tuple[str, str, str, Any]]) -> None:
    board = Blackboard(EmbeddedGraph(), config=BlackboardConfig(flush_interval_s=0.0))
    live: dict[str, tuple[dict[str, Any], str]] = {}
    writes = dict.fromkeys(IRIS, 0)
    for action, iri, area, props in script:
        if action == "write":
            node = {"@id": iri, **props}
            board.write([node], task=TASK, area=area)
            live[iri] = (node, area_graph(TASK, area))
            writes[iri] += 1
        else:
            board.delete([iri])
            live.pop(iri, None)
    expected = {q for node, graph in live.values() for q in map(str, rdf_of(node, graph))}
    quads = {
        str(q)
        for q in board.backend.store.quads_for_pattern(None, None, None)  # type: ignore[attr-defined]
        if str(q.graph_name.value).startswith("urn:gliding-horse:graph:")
    }
    assert quads == expected
    board.nodes.forget_cache()
    for iri in IRIS:
        found = board.read(iri)
        if iri in live:
            assert found is not None
            assert found.node == live[iri][0]
            assert found.generation == writes[iri]
        else:
            assert found is None
