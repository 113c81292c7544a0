"""A hostile model's SPARQL: every disguise refused, typed, with no connection made and no
forbidden value read, for every role, on an embedded board and on a board at ``oxigraph serve``.

The model is an agent of ``TASK`` in one role of the default matrix. The secrets are in an area
of its task its role may not read, and in its own area of ``OTHER``'s task. A TCP listener on
127.0.0.1 (the ``SERVICE`` target) counts connections: a ``SERVICE`` that ran anywhere, in
pyoxigraph or in the server, connects to it. At a server board the disguises also aim at the
server's own ``/query``, where a ``SERVICE`` runs without the dataset the board set. Each
attempt goes through the handle and through the tool function (``board_tools.query``); the
system's ``Blackboard.query`` refuses ``SERVICE`` too.

Only the public API is used here, so these tests run on any version of the checks.
"""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pyoxigraph as ox
import pytest

from gliding_core import GlidingError, InvalidInputError, L0Store
from gliding_core.blackboard.board import AgentHandle, Blackboard
from gliding_core.blackboard.graph import GraphBackend
from gliding_core.blackboard.vocabulary import area_graph
from gliding_core.config import BlackboardConfig
from gliding_core.errors import PermissionDeniedError
from gliding_core.projection.frames import Frame
from gliding_core.tools import board_tools
from tests.test_core.blackboard.test_blackboard_graph import make_backend

TASK = "iri://task/t1"
OTHER = "iri://task/t2"
SECRETS = ("hunter2-of-a-hidden-area", "hunter2-of-another-task")
# role -> (its own area, an area of its task it may not read)
AREAS = {
    "plan": ("plan", "execution"),
    **{r: (a, "plan") for r, a in (("do", "execution"), ("check", "review"), ("act", "decision"))},
}
# Graph names in the texts below, replaced for each role.
HIDDEN, FOREIGN, OWN = "urn:x-hidden-graph", "urn:x-foreign-graph", "urn:x-own-graph"


class Listener:
    """A TCP socket on 127.0.0.1 that accepts, counts and closes every connection."""

    def __init__(self) -> None:
        self._socket = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._socket.bind(("127.0.0.1", 0))
        self._socket.listen(64)
        self._socket.settimeout(0.05)
        self.port: int = self._socket.getsockname()[1]
        self._count = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        """A SPARQL endpoint URL on the listener."""
        return f"http://127.0.0.1:{self.port}/sparql"

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                connection, _ = self._socket.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            self._count += 1
            connection.close()

    def connections(self) -> int:
        """Stop listening; return how many connections arrived (those still queued too)."""
        if self._stop.is_set():
            return self._count
        self._stop.set()
        self._thread.join()
        self._socket.setblocking(False)
        with contextlib.suppress(OSError):
            while True:
                connection, _ = self._socket.accept()
                self._count += 1
                connection.close()
        self._socket.close()
        return self._count


@pytest.fixture
def listener() -> Iterator[Listener]:
    value = Listener()
    yield value
    value.connections()


@pytest.fixture(params=["memory", "server"])
def board(request: pytest.FixtureRequest, tmp_path: Path, store: L0Store) -> Iterator[Blackboard]:
    backend: GraphBackend = make_backend(request.param, tmp_path, request)
    value = Blackboard(backend, store=store, config=BlackboardConfig(flush_interval_s=0.0))
    yield value
    value.close()


@pytest.fixture(params=sorted(AREAS))
def agent(request: pytest.FixtureRequest, board: Blackboard) -> AgentHandle:
    """An agent of ``TASK`` in each role, with the secrets where it may not look."""
    own, hidden = AREAS[request.param]
    board.write([{"@id": "urn:hidden:secret", "summary": SECRETS[0]}], task=TASK, area=hidden)
    board.write([{"@id": "urn:other:secret", "summary": SECRETS[1]}], task=OTHER, area=own)
    board.write([{"@id": "urn:own:mine", "summary": "mine"}], task=TASK, area=own)
    return board.agent(f"{request.param}-agent", role=request.param, task=TASK)


