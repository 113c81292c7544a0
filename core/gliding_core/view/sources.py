"""View: context sources: what fills the memory part of a model view, one source at a time.

A model view (``gliding_core.view.conversation``) gives its memory room to an ordered list of
sources: the L1 context, recall from L0, and a role's L3 frame over the blackboard are three of
them. Each is asked for at most ``budget`` tokens for a query and answers with what it would
show, counted exactly with the memory's counter; the view then asks the next one with what is
left. A new layer adds a source; the view does not change.

A request also carries the copies of shared nodes its visible messages hold (``copies``: the
blackboard tools' results in the window), what the model has of them on this call and no other.

Invariants: a source never returns more tokens than it was asked for (``tokens`` is the exact
count of ``text``); it quotes nothing whose IRI is in ``request.shown`` (what the window or an
earlier source already shows), and lists in ``iris`` every IRI it quotes, so later sources can
skip them; an empty answer is ``SourcePart.empty(name)``, never an error. IRIs in ``hides`` are
left out by every later source, whether or not the part has text (stale turns, for instance).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

from gliding_core.coherence.seen import SharedNode
from gliding_core.errors import InvalidInputError
from gliding_core.hyperspace.search import SearchHit
from gliding_core.jsonld import preview


@dataclass(frozen=True, slots=True)
class SourceRequest:
    """What a view asks of one source.

    Attributes:
        query: what the model is about to answer (the latest user message), if known.
        budget: the most tokens the answer may take (>= 0).
        shown: IRIs (L0 entries, L1 turn archives, L2 nodes) already visible to the model.
        seen: the whitespace-normalised texts already visible that have no IRI (messages not
            archived): a source skips an item that says just that.
        copies: the shared nodes the visible messages hold, as they hold them (the newest
            copy of each; ``gliding_core.view.stale_turns.node_copies``).
    """

    query: str | None
    budget: int
    shown: frozenset[str] = frozenset()
    seen: frozenset[str] = frozenset()
    copies: tuple[SharedNode, ...] = ()

    def __post_init__(self) -> None:
        if self.query is not None and not isinstance(self.query, str):
            raise InvalidInputError(f"query must be a string or None, got {preview(self.query)}")
        if isinstance(self.budget, bool) or not isinstance(self.budget, int) or self.budget < 0:
            raise InvalidInputError(f"budget must be an int >= 0, got {preview(self.budget)}")
        object.__setattr__(self, "shown", frozenset(self.shown))
        object.__setattr__(self, "seen", frozenset(self.seen))
        if isinstance(self.copies, (str, bytes)) or not isinstance(self.copies, Iterable):
            raise InvalidInputError(f"copies must be SharedNodes, got {preview(self.copies)}")
        copies = tuple(self.copies)
        for copy in copies:
            if not isinstance(copy, SharedNode):
                raise InvalidInputError(f"not a SharedNode: {preview(copy)}")
        object.__setattr__(self, "copies", copies)


@dataclass(frozen=True, slots=True)
class SourcePart:
    """What one source would show.

    Attributes:
        source: the source's name (``"l1"``, ``"recall"``, ``"frame"`` ...).
        text: the text to put in the memory message ("" for nothing).
        tokens: the exact token count of ``text`` with the memory's counter.
        iris: every IRI the text quotes, in the order quoted.
        hits: the L0 search hits behind the text, best first, when the source searched.
        hides: IRIs later sources must leave out without this part quoting them (turns that
            quote a shared node at a generation it has moved past).
    """

    source: str
    text: str
    tokens: int
    iris: tuple[str, ...] = field(default_factory=tuple)
    hits: tuple[SearchHit, ...] = field(default_factory=tuple)
    hides: tuple[str, ...] = field(default_factory=tuple)

    @classmethod
    def empty(cls, source: str) -> SourcePart:
        """The answer of a source with nothing to show."""
        return cls(source, "", 0, (), ())


@runtime_checkable
class ContextSource(Protocol):
    """Something that can fill part of a model view's memory room."""

    name: str

    def fill(self, request: SourceRequest) -> SourcePart:
        """Return what this source would show within ``request.budget`` tokens."""
        ...
