"""Leases taken by a hostile agent: a lease needs the right it protects, on its own task.

Written as a prompt-injected model would try it, for every role of the default matrix and
every mode, on an embedded board and on a (coherent) board at ``oxigraph serve``: a lease on a
node of its own area, of an area it may only read, of an area it may not read, of another
task, and on an IRI that has no node yet; through the handle (``acquire``, ``acquire_async``,
``hold``) and the ``take_lease`` tool. Then squatting: a lease of another task's agent, or of a
role without the right, never blocks the owner's write (renewed by heartbeats or not), nor
its lease once the node exists, and no refusal (its message, its ``holders``, the tool's text)
names an agent of another task.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from gliding_core import EventBus, L0Store, LeaseConflictError
from gliding_core.blackboard.board import AgentHandle, Blackboard
from gliding_core.blackboard.coordination.leases import Lease
from gliding_core.blackboard.coordination.registries import Coordination
from gliding_core.blackboard.coordination.sqlite import CoordinationDB
from gliding_core.blackboard.graph import EmbeddedGraph, GraphBackend, SparqlEndpoint
from gliding_core.blackboard.lease_rights import OTHER_TASK_HOLDER
from gliding_core.blackboard.permissions import DEFAULT_MATRIX, Operation, PermissionMatrix
from gliding_core.blackboard.vocabulary import area_graph
from gliding_core.coherence import SQLiteDirectory
from gliding_core.config import BlackboardConfig, CoordinationConfig
from gliding_core.errors import (
    FencingTokenError,
    GlidingError,
    LeaseTimeoutError,
    PermissionDeniedError,
)
from gliding_core.tools import board_tools

TASK = "urn:hostile:lease:mine"
OTHER = "urn:hostile:lease:theirs"
ROLES = tuple(DEFAULT_MATRIX)
MODES = ("read", "write", "exclusive")
HOME = {"plan": "plan", "do": "execution", "check": "review", "act": "decision"}
READ_ONLY = {"plan": "knowledge", "do": "knowledge", "check": "execution", "act": "review"}
DENIED = {"plan": "execution", "do": "plan", "check": "plan", "act": "plan"}
QUIET = BlackboardConfig(flush_interval_s=0.0)
SECRET = "zebrafish lease secret"


class Clock:
    """A wall clock the test moves by hand."""

    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture(params=["embedded", "server"])
def board(request: pytest.FixtureRequest, tmp_path: Path, store: L0Store) -> Iterator[Blackboard]:
    bus = EventBus()
    settings = CoordinationConfig(lease_ttl_s=10.0, heartbeat_timeout_s=60.0, sweep_interval_s=0)
    coordination = Coordination(CoordinationDB(None, config=settings, clock=Clock()), bus=bus)
    backend: GraphBackend
    if request.param == "embedded":
        backend, directory = EmbeddedGraph(), None
    else:
        backend = SparqlEndpoint(request.getfixturevalue("oxigraph_server"))
        backend.update("CLEAR ALL")
        directory = SQLiteDirectory(tmp_path / "coherence.sqlite3")
    value = Blackboard(
        backend,
        store=store,
        bus=bus,
        config=QUIET,
        coordination=coordination,
        directory=directory,
    )
    yield value
    value.close()


def targets(board: Blackboard, role: str) -> dict[str, str]:
    """One IRI per kind of target of ``role``'s agent on ``TASK``, the nodes written."""
    found = {
        "home": (TASK, HOME[role]),
        "read-only": (TASK, READ_ONLY[role]),
        "denied": (TASK, DENIED[role]),
        "shared": (TASK, "shared"),
        "other task": (OTHER, HOME[role]),
        "other task, other area": (OTHER, DENIED[role]),
    }
    iris = {}
    for number, (kind, (task, area)) in enumerate(found.items()):
        iri = f"urn:hostile:node:{role}:{number}"  # the IRI says nothing of where it is
        board.write([{"@id": iri, "@type": "Note", "summary": SECRET}], task=task, area=area)
        iris[kind] = iri
    iris["absent"] = f"urn:hostile:node:{role}:{len(found)}"
    return iris


