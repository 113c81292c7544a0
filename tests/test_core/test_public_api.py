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
