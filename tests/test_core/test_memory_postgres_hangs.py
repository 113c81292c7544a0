"""Memory on PostgreSQL when the server hangs with its connections open.

A server that closes its connections fails a call at once (``test_memory_postgres_faults``);
one that is stopped, paused or cut off by the network answers nothing and closes nothing. The
tests put a TCP proxy of their own between the memory and the session's server (the network
edge): while it is paused it forwards no byte either way and accepts no new connection, as a
partitioned or stopped server looks to its clients, and when it resumes it forwards what it
held. A call made meanwhile must end with a typed error, the same memory must work again once
the proxy resumes, and a statement that waits on a live server (a lock held elsewhere) must not
be taken for a hang.
"""

from __future__ import annotations

import contextlib
import json
import socket
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any
from urllib.parse import quote, urlencode

import pytest
from psycopg.conninfo import conninfo_to_dict

from gliding_core import DatabaseUnavailableError, Memory, MemoryConfig
from gliding_core.blackboard.coordination.postgres import PostgresCoordinationStore
from gliding_core.store.postgres import Database, DatabaseSettings, PostgresEntryStore
from tests.test_core.liveness import until_it_works, within

TIMEOUT_S = 2.0  # MemoryConfig.database_timeout_s of these tests
LIVENESS_S = 60.0  # a call still running after this long is taken to wait for ever


class PausableProxy:
    """A TCP proxy to a PostgreSQL server that can stop forwarding without closing anything.

    Args:
        url: the server's libpq URL (TCP or a unix socket directory).
    """

    def __init__(self, url: str) -> None:
        self._upstream = _upstream(url)
        self._listener = socket.create_server(("127.0.0.1", 0), backlog=64)
        self.url = _through(url, self._listener.getsockname()[1])
        self._flowing = threading.Event()
        self._flowing.set()
        self._stopping = threading.Event()
        self._lock = threading.Lock()
        self._sockets: list[socket.socket] = []
        self._start(self._accept)

    def pause(self) -> None:
        """Forward nothing more, either way, and leave new connections unanswered."""
        self._flowing.clear()

    def resume(self) -> None:
        """Forward again, starting with what was held."""
        self._flowing.set()

    def close(self) -> None:
        self._stopping.set()
        self._flowing.set()
        with self._lock:
            for sock in [self._listener, *self._sockets]:
                with contextlib.suppress(OSError):
                    sock.close()

    def _start(self, target: Callable[..., None], *args: Any) -> None:
        threading.Thread(target=target, args=args, daemon=True).start()

    def _wait_for_flow(self) -> bool:
        while not self._flowing.wait(0.05):
            if self._stopping.is_set():
                return False
        return not self._stopping.is_set()

    def _accept(self) -> None:
        while self._wait_for_flow():
            with contextlib.suppress(OSError):
                if not _readable(self._listener) or not self._flowing.is_set():
                    continue  # a paused proxy leaves the connection in the listen backlog
                client, _ = self._listener.accept()
                family, address = self._upstream
                server = socket.socket(family, socket.SOCK_STREAM)
                server.connect(address)
                with self._lock:
                    self._sockets += [client, server]
                self._start(self._pump, client, server)
                self._start(self._pump, server, client)

    def _pump(self, source: socket.socket, target: socket.socket) -> None:
        with contextlib.suppress(OSError):
            while self._wait_for_flow():
                if not _readable(source) or not self._flowing.is_set():
                    continue
                data = source.recv(65536)
                if not data:
                    target.shutdown(socket.SHUT_WR)
                    return
                target.sendall(data)


def _readable(sock: socket.socket) -> bool:
    import select

    return bool(select.select([sock], [], [], 0.05)[0])


def _through(url: str, port: int) -> str:
    """``url`` as a ``postgresql://`` URI (what ``Memory.open`` takes for a database) to the
    proxy at ``port`` on this machine."""
    parameters = {key: str(value) for key, value in conninfo_to_dict(url).items()}
    user = quote(parameters.pop("user", ""), safe="")
    password = parameters.pop("password", None)
    secret = "" if password is None else ":" + quote(password, safe="")
    database = quote(parameters.pop("dbname", ""), safe="")
    for key in ("host", "hostaddr", "port"):
        parameters.pop(key, None)
    query = "?" + urlencode(parameters) if parameters else ""
    return f"postgresql://{user}{secret}@127.0.0.1:{port}/{database}{query}"


def _upstream(url: str) -> tuple[socket.AddressFamily, Any]:
    parameters = conninfo_to_dict(url)
    host = str(parameters.get("host") or "/tmp").split(",")[0]
    port = int(str(parameters.get("port") or 5432).split(",")[0])
    if host.startswith("/"):
        return socket.AF_UNIX, f"{host}/.s.PGSQL.{port}"
    return socket.AF_INET, (host, port)


@pytest.fixture
def proxy(postgres_url: str) -> Iterator[PausableProxy]:
    value = PausableProxy(postgres_url)
    try:
        yield value
    finally:
        value.close()


def _within_liveness(call: Callable[[], Any]) -> BaseException | None:
    return within(call, LIVENESS_S, waiting_for="the silent server")


