"""A LangChain retriever over the memory's hybrid search (lexical, dense, re-ranked).

Each hit becomes a ``Document`` whose ``page_content`` is the entry's text and whose metadata
says where it lives (IRI, named graph, tags, types) and why it ranked (fused score, each arm's
rank). As langchain-chroma's retriever: ``search_kwargs`` (``k``, ``filter``) set the defaults,
a call's keyword arguments (``invoke(query, k=2, filter={...})``) override them, and ``filter``
is a metadata dict (``{"tags": "decision"}``, ``$and``/``$or``, ``$in``, ``$gte``...; see
``gliding_core.store.retrieval``) or ``SearchFilters``.

Invariants: a retriever reads its scope (``gliding_core.store.scope``) and the graphs or scopes it
shares, never another scope's entries; one without a scope reads only the entries of no scope;
none returns a supplementary input; chat turns are left out unless ``include_turns`` is set.
The async path runs the search in a worker thread: the event loop never waits on SQLite.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

from langchain_core.callbacks import (
    AsyncCallbackManagerForRetrieverRun,
    CallbackManagerForRetrieverRun,
)
from langchain_core.documents import Document
from langchain_core.retrievers import BaseRetriever
from pydantic import ConfigDict, Field, field_validator

from gliding_core import InvalidInputError, Memory, SearchFilters, SearchHit, entry_text
from gliding_core.jsonld import preview
from gliding_core.store.retrieval import (
    DEFAULT_K,
    check_k,
    combine,
    filters_from_dict,
    knowledge_filters,
)
from gliding_core.store.scope import Scope, reader_filters

# What search_kwargs and a call may set; "top_k" is taken as "k", "filters" as "filter".
_OPTIONS = frozenset({"k", "top_k", "filter", "filters", "include_turns", "scope"})


class GlidingRetriever(BaseRetriever):
    """Retrieve L0 entries for a query with the memory's hybrid search.

    Args:
        memory: the memory to search.
        k: how many documents to return (``gliding_core.store.retrieval.DEFAULT_K`` by default).
        filters: structured filters: ``SearchFilters`` or a metadata dict.
        search_kwargs: defaults for every call, as langchain-chroma takes them: ``k`` (or
            ``top_k``), ``filter``, ``include_turns``; they override the fields above.
        include_turns: also return chat turns (by default only knowledge entries).
        scope: whose entries to read (``Scope.user("alice")``); without one, only the entries
            of no scope.
        shared: named graph IRIs or scopes to read as well (a knowledge graph all users read).

    Example:
        >>> retriever = GlidingRetriever(memory=memory, search_kwargs={"k": 5})
        >>> docs = retriever.invoke("what did we decide about the database?")  # doctest: +SKIP
        >>> docs = retriever.invoke("decisions", k=2, filter={"tags": "decision"})  # doctest: +SKIP
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

    memory: Memory
    k: int = DEFAULT_K
    filters: SearchFilters | dict[str, Any] | None = None
    search_kwargs: dict[str, Any] = Field(default_factory=dict)
    include_turns: bool = False
    scope: Scope | None = None
    shared: tuple[str | Scope, ...] = ()

    @field_validator("k")
    @classmethod
    def _check_k(cls, value: int) -> int:
        return check_k(value)

    def __init__(self, **data: Any) -> None:
        # Typed errors naming the bad value, before pydantic wraps them in its own.
        memory = data.get("memory")
        if not isinstance(memory, Memory):
            raise InvalidInputError(f"memory must be a gliding Memory, got {memory!r:.80}")
        check_k(data.get("k", DEFAULT_K))
        options = data.get("search_kwargs") or {}
        if not isinstance(options, Mapping):
            raise InvalidInputError(f"search_kwargs must be a dict, got {preview(options)}")
        resolved = _resolve({"filter": data.get("filters")}, dict(options))
        reader_filters(data.get("scope"), data.get("shared", ()), base=resolved.get("filter"))
        super().__init__(**data)

    def _get_relevant_documents(
        self, query: str, *, run_manager: CallbackManagerForRetrieverRun, **options: Any
    ) -> list[Document]:
        return self._search(query, options)

    async def _aget_relevant_documents(
        self, query: str, *, run_manager: AsyncCallbackManagerForRetrieverRun, **options: Any
    ) -> list[Document]:
        return await asyncio.to_thread(self._search, query, options)

    def _search(self, query: str, options: dict[str, Any]) -> list[Document]:
        base = {"k": self.k, "filter": self.filters, "include_turns": self.include_turns}
        settings = _resolve(_resolve(base, self.search_kwargs), options)
        readable = reader_filters(
            settings.get("scope") or self.scope,
            self.shared,
            base=combine(
                settings.get("filter"),
                knowledge_filters(include_turns=bool(settings["include_turns"])),
            ),
        )
        hits = self.memory.search(query, settings["k"], filters=readable)
        return [to_document(hit) for hit in hits]


def _resolve(base: dict[str, Any], options: Mapping[str, Any]) -> dict[str, Any]:
    """Return ``base`` updated by ``options`` (set values only), checked and normalised."""
    unknown = sorted(set(options) - _OPTIONS)
    if unknown:
        raise InvalidInputError(
            f"unknown retriever option {unknown[0]!r}; options are {', '.join(sorted(_OPTIONS))}"
        )
    out = dict(base)
    for name, value in options.items():
        if value is not None:
            out[{"top_k": "k", "filters": "filter"}.get(name, name)] = value
    if "k" in out:
        out["k"] = check_k(out["k"])
    if out.get("filter") is not None and not isinstance(out["filter"], SearchFilters):
        out["filter"] = filters_from_dict(out["filter"])
    if "include_turns" in out and not isinstance(out["include_turns"], bool):
        raise InvalidInputError(
            f"include_turns must be a bool, got {preview(out['include_turns'])}"
        )
    scope = out.get("scope")
    if scope is not None and not isinstance(scope, Scope):
        raise InvalidInputError(f"scope must be a Scope or None, got {preview(scope)}")
    return out


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
