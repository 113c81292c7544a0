"""SupplementaryQueue contract: zero loss, exactly once, in order, audited, and taken inside the
caller's L0 transaction.

Every test runs on each queue of ``conftest.SUPPLEMENTARY_QUEUES`` (one on each L0 store);
tests with a second handle or a child process on the shared ones.
"""

from __future__ import annotations

import asyncio
import os
import signal
import threading
from collections import defaultdict

import pytest

from gliding_core import EntryStore, InvalidInputError, SupplementaryQueue
from tests.test_core.contracts.conftest import Backend, close_queue, run_child

TASK = "urn:task:1"


def test_the_handle_is_a_supplementary_queue(queue: SupplementaryQueue) -> None:
    assert isinstance(queue, SupplementaryQueue)
    assert isinstance(queue.store, EntryStore)


def test_put_take_snapshot_and_audit(queue: SupplementaryQueue) -> None:
    first = queue.put(TASK, "use RS256", producer="alice", relevance=0.7)
    queue.put(TASK, "and rotate keys monthly", producer="alice")
    queue.put("urn:task:other", "not for this task")
    assert [i.content for i in queue.snapshot(TASK)] == ["use RS256", "and rotate keys monthly"]
    assert queue.pending_count(TASK) == 2  # a snapshot consumes nothing
    taken = queue.take_pending(TASK, consumer="agent-1")
    assert [i.content for i in taken] == ["use RS256", "and rotate keys monthly"]
    assert taken[0].iri == first.iri
    assert taken[0].relevance_score == 0.7
    assert all(i.consumed and i.consumed_by == "agent-1" for i in taken)
    assert queue.take_pending(TASK) == []
    history = queue.history(TASK)
    assert [(i.content, i.consumed) for i in history] == [
        ("use RS256", True),
        ("and rotate keys monthly", True),
    ]
    assert [i.content for i in queue.snapshot("urn:task:other")] == ["not for this task"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("not an iri", "x"), "task IRI"),
        ((TASK, ""), "non-empty"),
        ((TASK, 42), "42"),
    ],
)
def test_bad_input_is_refused_and_nothing_is_stored(
    queue: SupplementaryQueue, args: tuple[object, object], message: str
) -> None:
    with pytest.raises(InvalidInputError, match=message):
        queue.put(*args)  # type: ignore[arg-type]
    with pytest.raises(InvalidInputError, match="relevance"):
        queue.put(TASK, "x", relevance=1.5)
    assert queue.store.count() == 0
    assert queue.history(TASK) == []


def test_a_take_inside_a_rolled_back_transaction_gives_nothing_away(
    queue: SupplementaryQueue,
) -> None:
    """Taking the inputs and archiving them commit or roll back together (a session's cycle)."""
    queue.put(TASK, "first")
    queue.put(TASK, "second")

    def cycle_that_fails() -> None:
        with queue.store.transaction():
            taken = queue.take_pending(TASK, consumer="run-1")
            assert [i.content for i in taken] == ["first", "second"]
            queue.store.put({"@id": "urn:turn:1", "text": taken[0].content})
            raise RuntimeError("the archive failed")

    with pytest.raises(RuntimeError, match="the archive failed"):
        cycle_that_fails()
    assert "urn:turn:1" not in queue.store
    assert [i.content for i in queue.snapshot(TASK)] == ["first", "second"]
    assert not any(i.consumed for i in queue.history(TASK))
    with queue.store.transaction():
        taken = queue.take_pending(TASK, consumer="run-2")
    assert [(i.content, i.consumed_by) for i in taken] == [("first", "run-2"), ("second", "run-2")]
    assert queue.take_pending(TASK) == []


