"""Memory: erasure, what ``Memory.forget`` and the expiry sweep remove, layer by layer.

What a scope leaves in a memory, and how it is found (``scope_entries``):

- L0 entries carrying the scope's tag: its turns, its chat log, the notes of its memory tools,
  the LangGraph store items of its namespace (with a ``scope_template``);
- its supplementary inputs, pending or consumed (tagged with its task IRI), and every entry that
  refers to its task IRI under ``task`` (the turns of its sessions, the turns that archived its
  delivered inputs, those written before such turns carried the scope's tag included), with
  the other entries of those sessions' graphs;
- the blackboard nodes of its task's areas, in the graph and as written back to L0 (the areas'
  graphs), and the coordination messages of its task.

``erase`` removes entries from every layer in this order: the blackboard's nodes (so no
write-back brings them back), the dense index's vectors, L0 in one transaction (entries, edges,
tags, types, full-text rows, access statistics, change log), the open L1 sessions' turns and
inputs, the Poincaré points, the cached embeddings of their texts (once a catch-up of the
dense index under way has ended: it may have read them before they went); then, when asked
(``scrub``), each store rewrites its files so nothing deleted can be read back from them.

Invariants: an entry outside the target is never touched; the L0 deletion is all or nothing;
the report counts what each layer held of the target and removed.
"""

from __future__ import annotations

import inspect
import logging
import threading
import weakref
from collections import Counter
from collections.abc import Callable, Collection, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from gliding_core.attention.supplementary import IRI_PREFIX as INPUT_PREFIX
from gliding_core.attention.supplementary import SupplementaryQueue
from gliding_core.blackboard.board import Blackboard
from gliding_core.blackboard.sparql import task_graphs
from gliding_core.config import DenseConfig
from gliding_core.errors import ClosedError, InvalidInputError
from gliding_core.fields import LEGACY, for_types, indexed_text
from gliding_core.hyperspace.backends import CachedEmbedder
from gliding_core.hyperspace.index import VectorIndex
from gliding_core.hyperspace.structure import StructureIndex
from gliding_core.hyperspace.windows import in_context, text_windows
from gliding_core.jsonld import check_iris, preview
from gliding_core.session import SESSION_PREFIX, Session
from gliding_core.store.entry import Entry
from gliding_core.store.filters import SearchFilters
from gliding_core.store.protocol import EntryStore
from gliding_core.store.scope import Scope
from gliding_core.store.session_state import prune_states
from gliding_core.store.staging import ByType

logger = logging.getLogger(__name__)

TASK_PREDICATE = "task"  # how a turn or an input names its task in L0
EXPIRED = "expired"  # the target of an expiry sweep's report
UNTYPED = "(untyped)"

Target = Scope | Sequence[str]
"""What ``forget`` takes: a scope (a user, a thread or a task), or a list of entry IRIs."""


@dataclass(frozen=True, slots=True)
class ForgetReport:
    """What a ``forget`` (or an expiry sweep) removed, per layer.

    Attributes:
        target: the scope's name, or ``"iris"`` for a list of IRIs.
        entries: the L0 entries deleted (with their edges, tags, full-text rows and access
            statistics), in the order found.
        kinds: how many of them per JSON-LD type (``Turn``, ``ChatMessage``,
            ``SupplementaryInput``, ``LangGraphItem`` ...; ``(untyped)`` for none).
        inputs: supplementary inputs among them (pending or consumed).
        session_turns: turns dropped from the open L1 sessions' chains.
        vectors: vectors the dense index held for them and dropped.
        structure: points the trained Poincaré index held for them and dropped.
        embeddings: cached embeddings of their texts dropped (a long text's windows each count).
        blackboard_nodes: nodes deleted from the blackboard's graph.
        messages: coordination messages of the task deleted.
        scrubbed: the stores whose files were rewritten so nothing deleted stays in them.
        skipped: the layers this memory could not reach, and why.
    """

    target: str
    entries: tuple[str, ...] = ()
    kinds: dict[str, int] = field(default_factory=dict)
    inputs: int = 0
    session_turns: int = 0
    vectors: int = 0
    structure: int = 0
    embeddings: int = 0
    blackboard_nodes: int = 0
    messages: int = 0
    scrubbed: tuple[str, ...] = ()
    skipped: tuple[str, ...] = ()

    @property
    def removed(self) -> int:
        """The number of L0 entries deleted."""
        return len(self.entries)


