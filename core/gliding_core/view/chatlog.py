"""View: the durable chat log of one conversation: each message stored once, by id, in order.

Both adapters' chat histories (LangChain's ``GlidingChatMessageHistory``, LlamaIndex's
``GlidingMemory``) keep their messages here and only convert them. A message is a record
(``gliding_core.framing``) and is known by its ``id`` (the one identity rule: the framework's
id when it has one, else a fresh ``uuid4`` hex given once, when first logged; an append-only
history renews an id the log already holds, so no message replaces another). A delivered
supplementary input is marked by ``supplement``: the input's IRI (the one marker).

Storage: a message with text is one L0 entry, its turn's archive (``Conversation.record``), so
recall finds it once; a message without text or a system message is one ``ChatMessage`` entry;
a delivered input is logged on the turn that archived it when it was taken. Each entry carries
the scope's tag, the chat's tag and ``chat:active`` (``chat:cleared`` after ``clear``), and in
its metadata the record and the adapter's own serialisation (``native``), so the message comes
back exactly after a restart. A message too large for an entry's metadata (a tool result of
megabytes) keeps them in a ``ChatMarks`` entry of the chat's graph instead (its JSON, in parts:
``EntryStore.put_text``), named in the metadata; recall never reads that entry.

Invariants: one L0 entry per message, whatever adapter wrote it; messages come back in the
order they were first logged; ``clear`` hides messages and deletes nothing; a log reopened on
the same directory, scope and chat has its history back, and re-logging a message it holds
writes nothing.
"""

from __future__ import annotations

import json
import threading
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

from gliding_core.errors import InvalidInputError
from gliding_core.framing import Message, check_messages, message_text
from gliding_core.jsonld import preview
from gliding_core.store.entry import Entry
from gliding_core.view.conversation import Conversation

ACTIVE = "chat:active"
MARKS_TYPE = "ChatMarks"  # the type of the entry keeping a large message's record (UNREAD_TYPES)
MARKS_KEY = "chat_marks"  # the metadata key naming that entry
CLEARED = "chat:cleared"
CHAT_PREFIX = "urn:gliding:chat:"


@dataclass(frozen=True, slots=True)
class LoggedMessage:
    """One message of a chat log.

    Attributes:
        id: the message's id (its identity in the log).
        record: the message as a record (role, content, tool calls, ``supplement`` ...).
        native: the adapter's own serialisation of it (JSON), ``None`` when it gave none.
        iri: the L0 entry that holds it.
    """

    id: str
    record: Message
    native: Any
    iri: str


