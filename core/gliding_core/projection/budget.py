"""L3: fitting a projection into a token budget, in steps that lose the least first.

The projection's text is its JSON-LD document, ``{"@context": CONTEXT_URL, "@graph": [...]}``
in compact JSON, counted exactly with the memory's token counter. When it is over the budget
it degrades one step at a time and stops at the first that fits:

``full`` -> ``depth-2`` -> ``depth-1`` (objects nested deeper become ``{"@id"}`` links) ->
``links`` (every nested object a link) -> ``summaries`` (each node its ``@id``, ``@type`` and
summary) -> ``fewer-nodes`` (the most important summaries that fit, each whole) ->
``references`` (the most important nodes' ``@id`` and ``@type``) -> ``empty``.

Counts are remembered by text (each node text and document is counted once while it stays
among the recently counted), never estimated; a long document whose nodes' own counts are
already over the budget (less what boundary merges can save) is not counted whole.

Invariants: ``Projection.tokens`` is the exact count of ``Projection.text`` and never exceeds
the budget; a node is whole (in the step's shape) or absent; the result has at least one node
whenever one node's reference alone would fit (the reference implementation truncated to
zero); ``empty`` is the empty text.
"""

from __future__ import annotations

import json
import threading
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gliding_core.blackboard.vocabulary import CONTEXT_URL
from gliding_core.errors import InvalidInputError
from gliding_core.jsonld import preview
from gliding_core.tokens import TokenCounter

STEPS = (
    "full",
    "depth-2",
    "depth-1",
    "links",
    "summaries",
    "fewer-nodes",
    "references",
    "empty",
)
_SUMMARY_KEYS = ("summary", "description", "name", "title", "text", "content")
_SUMMARY_CHARS = 200
DEFAULT_IMPORTANCE = 0.5
# How many tokens a node's JSON may lose to merges at its boundaries inside a document.
_MERGE = 3
_EXTRA_TRIES = 4
_MEMO_SIZE = 8_192
# One encoder for every text (json.dumps with options builds a new one on each call).
_JSON = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"))
# Characters per token above which a document is judged by its nodes' counts first.
_LONG = 3
_MEMO_CHARS = 16_384  # a longer text is counted each time, not kept


@dataclass(frozen=True, slots=True)
class Projection:
    """A frame's view of a task, fitted to a budget.

    Attributes:
        task: the task's IRI.
        frame: the frame's name.
        text: the JSON-LD document in compact JSON ("" when nothing fits).
        tokens: the exact token count of ``text``.
        iris: the IRIs of the top-level nodes shown, in order.
        step: the degradation step taken (one of ``STEPS``).
        total: how many nodes the frame returned before fitting.
        budget: the budget it was fitted to.
        cached: whether the frame's result came from the view cache.
    """

    task: str
    frame: str
    text: str
    tokens: int
    iris: tuple[str, ...]
    step: str
    total: int
    budget: int
    cached: bool = False

    @property
    def document(self) -> dict[str, Any]:
        """The JSON-LD document (an empty dict for ``empty``)."""
        value: dict[str, Any] = json.loads(self.text) if self.text else {}
        return value


def check_budget(budget: object) -> int:
    """Return ``budget`` if it is an int >= 0."""
    if isinstance(budget, bool) or not isinstance(budget, int) or budget < 0:
        raise InvalidInputError(f"budget must be an int >= 0 tokens, got {preview(budget)}")
    return budget


def render(nodes: Sequence[Mapping[str, Any]]) -> str:
    """Return the projection document of ``nodes`` as compact JSON."""
    document = {"@context": CONTEXT_URL, "@graph": list(nodes)}
    return _JSON.encode(document)


