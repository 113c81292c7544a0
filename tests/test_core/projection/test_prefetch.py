"""Prefetch: the two-hop walk and its scores, top-K into L2, the worker's queue, retries, close."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest

from gliding_core import ClosedError, InvalidInputError, L0Store, StorageError
from gliding_core.blackboard.board import Blackboard, EmbeddedGraph
from gliding_core.blackboard.vocabulary import area_graph
from gliding_core.bus import EventBus
from gliding_core.projection.prefetch import Prefetcher

TASK = "urn:ex:task:pf"


def entity(name: str, *links: str) -> dict[str, object]:
    return {
        "@id": f"urn:ex:{name}",
        "@type": "Entity",
        "summary": f"entity {name}",
        "related": [{"@id": f"urn:ex:{link}"} for link in links],
    }


@pytest.fixture
def world() -> Iterator[tuple[Blackboard, L0Store]]:
    # a -> b -> c -> d ; a -> e ; x -> b (an incoming edge) ; f is alone
    store = L0Store()
    store.put_many(
        [
            entity("a", "b", "e"),
            entity("b", "c"),
            entity("c", "d"),
            entity("d"),
            entity("e"),
            entity("x", "b"),
            entity("f"),
        ]
    )
    board = Blackboard(EmbeddedGraph())
    yield board, store
    board.close()
    store.close()


@pytest.fixture
def prefetcher(world: tuple[Blackboard, L0Store]) -> Iterator[Prefetcher]:
    board, store = world
    value = Prefetcher(board, store, backoff_s=0.01, poll_s=0.05)
    yield value
    value.close()


def test_scores_decay_by_half_per_hop_and_add_up(prefetcher: Prefetcher) -> None:
    scores = dict(prefetcher.related(["urn:ex:a"]))
    assert scores == {"urn:ex:b": 0.5, "urn:ex:e": 0.5, "urn:ex:c": 0.25, "urn:ex:x": 0.25}
    both = dict(prefetcher.related(["urn:ex:a", "urn:ex:c"]))
    assert "urn:ex:a" not in both  # a start is never prefetched
    assert "urn:ex:c" not in both
    assert both["urn:ex:b"] == 1.0  # one hop from each start
    assert both["urn:ex:d"] == 0.5


def test_blackboard_links_are_walked_too(
    world: tuple[Blackboard, L0Store], prefetcher: Prefetcher
) -> None:
    board, _ = world
    board.write(
        [{"@id": "urn:ex:plan-step", "@type": "PlanStep", "uses": {"@id": "urn:ex:f"}}],
        task=TASK,
        area="plan",
    )
    assert dict(prefetcher.related(["urn:ex:plan-step"])) == {"urn:ex:f": 0.5}
    assert dict(prefetcher.related(["urn:ex:f"])) == {"urn:ex:plan-step": 0.5}


def test_an_intent_pages_the_top_k_into_the_task_knowledge(
    world: tuple[Blackboard, L0Store],
) -> None:
    board, store = world
    with Prefetcher(board, store, top_k=2) as prefetcher:
        queued = prefetcher.on_intent(TASK, ["urn:ex:a"])
        assert queued == ["urn:ex:b", "urn:ex:e"]
        assert prefetcher.drain(timeout=30)
        node = board.read("urn:ex:b")
        assert node is not None
        assert node.graph == area_graph(TASK, "knowledge")
        assert not node.dirty  # L0's own copy: never written back unchanged
        assert prefetcher.stats().loaded == 2
        # Already on the blackboard: the next intent loads the next best instead.
        assert prefetcher.on_intent(TASK, ["urn:ex:a"]) == ["urn:ex:c", "urn:ex:x"]
        assert prefetcher.drain(timeout=30)
        assert prefetcher.loaded == ["urn:ex:b", "urn:ex:e", "urn:ex:c", "urn:ex:x"]


def test_mentions_in_a_message_are_intents(prefetcher: Prefetcher) -> None:
    queued = prefetcher.on_message(TASK, "look at urn:ex:d, then tell me.")
    assert queued == ["urn:ex:c", "urn:ex:b"]
    assert prefetcher.on_message(TASK, "nothing mentioned") == []


def test_a_new_task_is_an_intent(world: tuple[Blackboard, L0Store]) -> None:
    board, store = world
    store.put({"@id": "urn:ex:task:new", "@type": "Task", "about": {"@id": "urn:ex:e"}})
    with Prefetcher(board, store) as prefetcher:
        assert prefetcher.on_task("urn:ex:task:new")[:1] == ["urn:ex:e"]


def test_a_full_queue_drops_instead_of_blocking(world: tuple[Blackboard, L0Store]) -> None:
    board, store = world
    prefetcher = Prefetcher(board, store, queue_size=1)
    gate = threading.Event()
    original = prefetcher._load
    prefetcher._load = lambda job: gate.wait(30) and original(job)  # type: ignore[method-assign]
    try:
        queued = prefetcher.on_intent(TASK, ["urn:ex:a"])
        assert len(queued) <= 2  # one in flight, one waiting, the rest dropped
        assert prefetcher.stats().dropped >= 1
    finally:
        gate.set()
        prefetcher.close()


def test_failures_are_retried_with_back_off_then_dropped(
    world: tuple[Blackboard, L0Store],
) -> None:
    board, store = world
    attempts: list[int] = []
    with Prefetcher(board, store, retries=2, backoff_s=0.01, top_k=1) as prefetcher:
        real = board.nodes.write

        def flaky(*args: object, **kwargs: object) -> object:
            attempts.append(1)
            if len(attempts) < 3:
                raise StorageError("disk hiccup")
            return real(*args, **kwargs)  # type: ignore[arg-type]

        board.nodes.write = flaky  # type: ignore[method-assign]
        prefetcher.on_intent(TASK, ["urn:ex:a"])
        assert prefetcher.drain(timeout=30)
        stats = prefetcher.stats()
        assert (stats.retried, stats.loaded, stats.failed) == (2, 1, 0)
        board.nodes.write = lambda *a, **k: (_ for _ in ()).throw(StorageError("gone"))  # type: ignore[method-assign]
        prefetcher.on_intent(TASK, ["urn:ex:c"])
        assert prefetcher.drain(timeout=30)
        assert prefetcher.stats().failed == 1


def test_closing_stops_the_worker(world: tuple[Blackboard, L0Store]) -> None:
    board, store = world
    prefetcher = Prefetcher(board, store, start=True)
    thread = prefetcher._thread
    assert thread is not None
    prefetcher.close()
    prefetcher.close()
    assert not thread.is_alive()
    with pytest.raises(ClosedError):
        prefetcher.on_intent(TASK, ["urn:ex:a"])


def test_the_worker_stops_with_the_blackboard(world: tuple[Blackboard, L0Store]) -> None:
    board, store = world
    prefetcher = Prefetcher(board, store, start=True, poll_s=0.01)
    thread = prefetcher._thread
    assert thread is not None
    board.close()
    thread.join(timeout=30)
    assert not thread.is_alive()


def test_arguments_are_checked(world: tuple[Blackboard, L0Store]) -> None:
    board, store = world
    with pytest.raises(InvalidInputError, match="top_k"):
        Prefetcher(board, store, top_k=0)
    with pytest.raises(InvalidInputError, match="hops"):
        Prefetcher(board, store, hops=True)
    with Prefetcher(board, store) as prefetcher:
        with pytest.raises(InvalidInputError, match="entity IRI"):
            prefetcher.related(["not an iri"])
        with pytest.raises(InvalidInputError, match="message"):
            prefetcher.on_message(TASK, 3)  # type: ignore[arg-type]


def test_intents_come_from_the_bus(world: tuple[Blackboard, L0Store]) -> None:
    _, store = world
    bus = EventBus()
    board = Blackboard(EmbeddedGraph(), bus=bus)
    with Prefetcher(board, store, top_k=3) as prefetcher:
        subscriptions = prefetcher.listen(bus)
        board.write(
            [{"@id": "urn:ex:step1", "@type": "PlanStep", "uses": {"@id": "urn:ex:c"}}],
            task=TASK,
            area="plan",
        )
        assert prefetcher.drain(timeout=30)
        assert prefetcher.loaded[:1] == ["urn:ex:c"]  # the step's link, then its neighbours
        assert set(prefetcher.loaded) <= {"urn:ex:c", "urn:ex:b", "urn:ex:d"}
        bus.publish("COORDINATION_MESSAGE", {"payload": {"see": "urn:ex:e"}}, task_iri=TASK)
        assert prefetcher.drain(timeout=30)
        assert "urn:ex:a" in prefetcher.loaded
        bus.publish("AGENT_REGISTERED", {"name": "do-1", "role": "do"}, task_iri="urn:ex:f")
        assert prefetcher.drain(timeout=30)
        for subscription in subscriptions:
            subscription.cancel()
    board.close()
