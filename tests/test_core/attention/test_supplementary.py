"""Supplementary input (what a user sends while the agent runs): zero loss, exactly once, in
order, audited."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import textwrap
import threading
from collections import defaultdict
from pathlib import Path

import pytest

from gliding_core import (
    EventBus,
    EventType,
    InvalidInputError,
    L0Store,
    Memory,
    SupplementaryInputStore,
)

TASK = "urn:task:1"


def test_put_take_snapshot_and_audit(store: L0Store) -> None:
    bus = EventBus()
    inputs = SupplementaryInputStore(store, bus)
    first = inputs.put(TASK, "use RS256", producer="alice", relevance=0.7)
    inputs.put(TASK, "and rotate keys monthly", producer="alice")
    inputs.put("urn:task:other", "not for this task")
    assert [i.content for i in inputs.snapshot(TASK)] == ["use RS256", "and rotate keys monthly"]
    assert inputs.pending_count(TASK) == 2  # a snapshot consumes nothing
    taken = inputs.take_pending(TASK, consumer="agent-1")
    assert [i.content for i in taken] == ["use RS256", "and rotate keys monthly"]
    assert taken[0].iri == first.iri
    assert taken[0].relevance_score == 0.7
    assert all(i.consumed and i.consumed_by == "agent-1" for i in taken)
    assert inputs.take_pending(TASK) == []
    history = inputs.history(TASK)
    assert [(i.content, i.consumed) for i in history] == [
        ("use RS256", True),
        ("and rotate keys monthly", True),
    ]
    assert [e.payload["content"] for e in bus.recent(EventType.USER_SUPPLEMENTARY_INPUT)] == [
        "use RS256",
        "and rotate keys monthly",
        "not for this task",
    ]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("not an iri", "x"), "task IRI"),
        ((TASK, ""), "non-empty"),
        ((TASK, 42), "42"),
    ],
)
def test_bad_input_is_refused_and_nothing_is_stored(
    store: L0Store, args: tuple[object, object], message: str
) -> None:
    inputs = SupplementaryInputStore(store)
    with pytest.raises(InvalidInputError, match=message):
        inputs.put(*args)  # type: ignore[arg-type]
    with pytest.raises(InvalidInputError, match="relevance"):
        inputs.put(TASK, "x", relevance=1.5)
    assert store.count() == 0


def test_producer_threads_and_a_consumer_loop_deliver_each_input_once_in_order(
    file_store: L0Store,
) -> None:
    inputs = SupplementaryInputStore(file_store)
    producers, per_producer = 4, 250
    delivered: list[str] = []
    done = threading.Event()

    def produce(name: str) -> None:
        for i in range(per_producer):
            inputs.put(TASK, f"{name}:{i}", producer=name)

    def consume() -> None:
        while not done.is_set() or inputs.pending_count(TASK):
            delivered.extend(i.content for i in inputs.take_pending(TASK, limit=7))
            inputs.wait(TASK, timeout=0.01)

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


def test_asyncio_consumer_with_a_thread_producer(store: L0Store) -> None:
    inputs = SupplementaryInputStore(store)

    async def main() -> list[str]:
        producer = threading.Thread(target=lambda: [inputs.put(TASK, f"m{i}") for i in range(50)])
        producer.start()
        got: list[str] = []
        while len(got) < 50:
            got += [i.content for i in await inputs.take_pending_async(TASK)]
            await asyncio.sleep(0)
        producer.join()
        return got

    assert asyncio.run(main()) == [f"m{i}" for i in range(50)]


CONSUMER = textwrap.dedent(
    """
    import sys, time
    from gliding_core import L0Store, SupplementaryInputStore

    store = L0Store(sys.argv[1])
    inputs = SupplementaryInputStore(store)
    run = sys.argv[2]
    while True:
        taken = inputs.take_pending("urn:task:1", consumer=run, limit=3)
        if not taken and run == "second":
            break
        for item in taken:
            print(item.content, flush=True)
        time.sleep(0.005)
    """
)


def test_inputs_survive_a_sigkilled_consumer(tmp_path: Path) -> None:
    path = tmp_path / "l0.sqlite3"
    with L0Store(path) as store:
        inputs = SupplementaryInputStore(store)
        for i in range(300):
            inputs.put(TASK, f"input {i}")
    first = subprocess.Popen(
        [sys.executable, "-c", CONSUMER, str(path), "first"], stdout=subprocess.PIPE, text=True
    )
    assert first.stdout is not None
    printed_first = []
    for line in first.stdout:
        printed_first.append(line.strip())
        if len(printed_first) >= 60:
            break
    os.kill(first.pid, signal.SIGKILL)
    first.wait(timeout=30)
    first.stdout.close()
    second = subprocess.run(
        [sys.executable, "-c", CONSUMER, str(path), "second"],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    printed_second = second.stdout.split("\n")[:-1]
    with L0Store(path) as store:
        history = SupplementaryInputStore(store).history(TASK)
    assert len(history) == 300
    assert all(item.consumed for item in history)  # nothing left behind, nothing lost
    by_first = [i.content for i in history if i.consumed_by == "first"]
    by_second = [i.content for i in history if i.consumed_by == "second"]
    assert len(by_first) + len(by_second) == 300  # each consumed exactly once
    assert printed_second == by_second  # the restart delivered all the undelivered, in order
    assert printed_first == by_first[: len(printed_first)]
    assert len(by_first) - len(printed_first) <= 3  # at most the batch in flight at the kill


def test_start_cycle_turns_inputs_into_protected_turns_once() -> None:
    with Memory() as memory:
        session = memory.session(TASK)
        session.add_turn("user", "Migrate the billing service to Postgres")
        memory.supplements.put(TASK, "keep the old MySQL replica for a week", producer="user")
        memory.supplements.put(TASK, "billing exports must not stop", relevance=0.9)
        taken = session.start_cycle(memory.supplements)
        assert [i.content for i in taken] == [
            "keep the old MySQL replica for a week",
            "billing exports must not stop",
        ]
        turns = session.turns[1:]
        assert [t.is_supplement for t in turns] == [True, True]
        assert turns[1].relevance_score == 0.9
        assert 0.0 <= turns[0].relevance_score <= 1.0
        assert session.start_cycle(memory.supplements) == []
        node = memory.store.get_node(turns[0].l0_archive_iri)
        assert node is not None
        assert node["@type"] == "SupplementaryInput"


def test_wait_returns_when_an_input_arrives(store: L0Store) -> None:
    inputs = SupplementaryInputStore(store)
    assert inputs.wait(TASK, timeout=0.01) is False
    timer = threading.Timer(0.05, lambda: inputs.put(TASK, "late"))
    timer.start()
    assert inputs.wait(TASK, timeout=30) is True
    timer.join()
