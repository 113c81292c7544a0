"""Contract suites: the implementation tables every storage protocol's suite runs against.

Each table maps an implementation's name to a factory. A factory takes the test's request and
its temporary directory and yields a ``Backend``: how to open a handle on one storage location
made for the test, whether a second handle (or another process) shares it, and the Python source
a child process runs to open it. Tests open their handles through the fixtures below and never
name an implementation, so a new backend (PostgreSQL, say) adds one row per table and every
test in this folder runs on it.

The file is split into blocks, one per protocol, so that the owners of the suites can edit their
own block without touching the others':

- the shared machinery (``Backend``, ``Factory``, ``backend_fixture``, ``run_child``);
- L0 store, dense index and supplementary-input queue (``test_entry_store.py``,
  ``test_vector_index.py``, ``test_supplementary_queue.py``);
- coordination store and coherence directory (``test_coordination_store.py``,
  ``test_directory.py``).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Generic, Protocol, TypeVar

import pytest

from gliding_core import (
    CoordinationConfig,
    CoordinationDB,
    CoordinationStore,
    DenseConfig,
    DenseIndex,
    Directory,
    Embedder,
    EntryStore,
    L0Store,
    LocalDirectory,
    SQLiteDirectory,
    StoreConfig,
    SupplementaryInputStore,
    SupplementaryQueue,
    VectorIndex,
)
from gliding_core.attention.postgres_queue import PostgresSupplementaryQueue
from gliding_core.blackboard.coordination.postgres import PostgresCoordinationStore
from gliding_core.coherence.directory import DEFAULT_KEEP_VERSIONS
from gliding_core.coherence.postgres_directory import PostgresDirectory
from gliding_core.hyperspace.dense import chroma_client, close_client
from gliding_core.hyperspace.pgvector import PgVectorIndex
from gliding_core.store.postgres import PostgresEntryStore

T = TypeVar("T")


# ================================================================================================
# Shared machinery
# ================================================================================================


@dataclass(frozen=True)
class Backend(Generic[T]):
    """One implementation of a protocol, on one storage location made for the test.

    Attributes:
        name: The implementation's name in its table (the test id).
        open: Open a new handle on the same storage, as another worker would; the caller
            closes it.
        shared: Whether a second handle, or another process, sees what the first one commits
            (false for in-memory stores, which exist only inside their handle).
        child_source: Python source that defines ``open_backend()``, returning a new handle on
            the same storage, for tests that run a child process (a SIGKILLed writer, a second
            worker). Empty when the storage cannot be reached from another process.
        verify: Check, through a handle, that the storage is sound after a crash (SQLite's
            integrity check), raising ``AssertionError`` when it is not; ``None`` when the
            implementation has no such check of its own.
    """

    name: str
    open: Callable[[], T]
    shared: bool
    child_source: str = ""
    verify: Callable[[T], None] | None = None


Factory = Callable[[pytest.FixtureRequest, Path], AbstractContextManager[Backend[T]]]
"""Make one storage location for a test and yield its ``Backend``; tear it down after."""


def backend_fixture(
    table: dict[str, Factory[T]], request: pytest.FixtureRequest, tmp_path: Path
) -> Iterator[Backend[T]]:
    """Yield the backend of ``request.param`` in ``table``, torn down after the test."""
    with table[request.param](request, tmp_path) as backend:
        yield backend


def shared_names(table: dict[str, Factory[T]], shared: set[str]) -> list[str]:
    """The sorted names of ``table`` whose storage a second handle or process sees."""
    return sorted(name for name in table if name in shared)


def run_child(backend: Backend[T], body: str, *args: str) -> subprocess.Popen[str]:
    """Start a child process that runs ``backend.child_source`` and then ``body``.

    ``body`` calls ``open_backend()``; its ``sys.argv[1:]`` are ``args``. Its stdout is a pipe
    of text lines, so the test can read what the child acknowledged before killing it.
    """
    assert backend.child_source, f"{backend.name} cannot be opened from another process"
    source = backend.child_source + "\n" + body
    # A database URL (and its password) reaches the child through its environment only: a
    # command line is shown to every user of the machine by ``ps``. Not printed on failure.
    url = os.environ.get(TEST_DATABASE_URL)
    assert not url or not any(url in part for part in (source, *args)), (
        f"{backend.name}: the child's command line holds the database URL"
    )
    return subprocess.Popen(
        [sys.executable, "-c", source, *args], stdout=subprocess.PIPE, text=True
    )


def opened(open_: Callable[[], T], close: Callable[[T], None]) -> Iterator[T]:
    """Yield one handle made by ``open_``, closed after the test (a fixture's body)."""
    handle = open_()
    try:
        yield handle
    finally:
        close(handle)


MARKERS: list[str] = []
"""The markers the blocks below define (``name(args): what it does``), registered at start."""


def pytest_configure(config: pytest.Config) -> None:
    """Register each block's markers (the suite runs with ``--strict-markers``)."""
    for line in MARKERS:
        config.addinivalue_line("markers", line)


# ================================================================================================
# L0 store, dense index, supplementary-input queue (store/, hyperspace/, attention/)
# ================================================================================================

# A test that needs other store settings says so with ``@pytest.mark.store_config(**fields)``;
# every factory of ENTRY_STORES opens its handles with them (``store_config(request)``).
MARKERS.append("store_config(**fields): the StoreConfig fields the test's entry stores open with")


def store_config(request: pytest.FixtureRequest) -> StoreConfig:
    """The ``StoreConfig`` the test asks for with its ``store_config`` marker, else defaults."""
    marker = request.node.get_closest_marker("store_config")
    return StoreConfig(**marker.kwargs) if marker is not None else StoreConfig()


def _sqlite_sound(store: EntryStore) -> None:
    assert isinstance(store, L0Store)
    assert store.integrity_check() == "ok"


@contextmanager
def _sqlite_memory(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Backend[EntryStore]]:
    """``L0Store()``: a private temporary database per handle, gone when it closes."""
    config = store_config(request)
    yield Backend(
        "sqlite-memory", lambda: L0Store(None, config), shared=False, verify=_sqlite_sound
    )


@contextmanager
def _sqlite_file(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Backend[EntryStore]]:
    """``L0Store(path)``: one SQLite file that every handle and process opens."""
    path, config = tmp_path / "l0.sqlite3", store_config(request)
    yield Backend(
        "sqlite-file",
        lambda: L0Store(path, config),
        shared=True,
        child_source=(
            "from gliding_core import L0Store\n"  # a child opens it with the default settings
            f"def open_backend():\n    return L0Store({str(path)!r})\n"
        ),
        verify=_sqlite_sound,
    )


def _postgres_sound(store: EntryStore) -> None:
    assert isinstance(store, PostgresEntryStore)
    assert store.integrity_check() == "ok"


@contextmanager
def _postgresql(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Backend[EntryStore]]:
    """``PostgresEntryStore(url, schema=...)``: a schema of the test's own in the session's
    PostgreSQL, which every handle and process opens."""
    url, schema = postgres_database(request)  # the URL in the environment of child processes
    config = store_config(request)
    yield Backend(
        "postgresql",
        lambda: PostgresEntryStore(url, schema=schema, config=config),
        shared=True,
        child_source=(  # the URL from the environment: never on a command line
            "import os\n"
            "from gliding_core.store.postgres import PostgresEntryStore\n"
            "def open_backend():\n"
            "    url = os.environ['GLIDING_TEST_DATABASE_URL']\n"
            f"    return PostgresEntryStore(url, schema={schema!r})\n"
        ),
        verify=_postgres_sound,
    )


ENTRY_STORES: dict[str, Factory[EntryStore]] = {
    "sqlite-memory": _sqlite_memory,
    "sqlite-file": _sqlite_file,
    "postgresql": _postgresql,
}
SHARED_ENTRY_STORES = {"sqlite-file", "postgresql"}


@pytest.fixture(params=sorted(ENTRY_STORES))
def entry_backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Backend[EntryStore]]:
    """Each implementation of ``EntryStore``, on storage of its own."""
    yield from backend_fixture(ENTRY_STORES, request, tmp_path)


