"""The PostgreSQL directory's push: a change committed in one process reaches the others by
notification (LISTEN/NOTIFY), before and without any read of theirs.

The contract suite (``tests/test_core/contracts/test_directory.py``) runs the directory's
protocol on PostgreSQL; these tests cover what only this backend does: the listener, its
subscribers, the ``"pushed"`` token, and the listener finding its way back after its
connection was killed.
"""

from __future__ import annotations

import os
import queue
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import psycopg
import pytest

from gliding_core.coherence import CoherenceCoordinator, SQLiteNodeSource
from gliding_core.coherence.directory import Copy, NodeRecord
from gliding_core.coherence.postgres_directory import (
    LISTENER_NAME,
    Consistency,
    DirectoryChange,
    PostgresDirectory,
)
from gliding_core.errors import GlidingError, InvalidInputError
from gliding_core.store.entry import MesiState
from gliding_core.store.postgres import Database
from tests.test_core.contracts.conftest import TEST_DATABASE_URL

X = "urn:node:x"
WAIT_S = 60.0  # a guard against a hang, not a timed assertion: a push takes milliseconds


def node(text: str) -> dict[str, str]:
    return {"@id": X, "@type": "Note", "text": text}


@pytest.fixture
def schema(postgres_schema: str) -> str:
    """A schema of the test's own (``tests/conftest.py`` drops it after the test)."""
    return postgres_schema


def changes_of(directory: PostgresDirectory) -> queue.Queue[DirectoryChange]:
    """The changes the directory's listener pushes, as they arrive."""
    arrived: queue.Queue[DirectoryChange] = queue.Queue()
    directory.subscribe(arrived.put)
    return arrived


_WRITER = textwrap.dedent(
    """
    import os, sys
    from gliding_core.coherence import CoherenceCoordinator, SQLiteNodeSource
    from gliding_core.coherence.postgres_directory import PostgresDirectory
    url, schema, nodes = os.environ["GLIDING_TEST_DATABASE_URL"], sys.argv[1], sys.argv[2]
    directory, source = PostgresDirectory.open(url, schema=schema), SQLiteNodeSource(nodes)
    node = {"@id": "urn:node:x", "@type": "Note", "text": "child"}
    print(CoherenceCoordinator(source, directory).write("child", node["@id"], node, based_on=1))
    directory.close()
    source.close()
    """
)


@pytest.mark.parametrize("consistency", ["strict", "pushed"])
def test_a_write_in_another_process_is_pushed_before_any_read(
    postgres_url: str, schema: str, tmp_path: Path, consistency: Consistency
) -> None:
    nodes = tmp_path / "nodes.sqlite3"
    directory = PostgresDirectory.open(postgres_url, schema=schema, consistency=consistency)
    source = SQLiteNodeSource(nodes)
    try:
        here = CoherenceCoordinator(source, directory)
        here.write("a", X, node("parent"), based_on=0)
        assert here.read("a", X).kind == "hit"
        before = directory.token()
        arrived = changes_of(directory)
        env = {**os.environ, TEST_DATABASE_URL: postgres_url}
        child = subprocess.run(
            [sys.executable, "-c", _WRITER, schema, str(nodes)],
            capture_output=True,
            text=True,
            timeout=120,
            env=env,
            check=False,
        )
        assert (child.returncode, child.stdout.split()) == (0, ["2"]), child.stderr
        change = arrived.get(timeout=WAIT_S)  # pushed: this process has not read anything
        assert change.iris == (X,)
        assert isinstance(before, int)
        assert change.token > before
        assert directory.token() == change.token  # the token moved with the push
        a = directory.record(X).copies["a"]
        assert (a.state, a.generation) == (MesiState.INVALID, 1)  # marked in the directory
        reading = here.read("a", X)
        assert (reading.value, reading.generation, reading.kind) == (node("child"), 2, "change")
    finally:
        source.close()
        directory.close()


