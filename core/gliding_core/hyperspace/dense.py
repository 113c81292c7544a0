"""Hyperspace: the dense index (``VectorIndex``) over L0 entries' text, in a Chroma collection.

How it follows L0 (the change log, the watermark, retries) is ``following.FollowingIndex``'s;
this module keeps the vectors in Chroma, embedded in the process or on a Chroma server.

Invariants:
- The collection's metadata names the embedder and its dimension; opening it with another
  embedder rebuilds it (when this process owns it) or raises ``IndexMismatchError``, never a
  backend error.
- Writes to Chroma are chunked by the client's maximum batch size.
- Vectors are computed by the memory's embedder, never by Chroma, so no model is ever
  downloaded. Telemetry is off. Chroma's exceptions leave this module as ``GlidingError``s.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal

from gliding_core.boundary import translated
from gliding_core.errors import IndexMismatchError, InvalidInputError
from gliding_core.hyperspace.embedders import Embedder
from gliding_core.hyperspace.following import FollowingIndex, Matrix, best, cosines
from gliding_core.hyperspace.vectors import Vector
from gliding_core.jsonld import preview
from gliding_core.store.protocol import EntryStore

logger = logging.getLogger(__name__)

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
    ) -> None:
        if on_mismatch not in ("rebuild", "raise"):
            raise InvalidInputError(
                f"on_mismatch must be 'rebuild' or 'raise', got {preview(on_mismatch)}"
            )
        if collection is not None and not isinstance(collection, str):
            raise InvalidInputError(f"collection must be a name, got {preview(collection)}")
        super().__init__(
            store, embedder, collection or f"gliding-{uuid.uuid4().hex[:12]}", retry_s=retry_s
        )
        self.client = client
        with translated("chroma", "reading Chroma's maximum batch size"):
            self.max_batch = max(1, int(client.get_max_batch_size()))
        self.collection, created = self._open(on_mismatch)
        self._start(fill=created)

    # -- the collection ------------------------------------------------------------------------

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
        return self.rebuild()

    # -- the backend's operations --------------------------------------------------------------

    def _write(self, iris: list[str], vectors: Matrix) -> None:
        with translated("chroma", f"writing {len(iris)} vectors to {self.name!r}"):
            self.collection.upsert(ids=iris, embeddings=vectors)

    def _remove(self, iris: list[str]) -> None:
        with translated("chroma", f"deleting from the dense index {self.name!r}"):
            self.collection.delete(ids=iris)

    def _ids(self) -> Iterator[str]:
        offset = 0
        while True:
            with translated("chroma", f"reading the ids of {self.name!r}"):
                ids = self.collection.get(include=[], limit=self.max_batch, offset=offset)["ids"]
            yield from ids
            if len(ids) < self.max_batch:
                return
            offset += len(ids)

    def count(self) -> int:
        """Return the number of indexed entries."""
        with translated("chroma", f"counting the dense index {self.name!r}"):
            return int(self.collection.count())

    def _nearest(
        self, vector: Vector, n: int, allowed: list[str] | None
    ) -> list[tuple[str, float]]:
        with translated("chroma", f"querying the dense index {self.name!r}"):
            result = self.collection.query(
                query_embeddings=[vector], n_results=n, ids=allowed, include=["distances"]
            )
        ids, distances = result["ids"][0], result["distances"][0]
        return [(iri, 1.0 - float(d)) for iri, d in zip(ids, distances, strict=True)]

    def _exact(self, vector: Vector, allowed: list[str], n: int) -> list[tuple[str, float]]:
        with translated("chroma", f"reading vectors from the dense index {self.name!r}"):
            found = self.collection.get(ids=allowed, include=["embeddings"])
        if not found["ids"]:
            return []
        return best(found["ids"], cosines(found["embeddings"], vector), n)

    def __repr__(self) -> str:
        return f"DenseIndex({self.name!r}, embedder={preview(self.embedder_label)})"