@pytest.fixture
def entry_store(entry_backend: Backend[EntryStore]) -> Iterator[EntryStore]:
    """One handle on ``entry_backend``, closed after the test."""
    yield from opened(entry_backend.open, lambda store: store.close())


@pytest.fixture(params=shared_names(ENTRY_STORES, SHARED_ENTRY_STORES))
def shared_entry_backend(
    request: pytest.FixtureRequest, tmp_path: Path
) -> Iterator[Backend[EntryStore]]:
    """Each implementation of ``EntryStore`` that a second handle and another process share."""
    for backend in backend_fixture(ENTRY_STORES, request, tmp_path):
        assert backend.shared, backend.name
        assert backend.child_source, backend.name
        yield backend


# The supplementary-input queue on each entry store: SupplementaryInputStore keeps its inputs
# as entries of any EntryStore, so a new row of ENTRY_STORES gets a queue here too. A queue of
# its own (one that is not made of entries) adds a row to SUPPLEMENTARY_QUEUES.
_QUEUE_SOURCE = """
from gliding_core import SupplementaryInputStore
_open_store = open_backend
def open_backend():
    return SupplementaryInputStore(_open_store())
"""


def _queue_on(entries: Factory[EntryStore]) -> Factory[SupplementaryQueue]:
    @contextmanager
    def factory(
        request: pytest.FixtureRequest, tmp_path: Path
    ) -> Iterator[Backend[SupplementaryQueue]]:
        with entries(request, tmp_path) as store:
            yield Backend(
                f"l0:{store.name}",
                lambda: SupplementaryInputStore(store.open()),
                shared=store.shared,
                child_source=store.child_source and store.child_source + _QUEUE_SOURCE,
            )

    return factory


