"""View: a role's frame of its task as a context source of the model view (``FrameSource``).

``FrameSource`` is the scheduler's read path (``projection.scheduler``) as a context source;
given a ``SeenNodes`` ledger (``gliding_core.coherence.seen``) it shows each top-level node by
what that agent's model was shown before: whole the first time, then the change, or a
reference while it is unchanged. With ``seen="request"`` the ledger of each call is the copies
of shared nodes that call's messages hold (``SourceRequest.copies``): a node the request holds at
its current value is a reference, one it holds at an older value the change, any other whole,
however often an earlier call showed it (what an earlier memory message showed is gone with it).

Invariants:
- Read as an agent (``FrameSource.for_agent``), it shows what ``Scheduler.read`` shows that
  agent, and refuses at once a handle that may not read the task as the role.
- With ``seen="request"`` a node is a reference only when the request holds a copy of it at
  the generation read just before the view, holding every property the view shows of it; the
  text says nothing of a node the view does not show, whatever the request holds.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from gliding_core.blackboard.handle import AgentHandle
from gliding_core.blackboard.validation import check_iri
from gliding_core.coherence.seen import SeenNodes, SeenView, SharedNode, within_view
from gliding_core.errors import InvalidInputError
from gliding_core.jsonld import preview
from gliding_core.projection.budget import fit
from gliding_core.projection.scheduler import Fallback, Scheduler, check_fallback, quoted_iris
from gliding_core.view.sources import SourcePart, SourceRequest

Seen = SeenNodes | Literal["request"] | None  # a frame source's ledger (see FrameSource)
REQUEST = "request"


class FrameSource:
    """A context source: an agent's role's view of its task (the scheduler's read path).

    Args:
        scheduler: the scheduler reading.
        task: the agent's task.
        role: the agent's role.
        params: the frame's parameters, if any.
        name: the source's name in the view.
        agent: read as this agent (see ``Scheduler.read``).
        seen: the ledger of what this agent's model was shown, kept from call to call; or
            ``"request"``: each call's ledger is the copies its request holds (for a model
            whose memory message is rebuilt every call, see the module docstring); or
            ``None``: the view whole every call.
        fallback: what is shown when the frame shows nothing (see ``Scheduler.read``).
    """

    def __init__(
        self,
        scheduler: Scheduler,
        task: str,
        role: str,
        *,
        params: Mapping[str, object] | None = None,
        name: str = "frame",
        agent: AgentHandle | None = None,
        seen: Seen = None,
        fallback: Fallback = "task",
    ) -> None:
        if seen is not None and seen != REQUEST and not isinstance(seen, SeenNodes):
            raise InvalidInputError(
                f"seen must be a SeenNodes ledger, 'request' or None, got {preview(seen)}"
            )
        self.fallback = check_fallback(fallback)
        self.seen: Seen = seen
        self.scheduler = scheduler
        self.task = check_iri(task, "task IRI")
        self.role = role
        scheduler.frame_for(role)
        if agent is not None:
            scheduler.readable_areas(agent, self.task, role)  # refuses now, not at the first fill
        self.agent = agent
        self.params = dict(params or {})
        self.name = name

    @classmethod
    def for_agent(
        cls,
        scheduler: Scheduler,
        agent: AgentHandle,
        *,
        params: Mapping[str, object] | None = None,
        name: str = "frame",
        seen: Seen = None,
        fallback: Fallback = "task",
    ) -> FrameSource:
        """Return the source of ``agent``'s role's view of its task, read as the agent."""
        if not isinstance(agent, AgentHandle):
            raise InvalidInputError(f"expected an AgentHandle, got {preview(agent)}")
        return cls(
            scheduler,
            agent.task,
            agent.role,
            params=params,
            name=name,
            agent=agent,
            seen=seen,
            fallback=fallback,
        )

    def fresh(self) -> FrameSource:
        """Return this source for another agent: the same view, a new empty ledger (if any)."""
        if not isinstance(self.seen, SeenNodes):  # none, or each request's own
            return self
        return FrameSource(
            self.scheduler,
            self.task,
            self.role,
            params=self.params,
            name=self.name,
            agent=self.agent,
            seen=SeenNodes(unchanged=self.seen.unchanged),
            fallback=self.fallback,
        )

    def fill(self, request: SourceRequest) -> SourcePart:
        """Return the role's view within ``request.budget``, leaving out what is shown."""
        if not isinstance(request, SourceRequest):
            raise InvalidInputError(f"expected a SourceRequest, got {preview(request)}")
        if self.seen == REQUEST:
            return self._fill_copies(request)
        if isinstance(self.seen, SeenNodes):
            return self._fill_seen(self.seen, request)
        return self._fill_whole(request)

    def _fill_whole(self, request: SourceRequest) -> SourcePart:
        """The view whole, within the budget (the scheduler's read, its views cached)."""
        read = self.scheduler.read(
            self.task,
            self.role,
            budget=request.budget,
            query=request.query,
            params=self.params,
            shown=request.shown,
            agent=self.agent,
            fallback=self.fallback,
        )
        if not read.text:
            return SourcePart.empty(self.name)
        return SourcePart(self.name, read.text, read.tokens, read.iris)

    def _fill_seen(self, seen: SeenNodes, request: SourceRequest) -> SourcePart:
        """The view's top-level nodes by what the ledger says this model was shown.

        The generations of nodes shown before are read before the view, so a write landing
        in between makes a label older than its value, never newer (a departure is then
        said once too often, never missed); values decide the rest.
        """
        scheduler, agent = self.scheduler, self.agent
        known = scheduler.board_nodes(seen.iris(), agent=agent)
        nodes = self._nodes(request)
        here = {n["@id"] for n in nodes}
        left = [i for i in seen.iris() if i not in here and i not in request.shown]
        fresh = scheduler.board_nodes([i for i in here if i not in known], agent=agent)
        found = {**fresh, **known}
        shared = [
            SharedNode(n["@id"], found[n["@id"]].generation if n["@id"] in found else None, n)
            for n in nodes
        ]
        gone = {i: found[i].generation if i in found else None for i in left}
        tokens = scheduler.projector.tokens
        view = seen.render(shared, request.budget, tokens, fit=fit, gone=gone)
        return self._part(view)

    def _fill_copies(self, request: SourceRequest) -> SourcePart:
        """The view's top-level nodes by the copies of them the request holds.

        The nodes' generations are read before the view (as in ``_fill_seen``): a write
        landing in between makes a label older than its value, so a node is shown whole or
        as a change, never as a reference to a copy older than what the view shows. Each
        copy is cut to what the view shows of its node (``within_view``); nodes the request
        holds and the view does not show are not mentioned. With no copy of a node in the
        view, the view is the whole one (read through the view cache).
        """
        scheduler = self.scheduler
        copies = {c.iri: c for c in request.copies if c.iri not in request.shown}
        if not copies:
            return self._fill_whole(request)
        known = scheduler.board_nodes(copies, agent=self.agent)
        nodes = self._nodes(request)
        if not any(node["@id"] in copies for node in nodes):
            return self._fill_whole(request)
        held = []
        for node in nodes:
            copy, now = copies.get(node["@id"]), known.get(node["@id"])
            if copy is not None:
                held.append(within_view(copy, node, now=None if now is None else now.node))
        shared = [
            SharedNode(n["@id"], known[n["@id"]].generation if n["@id"] in known else None, n)
            for n in nodes
        ]
        ledger = SeenNodes.of(held)
        view = ledger.render(shared, request.budget, scheduler.projector.tokens, fit=fit)
        return self._part(view)

    def _nodes(self, request: SourceRequest) -> list[dict[str, Any]]:
        """The view's top-level nodes (those with an ``@id``), unfitted."""
        _, _, nodes = self.scheduler.nodes(
            self.task,
            self.role,
            query=request.query,
            params=self.params,
            shown=request.shown,
            agent=self.agent,
            fallback=self.fallback,
        )
        return [n for n in nodes if isinstance(n.get("@id"), str)]

    def _part(self, view: SeenView) -> SourcePart:
        if not view.text:
            return SourcePart.empty(self.name)
        quoted = tuple(dict.fromkeys((*view.iris, *quoted_iris(view.whole))))
        return SourcePart(self.name, view.text, view.tokens, quoted)
