"""Benchmark of long-term recall on LoCoMo: hybrid search against its own arms and a window.

Two shapes of memory, each in its own fresh memory per conversation:
- ``turns``: the dialogue turns alone;
- ``mixed``: the turns together with the conversation's ``observation`` facts (one line each,
  citing the turns they name) and its ``session_summary`` texts (long, citing every turn of
  their session). An evidence turn counts as found when it, or an item citing it, is among the
  hits. The memory's own methods run on both; the view and framework methods on ``turns``.

For each conversation a fresh in-memory memory takes every turn through the public API
(``memory.store.put``, one call per turn), then each question of categories 1-4 is asked of
every method in the same run. What a turn's entry holds (``TURN_TEXTS``): ``line``, the turn as
one text, ``[session date] speaker: text``; ``said``, what a chat memory stores, who said what
(``speaker: text``) as its searched text, with the session's date and the speaker as properties
of the node, kept and returned but not searched (``index=["text"]``). Either way the node
names its speaker (``speaker``, not searched; an observation names the speaker whose turns it
was drawn from), which the hybrid search's speaker prior reads, and a hit costs the tokens of
its whole line, date included, as a model would be shown it. The methods:
- ``gliding``: the memory's hybrid search (``memory.search``);
- ``lexical``: its lexical arm alone (FTS5, BM25);
- ``dense``: its dense arm alone (the embedder, Chroma);
- ``recent``: the most recent turns;
- ``gliding-agent``: what the adapters send the model (``Conversation.view``), see
  ``AgentViewMethod``; ``gliding-agent-recall``: the same, set for long-term recall.

Framework methods join through the entry-point group ``gliding_horse.recall_methods``: each
entry names a ``ContextMethodFactory`` (in an adapter package, so the core imports no framework).
A factory takes the conversation's turns, the memory's ``TokenCounter`` and ``Embedder`` and the
budgets, ingests once, and answers ``context(question, budget)`` with the texts of the messages a
model would see. Entries whose framework is not installed are skipped and named in ``skipped``.

recall@k is the share of a question's evidence turns among the first k hits; budget recall at
B tokens is that share among the hits taken in rank order while their text fits in B cl100k
tokens. For a framework method it is the share of evidence turns whose line appears whole
(whitespace collapsed on both sides) in one of the messages it returns at budget B; recall@k is
not defined for them. Both measure the same thing: evidence text inside a context of at most B
tokens, counted as the sum of the cl100k counts of its pieces (hit lines, or message texts).
``context_tokens_mean`` is the mean size of the top-10 hits' text; ``context_tokens@B`` the mean
size of the context at budget B.
"""

from __future__ import annotations

import logging
import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any, Protocol

from gliding_core.cli.benchmarks import progress
from gliding_core.cli.benchmarks.conversations import Conversation, Turn, answerable, load
from gliding_core.cli.benchmarks.search import Searcher, searcher
from gliding_core.config import MemoryConfig, SearchOptions, TopicConfig
from gliding_core.hyperspace.embedders import Embedder, embedder_name
from gliding_core.memory import Memory
from gliding_core.tokens import TokenCounter
from gliding_core.view.conversation import Conversation as Chat

logger = logging.getLogger(__name__)

METHODS = ("gliding", "lexical", "dense", "recent")
SHAPES = ("turns", "mixed")
TURN_TEXTS = ("line", "said")
RECALL_AT = (5, 10, 20)
BUDGETS = (500, 1000, 2000)
DEPTH = 100  # hits asked of each method: enough to fill the largest budget
ENTRY_POINT_GROUP = "gliding_horse.recall_methods"

Ranker = Callable[[str], list[str]]


class ContextMethod(Protocol):
    """A comparison method that hands a model a context under a token budget."""

    def context(self, question: str, budget: int) -> Sequence[str]:
        """Return the texts of the messages a model would see for ``question`` within ``budget``."""
        ...

    def close(self) -> None:
        """Release what the method holds (databases, threads)."""
        ...


class ContextMethodFactory(Protocol):
    """Build a ``ContextMethod`` that has ingested one conversation."""

    def __call__(
        self,
        turns: Sequence[Turn],
        *,
        tokens: TokenCounter,
        embedder: Embedder,
        budgets: Sequence[int],
    ) -> ContextMethod:
        """Ingest ``turns`` (``turn.line`` is the text, ``turn.dia_id`` the id) once."""
        ...


