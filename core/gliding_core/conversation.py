"""Conversation: what an agent's model sees at each step, and what the memory keeps of it.

The framework adapters (LangChain middleware, LlamaIndex memory) translate their message objects
into plain records (``{"role", "content"}`` with OpenAI-style ``tool_calls`` / ``tool_call_id``,
an optional ``id``, and on delivered supplementary input ``supplement``: the input's IRI, or
``True`` when the ``id`` is that IRI) and call this
module; the behaviour they share lives here.

A model view, within one token budget, holds:
1. the leading system messages of the request, unchanged;
2. one memory message: the session's L1 context for the query (``summary_share`` of its room at
   most), then the hybrid recall from L0 for it, leaving out what the window already shows;
3. the whole history when it fits (the L1 context is then left out: it would only repeat it),
   else the newest messages that fit in ``window_share`` of the room (the newest group always),
   never separating a tool call from its results;
4. the delivered supplementary inputs, always.

A conversation belongs to one scope (``gliding_core.scope``: a user, a thread, or the task it was
built for): its turns carry the scope's tag, its session and supplementary inputs use the
scope's task IRI, and recall reads the scope's entries and the graphs shared explicitly, never
another scope's. Recall and the L1 context never quote a supplementary input (pending, consumed,
or the turn that archived a delivered one): the SQL filter of the search leaves them out, so an
input put while a view is built cannot slip in; the delivered message is the only place the
model sees it.

Invariants: the view's token count is exact for what is sent (cl100k chat framing, as
``ContextWindowManager.count``); the history is never modified, only viewed; each message is
archived once (by its ``id``); each supplementary input is shown as a new message exactly once.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from gliding_core.attention.supplementary import SupplementaryInput
from gliding_core.attention.window import PER_REPLY, _check_list, _check_message, _groups, _text
from gliding_core.entry import Entry
from gliding_core.errors import InvalidInputError
from gliding_core.filters import SearchFilters
from gliding_core.hyperspace.search import SearchHit
from gliding_core.jsonld import node_text, preview
from gliding_core.memory import Memory
from gliding_core.scope import Scope, Shared
from gliding_core.session import Session, Turn

Message = dict[str, Any]
RECALL_HEADER = "[Recalled from long-term memory]"
_MIN_RECALL_LINE = 12


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
    """

    messages: list[Message]
    tokens: int
    history_tokens: int
    memory: str = ""
    recall: list[SearchHit] = field(default_factory=list)
    supplements: list[SupplementaryInput] = field(default_factory=list)
    dropped: int = 0


