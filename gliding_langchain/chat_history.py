"""A chat message history on the gliding memory: the legacy path for ``RunnableWithMessageHistory``.

LangChain deprecated ``BaseChatMessageHistory`` in langchain-core 1.6.4; new agents should use
``GlidingMemoryMiddleware`` with ``create_agent``. This class serves chains that still use
``RunnableWithMessageHistory``. It never calls the deprecated base initialiser, so creating one
does not warn (``RunnableWithMessageHistory`` itself still warns when built).

Each message is one L0 entry in the chat's named graph (the whole message, so it comes back
exactly), and one turn of the chat's L1 session. With a ``budget``, ``messages`` returns the
budgeted view (the memory as a system message, then the newest messages that fit), which keeps
the prompts of a long chat small; ``all_messages`` always returns everything.

The chat's ``session_id`` is its scope, a thread (``gliding_core.scope``: the same scope as a
LangGraph run with that ``thread_id``): its messages and turns carry the scope's tag, recall
reads that scope only, and input for the chat is put for ``scope_task_iri(thread_id=session_id)``.

Invariants: ``clear`` hides the messages from the history but keeps them in L0 (nothing stored
is lost; recall still finds them); messages come back in the order they were added; no other
scope (and no reader without one) reads a chat's messages.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Sequence
from urllib.parse import quote

from langchain_core.chat_history import BaseChatMessageHistory
from langchain_core.messages import BaseMessage, SystemMessage, message_to_dict, messages_from_dict

from gliding_core import Conversation, InvalidInputError, Memory, Scope
from gliding_langchain.messages import to_record, to_records

CHAT_PREFIX = "urn:gliding:chat:"
ACTIVE = "chat:active"
CLEARED = "chat:cleared"


class GlidingChatMessageHistory(BaseChatMessageHistory):
    """The history of one chat, kept in L0 and summarised in L1.

    Args:
        memory: the memory to keep the chat in.
        session_id: the chat's id (any non-empty string).
        budget: when given, ``messages`` returns the budgeted view in this many tokens.

    Example:
        >>> chain = RunnableWithMessageHistory(
        ...     runnable, lambda sid: GlidingChatMessageHistory(memory, sid, budget=1500)
        ... )  # doctest: +SKIP
    """

    def __init__(self, memory: Memory, session_id: str, *, budget: int | None = None) -> None:
        if not isinstance(memory, Memory):
            raise InvalidInputError(f"memory must be a gliding Memory, got {memory!r:.80}")
        if not isinstance(session_id, str) or not session_id:
            raise InvalidInputError(f"session_id must be a non-empty string, got {session_id!r}")
        self.memory = memory
        self.session_id = session_id
        self.graph = CHAT_PREFIX + quote(session_id, safe="")
        self._tag = f"chat:{quote(session_id, safe='')}"
        self.conversation = Conversation(memory, scope=Scope.thread(session_id), budget=budget)
        self.budget = budget

    @property
    def all_messages(self) -> list[BaseMessage]:
        """Every message of the chat since the last ``clear``, oldest first."""
        entries = self.memory.store.by_tags([self._tag, ACTIVE])
        return messages_from_dict([json.loads(e.content)["message"] for e in entries])

    @property
    def messages(self) -> list[BaseMessage]:  # type: ignore[override]
        """The chat's messages: all of them, or the budgeted view when a budget is set."""
        history = self.all_messages
        if self.budget is None or not history:
            return history
        records = to_records(history)
        view = self.conversation.view(records)
        by_id = {r["id"]: m for r, m in zip(records, history, strict=True) if "id" in r}
        kept = [by_id[r["id"]] for r in view.messages if r.get("id") in by_id]
        return ([SystemMessage(content=view.memory)] if view.memory else []) + kept

    def add_messages(self, messages: Sequence[BaseMessage]) -> None:
        """Append ``messages``: one L0 transaction for all of them, then the L1 turns."""
        items = list(messages) if isinstance(messages, Sequence) else messages
        if not isinstance(items, list) or not all(isinstance(m, BaseMessage) for m in items):
            raise InvalidInputError(f"messages must be LangChain messages, got {messages!r:.80}")
        # A message keeps its id unless it has none, or another message (in this batch or
        # already in the chat) has it: then it gets a fresh one, so no message replaces another.
        taken = set(self.memory.store.contents([self._iri(m.id) for m in items if m.id]))
        stamped: list[BaseMessage] = []
        for message in items:
            if not message.id or self._iri(message.id) in taken:
                message = message.model_copy(update={"id": uuid.uuid4().hex})
            taken.add(self._iri(str(message.id)))
            stamped.append(message)
        nodes = [
            {
                "@id": self._iri(str(m.id)),
                "@type": "ChatMessage",
                "role": to_record(m)["role"],
                "text": m.text,
                "message": message_to_dict(m),
            }
            for m in stamped
        ]
        tags = [self._tag, ACTIVE, self.conversation.scope.tag]
        with self.memory.store.transaction():
            for node in nodes:
                self.memory.store.put(node, tags=tags, named_graph=self.graph)
        self.conversation.record(to_records(stamped))

    def _iri(self, message_id: str) -> str:
        return f"{self.graph}/message/{quote(message_id, safe='')}"

    def clear(self) -> None:
        """Hide every message from the history; L0 keeps them, tagged ``chat:cleared``."""
        with self.memory.store.transaction():
            for entry in self.memory.store.by_tags([self._tag, ACTIVE]):
                self.memory.store.retag(entry.iri, add=[CLEARED], remove=[ACTIVE])
