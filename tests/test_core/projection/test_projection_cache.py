"""L3 view cache: hits, the reverse index, event-driven invalidation, stats, no stale view."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest

from gliding_core import InvalidInputError
from gliding_core.blackboard.board import Blackboard, EmbeddedGraph
from gliding_core.bus import Event, EventBus, EventType
from gliding_core.projection import Projector, ViewCache
from gliding_core.projection.cache import view_key
from gliding_core.tokens import TokenCounter

TASK = "urn:ex:task:cache"
OTHER = "urn:ex:task:other"
COUNTER = TokenCounter()


def step(i: int, summary: str = "") -> dict[str, object]:
    return {
        "@id": f"urn:ex:s{i}",
        "@type": "PlanStep",
        "plan": {"@id": "urn:ex:plan"},
        "summary": summary or f"step {i}",
    }


@pytest.fixture
def bus() -> EventBus:
    return EventBus()


@pytest.fixture
def board(bus: EventBus) -> Iterator[Blackboard]:
    with Blackboard(EmbeddedGraph(), bus=bus) as value:
        value.write([step(1), step(2)], task=TASK, area="plan")
        value.write([step(9)], task=OTHER, area="plan")
        yield value


@pytest.fixture
def projector(board: Blackboard) -> Iterator[Projector]:
    value = Projector(board, COUNTER)
    yield value
    value.close()


def test_a_second_read_is_a_hit(projector: Projector) -> None:
    first = projector.project(TASK, "da_input")
    second = projector.project(TASK, "da_input")
    assert not first.cached
    assert second.cached
    assert first.text == second.text
    stats = projector.cache.stats()
    assert (stats.views, stats.valid, stats.invalid, stats.hits, stats.misses) == (1, 1, 0, 1, 1)
    assert stats.bytes > 0


def test_views_are_keyed_by_task_frame_and_parameters(projector: Projector) -> None:
    projector.project(TASK, "da_input")
    projector.project(TASK, "da_input", params={"plan": "urn:ex:plan"})
    projector.project(OTHER, "da_input")
    projector.project(TASK, "reference_only")
    assert projector.cache.stats().views == 4
    assert view_key(TASK, "f", {"b": "2", "a": "1"}) == view_key(TASK, "f", {"a": "1", "b": "2"})


def test_a_write_invalidates_exactly_the_views_of_that_node(
    projector: Projector, board: Blackboard
) -> None:
    projector.project(TASK, "da_input")
    projector.project(TASK, "summary_only")
    projector.project(OTHER, "da_input")
    board.write([step(1, "rewritten")], task=TASK, area="plan")
    stats = projector.cache.stats()
    assert (stats.valid, stats.invalid, stats.invalidations) == (1, 2, 2)
    fresh = projector.project(TASK, "da_input")
    assert not fresh.cached
    assert "rewritten" in fresh.text
    assert projector.project(OTHER, "da_input").cached


def test_a_new_node_invalidates_the_views_of_its_graph(
    projector: Projector, board: Blackboard
) -> None:
    projector.project(TASK, "da_input")
    projector.project(OTHER, "da_input")
    board.write([step(3)], task=TASK, area="plan")
    assert "urn:ex:s3" in projector.project(TASK, "da_input").iris
    assert projector.project(OTHER, "da_input").cached


def test_a_deletion_invalidates(projector: Projector, board: Blackboard) -> None:
    projector.project(TASK, "da_input")
    board.delete(["urn:ex:s2"])
    assert "urn:ex:s2" not in projector.project(TASK, "da_input").iris


def test_an_update_that_makes_a_node_match_is_seen(projector: Projector, board: Blackboard) -> None:
    board.write([{"@id": "urn:ex:loose", "@type": "PlanStep"}], task=TASK, area="plan")
    assert "urn:ex:loose" not in projector.project(TASK, "da_input").iris
    board.write([{**step(0), "@id": "urn:ex:loose"}], task=TASK, area="plan")
    assert "urn:ex:loose" in projector.project(TASK, "da_input").iris


def test_coherence_invalidations_plug_in(projector: Projector, bus: EventBus) -> None:
    projector.project(TASK, "da_input")
    bus.publish(EventType.CACHE_INVALIDATE, {"iri": "urn:ex:s1", "generation": 7})
    assert projector.cache.stats().invalid == 1
    projector.project(TASK, "da_input")
    bus.publish(EventType.CACHE_INVALIDATE, {"iris": ["urn:ex:unrelated", "urn:ex:s2"]})
    assert not projector.project(TASK, "da_input").cached
    bus.publish("COPIES_INVALIDATED", {"iri": "urn:ex:s2", "generation": 3, "agents": ["b"]})
    assert not projector.project(TASK, "da_input").cached


def test_closing_stops_listening(projector: Projector, board: Blackboard) -> None:
    projector.project(TASK, "da_input")
    projector.close()
    projector.close()
    board.write([step(1, "later")], task=TASK, area="plan")
    assert projector.cache.stats().invalid == 0


def test_invalidation_touches_only_the_views_holding_the_node() -> None:
    cache = ViewCache(max_views=50_000)
    for i in range(20_000):
        key = view_key(f"urn:ex:t{i}", "f", {})
        cache.put(key, (), frozenset({f"urn:ex:n{i}", "urn:ex:shared"}), [f"urn:g:{i}"], since=0)
    assert cache.invalidate("urn:ex:n5") == 1
    assert cache.invalidate("urn:ex:n5") == 0  # an invalid view left the index
    assert cache.invalidate_graph("urn:g:6") == 1
    assert cache.invalidate("urn:ex:shared") == 19_998
    assert cache.drop_invalid() == 20_000
    assert cache.stats().views == 0


def test_a_result_racing_a_write_is_not_cached() -> None:
    cache = ViewCache()
    key = view_key(TASK, "f", {})
    since = cache.sequence
    cache.invalidate("urn:ex:n1")  # a write lands while the query runs
    view = cache.put(key, (), frozenset({"urn:ex:n1"}), ["urn:g"], since=since)
    assert not view.valid
    assert cache.get(key) is None
    since = cache.sequence
    cache.invalidate("urn:ex:elsewhere")
    assert cache.put(key, (), frozenset({"urn:ex:n1"}), ["urn:g"], since=since).valid


def test_least_recently_used_views_leave_first() -> None:
    cache = ViewCache(max_views=2)
    keys = [view_key(TASK, f"f{i}", {}) for i in range(3)]
    cache.put(keys[0], (), frozenset({"urn:a"}), [], since=0)
    cache.put(keys[1], (), frozenset({"urn:b"}), [], since=0)
    assert cache.get(keys[0]) is not None
    cache.put(keys[2], (), frozenset({"urn:c"}), [], since=0)
    assert cache.get(keys[1]) is None
    assert cache.get(keys[0]) is not None
    assert not cache.holds("urn:b")
    with pytest.raises(InvalidInputError, match="max_views"):
        ViewCache(max_views=0)


def test_no_read_serves_an_older_version_than_the_last_write(
    projector: Projector, board: Blackboard
) -> None:
    """A writer and a reader race; after each write returns, the next read shows it."""
    stop = threading.Event()
    errors: list[str] = []

    def reader() -> None:
        while not stop.is_set():
            projector.project(TASK, "da_input")

    thread = threading.Thread(target=reader)
    thread.start()
    try:
        for version in range(40):
            board.write([step(1, f"version {version}")], task=TASK, area="plan")
            text = projector.project(TASK, "da_input").text
            if f'"version {version}"' not in text:
                errors.append(f"version {version} missing: {text}")
    finally:
        stop.set()
        thread.join()
    assert errors == []


def test_an_update_of_a_node_one_view_holds_reaches_a_view_it_now_matches(
    projector: Projector, board: Blackboard
) -> None:
    """The node is in ``reference_only``'s view; a summary makes it match ``summary_only``."""
    board.write([{"@id": "urn:ex:bare", "@type": "PlanStep"}], task=TASK, area="plan")
    assert "urn:ex:bare" in projector.project(TASK, "reference_only").iris
    assert "urn:ex:bare" not in projector.project(TASK, "summary_only").iris
    board.write(
        [{"@id": "urn:ex:bare", "@type": "PlanStep", "summary": "now"}], task=TASK, area="plan"
    )
    assert "urn:ex:bare" in projector.project(TASK, "summary_only").iris


