"""Memory: the one facade users and adapters talk to; it owns every layer's objects.

Invariants: defaults are chosen in one place (``MemoryConfig``); collaborators may be passed in
ready-made; ``Memory()`` keeps everything in memory, ``Memory.open(path)`` keeps everything under
one directory; closing the memory closes what it owns, once.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from pathlib import Path

from gliding_core.attention.supplementary import SupplementaryInputStore
from gliding_core.attention.topics import TopicMonitor
from gliding_core.attention.window import ContextWindowManager
from gliding_core.bus import EventBus
from gliding_core.config import EvictionPolicy, MemoryConfig, SessionConfig
from gliding_core.errors import InvalidInputError
from gliding_core.hyperspace.embedders import Embedder, HashEmbedder
from gliding_core.session import Session, SessionServices
from gliding_core.store import L0Store
from gliding_core.summarize import ExtractiveSummarizer, Summarizer
from gliding_core.tokens import TokenCounter

STORE_FILE = "l0.sqlite3"


class Memory:
    """An agent memory: L0, the L1 sessions and the attention layer, with their services.

    Args:
        config: settings; ``MemoryConfig()`` when omitted.
        store: a ready L0 store; an in-memory one built from ``config`` when omitted.
        tokens: a ready token counter; one for ``config.token_encoding`` when omitted.
        embedder: the embedding model for relevance and topics; the hash embedder by default.
        summarizer: writes L1 summaries; the extractive summarizer by default.
        bus: the event bus; a new one when omitted.
        directory: where the memory keeps its files, or ``None`` when it lives in memory.
        clock: the time source of sessions (seconds); tests pass a fake one.

    Example:
        >>> with Memory() as memory:
        ...     iri = memory.store.put({"@id": "urn:ex:1", "text": "hello"}, tags=["greeting"])
    """

    def __init__(
        self,
        *,
        config: MemoryConfig | None = None,
        store: L0Store | None = None,
        tokens: TokenCounter | None = None,
        embedder: Embedder | None = None,
        summarizer: Summarizer | None = None,
        bus: EventBus | None = None,
        directory: Path | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.config = config or MemoryConfig()
        self.directory = directory
        self.tokens = tokens or TokenCounter(self.config.token_encoding)
        self.store = store or L0Store(None, self.config.store)
        self.embedder = embedder if embedder is not None else HashEmbedder()
        self.summarizer = summarizer or ExtractiveSummarizer(self.tokens)
        self.bus = bus or EventBus(self.config.bus_history)
        self.supplements = SupplementaryInputStore(self.store, self.bus)
        self.services = SessionServices(
            store=self.store,
            tokens=self.tokens,
            summarizer=self.summarizer,
            bus=self.bus,
            embedder=self.embedder,
            clock=clock,
        )
        self.topics = TopicMonitor(self.bus, self.config.topics, self.sessions)
        self._sessions: dict[tuple[str, str], Session] = {}
        self._lock = threading.Lock()

    @classmethod
    def open(
        cls,
        path: str | os.PathLike[str],
        *,
        config: MemoryConfig | None = None,
        embedder: Embedder | None = None,
        summarizer: Summarizer | None = None,
    ) -> Memory:
        """Open (creating if needed) the memory kept under the directory ``path``.

        Raises:
            InvalidInputError: ``path`` exists and is not a directory.
        """
        if not isinstance(path, (str, os.PathLike)) or not os.fspath(path):
            raise InvalidInputError(f"memory path must be a non-empty path, got {path!r}")
        directory = Path(path)
        if directory.exists() and not directory.is_dir():
            raise InvalidInputError(f"memory path {str(directory)!r} exists and is not a directory")
        directory.mkdir(parents=True, exist_ok=True)
        config = config or MemoryConfig()
        store = L0Store(directory / STORE_FILE, config.store)
        return cls(
            config=config,
            store=store,
            embedder=embedder,
            summarizer=summarizer,
            directory=directory,
        )

    def count_tokens(self, text: str) -> int:
        """Return the exact token count of ``text`` in the configured encoding."""
        return self.tokens.count(text)

    def session(
        self,
        task_iri: str,
        *,
        agent: str = "agent",
        role: str = "SA",
        config: SessionConfig | None = None,
        policy: EvictionPolicy | None = None,
    ) -> Session:
        """Return the L1 session of ``agent`` on ``task_iri``, creating it on first use.

        The first session also starts the background topic monitor.
        """
        key = (agent, task_iri)
        with self._lock:
            if key not in self._sessions:
                self._sessions[key] = Session(
                    self.services,
                    task_iri,
                    agent=agent,
                    role=role,
                    config=config or self.config.session,
                    policy=policy,
                    alpha=self.config.relevance_alpha,
                )
            session = self._sessions[key]
        self.topics.start()
        return session

    def sessions(self) -> list[Session]:
        """Return the open sessions."""
        with self._lock:
            return list(self._sessions.values())

    def window(self, *, keep_recent: int = 4, summary_tokens: int = 200) -> ContextWindowManager:
        """Return a context window manager using this memory's counter, summarizer, embedder."""
        return ContextWindowManager(
            self.tokens,
            self.summarizer,
            embedder=self.embedder,
            keep_recent=keep_recent,
            summary_tokens=summary_tokens,
        )

    def close(self) -> None:
        """Stop the topic monitor and close the store; closing twice is harmless."""
        self.topics.stop()
        self.store.close()

    def __enter__(self) -> Memory:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __repr__(self) -> str:
        where = "in memory" if self.directory is None else str(self.directory)
        return f"Memory({where})"
