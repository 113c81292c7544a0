"""Adapter: embedding models both ways between LlamaIndex and gliding-horse.

``LlamaIndexEmbedder`` lets the memory embed with any LlamaIndex ``BaseEmbedding`` (it
satisfies ``gliding_core.Embedder``); ``GlidingEmbedding`` lets LlamaIndex components (a
``VectorStoreIndex``, a benchmark's retriever) embed with exactly the memory's embedder.

Invariants: one text in, one vector out, in order; a backend failure of the LlamaIndex model
surfaces as ``EmbedderError`` (``raise ... from``); bad input as ``InvalidInputError`` naming it.
"""

from __future__ import annotations

from typing import Any

from llama_index.core.base.embeddings.base import BaseEmbedding
from llama_index.core.bridge.pydantic import PrivateAttr

from gliding_core.errors import EmbedderError, GlidingError, InvalidInputError
from gliding_core.hyperspace.embedders import Embedder, embedder_name
from gliding_core.jsonld import preview


class LlamaIndexEmbedder:
    """A gliding ``Embedder`` backed by a LlamaIndex ``BaseEmbedding``.

    Args:
        model: the LlamaIndex embedding model.

    Example:
        >>> memory = Memory(embedder=LlamaIndexEmbedder(OpenAIEmbedding()))  # doctest: +SKIP
    """

    def __init__(self, model: BaseEmbedding) -> None:
        if not isinstance(model, BaseEmbedding):
            raise InvalidInputError(
                f"model must be a llama_index BaseEmbedding, got {preview(model)}"
            )
        self.model = model
        # The name keys the memory's embedding cache: the class and the model both count.
        self.name = f"llamaindex:{model.class_name()}:{model.model_name}"

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        """Return one vector per text (LlamaIndex batches them by ``embed_batch_size``)."""
        if isinstance(texts, str) or not isinstance(texts, (list, tuple)):
            raise InvalidInputError(f"texts must be a list of strings, got {preview(texts)}")
        for text in texts:
            _check_text(text)
        if not texts:
            return []
        vectors = self._call(self.model.get_text_embedding_batch, list(texts))
        if len(vectors) != len(texts):
            raise EmbedderError(f"{self.name} returned {len(vectors)} vectors for {len(texts)}")
        return [list(map(float, vector)) for vector in vectors]

    def embed_query(self, text: str) -> list[float]:
        """Return the vector of a search query (the model's query embedding)."""
        return list(map(float, self._call(self.model.get_query_embedding, _check_text(text))))

    def _call(self, method: Any, value: Any) -> Any:
        try:
            return method(value)
        except GlidingError:
            raise
        except Exception as exc:  # any provider error: HTTP, auth, rate limit, bad response
            raise EmbedderError(f"{self.name} failed: {type(exc).__name__}: {exc}") from exc


class GlidingEmbedding(BaseEmbedding):
    """A LlamaIndex ``BaseEmbedding`` backed by a gliding ``Embedder`` (``memory.embedder``).

    Args:
        embedder: the gliding embedder; pass ``memory.embedder`` to share the memory's cache.
        **kwargs: ``BaseEmbedding`` fields (``embed_batch_size`` ...); ``model_name`` defaults
            to the embedder's name.
    """

    _embedder: Embedder = PrivateAttr()

    def __init__(self, embedder: Embedder, **kwargs: Any) -> None:
        if not isinstance(embedder, Embedder):
            raise InvalidInputError(
                f"embedder must have embed_documents and embed_query, got {preview(embedder)}"
            )
        kwargs.setdefault("model_name", embedder_name(embedder))
        super().__init__(**kwargs)
        self._embedder = embedder

    @classmethod
    def class_name(cls) -> str:
        """The LlamaIndex component name."""
        return "GlidingEmbedding"

    def _get_query_embedding(self, query: str) -> list[float]:
        return self._embedder.embed_query(query)

    def _get_text_embedding(self, text: str) -> list[float]:
        return self._embedder.embed_documents([text])[0]

    def _get_text_embeddings(self, texts: list[str]) -> list[list[float]]:
        return self._embedder.embed_documents(texts)

    # The gliding embedders are synchronous; LlamaIndex requires the async query method.
    async def _aget_query_embedding(self, query: str) -> list[float]:
        return self._get_query_embedding(query)


def _check_text(text: object) -> str:
    if not isinstance(text, str):
        raise InvalidInputError(f"text to embed must be a str, got {preview(text)}")
    return text
