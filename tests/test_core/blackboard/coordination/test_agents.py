"""Agents on a blackboard and in a memory: a mirrored registry refuses a task its graph cannot
hold, and the agent sweeper stops when its blackboard or memory closes.

The registry's own promises (registration, statuses, heartbeats that renew leases, the sweeper)
run on every coordination store in the contract suite
(tests/test_core/contracts/test_coordination_store.py).
"""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from gliding_core import Memory, MemoryConfig
from gliding_core.blackboard.board import Blackboard
from gliding_core.blackboard.coordination.agents import agent_iri
from gliding_core.blackboard.coordination.registries import Coordination
from gliding_core.blackboard.coordination.sqlite import CoordinationDB
from gliding_core.blackboard.graph import EmbeddedGraph
from gliding_core.config import BlackboardConfig, CoordinationConfig
from gliding_core.errors import InvalidInputError

QUIET = BlackboardConfig(flush_interval_s=0.0)


# -- names the graph cannot hold, and the sweeper's end with its blackboard or memory ---------


def test_a_mirrored_registry_refuses_a_task_the_graph_cannot_hold(
    caplog: pytest.LogCaptureFixture,
) -> None:
    coordination = Coordination(CoordinationDB(None, config=CoordinationConfig(sweep_interval_s=0)))
    with Blackboard(EmbeddedGraph(), config=QUIET, coordination=coordination) as board:
        with pytest.raises(InvalidInputError, match=r"task IRI .* got 'foo'"):
            coordination.agents.register("a", role="do", task="foo")
        assert coordination.agents.agents() == []
        assert board.read(agent_iri("a")) is None
        assert "mirroring" not in caplog.text
        # The agent's own name needs no IRI: its node is named by agent_iri.
        agent = coordination.agents.register("a<b>", role="do", task="urn:t:1")
        assert board.read(agent.iri) is not None


SWEEPER = "gliding-horse-agent-sweeper"


def _new_sweepers(before: set[threading.Thread]) -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == SWEEPER and t not in before]


@pytest.mark.parametrize("where", [None, "directory"])
def test_the_sweeper_stops_when_the_memory_closes(tmp_path: Path, where: str | None) -> None:
    before = set(threading.enumerate())
    config = MemoryConfig(embedder="hash", blackboard=QUIET)
    memory = Memory(config=config) if where is None else Memory.open(tmp_path / "m", config=config)
    try:
        memory.agent("doer", role="do", task="urn:t:1")
        sweepers = _new_sweepers(before)
        assert len(sweepers) == 1
        assert sweepers[0].is_alive()
    finally:
        memory.close()
    assert not sweepers[0].is_alive()


def test_the_sweeper_stops_when_the_blackboard_closes() -> None:
    before = set(threading.enumerate())
    board = Blackboard(EmbeddedGraph(), config=QUIET, coordination=Coordination.open(None))
    board.agent("doer", role="do", task="urn:t:1")
    sweepers = _new_sweepers(before)
    assert len(sweepers) == 1
    assert sweepers[0].is_alive()
    board.close()
    assert not sweepers[0].is_alive()
