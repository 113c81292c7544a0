"""The topic coherence monitor: boundaries between blocks of turns, and the old topic compressed."""

from __future__ import annotations

import threading

from gliding_core import EventType, Memory, MemoryConfig, SessionConfig, TopicConfig
from gliding_core.topics import boundaries

BILLING = [
    "The invoice export for billing fails at night",
    "Billing invoice export retries three times",
    "We could batch the invoice export for billing",
    "Invoice export billing job logs are in the billing bucket",
]
CLUSTER = [
    "Kubernetes cluster autoscaling is too slow",
    "The cluster autoscaling adds kubernetes nodes late",
    "Tune kubernetes cluster autoscaling thresholds",
]


def test_boundaries_of_two_clusters() -> None:
    a, b = [1.0, 0.0, 0.1], [0.0, 1.0, 0.1]
    found = boundaries([a, a, a, b, b, b], threshold=0.4, window=1)
    assert [x.index for x in found] == [3]
    assert found[0].similarity < 0.4
    assert boundaries([a, a, None, a], threshold=0.4, window=2) == []
    assert [x.index for x in boundaries([a, a, a, b, b, b], threshold=0.4, window=3)] == [3]
    # a gap is judged only once a whole block follows it
    assert boundaries([a, a, a, b, b], threshold=0.4, window=3) == []


def test_a_check_publishes_the_shift_and_compresses_the_old_topic() -> None:
    config = MemoryConfig(
        topics=TopicConfig(interval_s=0, window=2, proactive_fill=0.3),
        session=SessionConfig(budget=150),
    )
    with Memory(config=config) as memory:
        session = memory.session("urn:task:ops")
        for text in BILLING + CLUSTER:
            session.add_turn("user", text)
        before = session.total_tokens
        found = memory.topics.check(session)
        assert [b.index for b in found] == [len(BILLING)]
        events = memory.bus.recent(EventType.TOPIC_SHIFT)
        assert len(events) == 1
        payload = events[0].payload
        assert len(payload["old_topic_turns"]) == len(BILLING) - 1  # the pinned first turn stays
        assert payload["evicted"]
        assert session.total_tokens < before
        assert session.total_tokens <= 0.3 * session.budget or all(
            not t.old_topic for t in session.turns
        )
        for iri in payload["evicted"]:
            assert memory.store.get_node(iri) is not None  # archived, not lost
        assert memory.topics.check(session) == []  # a boundary is reported once


def test_the_background_monitor_runs_and_stops_with_the_memory() -> None:
    config = MemoryConfig(topics=TopicConfig(interval_s=0.02, window=2))
    memory = Memory(config=config)
    shifted = threading.Event()
    memory.bus.subscribe(lambda e: shifted.set(), types=[EventType.TOPIC_SHIFT])
    session = memory.session("urn:task:ops")
    for text in BILLING + CLUSTER:
        session.add_turn("user", text)
    assert shifted.wait(timeout=30)
    thread = memory.topics._thread
    assert thread is not None
    memory.close()
    assert not thread.is_alive()