def test_a_handle_is_not_told_of_its_own_changes_and_others_are(
    postgres_url: str, schema: str
) -> None:
    one = PostgresDirectory.open(postgres_url, schema=schema, consistency="pushed")
    two = PostgresDirectory.open(postgres_url, schema=schema, consistency="pushed")
    try:
        to_one, to_two = changes_of(one), changes_of(two)
        token = one.touch()
        change = to_two.get(timeout=WAIT_S)
        assert change == DirectoryChange(token, ())  # a touch names no node: none changed
        assert two.token() == one.token() == token
        assert to_one.empty()
        two.touch()
        assert to_one.get(timeout=WAIT_S).token == token + 1
    finally:
        one.close()
        two.close()


def test_a_notification_too_large_to_name_its_nodes_names_none(
    postgres_url: str, schema: str
) -> None:
    one = PostgresDirectory.open(postgres_url, schema=schema)
    two = PostgresDirectory.open(postgres_url, schema=schema)
    iris = [f"urn:node:{'n' * 200}{index}" for index in range(60)]  # 12 kB of IRIs
    try:
        arrived = changes_of(two)

        def change(records: dict[str, NodeRecord]) -> tuple[dict[str, NodeRecord], None]:
            return {iri: record.at(1, {"@id": iri}) for iri, record in records.items()}, None

        one.update_many(iris, change)
        pushed = arrived.get(timeout=WAIT_S)
        assert pushed.iris is None  # anything may have changed
        assert pushed.token == two.token()
    finally:
        one.close()
        two.close()


def test_the_listener_comes_back_after_its_connection_is_killed(
    postgres_url: str, schema: str
) -> None:
    mine = PostgresDirectory.open(postgres_url, schema=schema, consistency="pushed")
    theirs = PostgresDirectory.open(postgres_url, schema=schema)
    try:
        arrived = changes_of(mine)
        with psycopg.connect(postgres_url, autocommit=True) as admin:
            killed = admin.execute(
                "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity"
                " WHERE application_name = %s AND pid <> pg_backend_pid()",
                (LISTENER_NAME,),
            ).fetchone()
        assert killed is not None
        assert killed[0] >= 1
        back = arrived.get(timeout=WAIT_S)
        assert back.iris is None  # what was missed while away is unknown: anything
        token = theirs.touch()
        while (change := arrived.get(timeout=WAIT_S)).token < token:
            pass
        assert change == DirectoryChange(token, ())
        assert mine.token() == token
    finally:
        mine.close()
        theirs.close()


def test_bad_settings_and_subscribers_are_refused(postgres_url: str, schema: str) -> None:
    eventual: Any = "eventual"
    with pytest.raises(InvalidInputError, match="consistency"):
        PostgresDirectory.open(postgres_url, schema=schema, consistency=eventual)
    with pytest.raises(InvalidInputError, match="Database"):
        PostgresDirectory("postgresql://nobody@/nowhere")  # type: ignore[arg-type]
    directory = PostgresDirectory.open(postgres_url, schema=schema)
    try:
        with pytest.raises(InvalidInputError, match="callable"):
            directory.subscribe("print")  # type: ignore[arg-type]
        assert "password" not in repr(directory) or "***" in repr(directory)
    finally:
        directory.close()


def test_a_push_says_which_nodes_moved_and_which_copies_ended(
    postgres_url: str, schema: str, tmp_path: Path
) -> None:
    """What another process must drop: every copy of a moved node; a copy that ended on a node
    that did not move (a lapsed lease); nothing for another agent's read."""
    one = PostgresDirectory.open(postgres_url, schema=schema)
    two = PostgresDirectory.open(postgres_url, schema=schema)
    source = SQLiteNodeSource(tmp_path / "nodes.sqlite3")
    try:
        arrived = changes_of(two)
        here = CoherenceCoordinator(source, one)
        token = here.directory.token()
        here.write("a", X, node("one"), based_on=0)
        assert arrived.get(timeout=WAIT_S).moved == (X,)
        here.read("b", X)  # a's copy M -> S (written back), b's S: no valid copy ends
        change = arrived.get(timeout=WAIT_S)
        assert (change.iris, change.moved, change.lost) == ((X,), (), ())
        here.expire_lease("b", X)
        change = arrived.get(timeout=WAIT_S)
        assert (change.iris, change.moved, change.lost) == ((X,), (), ((X, "b"),))
        assert isinstance(token, int)
        assert change.token > token
    finally:
        source.close()
        one.close()
        two.close()


