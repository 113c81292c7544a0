"""gliding-horse: agent memory modelled on a CPU cache hierarchy (the framework-neutral core).

The public API is re-exported here; the export list is pinned by a test.
"""

from gliding_core.attention.relevance import RelevanceTracker
from gliding_core.attention.supplementary import SupplementaryInput, SupplementaryInputStore
from gliding_core.bus import Event, EventBus, EventType, Subscription
from gliding_core.chatlog import ChatLog, LoggedMessage
from gliding_core.config import (
    ConversationSettings,
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
from gliding_core.framing import ChatFraming
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
from gliding_core.memory_sources import RecallSource, SessionContextSource
from gliding_core.scope import Scope, reader_filters, resolve_scope, scope_task_iri
from gliding_core.session import Context, Session, Turn
from gliding_core.sources import ContextSource, SourcePart, SourceRequest
from gliding_core.store import L0Store
from gliding_core.summarize import ExtractiveSummarizer, ModelSummarizer, Summarizer
from gliding_core.tokens import TokenCounter
from gliding_core.topics import Boundary, TopicMonitor

__version__ = "0.1.0"

__all__ = [
    "ArmResult",
    "Boundary",
    "CachedEmbedder",
    "ChatFraming",
    "ChatLog",
    "ClosedError",
    "ConfigError",
    "ContentTooLargeError",
    "Context",
    "ContextSource",
    "Conversation",
    "ConversationSettings",
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
    "GlidingError",
    "HashEmbedder",
    "HttpEmbedder",
    "HybridSearch",
    "IndexMismatchError",
    "InvalidInputError",
    "InvalidNodeError",
    "L0Store",
    "LoggedMessage",
    "Memory",
    "MemoryConfig",
    "MesiState",
    "ModelSummarizer",
    "ModelView",
    "PoincareIndex",
    "PoincareSettings",
    "RecallSource",
    "Record",
    "RelevanceTracker",
    "Scope",
    "SearchFilters",
    "SearchHit",
    "SentenceTransformerEmbedder",
    "Session",
    "SessionConfig",
    "SessionContextSource",
    "SourcePart",
    "SourceRequest",
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
    "reader_filters",
    "resolve_scope",
    "scope_task_iri",
]