class Conversation:
    """One agent's chat in one scope, bound to its L1 session and to L0.

    Args:
        memory: the memory to read and archive into.
        task_iri: the task; supplementary inputs are put for it. Give it or ``scope``.
        scope: the scope (user, thread or task) read and written; ``Scope.task(task_iri)``
            when omitted. Its ``task_iri`` is the conversation's task.
        shared: named graph IRIs or scopes that recall reads besides the scope's own entries.
        agent: the agent's name (one session per agent and task).
        role: the agent's role; picks the eviction policy preset.
        budget: the token budget of each model view; the session's budget when omitted.
        recall_k: how many L0 hits the memory message may quote.
        window_share: the share of the room (after system messages and supplements) that the
            newest history messages may take; the memory message gets the rest.
        recall_filters: restrict recall further (for instance to some tags); the scope's
            conditions always hold.
        summary_share: the share of the memory message's room the L1 context may take when part
            of the history is out of the window; recall gets the rest.

    Example:
        >>> with Memory() as memory:  # doctest: +SKIP
        ...     chat = Conversation(memory, "urn:task:1", budget=1000)
        ...     chat.record([{"role": "user", "content": "Plan the release", "id": "m1"}])
        ...     view = chat.view([{"role": "user", "content": "Plan the release", "id": "m1"}])
    """

    def __init__(
        self,
        memory: Memory,
        task_iri: str | None = None,
        *,
        scope: Scope | None = None,
        shared: Sequence[Shared] = (),
        agent: str = "agent",
        role: str = "SA",
        budget: int | None = None,
        recall_k: int = 5,
        window_share: float = 0.5,
        recall_filters: SearchFilters | None = None,
        summary_share: float = 0.5,
    ) -> None:
        if not isinstance(memory, Memory):
            raise InvalidInputError(f"memory must be a gliding_core Memory, got {preview(memory)}")
        self.scope = _scope_of(task_iri, scope)
        self.memory = memory
        self.session: Session = memory.session(self.scope.task_iri, agent=agent, role=role)
        self.budget = self.session.budget if budget is None else _check_int(budget, "budget", 1)
        self.recall_k = _check_int(recall_k, "recall_k", 0)
        self.window_share = _check_share(window_share, "window_share")
        self.summary_share = _check_share(summary_share, "summary_share")
        if recall_filters is not None and not isinstance(recall_filters, SearchFilters):
            raise InvalidInputError(
                f"recall_filters must be SearchFilters or None, got {preview(recall_filters)}"
            )
        self.recall_filters = recall_filters
        self.shared = tuple(shared) if isinstance(shared, (list, tuple)) else shared
        self._readable = self.scope.filters(self.shared, base=recall_filters)
        # Shared by every conversation on the session (one per agent and task in a memory):
        # a second adapter instance neither archives a message again nor re-shows an input.
        self._recorded = self.session.archived_messages  # message id -> L0 archive IRI
        self._shown = self.session.shown_inputs  # supplementary inputs shown as messages
        self._lock = self.session.lock

    @property
    def task_iri(self) -> str:
        """The task this conversation works on."""
        return self.session.task_iri

    def for_scope(self, scope: Scope) -> Conversation:
        """Return a conversation like this one (memory, agent, budget, shares) for ``scope``.

        Its state lives in the memory's session of that scope, so two conversations built for
        one scope share it. Returns ``self`` for this conversation's own scope.
        """
        if not isinstance(scope, Scope):
            raise InvalidInputError(f"scope must be a Scope, got {preview(scope)}")
        if scope == self.scope:
            return self
        return Conversation(
            self.memory,
            scope=scope,
            shared=self.shared,
            agent=self.session.agent,
            role=self.session.role,
            budget=self.budget,
            recall_k=self.recall_k,
            window_share=self.window_share,
            recall_filters=self.recall_filters,
            summary_share=self.summary_share,
        )

    # -- supplementary input -------------------------------------------------------------------

    def take_pending(self) -> list[SupplementaryInput]:
        """Move the task's pending supplementary inputs into the L1 session (a cycle start).

        Returns the inputs taken now. A callback handler calls this; ``deliver`` shows them.
        """
        return self.session.start_cycle(self.memory.supplements)

    def deliver(self) -> list[SupplementaryInput]:
        """Return the supplementary inputs to show the model as new user messages, once each.

        Takes the pending ones into the session first; inputs the session took earlier (by a
        callback handler at a cycle start) and not yet shown are included. Oldest first.
        """
        with self._lock:
            self.take_pending()
            taken = self.session.taken_inputs.items()
            fresh = [item for iri, (item, _) in taken if iri not in self._shown]
            self._shown.update(item.iri for item in fresh)
        return sorted(fresh, key=lambda item: item.created_at)

    # -- archiving -----------------------------------------------------------------------------

    def record(self, messages: Sequence[Mapping[str, Any]]) -> list[Turn]:
        """Archive the messages not archived before into L0 and the L1 session.

        A message is known by its ``id``; one without an ``id`` is archived every time it is
        passed. System messages, delivered supplements (already archived when taken) and
        messages without text are skipped. All messages are checked before any is archived.
        """
        items = [_check_message(m, i) for i, m in enumerate(_check_list(messages))]
        for index, item in enumerate(items):
            key = item.get("id")
            if key is not None and not isinstance(key, str):
                raise InvalidInputError(f"message {index} id must be a string, got {preview(key)}")
        turns = []
        with self._lock:
            for item in items:
                key = item.get("id")
                if item["role"] == "system" or item.get("supplement") or key in self._recorded:
                    continue
                text = _text(item).strip()
                if not text:
                    continue
                metadata = {"message_id": key} if key else None
                turn = self.session.add_turn(
                    item["role"], text, metadata=metadata, tags=[self.scope.tag]
                )
                turns.append(turn)
                if key is not None:
                    self._recorded[key] = turn.l0_archive_iri
        return turns

    def archived(self, message_id: str) -> str | None:
        """Return the L0 IRI a recorded message was archived under, or ``None``."""
        return self._recorded.get(message_id)

    # -- the model's view ----------------------------------------------------------------------

    def view(
        self,
        messages: Sequence[Mapping[str, Any]],
        *,
        query: str | None = None,
        supplements: Sequence[SupplementaryInput] = (),
        budget: int | None = None,
        summary: bool | None = None,
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
                ``supplement: True`` in the history are kept too.
        """
        items = [_check_message(m, i) for i, m in enumerate(_check_list(messages))]
        if query is not None and not isinstance(query, str):
            raise InvalidInputError(f"query must be a string or None, got {preview(query)}")
        extra = [
            {"role": "user", "content": s.content, "supplement": s.iri, "id": s.iri}
            for s in supplements
        ]
        window = self.memory.window()
        lead = 0
        while lead < len(items) and items[lead]["role"] == "system":
            lead += 1
        system, history = items[:lead], _after_tool_groups(items[lead:])
        pinned = [m for m in history if m.get("supplement")] + extra
        rest = [m for m in history if not m.get("supplement")]
        history_tokens = window.count(items + extra)
        query = query if query else (_last_user(rest) or _last_user(pinned))
        limit = self.budget if budget is None else _check_int(budget, "budget", 1)
        room = limit - window.count(system + pinned)
        whole = window.count(rest) - PER_REPLY <= room  # all of it fits: no summary needed
        kept = [rest] if whole else self._window(rest, room, window)
        shown = [m for k in kept for m in k]
        room -= sum(window.count([m]) - PER_REPLY for m in shown)
        with_summary = not whole if summary is None else bool(summary)
        memory_text, hits = self._memory_text(query, room, shown + pinned, summary=with_summary)
        out = list(system)
        if memory_text:
            out.append({"role": "system", "content": memory_text})
        visible = {id(m) for m in shown}
        out += [m for m in history if m.get("supplement") or id(m) in visible] + extra
        return ModelView(
            out,
            window.count(out),
            history_tokens,
            memory_text,
            hits,
            list(supplements),
            len(rest) - len(shown),
        )

    def _window(self, rest: list[Message], room: int, window: Any) -> list[list[Message]]:
        """The newest groups of ``rest`` within ``window_share`` of ``room``; the newest always."""
        groups = [[rest[i] for i in g] for g in _groups(rest)]
        limit = int(max(0, room) * self.window_share)
        kept: list[list[Message]] = []
        used = 0
        for group in reversed(groups):
            cost = window.count(group) - PER_REPLY
            if kept and used + cost > limit:
                break
            kept.insert(0, group)
            used += cost
        return kept

    def _memory_text(
        self, query: str | None, room: int, shown: list[Message], *, summary: bool
    ) -> tuple[str, list[SearchHit]]:
        """The memory message: the L1 context first (half the room at most) when part of the
        history is out of the window, then recall."""
        tokens = self.memory.tokens
        room -= 4  # the message's own framing and role
        if room < _MIN_RECALL_LINE:
            return "", []
        parts = []
        summarized: set[str] = set()
        if summary:
            ids = {str(m.get("id")) for m in shown}
            with self._lock:
                seen_turns = {self._recorded[i] for i in ids if i in self._recorded}
            with self._lock:  # a callback handler's start_cycle may be adding to it
                taken = dict(self.session.taken_inputs)
            # No input is quoted in the L1 context: the delivered message is where it is seen.
            seen_turns |= {turn for _, turn in taken.values()}
            seen_turns |= {t.l0_archive_iri for t in self.session.turns if t.is_supplement}
            share = int(room * self.summary_share)
            context = self.session.context(query, budget=max(1, share), exclude=seen_turns)
            summarized = {t.l0_archive_iri for t in context.main + context.low_relevance}
            l1 = context.text
            if tokens.count(l1) > share:
                l1 = tokens.truncate(l1, share)
            parts = [l1] if l1.strip() else []
        hits: list[SearchHit] = []
        if query and self.recall_k:
            visible = {self._recorded.get(str(m.get("id")), "") for m in shown}
            visible |= {str(m.get("id")) for m in shown} | summarized
            seen = {" ".join(_text(m).split()) for m in shown}
            lines: list[str] = []
            used = tokens.count("\n\n".join([*parts, RECALL_HEADER]))
            candidates = self.memory.search(query, self.recall_k * 2, filters=self._readable)
            for hit in candidates:
                if len(hits) >= self.recall_k:
                    break
                if hit.iri in visible or hit.entry.metadata.get("supplement") in visible:
                    continue
                node = json.loads(hit.entry.content)
                body = " ".join(_readable(node).split())
                if not body or body in seen:  # shown already, or a copy of a quoted hit
                    continue
                seen.add(body)
                role = node.get("role")  # a turn is quoted as "[role] text"
                text = f"[{role}] {body}" if isinstance(role, str) else body
                line = f"- {text}"
                cost = tokens.count(line) + 1
                if used + cost > room:
                    left = room - used - 1
                    if left < _MIN_RECALL_LINE:
                        break
                    line = tokens.truncate(line, left)
                    cost = tokens.count(line) + 1
                lines.append(line)
                hits.append(hit)
                used += cost
            if lines:
                parts.append("\n".join([RECALL_HEADER, *lines]))
        text = "\n\n".join(parts)
        while text and tokens.count(text) > room:  # joins can merge tokens; cut to be exact
            text = tokens.truncate(text, max(0, tokens.count(text) - 2))
        return text, hits


def _scope_of(task_iri: object, scope: object) -> Scope:
    """The conversation's scope: ``scope``, or the task's; they must agree when both are given."""
    if scope is None:
        if not isinstance(task_iri, str):
            raise InvalidInputError(f"task_iri must be a string, got {preview(task_iri)}")
        return Scope.task(task_iri)
    if not isinstance(scope, Scope):
        raise InvalidInputError(f"scope must be a Scope or None, got {preview(scope)}")
    if task_iri is not None and task_iri != scope.task_iri:
        raise InvalidInputError(
            f"task_iri {preview(task_iri)} is not the task of scope {scope.name!r}"
            f" ({scope.task_iri!r})"
        )
    return scope


def entry_text(entry: Entry) -> str:
    """The text of an entry as a reader wants it: its ``text`` property when it has one (a turn,
    a note), else every string and number value of the node, in key order."""
    return _readable(json.loads(entry.content))


def _readable(node: dict[str, Any]) -> str:
    text = node.get("text")
    return text if isinstance(text, str) else node_text(node)


def _after_tool_groups(messages: list[Message]) -> list[Message]:
    """Move each supplement that arrived inside a tool group (after a tool call, before all of
    its results) to just after the group: providers reject a user message there."""
    out: list[Message] = []
    held: list[Message] = []
    waiting: set[str] = set()
    for message in messages:
        if message.get("supplement"):
            (held if waiting else out).append(message)
            continue
        if message["role"] == "tool" and message.get("tool_call_id") in waiting:
            out.append(message)
            waiting.discard(message["tool_call_id"])
        else:  # any other message ends an open group (complete or not)
            out += held
            held = []
            out.append(message)
            calls = message.get("tool_calls") or []
            waiting = {
                c["id"] for c in calls if isinstance(c, Mapping) and isinstance(c.get("id"), str)
            }
        if not waiting:
            out += held
            held = []
    return out + held


def _last_user(messages: list[Message]) -> str | None:
    for message in reversed(messages):
        if message["role"] == "user":
            text = _text(message).strip()
            if text:
                return text
    return None


def _check_share(value: object, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= 1:
        raise InvalidInputError(f"{what} must be in [0, 1], got {preview(value)}")
    return float(value)


def _check_int(value: object, what: str, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise InvalidInputError(f"{what} must be an int >= {minimum}, got {preview(value)}")
    return value