def aimed(handle: AgentHandle, text: str) -> str:
    """``text`` with its placeholder graphs named for ``handle``'s role."""
    own, hidden = AREAS[handle.role]
    return (
        text.replace(HIDDEN, area_graph(TASK, hidden))
        .replace(FOREIGN, area_graph(OTHER, own))
        .replace(OWN, area_graph(TASK, own))
    )


def targets(board: Blackboard, listener: Listener) -> list[str]:
    """Where a SERVICE is aimed: the listener, and at a server board the server itself."""
    found = [listener.url]
    if board.backend.kind == "server":
        found.append(f"{board.backend.url}/query")  # type: ignore[attr-defined]
    return found


def attempts(handle: AgentHandle, text: str, *, system: bool = False) -> list[Callable[[], Any]]:
    """The ways a model sends ``text``: the handle, and the tool function of both adapters
    (and, ``system``, the blackboard's own ``query``, which frames use)."""
    runs: list[Callable[[], Any]] = [
        lambda: handle.query(text),
        lambda: board_tools.query(handle, text),
    ]
    if system:
        runs.append(lambda: handle.board.query(text))
    return runs


def refused(run: Callable[[], Any], *errors: type[Exception]) -> GlidingError:
    """Run an attempt that must be refused with one of ``errors``; return the refusal."""
    with pytest.raises(errors or (InvalidInputError, PermissionDeniedError)) as caught:
        run()
    error = caught.value
    assert isinstance(error, GlidingError)
    assert not any(secret in str(error) for secret in SECRETS), error
    return error


def store_state(board: Blackboard) -> list[str]:
    """Every quad of the store, read as the system."""
    result = board.query("SELECT ?g ?s ?p ?o WHERE { GRAPH ?g { ?s ?p ?o } }")
    return sorted(str(row) for row in result.values())


# -- SERVICE, however it is written ------------------------------------------------------------

