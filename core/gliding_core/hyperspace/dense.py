"""Hyperspace: the dense index (``VectorIndex``) over L0 entries' text, in a Chroma collection.

How it follows L0 (the change log, the watermark, retries) is ``following.FollowingIndex``'s;
this module keeps the vectors in Chroma, embedded in the process or on a Chroma server.

Invariants:
- The collection's metadata names the embedder and its dimension; opening it with another
  embedder rebuilds it (when this process owns it) or raises ``IndexMismatchError``, never a
  backend error.
- Writes to Chroma are chunked by the client's maximum batch size.
- A long text's windows (``following``) are records of their own, ``"<iri> #<i>"``.
- Vectors are computed by the memory's embedder, never by Chroma, so no model is ever
  downloaded. Telemetry is off. Chroma's exceptions leave this module as ``GlidingError``s.
"""

from __future__ import annotations

import logging
import os
import shutil
import sqlite3
import struct
import uuid
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path
from typing import Any, Literal

import numpy as np

from gliding_core.boundary import translated
from gliding_core.config import DenseConfig
from gliding_core.errors import IndexMismatchError, InvalidInputError
from gliding_core.hyperspace.embedders import Embedder
from gliding_core.hyperspace.following import FollowingIndex, Matrix, best, chunks, cosines
from gliding_core.hyperspace.vectors import Vector
from gliding_core.hyperspace.windows import WINDOW_SEPARATOR
from gliding_core.jsonld import preview
from gliding_core.store.protocol import EntryStore

logger = logging.getLogger(__name__)

CHROMA_SQLITE = "chroma.sqlite3"  # an embedded persistent client's catalogue and write log
EMBEDDER_KEY, DIMENSION_KEY = "gliding:embedder", "gliding:dimension"
# A wider construction beam than Chroma's default (100); the search beam is ``DenseConfig``'s.
_HNSW = {"hnsw:space": "cosine", "hnsw:construction_ef": 128}

# The header of an embedded collection's HNSW files (``header.bin``), as Chroma's index writes
# it, little-endian: version, level-0 offset, capacity, element count, bytes an element, label
# offset, data offset, top level, entry point, M (upper levels), M (level 0), M, level
# multiplier, construction beam.
_HNSW_HEADER = struct.Struct("<i6QiI3QdQ")
_HNSW_VERSION = 1
_ZEROED = 1 << 20  # bytes zeroed a write

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


