"""Hyperspace: hybrid search, the lexical arm (L0's full-text search) and the dense arm, fused.

Invariants: the same ``SearchFilters`` restrict every arm; the arms are fused by weighted
reciprocal rank, ``sum(weight / (rrf_k + rank))`` with ``rrf_k = 60``; every hit carries its
rank and score in each arm that found it, so any result can be explained. Before the dense arm
runs, its index catches up with L0; results say which arms ran and how many L0 changes the
dense index had not applied (``SearchResults``), and a search on an index that is behind logs
a warning, so entries are never missing silently. A query the embedder cannot embed is searched
by the lexical arm alone, with a warning, and its results' ``arms`` say so.
"""

from __future__ import annotations

import functools
import json
import logging
import math
import re
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, TypeVar

import numpy as np
from typing_extensions import Unpack

from gliding_core.config import SearchConfig, SearchOptions
from gliding_core.errors import EmbedderError, InvalidInputError
from gliding_core.hyperspace.following import EXACT_LIMIT
from gliding_core.hyperspace.index import FilteringIndex, VectorIndex
from gliding_core.hyperspace.vectors import Vector, one_blas_thread
from gliding_core.jsonld import check_text, preview
from gliding_core.store.entry import Entry
from gliding_core.store.filters import MAX_RESULTS, SearchFilters
from gliding_core.store.protocol import EntryStore

logger = logging.getLogger(__name__)

RRF_K = 60
ARMS = ("lexical", "dense")
READERS = 2  # threads a search sends reads from beside its own, on a store that allows it
READER_THREADS = "gliding-search"  # their names begin so
# The most nearest entries a filtered dense arm asks the index for before it asks with every
# entry the filter allows (``HybridSearch._dense``).
WIDEST_FETCH = 4_000
# An index that applies filters itself (``FilteringIndex``) scores every entry passing exactly,
# before any walk of its graph, when at most this many pass: the walks of a filter that few
# entries of a large memory pass find too few and end in that scoring anyway (see ``_dense``).
FILTERED_EXACT = 6_000
# A filter found to pass more is not counted again for this many searches under it (the count
# costs 5-8 ms at 100,000 entries); so many such filters are remembered, the last used kept.
BROAD_KEPT_FOR = 100
BROAD_FILTERS = 64
MAX_NAMES = 8  # the names of one speaker field looked at (a list of authors)
MAX_NAME_CHARS = 256  # a longer value names nobody
MAX_SPEAKER_CONTENT = 65_536  # a longer node is not parsed for its speaker
_WORD = re.compile(r"\w+")

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class ArmResult:
    """Where one arm placed a hit: its 1-based rank and the arm's own score."""

    rank: int
    score: float


@dataclass(frozen=True, slots=True)
class SearchHit:
    """One search result: the entry, its fused score, and each arm's rank and score."""

    entry: Entry
    score: float
    arms: Mapping[str, ArmResult] = field(default_factory=dict)

    @property
    def iri(self) -> str:
        """The entry's IRI."""
        return self.entry.iri


class SearchResults(list[SearchHit]):
    """The hits of a search, best first (a list), and what the search could see.

    Attributes:
        arms: the arms that ran (``("lexical",)`` for a memory without its dense index).
        index_behind: how many committed L0 changes the dense index had not applied when it
            was queried (0: it saw everything); entries they wrote may be missing from its arm.
    """

    def __init__(
        self, hits: Iterable[SearchHit] = (), *, arms: tuple[str, ...], index_behind: int = 0
    ) -> None:
        super().__init__(hits)
        self.arms, self.index_behind = arms, index_behind

    def __repr__(self) -> str:
        return (
            f"SearchResults({list.__repr__(self)}, arms={self.arms!r}, "
            f"index_behind={self.index_behind})"
        )