def test_a_node_moved_to_another_area_leaves_and_enters_views(
    projector: Projector, board: Blackboard
) -> None:
    """A node moved from review to plan leaves ``ca_review`` and enters ``da_input``."""
    node = {**step(5), "@type": ["PlanStep", "Artifact"]}
    board.write([node], task=TASK, area="review")
    assert "urn:ex:s5" in projector.project(TASK, "ca_review").iris
    assert "urn:ex:s5" not in projector.project(TASK, "da_input").iris
    board.write([node], task=TASK, area="plan")
    assert "urn:ex:s5" in projector.project(TASK, "da_input").iris
    assert "urn:ex:s5" not in projector.project(TASK, "ca_review").iris


def test_a_new_artifact_reaches_the_cached_review_frame(
    projector: Projector, board: Blackboard
) -> None:
    before = projector.project(TASK, "ca_review")
    artifact = {"@id": "urn:ex:art", "@type": "Artifact", "summary": "the parser"}
    board.write([artifact], task=TASK, area="execution")
    after = projector.project(TASK, "ca_review")
    assert "urn:ex:art" not in before.iris
    assert "urn:ex:art" in after.iris
    assert not after.cached


def test_a_deletion_can_let_another_node_match(projector: Projector, board: Blackboard) -> None:
    """A user frame that shows steps nobody has reviewed: deleting the review shows the step."""
    from gliding_core.projection import Frame

    projector.register(
        Frame(
            "unreviewed",
            "steps without a review",
            "?node a gh:PlanStep . FILTER NOT EXISTS { ?r gh:reviews ?node }",
            "?node gh:summary ?s .",
        )
    )
    review = {"@id": "urn:ex:rev", "@type": "Review", "reviews": {"@id": "urn:ex:s1"}}
    board.write([review], task=TASK, area="plan")
    assert "urn:ex:s1" not in projector.project(TASK, "unreviewed").iris
    board.delete(["urn:ex:rev"])
    assert "urn:ex:s1" in projector.project(TASK, "unreviewed").iris


