"""L1: per-agent, per-task session memory: a summary chain under a token budget.

Invariants:
- Every turn's full content is archived to L0 before its summary enters the chain, whatever its
  size (``EntryStore.put_text``: a turn over the store's node limit keeps a head in its node and
  every byte beside it, ``store.full_text(iri)``); an evicted turn's IRI goes to the weak
  references and can be paged back in. Nothing is lost.
- After every operation the summaries fit the budget, unless only pinned turns remain. A turn's
  summary is written from at most its first ``SUMMARY_SOURCE_CHARS`` characters.
- The first turn (the task statement) is pinned; supplements are safe from phase 1.
- Phase 2 evicts the lowest score: score = beta * semantic + (1 - beta) * (w_r * recency +
  w_c * cost). More relevant, more recent and smaller turns score higher and stay longer.
- Token counts are exact (the memory's token counter).
- Input: turn content, goals and queries are text that encodes as UTF-8; roles and agent
  names are labels; scores and times are finite real numbers, kept as floats.
- L0 is the truth, not the process (``gliding_core.store.session_state``): a session is known
  by its agent and task, and what its context depends on (archived turns, the summary chain
  with its scores and marks, the relevance tracker's references, the inputs taken and shown)
  is kept in L0. Every change runs in one L0 transaction holding the session's lock
  (``EntryStore.hold``), on the state as last committed by any process; every read first
  checks the state's stamp and reads it again when another process or memory changed it. So
  a thread whose runs alternate between workers sees the context one worker would show it.
Thread-safe: one lock per session; across processes, the store's lock per session.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable, Collection, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from gliding_core.attention.relevance import RelevanceTracker, similarity
from gliding_core.attention.supplementary import (
    SupplementaryInput,
    SupplementaryQueue,
    read_inputs,
)
from gliding_core.bus import EventBus, EventType
from gliding_core.checks import check_real
from gliding_core.config import EvictionPolicy, SessionConfig
from gliding_core.errors import EntryNotFoundError, InvalidInputError
from gliding_core.hyperspace.embedders import Embedder
from gliding_core.hyperspace.vectors import Vector, as_vector
from gliding_core.jsonld import check_label, check_text, node_text, preview, validate_iri
from gliding_core.store.protocol import EntryStore
from gliding_core.store.session_state import (
    ArchivedTurn,
    SavedState,
    SavedTurn,
    archived_turns,
    decode,
    encode,
    session_id,
    state_node,
)
from gliding_core.summarize import Summarizer
from gliding_core.tokens import TokenCounter

SESSION_PREFIX = "urn:gliding:session:"
MAIN_HEADER = "[Context from {agent} ({role})]"
LOW_HEADER = "[Historical reference, low relevance]"
SUMMARY_SOURCE_CHARS = 65_536  # a turn's summary is written from at most its first this many
_VECTORS_KEPT = 4_096  # embeddings of summaries a session keeps in the process, at most


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

    ``recorded`` and ``shown`` are kept by the session from L0 (its turns' message ids, the
    inputs its state says are not shown yet), so a conversation in another process or memory
    neither archives a message again nor shows an input twice.

    Attributes:
        lock: held while the ledger is read and changed together with the session.
        recorded: message id -> the IRI of the L0 entry that archived it.
        shown: the supplementary inputs already shown to the model as messages.
        warned_over_budget: a view of this session's scope was over its budget and the
            warning is logged (once per scope, per process).
    """

    lock: threading.RLock = field(default_factory=threading.RLock)
    recorded: dict[str, str] = field(default_factory=dict)
    shown: set[str] = field(default_factory=set)
    warned_over_budget: bool = False


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
    """The L1 memory of one agent on one task, kept in L0 (see the module).

    Two sessions of the same agent and task, in one process or in several, are one session:
    the same id, the same archive, the same chain.

    Args:
        services: the store, token counter, summarizer, bus and embedder to use.
        task_iri: the task this session works on.
        agent: the agent's name.
        role: the agent's role; picks the eviction policy preset unless ``policy`` is given.
        config: budget and rendering settings (a budget set with ``set_budget`` in any process
            replaces this one's).
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
        check_settings(config, policy)
        self.services = services
        self.config = config or SessionConfig()
        self.policy = policy or EvictionPolicy.for_role(role)
        self.id = session_id(self.agent, self.task_iri)
        self.iri = f"{SESSION_PREFIX}{self.id}"
        self.tracker = RelevanceTracker(alpha)
        # The model view's record of this session (``gliding_core.view.conversation``): it
        # lives exactly as long as the session, whose archive its message ids point into.
        self.ledger = ConversationLedger()
        self._weak_refs: list[str] = []
        # Every input the session took, by IRI, with its turn's IRI, in the order taken.
        self._taken: dict[str, tuple[SupplementaryInput, str]] = {}
        self._turns: list[Turn] = []
        self._count = 0
        self._lock = threading.RLock()
        # What this process holds of the state in L0: derived, checked before every use.
        self._archived: list[str] = []  # the session's turn entries, by number
        self._stamp: str | None = None
        self._loaded = False
        self._depth = 0  # nesting of ``atomic`` blocks on the thread holding the lock
        self._dirty = False
        self._undo: list[Callable[[], None]] = []  # what a failed ``atomic`` block takes back
        self._budget_set: int | None = None
        self._task_text: str | None = None
        self._previous_text: str | None = None
        self._vectors: dict[str, Vector | None] = {}  # summary -> embedding (derived)

    # -- reading -------------------------------------------------------------------------------

    @property
    def turns(self) -> list[Turn]:
        """A copy of the chain, oldest first."""
        with self._lock:
            self._refresh()
            return list(self._turns)

    @property
    def weak_refs(self) -> list[str]:
        """The IRIs of the evicted turns (and entries paged in, then out), to page back in."""
        with self._lock:
            self._refresh()
            return list(self._weak_refs)

    @property
    def taken_inputs(self) -> dict[str, tuple[SupplementaryInput, str]]:
        """Every input the session took, by IRI, with its turn's IRI, in the order taken."""
        with self._lock:
            self._refresh()
            return dict(self._taken)

    @property
    def state_iri(self) -> str:
        """The IRI of the L0 entry keeping the session's state."""
        return f"{self.iri}/state"

    def input_turns(self) -> set[str]:
        """Return the IRIs of the turns that archive supplementary inputs (taken or in the chain).

        A view leaves them out of the L1 context: the delivered message is where an input is seen.
        """
        with self._lock:
            self._refresh()
            taken = {turn for _, turn in self._taken.values()}
            return taken | {t.l0_archive_iri for t in self._turns if t.is_supplement}

    def archived(self, message_id: str) -> str | None:
        """Return the L0 IRI the message ``message_id`` was archived under, or ``None``."""
        with self._lock:
            self._refresh()
            return self.ledger.recorded.get(message_id)

    def all_archived(self, message_ids: Sequence[str | None]) -> bool:
        """Whether every message of ``message_ids`` is archived (one without an id never is)."""
        with self._lock:
            self._refresh()
            recorded = self.ledger.recorded
            return all(key is not None and key in recorded for key in message_ids)

    @property
    def budget(self) -> int:
        """The token budget of the chain."""
        with self._lock:
            self._refresh()
            return self.config.budget

    @property
    def capacity(self) -> int:
        """The tokens the chain's turns may use: the budget less the context's header."""
        with self._lock:
            self._refresh()
            return self._room()

    def _room(self) -> int:
        header = MAIN_HEADER.format(agent=self.agent, role=self.role)
        return max(1, self.config.budget - self.services.tokens.count(header) - 1)

    @property
    def total_tokens(self) -> int:
        """The exact token count of the chain's turns as the context renders them."""
        with self._lock:
            self._refresh()
            return self._total()

    def _total(self) -> int:
        return sum(t.tokens for t in self._turns)

    # -- the state in L0 -----------------------------------------------------------------------

    @contextmanager
    def atomic(self) -> Iterator[None]:
        """Run the block as one change of the session, however many turns it adds.

        The block runs in one L0 transaction holding the session's lock in the store (no other
        process or memory changes the session meanwhile) on the state as last committed; the
        state is written once, at the end, if the block changed it. A block inside another
        joins it. When the block fails, L0 rolls back and this object reads the state again
        at its next use.
        """
        with self._lock:
            if self._depth:
                self._depth += 1
                try:
                    yield
                finally:
                    self._depth -= 1
                return
            store = self.services.store
            self._depth, self._dirty, self._undo = 1, False, []
            try:
                with store.transaction():
                    store.hold(f"session:{self.id}")
                    self._sync()
                    yield
                    if self._dirty:
                        self._save()
            except BaseException:
                for undo in reversed(self._undo):  # the ledger's marks of what rolled back
                    undo()
                self._unload()
                raise
            finally:
                self._depth, self._undo = 0, []

    def _refresh(self) -> None:
        """Read the state again if it changed in L0 (a no-op inside ``atomic``)."""
        if self._depth == 0:
            self._sync()

    def _sync(self) -> None:
        """Make this object the state L0 holds, unless it already is (same stamp)."""
        entry = self.services.store.get_many([self.state_iri]).get(self.state_iri)
        state = None if entry is None else decode(entry, task_iri=self.task_iri, agent=self.agent)
        if self._loaded and (state.stamp if state is not None else None) == self._stamp:
            return
        self._load(state)

    def _unload(self) -> None:
        """Forget what this process holds: the next use reads everything from L0."""
        self._loaded = False
        self._stamp = None

    def _load(self, state: SavedState | None) -> None:
        """Take ``state`` (or, without one, the archived turns alone) as the session's.

        The ledger only grows: a message archived and then forgotten stays known as archived
        in this process, so a framework sending the same history again does not bring it back.
        """
        store = self.services.store
        count = 0 if state is None else state.count
        if not self._loaded or state is None or count < self._count:
            self._taken, self._archived, self._count = {}, [], 0
            self._absorb(archived_turns(store.by_tags([self._tag]), self.iri))
        elif count > self._count:
            wanted = [f"{self.iri}/turn/{n}" for n in range(self._count + 1, count + 1)]
            self._absorb(archived_turns(store.get_many(wanted).values(), self.iri))
        self._count = max(self._count, count)
        saved = () if state is None else state.turns
        self._turns = [self._turn_of(item) for item in saved]
        chain = {t.l0_archive_iri for t in self._turns}
        extra = () if state is None else state.extra_refs
        self._weak_refs = [iri for iri in [*self._archived, *extra] if iri not in chain]
        unshown: set[str] = set() if state is None else set(state.unshown)
        self.ledger.shown.update(iri for iri in self._taken if iri not in unshown)
        self._task_text = None if state is None else state.task_text
        self._previous_text = None if state is None else state.previous_text
        self.tracker.set_task(self._vector(self._task_text))
        self.tracker.set_previous(self._vector(self._previous_text))
        self._budget_set = None if state is None else state.budget
        if self._budget_set is not None:
            self.config = self.config.model_copy(update={"budget": self._budget_set})
        self._stamp = None if state is None else state.stamp
        self._loaded = True

    def _absorb(self, turns: list[ArchivedTurn]) -> None:
        """Add archived turns (newer than those held) to the derived records."""
        inputs = read_inputs(self.services.store, [t.supplement for t in turns if t.supplement])
        for turn in turns:
            self._archived.append(turn.iri)
            self._count = max(self._count, turn.number)
            if turn.message_id is not None:
                self.ledger.recorded[turn.message_id] = turn.iri
            if turn.supplement is not None and turn.supplement in inputs:
                self._taken[turn.supplement] = (inputs[turn.supplement], turn.iri)

    def _turn_of(self, saved: SavedTurn) -> Turn:
        return Turn(
            role=saved.role,
            summary=saved.summary,
            tokens=self._line_tokens(saved.role, saved.summary),
            l0_archive_iri=saved.iri,
            embedding=self._vector(saved.summary),
            relevance_score=saved.relevance,
            is_supplement=saved.supplement,
            created_at=saved.created,
            last_access=saved.access,
            pinned=saved.pinned,
            old_topic=saved.old_topic,
        )

    def _vector(self, text: str | None) -> Vector | None:
        """The embedding of ``text``, computed once per process."""
        if text is None:
            return None
        if text not in self._vectors:
            if len(self._vectors) >= _VECTORS_KEPT:
                self._vectors.clear()
            self._vectors[text] = self._embed(text)
        return self._vectors[text]

    def _save(self) -> None:
        """Write the state to L0 (inside the ``atomic`` block's transaction)."""
        prefix = f"{self.iri}/turn/"
        state = SavedState(
            stamp=uuid.uuid4().hex,
            count=self._count,
            turns=tuple(_saved(t) for t in self._turns),
            extra_refs=tuple(iri for iri in self._weak_refs if not iri.startswith(prefix)),
            unshown=tuple(iri for iri in self._taken if iri not in self.ledger.shown),
            task_text=self._task_text,
            previous_text=self._previous_text,
            budget=self._budget_set,
        )
        self.services.store.replace(
            state_node(self.iri, self.task_iri),
            named_graph=self.iri,
            metadata=encode(state, agent=self.agent),
        )
        self._stamp = state.stamp

    @property
    def _tag(self) -> str:
        return f"session:{self.id}"

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
            metadata: extra entry metadata for the L0 archive (a ``message_id`` string is
                the message the turn archives: ``archived`` finds it, in any process).
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
        # The summary is written from the turn's head: a summarizer (a model, perhaps) is never
        # handed megabytes, and the head of a long text says what it is.
        summary = self.services.summarizer.summarize(
            content[:SUMMARY_SOURCE_CHARS], self.config.max_summary_tokens
        )
        embedding = self._vector(summary)
        with self.atomic():
            first = not self._turns and not self._weak_refs
            if first and self.tracker.task_embedding is None:
                self.tracker.set_task(embedding)
                self._task_text = summary
            score = self.tracker.score(embedding) if relevance is None else relevance
            if relevance is None and embedding is not None:
                self._previous_text = summary
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
            self._archived.append(iri)
            message = (metadata or {}).get("message_id")
            if isinstance(message, str) and message not in self.ledger.recorded:
                self.ledger.recorded[message] = iri
                self._undo.append(lambda: self._unrecord(message))
            self._dirty = True
            self._evict(None, protect=None)
        return turn

    def _unrecord(self, message_id: str) -> None:
        self.ledger.recorded.pop(message_id, None)

    def start_cycle(
        self, inputs: SupplementaryQueue, *, tags: Sequence[str] = ()
    ) -> list[SupplementaryInput]:
        """Take the task's pending supplementary inputs into the chain as protected turns.

        Call at the start of each agent cycle. Taking the inputs and archiving them as turns
        is one L0 transaction: after a crash either both happened or neither did, so an input
        is delivered exactly once. Returns the inputs, oldest first, for the caller to show
        the model.

        Args:
            inputs: the queue to take from.
            tags: extra L0 tags of the turns that archive the inputs (the scope's tag, so
                that forgetting the scope finds them by its tag, as it finds its other turns).
        """
        with self.atomic():
            taken = inputs.take_pending(self.task_iri, consumer=self.iri)
            for item in taken:
                turn = self.add_turn(
                    "user",
                    item.content,
                    supplement=True,
                    relevance=item.relevance_score,
                    metadata={"supplement": item.iri},
                    tags=tags,
                )
                self._taken[item.iri] = (item, turn.l0_archive_iri)
        return taken

    def show_inputs(self) -> list[SupplementaryInput]:
        """Return the taken inputs not shown to the model yet, in the order taken, and mark
        them shown (in L0: no process shows them again)."""
        with self.atomic():
            fresh = [item for iri, (item, _) in self._taken.items() if iri not in self.ledger.shown]
            if fresh:
                marked = {item.iri for item in fresh}
                self.ledger.shown.update(marked)
                self._undo.append(lambda: self.ledger.shown.difference_update(marked))
                self._dirty = True
        return fresh

    def forget(self, iris: Collection[str]) -> int:
        """Drop every trace of the L0 entries ``iris`` from the session; return the turns dropped.

        The chain's turns archived there, the weak references to them and the inputs they
        archive go; the memory's ``forget`` calls this after deleting the entries. A state
        entry deleted with them is not written again.
        """
        gone = set(iris)
        with self._lock:
            before = {t.l0_archive_iri for t in self._turns}
            with self.atomic():
                kept = [t for t in self._turns if t.l0_archive_iri not in gone]
                dropped = len(before & gone)
                changed = len(kept) != len(self._turns)
                self._turns = kept
                self._weak_refs = [iri for iri in self._weak_refs if iri not in gone]
                self._archived = [iri for iri in self._archived if iri not in gone]
                self._taken = {
                    iri: (item, turn)
                    for iri, (item, turn) in self._taken.items()
                    if iri not in gone and turn not in gone
                }
                self._dirty = changed and self._stamp is not None
        # The ledger keeps the ids of the messages archived there: a framework that sends the
        # same history again does not bring the forgotten messages back into L0 (in this
        # process; another one reads the ledger from the turns that are left).
        return dropped

    def set_task_goal(self, goal: str) -> None:
        """Set the task goal the relevance tracker compares inputs with (5W2H what + why)."""
        if not isinstance(goal, str) or not goal.strip():
            raise InvalidInputError(f"task goal must be a non-empty string, got {preview(goal)}")
        check_text(goal, what="task goal")
        with self.atomic():
            self.tracker.set_task(self._vector(goal))
            self._task_text = goal
            self._dirty = True

    def set_budget(self, budget: int) -> None:
        """Change the token budget (of this session in every process) and evict down to it."""
        checked = _check_budget(budget)
        with self.atomic():
            self.config = self.config.model_copy(update={"budget": checked})
            self._budget_set = checked
            self._dirty = True
            self._evict(None, protect=None)

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
            "summary": summary,
        }
        tags = ["turn", f"session:{self.id}", f"role:{role}", *extra_tags]
        # put_text: a turn of any size is archived whole (a large one in parts beside its entry).
        return self.services.store.put_text(
            node, content, tags=tags, named_graph=self.iri, metadata=metadata or {}
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
        with self.atomic():
            return self._evict(query, protect=None)

    def _evict(self, query: Sequence[float] | Vector | None, protect: Turn | None) -> list[Turn]:
        evicted: list[Turn] = []
        if self._total() <= self._room():
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
        while self._total() > self._room():
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
        with self.atomic():
            start = next(
                (i for i, t in enumerate(self._turns) if t.l0_archive_iri == before),
                len(self._turns),
            )
            old = [t for t in self._turns[:start] if not t.pinned]
            for turn in old:
                turn.old_topic = True
            self._dirty = self._dirty or bool(old)
            evicted = []
            for turn in [t for t in self._turns if t.old_topic and not t.pinned]:
                if self._total() <= fill * self.config.budget:
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
        self._dirty = True
        if turn.l0_archive_iri not in self._weak_refs:
            self._weak_refs.append(turn.l0_archive_iri)
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
        embedding = self._vector(summary)
        with self.atomic():
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
            if iri in self._weak_refs:
                self._weak_refs.remove(iri)
            self._turns.append(turn)
            self._dirty = True
            self._evict(None, protect=turn)
            if self._total() > self._room():
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
        if budget is not None:
            budget = _check_budget(budget)
        target = None if not query else self._embed(query)
        with self.atomic():
            limit = self.config.budget if budget is None else min(self.config.budget, budget)
            if target is not None:
                self._evict(target, protect=None)
            now = self.services.clock()
            turns = [t for t in self._turns if t.l0_archive_iri not in exclude]
            relevance = self._relevance(target, turns)
            for turn in turns:  # a turn the model is shown as relevant counts as used now
                if relevance[id(turn)] >= self._threshold and turn.last_access != now:
                    turn.last_access = now
                    self._dirty = True
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


def _saved(turn: Turn) -> SavedTurn:
    return SavedTurn(
        iri=turn.l0_archive_iri,
        role=turn.role,
        summary=turn.summary,
        relevance=turn.relevance_score,
        supplement=turn.is_supplement,
        created=turn.created_at,
        access=turn.last_access,
        pinned=turn.pinned,
        old_topic=turn.old_topic,
    )


def _line(role: str, summary: str) -> str:
    return f"[{role}] {summary}"


def _shorten(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 3].rstrip() + "..."


def check_settings(config: object, policy: object) -> None:
    """Refuse a session's ``config`` or ``policy`` of the wrong type (``None`` is the default)."""
    if config is not None and not isinstance(config, SessionConfig):
        raise InvalidInputError(f"config must be a SessionConfig, got {preview(config)}")
    if policy is not None and not isinstance(policy, EvictionPolicy):
        raise InvalidInputError(f"policy must be an EvictionPolicy, got {preview(policy)}")


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
