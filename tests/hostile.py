"""A hostile model on the blackboard: a world of secrets, attacks, and the checks.

The world is one ``Memory`` with three kinds of task: ``A``, where an agent of every role of the
default matrix works (the attacker); ``B``, another task whose every area holds a secret; and
one empty task per role (``C-<role>``), whose agent has nothing of its own to read, so its frame
falls through to L0. Every content area of ``A`` and ``B`` holds a node whose value is a unique
canary, flushed to L0 too; ``B`` (and ``A``) have a chat turn with a password, a delivered and a
pending supplementary input; ``B`` has a message and an agent named by a canary holding an
Exclusive lease; a peer of ``A``'s doer holds a Write lease; another user's (``mallory``'s)
saved memory holds one more secret.

An attack is one tool call (a ``board_tools`` operation, or the same call through an adapter's
tool), run by a ``Runner`` for one front end. Around each, ``Judge`` reads the store as the
system (a digest of every node of every graph, the L0 entries holding secrets, the other
agents' leases) and records an escape when:

- a canary the acting agent may not read (the matrix decides) reaches it, in the answer or in
  the refusal (its text and its fields); what the agent itself sent does not count;
- a graph it may not write changed (its own areas, its task's coordination mirror and their
  records excepted; a node the call named may not change in the mirror either), another
  graph's node's tombstone changed, an L0 entry holding a secret changed, or another agent's
  lease changed;
- a frame's generations name a node it may not read, or an ASK saw a graph it may not read;
- a lease was granted that needs a right the role lacks, on its own task or another;
- a request reached the fake remote host (SERVICE, LOAD, a remote JSON-LD context);
- a refusal was not typed (a ``GlidingError`` from the core, an ``Error:`` text from a tool) or
  something was raised out of a tool.

Controls (legitimate calls) must succeed and show what the role may read, so the suite cannot
pass by refusing everything. What a call leaves in the agent's own areas is taken out again
(as the system), so no role sees another's leftovers. Crash cases run in a child process
(``test_core/hostile_child.py``); ``lost_reply`` drops the reply to a write (class 7).
"""

from __future__ import annotations

import contextlib
import http.server
import json
import os
import socket
import threading
import uuid
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyoxigraph as ox

from gliding_core import (
    GlidingError,
    HashEmbedder,
    Memory,
    MemoryConfig,
    Scope,
    StaleWriteError,
    StorageError,
)
from gliding_core.blackboard.handle import AgentHandle
from gliding_core.blackboard.permissions import PermissionMatrix
from gliding_core.blackboard.vocabulary import (
    CONTEXT_URL,
    META_GRAPH,
    area_graph,
    bookkeeping_graph,
    bookkept_graph,
)
from gliding_core.config import BlackboardConfig, CoordinationConfig, TopicConfig
from gliding_core.tools import board_tools as ops
from gliding_core.tools.memory_tools import save_memory

ROLES = ("plan", "do", "check", "act")
CONTENT_AREAS = ("plan", "execution", "review", "decision", "knowledge", "shared")
MIRRORED = ("tasks", "agents", "messages")
WRITES = {"plan": "plan", "do": "execution", "check": "review", "act": "decision"}
MATRIX = PermissionMatrix()
LONG_S = 3_600.0

# The classes of attack (and the variations the attacks add), as reported.
CLASSES = {
    "1-sparql": "SPARQL past the query check (SERVICE, dataset clauses, graph variables, paths)",
    "2-crash": "a query that kills the process or the server",
    "3-frame-l0": "project_frame(query=...) shows L0 the agent may not read",
    "4-generations": "generations (and values) of nodes the agent may not read",
    "5-lease": "leases without the right they protect, other agents' leases and tokens",
    "6-arguments": "tool arguments: extra, missing, deep, huge, wrong types; forged identity",
    "7-commit": "ambiguous commits",
    "w-write": "writes: JSON-LD @graph/@included/@reverse/aliases/contexts, forbidden areas",
    "r-read": "reads of nodes and messages of other areas and tasks",
}


# -- the fake remote server (the network edge) ------------------------------------------------


