"""L2: the node cache checked against the coherence directory, and the board as a node source.

``SharedCache`` is the node cache's check (``CacheCheck``) when processes share the store (a
SPARQL server shared by the processes of one machine, with one ``SQLiteDirectory`` in the memory
directory): an entry is served only while the directory's change counter still says nothing
changed since it was vouched for, else after its generation was compared with the directory's.
It also tells whether this thread is inside the directory's transaction (``inside``), where the
cache is not trusted. ``BoardSource`` is the board's nodes as the coordinator's ``NodeSource``
(a node's value and generation; a put conditional on the generation, under the board's single
writer). Every write of the board goes through ``gliding_core.blackboard.writes``.

Invariants:
- Inside the directory's transaction the shared node cache is not trusted: reads there go to
  the store (``SharedCache.inside``), since the directory cannot vouch for an entry while its
  own transaction is open.
- An entry is vouched without asking the directory only when every change since it was vouched
  (or since this process wrote it) was this process's own and left the node alone.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Hashable

from gliding_core.blackboard.nodes import WRITTEN_HERE, NodeStore
from gliding_core.coherence.directory import Directory
from gliding_core.coherence.node_sources import check_generation, refused
from gliding_core.errors import EntryNotFoundError, InvalidInputError
from gliding_core.jsonld import Node


class _Depth(threading.local):
    """How deep this thread is inside the directory's transaction (0 on every new thread).

    A class default, not ``getattr`` with a default: a thread that never entered (a writer
    whose write another thread commits) would pay an ``AttributeError`` on every check.
    """

    depth = 0


class _Inside:
    """The context of ``SharedCache.inside`` (a class: entered several times a write)."""

    def __init__(self, local: _Depth) -> None:
        self._local = local

    def __enter__(self) -> None:
        self._local.depth += 1

    def __exit__(self, *exc: object) -> None:
        self._local.depth -= 1


class SharedCache:
    """The node cache's check against a directory shared by processes (``CacheCheck``).

    Args:
        directory: the coherence directory every process of the store shares.
    """

    def __init__(self, directory: Directory) -> None:
        self.directory = directory
        self._local = _Depth()
        self.inside = _Inside(self._local)
        """Entered by a ``with`` block running inside the directory's transaction (this
        thread)."""
        self.own: Callable[[Hashable, Hashable, str], bool] = lambda held, now, iri: False
        """Whether every change since ``held`` was this process's own and left ``iri`` alone
        (the coordinator's ``vouch_own``)."""
        self.last_own: Callable[[str], Hashable] = lambda iri: None
        """The token of this process's last change of ``iri`` (``None``: none known)."""

    def is_inside(self) -> bool:
        """Return whether this thread is inside the directory's transaction."""
        return self._local.depth > 0

    def token(self) -> Hashable:
        """Return the directory's change counter."""
        return self.directory.token()

    def vouch(
        self, iri: str, generation: int, exists: bool, stamp: Hashable | None
    ) -> Hashable | None:
        """Return the token vouching for an entry the directory agrees with, else ``None``.

        Without asking the directory when every change since the entry was vouched (or since
        this process wrote it) was this process's own and none touched the node.
        """
        if self.is_inside():
            return None
        now = self.token()
        held = self.last_own(iri) if stamp is WRITTEN_HERE else stamp
        if held is not None and self.own(held, now, iri):
            return now
        record, token = self.directory.snapshot(iri)
        if record.generation == 0:  # no process wrote it through the directory: the store's
            return token
        if (record.generation, record.value is not None) == (generation, exists):
            return token
        return None


class BoardSource:
    """The blackboard's nodes as the coordinator's ``NodeSource``.

    Args:
        nodes: the board's node layer.
        cache: the check of its cache (its ``inside`` is entered for every call).
    """

    def __init__(self, nodes: NodeStore, cache: SharedCache) -> None:
        self.nodes, self.cache = nodes, cache

    def get(self, iri: str) -> tuple[Node, int]:
        """Return the node's value and generation; ``EntryNotFoundError`` when absent."""
        with self.cache.inside:
            node = self.nodes.get_many([iri]).get(iri)
        if node is None:
            raise EntryNotFoundError(f"no blackboard node has the IRI {iri!r}")
        return node.node, node.generation

    def put(self, iri: str, value: Node, expected_generation: int) -> int:
        """Write ``value`` over an existing node at ``expected_generation`` (graph and tags kept).

        Raises:
            StaleWriteError: the node is at another generation.
            InvalidInputError: the node does not exist: a new node needs an area (write it
                through an agent's handle or ``Blackboard.write``).
        """
        check_generation(expected_generation, what="expected_generation")
        with self.cache.inside, self.nodes.writer:
            node, generation = self.nodes.states([iri])[iri]
            current = 0 if node is None else generation
            if current != expected_generation:
                raise refused(
                    iri, expected_generation, current, None if node is None else node.node
                )
            if node is None:
                raise InvalidInputError(
                    f"{iri!r} is not on the blackboard: a new node needs an area (write it"
                    " through an agent's handle)"
                )
            requests = self.nodes.prepare([value], node.graph, node.tags)
            return self.nodes.write(requests)[0].generation
