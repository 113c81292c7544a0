"""Contract suite of the coherence directory: records as values, atomic updates, generations that
never go back, a change token that moves on every change (across handles and processes) and
stays put otherwise, bounded kept versions, and a closed directory that refuses use.

Every test runs on each implementation of ``Directory`` in ``conftest.py``'s table, directly and
through the ``CoherenceCoordinator`` that is its user; cross-handle tests open two handles on
one storage (what two processes see), and one test writes from a child process.
"""

from __future__ import annotations

import copy
import pickle
import textwrap
from pathlib import Path
from typing import Any

import pytest

from gliding_core.coherence import CoherenceCoordinator, DictNodeSource, SQLiteNodeSource
from gliding_core.coherence.directory import Copy, Directory, NodeRecord
from gliding_core.errors import ClosedError, EntryNotFoundError, InvalidInputError
from gliding_core.store.entry import MesiState
from tests.test_core.contracts.conftest import Backend, run_child

X = "urn:node:x"
Y = "urn:node:y"
M, E, S, I = (MesiState(letter) for letter in "MESI")  # noqa: E741


def node(**properties: Any) -> dict[str, Any]:
    return {"@id": X, "@type": "Note", **properties}


def written(directory: Directory, iri: str, generation: int, **copies: MesiState) -> Any:
    """Move ``iri`` to ``generation`` with these copies (at that generation); return the token."""

    def change(record: NodeRecord) -> tuple[NodeRecord, None]:
        moved = record.at(generation, {"@id": iri, "n": generation})
        for agent, state in copies.items():
            moved = moved.with_copy(agent, state, generation)
        return moved, None

    return directory.update(iri, change)[1]


# == records ====================================================================================


def test_an_unseen_node_has_an_empty_record(directory: Directory) -> None:
    assert directory.record(X) == NodeRecord(X)
    record, _ = directory.snapshot(X)
    assert (record.generation, record.value, record.copies) == (0, None, {})
    assert directory.version(X, 0) is None
    assert directory.holdings("a") == []


def test_a_record_reads_back_as_it_was_written(directory: Directory) -> None:
    token = written(directory, X, 3, a=M, b=I)
    record = directory.record(X)
    assert (record.iri, record.generation, record.value) == (X, 3, {"@id": X, "n": 3})
    assert record.copies == {"a": Copy("a", M, 3), "b": Copy("b", I, 3)}
    assert record.holders() == [Copy("a", M, 3)]
    assert directory.snapshot(X) == (record, token)
    assert directory.version(X, 3) == {"@id": X, "n": 3}
    written(directory, Y, 1, b=S)
    assert directory.holdings("b") == [X, Y]
    assert directory.holdings("a") == [X]


def test_records_are_values_of_their_own(directory: Directory) -> None:
    fresh, other = NodeRecord(X), NodeRecord(Y)
    assert fresh.copies == {}
    assert fresh.copies is not other.copies  # no shared default
    with pytest.raises(AttributeError):
        fresh.generation = 3  # type: ignore[misc]
    coherence = CoherenceCoordinator(DictNodeSource(), directory)
    coherence.write("a", X, node(n=1), based_on=0)
    record = directory.record(X)
    assert copy.deepcopy(record) == record == pickle.loads(pickle.dumps(record))
    assert record.copies["a"] == Copy("a", MesiState.MODIFIED, 1)
    record.copies.clear()  # the caller's own: the directory's stays
    assert directory.record(X).copies["a"] == Copy("a", MesiState.MODIFIED, 1)


def test_an_equal_record_built_anew_changes_nothing(directory: Directory) -> None:
    coherence = CoherenceCoordinator(DictNodeSource(), directory)
    coherence.write("a", X, node(n=1), based_on=0)
    before = directory.token()

    def rebuilt(records: dict[str, NodeRecord]) -> tuple[dict[str, NodeRecord], None]:
        return {
            i: NodeRecord(r.iri, r.generation, dict(r.value or {}), dict(r.copies))
            for i, r in records.items()
        }, None

    assert directory.update_many([X], rebuilt) == (None, before)
    assert directory.token() == before
    # Another coordinator writes Y: the token it leaves is not this one's own, even after
    # this one "changes" X to an equal record (else it would vouch for Y without asking).
    other = CoherenceCoordinator(DictNodeSource(), directory)
    other.write("b", Y, {"@id": Y}, based_on=0)
    coherence._update_many([X], rebuilt)
    assert not coherence.vouch_own(before, directory.token(), Y)


