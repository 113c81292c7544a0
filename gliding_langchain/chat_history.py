"""A chat message history on the gliding memory: the legacy path for ``RunnableWithMessageHistory``.

LangChain deprecated ``BaseChatMessageHistory`` in langchain-core 1.6.4; new agents should use
``GlidingMemoryMiddleware`` with ``create_agent``. This class serves chains that still use
``RunnableWithMessageHistory``. It never calls the deprecated base initialiser, so creating one
does not warn (``RunnableWithMessageHistory`` itself still warns when built).

The messages live in the core's durable chat log (``gliding_core.view.chatlog``) of the chat's
scope: each message is one L0 entry (its turn's archive, with the whole message so it comes back
exactly) and one turn of the chat's L1 session; this module only converts messages. With a
``budget``, ``messages`` returns the budgeted view (the memory message where ``placement`` puts
it, then the newest messages that fit), which keeps the prompts of a long chat small;
``all_messages`` always returns everything.

The chat's ``session_id`` is its scope, a thread (``gliding_core.store.scope``: the same scope as a
LangGraph run with that ``thread_id``): its messages and turns carry the scope's tag, recall
reads that scope only, and input for the chat is put for ``scope_task_iri(thread_id=session_id)``.

Invariants: ``clear`` hides the messages from the history but keeps them in L0 (nothing stored
is lost; recall still finds them); ``forget`` erases the chat's scope from every layer of the
memory, for good (``Memory.forget``); messages come back in the order they were added; no other
scope (and no reader without one) reads a chat's messages.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from langchain_core.chat_history import BaseChatMessageHistory
from langchain_core.messages import BaseMessage, message_to_dict, messages_from_dict
from typing_extensions import Unpack

from gliding_core import Conversation, InvalidInputError, Memory, Scope
from gliding_core.config import ConversationSettings, ViewOptions
from gliding_core.retention.erasure import ForgetReport
from gliding_core.view.chatlog import ChatLog, LoggedMessage
from gliding_langchain.messages import bounded_message, from_record, to_records

NATIVE = "langchain"  # the key of this adapter's form of a message in the chat log


class GlidingChatMessageHistory(BaseChatMessageHistory):
    """The history of one chat, kept in L0 and summarised in L1.

    Args:
        memory: the memory to keep the chat in.
        session_id: the chat's id (any non-empty string).
        settings: the view's settings (``ConversationSettings``); with a ``budget``,
            ``messages`` returns the budgeted view in that many tokens.
        **options: fields of ``settings`` to replace (``budget=1500`` ...).

    Example:
        >>> chain = RunnableWithMessageHistory(
        ...     runnable, lambda sid: GlidingChatMessageHistory(memory, sid, budget=1500)
        ... )  # doctest: +SKIP
    """

    def __init__(
        self,
        memory: Memory,
        session_id: str,
        *,
        settings: ConversationSettings | None = None,
        **options: Unpack[ViewOptions],
    ) -> None:
        if not isinstance(memory, Memory):
            raise InvalidInputError(f"memory must be a gliding Memory, got {memory!r:.80}")
        if not isinstance(session_id, str) or not session_id:
            raise InvalidInputError(f"session_id must be a non-empty string, got {session_id!r}")
        self.memory = memory
        self.session_id = session_id
        self.conversation = Conversation(
            memory, scope=Scope.thread(session_id), settings=settings, **options
        )
        self.budget = options.get("budget", settings.budget if settings else None)
        self._log = ChatLog(self.conversation)

    @property
    def all_messages(self) -> list[BaseMessage]:
        """Every message of the chat since the last ``clear``, oldest first."""
        return [_message(logged) for logged in self._log.messages()]

    @property
    def messages(self) -> list[BaseMessage]:  # type: ignore[override]
        """The chat's messages: all of them, or the budgeted view when a budget is set."""
        history = self.all_messages
        if self.budget is None or not history:
            return history
        records = to_records(history)
        view = self.conversation.view(records)
        by_id = {r["id"]: m for r, m in zip(records, history, strict=True) if "id" in r}
        return [by_id[r["id"]] if r.get("id") in by_id else from_record(r) for r in view.messages]

    def add_messages(self, messages: Sequence[BaseMessage]) -> None:
        """Append ``messages``, each as a new message of the chat (a taken id is renewed)."""
        items = list(messages) if isinstance(messages, Sequence) else messages
        if not isinstance(items, list) or not all(isinstance(m, BaseMessage) for m in items):
            raise InvalidInputError(f"messages must be LangChain messages, got {messages!r:.80}")
        natives = [{NATIVE: message_to_dict(bounded_message(m))} for m in items]
        self._log.append(to_records(items), natives, renew=True)

    def clear(self) -> None:
        """Hide every message from the history.

        What it keeps: every message stays in L0 (tagged ``chat:cleared``), in the chat's L1
        session and in the dense index, and recall still finds it. To erase it, ``forget``.
        """
        self._log.clear()

    def forget(self) -> ForgetReport:
        """Erase this chat's scope (its thread) from every layer of the memory, for good.

        Its messages, turns, session, supplementary inputs and their index entries go, and no
        byte of them stays in the memory's files (``Memory.forget``); returns what each layer
        removed.
        """
        return self.memory.forget(self.conversation.scope)


def _message(logged: LoggedMessage) -> BaseMessage:
    """The LangChain message of a logged one: from its dict form, under the log's id."""
    native: Any = logged.native
    if not isinstance(native, dict) or NATIVE not in native:  # logged by another adapter
        return from_record(logged.record)
    (message,) = messages_from_dict([native[NATIVE]])
    return message if message.id == logged.id else message.model_copy(update={"id": logged.id})
