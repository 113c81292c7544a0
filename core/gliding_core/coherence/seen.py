"""L2 coherence: what one agent's model was shown of shared nodes, and what it is shown next.

``SeenNodes`` is the ledger of one agent's model view (one per ``FrameSource`` or
conversation): for every shared node it was shown, the generation and the exact value shown.
``SeenNodes.render`` shows the next call's nodes by that ledger, at the least cost that hides
nothing:

- a node never shown is shown whole (in the shape the budget allows, see ``Fit``);
- a node whose current value equals the value shown is unchanged: shown as a reference (its
  IRI, generation and a one-line summary) or left out, by the ``unchanged`` policy;
- a node whose value differs from the one shown is shown as the change (the properties that
  differ from the value shown, and those removed), or whole when the change would cost as much;
  when neither fits, as a one-line notice that it changed (the model knows its copy is old).

Values decide, generations label. The value is what the model knows, the generation when it
was true: a node shown at generation 3 that is now at 5 with the same value (a write to a
property the frame does not show, or the same value rewritten) is unchanged for this model and
is shown as a reference at generation 5; a node whose value differs is a change whatever the
generations say. A race between reading generations and values can cost tokens, never hide a
change.

Framed documents (L3 projections): the economy applies to the top-level nodes of the frame's
``@graph`` (the artifacts). Each is compared as framed, nested objects included, so a change
to an embedded node changes every top-level node that embeds it and is shown as that node's
change (the property that holds it); a nested node is never a reference of its own. The whole
nodes are one JSON-LD document fitted by the projection's degradation steps; the ledger keeps
the shape shown (a summary, say), so the next call shows the rest as a change.

A node shown before that is no longer among the nodes (``gone``) is said to be deleted, or to
have changed and left the view, when it did, and is forgotten then: the model's copy of it
must not pass for current either. One that left the view unchanged needs no word.

Budget: the changes and departures are placed first (they correct what the model holds),
then the whole nodes, then the references; the text is counted whole after each placement.
The ledger moves only for what the text shows: a node left out for room keeps the value shown
before, so the next call shows its change again.

The ledger stands for what the model still has in its context: sound where the agent keeps
what it was shown (an agent loop whose transcript holds the earlier views, or where an IRI is
enough because the agent can read the node); call ``forget`` when that context is reset, and
use no ledger where every call starts afresh.

Copies (``SeenNodes.of``): where every call's context is built afresh (an agent middleware
rebuilds its memory message each call), the ledger of one call is made from the copies of
shared nodes that call's messages hold (the blackboard tools' results,
``gliding_core.view.stale_turns.node_copies``), each cut to what the view shows of its node
(``within_view``). A copy is a node's value at a generation, so such a ledger also reads the
generations: a node at its copy's generation is a reference when the copy holds what the view
shows, and whole otherwise (the copy was partial: a shaped view, or embedded nodes it lacks); a
node that has moved past its copy's generation is shown as its change (the properties of the
view that differ from the copy, or none: the copy is still old), never as a reference.

Invariants: never a reference for a node whose value differs from the one shown (nor, in a
ledger of copies, for one whose generation moved past its copy's); ``tokens`` is the exact
count of ``text`` and never over the budget; nodes keep their order within a kind; one lock
per ledger.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from gliding_core.coherence.context import summary
from gliding_core.errors import InvalidInputError
from gliding_core.jsonld import Node, canonical_json, preview, validate_iri
from gliding_core.tokens import TokenCounter

Unchanged = Literal["reference", "omit"]
Kind = Literal["whole", "change", "reference", "notice", "omitted", "dropped", "gone"]
Fit = Callable[
    [Sequence[Mapping[str, Any]], int, TokenCounter],
    tuple[str, int, tuple[dict[str, Any], ...], str],
]
"""Fit nodes to a budget: ``(text, tokens, nodes shown as shaped, step)``
(``gliding_core.projection.budget.fit`` has this signature)."""


@dataclass(frozen=True, slots=True)
class SharedNode:
    """A shared node to show: its IRI, its current generation (``None`` if unknown), its value."""

    iri: str
    generation: int | None
    value: Node


@dataclass(frozen=True, slots=True)
class SeenView:
    """What ``SeenNodes.render`` shows.

    Attributes:
        text: the whole nodes' document, then one line per change, then one per reference.
        tokens: the exact token count of ``text``.
        iris: the IRIs the text shows (whole, change, reference, notice), in the asked order.
        kinds: how each asked node was treated (``dropped``: no room for it at all).
        whole: the whole nodes as shown (shaped by the fit step).
        step: the fit step of the whole nodes (``empty`` when there were none).
    """

    text: str
    tokens: int
    iris: tuple[str, ...]
    kinds: Mapping[str, Kind]
    whole: tuple[dict[str, Any], ...] = ()
    step: str = "empty"


@dataclass(frozen=True, slots=True)
class _Shown:
    generation: int | None
    value: Node
    text: str  # canonical JSON of ``value``


@dataclass(slots=True)
class _Plan:
    node: SharedNode
    kind: Kind
    line: str = ""  # the change or reference line
    notice: str = ""  # the change's fallback


@dataclass(slots=True)
class _Layout:
    counter: TokenCounter
    budget: int
    document: str = ""
    changes: list[str] = field(default_factory=list)
    references: list[str] = field(default_factory=list)

    def text(self) -> str:
        return "\n".join(t for t in (self.document, *self.changes, *self.references) if t)

    def add(self, lines: list[str], line: str) -> bool:
        lines.append(line)
        if self.counter.count(self.text()) <= self.budget:
            return True
        lines.pop()
        return False


def fit_lines(
    nodes: Sequence[Mapping[str, Any]], budget: int, counter: TokenCounter
) -> tuple[str, int, tuple[dict[str, Any], ...], str]:
    """Fit nodes as canonical JSON lines: the first ones that fit, each whole."""
    kept: list[dict[str, Any]] = []
    text = ""
    for node in nodes:
        candidate = "\n".join(t for t in (text, canonical_json(node)) if t)
        if counter.count(candidate) > budget:
            break
        kept.append(dict(node))
        text = candidate
    return text, counter.count(text), tuple(kept), "full" if kept else "empty"


class SeenNodes:
    """The ledger of shared nodes one agent's model was shown, and the renderer that reads it.

    Args:
        unchanged: ``reference`` shows a node unchanged since it was shown as its IRI and a
            summary line; ``omit`` leaves it out.
    """

    def __init__(self, *, unchanged: Unchanged = "reference") -> None:
        if unchanged not in ("reference", "omit"):
            raise InvalidInputError(f"unchanged must be 'reference' or 'omit', got {unchanged!r}")
        self.unchanged: Unchanged = unchanged
        self._shown: dict[str, _Shown] = {}
        self._lock = threading.Lock()
        self._copies = False  # a ledger of copies (``of``) also reads the generations

    @classmethod
    def of(cls, copies: Iterable[SharedNode], *, unchanged: Unchanged = "reference") -> SeenNodes:
        """Return the ledger of a model whose context holds ``copies`` now.

        Of two copies of one node the one at the higher generation is kept (of two at one
        generation, the later). See "Copies" in the module docstring for how such a ledger
        renders.

        Raises:
            InvalidInputError: a copy is not a ``SharedNode`` (an IRI, a generation or
                ``None``, a JSON object), or ``unchanged`` is no policy.
        """
        ledger = cls(unchanged=unchanged)
        ledger._copies = True
        if isinstance(copies, (str, bytes, Mapping)) or not isinstance(copies, Iterable):
            raise InvalidInputError(f"copies must be SharedNodes, got {preview(copies)}")
        for copy in copies:
            _check_copy(copy)
            before = ledger._shown.get(copy.iri)
            if before is None or _newer_or_same(copy.generation, before.generation):
                ledger._shown[copy.iri] = _shown(copy.generation, copy.value)
        return ledger

    def __len__(self) -> int:
        return len(self._shown)

    def __contains__(self, iri: object) -> bool:
        return iri in self._shown

    def generation(self, iri: str) -> int | None:
        """Return the generation ``iri`` was last shown at (``None``: never, or unknown)."""
        shown = self._shown.get(iri)
        return None if shown is None else shown.generation

    def iris(self) -> list[str]:
        """Return the IRIs of the nodes shown so far, in the order first shown."""
        with self._lock:
            return list(self._shown)

    def forget(self, iris: Iterable[str] | None = None) -> None:
        """Forget what was shown (of ``iris``, or everything): those nodes are shown whole next."""
        with self._lock:
            if iris is None:
                self._shown.clear()
            else:
                for iri in [iris] if isinstance(iris, str) else iris:
                    self._shown.pop(iri, None)

    def render(
        self,
        nodes: Sequence[SharedNode],
        budget: int,
        counter: TokenCounter,
        *,
        fit: Fit = fit_lines,
        gone: Mapping[str, int | None] | None = None,
    ) -> SeenView:
        """Show ``nodes`` within ``budget`` tokens by what was shown before, and remember it.

        Args:
            nodes: the nodes of this call, in the order to show them (an IRI once).
            budget: the most tokens the text may take.
            counter: counts tokens (the memory's counter).
            fit: fits the whole nodes into the room left (``fit_lines`` by default).
            gone: nodes shown before and not among ``nodes`` now, with their current
                generation (``None``: deleted).
        """
        wanted = _check_nodes(nodes)
        gone = _check_gone(gone)
        if isinstance(budget, bool) or not isinstance(budget, int) or budget < 0:
            raise InvalidInputError(f"budget must be an int >= 0, got {preview(budget)}")
        with self._lock:
            plans = [self._plan(node, counter) for node in wanted]
            layout = _Layout(counter, budget)
            kinds: dict[str, Kind] = {}
            for plan in plans:
                if plan.kind == "change":
                    kinds[plan.node.iri] = self._place_change(layout, plan)
            kinds |= self._place_gone(layout, gone)
            whole, step = self._place_whole(layout, [p for p in plans if p.kind == "whole"], fit)
            kinds |= {plan.node.iri: "whole" for plan in whole}
            for plan in plans:
                if plan.kind == "reference":
                    added = layout.add(layout.references, plan.line)
                    kinds[plan.node.iri] = "reference" if added else "omitted"
                    self._keep(plan.node, self._shown[plan.node.iri])
                elif plan.kind == "omitted":
                    kinds[plan.node.iri] = "omitted"
                    self._keep(plan.node, self._shown[plan.node.iri])
                kinds.setdefault(plan.node.iri, "dropped")
            text = layout.text()
        shown = tuple(n.iri for n in wanted if kinds[n.iri] not in ("omitted", "dropped"))
        shown += tuple(iri for iri, kind in kinds.items() if kind == "gone")
        shaped = tuple(plan.node.value for plan in whole)
        return SeenView(text, counter.count(text), shown, kinds, shaped, step)

    def _plan(self, node: SharedNode, counter: TokenCounter) -> _Plan:
        text = canonical_json(node.value)
        before = self._shown.get(node.iri)
        if before is None:
            return _Plan(node, "whole")
        behind = self._copies and _moved_on(before.generation, node.generation)
        if before.text == text and not behind:
            if self.unchanged == "omit":
                return _Plan(node, "omitted")
            return _Plan(node, "reference", reference_line(node))
        if self._copies and not behind:  # a partial copy at the current generation
            return _Plan(node, "whole")
        line = change_line(node, before.generation, before.value)
        if counter.count(line) >= counter.count(text):
            return _Plan(node, "whole")
        return _Plan(node, "change", line, notice_line(node, before.generation))

    def _place_change(self, layout: _Layout, plan: _Plan) -> Kind:
        if layout.add(layout.changes, plan.line):
            self._shown[plan.node.iri] = _shown(plan.node.generation, plan.node.value)
            return "change"
        return "notice" if layout.add(layout.changes, plan.notice) else "dropped"

    def _place_gone(self, layout: _Layout, gone: Mapping[str, int | None]) -> dict[str, Kind]:
        """Say which nodes shown before were deleted or changed out of the view; forget them."""
        said: dict[str, Kind] = {}
        for iri, now in gone.items():
            before = self._shown.get(iri)
            if before is None or (now is not None and now == before.generation):
                continue
            if now is None:
                line = f"{iri} (shown at {_generation(before.generation)}) has been deleted"
            else:
                line = f"{iri} changed ({_moved(before.generation, now)}): no longer in this view"
            if layout.add(layout.changes, line):
                del self._shown[iri]
                said[iri] = "gone"
        return said

    def _place_whole(
        self, layout: _Layout, plans: list[_Plan], fit: Fit
    ) -> tuple[list[_Plan], str]:
        if not plans:
            return [], "empty"
        room = layout.budget - layout.counter.count(layout.text()) - 1
        while room >= 0:
            text, _, shaped, step = fit([p.node.value for p in plans], room, layout.counter)
            layout.document = text
            over = layout.counter.count(layout.text()) - layout.budget
            if over <= 0:
                return self._record_whole(plans, shaped), step
            room -= over
        layout.document = ""
        return [], "empty"

    def _record_whole(self, plans: list[_Plan], shaped: Sequence[Mapping[str, Any]]) -> list[_Plan]:
        by_iri = {p.node.iri: p.node for p in plans}
        shown: list[_Plan] = []
        for value in shaped:
            node = by_iri.get(str(value.get("@id")))
            if node is not None:
                self._shown[node.iri] = _shown(node.generation, dict(value))
                shown.append(_Plan(SharedNode(node.iri, node.generation, dict(value)), "whole"))
        return shown

    def _keep(self, node: SharedNode, before: _Shown) -> None:
        """The value shown still holds: label it with the current generation."""
        self._shown[node.iri] = _Shown(node.generation, before.value, before.text)


def within_view(
    copy: SharedNode, view: Mapping[str, Any], *, now: Mapping[str, Any] | None = None
) -> SharedNode:
    """Return what ``copy`` (a whole node's value) holds of ``view`` (what a view shows of it).

    The copy's values of the properties the view shows, and of those the node no longer has
    (``now``: its value now, when known), so that a change against the result says which
    properties were removed and never calls a property the view leaves out removed.
    """
    _check_copy(copy)
    if not isinstance(view, Mapping):
        raise InvalidInputError(f"view must be a JSON object, got {preview(view)}")
    kept = {
        key: value
        for key, value in copy.value.items()
        if key in view or (now is not None and key not in now)
    }
    return SharedNode(copy.iri, copy.generation, kept)


def reference_line(node: SharedNode) -> str:
    """Return the line of a node unchanged since it was shown: IRI, generation, summary."""
    return f"{node.iri} ({_generation(node.generation)}, unchanged): {summary(node.value)}"


def change_line(node: SharedNode, before: int | None, old: Node) -> str:
    """Return the line of what differs in ``node`` from ``old``, the value shown at ``before``."""
    changed = {k: v for k, v in node.value.items() if k not in old or old[k] != v}
    body: dict[str, Any] = {"changed": changed}
    removed = sorted(k for k in old if k not in node.value)
    if removed:
        body["removed"] = removed
    return f"{node.iri} changed ({_moved(before, node.generation)}): {canonical_json(body)}"


def notice_line(node: SharedNode, before: int | None) -> str:
    """Return the line of a change there is no room to show: it moved, read it again."""
    return f"{node.iri} changed ({_moved(before, node.generation)}): read it again"


def _generation(generation: int | None) -> str:
    return "generation unknown" if generation is None else f"generation {generation}"


def _moved(before: int | None, now: int | None) -> str:
    if before is None or now is None:
        return "since shown"
    return f"generation {before} -> {now}"


def _shown(generation: int | None, value: Node) -> _Shown:
    return _Shown(generation, value, canonical_json(value))


def _moved_on(before: int | None, now: int | None) -> bool:
    """Whether a node is known to be at another generation than the one shown."""
    return before is not None and now is not None and before != now


def _newer_or_same(generation: int | None, than: int | None) -> bool:
    return generation is None or than is None or generation >= than


def _check_copy(copy: object) -> SharedNode:
    if not isinstance(copy, SharedNode):
        raise InvalidInputError(f"not a SharedNode: {preview(copy)}")
    validate_iri(copy.iri)
    if copy.generation is not None and not _is_generation(copy.generation):
        raise InvalidInputError(f"bad generation of {copy.iri!r}: {preview(copy.generation)}")
    if not isinstance(copy.value, dict):
        raise InvalidInputError(f"the value of {copy.iri!r} must be a JSON object")
    return copy


def _check_nodes(nodes: object) -> list[SharedNode]:
    if isinstance(nodes, (str, bytes)) or not isinstance(nodes, Sequence):
        raise InvalidInputError(f"nodes must be a list of SharedNode, got {preview(nodes)}")
    seen: dict[str, SharedNode] = {}
    for node in nodes:
        seen.setdefault(_check_copy(node).iri, node)
    return list(seen.values())


def _check_gone(gone: object) -> dict[str, int | None]:
    if gone is None:
        return {}
    if not isinstance(gone, Mapping):
        raise InvalidInputError(f"gone must map IRIs to generations, got {preview(gone)}")
    for iri, generation in gone.items():
        if not isinstance(iri, str) or not (generation is None or _is_generation(generation)):
            raise InvalidInputError(f"bad departure {preview(iri)} -> {preview(generation)}")
    return dict(gone)


def _is_generation(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0
