"""gliding-horse: agent memory modelled on a CPU cache hierarchy (the framework-neutral core).

The public API is re-exported here; the export list is pinned by a test.
"""

from gliding_core.attention.relevance import RelevanceTracker
from gliding_core.attention.supplementary import (
    SupplementaryInput,
    SupplementaryInputStore,
    SupplementaryQueue,
)
from gliding_core.blackboard.board import AgentHandle, Blackboard
from gliding_core.blackboard.coordination.agents import Agent, AgentRegistry, AgentStatus
from gliding_core.blackboard.coordination.leases import Lease, LeaseMode, LeaseTable
from gliding_core.blackboard.coordination.messages import Message, MessageBoard
from gliding_core.blackboard.coordination.protocol import CoordinationStore, NodeMirror
from gliding_core.blackboard.coordination.registries import Coordination
from gliding_core.blackboard.coordination.sqlite import CoordinationDB
from gliding_core.blackboard.coordination.tasks import Task, TaskRegistry, TaskStatus
from gliding_core.blackboard.graph import EmbeddedGraph, GraphBackend, QueryResult, SparqlEndpoint
from gliding_core.blackboard.permissions import Operation, PermissionMatrix
from gliding_core.blackboard.records import BoardNode
from gliding_core.bus import Event, EventBus, EventType, Subscription
from gliding_core.coherence import (
    Coherence,
    CoherenceCoordinator,
    CopyEvent,
    DictNodeSource,
    Directory,
    LocalDirectory,
    NodeSource,
    Reading,
    SharedContext,
    SQLiteDirectory,
    SQLiteNodeSource,
    render_shared,
)
from gliding_core.coherence.seen import SeenNodes, SharedNode
from gliding_core.config import (
    BlackboardConfig,
    ConversationSettings,
    CoordinationConfig,
    DenseConfig,
    EvictionPolicy,
    ExpiryConfig,
    MemoryConfig,
    QueryLimits,
    SearchConfig,
    SearchOptions,
    SessionConfig,
    StoreConfig,
    TopicConfig,
)
from gliding_core.errors import (
    AgentNotFoundError,
    ClosedError,
    ConfigError,
    ContentTooLargeError,
    DatabaseUnavailableError,
    DirectoryInUseError,
    EmbedderError,
    EncodingUnavailableError,
    EntryNotFoundError,
    FencingTokenError,
    FrameNotFoundError,
    GlidingError,
    IndexMismatchError,
    InvalidInputError,
    InvalidNodeError,
    InvalidTransitionError,
    LeaseConflictError,
    LeaseError,
    LeaseNotHeldError,
    LeaseTimeoutError,
    MalformedImportError,
    NodeTooDeepError,
    PermissionDeniedError,
    StaleWriteError,
    StorageError,
    TaskCycleError,
    TaskNotFoundError,
    WriteOutcomeUnknownError,
)
from gliding_core.framing import ChatFraming
from gliding_core.hyperspace.backends import (
    CachedEmbedder,
    SentenceTransformerEmbedder,
    auto_embedder,
)
from gliding_core.hyperspace.dense import DenseIndex
from gliding_core.hyperspace.embedders import Embedder, HashEmbedder
from gliding_core.hyperspace.index import VectorIndex
from gliding_core.hyperspace.poincare import PoincareIndex, PoincareSettings
from gliding_core.hyperspace.remote import HttpEmbedder
from gliding_core.hyperspace.search import ArmResult, HybridSearch, SearchHit, SearchResults
from gliding_core.hyperspace.structure import StructureIndex
from gliding_core.memory import Memory
from gliding_core.projection import CacheStats, Frame, FrameSet, Projection, Projector, ViewCache
from gliding_core.projection.artifacts import FrameArtifact, FrameArtifacts, frame_artifacts
from gliding_core.projection.prefetch import Prefetcher, PrefetchStats
from gliding_core.projection.scheduler import Completion, Read, Scheduler
from gliding_core.retention.erasure import ForgetReport
from gliding_core.retention.transfer import ImportReport
from gliding_core.session import Context, Session, Turn
from gliding_core.store.entry import Edge, Entry, MesiState, Record, TextHit
from gliding_core.store.filters import SearchFilters
from gliding_core.store.protocol import EntryStore
from gliding_core.store.retrieval import DEFAULT_K, filters_from_dict, knowledge_filters
from gliding_core.store.scope import (
    Scope,
    adopt_unscoped_turns,
    reader_filters,
    resolve_scope,
    scope_task_iri,
)
from gliding_core.store.sqlite import L0Store
from gliding_core.summarize import ExtractiveSummarizer, ModelSummarizer, Summarizer
from gliding_core.tokens import TokenCounter
from gliding_core.topics import Boundary, TopicMonitor
from gliding_core.view.chatlog import ChatLog, LoggedMessage
from gliding_core.view.conversation import Conversation, ModelView, entry_text
from gliding_core.view.frame_source import FrameSource
from gliding_core.view.memory_sources import RecallSource, SessionContextSource
from gliding_core.view.sources import ContextSource, SourcePart, SourceRequest
from gliding_core.view.stale_turns import StaleTurns
from gliding_core.view.team import role_conversation

