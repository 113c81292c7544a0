"""Hyperspace: what every dense index does to follow L0, whatever keeps its vectors.

``FollowingIndex`` is the part of a ``VectorIndex`` that does not depend on the backend: it
follows an ``EntryStore`` through its change log, embeds the changed texts with the memory's
embedder, records the applied sequence as the store's watermark, retries a failed catch-up, and
answers the exact queries a small allowed set asks for. A backend (a Chroma collection in
``dense``, a pgvector table in ``pgvector``) supplies its operations on vector ids: write
vectors, remove ids, say which ids it holds, list them, fetch vectors, score ids exactly, the
approximate nearest neighbours, and count entries.

A text longer than one window (``DenseConfig``) is held as overlapping windows that cover it,
one vector each (``windows``): window 0's vector id is the entry's IRI, window ``i`` is
``"<iri> #<i>"``. This class turns vector ids back into entries: every read returns entries,
each scored by its best window, and an entry rewritten shorter or removed loses the windows it
no longer has. So every backend holds windows the same way.

Invariants:
- L0 is the source of truth and the index is derived from it. The index records in L0 the change
  sequence it has applied (its watermark, named after the index) and catches up from it: on
  opening, after each committed write (whoever wrote it, in any process) and before each
  search. A failed update is logged and retried (on the next write or search, and by a timer
  with back-off); until it succeeds ``behind()`` says how many changes are missing.
- A write made inside a transaction that is still open is never applied: the catch-up waits
  for its commit (its sequence numbers would be given out again if it rolled back).
- Vectors are computed by the memory's embedder, never by the backend; writes are split into
  batches of at most ``max_batch`` vectors.
- A writer inside ``deferred()`` commits without embedding; ``refresh_later()`` then catches
  up in one background thread, and searches meanwhile do not wait for it (``catching_up``).
- The window vectors of recently written or read entries stay in a bounded in-process cache
  (for the re-rank's exact cosines), kept coherent by the one path every change takes; a read
  of vectors that a write of the same entry overtakes keeps nothing of that entry.
- A small index (at most ``SCAN_LIMIT`` entries in L0) answers a query (filtered or not) by
  scoring every entry exactly from that cache, once the cache is known to hold all of them
  (``scan.ScanRows`` keeps their rows as writes come): an approximate graph can lose an entry
  outright (Chroma's HNSW lost one or more of 44 near-duplicate texts in about one fresh
  collection in a hundred), and a small memory can afford not to. The cache is "complete"
  from a load of every L0 entry until an entry leaves it other than by its removal from the
  index or its replacement (an eviction, a read of another process's changes that failed):
  then the next query loads again, or asks the backend when the memory has grown past the
  limit. Changes another process applied are read again in place.
- A writer inside ``reporting(report)`` hears, from the catch-ups its commits run, how many
  more of its entries are embedded, every ``REPORT_STEP`` texts (a progress bar's steps); its
  commits wait for a catch-up under way in another thread, so they return embedded.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

import numpy as np
import numpy.typing as npt

from gliding_core.checks import check_count, check_list
from gliding_core.config import MAX_WINDOWS, DenseConfig
from gliding_core.errors import EmbedderError, InvalidInputError
from gliding_core.hyperspace.backends import CachedEmbedder
from gliding_core.hyperspace.embedders import Embedder, embedder_name
from gliding_core.hyperspace.scan import ScanRows
from gliding_core.hyperspace.vectors import Vector, as_vector
from gliding_core.hyperspace.windows import (
    best_per_entry,
    entry_of,
    in_context,
    text_windows,
    window_ids,
)
from gliding_core.jsonld import preview
from gliding_core.store.filters import SearchFilters
from gliding_core.store.protocol import Change, EntryStore

logger = logging.getLogger(__name__)

EXACT_LIMIT = 2_000  # below this many allowed entries, score them exactly instead of ANN
SCAN_LIMIT = 2_000  # at most this many L0 entries: every query scores them all exactly
TIE_MARGIN = 8  # nearest neighbours asked beyond n, so ties at the n-th place are seen
CATCH_UP_CHUNK = 2_048  # L0 changes read, embedded and written per step of a catch-up
WATERMARK_PREFIX = "dense:"
VECTOR_CACHE_ENTRIES = 50_000  # entries whose window vectors stay in process (~75 MiB at 384-d)
REPORT_STEP = 128  # texts per embedding call while a progress report listens

Matrix = npt.NDArray[np.float32]


class FollowingIndex:
    """A dense index that follows an L0 store; subclasses keep the vectors (see the module).

    A subclass sets ``max_batch`` and calls ``_start`` at the end of its constructor, once its
    storage is open.

    Args:
        store: the L0 store to follow.
        embedder: computes the vectors.
        name: the index's name (its collection or table), unique per memory.
        retry_s: the first delay before a failed catch-up is retried; doubled up to a minute.
        windows: how long texts are split into windows (``DenseConfig``; its defaults when
            omitted). Changing them applies to texts written afterwards; ``reset()``
            re-embeds everything.
    """

    max_batch: int
    widest_query: int | None = None  # (``VectorIndex``'s) no bound unless the backend has one

    def __init__(
        self,
        store: EntryStore,
        embedder: Embedder,
        name: str,
        *,
        retry_s: float = 1.0,
        windows: DenseConfig | None = None,
    ) -> None:
        if (
            isinstance(retry_s, bool)
            or not isinstance(retry_s, (int, float))
            or not 0 < retry_s <= threading.TIMEOUT_MAX  # (NaN too: a timer cannot wait so)
        ):
            raise InvalidInputError(
                f"retry_s must be a number of seconds > 0 and <= {threading.TIMEOUT_MAX:.0f},"
                f" got {preview(retry_s)}"
            )
        if windows is not None and not isinstance(windows, DenseConfig):
            raise InvalidInputError(f"windows must be a DenseConfig, got {preview(windows)}")
        self.windows = windows or DenseConfig()
        self.store, self.embedder, self.name = store, embedder, name
        self.watermark_name = WATERMARK_PREFIX + name
        self.retry_s = retry_s
        self._guard = threading.Lock()  # one catch-up (or rebuild) at a time
        self._wanted = False  # a catch-up was asked for while another ran
        self._timer: threading.Timer | None = None
        self._delay = retry_s
        self._closed = False
        self._writer = threading.local()  # .deferring, .report: this writing thread's wishes
        self._background: threading.Thread | None = None
        self._background_lock = threading.Lock()
        self._cache: OrderedDict[str, Matrix] = OrderedDict()
        self._cache_lock = threading.Lock()
        # The reads of vectors under way (``_matrices``), each told which entries a write
        # changed meanwhile: what it read of those is stale and is not kept.
        self._reads: list[_Read] = []
        # A refill (``_refilling``: the backend's storage made anew and filled from L0) has
        # the backend alone; reads (``_reading``) wait for it to end, and it for them.
        self._refill = threading.Condition()
        self._refilled = False  # whether a refill is under way
        self._readers = 0  # reads under way
        # The small-index scan (see the module): whether the cache holds every entry, a count
        # bumped whenever it stops doing so, the cache's rows for scoring, and the last
        # count of L0 found too large (with the sequence applied then).
        self._complete = False
        self._breaks = 0
        self._rows: ScanRows | None = None  # the cache's rows for the scan, while complete
        self._too_many: tuple[int, int] | None = None
        self._applied = self._persisted = store.watermark(self.watermark_name)
        self._persisted_at = time.monotonic()
        self._rebuild_pending = False
        self._unsubscribe: Callable[[], None] = _nothing

    def _start(self, *, fill: bool) -> None:
        """Follow the store from now on and catch up with it.

        Args:
            fill: the storage is new (or was emptied): fill it from all of L0 on the first
                catch-up, whatever the watermark says.
        """
        self._rebuild_pending = fill
        if fill:
            self._applied = 0
        self._unsubscribe = self.store.subscribe(self._on_commit)
        self.refresh(wait=True)

    @property
    def embedder_label(self) -> str:
        """The embedder's name as the index's storage records it."""
        return embedder_name(self.embedder)

    # -- what a backend supplies (on vector ids: an IRI, or an IRI's window) -------------------

    def _write(self, keys: list[str], vectors: Matrix) -> None:
        """Store one vector per id (replacing any), at most ``max_batch`` of them."""
        raise NotImplementedError

    def _remove(self, keys: list[str]) -> None:
        """Remove these ids' vectors (missing ones are ignored), at most ``max_batch``."""
        raise NotImplementedError

    def _present(self, keys: list[str]) -> list[str]:
        """Return those of ``keys`` (distinct, at most ``max_batch``) the backend holds."""
        raise NotImplementedError

    def _ids(self) -> Iterator[str]:
        """Yield every vector id held."""
        raise NotImplementedError

    def _fetch(self, keys: list[str]) -> list[tuple[str, Vector]]:
        """Return the ``(id, vector)`` pairs of those of ``keys`` the backend holds."""
        raise NotImplementedError

    def _exact(self, vector: Vector, keys: list[str], n: int) -> list[tuple[str, float]]:
        """Return up to ``n`` of ``keys`` by exact cosine with ``vector``, best first."""
        raise NotImplementedError

    def _nearest(self, vector: Vector, n: int, keys: list[str] | None) -> list[tuple[str, float]]:
        """Return about ``n`` approximate nearest vector ids (among ``keys``), best first."""
        raise NotImplementedError

    def count(self) -> int:
        """Return the number of indexed entries (a windowed entry counts once)."""
        raise NotImplementedError

    def scrub(self) -> None:
        """Make removed entries' vectors unrecoverable from storage the index owns: nothing
        to do unless a backend keeps files of its own (it overrides this)."""

    def remove(self, iris: Sequence[str]) -> int:
        """Drop the vectors of ``iris`` (and their windows) now, not waiting for the change
        log; return how many entries the index held."""
        unique = list(dict.fromkeys(iris))
        held = sum(len(self._present(part)) for part in chunks(unique, self.max_batch))
        self._drop_windows(dict.fromkeys(unique, 0))
        return held

    # -- following L0 --------------------------------------------------------------------------

    def behind(self) -> int:
        """Return how many committed L0 changes the index has not applied yet (cheap)."""
        return max(0, self.store.change_sequence() - self._applied)

    def refresh(self, *, wait: bool = False) -> int:
        """Catch up with L0 unless another thread is doing so; return ``behind()`` after.

        A failure is logged and retried later (see the module docstring); it is not raised.

        Args:
            wait: wait for a catch-up running in another thread instead of leaving the work
                to it.
        """
        if self.store.in_transaction():
            # This thread is inside a write transaction: its reads see writes that may still
            # roll back (and whose sequence numbers would then be given out again).
            return self.behind()
        self._wanted = True
        caught_up = False
        while self._wanted and not self._closed:
            if not self._guard.acquire(blocking=wait):
                caught_up = False
                break  # the running catch-up sees ``_wanted`` and goes round again
            try:
                if self._closed:  # closed while this thread waited for the guard
                    break
                self._wanted = False
                caught_up = self._catch_up_quietly()
            finally:
                self._guard.release()
            if not caught_up:
                break
        # A catch-up that succeeded read the log until it found nothing after what it applied:
        # nothing was behind as of that read, and asking the store again would cost a round
        # trip for the same answer.
        return 0 if caught_up else self.behind()

    def catch_up(self) -> int:
        """Apply every L0 change after the watermark, in chunks; return how many were read.

        Raises:
            StorageError: L0 or the backend failed; the watermark stays where the last applied
                chunk left it.
        """
        if self.store.in_transaction():  # see ``refresh``: wait for the commit
            return 0
        with self._guard:
            return self._catch_up()

    def _catch_up(self) -> int:
        if self._rebuild_pending:
            self._rebuild(512)
        shared = self.store.watermark(self.watermark_name)
        if shared > self._applied:
            self._forget_applied_elsewhere(self._applied, shared)
        start = self._applied = max(self._applied, shared)
        read = 0
        chunk = min(self.max_batch, CATCH_UP_CHUNK)
        # A closing index stops between chunks: the watermark keeps what was applied.
        while not self._closed and (changes := self.store.changes_since(start, limit=chunk)):
            self._apply([(iri, text) for _, iri, text in changes])
            start = self._applied = changes[-1][0]
            read += len(changes)
        self._persist(force=False)
        return read

    def _forget_applied_elsewhere(self, start: int, end: int) -> None:
        """Drop from the in-process cache the entries whose changes after ``start`` up to
        ``end`` another process applied (the index, and its watermark, are shared): this
        process will not apply them, so its cached vectors of them may be stale. A long gap
        clears the whole cache rather than reading it all.

        A cache that held every entry (the small-index scan) reads the changed ones again in
        their place, so it still does: one read of those entries, not a load of all of them.
        """
        changes = self.store.changes_since(start, limit=CATCH_UP_CHUNK)
        if len(changes) == CATCH_UP_CHUNK and changes[-1][0] < end:
            self._forget()
            return
        latest = {iri: text for sequence, iri, text in changes if sequence <= end}
        with self._cache_lock:
            complete = self._complete
        if not complete:
            self._forget(list(latest), broken=True)
            return
        try:
            fresh = self._read_matrices([iri for iri, text in latest.items() if text])
        except Exception:
            self._forget(list(latest), broken=True)  # stale vectors are never scanned
            raise
        self._remember(fresh, replacing=list(latest))

    def _catch_up_quietly(self) -> bool:
        try:
            self._catch_up()
        except Exception as exc:  # kept for the retry: the write that triggered it stands
            logger.warning(
                "the dense index %r could not catch up with L0 (%d changes behind): %s",
                self.name,
                self._safe_behind(),
                exc,
            )
            self._schedule_retry()
            return False
        self._delay = self.retry_s
        return True

    def _safe_behind(self) -> int:
        try:
            return self.behind()
        except Exception:
            return -1

    def _schedule_retry(self) -> None:
        timer = self._timer
        # (A retry of the timer's own that failed schedules the next: its thread is alive.)
        waiting = timer is not None and timer.is_alive() and timer is not threading.current_thread()
        if self._closed or waiting:
            return
        self._timer = threading.Timer(self._delay, self._retry)
        self._timer.daemon = True
        self._timer.start()
        self._delay = min(self._delay * 2, 60.0)

    def _retry(self) -> None:
        """The retry timer's call: never raises in its thread (the store may be closing)."""
        try:
            self.refresh()
        except Exception as exc:
            logger.warning("the dense index %r could not retry its catch-up: %s", self.name, exc)

    def _on_commit(self, changes: list[Change]) -> None:
        """Listener of L0 commits: the changes themselves are read back from the change log.

        A commit made inside ``deferred()`` leaves the work to ``refresh_later``; one made
        inside ``reporting()`` (a writer that returns once its entries are embedded) waits for
        a catch-up under way in another thread, where another commit leaves the work to it."""
        del changes
        if not getattr(self._writer, "deferring", False):
            self.refresh(wait=getattr(self._writer, "report", None) is not None)

    @contextmanager
    def reporting(self, report: Callable[[int], None]) -> Iterator[None]:
        """Within this block, the catch-ups this thread runs call ``report(n)`` each time ``n``
        more entries are embedded (every ``REPORT_STEP`` texts): a progress bar's ``update``.
        Its commits wait for a catch-up under way in another thread, and so return embedded.

        Raises:
            InvalidInputError: ``report`` is not callable.
        """
        if not callable(report):
            raise InvalidInputError(f"report must be callable, got {preview(report)}")
        before = getattr(self._writer, "report", None)
        self._writer.report = report
        try:
            yield
        finally:
            self._writer.report = before

    @contextmanager
    def deferred(self) -> Iterator[None]:
        """Within this block, this thread's commits return without embedding: call
        ``refresh_later()`` (or any search) to catch up."""
        self._writer.deferring = True
        try:
            yield
        finally:
            self._writer.deferring = False

    def refresh_later(self) -> None:
        """Catch up with L0 in a background thread (one at a time), and return at once.

        While it runs, searches do not wait for it: their results' ``index_behind`` says how
        many changes it has still to apply.
        """
        with self._background_lock:
            if self._closed:
                return
            if self.catching_up:
                self._wanted = True  # the running catch-up goes round again
                return
            self._background = threading.Thread(
                target=self._refresh_in_background, name=f"catch-up {self.name}", daemon=True
            )
            self._background.start()

    @property
    def catching_up(self) -> bool:
        """Whether a background catch-up (``refresh_later``) is running."""
        thread = self._background
        return thread is not None and thread.is_alive()

    def _refresh_in_background(self) -> None:
        try:
            self.refresh(wait=True)
        except Exception as exc:  # the store closed under it: the next open catches up
            logger.warning("the dense index %r stopped its background catch-up: %s", self.name, exc)

    def _persist(self, *, force: bool) -> None:
        """Record the applied sequence in L0, at most about once a second unless forced.

        A watermark that lags only makes the next catch-up apply some changes again, which is
        harmless (an upsert of the same vector), and saves a synced L0 commit per write.
        """
        due = force or time.monotonic() - self._persisted_at >= 1.0
        if self._applied > self._persisted and due:
            self.store.set_watermark(self.watermark_name, self._applied)
            self._persisted, self._persisted_at = self._applied, time.monotonic()

    def _apply(self, changes: Sequence[Change]) -> None:
        """Bring the index in line with these changes (the latest text of each IRI wins)."""
        latest: dict[str, str | None] = {}
        for iri, text in changes:
            latest[iri] = text
        written = [(iri, text) for iri, text in latest.items() if text]
        removed = [iri for iri, text in latest.items() if not text]
        if written:
            self.upsert(written)
        self._drop_windows(dict.fromkeys(removed, 0))

    def upsert(self, items: Sequence[tuple[str, str]]) -> None:
        """Embed and store the texts of these entries (a long one in windows), in batches the
        backend accepts; windows an entry had beyond its new text's are dropped."""
        pieces: list[tuple[str, str]] = []
        counts: dict[str, int] = {}
        latest = in_context(list(dict(items).items()), self.store, self.windows)
        for iri, text in latest:  # the last text of an IRI wins
            windows = text_windows(text, self.windows)
            counts[iri] = len(windows)
            pieces += zip(window_ids(iri, len(windows)), windows, strict=True)
        self._drop_windows(counts)
        report: Callable[[int], None] | None = getattr(self._writer, "report", None)
        last = {window_ids(iri, count)[-1] for iri, count in counts.items()} if report else set()
        rows: dict[str, list[Vector]] = {}
        for part in chunks(pieces, self.max_batch):
            vectors = self._embed(part, report, last)
            self._write([key for key, _ in part], vectors)
            for (key, _), vector in zip(part, vectors, strict=True):
                rows.setdefault(entry_of(key), []).append(vector)
        self._remember({iri: np.stack(found) for iri, found in rows.items()})

    def _embed(
        self,
        part: list[tuple[str, str]],
        report: Callable[[int], None] | None,
        last: set[str],
    ) -> Matrix:
        """Embed the texts of ``(vector id, text)`` pairs in one call, or, while ``report``
        listens, in steps of ``REPORT_STEP``, reporting the entries whose last window is done."""
        if report is None:
            texts = [text for _, text in part]
            return np.asarray(self.embedder.embed_documents(texts), dtype=np.float32)
        rows = []
        for step in chunks(part, REPORT_STEP):
            texts = [text for _, text in step]
            rows.append(np.asarray(self.embedder.embed_documents(texts), dtype=np.float32))
            report(sum(key in last for key, _ in step))
        return np.concatenate(rows)

    def _drop_windows(self, counts: dict[str, int]) -> None:
        """Delete each entry's vectors from window ``counts[iri]`` on (0: all of them).

        Only entries that have a second window can have windows to drop: one read by id
        finds them, so a batch of short texts costs no deletes.
        """
        if not counts:
            return
        gone = [iri for iri, count in counts.items() if count == 0]
        self._forget(gone)
        for iri in self._windowed(list(counts)):
            # Up to the most any setting allows: windows left by a larger max_windows go too.
            gone += window_ids(iri, MAX_WINDOWS)[max(counts[iri], 1) :]
        for part in chunks(gone, self.max_batch):
            self._remove(part)

    def _windowed(self, iris: Sequence[str]) -> list[str]:
        """Return those of ``iris`` whose text is held in more than one window."""
        found: list[str] = []
        for part in chunks([window_ids(iri, 2)[1] for iri in iris], self.max_batch):
            found += self._present(part)
        return [entry_of(key) for key in found]

    def _with_windows(self, iris: Sequence[str]) -> list[str]:
        """Return the vector ids of these entries: each IRI, and its windows when it has any."""
        ceiling = self.windows.max_windows
        extra = [key for iri in self._windowed(iris) for key in window_ids(iri, ceiling)[1:]]
        return [*iris, *extra]

    # -- the in-process vector cache -----------------------------------------------------------

    def _remember(
        self,
        matrices: Mapping[str, Matrix],
        *,
        replacing: Sequence[str] = (),
        read: _Read | None = None,
    ) -> dict[str, Matrix]:
        """Keep these entries' window vectors, as unit rows, in the bounded in-process cache;
        return them as kept.

        Args:
            replacing: entries dropped from the cache in the same step (those of them in
                ``matrices`` come back with their new vectors): a scan never sees them gone.
            read: the read (``_matrices``) these vectors come from, which ends here: those of
                entries a write changed since it began are returned, not kept. Without it,
                the vectors are a write's.
        """
        if not matrices:
            with self._cache_lock:
                self._changed(read, [*replacing])
                for iri in replacing:
                    self._cache.pop(iri, None)
                if self._rows is not None:
                    self._rows.drop(replacing)
            return {}
        # All rows at once: a search reads a hundred entries' vectors, a row or two each.
        stacked = np.concatenate(list(matrices.values()))
        norms = np.linalg.norm(stacked, axis=1, keepdims=True)
        unit = (stacked / np.where(norms == 0, 1.0, norms)).astype(np.float32)
        ends = np.cumsum([len(matrix) for matrix in matrices.values()])
        kept = {
            iri: part.copy()  # its own array: the cache never holds on to another entry's
            for iri, part in zip(matrices, np.split(unit, ends[:-1]), strict=True)
        }
        with self._cache_lock:
            self._changed(read, [*replacing, *kept])
            fresh = kept if read is None else {i: m for i, m in kept.items() if i not in read}
            for iri in replacing:
                self._cache.pop(iri, None)
            for iri, matrix in fresh.items():
                self._cache[iri] = matrix
                self._cache.move_to_end(iri)
            if self._rows is not None:  # appended: rewritten entries' old rows left dead
                self._rows.drop(replacing)
                self._rows.put(fresh)
            while len(self._cache) > VECTOR_CACHE_ENTRIES:
                self._cache.popitem(last=False)
                self._break()
            if self._complete and len(self._cache) > SCAN_LIMIT:
                self._break()  # grown past the scan: the backend answers again
        return kept

    def _forget(self, iris: Sequence[str] | None = None, *, broken: bool = False) -> None:
        """Drop these entries (``None``: every entry) from the in-process cache.

        Args:
            broken: the entries stay in the index (their vectors here may be stale): the
                cache no longer holds every entry. Dropping every entry always says so.
        """
        with self._cache_lock:
            self._changed(None, iris)
            if iris is None or broken:
                self._break()
            if iris is None:
                self._cache.clear()
            for iri in iris or ():
                self._cache.pop(iri, None)
            if self._rows is not None:
                self._rows.drop(iris or ())

    def _changed(self, read: _Read | None, iris: Sequence[str] | None) -> None:
        """End ``read`` (a read of vectors that lands now), or else tell every read under way
        that a write changed ``iris`` (``None``: every entry). The caller holds the cache lock.
        """
        if read is not None:
            self._reads.remove(read)
            return
        for reading in self._reads:
            reading.add(iris)

    def _break(self) -> None:
        """Record that the cache may miss an indexed entry (the caller holds the cache lock)."""
        self._complete = False
        self._breaks += 1
        self._rows = None

    def _matrices(self, iris: Sequence[str]) -> dict[str, Matrix]:
        """Return each indexed entry's window vectors (unit rows), from the in-process cache
        or else read (``_read_matrices``: from the embedding cache by their texts, or from the
        backend; a backend may read them its own way)."""
        found: dict[str, Matrix] = {}
        with self._cache_lock:
            for iri in iris:
                matrix = self._cache.get(iri)
                if matrix is not None:
                    found[iri] = matrix
        missing = [iri for iri in iris if iri not in found]
        if missing:
            read = _Read()
            with self._cache_lock:
                self._reads.append(read)
            try:
                matrices = self._read_matrices(missing)
            except BaseException:
                with self._cache_lock:
                    self._changed(read, None)
                raise
            found.update(self._remember(matrices, read=read))
        return found

    def _read_matrices(self, iris: list[str]) -> dict[str, Matrix]:
        """Read entries' window vectors: with a caching embedder from its cache by the texts
        L0 holds (several times faster than the backend), else from the backend.

        A text the cache lacks is embedded; when the embedder refuses one (an entry the index
        could not apply, retrying), the backend's vectors are read instead: the entries it
        holds, the read never failing for one it does not.
        """
        if isinstance(self.embedder, CachedEmbedder):
            bodies = in_context(
                list(self.store.searchable_texts(iris).items()), self.store, self.windows
            )
            windows = {iri: text_windows(body, self.windows) for iri, body in bodies}
            windows = {iri: found for iri, found in windows.items() if found}
            if not windows:
                return {}
            try:
                # An entry's windows are consecutive rows of one matrix.
                texts = [text for found in windows.values() for text in found]
                matrix = self.embedder.matrix(texts)
            except EmbedderError as exc:
                logger.debug("reading vectors from %r, not embedding them: %s", self.name, exc)
            else:
                ends = np.cumsum([len(found) for found in windows.values()])
                return dict(zip(windows, np.split(matrix, ends[:-1]), strict=True))
        rows: dict[str, list[Vector]] = {}
        for part in chunks(self._with_windows(iris), self.max_batch):
            for key, row in self._fetch(part):
                rows.setdefault(entry_of(key), []).append(row)
        return {iri: np.stack(found) for iri, found in rows.items()}

    # -- rebuilding ----------------------------------------------------------------------------

    def rebuild(self, batch: int = 512) -> int:
        """Re-embed every L0 entry with text and drop what L0 no longer holds; return the count.

        The watermark then stands at the change sequence read before the scan, so a write
        made during the rebuild is applied (again) by the next catch-up.
        """
        with self._guard:
            return self._rebuild(batch)

    def _rebuild(self, batch: int) -> int:
        sequence = self.store.change_sequence()
        seen: set[str] = set()
        for items in self.store.scan_texts(batch):
            if items:
                self.upsert(items)
                seen.update(iri for iri, _ in items)
        stale = [iri for iri in dict.fromkeys(map(entry_of, self._ids())) if iri not in seen]
        self._apply([(iri, None) for iri in stale])
        self._applied = max(self._applied, sequence)
        self._rebuild_pending = False
        self._persist(force=True)
        return len(seen)

    # -- reading -------------------------------------------------------------------------------

    def vector(self, text: str | Vector) -> Vector:
        """Return the query vector of ``text`` (a vector passes through unchanged)."""
        return as_vector(self.embedder.embed_query(text)) if isinstance(text, str) else text

    def query(
        self, text: str | Vector, n: int, *, allowed: Sequence[str] | None = None
    ) -> list[tuple[str, float]]:
        """Return up to ``n`` ``(iri, cosine)`` pairs nearest to ``text``, best first; a
        windowed entry once, by its best window.

        With ``allowed``, only those IRIs are considered: scored exactly when few, otherwise
        through the backend's index restricted to them. A small index scores them exactly
        from the process's copy of its vectors either way (see the module).

        Raises:
            InvalidInputError: ``n`` is not an int >= 0, or ``allowed`` is not a list (named
                in the message).
        """
        check_count(n, what="n", minimum=0)
        if allowed is not None:
            allowed = check_list(allowed, what="allowed")
        vector = self.vector(text)
        if allowed is not None and not allowed:
            return []
        with self._reading():
            return self._query(vector, n, allowed)

    def _query(self, vector: Vector, n: int, allowed: list[str] | None) -> list[tuple[str, float]]:
        if (scanned := self._scan(vector, n, allowed)) is not None:
            return scanned
        keys = None if allowed is None else self._with_windows(list(dict.fromkeys(allowed)))
        if allowed is not None and keys is not None and len(allowed) <= EXACT_LIMIT:
            return _ranked(best_per_entry(self._exact(vector, keys, len(keys))), n)
        # A few more than asked: entries tied at the n-th place all come back, and the tie is
        # broken by IRI, so the same index answers the same query with the same list whatever
        # order its graph walk met them in.
        fetch = max(1, n) + TIE_MARGIN
        while True:  # windows of one entry take several places: ask until n entries are found
            found = self._nearest(vector, fetch, keys)
            entries = best_per_entry(found)
            if len(entries) >= n + TIE_MARGIN or len(found) < fetch:
                return _ranked(entries, n)
            fetch *= 2

    @contextmanager
    def _reading(self) -> Iterator[None]:
        """Hold off a refill while this thread reads the backend (or wait for one to end: the
        backend is then empty or part filled)."""
        with self._refill:
            while self._refilled:
                self._refill.wait()
            self._readers += 1
        try:
            yield
        finally:
            with self._refill:
                self._readers -= 1
                self._refill.notify_all()

    @contextmanager
    def _refilling(self) -> Iterator[None]:
        """Have the backend alone (reads wait) while its storage is made anew and filled
        from L0: a search meanwhile would find it empty or part filled and say nothing. The
        caller holds ``_guard`` (so one refill at a time); a reading thread never refills."""
        with self._refill:
            self._refilled = True
            while self._readers:
                self._refill.wait()
        try:
            yield
        finally:
            with self._refill:
                self._refilled = False
                self._refill.notify_all()

    def _scan(
        self, vector: Vector, n: int, allowed: Sequence[str] | None
    ) -> list[tuple[str, float]] | None:
        """Score every entry (among ``allowed``, when given) exactly when the index is small
        and the cache holds all of its entries (loading them when it does not); ``None`` when
        the backend must answer."""
        if not self._load_all():
            return None
        unit = (vector / (float(np.linalg.norm(vector)) or 1.0)).astype(np.float32)
        with self._cache_lock:
            if not self._complete:  # broken since the load: the backend answers this time
                return None
            if self._rows is None or self._rows.worn:
                self._rows = ScanRows(self._cache, len(unit))
            # A search runs this on one BLAS thread (``one_blas_thread``, not nested here:
            # leaving a nested limit would give the search back OpenBLAS's threads).
            return self._rows.best(unit, n, allowed)

    def _load_all(self) -> bool:
        """Make the cache hold every L0 entry's vectors when L0 has at most ``SCAN_LIMIT``
        entries; return whether it holds them all.

        Not while a background catch-up runs (the load would embed what it has not yet) nor
        while the last count of L0, less the changes applied since, still exceeds the limit.
        """
        with self._cache_lock:
            if self._complete:
                return True
            breaks = self._breaks
        if self.catching_up or self.store.in_transaction():
            return False
        if self._too_many is not None:
            count, applied = self._too_many
            if count - (self._applied - applied) > SCAN_LIMIT:
                return False
        count = self.store.count()
        if count > SCAN_LIMIT:
            self._too_many = (count, self._applied)
            return False
        self._too_many = None
        entries = self.store.matching(SearchFilters())
        if len(entries) > SCAN_LIMIT:  # grown since the count
            return False
        self._matrices(entries)
        with self._cache_lock:
            if self._breaks != breaks or len(self._cache) > SCAN_LIMIT:
                return False  # something left the cache meanwhile: ask the backend this time
            self._complete = True
        return True

    def similarities(self, text: str | Vector, iris: Sequence[str]) -> dict[str, float]:
        """Return the exact cosine of ``text`` with each indexed entry among ``iris`` (the
        best of a windowed entry's windows).

        The vectors come from an in-process cache of recent entries, else from the embedding
        cache (the entries' texts read from L0), else from the backend.
        """
        if not iris:
            return {}
        vector = self.vector(text)
        unit = vector / (float(np.linalg.norm(vector)) or 1.0)
        with self._reading():
            matrices = self._matrices(list(iris))
        return {iri: float(np.max(m @ unit)) for iri, m in matrices.items()}

    def vectors(self, iris: Sequence[str]) -> dict[str, Vector]:
        """Return the unit vector of each indexed entry among ``iris`` (a windowed entry's is
        the normalised mean of its windows')."""
        out: dict[str, Vector] = {}
        with self._reading():
            matrices = self._matrices(list(iris))
        for iri, matrix in matrices.items():
            if len(matrix) == 1:  # its rows are unit vectors already
                out[iri] = matrix[0]
            else:
                total = matrix.mean(axis=0)
                out[iri] = total / (float(np.linalg.norm(total)) or 1.0)
        return out

    def close(self) -> None:
        """Stop following the store and record the applied sequence; closing twice is harmless."""
        with self._background_lock:
            if self._closed:
                return
            self._closed = True
        self._unsubscribe()
        if self._timer is not None:
            self._timer.cancel()
        with self._guard:
            try:
                self._persist(force=True)
            except Exception as exc:  # the next open applies these changes again
                logger.warning("cannot record the dense index's watermark: %s", exc)


