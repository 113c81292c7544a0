"""Settings: validated, immutable objects holding every default of the memory.

Every default of the memory is chosen here and nowhere else. A bad value raises
``ConfigError`` naming the field and the value.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any, Literal, TypedDict
from urllib.parse import unquote

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)
from typing_extensions import Unpack

from gliding_core.checks import check_count
from gliding_core.errors import ConfigError, InvalidInputError
from gliding_core.fields import check_by_type
from gliding_core.jsonld import DEFAULT_MAX_DEPTH, MAX_DEPTH_CEILING, check_label, preview
from gliding_core.tokens import DEFAULT_ENCODING


class Settings(BaseModel):
    """Base of every settings object: frozen, no unknown fields, typed errors."""

    model_config = ConfigDict(frozen=True, extra="forbid", strict=True)

    def __init__(self, **values: Any) -> None:
        try:
            super().__init__(**values)
        except ValidationError as exc:
            problems = "; ".join(self._problem(err) for err in exc.errors())
            raise ConfigError(f"invalid {type(self).__name__}: {problems}") from None

    @classmethod
    def _problem(cls, err: Any) -> str:
        """Say what is wrong with one field; a secret field's value is never shown (its
        validator names what it may, masked)."""
        where = ".".join(str(p) for p in err["loc"])
        field = cls.model_fields.get(str(err["loc"][0])) if err["loc"] else None
        if field is not None and not field.repr:
            return f"{where}: {err['msg']}"
        return f"{where}={err.get('input')!r}: {err['msg']}"


def setting_value(kind: type[Settings], name: str, value: object) -> Any:
    """Return ``value`` as ``kind``'s field ``name`` takes it (a setting changed on a live
    object, checked as its settings object checks it).

    Raises:
        ConfigError: ``value`` is not a valid ``name`` (named in the message).
    """
    return getattr(kind(**{name: value}), name)


# English function words: they match most entries and rank none of them better.
DEFAULT_STOP_WORDS = frozenset(
    """a about above after again against all am an and any are as at be because been before
    being below between both but by can could did do does doing down during each few for from
    further had has have having he her here hers herself him himself his how i if in into is it
    its itself just me more most my myself no nor not now of off on once only or other our ours
    ourselves out over own same she should so some such than that the their theirs them
    themselves then there these they this those through to too under until up very was we were
    what when where which while who whom why will with would you your yours yourself
    yourselves""".split()  # noqa: SIM905 (a word list reads better as text)
)


class ExpiryConfig(Settings):
    """Entries that expire: the TTLs new entries get when written without one, and the sweep.

    A TTL is in seconds. An entry written with ``ttl=`` keeps that; a new one written without
    gets its graph's TTL, else the smallest TTL of its scopes, else ``default_s``, else none.

    Attributes:
        default_s: the TTL of every other new entry; ``None``: they never expire.
        by_graph: TTLs by named graph IRI.
        by_scope: TTLs by scope name (``"user:alice"``, ``"thread:t1"``, ``"task:<iri>"``: what
            ``Scope.name`` gives), for the entries carrying that scope's tag.
        sweep_interval_s: how often ``Memory`` deletes expired entries in the background (they
            are invisible from the moment they expire); 0 runs no sweep.
        sweep_batch: how many expired entries one sweep transaction deletes at most.
    """

    default_s: float | None = Field(default=None, gt=0.0)
    by_graph: dict[str, float] = {}
    by_scope: dict[str, float] = {}
    sweep_interval_s: float = Field(default=60.0, ge=0.0)
    sweep_batch: int = Field(default=1_000, gt=0)

    def __init__(self, **values: Any) -> None:
        super().__init__(**values)
        for what, table in (("by_graph", self.by_graph), ("by_scope", self.by_scope)):
            for key, seconds in table.items():
                if not key or not (seconds > 0):
                    raise ConfigError(
                        f"invalid ExpiryConfig: {what}[{key!r}]={seconds!r}: a TTL must be > 0"
                    )
        for key in self.by_scope:
            if key.split(":", 1)[0] not in ("user", "thread", "task") or ":" not in key:
                raise ConfigError(
                    f"invalid ExpiryConfig: by_scope key {key!r} is not a scope name "
                    "(user:<id>, thread:<id> or task:<iri>)"
                )


class StoreConfig(Settings):
    """L0 store settings.

    Attributes:
        max_content_bytes: the largest serialised JSON-LD node accepted, in UTF-8 bytes.
        busy_timeout_ms: how long a writer waits for another process's lock before failing.
        durability: ``"full"`` syncs the write-ahead log on every commit, so a returned write
            survives a power loss; ``"normal"`` survives a crash of the process only, and is faster.
        text_keys: node properties holding plain text, for which a merge keeps the longer value.
        default_importance: the importance of a new entry written without one.
        stop_words: words full-text queries leave out (unless nothing else is left).
        access_flush_interval_s: how often the access statistics that reads buffer are
            written (they are also written on close).
        access_buffer_limit: how many entries' buffered statistics make the store write them
            before the interval is up.
        max_depth: how deep a node or its metadata may nest (the node itself is level 1).
            64 by default: the JSON codecs recurse, and a node must stay readable from inside
            a deep call stack; at most 255.
        max_label_bytes: the longest tag or named graph name accepted, in UTF-8 bytes (they
            are index keys and travel in every filter, unlike the content they label).
        expiry: the TTLs new entries get, and the background sweep of expired ones.
        text_head_bytes: how much of a text stored in parts (``put_text``, a text over
            ``max_content_bytes``) the entry's node keeps under ``"text"``, in UTF-8 bytes: what
            reads of the node, recall and the dense index see of it; the full-text index and
            ``full_text`` have all of it.
        index_fields: which properties of a node feed search (the full-text and the dense
            index), by ``@type``: ``{"Turn": ["text"], "Profile": ["fact", "about.name"]}``
            (LangGraph's field paths, ``gliding_core.fields``), or ``False`` for a type never
            searched. A node of a type not listed is searched by its text-like values (not
            IRIs, identifiers, numbers or dates in digits); ``put(..., index=...)`` overrides
            this for one node (and later merges keep it). The other properties stay retrievable
            and filterable. Applied when an entry is written: entries keep what they were
            indexed with until written again.
        defer_common_words: an unfiltered full-text query scores its words that match at
            least this many entries only on the entries that also hold a rarer word of it
            (``store.pruning``): 5,000 (below that, scoring every match costs a few
            milliseconds), and only in a store of at least twenty times as many entries (its
            words' counts cost more than they save in a smaller one); ``0`` never defers. A row
            holding only the deferred words is then missed if it would have ranked; see
            ``defer_exactly``. In such a store the words not deferred are scored in the
            process from the index's postings (``store.postings``: FTS5's scores to the bit,
            a quarter of its time); ``0`` leaves every query to FTS5.
        defer_exactly: keep a deferred answer only when a bound on the deferred words' score
            proves it the full query's, else run the full query (``False``: keep it when the
            deferred words' idfs add up to less than the rarest kept word's; on the search
            benchmark at 1,000,000 entries the answers were the full query's, and the bound
            proved none of them).
    """

    max_content_bytes: int = Field(default=1_048_576, gt=0)
    busy_timeout_ms: int = Field(default=30_000, ge=0)
    durability: Literal["full", "normal"] = "full"
    text_keys: frozenset[str] = frozenset({"text"})
    default_importance: float = Field(default=0.5, ge=0.0, le=1.0)
    stop_words: frozenset[str] = DEFAULT_STOP_WORDS
    access_flush_interval_s: float = Field(default=1.0, gt=0.0, le=3600.0)
    access_buffer_limit: int = Field(default=10_000, gt=0)
    max_depth: int = Field(default=DEFAULT_MAX_DEPTH, ge=1, le=MAX_DEPTH_CEILING)
    max_label_bytes: int = Field(default=2_048, ge=1)
    expiry: ExpiryConfig = ExpiryConfig()
    text_head_bytes: int = Field(default=8_192, ge=256)
    index_fields: dict[str, Literal[False] | tuple[str, ...]] = {}
    defer_common_words: int = Field(default=5_000, ge=0, le=1_000_000_000)
    defer_exactly: bool = False

    @field_validator("index_fields", mode="before")
    @classmethod
    def _check_index_fields(cls, value: object) -> dict[str, Literal[False] | tuple[str, ...]]:
        try:
            return check_by_type(value)
        except InvalidInputError as exc:
            raise ValueError(str(exc)) from None


class SearchConfig(Settings):
    """How hybrid search ranks: the arms' weights, how deep each arm looks, the re-rank.

    Every field may also be given to a single ``memory.search`` call, which overrides it for
    that call (``memory.search(query, lexical_weight=1.0, dense_weight=0.0)``).

    Attributes:
        lexical_weight: the weight of the lexical arm (full-text BM25) in both stages (0.75).
        dense_weight: the weight of the dense arm (cosine of embeddings) in both stages (1.0).
            The weights are relative: 0 leaves an arm out of the ranking.
        candidates: how many hits each arm contributes to the fusion (100; at least ``k``).
        pool: how many fused hits go on to the re-rank (100).
        rerank: whether the fused candidates are re-scored by each arm's own score with their
            linked context (``True``); without it the fused rank decides.
        rrf_k: the reciprocal-rank constant of the first-stage fusion (60).
        context_weight: the share of a linked neighbour's score a candidate receives in the
            re-rank (0.2; the links are ``previous``, both ways).
        group_weight: how much a candidate gains from the best candidate of its named graph in
            the re-rank (1.0; 0 turns it off).
        group_top: how many of a named graph's best candidates make its score (1).
        group_decay: the share of the graph's gain each further candidate of one named graph
            keeps: its best candidate gains it whole, the next ``group_decay`` of it, the one
            after ``group_decay`` squared, and so on (1.0: every candidate the whole gain). Below
            1, one strong graph (a session) does not fill the first places alone, and the best
            candidates of other graphs come up beside it: the answers to a question whose
            evidence is spread over several sessions. Off by default: in conversations an
            answer usually shares its session with the best match, and there it lowered recall.
        normalise: how the re-rank puts each arm's scores on one scale: ``"range"`` (BM25 by
            its best score, cosines over the candidates' range) or ``"z"`` (standard scores
            over the candidates).
        adaptive_weights: scale each arm's weight, per query, by how sharply its best
            candidates stand out from its next ten (``False``).
        length_correction: remove from the candidates' cosines what the length of their text
            explains, by a regression over the query's candidates (``False``).
        hubness_correction: lower each candidate's cosine by half its mean cosine with its
            ten nearest fellow candidates (cross-domain similarity local scaling), so that an
            entry close to many others (short one-line facts in the same words) does not win
            the dense arm for that alone (``True``).
        speaker_weight: how much a candidate gains in the re-rank when the query names who
            said or wrote it (a value of one of its ``speaker_fields``, as whole words): that
            share of the spread of the candidates' scores (0.2; 0 turns it off). "What did
            Melanie paint?" is answered by what Melanie said, not by what was said to her.
        speaker_fields: the top-level properties of a node that name who said or wrote it
            (``("speaker", "author", "sender")``): a string, or a list of strings.
    """

    lexical_weight: float = Field(default=0.75, ge=0.0, le=100.0)
    dense_weight: float = Field(default=1.0, ge=0.0, le=100.0)
    candidates: int = Field(default=100, ge=1, le=10_000)
    pool: int = Field(default=100, ge=1, le=10_000)
    rerank: bool = True
    rrf_k: int = Field(default=60, ge=1, le=10_000)
    context_weight: float = Field(default=0.2, ge=0.0, le=10.0)
    group_weight: float = Field(default=1.0, ge=0.0, le=10.0)
    group_top: int = Field(default=1, ge=1, le=1_000)
    group_decay: float = Field(default=1.0, ge=0.0, le=1.0)
    normalise: Literal["range", "z"] = "range"
    adaptive_weights: bool = False
    length_correction: bool = False
    hubness_correction: bool = True
    speaker_weight: float = Field(default=0.2, ge=0.0, le=10.0)
    speaker_fields: tuple[str, ...] = ("speaker", "author", "sender")

    @field_validator("speaker_fields", mode="before")
    @classmethod
    def _check_speaker_fields(cls, value: object) -> tuple[str, ...]:
        if isinstance(value, (str, bytes)) or not isinstance(value, (list, tuple)):
            raise ValueError(f"must be a list of property names, got {preview(value)}")
        if len(value) > MAX_SPEAKER_FIELDS:
            raise ValueError(f"holds {len(value)} names, over {MAX_SPEAKER_FIELDS}")
        for name in value:
            if not isinstance(name, str) or not name or name.startswith("@"):
                raise ValueError(f"holds {preview(name)}: not a property name")
            try:
                check_label(name, what="a speaker field")
            except InvalidInputError as exc:
                raise ValueError(str(exc)) from None
        return tuple(dict.fromkeys(value))

    @property
    def weights(self) -> dict[str, float]:
        """The arms' weights by arm name."""
        return {"lexical": self.lexical_weight, "dense": self.dense_weight}

    def updated(self, **options: Unpack[SearchOptions]) -> SearchConfig:
        """Return these settings with ``options`` replacing fields, validated.

        Raises:
            ConfigError: an option is not a field, or a value is bad (named in the message).
        """
        unknown = sorted(set(options) - set(type(self).model_fields))
        if unknown:
            known = ", ".join(type(self).model_fields)
            raise ConfigError(f"unknown search setting {unknown[0]!r}; the settings are {known}")
        return type(self)(**{**self.model_dump(), **options}) if options else self


