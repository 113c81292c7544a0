"""Frames read as a hostile agent: nothing of another task, scope or forbidden area comes back.

Written as a prompt-injected model would try it, for every role of the default matrix, on an
embedded board and on a board at ``oxigraph serve``. The memory holds secrets the agent may
not see: another task's chat turn, its own task's turns, supplementary inputs (pending for its
own task and another, consumed, archived as the turn that delivered them), another user's and
another thread's saved memories, an entry of no scope, a chat message, another task's
blackboard nodes (on the board, and flushed to L0 and released) and the nodes and L0 entries of
the areas of its own task its role may not read. The agent's own task holds nothing it may
read, so every level of the read path falls through to L0 search, and every query matches a
secret. An escape is any secret's text in a result or in an error's text.

Generations: an agent writes a node referencing nodes it may not read (top level and nested,
in another area of its task, in another task), reads its frame (L3, L2 and L0) and must get
no generation, and no content, of any of them.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from gliding_core import HashEmbedder, Memory
from gliding_core.blackboard.board import AgentHandle
from gliding_core.blackboard.graph import SparqlEndpoint
from gliding_core.blackboard.permissions import DEFAULT_MATRIX, PermissionMatrix
from gliding_core.blackboard.vocabulary import area_graph
from gliding_core.coherence.seen import SeenNodes, SharedNode
from gliding_core.config import BlackboardConfig, MemoryConfig, TopicConfig
from gliding_core.errors import GlidingError
from gliding_core.projection.scheduler import Scheduler
from gliding_core.store.scope import Scope
from gliding_core.tools import board_tools
from gliding_core.tools.memory_tools import save_memory
from gliding_core.view.frame_source import FrameSource
from gliding_core.view.sources import SourceRequest

TASK = "urn:hostile:task:mine"
OTHER = "urn:hostile:task:theirs"
KEPT = "urn:hostile:task:kept"  # another task whose nodes stay on the board (and in L0)
ROLES = tuple(DEFAULT_MATRIX)
CONTENT_AREAS = ("plan", "execution", "review", "decision", "knowledge", "shared")
HOME = {"plan": "plan", "do": "execution", "check": "review", "act": "decision"}
ALLOWED = "zebrafish allowednote"  # the agent's own scope's memory: search still finds it
BUDGET = 6_000


@pytest.fixture(params=["embedded", "server"])
def memory(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Memory]:
    topics = TopicConfig(interval_s=0)
    if request.param == "embedded":
        config = MemoryConfig(topics=topics, blackboard=BlackboardConfig(flush_interval_s=0))
        with Memory(config=config, embedder=HashEmbedder()) as value:
            yield value
        return
    url = request.getfixturevalue("oxigraph_server")
    endpoint = SparqlEndpoint(url)
    endpoint.update("CLEAR ALL")
    endpoint.close()
    board = BlackboardConfig(endpoint=url, flush_interval_s=0)
    config = MemoryConfig(embedder="hash", topics=topics, blackboard=board)
    with Memory.open(tmp_path / "m", config=config, engines=False) as value:
        yield value


def readable(role: str) -> set[str]:
    return set(PermissionMatrix().areas(role))


def seed_secrets(memory: Memory, role: str, *, own: bool = True) -> dict[str, str]:
    """Write every secret ``role``'s agent on ``TASK`` may not see; return them by origin.

    ``own``: also in the areas of ``TASK`` the role may not read (on the board and in L0,
    tagged with the task's scope as a node an agent tagged so is when it is flushed).
    """
    secrets: dict[str, str] = {}
    mine, theirs = Scope.task(TASK), Scope.task(OTHER)
    turn = memory.session(OTHER, agent="victim").add_turn(
        "user", "zebrafish my password is hunter2", tags=[theirs.tag]
    )
    secrets["another task's chat turn"] = "hunter2"
    memory.session(TASK, agent="colleague").add_turn(
        "user", "zebrafish ownturn kestrel", tags=[mine.tag]
    )
    secrets["its own task's chat turn"] = "kestrel"
    memory.session(TASK, agent="colleague").add_turn(
        "user", "zebrafish archived curlew", supplement=True, tags=[mine.tag]
    )
    secrets["an archived delivered input"] = "curlew"
    memory.supplements.put(TASK, "zebrafish pendingmine osprey")
    secrets["a pending input of its own task"] = "osprey"
    memory.supplements.put(OTHER, "zebrafish pendingother heron")
    secrets["a pending input of another task"] = "heron"
    memory.supplements.put(OTHER, "zebrafish consumed plover")
    memory.supplements.take_pending(OTHER, consumer="victim")
    secrets["a consumed input"] = "plover"
    save_memory(memory, Scope.user("bob"), "zebrafish bobmemory dunlin")
    secrets["another user's memory"] = "dunlin"
    save_memory(memory, Scope.thread("t-other"), "zebrafish threadmemory whimbrel")
    secrets["another thread's memory"] = "whimbrel"
    memory.store.put({"@type": "Note", "text": "zebrafish unscoped avocet"})
    secrets["an entry of no scope"] = "avocet"
    memory.store.put(
        {"@type": "ChatMessage", "role": "system", "text": "zebrafish chatmsg sanderling"},
        tags=[mine.tag, "chat:active"],
        named_graph="urn:gliding:chat:task/colleague",
    )
    secrets["a chat message of its own scope"] = "sanderling"
    board = memory.blackboard
    for area in CONTENT_AREAS:
        node = {"@id": f"{OTHER}/{area}", "@type": "Note", "summary": f"zebrafish gone{area}"}
        board.write([node], task=OTHER, area=area)
        secrets[f"another task's flushed {area} entry"] = f"gone{area}"
        kept = {"@id": f"{KEPT}/{area}", "@type": "Note", "summary": f"zebrafish kept{area}"}
        board.write([kept], task=KEPT, area=area)
        secrets[f"another task's {area} node"] = f"kept{area}"
    memory.scheduler.complete(OTHER)  # flushed to L0 and released from the board
    for area in sorted(set(CONTENT_AREAS) - readable(role)) if own else ():
        node = {"@id": f"{TASK}/{area}", "@type": "Note", "summary": f"zebrafish mine{area}"}
        board.write([node], task=TASK, area=area)
        secrets[f"its task's {area} node"] = f"mine{area}"
        entry = {"@id": f"{TASK}/l0/{area}", "@type": "Note", "text": f"zebrafish old{area}"}
        memory.store.put(entry, named_graph=area_graph(TASK, area), tags=[mine.tag])
        secrets[f"its task's {area} L0 entry"] = f"old{area}"
    board.flush()
    save_memory(memory, mine, ALLOWED)
    assert turn.summary  # the turn was archived
    return secrets


def queries(secrets: dict[str, str]) -> list[str]:
    """Queries matching every secret: the shared word, the obvious ones, each secret's own."""
    return ["zebrafish", "password hunter2", "secret memory input", *secrets.values()]


def attempt(call: Callable[[], Any]) -> str:
    """Return what a call gives the caller: its result as text, or its error's texts."""
    try:
        return json.dumps(call(), default=str)
    except GlidingError as error:
        return f"{error!s} {board_tools.board_refusal(error)}"


def frame_reads(
    memory: Memory, blind: Scheduler, agent: AgentHandle, query: str
) -> dict[str, Callable[[], Any]]:
    """Every path that reads a frame as ``agent`` with ``query``."""
    role = agent.role
    return {
        "project_frame tool": lambda: board_tools.project_frame(
            agent, memory.scheduler, budget=BUDGET, query=query
        ),
        "project_frame tool, no frame content": lambda: board_tools.project_frame(
            agent, blind, budget=BUDGET, query=query
        ),
        "Scheduler.read": lambda: (
            memory.scheduler.read(TASK, role, budget=BUDGET, query=query, agent=agent).text
        ),
        "Scheduler.read, no frame content": lambda: (
            blind.read(TASK, role, budget=BUDGET, query=query, agent=agent).text
        ),
        "Scheduler.nodes": lambda: blind.nodes(TASK, role, query=query, agent=agent),
        "FrameSource": lambda: FrameSource.for_agent(blind, agent).fill(
            SourceRequest(query, BUDGET)
        ),
        "FrameSource with a ledger": lambda: FrameSource.for_agent(
            blind, agent, seen=SeenNodes()
        ).fill(SourceRequest(query, BUDGET)),
    }


@pytest.fixture
def blind(memory: Memory) -> Scheduler:
    """A scheduler whose frames select nothing here, so every read goes down to L0."""
    return memory.scheduler.with_roles(dict.fromkeys(ROLES, "error_analysis"))


@pytest.mark.parametrize("role", ROLES)
def test_no_secret_reaches_an_agent_through_its_frame(
    memory: Memory, blind: Scheduler, role: str
) -> None:
    secrets = seed_secrets(memory, role)
    memory.blackboard.coordination.tasks.register(TASK)  # type: ignore[union-attr]
    for word in secrets.values():  # the attack is live: L0 search finds each secret
        hits = memory.search(word, 50)
        assert any(word in json.dumps(hit.entry.node) for hit in hits), word
    agent = memory.agent(f"{role}-attacker", role=role, task=TASK)
    escapes = []
    for query in queries(secrets):
        for path, call in frame_reads(memory, blind, agent, query).items():
            text = attempt(call)
            escapes += [(path, query, origin) for origin, word in secrets.items() if word in text]
    assert escapes == []
    found = blind.read(TASK, role, budget=BUDGET, query="allowednote", agent=agent)
    assert found.level == "l0"
    assert ALLOWED in found.text  # its own scope's memory is still found


def test_the_system_read_shows_no_turn_and_no_input(memory: Memory, blind: Scheduler) -> None:
    secrets = seed_secrets(memory, "do", own=False)
    conversation = ("hunter2", "kestrel", "curlew", "osprey", "heron", "plover", "sanderling")
    for word in conversation:
        text = blind.read(TASK, "do", budget=BUDGET, query=word).text
        assert word not in text, [k for k, v in secrets.items() if v == word]
    found = blind.read(TASK, "do", budget=BUDGET, query="dunlin")
    assert found.level == "l0"
    assert "dunlin" in found.text  # the system reads every scope's memories


def forbidden_nodes(memory: Memory, role: str) -> dict[str, str]:
    """Nodes ``role`` may not read, each written three times; return their IRIs and secrets."""
    home = HOME[role]
    denied = next(a for a in CONTENT_AREAS if a not in readable(role))
    elsewhere = next(a for a in CONTENT_AREAS if a != home)
    nodes = {
        f"{TASK}/denied": (TASK, denied, "zebrafish deniedsecret"),
        f"{TASK}/shared": (TASK, "shared", "zebrafish sharedsecret"),
        f"{OTHER}/same-area": (OTHER, home, "zebrafish sameareasecret"),
        f"{OTHER}/elsewhere": (OTHER, elsewhere, "zebrafish elsewheresecret"),
        f"{OTHER}/nested": (OTHER, home, "zebrafish nestedsecret"),
    }
    board = memory.blackboard
    for iri, (task, area, summary) in nodes.items():
        for round_ in range(3):
            node = {"@id": iri, "@type": "Plan", "summary": summary, "status": f"v{round_}"}
            board.write([node], task=task, area=area)
    return {iri: summary.split()[1] for iri, (_, _, summary) in nodes.items()}


def referencing(role: str, iri: str, forbidden: list[str]) -> dict[str, Any]:
    """A node ``role``'s frame selects, referencing every forbidden node by every link."""
    first, *rest = forbidden
    node: dict[str, Any] = {
        "@id": iri,
        "summary": "mine",
        "task": {"@id": TASK},
        "plan": {"@id": first},
        "inputData": [{"@id": i} for i in forbidden],
        "results": [{"@id": i} for i in forbidden],
        "reviewResults": [{"@id": i} for i in forbidden],
        "subTasks": [{"@id": i} for i in forbidden],
        "mentions": [{"@id": i} for i in rest],
        "detail": {"inner": {"deeper": {"@id": forbidden[-1]}}},
    }
    node["@type"] = {"plan": "Plan", "do": "Step", "check": "Artifact", "act": "Decision"}[role]
    return node


@pytest.mark.parametrize("role", ROLES)
def test_a_frame_gives_no_generation_of_a_node_the_agent_may_not_read(
    memory: Memory, blind: Scheduler, role: str
) -> None:
    secrets = forbidden_nodes(memory, role)
    forbidden = list(secrets)
    memory.blackboard.coordination.tasks.register(TASK)  # type: ignore[union-attr]
    agent = memory.agent(f"{role}-writer", role=role, task=TASK)
    mine = f"{TASK}/mine-{role}"
    agent.write([referencing(role, mine, forbidden)], area=HOME[role])
    views = {}
    for name, scheduler in (("l3", memory.scheduler), ("l2", blind)):
        view = board_tools.project_frame(agent, scheduler, budget=BUDGET)
        assert view["level"] == name
        views[name] = view
    agent.delete([mine])
    entry = referencing(role, mine, forbidden)
    memory.store.put(entry, named_graph=area_graph(TASK, HOME[role]))
    views["l0"] = board_tools.project_frame(agent, blind, budget=BUDGET)
    assert views["l0"]["level"] == "l0"
    for level, view in views.items():
        leaked = [iri for iri in forbidden if iri in view["generations"]]
        assert leaked == [], level
        assert [word for word in secrets.values() if word in view["view"]] == [], level
        assert set(view["generations"]) <= {mine, TASK}, level
    assert mine in views["l3"]["generations"]  # a node it may read keeps its generation
    assert mine in views["l2"]["generations"]


@pytest.mark.parametrize("role", ROLES)
def test_a_frame_source_renders_nothing_of_a_forbidden_copy(
    memory: Memory, blind: Scheduler, role: str
) -> None:
    secrets = forbidden_nodes(memory, role)
    agent = memory.agent(f"{role}-reader", role=role, task=TASK)
    mine = f"{TASK}/mine-{role}"
    agent.write([referencing(role, mine, list(secrets))], area=HOME[role])
    forged = tuple(SharedNode(iri, 1, {"@id": iri, "summary": "stale"}) for iri in secrets)
    for scheduler in (memory.scheduler, blind):
        source = FrameSource.for_agent(scheduler, agent, seen="request")
        part = source.fill(SourceRequest(None, BUDGET, copies=forged))
        assert [word for word in secrets.values() if word in part.text] == []
        ledger = SeenNodes()
        ledger_source = FrameSource.for_agent(scheduler, agent, seen=ledger)
        for _ in range(2):
            part = ledger_source.fill(SourceRequest(None, BUDGET))
            assert [word for word in secrets.values() if word in part.text] == []


HOSTILE_QUERIES: list[Any] = [
    5,
    ["hunter2"],
    {"$ne": "hunter2"},
    "\x00hunter2",
    "   ",
    "*",
    '"hunter2',
    "hunter2 OR zebrafish",
    "NEAR(hunter2 password)",
    "hunter2' --",
    "zebrafish " * 2_000,
    "hunter2" * 20_000,
]


@pytest.mark.parametrize("role", ["do", "act"])
def test_a_hostile_query_is_refused_typed_or_finds_nothing_forbidden(
    memory: Memory, blind: Scheduler, role: str
) -> None:
    secrets = seed_secrets(memory, role)
    memory.blackboard.coordination.tasks.register(TASK)  # type: ignore[union-attr]
    agent = memory.agent(f"{role}-attacker", role=role, task=TASK)
    escapes = []
    for query in HOSTILE_QUERIES:
        for path, call in frame_reads(memory, blind, agent, query).items():
            text = attempt(call)  # anything but a GlidingError fails the test here
            text = text.replace(json.dumps(query, default=str)[1:-1], "").replace(str(query), "")
            escapes += [(path, origin) for origin, word in secrets.items() if word in text]
    assert escapes == []
    with pytest.raises(GlidingError, match="query must be a string"):
        board_tools.project_frame(agent, blind, budget=BUDGET, query=5)  # type: ignore[arg-type]
