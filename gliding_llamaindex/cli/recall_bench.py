"""Adapter: LlamaIndex's stock ``Memory`` and ``VectorMemoryBlock`` as a ``bench locomo`` method.

Registered under the entry-point group ``gliding_horse.recall_methods`` as ``llamaindex-memory``.
One ``Memory.from_defaults(token_limit=B)`` per budget B, each fed every turn with ``put`` as a
user ``ChatMessage`` whose text is the turn's line (``[date] speaker: text``). Flushing moves
the oldest turns into a ``VectorMemoryBlock`` that embeds with the memory's own embedder
(``GlidingEmbedding``). For a question, ``memory.get(input=question)`` gives the messages a
model would see: the retrieved turns in the system message, then the recent turns.

``SimpleVectorStore`` keeps only vectors (``stores_text`` is False, which ``VectorMemoryBlock``
refuses), so a private subclass also keeps the nodes and returns them with the query result;
the search itself is ``SimpleVectorStore``'s.

Settings, LlamaIndex's defaults except where noted: ``chat_history_token_ratio`` 0.7,
``similarity_top_k`` 2, ``retrieval_context_window`` 5, block ``priority`` 0 (never truncated,
so the context can pass the limit by part of the retrieved block); the token counter is the
memory's exact cl100k count; ``token_flush_size`` is 10% of the limit (the ratio of LlamaIndex's
own defaults, 3,000 of 30,000: ``from_defaults`` keeps 3,000 absolute and clips it to 70% of a
smaller limit, which would flush the whole chat history into one node per flush).
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from llama_index.core.base.llms.types import ChatMessage, MessageRole, TextBlock
from llama_index.core.bridge.pydantic import PrivateAttr
from llama_index.core.memory import Memory, VectorMemoryBlock
from llama_index.core.schema import BaseNode
from llama_index.core.vector_stores import SimpleVectorStore
from llama_index.core.vector_stores.types import VectorStoreQuery, VectorStoreQueryResult
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from gliding_core.cli.benchmarks.conversations import Turn
from gliding_core.hyperspace.embedders import Embedder
from gliding_core.tokens import TokenCounter
from gliding_llamaindex.embeddings import GlidingEmbedding

FLUSH_RATIO = 0.1


class _TextVectorStore(SimpleVectorStore):
    """``SimpleVectorStore`` that also keeps its nodes, so query results carry their text."""

    stores_text: bool = True
    _nodes: dict[str, BaseNode] = PrivateAttr(default_factory=dict)

    def add(self, nodes: Sequence[BaseNode], **add_kwargs: Any) -> list[str]:
        self._nodes.update((node.node_id, node) for node in nodes)
        return super().add(nodes, **add_kwargs)

    def query(self, query: VectorStoreQuery, **kwargs: Any) -> VectorStoreQueryResult:
        result = super().query(query, **kwargs)
        result.nodes = [self._nodes[node_id] for node_id in result.ids or []]
        return result


class VectorMemoryMethod:
    """LlamaIndex ``Memory`` (FIFO chat history + vector block), one per budget.

    Args:
        turns: the conversation, oldest first.
        tokens: the counter LlamaIndex counts with.
        embedder: the memory's embedder, wrapped as a LlamaIndex ``BaseEmbedding``.
        budgets: the token limits, one ``Memory`` each.
    """

    def __init__(
        self,
        turns: Sequence[Turn],
        *,
        tokens: TokenCounter,
        embedder: Embedder,
        budgets: Sequence[int],
    ) -> None:
        embed_model = GlidingEmbedding(embedder)
        # One private event loop runs every LlamaIndex call: the sync API would otherwise make
        # (and leave open) a loop of the calling thread's.
        self._loop = asyncio.new_event_loop()
        # Memory's default chat store is SQLite in memory; own its engine so close() can dispose.
        self._engines: list[AsyncEngine] = []
        self._memories: dict[int, Memory] = {}
        for budget in budgets:
            self._engines.append(create_async_engine("sqlite+aiosqlite:///:memory:"))
            self._memories[budget] = _memory(
                budget, tokens=tokens, embed_model=embed_model, engine=self._engines[-1]
            )
        for memory in self._memories.values():
            for turn in turns:
                message = ChatMessage(role=MessageRole.USER, content=turn.line)
                self._loop.run_until_complete(memory.aput(message))

    def context(self, question: str, budget: int) -> list[str]:
        """Return the texts of the messages ``memory.get(input=question)`` gives at ``budget``."""
        messages = self._loop.run_until_complete(self._memories[budget].aget(input=question))
        return ["".join(_texts(message)) for message in messages]

    def close(self) -> None:
        """Dispose of the chat stores' database engines and close the event loop."""
        if self._loop.is_closed():
            return
        for engine in self._engines:
            self._loop.run_until_complete(engine.dispose())
        self._engines.clear()
        self._loop.close()


def _memory(
    budget: int, *, tokens: TokenCounter, embed_model: GlidingEmbedding, engine: AsyncEngine
) -> Memory:
    block = VectorMemoryBlock(vector_store=_TextVectorStore(), embed_model=embed_model)
    return Memory.from_defaults(
        token_limit=budget,
        token_flush_size=max(1, int(budget * FLUSH_RATIO)),
        memory_blocks=[block],
        # LlamaIndex counts len(tokenizer_fn(text)): hand it one item per exact cl100k token.
        tokenizer_fn=lambda text: [0] * tokens.count(text),
        async_engine=engine,
    )


def _texts(message: ChatMessage) -> list[str]:
    return [block.text for block in message.blocks if isinstance(block, TextBlock)]
