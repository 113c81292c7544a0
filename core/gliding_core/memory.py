"""Memory: the one facade users and adapters talk to; it owns every layer's objects.

Invariants: defaults are chosen in one place (``MemoryConfig``); collaborators may be passed in
ready-made; ``Memory()`` keeps everything in memory, ``Memory.open(path)`` keeps everything under
one directory; closing the memory closes what it owns, once.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path

from gliding_core.attention.supplementary import SupplementaryInputStore
from gliding_core.bus import EventBus
from gliding_core.config import EvictionPolicy, MemoryConfig, SessionConfig
from gliding_core.errors import InvalidInputError
from gliding_core.filters import SearchFilters
from gliding_core.framing import ChatFraming
from gliding_core.hyperspace.backends import CachedEmbedder, make_embedder
from gliding_core.hyperspace.dense import DenseIndex, chroma_client, close_client
from gliding_core.hyperspace.embedders import Embedder
from gliding_core.hyperspace.search import HybridSearch, SearchHit
from gliding_core.hyperspace.structure import StructureIndex
from gliding_core.session import Session, SessionServices
from gliding_core.store import L0Store
from gliding_core.summarize import ExtractiveSummarizer, Summarizer
from gliding_core.tokens import TokenCounter
from gliding_core.topics import TopicMonitor

logger = logging.getLogger(__name__)

STORE_FILE = "l0.sqlite3"
EMBEDDING_CACHE_FILE = "embeddings.sqlite3"
CHROMA_DIR = "chroma"
MANIFEST_FILE = "memory.json"
POINCARE_FILE = "poincare.npz"


def _configured_embedder(config: MemoryConfig) -> Embedder:
    """The embedder ``config`` names, with the HTTP API's settings when it names one."""
    return make_embedder(
        config.embedder,
        model=config.embedder_model,
        url=config.embedder_url,
        api_key=config.embedder_api_key,
    )


def _collection(directory: Path | None) -> str | None:
    """A persistent memory keeps one collection; an in-memory one gets a fresh name."""
    return None if directory is None else "gliding-l0"


class Memory:
    """An agent memory: L0, the L1 sessions and the attention layer, with their services.

    Args:
        config: settings; ``MemoryConfig.from_env()`` when omitted (the defaults, with what the
            ``GLIDING_*`` variables and the API keys' usual variables set).
        store: a ready L0 store; an in-memory one built from ``config`` when omitted.
        tokens: a ready token counter; one for ``config.token_encoding`` when omitted.
        embedder: the embedding model for search, relevance and topics; by default the backend
            ``config.embedder`` names (``auto``: the local model when installed, else a
            fallback, with a logged warning). Every embedding is cached.
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
        self.config = config or MemoryConfig.from_env()
        self.directory = directory
        self.tokens = tokens or TokenCounter(self.config.token_encoding)
        self.store = store or L0Store(None, self.config.store)
        self._cache = CachedEmbedder(
            embedder if embedder is not None else _configured_embedder(self.config),
            None if directory is None else directory / EMBEDDING_CACHE_FILE,
        )
        self.embedder: Embedder = self._cache
        # An embedder the memory made is the memory's to close (an HTTP one holds a pool).
        self._owns_embedder = embedder is None
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
        self._chroma = client = chroma_client(
            None if directory is None else directory / CHROMA_DIR,
            host=self.config.chroma_host,
            port=self.config.chroma_port,
        )
        self.index = DenseIndex(self.store, self.embedder, client, _collection(directory))
        self.hyperspace = HybridSearch(self.store, self.index)
        self.structure = StructureIndex(
            self.store, None if directory is None else directory / POINCARE_FILE
        )
        if directory is not None:
            self._check_manifest(directory)
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
        config = config or MemoryConfig.from_env()
        store = L0Store(directory / STORE_FILE, config.store)
        return cls(
            config=config,
            store=store,
            embedder=embedder,
            summarizer=summarizer,
            directory=directory,
        )

    @property
    def embedder_name(self) -> str:
        """The name of the active embedding backend (``local:all-MiniLM-L6-v2``, ``hash-256``)."""
        return self._cache.name

    def search(
        self, query: str, k: int = 10, *, filters: SearchFilters | None = None
    ) -> list[SearchHit]:
        """Hybrid search of everything in L0 (see ``HybridSearch.search``)."""
        return self.hyperspace.search(query, k, filters=filters)

    def _check_manifest(self, directory: Path) -> None:
        """Record the embedder in ``memory.json``; re-embed the index when it changed."""
        path = directory / MANIFEST_FILE
        previous = json.loads(path.read_text()) if path.is_file() else {}
        if previous.get("embedder") != self.embedder_name:
            if previous.get("embedder") is not None or self.index.count() != self.store.count():
                logger.warning(
                    "embedder changed from %r to %r: rebuilding the dense index",
                    previous.get("embedder"),
                    self.embedder_name,
                )
                self.index.reset()
            path.write_text(json.dumps({"embedder": self.embedder_name}, indent=2) + "\n")

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

    def framing(self) -> ChatFraming:
        """Return the exact chat-message counter of this memory's token counter."""
        return ChatFraming(self.tokens)

    def close(self) -> None:
        """Stop the topic monitor and close the store; closing twice is harmless."""
        self.topics.stop()
        self.index.close()
        close_client(self._chroma)  # stops Chroma's system when no other memory shares it
        self.store.close()
        self._cache.close()
        closer = getattr(self._cache.inner, "close", None)
        if self._owns_embedder and callable(closer):
            closer()

    def __enter__(self) -> Memory:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __repr__(self) -> str:
        where = "in memory" if self.directory is None else str(self.directory)
        return f"Memory({where})"
