"""Agent middleware: the gliding memory as the short-term and long-term memory of a LangChain agent.

With ``create_agent(model, tools, middleware=[GlidingMemoryMiddleware(memory, task_iri)])``:
- before each model call, the messages the graph state gained since the last step (the user's
  input, tool results) are archived into L0 and the L1 session, and the task's pending
  supplementary inputs are added to the state as human messages;
- the model request is rewritten to the budgeted view (``gliding_core.Conversation.view``): the
  system prompt followed by the memory (L1 context and hybrid recall for the latest user
  message), then the newest messages that fit, tool calls never separated from their results,
  then the supplementary inputs; a tool call the model made with arguments over the limits a
  record keeps (nested thousands deep, megabytes long) is sent with its arguments elided, as
  the view counted it (``gliding_core.framing.bounded_call``), while the graph state, and so
  the tool, has the call as the model made it;
- after the call, the model's reply is archived.

With ``handle=`` (a role agent's blackboard handle) the memory is also the role's frame of the
handle's task, and recall skips the other agents' turns (``gliding_core.view.team``). The frame
shows a node that a blackboard tool's result in the request holds at its current value as a
reference (the token economy of ``gliding_core.view.team``): the request this middleware sends is
the one the copies are read from, so a middleware that trims messages should do it in
``before_model`` (the state) or wrap the model call outside this one (before it in the list); one
inside it that drops tool results from the request would leave references to copies the model
is not sent.

Every read and write has the run's scope (``gliding_core.store.scope``): the ``user_id`` of the
runtime context (an attribute or a key) or of ``config["configurable"]``, else the run's
``thread_id``, else the task the middleware was built with (single-tenant use). Each scope has
its own ``Conversation`` (its L1 session, its supplementary inputs, its recall), so bob's model
request never quotes alice's turns; input for alice is put for
``scope_task_iri(user_id="alice")``.

Invariants: the graph state keeps the full history; only what the model sees is budgeted; each
message is archived once; each supplementary input is added to the state exactly once, and is
seen by the model only as that message; concurrent runs of different scopes share no state but
the memory.
"""

from __future__ import annotations

import asyncio
import threading
import uuid
from collections import OrderedDict, deque
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

from langchain.agents.middleware import AgentMiddleware, AgentState, ModelRequest, ModelResponse
from langchain_core.messages import HumanMessage, SystemMessage
from langgraph.config import get_config
from langgraph.runtime import Runtime, get_runtime
from typing_extensions import Unpack

from gliding_core import Conversation, InvalidInputError, Memory, ModelView, SearchFilters
from gliding_core.blackboard.handle import AgentHandle
from gliding_core.config import ConversationSettings, ViewOptions
from gliding_core.projection.scheduler import Scheduler
from gliding_core.store.scope import Scope, Shared, resolve_scope
from gliding_core.view.team import role_conversation
from gliding_langchain.messages import bounded_message, supplement_message, to_records

ModelHandler = Callable[[ModelRequest[Any]], ModelResponse[Any]]
_POSITION = "gliding-position:"
AsyncModelHandler = Callable[[ModelRequest[Any]], Awaitable[ModelResponse[Any]]]


