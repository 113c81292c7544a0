"""LangChain models as the memory's embedder and summarizer."""

from __future__ import annotations

import logging

import pytest
from langchain_core.embeddings import DeterministicFakeEmbedding, Embeddings
from langchain_core.messages import AIMessage, BaseMessage

from gliding_core import (
    EmbedderError,
    HashEmbedder,
    InvalidInputError,
    Memory,
    TokenCounter,
)
from gliding_langchain import LangChainEmbedder, LangChainSummarizer, ScriptedChatModel


class Broken(Embeddings):
    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        raise ConnectionError("remote embedding API is down")

    def embed_query(self, text: str) -> list[float]:
        raise ConnectionError("remote embedding API is down")


def test_langchain_embeddings_drive_the_memory_search() -> None:
    embedder = LangChainEmbedder(DeterministicFakeEmbedding(size=32))
    with Memory(embedder=embedder) as memory:
        memory.store.put({"@id": "urn:n:1", "text": "the blue door"})
        hits = memory.search("the blue door", 1)
        assert hits[0].iri == "urn:n:1"
        assert hits[0].arms["dense"].rank == 1
        assert memory.embedder_name == "langchain:DeterministicFakeEmbedding"


def test_a_failing_model_raises_embedder_error() -> None:
    embedder = LangChainEmbedder(Broken())
    with pytest.raises(EmbedderError, match="remote embedding API is down"):
        embedder.embed_documents(["x"])
    with pytest.raises(EmbedderError):
        embedder.embed_query("x")


def test_a_chat_model_writes_l1_summaries_within_the_limit() -> None:
    prompts: list[list[BaseMessage]] = []

    def summarise(messages: list[BaseMessage]) -> AIMessage:
        prompts.append(messages)
        return AIMessage(content="Summary: the deploy moved to Friday. " * 40)

    tokens = TokenCounter()
    summarizer = LangChainSummarizer(ScriptedChatModel(reply=summarise), tokens)
    with Memory(tokens=tokens, summarizer=summarizer, embedder=HashEmbedder()) as memory:
        turn = memory.session("urn:task:1").add_turn("user", "We talked at length. " * 200)
    assert turn.summary.startswith("Summary: the deploy moved to Friday.")
    assert tokens.count(turn.summary) <= memory.config.session.max_summary_tokens
    assert "(200 tokens)" in prompts[0][0].text


def test_short_text_is_not_sent_to_the_model() -> None:
    model = ScriptedChatModel()
    summarizer = LangChainSummarizer(model, TokenCounter())
    assert summarizer.summarize("short", 50) == "short"
    assert model.requests == []


def test_an_empty_or_failing_summary_falls_back_to_the_extract(
    caplog: pytest.LogCaptureFixture,
) -> None:
    def fail(messages: list[BaseMessage]) -> AIMessage:
        raise ConnectionError("provider down")

    text = "The deploy moved to Friday. " + "Filler words here. " * 60
    for reply in (lambda m: AIMessage(""), fail):
        summarizer = LangChainSummarizer(ScriptedChatModel(reply=reply), TokenCounter())
        with caplog.at_level(logging.WARNING, logger="gliding_core.summarize"):
            summary = summarizer.summarize(text, 10)
        assert summary.startswith("The deploy moved to Friday.")
        assert "using the fallback" in caplog.text
        caplog.clear()


def test_bad_arguments_are_rejected() -> None:
    with pytest.raises(InvalidInputError, match="Embeddings"):
        LangChainEmbedder("model")  # type: ignore[arg-type]
    with pytest.raises(InvalidInputError, match="texts"):
        LangChainEmbedder(DeterministicFakeEmbedding(size=4)).embed_documents("abc")
    with pytest.raises(InvalidInputError, match="max_tokens"):
        LangChainSummarizer(ScriptedChatModel(), TokenCounter()).summarize("x", 0)


def test_the_summarizer_runs_outside_the_agent_run_it_is_called_from() -> None:
    from langchain_core.callbacks import BaseCallbackHandler
    from langchain_core.runnables import RunnableLambda

    class Count(BaseCallbackHandler):
        starts = 0

        def on_chat_model_start(self, *args: object, **kwargs: object) -> None:
            Count.starts += 1

    summarizer = LangChainSummarizer(ScriptedChatModel(), TokenCounter())
    step = RunnableLambda(lambda text: summarizer.summarize(text, 5))
    step.invoke("a long text that needs a summary " * 10, config={"callbacks": [Count()]})

    assert Count.starts == 0  # the run's handlers never see the summarizer's model call