def _graph_event(graph: str, previous: str | None = None) -> Event:
    payload: dict[str, object] = {"iri": "urn:ex:n", "graph": graph, "generation": 2}
    if previous is not None:
        payload["previous_graph"] = previous
    return Event(EventType.NODE_UPDATED.value, payload)


def test_a_graph_event_is_found_lazily_and_counted_once() -> None:
    """A graph's event only stamps the graph: the next look finds its views, counted once."""
    cache = ViewCache()
    keys = [view_key(f"urn:ex:t{i}", "f", {}) for i in range(3)]
    for i, key in enumerate(keys):
        cache.put(key, (), frozenset({f"urn:ex:n{i}"}), [f"urn:g:{i % 2}"], since=0)
    cache.on_event(_graph_event("urn:g:0"))
    assert cache.get(keys[0]) is None
    assert cache.get(keys[1]) is not None
    assert not cache.holds("urn:ex:n2")
    assert cache.holds("urn:ex:n1")
    assert cache.invalidate("urn:ex:n0") == 0  # already invalid: not counted twice
    assert cache.invalidate_graph("urn:g:0") == 0
    stats = cache.stats()
    assert (stats.valid, stats.invalid, stats.invalidations) == (1, 2, 2)
    cache.on_event(_graph_event("urn:g:9", previous="urn:g:1"))  # the graph a node left
    assert cache.invalidate_graph("urn:g:1") == 0
    assert cache.stats().invalidations == 3


def test_a_view_built_after_a_graph_event_is_valid() -> None:
    cache = ViewCache()
    key = view_key(TASK, "f", {})
    cache.put(key, (), frozenset({"urn:ex:n1"}), ["urn:g"], since=0)
    cache.put(view_key(OTHER, "f", {}), (), frozenset(), ["urn:g"], since=0)
    cache.on_event(_graph_event("urn:g"))
    since = cache.sequence
    cache.put(key, (), frozenset({"urn:ex:n1"}), ["urn:g"], since=since)
    assert cache.get(key) is not None
    assert cache.get(view_key(OTHER, "f", {})) is None
    since = cache.sequence
    cache.on_event(_graph_event("urn:g"))  # lands while a query of the graph runs
    assert not cache.put(key, (), frozenset({"urn:ex:n1"}), ["urn:g"], since=since).valid
    assert cache.get(key) is None


def test_the_stamps_of_graphs_nobody_reads_are_dropped() -> None:
    """Memory stays bounded: a graph leaves the stamps with the last view read from it."""
    cache = ViewCache(max_views=10)
    for i in range(1_000):
        cache.put(view_key(f"urn:ex:t{i}", "f", {}), (), frozenset(), [f"urn:g:{i}"], since=0)
        cache.on_event(_graph_event(f"urn:g:{i}"))
        cache.on_event(_graph_event(f"urn:g:never-read-{i}"))
    assert len(cache._stamps) == 10
    assert cache.stats().invalidations == 1_000  # evicted ones were counted as they left
    cache.drop_invalid()
    assert cache._stamps == {}