class GlidingMemoryMiddleware(AgentMiddleware[AgentState[Any], Any, Any]):
    """Give a ``create_agent`` agent the gliding memory, within a token budget per model call.

    Args:
        memory: the memory to archive into and recall from.
        task_iri: the task the agent works on; supplementary inputs are put for it.
        settings: agent, role, budget (tokens per model call, tools aside), recall size, shares
            and placement (``ConversationSettings``; ``"system"``: ``create_agent`` keeps the
            system message, so the memory is appended to it).
        recall_filters: restrict recall to some graphs, tags or types.
        shared: named graph IRIs or scopes every run's recall reads besides its own scope.
        conversation: a ready conversation (shared with a callback handler): the one of runs
            that name no user or thread; ``memory`` and ``task_iri`` are then taken from it.
        handle: a role agent's blackboard handle (``memory.agent(name, role=..., task=...)``):
            the model also sees the role's frame of the handle's task, recall skips the other
            agents' turns, and ``task_iri`` defaults to the handle's task
            (``gliding_core.view.team.role_conversation``).
        scheduler: the read path of ``handle``'s frame; ``memory.scheduler`` by default.
        keep_views: how many of the latest views ``views`` keeps.
        max_scopes: how many scopes' conversations are kept ready (their state lives in the
            memory's sessions, so one dropped here is rebuilt as it was).
        **options: fields of ``settings`` to replace (``budget=2000``, ``recall_k=3`` ...).

    Attributes:
        conversation: the conversation of runs that name no user or thread.
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
        settings: ConversationSettings | None = None,
        recall_filters: SearchFilters | None = None,
        shared: Sequence[Shared] = (),
        conversation: Conversation | None = None,
        handle: AgentHandle | None = None,
        scheduler: Scheduler | None = None,
        keep_views: int = 1_000,
        max_scopes: int = 1_024,
        **options: Unpack[ViewOptions],
    ) -> None:
        super().__init__()
        _check_count(keep_views, "keep_views")
        _check_count(max_scopes, "max_scopes")
        if conversation is None and handle is not None:
            conversation = _role_conversation(
                memory, task_iri, handle, scheduler, settings, recall_filters, shared, options
            )
        if conversation is None:
            if not isinstance(memory, Memory):
                raise InvalidInputError(f"memory must be a gliding Memory, got {memory!r:.80}")
            if not isinstance(task_iri, str):
                raise InvalidInputError(f"task_iri must be a string, got {task_iri!r:.80}")
            conversation = Conversation(
                memory,
                task_iri,
                settings=settings,
                recall_filters=recall_filters,
                shared=shared,
                **options,
            )
        elif not isinstance(conversation, Conversation):
            raise InvalidInputError(
                f"conversation must be a Conversation, got {conversation!r:.80}"
            )
        self.conversation = conversation
        self.views: deque[ModelView] = deque(maxlen=keep_views)
        self._max_scopes = max_scopes
        self._chats: OrderedDict[Scope, Conversation] = OrderedDict()
        self._lock = threading.Lock()

    # -- scopes --------------------------------------------------------------------------------

    def scope_of(self, runtime: Runtime[Any] | None) -> Scope:
        """Return the scope of the current run: its user, else its thread, else the task.

        The user is ``runtime.context``'s ``user_id`` (attribute or key), else
        ``config["configurable"]["user_id"]``; the thread is ``configurable["thread_id"]``.
        """
        runtime = runtime if runtime is not None else _current_runtime()
        configurable = _configurable()
        user = _field(getattr(runtime, "context", None), "user_id")
        user = user if user is not None else _field(configurable, "user_id")
        thread = _field(configurable, "thread_id")
        if thread is None:
            thread = _field(getattr(runtime, "execution_info", None), "thread_id")
        return resolve_scope(
            user_id=_identity(user), thread_id=_identity(thread), default=self.conversation.scope
        )

    def current_conversation(self) -> Conversation:
        """Return the conversation of the run this is called in (the default one outside)."""
        return self.conversation_for(self.scope_of(_current_runtime()))

    def conversation_for(self, scope: Scope) -> Conversation:
        """Return the conversation of ``scope``, built like the default one on first use."""
        if not isinstance(scope, Scope):
            raise InvalidInputError(f"scope must be a gliding Scope, got {scope!r:.80}")
        if scope == self.conversation.scope:
            return self.conversation
        with self._lock:
            chat = self._chats.get(scope)
            if chat is None:
                chat = self._chats[scope] = self.conversation.for_scope(scope)
                while len(self._chats) > self._max_scopes:
                    self._chats.popitem(last=False)
            self._chats.move_to_end(scope)
            return chat

    def _chat(self, runtime: Runtime[Any] | None) -> Conversation:
        return self.conversation_for(self.scope_of(runtime))

    # -- before and after the model --------------------------------------------------------------

    def before_model(self, state: AgentState[Any], runtime: Runtime[Any]) -> dict[str, Any] | None:
        """Archive the state's new messages; add pending supplementary inputs to the state."""
        chat = self._chat(runtime)
        chat.record(to_records(state["messages"]))
        delivered = chat.deliver()
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
        self._chat(runtime).record(to_records(state["messages"]))
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
        view = self._chat(request.runtime).view(records)
        with self._lock:
            self.views.append(view)
        originals = dict(
            zip((r["id"] for r in records[len(system) :]), request.messages, strict=True)
        )
        kept = [_message(r, originals) for r in view.messages if not _in_system(r, originals)]
        memory = view.memory if self.conversation.settings.placement == "system" else ""
        return request.override(messages=kept, system_message=_with_memory(system, memory))