def test_producer_threads_and_a_consumer_loop_deliver_each_input_once_in_order(
    queue: SupplementaryQueue,
) -> None:
    producers, per_producer = 4, 250
    delivered: list[str] = []
    done = threading.Event()

    def produce(name: str) -> None:
        for i in range(per_producer):
            queue.put(TASK, f"{name}:{i}", producer=name)

    def consume() -> None:
        while not done.is_set() or queue.pending_count(TASK):
            delivered.extend(i.content for i in queue.take_pending(TASK, limit=7))
            queue.wait(TASK, timeout=0.01)

    consumer = threading.Thread(target=consume)
    consumer.start()
    threads = [threading.Thread(target=produce, args=(f"p{k}",)) for k in range(producers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    done.set()
    consumer.join(timeout=60)
    assert len(delivered) == producers * per_producer
    assert len(set(delivered)) == len(delivered)  # exactly once
    by_producer: dict[str, list[int]] = defaultdict(list)
    for content in delivered:
        name, number = content.split(":")
        by_producer[name].append(int(number))
    for numbers in by_producer.values():
        assert numbers == list(range(per_producer))  # in order per producer


def test_two_handles_consuming_at_once_take_each_input_once(
    shared_queue_backend: Backend[SupplementaryQueue],
) -> None:
    """Two workers on one database, each with its own handle, start cycles at the same time."""
    producer = shared_queue_backend.open()
    consumers = [shared_queue_backend.open() for _ in range(2)]
    try:
        for i in range(400):
            producer.put(TASK, f"input {i}")
        taken: dict[int, list[str]] = {0: [], 1: []}
        start = threading.Barrier(2)

        def consume(k: int) -> None:
            start.wait(timeout=60)
            while batch := consumers[k].take_pending(TASK, consumer=f"c{k}", limit=5):
                taken[k].extend(i.content for i in batch)

        threads = [threading.Thread(target=consume, args=(k,)) for k in range(2)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        together = taken[0] + taken[1]
        assert sorted(together) == sorted(f"input {i}" for i in range(400))  # each exactly once
        for k in range(2):  # each consumer received its share in the order they were put
            numbers = [int(content.split()[-1]) for content in taken[k]]
            assert numbers == sorted(numbers)
        history = producer.history(TASK)
        assert {i.content: i.consumed_by for i in history} == {
            content: f"c{k}" for k in range(2) for content in taken[k]
        }
    finally:
        close_queue(producer)
        for consumer in consumers:
            close_queue(consumer)


def test_asyncio_consumer_with_a_thread_producer(queue: SupplementaryQueue) -> None:
    async def main() -> list[str]:
        producer = threading.Thread(target=lambda: [queue.put(TASK, f"m{i}") for i in range(50)])
        producer.start()
        got: list[str] = []
        while len(got) < 50:
            got += [i.content for i in await queue.take_pending_async(TASK)]
            await asyncio.sleep(0)
        producer.join()
        return got

    assert asyncio.run(main()) == [f"m{i}" for i in range(50)]


CONSUMER = """
import sys, time

inputs = open_backend()
run = sys.argv[1]
while True:
    taken = inputs.take_pending("urn:task:1", consumer=run, limit=3)
    if not taken and run == "second":
        break
    for item in taken:
        print(item.content, flush=True)
    time.sleep(0.005)
"""


def test_inputs_survive_a_sigkilled_consumer(
    shared_queue_backend: Backend[SupplementaryQueue],
) -> None:
    inputs = shared_queue_backend.open()
    try:
        for i in range(300):
            inputs.put(TASK, f"input {i}")
    finally:
        close_queue(inputs)
    first = run_child(shared_queue_backend, CONSUMER, "first")
    assert first.stdout is not None
    printed_first = []
    for line in first.stdout:
        printed_first.append(line.strip())
        if len(printed_first) >= 60:
            break
    os.kill(first.pid, signal.SIGKILL)
    first.wait(timeout=30)
    first.stdout.close()
    second = run_child(shared_queue_backend, CONSUMER, "second")
    out, _ = second.communicate(timeout=120)
    assert second.returncode == 0
    printed_second = out.split("\n")[:-1]
    inputs = shared_queue_backend.open()
    try:
        history = inputs.history(TASK)
    finally:
        close_queue(inputs)
    assert len(history) == 300
    assert all(item.consumed for item in history)  # nothing left behind, nothing lost
    by_first = [i.content for i in history if i.consumed_by == "first"]
    by_second = [i.content for i in history if i.consumed_by == "second"]
    assert len(by_first) + len(by_second) == 300  # each consumed exactly once
    assert printed_second == by_second  # the restart delivered all the undelivered, in order
    assert printed_first == by_first[: len(printed_first)]
    assert len(by_first) - len(printed_first) <= 3  # at most the batch in flight at the kill


def test_wait_returns_when_an_input_arrives(queue: SupplementaryQueue) -> None:
    assert queue.wait(TASK, timeout=0.01) is False
    timer = threading.Timer(0.05, lambda: queue.put(TASK, "late"))
    timer.start()
    assert queue.wait(TASK, timeout=30) is True
    timer.join()


def test_wait_sees_an_input_put_through_another_handle(
    shared_queue_backend: Backend[SupplementaryQueue],
) -> None:
    waiting, other = shared_queue_backend.open(), shared_queue_backend.open()
    try:
        assert waiting.wait(TASK, timeout=0.01) is False
        other.put(TASK, "from another worker")
        assert waiting.wait(TASK, timeout=30) is True
        assert [i.content for i in waiting.take_pending(TASK)] == ["from another worker"]
    finally:
        close_queue(waiting)
        close_queue(other)
