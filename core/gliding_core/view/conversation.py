"""View: the conversation: what an agent's model sees at each step, and what the memory keeps of it.

The framework adapters (LangChain middleware, LlamaIndex memory) translate their message objects
into plain records (``gliding_core.framing``: ``{"role", "content"}`` with OpenAI-style
``tool_calls`` / ``tool_call_id``, an optional ``id``, and on delivered supplementary input
``supplement``: the input's IRI) and call this module; the behaviour they share lives here, and
their settings are one ``ConversationSettings``.

A model view, within one token budget, holds:
1. the leading system messages of the request, unchanged;
2. one memory message (``"memory": True`` in its record), filled from an ordered list of context
   sources (``gliding_core.view.sources``): by default the session's L1 context for the query
   (``summary_share`` of the room at most, and only when part of the history is out of the
   window: else it would only repeat it), then the hybrid recall from L0; each source is asked
   for what is left, and skips what the window and the earlier sources show. A new layer adds a
   source (``extra_sources``); the view does not change. The message is a system message after
   the leading ones, or a user message just before the newest user turn (``placement``);
3. the whole history when it fits, else the newest messages that fit in ``window_share`` of the
   room (the newest group always), never separating a tool call from its results;
4. the delivered supplementary inputs, always.

A message too large for its room (a tool result of megabytes) is sent cut: its head and
``CUT_NOTE`` (the archive keeps it whole, ``EntryStore.full_text``); supplementary inputs are
cut to half the room at most, then the window's largest messages to what is left. When the
system messages and the newest messages, cut as far as they go, still exceed the budget, the
view is sent over budget: ``ModelView.over_budget`` says so and a warning is logged once per
scope. The query recall looks for is at most the first ``_QUERY_CHARS`` characters.

Turns that quote a shared node (blackboard tool results) are noted as they are recorded; once
the node moves past the quoted generation the turn is stale (``gliding_core.view.stale_turns``): the
L1 context and recall leave it out, and while it is in the window the memory message opens with
what changed since it was quoted. The same results are the copies of shared nodes the request
holds: the sources are given those of the messages in the window (``SourceRequest.copies``), so
a frame can show a node the model has at its current value as a reference, and one it has at an
older value as the change; a message out of the window holds nothing for them.

A conversation belongs to one scope (``gliding_core.store.scope``: a user, a thread, or the task it
was built for): its turns carry the scope's tag, its session and supplementary inputs use the
scope's task IRI, and recall reads the scope's entries and the graphs shared explicitly, never
another scope's. Recall and the L1 context never quote a supplementary input (pending, consumed,
or the turn that archived a delivered one): the SQL filter of the search leaves them out, so an
input put while a view is built cannot slip in; the delivered message is the only place the
model sees it.

Invariants: the view's token count is exact for what is sent (``ChatFraming.count``); the
history is never modified, only viewed; each message is archived once (by its ``id``); each
supplementary input is shown as a new message exactly once.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, cast, runtime_checkable

from typing_extensions import Unpack

from gliding_core.attention.supplementary import SupplementaryInput, SupplementaryInputStore
from gliding_core.checks import check_count
from gliding_core.config import ConversationSettings, ViewOptions
from gliding_core.errors import InvalidInputError
from gliding_core.framing import (
    PER_MESSAGE,
    PER_REPLY,
    ChatFraming,
    Message,
    after_tool_groups,
    check_messages,
    last_user_text,
    message_text,
    tool_groups,
)
from gliding_core.hyperspace.search import SearchHit
from gliding_core.jsonld import preview
from gliding_core.session import Session, Turn
from gliding_core.store.filters import SearchFilters
from gliding_core.store.protocol import EntryStore
from gliding_core.store.scope import Scope, Shared
from gliding_core.tokens import TokenCounter
from gliding_core.view.memory_sources import (
    L1_SOURCE,
    RECALL_HEADER,
    RecallSource,
    Searcher,
    SessionContextSource,
    entry_text,
)
from gliding_core.view.sources import ContextSource, SourcePart, SourceRequest
from gliding_core.view.stale_turns import StaleTurns, node_copies

__all__ = ["RECALL_HEADER", "Conversation", "ModelView", "ViewMemory", "entry_text"]
_MIN_MEMORY = 12  # the smallest memory room worth asking the sources to fill
_QUERY_CHARS = 4_096  # recall looks for at most this much of the latest user message
_MIN_CUT = 48  # tokens a cut message keeps at least, so it still says what it is
CUT_NOTE = "\n[... {left} more tokens of this message are left out here; the memory keeps it whole]"
logger = logging.getLogger(__name__)
_SEPARATOR = "\n\n"


@runtime_checkable
class ViewMemory(Searcher, Protocol):
    """What a conversation needs of its memory (``gliding_core.Memory`` is the one there is).

    Search and the token counter (recall), the L0 store (the chat log), the supplementary
    inputs, the L1 sessions, the chat framing, and the memory's one stale-turn tracker.
    """

    @property
    def store(self) -> EntryStore:
        """The L0 store the turns are archived in."""
        ...

    @property
    def supplements(self) -> SupplementaryInputStore:
        """The supplementary inputs put for tasks."""
        ...

    @property
    def stale_turns(self) -> StaleTurns:
        """The memory's one tracker of turns quoting shared nodes."""
        ...

    def session(self, task_iri: str, *, agent: str = "agent", role: str = "SA") -> Session:
        """Return the L1 session of ``agent`` on ``task_iri``, creating it on first use."""
        ...

    def framing(self) -> ChatFraming:
        """Return the exact chat-message counter of the memory's token counter."""
        ...


