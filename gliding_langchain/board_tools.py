"""A LangChain toolkit of the blackboard: one tool per operation of one agent's handle.

``BlackboardToolkit(handle).get_tools()`` gives an agent the blackboard as tools: read a node,
write a node (based on the generation it read), read-only SPARQL over the graphs it may read,
claim and complete its task, list ready tasks, take and release leases, post and read
coordination messages, and (given a ``Scheduler``) project its role's frame. Each tool calls
``gliding_core.tools.board_tools`` with the handle.

Each tool is a ``GuardedStructuredTool``: the arguments are checked before LangChain reads them
(``gliding_core.tools.arguments``), so an extra name (a forged ``agent`` or ``role``), a missing
or mistyped argument, or a value too large or too deep is refused before anything runs.

Invariants: the agent's name, role and task are the handle's, bound when the toolkit is built,
never an argument the model fills in; every failure (a refusal such as a permission, a stale
generation or a lease conflict, a bad argument, or any other error) reaches the model as the
tool's error message saying what to do, never as an exception out of the run.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from functools import partial
from typing import Any, Literal

from langchain_core.tools import BaseTool, BaseToolkit, ToolException
from pydantic import BaseModel, ConfigDict, Field

from gliding_core import InvalidInputError
from gliding_core.blackboard.handle import AgentHandle
from gliding_core.projection.scheduler import Scheduler
from gliding_core.tools import board_tools as ops
from gliding_core.tools.arguments import tool_refusal
from gliding_langchain.tool_guard import GuardedStructuredTool


class ReadNodeInput(BaseModel):
    """Arguments of ``read_node``."""

    iri: str = Field(description="The node's IRI (@id).")


class WriteNodeInput(BaseModel):
    """Arguments of ``write_node``."""

    node: dict[str, Any] = Field(description="The JSON-LD node, with its @id.")
    area: str = Field(description="The area it goes to: plan, execution, ...")
    based_on: int | None = Field(
        default=None,
        description="The generation you read it at (0 for a new node); refused if it moved.",
    )
    lease_token: int | None = Field(default=None, description="Your lease's token, if any.")


class QueryInput(BaseModel):
    """Arguments of ``query_blackboard``."""

    sparql: str = Field(description="A SPARQL SELECT, ASK, CONSTRUCT or DESCRIBE query.")
    areas: list[str] | None = Field(default=None, description="Only these areas.")


class NoInput(BaseModel):
    """No arguments: the task is the agent's own."""


class LeaseInput(BaseModel):
    """Arguments of ``take_lease``."""

    resource: str = Field(description="What to lease (a node IRI guards its writes).")
    mode: Literal["read", "write", "exclusive"] = Field(default="write")


class ReleaseInput(BaseModel):
    """Arguments of ``release_lease``."""

    resource: str = Field(description="The leased resource.")


class PostInput(BaseModel):
    """Arguments of ``post_message``."""

    topic: str = Field(description="What it is about (progress, resource-request, ...).")
    payload: dict[str, Any] | None = Field(default=None, description="A JSON object.")


class ReadMessagesInput(BaseModel):
    """Arguments of ``read_messages``."""

    since: int = Field(default=0, ge=0, description="Only messages after this sequence.")
    topic: str | None = Field(default=None, description="Only this topic.")


class ProjectInput(BaseModel):
    """Arguments of ``project_frame``."""

    budget: int = Field(default=2000, ge=1, description="The most tokens the view may take.")
    query: str | None = Field(default=None, description="What to look for if nothing is there.")


PROJECT: tuple[str, type[BaseModel]] = (
    "Show your role's view of your task (its frame), within a token budget.",
    ProjectInput,
)

# name -> (description, argument schema, operation over the handle)
_TOOLS: dict[str, tuple[str, type[BaseModel], Callable[..., Any]]] = {
    "read_node": ("Read a blackboard node and its generation.", ReadNodeInput, ops.read_node),
    "write_node": (
        "Write a blackboard node, based on the generation you read it at.",
        WriteNodeInput,
        ops.write_node,
    ),
    "query_blackboard": (
        "Run a read-only SPARQL query over the blackboard graphs you may read.",
        QueryInput,
        ops.query,
    ),
    "claim_task": ("Claim your task: move it to running.", NoInput, ops.claim_task),
    "complete_task": ("Mark your task completed.", NoInput, ops.complete_task),
    "list_ready_tasks": (
        "List the pending subtasks of your task whose dependencies are done.",
        NoInput,
        ops.ready_tasks,
    ),
    "take_lease": ("Take a lease on a resource; returns its token.", LeaseInput, ops.take_lease),
    "release_lease": ("Release your lease on a resource.", ReleaseInput, ops.release_lease),
    "post_message": ("Post a coordination message on your task.", PostInput, ops.post_message),
    "read_messages": (
        "Read your task's coordination messages.",
        ReadMessagesInput,
        ops.read_messages,
    ),
}


def blackboard_tool(
    handle: AgentHandle, name: str, *, scheduler: Scheduler | None = None
) -> BaseTool:
    """Return the tool ``name`` (a key of the toolkit) bound to ``handle``.

    Args:
        handle: the agent's handle.
        name: the tool: ``read_node``, ``write_node``, ... or ``project_frame``.
        scheduler: the scheduler ``project_frame`` reads through (required for it).

    Raises:
        InvalidInputError: ``handle`` is not an ``AgentHandle``, ``name`` no tool's, or
            ``project_frame`` has no scheduler.
    """
    ops.check_handle(handle)
    description: str
    schema: type[BaseModel]
    operation: Callable[..., Any]
    if name == "project_frame" and scheduler is not None:
        description, schema = PROJECT
        operation = partial(_project, scheduler=scheduler)
    elif name in _TOOLS:
        description, schema, operation = _TOOLS[name]
    else:
        raise InvalidInputError(
            f"no blackboard tool is named {name!r} (project_frame needs a scheduler);"
            f" tools: {sorted(_TOOLS)}"
        )

    def run(**arguments: Any) -> str:
        try:
            return json.dumps(operation(handle, **arguments), ensure_ascii=False)
        except Exception as exc:  # the model gets every failure as text
            raise ToolException(tool_refusal(exc, tool=name, refusal=ops.board_refusal)) from exc

    return GuardedStructuredTool.from_function(
        run, name=name, description=description, args_schema=schema, refusal=ops.board_refusal
    )


def _project(handle: AgentHandle, *, scheduler: Scheduler, **arguments: Any) -> Any:
    return ops.project_frame(handle, scheduler, **arguments)


class BlackboardToolkit(BaseToolkit):
    """The blackboard as tools for one agent, whose identity and role the handle fixes.

    Args:
        handle: the agent's handle (``memory.agent("doer", role="do", task=TASK)``).
        scheduler: a scheduler over its blackboard (``memory.scheduler``); with
            one, the toolkit also has ``project_frame``.

    Raises:
        InvalidInputError: ``handle`` is not an ``AgentHandle``.
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

    handle: AgentHandle
    scheduler: Scheduler | None = None

    def __init__(self, handle: AgentHandle, **data: Any) -> None:
        # Positional, as the other toolkits take their one ready object; checked first.
        super().__init__(**{**data, "handle": ops.check_handle(handle)})

    def get_tools(self) -> list[BaseTool]:
        """Return one tool per blackboard operation."""
        names = [*_TOOLS, "project_frame"] if self.scheduler is not None else list(_TOOLS)
        return [blackboard_tool(self.handle, n, scheduler=self.scheduler) for n in names]