SERVICE_DISGUISES = {
    # The first one found: \# in a local name opened a "comment" for the old pattern check.
    "local-name-hash": "PREFIX ex: <urn:ex:> SELECT ?g ?o WHERE {{ VALUES ?z {{ ex:o\\# }}"
    " SERVICE <{url}> {{ GRAPH ?g {{ ?s ?p ?o }} }} }}",
    # \' opened a "string" up to the next quote.
    "local-name-quote": "PREFIX ex: <urn:ex:> SELECT ?o WHERE {{ VALUES ?z {{ ex:o\\' }}"
    " SERVICE <{url}> {{ ?s ?p ?o }} VALUES ?y {{ 'x' }} }}",
    "local-name-escapes": "PREFIX ex: <urn:ex:> SELECT ?o WHERE {{ VALUES ?z {{ ex:a\\.\\-\\#\\'\\~"
    " }} SERVICE <{url}> {{ ?s ?p ?o }} }} #'",
    "local-name-percent": "PREFIX ex: <urn:ex:> SELECT ?o WHERE {{ VALUES ?z {{ ex:a%23\\# }}"
    " SERVICE <{url}> {{ ?s ?p ?o }} }}",
    "comment-before": "SELECT ?o WHERE {{ # a comment with SERVICE in it\n"
    " SERVICE <{url}> {{ ?s ?p ?o }} }}",
    "iri-with-hash-and-quote": "SELECT ?o WHERE {{ ?x <urn:a#'> ?y . SERVICE <{url}>"
    " {{ ?s ?p ?o }} }} #'",
    "string-with-escaped-quote": 'SELECT ?o WHERE {{ BIND("a\\"#" AS ?x) SERVICE <{url}>'
    " {{ ?s ?p ?o }} }}",
    "long-string-double": 'SELECT ?o WHERE {{ BIND("""a"b""c""" AS ?x) SERVICE <{url}>'
    " {{ ?s ?p ?o }} }}",
    "long-string-single": "SELECT ?o WHERE {{ BIND('''it''s''' AS ?x) SERVICE <{url}>"
    " {{ ?s ?p ?o }} }}",
    "codepoint-first-letter": "SELECT ?o WHERE {{ \\u0053ERVICE <{url}> {{ ?s ?p ?o }} }}",
    "codepoint-middle-letter": "SELECT ?o WHERE {{ SE\\u0052VICE <{url}> {{ ?s ?p ?o }} }}",
    "codepoint-long-form": "SELECT ?o WHERE {{ \\U00000053ERVICE <{url}> {{ ?s ?p ?o }} }}",
    "codepoint-brackets": "SELECT ?o WHERE {{ SERVICE \\u003C{url}\\u003E {{ ?s ?p ?o }} }}",
    "codepoint-twice": "SELECT ?o WHERE {{ \\u005Cu0053ERVICE <{url}> {{ ?s ?p ?o }} }}",
    "mixed-case": "select ?o where {{ sErViCe <{url}> {{ ?s ?p ?o }} }}",
    "silent": "SELECT ?o WHERE {{ SERVICE SILENT <{url}> {{ ?s ?p ?o }} }}",
    "variable": "SELECT ?o WHERE {{ VALUES ?u {{ <{url}> }} SERVICE ?u {{ ?s ?p ?o }} }}",
    "prefixed-name": "PREFIX h: <{url}> SELECT ?o WHERE {{ SERVICE h: {{ ?s ?p ?o }} }}",
    "relative-to-base": "BASE <{url}> SELECT ?o WHERE {{ SERVICE <> {{ ?s ?p ?o }} }}",
    "no-whitespace": "SELECT*{{SERVICE<{url}>{{?s ?p ?o}}}}",
    "odd-whitespace": "SELECT ?o WHERE {{\tSERVICE\r<{url}>\n{{ ?s ?p ?o }} }}",
    "in-optional": "SELECT ?o WHERE {{ ?a ?b ?c OPTIONAL {{ SERVICE <{url}> {{ ?s ?p ?o }} }} }}",
    "in-minus": "SELECT ?c WHERE {{ ?a ?b ?c MINUS {{ SERVICE <{url}> {{ ?s ?p ?o }} }} }}",
    "in-filter-exists": "SELECT ?c WHERE {{ ?a ?b ?c FILTER EXISTS {{ SERVICE <{url}>"
    " {{ ?s ?p ?o }} }} }}",
    "in-subselect": "SELECT ?o WHERE {{ {{ SELECT ?o WHERE {{ SERVICE <{url}> {{ ?s ?p ?o }} }}"
    " }} }}",
    "in-union-arm": "SELECT ?o WHERE {{ {{ ?s ?p ?o }} UNION {{ SERVICE <{url}>"
    " {{ ?s ?p ?o }} }} }}",
    "in-graph": "SELECT ?o WHERE {{ GRAPH ?g {{ SERVICE <{url}> {{ ?s ?p ?o }} }} }}",
    "ask": "ASK {{ SERVICE <{url}> {{ ?s ?p ?o }} }}",
    "construct": "CONSTRUCT {{ ?s ?p ?o }} WHERE {{ SERVICE <{url}> {{ ?s ?p ?o }} }}",
    "describe": "DESCRIBE ?s WHERE {{ SERVICE <{url}> {{ ?s ?p ?o }} }}",
    "after-commented-prologue": "# SERVICE\nPREFIX ex: <urn:ex:> # it's\nBASE <urn:b>\n"
    "SELECT ?o WHERE {{ SERVICE <{url}> {{ ?s ?p ?o }} }}",
}


@pytest.mark.parametrize("disguise", sorted(SERVICE_DISGUISES))
def test_service_is_refused_however_it_is_written(
    board: Blackboard, agent: AgentHandle, listener: Listener, disguise: str
) -> None:
    for url in targets(board, listener):
        text = SERVICE_DISGUISES[disguise].format(url=url)
        for run in attempts(agent, text, system=True):
            refused(run)
    assert listener.connections() == 0


