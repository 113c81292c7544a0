"""The public surface: what ``gliding_core`` exports, and the exception tree."""

from __future__ import annotations

import pytest

import gliding_core
from gliding_core import errors


def test_all_is_pinned() -> None:
    assert gliding_core.__all__ == [
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
    ],
)
def test_each_error_is_a_gliding_error_and_the_builtin_it_refines(
    error: type[Exception], builtin: type[Exception]
) -> None:
    assert issubclass(error, errors.GlidingError)
    assert issubclass(error, builtin)


def test_core_imports_no_framework() -> None:
    import sys

    assert not any(name.startswith(("langchain", "llama_index")) for name in sys.modules)
