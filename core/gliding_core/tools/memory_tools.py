"""Tools: the memory tools an agent calls itself, search memory and save memory, in one scope.

Both adapters' tools (LangChain's ``create_search_memory_tool`` / ``create_save_memory_tool``,
LlamaIndex's ``MemoryToolSpec``) call these functions, following the convention LangMem set
with ``create_search_memory_tool`` and ``create_manage_memory_tool``: the model saves a memory
(``create``), rewrites one it found (``update`` with its id) or forgets one (``delete``), and
searches what it saved.

A saved memory is an L0 node of type ``AgentMemory`` (``{"@type": "AgentMemory", "text":
...}``) tagged with its scope's tag and ``agent-memory``; a search reads through
``reader_filters``, so it finds the scope's memories and knowledge and the shared graphs, never
another scope's entries, a chat turn or a supplementary input. A refusal the model can act on
(an id that is not one of its memories, empty content) is a ``GlidingError`` whose message
says what to do; ``refusal_message`` is the text a tool returns to the model for it.

Invariants: a tool never reads or changes an entry outside its scope; an update or delete
names an entry of the scope's own memories, else nothing is written; results are JSON-ready.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

from gliding_core.errors import EntryNotFoundError, GlidingError, InvalidInputError
from gliding_core.jsonld import preview
from gliding_core.memory import Memory
from gliding_core.store.retrieval import DEFAULT_K, check_k, knowledge_filters
from gliding_core.store.scope import Scope, Shared, reader_filters
from gliding_core.view.memory_sources import entry_text

MEMORY_TYPE = "AgentMemory"  # the JSON-LD type of a memory an agent saved
MEMORY_TAG = "agent-memory"
MAX_K = 50  # the most results one search may ask for: a tool result goes into the context

Action = Literal["create", "update", "delete"]
ACTIONS: tuple[Action, ...] = ("create", "update", "delete")

SEARCH_DESCRIPTION = (
    "Search your long-term memory for facts, preferences and decisions saved earlier. "
    "Give a query in natural language; each result has an id (to update or delete it), "
    "its content and a relevance score."
)
SAVE_DESCRIPTION = (
    "Save, update or delete one memory in your long-term memory. Save what the user would "
    "want remembered later (preferences, facts about them, decisions). To change a memory, "
    "search for it first and pass its id with action 'update' and the new content; to forget "
    "it, pass its id with action 'delete'."
)


def search_memory(
    memory: Memory,
    scope: Scope,
    query: str,
    *,
    limit: int = DEFAULT_K,
    shared: Sequence[Shared] = (),
) -> list[dict[str, Any]]:
    """Return the memories and knowledge of ``scope`` that match ``query``, best first.

    Args:
        memory: the memory to search.
        scope: whose entries to read.
        query: what to look for, in natural language.
        limit: how many results at most (1 to ``MAX_K``).
        shared: graph IRIs or scopes this reader reads as well.

    Raises:
        InvalidInputError: a bad argument (the message names it).
    """
    _check_memory(memory, scope)
    if not isinstance(query, str) or not query.strip():
        raise InvalidInputError(f"query must be a non-empty string, got {preview(query)}")
    if check_k(limit, "limit") > MAX_K:
        raise InvalidInputError(f"limit must be at most {MAX_K}, got {limit}")
    readable = reader_filters(scope, shared, base=knowledge_filters())
    hits = memory.search(query, limit, filters=readable)
    return [
        {"id": hit.entry.iri, "content": entry_text(hit.entry), "score": round(hit.score, 4)}
        for hit in hits
    ]


def save_memory(
    memory: Memory,
    scope: Scope,
    content: str | None = None,
    *,
    action: Action = "create",
    memory_id: str | None = None,
) -> dict[str, str]:
    """Create, update or delete one memory of ``scope``; return what was done.

    Args:
        memory: the memory to write.
        scope: whose memory it is (its tag goes on the entry).
        content: the memory's text (for ``create`` and ``update``).
        action: ``create``, ``update`` or ``delete``.
        memory_id: the id of the memory to update or delete (a search result's ``id``).

    Returns:
        ``{"action": ..., "id": ...}``.

    Raises:
        InvalidInputError: a bad argument, or an id given to ``create`` (the message names it).
        EntryNotFoundError: ``memory_id`` is not one of the scope's memories.
    """
    _check_memory(memory, scope)
    if action not in ACTIONS:
        raise InvalidInputError(f"action must be one of {ACTIONS}, got {preview(action)}")
    if action == "create" and memory_id is not None:
        raise InvalidInputError(
            f"action 'create' takes no id (got {preview(memory_id)}); use 'update' to change it"
        )
    if action != "delete":
        content = _check_content(content)
    if action == "create":
        iri = memory.store.put({"@type": MEMORY_TYPE, "text": content}, tags=_tags(scope))
        return {"action": "created", "id": iri}
    iri = _own_memory(memory, scope, memory_id)
    if action == "delete":
        memory.store.delete(iri)
        return {"action": "deleted", "id": iri}
    # A put merges into the stored node (values accumulate); an update replaces the text, so
    # the old entry goes and the new one takes its IRI, in one transaction.
    with memory.store.transaction():
        memory.store.delete(iri)
        memory.store.put({"@id": iri, "@type": MEMORY_TYPE, "text": content}, tags=_tags(scope))
    return {"action": "updated", "id": iri}


def refusal_message(error: GlidingError) -> str:
    """Return the text a tool gives the model for a refusal: what went wrong, what to do."""
    return f"Error: {error}"


def _tags(scope: Scope) -> list[str]:
    return [scope.tag, MEMORY_TAG]


def _check_memory(memory: object, scope: object) -> None:
    if not isinstance(memory, Memory):
        raise InvalidInputError(f"memory must be a gliding Memory, got {preview(memory)}")
    if not isinstance(scope, Scope):
        raise InvalidInputError(f"scope must be a Scope, got {preview(scope)}")


def _check_content(content: object) -> str:
    if not isinstance(content, str) or not content.strip():
        raise InvalidInputError(
            f"content must be the memory's text (a non-empty string), got {preview(content)}"
        )
    return content


def _own_memory(memory: Memory, scope: Scope, memory_id: object) -> str:
    if not isinstance(memory_id, str) or not memory_id.strip():
        raise InvalidInputError(
            f"this action needs the id of a memory (from a search), got {preview(memory_id)}"
        )
    entry = memory.store.get(memory_id)
    if entry is None or scope.tag not in entry.tags or MEMORY_TYPE not in entry.jsonld_types:
        raise EntryNotFoundError(
            f"no memory of yours has the id {memory_id!r}; search your memory for its id"
        )
    return entry.iri
