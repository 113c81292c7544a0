"""Cache hits of an embedded blackboard: no lock on the hot path, and still never an older node.

Four agent threads reading one node while another agent rewrites it is the benchmark's read
phase with a writer added: every reader sees the node's generations in order, each with the
value written at it.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest

from gliding_core.blackboard.board import Blackboard
from gliding_core.blackboard.graph import EmbeddedGraph
from gliding_core.config import BlackboardConfig

TASK = "iri://task/hits"
IRI = "urn:test:hits:n"


class RefusedLock:
    """A lock that fails the test when taken."""

    def __enter__(self) -> None:
        raise AssertionError("a cache hit took the cache lock")

    def __exit__(self, *exc: object) -> None:
        return None


@pytest.fixture
def board() -> Iterator[Blackboard]:
    with Blackboard(EmbeddedGraph(), config=BlackboardConfig(flush_interval_s=0.0)) as board:
        yield board


def test_a_hit_on_an_embedded_board_takes_no_lock(board: Blackboard) -> None:
    reader = board.agent("reader", role="do", task=TASK)
    reader.write([{"@id": IRI, "@type": "Step", "summary": "s"}], area="execution")
    assert reader.read(IRI) is not None  # cached, with a registered copy
    lock = board.nodes._cache_lock
    board.nodes._cache_lock = RefusedLock()  # type: ignore[assignment]
    try:
        node = reader.read(IRI)
        assert node is not None
        assert node.node["summary"] == "s"
        assert board.read(IRI) == node
    finally:
        board.nodes._cache_lock = lock


def test_readers_in_threads_see_every_write_in_order(board: Blackboard) -> None:
    writer = board.agent("writer", role="do", task=TASK)
    writer.write([{"@id": IRI, "@type": "Step", "summary": "1"}], area="execution")
    readers = [board.agent(f"reader-{i}", role="do", task=TASK) for i in range(4)]
    seen: list[list[tuple[int, str]]] = [[] for _ in readers]
    done = threading.Event()

    def read(index: int) -> None:
        while not done.is_set():
            node = readers[index].read(IRI)
            assert node is not None
            seen[index].append((node.generation, node.node["summary"]))

    threads = [threading.Thread(target=read, args=(i,)) for i in range(len(readers))]
    for thread in threads:
        thread.start()
    try:
        for version in range(2, 201):
            writer.write([{"@id": IRI, "@type": "Step", "summary": str(version)}], area="execution")
    finally:
        done.set()
        for thread in threads:
            thread.join()
    last = readers[0].read(IRI)
    assert last is not None
    assert (last.generation, last.node["summary"]) == (200, "200")
    for readings in seen:
        assert readings, "a reader read nothing"
        assert all(summary == str(generation) for generation, summary in readings)
        generations = [generation for generation, _ in readings]
        assert generations == sorted(generations)
