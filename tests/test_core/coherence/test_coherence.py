"""MESI coherence: the transition table row by row, the coordinator on both directories, what
the SQLite directory keeps in its file, and what a model is shown.

The directory's own promises (records, atomic updates, the change token across handles and
processes, kept versions, closing) are the contract suite's: tests/test_core/contracts/."""

from __future__ import annotations

import gc
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gliding_core.blackboard.board import Blackboard
from gliding_core.blackboard.graph import EmbeddedGraph
from gliding_core.bus import Event, EventType
from gliding_core.coherence import (
    TRANSITIONS,
    Action,
    CoherenceCoordinator,
    CopyEvent,
    DictNodeSource,
    LocalDirectory,
    SQLiteDirectory,
    Transition,
    render_shared,
    transition,
)
from gliding_core.coherence.directory import Directory
from gliding_core.config import BlackboardConfig
from gliding_core.errors import (
    EntryNotFoundError,
    InvalidInputError,
    InvalidNodeError,
    StaleWriteError,
    StorageError,
)
from gliding_core.store.entry import MesiState
from gliding_core.tokens import TokenCounter

M, E, S, I = "M", "E", "S", "I"  # noqa: E741
FETCH, WB, ANN = Action.FETCH, Action.WRITE_BACK, Action.ANNOUNCE_INVALIDATION
R, W, RR, RW = "local_read", "local_write", "remote_read", "remote_write"
BACK, EVICT, LAPSE = "write_back", "eviction", "lease_expiry"

# The MESI protocol written out again, independently of the module, so a changed row fails:
# (state, event, another agent holds a valid copy) -> (next state, actions).
EXPECTED: dict[tuple[str, str, bool], tuple[str, tuple[Action, ...]]] = {
    (M, R, False): (M, ()),
    (M, R, True): (M, ()),
    (E, R, False): (E, ()),
    (E, R, True): (E, ()),
    (S, R, False): (S, ()),
    (S, R, True): (S, ()),
    (I, R, False): (E, (FETCH,)),  # read miss, no other holder: E
    (I, R, True): (S, (FETCH,)),  # read miss beside other holders: S
    (M, W, False): (M, ()),
    (M, W, True): (M, (ANN,)),
    (E, W, False): (M, ()),  # E to M without bus traffic
    (E, W, True): (M, (ANN,)),
    (S, W, False): (M, ()),
    (S, W, True): (M, (ANN,)),  # write: M, every other copy I, announced
    (I, W, False): (M, ()),
    (I, W, True): (M, (ANN,)),
    (M, RR, False): (S, (WB,)),  # a Modified holder writes back first
    (M, RR, True): (S, (WB,)),
    (E, RR, False): (S, ()),
    (E, RR, True): (S, ()),
    (S, RR, False): (S, ()),
    (S, RR, True): (S, ()),
    (I, RR, False): (I, ()),
    (I, RR, True): (I, ()),
    (M, RW, False): (I, (WB,)),
    (M, RW, True): (I, (WB,)),
    (E, RW, False): (I, ()),
    (E, RW, True): (I, ()),
    (S, RW, False): (I, ()),
    (S, RW, True): (I, ()),
    (I, RW, False): (I, ()),
    (I, RW, True): (I, ()),
    (M, BACK, False): (E, (WB,)),  # write-back: M to E ...
    (M, BACK, True): (S, (WB,)),  # ... or S
    (E, BACK, False): (E, ()),
    (E, BACK, True): (E, ()),
    (S, BACK, False): (S, ()),
    (S, BACK, True): (S, ()),
    (I, BACK, False): (I, ()),
    (I, BACK, True): (I, ()),
    (M, EVICT, False): (I, (WB,)),
    (M, EVICT, True): (I, (WB,)),
    (E, EVICT, False): (I, ()),
    (E, EVICT, True): (I, ()),
    (S, EVICT, False): (I, ()),
    (S, EVICT, True): (I, ()),
    (I, EVICT, False): (I, ()),
    (I, EVICT, True): (I, ()),
    (M, LAPSE, False): (I, (WB,)),
    (M, LAPSE, True): (I, (WB,)),
    (E, LAPSE, False): (I, ()),
    (E, LAPSE, True): (I, ()),
    (S, LAPSE, False): (I, ()),
    (S, LAPSE, True): (I, ()),
    (I, LAPSE, False): (I, ()),
    (I, LAPSE, True): (I, ()),
}


