"""Coordination messages: durable order, cursors without a cap, pushes to subscribers."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
import threading
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

from gliding_core.blackboard.coordination.messages import Message, MessageBoard
from gliding_core.blackboard.coordination.sqlite import CoordinationDB
from gliding_core.bus import EventBus, EventType
from gliding_core.config import CoordinationConfig
from gliding_core.errors import ContentTooLargeError, InvalidInputError


@pytest.fixture
def db(tmp_path: Path) -> Iterator[CoordinationDB]:
    config = CoordinationConfig(max_message_bytes=1_000)
    with CoordinationDB(tmp_path / "blackboard.sqlite3", config=config) as value:
        yield value


@pytest.fixture
def board(db: CoordinationDB) -> MessageBoard:
    return MessageBoard(db)


def test_messages_are_read_back_in_order_after_a_cursor(board: MessageBoard) -> None:
    first = board.publish("progress", {"done": 1}, task="urn:t:1", sender="do-1")
    second = board.publish("resource-request", {"iri": "urn:n:1"}, task="urn:t:1")
    board.publish("progress", {"done": 2}, task="urn:t:2")
    assert first.sequence < second.sequence
    assert [m.payload for m in board.read_since()] == [{"done": 1}, {"iri": "urn:n:1"}, {"done": 2}]
    assert board.read_since(first.sequence)[0] == second
    assert [m.payload["done"] for m in board.read_since(topic="progress")] == [1, 2]
    assert [m.topic for m in board.read_since(task="urn:t:1")] == ["progress", "resource-request"]
    assert board.read_since(0, topic="progress", task="urn:t:2")[0].payload == {"done": 2}
    assert (first.sender, first.task, first.iri[:9]) == ("do-1", "urn:t:1", "urn:uuid:")
    assert board.latest() == board.read_since()[-1].sequence


def test_there_is_no_cap_but_the_caller_s_limit(board: MessageBoard) -> None:
    for index in range(120):  # the reference stopped at 50
        board.publish("tick", {"i": index})
    assert [m.payload["i"] for m in board.read_since()] == list(range(120))
    page = board.read_since(limit=50)
    rest = board.read_since(page[-1].sequence)
    assert len(page) == 50
    assert [m.payload["i"] for m in page + rest] == list(range(120))


def test_messages_survive_reopening_and_sequences_are_never_reused(tmp_path: Path) -> None:
    path = tmp_path / "blackboard.sqlite3"
    with CoordinationDB(path) as db:
        board = MessageBoard(db)
        old = [board.publish("t", {"i": i}).sequence for i in range(3)]
        assert board.prune(old[-1]) == 3
    with CoordinationDB(path) as db:
        board = MessageBoard(db)
        assert board.read_since() == []
        assert board.publish("t").sequence > old[-1]


def test_messages_from_another_process_are_read_in_order(tmp_path: Path) -> None:
    path = tmp_path / "blackboard.sqlite3"
    script = textwrap.dedent(
        """
        import sys
        from gliding_core.blackboard.coordination.sqlite import CoordinationDB
        from gliding_core.blackboard.coordination.messages import MessageBoard
        board = MessageBoard(CoordinationDB(sys.argv[1]))
        for i in range(20):
            board.publish("remote", {"i": i}, sender="child")
        """
    )
    with CoordinationDB(path) as db:
        board = MessageBoard(db)
        board.publish("local", {"i": -1})
        subprocess.run([sys.executable, "-c", script, str(path)], check=True, timeout=120)
        remote = board.read_since(topic="remote")
    assert [m.payload["i"] for m in remote] == list(range(20))


def test_every_message_whose_publish_returned_survives_a_sigkill(tmp_path: Path) -> None:
    path = tmp_path / "blackboard.sqlite3"
    script = textwrap.dedent(
        """
        import sys
        from gliding_core.blackboard.coordination.sqlite import CoordinationDB
        from gliding_core.blackboard.coordination.messages import MessageBoard
        board = MessageBoard(CoordinationDB(sys.argv[1]))
        i = 0
        while True:
            message = board.publish("work", {"i": i})
            print(message.sequence, flush=True)
            i += 1
        """
    )
    child = subprocess.Popen(
        [sys.executable, "-c", script, str(path)], stdout=subprocess.PIPE, text=True
    )
    assert child.stdout is not None
    returned = [int(child.stdout.readline()) for _ in range(200)]
    child.send_signal(signal.SIGKILL)
    child.wait(30)
    child.stdout.close()
    with CoordinationDB(path) as db:
        stored = [m.sequence for m in MessageBoard(db).read_since()]
    assert stored[: len(returned)] == returned  # none lost, in order, none invented before


# -- pushes ------------------------------------------------------------------------------------


def test_subscribers_get_the_messages_of_their_topic_and_task(board: MessageBoard) -> None:
    everything: list[Message] = []
    progress_of_1: list[Message] = []
    board.subscribe(everything.append)
    subscription = board.subscribe(progress_of_1.append, topic="progress", task="urn:t:1")
    board.publish("progress", {"n": 1}, task="urn:t:1")
    board.publish("progress", {"n": 2}, task="urn:t:2")
    board.publish("other", {"n": 3}, task="urn:t:1")
    subscription.cancel()
    board.publish("progress", {"n": 4}, task="urn:t:1")
    assert [m.payload["n"] for m in everything] == [1, 2, 3, 4]
    assert [m.payload["n"] for m in progress_of_1] == [1]
    assert everything == board.read_since()


def test_messages_are_pushed_on_the_memory_s_bus(db: CoordinationDB) -> None:
    bus = EventBus()
    board = MessageBoard(db, bus=bus)
    received: list[Message] = []
    board.subscribe(received.append)
    bus.publish(EventType.COORDINATION_MESSAGE, {"text": "not from a board"})
    message = board.publish("hello", {"x": 1}, task="urn:t:1", sender="plan-1")
    event = bus.recent(EventType.COORDINATION_MESSAGE)[-1]
    assert (event.task_iri, event.source) == ("urn:t:1", "plan-1")
    assert Message(**event.payload) == message
    assert received == [message]


def test_pushes_follow_the_sequence_order_across_threads(board: MessageBoard) -> None:
    seen: list[int] = []
    board.subscribe(lambda m: seen.append(m.sequence))

    def publish_many(name: str) -> None:
        for index in range(50):
            board.publish("race", {"i": index}, sender=name)

    threads = [threading.Thread(target=publish_many, args=(f"t{n}",)) for n in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert seen == sorted(seen)
    assert len(seen) == 200


def test_a_subscriber_may_reply_and_a_failing_one_is_logged(
    board: MessageBoard, caplog: pytest.LogCaptureFixture
) -> None:
    def reply(message: Message) -> None:
        if message.topic == "question":
            board.publish("answer", {"to": message.sequence})

    def broken(message: Message) -> None:
        raise RuntimeError("subscriber bug")

    board.subscribe(reply)
    board.subscribe(broken)
    question = board.publish("question")
    assert board.read_since(question.sequence)[0].payload == {"to": question.sequence}
    assert "subscriber bug" in caplog.text


# -- the mirror and validation -----------------------------------------------------------------


class RecordingMirror:
    def __init__(self) -> None:
        self.calls: list[tuple[str, str, list[dict[str, Any]]]] = []

    def mirror(self, task_iri: str, area: str, nodes: Sequence[Mapping[str, Any]]) -> None:
        self.calls.append((task_iri, area, [dict(n) for n in nodes]))

    def forget(self, iris: Sequence[str]) -> None:
        pass


def test_messages_about_a_task_are_mirrored_into_its_messages_area(db: CoordinationDB) -> None:
    mirror = RecordingMirror()
    board = MessageBoard(db, mirror=mirror)
    board.publish("no-task", {"a": 1})
    message = board.publish("progress", {"b": [1, 2]}, task="urn:t:1", sender="do-1")
    assert len(mirror.calls) == 1
    task_iri, area, [node] = mirror.calls[0]
    assert (task_iri, area) == ("urn:t:1", "messages")
    assert node["@id"] == message.iri
    assert node["@type"] == "CoordinationMessage"
    assert node["payloadJson"] == '{"b": [1, 2]}'
    assert node["task"] == {"@id": "urn:t:1"}


def test_a_mirrored_board_refuses_a_task_the_graph_cannot_hold(db: CoordinationDB) -> None:
    mirror = RecordingMirror()
    board = MessageBoard(db, mirror=mirror)
    with pytest.raises(InvalidInputError, match=r"absolute IRI.*'t1'"):
        board.publish("progress", {"b": 1}, task="t1")
    assert board.read_since(0) == []  # nothing stored
    assert mirror.calls == []
    unmirrored = MessageBoard(db)  # no graph: a task is any name without spaces
    assert unmirrored.publish("progress", task="t1").task == "t1"


@pytest.mark.parametrize(
    ("kwargs", "named"),
    [
        ({"topic": ""}, "topic"),
        ({"topic": "two words"}, "'two words'"),
        ({"payload": [1, 2]}, r"\[1, 2\]"),
        ({"payload": {"x": float("nan")}}, "nan"),
        ({"payload": {"x": object()}}, "not JSON-serialisable"),
        ({"task": ""}, "task IRI"),
        ({"sender": 1}, "1"),
    ],
)
def test_bad_messages_are_refused_naming_the_value(
    board: MessageBoard, kwargs: dict[str, Any], named: str
) -> None:
    request: dict[str, Any] = {"topic": "t", "payload": {}, **kwargs}
    with pytest.raises(InvalidInputError, match=named):
        board.publish(**request)
    assert board.read_since() == []


def test_a_payload_over_the_limit_is_refused(board: MessageBoard) -> None:
    with pytest.raises(ContentTooLargeError, match="over the limit of 1000"):
        board.publish("big", {"text": "x" * 1_000})
    assert board.latest() == 0


@pytest.mark.parametrize(
    "kwargs", [{"cursor": -1}, {"cursor": "3"}, {"limit": 0}, {"limit": True}, {"topic": ""}]
)
def test_bad_reads_are_refused(board: MessageBoard, kwargs: dict[str, Any]) -> None:
    with pytest.raises(InvalidInputError):
        board.read_since(**kwargs)


def test_bad_subscriptions_and_prunes_are_refused(board: MessageBoard) -> None:
    with pytest.raises(InvalidInputError, match="callable"):
        board.subscribe("print")  # type: ignore[arg-type]
    with pytest.raises(InvalidInputError, match="up_to"):
        board.prune(-1)
