"""Agent middleware: the gliding memory as the short-term and long-term memory of a LangChain agent.

With ``create_agent(model, tools, middleware=[GlidingMemoryMiddleware(memory, task_iri)])``:
- before each model call, the messages the graph state gained since the last step (the user's
  input, tool results) are archived into L0 and the L1 session, and the task's pending
  supplementary inputs are added to the state as human messages;
- the model request is rewritten to the budgeted view (``gliding_core.Conversation.view``): the
  system prompt followed by the memory (L1 context and hybrid recall for the latest user
  message), then the newest messages that fit, tool calls never separated from their results,
  then the supplementary inputs;
- after the call, the model's reply is archived.

Invariants: the graph state keeps the full history; only what the model sees is budgeted; each
message is archived once; each supplementary input is added to the state exactly once.
"""

from __future__ import annotations

import asyncio
import threading
from collections import deque
from collections.abc import Awaitable, Callable
from typing import Any

from langchain.agents.middleware import AgentMiddleware, AgentState, ModelRequest, ModelResponse
from langchain_core.messages import SystemMessage
from langgraph.runtime import Runtime

from gliding_core import Conversation, InvalidInputError, Memory, ModelView, SearchFilters
from gliding_langchain.messages import supplement_message, to_records

ModelHandler = Callable[[ModelRequest[Any]], ModelResponse[Any]]
_POSITION = "gliding-position:"
AsyncModelHandler = Callable[[ModelRequest[Any]], Awaitable[ModelResponse[Any]]]


class GlidingMemoryMiddleware(AgentMiddleware[AgentState[Any], Any, Any]):
    """Give a ``create_agent`` agent the gliding memory, within a token budget per model call.

    Args:
        memory: the memory to archive into and recall from.
        task_iri: the task the agent works on; supplementary inputs are put for it.
        agent: the agent's name (one L1 session per agent and task).
        role: the agent's role; picks the eviction policy preset.
        budget: tokens per model call (the prompt, tools aside); the session budget by default.
        recall_k: how many L0 hits the memory message may quote.
        window_share: the share of the budget the newest messages may take.
        summary_share: the share of the memory message the L1 context may take.
        recall_filters: restrict recall to some graphs, tags or types.
        conversation: a ready conversation (shared with a callback handler); the arguments
            above are then ignored.
        keep_views: how many of the latest views ``views`` keeps.

    Attributes:
        views: the views of the latest model calls, oldest first (what the model saw).

    Example:
        >>> agent = create_agent(model, tools, middleware=[GlidingMemoryMiddleware(memory,
        ...     "urn:task:release", budget=2000)])  # doctest: +SKIP
    """

    def __init__(
        self,
        memory: Memory | None = None,
        task_iri: str | None = None,
        *,
        agent: str = "agent",
        role: str = "SA",
        budget: int | None = None,
        recall_k: int = 5,
        window_share: float = 0.5,
        summary_share: float = 0.5,
        recall_filters: SearchFilters | None = None,
        conversation: Conversation | None = None,
        keep_views: int = 1_000,
    ) -> None:
        super().__init__()
        if isinstance(keep_views, bool) or not isinstance(keep_views, int) or keep_views < 1:
            raise InvalidInputError(f"keep_views must be an int >= 1, got {keep_views!r:.80}")
        if conversation is None:
            if not isinstance(memory, Memory):
                raise InvalidInputError(f"memory must be a gliding Memory, got {memory!r:.80}")
            if not isinstance(task_iri, str):
                raise InvalidInputError(f"task_iri must be a string, got {task_iri!r:.80}")
            conversation = Conversation(
                memory,
                task_iri,
                agent=agent,
                role=role,
                budget=budget,
                recall_k=recall_k,
                window_share=window_share,
                summary_share=summary_share,
                recall_filters=recall_filters,
            )
        elif not isinstance(conversation, Conversation):
            raise InvalidInputError(
                f"conversation must be a Conversation, got {conversation!r:.80}"
            )
        self.conversation = conversation
        self.views: deque[ModelView] = deque(maxlen=keep_views)
        self._lock = threading.Lock()

    # -- before and after the model --------------------------------------------------------------

    def before_model(self, state: AgentState[Any], runtime: Runtime[Any]) -> dict[str, Any] | None:
        """Archive the state's new messages; add pending supplementary inputs to the state."""
        self.conversation.record(to_records(state["messages"]))
        delivered = self.conversation.deliver()
        if not delivered:
            return None
        return {"messages": [supplement_message(item) for item in delivered]}

    async def abefore_model(
        self, state: AgentState[Any], runtime: Runtime[Any]
    ) -> dict[str, Any] | None:
        """Async ``before_model``: the archive runs in a worker thread, off the event loop."""
        return await asyncio.to_thread(self.before_model, state, runtime)

    def after_model(self, state: AgentState[Any], runtime: Runtime[Any]) -> dict[str, Any] | None:
        """Archive the model's reply."""
        self.conversation.record(to_records(state["messages"]))
        return None

    async def aafter_model(
        self, state: AgentState[Any], runtime: Runtime[Any]
    ) -> dict[str, Any] | None:
        """Async ``after_model``: the archive runs in a worker thread, off the event loop."""
        return await asyncio.to_thread(self.after_model, state, runtime)

    # -- the model request -----------------------------------------------------------------------

    def wrap_model_call(
        self, request: ModelRequest[Any], handler: ModelHandler
    ) -> ModelResponse[Any]:
        """Call the model with the budgeted view of the request's messages."""
        return handler(self.budgeted(request))

    async def awrap_model_call(
        self, request: ModelRequest[Any], handler: AsyncModelHandler
    ) -> ModelResponse[Any]:
        """Async ``wrap_model_call``: the view is built in a worker thread."""
        return await handler(await asyncio.to_thread(self.budgeted, request))

    def budgeted(self, request: ModelRequest[Any]) -> ModelRequest[Any]:
        """Return ``request`` with its messages cut to the view the budget allows."""
        system = [request.system_message] if request.system_message is not None else []
        records = to_records([*system, *request.messages])
        for position, record in enumerate(records):  # an id-less message is known by position
            record.setdefault("id", f"{_POSITION}{position}")
        view = self.conversation.view(records)
        with self._lock:
            self.views.append(view)
        originals = dict(
            zip((r["id"] for r in records[len(system) :]), request.messages, strict=True)
        )
        kept = [originals[r["id"]] for r in view.messages if r.get("id") in originals]
        return request.override(messages=kept, system_message=_with_memory(system, view.memory))


def _with_memory(system: list[SystemMessage], memory: str) -> SystemMessage | None:
    """The system message with the memory text after it; content blocks (cache hints, images)
    of the original are kept as they are."""
    if not system:
        return SystemMessage(content=memory) if memory else None
    original = system[0]
    if not memory:
        return original
    if isinstance(original.content, str):
        content: str | list[str | dict[str, Any]] = (
            f"{original.content}\n\n{memory}" if original.content else memory
        )
    else:
        content = [*original.content, {"type": "text", "text": memory}]
    return original.model_copy(update={"content": content})
