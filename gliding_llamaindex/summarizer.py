"""Adapter: ``LlamaIndexSummarizer``, L1 summaries written by any LlamaIndex LLM.

A converter only: it hands ``gliding_core.ModelSummarizer`` a function that sends the prompt to
``llm.complete``; the limit, the short-text rule and the failure policy (fall back to the
extractive summarizer, logged) are the core's.
"""

from __future__ import annotations

from llama_index.core.base.llms.base import BaseLLM

from gliding_core.errors import InvalidInputError
from gliding_core.jsonld import preview
from gliding_core.summarize import SUMMARY_PROMPT, ModelSummarizer, Summarizer
from gliding_core.tokens import TokenCounter


class LlamaIndexSummarizer(ModelSummarizer):
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
        prompt: str = SUMMARY_PROMPT,
        fallback: Summarizer | None = None,
    ) -> None:
        if not isinstance(llm, BaseLLM):
            raise InvalidInputError(f"llm must be a llama_index LLM, got {preview(llm)}")
        self.llm = llm
        super().__init__(
            lambda request: llm.complete(request).text,
            tokens or TokenCounter(),
            name=llm.class_name(),
            prompt=prompt,
            fallback=fallback,
        )
