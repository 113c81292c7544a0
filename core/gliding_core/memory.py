"""Memory: the one facade users and adapters talk to; it owns every layer's objects.

Invariants: defaults are chosen in one place (``MemoryConfig``); collaborators may be passed in
ready-made; ``Memory()`` keeps everything in memory, ``Memory.open(path)`` keeps everything under
one directory. The memory holds every per-memory object itself (the blackboard, the one
scheduler with its projector and view cache, the stale-turn tracker; a session holds its
conversation ledger): no module keeps a registry of memories. A directory's embedded engines
(Chroma's files) belong to one process at a time, which holds the directory's lock file while
it is open (``gliding_core.store.ownership``); L0 is shared by any number of processes. A memory
that fails to open closes whatever it had opened and releases the lock; closing the memory
closes what it owns, once, and a closed memory opens no blackboard, scheduler or stale-turn
tracker it did not have (it could not close them any more).
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from contextlib import ExitStack
from pathlib import Path
from typing import Any, Literal

from typing_extensions import Unpack

from gliding_core.attention.supplementary import SupplementaryInputStore
from gliding_core.blackboard.board import AgentHandle, Blackboard
from gliding_core.blackboard.coordination.registries import Coordination
from gliding_core.blackboard.graph import open_graph
from gliding_core.bus import EventBus
from gliding_core.coherence.sqlite_directory import SQLiteDirectory
from gliding_core.config import EvictionPolicy, MemoryConfig, SearchOptions, SessionConfig
from gliding_core.errors import ClosedError, ConfigError, InvalidInputError, StorageError
from gliding_core.framing import ChatFraming
from gliding_core.hyperspace.backends import CachedEmbedder, make_embedder
from gliding_core.hyperspace.dense import DenseIndex, chroma_client, close_client
from gliding_core.hyperspace.embedders import Embedder
from gliding_core.hyperspace.index import VectorIndex
from gliding_core.hyperspace.search import HybridSearch, SearchResults
from gliding_core.hyperspace.structure import StructureIndex
from gliding_core.jsonld import Node, preview
from gliding_core.projection.projector import Projector
from gliding_core.projection.scheduler import Scheduler
from gliding_core.session import Session, SessionServices
from gliding_core.store.filters import SearchFilters
from gliding_core.store.manifest import MANIFEST_FILE as MANIFEST_FILE  # where it always was
from gliding_core.store.manifest import read_manifest, server_collection, update_manifest
from gliding_core.store.ownership import OwnerLock
from gliding_core.store.protocol import EntryStore, Records
from gliding_core.store.sqlite import L0Store
from gliding_core.summarize import ExtractiveSummarizer, Summarizer
from gliding_core.tokens import TokenCounter
from gliding_core.topics import TopicMonitor
from gliding_core.view.stale_turns import StaleTurns

logger = logging.getLogger(__name__)

STORE_FILE = "l0.sqlite3"
EMBEDDING_CACHE_FILE = "embeddings.sqlite3"
CHROMA_DIR = "chroma"
POINCARE_FILE = "poincare.npz"
BLACKBOARD_DIR = "blackboard"
COHERENCE_FILE = "coherence.sqlite3"


class Memory:
    """An agent memory: L0, the L1 sessions and the attention layer, with their services.

    Args:
        config: settings; ``MemoryConfig.from_env()`` when omitted (the defaults, with what the
            ``GLIDING_*`` variables and the API keys' usual variables set).
        store: a ready L0 store; the directory's (or an in-memory one) when omitted.
        tokens: a ready token counter; one for ``config.token_encoding`` when omitted.
        embedder: the embedding model for search, relevance and topics; by default the backend
            ``config.embedder`` names (``auto``: the local model when installed, else a
            fallback, with a logged warning). Every embedding is cached.
        summarizer: writes L1 summaries; the extractive summarizer by default.
        bus: the event bus; a new one when omitted.
        directory: where the memory keeps its files, or ``None`` when it lives in memory.
        engines: whether to run the embedded engines (see ``Memory.open``).
        clock: the time source of sessions (seconds); tests pass a fake one.

    Raises:
        InvalidInputError: an argument has the wrong type.
        DirectoryInUseError: another open memory owns the directory's embedded engines.
        IndexMismatchError: a shared Chroma server's collection holds another embedder's
            vectors.
        StorageError: a file of the memory cannot be opened or is damaged.

    Example:
        >>> with Memory() as memory:
        ...     iri = memory.store.put({"@id": "urn:ex:1", "text": "hello"}, tags=["greeting"])
    """

    def __init__(
        self,
        *,
        config: MemoryConfig | None = None,
        store: EntryStore | None = None,
        tokens: TokenCounter | None = None,
        embedder: Embedder | None = None,
        summarizer: Summarizer | None = None,
        bus: EventBus | None = None,
        directory: Path | None = None,
        engines: bool = True,
        clock: Callable[[], float] = time.time,
    ) -> None:
        _check_parts(config, store, embedder, summarizer, directory, engines)
        self.config = config or MemoryConfig.from_env()
        self.directory = directory
        self.engines = engines
        self._closer = ExitStack()
        self._ready = False
        try:
            manifest = self._read_manifest()
            self._open_files(store, embedder)
            self.tokens = tokens or TokenCounter(self.config.token_encoding)
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
            self._closer.callback(self.topics.stop)
            self._index = self._open_index()
            self.hyperspace = HybridSearch(self.store, self._index, settings=self.config.search)
            self.structure = StructureIndex(
                self.store, None if directory is None else directory / POINCARE_FILE
            )
            self._write_manifest(manifest)
        except BaseException:
            self._closer.close()
            raise
        self._sessions: dict[tuple[str, str], Session] = {}
        self._lock = threading.Lock()
        self._blackboard: Blackboard | None = None
        self._blackboard_lock = threading.Lock()
        self._scheduler: Scheduler | None = None
        self._stale_turns: StaleTurns | None = None
        self._owned_lock = threading.Lock()  # builds the scheduler and the stale-turn tracker
        self._closed = False
        self._ready = True

    @property
    def _embedded(self) -> bool:
        """Whether this memory runs Chroma in process (on files it must own, when it has any)."""
        return self.engines and self.config.chroma_host is None

    def _open_files(self, store: EntryStore | None, embedder: Embedder | None) -> None:
        """Take the directory's lock when the engines are embedded, then open L0 and the cache."""
        directory = self.directory
        self.owner: OwnerLock | None = None
        if directory is not None and self._embedded:
            self.owner = OwnerLock.acquire(directory)
            self._closer.callback(self.owner.release)
        made = store is None
        if store is None:
            store = L0Store(
                None if directory is None else directory / STORE_FILE, self.config.store
            )
        self.store = store
        # A store passed in becomes the memory's to close, once the memory has opened.
        self._closer.callback(lambda: store.close() if made or self._ready else None)
        self._cache = CachedEmbedder(
            embedder if embedder is not None else _configured_embedder(self.config),
            None if directory is None else directory / EMBEDDING_CACHE_FILE,
        )
        self._closer.callback(self._cache.close)
        closer = getattr(self._cache.inner, "close", None)
        if embedder is None and callable(closer):  # an embedder the memory made (an HTTP pool)
            self._closer.callback(closer)
        self.embedder: Embedder = self._cache

    def _open_index(self) -> VectorIndex | None:
        """Open the dense index when this memory runs it (embedded, or on a Chroma server)."""
        if not self.engines and self.config.chroma_host is None:
            logger.info("%r opened without its engines: search is lexical only", self)
            return None
        client = chroma_client(
            None if self.directory is None or not self._embedded else self.directory / CHROMA_DIR,
            host=self.config.chroma_host,
            port=self.config.chroma_port,
        )
        self._closer.callback(close_client, client)  # stops Chroma's system unless shared
        index = DenseIndex(
            self.store,
            self.embedder,
            client,
            self._collection(),
            # Only the owner of the collection's files may drop them; a shared server's
            # collection may be another process's.
            on_mismatch="rebuild" if self.owner is not None else "raise",
            windows=self.config.dense,
        )
        self._closer.callback(index.close)
        return index

    @property
    def index(self) -> VectorIndex:
        """The dense index.

        Raises:
            ConfigError: the memory was opened without its engines (``engines=False``).
        """
        if self._index is None:
            raise ConfigError(
                f"{self!r} was opened with engines=False and has no dense index; its search "
                "is lexical only (open it with engines=True in the process that owns it)"
            )
        return self._index

    @classmethod
    def open(
        cls,
        path: str | os.PathLike[str],
        *,
        config: MemoryConfig | None = None,
        embedder: Embedder | None = None,
        summarizer: Summarizer | None = None,
        engines: bool = True,
    ) -> Memory:
        """Open (creating if needed) the memory kept under the directory ``path``.

        One process at a time runs a directory's embedded engines (Chroma's files): it holds
        the directory's lock file (``owner.lock``) until it closes the memory or dies. Any
        number of other processes may open the same directory with ``engines=False`` for L0
        work: storing and reading entries, supplementary inputs, sessions, and lexical search
        (the results' ``arms`` say so). Their writes reach the owner's dense index through L0's
        change log, before the owner's next search or when it next opens. For several processes
        that all search by meaning, run the dense index on a Chroma server
        (``MemoryConfig(chroma_host=..., chroma_port=...)``): no process then owns the
        directory, and each one's writes reach the shared index.

        Args:
            path: the memory's directory; created with its parents when missing.
            config: settings; ``MemoryConfig.from_env()`` when omitted.
            embedder: see ``Memory``.
            summarizer: see ``Memory``.
            engines: ``False`` opens the directory without its embedded engines and without
                taking its lock (a Chroma server, when configured, still serves the dense arm).

        Raises:
            InvalidInputError: ``path`` is not a usable path, exists and is not a directory, or
                another argument has the wrong type.
            DirectoryInUseError: another open memory owns the directory (its ``pid`` names
                the holder).
            StorageError: the directory or one of its files cannot be created, opened or read.
        """
        _check_parts(config, None, embedder, summarizer, None, engines)
        return cls(
            config=config,
            embedder=embedder,
            summarizer=summarizer,
            directory=_prepare(path),
            engines=engines,
        )

    @property
    def embedder_name(self) -> str:
        """The name of the active embedding backend (``local:all-MiniLM-L6-v2``, ``hash-256``)."""
        return self._cache.name

    def search(
        self,
        query: str,
        k: int = 10,
        *,
        filters: SearchFilters | None = None,
        **options: Unpack[SearchOptions],
    ) -> SearchResults:
        """Hybrid search of everything in L0 (see ``HybridSearch.search``).

        ``options`` override ``config.search`` (``SearchConfig``) for this call:
        ``memory.search(query, lexical_weight=1.0, dense_weight=0.0, rerank=False)``.
        """
        return self.hyperspace.search(query, k, filters=filters, **options)

    def put_many(self, records: Records, *, embed: Literal["now", "later"] = "now") -> list[str]:
        """Store many nodes in one L0 transaction; return their IRIs, in order.

        Each item is a node (a mapping or JSON text) or a ``Record`` carrying its own tags,
        named graph, importance and metadata: ``Record(node, tags=[...], named_graph=...,
        importance=0.8)``. Every item is validated before anything is written.

        Args:
            records: the nodes or records.
            embed: ``"now"`` returns once the dense index has embedded them too; ``"later"``
                returns once L0 has committed, and the dense index catches up in a
                background thread: until it has, searches find the new entries by words
                only and their results' ``index_behind`` says how many changes are missing.

        Raises:
            InvalidInputError: an item, or ``embed``, is invalid (nothing is written).
        """
        if embed not in ("now", "later"):
            raise InvalidInputError(f"embed must be 'now' or 'later', got {preview(embed)}")
        index = self._index
        if embed == "now" or index is None:
            return self.store.put_many(records)
        with index.deferred():
            iris = self.store.put_many(records)
        index.refresh_later()
        return iris

    def _read_manifest(self) -> dict[str, Any]:
        """Return the directory's ``memory.json`` (``{}`` when none), checked before opening."""
        return {} if self.directory is None else read_manifest(self.directory)

    def _write_manifest(self, manifest: dict[str, Any]) -> None:
        """Record the embedder in ``memory.json`` (the owner's job; the index checks its own)."""
        directory, name = self.directory, self.embedder_name
        if directory is not None and self.owner is not None and manifest.get("embedder") != name:
            update_manifest(directory, {"embedder": name})

    def _collection(self) -> str | None:
        """Name the collection: fresh in memory, fixed in owned files, chosen once on a server."""
        if self.directory is None:
            return None
        if self._embedded:
            return "gliding-l0"
        return server_collection(self.directory)

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

    @property
    def blackboard(self) -> Blackboard:
        """The L2 blackboard, built on first use, flushing to this memory's L0 store.

        Its graph is the configured SPARQL endpoint, else on disk under the memory directory
        (``Memory.open``; the directory's owner only, like Chroma's files), else in memory; its
        coordination database (leases, tasks, agents, messages) is ``blackboard.sqlite3`` in
        the directory, or private in memory.

        Raises:
            ConfigError: the memory was opened with ``engines=False`` and no SPARQL endpoint
                is configured (the on-disk graph belongs to the directory's owner).
            DirectoryInUseError: another process owns the directory.
            ClosedError: the memory is closed and never opened its blackboard.
        """
        with self._blackboard_lock:
            if self._blackboard is None:
                self._check_open("blackboard")
                self._blackboard = self._open_blackboard()
            return self._blackboard

    def _open_blackboard(self) -> Blackboard:
        settings = self.config.blackboard
        path = None if self.directory is None else self.directory / BLACKBOARD_DIR
        if path is not None and settings.endpoint is None:
            if not self.engines:
                raise ConfigError(
                    f"{self!r} was opened with engines=False: its blackboard needs a SPARQL "
                    "endpoint (MemoryConfig(blackboard=BlackboardConfig(endpoint=...)))"
                )
            if self.owner is None:  # Chroma runs on a server: the graph's files still need one
                self.owner = OwnerLock.acquire(path.parent)
                self._closer.callback(self.owner.release)
        coordination = Coordination.open(self.directory, config=settings.coordination, bus=self.bus)
        graph = open_graph(path=path, endpoint=settings.endpoint)
        # Copies and generations are shared by every process of the directory (next to the
        # coordination database) when the graph is a server's. An embedded graph, in memory or
        # on disk, has one process (the directory's owner; RocksDB locks its files too), so
        # the in-process directory will do, and its writes skip a SQLite transaction each.
        shared = None
        if self.directory is not None and graph.kind == "server":
            shared = SQLiteDirectory(self.directory / COHERENCE_FILE)
        board = Blackboard(
            graph,
            store=self.store,
            bus=self.bus,
            config=settings,
            coordination=coordination,
            directory=shared,
        )
        # Closed first (the stack is last in, first out): it flushes to L0 before the store closes.
        self._closer.callback(board.close)
        if board.backend.kind != "memory":
            board.flush()  # what a crash left dirty
            coordination.remirror()  # what a crash left unmirrored
        return board

    @property
    def scheduler(self) -> Scheduler:
        """The L3 scheduler over this memory's blackboard, built on first use.

        One per memory, with the memory's one projector and view cache: the adapters' role
        agents, frame retrievers and tools all read through it (``scheduler.with_roles``
        gives other role frames over the same projector). It stops listening to the
        blackboard's events when the memory closes.

        Raises:
            ClosedError: the memory is closed and never built one.
            ConfigError: the memory has no blackboard (see ``blackboard``).
        """
        with self._owned_lock:
            if self._scheduler is None:
                self._check_open("scheduler")
                projector = Projector(self.blackboard, self.tokens)
                self._closer.callback(projector.close)
                self._scheduler = Scheduler(projector, store=self.store, search=self.search)
            return self._scheduler

    @property
    def stale_turns(self) -> StaleTurns:
        """The turns of this memory's conversations that quote a shared node since moved on.

        One per memory, built on first use; the blackboard is opened only to check a quote,
        so a memory whose turns quote no node never opens it, and one that cannot have a
        blackboard (``engines=False`` without an endpoint) marks nothing by checking. It
        stops listening to the bus when the memory closes.

        Raises:
            ClosedError: the memory is closed and never built one.
        """
        with self._owned_lock:
            if self._stale_turns is None:
                self._check_open("stale-turn tracker")
                tracker = StaleTurns(self._shared_nodes, self.tokens, bus=self.bus)
                self._closer.callback(tracker.close)
                self._stale_turns = tracker
            return self._stale_turns

    def _shared_nodes(self, iris: Sequence[str]) -> Mapping[str, tuple[int, Node]] | None:
        """The blackboard's ``(generation, value)`` of the nodes among ``iris`` that exist."""
        try:
            board = self.blackboard
        except (ConfigError, ClosedError):  # none to ask: engines=False, or the memory closed
            return None
        if board.closed:
            return None
        found = board.read_many(list(iris))
        return {iri: (node.generation, node.node) for iri, node in found.items()}

    def _check_open(self, what: str) -> None:
        if self._closed:
            raise ClosedError(f"{self!r} is closed: it builds no {what} any more")

    def agent(self, name: str, *, role: str, task: str) -> AgentHandle:
        """Return the blackboard handle of agent ``name`` with ``role`` on ``task``."""
        return self.blackboard.agent(name, role=role, task=task)

    def close(self) -> None:
        """Close what the memory owns, once: stop the topic monitor, the scheduler's projector
        and the stale-turn tracker, flush and close the blackboard, close the index, Chroma,
        the cache and the store, and release the directory; closing twice is harmless."""
        with self._owned_lock:
            self._closed = True
        self._closer.close()

    def __enter__(self) -> Memory:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __repr__(self) -> str:
        where = "in memory" if self.directory is None else str(self.directory)
        return f"Memory({where})"


def _configured_embedder(config: MemoryConfig) -> Embedder:
    """The embedder ``config`` names, with the HTTP API's settings when it names one."""
    return make_embedder(
        config.embedder,
        model=config.embedder_model,
        url=config.embedder_url,
        api_key=config.embedder_api_key,
    )


def _check_parts(
    config: object,
    store: object,
    embedder: object,
    summarizer: object,
    directory: object,
    engines: object,
) -> None:
    """Reject collaborators of the wrong type before anything is opened."""
    if config is not None and not isinstance(config, MemoryConfig):
        raise InvalidInputError(
            f"config must be a MemoryConfig (MemoryConfig(**values) builds one), "
            f"got {preview(config)}"
        )
    if store is not None and not isinstance(store, EntryStore):
        raise InvalidInputError(f"store must be an EntryStore (an L0Store), got {preview(store)}")
    if embedder is not None and not isinstance(embedder, Embedder):
        raise InvalidInputError(
            f"embedder must have embed_documents and embed_query, got {preview(embedder)}"
        )
    if summarizer is not None and not isinstance(summarizer, Summarizer):
        raise InvalidInputError(f"summarizer must be a Summarizer, got {preview(summarizer)}")
    if directory is not None and not isinstance(directory, Path):
        raise InvalidInputError(f"directory must be a Path, got {preview(directory)}")
    if not isinstance(engines, bool):
        raise InvalidInputError(f"engines must be True or False, got {preview(engines)}")


def _prepare(path: object) -> Path:
    """Return ``path`` as a directory that exists, creating it and its parents when missing.

    Raises:
        InvalidInputError: ``path`` is not a non-empty path, or it (or a parent) is a file.
        StorageError: the directory cannot be created (permissions, a read-only disk ...).
    """
    name = os.fspath(path) if isinstance(path, (str, os.PathLike)) else None
    if not isinstance(name, str) or not name or "\0" in name:
        raise InvalidInputError(f"memory path must be a non-empty path, got {preview(path)}")
    try:
        os.fsencode(name)
    except UnicodeError:
        raise InvalidInputError(
            f"memory path {preview(path)} cannot be a file name on this system (it holds"
            " characters the file system encoding cannot write, such as a lone surrogate)"
        ) from None
    directory = Path(name)
    try:
        if directory.exists() and not directory.is_dir():
            raise InvalidInputError(f"memory path {name!r} exists and is not a directory")
        directory.mkdir(parents=True, exist_ok=True)
    except (FileExistsError, NotADirectoryError) as exc:
        raise InvalidInputError(
            f"memory path {name!r} cannot be a directory: a part of it is a file ({exc})"
        ) from exc
    except OSError as exc:
        raise StorageError(f"cannot create the memory directory {name!r}: {exc}") from exc
    return directory
