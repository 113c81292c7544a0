"""The model summarizer: one failure policy (fall back to the extract, logged) for every adapter."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from gliding_core import InvalidInputError, ModelSummarizer, Summarizer, TokenCounter


def test_the_model_summarizer_cuts_answers_and_falls_back_when_the_model_fails(
    caplog: pytest.LogCaptureFixture,
) -> None:
    tokens = TokenCounter()
    prompts: list[str] = []

    def model(prompt: str) -> str:
        prompts.append(prompt)
        return "Summary: the launch is on Monday. " * 30

    long = "The launch is on Monday. " + "Other details follow here. " * 40
    summarizer = ModelSummarizer(model, tokens, name="scripted")
    assert isinstance(summarizer, Summarizer)
    assert summarizer.summarize("short", 20) == "short"
    assert prompts == []  # a text within the limit is not sent
    summary = summarizer.summarize(long, 12)
    assert summary.startswith("Summary: the launch")
    assert tokens.count(summary) <= 12
    assert "12 tokens" in prompts[0]

    def broken(prompt: str) -> str:
        raise TimeoutError("model timed out")

    for answer in (broken, lambda prompt: "  "):
        with caplog.at_level(logging.WARNING, logger="gliding_core.summarize"):
            fallback = ModelSummarizer(answer, tokens, name="flaky").summarize(long, 12)
        assert fallback.startswith("The launch is on Monday.")  # the extract's first sentence
        assert tokens.count(fallback) <= 12
        assert "summarizer flaky" in caplog.text
        caplog.clear()


@pytest.mark.parametrize(
    ("build", "named"),
    [
        (lambda: ModelSummarizer("model", TokenCounter()), "complete"),
        (lambda: ModelSummarizer(str, "cl100k"), "TokenCounter"),
        (lambda: ModelSummarizer(str, TokenCounter(), prompt="no slot"), "prompt"),
        (lambda: ModelSummarizer(str, TokenCounter(), fallback=3), "fallback"),
    ],
)
def test_the_model_summarizer_names_bad_arguments(build: Any, named: str) -> None:
    with pytest.raises(InvalidInputError, match=named):
        build()
