"""Adapter: ``GlidingMemoryBlock``, long-term memory for LlamaIndex's stock ``Memory``.

The stock ``Memory`` keeps the newest messages itself and flushes the oldest into its memory
blocks; this block archives what is flushed into L0 and the L1 session, and returns, for the
latest user message, the supplementary inputs put for the task, then the session's L1 context
and the hybrid recall from L0 (the memory message of ``Conversation.view``).

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

from gliding_core.conversation import Conversation
from gliding_core.errors import InvalidInputError
from gliding_core.filters import SearchFilters
from gliding_core.jsonld import preview
from gliding_core.memory import Memory
from gliding_core.scope import Shared, resolve_scope
from gliding_llamaindex.messages import check_messages, last_user_text, to_record

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

    _conversation: Conversation = PrivateAttr()
    _recent: list[list[Any]] = PrivateAttr(default_factory=list)  # [input, gets left to show]
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
        budget: int | None = None,
        agent: str = "agent",
        role: str = "SA",
        recall_k: int = 5,
        recall_filters: SearchFilters | None = None,
        **data: Any,
    ) -> GlidingMemoryBlock:
        """Build a block for ``agent``; ``budget`` bounds the recall text.

        The block's scope is ``user_id``'s when given, else the session's (``session_id``, the
        stock ``Memory``'s key), else ``task_iri``'s (see ``gliding_core.scope``).

        Raises:
            InvalidInputError: ``memory`` is not a ``Memory``, nothing names a scope; and what
                ``Conversation`` rejects.
        """
        scope = resolve_scope(user_id=user_id, thread_id=session_id, default=task_iri)
        conversation = Conversation(
            memory,
            scope=scope,
            shared=shared,
            agent=agent,
            role=role,
            budget=budget,
            recall_k=recall_k,
            recall_filters=recall_filters,
        )
        return cls(conversation, **data)

    @property
    def conversation(self) -> Conversation:
        """The conversation this block reads and archives into."""
        return self._conversation

    async def _aget(self, messages: list[ChatMessage] | None = None, **block_kwargs: Any) -> str:
        """Return the recall for the latest user message, then the new supplementary inputs."""
        query = last_user_text(check_messages(messages or []))
        return await asyncio.to_thread(self._text, query)

    async def _aput(self, messages: list[ChatMessage]) -> None:
        """Archive the flushed ``messages`` into L0 and the L1 session."""
        records = [to_record(m) for m in check_messages(messages)]
        await asyncio.to_thread(self._conversation.record, records)

    async def atruncate(self, content: str, tokens_to_truncate: int) -> str | None:
        """Cut ``tokens_to_truncate`` tokens from the end of ``content``; ``None`` when all go."""
        tokens = self._conversation.memory.tokens
        keep = tokens.count(content) - tokens_to_truncate
        return tokens.truncate(content, keep) if keep > 0 else None

    def _text(self, query: str | None) -> str:
        with self._lock:
            fresh = [[item, SHOWN_FOR] for item in self._conversation.deliver()]
            self._recent = [entry for entry in self._recent if entry[1] > 0] + fresh
            supplements = []
            for entry in self._recent:
                supplements.append(entry[0])
                entry[1] -= 1
        # Given as supplements, the inputs are left out of the L1 context and the recall.
        view = self._conversation.view([], query=query, supplements=supplements, summary=True)
        parts = []
        if supplements:  # first: a truncation of the block cuts the recall before them
            lines = [f"- {' '.join(item.content.split())}" for item in supplements]
            parts.append("\n".join([SUPPLEMENT_HEADER, *lines]))
        if view.memory:
            parts.append(view.memory)
        return "\n\n".join(parts)
