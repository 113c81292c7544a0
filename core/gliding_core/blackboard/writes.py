"""L2: every change of a blackboard node, decided in one place.

``WritePath`` is the one path of a node write and of a node delete: an agent's (its
``AgentHandle`` is the writer) or the system's (``Blackboard.write``, the coordination layer's
mirror: no writer, nothing checked). Top to bottom:

 1. Validate, outside every lock: the target graph (an agent may not write the mirrored
    areas), the write id (a new one, or the caller's to retry a write whose outcome was
    unknown), the nodes (``NodeStore.prepare``: JSON-LD, size, RDF) and the bases
    (``based_on``).
 2. Queue: the batch becomes a job of the commit queue (``CommitQueue.run``). The thread that
    finds the queue idle leads and commits the jobs queued meanwhile as one group. A write made
    inside a commit (an event subscriber's) is committed at once, alone.
 3. Open one directory transaction over every node of the group (``Directory.update_many``),
    inside ``SharedCache.inside``, and read the nodes under the store's writer lock
    (``NodeStore.known``). Then, for each job of the group, decided alone:
 4. Retry: a job retrying a write id whose write landed before (the store's records say so,
    ``writeids.landed``) is set aside: nothing is checked or written, and its writer gets the
    nodes as that write committed them.
 5. Rights: create where a node is absent, update where it is, and delete in the area a moved
    node leaves (the writer's ``authorize``: the permission matrix).
 6. Fences: a ``lease_token`` must be the writer's newest Write or Exclusive grant on each node
    (``check_fence``). Without one, a live Write or Exclusive lease refuses the job when it
    guards the node against this writer (``lease_rights``: another task's agent, or a role
    without the right, guards nothing), and the writer's own lease asks for its token.
 7. Bases: a node moved past its base refuses the job (``StaleWriteError``; the writer's copy
    becomes INVALID) unless the writer holds a Write lease on it.
 8. MESI: other agents' valid copies become INVALID, dirty ones written back to L0 first; the
    writer's copy becomes MODIFIED (``coherence.commits``).
 9. Storage: the accepted jobs' batches in one SPARQL update, each node's record listing the
    write's id (``NodeStore.write_batches``).
10. Commit the directory transaction; note it as this process's own change (``OwnChanges``).
    Then, on each writer's own thread:
11. Copies: the writer's held copy is noted, and ``COPIES_INVALIDATED`` announces the copies
    the write invalidated.
12. Events: ``NODE_CREATED`` and ``NODE_UPDATED`` (``NODE_DELETED``).
13. Write-back: nodes with a critical tag are written through to L0 (``WriteBack``), and the
    writers' copies go from MODIFIED to EXCLUSIVE or SHARED (``written_back``).

A delete follows the same order, committed alone rather than queued: its retry finds the same
id's delete in the nodes' records (4), its right is delete in each node's area (5), it has no
bases (7) and it leaves tombstones (9). A refused job changes nothing and fails only its
writer; a group whose store write fails is committed again job by job.

Invariants:
- Every change of a node goes through the coordinator (``Blackboard.coherence``): the
  directory's transaction, which serialises the writers of every process sharing it, holds the
  retry's decision, the rights, the fences, the bases and the store write, so they hold when
  the write happens; nothing of a refused job is written.
- A group never holds two jobs of one node, so each node's generations follow the order its
  writes were queued in.
- Lock order: the lead of the commit queue, then the directory, then ``WriteBack``'s lock,
  then the node store's writer; nothing holding a later one takes an earlier one. Events are
  published after the transaction, so a subscriber may use the board.
- A write whose store update may have landed without the directory knowing (its reply lost,
  or the directory's transaction failing after it) raises ``WriteOutcomeUnknownError`` with its
  write id and leaves nothing of this process trusting the old values: its nodes leave the node
  cache and every agent's held copy, views built from them are invalidated, and the directory's
  token moves so that other processes check their caches of them again (a writer anywhere then
  reads the store inside its transaction, and so cannot overwrite a write that landed unseen).
- A retry whose earlier write landed is not compared with its bases nor checked again: that
  write was, and the directory takes the store's state.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Protocol

from gliding_core.blackboard.groupcommit import CommitQueue, Job
from gliding_core.blackboard.nodes import Announce, NodeStore
from gliding_core.blackboard.permissions import Operation
from gliding_core.blackboard.records import BoardNode, Known
from gliding_core.blackboard.shared_cache import BoardSource, SharedCache
from gliding_core.blackboard.sparql import MIRRORED_AREAS, FenceChecker
from gliding_core.blackboard.validation import NodeWrite, check_iri
from gliding_core.blackboard.vocabulary import area_graph, check_area
from gliding_core.blackboard.writeback import WriteBack
from gliding_core.blackboard.writeids import (
    check_write_id,
    deleted_by,
    landed,
    new_write_id,
    outcome_unknown,
)
from gliding_core.bus import Event, EventBus, EventType, Subscription
from gliding_core.coherence.commits import Change
from gliding_core.coherence.coordinator import Coherence
from gliding_core.coherence.directory import Directory, NodeRecord
from gliding_core.errors import (
    GlidingError,
    InvalidInputError,
    LeaseConflictError,
    PermissionDeniedError,
    WriteOutcomeUnknownError,
)
from gliding_core.jsonld import Node, preview
from gliding_core.store.entry import MesiState

if TYPE_CHECKING:
    from gliding_core.blackboard.coordination.records import Lease
    from gliding_core.blackboard.coordination.registries import Coordination
    from gliding_core.blackboard.lease_rights import LeaseRights

logger = logging.getLogger(__name__)

_GRAPHS_KEPT = 4_096
"""How many (task, area) -> graph pairs of agents' writes are kept (then forgotten at once)."""


