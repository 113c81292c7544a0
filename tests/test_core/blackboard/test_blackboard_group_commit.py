"""Group commit: the writes several threads queue while one commits are committed together.

Groups are formed for certain by holding the node store's writer while a first write leads:
the writes queued meanwhile are the next group. Each write is still decided alone (rights,
fences, base generations), generations of one node follow the commit order, and nothing is
lost when threads race on one node.
"""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from gliding_core.blackboard.board import Blackboard
from gliding_core.blackboard.coordination.registries import Coordination
from gliding_core.blackboard.coordination.sqlite import CoordinationDB
from gliding_core.blackboard.graph import EmbeddedGraph
from gliding_core.blackboard.groupcommit import CommitQueue, Job
from gliding_core.bus import EventBus, EventType
from gliding_core.config import BlackboardConfig
from gliding_core.errors import (
    InvalidInputError,
    LeaseConflictError,
    PermissionDeniedError,
    StaleWriteError,
    StorageError,
)
from gliding_core.store.entry import MesiState
from gliding_core.store.sqlite import L0Store

TASK = "iri://task/grouped"
QUIET = BlackboardConfig(flush_interval_s=0.0)


@pytest.fixture(autouse=True)
def _sigint_raises() -> Iterator[None]:
    """SIGINT raises ``KeyboardInterrupt`` during each test, as the interrupt tests need: a
    process started in the background by a shell inherits SIGINT ignored."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)


@pytest.fixture(params=["memory", "disk"])
def board(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Blackboard]:
    graph = EmbeddedGraph() if request.param == "memory" else EmbeddedGraph(tmp_path / "graph")
    store = L0Store(tmp_path / "l0.sqlite3")
    with Blackboard(graph, store=store, config=QUIET) as value:
        yield value
    store.close()


def run_interrupted(queue: CommitQueue[Any], job: Job, *, beside: Callable[[], None]) -> None:
    """Run ``job`` on this (main) thread while ``beside`` runs on another and arranges the
    ``KeyboardInterrupt`` it must raise; ``beside`` has returned when this does."""
    helper = threading.Thread(target=beside)
    helper.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            queue.run(job)
    finally:
        helper.join()


def wait_for(condition: Callable[[], bool]) -> None:
    """Wait until ``condition`` holds (a deadline against a hang, not a timed assertion)."""
    deadline = time.monotonic() + 30
    while not condition():
        assert time.monotonic() < deadline, "the writers never queued"
        time.sleep(0.001)


class Writer(threading.Thread):
    """A thread making one call and keeping its result or its exception."""

    def __init__(self, call: Callable[[], Any]) -> None:
        super().__init__()
        self.call = call
        self.result: Any = None
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            self.result = self.call()
        except BaseException as exc:
            self.error = exc


def grouped(board: Blackboard, first: Writer, queued: list[Writer]) -> None:
    """Run ``first`` as the leader, held in its commit until ``queued`` all wait behind it."""
    queue = board.writes.queue
    before = queue.groups
    with board.nodes.writer:  # the leader blocks on the store's writer inside its transaction
        first.start()
        wait_for(lambda: queue.groups == before + 1)
        for count, writer in enumerate(queued, start=1):
            writer.start()
            wait_for(lambda: queue.waiting == count)  # noqa: B023 (called at once)
    for writer in [first, *queued]:
        writer.join()


def node(iri: str, text: str) -> dict[str, Any]:
    return {"@id": iri, "@type": "Step", "text": text}


def test_a_refused_write_in_a_group_fails_only_its_own_writer(board: Blackboard) -> None:
    do, other = board.agent("do", role="do", task=TASK), board.agent("o", role="do", task=TASK)
    checker = board.agent("check", role="check", task=TASK)  # may not write execution
    do.write([node("urn:g:moved", "v1")], area="execution")
    do.write([node("urn:g:moved", "v2")], area="execution")
    first = Writer(lambda: do.write([node("urn:g:first", "f")], area="execution"))
    ok_one = Writer(lambda: other.write([node("urn:g:one", "1")], area="execution"))
    stale = Writer(lambda: other.write([node("urn:g:moved", "late")], area="execution", based_on=1))
    denied = Writer(lambda: checker.write([node("urn:g:denied", "x")], area="execution"))
    ok_two = Writer(
        lambda: do.write([node("urn:g:two", "2"), node("urn:g:three", "3")], area="execution")
    )
    grouped(board, first, [ok_one, stale, denied, ok_two])
    queue = board.writes.queue
    assert (queue.groups, queue.jobs) == (4, 7)  # two writes before, then 1 + a group of 4
    assert isinstance(stale.error, StaleWriteError)
    assert stale.error.current_generation == 2
    assert isinstance(denied.error, PermissionDeniedError)
    assert first.error is None
    assert ok_one.error is None
    assert ok_two.error is None
    assert [n.generation for n in ok_two.result] == [1, 1]
    assert board.read("urn:g:denied") is None
    moved = board.read("urn:g:moved")
    assert moved is not None
    assert (moved.generation, moved.node["text"]) == (2, "v2")
    for iri in ("urn:g:first", "urn:g:one", "urn:g:two", "urn:g:three"):
        assert board.read(iri) is not None


@pytest.fixture
def leased_board(tmp_path: Path) -> Iterator[Blackboard]:
    """A board with a coordination layer (leases)."""
    bus = EventBus()
    coordination = Coordination(CoordinationDB(None), bus=bus)
    store = L0Store(tmp_path / "l0.sqlite3")
    with Blackboard(
        EmbeddedGraph(), store=store, bus=bus, config=QUIET, coordination=coordination
    ) as value:
        yield value
    store.close()


def test_a_group_reads_its_nodes_leases_once_and_a_lease_refuses_only_its_write(
    leased_board: Blackboard, monkeypatch: pytest.MonkeyPatch
) -> None:
    board = leased_board
    do, other = board.agent("do", role="do", task=TASK), board.agent("o", role="do", task=TASK)
    do.write([node("urn:g:leased", "v1"), node("urn:g:mine", "m1")], area="execution")
    other.acquire("urn:g:leased", mode="write")
    token = other.acquire("urn:g:mine", mode="write").token
    assert board.coordination is not None
    leases = board.coordination.leases
    reads: list[list[str]] = []
    holders_of = leases.holders_of

    def counted(resources: Any) -> Any:
        reads.append(list(resources))
        return holders_of(resources)

    monkeypatch.setattr(leases, "holders_of", counted)
    first = Writer(lambda: do.write([node("urn:g:first", "f")], area="execution"))
    blocked = Writer(lambda: do.write([node("urn:g:leased", "mine now")], area="execution"))
    guarded = Writer(
        lambda: other.write([node("urn:g:mine", "m2")], area="execution", lease_token=token)
    )
    plain = Writer(
        lambda: do.write([node("urn:g:p1", "1"), node("urn:g:p2", "2")], area="execution")
    )
    grouped(board, first, [blocked, guarded, plain])
    assert isinstance(blocked.error, LeaseConflictError)
    assert (first.error, guarded.error, plain.error) == (None, None, None)
    # The leader alone, then the group of three: one read for the nodes written without a
    # token (the guarded write's fence is its token's check).
    assert reads == [["urn:g:first"], ["urn:g:leased", "urn:g:p1", "urn:g:p2"]]
    leased, mine = board.read("urn:g:leased"), board.read("urn:g:mine")
    assert leased is not None
    assert mine is not None
    assert (leased.node["text"], mine.node["text"]) == ("v1", "m2")
    assert board.read("urn:g:p2") is not None


def test_a_group_is_one_store_write_and_each_node_is_as_written_alone(
    board: Blackboard, monkeypatch: pytest.MonkeyPatch
) -> None:
    agents = [board.agent(f"a{i}", role="do", task=TASK) for i in range(5)]
    extends: list[int] = []
    extend = board.backend.extend

    def counted(quads: Any) -> None:
        extends.append(len(quads))
        extend(quads)

    monkeypatch.setattr(board.backend, "extend", counted)
    first = Writer(lambda: agents[0].write([node("urn:g:0", "zero")], area="execution"))
    queued = [
        Writer(lambda a=a, i=i: a.write([node(f"urn:g:{i}", f"t{i}")], area="execution"))
        for i, a in enumerate(agents[1:], start=1)
    ]
    grouped(board, first, queued)
    assert (board.writes.queue.groups, board.writes.queue.jobs) == (2, 5)
    assert len(extends) == 2  # the first write, then the group of four in one transaction
    assert extends[1] == 4 * extends[0]
    coordinator = board.coherence
    assert coordinator is not None
    for i, agent in enumerate(agents):
        written = board.read(f"urn:g:{i}")
        assert written is not None
        assert written.dirty
        assert written.generation == 1
        assert written.node == node(f"urn:g:{i}", "zero" if i == 0 else f"t{i}")
        assert coordinator.copies(f"urn:g:{i}") == {agent.name: MesiState.MODIFIED}
        assert agent.read(f"urn:g:{i}") == written


def test_a_group_whose_store_write_fails_is_committed_again_write_by_write(
    board: Blackboard, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Only the writer whose own write fails alone gets the error; the others are stored."""
    agents = [board.agent(f"a{i}", role="do", task=TASK) for i in range(4)]
    extend = board.backend.extend

    def failing(quads: Any) -> None:
        if any(quad.subject.value == "urn:g:bad" for quad in quads):
            raise StorageError("the store refused urn:g:bad")
        extend(quads)

    monkeypatch.setattr(board.backend, "extend", failing)
    first = Writer(lambda: agents[0].write([node("urn:g:0", "zero")], area="execution"))
    good = Writer(lambda: agents[1].write([node("urn:g:1", "one")], area="execution"))
    bad = Writer(lambda: agents[2].write([node("urn:g:bad", "x")], area="execution"))
    also = Writer(lambda: agents[3].write([node("urn:g:3", "three")], area="execution"))
    grouped(board, first, [good, bad, also])
    assert isinstance(bad.error, StorageError)
    assert (good.error, also.error, first.error) == (None, None, None)
    assert board.read("urn:g:bad") is None
    coordinator = board.coherence
    assert coordinator is not None
    assert coordinator.copies("urn:g:bad") == {}
    for i in (1, 3):
        written = board.read(f"urn:g:{i}")
        assert written is not None
        assert written.generation == 1
        assert coordinator.copies(f"urn:g:{i}") == {f"a{i}": MesiState.MODIFIED}


