"""L2: group commit: the queued writes of several threads committed together by one of them.

A writing thread hands its write to the board's ``CommitQueue`` as a ``Job`` and calls
``run``. When no thread is committing, it becomes the leader: it takes the queued jobs (its own
first among them, since it found the queue idle) and commits them as one group through the
queue's ``commit`` function; its own job done, it goes on committing the jobs queued
meanwhile, up to ``keep`` (2) groups more, then hands the lead to the thread of the oldest job
still queued, or drops it when none is. A thread whose job is queued while another leads sleeps
until it is woken in its turn (its job done) or handed the lead. So one transaction holds the
writes of many threads. A new leader whose predecessor's last group held other threads' jobs
pauses ``linger_s`` (50 us) before it takes the queue, so that they can queue again; a lone
writer never pauses.

Who runs while a group commits (measured: docs/benchmarks-history.md, "fewer wake-ups at 4 and
16 agents"): the store's write releases the GIL, so on a second core another thread's Python
can run beside it, and every thread that wakes while another holds the GIL costs context
switches (it sleeps again on the GIL, and is woken in vain by every short release of it). So
the threads of committed jobs are not woken with their group: they sleep on in a queue of their
own (``_asleep``, oldest first) and are woken one at a time, each when the GIL is about to be
free:

- by the leader as its next store write begins (``storing``, which ``commit`` calls right
  before it; the woken thread then runs beside the store write), and likewise by a store
  write on any other thread (the board calls ``storing`` before each of its store writes);
- by a thread about to sleep on its next job (it gives up the GIL: one woken thread takes it);
- once a group is committed, by the leader, when it did not call ``storing`` in that group;
- and when the lead is dropped (the queue empty), each woken thread wakes the next, since no
  leader is left to.

Invariants:
- At most one leader at a time: the lead is taken only when the queue is idle, and otherwise
  passes from the leader to one queued job's thread; two groups are never committed at once.
  A leader commits at most ``keep`` groups after its own, so its caller waits a bounded time.
- A job's ``run`` returns (or raises its ``error``) only after the group holding it was
  committed, or failed. No job is dropped or starved: the oldest queued job is always in the
  next group, and a committed job's thread is woken in its turn (oldest first) by the next
  store write, waiting thread or dropped lead (or goes on by itself once no thread may be left
  to wake it: see below); each group's store write (or, without one, its end) wakes one
  thread still asleep, if any.
- The jobs of a group have disjoint keys. A job whose keys meet those of an older job still
  queued waits for a later group, so for each key the jobs commit in the order they came.
- No thread of the queue's own: the leader is always a writing thread, so nothing outlives
  the board, and an idle queue holds nothing.
- ``commit`` decides each job's outcome itself (a refused job fails only its own caller). If
  it raises, every job of the group gets that exception, re-raised in the job's own thread.
- A thread interrupted while it waits (``KeyboardInterrupt``) takes its job back if it is
  still queued (it is not committed) and passes on a lead it was handed; when its job is in a
  group it waits for the group and its own wake-up (interrupted again, it leaves, and its
  wake-up goes to the next thread asleep). A leader interrupted in its pause takes
  its job back the same way; one interrupted while it commits another thread's group (the
  commit sees the interrupt, as in its own) stops leading and raises it. Either way the lead
  goes on and the committed jobs' threads are woken.
- A wake-up survives an interrupt that lands between its decision and its release: in
  ``_wake_one`` after the pop (an interrupt can come as a call returns: the popped job is then
  lost to the code), in ``_stop`` or ``_abandon`` after ``_hand_on`` named the heir, or at a
  group's end once its jobs are marked done, before they are among those asleep.
- How: the wake-ups cost nothing more; instead a thread asleep wakes on its own every
  ``recheck_s`` (0.1 s) and goes on unwoken when it was named the heir (it leads), or when its
  job is done and no thread may be left to wake it (it is not among those asleep, or the lead
  was dropped), marked gone first, so that a release still on its way goes to the next thread
  asleep (at worst one thread woken early). A lost wake-up so costs its thread at most
  ``recheck_s``, never a hang; a late release finds a job used once and wakes nobody.
- Not covered (no Python code can be: a cleanup can itself be interrupted on entry): an
  interrupt on the leader's thread where the lead or a group is held only in its local
  variables (on entry to ``_lead`` or ``_stop`` before the heir is named, as ``_next`` returns
  a group, between two jobs' ``done`` at a group's end) still loses the lead, or leaves those
  jobs' threads asleep.
- A job run on the leading thread while it commits (a re-entrant write from an event
  subscriber) is committed at once, alone.
"""

