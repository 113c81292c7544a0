"""Tools: a tool call's arguments, checked before any parser sees them, and refusals.

Both adapters' tools (LangChain's memory tools and ``BlackboardToolkit``, LlamaIndex's
``MemoryToolSpec`` and ``BlackboardToolSpec``) pass what the model sent through
``check_arguments`` before anything else reads it, and answer every failure with
``tool_refusal``'s text. The arguments are untrusted: a prompt-injected model sends extra
names (a forged ``agent`` or ``role``), wrong types, megabytes of text, or JSON nested
thousands deep, which the frameworks' own input handling (``repr``, pydantic, ``json``) meets
with a ``RecursionError`` or a ``TypeError`` out of the run.

The checks, in order, each refusing with an ``InvalidInputError`` that says what was wrong:

1. the arguments are a JSON object (a mapping; JSON text is parsed first, its length bounded
   before the parser sees it);
2. one iterative walk bounds them (``checks.check_json_value`` with ``TOOL_ARGUMENTS``):
   at most ``MAX_ARGUMENT_DEPTH`` levels, ``MAX_ARGUMENT_VALUES`` values and
   ``MAX_ARGUMENT_CHARS`` characters of text, and only JSON values (string keys, finite
   floats, integers of 64 bits, text that encodes as UTF-8);
3. every name is one of the tool's arguments (the agent's identity is bound to the tool,
   never an argument), and every required one is there;
4. the values have the schema's types, strictly (no ``"5"`` or ``True`` for an integer).

Invariants: ``check_arguments`` walks no value deeper or further than the limits, without
recursion, so it never exhausts the stack or the memory whatever it is given; the schema's
validator only sees arguments within the limits; ``tool_refusal`` never raises and its text
starts ``Error:``.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Mapping
from functools import lru_cache
from typing import Any

from pydantic import BaseModel, ValidationError

from gliding_core.checks import JsonLimits, check_json_value
from gliding_core.errors import GlidingError, InvalidInputError
from gliding_core.jsonld import DEFAULT_MAX_DEPTH, preview

logger = logging.getLogger(__name__)

# The arguments object is level 1, so a node argument may nest as deep as the store's default
# ``StoreConfig.max_depth`` allows; well under the interpreter's recursion limit, which the
# frameworks' ``repr`` and validators spend one frame per level of.
MAX_ARGUMENT_DEPTH = DEFAULT_MAX_DEPTH + 1
# The L0 store's default ``max_content_bytes``: an argument carries at most one node or text.
MAX_ARGUMENT_CHARS = 1_048_576
# Keys, items and scalars together: what a node of that size holds, far beyond a real call.
MAX_ARGUMENT_VALUES = 65_536
TOOL_ARGUMENTS = JsonLimits(
    MAX_ARGUMENT_DEPTH, MAX_ARGUMENT_VALUES, MAX_ARGUMENT_CHARS, "the limit for tool arguments"
)
_SHOWN_ERRORS = 5

Refusal = Callable[[GlidingError], str]


def check_arguments(arguments: object, schema: type[BaseModel], *, tool: str) -> dict[str, Any]:
    """Return the arguments of a call of ``tool``, checked against its schema.

    Args:
        arguments: what the model sent: a mapping of names to values, or its JSON text.
        schema: the tool's argument schema (the one the model is shown).
        tool: the tool's name, for the messages.

    Returns:
        The arguments given, by name, as the schema validated them (defaults are not added).

    Raises:
        InvalidInputError: the arguments are no JSON object, over a limit, name an argument
            the tool does not take, miss one it needs, or have a value of the wrong type.
    """
    if isinstance(arguments, str):
        arguments = parse_arguments(arguments, tool=tool)
    if not isinstance(arguments, Mapping):
        raise InvalidInputError(
            f"the arguments of {tool} must be a JSON object of named arguments, got"
            f" {type(arguments).__name__}: {preview(arguments)}. {_usage(schema, tool)}"
        )
    check_json_value(arguments, TOOL_ARGUMENTS, what=f"the arguments of {tool}")
    _check_names(arguments, schema, tool=tool)
    try:
        checked = schema.model_validate(dict(arguments), strict=True)
    except ValidationError as exc:
        raise InvalidInputError(_validation_message(exc, schema, tool=tool)) from None
    return {name: getattr(checked, name) for name in arguments}


def parse_arguments(text: str, *, tool: str) -> object:
    """Return the value of the JSON text ``text``, its length bounded before it is parsed.

    Raises:
        InvalidInputError: the text is longer than ``MAX_ARGUMENT_CHARS``, no JSON, or nests
            too deep for the parser.
    """
    if len(text) > MAX_ARGUMENT_CHARS:
        raise InvalidInputError(
            f"the arguments of {tool} are {len(text):,} characters of text, over the limit of"
            f" {MAX_ARGUMENT_CHARS:,} (tool arguments); send less"
        )
    try:
        return json.loads(text)
    except RecursionError:
        raise InvalidInputError(
            f"the arguments of {tool} nest too deep to parse, over the limit of"
            f" {MAX_ARGUMENT_DEPTH} levels (tool arguments); send a flatter value"
        ) from None
    except ValueError as exc:  # JSONDecodeError, or an integer of too many digits
        raise InvalidInputError(
            f"the arguments of {tool} are no JSON text ({exc}): {preview(text)}"
        ) from None


def tool_refusal(error: BaseException, *, tool: str, refusal: Refusal | None = None) -> str:
    """Return the text a tool answers with for ``error``: what was wrong, what to do; never raises.

    Args:
        error: what the call raised.
        tool: the tool's name.
        refusal: the text of a ``GlidingError`` (``board_tools.board_refusal`` says more about
            stale writes and leases); ``Error: <message>`` by default.
    """
    try:
        if isinstance(error, GlidingError):
            return refusal(error) if refusal is not None else f"Error: {error}"
        if isinstance(error, ValidationError):
            return validation_refusal(error, None, tool=tool)
    except Exception:  # a broken message: fall through to the plain answer
        logger.warning("the refusal of a call of %s could not be worded", tool, exc_info=True)
    # Not a refusal of ours: a bug, or a value the checks let through. Logged with its trace;
    # the model is told the kind only, as the message may quote what it may not read.
    logger.warning("a call of tool %s failed", tool, exc_info=error)
    return (
        f"Error: {tool} failed on these arguments ({type(error).__name__}; the failure is"
        f" logged). Check them against the tool's arguments and call it again."
    )


def validation_refusal(error: ValidationError, schema: type[BaseModel] | None, *, tool: str) -> str:
    """Return the refusal text of a schema validation error: each bad argument, and the usage."""
    return f"Error: {_validation_message(error, schema, tool=tool)}"


def _validation_message(
    error: ValidationError, schema: type[BaseModel] | None, *, tool: str
) -> str:
    problems = [_problem(item) for item in error.errors(include_url=False)]
    shown = "; ".join(problems[:_SHOWN_ERRORS])
    if len(problems) > _SHOWN_ERRORS:
        shown += f"; and {len(problems) - _SHOWN_ERRORS} more"
    usage = f" {_usage(schema, tool)}" if schema is not None else ""
    return f"bad arguments to {tool}: {shown}.{usage}"


def _problem(item: Mapping[str, Any]) -> str:
    where = ".".join(str(part) for part in item.get("loc", ())) or "arguments"
    if item.get("type") == "missing":
        return f"{where} is missing (it is required)"
    return f"{where}: {item.get('msg')}, got {preview(item.get('input'))}"


def _check_names(arguments: Mapping[Any, Any], schema: type[BaseModel], *, tool: str) -> None:
    unknown = [name for name in arguments if name not in schema.model_fields]
    if unknown:
        names = ", ".join(preview(name) for name in unknown[:_SHOWN_ERRORS])
        raise InvalidInputError(
            f"{tool} takes no argument {names}; who you are (name, role, task, scope) is bound"
            f" to the tool, never an argument. {_usage(schema, tool)}"
        )


def _usage(schema: type[BaseModel] | None, tool: str) -> str:
    """Say how to call ``tool``: its arguments, their JSON types, which are required."""
    if schema is None:
        return ""
    listed = _arguments_of(schema)
    if not listed:
        return f"Call {tool} again with no arguments."
    return f"Call {tool} again with its arguments only: {listed}."


@lru_cache(maxsize=256)  # schemas are classes: LlamaIndex makes new ones per tool list
def _arguments_of(schema: type[BaseModel]) -> str:
    properties = schema.model_json_schema().get("properties", {})
    described = []
    for name, field in schema.model_fields.items():
        kind = _json_type(properties.get(name, {}))
        required = ", required" if field.is_required() else ""
        described.append(f"{name} ({kind}{required})")
    return ", ".join(described)


def _json_type(prop: Mapping[str, Any]) -> str:
    if "enum" in prop:
        return " or ".join(json.dumps(value) for value in prop["enum"])
    if "anyOf" in prop:
        return " or ".join(_json_type(option) for option in prop["anyOf"])
    return str(prop.get("type", "any JSON value"))