class _Counts:
    """Exact token counts of texts counted before, least recently used first out.

    Keyed by the encoding and the text itself, so a hit is the count the counter would give.
    A cold projection after a write counts the same node texts and, for an unchanged frame
    result, the same documents as the projection before it: each is counted once.
    """

    def __init__(self, size: int = _MEMO_SIZE) -> None:
        self.size = size
        self._counts: OrderedDict[tuple[str, str], int] = OrderedDict()
        self._lock = threading.Lock()

    def count(self, counter: TokenCounter, text: str) -> int:
        """Return the exact token count of ``text`` with ``counter``."""
        if len(text) > _MEMO_CHARS:
            return counter.count(text)
        key = (counter.encoding_name, text)
        with self._lock:
            found = self._counts.get(key)
            if found is not None:
                self._counts.move_to_end(key)
                return found
        tokens = counter.count(text)
        with self._lock:
            self._counts[key] = tokens
            while len(self._counts) > self.size:
                self._counts.popitem(last=False)
        return tokens

    def clear(self) -> None:
        """Forget every count."""
        with self._lock:
            self._counts.clear()


_COUNTS = _Counts()


def forget_counts() -> None:
    """Forget the remembered token counts."""
    _COUNTS.clear()


class _Counter:
    """A token counter answering from ``_COUNTS`` (the interface ``fit`` uses)."""

    def __init__(self, counter: TokenCounter) -> None:
        self.counter = counter

    def count(self, text: str) -> int:
        return _COUNTS.count(self.counter, text)


def fit(
    nodes: Sequence[Mapping[str, Any]], budget: int, counter: TokenCounter
) -> tuple[str, int, tuple[dict[str, Any], ...], str]:
    """Return ``(text, tokens, nodes shown, step)`` for the first step within ``budget``."""
    budget = check_budget(budget)
    counting = _Counter(counter)
    if nodes:
        previous = ""
        for step, shape in _SHAPES:
            shaped = shape(nodes)
            text = render(shaped)
            if text == previous:
                continue  # nothing nested this deep: the same text does not fit either
            previous = text
            if _surely_over(shaped, text, budget, counting):
                continue
            tokens = counting.count(text)
            if tokens <= budget:
                return text, tokens, tuple(shaped), step
        for step, shape in (("fewer-nodes", summaries), ("references", references)):
            chosen = _fewest(nodes, shape(nodes), budget, counting)
            if chosen:
                text = render(chosen)
                return text, counting.count(text), tuple(chosen), step
    return "", 0, (), "empty"


def _surely_over(
    shaped: Sequence[Mapping[str, Any]], text: str, budget: int, counting: _Counter
) -> bool:
    """Return whether the document of ``shaped`` is over ``budget`` by its nodes' own counts.

    A long document is judged by the sum of its nodes' counts (remembered from the projections
    before, so only a changed node is counted) less what merges at their boundaries could
    save, instead of counting all of it again. Only a clear excess skips the exact count.
    """
    if len(shaped) < 2 or len(text) <= _LONG * budget:
        return False
    least = sum(counting.count(_compact(n)) for n in shaped) - _MERGE * (len(shaped) + 1)
    return least > budget


_SHAPES: tuple[tuple[str, Callable[[Sequence[Mapping[str, Any]]], list[dict[str, Any]]]], ...] = (
    ("full", lambda nodes: [dict(n) for n in nodes]),
    ("depth-2", lambda nodes: [limit_depth(n, 2) for n in nodes]),
    ("depth-1", lambda nodes: [limit_depth(n, 1) for n in nodes]),
    ("links", lambda nodes: [limit_depth(n, 0) for n in nodes]),
    ("summaries", lambda nodes: summaries(nodes)),
)


def limit_depth(node: Mapping[str, Any], depth: int) -> dict[str, Any]:
    """Return ``node`` with objects nested more than ``depth`` levels down as ``{"@id"}`` links.

    An anonymous object (no ``@id``) past the limit cannot be linked, so it is left out.
    """
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key.startswith("@"):
            out[key] = value
            continue
        kept = _limit_value(value, depth)
        if kept is not _GONE:
            out[key] = kept
    return out


