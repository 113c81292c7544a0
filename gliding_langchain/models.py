"""LangChain models as the memory's models: any ``Embeddings`` as its embedder, any chat model as
its summarizer, so users keep the models they already configured.

Invariants: the embedder returns one vector per text, in order, or raises ``EmbedderError``;
the summarizer is a converter for ``gliding_core.ModelSummarizer``, which owns the limit and the
failure policy (a failing or empty model answer falls back to the extractive summary, logged).
"""

from __future__ import annotations

from collections.abc import Sequence

from langchain_core.embeddings import Embeddings
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import HumanMessage
from langchain_core.runnables import RunnableConfig

from gliding_core import EmbedderError, InvalidInputError, TokenCounter
from gliding_core.summarize import ModelSummarizer, Summarizer

_ISOLATED: RunnableConfig = {"callbacks": [], "tags": ["nostream", "gliding-summary"]}


class LangChainEmbedder:
    """A LangChain ``Embeddings`` as the memory's embedder.

    Args:
        embeddings: the LangChain embedding model.
        name: the name recorded in the memory's manifest (a change re-embeds the index);
            the model's class name by default.

    Example:
        >>> memory = Memory(embedder=LangChainEmbedder(OpenAIEmbeddings()))  # doctest: +SKIP
    """

    def __init__(self, embeddings: Embeddings, *, name: str | None = None) -> None:
        if not isinstance(embeddings, Embeddings):
            raise InvalidInputError(f"expected LangChain Embeddings, got {embeddings!r:.80}")
        self.embeddings = embeddings
        self.name = name or f"langchain:{type(embeddings).__name__}"

    def embed_documents(self, texts: Sequence[str]) -> list[list[float]]:
        """Embed ``texts`` in one call of the model."""
        items = _check_texts(texts)
        try:
            vectors = self.embeddings.embed_documents(items)
        except Exception as error:
            raise EmbedderError(
                f"{self.name} failed to embed {len(items)} texts: {error}"
            ) from error
        if len(vectors) != len(items):
            raise EmbedderError(f"{self.name} returned {len(vectors)} vectors for {len(items)}")
        return [list(map(float, v)) for v in vectors]

    def embed_query(self, text: str) -> list[float]:
        """Embed one query."""
        (item,) = _check_texts([text])
        try:
            return list(map(float, self.embeddings.embed_query(item)))
        except Exception as error:
            raise EmbedderError(f"{self.name} failed to embed a query: {error}") from error


class LangChainSummarizer(ModelSummarizer):
    """A LangChain chat model as the memory's summarizer (L1 turn summaries).

    Args:
        model: the chat model.
        tokens: the counter that enforces the limit; ``memory.tokens``.
        fallback: writes the summary when the model fails; extractive by default.
    """

    def __init__(
        self, model: BaseChatModel, tokens: TokenCounter, *, fallback: Summarizer | None = None
    ) -> None:
        if not isinstance(model, BaseChatModel):
            raise InvalidInputError(f"expected a LangChain chat model, got {model!r:.80}")
        self.model = model
        super().__init__(self._complete, tokens, name=type(model).__name__, fallback=fallback)

    def _complete(self, prompt: str) -> str:
        # Its own run: no callbacks or streaming of the agent run it may be called from.
        return self.model.invoke([HumanMessage(content=prompt)], config=_ISOLATED).text


def _check_texts(texts: object) -> list[str]:
    if isinstance(texts, str) or not isinstance(texts, Sequence):
        raise InvalidInputError(f"texts must be a list of strings, got {texts!r:.80}")
    items = list(texts)
    for text in items:
        if not isinstance(text, str):
            raise InvalidInputError(f"texts must be strings, got {text!r:.80}")
    return items
