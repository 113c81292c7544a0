"""L1: summarizers. The default is extractive and deterministic: no model, bounded in tokens.

A summarizer is any object with ``summarize(text, max_tokens) -> str`` whose result is at most
``max_tokens`` tokens; the adapters plug in LLM summarizers through the same seam.
"""

from __future__ import annotations

import re
from collections import Counter
from typing import Protocol, runtime_checkable

from gliding_core.errors import InvalidInputError
from gliding_core.jsonld import preview
from gliding_core.tokens import TokenCounter

# Sentence ends: ASCII . ! ? and the CJK full stop and full-width ! and ?.
_SENTENCE = re.compile("(?<=[.!?])\\s+|(?<=[\u3002\uff01\uff1f])\\s*|\n+")
_WORD = re.compile(r"\w+", re.UNICODE)


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
