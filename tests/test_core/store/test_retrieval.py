"""gliding_core.store.retrieval: dict filters are checked when built; the default filters.

That a built filter selects in the store exactly what it means is the L0 contract suite's
(``contracts/test_entry_store.py``), on every implementation.
"""

from __future__ import annotations

import math
from typing import Any

import pytest

from gliding_core import DEFAULT_K, InvalidInputError, filters_from_dict, knowledge_filters
from gliding_core.store.filters import MAX_NESTING
from gliding_core.store.scope import INPUT_TYPE


@pytest.mark.parametrize(
    ("spec", "named"),
    [
        ("tags=a", "tags=a"),
        ({"colour": "red"}, "colour"),
        ({"tags": {"$regex": "a"}}, "$regex"),
        ({"tags": {"$in": "a"}}, "$in"),
        ({"tags": {"$in": []}}, "$in"),
        ({"tags": 3}, "3"),
        ({"importance": {"$gt": "high"}}, "high"),
        ({"importance": {"$gt": math.nan}}, "nan"),
        ({"created_at": {"$gte": True}}, "True"),
        ({"created_at": {"$gte": 10**400}}, "finite"),
        ({"importance": {"$lt": -(10**400)}}, "finite"),
        ({"named_graph": {"$ne": "urn:g:1"}}, "$ne"),
        ({"$or": []}, "$or"),
        ({"$and": {"tags": "a"}}, "$and"),
    ],
)
def test_what_l0_cannot_express_is_a_typed_error(spec: Any, named: str) -> None:
    with pytest.raises(InvalidInputError) as info:
        filters_from_dict(spec)
    assert named in str(info.value)


@pytest.mark.parametrize("joiner", ["$and", "$or"])
@pytest.mark.parametrize("levels", [MAX_NESTING + 1, 10_000])
def test_a_filter_nested_too_deep_is_a_typed_error(joiner: str, levels: int) -> None:
    spec: dict[str, Any] = {"tags": "a"}
    for _ in range(levels):
        spec = {joiner: [spec]}
    with pytest.raises(InvalidInputError, match=f"more than {MAX_NESTING} levels"):
        filters_from_dict(spec)


def test_knowledge_leaves_out_conversation_and_inputs() -> None:
    # A chat log's kept record of a large message, and an L1 session's state (no text).
    kept = {INPUT_TYPE, "ChatMarks", "SessionState"}
    assert set(knowledge_filters().exclude_types) == {"Turn", "ChatMessage", *kept}
    assert set(knowledge_filters(include_turns=True).exclude_types) == kept
    assert DEFAULT_K == 4