def test_the_listener_sees_a_service_call_made_past_the_board(listener: Listener) -> None:
    """The probe works: pyoxigraph itself calls any SERVICE URL it is given."""
    with contextlib.suppress(OSError):
        list(ox.Store().query(f"SELECT * WHERE {{ SERVICE <{listener.url}> {{ ?s ?p ?o }} }}"))
    assert listener.connections() == 1


@pytest.mark.parametrize("role", sorted(AREAS))
def test_a_service_back_to_the_server_cannot_read_another_tasks_area(
    oxigraph_server: str,
    tmp_path: Path,
    store: L0Store,
    request: pytest.FixtureRequest,
    role: str,
) -> None:
    backend = make_backend("server", tmp_path, request)
    board = Blackboard(backend, store=store, config=BlackboardConfig(flush_interval_s=0.0))
    own, hidden = AREAS[role]
    board.write([{"@id": "urn:hidden:secret", "summary": SECRETS[0]}], task=TASK, area=hidden)
    board.write([{"@id": "urn:other:secret", "summary": SECRETS[1]}], task=OTHER, area=own)
    board.write([{"@id": "urn:own:mine", "summary": "mine"}], task=TASK, area=own)
    text = (
        "PREFIX ex: <urn:ex:> SELECT ?o WHERE { VALUES ?z { ex:o\\# }"
        f" SERVICE <{oxigraph_server}/query> {{ GRAPH ?g {{ ?s ?p ?o }} }} }}"
    )
    # What the check prevents: the server runs a SERVICE to itself outside the dataset given.
    mine = area_graph(TASK, own)
    raw = httpx.post(
        f"{oxigraph_server}/query",
        content=text.replace("VALUES ?z { ex:o\\# }", "").encode(),
        params=[("default-graph-uri", mine), ("named-graph-uri", mine)],
        headers={"content-type": "application/sparql-query", "accept": "application/json"},
        timeout=30,
    )
    assert SECRETS[0] in raw.text
    assert SECRETS[1] in raw.text
    handle = board.agent(f"{role}-agent", role=role, task=TASK)
    for run in attempts(handle, text):
        refused(run)
    seen = handle.query("SELECT ?o WHERE { GRAPH ?g { ?s ?p ?o } }").values()
    assert {row["o"] for row in seen} >= {"mine"}
    assert not any(row["o"] in SECRETS for row in seen)
    board.close()


def test_a_frame_holding_a_disguised_service_is_refused() -> None:
    with pytest.raises(InvalidInputError, match="SERVICE"):
        Frame(
            "sneaky",
            "",
            "VALUES ?z { gh:o\\' } SERVICE <http://127.0.0.1:9/sparql> { ?node ?p ?o } #'",
            "?node ?p ?o .",
        )


# -- the dataset, the graphs, the paths -------------------------------------------------------

DATASET_CLAUSES = [
    f"SELECT ?o FROM <{HIDDEN}> WHERE {{ ?s ?p ?o }}",
    f"SELECT ?o FROM NAMED <{FOREIGN}> WHERE {{ GRAPH ?g {{ ?s ?p ?o }} }}",
    f"select ?o from <{HIDDEN}> where {{ ?s ?p ?o }}",
    f"SELECT ?o \\u0046ROM <{HIDDEN}> WHERE {{ ?s ?p ?o }}",
    f"ASK FROM <{OWN}> {{ ?s ?p ?o }}",
    f"CONSTRUCT {{ ?s ?p ?o }} FROM <{FOREIGN}> WHERE {{ ?s ?p ?o }}",
    f"DESCRIBE ?s FROM <{HIDDEN}> WHERE {{ ?s ?p ?o }}",
]


@pytest.mark.parametrize("text", DATASET_CLAUSES)
def test_a_dataset_clause_is_refused(agent: AgentHandle, text: str) -> None:
    for run in attempts(agent, aimed(agent, text)):
        assert "FROM" in str(refused(run, InvalidInputError))


