"""Group commit: a wake-up lost to an interrupt costs its thread a recheck, never a hang.

A ``KeyboardInterrupt`` can land between a wake-up's decision and its release: right after
``_wake_one`` popped the job to wake (as the call returns), right after ``_hand_on`` named the
heir, or at a group's end between marking its jobs done and adding them to those asleep. Each
test injects it exactly there, on the main thread (where a SIGINT lands), then shows that every
writer returns and that later writes still go through. The threads are daemons joined with a
deadline: without the recheck they sleep for good, and the test fails instead of hanging.
"""

from __future__ import annotations

import collections
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest

from gliding_core.blackboard.groupcommit import CommitQueue, Job
from tests.test_core.blackboard.test_blackboard_group_commit import (
    Writer,
    _Numbered,
    run_interrupted,
    wait_for,
)

RECHECK_S = 0.002  # short: a lost wake-up then costs the test a few ms


class _PoppedThenInterrupted(collections.deque[Job]):
    """The queue's sleepers; the first ``popleft`` on the main thread pops its job, then raises
    ``KeyboardInterrupt``, as a SIGINT does when the call returns (the popped job is lost)."""

    def __init__(self, jobs: collections.deque[Job]) -> None:
        super().__init__(jobs)
        self.main = threading.get_ident()
        self.lost: list[Job] = []

    def popleft(self) -> Job:
        job = super().popleft()
        if threading.get_ident() == self.main and not self.lost:
            self.lost.append(job)
            raise KeyboardInterrupt
        return job


class _InterruptedBeforeExtend(collections.deque[Job]):
    """The queue's sleepers; the first ``extend`` of jobs on the main thread raises
    ``KeyboardInterrupt`` before it adds them, as a SIGINT does at a group's end."""

    def __init__(self) -> None:
        super().__init__()
        self.main = threading.get_ident()
        self.left_out: list[Job] = []

    def extend(self, jobs: Any) -> None:
        jobs = list(jobs)
        if jobs and threading.get_ident() == self.main and not self.left_out:
            self.left_out.extend(jobs)
            raise KeyboardInterrupt
        super().extend(jobs)


def _heir_then_interrupted(queue: CommitQueue[Any], monkeypatch: pytest.MonkeyPatch) -> list[Job]:
    """Make ``queue``'s first ``_hand_on`` on this thread that names an heir raise
    ``KeyboardInterrupt`` once the heir is named (before its release); return the heirs so named."""
    hand_on = queue._hand_on
    main = threading.get_ident()
    named: list[Job] = []

    def interrupted() -> Any:
        heir = hand_on()
        if heir is not None and threading.get_ident() == main and not named:
            named.append(heir)
            raise KeyboardInterrupt
        return heir

    monkeypatch.setattr(queue, "_hand_on", interrupted)
    return named


def _queue(
    gates: list[threading.Event], *, storing: bool, **options: Any
) -> tuple[CommitQueue[_Numbered], list[tuple[list[int], int]]]:
    """A queue whose n-th commit (a store write first, if ``storing``) waits for ``gates[n]``;
    and its groups' job numbers with the thread that committed each."""
    committed: list[tuple[list[int], int]] = []

    def commit(group: Any) -> None:
        if storing:
            queue.storing()
        gates[len(committed)].wait()
        committed.append(([job.number for job in group], threading.get_ident()))

    queue: CommitQueue[_Numbered] = CommitQueue(commit, recheck_s=RECHECK_S, **options)
    return queue, committed


def _writer(queue: CommitQueue[_Numbered], job: _Numbered) -> Writer:
    """Start a daemon thread running ``job`` (asleep for good if its wake-up is lost)."""
    writer = Writer(lambda: queue.run(job))
    writer.daemon = True
    writer.start()
    return writer


def _all_return(writers: list[Writer]) -> None:
    """Join ``writers`` with a deadline: each must have returned, without an error."""
    for writer in writers:
        writer.join(timeout=10)
    assert not any(writer.is_alive() for writer in writers), "a writer was never woken"
    assert [writer.error for writer in writers] == [None] * len(writers)