MAX_SPEAKER_FIELDS = 16  # the most properties naming who said an entry
MAX_WINDOWS = 256  # the most windows any setting gives one entry


class SearchOptions(TypedDict, total=False):
    """The fields of ``SearchConfig`` as keyword arguments of one search (every one optional)."""

    lexical_weight: float
    dense_weight: float
    candidates: int
    pool: int
    rerank: bool
    rrf_k: int
    context_weight: float
    group_weight: float
    group_top: int
    group_decay: float
    normalise: Literal["range", "z"]
    adaptive_weights: bool
    length_correction: bool
    hubness_correction: bool
    speaker_weight: float
    speaker_fields: tuple[str, ...]


class DenseConfig(Settings):
    """How the dense index embeds an entry's text.

    A text longer than ``window_words`` words is embedded in overlapping windows that cover it
    from its first word to its last, one vector each; the entry's dense score is the best
    (the maximum) cosine among its windows, so a fact anywhere in a long text is found as if
    it stood alone. An embedding model reads a bounded number of word pieces (all-MiniLM-L6-v2
    reads 256, about 190 English words): the default window stays inside that.

    Attributes:
        window_words: the words in one window (160).
        window_overlap: the words two neighbouring windows share (32), so a sentence cut by a
            window's edge is whole in the next.
        max_windows: the most windows of one entry (16). A text longer than these windows
            cover gets that many longer windows, spread evenly over it; a model that reads
            fewer words then sees each window's beginning only.
        context_words: a text of at most this many words is embedded after the end of the
            text of the entry it follows (the one its ``previous`` link names, of the same
            scope), as much of that as fits in one window with it, so that a short reply ("Yes,
            it was great!") is embedded with what it answers. Only its vector changes: its L0
            entry and its lexical index keep its own text. The context is read when the text
            is embedded (a later change of the entry it follows is seen when the reply is
            written again, or on ``memory.index.reset()``). 0, the default, embeds every text
            alone.
        search_ef: how many candidates the approximate (HNSW) index of an embedded or Chroma
            server index keeps while it searches (``ef_search``; 128): wider finds more of the
            exact nearest neighbours, slower (at 200,000 entries and the hash embedder,
            recall@10 against an exact search 0.35 at 128, 0.43 at 256, 0.55 at 512, 0.68 at
            1,024). A search asking for more neighbours than this uses that many. Applied to an
            existing collection when it is opened (Chroma reads it when it loads the index).
    """

    window_words: int = Field(default=160, ge=8, le=100_000)
    window_overlap: int = Field(default=32, ge=0, le=50_000)
    max_windows: int = Field(default=16, ge=1, le=MAX_WINDOWS)
    context_words: int = Field(default=0, ge=0, le=100_000)
    search_ef: int = Field(default=128, ge=1, le=100_000)

    @model_validator(mode="after")
    def _windows_advance(self) -> DenseConfig:
        if self.window_overlap >= self.window_words:
            raise ValueError(
                f"window_overlap={self.window_overlap!r} must be below "
                f"window_words={self.window_words!r} (each window must advance)"
            )
        return self


