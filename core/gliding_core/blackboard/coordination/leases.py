"""L2: leases on blackboard resources (Read / Write / Exclusive) with TTLs and fencing tokens.

A lease is a lock that expires: a holder that crashes or pauses loses it after ``ttl_s``
unless it renews it (an agent's heartbeat renews all its leases). Leases live in the
coordination store (``coordination.protocol``), each grant one serialisable transaction (in
SQLite under ``BEGIN IMMEDIATE``), so they hold across threads and across the processes that
share the store. This module holds every decision (the table below, re-entrancy, upgrades,
fencing, voiding, waiting, events); the store holds the rows.

Compatibility (``COMPATIBLE[held, requested]``, symmetric; the tests enumerate it):

============  ======  ======  =========
held \\ asked  Read    Write   Exclusive
============  ======  ======  =========
Read          yes     yes     no
Write         yes     no      no
Exclusive     no      no      no
============  ======  ======  =========

Read shares with Write because the blackboard's writes are atomic: a reader sees the last
committed value, never half a write. Write excludes Write (one writer at a time), Exclusive
excludes everyone.

Invariants:
- No two live leases of one resource held by different holders are incompatible.
- Every grant takes a token from one sequence in the store, so tokens strictly increase
  across resources, threads and processes. A re-entrant acquisition by the holder of a lease
  of the same or a stronger mode is not a new grant: it deepens the lease (each acquisition
  needs its release) and keeps its token. Asking for a stronger mode than held upgrades the
  lease, which is a new grant with a new token; the lease keeps the stronger mode until it is
  released.
- Fencing: the newest token granted in Write or Exclusive mode is recorded per resource, and
  kept after release. ``check_fence`` accepts a token only if it is that newest token and its
  holder still has the live lease, so a paused holder whose lease expired cannot overwrite the
  work of its successor. The check and the guarded write are two steps: the caller makes the
  write right after the check (the blackboard does both under its single writer).
- A lease is live while ``clock() < expires_at``. Expired leases are ignored by every read
  and deleted by the next grant on their resource (or by ``expire()``); a grant never waits for
  a sweeper.
- A request may name the leases it ends (``void``, a predicate on a conflicting lease): the
  blackboard's handles void a lease whose holder no longer has the right it protects (an agent
  of another task, or of a role without the right, on a node of the requester's task). Voided
  leases are deleted in the grant's transaction, and only when the grant is made (a refused
  request ends nothing); ``void`` runs inside that transaction, so it reads nothing but the
  coordination store (the agent registry).
- Grants are not queued: a waiter gets the lease at its first attempt after the conflicting
  holders are gone, so a stream of readers can delay an Exclusive waiter until its timeout, and
  two readers that both wait to upgrade wait for each other (ask for the strongest mode needed
  first).
- Waiting uses the monotonic clock for its deadline; expiry uses the coordination clock.
  Waiters in this process are woken by a release; waiters in other processes poll, backing off
  up to ``max_wait_poll_s``.

Durability (``CoordinationStore.write``'s ``commit``; what a server database does with it is
its own, see ``coordination.postgres``): a crash of the storage must never let two holders
of a Write or Exclusive lease coexist, nor hand a token out twice; it may delay a grant.

- A grant is durable before ``acquire`` returns (``"flush"``): lost after its holder learned its
  token, it would let the next grant take the resource while the first holder writes, with a
  token the store may give again. Others may see the grant a moment before it is durable: what
  they can do with it is be refused (a conflicting request, a write the lease blocks), and a
  grant or write that read it and is durable makes it durable too (the store's log is flushed in
  order), so a crash that loses it loses them.
- A release may be lost (``"async"``): it only ends a lease early, and losing it brings the lease
  back as it was, held by a holder that no longer uses it. Nobody else gets a conflicting lease
  meanwhile (the lease blocks them, and a grant that saw the release gone is lost with it); the
  token passes the fence again until the lease expires, as if it had never been released, its
  holder still the only one; at ``expires_at`` the next grant deletes the row and takes a new,
  larger token (the grants before the crash were durable, so the token sequence did not go
  back): a lost release costs at most the lease's TTL of waiting. The same holds for
  ``release_all`` and for ``expire``'s deletions (an expired lease is ignored by every read
  whether its row is there or not). A lost deeper acquisition or renewal would end a lease
  before its holder expects, so those are durable before they return, as grants are.

Events (when a bus is given; payload ``resource``, ``holder``, ``mode``, ``token``):
``LEASE_GRANTED`` (also ``reentrant``), ``LEASE_RELEASED`` (also ``revoked``: voided by a
grant), ``LEASE_EXPIRED``.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass, replace

from gliding_core.blackboard.coordination.checks import check_name, check_seconds, parse_choice
from gliding_core.blackboard.coordination.protocol import CoordinationStore
from gliding_core.blackboard.coordination.records import Lease, LeaseMode
from gliding_core.bus import EventBus, EventType
from gliding_core.errors import (
    FencingTokenError,
    InvalidInputError,
    LeaseConflictError,
    LeaseNotHeldError,
    LeaseTimeoutError,
)
from gliding_core.jsonld import preview

__all__ = [
    "COMPATIBLE",
    "FENCED_MODES",
    "STRENGTH",
    "Lease",
    "LeaseMode",
    "LeaseTable",
    "Void",
    "check_mode",
    "conflict_error",
]

_FIRST_WAIT_S = 0.0005

_R, _W, _X = LeaseMode.READ, LeaseMode.WRITE, LeaseMode.EXCLUSIVE

COMPATIBLE: Mapping[tuple[LeaseMode, LeaseMode], bool] = {
    (_R, _R): True,
    (_R, _W): True,
    (_R, _X): False,
    (_W, _R): True,
    (_W, _W): False,
    (_W, _X): False,
    (_X, _R): False,
    (_X, _W): False,
    (_X, _X): False,
}
"""Whether a lease of the second mode may be granted beside a live lease of the first."""

STRENGTH: Mapping[LeaseMode, int] = {_R: 0, _W: 1, _X: 2}
"""The order of modes: a holder's lease covers every mode up to its own."""