def _later_writes_go_through(
    queue: CommitQueue[_Numbered], committed: list[tuple[list[int], int]], number: int
) -> None:
    """Commit one write more (number ``number``): the lead was not lost; the queue is idle."""
    _all_return([_writer(queue, _Numbered([f"k{number}"], number))])
    assert committed[-1][0] == [number]
    assert (queue.waiting, queue._leading, list(queue._asleep)) == (0, False, [])  # idle


def _interrupted_at_the_second_group_s_end(
    asleep_of: Callable[[CommitQueue[_Numbered]], collections.deque[Job]],
) -> tuple[list[_Numbered], Any]:
    """Commit job 0 alone on the main thread, then jobs 1 and 2 (queued meanwhile by other
    writers) as its second group, whose end ``asleep_of(queue)``, put in as those asleep,
    interrupts; check every writer returns and a later write goes through. Return the jobs and
    the sleepers."""
    gates = [threading.Event() for _ in range(3)]
    for gate in gates[1:]:
        gate.set()
    queue, committed = _queue(gates, storing=False, keep=2)
    jobs = [_Numbered([f"k{number}"], number) for number in range(3)]
    asleep = asleep_of(queue)
    writers: list[Writer] = []

    def queue_two() -> None:
        wait_for(lambda: queue.groups == 1)
        for count, job in enumerate(jobs[1:], start=1):
            writers.append(_writer(queue, job))
            wait_for(lambda: queue.waiting == count)  # noqa: B023 (called at once)
        queue._asleep = asleep  # type: ignore[assignment]
        gates[0].set()  # [0], then [1, 2] on the main thread: interrupted at its end

    run_interrupted(queue, jobs[0], beside=queue_two)
    _all_return(writers)
    assert [numbers for numbers, _ in committed] == [[0], [1, 2]]
    _later_writes_go_through(queue, committed, 3)
    return jobs, asleep


def test_a_committed_writer_whose_wake_up_is_popped_then_interrupted_still_returns() -> None:
    """The main thread, about to wait, pops the committed job to wake and is interrupted; the
    leader leads on, and will not wake that job again."""
    gates = [threading.Event() for _ in range(4)]
    queue, committed = _queue(gates, storing=True, keep=4)
    jobs = [_Numbered([f"k{number}"], number) for number in range(4)]
    writers = [_writer(queue, jobs[0])]
    wait_for(lambda: queue.groups == 1)
    for count, job in enumerate(jobs[1:3], start=1):
        writers.append(_writer(queue, job))
        wait_for(lambda: queue.waiting == count)  # noqa: B023 (called at once)
    gates[0].set()
    wait_for(lambda: queue.groups == 2)  # [1, 2] is committing: 3 queues behind it
    writers.append(_writer(queue, jobs[3]))
    wait_for(lambda: queue.waiting == 1)
    gates[1].set()  # [1, 2] done; [3]'s store write wakes 1, and 2 sleeps on
    _all_return(writers[1:2])
    asleep = _PoppedThenInterrupted(queue._asleep)
    queue._asleep = asleep  # type: ignore[assignment]
    late = _Numbered(["k4"], 4)
    with pytest.raises(KeyboardInterrupt):
        queue.run(late)  # wakes 2 as it begins to wait: interrupted after the pop
    assert asleep.lost == [jobs[2]]
    assert (queue.waiting, late.done) == (0, False)  # 4 taken back: not committed
    gates[2].set()
    gates[3].set()
    _all_return(writers)
    assert [numbers for numbers, _ in committed] == [[0], [1, 2], [3]]
    _later_writes_go_through(queue, committed, 5)


def test_a_wake_up_lost_at_a_group_s_end_does_not_strand_its_writer() -> None:
    """The leader (the main thread) pops the job to wake at its group's end and is
    interrupted; it stops leading and drops the lead: no leader is left to wake that job."""
    jobs, asleep = _interrupted_at_the_second_group_s_end(
        lambda queue: _PoppedThenInterrupted(queue._asleep)  # its end pops 1, interrupted
    )
    assert (jobs[0].done, jobs[0].error) == (True, None)  # its own write was committed
    assert asleep.lost == [jobs[1]]


