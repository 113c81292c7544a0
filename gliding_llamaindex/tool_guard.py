"""LlamaIndex tool specs whose tools answer every call with their result or a refusal text.

``GuardedToolSpec`` is the base of this package's tool specs (``MemoryToolSpec``,
``BlackboardToolSpec``). ``FunctionTool`` calls its function with whatever keywords it is
given, so an extra one (a forged ``agent`` or ``role``) or a missing one is a ``TypeError`` out
of ``call``, and no value is checked against the schema the model is shown. Each tool of a
guarded spec keeps that schema and description (built from the method, as ``BaseToolSpec``
builds them) but runs a guard in the method's place: it checks the arguments with
``gliding_core.tools.arguments.check_arguments`` (positional ones taken in the schema's order),
calls the method, and answers any failure with ``tool_refusal``'s text. That holds for
``call``, ``acall`` and ``__call__``, for ``FunctionAgent`` (which calls ``acall`` with the
model's parsed arguments) and for ``call_tool``.

Invariants: no arguments make a tool raise (``KeyboardInterrupt`` and cancellation aside); a
call whose arguments fail the checks runs nothing; the tool's metadata is the method's.
"""

# No ``from __future__ import annotations``: as in the specs, signatures stay real types.

from collections.abc import Callable
from typing import Any

from llama_index.core.tools import FunctionTool, ToolMetadata
from llama_index.core.tools.tool_spec.base import SPEC_FUNCTION_TYPE, BaseToolSpec
from pydantic import BaseModel

from gliding_core import GlidingError, InvalidInputError
from gliding_core.tools.arguments import check_arguments, tool_refusal
from gliding_core.tools.memory_tools import refusal_message


class GuardedToolSpec(BaseToolSpec):
    """A tool spec whose tools check their arguments and never raise."""

    def refusal(self, error: GlidingError) -> str:
        """Return the text of a refusal the spec's operations raised: what to do."""
        return refusal_message(error)

    def to_tool_list(
        self,
        spec_functions: list[SPEC_FUNCTION_TYPE] | None = None,
        func_to_metadata_mapping: dict[str, ToolMetadata] | None = None,
    ) -> list[FunctionTool]:
        """Return the spec's tools, each guarded (its schema and description unchanged)."""
        tools = super().to_tool_list(spec_functions, func_to_metadata_mapping)
        return [guarded(tool, refusal=self.refusal) for tool in tools]


def guarded(tool: FunctionTool, *, refusal: Callable[[GlidingError], str]) -> FunctionTool:
    """Return ``tool`` with a guard in its function's place, under the same metadata.

    Raises:
        InvalidInputError: ``tool`` has no pydantic schema to check its arguments by.
    """
    metadata = tool.metadata
    schema = metadata.fn_schema
    if not (isinstance(schema, type) and issubclass(schema, BaseModel)):
        raise InvalidInputError(f"tool {metadata.name!r} has no argument schema to check by")
    name = metadata.get_name()
    function = tool.fn
    fields = list(schema.model_fields)

    # Takes anything, so every caller's arguments reach the checks (``call_tool`` passes
    # keywords to a function that accepts them, and one positional value otherwise).
    def guard(*args: Any, **kwargs: Any) -> str:
        try:
            arguments = check_arguments(_named(args, kwargs, fields, name), schema, tool=name)
            return str(function(**arguments))
        except Exception as exc:  # the model gets every failure as text
            return tool_refusal(exc, tool=name, refusal=refusal)

    return FunctionTool(fn=guard, metadata=metadata)


def _named(
    args: tuple[Any, ...], kwargs: dict[str, Any], fields: list[str], tool: str
) -> dict[str, Any]:
    """The arguments by name: positional ones take the schema's names in order."""
    if len(args) > len(fields):
        raise InvalidInputError(
            f"{tool} takes at most {len(fields)} arguments, got {len(args)} positional ones"
        )
    named = dict(zip(fields, args, strict=False))
    twice = sorted(set(named) & set(kwargs))
    if twice:
        raise InvalidInputError(f"{tool} was given {twice} both by position and by name")
    return {**named, **kwargs}
