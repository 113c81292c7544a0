"""Cache hits of a board at a SPARQL server: no lock, and never older than another process's write.

Two boards over one ``oxigraph serve`` and one SQLite coherence directory (each with its own
connection and its own mapping of the change counter) stand in for two processes of one
machine. A board's node cache serves an entry only while the shared change counter equals the
token the entry was vouched at; the hit itself is one look-up of an immutable entry (value
and stamp together), so no lock is taken. The readers here go through ``Blackboard.read`` as
well as agent handles: the system read has no coordinator behind it to catch a stale entry.
"""

from __future__ import annotations

import functools
import sys
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from gliding_core.blackboard.board import Blackboard
from gliding_core.blackboard.graph import SparqlEndpoint
from gliding_core.blackboard.records import BoardNode
from gliding_core.coherence import SQLiteDirectory
from gliding_core.config import BlackboardConfig

TASK = "iri://task/shared-hits"
IRI = "urn:test:shared-hits:n"
QUIET = BlackboardConfig(flush_interval_s=0.0)


class RefusedLock:
    """A lock that fails the test when taken."""

    def __enter__(self) -> None:
        raise AssertionError("a cache hit took the cache lock")

    def __exit__(self, *exc: object) -> None:
        return None


@pytest.fixture
def boards(oxigraph_server: str, tmp_path: Path) -> Iterator[tuple[Blackboard, Blackboard]]:
    """Two boards on one server and one directory file: "here" and the other process."""
    first = SparqlEndpoint(oxigraph_server)
    first.update("CLEAR ALL")
    path = tmp_path / "coherence.sqlite3"
    here = Blackboard(first, config=QUIET, directory=SQLiteDirectory(path))
    there = Blackboard(
        SparqlEndpoint(oxigraph_server), config=QUIET, directory=SQLiteDirectory(path)
    )
    with here, there:
        assert here.nodes.check is not None, "a server board's cache must be checked"
        yield here, there


def step(text: str, iri: str = IRI) -> dict[str, Any]:
    return {"@id": iri, "@type": "Step", "text": text}


def test_a_hit_on_a_server_board_takes_no_lock(boards: tuple[Blackboard, Blackboard]) -> None:
    here, _ = boards
    reader = here.agent("reader", role="do", task=TASK)
    reader.write([step("s")], area="execution")
    assert reader.read(IRI) is not None  # vouched: the next look-up is a hit
    lock = here.nodes._cache_lock
    here.nodes._cache_lock = RefusedLock()  # type: ignore[assignment]
    try:
        node = reader.read(IRI)
        assert node is not None
        assert node.node["text"] == "s"
        assert here.read(IRI) == node
    finally:
        here.nodes._cache_lock = lock


def test_a_handle_hit_reads_the_shared_counter_once(
    boards: tuple[Blackboard, Blackboard], monkeypatch: pytest.MonkeyPatch
) -> None:
    here, _ = boards
    reader = here.agent("reader", role="do", task=TASK)
    reader.write([step("s")], area="execution")
    assert reader.read(IRI) is not None  # vouched: the next read is a hit in both layers
    directory = here.coherence.directory
    assert isinstance(directory, SQLiteDirectory)
    counter = directory._epoch
    reads: list[int] = []

    def counted() -> int:
        value = type(counter).value(counter)
        reads.append(value)
        return value

    monkeypatch.setattr(counter, "value", counted)
    node = reader.read(IRI)
    assert node is not None
    assert node.node["text"] == "s"
    assert len(reads) == 1, "the cache's entry and the agent's copy are vouched by one read"


def test_a_hit_never_serves_a_node_older_than_the_other_boards_write(
    boards: tuple[Blackboard, Blackboard],
) -> None:
    here, there = boards
    mine = here.agent("mine", role="do", task=TASK)
    theirs = there.agent("theirs", role="do", task=TASK)
    generation = mine.write([step("1")], area="execution")[0].generation
    for round_ in range(4):
        for _ in range(2):  # the second read is a hit on the entry the first one vouched
            system = here.read(IRI)
            assert system is not None
            assert (system.generation, system.node["text"]) == (generation, str(generation))
            node = mine.read(IRI)
            assert node is not None
            assert node.generation == generation
        assert here.nodes.cached(IRI)
        written = theirs.write([step(str(generation + 1))], area="execution", based_on=generation)
        generation = written[0].generation
        after = here.read(IRI)  # the cache still holds the older node: it must not be served
        assert after is not None
        assert (after.generation, after.node["text"]) == (generation, str(generation))
        if round_ % 2:  # and a write of this board, read back by the other
            generation = mine.write([step(str(generation + 1))], area="execution")[0].generation
            back = there.read(IRI)
            assert back is not None
            assert back.generation == generation
    generation = mine.write([step(str(generation + 1))], area="execution")[0].generation
    theirs.write([step(str(generation + 1))], area="execution", based_on=generation)
    overwritten = here.read(IRI)  # the entry this board wrote is not current any more either
    assert overwritten is not None
    generation += 1
    assert (overwritten.generation, overwritten.node["text"]) == (generation, str(generation))
    assert there.delete([IRI]) == 1
    for _ in range(2):  # the second read is a hit on the tombstone the first one vouched
        assert here.read(IRI) is None
        assert mine.read(IRI) is None
    again = theirs.write([step("again")], area="execution")[0]
    assert again.generation == generation + 1  # a rewrite continues the tombstone's generation
    back = here.read(IRI)
    assert back is not None
    assert (back.generation, back.node["text"]) == (again.generation, "again")