FORBIDDEN_GRAPHS = [
    f"SELECT ?o WHERE {{ GRAPH <{HIDDEN}> {{ ?s ?p ?o }} }}",
    f"SELECT ?o WHERE {{ GRAPH <{FOREIGN}> {{ ?s ?p ?o }} }}",
    "SELECT ?o WHERE { GRAPH <urn:gliding-horse:meta> { ?s ?p ?o } }",
    "PREFIX g: <urn:gliding-horse:graph:> SELECT ?o WHERE"
    " { GRAPH g:plan:iri%3A%2F%2Ftask%2Ft2 { ?s ?p ?o } }",
    "PREFIX g: <urn:gliding-horse:graph:execution:> SELECT ?o WHERE"
    " { GRAPH g:iri%3A%2F%2Ftask%2Ft2 { ?s ?p ?o } }",
    f"BASE <{HIDDEN}> SELECT ?o WHERE {{ GRAPH <> {{ ?s ?p ?o }} }}",
    f"SELECT ?o WHERE {{ GRAPH \\u003C{FOREIGN}\\u003E {{ ?s ?p ?o }} }}",
    f"SELECT ?o WHERE {{ ?a ?b ?c OPTIONAL {{ GRAPH <{FOREIGN}> {{ ?s ?p ?o }} }} }}",
    f"SELECT ?o WHERE {{ FILTER EXISTS {{ GRAPH <{HIDDEN}> {{ ?s ?p ?o }} }} }}",
]


@pytest.mark.parametrize("text", FORBIDDEN_GRAPHS)
def test_graph_naming_a_forbidden_graph_is_refused(agent: AgentHandle, text: str) -> None:
    for run in attempts(agent, aimed(agent, text)):
        error = refused(run, PermissionDeniedError)
        assert isinstance(error, PermissionDeniedError)
        assert error.operation == "read"


READS_THAT_STAY_INSIDE = [
    "SELECT ?o WHERE { ?s ?p ?o }",
    "SELECT ?g ?o WHERE { GRAPH ?g { ?s ?p ?o } }",
    f"SELECT ?o WHERE {{ VALUES ?g {{ <{HIDDEN}> <{FOREIGN}> }} GRAPH ?g {{ ?s ?p ?o }} }}",
    f"SELECT ?o WHERE {{ GRAPH <{OWN}> {{ ?s ?p ?o }} }}",
    "SELECT ?o WHERE { ?s (<urn:x>|!<urn:x>)* ?o }",
    "SELECT ?o WHERE { GRAPH ?g { ?s (!<urn:none>)+ ?o } }",
    "SELECT ?o WHERE { ?s ^(!<urn:x>)/(!<urn:x>)* ?o }",
    "SELECT ?o WHERE { <urn:hidden:secret> !<urn:x> ?o }",
    "SELECT ?o WHERE { <urn:other:secret> (<urn:x>|!<urn:x>)? ?o }",
    "CONSTRUCT WHERE { ?s ?p ?o }",
    "DESCRIBE <urn:hidden:secret> <urn:other:secret>",
    "SELECT ?o WHERE { { SELECT ?o WHERE { GRAPH ?g { ?s ?p ?o } } } }",
    "SELECT (GROUP_CONCAT(STR(?o); SEPARATOR='|') AS ?all) WHERE { ?s ?p ?o }",
]


@pytest.mark.parametrize("text", READS_THAT_STAY_INSIDE)
def test_what_an_agent_may_run_reads_only_its_graphs(agent: AgentHandle, text: str) -> None:
    text = aimed(agent, text)
    result = agent.query(text)
    shown = str(result.values()) + " ".join(str(t) for t in result.triples)
    assert not any(secret in shown for secret in SECRETS), text
    assert "hunter2" not in str(board_tools.query(agent, text))
    assert "mine" in str(agent.query("SELECT ?o WHERE { ?s ?p ?o }").values())


# -- updates, unknown words, calls -------------------------------------------------------------