class ErasableParts(Protocol):
    """What ``erase`` needs of a memory (``Memory`` has it)."""

    @property
    def store(self) -> EntryStore: ...

    @property
    def supplements(self) -> SupplementaryQueue: ...

    @property
    def structure(self) -> StructureIndex: ...

    def sessions(self) -> list[Session]: ...


@dataclass(slots=True)
class Erasure:
    """One erasure under way: what it found, and the layers it reaches.

    Attributes:
        target: the report's target name.
        iris: the L0 entries to delete.
        task: the scope's task IRI (its inputs, board areas and messages), when a scope.
        index: the dense index, when this memory runs it.
        cache: the embedding cache.
        board: the blackboard, when this memory has one to forget from.
        skipped: layers out of reach, and why.
        windows: how the dense index embeds texts (a long one in windows, a short reply after
            its context): the texts whose vectors the cache holds.
    """

    target: str
    iris: list[str]
    task: str | None = None
    index: VectorIndex | None = None
    cache: CachedEmbedder | None = None
    board: Blackboard | None = None
    skipped: list[str] = field(default_factory=list)
    windows: DenseConfig = field(default_factory=DenseConfig)


def check_target(target: object) -> Scope | list[str]:
    """Return ``target`` checked: a ``Scope``, or a non-empty list of IRIs.

    Raises:
        InvalidInputError: it is neither, or an IRI is malformed.
    """
    if isinstance(target, Scope):
        return target
    if isinstance(target, (str, bytes)) or not isinstance(target, (list, tuple)) or not target:
        raise InvalidInputError(
            f"forget takes a Scope (Scope.user(...), Scope.thread(...), Scope.task(...)) or a "
            f"non-empty list of IRIs, got {preview(target)}"
        )
    return check_iris(list(target))


def scope_entries(store: EntryStore, scope: Scope) -> list[str]:
    """Return the IRIs of every L0 entry of ``scope`` (see the module), in the order found."""
    task = scope.task_iri
    found = dict.fromkeys(store.matching(SearchFilters(tags_any=(scope.tag,))))
    found.update(dict.fromkeys(store.matching(SearchFilters(tags_any=(f"task:{task}",)))))
    referring = [
        edge.source
        for edge in store.neighbours(task, direction="in")
        if edge.predicate == TASK_PREDICATE
    ]
    found.update(dict.fromkeys(referring))
    graphs = {g for g in store.graphs_of(referring).values() if g.startswith(SESSION_PREFIX)}
    for graph in [*sorted(graphs), *task_graphs(task)]:
        found.update(dict.fromkeys(entry.iri for entry in store.by_graph(graph)))
    return list(found)