_POSTGRES_QUEUE_SOURCE = """
from gliding_core.attention.postgres_queue import PostgresSupplementaryQueue
_open_store = open_backend
def open_backend():
    return PostgresSupplementaryQueue(_open_store())
"""


@contextmanager
def _postgres_queue(
    request: pytest.FixtureRequest, tmp_path: Path
) -> Iterator[Backend[SupplementaryQueue]]:
    """``PostgresSupplementaryQueue``: inputs as entries of a ``PostgresEntryStore``, each
    task's consumers taking turns under a lock of the task."""
    with _postgresql(request, tmp_path) as store:
        yield Backend(
            "postgresql",
            lambda: PostgresSupplementaryQueue(_postgres_store(store.open())),
            shared=True,
            child_source=store.child_source + _POSTGRES_QUEUE_SOURCE,
        )


def _postgres_store(store: EntryStore) -> PostgresEntryStore:
    assert isinstance(store, PostgresEntryStore)
    return store


# SupplementaryInputStore takes its inputs in a transaction of its store, which on SQLite
# excludes every other writer; on PostgreSQL it does not, so that store's queue is its own row.
SUPPLEMENTARY_QUEUES: dict[str, Factory[SupplementaryQueue]] = {
    **{f"l0:{name}": _queue_on(ENTRY_STORES[name]) for name in ("sqlite-memory", "sqlite-file")},
    "postgresql": _postgres_queue,
}
SHARED_SUPPLEMENTARY_QUEUES = {"l0:sqlite-file", "postgresql"}


def close_queue(queue: SupplementaryQueue) -> None:
    """Close a queue's handle: its L0 store."""
    queue.store.close()


@pytest.fixture(params=sorted(SUPPLEMENTARY_QUEUES))
def queue_backend(
    request: pytest.FixtureRequest, tmp_path: Path
) -> Iterator[Backend[SupplementaryQueue]]:
    """Each implementation of ``SupplementaryQueue``, with the L0 store it lives in."""
    yield from backend_fixture(SUPPLEMENTARY_QUEUES, request, tmp_path)


@pytest.fixture
def queue(queue_backend: Backend[SupplementaryQueue]) -> Iterator[SupplementaryQueue]:
    """One handle on ``queue_backend``, closed after the test."""
    yield from opened(queue_backend.open, close_queue)


@pytest.fixture(params=shared_names(SUPPLEMENTARY_QUEUES, SHARED_SUPPLEMENTARY_QUEUES))
def shared_queue_backend(
    request: pytest.FixtureRequest, tmp_path: Path
) -> Iterator[Backend[SupplementaryQueue]]:
    """Each queue that a second handle and another process share."""
    for backend in backend_fixture(SUPPLEMENTARY_QUEUES, request, tmp_path):
        assert backend.shared, backend.name
        assert backend.child_source, backend.name
        yield backend


class OpenIndex(Protocol):
    """Open a ``VectorIndex`` on a store handle (see ``IndexBackend.open``)."""

    def __call__(
        self, store: EntryStore, embedder: Embedder, windows: DenseConfig | None = None
    ) -> VectorIndex: ...


@dataclass(frozen=True)
class IndexBackend:
    """One implementation of ``VectorIndex``, with the L0 store its index follows.

    Attributes:
        name: The implementation's name in ``VECTOR_INDEXES`` (the test id).
        store: Where the L0 store lives (a shared one: the index outlives its handles).
        open: Open an index on the given handle of ``store`` with the given embedder (and
            window settings, the defaults when ``None``), on the same vector storage each time
            (the same collection or table); the caller closes it.
        child_source: Python source that defines ``open_index(store, embedder)``, run after
            ``store.child_source``, for tests with a child process.
    """

    name: str
    store: Backend[EntryStore]
    open: OpenIndex
    child_source: str