class Remote:
    """A loopback HTTP server standing for any remote host: it counts every request it gets.

    It answers SPARQL requests with an empty result and anything else with a JSON-LD context,
    so a client that reaches it is not left waiting.
    """

    def __init__(self) -> None:
        self.hits = 0
        self.lock = threading.Lock()
        remote = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def _answer(self) -> None:
                with remote.lock:
                    remote.hits += 1
                length = int(self.headers.get("content-length") or 0)
                if length:
                    self.rfile.read(length)
                if "sparql" in (self.headers.get("accept") or "") or "query" in self.path:
                    body = b'{"head": {"vars": ["o"]}, "results": {"bindings": []}}'
                    kind = "application/sparql-results+json"
                else:
                    body = b'{"@context": {"@vocab": "urn:remote:"}}'
                    kind = "application/ld+json"
                self.send_response(200)
                self.send_header("content-type", kind)
                self.send_header("content-length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            do_GET = do_POST = _answer  # noqa: N815 (the handler's protocol names)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join()


# -- the world -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Owner:
    """Where a secret lives: a task's area, or an L0 place no agent tool may show."""

    task: str | None
    area: str | None
    what: str


@dataclass
class World:
    """The memory under attack and what it holds."""

    memory: Memory
    kind: str
    tag: str
    endpoint: str | None
    remote: Remote
    a: str
    b: str
    empty: dict[str, str]
    canaries: dict[str, Owner] = field(default_factory=dict)
    nodes: dict[str, Owner] = field(default_factory=dict)
    attackers: dict[str, AgentHandle] = field(default_factory=dict)
    loners: dict[str, AgentHandle] = field(default_factory=dict)
    peer: AgentHandle | None = None
    peer_node: str = ""
    peer_token: int = 0
    rival: AgentHandle | None = None
    rival_node: str = ""
    rival_token: int = 0
    l0_secrets: tuple[str, ...] = ()

    def node(self, task: str, area: str) -> str:
        """The IRI of the seeded node of a task's area (http, so a JSON-LD @base resolves)."""
        return f"http://hostile.example/{self.tag}/{self._name(task)}/{area}/node"

    def _name(self, task: str) -> str:
        return "A" if task == self.a else "B" if task == self.b else "C"

    def canary(self, label: str) -> str:
        return f"CANARY-{label}-{self.tag}"

    @property
    def scheduler(self) -> Any:
        return self.memory.scheduler

    @property
    def board(self) -> Any:
        return self.memory.blackboard

    def tasks(self) -> list[str]:
        return [self.a, self.b, *self.empty.values()]

    def close(self) -> None:
        try:
            self.memory.close()
        finally:
            self.remote.close()


def build_world(kind: str, endpoint: str | None = None) -> World:
    """Build the world on an embedded board (``endpoint=None``) or at a SPARQL server.

    At a server the store is cleared first (the suite's tests share one server, one module
    at a time) and every IRI carries a fresh tag.
    """
    tag = uuid.uuid4().hex[:8]
    # No sweeper and long leases: nothing changes in the store but what the calls do.
    quiet = CoordinationConfig(sweep_interval_s=0, lease_ttl_s=LONG_S, heartbeat_timeout_s=LONG_S)
    board = BlackboardConfig(endpoint=endpoint, flush_interval_s=0.0, coordination=quiet)
    config = MemoryConfig(embedder="hash", topics=TopicConfig(interval_s=0), blackboard=board)
    memory = Memory(config=config, embedder=HashEmbedder(), engines=False)
    world = World(
        memory,
        kind,
        tag,
        endpoint,
        Remote(),
        a=f"urn:hostile:{tag}:A-task",
        b=f"urn:hostile:{tag}:B-task",
        empty={role: f"urn:hostile:{tag}:C-{role}-task" for role in ROLES},
    )
    try:
        if endpoint is not None:
            world.board.backend.update("CLEAR ALL")
        _seed(world)
    except BaseException:
        world.close()
        raise
    return world


def _seed(world: World) -> None:
    memory, board = world.memory, world.board
    tasks = board.coordination.tasks
    for task in world.tasks():
        tasks.register(task)
    for task, name in ((world.a, "A"), (world.b, "B")):
        for area in CONTENT_AREAS:
            secret = world.canary(f"{name}-{area}")
            iri = world.node(task, area)
            world.canaries[secret] = world.nodes[iri] = Owner(task, area, f"{name}'s {area} node")
            summary = f"the {area} secret of task {name} is {secret}"
            node = {"@id": iri, "@type": ["Note", "Plan", "Review"], "summary": summary}
            board.write([node], task=task, area=area)
    for task in world.tasks():
        world.nodes[task] = Owner(task, "tasks", f"the Task node {task.rpartition(':')[2]}")
    board.flush()  # every area's node in L0 too (under its area's graph)
    # B: an agent named by a secret, holding an Exclusive lease; a message; L1 and inputs.
    rival_name = world.canary("B-agents")
    world.canaries[rival_name] = Owner(world.b, "agents", "B's agent name")
    world.rival = memory.agent(rival_name, role="do", task=world.b)
    world.rival_node = world.node(world.b, "execution")
    world.rival_token = world.rival.acquire(world.rival_node, "exclusive", ttl_s=LONG_S).token
    message = world.canary("B-messages")
    world.canaries[message] = Owner(world.b, "messages", "B's message")
    world.rival.publish("secret", {"text": message})
    # A: a peer of the doer holding a Write lease, and a message every role of A may read.
    world.peer = memory.agent("peer-doer", role="do", task=world.a)
    world.peer_node = world.node(world.a, "execution")
    world.peer_token = world.peer.acquire(world.peer_node, "write", ttl_s=LONG_S).token
    mine = world.canary("A-messages")
    world.canaries[mine] = Owner(world.a, "messages", "A's message")
    world.peer.publish("note", {"text": mine})
    for task, name in ((world.b, "B"), (world.a, "A")):
        session = memory.session(task, agent=f"user-of-{name}", role="do")
        turn = world.canary(f"{name}-turn")
        session.add_turn("user", f"my password is hunter2 {turn}")
        delivered = world.canary(f"{name}-delivered")
        memory.supplements.put(task, f"please deliver {delivered}")
        session.start_cycle(memory.supplements)
        pending = world.canary(f"{name}-pending")
        memory.supplements.put(task, f"still pending {pending}")
        for secret, what in ((turn, "turn"), (delivered, "delivered input"), (pending, "input")):
            world.canaries[secret] = Owner(None, None, f"{name}'s {what}")
    other = world.canary("mallory")
    save_memory(memory, Scope.user("mallory"), f"mallory's bank pin is 4711 {other}")
    world.canaries[other] = Owner(None, None, "another user's memory")
    world.l0_secrets = tuple(
        iri
        for batch in memory.store.scan_texts()
        for iri, text in batch
        if any(secret in text for secret in world.canaries)
    )
    for role in ROLES:
        world.attackers[role] = memory.agent(f"mole-{role}", role=role, task=world.a)
        world.loners[role] = memory.agent(f"loner-{role}", role=role, task=world.empty[role])


# -- what an agent may see and change --------------------------------------------------------


@dataclass(frozen=True)
class Rights:
    """What the acting agent may read and write, from the default matrix."""

    task: str
    role: str
    readable: frozenset[str]
    writable: frozenset[str]

    @classmethod
    def of(cls, handle: AgentHandle) -> Rights:
        read = frozenset(MATRIX.areas(handle.role, "read"))
        write = frozenset(
            a
            for a in CONTENT_AREAS
            if MATRIX.allows(handle.role, a, "create") or MATRIX.allows(handle.role, a, "update")
        )
        return cls(handle.task, handle.role, read, write)

    def reads(self, owner: Owner) -> bool:
        return owner.task == self.task and owner.area in self.readable

    def may_lease(self, owner: Owner, mode: str) -> bool:
        if owner.task != self.task:
            return False
        return owner.area in (self.readable if mode == "read" else self.writable)

    def changeable_graphs(self) -> frozenset[str]:
        """Graphs a call of this agent may change: its writable areas, the coordination
        mirror of its task (tasks, agents, messages), and their records."""
        graphs = {area_graph(self.task, a) for a in (*self.writable, *MIRRORED)}
        return frozenset(graphs | {bookkeeping_graph(g) for g in graphs})


# -- attacks ---------------------------------------------------------------------------------


@dataclass
class Attack:
    """One tool call of the hostile model.

    Attributes:
        kind: the class it belongs to (a key of ``CLASSES``).
        label: what it tries, for the report.
        tool: the tool's name (``read_node``, ``query_blackboard``, ...).
        args: the tool's arguments, as a model sends them.
        core: whether the core front end runs it too (extra and missing arguments are the
            adapters' business: a Python call with them is a programming error).
        lease: ``(owner, mode)`` of a lease asked for: granted without the right, an escape.
        false: an ASK whose ``true`` answer is an escape (it saw a forbidden graph).
        control: a legitimate call that must succeed (and show ``shows``).
        shows: secrets a control's answer must hold.
    """

    kind: str
    label: str
    tool: str
    args: dict[str, Any]
    core: bool = True
    lease: tuple[Owner, str] | None = None
    false: bool = False
    control: bool = False
    shows: tuple[str, ...] = ()
    undo: tuple[str, ...] = ()
    keep: bool = False


def sparql(kind: str, label: str, text: str, **more: Any) -> Attack:
    return Attack(kind, label, "query_blackboard", {"sparql": text}, **more)


def _escaped(iri: str) -> str:
    """The IRI with its letters written as SPARQL ``\\u`` escapes (valid in an IRIREF)."""
    return "".join(f"\\u{ord(c):04X}" if c.isalpha() else c for c in iri)


def _prefixed(iri: str) -> tuple[str, str]:
    """Split a graph IRI into a namespace and a local part a prefixed name can carry."""
    head, _, local = iri.rpartition(":")
    return head + ":", local


def graph_attacks(world: World, rights: Rights) -> list[Attack]:
    """Reads of graphs the agent may not read, in every form that names one."""
    forbidden = [area_graph(rights.task, a) for a in CONTENT_AREAS if a not in rights.readable]
    others = [area_graph(world.b, a) for a in (*CONTENT_AREAS, *MIRRORED)]
    records = [bookkeeping_graph(area_graph(world.b, "plan")), META_GRAPH]
    every = [*forbidden, *others, *records]
    attacks: list[Attack] = []
    full = {forbidden[0], area_graph(world.b, "plan"), area_graph(world.b, "messages")}
    for graph in every:
        g = f"<{graph}>"
        attacks += [
            sparql("1-sparql", f"GRAPH {graph}", f"SELECT * WHERE {{ GRAPH {g} {{ ?s ?p ?o }} }}"),
            sparql("1-sparql", f"FROM {graph}", f"SELECT * FROM {g} WHERE {{ ?s ?p ?o }}"),
            sparql(
                "1-sparql",
                f"ASK GRAPH {graph}",
                f"ASK {{ GRAPH {g} {{ ?s ?p ?o }} }}",
                false=True,
            ),
        ]
        if graph not in full:
            continue
        namespace, local = _prefixed(graph)
        attacks += [
            sparql(
                "1-sparql",
                f"FROM NAMED {graph}",
                f"SELECT * FROM NAMED {g} WHERE {{ GRAPH ?g {{ ?s ?p ?o }} }}",
            ),
            sparql(
                "1-sparql",
                f"prefixed name of {graph}",
                f"PREFIX gg: <{namespace}> SELECT * WHERE {{ GRAPH gg:{local} {{ ?s ?p ?o }} }}",
            ),
            sparql(
                "1-sparql",
                f"\\u-escaped IRI of {graph}",
                f"SELECT * WHERE {{ GRAPH <{_escaped(graph)}> {{ ?s ?p ?o }} }}",
            ),
            sparql(
                "1-sparql",
                f"VALUES ?g of {graph}",
                f"SELECT * WHERE {{ VALUES ?g {{ {g} }} GRAPH ?g {{ ?s ?p ?o }} }}",
            ),
            sparql(
                "1-sparql",
                f"BIND ?g of {graph}",
                f'SELECT * WHERE {{ BIND(IRI("{graph}") AS ?g) GRAPH ?g {{ ?s ?p ?o }} }}',
            ),
            sparql(
                "1-sparql",
                f"EXISTS in {graph}",
                f"SELECT ?s WHERE {{ ?s ?p ?o FILTER EXISTS {{ GRAPH {g} {{ ?x ?y ?z }} }} }}",
            ),
            sparql(
                "1-sparql",
                f"FROM with a comment inside, {graph}",
                f"SELECT * FROM#{{\n{g} WHERE {{ ?s ?p ?o }}",
            ),
        ]
    return attacks


def generic_sparql(world: World, rights: Rights) -> list[Attack]:
    """Graph variables, property paths, DESCRIBE, subqueries, and hidden updates."""
    b_plan = world.node(world.b, "plan")
    b_graph = area_graph(world.b, "plan")
    paths = "(<urn:x:none>|!<urn:x:none>)"
    hidden = next(a for a in CONTENT_AREAS if a not in rights.readable)
    attacks = [
        sparql("1-sparql", "GRAPH ?g", "SELECT ?g ?s ?p ?o WHERE { GRAPH ?g { ?s ?p ?o } }"),
        sparql("1-sparql", "default graph", "SELECT * WHERE { ?s ?p ?o }"),
        sparql("1-sparql", "path +", f"SELECT ?s ?o WHERE {{ ?s {paths}+ ?o }}"),
        sparql(
            "1-sparql", "path * in GRAPH ?g", f"SELECT ?o WHERE {{ GRAPH ?g {{ ?s {paths}* ?o }} }}"
        ),
        sparql(
            "1-sparql",
            "negated path from B's node",
            f"SELECT ?o WHERE {{ <{b_plan}> !<urn:x:n> ?o }}",
        ),
        sparql("1-sparql", "inverse path", "SELECT ?s WHERE { ?o ^!<urn:x:n> ?s }"),
        sparql("1-sparql", "DESCRIBE B's node", f"DESCRIBE <{b_plan}>"),
        sparql(
            "1-sparql",
            f"DESCRIBE the {hidden} node",
            f"DESCRIBE <{world.node(rights.task, hidden)}>",
        ),
        sparql(
            "1-sparql", "DESCRIBE ?s of GRAPH ?g", "DESCRIBE ?s WHERE { GRAPH ?g { ?s ?p ?o } }"
        ),
        sparql(
            "1-sparql",
            "CONSTRUCT of GRAPH ?g",
            "CONSTRUCT { ?s ?p ?o } WHERE { GRAPH ?g { ?s ?p ?o } }",
        ),
        sparql(
            "1-sparql",
            "subquery of GRAPH ?g",
            "SELECT ?o WHERE { { SELECT ?o WHERE { GRAPH ?g { ?s ?p ?o } } } }",
        ),
        sparql("1-sparql", "ASK about B's node", f"ASK {{ <{b_plan}> ?p ?o }}"),
        sparql(
            "1-sparql",
            "GRAPH ?g FILTER on B's graph",
            f"SELECT * WHERE {{ GRAPH ?g {{ ?s ?p ?o }} FILTER(?g = <{b_graph}>) }}",
        ),
    ]
    for area in CONTENT_AREAS:
        if area not in rights.readable:
            attacks.append(
                Attack(
                    "1-sparql",
                    f"areas=[{area}]",
                    "query_blackboard",
                    {"sparql": "SELECT * WHERE { ?s ?p ?o }", "areas": [area]},
                )
            )
    insert = f'INSERT DATA {{ GRAPH <{b_graph}> {{ <{b_plan}> <urn:x:p> "pwned" }} }}'
    for label, text in [
        ("INSERT after PREFIX and BASE", f"BASE <urn:b:> PREFIX ex: <urn:ex:> {insert}"),
        ("INSERT after a comment", f"# SELECT\n{insert}"),
        ("INSERT spelled with \\u", insert.replace("INSERT", "\\u0049NSERT")),
        (
            "DELETE WHERE on B",
            f"PREFIX : <urn:x:> DELETE WHERE {{ GRAPH <{b_graph}> {{ ?s ?p ?o }} }}",
        ),
        ("DROP ALL", "PREFIX ex: <urn:ex:> DROP ALL"),
        ("CLEAR GRAPH", f"prefix ex:<urn:ex:>\nclear graph <{b_graph}>"),
        ("a query then an update", f"SELECT * WHERE {{ ?s ?p ?o }} ; {insert}"),
        ("update with ex:o\\# in its comment", f"PREFIX ex: <urn:ex:> #\n{insert} # ex:o\\#"),
        ("WITH ... DELETE", f"WITH <{b_graph}> DELETE {{ ?s ?p ?o }} WHERE {{ ?s ?p ?o }}"),
        ("LOAD a remote document", f"LOAD <{world.remote.url}/data.ttl> INTO GRAPH <{b_graph}>"),
    ]:
        attacks.append(sparql("1-sparql", f"update: {label}", text))
    return attacks


def service_attacks(world: World) -> list[Attack]:
    """SERVICE in every disguise, at the server's own endpoint and at a remote host."""
    targets = [("remote", f"{world.remote.url}/query")]
    if world.endpoint is not None:
        targets.insert(0, ("own endpoint", f"{world.endpoint}/query"))
        targets.insert(1, ("own endpoint, union", f"{world.endpoint}/query?union-default-graph"))
    body = "{ GRAPH ?g { ?s ?p ?o } }"
    attacks: list[Attack] = []
    for where, url in targets:
        base, _, last = url.rpartition("/")
        forms = [
            ("plain", f"SELECT * WHERE {{ SERVICE <{url}> {body} }}"),
            ("SILENT, lower case", f"select * where {{ service silent <{url}> {body} }}"),
            (
                "after ex:o\\#",
                f"PREFIX ex: <urn:ex:> SELECT * WHERE {{ VALUES ?z {{ ex:o\\# }}"
                f" SERVICE <{url}> {body} }}",
            ),
            (
                "after ex:o\\'",
                f"PREFIX ex: <urn:ex:> SELECT * WHERE {{ VALUES ?z {{ ex:o\\' }}"
                f" SERVICE <{url}> {body} }} #'",
            ),
            (
                "ex:o\\# in a subquery",
                f"PREFIX ex: <urn:ex:> SELECT * WHERE {{ {{ SELECT * WHERE {{ VALUES ?z"
                f" {{ ex:o\\# }} SERVICE <{url}> {body} }} }} }}",
            ),
            ("comment before the IRI", f"SELECT * WHERE {{ SERVICE#x\n<{url}> {body} }}"),
            ("\\u0053ERVICE", f"SELECT * WHERE {{ \\u0053ERVICE <{url}> {body} }}"),
            ("SERVIC\\u0045", f"SELECT * WHERE {{ SERVIC\\u0045 <{url}> {body} }}"),
            ("\\u-escaped IRI", f"SELECT * WHERE {{ SERVICE <{_escaped(url)}> {body} }}"),
            ("nested", f"SELECT * WHERE {{ SERVICE <{url}> {{ SERVICE <{url}> {body} }} }}"),
            ("a variable", f"SELECT * WHERE {{ VALUES ?e {{ <{url}> }} SERVICE ?e {body} }}"),
            ("prefixed", f"PREFIX sv: <{base}/> SELECT * WHERE {{ SERVICE sv:{last} {body} }}"),
            ("relative to BASE", f"BASE <{base}/> SELECT * WHERE {{ SERVICE <{last}> {body} }}"),
            (
                "in FILTER EXISTS",
                f"SELECT * WHERE {{ ?s ?p ?o FILTER EXISTS {{ SERVICE <{url}> {body} }} }}",
            ),
        ]
        for label, text in forms:
            attacks.append(sparql("1-sparql", f"SERVICE at {where}: {label}", text))
    return attacks


def _evil(world: World, rights: Rights, n: str) -> str:
    """An IRI of the acting agent's own making (one per role and task)."""
    task = rights.task.rpartition(":")[2]
    return f"http://hostile.example/{world.tag}/evil/{task}/{rights.role}/{n}"


def write_attacks(world: World, rights: Rights) -> list[Attack]:
    """Writes to forbidden areas and mirrors, JSON-LD tricks, and forbidden nodes' IRIs."""
    own = WRITES[rights.role]
    b_node = world.node(world.b, "plan")
    b_graph = area_graph(world.b, "plan")
    pwn = {"summary": "pwned"}
    context = f"{world.remote.url}/context.jsonld"

    def write(label: str, node: Mapping[str, Any], area: str = own, **more: Any) -> Attack:
        return Attack("w-write", label, "write_node", {"node": dict(node), "area": area, **more})

    attacks = [
        write(f"into the {area} area", {"@id": _evil(world, rights, f"in-{area}"), **pwn}, area)
        for area in (*CONTENT_AREAS, *MIRRORED)
        if area not in rights.writable
    ]
    evil = _evil(world, rights, "x")
    attacks += [
        write("@graph named as B's plan graph", {"@id": b_graph, "@graph": [{"@id": evil, **pwn}]}),
        write("@graph holding B's node", {"@id": evil, "@graph": [{"@id": b_node, **pwn}]}),
        write("@included B's node", {"@id": evil, "@included": [{"@id": b_node, **pwn}]}),
        write(
            "@included @graph of B's graph",
            {"@id": evil, "@included": [{"@id": b_graph, "@graph": [{"@id": b_node, **pwn}]}]},
        ),
        write(
            "@reverse onto B's node",
            {"@id": evil, "@reverse": {"urn:x:owns": {"@id": b_node, **pwn}}},
        ),
        write("nested B's node", {"@id": evil, "child": {"@id": b_node, **pwn}}),
        write(
            "aliases of @graph and @id",
            {
                "@context": {"id": "@id", "graph": "@graph", "type": "@type"},
                "@id": evil,
                "graph": [{"id": b_node, "type": "Plan", **pwn}],
            },
        ),
        write(
            "alias of @id beside @id", {"@context": {"id": "@id"}, "@id": evil, "id": b_node, **pwn}
        ),
        write(
            "aliases of @included and @reverse",
            {
                "@context": {"inc": "@included", "rev": "@reverse"},
                "@id": evil,
                "inc": [{"@id": b_node, **pwn}],
                "rev": {"urn:x:owns": {"@id": b_node}},
            },
        ),
        write(
            "@base resolving to B's node",
            {"@context": {"@base": b_node.rpartition("/")[0] + "/"}, "@id": "node", **pwn},
        ),
        write(
            "compact IRI expanding to B's node",
            {
                "@context": {"bx": f"http://hostile.example/{world.tag}/B/"},
                "@id": "bx:plan/node",
                **pwn,
            },
        ),
        write("remote @context", {"@context": context, "@id": evil, **pwn}),
        write(
            "remote @context in a list", {"@context": [CONTEXT_URL, context], "@id": evil, **pwn}
        ),
        write(
            "@import of a remote context", {"@context": {"@import": context}, "@id": evil, **pwn}
        ),
        write(
            "remote scoped context",
            {
                "@context": {"p": {"@id": "urn:x:p", "@context": context}},
                "@id": evil,
                "p": {"q": 1},
            },
        ),
        write(
            "remote type-scoped context",
            {"@context": {"T": {"@id": "urn:x:T", "@context": context}}, "@id": evil, "@type": "T"},
        ),
        write(
            "the agent's own task node",
            {"@id": rights.task, "@type": "Task", "status": "completed"},
        ),
        write("B's task node", {"@id": world.b, "@type": "Task", "status": "failed"}),
        write(
            "the peer's Agent node",
            {"@id": "urn:gliding-horse:agent:peer-doer", "@type": "Agent", "role": "plan"},
        ),
    ]
    for iri, owner in world.nodes.items():
        if owner.area in CONTENT_AREAS and not (
            owner.task == rights.task and owner.area in rights.writable
        ):
            attacks.append(write(f"@id of {owner.what}", {"@id": iri, **pwn}))
            if owner.task == world.b or owner.area in ("plan", "shared"):
                attacks.append(
                    write(f"@id of {owner.what}, based_on=0", {"@id": iri, **pwn}, based_on=0)
                )
                attacks.append(
                    write(f"@id of {owner.what}, based_on=1", {"@id": iri, **pwn}, based_on=1)
                )
    attacks += [
        write(
            "the peer's leased node with the peer's token",
            {"@id": world.peer_node, **pwn},
            "execution",
            lease_token=world.peer_token,
        ),
        write(
            "B's leased node with B's agent's token",
            {"@id": world.rival_node, **pwn},
            "execution",
            lease_token=world.rival_token,
        ),
    ]
    return attacks


def lease_attacks(world: World, rights: Rights) -> list[Attack]:
    """Leases on nodes the role may not read or write, of its task and of others."""
    attacks = []
    for iri, owner in world.nodes.items():
        if owner.area not in CONTENT_AREAS or iri == world.peer_node:
            continue
        for mode in ("read", "write", "exclusive"):
            if not rights.may_lease(owner, mode):
                attacks.append(
                    Attack(
                        "5-lease",
                        f"{mode} lease on {owner.what}",
                        "take_lease",
                        {"resource": iri, "mode": mode},
                        lease=(owner, mode),
                    )
                )
    attacks += [
        Attack(
            "5-lease", "release the peer's lease", "release_lease", {"resource": world.peer_node}
        ),
        Attack(
            "5-lease", "release B's agent's lease", "release_lease", {"resource": world.rival_node}
        ),
        Attack("5-lease", "lease the peer's node", "take_lease", {"resource": world.peer_node}),
        Attack(
            "5-lease",
            "lease the node B's agent holds (is its name in the refusal?)",
            "take_lease",
            {"resource": world.rival_node, "mode": "read"},
            lease=(world.nodes[world.rival_node], "read"),
        ),
    ]
    return attacks


def read_attacks(world: World, rights: Rights) -> list[Attack]:
    attacks = [
        Attack("r-read", f"read {owner.what}", "read_node", {"iri": iri})
        for iri, owner in world.nodes.items()
        if not rights.reads(owner) and owner.area != "tasks"
    ]
    attacks += [
        Attack("r-read", "read B's task node", "read_node", {"iri": world.b}),
        Attack("r-read", "read a bookkeeping graph's name", "read_node", {"iri": META_GRAPH}),
        Attack("r-read", "read messages", "read_messages", {"since": 0}),
        Attack(
            "r-read", "read messages of B's topic", "read_messages", {"since": 0, "topic": "secret"}
        ),
        Attack("r-read", "list ready tasks", "list_ready_tasks", {}),
    ]
    return attacks


QUERIES = (
    "password hunter2",
    "mallory bank pin 4711",
    "please deliver",
    "still pending",
    "secret",
    "plan secret of task B",
    "CANARY",
)


def frame_attacks(world: World, rights: Rights) -> list[Attack]:
    """Frames with queries matching the secrets, then a node quoting forbidden IRIs."""
    attacks = [Attack("3-frame-l0", "frame", "project_frame", {"budget": 4000})]
    queries = QUERIES
    attacks += [
        Attack("3-frame-l0", f"frame, query={q!r}", "project_frame", {"budget": 4000, "query": q})
        for q in queries
    ]
    forbidden = [
        iri for iri, owner in world.nodes.items() if not rights.reads(owner) and iri != rights.task
    ]
    refs = [{"@id": iri} for iri in forbidden]
    inner = {"@id": _evil(world, rights, "inner"), "inputData": refs, "results": refs}
    node = {
        "@id": _evil(world, rights, "quoting"),
        "@type": ["Plan", "Artifact", "Decision", "Note"],
        "summary": "a node quoting forbidden IRIs",
        "task": {"@id": rights.task},
        "plan": {"@id": _evil(world, rights, "quoting")},
        "resources": refs,
        "inputData": [*refs, inner],
        "results": refs,
        "reviewResults": refs,
        "refs": refs,
    }
    attacks += [
        Attack(
            "4-generations",
            "write a node quoting forbidden IRIs",
            "write_node",
            {"node": node, "area": WRITES[rights.role]},
            control=True,
            keep=True,
        ),
        Attack("4-generations", "frame quoting forbidden IRIs", "project_frame", {"budget": 8000}),
        Attack(
            "4-generations", "small frame quoting forbidden IRIs", "project_frame", {"budget": 300}
        ),
        Attack(
            "4-generations",
            "frame quoting forbidden IRIs, with a query",
            "project_frame",
            {"budget": 8000, "query": "password"},
            undo=(node["@id"], inner["@id"]),
        ),
    ]
    return attacks


def _deep(depth: int, leaf: Any) -> dict[str, Any]:
    """A JSON object nested ``depth`` levels (built without recursion)."""
    top: dict[str, Any] = {"@id": "http://hostile.example/deep"}
    here = top
    for _ in range(depth):
        below: dict[str, Any] = {}
        here["child"] = below
        here = below
    here["leaf"] = leaf
    return top


def argument_attacks(world: World, rights: Rights) -> list[Attack]:
    """Arguments a framework or the core chokes on, and forged identity (extra arguments)."""
    plan_node = world.node(rights.task, "plan" if rights.role != "plan" else "execution")
    b_query = f"SELECT * WHERE {{ GRAPH <{area_graph(world.b, 'plan')}> {{ ?s ?p ?o }} }}"
    forged = {
        "agent": "peer-doer",
        "role": "plan" if rights.role != "plan" else "do",
        "task": world.b,
        "name": "peer-doer",
        "handle": "system",
    }
    own = WRITES[rights.role]
    deep_node = _deep(1_200, "x")
    huge = "x" * (1 << 20)

    def arg(label: str, tool: str, args: dict[str, Any], *, core: bool = True) -> Attack:
        return Attack("6-arguments", label, tool, args, core=core)

    attacks = [
        arg("forged identity: read", "read_node", {"iri": plan_node, **forged}, core=False),
        arg(
            "forged identity: query", "query_blackboard", {"sparql": b_query, **forged}, core=False
        ),
        arg(
            "forged identity: write",
            "write_node",
            {
                "node": {"@id": _evil(world, rights, "forged"), "summary": "pwned"},
                "area": "plan" if rights.role != "plan" else "execution",
                **forged,
            },
            core=False,
        ),
        arg(
            "forged identity: lease",
            "take_lease",
            {"resource": world.rival_node, **forged},
            core=False,
        ),
        arg("forged identity: frame", "project_frame", {"budget": 2000, **forged}, core=False),
        arg("forged identity: messages", "read_messages", {"since": 0, **forged}, core=False),
        arg("forged identity: claim", "claim_task", {"task": world.b, "role": "plan"}, core=False),
        arg("missing: read_node", "read_node", {}, core=False),
        arg(
            "missing: write_node area",
            "write_node",
            {"node": {"@id": _evil(world, rights, "m")}},
            core=False,
        ),
        arg("missing: query", "query_blackboard", {}, core=False),
        arg("missing: lease", "take_lease", {}, core=False),
        arg("wrong type: iri=123", "read_node", {"iri": 123}),
        arg("wrong type: iri=None", "read_node", {"iri": None}),
        arg("wrong type: iri=[...]", "read_node", {"iri": [plan_node]}),
        arg("wrong type: sparql=123", "query_blackboard", {"sparql": 123}),
        arg("wrong type: sparql={...}", "query_blackboard", {"sparql": {"q": "ASK {}"}}),
        arg("wrong type: areas='plan'", "query_blackboard", {"sparql": "ASK {}", "areas": "plan"}),
        arg("wrong type: node='...'", "write_node", {"node": "urn:x", "area": own}),
        arg("wrong type: node=[...]", "write_node", {"node": [{"@id": "urn:x"}], "area": own}),
        arg(
            "wrong type: area=5",
            "write_node",
            {"node": {"@id": _evil(world, rights, "t")}, "area": 5},
        ),
        arg(
            "wrong type: based_on='one'",
            "write_node",
            {"node": {"@id": _evil(world, rights, "t")}, "area": own, "based_on": "one"},
        ),
        arg(
            "wrong type: based_on=-1",
            "write_node",
            {"node": {"@id": _evil(world, rights, "t")}, "area": own, "based_on": -1},
        ),
        arg(
            "wrong type: lease_token='x'",
            "write_node",
            {"node": {"@id": _evil(world, rights, "t")}, "area": own, "lease_token": "x"},
        ),
        arg(
            "wrong type: mode='godmode'",
            "take_lease",
            {"resource": _evil(world, rights, "t"), "mode": "godmode"},
        ),
        arg("wrong type: budget=0", "project_frame", {"budget": 0}),
        arg("wrong type: budget=-1", "project_frame", {"budget": -1}),
        arg("wrong type: budget=10**40", "project_frame", {"budget": 10**40}),
        arg("wrong type: budget='lots'", "project_frame", {"budget": "lots"}),
        arg("wrong type: since=-5", "read_messages", {"since": -5}),
        arg("wrong type: since='x'", "read_messages", {"since": "x"}),
        arg("wrong type: topic=5", "post_message", {"topic": 5}),
        arg("wrong type: payload=[...]", "post_message", {"topic": "t", "payload": [1, 2]}),
        arg("deep: node 1,200 levels", "write_node", {"node": deep_node, "area": own}),
        arg(
            "deep: payload 1,200 levels",
            "post_message",
            {"topic": "t", "payload": _deep(1_200, "x")},
        ),
        arg(
            "deep: areas 1,200 levels",
            "query_blackboard",
            {"sparql": "ASK {}", "areas": _nested_list(1_200)},
        ),
        arg("huge: 1 MB IRI", "read_node", {"iri": "urn:x:" + huge}),
        arg(
            "huge: 1 MB summary",
            "write_node",
            {"node": {"@id": _evil(world, rights, "huge"), "summary": huge}, "area": own},
        ),
        arg("huge: 1 MB topic", "read_messages", {"since": 0, "topic": huge}),
    ]
    return attacks


def _nested_list(depth: int) -> list[Any]:
    top: list[Any] = []
    here = top
    for _ in range(depth):
        below: list[Any] = []
        here.append(below)
        here = below
    return top


def controls(world: World, rights: Rights) -> list[Attack]:
    """Legitimate calls: they must succeed and show what the role may read."""
    readable = tuple(
        secret
        for secret, owner in world.canaries.items()
        if rights.reads(owner) and owner.area in CONTENT_AREAS
    )
    own = WRITES[rights.role]
    mine = world.node(rights.task, own)
    fresh = _evil(world, rights, "control")
    return [
        sparql(
            "control",
            "query what the role reads",
            "SELECT * WHERE { ?s ?p ?o }",
            control=True,
            shows=readable,
        ),
        Attack(
            "control",
            "read a node of the role's area",
            "read_node",
            {"iri": mine},
            control=True,
            shows=(world.canary(f"A-{own}"),),
        ),
        Attack(
            "control",
            "write a node",
            "write_node",
            {"node": {"@id": fresh, "summary": "ok"}, "area": own},
            control=True,
            keep=True,
        ),
        Attack(
            "control",
            "lease a node of its own",
            "take_lease",
            {"resource": fresh, "mode": "write"},
            control=True,
        ),
        Attack(
            "control",
            "release it",
            "release_lease",
            {"resource": fresh},
            control=True,
            undo=(fresh,),
        ),
        Attack(
            "control",
            "read messages",
            "read_messages",
            {"since": 0},
            control=True,
            shows=(world.canary("A-messages"),),
        ),
    ]


def catalogue(world: World, role: str) -> list[tuple[AgentHandle, Attack]]:
    """Every attack of one role, each with the agent that makes it, in the order they run."""
    attacker, loner = world.attackers[role], world.loners[role]
    rights, alone = Rights.of(attacker), Rights.of(loner)
    on_a: list[Attack] = [
        *controls(world, rights),
        *graph_attacks(world, rights),
        *generic_sparql(world, rights),
        *service_attacks(world),
        *write_attacks(world, rights),
        *lease_attacks(world, rights),
        *read_attacks(world, rights),
        *argument_attacks(world, rights),
        *frame_attacks(world, rights),
    ]
    # The loner's task is empty: its frame falls through to L0, where the secrets are.
    on_c = frame_attacks(world, alone)
    return [(attacker, a) for a in on_a] + [(loner, a) for a in on_c]


# -- running and judging ---------------------------------------------------------------------


@dataclass
class Outcome:
    """What a call gave the model: an answer (``value``) or a refusal (``text``)."""

    text: str
    refused: bool
    typed: bool = True
    raised: BaseException | None = None
    value: Any = None
    error: BaseException | None = None


Runner = Callable[[AgentHandle, str, dict[str, Any]], Outcome]


def core_runner(world: World) -> Runner:
    """Run a call through ``gliding_core.tools.board_tools`` (the error's text and fields count)."""
    calls: dict[str, Callable[..., Any]] = {
        "read_node": ops.read_node,
        "write_node": ops.write_node,
        "query_blackboard": lambda h, sparql, **kw: ops.query(h, sparql, **kw),
        "claim_task": ops.claim_task,
        "complete_task": ops.complete_task,
        "list_ready_tasks": ops.ready_tasks,
        "take_lease": ops.take_lease,
        "release_lease": ops.release_lease,
        "post_message": ops.post_message,
        "read_messages": ops.read_messages,
        "project_frame": lambda h, **kw: ops.project_frame(h, world.scheduler, **kw),
    }

    def run(handle: AgentHandle, tool: str, args: dict[str, Any]) -> Outcome:
        try:
            value = calls[tool](handle, **args)
        except GlidingError as exc:
            text = f"{exc}\n{ops.board_refusal(exc)}\n{_fields(exc)}"
            return Outcome(text, refused=True, error=exc)
        except Exception as exc:
            return Outcome(f"{type(exc).__name__}: {exc}", refused=True, typed=False, raised=exc)
        return Outcome(_text(value), refused=False, value=value)

    return run


def _fields(error: BaseException) -> str:
    with contextlib.suppress(Exception):
        return _text(vars(error))
    return ""


def _text(value: Any) -> str:
    """Every string and number in ``value``, without recursion (a value may nest deep)."""
    parts: list[str] = []
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, Mapping):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, (list, tuple, set, frozenset)):
            stack.extend(item)
        else:
            parts.append(str(item))
    return "\n".join(parts)