def whereabouts(role: str) -> list[str]:
    """What a refusal must not say of a node the agent may not see: its area, its task."""
    areas = {READ_ONLY[role], DENIED[role], "shared", HOME[role]}
    graphs = [area_graph(task, area) for task in (TASK, OTHER) for area in areas]
    return [SECRET, OTHER, *graphs, *(f"'{area}' area" for area in areas)]


def granted(role: str, mode: str, kind: str) -> bool:
    """The rule: Read needs read, Write and Exclusive update, on a node of the agent's task;
    an IRI without a node needs a role that may create in some area of its task."""
    matrix = PermissionMatrix()
    area = {"home": HOME[role], "read-only": READ_ONLY[role], "denied": DENIED[role]}
    if kind == "absent":
        return bool(matrix.areas(role, Operation.CREATE))
    if kind not in area and kind != "shared":
        return False
    operation = Operation.READ if mode == "read" else Operation.UPDATE
    return matrix.allows(role, area.get(kind, "shared"), operation)


def texts(error: GlidingError) -> str:
    """Every text a refusal gives its caller: the message, its fields, the tool's text."""
    fields = [getattr(error, name, "") for name in ("graph", "holders", "resource")]
    return f"{error!s} {fields!r} {board_tools.board_refusal(error)}"


def ways(agent: AgentHandle) -> dict[str, Callable[[str, str], Any]]:
    """Every way an agent asks for a lease, each returning the lease's token."""

    def held(iri: str, mode: str) -> int:
        with agent.hold(iri, mode, timeout_s=0) as lease:
            return lease.token

    return {
        "acquire": lambda iri, mode: agent.acquire(iri, mode, timeout_s=0).token,
        "acquire_async": lambda iri, mode: (
            asyncio.run(agent.acquire_async(iri, mode, timeout_s=0)).token
        ),
        "hold": held,
        "take_lease": lambda iri, mode: board_tools.take_lease(agent, iri, mode)["token"],
    }


def holders(board: Blackboard, iri: str) -> list[Lease]:
    assert board.coordination is not None
    return board.coordination.leases.holders(iri)


@pytest.mark.parametrize("role", ROLES)
def test_a_lease_needs_the_right_it_protects_on_the_agent_s_own_task(
    board: Blackboard, role: str
) -> None:
    iris = targets(board, role)
    agent = board.agent(f"{role}-agent", role=role, task=TASK)
    wrong, refusals = [], []
    for mode in MODES:
        for kind, iri in iris.items():
            for way, take in ways(agent).items():
                expected = granted(role, mode, kind)
                try:
                    take(iri, mode)
                    outcome = "granted"
                except PermissionDeniedError as error:
                    refusals.append(((mode, kind, way), texts(error)))
                    outcome = "refused"
                if outcome != ("granted" if expected else "refused"):
                    wrong.append((mode, kind, way, outcome))
                agent.release(iri)  # the acquisition of acquire, acquire_async, the tool
                assert holders(board, iri) == []
    assert wrong == []
    assert len(refusals) == sum(not granted(role, m, k) for m in MODES for k in iris) * len(
        ways(agent)
    )
    leaks = [(case, word) for case, text in refusals for word in whereabouts(role) if word in text]
    assert leaks == []


@pytest.mark.parametrize("squatter_task", [TASK, OTHER])
@pytest.mark.parametrize("role", ROLES)
def test_a_squatter_never_blocks_the_owner_s_write(
    board: Blackboard, role: str, squatter_task: str
) -> None:
    owner = board.agent("owner", role="do", task=TASK)
    squatter = board.agent(f"squatter-{role}", role=role, task=squatter_task)
    entitled = squatter_task == TASK and role == "do"  # the owner's own kind: a real lease
    for mode in ("write", "exclusive"):
        iri = f"urn:hostile:squatted:{role}:{mode}"
        squatter.acquire(iri, mode, timeout_s=0)  # no node yet: any role may lease it
        squatter.heartbeat()  # renewed, as a live squatter's lease would be
        node = {"@id": iri, "@type": "Step", "summary": "the owner's"}
        if entitled:
            with pytest.raises(LeaseConflictError) as held:
                owner.write([node], area="execution")
            assert held.value.holders == ((squatter.name, mode),)
            squatter.release(iri)
        owner.write([node], area="execution")  # not blocked
        squatter.heartbeat()
        lease = owner.acquire(iri, "write", timeout_s=0)  # the squatter's lease is void now
        assert [h.holder for h in holders(board, iri)] == ["owner"]
        owner.write([{**node, "summary": "leased"}], area="execution", lease_token=lease.token)
        if not entitled:
            with pytest.raises(PermissionDeniedError):
                squatter.acquire(iri, mode, timeout_s=0)  # a node of another area or task
        owner.release(iri)
        existing = board.read(iri)
        assert existing is not None
        assert existing.node["summary"] == "leased"


