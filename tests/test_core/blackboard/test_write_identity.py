"""Writes with an identity: a write whose reply was lost says so, and its retry is recognised.

A real ``oxigraph serve`` behind a loopback TCP proxy (``lossy_proxy``, the network edge): the
proxy forwards each HTTP request to the server and can, for the next SPARQL update, drop the
server's reply after the server answered (the write landed), drop the request before the
server sees it (it did not), or answer for the server as a gateway that gave up (504). The
blackboard at the proxy shares the server and a SQLite coherence directory with other boards,
and with another process (``board_child.py``) in one test. An embedded board with a SQLite
directory loses its outcome when the directory fails after the store took the write (a
trigger in the directory's real database fails it).
"""

from __future__ import annotations

import json
import socket
import sqlite3
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path
from typing import Any

import pyoxigraph as ox
import pytest

from gliding_core import EventType, Memory, MemoryConfig
from gliding_core.blackboard.graph import EmbeddedGraph, SparqlEndpoint, quads_text
from gliding_core.blackboard.handle import AgentHandle
from gliding_core.blackboard.records import BoardNode, Tombstone
from gliding_core.blackboard.vocabulary import area_graph, meta
from gliding_core.blackboard.writeids import WRITES_KEPT
from gliding_core.coherence import LocalDirectory, SQLiteDirectory
from gliding_core.coherence.directory import Directory
from gliding_core.config import BlackboardConfig
from gliding_core.errors import (
    InvalidInputError,
    StaleWriteError,
    StorageError,
    WriteOutcomeUnknownError,
)
from gliding_core.store.entry import MesiState
from gliding_core.tools import board_tools
from tests.test_core.lossy_proxy import IRI, TASK, Board, Proxy, emptied, node_at, step, stored

CHILD = Path(__file__).with_name("board_child.py")


@pytest.fixture
def server(oxigraph_server: str) -> str:
    """The session's ``oxigraph serve``, emptied."""
    return emptied(oxigraph_server)


@pytest.fixture
def proxy(server: str) -> Iterator[Proxy]:
    value = Proxy(server)
    yield value
    value.close()


@pytest.fixture
def bb(proxy: Proxy, tmp_path: Path) -> Iterator[Board]:
    """A board at the proxy, with a SQLite coherence directory."""
    directory = SQLiteDirectory(tmp_path / "coherence.sqlite3")
    value = Board(SparqlEndpoint(proxy.url), directory)
    yield value
    value.close()


# -- a lost reply ------------------------------------------------------------------------------


@pytest.mark.parametrize("how", ["reply", "reset"])
def test_a_lost_reply_raises_outcome_unknown_naming_the_write(
    bb: Board, proxy: Proxy, server: str, how: str
) -> None:
    a = bb.agent("a")
    a.write([step("one")], area="execution", based_on=0)
    proxy.lose(how)
    with pytest.raises(WriteOutcomeUnknownError) as unknown:
        a.write([step("two")], area="execution", based_on=1)
    error = unknown.value
    assert isinstance(error, StorageError)  # a generic handler of storage failures catches it
    assert isinstance(error.write_id, str)
    assert error.iris == (IRI,)
    message = str(error)
    assert error.write_id in message
    assert f"write_id={error.write_id!r}" in message  # how to resolve it
    landed = node_at(server)  # the server has the write, with its id
    assert (landed.generation, landed.node["text"], landed.write_id) == (2, "two", error.write_id)
    # Nothing of this process serves the value from before the write as current.
    for read in (a.read(IRI), bb.board.read(IRI), bb.agent("b").read(IRI)):
        assert read is not None
        assert (read.generation, read.node["text"]) == (2, "two")


def test_retrying_a_write_that_landed_returns_the_committed_node_once(
    bb: Board, proxy: Proxy, server: str
) -> None:
    a = bb.agent("a")
    [first] = a.write([step("one")], area="execution", based_on=0)
    proxy.lose("reply")
    with pytest.raises(WriteOutcomeUnknownError) as unknown:
        a.write([step("two")], area="execution", based_on=1)
    wid = unknown.value.write_id
    # The same write again, based on the same generation: not stale against itself.
    [again] = a.write([step("two")], area="execution", based_on=1, write_id=wid)
    assert (again.generation, again.node["text"], again.write_id) == (2, "two", wid)
    [twice] = a.write([step("two")], area="execution", based_on=1, write_id=wid)
    assert twice.generation == 2
    landed = node_at(server)  # written once: no second increment, the id listed once
    assert (landed.generation, landed.writes) == (2, (wid, first.write_id))
    [next_one] = a.write([step("three")], area="execution", based_on=2)
    assert next_one.generation == 3