class EvictionPolicy(Settings):
    """The L1 eviction weights: phase 1 drops stale, low-relevance turns, phase 2 scores the rest.

    Phase 2 evicts the turn with the lowest
    ``beta * semantic + (1 - beta) * (recency_weight * recency + cost_weight * cost)``, where
    ``semantic = query_blend * sim(query, turn) + (1 - query_blend) * relevance``,
    ``recency = 1 / (1 + age / safe_window_s)`` and ``cost = 1 - tokens / largest turn``.

    Attributes:
        beta: the weight of semantic relevance against recency and cost (0.6: what a turn is
            about counts for more than its age and size together).
        recency_weight: the share of recency in the rest.
        cost_weight: the share of the cost term (small turns are cheap to keep).
        query_blend: how much the query similarity counts against the stored relevance.
        relevance_threshold: phase 1 evicts turns below it (0.3).
        safe_window_s: phase 1 spares turns younger than this (300 s), so the exchange under
            way is never dropped as stale.
    """

    beta: float = Field(default=0.6, ge=0.0, le=1.0)
    recency_weight: float = Field(default=0.5, ge=0.0, le=1.0)
    cost_weight: float = Field(default=0.5, ge=0.0, le=1.0)
    query_blend: float = Field(default=0.7, ge=0.0, le=1.0)
    relevance_threshold: float = Field(default=0.3, ge=0.0, le=1.0)
    safe_window_s: float = Field(default=300.0, gt=0.0)

    @classmethod
    def for_role(cls, role: str) -> EvictionPolicy:
        """Return the preset for an agent role: SA, plan, do, check or act (default: SA).

        Each role weighs recency, relevance and cost its own way (a planner or a checker keeps
        what bears on the task, a doer what is recent): relevance becomes ``beta``; recency and
        cost share the rest.
        """
        key = _ROLE_ALIASES.get(role.strip().lower(), "sa")
        recency, relevance, cost = _ROLE_WEIGHTS[key]
        return cls(
            beta=relevance,
            recency_weight=recency / (recency + cost),
            cost_weight=cost / (recency + cost),
        )