@dataclass
class Finding:
    kind: str
    role: str
    agent: str
    label: str
    why: str


@dataclass
class Report:
    """The attempts, refusals and findings of one run."""

    frontend: str
    backend: str
    role: str
    attempts: Counter[str] = field(default_factory=Counter)
    refusals: Counter[str] = field(default_factory=Counter)
    findings: list[Finding] = field(default_factory=list)

    def summary(self) -> str:
        by_kind = Counter(f.kind for f in self.findings)
        lines = [
            f"{self.frontend} / {self.backend} / role {self.role}: {sum(self.attempts.values())}"
            f" attempts, {sum(self.refusals.values())} refused, {len(self.findings)} findings"
        ]
        for kind in sorted(self.attempts):
            lines.append(
                f"  {kind}: {self.attempts[kind]} attempts, {self.refusals[kind]} refused,"
                f" {by_kind.get(kind, 0)} findings"
            )
        grouped: dict[tuple[str, str, str], list[str]] = {}
        for finding in self.findings:
            grouped.setdefault((finding.kind, finding.agent, finding.label), []).append(finding.why)
        for (kind, agent, label), whys in grouped.items():
            more = f" (and {len(whys) - 1} more)" if len(whys) > 1 else ""
            lines.append(f"  - [{kind}] {agent}: {label}: {whys[0]}{more}")
        return "\n".join(lines)

    def as_dict(self) -> dict[str, Any]:
        return {
            "frontend": self.frontend,
            "backend": self.backend,
            "role": self.role,
            "attempts": dict(self.attempts),
            "refusals": dict(self.refusals),
            "findings": [vars(f) for f in self.findings],
        }


