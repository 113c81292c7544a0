"""L3: a frame's projection of a task as artifacts, one per node, with its IRI and generation.

``FrameArtifacts`` binds a frame of a task once (its parameters, a budget, optionally the agent
who reads); ``read(query, k=...)`` projects the frame (from the view cache while its view is
valid, else from the blackboard) and returns one ``FrameArtifact`` per top-level node of the
projection: the node's compact JSON-LD as the projection shows it, its IRI, its generation and
named graph on the blackboard, its types, the frame and the budget step taken. Both adapters'
frame retrievers translate these, and nothing else.

The query: a frame selects nodes by their place in the graph, not by text, so a query never
adds or removes an artifact; it orders them. Each artifact's text values (and types) are
scored against the query with the memory's lexical scoring: SQLite FTS5 with L0's tokenizer
(Porter stemming), BM25, L0's stop words. Higher scores come first; ties, and artifacts that
match no word of the query, keep the frame's order. No query, or one of blanks, keeps the
frame's order. ``k`` then keeps the first ``k``.

The agent: a reader bound to an agent handle reads that agent's task only, and the frame over
only the areas of the frame the agent's role may read (``AgentHandle.readable_areas``), as the
scheduler's agent read does: ``Projector.project(..., areas=...)`` runs the frame's query over
exactly those graphs, so neither the frame's nodes nor the objects they embed come from an
area the role may not read; its views are cached (keyed by the areas) and invalidated as any,
and no frame is registered on the agent's behalf.

Invariants:
- Every artifact is a whole node of one projection within the budget, of the bound task only.
- An artifact's generation was read before the content it shows was served (the projection
  is taken again after the read, and taken again while it changes): the content is never
  older than the generation it claims, so a write based on that generation never overwrites
  a change the reader did not see; it is refused as stale. (As the view cache's own
  invariant, this counts a write from its announcement on the bus, which follows its commit
  on the writer's thread.)
- A node the projection shows without an IRI of its own (an anonymous object) or that is no
  longer on the blackboard is not an artifact.
"""

from __future__ import annotations

import atexit
import json
import re
import sqlite3
import threading
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from gliding_core.blackboard.handle import AgentHandle
from gliding_core.blackboard.records import BoardNode
from gliding_core.blackboard.validation import check_iri
from gliding_core.blackboard.vocabulary import CONTEXT_URL, graph_area
from gliding_core.boundary import translated
from gliding_core.config import DEFAULT_STOP_WORDS
from gliding_core.errors import ClosedError, InvalidInputError, PermissionDeniedError
from gliding_core.jsonld import preview
from gliding_core.projection.budget import Projection, check_budget
from gliding_core.projection.projector import Projector
from gliding_core.projection.scheduler import HasScheduler, Scheduler
from gliding_core.store.sqlite import TEXT_TOKENIZER

_WORD = re.compile(r"\w+", re.UNICODE)
_TRIES = 3  # projections re-read while writes land between the content and its generations
_ranking: sqlite3.Connection | None = None
_ranking_lock = threading.Lock()  # one ranking at a time on the shared connection


@dataclass(frozen=True, slots=True)
class FrameArtifact:
    """One node of a frame's projection, with where it lives on the blackboard.

    Attributes:
        iri: the node's ``@id`` (the document / node id of the adapters).
        text: the node as the projection shows it, in compact JSON (what a model reads):
            compact JSON-LD, nested objects embedded down to the budget step's depth.
        generation: the node's generation on the blackboard (what a write is based on).
        types: its ``@type`` values, compact (``("PlanStep",)``).
        graph: the named graph holding it.
        area: the area of the task that graph is (``"plan"``, ``"execution"``...).
        task: the task's IRI.
        frame: the frame's name.
        step: the budget step the projection took (see ``gliding_core.projection.STEPS``).
        score: its lexical relevance to the query (0.0 for no match), ``None`` without one.
    """

    iri: str
    text: str
    generation: int
    types: tuple[str, ...]
    graph: str
    area: str | None
    task: str
    frame: str
    step: str
    score: float | None = None

    @property
    def node(self) -> dict[str, Any]:
        """The node as the projection shows it (a fresh dict on every call)."""
        value: dict[str, Any] = json.loads(self.text)
        return value

    @property
    def document(self) -> dict[str, Any]:
        """The node as a standalone JSON-LD document (with the projection's ``@context``)."""
        return {"@context": CONTEXT_URL, **self.node}

    def metadata(self) -> dict[str, Any]:
        """Return what the adapters put in a document's / node's metadata (JSON-ready)."""
        found: dict[str, Any] = {
            "iri": self.iri,
            "generation": self.generation,
            "types": list(self.types),
            "graph": self.graph,
            "area": self.area,
            "task": self.task,
            "frame": self.frame,
            "step": self.step,
        }
        if self.score is not None:
            found["score"] = self.score
        return found