class HybridSearch:
    """Search L0 by words and by meaning, with structured filters, in two stages.

    1. Each arm ranks up to ``candidates`` entries; the arms are fused by weighted reciprocal
       rank (``rrf_k`` = 60) and the best ``pool`` become the candidates, with the entries
       linked to them under ``context_predicates`` (the turns around a conversation turn).
    2. With ``rerank`` (the default) the candidates are re-scored: each arm's own score
       (BM25, exact cosine) plus ``context_weight`` times its linked neighbours' scores, so a
       turn is judged with its context; each arm is normalised over the candidates and the
       arms are mixed by their weights. Without it, the fused rank decides. With
       ``hubness_correction`` (the default) each candidate's cosine first loses half its mean
       cosine with its ten nearest fellow candidates, so a crowd of alike entries does not
       take the dense arm's top places by number. A candidate then
       gains ``group_weight`` times the mean of the ``group_top`` best scores of its named
       graph: a conversation session, or a project, that holds a strong match makes its other
       entries likelier. With ``group_decay`` below 1 the graph's j-th best candidate gains
       ``group_decay ** j`` of that, so one graph does not take every first place. Last, a
       candidate whose speaker (``speaker_fields``) the query names gains ``speaker_weight``
       times the spread of the candidates' scores.

    Args:
        store: the L0 store (lexical arm, filters, entries).
        dense: the dense index, or ``None`` for lexical search only.
        settings: the weights, depths and re-rank settings (``SearchConfig``; its defaults
            when omitted); each may be overridden per call.
        context_predicates: the links that carry context.
    """

    def __init__(
        self,
        store: EntryStore,
        dense: VectorIndex | None,
        *,
        settings: SearchConfig | None = None,
        context_predicates: tuple[str, ...] = ("previous",),
    ) -> None:
        if settings is not None and not isinstance(settings, SearchConfig):
            raise InvalidInputError(f"settings must be a SearchConfig, got {preview(settings)}")
        self.store, self.dense = store, dense
        self.settings = settings or SearchConfig()
        self.context_predicates = context_predicates
        self._readers: ThreadPoolExecutor | None = None
        self._readers_lock = threading.Lock()
        self._closed = False
        # Filters more than ``FILTERED_EXACT`` entries passed, with the searches left before
        # they are counted again (``_dense``): a wrong guess costs time, never a result.
        self._broad: OrderedDict[SearchFilters, int] = OrderedDict()
        self._broad_lock = threading.Lock()

    def close(self) -> None:
        """Stop the threads that send a search's reads beside it; closing twice is harmless
        (a search after closing reads one statement after the other)."""
        with self._readers_lock:
            readers, self._readers, self._closed = self._readers, None, True
        if readers is not None:
            readers.shutdown(wait=True)

    def _aside(self, call: Callable[..., T], *args: Any, **kwargs: Any) -> Callable[[], T]:
        """Start ``call`` on a reader thread when the store runs reads from several threads at
        once; return what gives its result (raising what it raised). Otherwise the call runs
        when its result is asked for, on this thread.

        Never inside the calling thread's transaction: its reads must see its own writes,
        which another thread's connection does not.
        """
        if not self.store.concurrent_reads or self.store.in_transaction():
            return functools.partial(call, *args, **kwargs)
        with self._readers_lock:
            if self._closed:
                return functools.partial(call, *args, **kwargs)
            if self._readers is None:
                self._readers = ThreadPoolExecutor(READERS, thread_name_prefix=READER_THREADS)
            return self._readers.submit(call, *args, **kwargs).result

    def search(
        self,
        query: str,
        k: int = 10,
        *,
        filters: SearchFilters | None = None,
        **options: Unpack[SearchOptions],
    ) -> SearchResults:
        """Return the ``k`` best entries for ``query`` that pass ``filters``, best first.

        The dense index first catches up with L0 (unless another thread is already doing so);
        if it is still behind, the results' ``index_behind`` says by how much and a warning is
        logged.

        Args:
            query: the text to look for.
            k: how many hits to return.
            filters: restrict every arm to the entries that pass.
            **options: ``SearchConfig`` fields overriding this search's settings for this
                call (``lexical_weight``, ``dense_weight``, ``candidates``, ``pool``,
                ``rerank``, ``rrf_k``, ``context_weight``, ``group_weight``, ``group_top``,
                ``group_decay``, ...).

        Raises:
            InvalidInputError: a bad query, ``k`` or ``filters``.
            ConfigError: an unknown option or a bad value (named in the message).
        """
        if not isinstance(query, str) or not query.strip():
            raise InvalidInputError(f"query must be a non-empty string, got {preview(query)}")
        check_text(query, what="query")
        if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= MAX_RESULTS:
            raise InvalidInputError(f"k must be an int in [1, {MAX_RESULTS}], got {preview(k)}")
        if filters is not None and not isinstance(filters, SearchFilters):
            raise InvalidInputError(f"filters must be SearchFilters, got {preview(filters)}")
        settings = self.settings.updated(**options)
        mix = settings.weights
        limits = filters or SearchFilters()
        n = max(k, settings.candidates)
        # The lexical arm reads L0 while the dense index catches up, the query is embedded
        # and the dense arm runs (on a store that allows reads from several threads at once).
        lexical = self._aside(self.store.search_ids, query, limit=n, filters=limits)
        behind = self._refresh()
        # One query vector for the dense arm and the re-rank: the query is embedded once.
        probe = self._probe(query)
        with one_blas_thread():  # the arms' and the re-rank's products are small
            dense = None
            if self.dense is not None and probe is not None:
                dense = self._dense(probe, n, limits)  # before waiting for the lexical arm
            ranked = {"lexical": lexical()}
            if dense is not None:
                ranked["dense"] = dense
            fused, detail = self.fuse(ranked, mix, rrf_k=settings.rrf_k)
            best = sorted(fused, key=lambda iri: (-fused[iri], iri))[: max(k, settings.pool)]
            # The candidates' entries, when the re-rank reads them for their graphs (the best
            # k are among them: one read serves both); otherwise the best k are read at the end.
            entries: dict[str, Entry] | None = None
            if settings.rerank:
                final, entries = self._rerank(
                    probe, best, ranked, detail, settings, limits, text=query
                )
            else:
                final = {iri: fused[iri] for iri in best}
        order = sorted(final, key=lambda iri: (-final[iri], iri))
        if entries is None:
            entries = self.store.get_many(order[:k])
            if len(entries) < min(k, len(order)):  # (expired, or deleted, since the arms ran)
                entries.update(self.store.get_many(order[k:]))
        # The dense index holds an expired entry until the sweep: the k best that L0 still has.
        top = [iri for iri in order if iri in entries][:k]
        return SearchResults(
            (SearchHit(entries[i], final[i], detail.get(i, {})) for i in top),
            arms=tuple(arm for arm in ARMS if arm in ranked),
            index_behind=behind,
        )

    def _probe(self, query: str) -> Vector | None:
        """Embed the query for the dense arm; ``None`` without one, or when the embedder fails
        (the search goes on with the lexical arm, and says so in its ``arms``)."""
        if self.dense is None:
            return None
        try:
            return self.dense.vector(query)
        except EmbedderError as exc:
            logger.warning("the query could not be embedded (%s): searching by words only", exc)
            return None

    def _refresh(self) -> int:
        """Let the dense index catch up; return how many changes it still has not applied."""
        if self.dense is None:
            return 0
        # Wait for a catch-up another thread is running (a writer's listener, the retry timer):
        # a search never misses what was committed before it began, unless the index failed
        # or was told to catch up in the background (writes with embed="later"): then the
        # search goes on without waiting, and says how far behind the index is.
        background = self.dense.catching_up
        behind = self.dense.refresh(wait=not background)
        if behind:
            # A catch-up under way in the background was asked for: not worth a warning.
            logger.log(
                logging.INFO if background else logging.WARNING,
                "the dense index is %d L0 changes behind: recent entries may be missing from "
                "its arm (it is retrying)",
                behind,
            )
        return behind

    def arms(
        self, query: str, n: int, filters: SearchFilters, *, vector: Vector | None = None
    ) -> dict[str, list[tuple[str, float]]]:
        """Return each arm's ranked ``(iri, score)`` list for ``query`` under ``filters``.

        ``vector`` is the query's embedding when the caller has it already.
        """
        lexical = self.store.search_ids(query, limit=n, filters=filters)
        out = {"lexical": lexical}
        if self.dense is not None:
            out["dense"] = self._dense(query if vector is None else vector, n, filters)
        return out

    def _dense(
        self, query: str | Vector, n: int, filters: SearchFilters
    ) -> list[tuple[str, float]]:
        """The dense arm's ``n`` best entries passing ``filters``.

        A filter few entries pass (at most ``EXACT_LIMIT``, such as one user's scope) has
        those entries scored exactly. Past it the index's nearest entries are asked for four
        times ``n`` and those passing kept; when fewer than ``n`` pass, once more for as many
        as the share that passed says are needed (half as many again, up to ``WIDEST_FETCH``
        or the index's ``widest_query``, and not when that share asks for more than twice
        it); only then is every entry the filter allows scored exactly, which costs in
        proportion to their number. An index that applies filters itself (``FilteringIndex``:
        pgvector, in L0's database) does each exact scoring in one statement with the filter
        in it, the first one for up to ``FILTERED_EXACT`` entries passing (it counts them up to
        one past that, 5-8 ms for a broad filter of 100,000 entries, and answers only if they
        are no more: about 8 us an entry; a filter found to pass more is not counted again
        for its next ``BROAD_KEPT_FOR`` searches); another index is given the entries' IRIs,
        read first (a tag on one entry in seven of 100,000 took 144 ms of a 160 ms search so).
        """
        assert self.dense is not None
        if filters.empty:
            return self.dense.query(query, n)
        # (Not inside the caller's transaction: the index reads on a connection of its own,
        # which would not see the transaction's writes.)
        filtering = (
            self.dense
            if isinstance(self.dense, FilteringIndex) and not self.store.in_transaction()
            else None
        )
        if filtering is not None:
            if not self._known_broad(filters):  # the filter in the scoring's statement
                found = filtering.query_filtered(query, n, filters, at_most=FILTERED_EXACT)
                if found is not None:
                    return found
                self._found_broad(filters)
        else:
            allowed = self.store.matching(filters, limit=EXACT_LIMIT + 1)
            if len(allowed) <= EXACT_LIMIT:
                return self.dense.query(query, n, allowed=allowed) if allowed else []
        bound = self.dense.widest_query  # (pgvector's beam: fewer found may not be all)
        widest = min(WIDEST_FETCH, bound or WIDEST_FETCH)
        fetch = n * 4
        for last in (False, True):
            found = self.dense.query(query, fetch)
            passing = set(self.store.matching(filters, [iri for iri, _ in found]))
            kept = [(iri, score) for iri, score in found if iri in passing]
            every = len(found) < fetch and (bound is None or fetch <= bound)
            if len(kept) >= n or every:  # enough, or every entry of the index was seen
                return kept[:n]
            wanted = math.ceil(1.5 * n * len(found) / len(kept)) if kept else 2 * widest + 1
            if last or fetch >= widest or wanted > 2 * widest:  # (unlikely to be enough)
                break
            fetch = min(widest, max(2 * fetch, wanted))
        if filtering is not None:
            scored = filtering.query_filtered(query, n, filters, at_most=None)
            assert scored is not None  # (no bound: never refused)
            return scored
        return self.dense.query(query, n, allowed=self.store.matching(filters))

    def _known_broad(self, filters: SearchFilters) -> bool:
        """Whether more than ``FILTERED_EXACT`` entries passed ``filters`` lately (one search
        fewer is left before they are counted again)."""
        with self._broad_lock:
            left = self._broad.get(filters)
            if left is None:
                return False
            if left <= 1:
                del self._broad[filters]
            else:
                self._broad[filters] = left - 1
                self._broad.move_to_end(filters)
            return True

    def _found_broad(self, filters: SearchFilters) -> None:
        """Remember that more than ``FILTERED_EXACT`` entries pass ``filters``."""
        with self._broad_lock:
            self._broad[filters] = BROAD_KEPT_FOR
            self._broad.move_to_end(filters)
            while len(self._broad) > BROAD_FILTERS:
                self._broad.popitem(last=False)

    def fuse(
        self,
        ranked: Mapping[str, list[tuple[str, float]]],
        weights: Mapping[str, float],
        *,
        rrf_k: int = RRF_K,
    ) -> tuple[dict[str, float], dict[str, dict[str, ArmResult]]]:
        """Fuse ranked lists by weighted reciprocal rank; return the scores and each hit's
        rank and score per arm."""
        fused: dict[str, float] = {}
        detail: dict[str, dict[str, ArmResult]] = {}
        for arm, hits in ranked.items():
            weight = weights.get(arm, 0.0)
            for rank, (iri, score) in enumerate(hits, start=1):
                detail.setdefault(iri, {})[arm] = ArmResult(rank, score)
                fused[iri] = fused.get(iri, 0.0) + weight / (rrf_k + rank)
        for iri, value in fused.items():
            detail[iri]["fused"] = ArmResult(0, value)
        return fused, detail

    def _rerank(
        self,
        query: Vector | None,
        best: list[str],
        ranked: Mapping[str, list[tuple[str, float]]],
        detail: dict[str, dict[str, ArmResult]],
        settings: SearchConfig,
        filters: SearchFilters,
        *,
        text: str,
    ) -> tuple[dict[str, float], dict[str, Entry] | None]:
        """Re-score the candidates; return their scores, and their entries when the group
        prior read them (``None`` otherwise)."""
        if not best:  # nothing matched (an empty memory, or filters that exclude everything)
            return {}, None
        # The links, the candidates' entries (for their graphs) and their vectors are read at
        # once where the store allows; then the same for the linked entries the links add.
        links_read = (
            self._aside(self.store.linked, best, self.context_predicates)
            if settings.context_weight
            else list
        )
        reads = bool(settings.group_weight or settings.speaker_weight)  # (their entries)
        entries_read = self._aside(self.store.get_many, best) if reads else dict
        dense = self.dense is not None and query is not None
        known = dict(ranked.get("dense", [])) if dense else {}
        vectors, cosines = self._candidate_vectors(query, best, known, settings)
        links = links_read()
        extra = {n for _, n in links if n not in detail}
        if extra and not filters.empty:
            extra = set(self.store.matching(filters, sorted(extra)))
        chosen = set(best)
        added = [iri for iri in sorted(extra) if iri not in chosen]
        more_entries = self._aside(self.store.get_many, added) if reads and added else dict
        if added:
            more_vectors, more_cosines = self._candidate_vectors(query, added, known, settings)
            vectors, cosines = {**vectors, **more_vectors}, {**cosines, **more_cosines}
        pool = list(dict.fromkeys([*best, *added]))
        raw = {"lexical": dict(ranked.get("lexical", []))}
        if dense:
            # The dense arm's own hits carry exact cosines already; the others are computed.
            raw["dense"] = {**known, **cosines}
            if settings.length_correction:
                raw["dense"] = self._length_corrected(raw["dense"], pool)
            if settings.hubness_correction:
                raw["dense"] = self._hubness_corrected(raw["dense"], pool, vectors)
        neighbours: dict[str, list[str]] = {}
        for iri, other in links:
            if other in raw["lexical"] or other in raw.get("dense", {}) or other in pool:
                neighbours.setdefault(iri, []).append(other)
        shares = {
            arm: _normalised(
                {
                    iri: scores.get(iri, 0.0)
                    + settings.context_weight
                    * sum(scores.get(n, 0.0) for n in neighbours.get(iri, []))
                    for iri in pool
                },
                arm,
                settings.normalise,
            )
            for arm, scores in raw.items()
        }
        weights = settings.weights
        if settings.adaptive_weights and len(shares) > 1:
            weights = _adaptive(weights, shares)
        final = dict.fromkeys(pool, 0.0)
        for arm, share in shares.items():
            for iri in pool:
                final[iri] += weights.get(arm, 0.0) * share[iri]
        entries = None
        if reads:
            entries = {**entries_read(), **more_entries()}
        if settings.group_weight and entries:
            self._group_prior(final, detail, settings, entries)
        if settings.speaker_weight and entries:
            _speaker_prior(final, detail, settings, entries, text)
        for iri in pool:
            detail.setdefault(iri, {})["rerank"] = ArmResult(0, final[iri])
        return final, entries

    def _candidate_vectors(
        self,
        query: Vector | None,
        iris: list[str],
        known: Mapping[str, float],
        settings: SearchConfig,
    ) -> tuple[dict[str, Vector], dict[str, float]]:
        """Return the vectors of ``iris`` (for the hubness correction, when it is on) and the
        exact cosines of those the dense arm did not score (``known``)."""
        if self.dense is None or query is None:
            return {}, {}
        # Every vector is read at once first, so the cosines find theirs in the index's cache.
        vectors = self.dense.vectors(iris) if settings.hubness_correction else {}
        missing = [iri for iri in iris if iri not in known]
        return vectors, self.dense.similarities(query, missing)

    def _hubness_corrected(
        self, scores: dict[str, float], pool: list[str], found: Mapping[str, Vector]
    ) -> dict[str, float]:
        """Lower each candidate's cosine by half its mean cosine with its ten nearest fellow
        candidates (cross-domain similarity local scaling, over the candidates).

        A text close to many others (short one-line facts about the same person, in the same
        words) is close to many queries too, and wins the dense arm for that alone; a text
        that stands apart keeps its cosine. The correction is measured among this query's
        candidates, so it needs nothing precomputed. ``found``: the candidates' vectors.
        """
        vectors = {iri: found[iri] for iri in pool if iri in scores and iri in found}
        if len(vectors) < 3:
            return scores
        iris = list(vectors)
        matrix = np.stack([vectors[iri] for iri in iris])
        similar = matrix @ matrix.T
        np.fill_diagonal(similar, -np.inf)
        top = min(10, len(iris) - 1)
        nearest = -np.partition(-similar, top - 1, axis=1)[:, :top]
        crowding = nearest.mean(axis=1)
        out = dict(scores)
        for iri, value in zip(iris, crowding, strict=True):
            out[iri] = scores[iri] - 0.5 * float(value)
        return out

    def _length_corrected(self, scores: dict[str, float], pool: list[str]) -> dict[str, float]:
        """Remove from the candidates' cosines the part their text length explains.

        Over the candidates of one query, the cosine is regressed on the log of the text's
        length in words; each cosine then loses the slope times its length's distance from the
        mean, so a text ranks no higher (nor lower) for being short (or long) alone.
        """
        lengths = _lengths(self.store.searchable_texts([iri for iri in pool if iri in scores]))
        known = [iri for iri in pool if iri in scores and iri in lengths]
        if len(known) < 3:
            return scores
        x = [math.log1p(lengths[iri]) for iri in known]
        y = [scores[iri] for iri in known]
        mean_x, mean_y = sum(x) / len(x), sum(y) / len(y)
        spread = sum((v - mean_x) ** 2 for v in x)
        if spread <= 1e-12:
            return scores
        slope = sum((a - mean_x) * (b - mean_y) for a, b in zip(x, y, strict=True)) / spread
        out = dict(scores)
        for iri, length in zip(known, x, strict=True):
            out[iri] = scores[iri] - slope * (length - mean_x)
        return out

    def _group_prior(
        self,
        final: dict[str, float],
        detail: dict[str, dict[str, ArmResult]],
        settings: SearchConfig,
        entries: Mapping[str, Entry],
    ) -> None:
        """Add to each candidate the prior of its named graph (from its entry)."""
        graph_of = {
            iri: entry.named_graph
            for iri, entry in entries.items()
            if entry.named_graph is not None
        }
        members: dict[str, list[str]] = {}
        for iri, graph in graph_of.items():
            members.setdefault(graph, []).append(iri)
        top, decay = settings.group_top, settings.group_decay
        for iris in members.values():
            iris.sort(key=lambda iri: (-final[iri], iri))
            best = [final[iri] for iri in iris[:top]]
            gain = settings.group_weight * sum(best) / len(best)
            # The j-th best of the graph keeps decay**j of the gain: a graph's members keep
            # their order, so taking the best score at each step (one graph's next member
            # against another's) is the same as sorting by these scores.
            for place, iri in enumerate(iris):
                boost = gain * decay**place if decay < 1.0 else gain
                final[iri] += boost
                detail.setdefault(iri, {})["group"] = ArmResult(0, boost)