@pytest.mark.parametrize("how", ["request", "gateway"])
def test_retrying_a_write_that_may_not_have_landed(
    bb: Board, proxy: Proxy, server: str, how: str
) -> None:
    a = bb.agent("a")
    a.write([step("one")], area="execution", based_on=0)
    proxy.lose(how)
    with pytest.raises(WriteOutcomeUnknownError) as unknown:
        a.write([step("two")], area="execution", based_on=1)
    wid = unknown.value.write_id
    expected = 1 if how == "request" else 2  # the gateway forwarded it: it landed
    assert node_at(server).generation == expected
    read = a.read(IRI)
    assert read is not None
    assert read.generation == expected
    [again] = a.write([step("two")], area="execution", based_on=1, write_id=wid)
    assert (again.generation, again.write_id) == (2, wid)  # applied once, either way
    [twice] = a.write([step("two")], area="execution", based_on=1, write_id=wid)
    assert twice.generation == 2
    landed = node_at(server)
    assert (landed.generation, landed.node["text"], landed.write_id) == (2, "two", wid)


def test_a_write_that_did_not_land_is_retried_into_a_stale_refusal_when_the_node_moved(
    bb: Board, proxy: Proxy, server: str
) -> None:
    a, b = bb.agent("a"), bb.agent("b")
    a.write([step("one")], area="execution", based_on=0)
    proxy.lose("request")
    with pytest.raises(WriteOutcomeUnknownError) as unknown:
        a.write([step("two")], area="execution", based_on=1)
    b.write([step("b's")], area="execution", based_on=1)  # the node was still at 1
    with pytest.raises(StaleWriteError) as refused:  # refused against b's write, not its own
        a.write([step("two")], area="execution", based_on=1, write_id=unknown.value.write_id)
    assert (refused.value.current_generation, refused.value.current_value) == (2, step("b's"))


def test_the_retry_reports_the_landed_write_not_the_next_writers(
    bb: Board, proxy: Proxy, server: str
) -> None:
    a, b = bb.agent("a"), bb.agent("b")
    a.write([step("one")], area="execution", based_on=0)
    assert b.read(IRI) is not None
    proxy.lose("reply")
    with pytest.raises(WriteOutcomeUnknownError) as unknown:
        a.write([step("two")], area="execution", based_on=1)
    with pytest.raises(StaleWriteError) as refused:  # b cannot overwrite it unseen
        b.write([step("b's")], area="execution", based_on=1)
    assert refused.value.current_generation == 2
    b.write([step("b's")], area="execution", based_on=2)
    [again] = a.write([step("two")], area="execution", based_on=1, write_id=unknown.value.write_id)
    assert (again.generation, again.node["text"]) == (2, "two")
    now = node_at(server)  # b's write stays the current one
    assert (now.generation, now.node["text"]) == (3, "b's")
    read = a.read(IRI)
    assert read is not None
    assert (read.generation, read.node["text"]) == (3, "b's")