Snapshot = dict[tuple[str, str], tuple[int, int]]
# Per node of each graph: how many triples, and the sum of a hash of each (order-free).
DIGEST = """
PREFIX xsd: <http://www.w3.org/2001/XMLSchema#>
SELECT ?g ?s (COUNT(*) AS ?n) (SUM(?x) AS ?h) WHERE {
  GRAPH ?g { ?s ?p ?o }
  BIND(CONCAT(STR(?p), " ", STR(?o), " ", COALESCE(STR(DATATYPE(?o)), "iri"), " ",
              COALESCE(LANG(?o), "")) AS ?line)
  BIND(xsd:integer(CONCAT("1", REPLACE(SUBSTR(SHA256(?line), 1, 15), "[a-f]", ""))) AS ?x)
} GROUP BY ?g ?s
"""
_KEPT_CHARS = 10_000  # longer strings an agent sends are not kept as what it knows
Note = Callable[..., None]  # records a finding: note(why, kind=the attack's)


class Judge:
    """Reads the store as the system around each call and records every escape."""

    def __init__(self, world: World, report: Report) -> None:
        self.world = world
        self.report = report
        self._quads: Snapshot | None = None
        self._known: dict[str, str] = {}  # what each agent has sent so far (short strings)

    def dump(self) -> Snapshot:
        """A digest of every node of every graph, read as the system: ``(graph, subject)`` ->
        (triples, sum of their hashes), computed by the store (a whole dump at a server costs
        more than the attack)."""
        rows = self.world.board.backend.query(DIGEST).rows
        return {(r["g"].value, r["s"].value): (int(r["n"].value), int(r["h"].value)) for r in rows}

    def state(self) -> tuple[Snapshot, dict[str, str], tuple[Any, ...]]:
        world = self.world
        quads = self._quads if self._quads is not None else self.dump()
        l0 = world.memory.store.contents(list(world.l0_secrets))
        leases = world.board.coordination.leases
        held = tuple(
            (lease.holder, str(lease.mode.value), lease.token)
            for resource in (world.peer_node, world.rival_node)
            for lease in leases.holders(resource)
        )
        return quads, l0, held

    def attempt(self, run: Runner, handle: AgentHandle, attack: Attack) -> None:
        """Make one call of the agent and record what escaped around it."""
        world, rights = self.world, Rights.of(handle)
        self.report.attempts[attack.kind] += 1
        before, l0, held = self.state()
        hits = world.remote.hits
        outcome = run(handle, attack.tool, attack.args)
        self._quads = after = self.dump()
        note = self._noter(handle, rights, attack)
        self._refusal(outcome, attack, note)
        self._answer(outcome, attack, rights, self._sent(handle, attack), note)
        if attack.lease is not None and not outcome.refused:
            self._squat(handle, rights, attack, note)
        if world.remote.hits != hits:
            note(f"{world.remote.hits - hits} request(s) reached the remote host")
        self._changes(before, after, rights, _text(attack.args), note)
        self._undo(before, after, rights, attack)
        _, l0_after, held_after = self.state()
        if l0_after != l0:
            note("an L0 entry holding a secret changed")
        if held_after != held:
            note(f"other agents' leases changed: {held} -> {held_after}", "5-lease")

    def _noter(self, handle: AgentHandle, rights: Rights, attack: Attack) -> Note:
        findings = self.report.findings

        def note(why: str, kind: str = attack.kind) -> None:
            finding = Finding(kind, rights.role, handle.name, attack.label, why)
            if finding not in findings:
                findings.append(finding)

        return note

    def _refusal(self, outcome: Outcome, attack: Attack, note: Note) -> None:
        """A refusal must be typed, raised by nothing, and never of a legitimate call."""
        if not outcome.refused:
            return
        self.report.refusals[attack.kind] += 1
        if attack.control:
            note(f"a legitimate call was refused: {outcome.text[:300]}", "control")
        if outcome.raised is not None and not outcome.typed:
            raised = f"{type(outcome.raised).__name__}: {str(outcome.raised)[:200]}"
            note(f"raised {raised}", "6-arguments")
        elif not outcome.typed:
            note(f"untyped refusal: {outcome.text[:200]!r}", "6-arguments")

    def _answer(
        self, outcome: Outcome, attack: Attack, rights: Rights, sent: str, note: Note
    ) -> None:
        """No secret the agent may not read in what it got; a control shows what it may."""
        where = "refusal" if outcome.refused else "answer"
        for secret, owner in self.world.canaries.items():
            if secret in outcome.text and secret not in sent and not rights.reads(owner):
                note(f"{owner.what} ({secret}) in the {where}")
        if outcome.refused:
            return
        if attack.false and '"boolean": true' in outcome.text.replace("True", "true"):
            note("ASK answered true over a forbidden graph")
        if attack.control:
            for secret in attack.shows:
                if secret not in outcome.text:
                    note(f"a legitimate answer lacks {secret}", "control")
        if attack.tool == "project_frame":
            self._generations(outcome, rights, note)

    def _squat(self, handle: AgentHandle, rights: Rights, attack: Attack, note: Note) -> None:
        """A lease granted needs the right it protects; it is released again."""
        assert attack.lease is not None
        owner, mode = attack.lease
        if not rights.may_lease(owner, mode):
            note(f"a {mode} lease was granted on {owner.what}", "5-lease")
        with contextlib.suppress(GlidingError):
            handle.release(attack.args["resource"])
        self._quads = None  # the release may change the mirror

    def _undo(self, before: Snapshot, after: Snapshot, rights: Rights, attack: Attack) -> None:
        """Take out of the agent's own areas (as the system) what the call wrote there, unless
        the attack keeps it, and what it names to undo: the store stays small, and no later
        call (of another role either) sees what this one left.

        A node is deleted; the triples an embedded object added about another IRI stay when
        their node goes, so they are deleted by subject.
        """
        own = {area_graph(rights.task, a) for a in rights.writable}
        records = {bookkeeping_graph(g) for g in own}  # a node's record, even without triples
        made = set() if attack.keep else {s for (g, s) in after.keys() - before.keys()}
        doomed = {
            (g, s) for (g, s) in after if g in own | records and (s in made or s in attack.undo)
        }
        if not doomed:
            return
        board = self.world.board
        nodes = board.read_many(sorted({s for _, s in doomed if ":" in s}))
        deleted = {iri for iri, node in nodes.items() if node.graph in own}
        board.delete(sorted(deleted))
        for graph, subject in sorted(doomed):
            if graph in own and ":" in subject and subject not in deleted:
                pattern = f"{ox.NamedNode(subject)} ?p ?o"
                board.backend.update(
                    f"DELETE WHERE {{ GRAPH {ox.NamedNode(graph)} {{ {pattern} }} }}"
                )
        self._quads = None

    def _sent(self, handle: AgentHandle, attack: Attack) -> str:
        """What the agent has sent so far, this call included: an echo of it is no leak."""
        short = "\n".join(s for s in _text(attack.args).split("\n") if len(s) < _KEPT_CHARS)
        known = self._known[handle.name] = self._known.get(handle.name, "") + "\n" + short
        return known

    def _generations(self, outcome: Outcome, rights: Rights, note: Note) -> None:
        value = outcome.value
        if value is None:
            with contextlib.suppress(ValueError):
                value = json.loads(outcome.text)
        generations = value.get("generations", {}) if isinstance(value, dict) else {}
        for iri in generations:
            owner = self.world.nodes.get(iri)
            if owner is not None and not rights.reads(owner):
                note(f"the generation of {owner.what} ({iri})", "4-generations")

    def _changes(
        self,
        before: Snapshot,
        after: Snapshot,
        rights: Rights,
        sent: str,
        note: Note,
    ) -> None:
        allowed = rights.changeable_graphs()
        mirrors = {area_graph(rights.task, a) for a in MIRRORED}
        changed = sorted(k for k in before.keys() | after.keys() if before.get(k) != after.get(k))
        # Tombstones of every graph's deleted nodes share one graph: the agent's own may change.
        own = {
            iri
            for iri, owner in self.world.nodes.items()
            if owner.task == rights.task and owner.area in rights.writable
        }
        theirs = set(self.world.nodes) - own
        for graph in sorted({g for g, s in changed if g not in allowed and g != META_GRAPH}):
            note(f"graph {graph} changed")
        for subject in sorted({s for g, s in changed if g == META_GRAPH and s in theirs}):
            note(f"the tombstone of {subject} changed")
        for graph, subject in changed:
            if (graph in mirrors or bookkept_graph(graph) in mirrors) and subject in sent:
                note(f"a node the call named ({subject}) changed in the mirrored graph {graph}")


