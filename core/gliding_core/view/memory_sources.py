"""View: the two context sources built on the memory, the L1 context and recall from L0.

Both satisfy ``gliding_core.view.sources.ContextSource``. ``SessionContextSource`` renders one L1
session's summary chain for the query; ``RecallSource`` quotes the hybrid search's best L0 hits
for it, one line each. Recall needs a search and a token counter, nothing else of the memory: it
takes any ``Searcher`` (a ``Memory`` is one). A view (``gliding_core.view.conversation``) asks
them in order, the L1 context first, so recall can skip the turns the context already
summarises.

Invariants: each answer is at most ``request.budget`` tokens, counted exactly with the memory's
counter; neither quotes an IRI in ``request.shown``; neither quotes a supplementary input
(pending, consumed or its turn): the L1 source leaves out the session's input turns and the
recall filter leaves inputs out in SQL, so the delivered message is the only place the model
sees one.
"""

from __future__ import annotations

import json
from typing import Any, Protocol, runtime_checkable

from gliding_core.errors import InvalidInputError
from gliding_core.hyperspace.search import SearchHit, SearchResults
from gliding_core.jsonld import node_text, preview
from gliding_core.session import Session
from gliding_core.store.entry import Entry
from gliding_core.store.filters import SearchFilters
from gliding_core.tokens import TokenCounter
from gliding_core.view.sources import SourcePart, SourceRequest

RECALL_HEADER = "[Recalled from long-term memory]"
L1_SOURCE = "l1"
RECALL_SOURCE = "recall"
_MIN_RECALL_LINE = 12


@runtime_checkable
class Searcher(Protocol):
    """What recall needs: hybrid search of L0 and the token counter (``Memory`` has both)."""

    @property
    def tokens(self) -> TokenCounter:
        """The exact token counter the recall lines are counted with."""
        ...

    def search(
        self, query: str, k: int = 10, *, filters: SearchFilters | None = None
    ) -> SearchResults:
        """Return the ``k`` best hits for ``query`` among the entries ``filters`` passes."""
        ...


class SessionContextSource:
    """The L1 context of one session as a context source.

    Args:
        session: the session whose summary chain is shown.
    """

    name = L1_SOURCE

    def __init__(self, session: Session) -> None:
        if not isinstance(session, Session):
            raise InvalidInputError(f"session must be a Session, got {preview(session)}")
        self.session = session

    def fill(self, request: SourceRequest) -> SourcePart:
        """Return the session's context for the query, leaving out shown turns and inputs."""
        if request.budget < 1:
            return SourcePart.empty(self.name)
        tokens = self.session.services.tokens
        exclude = set(request.shown) | self.session.input_turns()
        context = self.session.context(request.query, budget=request.budget, exclude=exclude)
        text = context.text if context.text.strip() else ""
        if tokens.count(text) > request.budget:
            text = tokens.truncate(text, request.budget)
        iris = tuple(t.l0_archive_iri for t in context.main + context.low_relevance)
        return SourcePart(self.name, text, tokens.count(text), iris if text else ())


class RecallSource:
    """Recall from L0 as a context source: the best hits of the memory's hybrid search.

    Args:
        memory: what is searched and counts tokens (a ``Memory``, or any ``Searcher``).
        k: how many hits may be quoted.
        filters: what may be read (a scope's readable entries); everything when ``None``.
    """

    name = RECALL_SOURCE

    def __init__(self, memory: Searcher, k: int, *, filters: SearchFilters | None = None) -> None:
        if not isinstance(memory, Searcher) or not isinstance(memory.tokens, TokenCounter):
            raise InvalidInputError(
                f"memory must be a gliding_core Memory (search and tokens), got {preview(memory)}"
            )
        if isinstance(k, bool) or not isinstance(k, int) or k < 0:
            raise InvalidInputError(f"k must be an int >= 0, got {preview(k)}")
        self.memory, self.k, self.filters = memory, k, filters

    def fill(self, request: SourceRequest) -> SourcePart:
        """Return a header and one line per hit, best first, within the budget.

        Hits whose IRI (or whose input's IRI) is in ``request.shown``, or whose text is in
        ``request.seen`` or copies a quoted hit, are skipped; the last line may be cut short.
        """
        tokens = self.memory.tokens
        if not request.query or not self.k or request.budget < _MIN_RECALL_LINE:
            return SourcePart.empty(self.name)
        known = set(request.seen)
        lines: list[str] = []
        hits: list[SearchHit] = []
        used = tokens.count(RECALL_HEADER)
        for hit in self.memory.search(request.query, self.k * 2, filters=self.filters):
            if len(hits) >= self.k:
                break
            if hit.iri in request.shown or hit.entry.metadata.get("supplement") in request.shown:
                continue
            line = _line(json.loads(hit.entry.content), known)
            if line is None:  # no text, shown already, or a copy of a quoted hit
                continue
            cost = tokens.count(line) + 1
            if used + cost > request.budget:
                left = request.budget - used - 1
                if left < _MIN_RECALL_LINE:
                    break
                line = tokens.truncate(line, left)
                cost = tokens.count(line) + 1
            lines.append(line)
            hits.append(hit)
            used += cost
        if not lines:
            return SourcePart.empty(self.name)
        text = "\n".join([RECALL_HEADER, *lines])
        while tokens.count(text) > request.budget:  # joins can merge tokens; cut to be exact
            text = tokens.truncate(text, max(0, tokens.count(text) - 2))
        iris = tuple(hit.iri for hit in hits)
        return SourcePart(self.name, text, tokens.count(text), iris, tuple(hits))


def _line(node: dict[str, Any], known: set[str]) -> str | None:
    """The recall line of a hit's node (``- [role] text`` for a turn), or ``None`` to skip it."""
    body = " ".join(_readable(node).split())
    if not body or body in known:
        return None
    known.add(body)
    role = node.get("role")
    return f"- [{role}] {body}" if isinstance(role, str) else f"- {body}"


def entry_text(entry: Entry) -> str:
    """The text of an entry as a reader wants it: its ``text`` property when it has one (a turn,
    a note), else every string and number value of the node, in key order."""
    return _readable(json.loads(entry.content))


def _readable(node: dict[str, Any]) -> str:
    text = node.get("text")
    return text if isinstance(text, str) else node_text(node)
