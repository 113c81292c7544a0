"""gliding-horse for LlamaIndex: adapters that translate LlamaIndex objects and call gliding_core.

Each module is one LlamaIndex concept: ``GlidingMemory`` (a chat memory with a budgeted view),
``GlidingMemoryBlock`` (long-term memory for the stock ``Memory``), ``GlidingRetriever``
(hybrid search of L0), ``GlidingFrameRetriever`` (an L3 frame of a task, one node per projected
node), the model bridges ``LlamaIndexEmbedder``, ``GlidingEmbedding`` and
``LlamaIndexSummarizer``, and the tool specs ``MemoryToolSpec`` (an agent searches and saves its
own long-term memory) and ``BlackboardToolSpec`` (the blackboard as one agent's tools), and role
agents in an ``AgentWorkflow`` (``pdca_workflow``, ``TeamMemory``: one memory per agent). Each
reads and writes one scope (``gliding_core.store.scope``): a user, a session (``session_id``, a
thread scope) or a task.
"""

from gliding_llamaindex.board_tools import BlackboardToolSpec
from gliding_llamaindex.embeddings import GlidingEmbedding, LlamaIndexEmbedder
from gliding_llamaindex.frame_retriever import GlidingFrameRetriever, frame_retrievers
from gliding_llamaindex.memory import GlidingMemory
from gliding_llamaindex.memory_block import GlidingMemoryBlock
from gliding_llamaindex.retriever import GlidingRetriever
from gliding_llamaindex.summarizer import LlamaIndexSummarizer
from gliding_llamaindex.team import RoleWorkflow, TeamMemory, pdca_workflow, role_memory
from gliding_llamaindex.tools import MemoryToolSpec

__all__ = [
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