# (recency, relevance, cost) per role: relevance weighs most for the planner and the checker,
# recency and size most for the doer.
_ROLE_WEIGHTS = {
    "sa": (0.30, 0.40, 0.30),
    "plan": (0.20, 0.60, 0.20),
    "do": (0.35, 0.30, 0.35),
    "check": (0.15, 0.65, 0.20),
    "act": (0.25, 0.45, 0.30),
}
_ROLE_ALIASES = {
    "sa": "sa",
    "plan": "plan",
    "pa": "plan",
    "planner": "plan",
    "do": "do",
    "da": "do",
    "executor": "do",
    "check": "check",
    "ca": "check",
    "reviewer": "check",
    "act": "act",
    "aa": "act",
    "decision": "act",
}


class SessionConfig(Settings):
    """L1 session settings.

    Attributes:
        budget: the token budget of the summary chain (4000).
        max_summary_tokens: the longest summary a turn keeps in the chain.
        max_low_relevance: how many low-relevance turns the context lists at most.
        low_relevance_chars: how much of each low-relevance summary the context shows.
    """

    budget: int = Field(default=4_000, ge=1)
    max_summary_tokens: int = Field(default=200, ge=1)
    max_low_relevance: int = Field(default=3, ge=0)
    low_relevance_chars: int = Field(default=80, ge=8)


class TopicConfig(Settings):
    """Topic-shift monitor settings: when a shift is detected, the old topic is compressed.

    Attributes:
        threshold: a similarity below it between adjacent blocks marks a boundary (0.4).
        interval_s: how often the background check runs; 0 turns it off (120 s).
        window: turns per block on each side of a candidate boundary (1: adjacent turns).
        proactive_fill: after a shift, the old topic is evicted down to this share of budget.
    """

    threshold: float = Field(default=0.4, ge=-1.0, le=1.0)
    interval_s: float = Field(default=120.0, ge=0.0)
    window: int = Field(default=3, ge=1)
    proactive_fill: float = Field(default=0.5, ge=0.0, le=1.0)


# -- L2 coordination: leases, tasks, agents, messages -------------------------------------------


