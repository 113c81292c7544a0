"""Adapter: ``GlidingFrameRetriever``, a LlamaIndex retriever per L3 frame of a task.

The frame's artifacts (``gliding_core.projection.artifacts``) as ``NodeWithScore(TextNode)``:
the node's id is the artifact's IRI (stable across reads and generations), its text the
node's compact JSON-LD as the projection shows it, its metadata ``iri``, ``generation``,
``types``, ``graph``, ``area``, ``task``, ``frame`` and ``step`` (hidden from embedding and from
the LLM: the JSON-LD says it already), its score the artifact's lexical relevance to the query
(``None`` for a blank query). The query orders the frame's artifacts and never adds any;
``similarity_top_k`` (or ``k``) keeps the first ones.

Invariants: everything is checked at construction (typed errors naming the value); a node's
generation is never newer than the content it shows; an agent-bound retriever shows only its
agent's task and what its role may read; ``aretrieve`` projects in a worker thread.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping

from llama_index.core.base.base_retriever import BaseRetriever
from llama_index.core.callbacks import CallbackManager
from llama_index.core.schema import NodeWithScore, QueryBundle, TextNode

from gliding_core.blackboard.handle import AgentHandle
from gliding_core.errors import InvalidInputError
from gliding_core.memory import Memory
from gliding_core.projection import SHIPPED, FrameArtifact, FrameArtifacts, Projector
from gliding_core.projection.scheduler import Scheduler
from gliding_core.store.retrieval import check_k


class GlidingFrameRetriever(BaseRetriever):
    """Retrieve one frame's projection of a task as nodes, one per blackboard node.

    Args:
        source: a ``Memory`` (read through its one scheduler, ``memory.scheduler``, whose view
            cache every reader of the memory shares), a ``Scheduler`` or a ``Projector`` over
            the blackboard.
        frame: the frame's name (``"ca_review"``).
        task: the task's IRI; the agent's task when omitted with an ``agent``.
        params: the frame's parameters (``{"artifact": "urn:..."}``).
        budget: the most tokens of the projection; the frame's own budget when omitted.
        agent: the agent reading: only its task, only what its role may read.
        similarity_top_k: how many nodes at most (all the projection holds when omitted).
        k: the same, by the LangChain retriever's name; it wins when both are given.
        callback_manager: LlamaIndex callbacks.
        verbose: LlamaIndex's verbose flag.

    Raises:
        InvalidInputError: a bad source, task, parameter, budget, agent or top k.
        FrameNotFoundError: no such frame.
        PermissionDeniedError: ``task`` is not the agent's task.
    """

    def __init__(
        self,
        source: Memory | Scheduler | Projector,
        frame: str,
        *,
        task: str | None = None,
        params: Mapping[str, object] | None = None,
        budget: int | None = None,
        agent: AgentHandle | None = None,
        similarity_top_k: int | None = None,
        k: int | None = None,
        callback_manager: CallbackManager | None = None,
        verbose: bool = False,
    ) -> None:
        artifacts = FrameArtifacts(
            source, frame, task=task, params=params, budget=budget, agent=agent
        )
        top = k if k is not None else similarity_top_k
        checked = (
            None if top is None else check_k(top, "k" if k is not None else "similarity_top_k")
        )
        super().__init__(callback_manager=callback_manager, verbose=verbose)
        self.artifacts, self.similarity_top_k = artifacts, checked

    def _retrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        found = self.artifacts.read(query_bundle.query_str, k=self.similarity_top_k)
        return [NodeWithScore(node=to_node(artifact), score=artifact.score) for artifact in found]

    async def _aretrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        return await asyncio.to_thread(self._retrieve, query_bundle)


def to_node(artifact: FrameArtifact) -> TextNode:
    """Return the ``TextNode`` of one frame artifact (see the module invariants)."""
    metadata = artifact.metadata()
    metadata.pop("score", None)  # the score is the NodeWithScore's
    keys = list(metadata)
    return TextNode(
        id_=artifact.iri,
        text=artifact.text,
        metadata=metadata,
        excluded_embed_metadata_keys=keys,
        excluded_llm_metadata_keys=keys,
    )


def frame_retrievers(
    source: Memory | Scheduler | Projector,
    *,
    task: str | None = None,
    agent: AgentHandle | None = None,
    budget: int | None = None,
    similarity_top_k: int | None = None,
    params: Mapping[str, Mapping[str, object]] | None = None,
) -> dict[str, GlidingFrameRetriever]:
    """Return a retriever per shipped frame of ``task``, by frame name.

    Args:
        params: each frame's parameters, by frame name (``{"da_input": {"plan": ...}}``).
        source, task, agent, budget, similarity_top_k: as ``GlidingFrameRetriever`` takes them.
    """
    given = dict(params or {})
    unknown = sorted(set(given) - {f.name for f in SHIPPED})
    if unknown:
        raise InvalidInputError(f"params name no shipped frame: {unknown}")
    return {
        frame.name: GlidingFrameRetriever(
            source,
            frame.name,
            task=task,
            agent=agent,
            budget=budget,
            similarity_top_k=similarity_top_k,
            params=given.get(frame.name),
        )
        for frame in SHIPPED
    }