class _Read:
    """The entries a write changed while one read of vectors was under way."""

    def __init__(self) -> None:
        self.iris: set[str] = set()
        self.every = False

    def add(self, iris: Sequence[str] | None) -> None:
        if iris is None:
            self.every = True
        else:
            self.iris.update(iris)

    def __contains__(self, iri: str) -> bool:
        return self.every or iri in self.iris


def cosines(matrix: Any, vector: Vector) -> list[float]:
    """Return the cosine of each row of ``matrix`` with ``vector`` (0 for a zero vector)."""
    rows = np.asarray(matrix, dtype=np.float32)
    norms = np.linalg.norm(rows, axis=1) * (float(np.linalg.norm(vector)) or 1.0)
    return [float(score) for score in rows @ vector / np.where(norms == 0, 1.0, norms)]


def _ranked(scores: dict[str, float], n: int) -> list[tuple[str, float]]:
    """Return the ``n`` best ``(iri, score)`` pairs, best first, equal scores by IRI."""
    return sorted(scores.items(), key=lambda pair: (-pair[1], pair[0]))[:n]


def best(ids: Sequence[str], scores: Sequence[float], n: int) -> list[tuple[str, float]]:
    """Return the ``n`` best ``(id, score)`` pairs, best first."""
    order = np.argsort(-np.asarray(scores, dtype=np.float64), kind="stable")[:n]
    return [(ids[i], float(scores[i])) for i in order]


def _nothing() -> None:
    """What unsubscribes an index that has not subscribed yet."""


def chunks(items: list[Any], size: int) -> Iterator[list[Any]]:
    """Yield ``items`` in lists of at most ``size``."""
    for start in range(0, len(items), size):
        yield items[start : start + size]
