"""Hyperspace: what every dense index does to follow L0, whatever keeps its vectors.

``FollowingIndex`` is the part of a ``VectorIndex`` that does not depend on the backend: it
follows an ``EntryStore`` through its change log, embeds the changed texts with the memory's
embedder, records the applied sequence as the store's watermark, retries a failed catch-up, and
answers the exact queries a small allowed set asks for. A backend (a Chroma collection in
``dense``, a pgvector table in ``pgvector``) supplies six operations: write vectors, remove
IRIs, list the indexed IRIs, fetch vectors, the approximate nearest neighbours, and count.

Invariants:
- L0 is the source of truth and the index is derived from it. The index records in L0 the change
  sequence it has applied (its watermark, named after the index) and catches up from it: on
  opening, after each committed write (whoever wrote it, in any process) and before each
  search. A failed update is logged and retried (on the next write or search, and by a timer
  with back-off); until it succeeds ``behind()`` says how many changes are missing.
- A write made inside a transaction that is still open is never applied: the catch-up waits
  for its commit (its sequence numbers would be given out again if it rolled back).
- Vectors are computed by the memory's embedder, never by the backend; writes are split into
  batches of at most ``max_batch`` entries.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from gliding_core.errors import InvalidInputError
from gliding_core.hyperspace.backends import CachedEmbedder
from gliding_core.hyperspace.embedders import Embedder, embedder_name
from gliding_core.hyperspace.vectors import Vector, as_vector
from gliding_core.jsonld import node_text, preview
from gliding_core.store.protocol import Change, EntryStore

logger = logging.getLogger(__name__)

EXACT_LIMIT = 2_000  # below this many allowed entries, score them exactly instead of ANN
CATCH_UP_CHUNK = 2_048  # L0 changes read, embedded and written per step of a catch-up
WATERMARK_PREFIX = "dense:"

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
    """

    max_batch: int

    def __init__(
        self, store: EntryStore, embedder: Embedder, name: str, *, retry_s: float = 1.0
    ) -> None:
        if isinstance(retry_s, bool) or not isinstance(retry_s, (int, float)) or retry_s <= 0:
            raise InvalidInputError(f"retry_s must be a number > 0, got {preview(retry_s)}")
        self.store, self.embedder, self.name = store, embedder, name
        self.watermark_name = WATERMARK_PREFIX + name
        self.retry_s = retry_s
        self._guard = threading.Lock()  # one catch-up (or rebuild) at a time
        self._wanted = False  # a catch-up was asked for while another ran
        self._timer: threading.Timer | None = None
        self._delay = retry_s
        self._closed = False
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

    # -- what a backend supplies ---------------------------------------------------------------

    def _write(self, iris: list[str], vectors: Matrix) -> None:
        """Store one vector per IRI (replacing any), at most ``max_batch`` of them."""
        raise NotImplementedError

    def _remove(self, iris: list[str]) -> None:
        """Remove these IRIs' vectors (missing ones are ignored), at most ``max_batch``."""
        raise NotImplementedError

    def _held(self, iris: list[str]) -> int:
        """How many of ``iris`` (distinct) the backend holds vectors for."""
        raise NotImplementedError

    def remove(self, iris: Sequence[str]) -> int:
        """Drop the vectors of ``iris`` now (not waiting for the change log); return how many
        the index held."""
        held = 0
        for part in chunks(list(dict.fromkeys(iris)), self.max_batch):
            held += self._held(part)
            self._remove(part)
        return held

    def scrub(self) -> None:
        """Make removed entries' vectors unrecoverable from storage the index owns: nothing
        to do unless a backend keeps files of its own (it overrides this)."""

    def _ids(self) -> Iterator[str]:
        """Yield every indexed IRI."""
        raise NotImplementedError

    def _exact(self, vector: Vector, allowed: list[str], n: int) -> list[tuple[str, float]]:
        """Return up to ``n`` of ``allowed`` by exact cosine with ``vector``, best first."""
        raise NotImplementedError

    def _nearest(
        self, vector: Vector, n: int, allowed: list[str] | None
    ) -> list[tuple[str, float]]:
        """Return about ``n`` approximate nearest neighbours (among ``allowed``), best first."""
        raise NotImplementedError

    def count(self) -> int:
        """Return the number of indexed entries."""
        raise NotImplementedError

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
        start = max(self._applied, self.store.watermark(self.watermark_name))
        self._applied = start
        read = 0
        chunk = min(self.max_batch, CATCH_UP_CHUNK)
        while changes := self.store.changes_since(start, limit=chunk):
            self._apply([(iri, text) for _, iri, text in changes])
            start = self._applied = changes[-1][0]
            read += len(changes)
        self._persist(force=False)
        return read

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
        if self._closed or (self._timer is not None and self._timer.is_alive()):
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
        """Listener of L0 commits: the changes themselves are read back from the change log."""
        del changes
        self.refresh()

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
        for part in chunks(removed, self.max_batch):
            self._remove(part)

    def upsert(self, items: Sequence[tuple[str, str]]) -> None:
        """Embed and store the texts of these entries, in batches the backend accepts."""
        for part in chunks(list(dict(items).items()), self.max_batch):  # the last text wins
            vectors = np.asarray(
                self.embedder.embed_documents([text for _, text in part]), dtype=np.float32
            )
            self._write([iri for iri, _ in part], vectors)

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
        stale = [iri for iri in self._ids() if iri not in seen]
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
        """Return up to ``n`` ``(iri, cosine)`` pairs nearest to ``text``, best first.

        With ``allowed``, only those IRIs are considered: scored exactly when few, otherwise
        through the backend's index restricted to them.
        """
        vector = self.vector(text)
        if allowed is not None and not allowed:
            return []
        if allowed is not None and len(allowed) <= EXACT_LIMIT:
            return self._exact(vector, list(allowed), n)
        return self._nearest(vector, max(1, n), None if allowed is None else list(allowed))

    def similarities(self, text: str | Vector, iris: Sequence[str]) -> dict[str, float]:
        """Return the exact cosine of ``text`` with each indexed entry among ``iris``.

        With a caching embedder the vectors come from its cache (the entries' texts are read
        from L0), which is several times faster than fetching them from the backend.
        """
        if not iris:
            return {}
        vector = self.vector(text)
        if not isinstance(self.embedder, CachedEmbedder):
            return dict(self._exact(vector, list(iris), len(iris)))
        found = [(iri, node_text(json.loads(c))) for iri, c in self.store.contents(iris).items()]
        found = [(iri, body) for iri, body in found if body]
        if not found:
            return {}
        return dict(
            zip(
                (iri for iri, _ in found),
                cosines(self.embedder.matrix([body for _, body in found]), vector),
                strict=True,
            )
        )

    def close(self) -> None:
        """Stop following the store and record the applied sequence; closing twice is harmless."""
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


def cosines(matrix: Any, vector: Vector) -> list[float]:
    """Return the cosine of each row of ``matrix`` with ``vector`` (0 for a zero vector)."""
    rows = np.asarray(matrix, dtype=np.float32)
    norms = np.linalg.norm(rows, axis=1) * (float(np.linalg.norm(vector)) or 1.0)
    return [float(score) for score in rows @ vector / np.where(norms == 0, 1.0, norms)]


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