from __future__ import annotations

import collections
import threading
import time
from collections.abc import Callable, Hashable, Iterable, Sequence
from typing import Generic, TypeVar

from gliding_core.checks import check_count, check_real
from gliding_core.errors import InvalidInputError
from gliding_core.jsonld import preview

DEFAULT_MAX_KEYS = 1_024
"""The most keys (node IRIs) one group takes; the oldest job goes in whatever its size."""

DEFAULT_LINGER_S = 50e-6
"""How long a new leader pauses, when the last group held other threads' jobs, before it takes
the queue, so that they can queue again (never after a lone writer's group). On Linux the sleep
lasts about 50 us longer (the timer slack): 110 us measured. It keeps groups large when the
machine is loaded (measured: without it, groups of 1.1 instead of 3 with 4 threads)."""

DEFAULT_RECHECK_S = 0.1
"""How often a thread asleep in the queue wakes on its own to see whether its wake-up was lost
to an interrupt (see the module's invariants): the most such a loss delays it."""

DEFAULT_KEEP = 2
"""How many more groups a leader commits, once its own job is done, while jobs are queued (2:
their writers then run beside its store writes; measured in docs/benchmarks-history.md,
"fewer wake-ups at 4 and 16 agents")."""


class Job:
    """One write waiting in a ``CommitQueue``.

    Args:
        keys: what the write touches (its node IRIs): jobs of one group have disjoint keys.
    """

    __slots__ = ("_wake", "done", "error", "gone", "heir", "keys")

    def __init__(self, keys: Iterable[Hashable]) -> None:
        self.keys = frozenset(keys)
        self.done = False
        self.heir = False  # handed the lead by the last leader
        self.gone = False  # its thread left before its wake-up (interrupted twice, or unwoken)
        self.error: BaseException | None = None
        self._wake = threading.Lock()  # released when its thread is woken in turn or leads
        self._wake.acquire()


J = TypeVar("J", bound=Job)


