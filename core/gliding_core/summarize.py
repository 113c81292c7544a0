"""L1: summarizers. The default is extractive and deterministic: no model, bounded in tokens.

A summarizer is any object with ``summarize(text, max_tokens) -> str`` whose result is at most
``max_tokens`` tokens. ``ModelSummarizer`` is the one summarizer backed by a language model: the
adapters only give it a function that sends a prompt to their framework's model.

Invariants: a summary is at most ``max_tokens`` tokens (the memory's exact count); a text within
the limit is returned unchanged, without a model call. Failure policy of ``ModelSummarizer``:
when the model raises or answers nothing, the fallback (extractive by default) writes the
summary and a warning is logged, because summaries are written on the session's write path and
a turn must never be lost to a flaky model.
"""

from __future__ import annotations

import logging
import re
from collections import Counter
from collections.abc import Callable
from typing import Protocol, runtime_checkable

from gliding_core.errors import InvalidInputError
from gliding_core.jsonld import preview
from gliding_core.tokens import TokenCounter

# Sentence ends: ASCII . ! ? and the CJK full stop and full-width ! and ?.
_SENTENCE = re.compile("(?<=[.!?])\\s+|(?<=[\u3002\uff01\uff1f])\\s*|\n+")
_WORD = re.compile(r"\w+", re.UNICODE)
logger = logging.getLogger(__name__)

SUMMARY_PROMPT = (
    "Summarise the following text in at most {max_words} words ({max_tokens} tokens). Keep "
    "names, numbers, dates and decisions; answer with the summary only.\n\n{text}"
)


@runtime_checkable
class Summarizer(Protocol):
    """Turns a text into a summary of at most ``max_tokens`` tokens."""

    def summarize(self, text: str, max_tokens: int) -> str:
        """Return the summary of ``text``."""
        ...


class ExtractiveSummarizer:
    """Keep the sentences that carry the text's most frequent words, in their original order.

    A text within the limit is returned unchanged. Otherwise the first sentence is kept (it
    usually states the point), then the sentences with the highest mean word frequency, until
    the limit; the result is cut to the limit exactly.

    Args:
        tokens: the counter that defines the limit.
    """

    def __init__(self, tokens: TokenCounter) -> None:
        self.tokens = tokens

    def summarize(self, text: str, max_tokens: int) -> str:
        """Return an extract of ``text`` of at most ``max_tokens`` tokens."""
        text = check_request(text, max_tokens)
        if self.tokens.count(text) <= max_tokens:
            return text
        sentences = [s.strip() for s in _SENTENCE.split(text) if s.strip()]
        frequency = Counter(w.lower() for w in _WORD.findall(text) if len(w) > 3)

        def weight(index: int) -> float:
            words = [w.lower() for w in _WORD.findall(sentences[index]) if len(w) > 3]
            return sum(frequency[w] for w in words) / (len(words) + 1)

        order = [0, *sorted(range(1, len(sentences)), key=weight, reverse=True)]
        chosen: set[int] = set()
        used = 0
        for index in order:
            cost = self.tokens.count(sentences[index]) + 1
            if used + cost > max_tokens and chosen:
                continue
            chosen.add(index)
            used += cost
        summary = " ".join(sentences[i] for i in sorted(chosen))
        return self.tokens.truncate(summary, max_tokens)


class ModelSummarizer:
    """Summaries written by a language model, cut to the limit, with a logged fallback.

    Args:
        complete: sends one prompt to the model and returns its answer's text (the adapter's
            bridge to its framework's model).
        tokens: the counter that defines the limit; pass ``memory.tokens``.
        name: the model's name in log messages.
        prompt: the template, with ``{text}`` and optionally ``{max_tokens}``, ``{max_words}``.
        fallback: writes the summary when the model fails; extractive by default.

    Example:
        >>> summarizer = ModelSummarizer(llm_call, TokenCounter())  # doctest: +SKIP
    """

    def __init__(
        self,
        complete: Callable[[str], str],
        tokens: TokenCounter,
        *,
        name: str = "model",
        prompt: str = SUMMARY_PROMPT,
        fallback: Summarizer | None = None,
    ) -> None:
        if not callable(complete):
            raise InvalidInputError(f"complete must be callable, got {preview(complete)}")
        if not isinstance(tokens, TokenCounter):
            raise InvalidInputError(f"tokens must be a TokenCounter, got {preview(tokens)}")
        if not isinstance(prompt, str) or "{text}" not in prompt:
            raise InvalidInputError(f"prompt must be a string with {{text}}, got {preview(prompt)}")
        if fallback is not None and not isinstance(fallback, Summarizer):
            raise InvalidInputError(f"fallback must be a Summarizer, got {preview(fallback)}")
        self.complete, self.tokens, self.name, self.prompt = complete, tokens, name, prompt
        self.fallback = fallback or ExtractiveSummarizer(tokens)

    def summarize(self, text: str, max_tokens: int) -> str:
        """Return the model's summary of ``text`` cut to ``max_tokens``; short text as it is.

        Raises:
            InvalidInputError: ``text`` is not a string or ``max_tokens`` not an int >= 1.
        """
        text = check_request(text, max_tokens)
        if self.tokens.count(text) <= max_tokens:
            return text
        request = self.prompt.format(
            text=text, max_tokens=max_tokens, max_words=max(1, max_tokens * 3 // 4)
        )
        try:
            answer = self.complete(request).strip()
        except Exception:  # any provider error: HTTP, auth, rate limit, bad response
            logger.warning("summarizer %s failed; using the fallback", self.name, exc_info=True)
            answer = None
        if answer == "":
            logger.warning("summarizer %s answered nothing; using the fallback", self.name)
        if not answer:
            answer = self.fallback.summarize(text, max_tokens)
        return self.tokens.truncate(answer, max_tokens)


def check_request(text: object, max_tokens: object) -> str:
    """Check a summary request (every summarizer takes the same); return ``text`` stripped.

    Raises:
        InvalidInputError: ``text`` is not a string or ``max_tokens`` not an int >= 1.
    """
    if not isinstance(text, str):
        raise InvalidInputError(f"text to summarize must be a str, got {preview(text)}")
    if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1:
        raise InvalidInputError(f"max_tokens must be an int >= 1, got {preview(max_tokens)}")
    return text.strip()
