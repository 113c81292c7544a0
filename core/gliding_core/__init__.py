"""gliding-horse: agent memory modelled on a CPU cache hierarchy (the framework-neutral core).

The public API is re-exported here; ``__all__`` is pinned by a test.
"""

from gliding_core.config import MemoryConfig, StoreConfig
from gliding_core.entry import Edge, Entry, MesiState, Record, TextHit
from gliding_core.errors import (
    ClosedError,
    ConfigError,
    ContentTooLargeError,
    EncodingUnavailableError,
    EntryNotFoundError,
    GlidingError,
    InvalidInputError,
    InvalidNodeError,
    StorageError,
)
from gliding_core.memory import Memory
from gliding_core.store import L0Store
from gliding_core.tokens import TokenCounter

__version__ = "0.1.0"

__all__ = [
    "ClosedError",
    "ConfigError",
    "ContentTooLargeError",
    "Edge",
    "EncodingUnavailableError",
    "Entry",
    "EntryNotFoundError",
    "GlidingError",
    "InvalidInputError",
    "InvalidNodeError",
    "L0Store",
    "Memory",
    "MemoryConfig",
    "MesiState",
    "Record",
    "StorageError",
    "StoreConfig",
    "TextHit",
    "TokenCounter",
    "__version__",
]
