"""L1: per-agent, per-task session memory: a summary chain under a token budget.

Invariants:
- Every turn's full content is archived to L0 before its summary enters the chain; an evicted
  turn's IRI goes to the weak references and can be paged back in. Nothing is lost.
- After every operation the summaries fit the budget, unless only pinned turns remain.
- The first turn (the task statement) is pinned; supplements are safe from phase 1.
- Phase 2 evicts the lowest score: score = beta * semantic + (1 - beta) * (w_r * recency +
  w_c * cost). More relevant, more recent and smaller turns score higher and stay longer.
- Token counts are exact (the memory's token counter).
- Input: turn content, goals and queries are text that encodes as UTF-8; roles and agent
  names are labels; scores and times are finite real numbers, kept as floats.
Thread-safe: one lock per session.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from gliding_core.attention.relevance import RelevanceTracker, similarity
from gliding_core.attention.supplementary import SupplementaryInput, SupplementaryQueue
from gliding_core.bus import EventBus, EventType
from gliding_core.checks import check_real
from gliding_core.config import EvictionPolicy, SessionConfig
from gliding_core.errors import EntryNotFoundError, InvalidInputError
from gliding_core.hyperspace.embedders import Embedder
from gliding_core.hyperspace.vectors import Vector, as_vector
from gliding_core.jsonld import check_label, check_text, node_text, preview, validate_iri
from gliding_core.store.protocol import EntryStore
from gliding_core.summarize import Summarizer
from gliding_core.tokens import TokenCounter

SESSION_PREFIX = "urn:gliding:session:"
MAIN_HEADER = "[Context from {agent} ({role})]"
LOW_HEADER = "[Historical reference, low relevance]"


@dataclass(slots=True)
class Turn:
    """One turn of the summary chain; its full content lives in L0 at ``l0_archive_iri``.

    ``tokens`` is the exact count of the turn as the context renders it (``[role] summary``).
    """

    role: str
    summary: str
    tokens: int
    l0_archive_iri: str
    embedding: Vector | None
    relevance_score: float
    is_supplement: bool
    created_at: float
    last_access: float
    pinned: bool = False
    old_topic: bool = False


@dataclass(frozen=True, slots=True)
class Context:
    """What to send to the model: the rendered chain as messages, with exact token counts."""

    messages: list[dict[str, str]]
    tokens: int
    main: list[Turn] = field(default_factory=list)
    low_relevance: list[Turn] = field(default_factory=list)

    @property
    def text(self) -> str:
        """The rendered context as one string."""
        return "\n\n".join(m["content"] for m in self.messages)


@dataclass(slots=True)
class ConversationLedger:
    """What every conversation on one session shares, so none repeats another's work.

    Attributes:
        lock: held while the ledger is read and changed together with the session.
        recorded: message id -> the IRI of the L0 entry that archived it.
        shown: the supplementary inputs already shown to the model as messages.
    """

    lock: threading.RLock = field(default_factory=threading.RLock)
    recorded: dict[str, str] = field(default_factory=dict)
    shown: set[str] = field(default_factory=set)


@dataclass(frozen=True, slots=True)
class SessionServices:
    """What a session uses and does not own; the memory builds one and shares it."""

    store: EntryStore
    tokens: TokenCounter
    summarizer: Summarizer
    bus: EventBus
    embedder: Embedder | None = None
    clock: Callable[[], float] = time.time


class Session:
    """The L1 memory of one agent on one task.

    Args:
        services: the store, token counter, summarizer, bus and embedder to use.
        task_iri: the task this session works on.
        agent: the agent's name.
        role: the agent's role; picks the eviction policy preset unless ``policy`` is given.
        config: budget and rendering settings.
        policy: the eviction weights; ``EvictionPolicy.for_role(role)`` when omitted.
        alpha: the relevance tracker's weight of the task goal.
    """

    def __init__(
        self,
        services: SessionServices,
        task_iri: str,
        *,
        agent: str = "agent",
        role: str = "SA",
        config: SessionConfig | None = None,
        policy: EvictionPolicy | None = None,
        alpha: float = 0.6,
    ) -> None:
        self.task_iri = validate_iri(task_iri, what="task IRI")
        self.agent = _check_name(agent, "agent")
        self.role = _check_name(role, "role")
        self.services = services
        self.config = config or SessionConfig()
        self.policy = policy or EvictionPolicy.for_role(role)
        self.id = uuid.uuid4().hex[:16]
        self.iri = f"{SESSION_PREFIX}{self.id}"
        self.tracker = RelevanceTracker(alpha)
        self.weak_refs: list[str] = []
        # Every input the session took, by IRI, with its turn's IRI, in the order taken.
        self.taken_inputs: dict[str, tuple[SupplementaryInput, str]] = {}
        # The model view's record of this session (``gliding_core.view.conversation``): it
        # lives exactly as long as the session, whose archive its message ids point into.
        self.ledger = ConversationLedger()
        self._turns: list[Turn] = []
        self._count = 0
        self._lock = threading.RLock()

    # -- reading -------------------------------------------------------------------------------

    @property
    def turns(self) -> list[Turn]:
        """A copy of the chain, oldest first."""
        with self._lock:
            return list(self._turns)

    def input_turns(self) -> set[str]:
        """Return the IRIs of the turns that archive supplementary inputs (taken or in the chain).

        A view leaves them out of the L1 context: the delivered message is where an input is seen.
        """
        with self._lock:
            taken = {turn for _, turn in self.taken_inputs.values()}
            return taken | {t.l0_archive_iri for t in self._turns if t.is_supplement}

    @property
    def budget(self) -> int:
        """The token budget of the chain."""
        return self.config.budget

    @property
    def capacity(self) -> int:
        """The tokens the chain's turns may use: the budget less the context's header."""
        header = MAIN_HEADER.format(agent=self.agent, role=self.role)
        return max(1, self.budget - self.services.tokens.count(header) - 1)

    @property
    def total_tokens(self) -> int:
        """The exact token count of the chain's turns as the context renders them."""
        with self._lock:
            return sum(t.tokens for t in self._turns)

    # -- writing -------------------------------------------------------------------------------

    def add_turn(
        self,
        role: str,
        content: str,
        *,
        supplement: bool = False,
        relevance: float | None = None,
        metadata: dict[str, Any] | None = None,
        at: float | None = None,
        tags: Sequence[str] = (),
    ) -> Turn:
        """Archive ``content`` to L0, add its summary to the chain, and evict if over budget.

        The first turn is the task statement: it is pinned, and it sets the task goal of the
        relevance tracker unless ``set_task_goal`` was called.

        Args:
            role: who spoke (``user``, ``assistant``, ``tool`` ...).
            content: the full text of the turn.
            supplement: the turn is supplementary user input, safe from phase 1 eviction.
            relevance: a relevance score to use instead of the tracker's.
            metadata: extra entry metadata for the L0 archive.
            at: when the turn happened (UNIX seconds); now by default. For replaying history.
            tags: extra L0 tags of the archive (an adapter's scope, ``gliding_core.store.scope``).
        """
        role = _check_name(role, "role")
        if not isinstance(content, str) or not content.strip():
            raise InvalidInputError(
                f"turn content must be a non-empty string, got {preview(content)}"
            )
        check_text(content, what="turn content")
        if relevance is not None:
            relevance = _check_score(relevance)
        if isinstance(tags, str) or not isinstance(tags, (list, tuple)):
            raise InvalidInputError(f"tags must be a list of strings, got {preview(tags)}")
        if at is not None:
            at = _check_time(at)
        summary = self.services.summarizer.summarize(content, self.config.max_summary_tokens)
        embedding = self._embed(summary)
        with self._lock:
            first = not self._turns and not self.weak_refs
            if first and self.tracker.task_embedding is None:
                self.tracker.set_task(embedding)
            score = self.tracker.score(embedding) if relevance is None else relevance
            now = self.services.clock() if at is None else float(at)
            iri = self._archive(role, content, summary, now, supplement, metadata, tags)
            turn = Turn(
                role=role,
                summary=summary,
                tokens=self._line_tokens(role, summary),
                l0_archive_iri=iri,
                embedding=embedding,
                relevance_score=score,
                is_supplement=supplement,
                created_at=now,
                last_access=now,
                pinned=first,
            )
            self._turns.append(turn)
            self.evict()
        return turn

    def start_cycle(self, inputs: SupplementaryQueue) -> list[SupplementaryInput]:
        """Take the task's pending supplementary inputs into the chain as protected turns.

        Call at the start of each agent cycle. Taking the inputs and archiving them as turns
        is one L0 transaction: after a crash either both happened or neither did, so an input
        is delivered exactly once. Returns the inputs, oldest first, for the caller to show
        the model.
        """
        with self._lock:
            before = list(self._turns), list(self.weak_refs), self._count
            archived: dict[str, tuple[SupplementaryInput, str]] = {}
            try:
                with self.services.store.transaction():
                    taken = inputs.take_pending(self.task_iri, consumer=self.iri)
                    for item in taken:
                        turn = self.add_turn(
                            "user",
                            item.content,
                            supplement=True,
                            relevance=item.relevance_score,
                            metadata={"supplement": item.iri},
                        )
                        archived[item.iri] = (item, turn.l0_archive_iri)
            except BaseException:
                self._turns, self.weak_refs, self._count = before
                raise
            self.taken_inputs.update(archived)
        return taken

    def set_task_goal(self, goal: str) -> None:
        """Set the task goal the relevance tracker compares inputs with (5W2H what + why)."""
        if not isinstance(goal, str) or not goal.strip():
            raise InvalidInputError(f"task goal must be a non-empty string, got {preview(goal)}")
        check_text(goal, what="task goal")
        self.tracker.set_task(self._embed(goal))

    def set_budget(self, budget: int) -> None:
        """Change the token budget and evict down to it."""
        with self._lock:
            self.config = self.config.model_copy(update={"budget": _check_budget(budget)})
            self.evict()

    def _archive(
        self,
        role: str,
        content: str,
        summary: str,
        now: float,
        supplement: bool,
        metadata: dict[str, Any] | None,
        extra_tags: Sequence[str] = (),
    ) -> str:
        self._count += 1
        node = {
            "@id": f"{self.iri}/turn/{self._count}",
            "@type": "SupplementaryInput" if supplement else "Turn",
            "role": role,
            "agent": self.agent,
            "session": {"@id": self.iri},
            "task": {"@id": self.task_iri},
            "time": datetime.fromtimestamp(now, timezone.utc).isoformat(),
            "text": content,
            "summary": summary,
        }
        tags = ["turn", f"session:{self.id}", f"role:{role}", *extra_tags]
        return self.services.store.put(
            node, tags=tags, named_graph=self.iri, metadata=metadata or {}
        )

    def _line_tokens(self, role: str, summary: str) -> int:
        return self.services.tokens.count(_line(role, summary))

    def _embed(self, text: str) -> Vector | None:
        embedder = self.services.embedder
        return None if embedder is None else as_vector(embedder.embed_query(text))

    # -- eviction ------------------------------------------------------------------------------

    def evict(self, query: Sequence[float] | Vector | None = None) -> list[Turn]:
        """Run two-phase eviction until the chain fits its budget; return the evicted turns.

        Args:
            query: the embedding of the current query; the task goal's when omitted.
        """
        with self._lock:
            return self._evict(query, protect=None)

    def _evict(self, query: Sequence[float] | Vector | None, protect: Turn | None) -> list[Turn]:
        evicted: list[Turn] = []
        if self.total_tokens <= self.capacity:
            return evicted
        now = self.services.clock()
        policy = self.policy
        # Phase 1: every stale, low-relevance turn goes, even once the chain is within budget:
        # such a turn is the cheapest to lose (archived in L0, paged back in on demand).
        for turn in list(self._turns):
            if (
                self._evictable(turn, protect)
                and not turn.is_supplement
                and turn.relevance_score < policy.relevance_threshold
                and now - turn.last_access > policy.safe_window_s
            ):
                evicted.append(self._drop(turn, "phase 1"))
        # Then the turns of a finished topic, oldest first; then by score, lowest first.
        target = None if query is None else as_vector(query)
        while self.total_tokens > self.capacity:
            candidates = [t for t in self._turns if self._evictable(t, protect)]
            if not candidates:
                break
            old = [t for t in candidates if t.old_topic]
            if old:
                evicted.append(self._drop(old[0], "old topic"))
                continue
            scores = self.scores(target, candidates, now=now)
            victim = min(candidates, key=lambda t: scores[id(t)])
            evicted.append(self._drop(victim, "phase 2"))
        return evicted

    def compress_topic(self, before: str, fill: float) -> tuple[list[Turn], list[Turn]]:
        """Mark the turns older than the turn archived at ``before`` as an old topic, then evict
        them, oldest first, until the chain is at most ``fill`` of its budget.

        Returns the turns marked and the turns evicted (their content stays in L0). A ``before``
        no longer in the chain (evicted meanwhile) marks the whole chain but its pinned turns.
        """
        with self._lock:
            start = next(
                (i for i, t in enumerate(self._turns) if t.l0_archive_iri == before),
                len(self._turns),
            )
            old = [t for t in self._turns[:start] if not t.pinned]
            for turn in old:
                turn.old_topic = True
            evicted = []
            for turn in [t for t in self._turns if t.old_topic and not t.pinned]:
                if self.total_tokens <= fill * self.budget:
                    break
                evicted.append(self._drop(turn, "old topic"))
            return old, evicted

    @staticmethod
    def _evictable(turn: Turn, protect: Turn | None) -> bool:
        return not turn.pinned and turn is not protect

    def scores(
        self,
        query: Sequence[float] | Vector | None,
        candidates: Sequence[Turn],
        *,
        now: float,
    ) -> dict[int, float]:
        """Return the phase 2 retention score of each candidate (by ``id``): higher stays."""
        policy = self.policy
        goal = self.tracker.task_embedding if query is None else as_vector(query)
        largest = max((t.tokens for t in candidates), default=1) or 1
        out: dict[int, float] = {}
        for turn in candidates:
            match = similarity(goal, turn.embedding)
            match = turn.relevance_score if match is None else match
            semantic = policy.query_blend * match + (1 - policy.query_blend) * turn.relevance_score
            recency = 1.0 / (1.0 + max(0.0, now - turn.last_access) / policy.safe_window_s)
            cost = 1.0 - turn.tokens / largest
            rest = policy.recency_weight * recency + policy.cost_weight * cost
            out[id(turn)] = policy.beta * semantic + (1 - policy.beta) * rest
        return out

    def _drop(self, turn: Turn, reason: str) -> Turn:
        self._turns.remove(turn)
        if turn.l0_archive_iri not in self.weak_refs:
            self.weak_refs.append(turn.l0_archive_iri)
        self.services.bus.publish(
            EventType.TURN_EVICTED,
            {
                "iri": turn.l0_archive_iri,
                "reason": reason,
                "tokens": turn.tokens,
                "session": self.iri,
            },
            task_iri=self.task_iri,
            source=self.agent,
        )
        return turn

    # -- paging --------------------------------------------------------------------------------

    def page_in(self, iri: str) -> Turn | None:
        """Reload an evicted turn (or any L0 entry) into the chain, evicting others to fit.

        Returns:
            The reloaded turn, or ``None`` if it cannot fit even alone (it stays in L0 and in
            the weak references).

        Raises:
            EntryNotFoundError: no L0 entry has ``iri``.
        """
        validate_iri(iri)
        node = self.services.store.get_node(iri)
        if node is None:
            raise EntryNotFoundError(f"no L0 entry has the IRI {iri!r}")
        content = node.get("text") if isinstance(node.get("text"), str) else node_text(node)
        summary = node.get("summary") if isinstance(node.get("summary"), str) else None
        summary = summary or self.services.summarizer.summarize(
            content or iri, self.config.max_summary_tokens
        )
        embedding = self._embed(summary)
        with self._lock:
            now = self.services.clock()
            turn = Turn(
                role=str(node.get("role", "system")),
                summary=summary,
                tokens=self._line_tokens(str(node.get("role", "system")), summary),
                l0_archive_iri=iri,
                embedding=embedding,
                relevance_score=self.tracker.score(embedding, remember=False),
                is_supplement=node.get("@type") == "SupplementaryInput",
                created_at=now,
                last_access=now,
            )
            if iri in self.weak_refs:
                self.weak_refs.remove(iri)
            self._turns.append(turn)
            self._evict(None, protect=turn)
            if self.total_tokens > self.capacity:
                self._drop(turn, "does not fit")
                return None
        self.services.bus.publish(
            EventType.TURN_PAGED_IN, {"iri": iri, "session": self.iri}, task_iri=self.task_iri
        )
        return turn

    # -- context -------------------------------------------------------------------------------

    def context(
        self,
        query: str | None = None,
        *,
        budget: int | None = None,
        exclude: Collection[str] = (),
    ) -> Context:
        """Return the messages that carry the chain to the model, within the budget.

        ``budget`` renders into fewer tokens than the session's own budget (an adapter sharing
        the prompt with other content); the chain itself is not evicted further. Turns whose
        archive IRI is in ``exclude`` (the model sees them in full elsewhere) are left out.

        The main section holds the supplements and the turns at or above the relevance
        threshold (to ``query`` when given, else to the task); then at most
        ``max_low_relevance`` low-relevance turns, cut short, under a header that says so.
        """
        if query is not None and not isinstance(query, str):
            raise InvalidInputError(f"query must be a string or None, got {preview(query)}")
        if query is not None:
            check_text(query, what="query")
        limit = self.budget if budget is None else min(self.budget, _check_budget(budget))
        target = None if not query else self._embed(query)
        with self._lock:
            if target is not None:
                self._evict(target, protect=None)
            now = self.services.clock()
            turns = [t for t in self._turns if t.l0_archive_iri not in exclude]
            relevance = self._relevance(target, turns)
            for turn in turns:  # a turn the model is shown as relevant counts as used now
                if relevance[id(turn)] >= self._threshold:
                    turn.last_access = now
        main = [
            t for t in turns if t.pinned or t.is_supplement or relevance[id(t)] >= self._threshold
        ]
        low = [t for t in turns if t not in main]
        low = sorted(low, key=lambda t: relevance[id(t)], reverse=True)
        low = low[: self.config.max_low_relevance]
        return self._render(main, low, relevance, limit)

    @property
    def _threshold(self) -> float:
        return self.policy.relevance_threshold

    def _relevance(self, target: Vector | None, turns: list[Turn]) -> dict[int, float]:
        if target is None:
            return {id(t): t.relevance_score for t in turns}
        blend = self.policy.query_blend
        out = {}
        for turn in turns:
            match = similarity(target, turn.embedding)
            out[id(turn)] = (
                turn.relevance_score
                if match is None
                else blend * match + (1 - blend) * turn.relevance_score
            )
        return out

    def _render(
        self, main: list[Turn], low: list[Turn], relevance: dict[int, float], budget: int
    ) -> Context:
        """Render the sections within the budget: low-relevance lines go first, then the least
        relevant main lines (never the pinned one). Per-line counts steer the cuts; the final
        count is exact."""
        count = self.services.tokens.count
        header = MAIN_HEADER.format(agent=self.agent, role=self.role)
        width = self.config.low_relevance_chars
        low_lines = [
            f"[{t.role}] {_shorten(t.summary, width)} (relevance: {relevance[id(t)]:.2f})"
            for t in low
        ]
        low_costs = [count(line) + 1 for line in low_lines]
        overhead = count(header) + 1 + (count(LOW_HEADER) + 2 if low else 0)
        estimate = overhead + sum(t.tokens + 1 for t in main) + sum(low_costs)
        while True:
            while estimate > budget and (low_lines or any(not t.pinned for t in main)):
                if low_lines:
                    low_lines.pop()
                    estimate -= low_costs.pop()
                else:
                    victim = min((t for t in main if not t.pinned), key=lambda t: relevance[id(t)])
                    main.remove(victim)
                    estimate -= victim.tokens + 1
            lines = [header] + [_line(t.role, t.summary) for t in main]
            if low_lines:
                lines += ["", LOW_HEADER, *low_lines]
            text = "\n".join(lines)
            tokens = count(text)
            if tokens <= budget or not (low_lines or any(not t.pinned for t in main)):
                break
            estimate = tokens + 1  # the estimate was short: cut one more line and recount
        kept_low = [t for t, _ in zip(low, low_lines, strict=False)]
        return Context([{"role": "system", "content": text}], tokens, main, kept_low)


def _line(role: str, summary: str) -> str:
    return f"[{role}] {summary}"


def _shorten(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 3].rstrip() + "..."


def _check_name(value: object, what: str) -> str:
    """A role or agent name: a label, so no control character and no lone surrogate."""
    return check_label(value, what=what)


# The UNIX times a turn's ISO timestamp can show: years 1 to 9999.
_TIMES = (-62_135_596_800.0, 253_402_300_799.0)


def _check_time(value: object) -> float:
    moment = check_real(value, what="at (a UNIX time in seconds)")
    if not _TIMES[0] <= moment <= _TIMES[1]:
        raise InvalidInputError(f"at must be a UNIX time of the years 1 to 9999, got {moment!r}")
    return moment


def _check_score(value: object) -> float:
    score = check_real(value, what="relevance")
    if not 0.0 <= score <= 1.0:
        raise InvalidInputError(f"relevance must be a number in [0, 1], got {preview(value)}")
    return score


def _check_budget(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise InvalidInputError(f"budget must be an int >= 1, got {preview(value)}")
    return value