@pytest.mark.parametrize("role", ROLES)
def test_a_squatter_cannot_lease_the_owner_s_node_nor_fence_its_write(
    board: Blackboard, role: str
) -> None:
    owner = board.agent("owner", role="do", task=TASK)
    squatter = board.agent(f"squatter-{role}", role=role, task=OTHER)
    iri = "urn:hostile:owned"
    owner.write([{"@id": iri, "@type": "Step", "summary": SECRET}], area="execution")
    lease = owner.acquire(iri, "write", timeout_s=0)
    for mode in MODES:
        with pytest.raises(PermissionDeniedError) as refused:
            squatter.acquire(iri, mode, timeout_s=0)
        assert SECRET not in texts(refused.value)
        assert "owner" not in texts(refused.value)
    owner.write([{"@id": iri, "summary": "still mine"}], area="execution", lease_token=lease.token)
    with pytest.raises((PermissionDeniedError, FencingTokenError)):
        squatter.write([{"@id": iri, "summary": "theirs"}], area="execution", lease_token=0)
    assert [h.holder for h in holders(board, iri)] == ["owner"]


def test_a_refusal_names_no_agent_of_another_task(board: Blackboard) -> None:
    iri = "urn:hostile:contested"
    stranger = board.agent("stranger-of-task-2", role="do", task=OTHER)
    colleague = board.agent("colleague", role="do", task=TASK)
    asker = board.agent("asker", role="do", task=TASK)
    stranger.acquire(iri, "exclusive", timeout_s=0)  # no node yet: the first asker has it
    refusals: list[GlidingError] = []
    for way, take in ways(asker).items():
        with pytest.raises(LeaseConflictError) as squatted:
            take(iri, "read")
        assert squatted.value.holders == ((OTHER_TASK_HOLDER, "exclusive"),), way
        refusals.append(squatted.value)
    with pytest.raises(LeaseTimeoutError) as waited:
        asker.acquire(iri, "read", timeout_s=0.01)
    refusals.append(waited.value)
    stranger.release(iri)
    colleague.acquire(iri, "write", timeout_s=0)
    stranger.acquire(iri, "read", timeout_s=0)  # compatible with the colleague's Write
    for way, take in ways(asker).items():
        with pytest.raises(LeaseConflictError) as conflict:
            take(iri, "exclusive")
        assert ("colleague", "write") in conflict.value.holders, way
        refusals.append(conflict.value)
    for error in refusals:
        assert stranger.name not in texts(error)
    with pytest.raises(LeaseConflictError) as blocked:
        asker.write([{"@id": iri, "@type": "Step"}], area="execution")
    assert blocked.value.holders == (("colleague", "write"),)
    assert stranger.name not in texts(blocked.value)


def test_a_lease_of_code_outside_the_agents_still_guards_writes(board: Blackboard) -> None:
    assert board.coordination is not None
    iri = "urn:hostile:by-code"
    board.coordination.leases.acquire(iri, "maintenance-job", "exclusive")
    doer = board.agent("doer", role="do", task=TASK)
    with pytest.raises(LeaseConflictError):
        doer.write([{"@id": iri, "@type": "Step"}], area="execution")
    with pytest.raises(LeaseConflictError):
        doer.acquire(iri, "write", timeout_s=0)
