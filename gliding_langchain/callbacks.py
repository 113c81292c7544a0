"""The supplementary-input fix as a LangChain callback handler.

A user may send input while an agent runs. The handler runs at each cycle start of the run (each
chat model or LLM start) and moves the pending supplementary inputs of the run's task into the
agent's L1 session, in one L0 transaction, so the next model call carries them: in the L1
context of any chain that renders it, and, with ``GlidingMemoryMiddleware`` sharing the same
``Conversation``, as new user messages in the model request.

With a middleware that serves several scopes (users, threads), build the handler with
``for_middleware``: each cycle start takes the inputs of the run's own scope.

Invariants: an input is taken exactly once (taking and archiving are one transaction), by the
run of its scope only; the handler never raises into the agent's run for an empty queue.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any
from uuid import UUID

from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.messages import BaseMessage

from gliding_core import Conversation, InvalidInputError, Memory, SupplementaryInput

if TYPE_CHECKING:
    from gliding_langchain.middleware import GlidingMemoryMiddleware


class SupplementaryInputCallbackHandler(BaseCallbackHandler):
    """Move a task's pending supplementary inputs into its L1 session at each cycle start.

    Args:
        conversation: the agent's conversation (share it with ``GlidingMemoryMiddleware``).
        resolve: returns the conversation of the current run; ``conversation`` when omitted.

    Attributes:
        taken: every input the handler took, oldest first.

    Example:
        >>> handler = SupplementaryInputCallbackHandler.for_task(memory, "urn:task:1")
        >>> agent.invoke(inputs, config={"callbacks": [handler]})  # doctest: +SKIP
    """

    raise_error = True  # a failed hand-over must stop the run, not lose the input silently
    run_inline = True  # take the inputs before the model call goes out

    def __init__(
        self, conversation: Conversation, *, resolve: Callable[[], Conversation] | None = None
    ) -> None:
        if not isinstance(conversation, Conversation):
            raise InvalidInputError(
                f"conversation must be a gliding Conversation, got {conversation!r:.80}"
            )
        if resolve is not None and not callable(resolve):
            raise InvalidInputError(f"resolve must be callable, got {resolve!r:.80}")
        self.conversation = conversation
        self._resolve = resolve
        self.taken: list[SupplementaryInput] = []
        self.cycles = 0
        self._lock = threading.Lock()

    @classmethod
    def for_task(
        cls, memory: Memory, task_iri: str, *, agent: str = "agent"
    ) -> SupplementaryInputCallbackHandler:
        """Return a handler for ``agent`` working on ``task_iri`` in ``memory``."""
        return cls(Conversation(memory, task_iri, agent=agent))

    @classmethod
    def for_middleware(
        cls, middleware: GlidingMemoryMiddleware
    ) -> SupplementaryInputCallbackHandler:
        """Return a handler that takes, at each cycle start, the inputs of the run's scope."""
        return cls(middleware.conversation, resolve=middleware.current_conversation)

    def cycle_start(self) -> list[SupplementaryInput]:
        """Take the pending inputs of the run's scope into its session; return them."""
        chat = self.conversation if self._resolve is None else self._resolve()
        taken = chat.take_pending()
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
