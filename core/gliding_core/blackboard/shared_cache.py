"""L2: the blackboard's coherence: one MESI coordinator over the board's own nodes.

``BoardCoherence`` builds the ``CoherenceCoordinator`` a blackboard owns (``board.coherence``)
and wires it in: ``BoardSource`` is its ``NodeSource`` (the node's value and generation; a put
conditional on the generation, under the board's single writer); ``commit`` runs every write
and delete of the board (an agent's or the system's) as one transition of the coordinator, so
the directory sees every change; write-back goes to the board's ``WriteBack`` (one path with
the flush and the critical tags' write-through); a lease that expires invalidates the copy it
guarded (``LEASE_EXPIRED`` -> ``expire_lease``); an agent the sweeper marks lost loses its
copies, dirty ones written back first (``AGENT_LOST`` -> ``drop_agent``).

Across processes (a SPARQL server shared by the processes of one machine, with one
``SQLiteDirectory`` in the memory directory) ``SharedCache`` checks the node cache: an entry is
served only while the directory's change counter still says nothing changed since it was
vouched for, else after its generation was compared with the directory's.

Writes are group-committed (``gliding_core.blackboard.groupcommit``): the batches several
threads queue while one commits are committed by that thread in one directory transaction
(``CoherenceCoordinator.commit_group``, with the board's ``_BoardSteps`` made once as its source
side) and one store write (``NodeStore.write_batches``), each decided alone; the caller
returns once its own batch is committed, then publishes its events (and ``Blackboard`` writes
its critical nodes through).

Invariants:
- Every change of a node goes through the coordinator: the directory's transaction (which
  serialises the writers of every process sharing it) holds the check of the base generation,
  the rights and fences, and the write; nothing of a refused change is written. In a group,
  a refused batch fails only its own caller; a group whose store write fails is committed
  again batch by batch, so a failure reaches only the caller it belongs to.
- A group never holds two batches of one node, so each node's generations follow the order
  its writes were queued in.
- Lock order: the lead of the commit queue, then the directory, then ``WriteBack``'s lock,
  then the node store's writer; nothing holding a later one takes an earlier one (a write
  made on the leading thread inside its commit, by an event subscriber, is committed at once
  instead of queued). Node events of a commit are published after its
  transaction, so a subscriber may use the board.
- Inside the directory's transaction the shared node cache is not trusted: reads there go to
  the store (``SharedCache.inside``), since the directory cannot vouch for an entry while its
  own transaction is open.
- A write whose store update may have landed without the directory knowing (its reply lost,
  or the directory's transaction failing after it) raises ``WriteOutcomeUnknownError`` with its
  write id, and leaves nothing of this process trusting the old value: its nodes leave the node
  cache and every agent's held copy, views built from them are invalidated, and the directory's
  token moves so that other processes check their caches of them again (a writer anywhere then
  reads the store inside its transaction, and so cannot overwrite a write that landed unseen).
- A retry (a write given the id of an earlier one) is decided in the transaction from the
  store's records (``writeids``): when the earlier write landed, the retry writes nothing, the
  directory takes the store's state, and the caller gets the nodes as that write committed them;
  its ``based_on`` is not compared (it is the generation the landed write was based on).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Hashable, Mapping, Sequence

from gliding_core.blackboard.coordination.leases import LeaseTable
from gliding_core.blackboard.groupcommit import CommitQueue, Job
from gliding_core.blackboard.nodes import WRITTEN_HERE, Announce, NodeStore
from gliding_core.blackboard.records import BoardNode, Known
from gliding_core.blackboard.validation import NodeWrite
from gliding_core.blackboard.writeback import WriteBack
from gliding_core.blackboard.writeids import deleted_by, landed, new_write_id, outcome_unknown
from gliding_core.bus import Event, EventBus, EventType, Subscription
from gliding_core.coherence.coordinator import Change, CoherenceCoordinator
from gliding_core.coherence.directory import Directory, NodeRecord
from gliding_core.coherence.node_sources import check_generation, refused
from gliding_core.errors import (
    EntryNotFoundError,
    GlidingError,
    InvalidInputError,
    WriteOutcomeUnknownError,
)
from gliding_core.jsonld import Node
from gliding_core.store.entry import MesiState

logger = logging.getLogger(__name__)

Check = Callable[[dict[str, BoardNode]], None]
"""Refuse a change given the nodes it touches as they exist (rights, fences), by raising."""


class _Depth(threading.local):
    """How deep this thread is inside the directory's transaction (0 on every new thread).

    A class default, not ``getattr`` with a default: a thread that never entered (a writer
    whose write another thread commits) would pay an ``AttributeError`` on every check.
    """

    depth = 0


class _Inside:
    """The context of ``SharedCache.inside`` (a class: entered several times a write)."""

    def __init__(self, local: _Depth) -> None:
        self._local = local

    def __enter__(self) -> None:
        self._local.depth += 1

    def __exit__(self, *exc: object) -> None:
        self._local.depth -= 1


class SharedCache:
    """The node cache's check against a directory shared by processes (``CacheCheck``).

    Args:
        directory: the coherence directory every process of the store shares.
    """

    def __init__(self, directory: Directory) -> None:
        self.directory = directory
        self.local = _Depth()
        """This thread's depth inside the directory's transaction (``local.depth``): public
        for the board's write, which reads it once a write instead of calling ``is_inside``."""
        self.inside = _Inside(self.local)
        """Entered by a ``with`` block running inside the directory's transaction (this
        thread): an attribute, not a method, since every write enters it."""
        self.token = directory.token  # type: ignore[method-assign]  # one call less per read
        self.own: Callable[[Hashable, Hashable, str], bool] = lambda held, now, iri: False
        """Whether every change since ``held`` was this process's own and left ``iri`` alone
        (the coordinator's ``vouch_own``)."""
        self.last_own: Callable[[str], Hashable] = lambda iri: None
        """The token of this process's last change of ``iri`` (``None``: none known)."""

    def is_inside(self) -> bool:
        """Return whether this thread is inside the directory's transaction."""
        return self.local.depth > 0

    def token(self) -> Hashable:
        """Return the directory's change counter."""
        return self.directory.token()

    def vouch(
        self, iri: str, generation: int, exists: bool, stamp: Hashable | None
    ) -> Hashable | None:
        """Return the token vouching for an entry the directory agrees with, else ``None``.

        Without asking the directory when every change since the entry was vouched (or since
        this process wrote it) was this process's own and none touched the node.
        """
        if self.is_inside():
            return None
        now = self.token()
        held = self.last_own(iri) if stamp is WRITTEN_HERE else stamp
        if held is not None and self.own(held, now, iri):
            return now
        record, token = self.directory.snapshot(iri)
        if record.generation == 0:  # no process wrote it through the directory: the store's
            return token
        if (record.generation, record.value is not None) == (generation, exists):
            return token
        return None


