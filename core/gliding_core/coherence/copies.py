"""L2 coherence: the copies this process's agents hold, to serve their reads without the directory.

``HeldCopies`` keeps, per (agent, node), the copy an agent last read or wrote in this process:
its generation, its value's JSON text and the directory token it was current at. A read whose
token still matches (or that the coordinator's own changes vouch for) is served from it.

Invariants:
- The copies are plain tuples of atoms, each replaced whole (with a ``LocalDirectory``, whose
  tokens are ints, the collector stops tracking them).
- A write-back, an eviction or a lapsed lease forgets the agent's held copy (``forget``), so
  its next read asks the directory; a write whose outcome is unknown forgets every agent's copy
  of its nodes (``forget_nodes``).
- A change another process committed, pushed to this one, drops every agent's held copy of
  the nodes it moved and the copies it ended (all of them when it names none: ``drop``),
  without waiting for a read.
- One look-up of a copy is atomic and takes no lock; every change of the dict holds ``lock``.
"""

from __future__ import annotations

import threading
from collections.abc import Hashable, Iterable

import orjson

from gliding_core.errors import InvalidInputError
from gliding_core.jsonld import Node, canonical_json, preview

Held = tuple[int, bytes, Hashable]
"""An agent's copy as this process holds it: its generation, its value's JSON text (UTF-8:
orjson parses bytes faster than str), and the directory token it was current at; replaced
whole, never changed. A plain tuple, not a class: one is kept per copy, and the collector
stops tracking a tuple of atoms, so with a ``LocalDirectory`` (int tokens) the copies kept
cost no collection work (the shared directory's unvouched token keeps them tracked)."""


def _encoded(value: Node) -> bytes:
    """Return ``value`` as JSON bytes for ``orjson.loads`` (orjson: ten times faster to write)."""
    try:
        return orjson.dumps(value)
    except TypeError:  # what orjson cannot write (an integer over 64 bits) the encoder can
        return canonical_json(value).encode()


def check_agent(agent: object) -> str:
    """Return ``agent`` if it is a non-empty name; ``InvalidInputError`` otherwise."""
    if not isinstance(agent, str) or not agent.strip():
        raise InvalidInputError(f"agent must be a non-empty name, got {preview(agent)}")
    return agent


class HeldCopies:
    """The copies this process's agents hold, by ``(agent, iri)``.

    ``by_key`` is read without the lock (one look-up is atomic); ``lock`` is held by every
    change of it.
    """

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.by_key: dict[tuple[str, str], Held] = {}
        self.agents: set[str] = set()
        """Every agent that held a copy here (to find a node's copies without a scan)."""

    def remember(self, key: tuple[str, str], generation: int, value: Node, token: Hashable) -> None:
        """Hold ``value`` as ``key``'s copy at ``generation``, current at directory ``token``."""
        held = (generation, _encoded(value), token)
        with self.lock:
            self.by_key[key] = held
            self.agents.add(key[0])

    def forget(self, key: tuple[str, str]) -> None:
        """Drop ``key``'s held copy, if any: the agent's next read asks the directory."""
        with self.lock:
            self.by_key.pop(key, None)

    def forget_nodes(self, iris: Iterable[str]) -> None:
        """Drop every agent's held copy of ``iris``."""
        gone = set(iris)
        with self.lock:
            for key in [key for key in self.by_key if key[1] in gone]:
                del self.by_key[key]

    def drop(
        self, iris: Iterable[str] | None, pairs: Iterable[tuple[str, str]] = ()
    ) -> dict[str, list[str]]:
        """Drop every agent's held copy of ``iris`` (of every node when ``None``) and the copies
        ``(iri, agent)`` of ``pairs``; return the agents whose copies went, by IRI (sorted)."""
        dropped: dict[str, list[str]] = {}
        with self.lock:
            if iris is None:
                keys = list(self.by_key)
            else:
                wanted = list(dict.fromkeys(iris))
                keys = [(a, iri) for iri in wanted for a in self.agents if (a, iri) in self.by_key]
                keys += [(agent, iri) for iri, agent in pairs if (agent, iri) in self.by_key]
            for key in dict.fromkeys(keys):
                del self.by_key[key]
                dropped.setdefault(key[1], []).append(key[0])
        return {iri: sorted(agents) for iri, agents in dropped.items()}