class CoordinationConfig(Settings):
    """Settings of the blackboard's coordination database (leases, tasks, agents, messages).

    The heartbeat renews an agent's leases, so an agent should beat well inside both
    ``lease_ttl_s`` and ``heartbeat_timeout_s`` (every third of the shorter one is a good pace).

    Attributes:
        lease_ttl_s: how long a lease lives unless renewed (the holder's heartbeat renews it).
        heartbeat_timeout_s: an agent silent for longer is marked Error by the sweeper and its
            leases are released, so a crashed agent never holds a lease for good.
        sweep_interval_s: how often the background sweeper looks for silent agents; 0 runs it
            only on demand.
        busy_timeout_ms: how long a write waits for another process's lock on the database.
        durability: ``"normal"`` survives a crash of the process (a power loss may lose the last
            commits); ``"full"`` syncs every commit to disk, at about a millisecond each.
        max_message_bytes: the largest coordination message payload, in UTF-8 bytes of JSON.
        max_wait_poll_s: the longest pause between two attempts while awaiting a lease (waiters
            in the same process are woken at once by a release; other processes poll).
    """

    lease_ttl_s: float = Field(default=30.0, gt=0.0)
    heartbeat_timeout_s: float = Field(default=30.0, gt=0.0)
    sweep_interval_s: float = Field(default=5.0, ge=0.0)
    busy_timeout_ms: int = Field(default=30_000, ge=0)
    durability: Literal["full", "normal"] = "normal"
    max_message_bytes: int = Field(default=65_536, gt=0)
    max_wait_poll_s: float = Field(default=0.02, gt=0.0)


# -- L2 blackboard -------------------------------------------------------------------------------


class QueryLimits(Settings):
    """The size limits of a SPARQL query, checked before any parser reads it.

    pyoxigraph 0.5.13 and ``oxigraph serve`` 0.5.13 parse and evaluate by recursion: a deep or
    long enough query overflows the stack and kills the process (every agent of an embedded
    memory with it, every client of a server). The defaults are at least ten times below
    where the server (whose query threads have the smaller stacks) crashed, for each shape
    measured (see the README's section on permissions), and above what every shipped frame
    and test needs. The largest value each field accepts is about a fifth of that crash, so
    that a query at every raised limit at once (the recursions add up) stays below it too. A
    query past a limit is refused with ``ContentTooLargeError`` before any parser (the
    project's included) walks it.

    Attributes:
        max_chars: the longest query text, in characters (checked first, before anything
            reads the text).
        max_group_depth: how deep ``{ }`` may nest (``{ {`` is 2).
        max_bracket_depth: how deep ``( )`` and ``[ ]`` may nest together (expressions,
            calls, collections, paths, blank-node property lists).
        max_triple_patterns: the most triple patterns, counted conservatively: each ``.``,
            ``;`` and ``,`` between triples, each ``{`` and ``[``, each ``FILTER``, ``BIND``,
            ``OPTIONAL``, ``MINUS`` and ``VALUES``, and two per term of a collection. The
            store's join planning grows fast with it (about the fourth power: 100 patterns in
            one group take seconds).
        max_union_arms: the most patterns joined by ``UNION`` (the ``UNION`` keywords plus one),
            over the whole query.
        max_operators: the most operators over the whole query (``|| && = != < > <= >= + - * /
            ! ^ | ?``, signed numbers) and commas.
    """

    max_chars: int = Field(default=262_144, ge=64, le=4_194_304)
    max_group_depth: int = Field(default=16, ge=2, le=40)
    max_bracket_depth: int = Field(default=16, ge=2, le=45)
    max_triple_patterns: int = Field(default=60, ge=2, le=128)
    max_union_arms: int = Field(default=32, ge=2, le=300)
    max_operators: int = Field(default=150, ge=2, le=320)


class BlackboardConfig(Settings):
    """L2 blackboard settings.

    Attributes:
        endpoint: the base URL of a SPARQL 1.1 server (``oxigraph serve``) holding the graph;
            embedded pyoxigraph when unset (in memory, or on disk under the memory directory).
        max_node_bytes: the largest node JSON accepted, in UTF-8 bytes.
        max_batch_nodes: the most nodes one write may carry.
        cache_nodes: how many nodes the node cache keeps in front of the store.
        critical_tags: tags whose nodes are written through to L0 before the write returns.
        flush_interval_s: how often dirty nodes are flushed to L0; 0 turns the timer off.
        flush_batch: how many nodes one L0 transaction of a flush takes.
        permissions: ``{role: {area: [operation, ...]}}`` replacing the default matrix.
        coordination: the settings of the coordination database (leases, tasks, agents,
            messages).
        query_limits: the size limits of every SPARQL query the blackboard runs, an agent's
            and the system's (frames): ``QueryLimits``.
    """

    endpoint: str | None = None
    max_node_bytes: int = Field(default=262_144, gt=0)
    max_batch_nodes: int = Field(default=10_000, gt=0)
    cache_nodes: int = Field(default=100_000, ge=0)
    critical_tags: frozenset[str] = frozenset({"emphasis", "user_intent", "confirmed_fact"})
    flush_interval_s: float = Field(default=5.0, ge=0.0)
    flush_batch: int = Field(default=500, gt=0)
    permissions: dict[str, dict[str, list[str]]] | None = None
    coordination: CoordinationConfig = CoordinationConfig()
    query_limits: QueryLimits = QueryLimits()


Placement = Literal["system", "user"]
PLACEMENTS: tuple[Placement, ...] = ("system", "user")
DEFAULT_RECALL_K = 5


class ViewOptions(TypedDict, total=False):
    """The fields of ``ConversationSettings`` as keyword arguments (every one optional)."""

    agent: str
    role: str
    budget: int | None
    recall_k: int
    window_share: float
    summary_share: float
    placement: Placement


