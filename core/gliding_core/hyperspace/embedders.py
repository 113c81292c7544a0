"""Hyperspace: the embedder protocol and the dependency-free hash embedder.

An embedder turns texts into fixed-length vectors. Any object with ``embed_documents`` and
``embed_query`` (LangChain's ``Embeddings`` has both) can serve; ``name`` and ``dimension`` are
read when present.
"""

from __future__ import annotations

import functools
import hashlib
import re
from collections.abc import Sequence
from typing import Protocol, runtime_checkable

import numpy as np

from gliding_core.errors import InvalidInputError
from gliding_core.jsonld import check_text, preview

_WORD = re.compile(r"\w+", re.UNICODE)


@runtime_checkable
class Embedder(Protocol):
    """What the memory needs from an embedding model."""

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        """Return one vector per text."""
        ...

    def embed_query(self, text: str) -> list[float]:
        """Return the vector of a search query."""
        ...


def embedder_name(embedder: object) -> str:
    """Return the embedder's ``name``, or its class name."""
    name = getattr(embedder, "name", None)
    return name if isinstance(name, str) and name else type(embedder).__name__


class HashEmbedder:
    """Deterministic feature-hashing embeddings: no model, no download, no dependency.

    Words and the character trigrams of each word are hashed (BLAKE2b, so the same on every
    run and machine) into signed buckets, then L2-normalised. Texts sharing words or word parts
    are similar; paraphrases are not. For tests, and as the last fallback.

    Args:
        dimension: the vector length.
    """

    def __init__(self, dimension: int = 256) -> None:
        if isinstance(dimension, bool) or not isinstance(dimension, int) or dimension < 8:
            raise InvalidInputError(f"dimension must be an int >= 8, got {preview(dimension)}")
        self.dimension = dimension
        self.name = f"hash-{dimension}"

    def embed_documents(self, texts: Sequence[str]) -> list[list[float]]:
        """Return one unit vector (or a zero vector for text without words) per text."""
        return [self.embed_query(text) for text in _check_texts(texts)]

    def embed_query(self, text: str) -> list[float]:
        """Return the unit vector of ``text``."""
        if not isinstance(text, str):
            raise InvalidInputError(f"text to embed must be a str, got {preview(text)}")
        vector = np.zeros(self.dimension, dtype=np.float32)
        for word in _WORD.findall(text.lower()):
            for index, sign, weight in _features(word, self.dimension):
                vector[index] += sign * weight
        norm = float(np.linalg.norm(vector))
        if norm > 0.0:
            vector /= norm
        return [float(v) for v in vector]


@functools.lru_cache(maxsize=65_536)
def _features(word: str, dimension: int) -> tuple[tuple[int, float, float], ...]:
    padded = f"<{word}>"
    grams = [padded[i : i + 3] for i in range(max(1, len(padded) - 2))]
    features = [(word, 1.0)] + [("#" + gram, 0.5 / len(grams) ** 0.5) for gram in grams]
    out = []
    for feature, weight in features:
        digest = hashlib.blake2b(feature.encode("utf-8"), digest_size=8).digest()
        value = int.from_bytes(digest, "little")
        out.append((value % dimension, 1.0 if value >> 63 else -1.0, weight))
    return tuple(out)


def _check_texts(texts: object) -> list[str]:
    """Return the texts to embed as a list, each a str that encodes as UTF-8."""
    if isinstance(texts, str) or not isinstance(texts, Sequence):
        raise InvalidInputError(f"texts must be a list of strings, got {preview(texts)}")
    for text in texts:
        check_text(text, what="each text to embed")
    return list(texts)
