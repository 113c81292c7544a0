"""Adapter: ``LlamaIndexSummarizer``, L1 summaries written by any LlamaIndex LLM.

It satisfies ``gliding_core.Summarizer``: ``summarize(text, max_tokens)`` returns at most
``max_tokens`` tokens (the memory's exact count), whatever the model answers.

Invariants: a text already within the limit is returned unchanged, without a model call; the
model's answer is cut to the limit exactly; when the model fails (raises, or answers nothing)
the fallback summarizer (extractive by default) writes the summary and a warning is logged,
because summaries are written on the session's write path and a turn must never be lost to a
flaky model.
"""

from __future__ import annotations

import logging

from llama_index.core.base.llms.base import BaseLLM

from gliding_core.errors import InvalidInputError
from gliding_core.jsonld import preview
from gliding_core.summarize import ExtractiveSummarizer, Summarizer, check_request
from gliding_core.tokens import TokenCounter

logger = logging.getLogger(__name__)

DEFAULT_PROMPT = (
    "Summarise the following text in at most {max_words} words. Keep names, numbers, dates and "
    "decisions; answer with the summary only.\n\n{text}"
)


class LlamaIndexSummarizer:
    """A gliding ``Summarizer`` backed by a LlamaIndex LLM.

    Args:
        llm: the model (``llm.complete`` is called with the prompt).
        tokens: the counter that defines the limit; pass ``memory.tokens``.
        prompt: the prompt template, with ``{text}``, ``{max_tokens}`` and ``{max_words}``.
        fallback: writes the summary when the model fails; extractive by default.

    Example:
        >>> memory = Memory(summarizer=LlamaIndexSummarizer(llm))  # doctest: +SKIP
    """

    def __init__(
        self,
        llm: BaseLLM,
        *,
        tokens: TokenCounter | None = None,
        prompt: str = DEFAULT_PROMPT,
        fallback: Summarizer | None = None,
    ) -> None:
        if not isinstance(llm, BaseLLM):
            raise InvalidInputError(f"llm must be a llama_index LLM, got {preview(llm)}")
        if not isinstance(prompt, str) or "{text}" not in prompt:
            raise InvalidInputError(f"prompt must be a string with {{text}}, got {preview(prompt)}")
        self.llm = llm
        self.tokens = tokens or TokenCounter()
        self.prompt = prompt
        self.fallback = fallback or ExtractiveSummarizer(self.tokens)

    def summarize(self, text: str, max_tokens: int) -> str:
        """Return a summary of ``text`` of at most ``max_tokens`` tokens.

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
            answer = self.llm.complete(request).text.strip()
        except Exception:  # any provider error: HTTP, auth, rate limit, bad response
            logger.warning(
                "summarizer %s failed; using the fallback", _name(self.llm), exc_info=True
            )
            answer = ""
        if not answer:
            return self.tokens.truncate(self.fallback.summarize(text, max_tokens), max_tokens)
        return self.tokens.truncate(answer, max_tokens)


def _name(llm: BaseLLM) -> str:
    return llm.class_name()
