"""View: turns that quoted a shared node at a generation the node has since moved past.

A turn quotes a blackboard node when its message carries the node at a generation: the result
of the ``read_node`` and ``write_node`` tools (``{"found": true, "id", "generation", "value"}``),
of ``project_frame`` (its ``generations``: read after the view, which is then projected again
and must be unchanged, so a write announced in between is caught), or quotes given explicitly
(``StaleTurns.quote``). A ``project_frame`` label can be newer than its view only for a write
committed and not yet announced while both projections ran: the window the view cache has
too (its invalidation is the same event); a ``read_node`` label is the value's own.
``StaleTurns`` keeps the quotes, listens to the bus (``NODE_CREATED``, ``NODE_UPDATED``,
``NODE_DELETED``) and marks a turn stale as soon as a node it quotes moves past the quoted
generation.

What the next context does with a stale turn (the choice made here):
- out of the window, it is left out: the part ``fill`` returns lists every stale turn in
  ``hides``, so the L1 context and recall after it never quote one;
- in the window (a view never rewrites the history), it is refreshed: the memory message says,
  per node, that it changed since the quote, and shows the change against the value quoted (or
  the current value when the quote had none, or that the node was deleted), within the budget,
  down to a one-line notice to read the node again.

The same results are the copies of shared nodes a model request holds (``node_copies``): the
view gives a request's copies to its sources (``SourceRequest.copies``), so a frame shows a node
the request already holds at its current value as a reference (``gliding_core.coherence.seen``).

Invariants: a turn is marked stale at the latest when the next context is built (``fill``
checks every unmarked quote against the current generations, so an event missed or published
before the quote was noted loses nothing); marks are never cleared (a turn's text never
changes); a part is within its budget, counted exactly; thread-safe.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeGuard

from gliding_core.bus import Event, EventBus, EventType, Subscription
from gliding_core.coherence.seen import SharedNode, change_line, notice_line
from gliding_core.errors import InvalidInputError
from gliding_core.framing import check_messages, message_text
from gliding_core.jsonld import Node, canonical_json, preview, validate_iri
from gliding_core.tokens import TokenCounter
from gliding_core.view.sources import SourcePart, SourceRequest

STALE_SOURCE = "stale"
STALE_HEADER = "[Shared nodes changed since the messages above quoted them]"
NODE_EVENTS = (EventType.NODE_CREATED, EventType.NODE_UPDATED, EventType.NODE_DELETED)

Lookup = Callable[[Sequence[str]], Mapping[str, tuple[int, Node]] | None]
"""Return the current ``(generation, value)`` of the existing nodes among some IRIs, or
``None`` when there is no blackboard to ask (then nothing is marked by checking)."""


@dataclass(frozen=True, slots=True)
class Quote:
    """A turn's quote of a node: the turn's IRI, the node's, the generation, the value if known."""

    turn: str
    iri: str
    generation: int
    value: Node | None = None


