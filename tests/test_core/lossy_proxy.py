"""The network edge of the write-identity tests: a proxy to ``oxigraph serve`` that loses replies.

``Proxy`` forwards each HTTP request to the server and can, for the next SPARQL update, drop the
server's reply after the server answered (the write landed), drop the request before the server
sees it (it did not), or answer for the server as a gateway that gave up (504). ``Board`` is a
blackboard with coordination and L0 on a backend (the proxy's endpoint) and a coherence
directory; ``stored`` reads what the server itself holds, around every cache. Shared by the
write-identity tests of the blackboard and of the tools of both adapters.
"""

from __future__ import annotations

import socket
import struct
import threading
from contextlib import closing
from typing import Any
from urllib.parse import urlsplit

from gliding_core import EventBus, L0Store
from gliding_core.blackboard.board import Blackboard
from gliding_core.blackboard.coordination.registries import Coordination
from gliding_core.blackboard.coordination.sqlite import CoordinationDB
from gliding_core.blackboard.graph import GraphBackend, SparqlEndpoint
from gliding_core.blackboard.handle import AgentHandle
from gliding_core.blackboard.records import BoardNode, Tombstone, read_records
from gliding_core.coherence.directory import Directory
from gliding_core.config import BlackboardConfig, CoordinationConfig
from gliding_core.store.entry import MesiState

TASK = "iri://task/write-identity"
QUIET = BlackboardConfig(flush_interval_s=0.0)
IRI = "urn:n:doubt"


def _read_head(sock: socket.socket) -> tuple[bytes, bytes] | None:
    """Read an HTTP message's head (through the blank line) and what came after it."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        if not chunk:
            return None
        data += chunk
    head, _, rest = data.partition(b"\r\n\r\n")
    return head, rest


def _closing(message: bytes) -> bytes:
    """Return an HTTP message with its ``Connection`` header saying ``close``."""
    head, _, body = message.partition(b"\r\n\r\n")
    lines = [line for line in head.split(b"\r\n") if not line.lower().startswith(b"connection:")]
    return b"\r\n".join([*lines, b"Connection: close"]) + b"\r\n\r\n" + body


def _read_request(sock: socket.socket) -> tuple[bytes, bytes] | None:
    """Read one request (its head and its ``content-length`` body) from a client."""
    found = _read_head(sock)
    if found is None:
        return None
    head, body = found
    lines = head.split(b"\r\n")
    length = 0
    for line in lines[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value.strip())
    while len(body) < length:
        chunk = sock.recv(65536)
        if not chunk:
            return None
        body += chunk
    # One request per connection: the server closes after answering, so its reply ends at EOF.
    return _closing(head + b"\r\n\r\n" + body), lines[0]


class Proxy:
    """A loopback TCP proxy to ``oxigraph serve`` that can lose the next update's request or reply.

    ``lose(how)`` plans what happens to the next SPARQL update (a POST to ``/update``):
    ``"reply"`` forwards it, waits for the server's whole answer, then closes the client's
    connection without a byte (``"reset"``: with a TCP reset); ``"request"`` closes it
    without forwarding; ``"gateway"`` forwards it and answers 504 itself. Everything else is
    forwarded as it is.
    """

    def __init__(self, upstream: str) -> None:
        parts = urlsplit(upstream)
        self.upstream = (parts.hostname or "127.0.0.1", parts.port or 80)
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.listener.getsockname()[1]}"
        self.plan: list[str] = []
        self.updates = 0  # updates the server received through the proxy
        self.lock = threading.Lock()
        self.thread = threading.Thread(target=self._accept, daemon=True)
        self.thread.start()

    def lose(self, how: str) -> None:
        with self.lock:
            self.plan.append(how)

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:  # closed
                return
            threading.Thread(target=self._serve, args=(client,), daemon=True).start()

    def _serve(self, client: socket.socket) -> None:
        with client:
            found = _read_request(client)
            if found is None:
                return
            request, line = found
            how = "forward"
            if line.startswith(b"POST ") and b"/update" in line:
                with self.lock:
                    how = self.plan.pop(0) if self.plan else "forward"
                    if how != "request":
                        self.updates += 1
            if how == "request":
                return  # never sent on: the server does not see it
            with socket.create_connection(self.upstream) as server:
                server.sendall(request)
                reply = b""
                while chunk := server.recv(65536):
                    reply += chunk  # the whole answer: the update is applied by now
            if how == "reset":
                client.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            elif how == "gateway":
                client.sendall(
                    b"HTTP/1.1 504 Gateway Timeout\r\ncontent-length: 0\r\n"
                    b"connection: close\r\n\r\n"
                )
            elif how == "forward":
                client.sendall(_closing(reply))  # the client opens a new connection next time

    def close(self) -> None:
        self.listener.close()


class Board:
    """A coherent blackboard with coordination and L0, on a backend and a directory."""

    def __init__(self, backend: GraphBackend, directory: Directory):
        self.bus, self.store = EventBus(), L0Store()
        settings = CoordinationConfig(
            lease_ttl_s=10.0, heartbeat_timeout_s=60.0, sweep_interval_s=0
        )
        self.coordination = Coordination(CoordinationDB(None, config=settings), bus=self.bus)
        self.board = Blackboard(
            backend,
            store=self.store,
            bus=self.bus,
            config=QUIET,
            coordination=self.coordination,
            directory=directory,
        )
        if TASK not in self.coordination.tasks:
            self.coordination.tasks.register(TASK)

    def agent(self, name: str) -> AgentHandle:
        return self.board.agent(name, role="do", task=TASK)

    def copies(self, iri: str) -> dict[str, MesiState]:
        return self.board.coherence.copies(iri)

    def close(self) -> None:
        self.board.close()
        self.store.close()


def emptied(server: str) -> str:
    """Return ``server`` (a SPARQL endpoint's URL) with every graph of it cleared."""
    with closing(SparqlEndpoint(server)) as endpoint:
        endpoint.update("CLEAR ALL")
    return server


def step(text: str, iri: str = IRI) -> dict[str, Any]:
    return {"@id": iri, "@type": "Step", "text": text}


def stored(server: str, iri: str = IRI) -> BoardNode | Tombstone | None:
    """What the server itself holds under ``iri`` (read around every cache)."""
    with closing(SparqlEndpoint(server)) as endpoint:
        return read_records(endpoint, [iri]).get(iri)


def node_at(server: str, iri: str = IRI) -> BoardNode:
    found = stored(server, iri)
    assert isinstance(found, BoardNode)
    return found