def test_other_agents_see_the_landed_generation(proxy: Proxy, server: str, tmp_path: Path) -> None:
    """Two boards sharing the server and the directory, as processes of one machine do."""
    directory = tmp_path / "coherence.sqlite3"
    here = Board(SparqlEndpoint(proxy.url), SQLiteDirectory(directory))
    there = Board(SparqlEndpoint(server), SQLiteDirectory(directory))
    try:
        a, b, c = here.agent("a"), here.agent("b"), there.agent("c")
        a.write([step("one")], area="execution", based_on=0)
        for reader in (b, c):
            assert reader.read(IRI) is not None
        assert there.board.read(IRI) is not None  # its cache entry vouched at the current token
        assert here.copies(IRI) == dict.fromkeys("abc", MesiState.SHARED)
        proxy.lose("reply")
        with pytest.raises(WriteOutcomeUnknownError) as unknown:
            a.write([step("two")], area="execution", based_on=1)
        # The other board cached generation 1; its writer must not overwrite the landed write.
        with pytest.raises(StaleWriteError) as refused:
            c.write([step("c's")], area="execution", based_on=1)
        assert refused.value.current_generation == 2
        [again] = a.write(
            [step("two")], area="execution", based_on=1, write_id=unknown.value.write_id
        )
        assert again.generation == 2
        for reader in (b, c):
            read = reader.read(IRI)
            assert read is not None
            assert (read.generation, read.node["text"]) == (2, "two")
        system = there.board.read(IRI)
        assert system is not None
        assert system.generation == 2
        assert there.board.coherence.directory.record(IRI).generation == 2
        [last] = c.write([step("c's")], area="execution", based_on=2)
        assert last.generation == 3
        read = a.read(IRI)
        assert read is not None
        assert (read.generation, read.node["text"]) == (3, "c's")
    finally:
        here.close()
        there.close()