class PreemptedCache(OrderedDict[str, Any]):
    """A node cache whose next look-up is followed, before it returns, by ``then()``.

    It puts a thread switch right after a hit's look-up, where another thread refreshing
    the entry would pair an older value with a newer stamp if the two were read apart.
    """

    then: Callable[[], None] | None = None

    def get(self, key: str, default: Any = None) -> Any:
        found = super().get(key, default)
        then, self.then = self.then, None
        if then is not None:
            then()
        return found


def _on_another_thread(work: Callable[[], object]) -> Callable[[], None]:
    def run() -> None:
        thread = threading.Thread(target=work)
        thread.start()
        thread.join(timeout=10)  # a reader holding a lock would make it wait: then it runs later

    return run


def test_a_hit_switched_out_after_its_look_up_serves_nothing_older(
    boards: tuple[Blackboard, Blackboard],
) -> None:
    here, there = boards
    theirs = there.agent("theirs", role="do", task=TASK)
    theirs.write([step("1")], area="execution")
    assert here.read(IRI) is not None
    assert here.read(IRI) is not None  # a hit: the entry is vouched
    theirs.write([step("2")], area="execution", based_on=1)
    cache = PreemptedCache(here.nodes._cache)
    here.nodes._cache = cache
    # The reader takes the token (which covers generation 2), looks up the entry holding
    # generation 1, and is switched out while another thread reads the node again, which
    # caches generation 2 vouched by that same token.
    cache.then = _on_another_thread(lambda: here.nodes.get_many([IRI]))
    node = here.read(IRI)
    assert node is not None
    assert (node.generation, node.node["text"]) == (2, "2")


def test_a_vouch_stamps_only_the_entry_it_checked(
    boards: tuple[Blackboard, Blackboard], monkeypatch: pytest.MonkeyPatch
) -> None:
    here, there = boards
    theirs = there.agent("theirs", role="do", task=TASK)
    theirs.write([step("1")], area="execution")
    load, release, loaded = here.nodes._load, threading.Event(), threading.Event()

    def slow_load(iris: Any) -> Any:
        found = load(iris)
        if threading.current_thread().name == "late":  # read generation 1, then wait
            loaded.set()
            release.wait(timeout=10)
        return found

    monkeypatch.setattr(here.nodes, "_load", slow_load)
    late = threading.Thread(target=lambda: here.read(IRI), name="late")
    late.start()
    assert loaded.wait(timeout=10)
    theirs.write([step("2")], area="execution", based_on=1)
    assert here.read(IRI) is not None  # generation 2, cached and vouched
    theirs.write([step("x", "urn:test:shared-hits:other")], area="execution")  # counter moves
    check = here.nodes.check
    assert check is not None
    vouch = check.vouch

    def vouch_then_overtaken(*args: Any) -> Any:
        vouched = vouch(*args)  # generation 2 is current: vouched at the new counter
        release.set()  # meanwhile the late read caches generation 1 (stamped before it read)
        late.join(timeout=10)
        return vouched

    monkeypatch.setattr(check, "vouch", vouch_then_overtaken)
    node = here.read(IRI)
    assert node is not None
    assert node.generation == 2
    monkeypatch.setattr(check, "vouch", vouch)
    for _ in range(2):  # the late entry must not have been given the vouch for generation 2
        again = here.read(IRI)
        assert again is not None
        assert (again.generation, again.node["text"]) == (2, "2")


def _reader(
    read: Callable[[], BoardNode | None],
    committed: list[int],
    done: threading.Event,
    failures: list[str],
) -> Callable[[], None]:
    """A loop that checks every read against the last write committed before it began.

    Not that a reader's generations never go down: at a server the other board's write is in
    the store before its directory transaction commits, so a read may see it early, and a
    later one the last committed generation (still no older than the floor).
    """

    def loop() -> None:
        while not done.is_set():
            floor = committed[0]
            node = read()
            if node is None:
                failures.append("the node was not found")
                return
            text = node.node["text"]
            if node.generation < floor or text != str(node.generation):
                failures.append(
                    f"read generation {node.generation} ({text!r}) after generation {floor} was"
                    " committed by the other board"
                )
                return

    return loop


def test_threads_never_read_older_than_a_write_the_other_board_committed(
    boards: tuple[Blackboard, Blackboard],
) -> None:
    here, there = boards
    writer = there.agent("writer", role="do", task=TASK)
    generation = writer.write([step("1")], area="execution")[0].generation
    committed, done = [generation], threading.Event()
    failures: list[str] = []
    handles = [here.agent(f"reader-{i}", role="do", task=TASK) for i in range(2)]
    reads: list[Callable[[], BoardNode | None]] = [lambda: here.read(IRI)] * 2
    reads += [functools.partial(handle.read, IRI) for handle in handles]
    local = here.agent("local", role="do", task=TASK)  # own changes move the counter too

    def write_here() -> None:
        count = 0
        while not done.is_set():
            count += 1
            local.write([step(str(count), "urn:test:shared-hits:other")], area="execution")

    threads = [threading.Thread(target=_reader(r, committed, done, failures)) for r in reads]
    threads.append(threading.Thread(target=write_here))
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)  # thread switches inside the read path, not between reads
    try:
        for thread in threads:
            thread.start()
        for _ in range(60):
            [node] = writer.write(
                [step(str(generation + 1))], area="execution", based_on=generation
            )
            generation = committed[0] = node.generation
            if failures:
                break
    finally:
        done.set()
        for thread in threads:
            thread.join()
        sys.setswitchinterval(interval)
    assert failures == []
    last = here.read(IRI)
    assert last is not None
    assert last.generation == generation
