"""An offline chat model for tests, demos and notebooks: scripted replies, every request recorded.

``ScriptedChatModel`` answers each call with ``reply(messages)`` (by default an echo of the last
user message) and keeps a copy of every request, so a test can check what the model was sent.
It accepts tools (``bind_tools`` returns the model itself), so ``create_agent`` runs real agent
loops on it. ``pdca_model(role, task)`` is one whose replies are a plan / do / check / act
role's scripted moves (``gliding_core.testing``).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Any

from langchain_core.callbacks import CallbackManagerForLLMRun
from langchain_core.language_models import BaseChatModel, LanguageModelInput
from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.runnables import Runnable
from pydantic import ConfigDict, Field, PrivateAttr

from gliding_core.testing import RoleScript
from gliding_langchain.messages import to_records

Reply = Callable[[list[BaseMessage]], AIMessage]


def echo(messages: list[BaseMessage]) -> AIMessage:
    """Answer with the text of the last human message."""
    last = next((m.text for m in reversed(messages) if m.type == "human"), "")
    return AIMessage(content=f"You said: {last}")


class ScriptedChatModel(BaseChatModel):
    """A chat model whose replies come from a function and whose requests are recorded.

    Args:
        reply: returns the reply to a request's messages; ``echo`` by default.

    Attributes:
        requests: the messages of every call, oldest first.
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

    reply: Reply = Field(default=echo)
    _requests: list[list[BaseMessage]] = PrivateAttr(default_factory=list)
    _lock: threading.Lock = PrivateAttr(default_factory=threading.Lock)

    @property
    def _llm_type(self) -> str:
        return "gliding-scripted"

    @property
    def requests(self) -> list[list[BaseMessage]]:
        """A copy of the recorded requests."""
        with self._lock:
            return list(self._requests)

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        with self._lock:
            self._requests.append(list(messages))
        return ChatResult(generations=[ChatGeneration(message=self.reply(list(messages)))])

    def bind_tools(
        self, tools: Sequence[Any], *, tool_choice: str | None = None, **kwargs: Any
    ) -> Runnable[LanguageModelInput, AIMessage]:
        """Accept any tools; the script decides which to call."""
        return self


def pdca_model(role: str, task: str) -> ScriptedChatModel:
    """Return a scripted model of one role of the plan / do / check / act round on ``task``.

    Its moves are ``gliding_core.testing.RoleScript``'s, decided from the messages it is sent:
    blackboard tool calls on its first call, then a final report.
    """
    script = RoleScript(role, task)

    def reply(messages: list[BaseMessage]) -> AIMessage:
        move = script(to_records(messages))
        calls = [{"id": c.id, "name": c.name, "args": c.args} for c in move.calls]
        return AIMessage(content=move.text, tool_calls=calls)

    return ScriptedChatModel(reply=reply)