class FrameArtifacts:
    """One frame of one task, bound once, read as artifacts (see the module docstring).

    Args:
        source: what projects: a ``Scheduler`` (its projector and its store's stop words), a
            ``Memory`` (its one scheduler, ``memory.scheduler``: anything with a
            ``scheduler``) or a ``Projector``.
        frame: the frame's name (``"da_input"``; a registered frame of your own works too).
        task: the task's IRI; the agent's task when omitted with an ``agent``.
        params: the frame's parameters (``{"plan": "urn:..."}``).
        budget: the most tokens of the projection; the frame's ``max_tokens`` when omitted.
        agent: the agent reading: only its task, only the areas its role may read.

    Raises:
        InvalidInputError: a bad source, task IRI, parameter, budget or agent handle.
        FrameNotFoundError: no such frame.
        PermissionDeniedError: ``task`` is not the agent's task.
        ClosedError: the blackboard is closed (reading a closed one raises it too).
    """

    def __init__(
        self,
        source: HasScheduler | Scheduler | Projector,
        frame: str,
        *,
        task: str | None = None,
        params: Mapping[str, object] | None = None,
        budget: int | None = None,
        agent: AgentHandle | None = None,
    ) -> None:
        self.projector, self.stop_words = _resolve(source)
        if self.projector.board.closed:
            raise ClosedError(f"the blackboard of {preview(source)} is closed")
        self.agent = _check_agent(agent, self.projector)
        self.task = _check_task(task, self.agent)
        self.frame = self.projector.frames.get(frame).name
        if params is not None and not isinstance(params, Mapping):
            raise InvalidInputError(f"frame parameters must be a mapping, got {preview(params)}")
        self.params = dict(params or {})
        self.budget = None if budget is None else check_budget(budget)
        self.projector.frames.get(frame).bindings(self.task, self.params)
        self._last: tuple[str, tuple[_Shown, ...]] = ("", ())

    def read(self, query: str | None = None, *, k: int | None = None) -> list[FrameArtifact]:
        """Return the frame's artifacts, the most relevant to ``query`` first, at most ``k``.

        Raises:
            InvalidInputError: ``query`` is not a string, or ``k`` is not an int >= 1.
        """
        if query is not None and not isinstance(query, str):
            raise InvalidInputError(f"query must be a string or None, got {preview(query)}")
        if k is not None and (isinstance(k, bool) or not isinstance(k, int) or k < 1):
            raise InvalidInputError(f"k must be an int >= 1 or None, got {preview(k)}")
        projection, nodes = self._consistent()
        shown = self._shown(projection)
        found = self._artifacts(projection, shown, nodes)
        if query is not None and query.strip():
            found = _ranked(
                found, [s.words for s in shown if s.iri in nodes], query, self.stop_words
            )
        return found if k is None else found[:k]

    def _consistent(self) -> tuple[Projection, dict[str, BoardNode]]:
        """Return a projection and its nodes' blackboard records, none newer than it.

        When the view cache saw no invalidation from before the projection to after the
        records were read, the projection still stands; otherwise it is taken again (the
        records were then read before it was served) until it shows the same text.
        """
        board, cache = self.projector.board, self.projector.cache
        since = cache.sequence
        projection = self._project()
        for _ in range(_TRIES):
            nodes = board.read_many(projection.iris)
            if cache.sequence == since:
                return projection, nodes
            since = cache.sequence
            again = self._project()
            if again.text == projection.text:
                return again, nodes
            projection = again  # a write landed: its generation may be newer than the text
        missing = [iri for iri in projection.iris if iri not in nodes]
        return projection, {**nodes, **board.read_many(missing)}

    def _project(self) -> Projection:
        """Project the frame: as the agent (over the areas its role may read), if there is one."""
        areas = None if self.agent is None else self.agent.readable_areas()
        return self.projector.project(
            self.task, self.frame, budget=self.budget, params=self.params, areas=areas
        )

    def _shown(self, projection: Projection) -> tuple[_Shown, ...]:
        """Return the projection's top-level nodes, each split out once per projected text."""
        text, shown = self._last
        if text != projection.text:  # the same text object while its view stays valid
            shown = tuple(_split(node) for node in projection.document.get("@graph", []))
            self._last = (projection.text, shown)
        return shown

    def _artifacts(
        self, projection: Projection, shown: Sequence[_Shown], nodes: Mapping[str, BoardNode]
    ) -> list[FrameArtifact]:
        found = []
        for each in shown:
            record = nodes.get(each.iri)
            if record is None:
                continue
            place = graph_area(record.graph)
            found.append(
                FrameArtifact(
                    iri=record.iri,
                    text=each.text,
                    generation=record.generation,
                    types=each.types,
                    graph=record.graph,
                    area=None if place is None else place[1],
                    task=self.task,
                    frame=self.frame,
                    step=projection.step,
                )
            )
        return found

    def __repr__(self) -> str:
        who = "" if self.agent is None else f", agent={self.agent.name!r}"
        return f"FrameArtifacts({self.frame!r}, task={self.task!r}{who})"


def frame_artifacts(
    source: HasScheduler | Scheduler | Projector,
    frame: str,
    *,
    task: str | None = None,
    params: Mapping[str, object] | None = None,
    budget: int | None = None,
    agent: AgentHandle | None = None,
    query: str | None = None,
    k: int | None = None,
) -> list[FrameArtifact]:
    """Return one frame's artifacts of a task (``FrameArtifacts(...).read(query, k=k)``)."""
    reader = FrameArtifacts(source, frame, task=task, params=params, budget=budget, agent=agent)
    return reader.read(query, k=k)