_GONE = object()


def _limit_value(value: Any, depth: int) -> Any:
    if isinstance(value, list):
        items = [_limit_value(item, depth) for item in value]
        kept = [item for item in items if item is not _GONE]
        return kept if kept else _GONE
    if isinstance(value, dict) and "@value" not in value:
        if depth > 0:
            return limit_depth(value, depth - 1)
        return {"@id": value["@id"]} if "@id" in value else _GONE
    return value


def summaries(nodes: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Return each node as its ``@id``, ``@type`` and a one-value summary."""
    return [summarise(n) for n in nodes]


def summarise(node: Mapping[str, Any]) -> dict[str, Any]:
    """Return a node's ``@id``, ``@type`` and summary (or description, name, text...)."""
    out = {k: node[k] for k in ("@id", "@type") if k in node}
    for key in _SUMMARY_KEYS:
        value = node.get(key)
        if isinstance(value, list):
            value = next((v for v in value if isinstance(v, str)), None)
        if isinstance(value, str) and value:
            if len(value) > _SUMMARY_CHARS:
                value = value[:_SUMMARY_CHARS] + "..."
            out["summary"] = value
            break
    return out


def importance(node: Mapping[str, Any]) -> float:
    """Return a node's ``importance`` (a number in [0, 1]); 0.5 when it has none."""
    value = node.get("importance")
    if isinstance(value, (int, float)) and not isinstance(value, bool) and 0 <= value <= 1:
        return float(value)
    return DEFAULT_IMPORTANCE


def references(nodes: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Return each node as its ``@id`` and ``@type`` only."""
    return [{k: n[k] for k in ("@id", "@type") if k in n} for n in nodes]


def _fewest(
    nodes: Sequence[Mapping[str, Any]],
    shaped: Sequence[dict[str, Any]],
    budget: int,
    counter: _Counter,
) -> list[dict[str, Any]]:
    """Return the most important of the ``shaped`` nodes that fit together, in their order.

    Each is counted once; the most important are taken while the sum of their counts (and a
    token per separator) fits, then the exact count of the document decides and drops the
    least important until it fits; a few more exact tries use what boundary merges left.
    A document of one node is always tried, so one node that fits alone is never left out.
    """
    sizes = [counter.count(_compact(n)) for n in shaped]  # count_many starts a thread pool
    room = budget - counter.count(render([]))
    ranked = sorted(range(len(nodes)), key=lambda i: (-importance(nodes[i]), i))
    chosen: list[int] = []
    used = 0
    for index in ranked:
        cost = sizes[index] + (1 if chosen else 0)  # a comma between two nodes
        if used + cost <= room:
            chosen.append(index)
            used += cost
    while chosen and _count(shaped, chosen, counter) > budget:
        chosen.pop()  # the least important of those taken
    if not chosen:
        return [shaped[i] for i in _first_alone(shaped, ranked, budget, counter)]
    slack = budget - _count(shaped, chosen, counter)
    candidates = [i for i in ranked if i not in chosen][:_EXTRA_TRIES]
    for index in candidates:  # boundaries merge tokens: what is left may take another node
        if sizes[index] <= slack + _MERGE:
            trial = [*chosen, index]
            total = _count(shaped, trial, counter)
            if total <= budget:
                chosen, slack = trial, budget - total
    return [shaped[i] for i in sorted(chosen)]


def _count(shaped: Sequence[dict[str, Any]], chosen: Sequence[int], counter: _Counter) -> int:
    return counter.count(render([shaped[i] for i in sorted(chosen)]))


def _first_alone(
    shaped: Sequence[dict[str, Any]], ranked: Sequence[int], budget: int, counter: _Counter
) -> list[int]:
    for index in ranked:
        if counter.count(render([shaped[index]])) <= budget:
            return [index]
    return []


def _compact(node: Mapping[str, Any]) -> str:
    return _JSON.encode(node)