class CommitQueue(Generic[J]):
    """Leader/follower group commit over one commit function.

    Args:
        commit: commits a group of jobs (oldest first) and records each one's outcome.
        max_keys: the most keys a group takes beyond its oldest job.
        linger_s: how long a new leader waits, when its predecessor's last group held other
            threads' jobs, before it takes its first group (0: never).
        keep: how many more groups a leader commits after its own while jobs are queued (0:
            it hands the lead on at once).
        recheck_s: how often a thread asleep looks whether its wake-up was lost.

    Raises:
        InvalidInputError: ``commit`` is not callable, ``max_keys`` is not an int >= 1,
            ``linger_s`` not a finite number >= 0, ``keep`` not an int >= 0, or
            ``recheck_s`` not a number > 0 and at most ``threading.TIMEOUT_MAX``.
    """

    def __init__(
        self,
        commit: Callable[[Sequence[J]], None],
        *,
        max_keys: int = DEFAULT_MAX_KEYS,
        linger_s: float = DEFAULT_LINGER_S,
        keep: int = DEFAULT_KEEP,
        recheck_s: float = DEFAULT_RECHECK_S,
    ) -> None:
        if not callable(commit):
            raise InvalidInputError(f"commit must be callable, got {preview(commit)}")
        self._commit = commit
        self._max_keys = check_count(max_keys, what="max_keys", minimum=1)
        self._linger_s = check_real(linger_s, what="linger_s")
        if self._linger_s < 0:
            raise InvalidInputError(f"linger_s must be >= 0, got {preview(linger_s)}")
        self._keep = check_count(keep, what="keep", minimum=0)
        self._recheck_s = check_real(recheck_s, what="recheck_s")
        if not 0 < self._recheck_s <= threading.TIMEOUT_MAX:
            raise InvalidInputError(
                f"recheck_s must be > 0 and <= {threading.TIMEOUT_MAX}, got {preview(recheck_s)}"
            )
        self._lock = threading.Lock()
        self._queue: list[J] = []
        self._leading = False
        self._leader: int | None = None  # the leading thread's ident, while it commits
        self._woken = False  # whether the last group held other threads' jobs
        self._stored = False  # whether the leader called ``storing`` in the group it commits
        self._asleep: collections.deque[J] = collections.deque()  # done jobs' threads asleep
        self.groups = 0
        """How many groups were committed (``jobs / groups``: the mean group size)."""
        self.jobs = 0
        """How many jobs those groups held."""

    @property
    def waiting(self) -> int:
        """How many jobs are queued and not yet taken into a group."""
        with self._lock:
            return len(self._queue)

    def run(self, job: J) -> None:
        """Commit ``job``, alone or in a group; return once it is committed.

        A job run by the leader's own thread while it commits (a subscriber of an event
        published inside the commit, writing again) is committed at once, alone: waiting for
        the leader would wait for itself.

        Raises:
            The ``error`` of the job's group when its commit failed.
        """
        if self._leader == threading.get_ident():
            self._commit([job])
            job.done = True
            if job.error is not None:
                raise job.error
            return
        with self._lock:
            self._queue.append(job)
            waits = self._leading
            self._leading = True
        if waits:
            try:  # (an interrupt on entry to _wake_one must take the queued job back too)
                self._wake_one()  # this thread gives up the GIL now: one woken thread takes it
                self._sleep(job)  # until woken in turn (done), or handed the lead
            except BaseException:  # interrupted (KeyboardInterrupt) while it waited
                self._abandon(job)
                raise
            if job.done and not self._leading:
                self._wake_one()  # no leader wakes the rest: each woken thread wakes one
        if not job.done:
            self._lead(job)
        if job.error is not None:
            raise job.error

    def storing(self) -> None:
        """Wake one thread whose job is done, as a store write begins.

        Called right before a store write, which releases the GIL: the woken thread runs
        beside it instead of waiting for the GIL. It may be called from any thread (the board
        calls it before each of its store writes, the prefetch thread's among them); only the
        leading thread's call counts as its group's store write.
        """
        if self._leader == threading.get_ident():
            self._stored = True
        self._wake_one()

    def _wake_one(self) -> bool:
        """Wake the thread of the oldest done job still asleep; whether there was one.

        A job whose thread has gone (``_leave``, ``_stranded``) is released and passed over,
        so its wake-up goes to the next one. An interrupt as ``popleft`` returns loses the job
        to this code: its thread then goes on by itself (``_stranded``).
        """
        while self._asleep:  # (the usual case of a lone writer: empty, no exception raised)
            try:
                job = self._asleep.popleft()  # atomic: each job is woken once
            except IndexError:  # another thread took the last one meanwhile
                return False
            job._wake.release()
            if not job.gone:  # read after the release: see _abandon
                return True
        return False

    def _sleep(self, job: J) -> None:
        """Sleep until ``job``'s thread is woken, or finds its wake-up lost (``_stranded``)."""
        # (A timeout adds some 300 instructions to a sleep, measured: noise beside the switch.)
        while not job._wake.acquire(True, self._recheck_s):
            if self._stranded(job):
                return

    def _stranded(self, job: J) -> bool:
        """Return whether ``job``'s thread, asleep for ``recheck_s``, must go on unwoken.

        It must when it was named the heir, or when its job is done and no thread is left to
        wake it (it is then marked gone, so that a release still to come goes to the next
        thread asleep).
        """
        if job.heir:  # named under the lock: its release was lost, or is on its way
            return True
        if not job.done:
            return False
        try:  # (unlocked: a scan by identity, in C; a Python ``__eq__`` could see it change)
            if self._leading and job in self._asleep:  # to be woken in its turn
                return False
        except RuntimeError:  # the deque changed during the scan: look again next time
            return False
        job.gone = True  # popped and its release lost (or on its way), or no leader left
        return True

    def _lead(self, mine: J) -> None:
        """Commit groups as the leader: ``mine``'s, then up to ``keep`` more while jobs are
        queued; then hand the lead to the oldest queued job's thread, or drop it."""
        try:
            if self._woken and self._linger_s > 0:
                # The writers of the last groups need the GIL to queue their next writes: a
                # leader taking the queue at once finds it nearly empty on a loaded machine.
                time.sleep(self._linger_s)
            more = self._keep
            while group := self._next(mine, more):
                more -= mine.done
                interrupted = self._commit_group(group, mine)
                if interrupted is not None:  # the commit was interrupted: stop leading
                    if interrupted is not mine.error:
                        raise interrupted  # a later group's: this thread's interrupt too
                    break
        finally:
            self._stop(mine)

    def _next(self, mine: J, more: int) -> list[J]:
        """Take the next group: ``mine``'s, or one more while ``more`` allows (else none)."""
        with self._lock:
            if not self._queue or (mine.done and more <= 0):
                return []
            group = self._take()
            self.groups += 1
            self.jobs += len(group)
            return group

    def _commit_group(self, group: list[J], mine: J) -> BaseException | None:
        """Commit ``group``; return what interrupted it (not an ``Exception``), if anything.

        Its other jobs' threads then sleep on, done, until they are woken one at a time.
        """
        self._leader = threading.get_ident()
        self._stored = False
        try:
            self._commit(group)
        except BaseException as exc:  # each job of the group raises it in its own thread
            for job in group:
                job.error = exc
            if not isinstance(exc, Exception):
                return exc
        finally:
            self._leader = None
            for job in group:
                job.done = True
            others = [job for job in group if job is not mine]
            self._asleep.extend(others)
            self._woken = bool(others)
            if not self._stored:  # the leader's store write did not wake one: one, if any
                self._wake_one()
        return None

    def _stop(self, mine: J) -> None:
        """Stop leading: ``mine`` taken back if still queued (never committed), and the lead
        handed on, or dropped (then the threads of done jobs are woken, each waking one)."""
        with self._lock:
            if not mine.done and mine in self._queue:
                self._queue.remove(mine)
            heir = self._hand_on()
        if heir is None:
            self._wake_one()
        else:
            heir._wake.release()

    def _hand_on(self) -> J | None:
        """Name the oldest queued job the next leader's, or drop the lead (``_lock`` held)."""
        if not self._queue:
            self._leading = False
            return None
        heir = self._queue[0]
        heir.heir = True
        return heir

    def _abandon(self, job: J) -> None:
        """Take back a job whose thread stopped waiting: not committed if still queued, and a
        lead it was handed goes on to the next queued job (or is dropped)."""
        heir = None
        with self._lock:
            taken = job not in self._queue
            if not taken:
                self._queue.remove(job)
                if job.heir:
                    heir = self._hand_on()
        if taken:  # in a group: committed whatever happens; it is woken once done
            try:
                self._sleep(job)
            except BaseException:  # interrupted again: it leaves, its wake-up passed on
                self._leave(job)
                raise
            if not self._leading:
                self._wake_one()
        elif heir is not None:
            heir._wake.release()
        elif job.heir:
            self._wake_one()

    def _leave(self, job: J) -> None:
        """Mark ``job``'s thread gone, so that its wake-up goes to the next thread asleep.

        ``_wake_one`` releases a job, then reads ``gone``: either it reads it set and wakes
        the next, or it released the job before ``gone`` was set and this thread takes the
        release here and wakes the next itself (at worst both do: one thread woken early).
        """
        job.gone = True
        if job._wake.acquire(blocking=False):  # woken before it was marked gone
            self._wake_one()

    def _take(self) -> list[J]:
        """Remove and return the next group: queued jobs with disjoint keys, oldest first."""
        group: list[J] = []
        claimed: set[Hashable] = set()
        size = 0
        for job in self._queue:
            free = claimed.isdisjoint(job.keys)
            fits = not group or size + len(job.keys) <= self._max_keys
            if free and fits:
                group.append(job)
                size += len(job.keys)
            claimed.update(job.keys)  # a later job of these keys must wait for this one
        if len(group) == len(self._queue):  # the usual case: every queued job goes in
            self._queue = []
        else:
            taken = {id(job) for job in group}
            self._queue = [job for job in self._queue if id(job) not in taken]
        return group
