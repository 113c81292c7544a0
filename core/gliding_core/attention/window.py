"""Attention: the relevance-aware context window manager (seed 001, 4.4).

Fits a list of chat messages (plain ``{"role", "content"}`` records, with OpenAI-style
``tool_calls`` / ``tool_call_id`` when tools are used) into a token budget:
1. system messages stay, at the front;
2. the most recent ``keep_recent`` messages stay;
3. of the middle, the messages most relevant to the query (or the last user message) stay,
   as many as fit;
4. the rest become one summary message, placed after the system messages.

Invariants: an assistant message that calls tools and the tool results answering it are kept or
dropped together, never separated (providers reject an orphaned tool message); kept messages keep
their order; token counts are exact for the text sent.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gliding_core.attention.relevance import similarity
from gliding_core.errors import InvalidInputError
from gliding_core.hyperspace.embedders import Embedder
from gliding_core.jsonld import preview
from gliding_core.summarize import Summarizer
from gliding_core.tokens import TokenCounter

Message = dict[str, Any]
# Framing tokens per message and per reply, as OpenAI counts them for cl100k chat models.
PER_MESSAGE = 3
PER_REPLY = 3
SUMMARY_PREFIX = "[Summary of {n} earlier messages] "
_MIN_SUMMARY_TOKENS = 16


@dataclass(frozen=True, slots=True)
class FittedWindow:
    """The result of fitting messages to a budget."""

    messages: list[Message]
    tokens: int
    dropped: int
    summarized: bool


class ContextWindowManager:
    """Compress message lists to a token budget without breaking tool-call groups.

    Args:
        tokens: the exact counter.
        summarizer: writes the summary of the dropped messages.
        embedder: ranks the middle messages by relevance; without one, recent ones win.
        keep_recent: how many of the latest messages always stay (moved to a group boundary).
        summary_tokens: the longest summary message.
    """

    def __init__(
        self,
        tokens: TokenCounter,
        summarizer: Summarizer,
        *,
        embedder: Embedder | None = None,
        keep_recent: int = 4,
        summary_tokens: int = 200,
    ) -> None:
        self.tokens, self.summarizer, self.embedder = tokens, summarizer, embedder
        self.keep_recent = _check_count(keep_recent, "keep_recent", minimum=0)
        self.summary_tokens = _check_count(summary_tokens, "summary_tokens", minimum=1)

    def count(self, messages: Sequence[Mapping[str, Any]]) -> int:
        """Return the exact token count of ``messages`` as sent to a chat model."""
        return sum(self._message_tokens(m) for m in messages) + PER_REPLY

    def fit(
        self, messages: Sequence[Mapping[str, Any]], budget: int, *, query: str | None = None
    ) -> FittedWindow:
        """Return ``messages`` fitted into ``budget`` tokens."""
        items = [_check_message(m, i) for i, m in enumerate(_check_list(messages))]
        budget = _check_count(budget, "budget", minimum=1)
        total = self.count(items)
        if total <= budget:
            return FittedWindow(items, total, 0, False)
        groups = _groups(items)
        cost = [sum(self._message_tokens(items[i]) for i in g) for g in groups]
        system = [k for k, g in enumerate(groups) if items[g[0]]["role"] == "system"]
        recent = self._recent(groups, system)
        used = PER_REPLY + sum(cost[k] for k in system + recent)
        # The newest groups win when even system + recent do not fit; the last one always stays.
        while used > budget and len(recent) > 1:
            used -= cost[recent.pop(0)]
        middle = [k for k in range(len(groups)) if k not in system and k not in recent]
        reserve = self._summary_reserve(budget - used) if middle else 0
        chosen: list[int] = []
        for k in self._rank(items, groups, middle, query):
            if used + cost[k] + reserve <= budget:
                chosen.append(k)
                used += cost[k]
        kept = sorted(system + recent + chosen)
        dropped = [k for k in range(len(groups)) if k not in kept]
        summary = self._summary(items, groups, dropped, budget - used) if dropped else None
        out = [items[i] for k in kept for i in groups[k]]
        if summary is not None:
            out.insert(sum(len(groups[k]) for k in system), summary)
        dropped_messages = sum(len(groups[k]) for k in dropped)
        return FittedWindow(out, self.count(out), dropped_messages, summary is not None)

    def _recent(self, groups: list[list[int]], system: list[int]) -> list[int]:
        recent: list[int] = []
        covered = 0
        for k in range(len(groups) - 1, -1, -1):
            if covered >= self.keep_recent and recent:
                break
            if k not in system:
                recent.insert(0, k)
                covered += len(groups[k])
        return recent

    def _rank(
        self, items: list[Message], groups: list[list[int]], middle: list[int], query: str | None
    ) -> list[int]:
        """Order the middle groups by relevance to the query, the newest first on ties."""
        if query is None:
            users = [m for m in items if m["role"] == "user" and m.get("content")]
            query = str(users[-1]["content"]) if users else None
        if self.embedder is None or not query or not middle:
            return sorted(middle, reverse=True)
        texts = [" ".join(_text(items[i]) for i in groups[k]) or " " for k in middle]
        vectors = self.embedder.embed_documents(texts)
        target = self.embedder.embed_query(query)
        score = {k: similarity(target, v) or 0.0 for k, v in zip(middle, vectors, strict=True)}
        return sorted(middle, key=lambda k: (score[k], k), reverse=True)

    def _summary_reserve(self, room: int) -> int:
        wanted = self.summary_tokens + PER_MESSAGE + 8
        return wanted if room >= wanted + _MIN_SUMMARY_TOKENS else 0

    def _summary(
        self, items: list[Message], groups: list[list[int]], dropped: list[int], room: int
    ) -> Message | None:
        prefix = SUMMARY_PREFIX.format(n=sum(len(groups[k]) for k in dropped))
        limit = min(self.summary_tokens, room - PER_MESSAGE - 2 - self.tokens.count(prefix))
        if limit < _MIN_SUMMARY_TOKENS:
            return None
        lines = [f"{items[i]['role']}: {_text(items[i])}" for k in dropped for i in groups[k]]
        body = self.summarizer.summarize("\n".join(lines), limit)
        message: Message = {"role": "system", "content": prefix + body}
        while self._message_tokens(message) > room and body:
            body = self.tokens.truncate(body, max(0, self.tokens.count(body) - 4))
            message = {"role": "system", "content": prefix + body}
        return message if self._message_tokens(message) <= room else None

    def _message_tokens(self, message: Mapping[str, Any]) -> int:
        count = self.tokens.count
        total = PER_MESSAGE + count(str(message["role"])) + count(_content(message))
        if message.get("tool_calls"):
            total += count(json.dumps(message["tool_calls"], sort_keys=True))
        if message.get("tool_call_id"):
            total += count(str(message["tool_call_id"]))
        return total


def _groups(items: list[Message]) -> list[list[int]]:
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


def _content(message: Mapping[str, Any]) -> str:
    content = message.get("content")
    if content is None:
        return ""
    return content if isinstance(content, str) else json.dumps(content, sort_keys=True)


def _text(message: Mapping[str, Any]) -> str:
    calls = message.get("tool_calls") or []
    names = [str(c.get("name", "")) for c in calls if isinstance(c, Mapping)]
    text = _content(message)
    return text + (f" (calls {', '.join(names)})" if names else "")


def _check_list(messages: object) -> Sequence[object]:
    if isinstance(messages, (str, bytes, Mapping)) or not isinstance(messages, Sequence):
        raise InvalidInputError(f"messages must be a list of messages, got {preview(messages)}")
    return messages


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
    return dict(message)


def _check_count(value: object, what: str, *, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise InvalidInputError(f"{what} must be an int >= {minimum}, got {preview(value)}")
    return value
