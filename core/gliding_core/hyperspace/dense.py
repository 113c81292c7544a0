"""Hyperspace: the dense index (``VectorIndex``) over L0 entries' text, in a Chroma collection.

Invariants:
- L0 is the source of truth and the index is derived from it. The index records in L0 the change
  sequence it has applied (its watermark, named after its collection) and catches up from it:
  on opening, after each committed write (whoever wrote it, in any process) and before each
  search. A failed update is logged and retried (on the next write or search, and by a timer
  with back-off); until it succeeds ``behind()`` says how many changes are missing.
- The collection's metadata names the embedder and its dimension; opening it with another
  embedder rebuilds it (when this process owns it) or raises ``IndexMismatchError``, never a
  backend error.
- Writes to Chroma are chunked by the client's maximum batch size.
- A text longer than one window (``DenseConfig``) is held as overlapping windows that cover
  it, one vector each (``gliding_core.hyperspace.windows``); every read returns entries, never
  windows, each scored by the maximum cosine among its windows, and an entry rewritten shorter
  or removed loses the windows it no longer has.
- Vectors are computed by the memory's embedder, never by Chroma, so no model is ever
  downloaded. Telemetry is off. Chroma's exceptions leave this module as ``GlidingError``s.
"""

from __future__ import annotations

import json
import logging
import threading
import time
import uuid
from collections import OrderedDict
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Literal

import numpy as np
import numpy.typing as npt

from gliding_core.boundary import translated
from gliding_core.config import MAX_WINDOWS, DenseConfig
from gliding_core.errors import IndexMismatchError, InvalidInputError
from gliding_core.hyperspace.backends import CachedEmbedder
from gliding_core.hyperspace.embedders import Embedder, embedder_name
from gliding_core.hyperspace.vectors import Vector, as_vector
from gliding_core.hyperspace.windows import (
    WINDOW_SEPARATOR,
    best_per_entry,
    entry_of,
    text_windows,
    window_ids,
)
from gliding_core.jsonld import node_text, preview
from gliding_core.store.protocol import Change, EntryStore

logger = logging.getLogger(__name__)

VECTOR_CACHE_ENTRIES = 50_000  # entries whose window vectors stay in process (~75 MiB at 384-d)
_EXACT_LIMIT = 2_000  # below this many allowed entries, score them exactly instead of ANN
CATCH_UP_CHUNK = 2_048  # L0 changes read, embedded and written per step of a catch-up
WATERMARK_PREFIX = "dense:"
EMBEDDER_KEY, DIMENSION_KEY = "gliding:embedder", "gliding:dimension"
# A wider search beam than Chroma's default: recall over speed at these sizes.
_HNSW = {"hnsw:space": "cosine", "hnsw:search_ef": 128, "hnsw:construction_ef": 128}

OnMismatch = Literal["rebuild", "raise"]


def chroma_client(
    directory: Path | None = None, *, host: str | None = None, port: int = 8000
) -> Any:
    """Return a Chroma client: HTTP when ``host`` is set, persistent under ``directory``, or
    ephemeral (in memory)."""
    import chromadb
    from chromadb.config import Settings

    settings = Settings(anonymized_telemetry=False, allow_reset=False)
    where = f"{host}:{port}" if host is not None else str(directory or "memory")
    with translated("chroma", f"opening the Chroma client at {where!r}"):
        if host is not None:
            return chromadb.HttpClient(host=host, port=port, settings=settings)
        if directory is not None:
            return chromadb.PersistentClient(path=str(directory), settings=settings)
        return chromadb.EphemeralClient(settings=settings)


def close_client(client: Any) -> None:
    """Close a Chroma client, and the HTTP connection pools an HTTP client keeps.

    chromadb's ``close()`` stops its system but leaves the HTTP connection pools (the client's
    and its admin client's) open until garbage collection; closing them here releases the
    sockets at once.
    """
    owners = (client, getattr(client, "_admin_client", None))
    sessions = [getattr(getattr(o, "_server", None), "_session", None) for o in owners]
    with translated("chroma", "closing the Chroma client"):
        client.close()
    for session in sessions:
        if session is not None and callable(getattr(session, "close", None)):
            session.close()


