"""LangChain tools an agent calls to manage its own long-term memory (search it, save to it).

As LangMem's ``create_search_memory_tool`` and ``create_manage_memory_tool``: give both to an
ordinary agent (``create_agent(model, tools=[search, save])``) and it keeps memories across
threads itself. Each tool calls ``gliding_core.tools.memory_tools``; a tool answers with JSON text.

The scope (``gliding_core.store.scope``) is the one the tool was built with; a tool built without
one resolves it on every call from the run's ``configurable`` (``user_id``, else ``thread_id``), so
one tool serves many users and none reads another's memories. The scope is never an argument
the model fills in.

Both tools are ``GuardedTool``s: the arguments are checked before LangChain reads them
(``gliding_core.tools.arguments``), so an extra name, a missing or mistyped argument, or a value
too large or too deep is refused before anything runs.

Invariants: every failure (a refusal such as an unknown id, empty content or no scope for the
run, a bad argument, or any other error) reaches the model as the tool's error message saying
what to do, never as an exception out of the run; the async path runs in a worker thread
(``BaseTool``'s default), so the event loop never waits on SQLite.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any, Literal, TypeVar

from langchain_core.runnables import RunnableConfig
from langchain_core.tools import ToolException
from pydantic import BaseModel, ConfigDict, Field

from gliding_core import InvalidInputError, Memory
from gliding_core.jsonld import preview
from gliding_core.store.retrieval import DEFAULT_K
from gliding_core.store.scope import Scope, reader_filters, resolve_scope
from gliding_core.tools.arguments import tool_refusal
from gliding_core.tools.memory_tools import (
    MAX_K,
    SAVE_DESCRIPTION,
    SEARCH_DESCRIPTION,
    refusal_message,
    save_memory,
    search_memory,
)
from gliding_langchain.tool_guard import GuardedTool

_T = TypeVar("_T")


class SearchMemoryInput(BaseModel):
    """The arguments the model gives the search-memory tool."""

    query: str = Field(description="What to look for, in natural language.")
    limit: int = Field(default=DEFAULT_K, ge=1, le=MAX_K, description="How many results.")


class SaveMemoryInput(BaseModel):
    """The arguments the model gives the save-memory tool."""

    content: str | None = Field(
        default=None, description="The memory's text (for 'create' and 'update')."
    )
    action: Literal["create", "update", "delete"] = Field(
        default="create", description="'create' a memory, 'update' or 'delete' one by its id."
    )
    id: str | None = Field(
        default=None, description="The id of the memory to update or delete (from a search)."
    )


class _ScopedMemoryTool(GuardedTool):
    """A tool over one memory whose scope is fixed at build time or resolved from the run."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    memory: Memory
    scope: Scope | None = None
    shared: Sequence[str | Scope] = ()

    def __init__(self, **data: Any) -> None:
        # Typed errors naming the bad value, before pydantic wraps them in its own.
        if not isinstance(data.get("memory"), Memory):
            memory = preview(data.get("memory"))
            raise InvalidInputError(f"memory must be a gliding Memory, got {memory}")
        reader_filters(data.get("scope"), data.get("shared", ()))
        super().__init__(**data)

    def _scope(self, config: RunnableConfig | None) -> Scope:
        if self.scope is not None:
            return self.scope
        configurable = (config or {}).get("configurable") or {}
        return resolve_scope(
            user_id=configurable.get("user_id"), thread_id=configurable.get("thread_id")
        )

    def _refusing(self, call: Callable[[], _T]) -> _T:
        try:
            return call()
        except Exception as exc:  # the model gets every failure as text
            raise ToolException(tool_refusal(exc, tool=self.name, refusal=refusal_message)) from exc


class GlidingSearchMemoryTool(_ScopedMemoryTool):
    """Search the agent's long-term memory (its scope's memories and knowledge, and shared)."""

    name: str = "search_memory"
    description: str = SEARCH_DESCRIPTION
    args_schema: type[BaseModel] = SearchMemoryInput

    def _run(self, query: str, limit: int = DEFAULT_K, *, config: RunnableConfig) -> str:
        found = self._refusing(
            lambda: search_memory(
                self.memory, self._scope(config), query, limit=limit, shared=self.shared
            )
        )
        return json.dumps(found, ensure_ascii=False)


class GlidingSaveMemoryTool(_ScopedMemoryTool):
    """Create, update or delete one memory in the agent's long-term memory."""

    name: str = "save_memory"
    description: str = SAVE_DESCRIPTION
    args_schema: type[BaseModel] = SaveMemoryInput

    def _run(
        self,
        content: str | None = None,
        action: Literal["create", "update", "delete"] = "create",
        id: str | None = None,  # the name the model sees, as in LangMem
        *,
        config: RunnableConfig,
    ) -> str:
        done = self._refusing(
            lambda: save_memory(
                self.memory, self._scope(config), content, action=action, memory_id=id
            )
        )
        return json.dumps(done)


def create_search_memory_tool(
    memory: Memory,
    *,
    scope: Scope | None = None,
    shared: Sequence[str | Scope] = (),
    name: str = "search_memory",
) -> GlidingSearchMemoryTool:
    """Return a tool that searches the agent's long-term memory.

    Args:
        memory: the memory to search.
        scope: whose memories to read; without one, each run's ``user_id`` (else
            ``thread_id``) from its ``configurable``.
        shared: graph IRIs or scopes every reader reads as well.
        name: the tool's name as the model sees it.

    Raises:
        InvalidInputError: a bad argument (the message names it).
    """
    return GlidingSearchMemoryTool(memory=memory, scope=scope, shared=shared, name=name)


def create_save_memory_tool(
    memory: Memory, *, scope: Scope | None = None, name: str = "save_memory"
) -> GlidingSaveMemoryTool:
    """Return a tool with which the agent creates, updates and deletes its memories.

    Args:
        memory: the memory to write.
        scope: whose memories to write; without one, each run's ``user_id`` (else
            ``thread_id``) from its ``configurable``.
        name: the tool's name as the model sees it.

    Raises:
        InvalidInputError: a bad argument (the message names it).
    """
    return GlidingSaveMemoryTool(memory=memory, scope=scope, name=name)
