"""LlamaIndex tools an agent calls to manage its own long-term memory (search it, save to it).

``MemoryToolSpec(memory, scope=Scope.user("alice")).to_tool_list()`` gives a ``FunctionAgent``
the ``search_memory`` and ``save_memory`` tools of ``gliding_core.tools.memory_tools`` (LangMem's
convention: save, update or delete a memory by its id; search what was saved). Each tool has a
sync ``call`` and an async ``acall``; ``acall`` runs the sync function in a worker thread
(``FunctionTool``'s default), so the event loop never waits on SQLite.

The spec is a ``GuardedToolSpec``: each tool checks its arguments before the method runs
(``gliding_core.tools.arguments``), so an extra name, a missing or mistyped argument, or a value
too large or too deep is refused before anything runs.

Invariants: the scope is bound when the spec is built, never an argument the model fills in;
every failure (a refusal such as an unknown id or empty content, a bad argument, or any other
error) is returned to the model as the tool's output, a text starting ``Error:`` that says
what to do, never raised out of the agent's run.
"""

# No ``from __future__ import annotations``: FunctionTool builds each tool's schema from the
# methods' signatures, and needs their annotations as types, not strings.

import json
from collections.abc import Callable, Sequence
from typing import Annotated, Literal, TypeVar

from llama_index.core.tools.tool_spec.base import SPEC_FUNCTION_TYPE

from gliding_core import GlidingError, InvalidInputError, Memory
from gliding_core.jsonld import preview
from gliding_core.store.retrieval import DEFAULT_K
from gliding_core.store.scope import Scope, Shared, reader_filters
from gliding_core.tools.memory_tools import (
    SAVE_DESCRIPTION,
    SEARCH_DESCRIPTION,
    refusal_message,
    save_memory,
    search_memory,
)
from gliding_llamaindex.tool_guard import GuardedToolSpec

_T = TypeVar("_T")


class MemoryToolSpec(GuardedToolSpec):
    """The search-memory and save-memory tools of one scope, as a LlamaIndex tool spec.

    Args:
        memory: the memory to search and write.
        scope: whose memories the tools read and write (``Scope.user("alice")``).
        shared: graph IRIs or scopes the search reads as well.

    Raises:
        InvalidInputError: a bad argument (the message names it).

    Example:
        >>> tools = MemoryToolSpec(memory, scope=Scope.user("alice")).to_tool_list()
        >>> agent = FunctionAgent(tools=tools, llm=llm)  # doctest: +SKIP
    """

    spec_functions: list[SPEC_FUNCTION_TYPE] = ["search_memory", "save_memory"]  # noqa: RUF012 - as BaseToolSpec declares it

    def __init__(self, memory: Memory, *, scope: Scope, shared: Sequence[Shared] = ()) -> None:
        if not isinstance(memory, Memory):
            raise InvalidInputError(f"memory must be a gliding Memory, got {preview(memory)}")
        if not isinstance(scope, Scope):
            raise InvalidInputError(f"scope must be a Scope, got {preview(scope)}")
        reader_filters(scope, shared)
        self.memory = memory
        self.scope = scope
        self.shared = tuple(shared)

    def search_memory(
        self,
        query: Annotated[str, "What to look for, in natural language."],
        limit: Annotated[int, "How many results at most."] = DEFAULT_K,
    ) -> str:
        return _answer(
            lambda: search_memory(self.memory, self.scope, query, limit=limit, shared=self.shared)
        )

    def save_memory(
        self,
        content: Annotated[str | None, "The memory's text (for 'create' and 'update')."] = None,
        action: Annotated[
            Literal["create", "update", "delete"],
            "'create' a memory, 'update' or 'delete' one by its id.",
        ] = "create",
        id: Annotated[str | None, "The id of the memory to update or delete."] = None,
    ) -> str:
        return _answer(
            lambda: save_memory(self.memory, self.scope, content, action=action, memory_id=id)
        )


# The docstrings are the tools' descriptions (what the model reads): the ones core words once.
MemoryToolSpec.search_memory.__doc__ = SEARCH_DESCRIPTION
MemoryToolSpec.save_memory.__doc__ = SAVE_DESCRIPTION


def _answer(call: Callable[[], object]) -> str:
    """Return the JSON text of what ``call`` returns, or the refusal message it raised."""
    try:
        return json.dumps(call(), ensure_ascii=False)
    except GlidingError as exc:
        return refusal_message(exc)