class BoardSource:
    """The blackboard's nodes as the coordinator's ``NodeSource``.

    Args:
        nodes: the board's node layer.
        cache: the check of its cache (its ``inside`` is entered for every call).
    """

    def __init__(self, nodes: NodeStore, cache: SharedCache) -> None:
        self.nodes, self.cache = nodes, cache

    def get(self, iri: str) -> tuple[Node, int]:
        """Return the node's value and generation; ``EntryNotFoundError`` when absent."""
        with self.cache.inside:
            node = self.nodes.get_many([iri]).get(iri)
        if node is None:
            raise EntryNotFoundError(f"no blackboard node has the IRI {iri!r}")
        return node.node, node.generation

    def states(self, iris: Sequence[str]) -> dict[str, tuple[Node | None, int]]:
        """Return each node's value (``None``: absent or deleted) and generation."""
        with self.cache.inside:
            found = self.nodes.states(iris)
        return {iri: (None if n is None else n.node, g) for iri, (n, g) in found.items()}

    def put(self, iri: str, value: Node, expected_generation: int) -> int:
        """Write ``value`` over an existing node at ``expected_generation`` (graph and tags kept).

        Raises:
            StaleWriteError: the node is at another generation.
            InvalidInputError: the node does not exist: a new node needs an area (write it
                through an agent's handle or ``Blackboard.write``).
        """
        check_generation(expected_generation, what="expected_generation")
        with self.cache.inside, self.nodes.writer:
            node, generation = self.nodes.states([iri])[iri]
            current = 0 if node is None else generation
            if current != expected_generation:
                raise refused(
                    iri, expected_generation, current, None if node is None else node.node
                )
            if node is None:
                raise InvalidInputError(
                    f"{iri!r} is not on the blackboard: a new node needs an area (write it"
                    " through an agent's handle)"
                )
            requests = self.nodes.prepare([value], node.graph, node.tags)
            return self.nodes.write(requests)[0].generation