class Writer(Protocol):
    """Who writes: an agent's handle, its identity bound once (never the model's word)."""

    @property
    def name(self) -> str:
        """The agent's name."""
        ...

    @property
    def role(self) -> str:
        """The agent's role, as the permission matrix names it."""
        ...

    @property
    def task(self) -> str:
        """The IRI of the agent's task."""
        ...

    @property
    def lease_rights(self) -> LeaseRights:
        """Which leases stand in the agent's way (``lease_rights``)."""
        ...

    def authorize(self, area: str, operation: Operation) -> str:
        """Return the graph of ``area`` if the role may do ``operation`` there, else raise
        ``PermissionDeniedError``."""
        ...

    def area_of(self, node: BoardNode) -> str:
        """Return the area of the agent's task that holds ``node``, else raise
        ``PermissionDeniedError``."""
        ...


class _Landed(Exception):  # noqa: N818 - not an error: the outcome of a retry, as a refusal
    """A retried write found landed: the nodes as it committed them (``finish`` raises it)."""

    def __init__(self, nodes: list[BoardNode]) -> None:
        super().__init__("the write landed before")
        self.nodes = nodes


class _Write(Job):
    """One queued write of a batch: who writes what, and what it stored."""

    __slots__ = (
        "announce",
        "area",
        "change",
        "lease_token",
        "requests",
        "retry",
        "source",
        "write_id",
        "writer",
        "written",
    )

    def __init__(
        self,
        iris: dict[str, int | None],
        requests: Sequence[NodeWrite],
        writer: Writer | None,
        *,
        area: str,
        lease_token: int | None,
        source: str | None,
        write_id: str,
        retry: bool,
    ) -> None:
        super().__init__(iris)
        self.requests, self.writer, self.area = requests, writer, area
        self.lease_token, self.source = lease_token, source
        self.write_id, self.retry = write_id, retry
        self.change: Change[_Write]
        self.written: list[BoardNode] = []
        self.announce: Announce | None = None


