"""The exception tree of gliding-horse: one root, each class also a built-in it refines.

Generic handlers keep working: a bad value is also a ``ValueError``, a missing entry also a
``LookupError``, a backend failure also a ``RuntimeError``::

    GlidingError
    ├── InvalidInputError (ValueError)        a public function was given a bad value
    │   ├── InvalidNodeError                  not JSON, not an object, a bad ``@id`` ...
    │   │   └── NodeTooDeepError              nested deeper than the configured limit
    │   ├── ContentTooLargeError              content over the configured size limit
    │   ├── MalformedImportError              lines of an import file (or entries of a
    │   │                                     copy's source) are malformed
    │   ├── TargetNotEmptyError               a copy's target already holds a memory
    │   ├── TaskCycleError                    a dependency would close a cycle of tasks
    │   └── InvalidTransitionError            a task or agent status change the table forbids
    ├── ConfigError (ValueError)              a setting cannot be used
    │   ├── EncodingUnavailableError          the token encoding cannot be loaded
    │   └── IndexMismatchError                the dense index was built by another embedder
    ├── EntryNotFoundError (LookupError)      no entry has this IRI
    │   ├── TaskNotFoundError                 no task has this IRI
    │   └── AgentNotFoundError                no agent has this name
    ├── StorageError (RuntimeError)           the storage backend failed
    │   ├── DirectoryInUseError               another process owns the directory's engines
    │   ├── DatabaseUnavailableError          PostgreSQL did not answer within the timeout
    │   ├── CopyVerificationError             a copy's target differs from its source
    │   └── WriteOutcomeUnknownError          a write may or may not have landed (retry it
    │                                         with its ``write_id``)
    ├── LeaseError (RuntimeError)             a blackboard lease could not be had or used
    │   ├── LeaseConflictError                incompatible holders have the resource
    │   │   └── LeaseTimeoutError (TimeoutError)  still held by them when the wait ended
    │   ├── LeaseNotHeldError (LookupError)   the holder has no live lease on the resource
    │   └── FencingTokenError                 a guarded write presented a stale token
    ├── EmbedderError (RuntimeError)          an embedding backend failed or is unavailable
    ├── ClosedError (RuntimeError)            the memory or store was used after close()
    ├── PermissionDeniedError (PermissionError) a role may not do this on a blackboard graph
    ├── StaleWriteError (RuntimeError)        a shared node moved past the generation a write
    │                                         was based on; carries the current one
    └── FrameNotFoundError (LookupError)      no projection frame has this name

Backend exceptions (``sqlite3.Error``, Chroma's, Oxigraph's, httpx's) are translated at one
boundary, ``gliding_core.boundary``, with ``raise ... from exc``, so callers only ever need to
catch ``GlidingError``.
"""

from __future__ import annotations

from typing import Any


class GlidingError(Exception):
    """The root of every error gliding-horse raises on purpose."""


class InvalidInputError(GlidingError, ValueError):
    """A public function was given a value it cannot accept; nothing was written."""


class InvalidNodeError(InvalidInputError):
    """A JSON-LD node is malformed: not JSON, not an object, or an ``@id`` that is not a string."""


class ContentTooLargeError(InvalidInputError):
    """The serialised content is larger than the configured limit."""


class MalformedImportError(InvalidInputError):
    """Lines of a memory export given to import are malformed; nothing of the file was written.

    Attributes:
        problems: ``(line number, what is wrong)`` of each bad line, in order (1-based).
    """

    def __init__(self, message: str, problems: list[tuple[int, str]]) -> None:
        super().__init__(message)
        self.problems = problems


class TargetNotEmptyError(InvalidInputError):
    """The target of a copy already holds entries, and merging into them was not asked for.

    Attributes:
        entries: how many entries the target holds.
    """

    def __init__(self, message: str, *, entries: int) -> None:
        super().__init__(message)
        self.entries = entries


class ConfigError(GlidingError, ValueError):
    """A configuration value cannot be used."""


class EncodingUnavailableError(ConfigError):
    """The configured token encoding cannot be loaded on this machine."""


class EntryNotFoundError(GlidingError, LookupError):
    """No entry has the requested IRI."""


class StorageError(GlidingError, RuntimeError):
    """The storage backend failed (disk, lock timeout, corruption)."""


class EmbedderError(GlidingError, RuntimeError):
    """An embedding backend could not be loaded or did not answer."""


class ClosedError(GlidingError, RuntimeError):
    """The object was used after ``close()``."""


class IndexMismatchError(ConfigError):
    """The dense index's collection holds vectors of another embedder (name or dimension)."""


class DirectoryInUseError(StorageError):
    """Another live process owns the embedded engines (Chroma, Oxigraph) of a memory directory.

    Attributes:
        pid: the owner's process id, when the lock file names one.
    """

    def __init__(self, message: str, *, pid: int | None = None) -> None:
        super().__init__(message)
        self.pid = pid


class DatabaseUnavailableError(StorageError):
    """PostgreSQL could not be reached, or dropped the connection, within the configured
    timeout (``MemoryConfig.database_timeout_s``): the server is down, restarting or out of
    connections. The pool reconnects by itself, so the same call may be made again once the
    server is back. A write that failed with it was not committed, unless the connection broke
    while its ``COMMIT`` was on its way (the server may have committed it): putting the same
    node again merges into it, but a supplementary input put again is a second input.
    """


