"""Facade: where a memory keeps its state, as one table from the place to what opens each part.

A memory lives in this process only (``Memory()``), under a directory (``Memory.open(path)``)
or in a PostgreSQL database that any number of processes share (``Memory.open(url)``,
``MemoryConfig.database_url``). ``storage_for`` picks the row; ``Memory`` asks the row for
each part and never tests which one it has:

=====================  ==================  ======================  ==========================
part                   in memory           a directory             a PostgreSQL database
=====================  ==================  ======================  ==========================
L0 entries             ``L0Store()``       ``l0.sqlite3``          ``PostgresEntryStore``
supplementary inputs   on L0               on L0                   ``PostgresSupplementary
                                                                   Queue`` (a lock per task)
dense index            Chroma, in memory   Chroma's files (owner)  pgvector in the schema
                                           or the Chroma server    (HNSW), or the Chroma
                                                                   server when configured
embedding cache        in memory           ``embeddings.sqlite3``  in memory
Poincaré index         in memory           ``poincare.npz``        in memory (trained from
                                                                   the shared hierarchy)
blackboard graph       pyoxigraph          on disk (owner) or the  the SPARQL endpoint
                                           SPARQL endpoint         (required)
coordination           SQLite in memory    ``blackboard.sqlite3``  ``PostgresCoordination
                                                                   Store``
coherence directory    in the process      ``coherence.sqlite3``   ``PostgresDirectory``
                                           with an endpoint        (LISTEN/NOTIFY push)
owner lock             none                while Chroma or the     none: any number of
                                           graph is embedded       processes and machines
=====================  ==================  ======================  ==========================

Invariants: a row opens nothing until asked, and registers every part it opens on the
memory's closer, so a memory that fails half-way closes what it had; a database URL's password
appears in no ``repr``, message or log line of this module (``mask_url``).
"""

from __future__ import annotations

import hashlib
import logging
import math
import re
from contextlib import ExitStack
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Protocol

from gliding_core.attention.supplementary import SupplementaryInputStore
from gliding_core.blackboard.coordination.registries import Coordination
from gliding_core.blackboard.graph import GraphBackend, open_graph
from gliding_core.bus import EventBus
from gliding_core.coherence.directory import Directory
from gliding_core.coherence.sqlite_directory import SQLiteDirectory
from gliding_core.config import BlackboardConfig, DenseConfig, MemoryConfig, mask_url
from gliding_core.errors import ConfigError, DatabaseUnavailableError
from gliding_core.hyperspace.dense import DenseIndex, chroma_client, close_client
from gliding_core.hyperspace.embedders import Embedder
from gliding_core.hyperspace.index import VectorIndex
from gliding_core.store.manifest import read_manifest, server_collection, update_manifest
from gliding_core.store.ownership import OwnerLock
from gliding_core.store.protocol import EntryStore
from gliding_core.store.sqlite import L0Store

if TYPE_CHECKING:
    from gliding_core.store.postgres import Database, DatabaseSettings

logger = logging.getLogger(__name__)

# libpq's FATAL answers that say the server is there but not ready: an outage, not a setting.
_TRANSIENT = re.compile(
    r"starting up|shutting down|in recovery|too many clients|not yet accepting|"
    r"remaining connection slots"
)

STORE_FILE = "l0.sqlite3"
EMBEDDING_CACHE_FILE = "embeddings.sqlite3"
CHROMA_DIR = "chroma"
POINCARE_FILE = "poincare.npz"
BLACKBOARD_DIR = "blackboard"
COHERENCE_FILE = "coherence.sqlite3"

Kind = Literal["memory", "directory", "postgresql"]
BoardParts = tuple[GraphBackend, Coordination, Directory | None]