class DenseIndex(FollowingIndex):
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
            omitted).
        files: the directory of an embedded persistent client, which ``scrub`` cleans; ``None``
            for a client in memory or on a server (the server keeps its own files).

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
        files: Path | None = None,
    ) -> None:
        if on_mismatch not in ("rebuild", "raise"):
            raise InvalidInputError(
                f"on_mismatch must be 'rebuild' or 'raise', got {preview(on_mismatch)}"
            )
        if collection is not None and not isinstance(collection, str):
            raise InvalidInputError(f"collection must be a name, got {preview(collection)}")
        super().__init__(
            store,
            embedder,
            collection or f"gliding-{uuid.uuid4().hex[:12]}",
            retry_s=retry_s,
            windows=windows,
        )
        self.client = client
        self.files = files
        with translated("chroma", "reading Chroma's maximum batch size"):
            self.max_batch = max(1, int(client.get_max_batch_size()))
        self.collection, created = self._open(on_mismatch)
        self._start(fill=created)

    # -- the collection ------------------------------------------------------------------------

    def _metadata(self) -> dict[str, Any]:
        dimension = getattr(self.embedder, "dimension", None)
        known = {DIMENSION_KEY: dimension} if isinstance(dimension, int) else {}
        beam = {"hnsw:search_ef": self.windows.search_ef}
        return {**_HNSW, **beam, EMBEDDER_KEY: self.embedder_label, **known}

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
                self._widen(collection)
                return collection, collection.count() == 0 and self.store.count() > 0
        if on_mismatch == "raise":
            raise IndexMismatchError(
                f"the Chroma collection {self.name!r} {problem}; open it with that embedder, "
                "or delete the collection (its owner rebuilds it from L0)"
            )
        logger.warning("the Chroma collection %r %s: rebuilding it from L0", self.name, problem)
        return self._recreate(), True

    def _widen(self, collection: Any) -> None:
        """Give a collection made earlier this index's search beam (``DenseConfig.search_ef``);
        the rest of its HNSW settings are fixed when it is made."""
        wanted = self.windows.search_ef
        configuration = getattr(collection, "configuration_json", None) or {}
        hnsw = configuration.get("hnsw") or {}
        if hnsw.get("ef_search") != wanted:
            collection.modify(configuration={"hnsw": {"ef_search": wanted}})

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
        """Drop the collection and re-embed all of L0; return the number of entries indexed.
        Searches meanwhile wait for it."""
        with self._guard, self._refilling():
            self.collection = self._recreate()
            self._forget()
            return self._rebuild(512)

    # -- the backend's operations --------------------------------------------------------------

    def _write(self, keys: list[str], vectors: Matrix) -> None:
        with translated("chroma", f"writing {len(keys)} vectors to {self.name!r}"):
            self.collection.upsert(ids=keys, embeddings=vectors)

    def _remove(self, keys: list[str]) -> None:
        with translated("chroma", f"deleting from the dense index {self.name!r}"):
            self.collection.delete(ids=keys)

    def _present(self, keys: list[str]) -> list[str]:
        with translated("chroma", f"reading ids of the dense index {self.name!r}"):
            return list(self.collection.get(ids=keys, include=[])["ids"])

    def _fetch(self, keys: list[str]) -> list[tuple[str, Vector]]:
        with translated("chroma", f"reading vectors from the dense index {self.name!r}"):
            found = self.collection.get(ids=keys, include=["embeddings"])
        return [
            (key, np.asarray(row, dtype=np.float32))
            for key, row in zip(found["ids"], found["embeddings"], strict=True)
        ]

    def scrub(self) -> None:
        """Leave nothing of removed entries in Chroma's storage; rebuild the collection.

        Chroma keeps a deleted record's vector and id in its write log (a table of its SQLite
        file) until a segment is persisted, and a dropped collection's HNSW files on disk. So
        the collection is dropped and refilled from L0 (vectors from the embedding cache),
        the segment folders it left are removed, and its SQLite file is rewritten with freed
        pages zeroed. The new collection's HNSW files are written at its creation from memory
        the allocator did not clear, as large as its capacity: the capacity beyond its
        elements is zeroed in them (``_zero_spare``), since that memory may have held the
        removed text. An index without files of its own (Chroma in memory, or a server, whose
        storage is the server's and whose collection other processes may hold open) has
        nothing to rewrite: ``remove`` was all.
        """
        if self.files is None:
            return
        before = _segment_folders(self.files)
        # Searches and writes of this index wait for the refill and for the rewrite of
        # Chroma's file: that is another SQLite library's connection, whose locks Chroma's
        # own does not see in this process (a search meeting it found the file "malformed").
        with self._guard, self._refilling():
            self.collection = self._recreate()
            self._rebuild(512)
            live = self._segment_ids()
            for folder in _segment_folders(self.files) - _segment_folders(self.files, live=live):
                _zero_spare(folder)
            for folder in before & _segment_folders(self.files, live=live):
                shutil.rmtree(folder, ignore_errors=True)
            _vacuum(self.files / CHROMA_SQLITE)

    def _segment_ids(self) -> set[str]:
        """The ids of this collection's segments, from Chroma's catalogue (best effort)."""
        if self.files is None:
            return set()
        try:
            with closing(sqlite3.connect(self.files / CHROMA_SQLITE)) as conn:
                rows = conn.execute(
                    "SELECT s.id FROM segments AS s JOIN collections AS c ON c.id = s.collection"
                ).fetchall()
        except sqlite3.Error:
            return set()
        return {str(row[0]) for row in rows}

    def _ids(self) -> Iterator[str]:
        offset = 0
        while True:
            with translated("chroma", f"reading the ids of the dense index {self.name!r}"):
                ids = self.collection.get(include=[], limit=self.max_batch, offset=offset)["ids"]
            yield from ids
            if len(ids) < self.max_batch:
                return
            offset += len(ids)

    def count(self) -> int:
        """Return the number of indexed entries (a windowed entry counts once).

        It reads every vector id: a check, not a hot path.
        """
        return sum(1 for key in self._ids() if WINDOW_SEPARATOR not in key)

    def _nearest(self, vector: Vector, n: int, keys: list[str] | None) -> list[tuple[str, float]]:
        with translated("chroma", f"querying the dense index {self.name!r}"):
            result = self.collection.query(
                query_embeddings=[vector], n_results=n, ids=keys, include=["distances"]
            )
        ids, distances = result["ids"][0], result["distances"][0]
        return [(key, 1.0 - float(d)) for key, d in zip(ids, distances, strict=True)]

    def _exact(self, vector: Vector, keys: list[str], n: int) -> list[tuple[str, float]]:
        found = [pair for part in chunks(keys, self.max_batch) for pair in self._fetch(part)]
        if not found:
            return []
        ids = [key for key, _ in found]
        return best(ids, cosines(np.stack([row for _, row in found]), vector), n)

    def __repr__(self) -> str:
        return f"DenseIndex({self.name!r}, embedder={preview(self.embedder_label)})"


