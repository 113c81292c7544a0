"""The public surface: what ``gliding_core`` exports, and the exception tree."""

from __future__ import annotations

import subprocess
import sys

import pytest

import gliding_core
from gliding_core import errors


def test_all_is_pinned() -> None:
    assert gliding_core.__all__ == [
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
        "CopyEvent",
        "DenseIndex",
        "DictNodeSource",
        "DirectoryInUseError",
        "Edge",
        "EmbeddedGraph",
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
        "FencingTokenError",
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
        "SearchFilters",
        "SearchHit",
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
    for name in gliding_core.__all__:
        assert hasattr(gliding_core, name)


@pytest.mark.parametrize(
    ("error", "builtin"),
    [
        (errors.InvalidInputError, ValueError),
        (errors.InvalidNodeError, ValueError),
        (errors.ContentTooLargeError, ValueError),
        (errors.ConfigError, ValueError),
        (errors.EncodingUnavailableError, ValueError),
        (errors.EntryNotFoundError, LookupError),
        (errors.StorageError, RuntimeError),
        (errors.EmbedderError, RuntimeError),
        (errors.ClosedError, RuntimeError),
        (errors.IndexMismatchError, ValueError),
        (errors.DirectoryInUseError, RuntimeError),
        (errors.NodeTooDeepError, ValueError),
        (errors.FrameNotFoundError, LookupError),
        (errors.TaskCycleError, ValueError),
        (errors.InvalidTransitionError, ValueError),
        (errors.TaskNotFoundError, LookupError),
        (errors.AgentNotFoundError, LookupError),
        (errors.LeaseError, RuntimeError),
        (errors.LeaseConflictError, RuntimeError),
        (errors.LeaseTimeoutError, TimeoutError),
        (errors.LeaseNotHeldError, LookupError),
        (errors.FencingTokenError, RuntimeError),
        (errors.PermissionDeniedError, PermissionError),
        (errors.WriteOutcomeUnknownError, RuntimeError),
    ],
)
def test_each_error_is_a_gliding_error_and_the_builtin_it_refines(
    error: type[Exception], builtin: type[Exception]
) -> None:
    assert issubclass(error, errors.GlidingError)
    assert issubclass(error, builtin)


def test_core_imports_no_framework() -> None:
    """Importing the core (in a fresh interpreter) loads neither LangChain nor LlamaIndex."""
    script = (
        "import sys, gliding_core, gliding_core.cli\n"
        "frameworks = ('langchain', 'langgraph', 'llama_index')\n"
        "loaded = [n for n in sys.modules if n.startswith(frameworks)]\n"
        "print(','.join(loaded))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True, timeout=120
    )
    assert result.stdout.strip() == ""