class DenseIndex:
    """Cosine nearest neighbours over the text of L0 entries, kept in a Chroma collection.

    A ``VectorIndex``, over an embedded Chroma (``chroma_client(directory)``, or in memory) or
    a Chroma server (``chroma_client(host=..., port=...)``).

    Args:
        store: the L0 store to follow.
        embedder: computes the vectors.
        client: a Chroma client (see ``chroma_client``).
        collection: the collection name; a fresh unique one when omitted (ephemeral clients in
            one process share their collections).
        on_mismatch: what to do when the collection was built by another embedder:
            ``"rebuild"`` it (only the directory's owner may) or ``"raise"``
            ``IndexMismatchError`` (a collection on a server other processes share).
        retry_s: the first delay before a failed catch-up is retried; doubled up to a minute.
        windows: how long texts are split into windows (``DenseConfig``; its defaults when
            omitted). Changing them applies to texts written afterwards; ``reset()``
            re-embeds everything.

    Raises:
        IndexMismatchError: the collection holds another embedder's vectors and
            ``on_mismatch`` is ``"raise"``.
        StorageError: Chroma failed.
    """

    def __init__(
        self,
        store: EntryStore,
        embedder: Embedder,
        client: Any,
        collection: str | None = None,
        *,
        on_mismatch: OnMismatch = "raise",
        retry_s: float = 1.0,
        windows: DenseConfig | None = None,
    ) -> None:
        if on_mismatch not in ("rebuild", "raise"):
            raise InvalidInputError(
                f"on_mismatch must be 'rebuild' or 'raise', got {preview(on_mismatch)}"
            )
        if isinstance(retry_s, bool) or not isinstance(retry_s, (int, float)) or retry_s <= 0:
            raise InvalidInputError(f"retry_s must be a number > 0, got {preview(retry_s)}")
        if collection is not None and not isinstance(collection, str):
            raise InvalidInputError(f"collection must be a name, got {preview(collection)}")
        if windows is not None and not isinstance(windows, DenseConfig):
            raise InvalidInputError(f"windows must be a DenseConfig, got {preview(windows)}")
        self.windows = windows or DenseConfig()
        self.store, self.embedder, self.client = store, embedder, client
        self.name = collection or f"gliding-{uuid.uuid4().hex[:12]}"
        self.watermark_name = WATERMARK_PREFIX + self.name
        self.retry_s = retry_s
        self._guard = threading.Lock()  # one catch-up (or rebuild) at a time
        self._wanted = False  # a catch-up was asked for while another ran
        self._timer: threading.Timer | None = None
        self._delay = retry_s
        self._closed = False
        self._writer = threading.local()  # .deferring: this thread's commits catch up later
        self._background: threading.Thread | None = None
        self._background_lock = threading.Lock()
        # The window vectors of recently written or read entries, for the re-rank's exact
        # cosines: kept coherent by the one path every change takes (upsert, drop).
        self._cache: OrderedDict[str, npt.NDArray[np.float32]] = OrderedDict()
        self._cache_lock = threading.Lock()
        self._applied = self._persisted = store.watermark(self.watermark_name)
        self._persisted_at = time.monotonic()
        with translated("chroma", "reading Chroma's maximum batch size"):
            self.max_batch = max(1, int(client.get_max_batch_size()))
        self.collection, created = self._open(on_mismatch)
        # A new (or emptied) collection is filled from all of L0 by the first catch-up: until
        # then nothing counts as applied, whatever the watermark says.
        self._rebuild_pending = created
        if created:
            self._applied = 0
        self._unsubscribe = store.subscribe(self._on_commit)
        self.refresh(wait=True)

    # -- the collection ------------------------------------------------------------------------

    @property
    def embedder_label(self) -> str:
        """The embedder's name as the collection's metadata records it."""
        return embedder_name(self.embedder)

    def _metadata(self) -> dict[str, Any]:
        dimension = getattr(self.embedder, "dimension", None)
        known = {DIMENSION_KEY: dimension} if isinstance(dimension, int) else {}
        return {**_HNSW, EMBEDDER_KEY: self.embedder_label, **known}

    def _open(self, on_mismatch: OnMismatch) -> tuple[Any, bool]:
        """Open or create the collection; return it and whether it must be filled from L0.

        An empty collection beside a store with entries is filled whatever the watermark says:
        its files were lost or replaced, or it was just made.
        """
        with translated("chroma", f"opening the Chroma collection {self.name!r}"):
            collection = self.client.get_or_create_collection(
                name=self.name, metadata=self._metadata(), embedding_function=None
            )
            problem = self._mismatch(collection.metadata or {})
            if problem is None:
                return collection, collection.count() == 0 and self.store.count() > 0
        if on_mismatch == "raise":
            raise IndexMismatchError(
                f"the Chroma collection {self.name!r} {problem}; open it with that embedder, "
                "or delete the collection (its owner rebuilds it from L0)"
            )
        logger.warning("the Chroma collection %r %s: rebuilding it from L0", self.name, problem)
        return self._recreate(), True

    def _recreate(self) -> Any:
        with translated("chroma", f"recreating the Chroma collection {self.name!r}"):
            self.client.delete_collection(self.name)
            return self.client.create_collection(
                name=self.name, metadata=self._metadata(), embedding_function=None
            )

    def _mismatch(self, metadata: dict[str, Any]) -> str | None:
        """Say how the collection's recorded embedder differs from ours, or ``None``."""
        recorded = metadata.get(EMBEDDER_KEY)
        if recorded is None:
            return "records no embedder (made by an older version)"
        if recorded != self.embedder_label:
            return f"was built by the embedder {recorded!r}, not {self.embedder_label!r}"
        ours, theirs = self._metadata().get(DIMENSION_KEY), metadata.get(DIMENSION_KEY)
        if ours is not None and theirs is not None and ours != theirs:
            return f"holds vectors of dimension {theirs}, not {ours}"
        return None

    def reset(self) -> int:
        """Drop the collection and re-embed all of L0; return the number of entries indexed."""
        self.collection = self._recreate()
        with self._cache_lock:
            self._cache.clear()
        return self.rebuild()

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
        while self._wanted and not self._closed:
            if not self._guard.acquire(blocking=wait):
                break  # the running catch-up sees ``_wanted`` and goes round again
            try:
                if self._closed:  # closed while this thread waited for the guard
                    break
                self._wanted = False
                failed = not self._catch_up_quietly()
            finally:
                self._guard.release()
            if failed:
                break
        return self.behind()

    def catch_up(self) -> int:
        """Apply every L0 change after the watermark, in chunks; return how many were read.

        Raises:
            StorageError: L0 or Chroma failed; the watermark stays where the last applied
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
        # A closing index stops between chunks: the watermark keeps what was applied.
        while not self._closed and (changes := self.store.changes_since(start, limit=chunk)):
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
        """Listener of L0 commits: the changes themselves are read back from the change log.

        A commit made inside ``deferred()`` leaves the work to ``refresh_later``."""
        del changes
        if not getattr(self._writer, "deferring", False):
            self.refresh()

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
        """Embed and store the texts of these entries (a long one in windows), in chunks
        Chroma accepts; windows an entry had beyond its new text's are dropped."""
        pieces: list[tuple[str, str]] = []
        counts: dict[str, int] = {}
        for iri, text in items:
            windows = text_windows(text, self.windows)
            counts[iri] = len(windows)
            pieces += zip(window_ids(iri, len(windows)), windows, strict=True)
        self._drop_windows(counts)
        rows: dict[str, list[Vector]] = {}
        for part in _chunks(pieces, self.max_batch):
            vectors = np.asarray(
                self.embedder.embed_documents([text for _, text in part]), dtype=np.float32
            )
            with translated("chroma", f"writing {len(part)} vectors to {self.name!r}"):
                self.collection.upsert(ids=[key for key, _ in part], embeddings=vectors)
            for (key, _), vector in zip(part, vectors, strict=True):
                rows.setdefault(entry_of(key), []).append(vector)
        self._remember({iri: np.stack(found) for iri, found in rows.items()})

    def _remember(self, matrices: dict[str, npt.NDArray[np.float32]]) -> None:
        """Keep these entries' window vectors (unit rows) in the bounded in-process cache."""
        with self._cache_lock:
            for iri, matrix in matrices.items():
                norms = np.linalg.norm(matrix, axis=1, keepdims=True)
                self._cache[iri] = (matrix / np.where(norms == 0, 1.0, norms)).astype(np.float32)
                self._cache.move_to_end(iri)
            while len(self._cache) > VECTOR_CACHE_ENTRIES:
                self._cache.popitem(last=False)

    def _forget(self, iris: Sequence[str]) -> None:
        with self._cache_lock:
            for iri in iris:
                self._cache.pop(iri, None)

    def _matrices(self, iris: Sequence[str]) -> dict[str, npt.NDArray[np.float32]]:
        """Return each indexed entry's window vectors (unit rows), from the in-process cache
        or else read (from the embedding cache by their texts, or from Chroma)."""
        found: dict[str, npt.NDArray[np.float32]] = {}
        with self._cache_lock:
            for iri in iris:
                matrix = self._cache.get(iri)
                if matrix is not None:
                    found[iri] = matrix
        missing = [iri for iri in iris if iri not in found]
        if missing:
            read = self._read_matrices(missing)
            self._remember(read)
            found.update(read)
        return found

    def _read_matrices(self, iris: list[str]) -> dict[str, npt.NDArray[np.float32]]:
        rows: dict[str, list[Vector]] = {}
        if isinstance(self.embedder, CachedEmbedder):
            pieces = [
                (iri, window)
                for iri, content in self.store.contents(iris).items()
                if (body := node_text(json.loads(content)))
                for window in text_windows(body, self.windows)
            ]
            if pieces:
                matrix = self.embedder.matrix([window for _, window in pieces])
                for (iri, _), row in zip(pieces, matrix, strict=True):
                    rows.setdefault(iri, []).append(row)
        else:
            with translated("chroma", f"reading vectors from the dense index {self.name!r}"):
                got = self.collection.get(ids=self._with_windows(iris), include=["embeddings"])
            for key, row in zip(got["ids"], got["embeddings"], strict=True):
                rows.setdefault(entry_of(key), []).append(np.asarray(row, dtype=np.float32))
        return {iri: np.stack(found) for iri, found in rows.items()}

    def _drop_windows(self, counts: dict[str, int]) -> None:
        """Delete each entry's vectors from window ``counts[iri]`` on (0: all of them).

        Only entries that have a second window can have windows to drop: one read by id
        finds them, so a batch of short texts costs no deletes.
        """
        gone = [iri for iri, count in counts.items() if count == 0]
        self._forget(gone)
        windowed = self._windowed(list(counts))
        for iri in windowed:
            # Up to the most any setting allows: windows left by a larger max_windows go too.
            gone += window_ids(iri, MAX_WINDOWS)[max(counts[iri], 1) :]
        for part in _chunks(gone, self.max_batch):
            with translated("chroma", f"deleting from the dense index {self.name!r}"):
                self.collection.delete(ids=part)

    def _windowed(self, iris: Sequence[str]) -> list[str]:
        """Return those of ``iris`` whose text is held in more than one window."""
        found: list[str] = []
        for part in _chunks([window_ids(iri, 2)[1] for iri in iris], self.max_batch):
            with translated("chroma", f"reading the windows of {self.name!r}"):
                found += self.collection.get(ids=part, include=[])["ids"]
        return [entry_of(key) for key in found]

    def _with_windows(self, iris: Sequence[str]) -> list[str]:
        """Return the vector ids of these entries: each IRI, and its windows when it has any."""
        ceiling = self.windows.max_windows
        extra = [key for iri in self._windowed(iris) for key in window_ids(iri, ceiling)[1:]]
        return [*iris, *extra]

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
        with translated("chroma", f"reading the ids of {self.name!r}"):
            stale = [iri for iri in dict.fromkeys(map(entry_of, self._ids())) if iri not in seen]
        self._apply([(iri, None) for iri in stale])
        self._applied = max(self._applied, sequence)
        self._rebuild_pending = False
        self._persist(force=True)
        return len(seen)

    def _ids(self) -> Iterator[str]:
        offset = 0
        while True:
            ids = self.collection.get(include=[], limit=self.max_batch, offset=offset)["ids"]
            yield from ids
            if len(ids) < self.max_batch:
                return
            offset += len(ids)

    # -- reading -------------------------------------------------------------------------------

    def count(self) -> int:
        """Return the number of indexed entries (a windowed entry counts once).

        It reads every vector id when some entries are windowed: a check, not a hot path.
        """
        with translated("chroma", f"counting the dense index {self.name!r}"):
            return sum(1 for key in self._ids() if WINDOW_SEPARATOR not in key)

    def vector(self, text: str | Vector) -> Vector:
        """Return the query vector of ``text`` (a vector passes through unchanged)."""
        return as_vector(self.embedder.embed_query(text)) if isinstance(text, str) else text

    def query(
        self, text: str | Vector, n: int, *, allowed: Sequence[str] | None = None
    ) -> list[tuple[str, float]]:
        """Return up to ``n`` ``(iri, cosine)`` pairs nearest to ``text``, best first.

        With ``allowed``, only those IRIs are considered: scored exactly when few, otherwise
        through Chroma's index restricted to them.
        """
        vector = self.vector(text)
        if allowed is not None and not allowed:
            return []
        if allowed is not None and len(allowed) <= _EXACT_LIMIT:
            return self._exact(vector, list(allowed), n)
        keys = self._with_windows(list(allowed)) if allowed is not None else None
        fetch = max(1, n)
        while True:  # windows of one entry take several places: ask until n entries are found
            with translated("chroma", f"querying the dense index {self.name!r}"):
                result = self.collection.query(
                    query_embeddings=[vector], n_results=fetch, ids=keys, include=["distances"]
                )
            ids, distances = result["ids"][0], result["distances"][0]
            best = best_per_entry(
                (key, 1.0 - float(d)) for key, d in zip(ids, distances, strict=True)
            )
            if len(best) >= n or len(ids) < fetch:
                return list(best.items())[:n]
            fetch *= 2

    def similarities(self, text: str | Vector, iris: Sequence[str]) -> dict[str, float]:
        """Return the exact cosine of ``text`` with each indexed entry among ``iris`` (the
        best of a windowed entry's windows).

        The vectors come from an in-process cache of recent entries, else from the embedding
        cache (the entries' texts read from L0), several times faster than from Chroma.
        """
        if not iris:
            return {}
        vector = self.vector(text)
        unit = vector / (float(np.linalg.norm(vector)) or 1.0)
        return {iri: float(np.max(m @ unit)) for iri, m in self._matrices(list(iris)).items()}

    def vectors(self, iris: Sequence[str]) -> dict[str, Vector]:
        """Return the unit vector of each indexed entry among ``iris`` (a windowed entry's is
        the normalised mean of its windows')."""
        out: dict[str, Vector] = {}
        for iri, matrix in self._matrices(list(iris)).items():
            if len(matrix) == 1:  # its rows are unit vectors already
                out[iri] = matrix[0]
            else:
                total = matrix.mean(axis=0)
                out[iri] = total / (float(np.linalg.norm(total)) or 1.0)
        return out

    def _exact(self, vector: np.ndarray, allowed: list[str], n: int) -> list[tuple[str, float]]:
        keys = self._with_windows(allowed)
        with translated("chroma", f"reading vectors from the dense index {self.name!r}"):
            found = self.collection.get(ids=keys, include=["embeddings"])
        if not found["ids"]:
            return []
        matrix = np.asarray(found["embeddings"], dtype=np.float32)
        norms = np.linalg.norm(matrix, axis=1) * (float(np.linalg.norm(vector)) or 1.0)
        scores = matrix @ vector / np.where(norms == 0, 1.0, norms)
        order = np.argsort(-scores)
        best = best_per_entry((found["ids"][i], float(scores[i])) for i in order)
        return list(best.items())[:n]

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

    def __repr__(self) -> str:
        return f"DenseIndex({self.name!r}, embedder={preview(self.embedder_label)})"


def _chunks(items: list[Any], size: int) -> Iterator[list[Any]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]