def _segment_folders(files: Path | None, *, live: set[str] | None = None) -> set[Path]:
    """The segment folders (named by UUID) under ``files``, less those of ``live`` segments."""
    if files is None or not files.is_dir():
        return set()
    found = set()
    for folder in files.iterdir():
        try:
            uuid.UUID(folder.name)
        except ValueError:
            continue
        if folder.is_dir() and folder.name not in (live or set()):
            found.add(folder)
    return found


def _zero_spare(folder: Path) -> None:
    """Zero the bytes an HNSW segment's files hold beyond its elements (up to its capacity).

    Chroma's index writes its level-0 data and lengths for its whole capacity when it creates
    its files, from memory ``malloc`` gave it uncleared; only an element's own bytes are set
    before they are written (Chroma 1.5, its index's ``initPersistentIndex``). So the spare
    capacity holds whatever the process's heap held there: texts it read, a forgotten user's
    among them. The header gives the capacity and the elements written; elements added later
    are written over their own bytes. A header of another layout is left alone, logged.
    """
    try:
        raw = (folder / "header.bin").read_bytes()
    except OSError:
        return  # no index files (an empty collection)
    fields = _HNSW_HEADER.unpack(raw) if len(raw) == _HNSW_HEADER.size else None
    if fields is None or fields[0] != _HNSW_VERSION or not 0 <= fields[3] <= fields[2]:
        logger.warning("an HNSW header of unknown layout in %s: its spare bytes kept", folder)
        return
    capacity, count, width = fields[2], fields[3], fields[4]
    for name, size in (("data_level0.bin", width), ("length.bin", 4)):
        with (
            translated("chroma", f"zeroing the spare capacity of {str(folder / name)!r}"),
            (folder / name).open("r+b") as file,
        ):
            end = min(file.seek(0, os.SEEK_END), capacity * size)
            file.seek(count * size)
            zeros = bytes(min(_ZEROED, max(end - count * size, 0)))
            for start in range(count * size, end, _ZEROED):
                file.write(zeros[: end - start])
            file.flush()
            os.fsync(file.fileno())


def _vacuum(path: Path) -> None:
    """Rewrite a SQLite file with its freed pages zeroed, and truncate its log."""
    if not path.is_file():
        return
    with (
        translated("sqlite", f"scrubbing {str(path)!r}"),
        closing(sqlite3.connect(path, isolation_level=None, timeout=30.0)) as conn,
    ):
        conn.execute("PRAGMA secure_delete = ON")
        conn.execute("VACUUM")
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