class CopyVerificationError(StorageError):
    """A copied memory, read back after its commit, differs from its source.

    Attributes:
        differences: what differs, per kind of entry (``retention.copying.Difference``:
            the counts on each side and the IRIs missing, altered or extra).
    """

    def __init__(self, message: str, differences: list[Any]) -> None:
        super().__init__(message)
        self.differences = differences


class WriteOutcomeUnknownError(StorageError):
    """A write's update may have reached the store and no answer came back: applied or not.

    Raised when the request left for the store and its reply was lost (a read timeout, a
    connection reset or closed after sending, a gateway's 502 or 504), or when the store took
    the write and recording it afterwards failed. The blackboard's caches of the nodes are
    dropped, so no read serves a value from before the write as current.

    Resolve it by retrying the same write with its ``write_id`` (``handle.write(<the same
    nodes>, area=..., write_id=error.write_id)``, ``handle.delete(iris, write_id=...)``): a
    write that landed returns its committed nodes and is not applied again (a ``based_on`` is
    not refused as stale against the write itself); one that did not land is applied once.

    Attributes:
        write_id: the write's identity (``None`` when raised below the layer that assigns it,
            by the graph backend alone).
        iris: the nodes the write touched.
    """

    def __init__(
        self, message: str, *, write_id: str | None = None, iris: tuple[str, ...] = ()
    ) -> None:
        super().__init__(message)
        self.write_id = write_id
        self.iris = iris


class PermissionDeniedError(GlidingError, PermissionError):
    """An agent's role may not perform an operation on a blackboard graph; nothing was done.

    Attributes:
        role: the agent's role.
        graph: the named graph of the refused operation.
        operation: ``create``, ``read``, ``update``, ``delete``, or ``sparql-update``.
    """

    def __init__(self, message: str, *, role: str, graph: str, operation: str) -> None:
        super().__init__(message)
        self.role, self.graph, self.operation = role, graph, operation


class TaskCycleError(InvalidInputError):
    """A task dependency would close a cycle; nothing was written.

    Attributes:
        cycle: the tasks of the cycle, each waiting for the next, first and last the same.
    """

    def __init__(self, message: str, *, cycle: tuple[str, ...]) -> None:
        super().__init__(message)
        self.cycle = cycle


class InvalidTransitionError(InvalidInputError):
    """A task or agent status change that the transition table does not allow.

    Attributes:
        current: the status the task or agent has.
        requested: the status that was asked for.
    """

    def __init__(self, message: str, *, current: str, requested: str) -> None:
        super().__init__(message)
        self.current = current
        self.requested = requested


class TaskNotFoundError(EntryNotFoundError):
    """No task is registered under the IRI."""


class AgentNotFoundError(EntryNotFoundError):
    """No agent is registered under the name."""


class LeaseError(GlidingError, RuntimeError):
    """A blackboard lease could not be granted, renewed or used."""


class LeaseConflictError(LeaseError):
    """The resource is held by holders whose leases are incompatible with the request.

    Attributes:
        resource: the resource asked for.
        holders: the conflicting holders with their modes, ``(holder, mode)`` pairs.
    """

    def __init__(
        self, message: str, *, resource: str, holders: tuple[tuple[str, str], ...]
    ) -> None:
        super().__init__(message)
        self.resource = resource
        self.holders = holders


class LeaseTimeoutError(LeaseConflictError, TimeoutError):
    """A lease was awaited and the conflicting holders still had the resource at the deadline."""


class LeaseNotHeldError(LeaseError, LookupError):
    """The holder has no live lease on the resource (never granted, released or expired)."""


class FencingTokenError(LeaseError):
    """A guarded write presented a token that is not the newest write grant its holder owns.

    Attributes:
        resource: the resource written.
        holder: who presented the token.
        token: the token presented.
        newest: the newest write-capable token granted on the resource, if any.
    """

    def __init__(
        self, message: str, *, resource: str, holder: str, token: int, newest: int | None
    ) -> None:
        super().__init__(message)
        self.resource = resource
        self.holder = holder
        self.token = token
        self.newest = newest


class StaleWriteError(GlidingError, RuntimeError):
    """A write to a shared node was based on a generation the node has moved past; nothing written.

    Attributes:
        iri: the node.
        based_on: the generation the refused write named.
        current_generation: the node's generation now.
        current_value: the node's value at ``current_generation`` (a copy), so the writer can
            merge and retry without another read.
    """

    def __init__(
        self,
        message: str,
        *,
        iri: str,
        based_on: int,
        current_generation: int,
        current_value: dict[str, Any] | None,
    ) -> None:
        super().__init__(message)
        self.iri = iri
        self.based_on = based_on
        self.current_generation = current_generation
        self.current_value = current_value


class NodeTooDeepError(InvalidNodeError):
    """A JSON-LD node (or metadata) nests deeper than ``StoreConfig.max_depth``."""


class FrameNotFoundError(GlidingError, LookupError):
    """No projection frame has the requested name."""
