"""Hyperspace: the windows a long text is embedded in, and the vector ids that hold them.

An embedding model reads a bounded number of word pieces (all-MiniLM-L6-v2: 256) and drops the
rest, so a long text embedded whole is embedded by its beginning. The dense index embeds such a
text in overlapping windows of words instead, one vector each, and scores the entry by its best
window. Invariants: the windows cover the text from its first word to its last; there are at
most ``max_windows`` of them; a text that fits in one window is embedded as it is (its vector,
and its cache key, are the ones it had without windows). Window 0's vector id is the entry's IRI;
window ``i`` > 0 is ``"<iri> #<i>"``, which no IRI can be (an IRI holds no space).

A short text can be embedded with context (``DenseConfig.context_words``): the end of the text
of the entry it follows (its ``previous`` link), then its own, in one window. A reply such as
"Yes, it was great!" says nothing alone; after the turn it answers, it says what was great.
The entry followed must be of the reply's scope: the vector of an entry a scope reads never
holds another scope's text.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Any

from gliding_core.config import DenseConfig
from gliding_core.errors import InvalidNodeError
from gliding_core.jsonld import validate_iri
from gliding_core.store.entry import Entry
from gliding_core.store.protocol import EntryStore
from gliding_core.store.scope import TAG_PREFIX

WINDOW_SEPARATOR = " #"
CONTEXT_LINK = "previous"  # the link to the entry a short text is embedded after


def in_context(
    items: Sequence[tuple[str, str]], store: EntryStore, settings: DenseConfig
) -> list[tuple[str, str]]:
    """Return ``(iri, text)`` pairs with each short text preceded by its context, if any.

    A text of at most ``context_words`` words whose entry links under ``CONTEXT_LINK`` to
    another entry with text, of the same scope (the same scope tags, or none on either), gets
    the last words of that text before it, as many as fit in one window with its own; every
    other text is returned as it is.
    """
    limit = settings.context_words
    short = [iri for iri, text in items if limit and len(text.split()) <= limit]
    if not short:
        return list(items)
    replies = store.get_many(short)
    follows = {
        iri: target
        for iri, entry in replies.items()
        if (target := _link(entry.node.get(CONTEXT_LINK))) is not None and target != iri
    }
    if follows:  # only within one scope: a link must not carry another scope's text
        targets = store.get_many(list(dict.fromkeys(follows.values())))
        follows = {
            iri: target
            for iri, target in follows.items()
            if target in targets and _scopes(targets[target]) == _scopes(replies[iri])
        }
    before = store.searchable_texts(list(dict.fromkeys(follows.values()))) if follows else {}
    out = []
    for iri, text in items:
        words = before.get(follows.get(iri, ""), "").split()
        room = settings.window_words - len(text.split())
        if words and room > 0:
            text = " ".join(words[-room:]) + "\n" + text
        out.append((iri, text))
    return out


def _scopes(entry: Entry) -> frozenset[str]:
    """The scope tags of ``entry`` (``store.scope``): none for an entry of no scope."""
    return frozenset(tag for tag in entry.tags if tag.startswith(TAG_PREFIX))


def _link(value: Any) -> str | None:
    """The IRI a link's value names: ``{"@id": iri}``, the IRI itself, or a list's first;
    ``None`` for anything else (a node's properties are anyone's: a value that is no IRI must
    not fail the read of the texts linked to, and with it every catch-up of the index)."""
    if isinstance(value, list):
        value = value[0] if value else None
    if isinstance(value, dict):
        value = value.get("@id")
    try:
        return validate_iri(value)
    except InvalidNodeError:
        return None


def text_windows(text: str, settings: DenseConfig) -> list[str]:
    """Return the windows ``text`` is embedded in: itself when it is short enough.

    Windows hold ``window_words`` words and share ``window_overlap`` with the next; the last
    one ends at the text's last word. When more than ``max_windows`` would be needed, that many
    longer windows are spread evenly over the text, still overlapping and still covering it.
    """
    words = text.split()
    size, overlap = settings.window_words, settings.window_overlap
    if len(words) <= size:
        return [text]
    count = math.ceil((len(words) - size) / (size - overlap)) + 1
    if count > settings.max_windows:
        count = settings.max_windows
        size = math.ceil((len(words) + (count - 1) * overlap) / count)
    stride = size - overlap
    starts = [min(i * stride, len(words) - size) for i in range(count)]
    return [" ".join(words[start : start + size]) for start in starts]


def window_ids(iri: str, count: int) -> list[str]:
    """Return the vector ids of an entry's ``count`` windows (the first is the IRI)."""
    return [iri, *(f"{iri}{WINDOW_SEPARATOR}{i}" for i in range(1, count))]


def entry_of(vector_id: str) -> str:
    """Return the IRI of the entry a vector id belongs to."""
    return vector_id.split(WINDOW_SEPARATOR, 1)[0]


def best_per_entry(scored: Iterable[tuple[str, float]]) -> dict[str, float]:
    """Collapse ``(vector id, score)`` pairs to each entry's best score, first seen first."""
    best: dict[str, float] = {}
    for vector_id, score in scored:
        iri = entry_of(vector_id)
        if score > best.get(iri, -math.inf):
            best[iri] = score
    return best
