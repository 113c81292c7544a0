"""The error boundary: every backend's exceptions become ``GlidingError``s in one place.

Each backend (SQLite, PostgreSQL, Chroma, Oxigraph, HTTP embedders, a SPARQL endpoint) has one
table of ``(exception, GlidingError subclass)`` rows, most specific first;
``translated(backend, doing)`` wraps a block so that the first row matching a raised exception
re-raises it as the mapped class, ``from`` the original, with a message saying what was being
done. An exception the
table does not name passes through unchanged (a programming error should stay visible), and a
``GlidingError`` raised inside the block is never wrapped twice.

Invariants: no module above a backend's adapter catches that backend's exceptions itself; the
tables are data, so tests enumerate them; backend packages are imported only when their table
is first used (the core imports no optional backend at import time).
"""

from __future__ import annotations

import importlib
import sqlite3
from types import TracebackType
from typing import Literal

from gliding_core.errors import (
    ClosedError,
    ConfigError,
    DatabaseUnavailableError,
    EmbedderError,
    GlidingError,
    InvalidInputError,
    StorageError,
    WriteOutcomeUnknownError,
)
from gliding_core.jsonld import preview

Backend = Literal[
    "sqlite", "postgresql", "chroma", "oxigraph", "http", "sparql", "sparql-update", "jsonld"
]

# A row names its exception as a class, or as "module:Class" for a backend that is imported
# only when the table is used.
_Row = tuple["type[BaseException] | str", type[GlidingError]]

TABLES: dict[str, tuple[_Row, ...]] = {
    "sqlite": (
        # Text holding a lone surrogate, which no UTF-8 store can hold: the caller's value.
        # Every public function refuses it first (``jsonld.check_text``); this row is the net.
        (UnicodeEncodeError, InvalidInputError),
        # Covers OperationalError (locked, disk I/O, full), IntegrityError, and DatabaseError
        # ("file is not a database", a corrupt page): the disk or the file failed, not the caller.
        (sqlite3.Error, StorageError),
    ),
    "postgresql": (
        (UnicodeEncodeError, InvalidInputError),  # a lone surrogate, as for SQLite
        # A value PostgreSQL cannot hold (a NUL character in text, a number out of range).
        ("psycopg:DataError", InvalidInputError),
        # The database role lacks a privilege on the schema or a table: a setting of the
        # deployment, which an administrator fixes (the message says what was being done).
        ("psycopg.errors:InsufficientPrivilege", ConfigError),
        ("psycopg_pool:PoolClosed", ClosedError),
        # No connection came free, or none could be made, within the configured timeout: the
        # server is down, restarting, or out of connections.
        ("psycopg_pool:PoolTimeout", DatabaseUnavailableError),
        # A lock wait or a statement that timed out, a server out of disk or memory: the
        # server answers (these are operational errors too, but no outage).
        ("psycopg.errors:LockNotAvailable", StorageError),
        ("psycopg.errors:QueryCanceled", StorageError),
        ("psycopg.errors:InsufficientResources", StorageError),
        # The connection broke: the server shut down or crashed (SQLSTATE 57P01 to 57P03, class
        # 08), or the socket closed with no SQLSTATE at all, which psycopg reports as a bare
        # OperationalError.
        ("psycopg:OperationalError", DatabaseUnavailableError),
        # Everything else: a constraint failed, a statement PostgreSQL refused.
        ("psycopg:Error", StorageError),
    ),
    "chroma": (
        ("chromadb.errors:InvalidArgumentError", StorageError),
        ("chromadb.errors:ChromaError", StorageError),
        # The Rust bindings raise these for a damaged segment or a dropped collection.
        (RuntimeError, StorageError),
        (ValueError, StorageError),
        (OSError, StorageError),
    ),
    "oxigraph": (
        # pyoxigraph raises SyntaxError for a query or document it cannot parse.
        (SyntaxError, InvalidInputError),
        (UnicodeEncodeError, InvalidInputError),  # a lone surrogate, as for SQLite
        (OSError, StorageError),
        (RuntimeError, StorageError),
    ),
    "http": (
        ("httpx:TimeoutException", EmbedderError),
        ("httpx:HTTPStatusError", EmbedderError),
        ("httpx:HTTPError", EmbedderError),
        (OSError, EmbedderError),
    ),
    # A SPARQL 1.1 endpoint under the blackboard: the transport failed, not the caller.
    "sparql": (
        (UnicodeEncodeError, InvalidInputError),  # a lone surrogate in the request's text
        ("httpx:TimeoutException", StorageError),
        ("httpx:HTTPError", StorageError),
        (OSError, StorageError),
    ),
    # A SPARQL update sent to an endpoint: what failed decides whether the server may have
    # applied it. Nothing left this process when no connection was made (or none came free,
    # or the request could not be formed): not applied. Anything later (a write, a read, a
    # timeout or a reset once the request was on its way) may have lost the reply of an
    # update the server applied: its outcome is unknown.
    "sparql-update": (
        ("httpx:ConnectError", StorageError),
        ("httpx:ConnectTimeout", StorageError),
        ("httpx:PoolTimeout", StorageError),
        ("httpx:UnsupportedProtocol", StorageError),
        ("httpx:LocalProtocolError", StorageError),
        ("httpx:ProxyError", StorageError),
        ("httpx:TimeoutException", WriteOutcomeUnknownError),
        ("httpx:HTTPError", WriteOutcomeUnknownError),
        (OSError, WriteOutcomeUnknownError),
    ),
    # pyld, the JSON-LD processor of L3 projections: it refuses a document or a context.
    "jsonld": (("pyld.jsonld:JsonLdError", InvalidInputError),),
}