class Storage(Protocol):
    """Where a memory keeps its state: what opens each of its parts there (see the module)."""

    kind: Kind
    directory: Path | None
    owner: OwnerLock | None

    def describe(self) -> str:
        """Say where the memory lives, with no secret in it (for ``repr`` and messages)."""
        ...

    def claim(self, *, engines: bool, closer: ExitStack) -> None:
        """Check the place and take what the process must own there before anything opens."""
        ...

    def open_store(self, closer: ExitStack) -> EntryStore:
        """Open the L0 store (closed by ``closer``)."""
        ...

    def open_queue(self, store: EntryStore, bus: EventBus) -> SupplementaryInputStore:
        """Return the supplementary-input queue over ``store``."""
        ...

    def file(self, name: str) -> Path | None:
        """Where a derived file of this process lives (a cache, an index); ``None``: memory."""
        ...

    def open_index(
        self, store: EntryStore, embedder: Embedder, *, engines: bool, closer: ExitStack
    ) -> VectorIndex | None:
        """Open the dense index this process runs, or ``None`` (lexical search only)."""
        ...

    def record(self, embedder_name: str) -> None:
        """Note the embedder in use where the place keeps such notes (after a full open)."""
        ...

    def open_board(
        self, settings: BlackboardConfig, bus: EventBus, *, engines: bool, closer: ExitStack
    ) -> BoardParts:
        """Open the blackboard's graph, coordination and shared coherence directory."""
        ...


def storage_for(directory: Path | None, config: MemoryConfig) -> Storage:
    """Return the row for a memory: its directory, else ``config.database_url``, else memory."""
    if directory is not None:
        return DirectoryStorage(config, directory)
    if config.database_url is not None:
        return PostgresStorage(config, config.database_url)
    return DirectoryStorage(config, None)


def _chroma_index(
    store: EntryStore,
    embedder: Embedder,
    client: Any,
    closer: ExitStack,
    *,
    collection: str | None,
    owned: bool,
    windows: DenseConfig,
    files: Path | None = None,
) -> DenseIndex:
    """A dense index in ``client``'s collection, closed (with the client) by ``closer``."""
    closer.callback(close_client, client)  # stops Chroma's system unless shared
    index = DenseIndex(
        store,
        embedder,
        client,
        collection,
        # Only the owner of the collection's files may drop them; a shared server's
        # collection may be another process's.
        on_mismatch="rebuild" if owned else "raise",
        windows=windows,
        files=files,
    )
    closer.callback(index.close)
    return index


class DirectoryStorage:
    """A memory in a directory (``directory``) or in this process only (``None``).

    A directory's embedded engines (Chroma's files, the blackboard's graph on disk) belong to
    one process at a time, which holds the directory's lock file (``store.ownership``) while
    it is open; L0 is shared by any number of processes of the machine.
    """

    def __init__(self, config: MemoryConfig, directory: Path | None) -> None:
        self.config, self.directory = config, directory
        self.kind: Kind = "memory" if directory is None else "directory"
        self.owner: OwnerLock | None = None
        self._manifest: dict[str, Any] = {}

    def describe(self) -> str:
        return "in memory" if self.directory is None else str(self.directory)

    @property
    def _embedded(self) -> bool:
        return self.config.chroma_host is None

    def claim(self, *, engines: bool, closer: ExitStack) -> None:
        if self.directory is None:
            return
        self._manifest = read_manifest(self.directory)  # checked before anything opens
        if engines and self._embedded:
            self._take_ownership(closer)

    def _take_ownership(self, closer: ExitStack) -> None:
        assert self.directory is not None
        self.owner = OwnerLock.acquire(self.directory)
        closer.callback(self.owner.release)

    def open_store(self, closer: ExitStack) -> EntryStore:
        store = L0Store(self.file(STORE_FILE), self.config.store)
        closer.callback(store.close)
        return store

    def open_queue(self, store: EntryStore, bus: EventBus) -> SupplementaryInputStore:
        return SupplementaryInputStore(store, bus)

    def file(self, name: str) -> Path | None:
        return None if self.directory is None else self.directory / name

    def open_index(
        self, store: EntryStore, embedder: Embedder, *, engines: bool, closer: ExitStack
    ) -> VectorIndex | None:
        config = self.config
        if not engines and config.chroma_host is None:
            logger.info(
                "a memory at %s opened without its engines: lexical search", self.describe()
            )
            return None
        embedded = engines and self._embedded
        client = chroma_client(
            self.file(CHROMA_DIR) if embedded else None,
            host=config.chroma_host,
            port=config.chroma_port,
        )
        return _chroma_index(
            store,
            embedder,
            client,
            closer,
            collection=self._collection(embedded),
            owned=self.owner is not None,
            windows=config.dense,
            files=self.file(CHROMA_DIR) if embedded else None,
        )

    def _collection(self, embedded: bool) -> str | None:
        """Name the collection: fresh in memory, fixed in owned files, chosen once on a server."""
        if self.directory is None:
            return None
        return "gliding-l0" if embedded else server_collection(self.directory)

    def record(self, embedder_name: str) -> None:
        directory, recorded = self.directory, self._manifest.get("embedder")
        if directory is not None and self.owner is not None and recorded != embedder_name:
            update_manifest(directory, {"embedder": embedder_name})

    def open_board(
        self, settings: BlackboardConfig, bus: EventBus, *, engines: bool, closer: ExitStack
    ) -> BoardParts:
        path = self.file(BLACKBOARD_DIR)
        if path is not None and settings.endpoint is None:
            if not engines:
                raise ConfigError(
                    f"the memory at {self.describe()} was opened with engines=False: its"
                    " blackboard needs a SPARQL endpoint"
                    " (MemoryConfig(blackboard=BlackboardConfig(endpoint=...)))"
                )
            if self.owner is None:  # Chroma runs on a server: the graph's files still need one
                self._take_ownership(closer)
        coordination = Coordination.open(self.directory, config=settings.coordination, bus=bus)
        graph = open_graph(path=path, endpoint=settings.endpoint)
        # Copies and generations are shared by every process of the directory (next to the
        # coordination database) when the graph is a server's. An embedded graph, in memory or
        # on disk, has one process (the directory's owner; RocksDB locks its files too), so
        # the in-process directory will do, and its writes skip a SQLite transaction each.
        shared = None
        if self.directory is not None and graph.kind == "server":
            shared = SQLiteDirectory(self.directory / COHERENCE_FILE)
        return graph, coordination, shared