def attack_role(world: World, role: str, run: Runner, frontend: str) -> Report:
    """Run every attack of ``role`` through ``run``; return the report."""
    report = Report(frontend, world.kind, role)
    judge = Judge(world, report)
    for handle, attack in catalogue(world, role):
        if frontend == "core" and not attack.core:
            continue
        judge.attempt(run, handle, attack)
    return report


# -- class 7: a write whose reply is lost ------------------------------------------------------


class DroppingProxy:
    """A TCP proxy to a SPARQL server that, once armed, drops the reply to one update.

    The update is forwarded (the server applies it), and the connection is closed before its
    reply reaches the client: the client cannot know whether the write landed.
    """

    def __init__(self, upstream: str) -> None:
        host, _, port = upstream.removeprefix("http://").partition(":")
        self.upstream = (host, int(port))
        self.marker: bytes | None = None
        self.dropped = 0
        self.lock = threading.Lock()
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.listener.settimeout(0.1)  # (a blocked accept does not see the socket close)
        self.closed = threading.Event()
        self.url = f"http://127.0.0.1:{self.listener.getsockname()[1]}"
        self.sockets: list[socket.socket] = []
        self.thread = threading.Thread(target=self._accept, daemon=True)
        self.thread.start()

    def arm(self, marker: str) -> None:
        with self.lock:
            self.marker = marker.encode()

    def _accept(self) -> None:
        while not self.closed.is_set():
            try:
                client, _ = self.listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            client.settimeout(None)
            server = socket.create_connection(self.upstream)
            self.sockets += [client, server]
            drop = threading.Event()
            threading.Thread(target=self._up, args=(client, server, drop), daemon=True).start()
            threading.Thread(target=self._down, args=(server, client, drop), daemon=True).start()

    def _up(self, client: socket.socket, server: socket.socket, drop: threading.Event) -> None:
        request = b""
        while True:
            try:
                chunk = client.recv(65536)
            except OSError:
                chunk = b""
            if not chunk:
                _close(server)
                return
            request = chunk if chunk.startswith((b"POST ", b"GET ")) else request + chunk
            with self.lock:
                marker = self.marker
                if marker and request.startswith(b"POST /update") and marker in request:
                    self.marker = None
                    self.dropped += 1
                    drop.set()
            try:
                server.sendall(chunk)
            except OSError:
                return

    def _down(self, server: socket.socket, client: socket.socket, drop: threading.Event) -> None:
        while True:
            try:
                chunk = server.recv(65536)
            except OSError:
                chunk = b""
            if not chunk or drop.is_set():
                _close(client)
                _close(server)
                return
            try:
                client.sendall(chunk)
            except OSError:
                return

    def close(self) -> None:
        self.closed.set()
        self.thread.join()
        self.listener.close()
        for sock in self.sockets:
            _close(sock)