@dataclass(frozen=True, slots=True)
class ConversationSettings:
    """How a conversation shows the model its memory: one object for every adapter.

    Attributes:
        agent: the agent's name (one L1 session per agent and task).
        role: the agent's role; picks the eviction policy preset.
        budget: the token budget of each model view; the L1 session's budget when ``None``.
        recall_k: how many L0 hits the memory message may quote.
        window_share: the share of the room (after system messages and supplements) that the
            newest history messages may take; the memory message gets the rest.
        summary_share: the share of the memory message the L1 context may take when part of
            the history is out of the window; recall gets the rest.
        placement: where the memory text goes: ``"system"``, a system message after the
            leading ones (agents that keep every system message: LangChain's ``create_agent``,
            LlamaIndex's ``FunctionAgent``), or ``"user"``, a user message just before the
            newest user turn (agents that replace the leading system message with their own,
            as LlamaIndex's ``ReActAgent`` does).

    Raises:
        InvalidInputError: a field has a bad value (the message names the field and value).
    """

    agent: str = "agent"
    role: str = "SA"
    budget: int | None = None
    recall_k: int = DEFAULT_RECALL_K
    window_share: float = 0.5
    summary_share: float = 0.5
    placement: Placement = "system"

    def __post_init__(self) -> None:
        for name in ("agent", "role"):
            value = getattr(self, name)
            if not isinstance(value, str) or not value.strip():
                raise InvalidInputError(f"{name} must be a non-empty string, got {preview(value)}")
        if self.budget is not None:
            check_count(self.budget, what="budget", minimum=1)
        check_count(self.recall_k, what="recall_k", minimum=0)
        for name in ("window_share", "summary_share"):
            value = getattr(self, name)
            number = isinstance(value, (int, float)) and not isinstance(value, bool)
            if not number or not 0 <= value <= 1:
                raise InvalidInputError(f"{name} must be in [0, 1], got {preview(value)}")
            object.__setattr__(self, name, float(value))
        if self.placement not in PLACEMENTS:
            raise InvalidInputError(
                f"placement must be one of {', '.join(PLACEMENTS)}, got {preview(self.placement)}"
            )

    @classmethod
    def of(
        cls, settings: ConversationSettings | None = None, **options: Unpack[ViewOptions]
    ) -> ConversationSettings:
        """Return ``settings`` (the defaults when ``None``) with ``options`` replacing fields.

        Raises:
            InvalidInputError: ``settings`` is not a ``ConversationSettings``, an option is
                not a field, or a value is bad.
        """
        if settings is None:
            settings = cls()
        elif not isinstance(settings, ConversationSettings):
            raise InvalidInputError(
                f"settings must be ConversationSettings or None, got {preview(settings)}"
            )
        unknown = sorted(set(options) - set(ViewOptions.__annotations__))
        if unknown:
            raise InvalidInputError(f"unknown conversation setting {unknown[0]!r}")
        return replace(settings, **options) if options else settings


