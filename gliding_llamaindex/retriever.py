"""Adapter: ``GlidingRetriever``, LlamaIndex retrieval over the hybrid search of L0.

Invariants: a retriever reads its scope (``gliding_core.scope``) and the graphs or scopes it
shares, never another scope's entries; one without a scope reads the entries of no scope; none
returns a supplementary input. One ``Memory.search`` per query; a node's id is its entry's
IRI, its text the entry's text (a turn's words, or the node's text values), its score the fused
hybrid score; the metadata holds what filters can select on, and is hidden from embedding and
from the LLM (``get_content`` is the entry's text alone).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from llama_index.core.base.base_retriever import BaseRetriever
from llama_index.core.callbacks import CallbackManager
from llama_index.core.schema import NodeWithScore, QueryBundle, TextNode

from gliding_core.conversation import entry_text
from gliding_core.entry import Entry
from gliding_core.errors import InvalidInputError
from gliding_core.filters import SearchFilters
from gliding_core.jsonld import preview
from gliding_core.memory import Memory
from gliding_core.scope import Scope, Shared, reader_filters


class GlidingRetriever(BaseRetriever):
    """Retrieve L0 entries as ``NodeWithScore``s, best first.

    Args:
        memory: the memory to search.
        k: how many nodes to return at most.
        filters: restrict the search (tags, types, named graph, importance, time).
        scope: whose entries to read (a user, a thread, a task); without one, only the entries
            of no scope.
        shared: named graph IRIs or scopes to read as well.
        callback_manager: LlamaIndex callbacks.
        verbose: LlamaIndex's verbose flag.

    Raises:
        InvalidInputError: ``memory`` is not a ``Memory``, ``k`` is not an int >= 1, or
            ``filters`` is not ``SearchFilters``.
    """

    def __init__(
        self,
        memory: Memory,
        *,
        k: int = 5,
        filters: SearchFilters | None = None,
        scope: Scope | None = None,
        shared: Sequence[Shared] = (),
        callback_manager: CallbackManager | None = None,
        verbose: bool = False,
    ) -> None:
        if not isinstance(memory, Memory):
            raise InvalidInputError(f"memory must be a gliding_core Memory, got {preview(memory)}")
        if isinstance(k, bool) or not isinstance(k, int) or k < 1:
            raise InvalidInputError(f"k must be an int >= 1, got {preview(k)}")
        if filters is not None and not isinstance(filters, SearchFilters):
            raise InvalidInputError(
                f"filters must be SearchFilters or None, got {preview(filters)}"
            )
        readable = reader_filters(scope, shared, base=filters)
        super().__init__(callback_manager=callback_manager, verbose=verbose)
        self.memory = memory
        self.k = k
        self.filters = filters
        self.scope = scope
        self._readable = readable

    def _retrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        hits = self.memory.search(query_bundle.query_str, self.k, filters=self._readable)
        return [NodeWithScore(node=to_node(hit.entry), score=hit.score) for hit in hits]


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