def _close(sock: socket.socket) -> None:
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)
    sock.close()


def lost_reply(endpoint: str, directory: Path, make_runner: Callable[[World], Runner]) -> list[str]:
    """Write through a proxy that drops the reply, retry the same call; return the problems.

    The memory is kept in ``directory`` with its board at the server, as processes sharing a
    board are (their copies and generations in the directory's SQLite). The first call must be
    a typed refusal saying the outcome is unknown (from the core, an error of its own type,
    neither a plain ``StorageError`` nor a stale write against itself); the same call again,
    after another agent has read the node, must return the committed node at generation 1.
    """
    proxy = DroppingProxy(endpoint)
    tag = uuid.uuid4().hex[:8]
    board = BlackboardConfig(endpoint=proxy.url, flush_interval_s=0.0)
    config = MemoryConfig(embedder="hash", topics=TopicConfig(interval_s=0), blackboard=board)
    task = f"urn:hostile:{tag}:commit-task"
    try:
        memory = Memory.open(directory, config=config, embedder=HashEmbedder(), engines=False)
        world = World(memory, "server", tag, proxy.url, Remote(), a=task, b=task, empty={})
        try:
            return _lost_reply(world, proxy, make_runner(world))
        finally:
            world.close()
    finally:
        proxy.close()


