"""A hostile model stays inside its role, its task and its scope, through ``BlackboardToolSpec``.

The attacks of ``tests/hostile.py``, each sent as a ``FunctionAgent`` sends a tool
call (``tool.call(**kwargs)``) to the tools of an agent of every role, on an embedded board and on
a board at ``oxigraph serve``. Besides what the core suite checks, no call may raise out of the
tool (an extra ``agent`` or ``role`` argument, a missing one...), and a refusal is a text
starting ``Error:``.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from llama_index.core.tools import FunctionTool

from gliding_core.blackboard.handle import AgentHandle
from gliding_llamaindex import BlackboardToolSpec
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


def llamaindex_runner(world: World) -> Runner:
    """Call each tool of the agent's tool spec with the model's arguments as keywords."""
    specs: dict[str, dict[str, FunctionTool]] = {}

    def run(handle: AgentHandle, tool: str, args: dict[str, Any]) -> Outcome:
        tools = specs.get(handle.name)
        if tools is None:
            spec = BlackboardToolSpec(handle, scheduler=world.scheduler)
            tools = specs[handle.name] = {t.metadata.get_name(): t for t in spec.to_tool_list()}
        try:
            output = tools[tool].call(**args)
        except Exception as exc:
            return Outcome(f"{type(exc).__name__}: {exc}", refused=True, typed=False, raised=exc)
        text = output.content
        if not text.startswith(("{", "[")):
            return Outcome(text, refused=True, typed=text.startswith("Error:"))
        return Outcome(text, refused=False, value=json.loads(text))

    return run


@pytest.mark.parametrize("role", ROLES)
def test_a_hostile_model_through_llamaindex_tools_stays_in_its_role(
    world: World, role: str
) -> None:
    report = attack_role(world, role, llamaindex_runner(world), "llamaindex")
    record(report)
    assert not report.findings, report.summary()


def test_a_write_whose_reply_was_lost_is_recognised_when_retried(
    oxigraph_server: str, tmp_path: Path
) -> None:
    """Class 7 through the tool: an ``Error:`` text first, the committed node on the retry."""
    problems = lost_reply(oxigraph_server, tmp_path, llamaindex_runner)
    assert not problems, "\n".join(problems)