# -- round trips ----------------------------------------------------------------------------------


def _moved(records: dict[str, NodeRecord], text: str) -> dict[str, NodeRecord]:
    """Each record one generation on, with ``text`` (quotes, a backslash, braces: values bound
    on the client) and the copy of agent ``NULL`` (a name an array literal must quote) at it."""
    moved = {}
    for iri, record in records.items():
        generation = record.generation + 1
        value = {"@id": iri, "@type": "Note", "text": f"{text} \"{{'\\,"}
        copy = Copy("NULL", MesiState.MODIFIED, generation)
        moved[iri] = NodeRecord(iri, generation, value, {"NULL": copy})
    return moved


def test_an_update_is_two_round_trips_whatever_it_changes(postgres_url: str, schema: str) -> None:
    """The opening (lock, clock) goes with the read of the records, and every write (nodes,
    copies, kept versions, the epoch, the notification) with the COMMIT; the token read inside
    the update is the epoch it holds, read from nowhere."""
    database = Database(postgres_url, schema=schema)
    directory = PostgresDirectory(database, keep_versions=2, owns_database=True)
    try:
        iris = [f"urn:node:{n}" for n in range(5)]
        tokens: list[object] = []

        def change(text: str) -> Any:
            def step(records: dict[str, NodeRecord]) -> tuple[dict[str, NodeRecord], None]:
                tokens.append(directory.token())
                return _moved(records, text), None

            return step

        for round_ in range(4):
            before = database.statements
            _, token = directory.update_many(iris, change(f"round {round_}"))
            assert database.statements - before == 2
            assert tokens[-1] == token - 1  # the epoch held, before this update's move
        before = database.statements
        assert directory.update_many(iris, lambda records: (records, None))[1] == token
        assert database.statements - before == 2  # nothing changed: the read and the COMMIT
        assert directory.token() == token
        for iri in iris:  # the newest generations but the current kept, as the contract says
            assert directory.record(iri).generation == 4
            record = directory.record(iri)
            assert record.copies == {"NULL": Copy("NULL", MesiState.MODIFIED, 4)}
            assert record.value == _moved({iri: NodeRecord(iri, 3)}, "round 3")[iri].value
            kept = [g for g in range(1, 5) if directory.version(iri, g) is not None]
            assert kept == [4]  # the only copy is at 4: nothing older is kept
    finally:
        directory.close()


def test_an_update_that_fails_in_its_commit_leaves_nothing(postgres_url: str, schema: str) -> None:
    """The writes go with the COMMIT: one the database refuses there (a generation moved back,
    which the table's trigger refuses) fails the update, which leaves every record, the epoch
    and the next update as they were."""
    database = Database(postgres_url, schema=schema)
    directory = PostgresDirectory(database, owns_database=True)
    y = "urn:node:y"
    try:
        directory.update_many([X, y], lambda records: (_moved(records, "one"), None))
        token = directory.token()

        def behind(records: dict[str, NodeRecord]) -> tuple[dict[str, NodeRecord], None]:
            with database.connection() as conn:  # moved past this update by someone else
                conn.execute("UPDATE coherence_nodes SET generation = 9 WHERE iri = %s", (X,))
            return _moved(records, "two"), None

        with pytest.raises(GlidingError, match="never decreases"):
            directory.update_many([X, y], behind)
        assert directory.token() == token
        assert directory.record(y).generation == 1
        assert directory.record(X).generation == 9
        _, after = directory.update_many([y], lambda records: (_moved(records, "three"), None))
        assert (after, directory.record(y).generation) == (token + 1, 2)
    finally:
        directory.close()