class _Landed(Exception):  # noqa: N818 - not an error: the outcome of a retry, as a refusal
    """A retried write found landed: the nodes as it committed them (``finish`` raises it)."""

    def __init__(self, nodes: list[BoardNode]) -> None:
        super().__init__("the write landed before")
        self.nodes = nodes


class _Write(Job):
    """One queued write of a batch: its change, its check, its id, and what it stored."""

    __slots__ = (
        "announce",
        "change",
        "check",
        "requests",
        "retry",
        "source",
        "write_id",
        "written",
    )

    def __init__(
        self,
        iris: dict[str, int | None],
        requests: Sequence[NodeWrite],
        check: Check | None,
        source: str | None,
        write_id: str,
        retry: bool,
    ) -> None:
        Job.__init__(self, iris)  # (not ``super()``: this runs on every write)
        self.requests, self.check, self.source = requests, check, source
        self.write_id, self.retry = write_id, retry
        self.change: Change[_Write]
        self.written: list[BoardNode] = []
        self.announce: Announce | None = None


class _BoardSteps:
    """The board's side of its group commits (``GroupSource``): made once, for every commit."""

    __slots__ = ("nodes",)

    def __init__(self, nodes: NodeStore) -> None:
        self.nodes = nodes

    def current(
        self, records: Mapping[str, NodeRecord], changes: Sequence[Change[_Write]]
    ) -> dict[str, tuple[Node | None, int]]:
        """Read the nodes as the store holds them and run each write's check on its own.

        A retry that finds its earlier write landed is refused with ``_Landed`` before any
        check: it writes nothing (the earlier write was checked).
        """
        nodes = self.nodes
        with nodes.writer:
            known = nodes.known(list(records))
            found = {}
            for iri, state in known.items():  # (``NodeStore.states``, from the same read)
                found[iri] = (state if isinstance(state, BoardNode) else None, state.generation)
            for change in changes:
                job = change.owner
                if job.retry and _landed(change, known):
                    continue
                check = job.check
                if check is None:
                    continue
                existing: dict[str, BoardNode] = {}
                for iri in change.bases:
                    node = found[iri][0]
                    if node is not None:
                        existing[iri] = node
                try:
                    check(existing)
                except Exception as exc:  # this write's own refusal (rights, fences...)
                    change.refusal = exc
        # Each node's value and generation for the coordinator: the record's own value when
        # the record is at the node's generation (the same write's value: no second parse of
        # its JSON), and an absent node's pair as the store gave it.
        states: dict[str, tuple[Node | None, int]] = {}
        for iri, pair in found.items():
            node, generation = pair
            if node is None:
                states[iri] = pair  # type: ignore[assignment]  # (None, generation)
                continue
            value = records[iri].value
            same = value is not None and records[iri].generation == generation
            states[iri] = (value if same else node.node, generation)
        return states

    def apply(
        self, changes: Sequence[Change[_Write]], records: Mapping[str, NodeRecord]
    ) -> list[dict[str, tuple[Node | None, int]]]:
        """Write the accepted writes' batches in one store write; each one's stored states."""
        if len(changes) == 1:  # a lone write: no list of batches built, nor looped over
            job = changes[0].owner
            [(job.written, job.announce)] = self.nodes.write_batches(
                [(job.requests, job.source, job.write_id)]
            )
            return [_states(job.requests, job.written)]
        batches = [(c.owner.requests, c.owner.source, c.owner.write_id) for c in changes]
        stored = self.nodes.write_batches(batches)  # (it holds the store's writer itself)
        states = []
        for index, change in enumerate(changes):  # one stored batch per write, in order
            job = change.owner
            job.written, job.announce = stored[index]
            states.append(_states(job.requests, job.written))
        return states


