"""A hostile model stays inside its role, its task and its scope, through ``BlackboardToolkit``.

The attacks of ``tests/hostile.py``, each sent as a model's tool call
(``tool.invoke({"type": "tool_call", ...})``, what an agent's tool node does) to the tools of an
agent of every role, on an embedded board and on a board at ``oxigraph serve``. Besides what the
core suite checks, every call must come back as a ``ToolMessage`` (nothing raised out of the
run), a refusal as a text starting ``Error:``, whatever the arguments (extra, missing, deep,
huge, of the wrong type).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import ToolMessage
from langchain_core.tools import BaseTool

from gliding_core.blackboard.handle import AgentHandle
from gliding_langchain import BlackboardToolkit
from tests.hostile import (
    ROLES,
    Outcome,
    Runner,
    World,
    attack_role,
    lost_reply,
    record,
    world_of,
)


@pytest.fixture(scope="module", params=["embedded", "server"])
def world(request: pytest.FixtureRequest) -> Iterator[World]:
    endpoint = request.getfixturevalue("oxigraph_server") if request.param == "server" else None
    with world_of(request.param, endpoint) as value:
        yield value


def langchain_runner(world: World) -> Runner:
    """Send each call as a model's tool call to the agent's toolkit."""
    toolkits: dict[str, dict[str, BaseTool]] = {}

    def run(handle: AgentHandle, tool: str, args: dict[str, Any]) -> Outcome:
        tools = toolkits.get(handle.name)
        if tools is None:
            toolkit = BlackboardToolkit(handle, scheduler=world.scheduler)
            tools = toolkits[handle.name] = {t.name: t for t in toolkit.get_tools()}
        call = {"type": "tool_call", "name": tool, "args": args, "id": "call-1"}
        try:
            message = tools[tool].invoke(call)
        except Exception as exc:
            return Outcome(f"{type(exc).__name__}: {exc}", refused=True, typed=False, raised=exc)
        if not isinstance(message, ToolMessage) or not isinstance(message.content, str):
            return Outcome(repr(message), refused=True, typed=False)
        text = message.content
        if message.status == "error" or not text.startswith(("{", "[")):
            return Outcome(text, refused=True, typed=text.startswith("Error:"))
        return Outcome(text, refused=False, value=json.loads(text))

    return run


@pytest.mark.parametrize("role", ROLES)
def test_a_hostile_model_through_langchain_tools_stays_in_its_role(world: World, role: str) -> None:
    report = attack_role(world, role, langchain_runner(world), "langchain")
    record(report)
    assert not report.findings, report.summary()


def test_a_write_whose_reply_was_lost_is_recognised_when_retried(
    oxigraph_server: str, tmp_path: Path
) -> None:
    """Class 7 through the tool: an ``Error:`` text first, the committed node on the retry."""
    problems = lost_reply(oxigraph_server, tmp_path, langchain_runner)
    assert not problems, "\n".join(problems)