class ChatLog:
    """The durable, id-keyed message log of one chat of a conversation.

    Args:
        conversation: the conversation whose scope and session archive the messages.
        chat: the chat's name within the scope; the conversation's agent by default, so each
            agent of a scope has its own chat, and every adapter of one agent shares it.
    """

    def __init__(self, conversation: Conversation, chat: str | None = None) -> None:
        if not isinstance(conversation, Conversation):
            raise InvalidInputError(
                f"conversation must be a Conversation, got {preview(conversation)}"
            )
        chat = conversation.settings.agent if chat is None else chat
        if not isinstance(chat, str) or not chat:
            raise InvalidInputError(f"chat must be a non-empty string, got {preview(chat)}")
        self.conversation = conversation
        self.store = conversation.memory.store
        key = f"{quote(conversation.scope.name, safe='')}/{quote(chat, safe='')}"
        self.graph = CHAT_PREFIX + key
        self.tag = f"chat:{key}"
        self._lock = threading.RLock()
        self._ids: set[str] = set()
        for logged in self._read([self.tag]):  # after a restart: what is logged stays logged
            self._ids.add(logged.id)
            self.conversation.adopt(logged.id, logged.iri)

    def messages(self) -> list[LoggedMessage]:
        """Return the chat's messages since the last ``clear``, oldest first."""
        return self._read([self.tag, ACTIVE])

    def append(
        self,
        records: Sequence[Mapping[str, Any]],
        natives: Sequence[Any] | None = None,
        *,
        renew: bool = False,
    ) -> list[LoggedMessage]:
        """Log the records not logged before; a record without ``id`` gets a fresh one.

        A record whose ``id`` the log holds is skipped (it is logged already), or, with
        ``renew`` (an append-only history, where every message added is new), logged under a
        fresh id. Returns the messages logged now, in order, with their ids. All records are
        checked before any is written.

        Raises:
            InvalidInputError: a record is malformed, or ``natives`` does not match ``records``.
        """
        items = check_messages(records)
        extra = list(natives) if natives is not None else [None] * len(items)
        if len(extra) != len(items):
            raise InvalidInputError(f"natives has {len(extra)} items for {len(items)} records")
        with self._lock:
            fresh: list[tuple[Message, Any]] = []
            for item, native in zip(items, extra, strict=True):
                if "id" not in item or (renew and item["id"] in self._ids):
                    item["id"] = uuid.uuid4().hex
                if item["id"] not in self._ids:
                    self._ids.add(item["id"])
                    fresh.append((item, native))
            return [self._write(item, native) for item, native in fresh]

    def clear(self) -> None:
        """Hide every message from ``messages``; L0 keeps them, tagged ``chat:cleared``."""
        with self._lock, self.store.transaction():
            for entry in self.store.by_tags([self.tag, ACTIVE]):
                self.store.retag(entry.iri, add=[CLEARED], remove=[ACTIVE])

    def keep(self, ids: Sequence[str]) -> None:
        """Hide every active message whose id is not in ``ids`` (a history set anew)."""
        wanted = set(ids)
        with self._lock, self.store.transaction():
            for logged in self.messages():
                if logged.id not in wanted:
                    self.store.retag(logged.iri, add=[CLEARED], remove=[ACTIVE])

    def _write(self, item: Message, native: Any) -> LoggedMessage:
        marks = self._marks(item, {"chat_record": item, "chat_native": native})
        tags = [self.tag, ACTIVE]
        supplement = item.get("supplement")
        turn = self.conversation.input_turn(supplement) if isinstance(supplement, str) else None
        if turn is not None:  # the input's own turn holds it: no second entry
            self.store.retag(turn, add=[*tags, self.conversation.scope.tag])
            self.store.put({"@id": turn}, metadata=marks)
            return LoggedMessage(item["id"], item, native, turn)
        self.conversation.record([item], tags=tags, metadata=[marks])
        iri = self.conversation.archived(item["id"])
        if iri is None:  # not archived as a turn: a system message, or no text
            node = {
                "@id": f"{self.graph}/message/{quote(item['id'], safe='')}",
                "@type": "ChatMessage",
                "role": item["role"],
                "text": message_text(item),
            }
            iri = self.store.put(
                node,
                tags=[*tags, self.conversation.scope.tag],
                named_graph=self.graph,
                metadata=marks,
            )
        return LoggedMessage(item["id"], item, native, iri)

    def _marks(self, item: Message, marks: dict[str, Any]) -> dict[str, Any]:
        """The metadata that keeps a message: the record and native form themselves, or, for a
        message too large for an entry's metadata, the IRI of the entry keeping them in parts."""
        text = json.dumps(marks, sort_keys=True)
        if len(text) * 4 <= self.store.config.max_content_bytes // 2:
            return marks
        if len(text.encode("utf-8")) <= self.store.config.max_content_bytes // 2:
            return marks
        node = {"@id": f"{self.graph}/marks/{quote(item['id'], safe='')}", "@type": MARKS_TYPE}
        tags = [self.tag, self.conversation.scope.tag]
        iri = self.store.put_text(node, text, tags=tags, named_graph=self.graph)
        return {MARKS_KEY: iri}

    def _read(self, tags: list[str]) -> list[LoggedMessage]:
        return [m for m in map(self._logged, self.store.by_tags(tags)) if m is not None]

    def _logged(self, entry: Entry) -> LoggedMessage | None:
        kept = entry.metadata.get(MARKS_KEY)
        if not isinstance(kept, str):
            return _logged(entry.iri, entry.metadata)
        text = self.store.full_text(kept)
        return None if text is None else _logged(entry.iri, json.loads(text))


def _logged(iri: str, marks: Mapping[str, Any]) -> LoggedMessage | None:
    record = marks.get("chat_record")
    if not isinstance(record, dict) or not isinstance(record.get("id"), str):
        return None
    return LoggedMessage(record["id"], dict(record), marks.get("chat_native"), iri)
