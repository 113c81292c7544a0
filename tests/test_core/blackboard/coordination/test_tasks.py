"""Tasks on a blackboard: a mirrored registry refuses a name its graph cannot hold, through the
registry and through an agent's handle.

The registry's own promises run on every coordination store in the contract suite
(tests/test_core/contracts/test_coordination_store.py).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from gliding_core.blackboard.board import Blackboard
from gliding_core.blackboard.coordination.registries import Coordination
from gliding_core.blackboard.graph import EmbeddedGraph
from gliding_core.config import BlackboardConfig
from gliding_core.errors import InvalidInputError


@pytest.fixture
def board() -> Iterator[Blackboard]:
    """A real blackboard over an in-memory coordination store, mirroring its tasks and agents."""
    value = Blackboard(
        EmbeddedGraph(),
        config=BlackboardConfig(flush_interval_s=0.0),
        coordination=Coordination.open(None),
    )
    yield value
    value.close()


@pytest.mark.parametrize(
    ("kwargs", "named"),
    [
        ({"iri": "foo"}, "task IRI .* got 'foo'"),
        ({"parent": "bar"}, "parent IRI .* got 'bar'"),
        ({"depends_on": ["urn:t:known", "baz"]}, "dependency IRI .* got 'baz'"),
    ],
)
def test_a_mirrored_registry_refuses_a_name_the_graph_cannot_hold(
    board: Blackboard,
    kwargs: dict[str, Any],
    named: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    coordination = board.coordination
    assert coordination is not None
    coordination.tasks.register("urn:t:known")
    with pytest.raises(InvalidInputError, match=named):
        coordination.tasks.register(**{"iri": "urn:t:a", **kwargs})
    assert [t.iri for t in coordination.tasks.tasks()] == ["urn:t:known"]  # nothing written
    assert "mirroring" not in caplog.text
    assert [n.iri for n in board.by_type("Task")] == ["urn:t:known"]


def test_a_subtask_name_the_graph_cannot_hold_is_refused_through_the_handle(
    board: Blackboard,
) -> None:
    coordination = board.coordination
    assert coordination is not None
    coordination.tasks.register("urn:t:root")
    planner = board.agent("planner", role="plan", task="urn:t:root")
    with pytest.raises(InvalidInputError, match="'sub'"):
        planner.register_subtask("sub")
    assert coordination.tasks.subtree("urn:t:root") == ["urn:t:root"]
    assert planner.register_subtask("urn:t:sub").parent == "urn:t:root"