def test_the_table_is_total() -> None:
    keys = {(s.value, e.value, shared) for s, e, shared in TRANSITIONS}
    assert keys == set(EXPECTED)
    assert len(TRANSITIONS) == 4 * 7 * 2


@pytest.mark.parametrize(
    ("key", "expected"),
    sorted(EXPECTED.items()),
    ids=[f"{s}-{e}-{'shared' if x else 'alone'}" for s, e, x in sorted(EXPECTED)],
)
def test_transition_row(
    key: tuple[str, str, bool], expected: tuple[str, tuple[Action, ...]]
) -> None:
    state, event, shared = key
    row = transition(MesiState(state), CopyEvent(event), others_hold=shared)
    assert row == Transition(MesiState(expected[0]), expected[1])
    assert TRANSITIONS[MesiState(state), CopyEvent(event), shared] is row


def test_transition_refuses_bad_input() -> None:
    with pytest.raises(InvalidInputError, match="'reload'"):
        transition(MesiState.SHARED, "reload", others_hold=False)  # type: ignore[arg-type]
    with pytest.raises(InvalidInputError, match="'X'"):
        transition("X", CopyEvent.LOCAL_READ, others_hold=False)  # type: ignore[arg-type]
    with pytest.raises(InvalidInputError, match="others_hold"):
        transition(MesiState.SHARED, CopyEvent.LOCAL_READ, others_hold=1)  # type: ignore[arg-type]


# -- the coordinator, on each directory ----------------------------------------------------------


