"""Offline function-calling LLMs for tests, demos and notebooks: the scripted round's roles.

``pdca_llm(role, task, next_agent=...)`` is a ``MockFunctionCallingLLM`` whose replies are a
plan / do / check / act role's moves (``gliding_core.testing.RoleScript``), decided from the
messages it is sent: blackboard tool calls first, then a hand-off to ``next_agent`` (the
report is its reason) or, for the last role, the report as the final answer. Every request is
kept in ``requests`` of the returned recorder.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Any

from llama_index.core.base.llms.types import ChatMessage, TextBlock, ToolCallBlock
from llama_index.core.llms.mock import MockFunctionCallingLLM

from gliding_core.testing import RoleScript
from gliding_llamaindex.messages import to_record

HANDOFF = "handoff"


class ScriptedRole:
    """The response generator of one role: its moves, every request recorded.

    Args:
        role: ``plan``, ``do``, ``check`` or ``act``.
        task: the task's IRI.
        next_agent: the agent to hand off to at the end; ``None`` answers instead.
        during_call: called with each request before the reply (a test sends input here).

    Attributes:
        requests: copies of the messages of every call, oldest first.
    """

    def __init__(
        self,
        role: str,
        task: str,
        *,
        next_agent: str | None = None,
        during_call: Callable[[list[ChatMessage]], None] | None = None,
    ) -> None:
        self.script = RoleScript(role, task)
        self.next_agent = next_agent
        self.during_call = during_call
        self.requests: list[list[ChatMessage]] = []
        self._lock = threading.Lock()

    def __call__(self, messages: Sequence[ChatMessage], **kwargs: Any) -> ChatMessage:
        copies = [m.model_copy(deep=True) for m in messages]
        with self._lock:
            self.requests.append(copies)
        if self.during_call is not None:
            self.during_call(copies)
        move = self.script([to_record(m) for m in messages])
        if move.calls:
            blocks: list[Any] = [
                ToolCallBlock(tool_call_id=c.id, tool_name=c.name, tool_kwargs=c.args)
                for c in move.calls
            ]
            return ChatMessage(role="assistant", blocks=blocks)
        if self.next_agent is None:
            return ChatMessage(role="assistant", content=move.text)
        call = ToolCallBlock(
            tool_call_id=f"{self.script.role}-handoff",
            tool_name=HANDOFF,
            tool_kwargs={"to_agent": self.next_agent, "reason": move.text},
        )
        return ChatMessage(role="assistant", blocks=[TextBlock(text=move.text), call])


def pdca_llm(
    role: str,
    task: str,
    *,
    next_agent: str | None = None,
    during_call: Callable[[list[ChatMessage]], None] | None = None,
) -> MockFunctionCallingLLM:
    """Return a function-calling LLM that plays ``role`` of the round on ``task``.

    Its ``ScriptedRole`` (with the recorded requests) is ``llm.response_generator``.
    """
    scripted = ScriptedRole(role, task, next_agent=next_agent, during_call=during_call)
    return MockFunctionCallingLLM(response_generator=scripted)