def test_a_group_s_writers_are_not_stranded_when_its_end_is_interrupted_before_they_sleep() -> None:
    """The leader (the main thread) marked its group's jobs done, and is interrupted before it
    adds them to those asleep: nobody will ever pop them to wake."""
    jobs, asleep = _interrupted_at_the_second_group_s_end(lambda queue: _InterruptedBeforeExtend())
    assert asleep.left_out == jobs[1:]


def test_an_heir_named_by_a_leader_interrupted_before_its_release_leads(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``_stop`` names the heir, then the interrupt lands: the heir's thread is never released,
    and without the recheck every later write would queue behind a leader that is not there."""
    gates = [threading.Event() for _ in range(3)]
    for gate in gates[1:]:
        gate.set()
    queue, committed = _queue(gates, storing=False, keep=0)
    named = _heir_then_interrupted(queue, monkeypatch)
    heir = _Numbered(["k1"], 1)
    writers: list[Writer] = []

    def queue_one() -> None:
        wait_for(lambda: queue.groups == 1)
        writers.append(_writer(queue, heir))
        wait_for(lambda: queue.waiting == 1)
        gates[0].set()  # [0] done: the leader (the main thread) hands the lead to 1

    run_interrupted(queue, _Numbered(["k0"], 0), beside=queue_one)
    assert named == [heir]
    _all_return(writers)
    assert [numbers for numbers, _ in committed] == [[0], [1]]
    assert committed[1][1] == writers[0].ident  # the heir led, never released
    _later_writes_go_through(queue, committed, 2)


class _InterruptedOnceHeir:
    """A job's wake-up lock whose first wait is interrupted once its job is named the heir."""

    def __init__(self, job: Job) -> None:
        self.lock = threading.Lock()
        self.lock.acquire()
        self.job = job
        self.interrupted = False

    def acquire(self, blocking: bool = True, timeout: float = -1) -> bool:
        if blocking and not self.interrupted:
            self.interrupted = True
            wait_for(lambda: self.job.heir)
            raise KeyboardInterrupt
        return self.lock.acquire(blocking, timeout)

    def release(self) -> None:
        self.lock.release()


def test_an_heir_passed_on_by_an_interrupted_heir_before_its_release_leads(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The main thread, named the heir, is interrupted as it wakes: ``_abandon`` hands the lead
    to the next queued job, then a second interrupt lands before that heir's release."""
    gates = [threading.Event() for _ in range(4)]
    for gate in gates[1:]:
        gate.set()
    queue, committed = _queue(gates, storing=False, keep=0)
    named = _heir_then_interrupted(queue, monkeypatch)
    leader = _writer(queue, _Numbered(["k0"], 0))
    wait_for(lambda: queue.groups == 1)
    mine, next_heir = _Numbered(["k1"], 1), _Numbered(["k2"], 2)
    mine._wake = _InterruptedOnceHeir(mine)  # type: ignore[assignment]
    writers = [leader]

    def queue_behind() -> None:
        wait_for(lambda: queue.waiting == 1)
        writers.append(_writer(queue, next_heir))
        wait_for(lambda: queue.waiting == 2)
        gates[0].set()  # [0] done: its leader hands the lead to 1 (the main thread's)

    run_interrupted(queue, mine, beside=queue_behind)
    assert named == [next_heir]
    assert mine.done is False  # taken back: never committed
    _all_return(writers)
    assert [numbers for numbers, _ in committed] == [[0], [2]]
    assert committed[1][1] == writers[1].ident  # the second heir led, never released
    _later_writes_go_through(queue, committed, 3)


def test_rechecks_all_the_time_keep_one_leader_and_every_job_committed_once() -> None:
    """A recheck every 0.1 ms: threads wake on their own over and over, in every state; no two
    groups commit at once, every job commits once, and every writer returns."""
    threads, rounds = 4, 40
    committing = threading.Lock()
    committed: list[int] = []
    overlaps: list[list[int]] = []

    def commit(group: Any) -> None:
        if not committing.acquire(blocking=False):
            overlaps.append([job.number for job in group])
            return
        try:
            queue.storing()
            time.sleep(0.0005)  # longer than a recheck: the threads queued meanwhile recheck
            committed.extend(job.number for job in group)
        finally:
            committing.release()

    queue: CommitQueue[_Numbered] = CommitQueue(commit, recheck_s=1e-4)
    rechecks: list[bool] = []
    stranded = queue._stranded

    def counted(job: Any) -> bool:
        rechecks.append(stranded(job))
        return rechecks[-1]

    queue._stranded = counted  # type: ignore[method-assign]

    def write(index: int) -> None:
        for turn in range(rounds):
            queue.run(
                _Numbered(
                    [f"k{index}", "shared" if turn % 4 == 0 else f"{index}:{turn}"],
                    index * rounds + turn,
                )
            )

    writers = [Writer(lambda i=i: write(i)) for i in range(threads)]
    for writer in writers:
        writer.daemon = True
        writer.start()
    _all_return(writers)
    assert rechecks  # (each queued thread waits for at least part of a group's commit)
    assert overlaps == []
    assert sorted(committed) == list(range(threads * rounds))
    for index in range(threads):  # each thread's jobs (one key of theirs) in the order it ran
        mine = [number for number in committed if number // rounds == index]
        assert mine == sorted(mine)
    assert (queue.waiting, queue._leading, list(queue._asleep)) == (0, False, [])


def test_a_thread_goes_on_unwoken_only_when_no_wake_up_can_reach_it() -> None:
    """The recheck's decisions, and a thread that went on is passed over by its late wake-up."""
    queue: CommitQueue[_Numbered] = CommitQueue(lambda group: None)
    queued, early, asleep = (_Numbered([key], number) for number, key in enumerate("abc"))
    queue._queue, queue._leading = [queued], True  # white-box: a leader leads on
    assert not queue._stranded(queued)  # queued: the leader takes it, or names it the heir
    queued.heir = True
    assert queue._stranded(queued)  # named the heir: it leads, released or not
    early.done = asleep.done = True
    queue._asleep.append(asleep)
    assert not queue._stranded(asleep)  # among those asleep: the leader wakes it in turn
    assert queue._stranded(early)  # done, not among them: popped (its release lost) or not yet
    assert early.gone
    assert not asleep.gone
    queue._asleep.appendleft(early)  # its group's end adds it after it went on
    assert queue._wake_one()  # its wake-up goes on to the next thread asleep
    assert asleep._wake.acquire(blocking=False)
    queue._leading = False
    queue._asleep.append(asleep)
    assert queue._stranded(asleep)  # the lead dropped: nobody may be left to wake it


class _ComparedByValue(Job):
    """A job whose comparison is Python code: another thread may change the queue's sleepers
    meanwhile (here: it pops one, as a waking thread does)."""

    __slots__ = ()
    queue: CommitQueue[Any] | None = None

    def __eq__(self, other: object) -> bool:
        queue = _ComparedByValue.queue
        if queue is not None and queue._asleep:
            queue._asleep.popleft()
        return self is other

    __hash__ = Job.__hash__


def test_sleepers_changing_during_a_recheck_mean_look_again_not_an_error() -> None:
    queue: CommitQueue[Job] = CommitQueue(lambda group: None, recheck_s=RECHECK_S)
    _ComparedByValue.queue = queue
    try:
        mine, others = _ComparedByValue(["c"]), [_ComparedByValue(["a"]), _ComparedByValue(["b"])]
        queue._leading, mine.done = True, True
        queue._asleep.extend([*others, mine])
        assert queue._stranded(mine) is False  # not an error: it sleeps on and looks again
        assert not mine.gone
    finally:
        _ComparedByValue.queue = None