class AgentViewMethod:
    """What ``GlidingMemoryMiddleware`` (or ``GlidingMemory``) sends the model: the
    conversation's ``view`` of the whole history plus the question.

    Every turn goes through the L1 session (``Conversation.record``: archived in L0, summarised
    in the chain), as an agent's messages do; the pieces are the view's message texts. The
    class attributes are the conversation's settings: the adapters' defaults here (half the
    room for the newest messages, half the rest for the L1 context, five recalled hits).
    """

    window_share = 0.5
    summary_share = 0.5
    recall_k = 5

    def __init__(
        self,
        turns: Sequence[Turn],
        *,
        tokens: TokenCounter,
        embedder: Embedder,
        budgets: Sequence[int],
    ) -> None:
        config = MemoryConfig(topics=TopicConfig(interval_s=0))
        self._memory = Memory(config=config, embedder=embedder)
        self._chat = Chat(
            self._memory,
            "urn:locomo:task",
            budget=max(budgets),
            window_share=self.window_share,
            summary_share=self.summary_share,
            recall_k=self.recall_k,
        )
        self._history = [{"role": "user", "content": t.line, "id": t.dia_id} for t in turns]
        self._chat.record(self._history)

    def context(self, question: str, budget: int) -> list[str]:
        """Return the texts of the view's messages, the question's own left out."""
        asked = {"role": "user", "content": question, "id": "question"}
        view = self._chat.view([*self._history, asked], query=question, budget=budget)
        return [str(m["content"]) for m in view.messages if m.get("id") != "question"]

    def close(self) -> None:
        """Close the memory."""
        self._memory.close()


class RecallHeavyViewMethod(AgentViewMethod):
    """The same view set for long-term recall: a quarter of the room for the newest messages,
    a quarter of the rest for the L1 context, up to 50 recalled hits."""

    window_share = 0.25
    summary_share = 0.25
    recall_k = 50


def discover() -> tuple[dict[str, ContextMethodFactory], dict[str, str]]:
    """Load the registered framework methods; return them and the skipped ones with the reason."""
    found: dict[str, ContextMethodFactory] = {}
    skipped: dict[str, str] = {}
    for entry in sorted(entry_points(group=ENTRY_POINT_GROUP), key=lambda e: e.name):
        try:
            found[entry.name] = entry.load()
        except ImportError as exc:  # the method's extra (its framework) is not installed
            skipped[entry.name] = f"{type(exc).__name__}: {exc}"
            logger.info("recall method %s skipped: %s", entry.name, exc)
    return found, skipped


def run(
    path: Path,
    embedder: Embedder,
    *,
    conversations: list[str] | None = None,
    methods: Sequence[str] = METHODS,
    context_methods: Mapping[str, ContextMethodFactory] | None = None,
    url: str | None = None,
    shapes: Sequence[str] = ("turns",),
    variants: Mapping[str, SearchOptions] | None = None,
    turn_text: str = "line",
) -> dict[str, Any]:
    """Ingest each conversation, ask its questions of every method, and return the figures.

    Args:
        path: the LoCoMo JSON file.
        embedder: the embedder of the memory, also handed to the framework methods.
        conversations: sample ids to run; all by default.
        methods: the memory's own methods to run.
        context_methods: framework methods by name; by default those registered under
            ``ENTRY_POINT_GROUP`` (see ``discover``). They run on the ``turns`` shape.
        url: a PostgreSQL database: the memory's methods then search L0 and pgvector there
            (``search.PostgresSearch``) instead of an in-memory SQLite memory.
        shapes: the shapes of memory to build (``SHAPES``); the figures of ``turns`` are
            ``methods``, those of another shape ``shapes[shape]["methods"]``.
        variants: more hybrid-search methods, by name: the search options each one passes
            to ``memory.search`` (``SearchOptions``).
        turn_text: what a turn's entry holds and searches (``TURN_TEXTS``, see the module).
    """
    unknown = [shape for shape in shapes if shape not in SHAPES]
    if unknown or not shapes:
        raise ValueError(f"unknown shapes {unknown}; the shapes are {', '.join(SHAPES)}")
    if turn_text not in TURN_TEXTS:
        raise ValueError(f"unknown turn text {turn_text!r}; it is one of {', '.join(TURN_TEXTS)}")
    skipped: dict[str, str] = {}
    if context_methods is None:
        found, skipped = discover()
        own = {"gliding-agent": AgentViewMethod, "gliding-agent-recall": RecallHeavyViewMethod}
        context_methods = {**own, **found}
    data = load(path, conversations)
    searches = dict(variants or {})
    figures: dict[str, Any] = {
        "conversations": [c.sample_id for c in data],
        "embedder": embedder_name(embedder),
        "turn_text": turn_text,
        "skipped": skipped,
        "shapes": {},
    }
    for shape in shapes:
        contexts = context_methods if shape == "turns" else {}
        names = [*methods, *searches, *contexts]
        scores: dict[str, dict[str, list[float]]] = {m: {} for m in names}
        timings: dict[str, list[float]] = {"ingest": []}
        questions = 0
        for conversation in progress(data, f"LoCoMo conversations ({shape})"):
            questions += _conversation(
                conversation,
                embedder,
                methods,
                scores,
                timings,
                url,
                shape=shape,
                variants=searches,
                turn_text=turn_text,
            )
            _conversation_contexts(conversation, embedder, contexts, scores, timings)
        result = {
            "questions": questions,
            "methods": {m: _summary(scores[m], timings, m) for m in names},
        }
        figures["shapes"][shape] = result
        if shape == "turns":
            figures.update(result)
    if "turns" not in figures["shapes"]:
        figures.update(figures["shapes"][shapes[0]])
    return figures