def lexical_scores(texts: Sequence[str], query: str, stop_words: Iterable[str] = ()) -> list[float]:
    """Return each text's BM25 score for ``query`` (0.0 when it matches no word).

    As L0's text search: the query's words (without ``stop_words``, unless nothing else is
    left) joined by OR, the texts tokenized and stemmed as L0's index does, in a private
    in-memory SQLite table, rolled back afterwards.
    """
    stop = frozenset(stop_words)
    words = list(dict.fromkeys(w.lower() for w in _WORD.findall(query)))
    content = [w for w in words if w not in stop] or words
    scores = [0.0] * len(texts)
    if not content or not texts:
        return scores
    expression = " OR ".join('"' + w.replace('"', '""') + '"' for w in content)
    with translated("sqlite", "ranking frame artifacts"), _ranking_lock:
        db = _ranking_db()
        db.execute("BEGIN")
        try:
            db.executemany("INSERT INTO texts (rowid, text) VALUES (?, ?)", enumerate(texts))
            rows = db.execute(
                "SELECT rowid, -bm25(texts) FROM texts WHERE texts MATCH ?", [expression]
            ).fetchall()
        finally:
            db.execute("ROLLBACK")  # the table is empty again for the next ranking
    for rowid, score in rows:
        scores[rowid] = float(score)
    return scores


@dataclass(frozen=True, slots=True)
class _Shown:
    """A top-level node of a projection: its IRI, compact JSON, types and the words it says."""

    iri: str
    text: str
    types: tuple[str, ...]
    words: str


def _split(node: Mapping[str, Any]) -> _Shown:
    types = node.get("@type", ())
    return _Shown(
        iri=str(node.get("@id", "")),
        text=json.dumps(node, ensure_ascii=False, separators=(",", ":")),
        types=(types,) if isinstance(types, str) else tuple(types),
        words=" ".join(_words(node)),
    )


def _ranking_db() -> sqlite3.Connection:
    """Return the in-memory ranking database (an FTS5 table made once, kept empty).

    Call it holding ``_ranking_lock``. A fresh database per ranking cost seven times as much
    (creating the FTS5 table); one shared connection is closed when the interpreter exits.
    """
    global _ranking
    if _ranking is None:
        # isolation_level=None: the ranking's transaction is explicit, and always rolled back.
        db = sqlite3.connect(":memory:", isolation_level=None, check_same_thread=False)
        db.execute(f"CREATE VIRTUAL TABLE texts USING fts5 (text, tokenize = '{TEXT_TOKENIZER}')")
        atexit.register(db.close)
        _ranking = db
    return _ranking


def _ranked(
    found: list[FrameArtifact], words: Sequence[str], query: str, stop_words: Iterable[str]
) -> list[FrameArtifact]:
    scores = lexical_scores(words, query, stop_words)
    order = sorted(range(len(found)), key=lambda i: (-scores[i], i))  # ties: frame order
    return [replace(found[i], score=scores[i]) for i in order]


def _words(value: Any) -> Iterable[str]:
    """Yield the text a node says: its values and types, not its keys nor its IRIs."""
    if isinstance(value, dict):
        for key, inner in value.items():
            if key not in ("@id", "@context"):
                yield from _words(inner)
    elif isinstance(value, list):
        for item in value:
            yield from _words(item)
    elif isinstance(value, str):
        yield value
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        yield str(value)


def _resolve(source: object) -> tuple[Projector, frozenset[str]]:
    """Return the projector of ``source`` and the stop words its queries leave out."""
    if isinstance(source, Projector):
        return source, DEFAULT_STOP_WORDS
    scheduler = source if isinstance(source, Scheduler) else getattr(source, "scheduler", None)
    if isinstance(scheduler, Scheduler):
        store = scheduler.store
        return scheduler.projector, DEFAULT_STOP_WORDS if store is None else store.stop_words
    raise InvalidInputError(
        f"source must be a Memory, a Scheduler or a Projector, got {preview(source)}"
    )


def _check_agent(agent: object, projector: Projector) -> AgentHandle | None:
    if agent is None:
        return None
    if not isinstance(agent, AgentHandle):
        raise InvalidInputError(f"agent must be an AgentHandle or None, got {preview(agent)}")
    if agent.board is not projector.board:
        raise InvalidInputError(f"{agent!r} is a handle on another blackboard than the frame's")
    return agent


def _check_task(task: object, agent: AgentHandle | None) -> str:
    if task is None:
        if agent is None:
            raise InvalidInputError("a frame's artifacts need a task IRI (task=) or an agent")
        return agent.task
    checked = check_iri(task, "task IRI")
    if agent is not None and checked != agent.task:
        raise PermissionDeniedError(
            f"{agent!r} works on {agent.task!r}; it may not read task {checked!r}",
            role=agent.role,
            graph=checked,
            operation="read",
        )
    return checked
