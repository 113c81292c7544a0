"""Adapter: ``GlidingMemory``, a LlamaIndex chat memory that shows the model a budgeted view.

The full chat history is the core's durable chat log (``gliding_core.view.chatlog``) of the memory's
scope: every message put is one L0 entry, archived once into L0 and the L1 session, and a memory
reopened on the same directory and ``session_id`` has its history back. ``get`` returns
``Conversation.view`` of it: the leading system messages, one memory message (L1 context and
hybrid recall for the input; a user message before the newest turn by default, see
``placement``), the newest messages that fit, and the supplementary inputs other threads put
for the task (``memory.supplements.put(task_iri, text)``). This module only converts messages.

Invariants:
- ``get_all`` returns every message put or set, and each delivered supplementary input, in order;
  ``get`` never returns more tokens than ``budget`` (cl100k chat framing, as the core counts),
  unless the system messages and supplements alone are over it. An agent adds its own
  ``system_prompt``, tool schemas and in-progress tool calls outside this budget: size it for them.
- A supplementary input is delivered once: it becomes a user message of the history the first
  time ``get`` sees it, and is kept in every later view (so the model keeps seeing what it
  answered); it is never delivered again.
- A message is archived once: each gets an id when first put; ``set`` keeps the id of each
  message already in the history (matched by role, text and tool calls, in order), so only the
  new ones are archived; kept messages keep their first order.
- Callers get copies: LlamaIndex agents edit the messages they are given; the history here does
  not change with them.
- A tool call a model made with arguments over the limits a record keeps (nested thousands
  deep, megabytes long: ``gliding_core.framing.bounded_call``) is kept, and given back, with
  its arguments elided; the rest of the message as it was.
- Messages held beside the view (``hold``: a ``FunctionAgent``'s tool calls in progress, which
  it sends after the view) count for the next ``get`` only, and not after a put: the copies of
  shared nodes they hold are the model's for that one request (``Conversation.view``'s
  ``held``).
Thread-safe: the log has one lock. The async methods are BaseMemory's (a worker thread).
"""

from __future__ import annotations

import hashlib
import json
import threading
import weakref
from collections.abc import Sequence
from typing import Any

from llama_index.core.base.llms.types import ChatMessage, TextBlock
from llama_index.core.bridge.pydantic import ConfigDict, PrivateAttr
from llama_index.core.memory.types import BaseMemory
from typing_extensions import Unpack

from gliding_core.config import ConversationSettings, Placement, ViewOptions
from gliding_core.errors import InvalidInputError
from gliding_core.jsonld import preview
from gliding_core.memory import Memory
from gliding_core.retention.erasure import ForgetReport
from gliding_core.store.filters import SearchFilters
from gliding_core.store.scope import Shared, resolve_scope
from gliding_core.view.chatlog import ChatLog
from gliding_core.view.conversation import Conversation, ModelView
from gliding_llamaindex.messages import (
    Record,
    bounded_message,
    check_messages,
    from_record,
    to_record,
)

DEFAULT_TASK = "urn:gliding:task:llamaindex"
# A user message before the newest turn: ReActAgent drops a leading system message.
DEFAULT_PLACEMENT: Placement = "user"
NATIVE = "llama_index"  # the key of this adapter's form of a message in the chat log


