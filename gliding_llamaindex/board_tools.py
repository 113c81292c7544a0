"""The blackboard as a LlamaIndex tool spec: one tool per operation of one agent's handle.

``BlackboardToolSpec(handle).to_tool_list()`` gives a ``FunctionAgent`` the operations of
``gliding_core.tools.board_tools``: read and write a node (based on a generation), read-only SPARQL,
claim and complete its task, list ready tasks, take and release leases, post and read
coordination messages, and (given a ``Scheduler``) project its role's frame. Each tool has a
sync ``call`` and an async ``acall`` (the sync function in a worker thread, ``FunctionTool``'s
default), so the event loop never waits on the board.

The spec is a ``GuardedToolSpec``: each tool checks its arguments before the method runs
(``gliding_core.tools.arguments``), so an extra name (a forged ``agent`` or ``role``), a missing
or mistyped argument, or a value too large or too deep is refused before anything runs.

Invariants: the agent's name, role and task are the handle's, never an argument the model
fills in; every failure (a refusal such as a permission, a stale generation or a lease
conflict, a bad argument, or any other error) is the tool's output, a text starting ``Error:``
that says what to do, never raised out of the run.
"""

# No ``from __future__ import annotations``: FunctionTool builds each tool's schema from the
# methods' signatures, and needs their annotations as types, not strings.

import json
from collections.abc import Callable
from typing import Annotated, Any, Literal

from llama_index.core.tools.tool_spec.base import SPEC_FUNCTION_TYPE

from gliding_core import GlidingError
from gliding_core.blackboard.handle import AgentHandle
from gliding_core.projection.scheduler import Scheduler
from gliding_core.tools import board_tools as ops
from gliding_llamaindex.tool_guard import GuardedToolSpec

Iri = Annotated[str, "The node's IRI (@id)."]


class BlackboardToolSpec(GuardedToolSpec):
    """The blackboard as tools for one agent, whose identity and role the handle fixes.

    Args:
        handle: the agent's handle (``memory.agent("doer", role="do", task=TASK)``).
        scheduler: a scheduler over its blackboard (``memory.scheduler``); with
            one, the spec also has ``project_frame``.

    Raises:
        InvalidInputError: ``handle`` is not an ``AgentHandle``.
    """

    spec_functions: list[SPEC_FUNCTION_TYPE] = [  # noqa: RUF012 - as BaseToolSpec declares it
        "read_node",
        "write_node",
        "query_blackboard",
        "claim_task",
        "complete_task",
        "list_ready_tasks",
        "take_lease",
        "release_lease",
        "post_message",
        "read_messages",
    ]

    def __init__(self, handle: AgentHandle, *, scheduler: Scheduler | None = None) -> None:
        self.handle = ops.check_handle(handle)
        self.scheduler = scheduler
        if scheduler is not None:  # the frame tool exists only with a scheduler to read through
            self.spec_functions = [*type(self).spec_functions, "project_frame"]

    def refusal(self, error: GlidingError) -> str:
        """Return the text of a refusal: what to do about a stale write or a held lease."""
        return ops.board_refusal(error)

    def read_node(self, iri: Iri) -> str:
        """Read a blackboard node and its generation."""
        return _answer(lambda: ops.read_node(self.handle, iri))

    def write_node(
        self,
        node: Annotated[dict[str, Any], "The JSON-LD node, with its @id."],
        area: Annotated[str, "The area it goes to: plan, execution, ..."],
        based_on: Annotated[int | None, "The generation you read it at (0: new)."] = None,
        lease_token: Annotated[int | None, "Your lease's token, if you hold one."] = None,
    ) -> str:
        """Write a blackboard node, based on the generation you read it at."""
        return _answer(
            lambda: ops.write_node(
                self.handle, node, area=area, based_on=based_on, lease_token=lease_token
            )
        )

    def query_blackboard(
        self,
        sparql: Annotated[str, "A SPARQL SELECT, ASK, CONSTRUCT or DESCRIBE query."],
        areas: Annotated[list[str] | None, "Only these areas."] = None,
    ) -> str:
        """Run a read-only SPARQL query over the blackboard graphs you may read."""
        return _answer(lambda: ops.query(self.handle, sparql, areas=areas))

    def claim_task(self) -> str:
        """Claim your task: move it to running."""
        return _answer(lambda: ops.claim_task(self.handle))

    def complete_task(self) -> str:
        """Mark your task completed."""
        return _answer(lambda: ops.complete_task(self.handle))

    def list_ready_tasks(self) -> str:
        """List the pending tasks under your task whose dependencies are done."""
        return _answer(lambda: ops.ready_tasks(self.handle))

    def take_lease(
        self,
        resource: Annotated[str, "What to lease (a node IRI guards its writes)."],
        mode: Literal["read", "write", "exclusive"] = "write",
    ) -> str:
        """Take a lease on a resource; returns its token."""
        return _answer(lambda: ops.take_lease(self.handle, resource, mode))

    def release_lease(self, resource: Annotated[str, "The leased resource."]) -> str:
        """Release your lease on a resource."""
        return _answer(lambda: ops.release_lease(self.handle, resource))

    def post_message(
        self,
        topic: Annotated[str, "What it is about (progress, resource-request, ...)."],
        payload: Annotated[dict[str, Any] | None, "A JSON object."] = None,
    ) -> str:
        """Post a coordination message on your task."""
        return _answer(lambda: ops.post_message(self.handle, topic, payload))

    def read_messages(
        self,
        since: Annotated[int, "Only messages after this sequence."] = 0,
        topic: Annotated[str | None, "Only this topic."] = None,
    ) -> str:
        """Read your task's coordination messages."""
        return _answer(lambda: ops.read_messages(self.handle, since, topic=topic))

    def project_frame(
        self,
        budget: Annotated[int, "The most tokens the view may take."] = 2000,
        query: Annotated[str | None, "What to look for if nothing is there."] = None,
    ) -> str:
        """Show your role's view of your task (its frame), within a token budget."""
        scheduler = self.scheduler
        if scheduler is None:
            return "Error: this tool set was built without a scheduler to project frames"
        return _answer(
            lambda: ops.project_frame(self.handle, scheduler, budget=budget, query=query)
        )


def _answer(call: Callable[[], object]) -> str:
    """Return the JSON text of what ``call`` returns, or the refusal message it raised."""
    try:
        return json.dumps(call(), ensure_ascii=False)
    except GlidingError as exc:
        return ops.board_refusal(exc)