def test_writes_of_one_node_queued_together_commit_in_turn(board: Blackboard) -> None:
    agents = [board.agent(f"a{i}", role="do", task=TASK) for i in range(4)]
    first = Writer(lambda: agents[0].write([node("urn:g:same", "a0")], area="execution"))
    queued = [
        Writer(lambda a=a: a.write([node("urn:g:same", a.name)], area="execution"))
        for a in agents[1:]
    ]
    grouped(board, first, queued)
    assert [w.result[0].generation for w in [first, *queued]] == [1, 2, 3, 4]  # queue order
    assert board.writes.queue.groups == 4  # never two writes of one node in a group
    last = board.read("urn:g:same")
    assert last is not None
    assert last.generation == 4


def test_concurrent_increments_of_one_node_lose_nothing(board: Blackboard) -> None:
    """Threads read-modify-write one counter with based_on, others write beside them."""
    iri, threads, rounds = "urn:g:counter", 4, 25
    board.agent("setup", role="do", task=TASK).write(
        [{"@id": iri, "@type": "Counter", "n": 0}], area="execution"
    )
    shadow: dict[int, int] = {1: 0}  # generation -> value committed at it
    refusals: list[tuple[int, int]] = []  # (base, current) of each refused increment
    lock = threading.Lock()

    def increment(index: int) -> None:
        agent = board.agent(f"inc{index}", role="do", task=TASK)
        done = 0
        while done < rounds:
            agent.write([node(f"urn:g:beside:{index}:{done}", "x")], area="execution")
            current = agent.read(iri)
            assert current is not None
            value = current.node["n"] + 1
            try:
                [written] = agent.write(
                    [{"@id": iri, "@type": "Counter", "n": value}],
                    area="execution",
                    based_on=current.generation,
                )
            except StaleWriteError as exc:
                with lock:
                    refusals.append((current.generation, exc.current_generation))
                continue
            with lock:
                assert written.generation not in shadow
                shadow[written.generation] = value
            done += 1

    workers = [threading.Thread(target=increment, args=(i,)) for i in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    total = threads * rounds
    assert all(now > base for base, now in refusals)  # refused only when it had moved on
    assert sorted(shadow) == list(range(1, total + 2))  # every generation, once
    assert [shadow[g] for g in sorted(shadow)] == list(range(total + 1))  # each one more
    final = board.read(iri)
    assert final is not None
    assert (final.generation, final.node["n"]) == (total + 1, total)


class _Numbered(Job):
    def __init__(self, keys: list[str], number: int) -> None:
        super().__init__(keys)
        self.number = number


def test_the_queue_keeps_the_order_of_each_key_and_fails_a_group_in_each_thread() -> None:
    committed: list[list[int]] = []
    gate = threading.Event()

    def commit(group: Any) -> None:
        gate.wait()
        numbers = [job.number for job in group]
        committed.append(numbers)
        if 99 in numbers:
            raise RuntimeError("the store is gone")

    queue: CommitQueue[_Numbered] = CommitQueue(commit)
    jobs = [
        _Numbered(["x"], 0),
        _Numbered(["x", "y"], 1),
        _Numbered(["z"], 2),
        _Numbered(["y"], 3),
        _Numbered(["w"], 99),
    ]
    errors: dict[int, BaseException] = {}

    def run(job: _Numbered) -> None:
        try:
            queue.run(job)
        except RuntimeError as exc:
            errors[job.number] = exc

    threads = [threading.Thread(target=run, args=(job,)) for job in jobs]
    threads[0].start()
    wait_for(lambda: queue.groups == 1)
    for count, thread in enumerate(threads[1:], start=1):
        thread.start()
        wait_for(lambda: queue.waiting == count)  # noqa: B023 (called at once)
    gate.set()
    for thread in threads:
        thread.join()
    # 0 is committing while the rest queue; 3 meets 1 (y), so it waits for the next group.
    assert committed == [[0], [1, 2, 99], [3]]
    assert sorted(errors) == [1, 2, 99]  # the failing group's jobs, each in its own thread
    assert all(job.done for job in jobs)
    assert queue.waiting == 0


def test_a_writer_interrupted_while_it_waits_is_not_committed_and_the_queue_goes_on() -> None:
    committed: list[list[int]] = []
    gate = threading.Event()

    def commit(group: Any) -> None:
        gate.wait()
        committed.append([job.number for job in group])

    queue: CommitQueue[_Numbered] = CommitQueue(commit)
    leader = threading.Thread(target=queue.run, args=(_Numbered(["a"], 0),))
    leader.start()
    wait_for(lambda: queue.groups == 1)

    def interrupt() -> None:
        wait_for(lambda: queue.waiting == 1)
        signal.pthread_kill(main, signal.SIGINT)  # a real signal: it interrupts the wait

    main = threading.get_ident()
    helper = threading.Thread(target=interrupt)
    helper.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            queue.run(_Numbered(["b"], 1))  # waits behind the leader, on this (main) thread
        assert queue.waiting == 0  # taken back: never committed
    finally:
        gate.set()
        helper.join()
        leader.join()
    queue.run(_Numbered(["c"], 2))  # the lead was not lost
    assert committed == [[0], [2]]


def test_a_write_made_by_a_subscriber_inside_a_commit_does_not_wait_for_itself(
    board: Blackboard,
) -> None:
    """B's write invalidates A's dirty copy: its write-back, inside B's commit, publishes an
    event whose subscriber writes again (on the committing thread)."""
    assert board.bus is None
    bus = EventBus()
    board.writeback.bus = bus  # type: ignore[union-attr]
    writer = board.agent("echo", role="do", task=TASK)
    echoed: list[int] = []  # the thread each echo ran on

    def echo(event: Any) -> None:
        if not echoed:
            echoed.append(threading.get_ident())
            writer.write([node("urn:g:echo", "written back")], area="execution")

    bus.subscribe(echo, [EventType.MEMORY_WRITE_BACK])
    a, b = board.agent("a", role="do", task=TASK), board.agent("b", role="do", task=TASK)
    a.write([node("urn:g:shared", "a")], area="execution")  # A's copy: MODIFIED
    done = Writer(lambda: b.write([node("urn:g:shared", "b")], area="execution"))
    done.start()
    done.join(timeout=60)
    assert not done.is_alive(), "the subscriber's write waited for its own thread"
    assert done.error is None
    assert echoed == [done.ident]  # on the committing thread, inside its commit
    echo_node = board.read("urn:g:echo")
    assert echo_node is not None
    assert echo_node.generation == 1


def _gated_queue(
    gates: list[threading.Event], **options: Any
) -> tuple[CommitQueue[_Numbered], list[tuple[list[int], int]]]:
    """A queue whose n-th commit waits for ``gates[n]`` and records its jobs and thread."""
    committed: list[tuple[list[int], int]] = []

    def commit(group: Any) -> None:
        gates[len(committed)].wait()
        committed.append(([job.number for job in group], threading.get_ident()))

    return CommitQueue(commit, **options), committed


def test_with_keep_a_leader_leads_on_while_jobs_are_queued_then_hands_the_lead_on() -> None:
    gates = [threading.Event() for _ in range(4)]
    queue, committed = _gated_queue(gates, keep=1)
    jobs = [_Numbered([f"k{i}"], i) for i in range(4)]
    threads = [threading.Thread(target=queue.run, args=(job,)) for job in jobs]
    threads[0].start()
    wait_for(lambda: queue.groups == 1)
    threads[1].start()
    wait_for(lambda: queue.waiting == 1)
    gates[0].set()  # 0 done; 1 queued: the same thread commits it (its one group more)
    wait_for(lambda: queue.groups == 2)
    threads[2].start()
    wait_for(lambda: queue.waiting == 1)
    threads[3].start()
    wait_for(lambda: queue.waiting == 2)
    for gate in gates:
        gate.set()
    for thread in threads:
        thread.join()
    assert [numbers for numbers, _ in committed] == [[0], [1], [2, 3]]
    leaders = [ident for _, ident in committed]
    assert leaders[0] == leaders[1] == threads[0].ident  # kept the lead for one group more
    assert leaders[2] == threads[2].ident  # then handed it to the oldest queued job's thread
    assert all(job.done and job.error is None for job in jobs)


def _storing_queue(
    gates: list[threading.Event],
) -> tuple[CommitQueue[_Numbered], list[list[int]], dict[int, int]]:
    """A kept-lead queue whose commits begin with a store write (``storing``), the n-th then
    waiting for ``gates[n]``; and, per job number, how many commits had ended when it returned."""
    committed: list[list[int]] = []
    returned: dict[int, int] = {}

    def commit(group: Any) -> None:
        queue.storing()
        gates[len(committed)].wait()
        committed.append([job.number for job in group])

    queue: CommitQueue[_Numbered] = CommitQueue(commit, keep=4)
    return queue, committed, returned


def _run_noting(
    queue: CommitQueue[_Numbered], committed: list[list[int]], returned: dict[int, int], job: Any
) -> threading.Thread:
    def run() -> None:
        queue.run(job)
        returned[job.number] = len(committed)

    thread = threading.Thread(target=run)
    thread.start()
    return thread


def _one_woken_by_the_third_group(
    gates: list[threading.Event],
) -> tuple[CommitQueue[_Numbered], list[list[int]], dict[int, int], list[threading.Thread]]:
    """Commit [0], then [1, 2] while 3 queues; return once [3]'s store write woke 1 alone."""
    queue, committed, returned = _storing_queue(gates)
    threads = [_run_noting(queue, committed, returned, _Numbered(["k0"], 0))]
    wait_for(lambda: queue.groups == 1)
    for count, number in enumerate((1, 2), start=1):
        threads.append(_run_noting(queue, committed, returned, _Numbered([f"k{number}"], number)))
        wait_for(lambda: queue.waiting == count)  # noqa: B023 (called at once)
    gates[0].set()
    wait_for(lambda: queue.groups == 2)  # the leader commits [1, 2]; 3 queues meanwhile
    threads.append(_run_noting(queue, committed, returned, _Numbered(["k3"], 3)))
    wait_for(lambda: queue.waiting == 1)
    gates[1].set()  # [1, 2] done; the leader takes [3], whose store write wakes 1 (the oldest)
    wait_for(lambda: 1 in returned)
    return queue, committed, returned, threads


def test_a_committed_writer_is_woken_as_the_next_store_write_begins() -> None:
    """Not with its group: its thread then runs while the next group's store write does."""
    gates = [threading.Event() for _ in range(3)]
    _, committed, returned, threads = _one_woken_by_the_third_group(gates)
    assert returned[1] == 2  # while [3] is still being committed
    assert 2 not in returned  # asleep until its turn: one thread woken at a time
    gates[2].set()
    for thread in threads:
        thread.join()
    assert committed == [[0], [1, 2], [3]]
    assert returned[2] == returned[3] == 3  # woken in turn once the lead was dropped


def test_a_thread_about_to_wait_wakes_a_committed_one() -> None:
    """It gives up the GIL: the committed thread it wakes takes it."""
    gates = [threading.Event() for _ in range(4)]
    queue, committed, returned, threads = _one_woken_by_the_third_group(gates)  # 2 sleeps on
    threads.append(_run_noting(queue, committed, returned, _Numbered(["k4"], 4)))
    wait_for(lambda: 2 in returned)  # woken by 4's thread as it began to wait
    assert returned[2] == 2  # [3] is still being committed
    for gate in gates:
        gate.set()
    for thread in threads:
        thread.join()
    assert committed == [[0], [1, 2], [3], [4]]


def test_without_store_writes_every_committed_thread_is_still_woken() -> None:
    """A commit that never calls ``storing``: one woken a group, then each wakes the next."""
    gate = threading.Event()
    committed: list[list[int]] = []

    def commit(group: Any) -> None:
        gate.wait()
        committed.append([job.number for job in group])

    queue: CommitQueue[_Numbered] = CommitQueue(commit, keep=4)
    writers = [Writer(lambda: queue.run(_Numbered(["k0"], 0)))]
    writers[0].start()
    wait_for(lambda: queue.groups == 1)
    for number in range(1, 6):
        writers.append(Writer(lambda n=number: queue.run(_Numbered([f"k{n}"], n))))
        writers[-1].start()
        wait_for(lambda: queue.waiting == len(writers) - 1)
    gate.set()
    for writer in writers:
        writer.join(timeout=30)
    assert not any(writer.is_alive() for writer in writers), "a committed thread slept on"
    assert all(writer.error is None for writer in writers)
    assert committed == [[0], [1, 2, 3, 4, 5]]


def test_a_board_wakes_a_committed_writer_right_before_its_store_write(
    board: Blackboard, monkeypatch: pytest.MonkeyPatch
) -> None:
    queue = board.writes.queue
    assert board.nodes.before_store == queue.storing
    calls: list[str] = []
    extend = board.backend.extend

    def storing() -> None:
        calls.append("storing")
        queue.storing()

    def extended(quads: Any) -> None:
        calls.append("extend")
        extend(quads)

    monkeypatch.setattr(board.nodes, "before_store", storing)
    monkeypatch.setattr(board.backend, "extend", extended)
    board.agent("a", role="do", task=TASK).write([node("urn:g:stored", "s")], area="execution")
    assert calls == ["storing", "extend"]


def test_a_leader_interrupted_while_it_pauses_is_not_committed_and_the_queue_goes_on() -> None:
    gates = [threading.Event() for _ in range(4)]
    for gate in gates:
        gate.set()
    queue, committed = _gated_queue(gates, linger_s=60.0, keep=0)
    gates[0].clear()
    first = threading.Thread(target=queue.run, args=(_Numbered(["a"], 0),))
    first.start()
    wait_for(lambda: queue.groups == 1)
    second = [
        threading.Thread(target=queue.run, args=(_Numbered([key], number),))
        for key, number in (("b", 1), ("c", 2))
    ]
    for count, thread in enumerate(second, start=1):
        thread.start()
        wait_for(lambda: queue.waiting == count)  # noqa: B023 (called at once)
    gates[0].set()  # [0], then [1, 2]: its leader woke 2's thread, so the next leader pauses
    for thread in [first, *second]:
        thread.join()
    main = threading.get_ident()

    def interrupt() -> None:
        wait_for(lambda: queue.waiting == 1)
        time.sleep(0.05)  # the leader (this test's thread) is in its 60 s pause by now
        signal.pthread_kill(main, signal.SIGINT)

    run_interrupted(queue, _Numbered(["d"], 3), beside=interrupt)
    assert queue.waiting == 0  # taken back: never committed
    assert [numbers for numbers, _ in committed] == [[0], [1, 2]]
    queue._linger_s = 0.0  # white-box: the lead was dropped, not lost; no second pause
    queue.run(_Numbered(["e"], 4))
    assert [numbers for numbers, _ in committed] == [[0], [1, 2], [4]]


def test_a_leader_interrupted_in_another_thread_s_group_raises_it_and_the_queue_goes_on() -> None:
    gate = threading.Event()
    committed: list[list[int]] = []

    def commit(group: Any) -> None:
        gate.wait()
        numbers = [job.number for job in group]
        committed.append(numbers)
        if 1 in numbers:
            raise KeyboardInterrupt  # as a SIGINT in the leader's thread would, mid-commit

    queue: CommitQueue[_Numbered] = CommitQueue(commit, keep=2)
    leader = Writer(lambda: queue.run(_Numbered(["a"], 0)))
    leader.start()
    wait_for(lambda: queue.groups == 1)
    follower = Writer(lambda: queue.run(_Numbered(["b"], 1)))
    follower.start()
    wait_for(lambda: queue.waiting == 1)
    gate.set()  # [0], then [1] on the same thread (kept), interrupted
    for writer in (leader, follower):
        writer.join()
    assert isinstance(leader.error, KeyboardInterrupt)  # its own write was committed
    assert isinstance(follower.error, KeyboardInterrupt)  # its group's outcome
    assert committed == [[0], [1]]
    queue.run(_Numbered(["c"], 2))  # the lead was dropped, not lost
    assert committed == [[0], [1], [2]]


@pytest.mark.parametrize(
    ("options", "named"),
    [
        ({"max_keys": 0}, "max_keys"),
        ({"max_keys": True}, "max_keys"),
        ({"max_keys": 2.0}, "max_keys"),
        ({"linger_s": -1e-6}, "linger_s"),
        ({"linger_s": float("nan")}, "linger_s"),
        ({"linger_s": float("inf")}, "linger_s"),
        ({"linger_s": "50us"}, "linger_s"),
        ({"keep": -1}, "keep"),
        ({"keep": None}, "keep"),
        ({"keep": False}, "keep"),
        ({"recheck_s": 0}, "recheck_s"),
        ({"recheck_s": -0.1}, "recheck_s"),
        ({"recheck_s": float("inf")}, "recheck_s"),
        ({"recheck_s": 1e300}, "recheck_s"),
        ({"recheck_s": "0.1s"}, "recheck_s"),
    ],
)
def test_a_queue_refuses_bad_options_naming_them(options: dict[str, Any], named: str) -> None:
    with pytest.raises(InvalidInputError, match=named) as raised:
        CommitQueue(lambda group: None, **options)
    assert repr(next(iter(options.values())))[:4] in str(raised.value)


def test_a_queue_refuses_a_commit_that_is_not_callable() -> None:
    with pytest.raises(InvalidInputError, match="commit must be callable"):
        CommitQueue("commit")  # type: ignore[arg-type]


def test_a_queue_takes_the_edge_options() -> None:
    committed: list[list[int]] = []
    queue: CommitQueue[_Numbered] = CommitQueue(
        lambda group: committed.append([job.number for job in group]),
        max_keys=1,
        linger_s=0,
        keep=0,
        recheck_s=threading.TIMEOUT_MAX,
    )
    queue.run(_Numbered(["a", "b"], 0))  # the oldest job goes in whatever its size
    assert committed == [[0]]


def test_a_writer_interrupted_while_its_group_commits_is_committed_and_woken_in_turn() -> None:
    gates = [threading.Event() for _ in range(3)]
    gates[2].set()  # the last write's commit runs free
    queue, committed = _gated_queue(gates, keep=2)
    leader = threading.Thread(target=queue.run, args=(_Numbered(["a"], 0),))
    leader.start()
    wait_for(lambda: queue.groups == 1)
    main = threading.get_ident()

    def interrupt() -> None:
        wait_for(lambda: queue.waiting == 1)
        gates[0].set()  # [0] done: the leader keeps the lead and takes [1], held at its gate
        wait_for(lambda: queue.groups == 2)
        signal.pthread_kill(main, signal.SIGINT)  # while its job is being committed
        time.sleep(0.05)
        gates[1].set()

    helper = threading.Thread(target=interrupt)
    helper.start()
    job = _Numbered(["b"], 1)
    done_when_raised: bool | None = None
    try:
        queue.run(job)  # on this (main) thread: interrupted, then woken once committed
    except KeyboardInterrupt:
        done_when_raised = job.done
    finally:
        helper.join()
        leader.join()
    assert done_when_raised is True  # it waited for its group: committed, not taken back
    assert job.error is None
    assert [numbers for numbers, _ in committed] == [[0], [1]]
    queue.run(_Numbered(["c"], 2))  # the lead was dropped, not lost
    assert [numbers for numbers, _ in committed] == [[0], [1], [2]]


def _interrupting_once(queue: CommitQueue[Any], name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Make ``queue``'s method ``name`` raise ``KeyboardInterrupt`` once on this thread, as a
    pending SIGINT does on entry to it."""
    method = getattr(queue, name)
    main = threading.get_ident()
    raised: list[bool] = []

    def interrupted(*args: Any) -> Any:
        if threading.get_ident() == main and not raised:
            raised.append(True)
            raise KeyboardInterrupt
        return method(*args)

    monkeypatch.setattr(queue, name, interrupted)


@pytest.mark.parametrize("keep", [0, 2])
def test_a_writer_interrupted_as_it_wakes_another_is_not_committed_and_the_queue_goes_on(
    keep: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The interrupt comes on entry to ``_wake_one``, right before the writer would wait."""
    gates = [threading.Event() for _ in range(3)]
    gates[1].set()
    gates[2].set()
    queue, committed = _gated_queue(gates, keep=keep)
    leader = threading.Thread(target=queue.run, args=(_Numbered(["a"], 0),))
    leader.start()
    wait_for(lambda: queue.groups == 1)
    _interrupting_once(queue, "_wake_one", monkeypatch)
    try:
        with pytest.raises(KeyboardInterrupt):
            queue.run(_Numbered(["b"], 1))  # behind the leader, on this thread
        assert queue.waiting == 0  # taken back: no orphan job left queued
    finally:
        gates[0].set()
        leader.join()
    writer = Writer(lambda: queue.run(_Numbered(["c"], 2)))
    writer.start()
    writer.join(timeout=30)
    assert not writer.is_alive(), "the lead was lost"
    assert writer.error is None
    assert [numbers for numbers, _ in committed] == [[0], [2]]  # 1 never committed


class _TwiceInterruptedWake:
    """A job's wake-up lock whose first two waits are interrupted, the first once ``ready``."""

    def __init__(self, ready: Callable[[], bool]) -> None:
        self.lock = threading.Lock()
        self.lock.acquire()
        self.ready = ready
        self.interrupts = 2

    def acquire(self, blocking: bool = True, timeout: float = -1) -> bool:
        if blocking and self.interrupts:
            self.interrupts -= 1
            wait_for(self.ready)
            raise KeyboardInterrupt
        return self.lock.acquire(blocking, timeout)

    def release(self) -> None:
        self.lock.release()


def test_a_writer_interrupted_twice_in_its_group_passes_its_wake_up_on() -> None:
    """Interrupted while its group commits, then again while it waits for its turn: it leaves,
    and the committed thread behind it is still woken once the lead is dropped."""
    gates = [threading.Event() for _ in range(3)]
    gates[2].set()  # the last write's commit runs free
    committed: list[list[int]] = []

    def commit(group: Any) -> None:
        queue.storing()  # wakes nobody: no committed thread is asleep yet
        gates[len(committed)].wait()
        committed.append([job.number for job in group])

    queue: CommitQueue[_Numbered] = CommitQueue(commit, keep=1)
    leader = threading.Thread(target=queue.run, args=(_Numbered(["a"], 0),))
    leader.start()
    wait_for(lambda: queue.groups == 1)
    job = _Numbered(["b"], 1)
    job._wake = _TwiceInterruptedWake(lambda: queue.groups == 2)  # type: ignore[assignment]
    behind = Writer(lambda: queue.run(_Numbered(["c"], 2)))
    behind.daemon = True  # (asleep for good without the fix)

    def queue_behind() -> None:
        wait_for(lambda: queue.waiting == 1)
        behind.start()
        wait_for(lambda: queue.waiting == 2)
        gates[0].set()  # [0] done: the leader keeps the lead for [1, 2]

    helper = threading.Thread(target=queue_behind)
    helper.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            queue.run(job)  # on this thread: leaves while [1, 2] commits
    finally:
        helper.join()
        gates[1].set()
        leader.join()
    behind.join(timeout=30)
    assert not behind.is_alive(), "the wake-up passed to the interrupted thread was lost"
    assert behind.error is None
    assert committed == [[0], [1, 2]]
    assert job.done  # in a group: committed, not taken back
    assert job.error is None
    queue.run(_Numbered(["d"], 3))
    assert committed == [[0], [1, 2], [3]]


def test_only_the_leader_s_store_write_counts_as_its_group_s() -> None:
    """A store write on another thread (the prefetch thread's) wakes one but is not the group's."""
    seen: list[bool] = []

    def commit(group: Any) -> None:
        other = threading.Thread(target=queue.storing)
        other.start()
        other.join()
        seen.append(queue._stored)  # white-box: whether the group-end wake-up is skipped
        queue.storing()
        seen.append(queue._stored)

    queue: CommitQueue[_Numbered] = CommitQueue(commit)
    queue.run(_Numbered(["a"], 0))
    assert seen == [False, True]
