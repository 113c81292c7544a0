"""Hyperspace: the dense index, L0 entries' text embeddings in a Chroma collection.

Invariants: L0 is the source of truth; the index follows L0's committed changes (written text is
embedded and upserted in one batch per write, deleted entries are removed) and ``rebuild()``
makes it equal to L0 again. Vectors are computed by the memory's embedder, never by Chroma, so
no model is ever downloaded. Telemetry is off.
"""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from gliding_core.errors import StorageError
from gliding_core.hyperspace.backends import CachedEmbedder
from gliding_core.hyperspace.embedders import Embedder
from gliding_core.hyperspace.vectors import Vector, as_vector
from gliding_core.jsonld import node_text
from gliding_core.store import Change, L0Store

logger = logging.getLogger(__name__)

_EXACT_LIMIT = 2_000  # below this many allowed entries, score them exactly instead of ANN


def chroma_client(
    directory: Path | None = None, *, host: str | None = None, port: int = 8000
) -> Any:
    """Return a Chroma client: HTTP when ``host`` is set, persistent under ``directory``, or
    ephemeral (in memory)."""
    import chromadb
    from chromadb.config import Settings

    settings = Settings(anonymized_telemetry=False, allow_reset=False)
    if host is not None:
        return chromadb.HttpClient(host=host, port=port, settings=settings)
    if directory is not None:
        return chromadb.PersistentClient(path=str(directory), settings=settings)
    return chromadb.EphemeralClient(settings=settings)


def close_client(client: Any) -> None:
    """Close a Chroma client, and the HTTP connection pool an HTTP client keeps.

    chromadb's ``close()`` stops its system but leaves the HTTP client's connection pool open
    until garbage collection; closing it here releases the sockets at once.
    """
    session = getattr(getattr(client, "_server", None), "_session", None)
    client.close()
    if session is not None and callable(getattr(session, "close", None)):
        session.close()


class DenseIndex:
    """Cosine nearest neighbours over the text of L0 entries, kept in a Chroma collection.

    Args:
        store: the L0 store to follow.
        embedder: computes the vectors.
        client: a Chroma client (see ``chroma_client``).
        collection: the collection name; a fresh unique one when omitted (ephemeral clients in
            one process share their collections).
    """

    def __init__(
        self, store: L0Store, embedder: Embedder, client: Any, collection: str | None = None
    ) -> None:
        self.store, self.embedder, self.client = store, embedder, client
        self.name = collection or f"gliding-{uuid.uuid4().hex[:12]}"
        self.collection = self._open()
        self._unsubscribe = store.subscribe(self.apply)

    def _open(self) -> Any:
        try:
            return self.client.get_or_create_collection(
                name=self.name,
                # A wider search beam than Chroma's default: recall over speed at these sizes.
                metadata={
                    "hnsw:space": "cosine",
                    "hnsw:search_ef": 128,
                    "hnsw:construction_ef": 128,
                },
                embedding_function=None,
            )
        except Exception as exc:
            raise StorageError(f"cannot open the Chroma collection {self.name!r}: {exc}") from exc

    def reset(self) -> int:
        """Drop the collection and re-embed all of L0 (after a change of embedder)."""
        self.client.delete_collection(self.name)
        self.collection = self._open()
        return self.rebuild()

    def apply(self, changes: list[Change]) -> None:
        """Bring the index in line with committed L0 changes (one embedding batch)."""
        latest: dict[str, str | None] = {}
        for iri, text in changes:
            latest[iri] = text
        written = [(iri, text) for iri, text in latest.items() if text]
        removed = [iri for iri, text in latest.items() if not text]
        if written:
            self.upsert(written)
        if removed:
            self.collection.delete(ids=removed)

    def upsert(self, items: Sequence[tuple[str, str]]) -> None:
        """Embed and store the texts of these entries."""
        vectors = self.embedder.embed_documents([text for _, text in items])
        self.collection.upsert(
            ids=[iri for iri, _ in items], embeddings=np.asarray(vectors, dtype=np.float32)
        )

    def rebuild(self, batch: int = 512) -> int:
        """Re-embed every L0 entry with text and drop what L0 no longer holds; return the count."""
        seen: set[str] = set()
        for items in self.store.scan_texts(batch):
            if items:
                self.upsert(items)
                seen.update(iri for iri, _ in items)
        stale = [iri for iri in self.collection.get(include=[])["ids"] if iri not in seen]
        if stale:
            self.collection.delete(ids=stale)
        return len(seen)

    def count(self) -> int:
        """Return the number of indexed entries."""
        return int(self.collection.count())

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
        result = self.collection.query(
            query_embeddings=[vector],
            n_results=max(1, n),
            ids=list(allowed) if allowed is not None else None,
            include=["distances"],
        )
        ids, distances = result["ids"][0], result["distances"][0]
        return [(iri, 1.0 - float(d)) for iri, d in zip(ids, distances, strict=True)]

    def similarities(self, text: str | Vector, iris: Sequence[str]) -> dict[str, float]:
        """Return the exact cosine of ``text`` with each indexed entry among ``iris``.

        With a caching embedder the vectors come from its cache (the entries' texts are read
        from L0), which is several times faster than fetching them from Chroma.
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
        matrix = self.embedder.matrix([body for _, body in found])
        norms = np.linalg.norm(matrix, axis=1) * (float(np.linalg.norm(vector)) or 1.0)
        scores = matrix @ vector / np.where(norms == 0, 1.0, norms)
        return {iri: float(score) for (iri, _), score in zip(found, scores, strict=True)}

    def _exact(self, vector: np.ndarray, allowed: list[str], n: int) -> list[tuple[str, float]]:
        found = self.collection.get(ids=allowed, include=["embeddings"])
        if not found["ids"]:
            return []
        matrix = np.asarray(found["embeddings"], dtype=np.float32)
        norms = np.linalg.norm(matrix, axis=1) * (float(np.linalg.norm(vector)) or 1.0)
        scores = matrix @ vector / np.where(norms == 0, 1.0, norms)
        order = np.argsort(-scores)[:n]
        return [(found["ids"][i], float(scores[i])) for i in order]

    def close(self) -> None:
        """Stop following the store."""
        self._unsubscribe()
