"""Memory: the one facade users and adapters talk to; it owns every layer's objects.

Invariants: defaults are chosen in one place (``MemoryConfig``); collaborators may be passed in
ready-made; ``Memory()`` keeps everything in memory, ``Memory.open(path)`` keeps everything under
one directory, and ``Memory.open(url)`` in a PostgreSQL database that any number of processes
share. Which part opens where is one table (``gliding_core.storage``); this module asks it and
never tests the place itself. The memory holds every per-memory object itself (the blackboard,
the one scheduler with its projector and view cache, the stale-turn tracker; a session holds
its conversation ledger): no module keeps a registry of memories. A directory's embedded
engines (Chroma's files) belong to one process at a time, which holds the directory's lock
file while it is open (``gliding_core.store.ownership``); L0 is shared by any number of
processes. A memory that fails to open closes whatever it had opened and releases the lock;
closing the memory closes what it owns, once, and a closed memory opens no blackboard,
scheduler or stale-turn tracker it did not have (it could not close them any more).
"""

from __future__ import annotations

import logging
import os
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence, Sized
from contextlib import ExitStack
from pathlib import Path
from typing import Any, Literal

from tqdm import tqdm
from typing_extensions import Unpack

from gliding_core.attention.supplementary import SupplementaryInputStore
from gliding_core.blackboard.board import AgentHandle, Blackboard
from gliding_core.blackboard.coordination.sqlite import COORDINATION_FILE
from gliding_core.bus import EventBus
from gliding_core.config import (
    EvictionPolicy,
    MemoryConfig,
    SearchOptions,
    SessionConfig,
    is_database_url,
    not_a_directory,
)
from gliding_core.errors import ClosedError, ConfigError, InvalidInputError, StorageError
from gliding_core.framing import ChatFraming
from gliding_core.hyperspace.backends import CachedEmbedder, make_embedder
from gliding_core.hyperspace.embedders import Embedder
from gliding_core.hyperspace.index import VectorIndex
from gliding_core.hyperspace.search import HybridSearch, SearchResults
from gliding_core.hyperspace.structure import StructureIndex
from gliding_core.jsonld import Node, check_label, preview, validate_iri
from gliding_core.projection.projector import Projector
from gliding_core.projection.scheduler import Scheduler
from gliding_core.retention.erasure import (
    Erasure,
    ExpirySweeper,
    ForgetReport,
    Target,
    check_target,
    erase,
    expire,
    merge_reports,
    scope_entries,
)
from gliding_core.retention.transfer import ImportReport, Source, export_memory, import_memory
from gliding_core.session import Session, SessionServices, check_settings
from gliding_core.storage import BLACKBOARD_DIR as BLACKBOARD_DIR  # where the names always were
from gliding_core.storage import CHROMA_DIR as CHROMA_DIR
from gliding_core.storage import COHERENCE_FILE as COHERENCE_FILE
from gliding_core.storage import EMBEDDING_CACHE_FILE, POINCARE_FILE, Storage, storage_for
from gliding_core.storage import STORE_FILE as STORE_FILE
from gliding_core.store.filters import SearchFilters
from gliding_core.store.manifest import MANIFEST_FILE as MANIFEST_FILE  # where it always was
from gliding_core.store.ownership import OwnerLock
from gliding_core.store.protocol import EntryStore, Records
from gliding_core.store.scope import Scope
from gliding_core.summarize import ExtractiveSummarizer, Summarizer
from gliding_core.tokens import TokenCounter
from gliding_core.topics import TopicMonitor
from gliding_core.view.stale_turns import StaleTurns

