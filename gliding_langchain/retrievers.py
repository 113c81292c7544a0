"""A LangChain retriever over the memory's hybrid search (lexical, dense, re-ranked).

Each hit becomes a ``Document`` whose ``page_content`` is the entry's text and whose metadata
says where it lives (IRI, named graph, tags, types) and why it ranked (fused score, each arm's
rank). ``k``, the structured filters and the scope may be set on the retriever or per call.

Invariants: a retriever reads its scope (``gliding_core.scope``) and the graphs or scopes it
shares, never another scope's entries; one without a scope reads only the entries of no scope;
none returns a supplementary input.
"""

from __future__ import annotations

import asyncio
from typing import Any

from langchain_core.callbacks import (
    AsyncCallbackManagerForRetrieverRun,
    CallbackManagerForRetrieverRun,
)
from langchain_core.documents import Document
from langchain_core.retrievers import BaseRetriever
from pydantic import ConfigDict, field_validator

from gliding_core import InvalidInputError, Memory, SearchFilters, SearchHit, entry_text
from gliding_core.scope import Scope, reader_filters


class GlidingRetriever(BaseRetriever):
    """Retrieve L0 entries for a query with the memory's hybrid search.

    Args:
        memory: the memory to search.
        k: how many documents to return.
        filters: structured filters (tags, types, named graph, importance, time).
        scope: whose entries to read (``Scope.user("alice")``); without one, only the entries
            of no scope.
        shared: named graph IRIs or scopes to read as well (a knowledge graph all users read).

    Example:
        >>> retriever = GlidingRetriever(memory=memory, k=5)
        >>> docs = retriever.invoke("what did we decide about the database?")  # doctest: +SKIP
        >>> docs = retriever.invoke("decisions", k=2, filters=SearchFilters(tags_any=("decision",)))
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

    memory: Memory
    k: int = 4
    filters: SearchFilters | None = None
    scope: Scope | None = None
    shared: tuple[str | Scope, ...] = ()

    @field_validator("k")
    @classmethod
    def _check_k(cls, value: int) -> int:
        if isinstance(value, bool) or value < 1:
            raise InvalidInputError(f"k must be an int >= 1, got {value!r}")
        return value

    def __init__(self, **data: Any) -> None:
        # Typed errors naming the bad value, before pydantic wraps them in its own.
        memory = data.get("memory")
        if not isinstance(memory, Memory):
            raise InvalidInputError(f"memory must be a gliding Memory, got {memory!r:.80}")
        reader_filters(data.get("scope"), data.get("shared", ()), base=data.get("filters"))
        super().__init__(**data)

    def _get_relevant_documents(
        self,
        query: str,
        *,
        run_manager: CallbackManagerForRetrieverRun,
        k: int | None = None,
        filters: SearchFilters | None = None,
        scope: Scope | None = None,
    ) -> list[Document]:
        return self._search(query, k, filters, scope)

    async def _aget_relevant_documents(
        self,
        query: str,
        *,
        run_manager: AsyncCallbackManagerForRetrieverRun,
        k: int | None = None,
        filters: SearchFilters | None = None,
        scope: Scope | None = None,
    ) -> list[Document]:
        return await asyncio.to_thread(self._search, query, k, filters, scope)

    def _search(
        self, query: str, k: int | None, filters: SearchFilters | None, scope: Scope | None
    ) -> list[Document]:
        readable = reader_filters(
            self.scope if scope is None else scope,
            self.shared,
            base=self.filters if filters is None else filters,
        )
        hits = self.memory.search(query, self.k if k is None else k, filters=readable)
        return [to_document(hit) for hit in hits]


def to_document(hit: SearchHit) -> Document:
    """Return the LangChain document of one search hit."""
    entry = hit.entry
    metadata: dict[str, Any] = {
        "iri": entry.iri,
        "score": hit.score,
        "named_graph": entry.named_graph,
        "tags": list(entry.tags),
        "types": list(entry.jsonld_types),
        "importance": entry.importance,
        "created_at": entry.created_at,
        "ranks": {arm: result.rank for arm, result in hit.arms.items()},
    }
    return Document(page_content=entry_text(entry), metadata=metadata, id=entry.iri)
