"""Adapter: ``GlidingMemoryBlock``, long-term memory for LlamaIndex's stock ``Memory``.

The stock ``Memory`` keeps the newest messages itself and flushes the oldest into its memory
blocks; this block archives what is flushed into L0 and the L1 session, and returns, for the
latest user message, the supplementary inputs put for the task, then the session's L1 context
and the hybrid recall from L0 (the memory message of ``Conversation.view``).

Scope (``gliding_core.store.scope``): a block built for a user, a session or a task reads and writes
that scope. With ``per_session=True`` one block serves every stock ``Memory`` it is given to:
each read and each flush uses the scope of the calling memory's ``session_id`` (a thread), so
one chat's recall never quotes another's.

Invariants: every flushed message with text is archived (each flush is new to the block); a
supplementary input is taken once and returned by the ``SHOWN_FOR`` reads that follow (an agent
may discard a read, as LlamaIndex's agents do after their final answer), first in the text so a
truncation cuts recall before it; the recall and L1 text is at most the conversation's budget in
tokens; ``atruncate`` cuts by exact tokens.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Sequence
from typing import Any

from llama_index.core.base.llms.types import ChatMessage
from llama_index.core.bridge.pydantic import Field, PrivateAttr
from llama_index.core.memory.memory import BaseMemoryBlock

from gliding_core.config import ConversationSettings, ViewOptions
from gliding_core.errors import InvalidInputError
from gliding_core.jsonld import preview
from gliding_core.memory import Memory
from gliding_core.store.filters import SearchFilters
from gliding_core.store.scope import Scope, Shared, resolve_scope
from gliding_core.view.conversation import Conversation
from gliding_llamaindex.memory import DEFAULT_TASK
from gliding_llamaindex.messages import Record, check_messages, last_user_text, to_record

SUPPLEMENT_HEADER = "[New input from the user while you were working]"
# An agent may throw a block's text away (LlamaIndex's agents read the memory again after their
# final answer): a delivered input is shown by this many reads, so the next request carries it.
SHOWN_FOR = 2


class GlidingMemoryBlock(BaseMemoryBlock[str]):
    """A ``BaseMemoryBlock`` over a gliding ``Conversation``.

    Args:
        conversation: the conversation (memory, task, agent, budget) to read and archive into.
        **data: the block's fields (``name``, ``description``, ``priority``,
            ``accept_short_term_memory``).

    Example:
        >>> block = GlidingMemoryBlock.from_memory(Memory(), "urn:task:1")  # doctest: +SKIP
        >>> chat = Memory.from_defaults(memory_blocks=[block])  # llama_index's  # doctest: +SKIP
    """

    name: str = Field(default="gliding_memory", description="The name of the memory block.")
    description: str | None = Field(
        default="Long-term memory: recalled turns and new input from the user.",
        description="A description of the memory block.",
    )

    per_session: bool = Field(
        default=False,
        description="Read and write the scope of each calling memory's session_id.",
    )

    _conversation: Conversation = PrivateAttr()
    # Per scope: [input, gets left to show] of the inputs shown lately.
    _recent: dict[Scope, list[list[Any]]] = PrivateAttr(default_factory=dict)
    _lock: threading.Lock = PrivateAttr(default_factory=threading.Lock)

    def __init__(self, conversation: Conversation, **data: Any) -> None:
        if not isinstance(conversation, Conversation):
            raise InvalidInputError(
                f"conversation must be a gliding_core Conversation, got {preview(conversation)}"
            )
        super().__init__(**data)
        self._conversation = conversation

    @classmethod
    def from_memory(
        cls,
        memory: Memory,
        task_iri: str | None = None,
        *,
        session_id: str | None = None,
        user_id: str | None = None,
        shared: Sequence[Shared] = (),
        recall_filters: SearchFilters | None = None,
        settings: ConversationSettings | None = None,
        per_session: bool = False,
        **data: Any,
    ) -> GlidingMemoryBlock:
        """Build a block; the ``budget`` of ``settings`` bounds the recall text.

        The block's scope is ``user_id``'s when given, else the session's (``session_id``, the
        stock ``Memory``'s key), else ``task_iri``'s (see ``gliding_core.store.scope``). With
        ``per_session`` the scope of each call is its memory's session instead (the one built
        here serves calls that name no session). Keyword arguments that are fields of
        ``ConversationSettings`` (``budget``, ``recall_k``, ``agent`` ...) replace them; the
        others are the block's fields (``name``, ``priority`` ...).

        Raises:
            InvalidInputError: ``memory`` is not a ``Memory``, nothing names a scope; and what
                ``Conversation`` rejects.
        """
        options = {k: data.pop(k) for k in list(data) if k in ViewOptions.__annotations__}
        default = task_iri if task_iri is not None or not per_session else DEFAULT_TASK
        scope = resolve_scope(user_id=user_id, thread_id=session_id, default=default)
        conversation = Conversation(
            memory,
            scope=scope,
            shared=shared,
            recall_filters=recall_filters,
            settings=ConversationSettings.of(settings, **options),
        )
        return cls(conversation, per_session=per_session, **data)

    @property
    def conversation(self) -> Conversation:
        """The conversation this block reads and archives into."""
        return self._conversation

    def conversation_for(self, session_id: object) -> Conversation:
        """Return the conversation a call of the memory ``session_id`` reads and writes."""
        if not self.per_session or session_id is None:
            return self._conversation
        if not isinstance(session_id, str):
            raise InvalidInputError(f"session_id must be a string, got {preview(session_id)}")
        return self._conversation.for_scope(Scope.thread(session_id))

    async def _aget(self, messages: list[ChatMessage] | None = None, **block_kwargs: Any) -> str:
        """Return the recall for the latest user message, then the new supplementary inputs."""
        query = last_user_text(check_messages(messages or []))
        chat = self.conversation_for(block_kwargs.get("session_id"))
        return await asyncio.to_thread(self._text, chat, query)

    async def _aput(self, messages: list[ChatMessage]) -> None:
        """Archive the flushed ``messages`` into L0 and the L1 session of their chat."""
        checked = check_messages(messages)
        by_chat: dict[Scope, tuple[Conversation, list[Record]]] = {}
        for message in checked:  # the stock Memory marks each flushed message with its session
            chat = self.conversation_for(message.additional_kwargs.get("session_id"))
            by_chat.setdefault(chat.scope, (chat, []))[1].append(to_record(message))
        for chat, records in by_chat.values():
            await asyncio.to_thread(chat.record, records)

    async def atruncate(self, content: str, tokens_to_truncate: int) -> str | None:
        """Cut ``tokens_to_truncate`` tokens from the end of ``content``; ``None`` when all go."""
        tokens = self._conversation.memory.tokens
        keep = tokens.count(content) - tokens_to_truncate
        return tokens.truncate(content, keep) if keep > 0 else None

    def _text(self, chat: Conversation, query: str | None) -> str:
        with self._lock:
            fresh = [[item, SHOWN_FOR] for item in chat.deliver()]
            recent = self._recent.pop(chat.scope, []) + fresh
            supplements = [entry[0] for entry in recent]
            left = [[item, shows - 1] for item, shows in recent if shows > 1]
            if left:  # a scope with nothing left to show keeps no entry
                self._recent[chat.scope] = left
        # Given as supplements, the inputs are left out of the L1 context and the recall.
        view = chat.view([], query=query, supplements=supplements, summary=True)
        parts = []
        if supplements:  # first: a truncation of the block cuts the recall before them
            lines = [f"- {' '.join(item.content.split())}" for item in supplements]
            parts.append("\n".join([SUPPLEMENT_HEADER, *lines]))
        if view.memory:
            parts.append(view.memory)
        return "\n\n".join(parts)