class MemoryConfig(Settings):
    """Settings of the whole memory.

    Attributes:
        store: the L0 store settings.
        token_encoding: the tiktoken encoding used for every token count.
        session: the default settings of new L1 sessions.
        topics: the topic-shift monitor settings.
        relevance_alpha: the relevance tracker's weight of the task goal against the previous
            input (0.6: the goal counts a little more).
        bus_history: how many recent events the memory bus keeps.
        embedder: the embedding backend when none is passed in: ``auto`` (the best local one),
            ``local``, ``chroma-onnx``, ``hash``, or an HTTP API, ``openai`` (any
            OpenAI-compatible server) or ``ollama``.
        embedder_model: the HTTP API's model (its usual default when unset).
        embedder_url: the HTTP API's server (``https://api.openai.com``,
            ``http://localhost:11434`` when unset).
        embedder_api_key: the HTTP API's bearer token (never shown in ``repr``).
        chroma_host, chroma_port: a Chroma server for the dense index; embedded when unset.
        blackboard: the L2 blackboard settings.
        database_url: a PostgreSQL database (a libpq URI: ``postgresql://user@host:5432/db``,
            or a unix socket as ``postgresql://user@/db?host=/run/dir``) that keeps the memory's
            state for every process that opens it (``Memory.open(config=...)``, or
            ``Memory.open(url)``). Its password is never shown (``repr``, messages, logs).
        database_schema: the PostgreSQL schema of this memory (``gliding``): several memories
            share one database, each in a schema of its own. Lower-case letters, digits and
            ``_``, at most 63, not one of PostgreSQL's own (``public``, ``pg_*``).
        database_timeout_s: how long a call waits for PostgreSQL (a free connection, a new
            one, an answer from a server that answers nothing else either) before it fails
            with ``DatabaseUnavailableError``; a few seconds, so a worker whose database is
            down or hung fails fast and tries again, rather than hanging.
        database_pool_size: the most connections each component's pool opens per process.
        search: how hybrid search ranks (``SearchConfig``; each field may be overridden per
            ``memory.search`` call).
        dense: how the dense index embeds long texts (``DenseConfig``).

    ``MemoryConfig.from_env()`` reads the same settings from the environment (see there).
    """

    store: StoreConfig = StoreConfig()
    token_encoding: str = Field(default=DEFAULT_ENCODING, min_length=1)
    session: SessionConfig = SessionConfig()
    topics: TopicConfig = TopicConfig()
    relevance_alpha: float = Field(default=0.6, ge=0.0, le=1.0)
    bus_history: int = Field(default=1_000, ge=0)
    embedder: Literal["auto", "local", "chroma-onnx", "hash", "openai", "ollama"] = "auto"
    embedder_model: str | None = Field(default=None, min_length=1)
    embedder_url: str | None = Field(default=None, pattern=r"^https?://")
    embedder_api_key: str | None = Field(default=None, repr=False)
    chroma_host: str | None = None
    chroma_port: int = Field(default=8000, ge=1, le=65_535)
    blackboard: BlackboardConfig = BlackboardConfig()
    database_url: str | None = Field(default=None, repr=False, max_length=4_096)
    database_schema: str = Field(default="gliding", pattern=r"^[a-z_][a-z0-9_]{0,62}$")
    database_timeout_s: float = Field(default=5.0, ge=0.1, le=3_600.0)
    database_pool_size: int = Field(default=10, ge=1, le=1_000)
    search: SearchConfig = SearchConfig()
    dense: DenseConfig = DenseConfig()

    @field_validator("database_url")
    @classmethod
    def _check_database_url(cls, value: str | None) -> str | None:
        return None if value is None else check_database_url(value)

    @field_validator("database_schema")
    @classmethod
    def _check_database_schema(cls, value: str) -> str:
        if value.startswith("pg_") or value in ("public", "information_schema"):
            raise ValueError(f"the schema {value!r} is PostgreSQL's own: choose another name")
        return value

    def __repr_args__(self) -> Any:
        yield from super().__repr_args__()
        if self.database_url is not None:  # shown with its password masked
            yield "database_url", mask_url(self.database_url)

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None, **overrides: Any) -> MemoryConfig:
        """Return the settings the environment gives, with ``overrides`` on top.

        Read when called, never at import. Unset variables keep the defaults:

        - ``GLIDING_EMBEDDER``: ``embedder`` (``openai``, ``ollama``, ``local`` ...);
        - ``GLIDING_EMBEDDER_MODEL``: ``embedder_model``;
        - ``GLIDING_EMBEDDER_URL``: ``embedder_url``; else ``OPENAI_BASE_URL`` for ``openai``
          and ``OLLAMA_HOST`` for ``ollama`` (``host:port`` gets ``http://``);
        - ``GLIDING_EMBEDDER_API_KEY``: ``embedder_api_key``; else ``OPENAI_API_KEY`` for
          ``openai``;
        - ``GLIDING_CHROMA_HOST`` / ``GLIDING_CHROMA_PORT``: the Chroma server;
        - ``GLIDING_TOKEN_ENCODING``: ``token_encoding``;
        - ``GLIDING_DATABASE_URL``: ``database_url`` (a PostgreSQL URI; ``Memory.open()``
          without a path then opens that database);
        - ``GLIDING_DATABASE_SCHEMA``: ``database_schema``;
        - ``GLIDING_SPARQL_ENDPOINT``: ``blackboard.endpoint``, the SPARQL server of the
          blackboard's graph (unless ``overrides`` give a ``blackboard``).

        Raises:
            ConfigError: a variable holds a value the setting refuses (named in the message).
        """
        env = os.environ if environ is None else environ
        values: dict[str, Any] = {}
        for variable, name in _ENVIRONMENT:
            if env.get(variable):
                values[name] = env[variable]
        if "chroma_port" in values:
            values["chroma_port"] = _port(values["chroma_port"])
        backend = values.get("embedder", overrides.get("embedder"))
        if backend == "openai":
            values.setdefault("embedder_url", env.get("OPENAI_BASE_URL") or None)
            values.setdefault("embedder_api_key", env.get("OPENAI_API_KEY") or None)
        elif backend == "ollama" and env.get("OLLAMA_HOST"):
            host = env["OLLAMA_HOST"]
            values.setdefault("embedder_url", host if "://" in host else f"http://{host}")
        if env.get("GLIDING_SPARQL_ENDPOINT"):
            values["blackboard"] = BlackboardConfig(endpoint=env["GLIDING_SPARQL_ENDPOINT"])
        values = {k: v for k, v in values.items() if v is not None}
        return cls(**{**values, **overrides})


_ENVIRONMENT = (
    ("GLIDING_EMBEDDER", "embedder"),
    ("GLIDING_EMBEDDER_MODEL", "embedder_model"),
    ("GLIDING_EMBEDDER_URL", "embedder_url"),
    ("GLIDING_EMBEDDER_API_KEY", "embedder_api_key"),
    ("GLIDING_CHROMA_HOST", "chroma_host"),
    ("GLIDING_CHROMA_PORT", "chroma_port"),
    ("GLIDING_TOKEN_ENCODING", "token_encoding"),
    ("GLIDING_DATABASE_URL", "database_url"),
    ("GLIDING_DATABASE_SCHEMA", "database_schema"),
)

DATABASE_SCHEMES = ("postgresql", "postgres")
_SECRET_PARAMETERS = frozenset({"password", "sslpassword"})
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def is_database_url(target: object) -> bool:
    """Whether ``target`` is meant as a PostgreSQL URI (its scheme is ``postgresql:`` or
    ``postgres:``), rather than a directory; whether it is a usable one is
    ``check_database_url``'s to say."""
    if not isinstance(target, str):
        return False
    scheme, colon, _ = target.partition(":")
    return bool(colon) and scheme.lower() in DATABASE_SCHEMES