def _speaker_prior(
    final: dict[str, float],
    detail: dict[str, dict[str, ArmResult]],
    settings: SearchConfig,
    entries: Mapping[str, Entry],
    query: str,
) -> None:
    """Add to each candidate that the query names the speaker of ``speaker_weight`` times the
    spread of the candidates' scores (after the group prior).

    A speaker is named when the words of one of the node's ``speaker_fields`` values (a
    string, or a list of strings) stand in the query in a row, case aside. Only a node whose
    JSON holds one of those keys, and is at most ``MAX_SPEAKER_CONTENT`` long, is parsed; each
    distinct name is looked for once.
    """
    words = _WORD.findall(query.casefold())
    if not words or len(final) < 2:
        return
    spoken = f" {' '.join(words)} "
    named: dict[str, bool] = {}

    def said_by(name: object) -> bool:
        if not isinstance(name, str) or len(name) > MAX_NAME_CHARS:
            return False
        if name not in named:
            wanted = _WORD.findall(name.casefold())
            named[name] = bool(wanted) and f" {' '.join(wanted)} " in spoken
        return named[name]

    gain = settings.speaker_weight * (max(final.values()) - min(final.values()))
    keys = {
        json.dumps(name, ensure_ascii=ascii) + ":"
        for name in settings.speaker_fields
        for ascii in (False, True)
    }
    for iri, entry in entries.items():
        content = entry.content
        if iri not in final or len(content) > MAX_SPEAKER_CONTENT:
            continue
        if not any(key in content for key in keys):
            continue
        node = entry.node
        for field_name in settings.speaker_fields:
            value = node.get(field_name)
            names = value[:MAX_NAMES] if isinstance(value, list) else [value]
            if any(said_by(name) for name in names):
                final[iri] += gain
                detail.setdefault(iri, {})["speaker"] = ArmResult(0, gain)
                break


