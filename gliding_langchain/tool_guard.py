"""LangChain tools that answer every call with their result or a refusal text, never an exception.

``GuardedTool`` is the base of this package's tools (the memory tools, and through
``GuardedStructuredTool`` the ``BlackboardToolkit``'s). It checks what the model sent with
``gliding_core.tools.arguments.check_arguments`` before LangChain's own input handling sees it:
``BaseTool.run`` prints the input with ``str()`` (a ``RecursionError`` at about a thousand
levels of nesting) and validates it leniently (``"5"`` for an integer, extra names dropped in
silence). Whatever the input (``invoke``, ``ainvoke``, ``run``, ``arun``; a dict, a
``ToolCall`` as ``create_agent``'s tool node sends it, JSON text, anything else), the answer is
the tool's result, or a text starting ``Error:`` that says what was wrong and what to do: a
``ToolMessage`` with status ``error`` for a tool call, the text otherwise.

Invariants: no input makes a tool raise (``KeyboardInterrupt`` and cancellation aside); a call
whose arguments fail the checks runs nothing; the schema the model is shown is the tool's
``args_schema``, unchanged.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from langchain_core.messages import ToolMessage
from langchain_core.runnables import RunnableConfig
from langchain_core.tools import BaseTool, StructuredTool
from pydantic import BaseModel, ValidationError
from pydantic.v1 import ValidationError as ValidationErrorV1

from gliding_core.tools.arguments import Refusal, check_arguments, tool_refusal


def _validation_error(error: ValidationError | ValidationErrorV1) -> str:
    # The arguments were checked, strictly, before LangChain validates them: a safety net.
    return tool_refusal(error, tool="this tool")


class GuardedTool(BaseTool):
    """A tool whose every call returns its result or an ``Error:`` text, checked input first.

    Attributes:
        refusal: the text of a ``GlidingError`` the operation raised (``Error: <message>`` by
            default; the blackboard's says more about stale writes and leases).
    """

    refusal: Refusal | None = None
    handle_tool_error: bool = True
    handle_validation_error: (
        bool | str | Callable[[ValidationError | ValidationErrorV1], str] | None
    ) = _validation_error

    def invoke(
        self,
        input: Any,
        config: RunnableConfig | None = None,
        **kwargs: Any,
    ) -> Any:
        """Run the tool on a dict, a ``ToolCall`` or text; refuse a malformed tool call."""
        call, refused = self._unpacked(input)
        if refused is not None:
            return refused
        return super().invoke(call, config, **kwargs)

    async def ainvoke(
        self,
        input: Any,
        config: RunnableConfig | None = None,
        **kwargs: Any,
    ) -> Any:
        """As ``invoke``, awaited."""
        call, refused = self._unpacked(input)
        if refused is not None:
            return refused
        return await super().ainvoke(call, config, **kwargs)

    def run(self, tool_input: Any, *args: Any, **kwargs: Any) -> Any:
        """Run the tool on checked arguments; answer any failure with its refusal text."""
        call_id = kwargs.get("tool_call_id")
        try:
            arguments = self.arguments(tool_input)
            return super().run(arguments, *args, **kwargs)
        except Exception as exc:  # the model gets every failure as text
            return self._refused(self.refusal_text(exc), call_id)

    async def arun(self, tool_input: Any, *args: Any, **kwargs: Any) -> Any:
        """As ``run``, awaited."""
        call_id = kwargs.get("tool_call_id")
        try:
            arguments = self.arguments(tool_input)
            return await super().arun(arguments, *args, **kwargs)
        except Exception as exc:  # the model gets every failure as text
            return self._refused(self.refusal_text(exc), call_id)

    def arguments(self, tool_input: object) -> dict[str, Any]:
        """Return ``tool_input`` as checked arguments of this tool.

        Text that is no JSON object is the value of the first argument, as LangChain passes a
        single input (blank text is no arguments for a tool that takes none).

        Raises:
            InvalidInputError: the arguments fail a check (the message says which).
        """
        schema = self.args_schema
        if not (isinstance(schema, type) and issubclass(schema, BaseModel)):
            raise TypeError(f"{self.name} has no pydantic args_schema to check arguments by")
        if isinstance(tool_input, str) and not tool_input.lstrip().startswith("{"):
            fields = list(schema.model_fields)
            if fields:
                tool_input = {fields[0]: tool_input}
            elif not tool_input.strip():
                tool_input = {}
        return check_arguments(tool_input, schema, tool=self.name)

    def refusal_text(self, error: BaseException) -> str:
        """Return the text the model gets for ``error``."""
        return tool_refusal(error, tool=self.name, refusal=self.refusal)

    def _unpacked(self, value: Any) -> tuple[Any, ToolMessage | str | None]:
        """A ``ToolCall`` LangChain can unpack (its ``id`` and ``args`` a dict), or its refusal.

        LangChain reads ``value["id"]`` and copies ``value["args"]`` before any check: a call
        without an id is run as one without, one whose ``args`` are no dict is checked here.
        """
        if not (isinstance(value, dict) and value.get("type") == "tool_call"):
            return value, None
        call_id = value.get("id")
        if call_id is not None and not isinstance(call_id, str):
            kind = type(call_id).__name__
            return value, f"Error: the id of a call of {self.name} must be a string, got {kind}"
        arguments = value.get("args")
        if not isinstance(arguments, dict):
            try:
                arguments = self.arguments(arguments)
            except Exception as exc:  # the model gets every failure as text
                return value, self._refused(self.refusal_text(exc), call_id)
        return {**value, "id": call_id, "args": arguments}, None

    def _refused(self, text: str, call_id: str | None) -> ToolMessage | str:
        if call_id is None:
            return text
        return ToolMessage(text, tool_call_id=call_id, name=self.name, status="error")


class GuardedStructuredTool(GuardedTool, StructuredTool):
    """A ``StructuredTool`` (``GuardedStructuredTool.from_function(...)``) that is guarded."""
