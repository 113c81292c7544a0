"""The relevance tracker (a turn scored against the task goal and the previous input) and the
memory bus."""

from __future__ import annotations

import logging

import pytest

from gliding_core import EventBus, EventType, InvalidInputError, RelevanceTracker
from gliding_core.attention.relevance import NEUTRAL


def test_score_blends_goal_and_previous_input() -> None:
    tracker = RelevanceTracker(alpha=0.6)
    tracker.set_task([1.0, 0.0])
    assert tracker.score([1.0, 0.0]) == pytest.approx(1.0)  # no previous input yet: goal alone
    # goal similarity 0.6, local similarity to [1, 0] is 0.6 as well
    assert tracker.score([0.6, 0.8]) == pytest.approx(0.6 * 0.6 + 0.4 * 0.6)
    # goal 0, local: cos([0, 1], [0.6, 0.8]) = 0.8
    assert tracker.score([0.0, 1.0]) == pytest.approx(0.4 * 0.8)


def test_defined_values_when_embeddings_are_missing() -> None:
    tracker = RelevanceTracker()
    assert tracker.score(None) == NEUTRAL
    assert tracker.score([1.0, 0.0]) == NEUTRAL  # neither goal nor previous input
    assert tracker.score([1.0, 0.0]) == pytest.approx(1.0)  # previous input only
    tracker.reset()
    tracker.set_task([0.0, 0.0])  # a zero vector has no direction
    assert tracker.score([1.0, 0.0]) == NEUTRAL


def test_opposite_vectors_are_unrelated_not_relevant() -> None:
    tracker = RelevanceTracker(alpha=1.0)
    tracker.set_task([1.0, 0.0])
    assert tracker.score([-1.0, 0.0]) == 0.0


def test_remember_false_leaves_the_previous_input() -> None:
    tracker = RelevanceTracker(alpha=0.0)
    tracker.score([1.0, 0.0])
    tracker.score([0.0, 1.0], remember=False)
    assert tracker.score([1.0, 0.0]) == pytest.approx(1.0)


@pytest.mark.parametrize("alpha", [-0.1, 1.5, "0.6", True])
def test_bad_alpha_is_named(alpha: object) -> None:
    with pytest.raises(InvalidInputError, match="alpha"):
        RelevanceTracker(alpha)  # type: ignore[arg-type]


def test_a_failing_subscriber_breaks_nothing(caplog: pytest.LogCaptureFixture) -> None:
    bus = EventBus()
    seen: list[str] = []

    def broken(event: object) -> None:
        raise RuntimeError("subscriber bug")

    bus.subscribe(broken)
    bus.subscribe(lambda e: seen.append(e.type))
    with caplog.at_level(logging.ERROR):
        event = bus.publish(EventType.TOPIC_SHIFT, {"x": 1}, task_iri="urn:t")
    assert seen == ["TOPIC_SHIFT"]
    assert event.sequence == 1
    assert "subscriber bug" in caplog.text


def test_filters_history_bounds_and_cancel() -> None:
    bus = EventBus(history=5)
    evicted: list[object] = []
    subscription = bus.subscribe(evicted.append, types=[EventType.TURN_EVICTED])
    for i in range(200):  # far more than 64 distinct types
        bus.publish(f"CUSTOM_{i}")
    bus.publish(EventType.TURN_EVICTED, {"iri": "urn:x"})
    subscription.cancel()
    subscription.cancel()
    bus.publish(EventType.TURN_EVICTED)
    assert len(evicted) == 1
    assert len(bus.recent()) == 5
    assert [e.type for e in bus.recent("TURN_EVICTED")] == ["TURN_EVICTED", "TURN_EVICTED"]
    assert [e.sequence for e in bus.recent()] == sorted(e.sequence for e in bus.recent())


@pytest.mark.parametrize("bad", ["", None, 7])
def test_bad_event_types_are_named(bad: object) -> None:
    with pytest.raises(InvalidInputError, match="event type"):
        EventBus().publish(bad)  # type: ignore[arg-type]
