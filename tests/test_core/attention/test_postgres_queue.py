"""The PostgreSQL supplementary-input queue gives every pending input to the one run that starts
the next cycle: a second consumer of the task waits for the first one's transaction and then
finds nothing, instead of taking copies of inputs the first has not committed yet.

The contract (``tests/test_core/contracts/test_supplementary_queue.py``) runs on it too; this
file holds what only a store with side-by-side writers needs.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import psycopg
import pytest

from gliding_core import InvalidInputError, L0Store
from gliding_core.attention.postgres_queue import PostgresSupplementaryQueue
from gliding_core.attention.supplementary import SupplementaryInput
from gliding_core.store.postgres import PostgresEntryStore

TASK = "urn:task:cycle"


@pytest.fixture
def stores(postgres_url: str, postgres_schema: str) -> Iterator[list[PostgresEntryStore]]:
    opened = [PostgresEntryStore(postgres_url, schema=postgres_schema) for _ in range(2)]
    yield opened
    for store in opened:
        store.close()


def _waiting_on_a_lock(url: str) -> bool:
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute(
            "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted"
        ).fetchone()
    return bool(row and row[0])


def _waiting_on_any_lock(url: str) -> bool:
    """Whether a transaction waits for a lock of any kind (the task's, or a row's)."""
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute("SELECT count(*) FROM pg_locks WHERE NOT granted").fetchone()
    return bool(row and row[0])


def _until_waiting_or_done(url: str, other: threading.Thread) -> None:
    """Return when ``other`` has finished or waits for a lock (a guard against a hang, not a
    timing: the test asserts what each side saw, never how soon)."""
    deadline = time.monotonic() + 60
    while other.is_alive() and not _waiting_on_any_lock(url):
        assert time.monotonic() < deadline, "the other worker neither waited nor finished"
        time.sleep(0.01)


def _rows_of(url: str, schema: str, iris: list[str]) -> int:
    """How many rows of ``iris`` the schema's entries table holds, expired or not."""
    with psycopg.connect(url) as conn:
        row = conn.execute(
            f'SELECT count(*) FROM "{schema}".entries WHERE iri = ANY(%s::text[])', (iris,)
        ).fetchone()
    return int(row[0]) if row else 0


def test_a_consumer_racing_a_forget_never_writes_a_deleted_input_back(
    stores: list[PostgresEntryStore], postgres_url: str, postgres_schema: str
) -> None:
    """A run starts its cycle while a forget of the task has deleted the inputs and not yet
    committed: the run waits for the forget and finds nothing; without the task's lock it
    would mark the deleted inputs consumed, writing them back as new entries."""
    forgetting, consuming = (PostgresSupplementaryQueue(store) for store in stores)
    iris = [forgetting.put(TASK, f"secret input {i}").iri for i in range(3)]
    taken: list[list[SupplementaryInput]] = []
    run = threading.Thread(target=lambda: taken.append(consuming.take_pending(TASK)))
    with stores[0].transaction():  # the forget has deleted them; its commit is still to come
        assert forgetting.forget(TASK) == iris
        run.start()
        _until_waiting_or_done(postgres_url, run)
    run.join()
    assert _rows_of(postgres_url, postgres_schema, iris) == 0  # nothing written back
    assert taken == [[]]
    assert consuming.history(TASK) == []
    assert stores[1].get_many(iris, include_expired=True) == {}


def test_a_forget_racing_a_consumer_deletes_what_the_consumer_took(
    stores: list[PostgresEntryStore], postgres_url: str, postgres_schema: str
) -> None:
    """The other order: a run has taken the inputs and not yet committed when the forget
    starts; the forget waits for the run, then deletes the inputs it consumed."""
    consuming, forgetting = (PostgresSupplementaryQueue(store) for store in stores)
    iris = [consuming.put(TASK, f"secret input {i}").iri for i in range(3)]
    forgotten: list[list[str]] = []
    forget = threading.Thread(target=lambda: forgotten.append(forgetting.forget(TASK)))
    with stores[0].transaction():  # the run takes the inputs; its commit is still to come
        assert [i.iri for i in consuming.take_pending(TASK, consumer="run-1")] == iris
        forget.start()
        _until_waiting_or_done(postgres_url, forget)
    forget.join()
    assert forgotten == [iris]
    assert _rows_of(postgres_url, postgres_schema, iris) == 0
    assert forgetting.history(TASK) == []


def test_a_second_run_starting_at_the_same_moment_gets_nothing(
    stores: list[PostgresEntryStore], postgres_url: str
) -> None:
    first, second = (PostgresSupplementaryQueue(store) for store in stores)
    for i in range(5):
        first.put(TASK, f"input {i}")
    late: list[list[SupplementaryInput]] = []
    other = threading.Thread(target=lambda: late.append(second.take_pending(TASK)))
    with stores[0].transaction():  # the first run starts its cycle: takes, archives, commits
        taken = first.take_pending(TASK, consumer="run-1")
        other.start()
        # Go on when the second run has finished (it must not) or waits for the task's lock.
        deadline = time.monotonic() + 60
        while other.is_alive() and not _waiting_on_a_lock(postgres_url):
            assert time.monotonic() < deadline, "the second run neither waited nor finished"
            time.sleep(0.01)
    other.join()
    assert [i.content for i in taken] == [f"input {i}" for i in range(5)]
    assert late == [[]]
    assert second.pending_count(TASK) == 0


def test_consumers_of_different_tasks_do_not_wait_for_each_other(
    stores: list[PostgresEntryStore],
) -> None:
    first, second = (PostgresSupplementaryQueue(store) for store in stores)
    first.put(TASK, "for the first task")
    second.put("urn:task:other", "for the other task")
    with stores[0].transaction():
        assert [i.content for i in first.take_pending(TASK)] == ["for the first task"]
        # Inside the first task's open transaction: the other task's lock is free.
        assert [i.content for i in second.take_pending("urn:task:other")] == ["for the other task"]


def test_the_queue_needs_a_postgres_store() -> None:
    with L0Store() as store, pytest.raises(InvalidInputError, match="PostgresEntryStore"):
        PostgresSupplementaryQueue(store)  # type: ignore[arg-type]