@dataclass(frozen=True, slots=True)
class ModelView:
    """The messages one model call gets, with what went into them.

    Attributes:
        messages: the records to send, in order.
        tokens: their exact token count as sent.
        history_tokens: the token count of the full history (and supplements) as sent.
        memory: the text of the memory message, ``""`` when there is none.
        recall: the L0 hits the memory message quotes, best first.
        supplements: the supplementary inputs first shown in this view.
        dropped: history messages left out of the window.
        parts: what each context source put in the memory message, in order.
        cut: how many messages are sent cut (a message too large for the room keeps its head
            and a note; the memory keeps it whole).
        over_budget: the view is over the budget: the system messages, the supplementary
            inputs and the newest messages cut as far as they go do not fit it. The request
            goes as it is, and a warning is logged once per scope.
    """

    messages: list[Message]
    tokens: int
    history_tokens: int
    memory: str = ""
    recall: list[SearchHit] = field(default_factory=list)
    supplements: list[SupplementaryInput] = field(default_factory=list)
    dropped: int = 0
    parts: list[SourcePart] = field(default_factory=list)
    cut: int = 0
    over_budget: bool = False


class Conversation:
    """One agent's chat in one scope, bound to its L1 session and to L0.

    Args:
        memory: the memory to read and archive into.
        task_iri: the task; supplementary inputs are put for it. Give it or ``scope``.
        scope: the scope (user, thread or task) read and written; ``Scope.of_task(task_iri)``
            when omitted. Its ``task_iri`` is the conversation's task.
        shared: named graph IRIs or scopes that recall reads besides the scope's own entries.
        recall_filters: restrict recall further (for instance to some tags); the scope's
            conditions always hold.
        settings: agent, role, budget, recall size, shares and placement
            (``ConversationSettings``); the defaults when omitted.
        extra_sources: context sources asked after the L1 context and recall (an L3 frame).
        **options: fields of ``settings`` to replace (``budget=900``, ``recall_k=3`` ...).

    Example:
        >>> with Memory() as memory:  # doctest: +SKIP
        ...     chat = Conversation(memory, "urn:task:1", budget=1000)
        ...     chat.record([{"role": "user", "content": "Plan the release", "id": "m1"}])
        ...     view = chat.view([{"role": "user", "content": "Plan the release", "id": "m1"}])
    """

    def __init__(
        self,
        memory: ViewMemory,
        task_iri: str | None = None,
        *,
        scope: Scope | None = None,
        shared: Sequence[Shared] = (),
        recall_filters: SearchFilters | None = None,
        settings: ConversationSettings | None = None,
        extra_sources: Sequence[ContextSource] = (),
        **options: Unpack[ViewOptions],
    ) -> None:
        if not isinstance(memory, ViewMemory):
            raise InvalidInputError(f"memory must be a gliding_core Memory, got {preview(memory)}")
        self.settings = ConversationSettings.of(settings, **options)
        self.scope = _scope_of(task_iri, scope)
        if recall_filters is not None and not isinstance(recall_filters, SearchFilters):
            raise InvalidInputError(
                f"recall_filters must be SearchFilters or None, got {preview(recall_filters)}"
            )
        self.extra_sources = _check_sources(extra_sources)
        self.memory = memory
        self.session: Session = memory.session(
            self.scope.task_iri, agent=self.settings.agent, role=self.settings.role
        )
        self.budget = self.settings.budget or self.session.budget
        self.recall_filters = recall_filters
        self.shared = tuple(shared) if isinstance(shared, (list, tuple)) else shared
        readable = self.scope.filters(self.shared, base=recall_filters)
        self.stale_turns: StaleTurns = memory.stale_turns
        self.sources: tuple[ContextSource, ...] = (
            self.stale_turns,
            SessionContextSource(self.session),
            RecallSource(memory, self.settings.recall_k, filters=readable),
            *self.extra_sources,
        )
        # Shared by every conversation on the session (one per agent and task in a memory, and
        # kept in L0 for the others): a second adapter instance, in this process or another,
        # neither archives a message again nor re-shows an input.
        ledger = self.session.ledger
        self._recorded = ledger.recorded  # message id -> L0 archive IRI (the session keeps it)
        self._lock = ledger.lock

    @property
    def task_iri(self) -> str:
        """The task this conversation works on."""
        return self.session.task_iri

    def for_scope(self, scope: Scope) -> Conversation:
        """Return a conversation like this one (memory, settings, sources) for ``scope``.

        Its state lives in the memory's session of that scope, so two conversations built for
        one scope share it. Returns ``self`` for this conversation's own scope. A source with
        per-agent state (a ``fresh()`` method, as a ``FrameSource`` with a ledger has) is
        given fresh, so one scope's model is never assumed to have seen another's view.
        """
        if not isinstance(scope, Scope):
            raise InvalidInputError(f"scope must be a Scope, got {preview(scope)}")
        if scope == self.scope:
            return self
        return Conversation(
            self.memory,
            scope=scope,
            shared=self.shared,
            recall_filters=self.recall_filters,
            settings=self.settings,
            extra_sources=[_fresh(source) for source in self.extra_sources],
        )

    # -- supplementary input -------------------------------------------------------------------

    def take_pending(self) -> list[SupplementaryInput]:
        """Move the task's pending supplementary inputs into the L1 session (a cycle start).

        Returns the inputs taken now. A callback handler calls this; ``deliver`` shows them.
        """
        return self.session.start_cycle(self.memory.supplements, tags=[self.scope.tag])

    def deliver(self) -> list[SupplementaryInput]:
        """Return the supplementary inputs to show the model as new user messages, once each.

        Takes the pending ones into the session first; inputs the session took earlier (by a
        callback handler at a cycle start) and not yet shown are included. Oldest first.
        """
        with self._lock, self.session.atomic():
            self.take_pending()
            fresh = self.session.show_inputs()
        return sorted(fresh, key=lambda item: item.created_at)

    # -- archiving -----------------------------------------------------------------------------

    def record(
        self,
        messages: Sequence[Mapping[str, Any]],
        *,
        tags: Sequence[str] = (),
        metadata: Sequence[Mapping[str, Any]] | None = None,
    ) -> list[Turn]:
        """Archive the messages not archived before into L0 and the L1 session.

        A message is known by its ``id``; one without an ``id`` is archived every time it is
        passed. System messages, delivered supplements (already archived when taken), the
        memory message and messages without text are skipped. All messages are checked before
        any is archived. ``tags`` and ``metadata`` (one mapping per message) go on the archive
        entries (the chat log's marks, ``gliding_core.view.chatlog``).
        """
        items = check_messages(messages)
        extra = [dict(m) for m in metadata] if metadata is not None else [{} for _ in items]
        if len(extra) != len(items):
            raise InvalidInputError(f"metadata has {len(extra)} items for {len(items)} messages")
        todo = [
            (item, more, text)
            for item, more in zip(items, extra, strict=True)
            if not _not_archived(item) and (text := message_text(item).strip())
        ]
        if self.session.all_archived([item.get("id") for item, _, _ in todo]):
            return []  # the usual case (a framework sends the whole history): no write
        turns = []
        # One change of the session: what another process recorded meanwhile is seen first.
        with self._lock, self.session.atomic():
            for item, more, text in todo:
                key = item.get("id")
                if key in self._recorded:
                    continue
                marks = {**more, "message_id": key} if key else more
                turn = self.session.add_turn(
                    item["role"], text, metadata=marks or None, tags=[self.scope.tag, *tags]
                )
                turns.append(turn)
                self.stale_turns.note(turn.l0_archive_iri, item)
        return turns

    def archived(self, message_id: str) -> str | None:
        """Return the L0 IRI a recorded message was archived under, or ``None``."""
        return self.session.archived(message_id)

    def adopt(self, message_id: str, iri: str) -> None:
        """Know ``message_id`` as archived under ``iri`` (a chat log reopened after a restart)."""
        with self._lock:
            self._recorded.setdefault(message_id, iri)

    def input_turn(self, input_iri: str) -> str | None:
        """Return the IRI of the turn that archived a taken supplementary input, or ``None``."""
        with self._lock:
            taken = self.session.taken_inputs.get(input_iri)
        return taken[1] if taken else None

    # -- the model's view ----------------------------------------------------------------------

    def view(
        self,
        messages: Sequence[Mapping[str, Any]],
        *,
        query: str | None = None,
        supplements: Sequence[SupplementaryInput] = (),
        budget: int | None = None,
        summary: bool | None = None,
        held: Sequence[Mapping[str, Any]] = (),
    ) -> ModelView:
        """Return what the model should see of ``messages``, within the budget.

        Args:
            messages: the full history, oldest first (never modified).
            query: what to recall for; the latest user message when omitted.
            budget: the budget of this view; the conversation's ``budget`` when omitted.
            summary: whether the memory message carries the L1 context: by default only when
                part of the history is out of the window; ``True`` for a memory block that
                is shown without the history.
            supplements: inputs to append as user messages (see ``deliver``); messages marked
                ``supplement`` in the history are kept too.
            held: messages the model is sent besides this view (an agent's tool calls in
                progress, which it sends outside its memory): the copies of shared nodes they
                hold are the model's too (``SourceRequest.copies``). Not part of the view.
        """
        items = check_messages(messages)
        extra_held = check_messages(held)
        if query is not None and not isinstance(query, str):
            raise InvalidInputError(f"query must be a string or None, got {preview(query)}")
        limit = self.budget if budget is None else check_count(budget, what="budget", minimum=1)
        extra = [
            {"role": "user", "content": s.content, "supplement": s.iri, "id": s.iri}
            for s in supplements
        ]
        framing = self.memory.framing()
        lead = 0
        while lead < len(items) and items[lead]["role"] == "system":
            lead += 1
        system, history = items[:lead], after_tool_groups(items[lead:])
        pinned = [m for m in history if m.get("supplement")] + extra
        rest = [m for m in history if not m.get("supplement")]
        query = query if query else (last_user_text(rest) or last_user_text(pinned))
        query = query[:_QUERY_CHARS] if query else query  # a pasted megabyte is no query
        # Supplementary inputs are always sent; one too large is cut to half the room at most.
        pinned, cuts = _cut(pinned, (limit - framing.count(system)) // 2, framing)
        room = limit - framing.count(system + pinned)
        whole = framing.count(rest) - PER_REPLY <= room  # all of it fits: no summary needed
        shown = rest if whole else self._window(rest, room, framing)
        visible = {id(m) for m in shown}
        shown, window_cuts = _cut(shown, room, framing)
        cuts.update(window_cuts)
        room -= framing.group_tokens(shown)
        with_summary = not whole if summary is None else bool(summary)
        parts = self._fill(query, room, shown + pinned, summary=with_summary, held=extra_held)
        kept = [
            cuts.get(id(m), m)
            for m in [*history, *extra]
            if m.get("supplement") or id(m) in visible
        ]
        memory_text = _SEPARATOR.join(p.text for p in parts)
        out = self._place(system, kept, memory_text)
        tokens = framing.count(out)
        self._note_budget(tokens, limit)
        return ModelView(
            out,
            tokens,
            framing.count(items + extra),
            memory_text,
            [hit for part in parts for hit in part.hits],
            list(supplements),
            len(rest) - len(shown),
            parts,
            cut=len(cuts),
            over_budget=tokens > limit,
        )

    def _note_budget(self, tokens: int, limit: int) -> None:
        """Warn, once per scope, that a view could not be held to the budget."""
        if tokens <= limit:
            return
        with self._lock:
            if self.session.ledger.warned_over_budget:
                return
            self.session.ledger.warned_over_budget = True
        logger.warning(
            "the model view of scope %r is %d tokens, over its budget of %d: the system"
            " messages and the newest input alone exceed it; the request is sent over budget"
            " (ModelView.over_budget; warned once per scope)",
            self.scope.name,
            tokens,
            limit,
        )

    def _window(self, rest: list[Message], room: int, framing: ChatFraming) -> list[Message]:
        """The newest groups of ``rest`` within ``window_share`` of ``room``; the newest always."""
        groups = [[rest[i] for i in g] for g in tool_groups(rest)]
        limit = int(max(0, room) * self.settings.window_share)
        kept: list[list[Message]] = []
        used = 0
        for group in reversed(groups):
            cost = framing.group_tokens(group)
            if kept and used + cost > limit:
                break
            kept.insert(0, group)
            used += cost
        return [m for group in kept for m in group]

    def _fill(
        self,
        query: str | None,
        room: int,
        shown: list[Message],
        *,
        summary: bool,
        held: Sequence[Message] = (),
    ) -> list[SourcePart]:
        """Ask the sources in order for what is left of the memory message's room."""
        tokens = self.memory.tokens
        room -= PER_MESSAGE + 1  # the memory message's own framing and role
        if room < _MIN_MEMORY:
            return []
        ids = {str(m["id"]) for m in shown if m.get("id") is not None}
        with self._lock:
            iris = ids | {self._recorded[i] for i in ids if i in self._recorded}
        seen = frozenset(" ".join(message_text(m).split()) for m in shown)
        copies = node_copies([*shown, *held])  # what this request holds of shared nodes
        caps = {L1_SOURCE: int(room * self.settings.summary_share) if summary else 0}
        parts: list[SourcePart] = []
        left = room
        for source in self.sources:
            separator = tokens.count(_SEPARATOR) if parts else 0
            ask = min(left - separator, caps.get(source.name, left))
            if ask < 1:
                continue
            part = source.fill(SourceRequest(query, ask, frozenset(iris), seen, copies))
            iris |= set(part.hides)
            if not part.text:
                continue
            parts.append(part)
            iris |= set(part.iris)
            left -= part.tokens + separator
        return _exact(parts, room, tokens)

    def _place(self, system: list[Message], kept: list[Message], text: str) -> list[Message]:
        """The view's messages with the memory message where ``placement`` puts it."""
        if not text:
            return [*system, *kept]
        if self.settings.placement == "system":
            return [*system, {"role": "system", "content": text, "memory": True}, *kept]
        newest = next((i for i in range(len(kept) - 1, -1, -1) if _is_turn(kept[i])), len(kept))
        note = {"role": "user", "content": text, "memory": True}
        return [*system, *kept[:newest], note, *kept[newest:]]


def _cut(
    shown: list[Message], room: int, framing: ChatFraming
) -> tuple[list[Message], dict[int, Message]]:
    """Cut the largest contents of ``shown`` until it fits ``room``, each to no less than
    ``_MIN_CUT`` tokens; return the messages and the cut copies by ``id`` of their original.

    Only string contents of non-system messages are cut; a cut one keeps its head, ends with
    ``CUT_NOTE`` and is marked ``"cut": True`` (an adapter sends its content, not the
    original's).
    """
    over = framing.group_tokens(shown) - room
    cuts: dict[int, Message] = {}
    if over <= 0:
        return shown, cuts
    count = framing.tokens.count
    sizes = [
        (count(m["content"]), i)
        for i, m in enumerate(shown)
        if isinstance(m.get("content"), str) and m["role"] != "system"
    ]
    for size, index in sorted(sizes, reverse=True):
        if over <= 0 or size <= _MIN_CUT:
            break
        message = shown[index]
        copy = _cut_message(message, size, over, framing)
        over -= framing.message_tokens(message) - framing.message_tokens(copy)
        cuts[id(message)] = copy
    return [cuts.get(id(m), m) for m in shown], cuts


def _cut_message(message: Message, size: int, over: int, framing: ChatFraming) -> Message:
    """A copy of ``message`` (content ``size`` tokens) at least ``over`` tokens smaller, or cut
    to ``_MIN_CUT`` tokens of its content and the note."""
    tokens = framing.tokens
    before = framing.message_tokens(message)
    keep = max(_MIN_CUT, size - over - tokens.count(CUT_NOTE.format(left=size)))
    while True:
        # A prefix of keep tokens lies within keep * 32 characters: no need to encode it all.
        head = tokens.truncate(message["content"][: keep * 32], keep)
        left = size - tokens.count(head)
        copy = {**message, "content": head + CUT_NOTE.format(left=left), "cut": True}
        short = over - (before - framing.message_tokens(copy))  # > 0: not cut enough yet
        if short <= 0 or keep == _MIN_CUT:
            return copy
        keep = max(_MIN_CUT, keep - short)


def _exact(parts: list[SourcePart], room: int, tokens: TokenCounter) -> list[SourcePart]:
    """Cut the last parts until the joined text is within ``room`` (joins can merge tokens)."""
    while parts and tokens.count(_SEPARATOR.join(p.text for p in parts)) > room:
        last = parts.pop()
        text = tokens.truncate(last.text, max(0, last.tokens - 2))
        if text.strip():
            parts.append(
                SourcePart(last.source, text, tokens.count(text), last.iris, last.hits, last.hides)
            )
    return parts


def _is_turn(message: Message) -> bool:
    """Whether a message is a user turn (not a delivered supplementary input)."""
    return message["role"] == "user" and not message.get("supplement")


def _not_archived(message: Message) -> bool:
    """System messages, delivered supplements and the memory message are never archived."""
    return message["role"] == "system" or bool(message.get("supplement") or message.get("memory"))


def _fresh(source: ContextSource) -> ContextSource:
    """The source for another scope: ``source.fresh()`` when it keeps per-agent state."""
    fresh = getattr(source, "fresh", None)
    return source if fresh is None else cast(ContextSource, fresh())


def _check_sources(sources: object) -> tuple[ContextSource, ...]:
    if isinstance(sources, (str, bytes)) or not isinstance(sources, Sequence):
        raise InvalidInputError(f"extra_sources must be a list of sources, got {preview(sources)}")
    for source in sources:
        if not isinstance(source, ContextSource):
            raise InvalidInputError(f"not a ContextSource: {preview(source)}")
    return tuple(sources)


def _scope_of(task_iri: object, scope: object) -> Scope:
    """The conversation's scope: ``scope``, or the task's; they must agree when both are given."""
    if scope is None:
        if not isinstance(task_iri, str):
            raise InvalidInputError(f"task_iri must be a string, got {preview(task_iri)}")
        return Scope.of_task(task_iri)
    if not isinstance(scope, Scope):
        raise InvalidInputError(f"scope must be a Scope or None, got {preview(scope)}")
    if task_iri is not None and task_iri != scope.task_iri:
        raise InvalidInputError(
            f"task_iri {preview(task_iri)} is not the task of scope {scope.name!r}"
            f" ({scope.task_iri!r})"
        )
    return scope