class WritePath:
    """The one path of every node write and delete of a blackboard (see the module).

    It owns the board's coordinator (``coordinator``, which is ``Blackboard.coherence``), the
    check of its node cache (``cache``) and its commit queue (``queue``), and it is the
    coordinator's source side of a group commit (``current``, ``apply``).

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
        self.coordinator = Coherence(
            BoardSource(nodes, self.cache),
            directory,
            bus=bus,
            write_back=None if writeback is None else self.write_back,
            holds_write_lease=self.holds_write_lease,
            critical_tags=critical_tags,
        )
        self.cache.own = self.coordinator.vouch_own
        self.cache.last_own = self.coordinator.last_own
        self.queue: CommitQueue[_Write] = CommitQueue(self._commit_jobs)
        """Where the board's writes wait to be committed in groups."""
        self.fences: FenceChecker | None = None
        self.coordination: Coordination | None = None
        self._graphs: dict[tuple[str, str], str] = {}  # (task, area) -> graph, agents' writes
        self._subscriptions: list[Subscription] = []
        if writeback is not None:
            writeback.on_flushed = self.written_back
            if shared:
                writeback.exclusive = self.flush_exclusive
        # A committed writer is woken as the next group's store write begins (the GIL free).
        nodes.before_store = self.queue.storing

    def attach(self, *, coordination: Coordination | None, fences: FenceChecker | None) -> None:
        """Check guarded writes against ``fences`` (else the coordination's lease table), and
        follow the coordination's leases and agents: an expired lease invalidates the copy it
        guarded, a lost agent's copies are dropped (dirty ones written back first)."""
        self.fences = fences
        if coordination is None:
            return
        self.coordination = coordination
        if fences is None:
            self.fences = coordination.leases
        self._subscriptions += [
            coordination.bus.subscribe(self._on_lease_expired, [EventType.LEASE_EXPIRED]),
            coordination.bus.subscribe(self._on_agent_lost, [EventType.AGENT_LOST]),
        ]

    # -- writes ------------------------------------------------------------------------------

    def write(
        self,
        writer: Writer | None,
        nodes: object,
        *,
        area: str | None = None,
        graph: str | None = None,
        tags: object = (),
        lease_token: int | None = None,
        based_on: object = None,
        write_id: str | None = None,
        source: str | None = None,
    ) -> list[BoardNode]:
        """Write a batch of nodes, all or nothing; return them as stored (steps 1-13).

        Args:
            writer: the agent writing (``None``: the system, whose ``graph`` its caller
                checked; nothing is checked then).
            nodes: the JSON-LD nodes.
            area: the area of the writer's task the nodes go to (a writer's write).
            graph: the graph the nodes go to (the system's write).
            tags: tags of every node (a critical tag writes through to L0).
            lease_token: the fencing token of the writer's lease on each node.
            based_on: the generation the change was made from, for every node or by IRI.
            write_id: ``None`` for a new write; a ``WriteOutcomeUnknownError``'s to retry it.
            source: who the events name as the writer.

        Raises:
            PermissionDeniedError: the writer's role may not create or update there.
            FencingTokenError, LeaseConflictError: a lease forbids the write.
            StaleWriteError: a node has moved past its base.
            WriteOutcomeUnknownError: the store may have applied the write and its answer was
                lost; retry with the error's ``write_id``.
            InvalidInputError: an argument is malformed.
        """
        if writer is not None:
            area, graph = self._writable_graph(writer, area)
        elif graph is None:
            raise InvalidInputError("the system's write needs a graph")
        retry = write_id is not None
        wid = new_write_id() if write_id is None else check_write_id(write_id)
        requests = self.nodes.prepare(nodes, graph, tags, write_id=wid)  # (it checks them)
        bases = {} if based_on is None else _bases(based_on, requests)
        wanted: dict[str, int | None] = {}
        for request in requests:
            wanted[request.iri] = bases.get(request.iri)
        job = _Write(
            wanted,
            requests,
            writer,
            area=area or "",
            lease_token=lease_token,
            source=source,
            write_id=wid,
            retry=retry,
        )
        written = self._committed(job, wanted)
        if self.writeback is not None:
            self.writeback.after_write(written)  # step 13 (critical tags)
        return written

    def _writable_graph(self, writer: Writer, area: object) -> tuple[str, str]:
        """Return ``area`` and its graph in the writer's task; refuse a mirrored area."""
        if type(area) is str:
            graph = self._graphs.get((writer.task, area))
            if graph is not None:
                return area, graph
        checked = _writable(writer, area)
        graph = area_graph(writer.task, checked)
        if len(self._graphs) >= _GRAPHS_KEPT:
            self._graphs.clear()
        self._graphs[(writer.task, checked)] = graph
        return checked, graph

    def _committed(self, job: _Write, bases: dict[str, int | None]) -> list[BoardNode]:
        """Queue ``job`` (its nodes' ``bases``), wait for its group's commit, and complete it
        on this thread (steps 2-12)."""
        if job.retry:  # decided on the store's records: nothing this process cached of them
            self.nodes.forget(bases)
        writer = job.writer
        # The agent (a handle's name), the IRIs (the requests') and the bases are validated
        # already: not again per write.
        change = job.change = self.coordinator.commits.checked_change(
            None if writer is None else writer.name, bases, job
        )
        try:
            if self.cache.is_inside():
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
            self.coordinator.commits.finish(change)  # step 11
        except _Landed as found:
            mine = [node for node in found.nodes if node.write_id == job.write_id]
            self.nodes.announce_landed(mine, job.source)
            return found.nodes
        if job.announce is not None:
            job.announce()  # step 12
        return job.written

    def _commit_jobs(self, jobs: Sequence[_Write]) -> None:
        """Commit a group of queued writes; a failing group is committed again write by write.

        Each transaction runs inside ``SharedCache.inside`` for the whole of it (not only
        around the store's calls): the thread does nothing else meanwhile, and the
        coordinator's write-backs enter it again anyway.
        """
        try:
            with self.cache.inside:
                self.coordinator.commits.commit_group([job.change for job in jobs], self)
            return
        except Exception as exc:
            if len(jobs) == 1:  # a lone write: no group to fall back from
                jobs[0].error = exc
                if _in_doubt(exc, jobs):
                    self._doubt(jobs, exc)
                return
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

    # -- the coordinator's source side of a group commit (``GroupSource``) -------------------

    def current(
        self, records: Mapping[str, NodeRecord], changes: Sequence[Change[_Write]]
    ) -> dict[str, tuple[Node | None, int]]:
        """Read the group's nodes as the store holds them, and decide each job's retry, rights
        and fences on its own (steps 3-6; a refusal is kept as the change's ``refusal``)."""
        nodes = self.nodes
        with nodes.writer:
            known = nodes.known(list(records))
            checked = []
            for change in changes:
                if change.owner.retry and _landed(change, known):  # step 4
                    continue
                if change.owner.writer is not None:  # (the system's write: nothing to check)
                    checked.append(change)
            # The leases on every node written without a token, read at once for the group
            # (if that read fails, each write reads its own below, and fails alone).
            unguarded = [c.owner for c in checked if c.owner.lease_token is None]
            try:
                leases = self._leases_on([r.iri for job in unguarded for r in job.requests])
            except Exception:
                leases = {}
            for change in checked:
                job = change.owner
                writer = job.writer
                assert writer is not None
                try:
                    for request in job.requests:
                        old = _existing(known[request.iri])
                        self._rights(writer, job.area, old)  # step 5
                        self._fences(
                            writer,
                            request.iri,
                            job.lease_token,
                            job.area,
                            old,
                            leases.get(request.iri),
                        )  # step 6
                except Exception as exc:  # this write's own refusal
                    change.refusal = exc
        # Each node's value and generation for the coordinator: the record's own value when
        # the record is at the node's generation (the same write's value: no second parse of
        # its JSON), and ``None`` for an absent or deleted node.
        states: dict[str, tuple[Node | None, int]] = {}
        for iri, state in known.items():
            record = records[iri]
            if not isinstance(state, BoardNode):
                states[iri] = (None, state.generation)
            elif record.value is not None and record.generation == state.generation:
                states[iri] = (record.value, state.generation)
            else:
                states[iri] = (state.node, state.generation)
        return states

    def apply(
        self, changes: Sequence[Change[_Write]], records: Mapping[str, NodeRecord]
    ) -> list[dict[str, tuple[Node | None, int]]]:
        """Write the accepted jobs' batches in one store write; each one's stored states
        (step 9)."""
        batches = [(c.owner.requests, c.owner.source, c.owner.write_id) for c in changes]
        stored = self.nodes.write_batches(batches)  # (it holds the store's writer itself)
        states = []
        for change, (written, announce) in zip(changes, stored, strict=True):
            job = change.owner
            job.written, job.announce = written, announce
            states.append(_states(job.requests, written))
        return states

    # -- rights and fences (steps 5 and 6) ---------------------------------------------------

    def _rights(self, writer: Writer, area: str, old: BoardNode | None) -> None:
        """Refuse a write the writer's role may not make: create where ``old`` is absent,
        update where it is, and delete in the area a moved node leaves."""
        if old is None:
            writer.authorize(area, Operation.CREATE)
            return
        if old.graph != writer.authorize(area, Operation.UPDATE):
            writer.authorize(writer.area_of(old), Operation.DELETE)

    def _leases_on(self, iris: list[str]) -> dict[str, list[Lease]]:
        """The live leases on ``iris`` (one read), for ``_fences``; none without a lease
        table."""
        if self.coordination is None or not iris:
            return {}
        return self.coordination.leases.holders_of(iris)

    def _fences(
        self,
        writer: Writer,
        iri: str,
        token: int | None,
        area: str,
        old: BoardNode | None = None,
        held: list[Lease] | None = None,
    ) -> None:
        """Refuse a write or delete of ``iri`` that a live Write or Exclusive lease forbids.

        ``area`` is where the node goes (or is deleted from), ``old`` the node as it is: a
        lease guards it only if its holder may update one of those areas of this task.
        ``held``: the live leases on ``iri`` when the caller read them already.
        """
        if token is not None:
            if self.fences is None:
                raise InvalidInputError("this blackboard has no lease table to check tokens")
            self.fences.check_fence(iri, writer.name, token)
            return
        if self.coordination is None:
            return
        rights, name = writer.lease_rights, writer.name
        areas = [area] if old is None else [area, *rights.areas_of(old)]
        guards = [
            lease
            for lease in (self.coordination.leases.holders(iri) if held is None else held)
            if lease.mode != "read" and (lease.holder == name or rights.guards(lease, areas))
        ]
        others = tuple((g.holder, g.mode.value) for g in guards if g.holder != name)
        if others:
            raise LeaseConflictError(
                f"{iri!r} is leased for writing by {[h for h, _ in others]}; {name!r} may"
                " not write it",
                resource=iri,
                holders=others,
            )
        if guards:
            raise InvalidInputError(
                f"{name!r} holds a write lease on {iri!r}: present its token (lease_token=)"
            )

    # -- deletes -----------------------------------------------------------------------------

    def delete(
        self,
        writer: Writer | None,
        iris: Sequence[str],
        *,
        lease_token: int | None = None,
        write_id: str | None = None,
        source: str | None = None,
    ) -> int:
        """Delete nodes, all or nothing, as one transition of each; return how many existed.

        Args:
            writer: the agent deleting (``None``: the system; nothing is checked then).
            iris: the nodes' IRIs, checked by the caller.
            lease_token: as for ``write``.
            write_id: as for ``write``: a retry whose earlier delete landed deletes nothing
                more and returns how many that delete removed.
            source: who the events name.

        Raises:
            PermissionDeniedError: a node is in an area where the role may not delete.
            FencingTokenError, LeaseConflictError: a lease forbids the delete.
            WriteOutcomeUnknownError: the store may have applied the delete and its answer was
                lost (or the directory failed after the store took it).
        """
        retry = write_id is not None
        wid = new_write_id() if write_id is None else check_write_id(write_id)
        if retry:
            self.nodes.forget(iris)
        steps = _Deletion(self, iris, writer, lease_token, source, wid, retry)
        agent = None if writer is None else writer.name
        try:
            self.coordinator.commits.commit(agent, dict.fromkeys(iris), steps.current, steps.apply)
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

    def delete_rights(
        self, writer: Writer, found: Mapping[str, BoardNode], lease_token: int | None
    ) -> None:
        """Refuse a delete of ``found`` (the nodes as they exist) that the writer's role or a
        lease forbids (steps 5 and 6 of a delete)."""
        for node in found.values():
            area = writer.area_of(node)
            writer.authorize(_writable(writer, area), Operation.DELETE)
            self._fences(writer, node.iri, lease_token, area)

    # -- a write whose outcome is unknown ------------------------------------------------------

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
        if not self.cache.is_inside():
            try:
                self.coordinator.directory.touch()
            except Exception:  # the write's own error is the one its caller must see
                logger.warning(
                    "moving the coherence token after a lost reply failed", exc_info=True
                )

    # -- write-back, leases, agents ----------------------------------------------------------

    def write_back(self, iri: str, value: Node, generation: int) -> None:
        """Write a node back to L0 through the board's write-back (the coordinator's call,
        inside its transaction)."""
        assert self.writeback is not None
        with self.cache.inside:
            node = self.nodes.get_many([iri]).get(iri)
            if node is not None and node.dirty:
                self.writeback.flush_nodes([node])

    def flush_exclusive(
        self, iris: Sequence[str], flush: Callable[[], list[BoardNode]]
    ) -> list[BoardNode]:
        """Run a flush of ``iris`` inside the directory's transaction (changing no record), so
        no process writes them between its read and its clean marks (``WriteBack``); inside
        one already (the coordinator's write-back), run it there."""
        if self.cache.is_inside():
            return flush()

        def step(records: dict[str, NodeRecord]) -> tuple[dict[str, NodeRecord], list[BoardNode]]:
            with self.cache.inside:
                return records, flush()

        return self.coordinator.directory.update_many(sorted(set(iris)), step)[0]

    def holds_write_lease(self, agent: str, iri: str) -> bool:
        """Return whether ``agent`` holds a Write lease on ``iri`` (the coordinator's call)."""
        coordination = self.coordination
        return coordination is not None and coordination.leases.holds_write_lease(iri, agent)

    def written_back(self, nodes: Sequence[BoardNode]) -> None:
        """Take the ``MODIFIED`` copies of flushed nodes to ``EXCLUSIVE`` or ``SHARED``."""
        if self.cache.is_inside():
            return  # a write-back the coordinator asked for: its row moves the copy itself
        for node in nodes:
            record = self.coordinator.directory.record(node.iri)
            for copy in record.copies.values():
                if copy.state is MesiState.MODIFIED:
                    self.coordinator.write_back(copy.agent, node.iri)

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