# == updates: atomic, forward only ==============================================================


def test_an_update_returns_its_result_and_the_token_right_after(directory: Directory) -> None:
    before = directory.token()

    def bump(record: NodeRecord) -> tuple[NodeRecord, str]:
        return record.at(record.generation + 1, {"@id": X}), "done"

    result, token = directory.update(X, bump)
    assert result == "done"
    assert token != before
    assert directory.token() == token
    assert directory.snapshot(X)[1] == token


def test_update_many_writes_every_record_or_none(directory: Directory) -> None:
    written(directory, X, 1, a=M)
    before = directory.token()

    def half_then_fail(records: dict[str, NodeRecord]) -> tuple[dict[str, NodeRecord], None]:
        raise RuntimeError(f"the change failed after reading {sorted(records)}")

    with pytest.raises(RuntimeError, match="failed"):
        directory.update_many([X, Y], half_then_fail)
    assert directory.token() == before
    assert directory.record(X).generation == 1
    assert directory.record(Y) == NodeRecord(Y)

    def both(records: dict[str, NodeRecord]) -> tuple[dict[str, NodeRecord], int]:
        return {i: r.at(r.generation + 1, {"@id": i}) for i, r in records.items()}, len(records)

    assert directory.update_many([X, Y, X], both)[0] == 2  # a repeated IRI is one record
    assert (directory.record(X).generation, directory.record(Y).generation) == (2, 1)


def test_a_change_may_store_some_of_its_records_only(directory: Directory) -> None:
    def only_y(records: dict[str, NodeRecord]) -> tuple[dict[str, NodeRecord], None]:
        return {Y: records[Y].at(1, {"@id": Y})}, None

    directory.update_many([X, Y], only_y)
    assert directory.record(X) == NodeRecord(X)
    assert directory.record(Y).generation == 1


@pytest.mark.parametrize(
    "change",
    [
        lambda records: ({X: records[X].at(0, None)}, None),  # the generation moves back
        lambda records: ({Y: NodeRecord(Y, 9)}, None),  # a node the update was not given
        lambda records: ({X: NodeRecord(Y, 9)}, None),  # a record renamed
    ],
    ids=["backwards", "foreign", "renamed"],
)
def test_a_change_that_breaks_the_rules_is_refused_and_writes_nothing(
    directory: Directory, change: Any
) -> None:
    written(directory, X, 2, a=E)
    before = (directory.token(), directory.record(X))
    with pytest.raises(InvalidInputError, match="urn:node"):
        directory.update_many([X], change)
    assert (directory.token(), directory.record(X)) == before
    assert directory.record(Y) == NodeRecord(Y)


def test_a_write_lease_holder_is_never_refused(directory: Directory) -> None:
    leases = {("b", X)}
    coherence = CoherenceCoordinator(
        DictNodeSource(), directory, holds_write_lease=lambda agent, iri: (agent, iri) in leases
    )
    coherence.write("a", X, node(text="a"), based_on=0)
    coherence.write("a", X, node(text="b"), based_on=1)
    assert coherence.write("b", X, node(text="leased"), based_on=1) == 3
    assert coherence.read("a", X).value == node(text="leased")


# == the change token ===========================================================================


def test_the_token_stays_put_while_nothing_changes_and_moves_on_touch(
    directory: Directory,
) -> None:
    written(directory, X, 1, a=M)
    token = directory.token()
    assert directory.token() == token
    directory.record(X)
    directory.holdings("a")
    directory.version(X, 1)
    assert directory.snapshot(X)[1] == token == directory.token()
    touched = directory.touch()
    assert touched != token
    assert directory.token() == touched
    assert directory.record(X).generation == 1  # a touch changes no record


def test_the_change_token_sees_other_handles_and_stays_put_otherwise(
    shared_directory_backend: Backend[Directory], tmp_path: Path
) -> None:
    mine, theirs = shared_directory_backend.open(), shared_directory_backend.open()
    source = SQLiteNodeSource(tmp_path / "nodes.sqlite3")
    try:
        here = CoherenceCoordinator(source, mine)
        there = CoherenceCoordinator(source, theirs)  # another process, as far as it knows
        here.write("a", X, node(text="a"), based_on=0)
        before = mine.token()
        assert here.read("a", X).kind == "hit"
        assert mine.token() == before
        there.read("b", X)
        assert mine.token() != before
        there.write("b", X, node(text="b"), based_on=1)
        # "a" never got the announcement (other bus, other handle): its read still sees b.
        reading = here.read("a", X)
        assert (reading.value, reading.kind) == (node(text="b"), "change")
        moved = mine.token()
        theirs.touch()
        assert mine.token() != moved  # a touch moves every handle's token
    finally:
        source.close()
        mine.close()
        theirs.close()