class StaleTurns:
    """The quotes of shared nodes in turns, their stale marks, and a source of refresh notes.

    Args:
        lookup: the nodes' current generations and values (the blackboard's).
        counter: counts the notes' tokens (the memory's counter).
        bus: where node events come from; none when ``None`` (``fill`` still checks).
    """

    name = STALE_SOURCE

    def __init__(
        self, lookup: Lookup, counter: TokenCounter, *, bus: EventBus | None = None
    ) -> None:
        if not callable(lookup):
            raise InvalidInputError(f"lookup must be callable, got {preview(lookup)}")
        self._lookup, self.counter, self.bus = lookup, counter, bus
        self._lock = threading.Lock()
        self._by_node: dict[str, list[Quote]] = {}
        self._stale: set[str] = set()
        self._subscription: Subscription | None = None
        self._closed = False

    # -- quotes ----------------------------------------------------------------------------

    def quote(self, turn: str, iri: str, generation: int, value: Node | None = None) -> Quote:
        """Note that ``turn`` quoted node ``iri`` at ``generation`` (with ``value`` if known)."""
        validate_iri(turn, what="turn IRI")
        validate_iri(iri)
        if isinstance(generation, bool) or not isinstance(generation, int) or generation < 0:
            raise InvalidInputError(f"generation must be an int >= 0, got {preview(generation)}")
        if value is not None and not isinstance(value, dict):
            raise InvalidInputError(f"value must be a JSON object or None, got {preview(value)}")
        found = Quote(turn, iri, generation, value)
        with self._lock:
            self._by_node.setdefault(iri, []).append(found)
        self._listen()
        self.check([found])  # an event before this quote was noted is not lost
        return found

    def note(self, turn: str, message: Mapping[str, Any]) -> list[Quote]:
        """Note the nodes a message quotes (a tool result of the blackboard tools); return them."""
        return [self.quote(turn, *quoted) for quoted in quoted_nodes(message)]

    def quotes(self, turn: str | None = None) -> list[Quote]:
        """Return the quotes noted (of ``turn`` when given)."""
        with self._lock:
            every = [q for quotes in self._by_node.values() for q in quotes]
        return [q for q in every if turn is None or q.turn == turn]

    # -- stale marks -----------------------------------------------------------------------

    def stale(self) -> frozenset[str]:
        """Return the IRIs of the turns marked stale."""
        with self._lock:
            return frozenset(self._stale)

    def is_stale(self, turn: str) -> bool:
        """Return whether ``turn`` quotes a node at a generation it has moved past."""
        with self._lock:
            return turn in self._stale

    def check(self, quotes: Sequence[Quote] | None = None) -> frozenset[str]:
        """Mark the turns whose quotes (all unmarked ones by default) are behind; return marks."""
        with self._lock:
            pending = [
                q
                for q in (quotes if quotes is not None else self._every())
                if q.turn not in self._stale
            ]
        if pending:
            current = self._lookup(list(dict.fromkeys(q.iri for q in pending)))
            if current is None:
                return self.stale()
            behind = {q.turn for q in pending if _moved(q, current.get(q.iri))}
            with self._lock:
                self._stale |= behind
        return self.stale()

    def on_event(self, event: Event) -> None:
        """Mark the turns quoting the event's node at an older generation (any, if deleted)."""
        iri, generation = event.payload.get("iri"), event.payload.get("generation")
        if not isinstance(iri, str):
            return
        deleted = event.type == EventType.NODE_DELETED.value
        with self._lock:
            for quote in self._by_node.get(iri, ()):
                if deleted or not isinstance(generation, int) or generation > quote.generation:
                    self._stale.add(quote.turn)

    def _every(self) -> list[Quote]:
        return [q for quotes in self._by_node.values() for q in quotes]

    def _listen(self) -> None:
        """Subscribe to the node events once the first quote is noted (no quotes, no cost)."""
        if self.bus is None or self._subscription is not None or self._closed:
            return
        with self._lock:
            if self._subscription is None and not self._closed:
                self._subscription = self.bus.subscribe(self.on_event, NODE_EVENTS)

    def close(self) -> None:
        """Stop listening to the bus, for good (``fill`` still checks); twice is harmless."""
        with self._lock:
            self._closed = True
            subscription, self._subscription = self._subscription, None
        if subscription is not None:
            subscription.cancel()

    # -- the context source ----------------------------------------------------------------

    def fill(self, request: SourceRequest) -> SourcePart:
        """Return refresh notes for the stale turns in ``request.shown``; hide every stale turn.

        One note per node a visible stale turn quotes behind its current generation (the oldest
        quote of it): the change against the value quoted, else the current value, else a
        notice to read it again; the notes that fit, in the order the nodes were quoted.
        """
        if not isinstance(request, SourceRequest):
            raise InvalidInputError(f"expected a SourceRequest, got {preview(request)}")
        with self._lock:
            noted = bool(self._by_node)
        if not noted:
            return SourcePart.empty(self.name)
        stale = self.check()
        hides = tuple(sorted(stale))
        oldest: dict[str, Quote] = {}
        for quote in sorted(self.quotes(), key=lambda q: q.generation):
            if quote.turn in stale and quote.turn in request.shown:
                oldest.setdefault(quote.iri, quote)
        if not oldest or request.budget < 1:
            return SourcePart(self.name, "", 0, (), (), hides)
        current = self._lookup(list(oldest))
        if current is None:
            return SourcePart(self.name, "", 0, (), (), hides)
        lines: list[str] = []
        iris: list[str] = []
        for iri, quote in oldest.items():
            moved = _moved(quote, current.get(iri))
            if moved and self._add(lines, _notes(quote, current.get(iri)), request.budget):
                iris.append(iri)
        text = "\n".join([STALE_HEADER, *lines]) if lines else ""
        return SourcePart(self.name, text, self.counter.count(text), tuple(iris), (), hides)

    def _add(self, lines: list[str], choices: Sequence[str], budget: int) -> bool:
        """Add the first of ``choices`` that fits; return whether one did."""
        for line in choices:
            if self.counter.count("\n".join([STALE_HEADER, *lines, line])) <= budget:
                lines.append(line)
                return True
        return False