logger = logging.getLogger(__name__)


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
        directory: where the memory keeps its files; when ``None``, the PostgreSQL database
            ``config.database_url`` names, else this process's memory only.
        engines: whether to run the embedded engines (see ``Memory.open``).
        clock: the time source of sessions (seconds); tests pass a fake one.

    Raises:
        InvalidInputError: an argument has the wrong type.
        DirectoryInUseError: another open memory owns the directory's embedded engines.
        IndexMismatchError: a shared Chroma server's collection holds another embedder's
            vectors.
        DatabaseUnavailableError: the database did not answer within
            ``config.database_timeout_s``.
        StorageError: a file of the memory cannot be opened or is damaged.
        ConfigError: the database role may not create the memory's schema or tables (the
            message names the statement to have an administrator run).

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
        self.storage: Storage = storage_for(directory, self.config)
        self.engines = engines
        self._closer = ExitStack()
        self._ready = False
        try:
            self.storage.claim(engines=engines, closer=self._closer)
            self._open_files(store, embedder)
            self.tokens = tokens or TokenCounter(self.config.token_encoding)
            self.summarizer = summarizer or ExtractiveSummarizer(self.tokens)
            self.bus = bus or EventBus(self.config.bus_history)
            self.supplements: SupplementaryInputStore = self.storage.open_queue(
                self.store, self.bus
            )
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
            self._index = self.storage.open_index(
                self.store, self.embedder, engines=engines, closer=self._closer
            )
            self.hyperspace = HybridSearch(self.store, self._index, settings=self.config.search)
            self._closer.callback(self.hyperspace.close)
            self.structure = StructureIndex(self.store, self.storage.file(POINCARE_FILE))
            self.storage.record(self.embedder_name)
            expiry = self.config.store.expiry
            # Last in, so first stopped on close: no sweep runs once the indexes start closing.
            self._sweeper = ExpirySweeper(self.sweep_expired, expiry.sweep_interval_s)
            self._closer.callback(self._sweeper.stop)
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
        self._forget_lock = threading.Lock()  # one erasure at a time
        self._closed = False
        self._ready = True
        self._sweeper.start()

    @property
    def directory(self) -> Path | None:
        """The memory's directory; ``None`` in memory or in a database."""
        return self.storage.directory

    @property
    def owner(self) -> OwnerLock | None:
        """The directory's lock, while this process owns its embedded engines."""
        return self.storage.owner

    def _open_files(self, store: EntryStore | None, embedder: Embedder | None) -> None:
        """Open L0 (unless given) and the embedding cache."""
        if store is None:
            store = self.storage.open_store(self._closer)
        else:  # a store passed in becomes the memory's to close, once the memory has opened
            given = store
            self._closer.callback(lambda: given.close() if self._ready else None)
        self.store = store
        self._cache = CachedEmbedder(
            embedder if embedder is not None else _configured_embedder(self.config),
            self.storage.file(EMBEDDING_CACHE_FILE),
        )
        self._closer.callback(self._cache.close)
        closer = getattr(self._cache.inner, "close", None)
        if embedder is None and callable(closer):  # an embedder the memory made (an HTTP pool)
            self._closer.callback(closer)
        self.embedder: Embedder = self._cache

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
        path: str | os.PathLike[str] | None = None,
        *,
        config: MemoryConfig | None = None,
        embedder: Embedder | None = None,
        summarizer: Summarizer | None = None,
        engines: bool = True,
    ) -> Memory:
        """Open (creating if needed) the memory in the directory or the database ``path`` names.

        A PostgreSQL URI (``postgresql://user@host:5432/db``, or a unix socket as
        ``postgresql://user@/db?host=/run/dir``) opens the memory kept in that database, in the
        schema ``config.database_schema``; without ``path``, the one ``config.database_url``
        (``GLIDING_DATABASE_URL``) names. Any number of processes and machines open one
        database at once, and nothing is owned: each keeps only derived state (caches, the
        Poincaré index, and its own dense index unless a Chroma server is configured). Its
        blackboard needs a SPARQL endpoint (``BlackboardConfig(endpoint=...)``).

        A directory: one process at a time runs its embedded engines (Chroma's files): it holds
        the directory's lock file (``owner.lock``) until it closes the memory or dies. Any
        number of other processes may open the same directory with ``engines=False`` for L0
        work: storing and reading entries, supplementary inputs, sessions, and lexical search
        (the results' ``arms`` say so). Their writes reach the owner's dense index through L0's
        change log, before the owner's next search or when it next opens. For several processes
        that all search by meaning, run the dense index on a Chroma server
        (``MemoryConfig(chroma_host=..., chroma_port=...)``): no process then owns the
        directory, and each one's writes reach the shared index.

        Args:
            path: the memory's directory (created with its parents when missing) or a
                PostgreSQL URI; ``config.database_url`` when omitted.
            config: settings; ``MemoryConfig.from_env()`` when omitted.
            embedder: see ``Memory``.
            summarizer: see ``Memory``.
            engines: ``False`` opens the directory without its embedded engines and without
                taking its lock (a Chroma server, when configured, still serves the dense arm);
                in a database, without a dense index of its own (lexical search, unless a
                Chroma server is configured).

        Raises:
            InvalidInputError: ``path`` is not a usable path, exists and is not a directory, or
                another argument has the wrong type; or no ``path`` and no database URL.
            ConfigError: ``path`` is a PostgreSQL URI that cannot be used (the message shows
                it with its password masked), or the role may not create the schema.
            DatabaseUnavailableError: the database did not answer in time.
            DirectoryInUseError: another open memory owns the directory (its ``pid`` names
                the holder).
            StorageError: the directory or one of its files cannot be created, opened or read.
        """
        _check_parts(config, None, embedder, summarizer, None, engines)
        config = config or MemoryConfig.from_env()
        if path is None and config.database_url is None:
            raise InvalidInputError(
                "Memory.open needs a directory or a PostgreSQL URI (or MemoryConfig.database_url,"
                " GLIDING_DATABASE_URL); Memory() keeps a memory in this process only"
            )
        if is_database_url(path):
            assert isinstance(path, str)
            config = MemoryConfig(**{**dict(config), "database_url": path})
        elif isinstance(path, str) and (why := not_a_directory(path)) is not None:
            raise InvalidInputError(
                f"{why}: not a PostgreSQL URI (postgresql://user@host:5432/db) nor a"
                " directory; the memory opens one of those"
            )
        directory = None if path is None or is_database_url(path) else _prepare(path)
        return cls(
            config=config,
            embedder=embedder,
            summarizer=summarizer,
            directory=directory,
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

    def put_many(
        self,
        records: Records,
        *,
        embed: Literal["now", "later"] = "now",
        progress: bool | None = None,
    ) -> list[str]:
        """Store many nodes in one L0 transaction; return their IRIs, in order.

        Each item is a node (a mapping or JSON text) or a ``Record`` carrying its own tags,
        named graph, importance, metadata and index fields: ``Record(node, tags=[...],
        named_graph=..., importance=0.8, index=["text"])``. Every item is validated before
        anything is written.

        Args:
            records: the nodes or records.
            embed: ``"now"`` returns once the dense index has embedded them too; ``"later"``
                returns once L0 has committed, and the dense index catches up in a
                background thread: until it has, searches find the new entries by words
                only and their results' ``index_behind`` says how many changes are missing.
            progress: show a progress bar of the embedding on standard error (``embed="now"``;
                with ``"later"`` the call embeds nothing). ``None``: when standard error is a
                terminal.

        Raises:
            InvalidInputError: an item, ``embed`` or ``progress`` is invalid (nothing is
                written).
        """
        if embed not in ("now", "later"):
            raise InvalidInputError(f"embed must be 'now' or 'later', got {preview(embed)}")
        if progress is not None and not isinstance(progress, bool):
            raise InvalidInputError(
                f"progress must be True, False or None, got {preview(progress)}"
            )
        index = self._index
        if index is None:
            return self.store.put_many(records)
        if embed == "later":
            with index.deferred():
                iris = self.store.put_many(records)
            index.refresh_later()
            return iris
        with _embedding_bar(records, progress) as bar, index.reporting(bar.update):
            return self.store.put_many(records)

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

        The session is kept in L0 (``gliding_core.store.session_state``): the session of the
        same agent and task in another process or memory on the same directory or database is
        the same session, and each one reads what the others changed before every use. The
        first session also starts the background topic monitor.
        """
        if not isinstance(task_iri, str) or not isinstance(agent, str):  # the key is hashed
            validate_iri(task_iri, what="task IRI")
            check_label(agent, what="agent")
        check_settings(config, policy)  # an open session is returned as it is, but not for these
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
        the directory, the memory's PostgreSQL schema, or private in memory.

        Raises:
            ConfigError: no SPARQL endpoint is configured and the memory is in PostgreSQL
                (every process must reach the graph), or was opened with ``engines=False``
                (the on-disk graph belongs to the directory's owner).
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
        graph, coordination, shared = self.storage.open_board(
            settings, self.bus, engines=self.engines, closer=self._closer
        )
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

    def forget(self, target: Target) -> ForgetReport:
        """Erase a scope's data (or the entries ``target`` lists) from every layer, for good.

        A scope (``Scope.user``, ``Scope.thread``, ``Scope.task``) loses its turns and
        sessions, chat log, supplementary inputs, memory notes, LangGraph store items (with a
        ``scope_template``), and its task's blackboard nodes and messages; a list of IRIs loses
        exactly those entries (``gliding_core.retention.erasure`` says how each is found).
        Each goes from L0 (with its edges, full-text rows and access statistics), the open L1
        sessions, the dense index, the Poincaré index, the embedding cache and the blackboard;
        then every store rewrites its files, so that after ``close`` no byte of a forgotten
        text is left in any file of the memory's directory. The other scopes' data is
        untouched.

        Rewriting the files costs about a copy of the L0 database and a refill of the dense
        index from the embedding cache: forget in batches, not per message. A memory opened
        with ``engines=False`` cannot reach the dense index or the on-disk blackboard: the
        report's ``skipped`` says so (open the directory as its owner to forget everything).

        Args:
            target: a ``Scope``, or a non-empty list of entry IRIs.

        Returns:
            What each layer removed (``ForgetReport``).

        Raises:
            InvalidInputError: ``target`` is neither a scope nor a list of IRIs.
            ClosedError: the memory is closed.
            StorageError: a store failed; run ``forget`` again to finish (it finds only what
                is left).
        """
        checked = check_target(target)
        if self._closed:
            raise ClosedError(f"{self!r} is closed: it cannot forget")
        with self._forget_lock:
            # Expired entries are invisible to the reads that find the target's: delete them
            # first, or the scrub would keep an expired entry of the target in the files.
            self._sweep_all()
            if isinstance(checked, Scope):
                found = scope_entries(self.store, checked)
                plan = Erasure(checked.name, found, task=checked.task_iri)
            else:
                plan = Erasure("iris", checked)
            plan.index, plan.cache = self._index, self._cache
            plan.windows = self.config.dense
            if self._index is None:
                plan.skipped.append(
                    "dense index: opened with engines=False (its owner drops "
                    "the vectors through L0's change log)"
                )
            plan.board = self._board_for(plan)
            return erase(self, plan, scrub=True)

    def export_jsonl(self, out: Source, *, scope: Scope | None = None) -> int:
        """Write every entry (or ``scope``'s) to ``out`` as JSON Lines; return how many.

        A header line (format version, embedder), then one JSON-LD entry per line with its
        tags, graph, importance, creation time, scope and vector
        (``gliding_core.retention.transfer``).
        Sessions' turns, chat logs, inputs and flushed blackboard nodes are entries: they go
        too. ``out`` is a path (written whole, then put in place) or a text file.
        """
        return export_memory(self, out, scope=scope, cache=self._cache)

    def import_jsonl(
        self, source: Source, *, skip_bad: bool = False, keep_vectors: bool = True
    ) -> ImportReport:
        """Read an export into this memory, in one transaction; return what was written.

        Every line is checked first: a malformed one raises ``MalformedImportError`` naming
        its line, and nothing is written, unless ``skip_bad`` imports the rest and lists the
        bad lines in the report. Entries come back exactly (IRI, content, tags, graph,
        importance, creation time); an entry of the same IRI is replaced. When its embedder
        is this memory's, the file's vectors of texts this memory has no vector of are kept,
        once a random sample of them matches the embedder (a mismatch raises
        ``MalformedImportError`` naming the entry, and nothing is written); a text the memory
        knows keeps its own vector. Otherwise, or with ``keep_vectors=False``, they are
        computed again.
        """
        return import_memory(
            self, source, cache=self._cache, skip_bad=skip_bad, keep_vectors=keep_vectors
        )

    def sweep_expired(self) -> ForgetReport:
        """Delete every expired entry now, from every layer as ``forget`` does (without the
        rewrite of the files); return what went.

        Expired entries are invisible from the moment they expire; the memory runs this every
        ``StoreConfig.expiry.sweep_interval_s`` seconds in the background (0: never), one
        transaction of at most ``sweep_batch`` entries at a time.
        """
        if self._closed:
            raise ClosedError(f"{self!r} is closed: it sweeps nothing")
        with self._forget_lock:
            return self._sweep_all()

    def _sweep_all(self) -> ForgetReport:
        """Delete every expired entry, a batch a transaction (the caller holds the lock)."""
        batch = self.config.store.expiry.sweep_batch
        reports: list[ForgetReport] = []
        while True:
            report = expire(
                self, index=self._index, cache=self._cache, limit=batch, windows=self.config.dense
            )
            reports.append(report)
            if report.removed < batch:
                return merge_reports(reports)

    def _board_for(self, plan: Erasure) -> Blackboard | None:
        """The blackboard to forget from: the open one, or the directory's if it has one."""
        if self._blackboard is None:
            directory = self.directory
            kept = directory is not None and (
                (directory / BLACKBOARD_DIR).exists() or (directory / COORDINATION_FILE).exists()
            )
            if self.config.blackboard.endpoint is None and not kept:
                return None
        try:
            return self.blackboard
        except ConfigError as exc:
            plan.skipped.append(f"blackboard: {exc}")
            return None

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
        return f"Memory({self.storage.describe()})"


def _embedding_bar(records: Records, progress: bool | None) -> tqdm[Any]:
    """A progress bar of the entries of ``records`` on standard error: shown when ``progress``
    says so, or by default when standard error is a terminal (not in a log or a pipe)."""
    shown = _stderr_is_terminal() if progress is None else progress
    total = None  # an iterator's length is unknown: the bar counts without a percentage
    if isinstance(records, Sized) and not isinstance(records, (str, bytes, Mapping)):
        total = len(records)
    return tqdm(
        total=total,
        desc="embedding",
        unit="entries",
        file=sys.stderr,
        disable=not shown,
        leave=False,
    )


def _stderr_is_terminal() -> bool:
    try:
        return sys.stderr is not None and sys.stderr.isatty()
    except (AttributeError, ValueError):  # replaced by an object without isatty, or closed
        return False


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