_resolved: dict[str, tuple[tuple[type[BaseException], type[GlidingError]], ...]] = {}


def rows(backend: Backend) -> tuple[tuple[type[BaseException], type[GlidingError]], ...]:
    """Return the table of ``backend`` with every exception resolved to its class.

    A row whose backend package is not installed is left out: nothing can raise it.
    """
    if backend not in _resolved:
        if backend not in TABLES:
            raise InvalidInputError(f"unknown backend {backend!r}; known: {sorted(TABLES)}")
        found: list[tuple[type[BaseException], type[GlidingError]]] = []
        for source, target in TABLES[backend]:
            kind = _resolve(source)
            if kind is not None:
                found.append((kind, target))
        _resolved[backend] = tuple(found)
    return _resolved[backend]


def _resolve(source: type[BaseException] | str) -> type[BaseException] | None:
    if not isinstance(source, str):
        return source
    module_name, _, name = source.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError:
        return None
    kind = getattr(module, name, None)
    return kind if isinstance(kind, type) and issubclass(kind, BaseException) else None


def translate(backend: Backend, exc: BaseException, doing: str) -> GlidingError | None:
    """Return the ``GlidingError`` that ``exc`` of ``backend`` maps to, or ``None``."""
    if isinstance(exc, GlidingError):
        return None
    for kind, target in rows(backend):
        if isinstance(exc, kind):
            error = target(f"{doing} failed ({backend}): {type(exc).__name__}: {_text(exc)}")
            error.__cause__ = exc
            return error
    return None


def _text(exc: BaseException) -> str:
    """The message of ``exc``; its arguments when its own ``__str__`` fails (pyld's can).

    A ``UnicodeEncodeError`` names the text it could not encode, escaped.
    """
    try:
        text = str(exc)
    except Exception:
        return repr(exc.args)[:500]
    value = getattr(exc, "object", None) if isinstance(exc, UnicodeEncodeError) else None
    if isinstance(value, str):
        text += f", in {preview(value)} (text must be valid Unicode)"
    return text


class translated:  # noqa: N801 - used as a function: ``with translated(...):``
    """Run the block, re-raising a mapped backend exception as its ``GlidingError``.

    A class rather than a ``@contextmanager`` generator: it wraps every store call, and a
    generator costs about five times as much to enter and leave.

    Args:
        backend: which table applies.
        doing: what the block does, for the message (``"upserting into the dense index"``).
    """

    __slots__ = ("backend", "doing")

    def __init__(self, backend: Backend, doing: str) -> None:
        self.backend, self.doing = backend, doing

    def __enter__(self) -> None:
        return None

    def __exit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> Literal[False]:  # never swallows: it passes the exception on or raises its translation
        if exc is None or not isinstance(exc, Exception) or isinstance(exc, GlidingError):
            return False
        error = translate(self.backend, exc, self.doing)
        if error is None:
            return False
        raise error from exc