class PostgresStorage:
    """A memory in a schema of a PostgreSQL database, shared by every process that opens it.

    No process owns it (no lock file): L0, the supplementary inputs, the dense index
    (pgvector, unless a Chroma server is configured), the blackboard's coordination and its
    coherence directory are the database's, and the blackboard's graph is a SPARQL endpoint's.
    What each process keeps for itself is derived: the embedding cache and the Poincaré index
    (trained from the shared hierarchy), both in memory. ``engines=False`` opens no dense
    index in a process that should embed nothing (lexical search, unless a Chroma server is
    configured: it serves every process).
    """

    kind: Kind = "postgresql"
    directory: Path | None = None
    owner: OwnerLock | None = None

    def __init__(self, config: MemoryConfig, url: str) -> None:
        self.config, self._url = config, url
        self.schema = config.database_schema
        self._shown = mask_url(url)

    def describe(self) -> str:
        return f"{self._shown} schema {self.schema}"

    def __repr__(self) -> str:
        return f"PostgresStorage({self.describe()!r})"

    def _settings(self) -> DatabaseSettings:
        from gliding_core.store.postgres import DatabaseSettings

        return DatabaseSettings(
            max_connections=self.config.database_pool_size,
            timeout_s=self.config.database_timeout_s,
        )

    def claim(self, *, engines: bool, closer: ExitStack) -> None:
        return None

    def open_store(self, closer: ExitStack) -> EntryStore:
        from gliding_core.store.postgres import PostgresEntryStore

        self._probe()
        logger.info("opening the memory in PostgreSQL at %s", self.describe())
        store = PostgresEntryStore(
            self._url, schema=self.schema, config=self.config.store, settings=self._settings()
        )
        closer.callback(store.close)
        return store

    def _probe(self) -> None:
        """Connect once, outside any pool, to say at once why the database cannot be used.

        A pool retries a refused connection until its timeout and then reports only that it
        timed out; libpq's own answer says what is wrong. A server that answers and refuses
        (no such database or role, a wrong password: a ``FATAL`` that is not about the
        server starting, stopping or being full) is a ``ConfigError``; no answer is a
        ``DatabaseUnavailableError``. Both quote libpq, with the password taken out.

        Raises:
            ConfigError: PostgreSQL refused this role or database.
            DatabaseUnavailableError: no server answered within the timeout.
        """
        import psycopg

        from gliding_core.store.postgres.database import redact

        try:
            connection = psycopg.connect(
                self._url, connect_timeout=max(2, math.ceil(self.config.database_timeout_s))
            )
        except psycopg.Error as exc:
            reason = redact(str(exc), _passwords(self._url))
            if "FATAL" in reason and not _TRANSIENT.search(reason):
                raise ConfigError(f"PostgreSQL at {self.describe()} refused: {reason}") from None
            raise DatabaseUnavailableError(
                f"PostgreSQL at {self.describe()} did not answer within"
                f" {self.config.database_timeout_s:g} s: {reason}"
            ) from None
        connection.close()

    def open_queue(self, store: EntryStore, bus: EventBus) -> SupplementaryInputStore:
        from gliding_core.attention.postgres_queue import PostgresSupplementaryQueue
        from gliding_core.store.postgres import PostgresEntryStore

        if not isinstance(store, PostgresEntryStore):
            raise ConfigError(
                f"a memory in PostgreSQL ({self.describe()}) keeps its L0 there: pass no"
                " store of another kind"
            )
        return PostgresSupplementaryQueue(store, bus)

    def file(self, name: str) -> Path | None:
        return None

    def open_index(
        self, store: EntryStore, embedder: Embedder, *, engines: bool, closer: ExitStack
    ) -> VectorIndex | None:
        config = self.config
        if config.chroma_host is not None:
            client = chroma_client(host=config.chroma_host, port=config.chroma_port)
            return _chroma_index(
                store,
                embedder,
                client,
                closer,
                collection=self._collection(),
                owned=False,
                windows=config.dense,
            )
        if not engines:
            return None
        from gliding_core.hyperspace.pgvector import PgVectorIndex
        from gliding_core.store.postgres import PostgresEntryStore

        if not isinstance(store, PostgresEntryStore):
            raise ConfigError(
                f"the pgvector index of {self.describe()} follows a PostgreSQL L0 store; a store"
                " of another kind was passed in"
            )
        # Shared by every process: one that finds another embedder's vectors must not drop them.
        index = PgVectorIndex(store, embedder, on_mismatch="raise", windows=config.dense)
        closer.callback(index.close)
        return index

    def _collection(self) -> str:
        """The shared Chroma collection of this database and schema (one per memory)."""
        digest = hashlib.blake2b(f"{self._shown}\0{self.schema}".encode(), digest_size=8)
        return f"gliding-pg-{digest.hexdigest()}"

    def record(self, embedder_name: str) -> None:
        return None

    def open_board(
        self, settings: BlackboardConfig, bus: EventBus, *, engines: bool, closer: ExitStack
    ) -> BoardParts:
        from gliding_core.blackboard.coordination.postgres import PostgresCoordinationStore
        from gliding_core.coherence.postgres_directory import PostgresDirectory

        if settings.endpoint is None:
            raise ConfigError(
                f"the memory in PostgreSQL ({self.describe()}) is shared by several processes:"
                " its blackboard's graph must be a SPARQL 1.1 server every one of them reaches"
                " (MemoryConfig(blackboard=BlackboardConfig(endpoint=...)), for instance"
                " `oxigraph serve` at http://localhost:7878)"
            )
        database = self._database(closer)
        store = PostgresCoordinationStore(database, config=settings.coordination)
        coordination = Coordination(store, bus=bus, owns_db=True)
        try:
            shared = PostgresDirectory(database)
        except BaseException:
            coordination.close()
            raise
        return open_graph(endpoint=settings.endpoint), coordination, shared

    def _database(self, closer: ExitStack) -> Database:
        """The blackboard's pool in the memory's schema, closed after the blackboard."""
        from gliding_core.store.postgres import Database

        database = Database(self._url, schema=self.schema, settings=self._settings())
        closer.callback(database.close)
        return database


def _passwords(url: str) -> tuple[str, ...]:
    """The secrets a connection string holds (decoded, as libpq could quote them)."""
    from psycopg.conninfo import conninfo_to_dict

    try:
        parameters = conninfo_to_dict(url)
    except Exception:
        return ()
    return tuple(str(parameters[k]) for k in ("password", "sslpassword") if parameters.get(k))
