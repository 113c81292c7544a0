"""Adapter: what a ``GlidingStore`` indexes of an item, and how it ranks items by meaning.

LangGraph's ``IndexConfig`` (``{"dims": ..., "embed": ..., "fields": [...]}``) and the ``index``
argument of ``put`` decide which fields of a value are searchable; their texts are what the
entry holds as its text, so the memory's lexical and dense arms see those fields and nothing
else (``index=False``: no text, never ranked). Without an ``embed`` of its own (or with the
memory's embedder) the store ranks by the memory's hybrid search; with another embedder it ranks
as LangGraph's stores do, by the cosine of the query with each indexed text, the best text of
an item making its score, so a score is the same whatever else the store holds.

Invariants: the texts of a field path are LangGraph's (``get_text_at_path``), except that the
whole value (``"$"``) searched by the hybrid search is its string and number values rather than
its JSON (``gliding_core.fields.indexed_text``, as the memory's own search makes an entry's
text); every text is embedded once per process (an in-memory cache by text).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
from langgraph.store.base.embed import ensure_embeddings, get_text_at_path, tokenize_path

from gliding_core import CachedEmbedder, Embedder, InvalidInputError
from gliding_core.fields import WHOLE, indexed_text
from gliding_core.jsonld import preview

_CONFIG_KEYS = frozenset({"dims", "embed", "fields"})


class ItemIndex:
    """The fields a store indexes and, when it has its own, the embedder that ranks them.

    Args:
        config: LangGraph's ``IndexConfig``, or ``None`` (every field, the memory's search).
        memory_embedder: the memory's embedder: an ``embed`` that is it ranks by hybrid search.

    Raises:
        InvalidInputError: the config is not a dict, names an unknown key, or holds a bad
            ``dims``, ``fields`` or ``embed`` (an async-only function among them).
    """

    def __init__(self, config: Mapping[str, Any] | None, memory_embedder: Embedder) -> None:
        if config is not None and not isinstance(config, Mapping):
            raise InvalidInputError(f"index must be an IndexConfig dict, got {preview(config)}")
        options = dict(config or {})
        unknown = sorted(set(options) - _CONFIG_KEYS)
        if unknown:
            raise InvalidInputError(
                f"unknown index setting {unknown[0]!r}; use dims, embed, fields"
            )
        dims = options.get("dims")
        if dims is not None and (isinstance(dims, bool) or not isinstance(dims, int) or dims < 1):
            raise InvalidInputError(f"index dims must be an int >= 1, got {preview(dims)}")
        self.dims: int | None = dims
        self.fields = check_fields(options.get("fields") or [WHOLE], "index fields")
        self.embedder = _own_embedder(options.get("embed"), memory_embedder)

    @property
    def semantic(self) -> bool:
        """Whether the store ranks by its own embedder's cosines (else by hybrid search)."""
        return self.embedder is not None

    def texts(self, value: Mapping[str, Any], index: Sequence[str] | bool | None) -> list[str]:
        """Return the searchable texts of ``value`` under the ``index`` argument of ``put``."""
        if index is False:
            return []
        paths = self.fields if index is None or index is True else list(index)
        out: list[str] = []
        for path in paths:
            if path == WHOLE and not self.semantic:
                text = indexed_text(value, (WHOLE,))
                out += [text] if text else []
            else:
                out += [t for t in get_text_at_path(dict(value), path) if t]
        return out

    def warm(self, texts: Sequence[str]) -> None:
        """Embed ``texts`` now (before a write), so a failing embedder writes nothing."""
        if self.embedder is not None and texts:
            self.embedder.matrix(list(texts))

    def scores(self, query: str, items: Sequence[tuple[str, Sequence[str]]]) -> dict[str, float]:
        """Return the cosine score of each ``(iri, texts)`` item that has texts, best first."""
        assert self.embedder is not None
        flat = [(iri, text) for iri, texts in items for text in texts]
        if not flat:
            return {}
        probe = np.asarray(self.embedder.embed_query(query), dtype=np.float64)
        matrix = self.embedder.matrix([text for _, text in flat]).astype(np.float64)
        norms = np.linalg.norm(matrix, axis=1) * (float(np.linalg.norm(probe)) or 1.0)
        cosines = matrix @ probe / np.where(norms == 0, 1.0, norms)
        best: dict[str, float] = {}
        for (iri, _), score in zip(flat, cosines.tolist(), strict=True):
            best[iri] = max(best.get(iri, -np.inf), float(score))
        order = sorted(best, key=lambda iri: -best[iri])  # stable: ties keep the store's order
        return {iri: best[iri] for iri in order}


def check_fields(fields: object, what: str) -> list[str]:
    """Return ``fields`` when it is a list of JSON paths LangGraph can read."""
    if isinstance(fields, str) or not isinstance(fields, (list, tuple)) or not fields:
        raise InvalidInputError(
            f"{what} must be a non-empty list of field paths, got {preview(fields)}"
        )
    for path in fields:
        if not isinstance(path, str) or not path:
            raise InvalidInputError(f"{what} holds {preview(path)}: not a field path")
        try:
            tokenize_path(path)
        except ValueError as exc:
            raise InvalidInputError(f"{what} holds a bad path {path!r}: {exc}") from exc
    return list(fields)


def _own_embedder(embed: object, memory_embedder: Embedder) -> CachedEmbedder | None:
    """Return the store's own embedder (cached), or ``None`` when it uses the memory's."""
    inner = getattr(memory_embedder, "inner", None)
    if embed is None or embed is memory_embedder or (inner is not None and embed is inner):
        return None
    if isinstance(embed, Embedder):
        return CachedEmbedder(embed)
    if isinstance(embed, str) or callable(embed):
        if _is_async(embed):
            raise InvalidInputError(
                f"index embed {preview(embed)} is async only; GlidingStore embeds in its "
                "worker thread: give a sync function or an Embeddings"
            )
        try:
            return CachedEmbedder(ensure_embeddings(embed))
        except (ValueError, ImportError) as exc:
            raise InvalidInputError(f"cannot use index embed {preview(embed)}: {exc}") from exc
    raise InvalidInputError(
        f"index embed must be an Embeddings, a function or a provider string, got {preview(embed)}"
    )


def _is_async(embed: object) -> bool:
    call: Callable[..., Any] | None = getattr(embed, "__call__", None)  # noqa: B004
    return inspect.iscoroutinefunction(embed) or inspect.iscoroutinefunction(call)