__version__ = "0.1.0"

__all__ = [
    "DEFAULT_K",
    "Agent",
    "AgentHandle",
    "AgentNotFoundError",
    "AgentRegistry",
    "AgentStatus",
    "ArmResult",
    "Blackboard",
    "BlackboardConfig",
    "BoardNode",
    "Boundary",
    "CacheStats",
    "CachedEmbedder",
    "ChatFraming",
    "ChatLog",
    "ClosedError",
    "Coherence",
    "CoherenceCoordinator",
    "Completion",
    "ConfigError",
    "ContentTooLargeError",
    "Context",
    "ContextSource",
    "Conversation",
    "ConversationSettings",
    "Coordination",
    "CoordinationConfig",
    "CoordinationDB",
    "CoordinationStore",
    "CopyEvent",
    "DatabaseUnavailableError",
    "DenseConfig",
    "DenseIndex",
    "DictNodeSource",
    "Directory",
    "DirectoryInUseError",
    "Edge",
    "EmbeddedGraph",
    "Embedder",
    "EmbedderError",
    "EncodingUnavailableError",
    "Entry",
    "EntryNotFoundError",
    "EntryStore",
    "Event",
    "EventBus",
    "EventType",
    "EvictionPolicy",
    "ExpiryConfig",
    "ExtractiveSummarizer",
    "FencingTokenError",
    "ForgetReport",
    "Frame",
    "FrameArtifact",
    "FrameArtifacts",
    "FrameNotFoundError",
    "FrameSet",
    "FrameSource",
    "GlidingError",
    "GraphBackend",
    "HashEmbedder",
    "HttpEmbedder",
    "HybridSearch",
    "ImportReport",
    "IndexMismatchError",
    "InvalidInputError",
    "InvalidNodeError",
    "InvalidTransitionError",
    "L0Store",
    "Lease",
    "LeaseConflictError",
    "LeaseError",
    "LeaseMode",
    "LeaseNotHeldError",
    "LeaseTable",
    "LeaseTimeoutError",
    "LocalDirectory",
    "LoggedMessage",
    "MalformedImportError",
    "Memory",
    "MemoryConfig",
    "MesiState",
    "Message",
    "MessageBoard",
    "ModelSummarizer",
    "ModelView",
    "NodeMirror",
    "NodeSource",
    "NodeTooDeepError",
    "Operation",
    "PermissionDeniedError",
    "PermissionMatrix",
    "PoincareIndex",
    "PoincareSettings",
    "PrefetchStats",
    "Prefetcher",
    "Projection",
    "Projector",
    "QueryLimits",
    "QueryResult",
    "Read",
    "Reading",
    "RecallSource",
    "Record",
    "RelevanceTracker",
    "SQLiteDirectory",
    "SQLiteNodeSource",
    "Scheduler",
    "Scope",
    "SearchConfig",
    "SearchFilters",
    "SearchHit",
    "SearchOptions",
    "SearchResults",
    "SeenNodes",
    "SentenceTransformerEmbedder",
    "Session",
    "SessionConfig",
    "SessionContextSource",
    "SharedContext",
    "SharedNode",
    "SourcePart",
    "SourceRequest",
    "SparqlEndpoint",
    "StaleTurns",
    "StaleWriteError",
    "StorageError",
    "StoreConfig",
    "StructureIndex",
    "Subscription",
    "Summarizer",
    "SupplementaryInput",
    "SupplementaryInputStore",
    "SupplementaryQueue",
    "Task",
    "TaskCycleError",
    "TaskNotFoundError",
    "TaskRegistry",
    "TaskStatus",
    "TextHit",
    "TokenCounter",
    "TopicConfig",
    "TopicMonitor",
    "Turn",
    "VectorIndex",
    "ViewCache",
    "WriteOutcomeUnknownError",
    "__version__",
    "adopt_unscoped_turns",
    "auto_embedder",
    "entry_text",
    "filters_from_dict",
    "frame_artifacts",
    "knowledge_filters",
    "reader_filters",
    "render_shared",
    "resolve_scope",
    "role_conversation",
    "scope_task_iri",
]