def _conversation(
    conversation: Conversation,
    embedder: Embedder,
    methods: Sequence[str],
    scores: dict[str, dict[str, list[float]]],
    timings: dict[str, list[float]],
    url: str | None = None,
    *,
    shape: str = "turns",
    variants: Mapping[str, SearchOptions] | None = None,
    turn_text: str = "line",
) -> int:
    with searcher(embedder, url) as memory:
        prefix = f"urn:locomo:{conversation.sample_id}:"
        tokens: dict[str, int] = {}
        cover: dict[str, frozenset[str]] = {}
        for key, node, graph, text, cites in _items(conversation, prefix, shape, turn_text):
            start = time.perf_counter()
            # A conversation session is a named graph, as the L1 session archives turns.
            memory.store.put(
                node,
                tags=[f"session:{node['session']}"],
                named_graph=graph,
                index=TEXT_FIELDS if "speaker" in node else None,
            )
            timings["ingest"].append((time.perf_counter() - start) * 1e3)
            tokens[key] = memory.count_tokens(text)
            cover[key] = cites
        order = list(tokens)
        rankers = _rankers(memory, prefix, order)
        for name, options in (variants or {}).items():
            rankers[name] = _variant(memory, prefix, options)
        asked = answerable(conversation)
        for question in asked:
            for method in [*methods, *(variants or {})]:
                start = time.perf_counter()
                ranked = rankers[method](question.question)
                elapsed = (time.perf_counter() - start) * 1e3
                _score(scores[method], question.evidence, ranked, tokens, cover)
                timings.setdefault(method, []).append(elapsed)
    return len(asked)


Item = tuple[str, dict[str, Any], str, str, frozenset[str]]
# An item naming its speaker (a turn; an observation, drawn from one speaker's turns) is
# searched by its text alone: the speaker is a property the search's speaker prior reads.
TEXT_FIELDS = ["text"]


def _items(
    conversation: Conversation, prefix: str, shape: str, turn_text: str = "line"
) -> list[Item]:
    """The items of one memory: ``(key, node, named graph, text, turns it covers)``; the text
    is what a hit costs (a turn's whole line)."""
    items: list[Item] = []
    previous = None
    for turn in conversation.turns:
        node: dict[str, Any] = {"@id": prefix + turn.dia_id, "@type": "DialogueTurn"}
        if turn_text == "said":
            node.update(text=f"{turn.speaker}: {turn.text}", speaker=turn.speaker, date=turn.date)
        else:
            node.update(text=turn.line, speaker=turn.speaker)
        node["session"] = turn.session
        if previous is not None and previous.session == turn.session:
            node["previous"] = {"@id": prefix + previous.dia_id}
        previous = turn
        graph = f"{prefix}session/{turn.session}"
        items.append((turn.dia_id, node, graph, turn.line, frozenset([turn.dia_id])))
    if shape == "turns":
        return items
    for note in conversation.notes:
        node = {
            "@id": prefix + note.key,
            "@type": "Observation" if note.kind == "observation" else "SessionSummary",
            "text": note.text,
            **({"speaker": note.speaker} if note.speaker else {}),
            "session": note.session,
            "cites": [{"@id": prefix + dia_id} for dia_id in note.cites],
        }
        graph = f"{prefix}session/{note.session}"
        items.append((note.key, node, graph, note.text, frozenset(note.cites)))
    return items


def _variant(memory: Searcher, prefix: str, options: SearchOptions) -> Ranker:
    def rank(question: str) -> list[str]:
        return [h.iri.removeprefix(prefix) for h in memory.search(question, DEPTH, **options)]

    return rank


