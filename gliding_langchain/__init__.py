"""gliding-horse for LangChain: adapters that translate LangChain objects and call gliding_core.

- ``GlidingMemoryMiddleware``: the memory of a ``create_agent`` agent, budgeted per model call.
- ``SupplementaryInputCallbackHandler``: user input sent mid-run reaches the next model call.
- ``GlidingRetriever``: hybrid search as a retriever.
- ``GlidingFrameRetriever``, ``frame_retrievers``: an L3 frame of a task as a retriever (one
  document per projected node, its IRI and generation in the metadata).
- ``GlidingStore``: a LangGraph store on L0 and Hyperspace.
- ``create_search_memory_tool``, ``create_save_memory_tool``: tools with which an agent
  manages its own long-term memory; ``BlackboardToolkit``: the blackboard as one agent's tools.
- ``create_role_agent``, ``pdca_graph``: role agents on one task that hand over through the
  blackboard, each model shown its role's frame (``GlidingMemoryMiddleware(handle=...)``).
- ``GlidingChatMessageHistory``: the legacy path for ``RunnableWithMessageHistory``.
- ``LangChainEmbedder``, ``LangChainSummarizer``: LangChain models as the memory's models.

Every read and write has a scope (``gliding_core.store.scope``): the run's user, else its thread,
else the task the middleware was built with; no scope reads another's entries unless it is shared.
"""

from gliding_langchain.board_tools import BlackboardToolkit
from gliding_langchain.callbacks import SupplementaryInputCallbackHandler
from gliding_langchain.chat_history import GlidingChatMessageHistory
from gliding_langchain.frame_retrievers import GlidingFrameRetriever, frame_retrievers
from gliding_langchain.middleware import GlidingMemoryMiddleware
from gliding_langchain.models import LangChainEmbedder, LangChainSummarizer
from gliding_langchain.retrievers import GlidingRetriever
from gliding_langchain.store import GlidingStore
from gliding_langchain.team import RoleAgent, create_role_agent, pdca_agents, pdca_graph
from gliding_langchain.testing import ScriptedChatModel
from gliding_langchain.tools import (
    GlidingSaveMemoryTool,
    GlidingSearchMemoryTool,
    create_save_memory_tool,
    create_search_memory_tool,
)

__all__ = [
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