class _Deletion:
    """One delete's two steps in the directory's transaction (``commit``), and what they did.

    ``before``: the nodes an earlier delete of the same id removed, when a retry finds it
    landed (then nothing is deleted again, nor checked); ``gone``: the nodes this one deleted.
    """

    def __init__(
        self,
        nodes: NodeStore,
        cache: SharedCache,
        iris: Sequence[str],
        check: Check | None,
        source: str | None,
        write_id: str,
        retry: bool,
    ) -> None:
        self.nodes, self.cache, self.iris, self.check = nodes, cache, iris, check
        self.source, self.write_id, self.retry = source, write_id, retry
        self.before: list[str] = []
        self.gone: list[BoardNode] = []
        self.events: list[Announce] = []

    def current(self, records: Mapping[str, NodeRecord]) -> dict[str, tuple[Node | None, int]]:
        """Read the nodes from the store; find a landed earlier delete, or run the check."""
        with self.cache.inside, self.nodes.writer:
            known = self.nodes.known(list(records))
            if self.retry:
                self.before = deleted_by(self.write_id, known)
            found = {iri: k for iri, k in known.items() if isinstance(k, BoardNode)}
            if self.check is not None and not self.before:
                self.check(found)
        states: dict[str, tuple[Node | None, int]] = {}
        for iri, state in known.items():
            node = found.get(iri)
            states[iri] = (None if node is None else node.node, state.generation)
        return states

    def apply(self, records: Mapping[str, NodeRecord]) -> dict[str, tuple[Node | None, int]]:
        """Delete the nodes (a landed earlier delete: nothing; the directory took the store's
        states, tombstones or what was written since)."""
        if self.before:
            return {}
        with self.cache.inside, self.nodes.writer:
            self.gone = self.nodes.delete(
                self.iris, source=self.source, events=self.events, write_id=self.write_id
            )
        return {n.iri: (None, n.generation) for n in self.gone}


def _in_doubt(error: BaseException, jobs: Sequence[_Write]) -> bool:
    """Return whether a failed commit of ``jobs`` may have left its writes in the store: its
    update's reply was lost, or something failed after the store took it."""
    return isinstance(error, WriteOutcomeUnknownError) or any(job.written for job in jobs)


def _landed(change: Change[_Write], known: Mapping[str, Known]) -> bool:
    """Refuse a retry whose earlier write landed (``_Landed``), or that reuses another write's
    id; return whether it was refused."""
    job = change.owner
    try:
        nodes = landed(job.write_id, job.requests, known)
    except InvalidInputError as exc:
        change.refusal = exc
        return True
    if nodes is None:
        return False
    change.refusal = _Landed(nodes)
    return True


def _states(
    requests: Sequence[NodeWrite], written: Sequence[BoardNode]
) -> dict[str, tuple[Node | None, int]]:
    """Each written node's value (as the request parsed it) and generation, for the directory.

    ``written`` holds the requests' nodes as stored, in order (``NodeStore.write_batches``).
    """
    states: dict[str, tuple[Node | None, int]] = {}
    for index, node in enumerate(written):  # (``zip(strict=True)`` costs 4x more)
        states[node.iri] = (requests[index].node, node.generation)
    return states