FENCED_MODES = frozenset({_W, _X})
"""The modes whose grants advance a resource's fence (the modes that guard writes)."""

_BLOCKING: Mapping[LeaseMode, frozenset[LeaseMode]] = {
    asked: frozenset(held for held in LeaseMode if not COMPATIBLE[held, asked])
    for asked in LeaseMode
}
"""For each mode asked, the modes of the live leases of others that refuse it."""


Void = Callable[[Lease], bool]
"""Whether a request may end a conflicting lease (its holder lost the right it protects)."""


@dataclass(frozen=True, slots=True)
class _Outcome:
    """What one attempt did: the lease granted (or None), the conflicts, the leases expired and
    those the grant voided."""

    lease: Lease | None
    reentrant: bool
    conflicts: list[Lease]
    expired: list[Lease]
    voided: list[Lease]


def check_mode(value: object) -> LeaseMode:
    """Return ``value`` as a ``LeaseMode`` (a member or its value: ``"read"`` ...)."""
    return parse_choice(LeaseMode, value, "lease mode")


class LeaseTable:
    """The leases of one coordination store.

    Args:
        db: the coordination store (shared with the other registries).
        bus: where lease events are published; none when omitted.
    """

    def __init__(self, db: CoordinationStore, *, bus: EventBus | None = None) -> None:
        if not isinstance(db, CoordinationStore):
            raise InvalidInputError(f"db must be a CoordinationStore, got {preview(db)}")
        self.db = db
        self.bus = bus
        self._released = threading.Condition()
        self._releases = 0
        self._async_waiters: list[tuple[asyncio.AbstractEventLoop, asyncio.Future[None]]] = []

    # -- granting ------------------------------------------------------------------------------

    def try_acquire(
        self,
        resource: str,
        holder: str,
        mode: LeaseMode | str = LeaseMode.WRITE,
        *,
        ttl_s: float | None = None,
        void: Void | None = None,
    ) -> Lease:
        """Grant a lease now or raise ``LeaseConflictError`` naming the conflicting holders.

        Args:
            resource: what to lease.
            holder: who asks (re-entrant: the holder's own lease never conflicts).
            mode: read, write or exclusive.
            ttl_s: how long the lease lives unless renewed; ``lease_ttl_s`` by default.
            void: the conflicting leases the grant may end (see the module); none when omitted.
        """
        request = self._request(resource, holder, mode, ttl_s)
        outcome = self._settle(self._attempt(*request, void=_check_void(void)))
        if outcome.lease is None:
            raise _conflict(request[0], request[2], outcome.conflicts)
        return outcome.lease

    def acquire(
        self,
        resource: str,
        holder: str,
        mode: LeaseMode | str = LeaseMode.WRITE,
        *,
        ttl_s: float | None = None,
        timeout_s: float | None = None,
        void: Void | None = None,
    ) -> Lease:
        """Grant a lease, waiting up to ``timeout_s`` (forever when ``None``) for the holders.

        ``void`` is ``try_acquire``'s, asked at every attempt.

        Raises:
            LeaseTimeoutError: the resource was still held incompatibly at the deadline.
        """
        request = self._request(resource, holder, mode, ttl_s)
        ending = _check_void(void)
        deadline = _deadline(timeout_s)
        pauses = self._pauses(deadline)
        while True:
            seen = self._releases
            lease = self._granted(self._attempt(*request, void=ending), request, deadline)
            if lease is not None:
                return lease
            self._wait_for_release(seen, next(pauses))

    async def acquire_async(
        self,
        resource: str,
        holder: str,
        mode: LeaseMode | str = LeaseMode.WRITE,
        *,
        ttl_s: float | None = None,
        timeout_s: float | None = None,
        void: Void | None = None,
    ) -> Lease:
        """Await a lease like ``acquire``, without blocking the event loop while waiting.

        Each attempt runs in a worker thread (it may wait for another process's store lock);
        a release in this process wakes the waiter at once.
        """
        request = self._request(resource, holder, mode, ttl_s)
        ending = _check_void(void)
        deadline = _deadline(timeout_s)
        pauses = self._pauses(deadline)
        while True:
            seen = self._releases
            outcome = await asyncio.to_thread(self._attempt, *request, void=ending)
            lease = self._granted(outcome, request, deadline)
            if lease is not None:
                return lease
            await self._await_release(seen, next(pauses))

    @contextmanager
    def hold(
        self,
        resource: str,
        holder: str,
        mode: LeaseMode | str = LeaseMode.WRITE,
        *,
        ttl_s: float | None = None,
        timeout_s: float | None = None,
    ) -> Iterator[Lease]:
        """Hold a lease for the block: ``acquire`` on entry, ``release`` on exit."""
        lease = self.acquire(resource, holder, mode, ttl_s=ttl_s, timeout_s=timeout_s)
        try:
            yield lease
        finally:
            self.release(lease.resource, lease.holder)

    def _pauses(self, deadline: float | None) -> Iterator[float]:
        """The waits between a waiter's attempts: doubling up to the poll limit, to the deadline."""
        pause = _FIRST_WAIT_S
        while True:
            yield min(pause, _left(deadline))
            pause = min(pause * 2, self.db.config.max_wait_poll_s)

    def _request(
        self, resource: object, holder: object, mode: object, ttl_s: object
    ) -> tuple[str, str, LeaseMode, float]:
        ttl = self.db.config.lease_ttl_s if ttl_s is None else check_seconds(ttl_s, "ttl_s")
        return check_name(resource, "resource"), check_name(holder, "holder"), check_mode(mode), ttl

    def _granted(
        self,
        outcome: _Outcome,
        request: tuple[str, str, LeaseMode, float],
        deadline: float | None,
    ) -> Lease | None:
        """Settle an attempt of a wait: the lease, or None to wait on (raising at the deadline)."""
        self._settle(outcome)
        if outcome.lease is None and _left(deadline) <= 0:
            raise _conflict(request[0], request[2], outcome.conflicts, timed_out=True)
        return outcome.lease

    def _attempt(
        self, resource: str, holder: str, mode: LeaseMode, ttl_s: float, *, void: Void | None
    ) -> _Outcome:
        """Grant if no live lease of another holder is incompatible with ``mode`` (but those
        ``void`` ends, which the grant deletes)."""
        with self.db.write(f"granting a lease on {resource!r}", commit="flush") as tx:
            records = tx.leases
            # The common case in one step (a store may send it with the opening): nobody, not
            # even the holder, has a live lease the request must reckon with.
            first = records.grant_if_free(
                resource, holder, mode, ttl_s, blocking=_BLOCKING[mode], fenced=mode in FENCED_MODES
            )
            leases, now = first.seen, first.now
            expired = [lease for lease in leases if lease.expires_at <= now]
            if first.lease is not None:
                return _Outcome(first.lease, False, [], expired, [])
            if expired:
                records.delete_expired_on(resource, now)
            live = [lease for lease in leases if lease.expires_at > now]
            conflicting = [
                lease
                for lease in live
                if lease.holder != holder and not COMPATIBLE[lease.mode, mode]
            ]
            voided = [lease for lease in conflicting if void is not None and void(lease)]
            conflicts = [lease for lease in conflicting if lease not in voided]
            if conflicts:
                return _Outcome(None, False, conflicts, expired, [])
            for lease in voided:
                records.delete(resource, lease.holder)
            own = next((lease for lease in live if lease.holder == holder), None)
            if own is not None and STRENGTH[mode] <= STRENGTH[own.mode]:
                expires = max(own.expires_at, now + ttl_s)
                records.deepen(resource, holder, expires)
                deeper = replace(own, depth=own.depth + 1, expires_at=expires)
                return _Outcome(deeper, True, [], expired, voided)
            depth = 1 if own is None else own.depth + 1
            lease = Lease(resource, holder, mode, 0, depth, ttl_s, now, now + ttl_s)
            granted = records.grant(lease, fenced=mode in FENCED_MODES)
            return _Outcome(granted, False, [], expired, voided)

    def _settle(self, outcome: _Outcome) -> _Outcome:
        """Publish what an attempt did, after its transaction."""
        for lease in outcome.expired:
            self._publish(EventType.LEASE_EXPIRED, lease)
        for lease in outcome.voided:
            self._publish(EventType.LEASE_RELEASED, lease, revoked=True)
        if outcome.voided:
            self._woken()
        if outcome.lease is not None:
            self._publish(EventType.LEASE_GRANTED, outcome.lease, reentrant=outcome.reentrant)
        return outcome

    # -- renewing and releasing ----------------------------------------------------------------

    def renew(self, resource: str, holder: str, *, ttl_s: float | None = None) -> Lease:
        """Extend a live lease by ``ttl_s`` from now (its own TTL by default).

        Raises:
            LeaseNotHeldError: the holder has no live lease on the resource.
        """
        resource, holder = check_name(resource, "resource"), check_name(holder, "holder")
        ttl = None if ttl_s is None else check_seconds(ttl_s, "ttl_s")
        with self.db.write(f"renewing the lease on {resource!r}") as tx:
            now = tx.now()
            own = tx.leases.live(resource, holder, now)
            if own is None:
                raise _not_held(resource, holder)
            expires = now + (own.ttl_s if ttl is None else ttl)
            tx.leases.set_expiry(resource, holder, expires)
        return replace(own, expires_at=expires)

    def renew_all(self, holder: str) -> int:
        """Extend every live lease of ``holder`` by its TTL from now; return how many."""
        holder = check_name(holder, "holder")
        with self.db.write(f"renewing the leases of {holder!r}") as tx:
            return tx.leases.renew_all(holder, tx.now())

    def release(self, resource: str, holder: str) -> bool:
        """Release one acquisition of the holder's lease; return whether it was held.

        The lease ends when every acquisition is released. Releasing a lease that expired or
        was never granted returns ``False`` and changes nothing (a late release is harmless).

        The release may return before it is durable (``"async"``): a crash of the storage may
        then lose it, which brings the lease back until its TTL runs out, and no longer (see
        the module's durability).
        """
        resource, holder = check_name(resource, "resource"), check_name(holder, "holder")
        with self.db.write(f"releasing the lease on {resource!r}", commit="async") as tx:
            own = _live(tx.leases.on(resource), holder, tx.now())
            if own is not None and own.depth > 1:
                tx.leases.decrement(resource, holder)
                return True
            tx.leases.delete(resource, holder)
        if own is not None:
            self._woken()
            self._publish(EventType.LEASE_RELEASED, own)
        return own is not None

    def release_all(self, holder: str) -> list[Lease]:
        """End every lease of ``holder`` whatever its depth; return the live ones it had."""
        holder = check_name(holder, "holder")
        with self.db.write(f"releasing the leases of {holder!r}", commit="async") as tx:
            now = tx.now()
            removed = tx.leases.remove_holder(holder)
        released = [lease for lease in removed if lease.expires_at > now]
        if removed:
            self._woken()
        for lease in released:
            self._publish(EventType.LEASE_RELEASED, lease)
        return released

    def expire(self) -> list[Lease]:
        """Delete every expired lease now and return them (grants do this lazily anyway)."""
        with self.db.write("deleting expired leases", commit="async") as tx:
            expired = tx.leases.remove_expired(tx.now())
        if expired:
            self._woken()
        for lease in expired:
            self._publish(EventType.LEASE_EXPIRED, lease)
        return expired

    # -- reading -------------------------------------------------------------------------------

    def holders(self, resource: str) -> list[Lease]:
        """Return the live leases on ``resource``, oldest grant first."""
        resource = check_name(resource, "resource")
        with self.db.read(f"reading the leases on {resource!r}") as tx:
            leases = tx.leases.on(resource)
            now = tx.now()
        return sorted((lease for lease in leases if lease.expires_at > now), key=_by_token)

    def holders_of(self, resources: Sequence[str]) -> dict[str, list[Lease]]:
        """Return the live leases on each of ``resources``, oldest grant first, in one read
        (a resource without one maps to an empty list)."""
        if isinstance(resources, (str, bytes)) or not isinstance(resources, Sequence):
            raise InvalidInputError(
                f"resources must be a list of resource names, got {preview(resources)}"
            )
        wanted = list(dict.fromkeys(check_name(r, "resource") for r in resources))
        found: dict[str, list[Lease]] = {resource: [] for resource in wanted}
        if not wanted:
            return found
        with self.db.read(f"reading the leases on {len(wanted)} resources") as tx:
            leases = tx.leases.on_any(wanted)
            now = tx.now()
        for lease in sorted(leases, key=_by_token):
            if lease.expires_at > now:
                found[lease.resource].append(lease)
        return found

    def leases(self, holder: str | None = None) -> list[Lease]:
        """Return the live leases (of ``holder`` when given), by resource then holder."""
        holder = None if holder is None else check_name(holder, "holder")
        with self.db.read("reading the leases") as tx:
            return tx.leases.live_all(tx.now(), holder)

    def holds_write_lease(self, resource: str, holder: str) -> bool:
        """Return whether ``holder`` has a live Write or Exclusive lease on ``resource``."""
        resource, holder = check_name(resource, "resource"), check_name(holder, "holder")
        with self.db.read(f"reading the lease of {holder!r} on {resource!r}") as tx:
            own = _live(tx.leases.on(resource), holder, tx.now())
        return own is not None and own.mode is not LeaseMode.READ

    def newest_token(self, resource: str) -> int | None:
        """Return the newest token granted on ``resource`` in a fenced mode, if any."""
        resource = check_name(resource, "resource")
        with self.db.read(f"reading the fence of {resource!r}") as tx:
            return tx.leases.newest_token(resource)

    def check_fence(self, resource: str, holder: str, token: int) -> None:
        """Accept a guarded write or delete only from the live holder of the newest fenced
        grant.

        Raises:
            FencingTokenError: ``token`` is not the newest Write or Exclusive token granted on
                ``resource``, or ``holder`` no longer holds that lease (released or expired).
        """
        resource, holder = check_name(resource, "resource"), check_name(holder, "holder")
        if isinstance(token, bool) or not isinstance(token, int):
            raise InvalidInputError(f"token must be an int, got {preview(token)}")
        with self.db.read(f"checking the fence of {resource!r}") as tx:
            newest = tx.leases.newest_token(resource)
            own = tx.leases.live(resource, holder, tx.now())
        problem = _fence_problem(own, token, newest)
        if problem:
            raise FencingTokenError(
                f"guarded change of {resource!r} by {holder!r} with token {token} refused:"
                f" {problem}",
                resource=resource,
                holder=holder,
                token=token,
                newest=newest,
            )

    # -- events --------------------------------------------------------------------------------

    def _wait_for_release(self, seen: int, timeout_s: float) -> None:
        """Wait until a release in this process follows the count ``seen``, or the timeout."""
        with self._released:
            self._released.wait_for(lambda: self._releases != seen, timeout_s)

    async def _await_release(self, seen: int, timeout_s: float) -> None:
        """Await a release in this process after the count ``seen``, or the timeout."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[None] = loop.create_future()
        waiter = (loop, future)
        with self._released:
            if self._releases != seen:
                return
            self._async_waiters.append(waiter)
        try:
            with suppress(asyncio.TimeoutError):
                await asyncio.wait_for(future, timeout_s)
        finally:
            with self._released:
                if waiter in self._async_waiters:
                    self._async_waiters.remove(waiter)

    def _woken(self) -> None:
        with self._released:
            self._releases += 1
            self._released.notify_all()
            waiters, self._async_waiters = self._async_waiters, []
        for loop, future in waiters:
            # RuntimeError: the waiter's loop has closed, so nobody is waiting any more.
            with suppress(RuntimeError):
                loop.call_soon_threadsafe(_resolve, future)

    def _publish(self, kind: EventType, lease: Lease, **extra: object) -> None:
        if self.bus is not None:
            self.bus.publish(kind, {**lease.payload(), **extra}, source=lease.holder)


def _live(leases: Iterable[Lease], holder: str, now: float) -> Lease | None:
    """Return ``holder``'s live lease among ``leases`` (a resource's), if any.

    The callers read the resource's rows before the clock: a store may send that read with
    its transaction's opening, which reads the clock too."""
    return next(
        (lease for lease in leases if lease.holder == holder and lease.expires_at > now), None
    )