HIDDEN_UPDATES = [
    "INSERT DATA { GRAPH <urn:g> { <urn:a> <urn:b> 1 } }",
    "PREFIX ex: <urn:ex:> BASE <urn:b> INSERT DATA { <urn:a> <urn:b> 1 }",
    "# SELECT\nPREFIX ex: <urn:ex:> # '\nDELETE WHERE { GRAPH ?g { ?s ?p ?o } }",
    "\\u0044ELETE WHERE { GRAPH ?g { ?s ?p ?o } }",
    "prefix ex: <urn:ex:> clear all",
    f"DROP GRAPH <{HIDDEN}>",
    f"WITH <{OWN}> DELETE {{ ?s ?p ?o }} WHERE {{ ?s ?p ?o }}",
    "LOAD <http://127.0.0.1:9/data.ttl>",
    "SELECT * WHERE { ?s ?p ?o } ; INSERT DATA { <urn:a> <urn:b> 1 }",
    "SELECT * WHERE { ?s ?p ?o } INSERT DATA { <urn:a> <urn:b> 1 }",
    "ASK {} ; DELETE WHERE { GRAPH ?g { ?s ?p ?o } }",
    "PREFIX ex: <urn:ex:> SELECT ?o WHERE { VALUES ?z { ex:o\\# } } ; CLEAR ALL",
]


@pytest.mark.parametrize("text", HIDDEN_UPDATES)
def test_an_update_is_refused_and_changes_nothing(
    board: Blackboard, agent: AgentHandle, listener: Listener, text: str
) -> None:
    text = aimed(agent, text).replace("http://127.0.0.1:9/", f"http://127.0.0.1:{listener.port}/")
    before = store_state(board)
    for run in attempts(agent, text, system=True):
        refused(run)
    assert store_state(board) == before
    assert listener.connections() == 0


UNKNOWN = [
    "SELECT * WHERE { ?s ?p ?o } LATERAL { ?s ?p ?o }",
    "SELECT * WHERE { ?s ?p ?o BIND(ADJUST(?o, ?o) AS ?x) }",
    "SELECT * WHERE { ?s ?p ?o BIND(TRIPLE(?s, ?p, ?o) AS ?t) }",
    "SELECT * WHERE { ?s A ?o }",
    "SELECT * WHERE { ?s ?p ?o } frobnicate",
    "SELECT * WHERE { ?s ?p ?o FILTER(<http://127.0.0.1:9/f>(?o)) }",
    "PREFIX ex: <urn:ex:> SELECT * WHERE { ?s ?p ?o FILTER ex:f(?o) }",
    "PREFIX ex: <urn:ex:> SELECT (ex:count(?o) AS ?n) WHERE { ?s ?p ?o }",
    "PREFIX ex: <urn:ex:> SELECT * WHERE { ?s ?p ?o } ORDER BY ex:f(?o)",
    "SELECT * WHERE { ?s ?p ?o } # fine\n \\",
    "SELECT * WHERE { ?s ?p 'unclosed }",
    "SELECT * WHERE { ?s <urn:a b> ?o }",
    "SELECT * WHERE { ?s ?p ?o ",
    "SELECT * WHERE { ?s ?p ?o ] }",
    "SELECT * WHERE { ?s ?p ?o } }",
    "SELECT * WHERE { ?s ?p ?unbound . <relative> ?p ?o }",
    "SELECT * WHERE { ?s ex:p ?o }",
    "SELECT * WHERE { ?s ?p \\uD800 }",
    "VERSION '1.2' SELECT * WHERE { ?s ?p ?o }",
    "\u017fELECT * WHERE { ?s ?p ?o }",
]


@pytest.mark.parametrize("text", UNKNOWN)
def test_what_the_check_does_not_know_is_refused(
    agent: AgentHandle, listener: Listener, text: str
) -> None:
    text = text.replace("http://127.0.0.1:9/", f"http://127.0.0.1:{listener.port}/")
    for run in attempts(agent, text, system=True):
        refused(run, InvalidInputError)
    assert listener.connections() == 0
