"""The supplementary-input fix as a LangChain callback handler.

A user may send input while an agent runs. The handler runs at each cycle start of the run (each
chat model or LLM start) and moves the pending supplementary inputs of the run's task into the
agent's L1 session, in one L0 transaction, so the next model call carries them: in the L1
context of any chain that renders it, and, with ``GlidingMemoryMiddleware`` sharing the same
``Conversation``, as new user messages in the model request.

Invariants: an input is taken exactly once (taking and archiving are one transaction); the
handler never raises into the agent's run for an empty queue.
"""

from __future__ import annotations

import threading
from typing import Any
from uuid import UUID

from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.messages import BaseMessage

from gliding_core import Conversation, InvalidInputError, Memory, SupplementaryInput


class SupplementaryInputCallbackHandler(BaseCallbackHandler):
    """Move a task's pending supplementary inputs into its L1 session at each cycle start.

    Args:
        conversation: the agent's conversation (share it with ``GlidingMemoryMiddleware``).

    Attributes:
        taken: every input the handler took, oldest first.

    Example:
        >>> handler = SupplementaryInputCallbackHandler.for_task(memory, "urn:task:1")
        >>> agent.invoke(inputs, config={"callbacks": [handler]})  # doctest: +SKIP
    """

    raise_error = True  # a failed hand-over must stop the run, not lose the input silently
    run_inline = True  # take the inputs before the model call goes out

    def __init__(self, conversation: Conversation) -> None:
        if not isinstance(conversation, Conversation):
            raise InvalidInputError(
                f"conversation must be a gliding Conversation, got {conversation!r:.80}"
            )
        self.conversation = conversation
        self.taken: list[SupplementaryInput] = []
        self.cycles = 0
        self._lock = threading.Lock()

    @classmethod
    def for_task(
        cls, memory: Memory, task_iri: str, *, agent: str = "agent"
    ) -> SupplementaryInputCallbackHandler:
        """Return a handler for ``agent`` working on ``task_iri`` in ``memory``."""
        return cls(Conversation(memory, task_iri, agent=agent))

    def cycle_start(self) -> list[SupplementaryInput]:
        """Take the pending inputs into the session; return them."""
        taken = self.conversation.take_pending()
        with self._lock:
            self.cycles += 1
            self.taken.extend(taken)
        return taken

    def on_chat_model_start(
        self,
        serialized: dict[str, Any],
        messages: list[list[BaseMessage]],
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        **kwargs: Any,
    ) -> None:
        """A chat model call starts a cycle."""
        self.cycle_start()

    def on_llm_start(
        self,
        serialized: dict[str, Any],
        prompts: list[str],
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        **kwargs: Any,
    ) -> None:
        """A completion model call starts a cycle."""
        self.cycle_start()