@contextmanager
def _chroma(
    request: pytest.FixtureRequest,
    tmp_path: Path,
    *,
    name: str,
    client: Callable[[], Any],
    client_args: str,
) -> Iterator[IndexBackend]:
    """A DenseIndex on the Chroma client ``client()``, which is ``chroma_client(client_args)``."""
    collection = f"contract-{uuid.uuid4().hex[:12]}"  # the server is shared by the session
    clients: list[Any] = []

    def open_index(
        store: EntryStore, embedder: Embedder, windows: DenseConfig | None = None
    ) -> VectorIndex:
        if not clients:  # one client per test: an embedded Chroma is one system per path
            clients.append(client())
        return DenseIndex(store, embedder, clients[0], collection, windows=windows)

    with _sqlite_file(request, tmp_path) as store:
        try:
            yield IndexBackend(
                name,
                store,
                open_index,
                child_source=(
                    "from pathlib import Path\n"
                    "from gliding_core.hyperspace.dense import DenseIndex, chroma_client\n"
                    "def open_index(store, embedder):\n"
                    f"    client = chroma_client({client_args})\n"
                    f"    return DenseIndex(store, embedder, client, {collection!r})\n"
                ),
            )
        finally:
            for client in clients:
                close_client(client)


@contextmanager
def _chroma_embedded(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[IndexBackend]:
    """A DenseIndex on a Chroma embedded in the process, its files beside the L0 file."""
    where = tmp_path / "chroma"
    with _chroma(
        request,
        tmp_path,
        name="chroma-embedded",
        client=lambda: chroma_client(where),
        client_args=f"Path({str(where)!r})",
    ) as backend:
        yield backend


@contextmanager
def _chroma_server(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[IndexBackend]:
    """A DenseIndex on a Chroma server (one for the session, a collection per test)."""
    port = request.getfixturevalue("shared_chroma_server")
    with _chroma(
        request,
        tmp_path,
        name="chroma-server",
        client=lambda: chroma_client(host="127.0.0.1", port=port),
        client_args=f"host='127.0.0.1', port={port}",
    ) as backend:
        yield backend


@contextmanager
def _pgvector(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[IndexBackend]:
    """A PgVectorIndex in the schema of a PostgreSQL L0 store, through the store's pool."""

    def open_index(
        store: EntryStore, embedder: Embedder, windows: DenseConfig | None = None
    ) -> VectorIndex:
        return PgVectorIndex(_postgres_store(store), embedder, "contract", windows=windows)

    with _postgresql(request, tmp_path) as store:
        yield IndexBackend(
            "pgvector",
            store,
            open_index,
            child_source=(
                "from gliding_core.hyperspace.pgvector import PgVectorIndex\n"
                "def open_index(store, embedder):\n"
                "    return PgVectorIndex(store, embedder, 'contract')\n"
            ),
        )


VECTOR_INDEXES: dict[
    str, Callable[[pytest.FixtureRequest, Path], AbstractContextManager[IndexBackend]]
] = {
    "chroma-embedded": _chroma_embedded,
    "chroma-server": _chroma_server,
    "pgvector": _pgvector,
}


@pytest.fixture(params=sorted(VECTOR_INDEXES))
def index_backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[IndexBackend]:
    """Each implementation of ``VectorIndex``, with the L0 store it follows."""
    with VECTOR_INDEXES[request.param](request, tmp_path) as backend:
        yield backend


# ================================================================================================
# Coordination store and coherence directory (blackboard/coordination/, coherence/)
# ================================================================================================

# A test that needs other coordination settings says so with
# ``@pytest.mark.coordination_config(**fields)`` (over COORDINATION_CONFIG's); one that races a
# child process, whose clock is the real one, with ``@pytest.mark.wall_clock``; a directory test
# that needs fewer kept versions with ``@pytest.mark.keep_versions(n)``.
MARKERS.append(
    "coordination_config(**fields): the CoordinationConfig fields (over the suite's) of the "
    "test's coordination stores"
)
MARKERS.append("wall_clock: the test's coordination stores read the real clock, not a fake one")
MARKERS.append("keep_versions(n): how many past values per node the test's directories keep")


class FakeClock:
    """A wall clock that moves only when told, so leases expire and agents fall silent on
    demand; every handle of one test reads the same one, as the processes of one machine do."""

    def __init__(self, now: float = 1_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


COORDINATION_CONFIG: dict[str, Any] = {
    "lease_ttl_s": 20.0,
    "heartbeat_timeout_s": 30.0,
    "sweep_interval_s": 0.0,  # no sweeper thread unless a test asks for one
    "max_message_bytes": 1_000,
}
"""The suite's coordination settings (each test's marker may change any field)."""


def coordination_settings(request: pytest.FixtureRequest) -> CoordinationConfig:
    """The ``CoordinationConfig`` of the test: the suite's, with its marker's fields."""
    marker = request.node.get_closest_marker("coordination_config")
    return CoordinationConfig(**{**COORDINATION_CONFIG, **(marker.kwargs if marker else {})})


@pytest.fixture
def coordination_clock(request: pytest.FixtureRequest) -> Callable[[], float]:
    """The clock every coordination handle of the test reads: a ``FakeClock`` the test moves,
    or ``time.time`` under ``wall_clock``."""
    return time.time if request.node.get_closest_marker("wall_clock") else FakeClock()


@contextmanager
def _sqlite_memory_coordination(
    request: pytest.FixtureRequest, tmp_path: Path
) -> Iterator[Backend[CoordinationStore]]:
    """``CoordinationDB()``: a private in-memory database per handle, gone when it closes."""
    clock, config = request.getfixturevalue("coordination_clock"), coordination_settings(request)
    yield Backend(
        "sqlite-memory", lambda: CoordinationDB(None, config=config, clock=clock), shared=False
    )


@contextmanager
def _sqlite_file_coordination(
    request: pytest.FixtureRequest, tmp_path: Path
) -> Iterator[Backend[CoordinationStore]]:
    """``CoordinationDB(path)``: one SQLite file that every handle and process opens."""
    clock, config = request.getfixturevalue("coordination_clock"), coordination_settings(request)
    path = tmp_path / "blackboard.sqlite3"
    yield Backend(
        "sqlite-file",
        lambda: CoordinationDB(path, config=config, clock=clock),
        shared=True,
        child_source=(
            "from gliding_core import CoordinationDB\n"  # a child: default settings, real clock
            f"def open_backend():\n    return CoordinationDB({str(path)!r})\n"
        ),
    )


# -- PostgreSQL (the session's server of tests/conftest.py, a schema of its own per test) ------
# The URL reaches a child process through its environment (``postgres_database``): a URL with a
# password never travels on a command line, where ``ps`` would show it.

TEST_DATABASE_URL = "GLIDING_TEST_DATABASE_URL"


def postgres_database(request: pytest.FixtureRequest) -> tuple[str, str]:
    """The session's URL and the test's schema (``postgres_url``, ``postgres_schema``), the URL
    also in ``GLIDING_TEST_DATABASE_URL`` for the test's child processes."""
    url: str = request.getfixturevalue("postgres_url")
    schema: str = request.getfixturevalue("postgres_schema")
    request.getfixturevalue("monkeypatch").setenv(TEST_DATABASE_URL, url)
    return url, schema


_POSTGRES_CHILD = """
import os
def _database_url():
    return os.environ["GLIDING_TEST_DATABASE_URL"]
"""


@contextmanager
def _postgres_coordination(
    request: pytest.FixtureRequest, tmp_path: Path
) -> Iterator[Backend[CoordinationStore]]:
    """``PostgresCoordinationStore.open(url, schema=...)``: one schema every handle and process
    opens, each handle with a pool of its own (as a worker would)."""
    clock, config = request.getfixturevalue("coordination_clock"), coordination_settings(request)
    url, schema = postgres_database(request)
    yield Backend(
        "postgresql",
        lambda: PostgresCoordinationStore.open(url, schema=schema, config=config, clock=clock),
        shared=True,
        child_source=_POSTGRES_CHILD + "from gliding_core.blackboard.coordination.postgres import"
        " PostgresCoordinationStore\n"  # a child: default settings, the server's clock
        "def open_backend():\n"
        f"    return PostgresCoordinationStore.open(_database_url(), schema={schema!r})\n",
    )


COORDINATION_STORES: dict[str, Factory[CoordinationStore]] = {
    "sqlite-memory": _sqlite_memory_coordination,
    "sqlite-file": _sqlite_file_coordination,
    "postgresql": _postgres_coordination,
}
SHARED_COORDINATION_STORES = {"sqlite-file", "postgresql"}


@pytest.fixture(params=sorted(COORDINATION_STORES))
def coordination_backend(
    request: pytest.FixtureRequest, tmp_path: Path
) -> Iterator[Backend[CoordinationStore]]:
    """Each implementation of ``CoordinationStore``, on storage of its own."""
    yield from backend_fixture(COORDINATION_STORES, request, tmp_path)


@pytest.fixture
def coordination_store(
    coordination_backend: Backend[CoordinationStore],
) -> Iterator[CoordinationStore]:
    """One handle on ``coordination_backend``, closed after the test."""
    yield from opened(coordination_backend.open, lambda store: store.close())


@pytest.fixture(params=shared_names(COORDINATION_STORES, SHARED_COORDINATION_STORES))
def shared_coordination_backend(
    request: pytest.FixtureRequest, tmp_path: Path
) -> Iterator[Backend[CoordinationStore]]:
    """Each implementation of ``CoordinationStore`` that a second handle and another process
    share."""
    for backend in backend_fixture(COORDINATION_STORES, request, tmp_path):
        assert backend.shared, backend.name
        assert backend.child_source, backend.name
        yield backend


def keep_versions(request: pytest.FixtureRequest) -> int:
    """How many past values per node the test's directories keep (its marker, else default)."""
    marker = request.node.get_closest_marker("keep_versions")
    return int(marker.args[0]) if marker is not None else DEFAULT_KEEP_VERSIONS


@contextmanager
def _local_directory(
    request: pytest.FixtureRequest, tmp_path: Path
) -> Iterator[Backend[Directory]]:
    """``LocalDirectory()``: the directory of one process, new with each handle."""
    keep = keep_versions(request)
    yield Backend("local", lambda: LocalDirectory(keep_versions=keep), shared=False)


@contextmanager
def _sqlite_directory(
    request: pytest.FixtureRequest, tmp_path: Path
) -> Iterator[Backend[Directory]]:
    """``SQLiteDirectory(path)``: one SQLite file (and its shared counter) every handle opens."""
    path, keep = tmp_path / "blackboard.sqlite3", keep_versions(request)
    yield Backend(
        "sqlite",
        lambda: SQLiteDirectory(path, keep_versions=keep),
        shared=True,
        child_source=(
            "from gliding_core import SQLiteDirectory\n"
            f"def open_backend():\n    return SQLiteDirectory({str(path)!r})\n"
        ),
    )


@contextmanager
def _postgres_directory(
    request: pytest.FixtureRequest, tmp_path: Path
) -> Iterator[Backend[Directory]]:
    """``PostgresDirectory.open(url, schema=...)``: one schema every handle and process opens,
    each handle with a pool and a listener of its own."""
    keep = keep_versions(request)
    url, schema = postgres_database(request)
    yield Backend(
        "postgresql",
        lambda: PostgresDirectory.open(url, schema=schema, keep_versions=keep),
        shared=True,
        child_source=_POSTGRES_CHILD
        + "from gliding_core.coherence.postgres_directory import PostgresDirectory\n"
        "def open_backend():\n"
        f"    return PostgresDirectory.open(_database_url(), schema={schema!r})\n",
    )


DIRECTORIES: dict[str, Factory[Directory]] = {
    "local": _local_directory,
    "sqlite": _sqlite_directory,
    "postgresql": _postgres_directory,
}
SHARED_DIRECTORIES = {"sqlite", "postgresql"}


@pytest.fixture(params=sorted(DIRECTORIES))
def directory_backend(
    request: pytest.FixtureRequest, tmp_path: Path
) -> Iterator[Backend[Directory]]:
    """Each implementation of ``Directory``, on storage of its own."""
    yield from backend_fixture(DIRECTORIES, request, tmp_path)


@pytest.fixture
def directory(directory_backend: Backend[Directory]) -> Iterator[Directory]:
    """One handle on ``directory_backend``, closed after the test."""
    yield from opened(directory_backend.open, lambda handle: handle.close())


@pytest.fixture(params=shared_names(DIRECTORIES, SHARED_DIRECTORIES))
def shared_directory_backend(
    request: pytest.FixtureRequest, tmp_path: Path
) -> Iterator[Backend[Directory]]:
    """Each implementation of ``Directory`` that a second handle and another process share."""
    for backend in backend_fixture(DIRECTORIES, request, tmp_path):
        assert backend.shared, backend.name
        assert backend.child_source, backend.name
        yield backend