_WRITER = textwrap.dedent(
    """
    import sys
    from gliding_core.coherence import CoherenceCoordinator, SQLiteNodeSource
    directory, source = open_backend(), SQLiteNodeSource(sys.argv[1])
    node = {"@id": "urn:node:x", "@type": "Note", "text": "child"}
    print(CoherenceCoordinator(source, directory).write("child", node["@id"], node, based_on=1))
    directory.close()
    source.close()
    """
)


def test_a_write_in_another_process_moves_the_token_and_is_read(
    shared_directory_backend: Backend[Directory], tmp_path: Path
) -> None:
    nodes = tmp_path / "nodes.sqlite3"
    directory, source = shared_directory_backend.open(), SQLiteNodeSource(nodes)
    try:
        here = CoherenceCoordinator(source, directory)
        here.write("a", X, node(text="parent"), based_on=0)
        assert here.read("a", X).kind == "hit"
        before = directory.token()
        child = run_child(shared_directory_backend, _WRITER, str(nodes))
        output, _ = child.communicate(timeout=120)
        assert (child.returncode, output.split()) == (0, ["2"])
        assert directory.token() != before
        reading = here.read("a", X)
        assert (reading.value, reading.generation) == (node(text="child"), 2)
        copies = directory.record(X).copies.values()  # the child's M was written back, shared
        assert {(c.agent, c.state, c.generation) for c in copies} == {("a", S, 2), ("child", S, 2)}
    finally:
        source.close()
        directory.close()


# == kept versions ==============================================================================


@pytest.mark.keep_versions(2)
def test_kept_versions_are_bounded(directory: Directory) -> None:
    coherence = CoherenceCoordinator(DictNodeSource(), directory)
    coherence.write("a", X, node(n=0), based_on=0)
    coherence.read("b", X)
    coherence.expire_lease("b", X)
    for n in range(1, 6):
        coherence.write("a", X, node(n=n), based_on=n)
    assert [g for g in range(1, 7) if directory.version(X, g) is not None] == [4, 5, 6]
    assert coherence.delta(X, 1) is None
    assert coherence.read("b", X).kind == "whole"


def test_a_node_read_before_it_existed_keeps_its_versions_once_written(
    directory: Directory,
) -> None:
    # A read of an absent node leaves a record at generation 0; the writes after it still keep
    # their past values.
    coherence = CoherenceCoordinator(DictNodeSource(), directory)
    with pytest.raises(EntryNotFoundError):
        coherence.read("b", X)
    coherence.write("a", X, node(n=1), based_on=0)
    coherence.read("b", X)
    coherence.expire_lease("b", X)  # b's copy stays at generation 1: its versions are kept
    coherence.write("a", X, node(n=2), based_on=1)
    coherence.write("a", X, node(n=3), based_on=2)
    assert [directory.version(X, g) for g in (1, 2)] == [node(n=1), node(n=2)]
    delta = coherence.delta(X, 1)
    assert delta is not None
    assert (delta.from_generation, delta.to_generation) == (1, 3)
    assert coherence.read("b", X).kind == "change"


def test_no_version_older_than_every_copy_is_kept(directory: Directory) -> None:
    for generation in range(1, 5):
        written(directory, X, generation, a=M)  # the only copy moves along
    assert [g for g in range(1, 5) if directory.version(X, g) is not None] == [4]


# == closing ====================================================================================


def test_a_closed_directory_refuses_use(directory_backend: Backend[Directory]) -> None:
    directory = directory_backend.open()
    written(directory, X, 1, a=M)
    directory.close()
    directory.close()  # twice is harmless
    for use in (
        lambda: directory.record(X),
        lambda: directory.snapshot(X),
        lambda: directory.token(),
        lambda: directory.touch(),
        lambda: directory.holdings("a"),
        lambda: directory.version(X, 1),
        lambda: written(directory, X, 2),
    ):
        with pytest.raises(ClosedError):
            use()