_OTHER_URL = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://")
# libpq's connection keywords: a string beginning "keyword=" is a key=value connection string.
_LIBPQ_KEYWORDS = frozenset(
    (
        "host",
        "hostaddr",
        "port",
        "dbname",
        "user",
        "password",
        "passfile",
        "require_auth",
        "channel_binding",
        "connect_timeout",
        "client_encoding",
        "options",
        "application_name",
        "fallback_application_name",
        "keepalives",
        "keepalives_idle",
        "keepalives_interval",
        "keepalives_count",
        "tcp_user_timeout",
        "replication",
        "gssencmode",
        "sslmode",
        "requiressl",
        "sslnegotiation",
        "sslcompression",
        "sslcert",
        "sslkey",
        "sslkeylogfile",
        "sslpassword",
        "sslcertmode",
        "sslrootcert",
        "sslcrl",
        "sslcrldir",
        "sslsni",
        "requirepeer",
        "ssl_min_protocol_version",
        "ssl_max_protocol_version",
        "min_protocol_version",
        "max_protocol_version",
        "krbsrvname",
        "gsslib",
        "gssdelegation",
        "service",
        "target_session_attrs",
        "load_balance_hosts",
        "scram_client_key",
        "scram_server_key",
        "oauth_issuer",
        "oauth_client_id",
        "oauth_client_secret",
        "oauth_scope",
    )
)
_KEYWORD = re.compile(r"(?:^|\s)(\w+)\s*=")


def not_a_directory(target: str) -> str | None:
    """Say why ``target``, which is no PostgreSQL URI, is no directory name either, or return
    ``None``: a URL of another scheme, or a libpq ``key=value`` connection string (which would
    otherwise become a directory named after it, password and all). Names only libpq's
    keywords, never a value."""
    if _OTHER_URL.match(target):
        return f"{mask_url(target)!r} is a URL of another scheme"
    first = _KEYWORD.match(target.lstrip())
    if first is not None and first.group(1).lower() in _LIBPQ_KEYWORDS:
        keys = sorted({k.lower() for k in _KEYWORD.findall(target) if k.lower() in _LIBPQ_KEYWORDS})
        return (
            f"a libpq key=value connection string (keywords {', '.join(keys)}) is taken as a"
            " URI only (postgresql://user:password@host:5432/db)"
        )
    return None


def check_database_url(url: str) -> str:
    """Return ``url`` if it is a PostgreSQL URI libpq can be given, else raise ``ValueError``
    naming it with its password masked (what libpq itself would say is left to the connection).

    Raises:
        ValueError: not a ``postgresql://`` URI, a control character, or a port that is not
            a number.
    """
    shown = mask_url(url)
    if not is_database_url(url) or not url.partition(":")[2].startswith("//"):
        raise ValueError(
            "database_url must be a PostgreSQL URI (postgresql://user@host:5432/db, or"
            f" postgresql://user@/db?host=/run/dir for a unix socket), got {shown!r}"
        )
    if _CONTROL.search(url):
        raise ValueError(f"database_url holds a control character: {shown!r}")
    authority = url.partition("://")[2].partition("/")[0]  # as libpq reads it (_split_uri)
    if _bad_port(_split_uri(authority)[1]):
        raise ValueError(f"database_url has a port that is not a number: {shown!r}")
    return url


def mask_url(url: str) -> str:
    """Return the URI ``url`` with its password (in the user part or as a parameter) replaced
    by ``***``; text that is not a URI is masked whole after its scheme.

    The URI is read as libpq reads it (``_split_uri``), not by urllib's rules: a password may
    hold ``#`` or ``?``, which would end urllib's authority and leave the password shown.
    """
    scheme, sep, rest = url.partition("://")
    if not sep or scheme != url.partition(":")[0]:
        return url.partition(":")[0][:32] + ":***"
    user, hosts, tail = _split_uri(rest)
    name, colon, _ = user.partition(":")
    if colon:
        user = f"{name}:***@"
    path, question, query = tail.partition("?")
    if question:
        pairs = [pair.partition("=") for pair in query.split("&")]
        query = "&".join(
            f"{key}{equals}***" if unquote(key) in _SECRET_PARAMETERS else f"{key}{equals}{value}"
            for key, equals, value in pairs
        )
    return f"{scheme}://{user}{hosts}{path}{question}{query}"


def _split_uri(rest: str) -> tuple[str, str, str]:
    """Split what follows a URI's ``scheme://`` into its user part (with its ``@``; empty when
    none), its hosts and ports, and the rest (``/dbname?parameters``), as libpq does.

    The user part ends at an ``@`` before the first ``/``, whatever comes between (``?``,
    ``#``); the last such ``@`` is taken, so a password holding one stays whole. A password
    holding a ``/`` makes libpq read a host and a port that is no number (the URL is refused):
    the user part is then taken to end at the last ``@`` after it, so that it is masked too.
    """
    slash = rest.find("/")
    head = rest if slash < 0 else rest[:slash]
    at = head.rfind("@")
    if at < 0 and slash >= 0 and _bad_port(head):
        at = rest.rfind("@", slash)
    user, remainder = rest[: at + 1], rest[at + 1 :]
    ends = [i for i in (remainder.find("/"), remainder.find("?")) if i >= 0]
    end = min(ends, default=len(remainder))
    return user, remainder[:end], remainder[end:]


def _bad_port(hosts: str) -> bool:
    """Whether libpq's ``host:port,...`` list ``hosts`` has a port that is not a number."""
    for part in hosts.split(","):
        _, colon, port = part.rpartition(":")
        if colon and port and not part.endswith("]") and not port.isdigit():
            return True
    return False


def _port(text: str) -> int | str:
    """A port number from text; text that is not one is passed on, for the setting to refuse."""
    try:
        return int(text)
    except ValueError:
        return text