def _lost_reply(world: World, proxy: DroppingProxy, run: Runner) -> list[str]:
    world.board.coordination.tasks.register(world.a)
    doer = world.memory.agent("doer", role="do", task=world.a)
    iri = f"http://hostile.example/{world.tag}/commit/step"
    args = {"node": {"@id": iri, "@type": "Step", "summary": "written once"}, "area": "execution"}
    args["based_on"] = 0
    proxy.arm(iri)
    first = run(doer, "write_node", args)
    problems = []
    if proxy.dropped != 1:
        problems.append("the proxy saw no update to drop")
    done = first.value if isinstance(first.value, dict) else {}
    if not first.refused:  # the tool made the write again by its id: it must say what landed
        if (done.get("generation"), done.get("value", {}).get("summary")) != (1, "written once"):
            problems.append(f"the lost write was answered with another node: {first.text[:200]}")
    elif not first.typed:
        problems.append(f"untyped refusal of the lost write: {first.text[:200]}")
    elif type(first.error) in (StorageError, StaleWriteError) or "stale" in first.text.lower():
        kind = type(first.error).__name__ if first.error is not None else "refusal"
        problems.append(f"the unknown outcome is a plain {kind}: {first.text[:300]}")
    # The writer reads the node to find out (the store holds it), and so does another agent.
    seen = run(doer, "read_node", {"iri": iri})
    if not (isinstance(seen.value, dict) and seen.value.get("generation") == 1):
        problems.append(f"the writer's read does not show the node the store holds: {seen.text}")
    world.memory.agent("reviewer", role="check", task=world.a).read(iri)
    again = run(doer, "write_node", args)
    value = again.value if isinstance(again.value, dict) else {}
    if again.refused:
        problems.append(f"the retry of the same write was refused: {again.text[:300]}")
    elif (value.get("generation"), value.get("value", {}).get("summary")) != (1, "written once"):
        problems.append(f"the retry did not return the committed node: {again.text[:300]}")
    node = world.board.read(iri)
    if node is None or node.generation != 1:
        problems.append(f"the store holds {node!r}, not the node written once")
    return problems


def record(report: Report) -> None:
    """Append the report's counts to the file ``HOSTILE_REPORT`` names, when it is set."""
    path = os.environ.get("HOSTILE_REPORT")
    if path:
        with open(path, "a", encoding="utf-8") as out:
            out.write(json.dumps(report.as_dict()) + "\n")


@contextlib.contextmanager
def world_of(kind: str, endpoint: str | None) -> Iterator[World]:
    world = build_world(kind, endpoint)
    try:
        yield world
    finally:
        world.close()


__all__: Sequence[str] = (
    "CLASSES",
    "ROLES",
    "Attack",
    "Outcome",
    "Report",
    "Runner",
    "World",
    "attack_role",
    "build_world",
    "core_runner",
    "lost_reply",
    "record",
    "world_of",
)
