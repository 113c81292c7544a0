"""Translation between LangChain messages and the plain records ``gliding_core`` works on.

A record is ``{"role", "content", "id"}`` with OpenAI-style ``tool_calls`` on an AI message that
calls tools and ``tool_call_id`` on a tool result; a delivered supplementary input carries
``supplement``: the input's IRI. Supplementary inputs are added to the agent's state as human
messages whose id starts with ``SUPPLEMENT_ID_PREFIX``, so they are recognised on later steps.

A record's tool calls are bounded (``gliding_core.framing.bounded_call``): a call a model sent
with arguments nested thousands deep or megabytes long keeps its id and name, its arguments
elided. ``bounded_message`` is the message as its record shows it, for what is sent on or
stored in LangChain's own form (a model request, the chat log): the message itself, or a copy
with those calls elided.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    HumanMessage,
    SystemMessage,
    ToolCall,
    ToolMessage,
)

from gliding_core import InvalidInputError, SupplementaryInput
from gliding_core.framing import bounded_call

SUPPLEMENT_ID_PREFIX = "gliding-supplement:"
_ROLES = {"human": "user", "ai": "assistant", "system": "system", "tool": "tool"}
_RAW_CALLS = ("tool_calls", "function_call")  # a provider's own form of an AI message's calls


def to_record(message: BaseMessage) -> dict[str, Any]:
    """Return the plain record of one LangChain message."""
    if not isinstance(message, BaseMessage):
        raise InvalidInputError(f"expected a LangChain message, got {type(message).__name__}")
    record: dict[str, Any] = {
        "role": _ROLES.get(message.type, message.type),
        "content": message.text,
    }
    if message.id is not None:
        record["id"] = message.id
        if message.id.startswith(SUPPLEMENT_ID_PREFIX):
            record["supplement"] = message.id.removeprefix(SUPPLEMENT_ID_PREFIX)
    if isinstance(message, AIMessage) and message.tool_calls:
        record["tool_calls"] = _calls(message)
    if isinstance(message, ToolMessage):
        record["tool_call_id"] = message.tool_call_id
    return record


def bounded_message(message: BaseMessage) -> BaseMessage:
    """Return ``message``, or a copy whose tool calls over the record's limits are elided.

    The copy's ``tool_calls`` are its record's (the elided ones with ``{"elided": why}`` for
    arguments); the provider's raw form of the calls (``additional_kwargs``) is left out of
    it, so a model request or the chat log never carries the arguments that were elided.
    """
    if not isinstance(message, AIMessage) or not message.tool_calls:
        return message
    bounded = _calls(message)
    if all(b["args"] is c["args"] for b, c in zip(bounded, message.tool_calls, strict=True)):
        return message
    calls = [
        ToolCall(name=b.get("name", ""), args=b["args"], id=b.get("id"), type="tool_call")
        for b in bounded
    ]
    raw = {k: v for k, v in message.additional_kwargs.items() if k not in _RAW_CALLS}
    return message.model_copy(update={"tool_calls": calls, "additional_kwargs": raw})


def _calls(message: AIMessage) -> list[dict[str, Any]]:
    """The record's form of the message's tool calls, each bounded."""
    return [
        bounded_call({"id": call.get("id"), "name": call["name"], "args": call["args"]})
        for call in message.tool_calls
    ]


def to_records(messages: Sequence[BaseMessage]) -> list[dict[str, Any]]:
    """Return the plain records of ``messages``, in order."""
    if isinstance(messages, (str, bytes)) or not isinstance(messages, Sequence):
        raise InvalidInputError(f"messages must be a list of messages, got {messages!r:.80}")
    return [to_record(m) for m in messages]


def from_record(record: dict[str, Any]) -> BaseMessage:
    """Return a LangChain message for a record that did not come from one (memory, supplement)."""
    role, content, key = record["role"], record.get("content") or "", record.get("id")
    if role == "system":
        return SystemMessage(content=content, id=key)
    if role == "assistant":
        return AIMessage(content=content, id=key)
    return HumanMessage(content=content, id=key)


def supplement_message(item: SupplementaryInput) -> HumanMessage:
    """Return the human message that delivers a supplementary input to the agent."""
    return HumanMessage(content=item.content, id=SUPPLEMENT_ID_PREFIX + item.iri)