def test_a_hung_server_fails_calls_with_a_typed_error_and_work_resumes(
    proxy: PausableProxy, postgres_schema: str
) -> None:
    config = MemoryConfig(
        embedder="hash", database_schema=postgres_schema, database_timeout_s=TIMEOUT_S
    )
    memory = Memory.open(proxy.url, config=config)
    try:
        acknowledged = memory.store.put_many(
            [{"@id": f"urn:ack:{n}", "text": f"acknowledged fact {n}"} for n in range(50)]
        )
        memory.supplements.put("urn:task:h", "acknowledged input")
        assert len(memory.search("acknowledged fact", k=5)) == 5

        proxy.pause()
        calls: list[Callable[[], Any]] = [
            lambda: memory.store.put({"@id": "urn:unknown", "text": "written while hung"}),
            lambda: memory.store.get("urn:ack:1"),
            lambda: memory.search("acknowledged"),
            lambda: memory.supplements.take_pending("urn:task:h"),
            lambda: memory.store.count(),
        ]
        for number, call in enumerate(calls):
            error = _within_liveness(call)
            assert isinstance(error, DatabaseUnavailableError), (number, repr(error))
            assert "postgresql" in str(error).lower()

        proxy.resume()
        # The same memory, not reopened: its pools drop the silent connections and make new ones.
        until_it_works(lambda: memory.store.put({"@id": "urn:after", "text": "after the hang"}))
        assert set(memory.store.get_many(acknowledged)) == set(acknowledged)
        unknown = memory.store.get("urn:unknown")  # its outcome is unknown: whole or absent
        assert unknown is None or unknown.node["text"] == "written while hung"
        assert memory.store.get("urn:after") is not None
        taken = memory.supplements.take_pending("urn:task:h")
        assert [item.content for item in taken] == ["acknowledged input"]
        assert [hit.iri for hit in memory.search("after the hang", k=1)] == ["urn:after"]
    finally:
        proxy.resume()
        memory.close()


def test_the_coordination_store_fails_fast_on_a_hung_server_and_resumes(
    proxy: PausableProxy, postgres_schema: str
) -> None:
    settings = DatabaseSettings(timeout_s=TIMEOUT_S)
    with PostgresCoordinationStore.open(
        proxy.url, schema=postgres_schema, settings=settings
    ) as store:

        def append(payload: str) -> int:
            with store.write("appending a message") as tx:
                return tx.messages.append(
                    iri=f"urn:m:{payload}",
                    topic="t",
                    task=None,
                    sender="a",
                    payload=json.dumps(payload),
                    now=tx.now(),
                )

        first = append("before")
        proxy.pause()
        error = _within_liveness(lambda: append("while hung"))
        assert isinstance(error, DatabaseUnavailableError), repr(error)
        assert "postgresql" in str(error).lower()
        proxy.resume()
        until_it_works(lambda: append("after"))
        with store.read("reading the messages") as tx:
            payloads = [message.payload for message in tx.messages.since(first - 1)]
        assert payloads[0] == "before"
        assert payloads[-1] == "after"


def test_a_wait_on_a_live_server_is_not_taken_for_a_hang(
    postgres_url: str, proxy: PausableProxy, postgres_schema: str
) -> None:
    """A lock held elsewhere for several timeouts: the waiter's probes find the server alive,
    so it waits for the lock (PostgreSQL's own lock timeout bounds it) and gets it."""
    settings = DatabaseSettings(timeout_s=1.0)
    holder = PostgresEntryStore(postgres_url, schema=postgres_schema)
    waiter = PostgresEntryStore(proxy.url, schema=postgres_schema, settings=settings)
    try:
        taken = threading.Event()

        def hold() -> None:
            with holder.transaction():
                holder.hold("the lock")
                taken.set()
                time.sleep(4 * settings.timeout_s)  # the waiter waits past its bound

        holding = threading.Thread(target=hold, daemon=True)
        holding.start()
        assert taken.wait(LIVENESS_S)

        def wait_for_the_lock() -> None:
            with waiter.transaction():
                waiter.hold("the lock")
                waiter.put({"@id": "urn:got-it", "text": "the waiter's"})

        assert _within_liveness(wait_for_the_lock) is None
        holding.join(LIVENESS_S)
        assert waiter.get("urn:got-it") is not None
    finally:
        waiter.close()
        holder.close()


def test_a_database_handle_reports_the_silent_server_without_its_password(
    postgres_url: str, proxy: PausableProxy, postgres_schema: str
) -> None:
    database = Database(proxy.url, schema=postgres_schema, settings=DatabaseSettings(timeout_s=1.0))
    try:
        proxy.pause()

        def select_one() -> None:
            with database.translated("selecting one"), database.connection() as conn:
                conn.execute("SELECT 1")

        error = _within_liveness(select_one)
        assert isinstance(error, DatabaseUnavailableError), repr(error)
        assert "answered neither" in str(error) or "timeout" in str(error).lower()
        password = conninfo_to_dict(postgres_url).get("password")
        assert not password or str(password) not in str(error)
        proxy.resume()
        until_it_works(select_one)
    finally:
        proxy.resume()
        database.close()