def _role_conversation(
    memory: object,
    task_iri: object,
    handle: object,
    scheduler: Scheduler | None,
    settings: ConversationSettings | None,
    recall_filters: SearchFilters | None,
    shared: Sequence[Shared],
    options: Mapping[str, Any],
) -> Conversation:
    """The conversation of a role agent: its frame, its L1 context, its own recall."""
    if not isinstance(memory, Memory):
        raise InvalidInputError(f"memory must be a gliding Memory, got {memory!r:.80}")
    if not isinstance(handle, AgentHandle):
        raise InvalidInputError(f"handle must be an AgentHandle, got {handle!r:.80}")
    if task_iri is not None and task_iri != handle.task:
        raise InvalidInputError(
            f"task_iri {task_iri!r:.80} is not the task of the handle ({handle.task!r})"
        )
    return role_conversation(
        memory,
        handle,
        scheduler=scheduler,
        settings=settings,
        recall_filters=recall_filters,
        shared=shared,
        **options,
    )


def _in_system(record: Mapping[str, Any], originals: Mapping[str, Any]) -> bool:
    """Whether a view record goes into the request's system message (not its messages)."""
    return record["role"] == "system" and record.get("id") not in originals


def _message(record: Mapping[str, Any], originals: Mapping[str, Any]) -> Any:
    """The request message of a view record: the original (its tool calls bounded as the record
    counted them), or the memory as a human message."""
    if record.get("id") in originals:
        return bounded_message(originals[record["id"]])
    return HumanMessage(content=record["content"])


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


def _current_runtime() -> Runtime[Any] | None:
    """The runtime of the graph run this is called in, or ``None`` outside one."""
    try:
        runtime = get_runtime()
    except (RuntimeError, KeyError):  # outside a runnable context, or not a graph run
        return None
    return runtime if isinstance(runtime, Runtime) else None


def _configurable() -> Mapping[str, Any]:
    """The run's ``config["configurable"]``, empty outside a run."""
    try:
        config = get_config()
    except RuntimeError:  # called outside a runnable context
        return {}
    configurable = config.get("configurable") if isinstance(config, Mapping) else None
    return configurable if isinstance(configurable, Mapping) else {}


def _field(source: object, name: str) -> object:
    """``source[name]`` of a mapping, else ``source.name``, else ``None``."""
    if source is None:
        return None
    if isinstance(source, Mapping):
        return source.get(name)
    return getattr(source, name, None)


def _identity(value: object) -> str | None:
    """A user or thread id as a scope key: a string, or an int or UUID given for one."""
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, (int, uuid.UUID)) and not isinstance(value, bool):
        return str(value)
    raise InvalidInputError(f"a user or thread id must be a string, got {value!r:.80}")


def _check_count(value: object, what: str) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise InvalidInputError(f"{what} must be an int >= 1, got {value!r:.80}")
