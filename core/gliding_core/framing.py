"""Model view: chat message records, their tool groups and their exact framed token counts.

A chat message is a plain record: ``{"role", "content"}`` with OpenAI-style ``tool_calls`` /
``tool_call_id`` when tools are used, an optional ``id`` and, on delivered supplementary input,
``supplement`` (see ``gliding_core.chatlog``). This module is the one place that knows how such
records are checked, grouped and counted; the view (``gliding_core.conversation``) and the
adapters use it.

Invariants: an assistant message that calls tools and the results answering it form one group,
which a view keeps or drops whole (providers reject an orphaned tool message); token counts are
exact for what a cl100k chat model is sent (``PER_MESSAGE`` per message, ``PER_REPLY`` once);
checking copies, it never changes the caller's records.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from gliding_core.errors import InvalidInputError
from gliding_core.jsonld import preview
from gliding_core.tokens import TokenCounter

Message = dict[str, Any]
# Framing tokens per message and per reply, as OpenAI counts them for cl100k chat models.
PER_MESSAGE = 3
PER_REPLY = 3


class ChatFraming:
    """Count chat messages exactly as a chat model is sent them.

    Args:
        tokens: the memory's exact counter.
    """

    def __init__(self, tokens: TokenCounter) -> None:
        if not isinstance(tokens, TokenCounter):
            raise InvalidInputError(f"tokens must be a TokenCounter, got {preview(tokens)}")
        self.tokens = tokens

    def count(self, messages: Sequence[Mapping[str, Any]]) -> int:
        """Return the exact token count of ``messages`` as sent (with the reply's framing)."""
        return sum(self.message_tokens(m) for m in check_messages(messages)) + PER_REPLY

    def message_tokens(self, message: Mapping[str, Any]) -> int:
        """Return the tokens one message adds to a request."""
        count = self.tokens.count
        total = PER_MESSAGE + count(str(message["role"])) + count(content_text(message))
        if message.get("tool_calls"):
            total += count(json.dumps(message["tool_calls"], sort_keys=True))
        if message.get("tool_call_id"):
            total += count(str(message["tool_call_id"]))
        return total

    def group_tokens(self, group: Sequence[Mapping[str, Any]]) -> int:
        """Return the tokens a group of messages adds to a request (no reply framing)."""
        return sum(self.message_tokens(m) for m in group)


def check_messages(messages: object) -> list[Message]:
    """Return copies of the records of ``messages``, checked.

    Raises:
        InvalidInputError: ``messages`` is not a list of mappings, each with a non-empty string
            ``role`` and a string, list or missing ``content``.
    """
    if isinstance(messages, (str, bytes, Mapping)) or not isinstance(messages, Sequence):
        raise InvalidInputError(f"messages must be a list of messages, got {preview(messages)}")
    return [_check_message(m, i) for i, m in enumerate(messages)]


def _check_message(message: object, index: int) -> Message:
    if not isinstance(message, Mapping):
        raise InvalidInputError(f"message {index} must be a mapping, got {preview(message)}")
    role = message.get("role")
    if not isinstance(role, str) or not role:
        raise InvalidInputError(f"message {index} needs a non-empty string role, got {role!r}")
    content = message.get("content")
    if content is not None and not isinstance(content, (str, list)):
        raise InvalidInputError(
            f"message {index} content must be a string or a list of parts, got {preview(content)}"
        )
    key = message.get("id")
    if key is not None and not isinstance(key, str):
        raise InvalidInputError(f"message {index} id must be a string, got {preview(key)}")
    return dict(message)


def tool_groups(items: Sequence[Mapping[str, Any]]) -> list[list[int]]:
    """Split message indexes into units: a tool-calling message with its results, or one."""
    groups: list[list[int]] = []
    open_calls: dict[str, int] = {}
    for index, message in enumerate(items):
        call_id = message.get("tool_call_id")
        if message["role"] == "tool" and isinstance(call_id, str) and call_id in open_calls:
            groups[open_calls[call_id]].append(index)
            continue
        groups.append([index])
        for call in message.get("tool_calls") or []:
            if isinstance(call, Mapping) and isinstance(call.get("id"), str):
                open_calls[call["id"]] = len(groups) - 1
    return groups


def after_tool_groups(messages: list[Message]) -> list[Message]:
    """Move each supplement that arrived inside a tool group (after a tool call, before all of
    its results) to just after the group: providers reject a user message there."""
    out: list[Message] = []
    held: list[Message] = []
    waiting: set[str] = set()
    for message in messages:
        if message.get("supplement"):
            (held if waiting else out).append(message)
            continue
        if message["role"] == "tool" and message.get("tool_call_id") in waiting:
            out.append(message)
            waiting.discard(message["tool_call_id"])
        else:  # any other message ends an open group (complete or not)
            out += held
            held = []
            out.append(message)
            calls = message.get("tool_calls") or []
            waiting = {
                c["id"] for c in calls if isinstance(c, Mapping) and isinstance(c.get("id"), str)
            }
        if not waiting:
            out += held
            held = []
    return out + held


def content_text(message: Mapping[str, Any]) -> str:
    """Return a message's content as sent: the string, or the JSON of a list of parts."""
    content = message.get("content")
    if content is None:
        return ""
    return content if isinstance(content, str) else json.dumps(content, sort_keys=True)


def message_text(message: Mapping[str, Any]) -> str:
    """Return what a message says: its content, with the names of the tools it calls."""
    calls = message.get("tool_calls") or []
    names = [str(c.get("name", "")) for c in calls if isinstance(c, Mapping)]
    text = content_text(message)
    return text + (f" (calls {', '.join(names)})" if names else "")


def last_user_text(messages: Sequence[Mapping[str, Any]]) -> str | None:
    """Return the text of the newest user message with text, or ``None``."""
    for message in reversed(messages):
        if message["role"] == "user":
            text = message_text(message).strip()
            if text:
                return text
    return None
