"""The fast paths of a node write read the same JSON-LD text, and make the same RDF, as the
plain ones they replace."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gliding_core.blackboard.nodes import NodeWrite, _document, rdf_of
from gliding_core.blackboard.vocabulary import CONTEXT_URL, with_context
from gliding_core.jsonld import canonical_json

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