def erase(parts: ErasableParts, plan: Erasure, *, scrub: bool) -> ForgetReport:
    """Remove ``plan``'s entries from every layer (see the module); return what went.

    Raises:
        StorageError: a store failed; what was removed before stays removed (run it again:
            each step finds only what is left).
    """
    store = parts.store
    nodes = _forget_board(plan)
    existing = store.get_many(plan.iris)
    # The text each entry is embedded by, as its index fields make it, and the other texts
    # it may have had (a write may have changed its fields since it was embedded); each as
    # the dense index embeds it (after its context, in windows).
    searchable = store.searchable_texts(list(existing))
    texts = _texts(existing.values(), store.config.index_fields)
    contexts = [text for _, text in in_context(list(searchable.items()), store, plan.windows)]
    texts = _embedded([*searchable.values(), *contexts, *texts], plan.windows)
    # Before L0: once the entries are gone, the index drops their vectors through the change
    # log by itself, and there would be nothing left to count.
    vectors = plan.index.remove(list(existing)) if plan.index is not None else 0
    with store.transaction():
        inputs = parts.supplements.forget(plan.task) if plan.task is not None else []
        taken = set(inputs)
        deleted = [*inputs, *store.delete_many([i for i in plan.iris if i not in taken])]
        gone = set(deleted) | set(plan.iris)
        # Sessions open nowhere keep their chains in L0 too.
        prune_states(store, gone, _summaries(existing.values()))
    kinds = Counter(_kind(existing[iri].jsonld_types) for iri in deleted if iri in existing)
    turns = sum(session.forget(gone) for session in parts.sessions())
    points = parts.structure.forget(sorted(gone))
    if plan.index is not None:
        # A catch-up under way (a batch written with embed="later") may have read the texts
        # before they went: it would cache their vectors after the cache forgot them.
        plan.index.refresh(wait=True)
    embeddings = plan.cache.forget(texts) if plan.cache is not None and texts else 0
    messages = _forget_messages(plan)
    scrubbed = _scrub(parts, plan) if scrub else ()
    return ForgetReport(
        target=plan.target,
        entries=tuple(deleted),
        kinds=dict(kinds),
        inputs=sum(1 for iri in deleted if iri.startswith(INPUT_PREFIX)),
        session_turns=turns,
        vectors=vectors,
        structure=points,
        embeddings=embeddings,
        blackboard_nodes=nodes,
        messages=messages,
        scrubbed=scrubbed,
        skipped=tuple(plan.skipped),
    )


def expire(
    parts: ErasableParts,
    *,
    index: VectorIndex | None,
    cache: CachedEmbedder | None,
    limit: int,
    windows: DenseConfig | None = None,
) -> ForgetReport:
    """Delete up to ``limit`` expired entries from every layer, as ``erase`` does without the
    blackboard and the scrub (expiry is routine; ``forget`` is the erasure on request).
    ``windows``: how the dense index embeds texts (``Erasure.windows``)."""
    entries = parts.store.sweep_expired(limit=limit)
    if not entries:
        return ForgetReport(target=EXPIRED)
    gone = {entry.iri for entry in entries}
    prune_states(parts.store, gone, _summaries(entries))
    texts = _embedded(_texts(entries, parts.store.config.index_fields), windows or DenseConfig())
    vectors = index.remove(sorted(gone)) if index is not None else 0
    if index is not None:  # a catch-up under way may have read the texts (see ``erase``)
        index.refresh(wait=True)
    return ForgetReport(
        target=EXPIRED,
        entries=tuple(entry.iri for entry in entries),
        kinds=dict(Counter(_kind(entry.jsonld_types) for entry in entries)),
        inputs=sum(1 for iri in gone if iri.startswith(INPUT_PREFIX)),
        session_turns=sum(session.forget(gone) for session in parts.sessions()),
        vectors=vectors,
        structure=parts.structure.forget(sorted(gone)),
        embeddings=cache.forget(texts) if cache is not None and texts else 0,
    )


def merge_reports(reports: Sequence[ForgetReport]) -> ForgetReport:
    """Return one report of several of the same target (the batches of a sweep)."""
    kinds: Counter[str] = Counter()
    for report in reports:
        kinds.update(report.kinds)
    return ForgetReport(
        target=reports[0].target if reports else EXPIRED,
        entries=tuple(iri for report in reports for iri in report.entries),
        kinds=dict(kinds),
        inputs=sum(r.inputs for r in reports),
        session_turns=sum(r.session_turns for r in reports),
        vectors=sum(r.vectors for r in reports),
        structure=sum(r.structure for r in reports),
        embeddings=sum(r.embeddings for r in reports),
        blackboard_nodes=sum(r.blackboard_nodes for r in reports),
        messages=sum(r.messages for r in reports),
    )


