"""The public surface of ``gliding_llamaindex``: its export list, pinned."""

from __future__ import annotations

import gliding_llamaindex


def test_all_is_pinned() -> None:
    assert gliding_llamaindex.__all__ == [
        "BlackboardToolSpec",
        "GlidingEmbedding",
        "GlidingFrameRetriever",
        "GlidingMemory",
        "GlidingMemoryBlock",
        "GlidingRetriever",
        "LlamaIndexEmbedder",
        "LlamaIndexSummarizer",
        "MemoryToolSpec",
        "RoleWorkflow",
        "TeamMemory",
        "frame_retrievers",
        "pdca_workflow",
        "role_memory",
    ]
    for name in gliding_llamaindex.__all__:
        assert hasattr(gliding_llamaindex, name)