def quoted_nodes(message: Mapping[str, Any]) -> list[tuple[str, int, Node | None]]:
    """Return ``(iri, generation, value)`` for each node a tool result quotes (none otherwise).

    Recognised: the results of ``read_node`` and ``write_node`` (one node with its value) and
    of ``project_frame`` (its ``generations``; the view's framed values are not the node's).
    """
    if not isinstance(message, Mapping) or message.get("role") != "tool":
        return []
    text = message_text(message).strip()
    if not text.startswith("{"):
        return []
    try:
        result = json.loads(text)
    except (ValueError, RecursionError):  # text that only looks like JSON, or nests too deep
        return []
    if not isinstance(result, dict):
        return []
    iri, generation, value = result.get("id"), result.get("generation"), result.get("value")
    if result.get("found") is True and isinstance(iri, str) and _generation(generation):
        return [(iri, generation, value if isinstance(value, dict) else None)]
    generations = result.get("generations")
    if isinstance(generations, dict):
        return [(k, g, None) for k, g in generations.items() if _generation(g)]
    return []


def node_copies(messages: Sequence[Mapping[str, Any]]) -> tuple[SharedNode, ...]:
    """Return the copies of shared nodes that ``messages`` hold: the newest of each node.

    A copy is a node's value at a generation as a blackboard tool's result carries it: the
    results of ``read_node`` and ``write_node`` (the whole node), and of ``project_frame``
    (each top-level node of its view, at the generation its ``generations`` give; a view cut
    to its budget can hold part of a node). A result whose text is not one of these holds
    none. Of two copies of a node the one at the higher generation is kept (of two at one
    generation, the later). This is the ledger of what a model has when nothing but its
    request is kept from call to call (``SeenNodes.of``).

    Raises:
        InvalidInputError: ``messages`` is not a list of message records.
    """
    found: dict[str, SharedNode] = {}
    for message in check_messages(messages):
        for copy in _copies(message):
            before = found.get(copy.iri)
            if before is None or (before.generation or 0) <= (copy.generation or 0):
                found[copy.iri] = copy
    return tuple(found.values())


def _copies(message: Mapping[str, Any]) -> list[SharedNode]:
    """The copies one tool result holds (none for any other message)."""
    quoted = quoted_nodes(message)
    if not quoted:
        return []
    values = {iri: value for iri, _, value in quoted if value is not None}
    if len(values) < len(quoted):  # a project_frame result: the values are its view's nodes
        values |= _view_nodes(message)
    return [
        SharedNode(iri, generation, _bare(values[iri]))
        for iri, generation, _ in quoted
        if iri in values
    ]


def _view_nodes(message: Mapping[str, Any]) -> dict[str, Node]:
    """The top-level nodes of a ``project_frame`` result's view, by IRI."""
    try:
        view = json.loads(json.loads(message_text(message))["view"])
    except (ValueError, KeyError, TypeError, RecursionError):  # not a view, or one cut short
        return {}
    nodes = view.get("@graph", [view]) if isinstance(view, dict) else []
    if not isinstance(nodes, list):
        return {}
    return {n["@id"]: n for n in nodes if isinstance(n, dict) and isinstance(n.get("@id"), str)}


def _bare(node: Node) -> Node:
    return {key: value for key, value in node.items() if key != "@context"}


def _generation(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _moved(quote: Quote, current: tuple[int, Node] | None) -> bool:
    return current is None or current[0] != quote.generation


def _notes(quote: Quote, current: tuple[int, Node] | None) -> list[str]:
    """The notes of one node, most informative first."""
    if current is None:
        return [f"{quote.iri} (quoted at generation {quote.generation}) has been deleted"]
    node = SharedNode(quote.iri, current[0], current[1])
    notes = [change_line(node, quote.generation, quote.value)] if quote.value is not None else []
    moved = f"generation {quote.generation} -> {current[0]}"
    notes.append(f"{quote.iri} changed ({moved}), now: {canonical_json(current[1])}")
    notes.append(notice_line(node, quote.generation))
    return notes
