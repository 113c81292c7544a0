"""gliding-horse: agent memory modelled on a CPU cache hierarchy (the framework-neutral core).

The public API is re-exported here; the export list is pinned by a test.
"""

from gliding_core.attention.relevance import RelevanceTracker
from gliding_core.attention.supplementary import SupplementaryInput, SupplementaryInputStore
from gliding_core.attention.topics import Boundary, TopicMonitor
from gliding_core.attention.window import ContextWindowManager, FittedWindow
from gliding_core.bus import Event, EventBus, EventType, Subscription
from gliding_core.config import (
    EvictionPolicy,
    MemoryConfig,
    SessionConfig,
    StoreConfig,
    TopicConfig,
)
from gliding_core.conversation import Conversation, ModelView, entry_text
from gliding_core.entry import Edge, Entry, MesiState, Record, TextHit
from gliding_core.errors import (
    ClosedError,
    ConfigError,
    ContentTooLargeError,
    DirectoryInUseError,
    EmbedderError,
    EncodingUnavailableError,
    EntryNotFoundError,
    GlidingError,
    IndexMismatchError,
    InvalidInputError,
    InvalidNodeError,
    StorageError,
)
from gliding_core.filters import SearchFilters
from gliding_core.hyperspace.backends import (
    CachedEmbedder,
    SentenceTransformerEmbedder,
    auto_embedder,
)
from gliding_core.hyperspace.dense import DenseIndex
from gliding_core.hyperspace.embedders import Embedder, HashEmbedder
from gliding_core.hyperspace.poincare import PoincareIndex, PoincareSettings
from gliding_core.hyperspace.remote import HttpEmbedder
from gliding_core.hyperspace.search import ArmResult, HybridSearch, SearchHit
from gliding_core.hyperspace.structure import StructureIndex
from gliding_core.memory import Memory
from gliding_core.retrieval import DEFAULT_K, filters_from_dict, knowledge_filters
from gliding_core.scope import Scope, reader_filters, resolve_scope, scope_task_iri
from gliding_core.session import Context, Session, Turn
from gliding_core.store import L0Store
from gliding_core.summarize import ExtractiveSummarizer, Summarizer
from gliding_core.tokens import TokenCounter

__version__ = "0.1.0"

__all__ = [
    "DEFAULT_K",
    "ArmResult",
    "Boundary",
    "CachedEmbedder",
    "ClosedError",
    "ConfigError",
    "ContentTooLargeError",
    "Context",
    "ContextWindowManager",
    "Conversation",
    "DenseIndex",
    "DirectoryInUseError",
    "Edge",
    "Embedder",
    "EmbedderError",
    "EncodingUnavailableError",
    "Entry",
    "EntryNotFoundError",
    "Event",
    "EventBus",
    "EventType",
    "EvictionPolicy",
    "ExtractiveSummarizer",
    "FittedWindow",
    "GlidingError",
    "HashEmbedder",
    "HttpEmbedder",
    "HybridSearch",
    "IndexMismatchError",
    "InvalidInputError",
    "InvalidNodeError",
    "L0Store",
    "Memory",
    "MemoryConfig",
    "MesiState",
    "ModelView",
    "PoincareIndex",
    "PoincareSettings",
    "Record",
    "RelevanceTracker",
    "Scope",
    "SearchFilters",
    "SearchHit",
    "SentenceTransformerEmbedder",
    "Session",
    "SessionConfig",
    "StorageError",
    "StoreConfig",
    "StructureIndex",
    "Subscription",
    "Summarizer",
    "SupplementaryInput",
    "SupplementaryInputStore",
    "TextHit",
    "TokenCounter",
    "TopicConfig",
    "TopicMonitor",
    "Turn",
    "__version__",
    "auto_embedder",
    "entry_text",
    "filters_from_dict",
    "knowledge_filters",
    "reader_filters",
    "resolve_scope",
    "scope_task_iri",
]
