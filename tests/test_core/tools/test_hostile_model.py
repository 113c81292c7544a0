"""A hostile model stays inside its role, its task and its scope, through the core.

Every role of the default matrix attacks a world of secrets through
``gliding_core.tools.board_tools`` on an embedded board and on a board at ``oxigraph serve``
(``tests/hostile.py`` holds the world, the attacks and the checks around each). Queries that
could kill a process run in a child (``hostile_child.py``), against an embedded board and
against a server of their own; a write whose reply is lost goes through a proxy that drops it.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import httpx
import pytest

from gliding_core.testing import oxigraph_server as serve_oxigraph
from tests.hostile import ROLES, World, attack_role, core_runner, lost_reply, record, world_of
from tests.test_core.tools.hostile_child import CASES, SERVER_CASES

CHILD = Path(__file__).with_name("hostile_child.py")
HANG_S = 60.0  # a child that has not answered by then is stuck (the cases take a few seconds)


@pytest.fixture(scope="module", params=["embedded", "server"])
def world(request: pytest.FixtureRequest) -> Iterator[World]:
    endpoint = request.getfixturevalue("oxigraph_server") if request.param == "server" else None
    with world_of(request.param, endpoint) as value:
        yield value


@pytest.mark.parametrize("role", ROLES)
def test_a_hostile_model_through_the_core_stays_in_its_role(world: World, role: str) -> None:
    report = attack_role(world, role, core_runner(world), "core")
    record(report)
    assert not report.findings, report.summary()


# -- crashes: one child process per query ------------------------------------------------------


def _child(case: str, endpoint: str | None = None) -> subprocess.Popen[str]:
    command = [sys.executable, str(CHILD), case, *([endpoint] if endpoint else [])]
    return subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _outcome(child: subprocess.Popen[str]) -> tuple[int, dict[str, Any], str]:
    try:
        out, err = child.communicate(timeout=HANG_S)
    except subprocess.TimeoutExpired:
        child.kill()
        child.communicate()
        return -1, {}, f"no answer within {HANG_S:.0f} s: stuck"
    lines = out.strip().splitlines()
    return child.returncode, json.loads(lines[0]) if lines else {}, err[-300:]


def _refusal_problem(code: int, answer: dict[str, Any], err: str) -> str | None:
    if code != 0:
        return f"the child died (exit status {code}); answer {answer}; {err!r}"
    if answer.get("outcome") != "refused":
        return f"answered instead of refused: {answer}"
    if not answer.get("typed"):
        return f"refused with an untyped error: {answer}"
    return None


def test_queries_that_could_crash_an_embedded_board_are_refused_in_a_live_process() -> None:
    children = {case: _child(case) for case in CASES}
    problems = {}
    for case, child in children.items():
        problem = _refusal_problem(*_outcome(child))
        if problem is not None:
            problems[case] = problem
    assert not problems, json.dumps(problems, indent=1)


def _alive(url: str) -> bool:
    try:
        answer = httpx.post(
            f"{url}/query",
            content=b"ASK {}",
            headers={"content-type": "application/sparql-query"},
            timeout=10.0,
        )
    except httpx.TransportError:
        return False
    return answer.status_code == 200


def test_queries_that_could_crash_a_server_are_refused_and_it_still_answers(
    tmp_path: Path,
) -> None:
    """Each case against a server of its own (a crash must not take the suite's server)."""
    problems = {}
    with ExitStack() as servers:
        urls = {
            case: servers.enter_context(serve_oxigraph(tmp_path / case)) for case in SERVER_CASES
        }
        children = {case: _child(case, urls[case]) for case in SERVER_CASES}
        for case, child in children.items():
            code, answer, err = _outcome(child)
            if not _alive(urls[case]):
                problems[case] = f"oxigraph serve died; the child said {answer}"
                continue
            problem = _refusal_problem(code, answer, err)
            if problem is not None:
                problems[case] = problem
    assert not problems, json.dumps(problems, indent=1)


# -- a write whose reply is lost ----------------------------------------------------------------


def test_a_write_whose_reply_was_lost_is_recognised_when_retried(
    oxigraph_server: str, tmp_path: Path
) -> None:
    """Class 7, through a proxy that drops the reply to the write (the server applied it)."""
    problems = lost_reply(oxigraph_server, tmp_path, core_runner)
    assert not problems, "\n".join(problems)