class _Deletion:
    """One delete's two steps in the directory's transaction (``commit``), and what they did.

    ``before``: the nodes an earlier delete of the same id removed, when a retry finds it
    landed (then nothing is deleted again, nor checked); ``gone``: the nodes this one deleted.
    """

    def __init__(
        self,
        path: WritePath,
        iris: Sequence[str],
        writer: Writer | None,
        lease_token: int | None,
        source: str | None,
        write_id: str,
        retry: bool,
    ) -> None:
        self.path, self.iris, self.writer, self.lease_token = path, iris, writer, lease_token
        self.source, self.write_id, self.retry = source, write_id, retry
        self.before: list[str] = []
        self.gone: list[BoardNode] = []
        self.events: list[Announce] = []

    def current(self, records: Mapping[str, NodeRecord]) -> dict[str, tuple[Node | None, int]]:
        """Read the nodes from the store; find a landed earlier delete, or check the rights
        and fences (steps 3-6)."""
        nodes = self.path.nodes
        with self.path.cache.inside, nodes.writer:
            known = nodes.known(list(records))
            if self.retry:
                self.before = deleted_by(self.write_id, known)
            found = {iri: k for iri, k in known.items() if isinstance(k, BoardNode)}
            if self.writer is not None and not self.before:
                self.path.delete_rights(self.writer, found, self.lease_token)
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
        nodes = self.path.nodes
        with self.path.cache.inside, nodes.writer:
            self.gone = nodes.delete(
                self.iris, source=self.source, events=self.events, write_id=self.write_id
            )
        return {n.iri: (None, n.generation) for n in self.gone}