class ExpirySweeper:
    """Calls ``sweep`` every ``interval_s`` seconds on a daemon thread, until ``stop``.

    Holds the sweep weakly (a bound method of the memory), so an unclosed memory can still be
    collected; a failing sweep is logged and tried again at the next interval.
    """

    def __init__(self, sweep: Callable[[], object], interval_s: float) -> None:
        self._sweep = weakref.WeakMethod(sweep) if inspect.ismethod(sweep) else lambda: sweep
        self.interval_s = interval_s
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        """Start the thread (once; an interval of 0 starts nothing)."""
        if self.interval_s <= 0 or self._thread is not None:
            return
        self._thread = threading.Thread(target=self._run, name="gliding-expiry", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            sweep = self._sweep()
            if sweep is None:
                return
            try:
                sweep()
            except ClosedError:  # the memory closed between the wake-up and ``stop``
                return
            except Exception:
                logger.exception("the expiry sweep failed; it runs again in %s s", self.interval_s)
            del sweep

    def stop(self) -> None:
        """Stop the thread and wait for a sweep in progress; stopping twice is harmless."""
        self._stop.set()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join()


def _texts(entries: Collection[object], by_type: ByType) -> list[str]:
    """The texts whose embeddings an entry may have left in the cache: its text under the
    default index fields, under its types' (``by_type``), under every value (as entries were
    embedded before index fields), and its summary."""
    texts: list[str] = []
    for entry in entries:
        node = getattr(entry, "node", None)
        if not isinstance(node, dict):
            continue
        types = getattr(entry, "jsonld_types", ())
        made = [indexed_text(node, fields) for fields in (None, LEGACY)]
        if by_type and types:
            made.append(indexed_text(node, for_types(types, by_type)))
        texts += [t for t in (*made, node.get("summary")) if isinstance(t, str) and t]
    return list(dict.fromkeys(texts))


def _embedded(texts: Iterable[str], windows: DenseConfig) -> list[str]:
    """Each of ``texts`` and the windows it is embedded in, once (a long text's vectors are
    its windows', ``hyperspace.windows``)."""
    return list(
        dict.fromkeys(piece for text in texts for piece in (text, *text_windows(text, windows)))
    )


def _summaries(entries: Iterable[Entry]) -> list[str]:
    """The L1 summaries of the turns among ``entries``."""
    return [s for e in entries if isinstance(s := e.node.get("summary"), str)]


def _kind(types: Sequence[str]) -> str:
    return types[0] if types else UNTYPED


def _forget_board(plan: Erasure) -> int:
    """Delete the target's nodes from the blackboard's graph; return how many there were."""
    board = plan.board
    if board is None:
        return 0
    iris = [node.iri for node in board.read_many(plan.iris).values()]
    if plan.task is not None:
        iris += [node.iri for node in board.by_task(plan.task)]
    iris = list(dict.fromkeys(iris))
    return board.delete(iris, source="system") if iris else 0


def _forget_messages(plan: Erasure) -> int:
    """Delete the coordination messages of the target's task; return how many."""
    board = plan.board
    if board is None or plan.task is None or board.coordination is None:
        return 0
    with board.coordination.db.write("forgetting a task's messages") as tx:
        return tx.messages.forget_task(plan.task)


def _scrub(parts: ErasableParts, plan: Erasure) -> tuple[str, ...]:
    """Have each store rewrite its files without what was deleted; return which did."""
    done = ["l0"]
    parts.store.scrub()
    if plan.index is not None:
        plan.index.scrub()
        done.append("dense")
    board = plan.board
    if board is not None:
        if board.backend.kind == "disk":
            board.compact()
            done.append("blackboard")
        if board.coordination is not None:
            board.coordination.db.scrub()
            done.append("coordination")
    return tuple(done)
