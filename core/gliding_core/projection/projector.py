"""L3: the projector: a frame's view of a task, from the view cache or the blackboard, in budget.

``Projector.project(task, frame, budget=...)`` returns the frame's nodes for the task as one
JSON-LD document within the budget (``budget``'s degradation steps), from the view cache when
a valid view is there, else by running the frame over the blackboard and caching the result.

Invariants: a projection is exactly within its budget (or ``empty``); the view it came from was
valid when served (the cache listens to the blackboard's bus from construction until
``close()``); a projection is only ever built from the task's own graphs (its ``tasks`` area
being its tree's root's, where the tree's ``Task`` nodes are mirrored: the root is looked up
once per task, ``sparql.TaskRoots``), and given ``areas`` (an agent's readable areas) only from
those: the query's dataset is those graphs, and the view is keyed by them, so it is never
served to a read allowed fewer.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence

from gliding_core.blackboard.board import Blackboard
from gliding_core.blackboard.sparql import TaskRoots
from gliding_core.blackboard.validation import check_iri
from gliding_core.blackboard.vocabulary import check_area
from gliding_core.bus import EventBus, Subscription
from gliding_core.errors import InvalidInputError
from gliding_core.jsonld import canonical_json, preview
from gliding_core.projection.budget import Projection, check_budget, fit, forget_counts
from gliding_core.projection.cache import View, ViewCache, view_key
from gliding_core.projection.compaction import forget_compactions, run_frame
from gliding_core.projection.frames import Frame, FrameSet
from gliding_core.tokens import TokenCounter


class Projector:
    """Projects frames of tasks on a blackboard, through a view cache.

    Args:
        board: the blackboard read.
        tokens: the memory's token counter (exact counts).
        frames: the frames known; the nine shipped ones when omitted.
        cache: the view cache; a new one when omitted.
        bus: where invalidations come from; the blackboard's bus when omitted (no automatic
            invalidation when both are ``None``: call ``cache.invalidate`` yourself).
    """

    def __init__(
        self,
        board: Blackboard,
        tokens: TokenCounter,
        *,
        frames: FrameSet | None = None,
        cache: ViewCache | None = None,
        bus: EventBus | None = None,
    ) -> None:
        self.board, self.tokens = board, tokens
        self.roots = TaskRoots(board)  # a frame's tasks area is its task tree's root's
        self.frames = frames or FrameSet()
        self.cache = cache or ViewCache()
        source = bus if bus is not None else board.bus
        self._subscription: Subscription | None = (
            self.cache.listen(source) if source is not None else None
        )
        # A directory other processes write too (``remote_writers``): their writes reach no bus
        # of this process, so the views are checked against its token before each read.
        self._remote = bool(getattr(board.coherence.directory, "remote_writers", False))
        self._token: Hashable = None

    def register(self, frame: Frame, *, replace: bool = False) -> None:
        """Add a frame of your own (see ``FrameSet.register``)."""
        self.frames.register(frame, replace=replace)
        if replace:
            self.cache.clear()

    def project(
        self,
        task: str,
        frame: str,
        *,
        budget: int | None = None,
        params: Mapping[str, object] | None = None,
        exclude: frozenset[str] = frozenset(),
        areas: Sequence[str] | None = None,
    ) -> Projection:
        """Return ``frame``'s view of ``task`` within ``budget`` tokens.

        Args:
            task: the task's IRI.
            frame: a frame's name.
            budget: the most tokens of the text; the frame's ``max_tokens`` when omitted.
            params: the frame's parameters (``{"plan": "urn:..."}``); unbound when omitted.
            exclude: IRIs of nodes to leave out (what the model already sees).
            areas: the areas that may be read (an agent's readable areas): the frame reads
                only those of its own areas; all of its areas when omitted. A frame none of
                whose areas may be read is ``empty`` and runs no query.

        Raises:
            FrameNotFoundError: no such frame.
            InvalidInputError: a bad task IRI, budget, parameter or area.
        """
        check_iri(task, "task IRI")
        chosen = self.frames.get(frame)
        limit = chosen.max_tokens if budget is None else check_budget(budget)
        given = dict(params or {})
        chosen.bindings(task, given)  # validates before the cache is consulted
        exclude = _check_exclude(exclude)
        scope = chosen.areas if areas is None else _narrow(chosen.areas, areas)
        if not scope:
            return Projection(task, chosen.name, "", 0, (), "empty", 0, limit)
        key = view_key(task, chosen.name, given, scope)
        if self._remote:
            self._catch_up()
        view = self.cache.get(key)
        cached = view is not None
        if view is None:
            view = self._materialise(chosen, task, given, scope)
        nodes = view.nodes
        if exclude:
            nodes = tuple(n for n in nodes if n.get("@id") not in exclude)
        fitted = view.fitted.get(limit) if nodes is view.nodes else None
        if fitted is None:
            text, tokens, shown, step = fit(nodes, limit, self.tokens)
            iris = tuple(n["@id"] for n in shown if "@id" in n)
            fitted = Projection(task, chosen.name, text, tokens, iris, step, len(nodes), limit)
            if view.valid and nodes is view.nodes:
                view.fitted[limit] = fitted
        return fitted if not cached else _as_cached(fitted)

    def _catch_up(self) -> None:
        """Drop every view when another process changed the directory since the last read.

        The directory's token moves with every change of any process; a run of tokens this
        process's own coordinator committed (``OwnChanges``) was announced on its bus and
        invalidated exactly the views it touched. Any other move may be a write elsewhere that a
        cached view does not show (a new node a frame now matches included), and the change
        does not say which graphs it touched, so no view is trusted.
        """
        coherence = self.board.coherence
        now, seen = coherence.directory.token(), self._token
        if now == seen:
            return
        own = coherence.own
        mine = (
            isinstance(now, int)
            and isinstance(seen, int)
            and now == own.top
            and seen + 1 >= own.since
        )
        if not mine:
            self.cache.clear()
        self._token = now

    def _materialise(
        self, frame: Frame, task: str, params: Mapping[str, object], scope: tuple[str, ...]
    ) -> View:
        since = self.cache.sequence
        result = run_frame(self.board, frame, task, params, areas=scope, roots=self.roots)
        size = len(canonical_json({"@graph": list(result.nodes)}).encode("utf-8"))
        graphs = self.roots.graphs(task, scope)
        key = view_key(task, frame.name, params, scope)
        return self.cache.put(key, result.nodes, result.iris, graphs, since=since, size=size)

    def close(self) -> None:
        """Stop listening to the bus; closing twice is harmless."""
        if self._subscription is not None:
            self._subscription.cancel()
            self._subscription = None


def forget() -> None:
    """Forget the remembered compactions and token counts (as a new process starts)."""
    forget_compactions()
    forget_counts()


def _check_exclude(exclude: object) -> frozenset[str]:
    if isinstance(exclude, (str, bytes)) or not isinstance(exclude, (set, frozenset, list, tuple)):
        raise InvalidInputError(f"exclude must be a set of IRIs, got {preview(exclude)}")
    if not all(isinstance(iri, str) for iri in exclude):
        raise InvalidInputError(f"exclude must hold IRI strings, got {preview(exclude)}")
    return frozenset(exclude)


def _narrow(frame_areas: tuple[str, ...], areas: object) -> tuple[str, ...]:
    """Return the frame's areas that ``areas`` (a list of area names) allows, in frame order."""
    if isinstance(areas, (str, bytes)) or not isinstance(areas, (list, tuple, set, frozenset)):
        raise InvalidInputError(f"areas must be a list of area names, got {preview(areas)}")
    allowed = {check_area(a) for a in areas}
    return tuple(a for a in frame_areas if a in allowed)


def _as_cached(projection: Projection) -> Projection:
    if projection.cached:
        return projection
    return Projection(
        projection.task,
        projection.frame,
        projection.text,
        projection.tokens,
        projection.iris,
        projection.step,
        projection.total,
        projection.budget,
        cached=True,
    )