class WriteBacks:
    """L0 as far as the coordinator sees it: what was written back, optionally failing."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, dict[str, Any], int]] = []
        self.fail = False

    def __call__(self, iri: str, value: dict[str, Any], generation: int) -> None:
        if self.fail:
            raise StorageError("L0 is full")
        self.calls.append((iri, value, generation))


@pytest.fixture(params=["local", "sqlite"])
def directory(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Directory]:
    made: Directory = (
        LocalDirectory() if request.param == "local" else SQLiteDirectory(tmp_path / "bb.sqlite3")
    )
    yield made
    made.close()


@pytest.fixture
def l0() -> WriteBacks:
    return WriteBacks()


@pytest.fixture
def coherence(directory: Directory, l0: WriteBacks) -> CoherenceCoordinator:
    return CoherenceCoordinator(DictNodeSource(), directory, write_back=l0)


X = "urn:node:x"


def node(**properties: Any) -> dict[str, Any]:
    return {"@id": X, "@type": "Note", **properties}


def states(coherence: CoherenceCoordinator, iri: str = X) -> dict[str, str]:
    return {agent: state.value for agent, state in coherence.copies(iri).items()}


def invalidations(coherence: CoherenceCoordinator) -> list[Event]:
    return coherence.bus.recent(EventType.COPIES_INVALIDATED)


def test_read_miss_alone_is_exclusive_then_shared(coherence: CoherenceCoordinator) -> None:
    coherence.write("w", X, node(text="a"), based_on=0)
    coherence.evict("w", X)
    first = coherence.read("a", X)
    assert (first.kind, first.generation, states(coherence)) == ("whole", 1, {"a": E})
    second = coherence.read("b", X)
    assert second.value == node(text="a")
    assert states(coherence) == {"a": S, "b": S}
    assert coherence.read("a", X).kind == "hit"


def test_a_modified_holder_writes_back_before_a_reader_shares(
    coherence: CoherenceCoordinator, l0: WriteBacks
) -> None:
    coherence.write("a", X, node(text="a"), based_on=0)
    assert states(coherence) == {"a": M}
    assert l0.calls == []
    coherence.read("b", X)
    assert l0.calls == [(X, node(text="a"), 1)]
    assert states(coherence) == {"a": S, "b": S}


def test_exclusive_to_modified_is_silent_and_shared_to_modified_is_announced(
    coherence: CoherenceCoordinator,
) -> None:
    coherence.write("a", X, node(text="a"), based_on=0)
    coherence.write_back("a", X)
    assert states(coherence) == {"a": E}
    coherence.write("a", X, node(text="b"), based_on=1)
    assert invalidations(coherence) == []
    coherence.read("b", X)
    coherence.read("c", X)
    generation = coherence.write("b", X, node(text="c"), based_on=2)
    assert states(coherence) == {"a": I, "b": M, "c": I}
    [event] = invalidations(coherence)
    assert event.payload == {
        "iri": X,
        "generation": generation,
        "writer": "b",
        "agents": ["a", "c"],
    }


def test_a_stale_write_is_refused_with_the_current_value_and_its_copy_invalid(
    coherence: CoherenceCoordinator,
) -> None:
    coherence.write("a", X, node(text="a"), based_on=0)
    coherence.read("b", X)
    coherence.write("a", X, node(text="b"), based_on=1)
    assert states(coherence) == {"a": M, "b": I}
    coherence.read("b", X)
    coherence.write("a", X, node(text="c"), based_on=2)
    with pytest.raises(StaleWriteError, match="based on generation 2") as refused:
        coherence.write("b", X, node(text="lost"), based_on=2)
    assert refused.value.current_generation == 3
    assert refused.value.current_value == node(text="c")
    assert states(coherence)["b"] == I
    assert coherence.source.get(X) == (node(text="c"), 3)
    assert coherence.read("b", X).value == node(text="c")


def test_critical_tags_write_through_before_the_write_returns(
    coherence: CoherenceCoordinator, l0: WriteBacks
) -> None:
    coherence.write("a", X, node(text="plain"), based_on=0, tags=["draft"])
    assert l0.calls == []
    coherence.write("a", X, node(text="must"), based_on=1, tags=["user_intent"])
    assert l0.calls == [(X, node(text="must"), 2)]
    assert states(coherence) == {"a": E}


def test_eviction_and_crash_write_dirty_copies_back(
    coherence: CoherenceCoordinator, l0: WriteBacks
) -> None:
    other = "urn:node:y"
    coherence.write("a", X, node(text="a"), based_on=0)
    coherence.write("a", other, {"@id": other}, based_on=0)
    coherence.evict("a", X)
    assert l0.calls == [(X, node(text="a"), 1)]
    assert states(coherence) == {}
    assert coherence.drop_agent("a") == [other]
    assert l0.calls[-1] == (other, {"@id": other}, 1)
    assert coherence.directory.holdings("a") == []


def test_lease_expiry_invalidates_and_the_next_read_is_the_change(
    coherence: CoherenceCoordinator,
) -> None:
    coherence.write("a", X, node(text="a", n=1), based_on=0)
    coherence.read("b", X)
    coherence.expire_lease("b", X)
    assert states(coherence) == {"a": S, "b": I}
    coherence.write("a", X, node(text="a", n=2), based_on=1)
    reading = coherence.read("b", X)
    assert (reading.kind, reading.seen_generation, reading.generation) == ("change", 1, 2)
    assert reading.delta is not None
    assert (reading.delta.changed, reading.delta.removed) == ({"n": 2}, ())


def test_a_failing_write_back_leaves_every_copy_as_it_was(
    coherence: CoherenceCoordinator, l0: WriteBacks
) -> None:
    coherence.write("a", X, node(text="a"), based_on=0)
    l0.fail = True
    with pytest.raises(StorageError, match="L0 is full"):
        coherence.read("b", X)
    with pytest.raises(StorageError, match="L0 is full"):
        coherence.write("b", X, node(text="b"), based_on=1)
    assert states(coherence) == {"a": M}
    assert coherence.source.get(X) == (node(text="a"), 1)
    l0.fail = False
    assert coherence.read("b", X).value == node(text="a")


def test_a_failing_write_through_leaves_the_write_committed_and_dirty(
    coherence: CoherenceCoordinator, l0: WriteBacks
) -> None:
    l0.fail = True
    with pytest.raises(StorageError):
        coherence.write("a", X, node(text="fact"), based_on=0, tags=["confirmed_fact"])
    assert states(coherence) == {"a": M}
    l0.fail = False
    coherence.write_back("a", X)
    assert l0.calls == [(X, node(text="fact"), 1)]
    assert states(coherence) == {"a": E}


def test_a_read_of_a_node_written_around_the_directory_sees_the_source(
    coherence: CoherenceCoordinator,
) -> None:
    coherence.write("a", X, node(text="a"), based_on=0)
    coherence.read("b", X)
    coherence.evict("b", X)
    coherence.source.put(X, node(text="around"), 1)
    assert coherence.read("b", X).value == node(text="around")
    assert states(coherence) == {"a": I, "b": E}


def test_bad_input_is_refused_and_nothing_is_written(coherence: CoherenceCoordinator) -> None:
    with pytest.raises(InvalidInputError, match="agent"):
        coherence.read("", X)
    with pytest.raises(InvalidNodeError, match="whitespace"):
        coherence.read("a", "urn:a b")
    with pytest.raises(InvalidInputError, match="based_on"):
        coherence.write("a", X, node(), based_on=-1)
    with pytest.raises(InvalidNodeError, match="JSON object"):
        coherence.write("a", X, [1, 2], based_on=0)
    with pytest.raises(InvalidNodeError, match="urn:node:other"):
        coherence.write("a", X, {"@id": "urn:node:other"}, based_on=0)
    with pytest.raises(InvalidInputError, match="tags"):
        coherence.write("a", X, node(), based_on=0, tags=[3])  # type: ignore[list-item]
    with pytest.raises(EntryNotFoundError, match="urn:node:x"):
        coherence.read("a", X)
    with pytest.raises(StaleWriteError):
        coherence.write("a", X, node(), based_on=4)
    assert states(coherence) == {}
    with pytest.raises(InvalidInputError, match="callable"):
        CoherenceCoordinator(DictNodeSource(), write_back="l0")  # type: ignore[arg-type]


# -- the SQLite directory: what its file holds --------------------------------------------------


def test_generations_never_decrease_in_the_file(tmp_path: Path) -> None:
    path = tmp_path / "bb.sqlite3"
    with SQLiteDirectory(path) as directory:
        CoherenceCoordinator(DictNodeSource(), directory).write("a", X, node(), based_on=0)
    conn = sqlite3.connect(path)
    with pytest.raises(sqlite3.IntegrityError, match="never decreases"):
        conn.execute("UPDATE coherence_nodes SET generation = 0")
    conn.close()


def test_a_directory_refuses_bad_settings(tmp_path: Path) -> None:
    for keep in (0, -1, 1.5, True, "2"):
        with pytest.raises(InvalidInputError, match="keep_versions"):
            LocalDirectory(keep_versions=keep)  # type: ignore[arg-type]
        with pytest.raises(InvalidInputError, match="keep_versions"):
            SQLiteDirectory(tmp_path / "k.sqlite3", keep_versions=keep)  # type: ignore[arg-type]
    with pytest.raises(InvalidInputError, match="directory path"):
        SQLiteDirectory(42)  # type: ignore[arg-type]


# -- what the model sees -------------------------------------------------------------------------


@pytest.fixture(scope="module")
def counter() -> TokenCounter:
    return TokenCounter()


def test_shared_nodes_are_shown_whole_then_as_references_then_as_changes(
    coherence: CoherenceCoordinator, counter: TokenCounter
) -> None:
    big = {f"p{i}": f"value number {i} of a long property" for i in range(30)}
    coherence.write("w", X, node(name="Plan", **big), based_on=0)
    first = render_shared(coherence, "a", [X], counter=counter)
    assert [i.shown for i in first.items] == ["whole"]
    again = render_shared(coherence, "a", [X, X], counter=counter)
    [reference] = again.items
    assert reference.shown == "reference"
    assert reference.text == f"{X} (generation 1, unchanged): Note: Plan"
    assert reference.tokens == counter.count(reference.text) == again.tokens
    omitted = render_shared(coherence, "a", [X], counter=counter, unchanged="omit")
    assert (omitted.items, omitted.omitted, omitted.tokens) == ((), (X,), 0)
    coherence.write("w", X, node(name="Plan", **{**big, "p3": "new"}), based_on=1)
    [change] = render_shared(coherence, "a", [X], counter=counter).items
    assert change.shown == "change"
    assert change.text == f'{X} changed (generation 1 -> 2): {{"changed":{{"p3":"new"}}}}'
    assert change.tokens == counter.count(change.text) < first.tokens / 10


def test_a_change_dearer_than_the_node_is_shown_whole(
    coherence: CoherenceCoordinator, counter: TokenCounter
) -> None:
    coherence.write("w", X, node(a="1"), based_on=0)
    render_shared(coherence, "r", [X], counter=counter)
    coherence.write("w", X, {"@id": X, "b": "2"}, based_on=1)
    [item] = render_shared(coherence, "r", [X], counter=counter).items
    assert item.shown == "whole"
    with pytest.raises(InvalidInputError, match="unchanged"):
        render_shared(coherence, "r", [X], counter=counter, unchanged="hide")  # type: ignore[arg-type]


def test_a_counter_raised_by_a_failed_commit_vouches_for_nothing_until_the_next_write(
    tmp_path: Path,
) -> None:
    with SQLiteDirectory(tmp_path / "bb.sqlite3") as directory:
        coherence = CoherenceCoordinator(DictNodeSource(), directory)
        coherence.write("a", X, node(text="a"), based_on=0)
        _, vouched = directory.snapshot(X)
        assert vouched == directory.token()
        # A writer that raised the shared counter and then died before its commit:
        counter = SQLiteDirectory(tmp_path / "bb.sqlite3")
        counter._epoch.set(int(str(directory.token())) + 1)
        counter.close()
        assert directory.snapshot(X)[1] != directory.token()
        assert coherence.read("a", X).value == node(text="a")
        coherence.write("a", X, node(text="b"), based_on=1)
        assert directory.snapshot(X)[1] == directory.token()
        assert (tmp_path / "bb.sqlite3-coherence-epoch").stat().st_size == 8


def test_moved_names_what_was_built_from_an_old_generation(coherence: CoherenceCoordinator) -> None:
    other = "urn:node:y"
    coherence.write("a", X, node(n=1), based_on=0)
    coherence.write("a", other, {"@id": other}, based_on=0)
    built_from = {X: 1, other: 1}
    assert coherence.moved(built_from) == []
    coherence.write("b", X, node(n=2), based_on=1)
    assert coherence.moved(built_from) == [X]
    with pytest.raises(InvalidInputError, match="generation of 'urn:node:y'"):
        coherence.moved({other: -1})


# -- a blackboard's coordinator ----------------------------------------------------------------

BOARD_TASK = "iri://task/board"
QUIET = BlackboardConfig(flush_interval_s=0.0)


def step(iri: str, text: str) -> dict[str, Any]:
    return {"@id": iri, "@type": "Step", "text": text}


def test_a_local_directory_keeps_nothing_the_collector_tracks() -> None:
    directory = LocalDirectory()
    with Blackboard(EmbeddedGraph(), config=QUIET, directory=directory) as board:
        agent = board.agent("do", role="do", task=BOARD_TASK)
        for index in range(50):
            agent.write([step(f"urn:lone:n{index}", str(index))], area="execution")
        agent.write([step("urn:lone:n0", "again")], area="execution")
        gc.collect()
        kept = list(directory._records.values()) + list(board.coherence.held.by_key.values())
        assert len(kept) == 100
        assert not any(gc.is_tracked(entry) for entry in kept)
        record = directory.record("urn:lone:n0")
        assert (record.generation, record.value) == (2, step("urn:lone:n0", "again"))
        assert directory.holdings("do") == sorted(f"urn:lone:n{i}" for i in range(50))


def test_a_held_copy_of_an_integer_over_64_bits_reads_back_whole() -> None:
    with Blackboard(EmbeddedGraph(), config=QUIET) as board:
        agent = board.agent("do", role="do", task=BOARD_TASK)
        big = {"@id": "urn:lone:big", "@type": "Step", "count": 2**70}
        agent.write([big], area="execution")
        reading = board.coherence.read("do", "urn:lone:big")
        assert (reading.kind, reading.value["count"]) == ("hit", 2**70)
