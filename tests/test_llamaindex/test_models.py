"""The model bridges: LlamaIndex embeddings and LLMs as the memory's models, and back."""

from __future__ import annotations

import logging
from typing import Any

import pytest
from llama_index.core.base.embeddings.base import BaseEmbedding
from llama_index.core.embeddings.mock_embed_model import MockEmbedding
from llama_index.core.llms.mock import MockLLM

from gliding_core import (
    Embedder,
    EmbedderError,
    HashEmbedder,
    InvalidInputError,
    Memory,
    Summarizer,
    TokenCounter,
)
from gliding_llamaindex import GlidingEmbedding, LlamaIndexEmbedder, LlamaIndexSummarizer

LONG = " ".join(
    f"Sentence {i} says the shipment of item {i} leaves the depot on day {i}." for i in range(40)
)


class BrokenEmbedding(MockEmbedding):
    """An embedding backend that is down."""

    def _get_query_embedding(self, query: str) -> list[float]:
        raise ConnectionError("backend unreachable")


class BrokenLLM(MockLLM):
    """A model that is down."""

    def complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> Any:
        raise TimeoutError("model timed out")


def test_llamaindex_embedder_is_a_gliding_embedder() -> None:
    embedder = LlamaIndexEmbedder(MockEmbedding(embed_dim=8))

    assert isinstance(embedder, Embedder)
    assert embedder.name == "llamaindex:MockEmbedding:unknown"
    assert embedder.embed_documents(["a", "b"]) == [[0.5] * 8, [0.5] * 8]
    assert embedder.embed_documents([]) == []
    assert embedder.embed_query("a") == [0.5] * 8


def test_memory_runs_on_llamaindex_models() -> None:
    summarizer = LlamaIndexSummarizer(MockLLM(max_tokens=5))
    with Memory(
        embedder=LlamaIndexEmbedder(MockEmbedding(embed_dim=8)), summarizer=summarizer
    ) as m:
        m.store.put({"@id": "urn:n:1", "text": "the lighthouse keeper logs the storm"})
        turn = m.session("urn:task:models").add_turn("user", LONG)

        # MockEmbedding gives every text the same vector: only the lexical arm tells them apart.
        assert "urn:n:1" in [h.iri for h in m.search("lighthouse storm", 3)]
        assert m.embedder_name == "llamaindex:MockEmbedding:unknown"
        assert turn.summary.startswith("text text")  # written by the (mock) LLM
        assert m.tokens.count(turn.summary) <= m.config.session.max_summary_tokens


def test_embedder_failures_are_embedder_errors_and_bad_texts_input_errors() -> None:
    broken = LlamaIndexEmbedder(BrokenEmbedding(embed_dim=8))
    with pytest.raises(EmbedderError, match="ConnectionError: backend unreachable"):
        broken.embed_query("x")
    embedder = LlamaIndexEmbedder(MockEmbedding(embed_dim=8))
    with pytest.raises(InvalidInputError, match="'just one string'"):
        embedder.embed_documents("just one string")  # type: ignore[arg-type]
    with pytest.raises(InvalidInputError, match="got 3"):
        embedder.embed_documents(["ok", 3])  # type: ignore[list-item]
    with pytest.raises(InvalidInputError, match="HashEmbedder"):
        LlamaIndexEmbedder(HashEmbedder())  # type: ignore[arg-type]


def test_gliding_embedding_gives_llamaindex_the_memory_embedder(memory: Memory) -> None:
    embedding = GlidingEmbedding(memory.embedder)
    direct = HashEmbedder()

    assert isinstance(embedding, BaseEmbedding)
    assert embedding.model_name == "hash-256"
    assert embedding.get_query_embedding("red kite") == direct.embed_query("red kite")
    assert embedding.get_text_embedding_batch(["a b", "c"]) == direct.embed_documents(["a b", "c"])
    with pytest.raises(InvalidInputError, match="'not an embedder'"):
        GlidingEmbedding("not an embedder")  # type: ignore[arg-type]


async def test_gliding_embedding_async() -> None:
    embedding = GlidingEmbedding(HashEmbedder(dimension=16))

    assert await embedding.aget_query_embedding("x y") == HashEmbedder(16).embed_query("x y")
    assert await embedding.aget_text_embedding("x y") == HashEmbedder(16).embed_query("x y")


def test_summarizer_keeps_short_texts_and_cuts_answers_to_the_limit() -> None:
    tokens = TokenCounter()
    summarizer = LlamaIndexSummarizer(MockLLM(max_tokens=500), tokens=tokens)

    assert isinstance(summarizer, Summarizer)
    assert summarizer.summarize("  short text  ", 10) == "short text"
    summary = summarizer.summarize(LONG, 30)
    assert tokens.count(summary) <= 30
    assert summary.startswith("text text")  # the model's answer, cut


def test_summarizer_prompts_the_model_with_the_text_and_the_limit() -> None:
    echo = LlamaIndexSummarizer(MockLLM(), prompt="Summarise in {max_tokens} tokens: {text}")

    assert echo.summarize(LONG, 12).startswith("Summarise in 12 tokens: Sentence 0")


def test_summarizer_falls_back_when_the_model_fails(caplog: pytest.LogCaptureFixture) -> None:
    tokens = TokenCounter()
    summarizer = LlamaIndexSummarizer(BrokenLLM(), tokens=tokens)

    with caplog.at_level(logging.WARNING, logger="gliding_core.summarize"):
        summary = summarizer.summarize(LONG, 25)

    assert summary.startswith("Sentence 0")  # the extractive summary keeps the first sentence
    assert tokens.count(summary) <= 25
    assert "using the fallback" in caplog.text


@pytest.mark.parametrize(
    ("build", "named"),
    [
        (lambda: LlamaIndexSummarizer("gpt"), "'gpt'"),  # type: ignore[arg-type]
        (lambda: LlamaIndexSummarizer(MockLLM(), prompt="no slot"), "'no slot'"),
        (lambda: LlamaIndexSummarizer(MockLLM()).summarize(LONG, 0), "got 0"),
        (lambda: LlamaIndexSummarizer(MockLLM()).summarize(b"bytes", 5), "b'bytes'"),  # type: ignore[arg-type]
    ],
)
def test_summarizer_bad_inputs_are_typed_errors(build: Any, named: str) -> None:
    with pytest.raises(InvalidInputError) as info:
        build()
    assert named in str(info.value)