class GlidingMemory(BaseMemory):
    """A LlamaIndex ``BaseMemory`` over a gliding ``Conversation``.

    Args:
        conversation: the conversation (memory, task, agent, budget) to read and archive into.
        chat_history: messages to start with (archived like ``set``).
        chat: the key of the chat history within the conversation's scope; the agent's name
            when omitted (``gliding_core.view.chatlog.ChatLog``). ``from_defaults`` gives the
            ``session_id`` of a user's session here.

    Example:
        >>> mem = GlidingMemory.from_defaults(Memory(), "urn:task:1", budget=900)  # doctest: +SKIP
        >>> await agent.run("Plan the release", memory=mem)  # doctest: +SKIP
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

    _conversation: Conversation = PrivateAttr()
    _log: ChatLog = PrivateAttr()
    _chat: str | None = PrivateAttr(default=None)
    _last_view: ModelView | None = PrivateAttr(default=None)
    _owned: Memory | None = PrivateAttr(default=None)
    _held: list[Record] = PrivateAttr(default_factory=list)
    _lock: threading.RLock = PrivateAttr(default_factory=threading.RLock)

    def __init__(
        self,
        conversation: Conversation,
        *,
        chat_history: list[ChatMessage] | None = None,
        chat: str | None = None,
    ) -> None:
        if not isinstance(conversation, Conversation):
            raise InvalidInputError(
                f"conversation must be a gliding_core Conversation, got {preview(conversation)}"
            )
        super().__init__()
        self._conversation = conversation
        self._log = ChatLog(conversation, chat)
        self._chat = chat
        if chat_history:
            self.set(chat_history)

    @classmethod
    def class_name(cls) -> str:
        """The LlamaIndex component name."""
        return "GlidingMemory"

    @classmethod
    def from_defaults(  # type: ignore[override]  # named options instead of **kwargs
        cls,
        memory: Memory | None = None,
        task_iri: str = DEFAULT_TASK,
        *,
        session_id: str | None = None,
        user_id: str | None = None,
        shared: Sequence[Shared] = (),
        token_limit: int | None = None,
        recall_filters: SearchFilters | None = None,
        settings: ConversationSettings | None = None,
        chat_history: list[ChatMessage] | None = None,
        **options: Unpack[ViewOptions],
    ) -> GlidingMemory:
        """Build a memory for an agent on ``task_iri``.

        Args:
            memory: the gliding memory; a new in-memory ``Memory()`` (closed by ``close``) when
                omitted.
            task_iri: the task of a memory with neither ``session_id`` nor ``user_id``.
            session_id: the chat's key, as LlamaIndex's chat stores use it: each session has
                its own chat history (``reset`` of one leaves the others). Alone, it is also
                the scope (``Scope.thread``).
            user_id: the user: their scope (``Scope.user``): long-term recall, the L1 session
                and supplementary inputs are the user's, across all their sessions.
            shared: named graph IRIs or scopes recall reads besides the memory's own scope.
            token_limit: LlamaIndex's name for the ``budget`` option; give one of the two.
            recall_filters: restrict recall further (see ``Conversation``).
            settings: agent, role, budget, recall size, shares and placement
                (``ConversationSettings``). Placement is ``"user"`` unless given: ``ReActAgent``
                drops the leading system message, ``FunctionAgent`` reads either.
            chat_history: messages to start with.
            **options: fields of ``settings`` to replace (``budget=900``, ``recall_k=3`` ...).

        Raises:
            InvalidInputError: ``memory`` is not a ``Memory``, or ``budget`` and
                ``token_limit`` disagree; and what ``Conversation`` rejects.
        """
        budget = options.get("budget")
        if budget is not None and token_limit is not None and budget != token_limit:
            raise InvalidInputError(
                f"give budget or token_limit, not both: got {preview(budget)} "
                f"and {preview(token_limit)}"
            )
        if token_limit is not None:
            options["budget"] = token_limit
        if settings is None:
            options.setdefault("placement", DEFAULT_PLACEMENT)
        scope = resolve_scope(user_id=user_id, thread_id=session_id, default=task_iri)
        owned = None
        if memory is None:
            memory = owned = Memory()
        try:
            conversation = Conversation(
                memory,
                scope=scope,
                shared=shared,
                recall_filters=recall_filters,
                settings=settings,
                **options,
            )
        except Exception:
            if owned is not None:
                owned.close()
            raise
        # A user's sessions share the user's scope; each keeps its own chat history.
        chat = session_id if user_id is not None else None
        value = cls(conversation, chat_history=chat_history, chat=chat)
        value._owned = owned
        if owned is not None:  # closed with the memory, or when the memory is collected
            weakref.finalize(value, owned.close)
        return value

    @property
    def conversation(self) -> Conversation:
        """The conversation this memory reads and archives into."""
        return self._conversation

    @property
    def session_id(self) -> str | None:
        """The session (chat) key this memory was built for, else ``None``."""
        if self._chat is not None:
            return self._chat
        scope = self._conversation.scope
        return scope.key if scope.kind == "thread" else None

    @property
    def last_view(self) -> ModelView | None:
        """The view the last ``get`` returned (tokens, recall hits, supplements), if any."""
        return self._last_view

    def get(self, input: str | None = None, **kwargs: Any) -> list[ChatMessage]:
        """Return what the model should see now, within the budget.

        Args:
            input: what to recall for; the latest user message when omitted.
            **kwargs: accepted for LlamaIndex's interface; unused.

        Raises:
            InvalidInputError: ``input`` is neither a string, a ``ChatMessage`` nor ``None``.
        """
        query = _query(input)
        with self._lock:
            delivered = [
                {"role": "user", "content": item.content, "id": item.iri, "supplement": item.iri}
                for item in self._conversation.deliver()
            ]
            self._log.append(delivered)
            logged = self._log.messages()
            held, self._held = self._held, []
        view = self._conversation.view([m.record for m in logged], query=query, held=held)
        self._last_view = view
        natives = {m.id: m.native for m in logged}
        return [_viewed(r, natives.get(str(r.get("id")))) for r in view.messages]

    def hold(self, messages: Sequence[ChatMessage]) -> None:
        """Hold ``messages`` for the next ``get``: the model is sent them after its view.

        A ``FunctionAgent`` sends its tool calls in progress (its scratchpad) after the view
        and puts them into the memory only at the end of its run; held, the copies of shared
        nodes in their results count as the model's (a frame shows those nodes by reference).
        The next ``get`` uses them once; a put drops them (the run started or ended).
        """
        checked = check_messages(list(messages))
        with self._lock:
            self._held = [to_record(m) for m in checked]

    def get_all(self) -> list[ChatMessage]:
        """Return the full history (with delivered supplements), unbudgeted, as copies."""
        return [_message(m.record, m.native) for m in self._log.messages()]

    def put(self, message: ChatMessage) -> None:
        """Append ``message`` to the history and archive it.

        Raises:
            InvalidInputError: ``message`` is not a ``ChatMessage``.
        """
        self.put_messages([message])

    def put_messages(self, messages: list[ChatMessage]) -> None:
        """Append ``messages`` to the history and archive them; all are checked first."""
        checked = _bounded(messages)
        with self._lock:
            self._held = []
            self._log.append([to_record(m) for m in checked], [_native(m) for m in checked])

    def set(self, messages: list[ChatMessage]) -> None:
        """Replace the history with ``messages``; those not archived before are archived."""
        checked = _bounded(messages)
        with self._lock:
            self._held = []
            unused: dict[str, list[str]] = {}
            for logged in self._log.messages():
                message = _message(logged.record, logged.native)
                unused.setdefault(_digest(message), []).append(logged.id)
            records = []
            for message in checked:  # a message already in the history keeps its id
                same = unused.get(_digest(message))
                records.append(to_record(message, key=same.pop(0) if same else None))
            self._log.keep([r["id"] for r in records if "id" in r])
            self._log.append(records, [_native(m) for m in checked])

    def reset(self) -> None:
        """Empty the chat history (``get_all`` returns nothing after it).

        What it keeps: every message stays archived in L0, in the L1 session and in the dense
        index (long-term memory), and recall still finds it. To erase it, ``forget``.
        """
        with self._lock:
            self._log.clear()
            self._last_view = None
            self._held = []

    def forget(self) -> ForgetReport:
        """Erase this memory's scope (its user, else its session) from every layer, for good.

        The chat history, the archived turns, the L1 session, the supplementary inputs and
        their index entries go, and no byte of them stays in the memory's files
        (``Memory.forget``); returns what each layer removed. A ``user_id`` memory forgets
        every session of that user.
        """
        memory = self._conversation.memory
        if not isinstance(memory, Memory):
            raise InvalidInputError(f"{preview(memory)} is not a gliding Memory: it cannot forget")
        with self._lock:
            report = memory.forget(self._conversation.scope)
            self._last_view = None
            self._held = []
        return report

    def close(self) -> None:
        """Close the ``Memory`` that ``from_defaults`` created; a memory passed in is left open."""
        if self._owned is not None:
            self._owned.close()


def _bounded(messages: object) -> list[ChatMessage]:
    """The messages checked, each as its record shows it (a model's oversized calls elided)."""
    return [bounded_message(m) for m in check_messages(messages)]


def _native(message: ChatMessage) -> Any:
    """The JSON form of a message, from which it comes back exactly (marked as LlamaIndex's)."""
    return {NATIVE: message.model_dump(mode="json")}


def _message(record: Record, native: Any) -> ChatMessage:
    """The message of a logged record: from its JSON form, else (another adapter's) the record."""
    if isinstance(native, dict) and NATIVE in native:
        return ChatMessage.model_validate(native[NATIVE])
    return from_record(record)


def _viewed(record: Record, native: Any) -> ChatMessage:
    """The message of a view record: as logged, with the view's content when it cut it."""
    message = _message(record, native)
    if record.get("cut"):  # too large for the budget: the view's head of it
        message.blocks = [TextBlock(text=record["content"])]
    return message


def _digest(message: ChatMessage) -> str:
    """What identifies a message's content: its role, text and tool calls."""
    record = to_record(message)
    return hashlib.sha256(json.dumps(record, sort_keys=True).encode()).hexdigest()[:16]


def _query(value: object) -> str | None:
    if value is None or isinstance(value, str):
        return value or None
    if isinstance(value, ChatMessage):
        return value.content or None
    raise InvalidInputError(f"input must be a string, a ChatMessage or None, got {preview(value)}")