def _writable(writer: Writer, area: object) -> str:
    """Return ``area`` if agents may write it: not one the coordination layer mirrors."""
    checked = check_area(area)
    if checked in MIRRORED_AREAS:
        raise PermissionDeniedError(
            f"the {checked!r} area is written by the coordination layer; use the handle's"
            " task, status and message operations",
            role=writer.role,
            graph=area_graph(writer.task, checked),
            operation="create",
        )
    return checked


def _bases(based_on: object, requests: Sequence[NodeWrite]) -> dict[str, int | None]:
    """Return the base generation of each node of a batch (``None``: unconditional)."""
    if isinstance(based_on, Mapping):
        pairs = list(based_on.items())
    else:
        pairs = [(request.iri, based_on) for request in requests]
    bases: dict[str, int | None] = {}
    batch = {request.iri for request in requests}
    for iri, generation in pairs:
        if iri not in batch:
            raise InvalidInputError(
                f"based_on names {preview(iri)}, which the batch does not write"
            )
        if isinstance(generation, bool) or not isinstance(generation, int) or generation < 0:
            raise InvalidInputError(
                f"based_on must be a generation (an int >= 0), got {preview(generation)}"
            )
        bases[check_iri(iri, "IRI of based_on")] = generation
    return bases


def _states(
    requests: Sequence[NodeWrite], written: Sequence[BoardNode]
) -> dict[str, tuple[Node | None, int]]:
    """Each written node's value (as the request parsed it) and generation, for the directory.

    ``written`` holds the requests' nodes as stored, in order (``NodeStore.write_batches``).
    """
    return {
        node.iri: (request.node, node.generation)
        for request, node in zip(requests, written, strict=True)
    }


def _existing(state: Known) -> BoardNode | None:
    """Return the node the store holds (``None``: absent or deleted: a tombstone)."""
    return state if isinstance(state, BoardNode) else None


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
