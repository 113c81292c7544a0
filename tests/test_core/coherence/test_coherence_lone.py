"""The lone write's direct path: taken when nothing of a group's steps is needed, and alike.

A lone write the directory already agrees with (an agent's, not refused, every node at the
source as its record holds it, no stale base, no other valid copy) skips the group's sync,
admission and stepping passes (``commits._plain``). Each scenario here runs twice, once as
the board runs it and once with the direct path turned off, and must leave the same records,
events, refusals and held copies. And the directory of one process keeps what it knows of each
node in plain tuples of atoms, which the garbage collector stops tracking.
"""

from __future__ import annotations

import gc
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from gliding_core.blackboard.board import Blackboard
from gliding_core.blackboard.graph import EmbeddedGraph
from gliding_core.bus import Event, EventBus
from gliding_core.coherence import commits as commits_module
from gliding_core.coherence.coordinator import CoherenceCoordinator
from gliding_core.coherence.directory import Directory, LocalDirectory, SQLiteDirectory
from gliding_core.config import BlackboardConfig
from gliding_core.errors import GlidingError

TASK = "iri://task/lone"
QUIET = BlackboardConfig(flush_interval_s=0.0)
IRIS = [f"urn:lone:{name}" for name in ("a", "b", "c", "d")]


def node(iri: str, text: str) -> dict[str, Any]:
    return {"@id": iri, "@type": "Step", "text": text}


def scenario(board: Blackboard) -> list[Any]:
    """Writes, updates, reads, refusals and deletes of a few agents; what each call returned."""
    do, other = board.agent("do", role="do", task=TASK), board.agent("other", role="do", task=TASK)
    checker = board.agent("check", role="check", task=TASK)  # may not write execution
    a, b, c, d = IRIS
    calls: list[Callable[[], Any]] = [
        lambda: do.write([node(a, "1")], area="execution"),  # new: direct
        lambda: do.write([node(a, "2")], area="execution"),  # its own copy: direct
        lambda: do.write([node(b, "1"), node(c, "1")], area="execution", based_on=0),
        lambda: other.read(a),  # a shared copy of another agent
        lambda: do.write([node(a, "3")], area="execution"),  # invalidates it: the group's way
        lambda: other.write([node(a, "late")], area="execution", based_on=1),  # stale
        lambda: other.write([node(b, "2")], area="execution", based_on=1),  # with a base
        lambda: checker.write([node(d, "x")], area="execution"),  # refused by its check
        lambda: board.write([node(d, "sys")], task=TASK, area="execution"),  # the system's
        lambda: do.read(d),
        lambda: do.write([node(d, "mine")], area="execution"),
        lambda: do.delete([c]),  # deleted by an agent holding it
        lambda: do.write([node(c, "again")], area="execution", based_on=0),  # over the tombstone
        lambda: other.delete([a]),
    ]
    results: list[Any] = []
    for call in calls:
        try:
            value = call()
        except GlidingError as exc:
            results.append((type(exc).__name__, str(exc)))
            continue
        if isinstance(value, list):
            results.append([(n.iri, n.generation, n.node) for n in value])
        elif value is not None and hasattr(value, "generation"):
            results.append((value.iri, value.generation, value.node))
        else:
            results.append(value)
    return results


def run(tmp_path: Path, kind: str, direct: bool, monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """Run the scenario on a fresh board; return its results, records, events and held copies."""
    taken: list[str] = []
    plain = commits_module._plain

    def counted(*args: Any) -> bool:
        answer = direct and plain(*args)
        taken.append("direct" if answer else "group")
        return answer

    monkeypatch.setattr(commits_module, "_plain", counted)
    directory: Directory = (
        LocalDirectory() if kind == "local" else SQLiteDirectory(tmp_path / f"{direct}.sqlite3")
    )
    bus = EventBus()
    events: list[Event] = []
    bus.subscribe(events.append)
    with Blackboard(EmbeddedGraph(), bus=bus, config=QUIET, directory=directory) as board:
        results = scenario(board)
        coherence = board.coherence
        assert isinstance(coherence, CoherenceCoordinator)
        records = [tuple(directory.record(iri)) for iri in IRIS]
        held = sorted((key, held[:2]) for key, held in coherence.held.by_key.items())
    seen = [(e.type, {k: v for k, v in e.payload.items() if k != "timestamp"}) for e in events]
    monkeypatch.setattr(commits_module, "_plain", plain)
    return [results, records, seen, held, taken]


@pytest.fixture(params=["local", "sqlite"])
def kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def test_the_direct_path_is_taken_for_lone_plain_writes_only(
    tmp_path: Path, kind: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    taken = run(tmp_path, kind, True, monkeypatch)[-1]
    assert taken == [
        "direct",  # a new node
        "direct",  # over the writer's own copy
        "direct",  # two new nodes, based on 0
        "group",  # past another agent's shared copy (invalidated, announced)
        "group",  # a stale base (refused)
        "group",  # over another agent's modified copy
        "group",  # refused by its check
        "group",  # the system's write
        "direct",  # over the writer's copy, read after the system's write
        "group",  # a delete (its source step reads the value anew)
        "direct",  # over a tombstone, based on 0
        "group",  # a delete of a node another agent holds
    ]


def test_the_direct_path_leaves_what_the_group_path_leaves(
    tmp_path: Path, kind: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    direct = run(tmp_path, kind, True, monkeypatch)
    general = run(tmp_path, kind, False, monkeypatch)
    assert set(general[-1]) == {"group"}
    assert direct[:-1] == general[:-1]  # results and refusals, records, events, held copies


def test_a_local_directory_keeps_nothing_the_collector_tracks() -> None:
    directory = LocalDirectory()
    with Blackboard(EmbeddedGraph(), config=QUIET, directory=directory) as board:
        agent = board.agent("do", role="do", task=TASK)
        for index in range(50):
            agent.write([node(f"urn:lone:n{index}", str(index))], area="execution")
        agent.write([node("urn:lone:n0", "again")], area="execution")
        coherence = board.coherence
        assert isinstance(coherence, CoherenceCoordinator)
        gc.collect()
        kept = list(directory._records.values()) + list(coherence.held.by_key.values())
        assert len(kept) == 100
        assert not any(gc.is_tracked(entry) for entry in kept)
        record = directory.record("urn:lone:n0")
        assert (record.generation, record.value) == (2, node("urn:lone:n0", "again"))
        assert directory.holdings("do") == sorted(f"urn:lone:n{i}" for i in range(50))


def test_a_held_copy_of_an_integer_over_64_bits_reads_back_whole() -> None:
    with Blackboard(EmbeddedGraph(), config=QUIET) as board:
        agent = board.agent("do", role="do", task=TASK)
        big = {"@id": "urn:lone:big", "@type": "Step", "count": 2**70}
        agent.write([big], area="execution")
        coherence = board.coherence
        assert isinstance(coherence, CoherenceCoordinator)
        reading = coherence.read("do", "urn:lone:big")
        assert (reading.kind, reading.value["count"]) == ("hit", 2**70)
