"""A LangChain retriever per L3 frame: a task's projected artifacts as documents.

``GlidingFrameRetriever`` binds a frame of a task (parameters, a budget, optionally the agent
who reads) and returns the frame's artifacts (``gliding_core.projection.artifacts``) as
``Document``s: ``page_content`` is the node's compact JSON-LD as the projection shows it, ``id``
its IRI, and the metadata says where it lives and what it is (``iri``, ``generation``,
``types``, ``graph``, ``area``, ``task``, ``frame``, ``step``; ``score`` with a query). The
query orders the frame's artifacts and never adds any (a frame is not a search); ``k`` on the
retriever or per call (``invoke(query, k=2)``) keeps the first ``k``.
``frame_retrievers`` gives one retriever per shipped frame of a task.

Invariants: everything is checked when the retriever is built (typed errors naming the value);
a document's generation is never newer than the content it shows; an agent-bound retriever
shows only its agent's task and what its role may read. The async path runs the projection in
a worker thread: the event loop never waits on the blackboard.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

from langchain_core.callbacks import (
    AsyncCallbackManagerForRetrieverRun,
    CallbackManagerForRetrieverRun,
)
from langchain_core.documents import Document
from langchain_core.retrievers import BaseRetriever
from pydantic import ConfigDict, Field, PrivateAttr

from gliding_core import AgentHandle, InvalidInputError, Memory, Scheduler
from gliding_core.jsonld import preview
from gliding_core.projection import SHIPPED, FrameArtifact, FrameArtifacts
from gliding_core.store.retrieval import check_k

_OPTIONS = frozenset({"k"})


class GlidingFrameRetriever(BaseRetriever):
    """Retrieve one frame's projection of a task as documents, one per node.

    Args:
        frame: the frame's name (``"da_input"``).
        memory: the memory whose blackboard is projected (give this or ``scheduler``): read
            through its one scheduler (``memory.scheduler``), whose view cache every reader
            of the memory shares.
        scheduler: a scheduler over the blackboard (its projector and view cache are used).
        task: the task's IRI; the agent's task when omitted with an ``agent``.
        params: the frame's parameters (``{"plan": "urn:..."}``).
        budget: the most tokens of the projection; the frame's own budget when omitted.
        agent: the agent reading: only its task, only what its role may read.
        k: how many documents at most (all the projection holds when omitted).

    Raises:
        InvalidInputError: not exactly one of ``memory`` and ``scheduler``, or a bad task,
            parameter, budget, agent or ``k``.
        FrameNotFoundError: no such frame.
        PermissionDeniedError: ``task`` is not the agent's task.

    Example:
        >>> planner = memory.agent("planner", role="plan", task=task)  # doctest: +SKIP
        >>> retriever = GlidingFrameRetriever(memory=memory, frame="pa_init", agent=planner)
        >>> docs = retriever.invoke("constraints", k=3)  # doctest: +SKIP
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

    frame: str
    memory: Memory | None = None
    scheduler: Scheduler | None = None
    task: str | None = None
    params: dict[str, Any] = Field(default_factory=dict)
    budget: int | None = None
    agent: AgentHandle | None = None
    k: int | None = None
    _artifacts: FrameArtifacts = PrivateAttr()

    def __init__(self, **data: Any) -> None:
        # Typed errors naming the bad value, before pydantic wraps them in its own.
        reader = _reader(data)
        if data.get("k") is not None:
            check_k(data["k"])
        data["task"], data["params"] = reader.task, reader.params
        super().__init__(**data)
        self._artifacts = reader

    def _get_relevant_documents(
        self, query: str, *, run_manager: CallbackManagerForRetrieverRun, **options: Any
    ) -> list[Document]:
        return self._read(query, options)

    async def _aget_relevant_documents(
        self, query: str, *, run_manager: AsyncCallbackManagerForRetrieverRun, **options: Any
    ) -> list[Document]:
        return await asyncio.to_thread(self._read, query, options)

    def _read(self, query: str, options: Mapping[str, Any]) -> list[Document]:
        unknown = sorted(set(options) - _OPTIONS)
        if unknown:
            raise InvalidInputError(
                f"unknown frame retriever option {unknown[0]!r}; the only option is 'k'"
            )
        k = options.get("k", self.k)
        found = self._artifacts.read(query, k=None if k is None else check_k(k))
        return [to_document(artifact) for artifact in found]


def _reader(data: Mapping[str, Any]) -> FrameArtifacts:
    memory, scheduler = data.get("memory"), data.get("scheduler")
    if (memory is None) == (scheduler is None):
        raise InvalidInputError(
            "give a frame retriever exactly one of memory= and scheduler=,"
            f" got memory={preview(memory)}, scheduler={preview(scheduler)}"
        )
    source: Scheduler
    if memory is not None:
        if not isinstance(memory, Memory):
            raise InvalidInputError(f"memory must be a gliding Memory, got {preview(memory)}")
        source = memory.scheduler
    elif isinstance(scheduler, Scheduler):
        source = scheduler
    else:
        raise InvalidInputError(f"scheduler must be a gliding Scheduler, got {preview(scheduler)}")
    params = data.get("params")
    if params is not None and not isinstance(params, Mapping):
        raise InvalidInputError(f"frame parameters must be a mapping, got {preview(params)}")
    return FrameArtifacts(
        source,
        data.get("frame"),  # type: ignore[arg-type]  # checked by the frame set
        task=data.get("task"),
        params=params,
        budget=data.get("budget"),
        agent=data.get("agent"),
    )


def to_document(artifact: FrameArtifact) -> Document:
    """Return the LangChain document of one frame artifact."""
    return Document(page_content=artifact.text, metadata=artifact.metadata(), id=artifact.iri)


def frame_retrievers(
    *,
    memory: Memory | None = None,
    scheduler: Scheduler | None = None,
    task: str | None = None,
    agent: AgentHandle | None = None,
    budget: int | None = None,
    k: int | None = None,
    params: Mapping[str, Mapping[str, Any]] | None = None,
) -> dict[str, GlidingFrameRetriever]:
    """Return a retriever per shipped frame of ``task``, by frame name.

    Args:
        params: each frame's parameters, by frame name (``{"da_input": {"plan": ...}}``).
        memory, scheduler, task, agent, budget, k: as ``GlidingFrameRetriever`` takes them.
    """
    given = dict(params or {})
    unknown = sorted(set(given) - {f.name for f in SHIPPED})
    if unknown:
        raise InvalidInputError(f"params name no shipped frame: {unknown}")
    return {
        frame.name: GlidingFrameRetriever(
            frame=frame.name,
            memory=memory,
            scheduler=scheduler,
            task=task,
            agent=agent,
            budget=budget,
            k=k,
            params=dict(given.get(frame.name, {})),
        )
        for frame in SHIPPED
    }