class BoardCoherence:
    """The coordinator of a blackboard, and its wiring to the board's write-back and leases.

    Args:
        nodes: the board's node layer.
        directory: the coherence directory (a ``SQLiteDirectory`` when processes share it).
        shared: whether other processes write the store too (its cache is checked then).
        bus: where invalidations are announced (the memory's bus).
        writeback: the board's write-back to L0 (``None``: the board has no L0).
        critical_tags: tags whose writes go through to L0 before the write returns.
    """

    def __init__(
        self,
        nodes: NodeStore,
        directory: Directory,
        *,
        shared: bool,
        bus: EventBus | None,
        writeback: WriteBack | None,
        critical_tags: frozenset[str],
    ) -> None:
        self.nodes, self.writeback = nodes, writeback
        self.cache = SharedCache(directory)
        if shared:
            nodes.check = self.cache
        self.source = BoardSource(nodes, self.cache)
        self.leases: LeaseTable | None = None
        self.coordinator = CoherenceCoordinator(
            self.source,
            directory,
            bus=bus,
            write_back=None if writeback is None else self._write_back,
            holds_write_lease=self._holds_write_lease,
            critical_tags=critical_tags,
        )
        self.cache.own = self.coordinator.vouch_own
        self.cache.last_own = self.coordinator.last_own
        self._steps = _BoardSteps(nodes)
        self.queue: CommitQueue[_Write] = CommitQueue(self._commit_jobs)
        """Where the board's writes wait to be committed in groups."""
        self._subscriptions: list[Subscription] = []

    # -- the coordinator's callbacks -------------------------------------------------------------

    def _write_back(self, iri: str, value: Node, generation: int) -> None:
        """Write the node back to L0 through the board's write-back (in the transaction)."""
        assert self.writeback is not None
        with self.cache.inside:
            node = self.nodes.get_many([iri]).get(iri)
            if node is not None and node.dirty:
                self.writeback.flush_nodes([node])

    def _holds_write_lease(self, agent: str, iri: str) -> bool:
        return self.leases is not None and self.leases.holds_write_lease(iri, agent)

    # -- commits ---------------------------------------------------------------------------------

    def write(
        self,
        agent: str | None,
        requests: Sequence[NodeWrite],
        *,
        bases: Mapping[str, int | None],
        check: Check | None = None,
        source: str | None = None,
        write_id: str | None = None,
        retry: bool = False,
    ) -> list[BoardNode]:
        """Write a validated batch as one transition of every node in it; return it as stored.

        The batch is queued and committed, alone or with other threads' batches queued
        meanwhile (``CommitQueue``), in one directory transaction and one store write; it is
        decided alone (``check``, the bases), and this returns once it is committed.

        Args:
            write_id: the write's id (a new one when ``None``), stored with it.
            retry: whether ``write_id`` may have been written before (a retry after
                ``WriteOutcomeUnknownError``): if the store's records say it landed, nothing
                is written and the nodes are returned as it committed them.

        Raises:
            StaleWriteError: a node has moved past its base (nothing written).
            WriteOutcomeUnknownError: the store may have applied the write and its answer was
                lost (or the directory failed after the store took it).
        """
        wanted: dict[str, int | None] = {}
        for request in requests:
            wanted[request.iri] = bases.get(request.iri)
        if retry:  # decided on the store's records: nothing this process cached of them
            self.nodes.forget(wanted)
        wid = new_write_id() if write_id is None else write_id
        job = _Write(wanted, requests, check, source, wid, retry)
        # The agent (a handle's name, or ``None``), the IRIs (the requests') and the bases (the
        # handle's) are validated already: not again per write.
        change = job.change = self.coordinator.checked_change(agent, wanted, job)
        try:
            if self.cache.local.depth > 0:  # (``is_inside``, inline: once a write)
                # Made inside a directory transaction (a subscriber of a write-back's event):
                # queued, it would wait for a leader that waits for this thread's transaction.
                self._commit_jobs([job])
                if job.error is not None:
                    raise job.error
            else:
                self.queue.run(job)
        except WriteOutcomeUnknownError as exc:
            self.nodes.doubted(exc.iris)  # (in the writer's thread: outside any transaction)
            raise
        finally:
            change.owner = None  # type: ignore[assignment]  # no cycle left for the collector
        try:
            self.coordinator.finish(change)
        except _Landed as found:
            self.nodes.announce_landed([n for n in found.nodes if n.write_id == wid], source)
            return found.nodes
        if job.announce is not None:
            job.announce()
        return job.written

    def _commit_jobs(self, jobs: Sequence[_Write]) -> None:
        """Commit a group of queued writes; a failing group is committed again write by write.

        Each transaction runs inside ``SharedCache.inside`` for the whole of it (not only
        around the store's calls): the thread does nothing else meanwhile, and the
        coordinator's write-backs enter it again anyway.
        """
        if len(jobs) == 1:  # a lone write: no group to fall back from
            job, local = jobs[0], self.cache.local
            local.depth += 1  # (``SharedCache.inside``, inline: once a write)
            try:
                self.coordinator.commit_group([job.change], self._steps)
            except Exception as exc:
                job.error = exc
            finally:
                local.depth -= 1
            if job.error is not None and _in_doubt(job.error, jobs):
                self._doubt(jobs, job.error)
            return
        try:
            with self.cache.inside:
                self.coordinator.commit_group([job.change for job in jobs], self._steps)
            return
        except Exception as exc:
            if _in_doubt(exc, jobs):
                # The store has the group, or may: each writer it held is told, with its own
                # write's id; a write the group refused was not in it, and is decided again.
                self._doubt([job for job in jobs if job.change.refusal is None], exc)
                jobs = [job for job in jobs if job.change.refusal is not None]
            else:
                logger.warning("a group of %d writes failed; each is committed alone", len(jobs))
                # (the exception reaches each writer whose write fails again alone)
        for job in jobs:
            self._commit_jobs([job])

    def _doubt(self, jobs: Sequence[_Write], cause: BaseException) -> None:
        """Fail writes whose outcome is unknown, each with its own id; unsettle their nodes."""
        iris: list[str] = []
        for job in jobs:
            mine = [request.iri for request in job.requests]
            job.error = outcome_unknown(job.write_id, mine, cause)
            iris += mine
        self._unsettle(iris)

    def _unsettle(self, iris: Sequence[str]) -> None:
        """Leave no copy of ``iris`` trusted, here or in other processes (see the module).

        Agents' held copies are forgotten and the directory's token moved (unless inside a
        transaction, which moves it itself if it changes anything); the node cache is emptied
        of them by the store write that failed, and again by the writer (``doubted``).
        """
        self.nodes.forget(iris)
        self.coordinator.forget_nodes(iris)
        if self.cache.local.depth == 0:
            try:
                self.coordinator.directory.touch()
            except Exception:  # the write's own error is the one its caller must see
                logger.warning(
                    "moving the coherence token after a lost reply failed", exc_info=True
                )

    def delete(
        self,
        agent: str | None,
        iris: Sequence[str],
        *,
        check: Check | None = None,
        source: str | None = None,
        write_id: str | None = None,
        retry: bool = False,
    ) -> int:
        """Delete nodes as one transition of each; return how many existed.

        ``write_id`` and ``retry`` as for ``write``: a retry whose earlier delete landed
        deletes nothing more and returns how many that delete removed.

        Raises:
            WriteOutcomeUnknownError: the store may have applied the delete and its answer was
                lost (or the directory failed after the store took it).
        """
        wid = new_write_id() if write_id is None else write_id
        if retry:
            self.nodes.forget(iris)
        steps = _Deletion(self.nodes, self.cache, iris, check, source, wid, retry)
        try:
            self.coordinator.commit(agent, dict.fromkeys(iris), steps.current, steps.apply)
        except Exception as exc:
            if not isinstance(exc, WriteOutcomeUnknownError) and not steps.gone:
                raise
            self._unsettle(iris)
            self.nodes.doubted(iris)
            if isinstance(exc, WriteOutcomeUnknownError) and exc.write_id == wid:
                raise  # the node store's, naming this delete already
            raise outcome_unknown(wid, iris, exc, delete=True) from exc
        for announce in steps.events:
            announce()
        return len(steps.before) if steps.before else len(steps.gone)

    # -- write-back, leases, agents --------------------------------------------------------------

    def written_back(self, nodes: Sequence[BoardNode]) -> None:
        """Take the ``MODIFIED`` copies of flushed nodes to ``EXCLUSIVE`` or ``SHARED``."""
        if self.cache.is_inside():
            return  # a write-back the coordinator asked for: its row moves the copy itself
        for node in nodes:
            record = self.coordinator.directory.record(node.iri)
            for copy in record.copies.values():
                if copy.state is MesiState.MODIFIED:
                    self.coordinator.write_back(copy.agent, node.iri)

    def attach(self, bus: EventBus, leases: LeaseTable) -> None:
        """Follow a coordination layer's leases and agents (its bus and its lease table)."""
        self.leases = leases
        self._subscriptions += [
            bus.subscribe(self._on_lease_expired, [EventType.LEASE_EXPIRED]),
            bus.subscribe(self._on_agent_lost, [EventType.AGENT_LOST]),
        ]

    def _on_lease_expired(self, event: Event) -> None:
        holder, resource = event.payload.get("holder"), event.payload.get("resource")
        if isinstance(holder, str) and isinstance(resource, str):
            try:
                self.coordinator.expire_lease(holder, resource)
            except GlidingError:  # a lease on something that is not a node IRI
                logger.debug("lease on %r is not on a node; no copy to invalidate", resource)

    def _on_agent_lost(self, event: Event) -> None:
        name = event.payload.get("name")
        if isinstance(name, str):
            dropped = self.coordinator.drop_agent(name)
            logger.info("agent %r was lost: its %d copies dropped", name, len(dropped))

    def close(self) -> None:
        """Stop following the coordination layer and close the directory."""
        for subscription in self._subscriptions:
            subscription.cancel()
        self._subscriptions.clear()
        self.coordinator.directory.close()