def test_another_process_cannot_overwrite_a_write_whose_reply_was_lost(
    proxy: Proxy, server: str, tmp_path: Path
) -> None:
    folder = tmp_path / "shared"
    board = BlackboardConfig(endpoint=proxy.url, flush_interval_s=0.0)
    config = MemoryConfig(embedder="hash", blackboard=board)
    with Memory.open(folder, config=config, engines=False) as memory:
        memory.blackboard.coordination.tasks.register(TASK)  # type: ignore[union-attr]
        here = memory.agent("here", role="do", task=TASK)
        here.write([step("one")], area="execution", based_on=0)
        child = subprocess.Popen(
            [sys.executable, str(CHILD), str(folder), server, TASK],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert child.stdin is not None
        assert child.stdout is not None

        def run(op: str, **args: Any) -> dict[str, Any]:
            assert child.stdin is not None
            assert child.stdout is not None
            child.stdin.write(json.dumps({"op": op, "iri": IRI, **args}) + "\n")
            child.stdin.flush()
            answer: dict[str, Any] = json.loads(child.stdout.readline())
            return answer

        try:
            assert run("read") == {"generation": 1, "text": "one"}  # the child caches it,
            assert run("system_read") == {"generation": 1, "text": "one"}  # vouched as current
            proxy.lose("reply")
            with pytest.raises(WriteOutcomeUnknownError) as unknown:
                here.write([step("two")], area="execution", based_on=1)
            refused = run("write", text="there", based_on=1)
            assert refused == {"error": "StaleWriteError", "current_generation": 2}
            [again] = here.write(
                [step("two")], area="execution", based_on=1, write_id=unknown.value.write_id
            )
            assert again.generation == 2
            assert run("read") == {"generation": 2, "text": "two"}
            assert run("write", text="there", based_on=2) == {"generation": 3}
        finally:
            child.communicate(timeout=60)  # closes its stdin: it ends, and its pipes are closed
        assert node_at(server).node["text"] == "there"


# -- what a retry carries ------------------------------------------------------------------------


def test_a_retry_of_nodes_without_ids_mints_the_same_iris(
    bb: Board, proxy: Proxy, server: str
) -> None:
    a = bb.agent("a")
    nodes = [{"@type": "Step", "text": "first"}, {"@type": "Step", "text": "second"}]
    proxy.lose("reply")
    with pytest.raises(WriteOutcomeUnknownError) as unknown:
        a.write(nodes, area="execution")
    iris = unknown.value.iris
    assert len(iris) == 2
    written = a.write(nodes, area="execution", write_id=unknown.value.write_id)
    assert tuple(n.iri for n in written) == iris
    assert [n.generation for n in written] == [1, 1]
    graph = area_graph(TASK, "execution")
    assert sorted(n.iri for n in bb.board.by_graph(graph)) == sorted(iris)  # no duplicates


def test_a_write_id_given_to_another_write_is_refused(bb: Board, proxy: Proxy) -> None:
    a = bb.agent("a")
    [first] = a.write([step("one")], area="execution", write_id="mine-1")
    assert first.write_id == "mine-1"
    with pytest.raises(InvalidInputError, match="mine-1"):
        a.write([step("other")], area="execution", write_id="mine-1")
    read = a.read(IRI)
    assert read is not None
    assert (read.generation, read.node["text"]) == (1, "one")
    with pytest.raises(InvalidInputError, match="mine-1"):  # nor in another area
        a.write([step("one")], area="plan", write_id="mine-1")


@pytest.mark.parametrize(
    "write_id",
    ["", " ", "-starts-with-a-dash", "has space", "x" * 101, "line\nbreak", "é", 5, b"bytes", []],
)
def test_a_bad_write_id_is_refused_before_anything_is_written(
    bb: Board, proxy: Proxy, write_id: Any
) -> None:
    a = bb.agent("a")
    updates = proxy.updates  # (the agent's registration is mirrored into the graph)
    with pytest.raises(InvalidInputError, match="write_id"):
        a.write([step("one")], area="execution", write_id=write_id)
    with pytest.raises(InvalidInputError, match="write_id"):
        a.delete([IRI], write_id=write_id)
    with pytest.raises(InvalidInputError, match="write_id"):
        bb.board.write([step("one")], task=TASK, area="execution", write_id=write_id)
    assert a.read(IRI) is None
    assert proxy.updates == updates


def test_a_retried_delete_that_landed_deletes_nothing_more(
    bb: Board, proxy: Proxy, server: str
) -> None:
    a = bb.agent("a")
    a.write([step("one"), step("other", "urn:n:other")], area="execution")
    proxy.lose("reply")
    with pytest.raises(WriteOutcomeUnknownError) as unknown:
        a.delete([IRI, "urn:n:absent"])
    assert "handle.delete" in str(unknown.value)
    assert isinstance(stored(server), Tombstone)
    assert a.read(IRI) is None  # not the cached node
    [again] = a.write([step("again")], area="execution")  # written again since: generation 2
    assert a.delete([IRI, "urn:n:absent"], write_id=unknown.value.write_id) == 1
    assert node_at(server).writes[:2] == (again.write_id, "-" + str(unknown.value.write_id))
    read = a.read(IRI)  # the node written since stays
    assert read is not None
    assert (read.generation, read.node["text"]) == (2, "again")


def test_a_retried_delete_that_did_not_land_deletes_once(
    bb: Board, proxy: Proxy, server: str
) -> None:
    a = bb.agent("a")
    a.write([step("one")], area="execution")
    proxy.lose("request")
    with pytest.raises(WriteOutcomeUnknownError) as unknown:
        a.delete([IRI])
    assert isinstance(stored(server), BoardNode)
    assert a.delete([IRI], write_id=unknown.value.write_id) == 1
    assert a.delete([IRI], write_id=unknown.value.write_id) == 1
    assert isinstance(stored(server), Tombstone)


def test_the_systems_write_retries_the_same_way(bb: Board, proxy: Proxy, server: str) -> None:
    proxy.lose("reply")
    with pytest.raises(WriteOutcomeUnknownError) as unknown:
        bb.board.write([step("one")], task=TASK, area="execution")
    [again] = bb.board.write(
        [step("one")], task=TASK, area="execution", write_id=unknown.value.write_id
    )
    assert again.generation == 1
    assert node_at(server).generation == 1


def test_views_of_a_doubted_node_are_invalidated_and_its_landing_announced(
    bb: Board, proxy: Proxy
) -> None:
    seen: list[tuple[str, dict[str, Any]]] = []
    bb.bus.subscribe(lambda e: seen.append((e.type, dict(e.payload))))
    a = bb.agent("a")
    a.write([step("one")], area="execution")
    proxy.lose("reply")
    seen.clear()
    with pytest.raises(WriteOutcomeUnknownError) as unknown:
        a.write([step("two")], area="execution")
    assert (EventType.CACHE_INVALIDATE, {"iris": [IRI]}) in seen
    assert not [kind for kind, _ in seen if kind == EventType.NODE_UPDATED]
    a.write([step("two")], area="execution", write_id=unknown.value.write_id)
    updated = [payload for kind, payload in seen if kind == EventType.NODE_UPDATED]
    assert [(p["iri"], p["generation"]) for p in updated] == [(IRI, 2)]


def test_concurrent_writers_each_learn_their_own_write_id(proxy: Proxy, tmp_path: Path) -> None:
    """Writes committed together (one store update for a group) all lose the one reply."""
    bb = Board(SparqlEndpoint(proxy.url), SQLiteDirectory(tmp_path / "coherence.sqlite3"))
    try:
        handles = [bb.agent(f"w{i}") for i in range(6)]
        start = threading.Barrier(len(handles))
        outcomes: dict[str, object] = {}
        proxy.lose("reply")

        def write(handle: AgentHandle) -> None:
            start.wait()
            iri = f"urn:n:{handle.name}"
            try:
                outcomes[iri] = handle.write([step(handle.name, iri)], area="execution")
            except WriteOutcomeUnknownError as exc:
                outcomes[iri] = exc

        threads = [threading.Thread(target=write, args=(h,)) for h in handles]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        unknown = {iri: e for iri, e in outcomes.items() if isinstance(e, Exception)}
        assert unknown  # the lost reply reached the writers of its group
        assert len({e.write_id for e in unknown.values()}) == len(unknown)
        for iri, error in unknown.items():
            assert isinstance(error, WriteOutcomeUnknownError)
            assert error.iris == (iri,)
            handle = next(h for h in handles if f"urn:n:{h.name}" == iri)
            retried = [step(handle.name, iri)]
            [node] = handle.write(retried, area="execution", write_id=error.write_id)
            assert (node.generation, node.write_id) == (1, error.write_id)
        for handle in handles:
            read = handle.read(f"urn:n:{handle.name}")
            assert read is not None
            assert read.generation == 1
    finally:
        bb.close()


# -- where nothing was sent, and the embedded board ----------------------------------------------


def test_an_update_that_never_left_is_a_plain_storage_error(tmp_path: Path) -> None:
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    with (
        closing(SparqlEndpoint(f"http://127.0.0.1:{port}")) as endpoint,
        pytest.raises(StorageError) as failed,
    ):
        endpoint.update("INSERT DATA { <urn:a> <urn:b> <urn:c> }")
    assert not isinstance(failed.value, WriteOutcomeUnknownError)


def test_an_embedded_write_whose_directory_failed_after_the_store_took_it(tmp_path: Path) -> None:
    path = tmp_path / "coherence.sqlite3"
    bb = Board(EmbeddedGraph(), SQLiteDirectory(path))
    try:
        a, b = bb.agent("a"), bb.agent("b")
        with closing(sqlite3.connect(path)) as disk:  # the directory's disk fails for this node
            disk.execute(
                "CREATE TRIGGER full BEFORE INSERT ON coherence_nodes WHEN NEW.iri = 'urn:n:doubt'"
                " BEGIN SELECT RAISE(ABORT, 'database or disk is full'); END"
            )
            disk.commit()
        with pytest.raises(WriteOutcomeUnknownError) as unknown:
            a.write([step("one")], area="execution", based_on=0)
        assert "disk is full" in str(unknown.value)
        system = bb.board.read(IRI)  # the store has it: reads show it
        assert system is not None
        assert system.generation == 1
        with closing(sqlite3.connect(path)) as disk:
            disk.execute("DROP TRIGGER full")
            disk.commit()
        read = b.read(IRI)
        assert read is not None
        assert read.generation == 1
        [again] = a.write(
            [step("one")], area="execution", based_on=0, write_id=unknown.value.write_id
        )
        assert (again.generation, again.write_id) == (1, unknown.value.write_id)
        assert bb.board.coherence.directory.record(IRI).generation == 1
        assert bb.copies(IRI).get("b") is not MesiState.SHARED  # b's copy went with the move
        [next_one] = b.write([step("two")], area="execution", based_on=1)
        assert next_one.generation == 2
    finally:
        bb.close()


def test_a_retry_past_the_kept_ids_is_not_taken_for_landed(bb: Board, proxy: Proxy) -> None:
    a, b = bb.agent("a"), bb.agent("b")
    a.write([step("one")], area="execution", based_on=0)
    proxy.lose("reply")
    with pytest.raises(WriteOutcomeUnknownError) as unknown:
        a.write([step("two")], area="execution", based_on=1)
    for generation in range(2, 2 + WRITES_KEPT):  # its id leaves the node's record
        b.write([step(f"b{generation}")], area="execution", based_on=generation)
    with pytest.raises(StaleWriteError):  # based on 1: refused, not written twice
        a.write([step("two")], area="execution", based_on=1, write_id=unknown.value.write_id)


@pytest.mark.parametrize("forged", [['x", "injected'], ["fine", 5], "not-a-list", ["a b"]])
def test_a_record_listing_anything_but_ids_is_read_without_them(forged: Any) -> None:
    bb = Board(EmbeddedGraph(), LocalDirectory())
    try:
        a = bb.agent("a")
        [first] = a.write([step("one")], area="execution")
        assert first.write_id is not None
        backend = bb.board.backend
        [quad] = [q for q in backend.quads_about([IRI], [meta("dirty")])]
        record = json.loads(quad.object.value)  # type: ignore[union-attr]
        record["writes"] = forged
        forged = ox.Quad(
            quad.subject, quad.predicate, ox.Literal(json.dumps(record)), quad.graph_name
        )
        backend.update(
            f"DELETE DATA {{ {quads_text([quad])} }} ; INSERT DATA {{ {quads_text([forged])} }}"
        )
        bb.board.nodes.forget_cache()
        read = a.read(IRI)
        assert read is not None
        assert (read.generation, read.writes) == (1, ())
        [second] = a.write([step("two")], area="execution", based_on=1)
        assert second.writes == (second.write_id,)
        bb.board.nodes.forget_cache()
        again = a.read(IRI)
        assert again is not None
        assert (again.generation, again.writes) == (2, (second.write_id,))
    finally:
        bb.close()


@pytest.mark.parametrize("kind", ["local", "sqlite"])
def test_touch_moves_the_directory_token_and_changes_no_record(kind: str, tmp_path: Path) -> None:
    directory: Directory = (
        LocalDirectory() if kind == "local" else SQLiteDirectory(tmp_path / "c.sqlite3")
    )
    try:
        directory.update_many([IRI], lambda r: ({IRI: r[IRI].at(3, {"@id": IRI})}, None))
        before, token = directory.snapshot(IRI)
        moved = directory.touch()
        assert moved != token
        assert directory.token() == moved
        after, vouched = directory.snapshot(IRI)
        assert after == before
        assert vouched == moved
    finally:
        directory.close()


# -- through the tools: the write_node tool retries once, by the write's id ------------------------


@pytest.mark.parametrize("how", ["reply", "reset", "gateway", "request"])
def test_the_write_node_tool_retries_a_lost_outcome_and_returns_the_committed_node(
    bb: Board, proxy: Proxy, server: str, how: str
) -> None:
    a = bb.agent("a")
    board_tools.write_node(a, step("one"), area="execution", based_on=0)
    first = node_at(server).write_id
    proxy.lose(how)
    result = board_tools.write_node(a, step("two"), area="execution", based_on=1)
    assert (result["found"], result["generation"], result["value"]) == (True, 2, step("two"))
    landed = node_at(server)  # applied once: one increment, the write's id listed once
    assert (landed.generation, landed.node["text"]) == (2, "two")
    assert landed.writes == (landed.write_id, first)
    after = board_tools.write_node(a, step("three"), area="execution", based_on=2)
    assert after["generation"] == 3


def test_the_write_node_tool_says_the_outcome_is_unknown_when_its_retry_is_lost_too(
    bb: Board, proxy: Proxy, server: str
) -> None:
    a = bb.agent("a")
    board_tools.write_node(a, step("one"), area="execution", based_on=0)
    proxy.lose("request")
    proxy.lose("request")
    with pytest.raises(WriteOutcomeUnknownError) as unknown:
        board_tools.write_node(a, step("two"), area="execution", based_on=1)
    error = unknown.value
    assert error.iris == (IRI,)
    assert isinstance(error.__cause__, WriteOutcomeUnknownError)
    assert error.write_id == error.__cause__.write_id  # the retry was the same write
    text = board_tools.board_refusal(error)
    assert text.startswith("Error: the outcome of this write is unknown")
    assert repr(IRI) in text
    assert "read_node" in text
    assert node_at(server).generation == 1  # neither attempt reached the server
    # The model reads the node, as told, and writes again: once.
    read = board_tools.read_node(a, IRI)
    assert read["generation"] == 1
    again = board_tools.write_node(a, step("two"), area="execution", based_on=1)
    assert again["generation"] == 2
    assert node_at(server).generation == 2