def _lengths(texts: Mapping[str, str]) -> dict[str, int]:
    """The length in words of each entry's searchable text."""
    return {iri: len(text.split()) for iri, text in texts.items()}


def _normalised(scores: Mapping[str, float], arm: str, how: str) -> dict[str, float]:
    """Put one arm's scores over the candidates on a common scale.

    ``range``: BM25 divided by its best score (0 means no match), cosines spread over the
    candidates' own range, so each arm's best is 1. ``z``: each score's distance from the
    candidates' mean in standard deviations, so an arm counts by how far its best stand out.
    """
    values = list(scores.values())
    if how == "z":
        mean = sum(values) / len(values)
        deviation = math.sqrt(sum((v - mean) ** 2 for v in values) / len(values))
        if deviation <= 1e-12:
            return dict.fromkeys(scores, 0.0)
        return {iri: (value - mean) / deviation for iri, value in scores.items()}
    low = 0.0 if arm == "lexical" else min(values)
    high = max(values)
    if high <= low:  # one value for all: each is the best there is, if it matched at all
        return dict.fromkeys(scores, 1.0 if high > 0 else 0.0)
    return {iri: (value - low) / (high - low) for iri, value in scores.items()}


def _adaptive(
    weights: Mapping[str, float], shares: Mapping[str, Mapping[str, float]]
) -> dict[str, float]:
    """Scale each arm's weight by how sharply its best candidates stand out for this query.

    An arm's confidence is the gap between its best normalised score and the mean of its next
    ten, over the candidates: an arm that ranks a few entries far above the rest says more
    than one that ranks many alike. The weights keep their sum.
    """
    confidence = {}
    for arm, share in shares.items():
        top = sorted(share.values(), reverse=True)[:11]
        rest = top[1:] or [top[0]]
        confidence[arm] = max(top[0] - sum(rest) / len(rest), 1e-6)
    total = sum(weights.get(arm, 0.0) for arm in shares)
    scaled = {arm: weights.get(arm, 0.0) * confidence[arm] for arm in shares}
    mass = sum(scaled.values())
    if mass <= 0:
        return dict(weights)
    return {arm: total * value / mass for arm, value in scaled.items()}