def _conversation_contexts(
    conversation: Conversation,
    embedder: Embedder,
    factories: Mapping[str, ContextMethodFactory],
    scores: dict[str, dict[str, list[float]]],
    timings: dict[str, list[float]],
) -> None:
    counter = TokenCounter()
    lines = {t.dia_id: _normalise(t.line) for t in conversation.turns}
    asked = answerable(conversation)
    for name, factory in factories.items():
        start = time.perf_counter()
        method = factory(conversation.turns, tokens=counter, embedder=embedder, budgets=BUDGETS)
        per_turn = (time.perf_counter() - start) * 1e3 / max(len(conversation.turns), 1)
        timings.setdefault(f"{name}:ingest", []).append(per_turn)
        try:
            for question in asked:
                for budget in BUDGETS:
                    start = time.perf_counter()
                    pieces = list(method.context(question.question, budget))
                    timings.setdefault(name, []).append((time.perf_counter() - start) * 1e3)
                    used = sum(counter.count_many(pieces))
                    _score_context(scores[name], question.evidence, pieces, lines, budget, used)
        finally:
            method.close()


def _normalise(text: str) -> str:
    return " ".join(text.split())


def _score_context(
    into: dict[str, list[float]],
    evidence: Sequence[str],
    pieces: Sequence[str],
    lines: dict[str, str],
    budget: int,
    used: int,
) -> None:
    """Score one context: evidence lines found whole in one of its pieces."""
    wanted = set(evidence) & set(lines)
    texts = [_normalise(piece) for piece in pieces]
    found = {d for d in wanted if any(lines[d] in text for text in texts)}
    into.setdefault(f"budget_recall@{budget}", []).append(len(found) / len(wanted))
    into.setdefault(f"context_tokens@{budget}", []).append(float(used))
    into.setdefault(f"over_budget@{budget}", []).append(float(used > budget))


def _rankers(memory: Searcher, prefix: str, order: list[str]) -> dict[str, Ranker]:
    def strip(iris: list[str]) -> list[str]:
        return [iri.removeprefix(prefix) for iri in iris]

    return {
        "gliding": lambda q: strip([h.iri for h in memory.search(q, DEPTH)]),
        "lexical": lambda q: strip([h.entry.iri for h in memory.store.search_text(q, limit=DEPTH)]),
        "dense": lambda q: strip([iri for iri, _ in memory.index.query(q, DEPTH)]),
        "recent": lambda q: list(reversed(order))[:DEPTH],
    }


def _score(
    into: dict[str, list[float]],
    evidence: Sequence[str],
    ranked: list[str],
    tokens: dict[str, int],
    cover: Mapping[str, frozenset[str]],
) -> None:
    """Score one ranking: the evidence turns covered by the first k hits, and by the hits that
    fit in each budget (a hit covers its turn, or the turns it cites)."""
    wanted = set(evidence) & set().union(*cover.values())

    def covered(keys: Sequence[str]) -> float:
        found = set().union(*(cover.get(key, frozenset()) for key in keys))
        return len(wanted & found) / len(wanted)

    for k in RECALL_AT:
        into.setdefault(f"recall@{k}", []).append(covered(ranked[:k]))
    for budget in BUDGETS:
        taken: list[str] = []
        used = 0
        for key in ranked:
            cost = tokens.get(key, 0)
            if used + cost > budget:
                break
            taken.append(key)
            used += cost
        into.setdefault(f"budget_recall@{budget}", []).append(covered(taken))
        into.setdefault(f"context_tokens@{budget}", []).append(float(used))
    into.setdefault("context_tokens", []).append(float(sum(tokens.get(d, 0) for d in ranked[:10])))


def _summary(
    scores: dict[str, list[float]], timings: dict[str, list[float]], method: str
) -> dict[str, float]:
    def quantile(values: list[float], cut: int) -> float:
        if len(values) < 2:
            return values[0] if values else 0.0
        return statistics.quantiles(values, n=100, method="inclusive")[cut - 1]

    out = {
        name: statistics.fmean(values)
        for name, values in scores.items()
        if name != "context_tokens"
    }
    if "context_tokens" in scores:  # the top-10 hits: only ranked methods have them
        out["context_tokens_mean"] = statistics.fmean(scores["context_tokens"])
    # A framework method ingests inside its factory: per-turn time, one value per conversation.
    ingest = timings.get(f"{method}:ingest", timings["ingest"])
    out["ingest_p50_ms"] = quantile(ingest, 50)
    out["ingest_p95_ms"] = quantile(ingest, 95)
    out["search_p50_ms"] = quantile(timings.get(method, []), 50)
    out["search_p95_ms"] = quantile(timings.get(method, []), 95)
    return out
