"""Adapter: ``GlidingRetriever``, LlamaIndex retrieval over the hybrid search of L0.

As LlamaIndex's vector retrievers: ``similarity_top_k`` results and ``MetadataFilters``
(``ExactMatchFilter``, ``MetadataFilter`` with its operators, nested filters joined by ``and``
or ``or``) on the node metadata L0 filters on (``tags``, ``types``, ``named_graph``, ``importance``,
``created_at``; see ``gliding_core.store.retrieval``); ``SearchFilters`` are taken too.

Invariants: a retriever reads its scope (``gliding_core.store.scope``) and the graphs or scopes it
shares, never another scope's entries; one without a scope reads the entries of no scope; none
returns a supplementary input, and chat turns only with ``include_turns``. One
``Memory.search`` per query, in a worker thread for ``aretrieve`` (the event loop never waits on
SQLite); a node's id is its entry's IRI, its text the entry's text, its score the fused hybrid
score; the metadata holds what filters can select on, and is hidden from embedding and from the
LLM (``get_content`` is the entry's text alone).
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from llama_index.core.base.base_retriever import BaseRetriever
from llama_index.core.callbacks import CallbackManager
from llama_index.core.schema import NodeWithScore, QueryBundle, TextNode
from llama_index.core.vector_stores.types import (
    FilterCondition,
    FilterOperator,
    MetadataFilter,
    MetadataFilters,
)

from gliding_core.errors import InvalidInputError
from gliding_core.jsonld import preview
from gliding_core.memory import Memory
from gliding_core.store.entry import Entry
from gliding_core.store.filters import MAX_NESTING, SearchFilters
from gliding_core.store.retrieval import (
    DEFAULT_K,
    check_k,
    combine,
    filters_from_dict,
    knowledge_filters,
)
from gliding_core.store.scope import Scope, Shared, reader_filters
from gliding_core.view.conversation import entry_text

# LlamaIndex's operators in the dict form of gliding_core.store.retrieval ("any" is "any of").
_OPERATORS = {
    FilterOperator.EQ: "$eq",
    FilterOperator.NE: "$ne",
    FilterOperator.GT: "$gt",
    FilterOperator.GTE: "$gte",
    FilterOperator.LT: "$lt",
    FilterOperator.LTE: "$lte",
    FilterOperator.IN: "$in",
    FilterOperator.NIN: "$nin",
    FilterOperator.ANY: "$in",
    FilterOperator.ALL: "$all",
    FilterOperator.CONTAINS: "$contains",
}


class GlidingRetriever(BaseRetriever):
    """Retrieve L0 entries as ``NodeWithScore``s, best first.

    Args:
        memory: the memory to search.
        similarity_top_k: how many nodes to return at most
            (``gliding_core.store.retrieval.DEFAULT_K`` by default).
        k: the same, by the name the LangChain retriever gives it; it wins when both are given.
        filters: restrict the search: ``MetadataFilters`` or ``SearchFilters``.
        include_turns: also return chat turns (by default only knowledge entries).
        scope: whose entries to read (a user, a thread, a task); without one, only the entries
            of no scope.
        shared: named graph IRIs or scopes to read as well.
        callback_manager: LlamaIndex callbacks.
        verbose: LlamaIndex's verbose flag.

    Raises:
        InvalidInputError: ``memory`` is not a ``Memory``, ``similarity_top_k`` is not an
            int >= 1, or ``filters`` cannot be expressed as L0 filters.
    """

    def __init__(
        self,
        memory: Memory,
        *,
        similarity_top_k: int = DEFAULT_K,
        k: int | None = None,
        filters: MetadataFilters | SearchFilters | None = None,
        include_turns: bool = False,
        scope: Scope | None = None,
        shared: Sequence[Shared] = (),
        callback_manager: CallbackManager | None = None,
        verbose: bool = False,
    ) -> None:
        if not isinstance(memory, Memory):
            raise InvalidInputError(f"memory must be a gliding_core Memory, got {preview(memory)}")
        if k is not None:
            similarity_top_k = check_k(k)
        check_k(similarity_top_k, "similarity_top_k")
        if not isinstance(include_turns, bool):
            raise InvalidInputError(f"include_turns must be a bool, got {preview(include_turns)}")
        wanted = combine(to_search_filters(filters), knowledge_filters(include_turns=include_turns))
        readable = reader_filters(scope, shared, base=wanted)
        super().__init__(callback_manager=callback_manager, verbose=verbose)
        self.memory = memory
        self.similarity_top_k = similarity_top_k
        self.filters = filters
        self.scope = scope
        self._readable = readable

    def _retrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        hits = self.memory.search(
            query_bundle.query_str, self.similarity_top_k, filters=self._readable
        )
        return [NodeWithScore(node=to_node(hit.entry), score=hit.score) for hit in hits]

    async def _aretrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        return await asyncio.to_thread(self._retrieve, query_bundle)


def to_search_filters(filters: object) -> SearchFilters | None:
    """Return ``filters`` (``MetadataFilters``, ``SearchFilters`` or ``None``) as L0 filters.

    Raises:
        InvalidInputError: anything else, a ``not`` condition, or an operator, key or value
            L0 cannot filter on (the message names it).
    """
    if filters is None or isinstance(filters, SearchFilters):
        return filters
    if not isinstance(filters, MetadataFilters):
        raise InvalidInputError(
            f"filters must be MetadataFilters, SearchFilters or None, got {preview(filters)}"
        )
    return filters_from_dict(_as_dict(filters, 1))


def _as_dict(filters: MetadataFilters, level: int) -> dict[str, Any]:
    """Return ``MetadataFilters`` (``level`` deep, 1: the top) in the dict form
    ``filters_from_dict`` reads."""
    if filters.condition not in (FilterCondition.AND, FilterCondition.OR, None):
        raise InvalidInputError(
            f"filter condition {preview(filters.condition)} is not supported; use and / or"
        )
    if level > MAX_NESTING:  # refused before recursing, however deep it goes on
        raise InvalidInputError(f"filters nest more than {MAX_NESTING} levels deep")
    parts = [
        _as_dict(item, level + 1) if isinstance(item, MetadataFilters) else _one(item)
        for item in filters.filters
    ]
    if not parts:
        return {}
    joiner = "$or" if filters.condition == FilterCondition.OR else "$and"
    return {joiner: parts}


def _one(item: MetadataFilter) -> dict[str, Any]:
    operator = _OPERATORS.get(FilterOperator(item.operator))
    if operator is None:
        raise InvalidInputError(
            f"filter operator {item.operator.value!r} on {item.key!r} is not supported; "
            f"use one of {', '.join(op.value for op in _OPERATORS)}"
        )
    return {item.key: {operator: item.value}}


def to_node(entry: Entry) -> TextNode:
    """Return the ``TextNode`` of an L0 entry (see the module invariants)."""
    node = entry.node
    metadata: dict[str, Any] = {
        "iri": entry.iri,
        "tags": list(entry.tags),
        "named_graph": entry.named_graph,
        "types": list(entry.jsonld_types),
        "importance": entry.importance,
        "created_at": entry.created_at,
    }
    if isinstance(node.get("role"), str):
        metadata["role"] = node["role"]
    keys = list(metadata)
    return TextNode(
        id_=entry.iri,
        text=entry_text(entry),
        metadata=metadata,
        excluded_embed_metadata_keys=keys,
        excluded_llm_metadata_keys=keys,
    )