def _by_token(lease: Lease) -> int:
    return lease.token


def _fence_problem(own: Lease | None, token: int, newest: int | None) -> str:
    if newest is None:
        return "no write lease was ever granted on it"
    if token != newest:
        return f"a newer write lease (token {newest}) was granted since"
    if own is None or own.token != token:
        return "the lease expired or was released"
    return ""


def _conflict(
    resource: str, mode: LeaseMode, conflicts: Iterable[Lease], *, timed_out: bool = False
) -> LeaseConflictError:
    holders = tuple((lease.holder, lease.mode.value) for lease in conflicts)
    return conflict_error(resource, mode, holders, timed_out=timed_out)


def conflict_error(
    resource: str,
    mode: LeaseMode,
    holders: tuple[tuple[str, str], ...],
    *,
    timed_out: bool = False,
) -> LeaseConflictError:
    """Return the refusal of a ``mode`` lease on ``resource`` that ``holders`` conflict with.

    Args:
        resource: the resource asked for.
        mode: the mode asked for.
        holders: ``(holder, mode)`` of each conflicting lease, as the refusal names them.
        timed_out: the request waited until its deadline (``LeaseTimeoutError``).
    """
    named = ", ".join(f"{holder!r} ({mode})" for holder, mode in holders)
    if timed_out:
        return LeaseTimeoutError(
            f"timed out waiting for a {mode.value} lease on {resource!r}; held by {named}",
            resource=resource,
            holders=holders,
        )
    return LeaseConflictError(
        f"a {mode.value} lease on {resource!r} conflicts with {named}",
        resource=resource,
        holders=holders,
    )


def _check_void(void: object) -> Void | None:
    if void is not None and not callable(void):
        raise InvalidInputError(f"void must be callable or None, got {preview(void)}")
    return void


def _not_held(resource: str, holder: str) -> LeaseNotHeldError:
    return LeaseNotHeldError(f"{holder!r} holds no live lease on {resource!r}")


def _resolve(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


def _deadline(timeout_s: float | None) -> float | None:
    if timeout_s is None:
        return None
    return time.monotonic() + check_seconds(timeout_s, "timeout_s", allow_zero=True)


def _left(deadline: float | None) -> float:
    return float("inf") if deadline is None else deadline - time.monotonic()
