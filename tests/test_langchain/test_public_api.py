"""The public surface of ``gliding_langchain``: its export list, pinned."""

from __future__ import annotations

import gliding_langchain


def test_all_is_pinned() -> None:
    assert gliding_langchain.__all__ == [
        "BlackboardToolkit",
        "GlidingChatMessageHistory",
        "GlidingFrameRetriever",
        "GlidingMemoryMiddleware",
        "GlidingRetriever",
        "GlidingSaveMemoryTool",
        "GlidingSearchMemoryTool",
        "GlidingStore",
        "LangChainEmbedder",
        "LangChainSummarizer",
        "RoleAgent",
        "ScriptedChatModel",
        "SupplementaryInputCallbackHandler",
        "create_role_agent",
        "create_save_memory_tool",
        "create_search_memory_tool",
        "frame_retrievers",
        "pdca_agents",
        "pdca_graph",
    ]
    for name in gliding_langchain.__all__:
        assert hasattr(gliding_langchain, name)
