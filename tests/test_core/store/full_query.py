"""FTS5's own full query, the oracle of the lexical arm's pruned and postings-scored searches."""

from __future__ import annotations

from gliding_core.store.sqlite import L0Store


def full_query(store: L0Store, query: str, limit: int) -> list[tuple[str, float]]:
    """``store.search_ids`` with the pruned search (and the scoring from postings) off."""
    setting = store.defer_common_words
    store.defer_common_words = 0
    try:
        return store.search_ids(query, limit=limit)
    finally:
        store.defer_common_words = setting
