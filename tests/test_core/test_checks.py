"""``entry.check_list``: the one check of a list parameter, shared by the blackboard's API."""

from __future__ import annotations

import pytest

from gliding_core.checks import check_list
from gliding_core.errors import InvalidInputError
from gliding_core.jsonld import preview


def test_a_list_is_returned_as_it_is() -> None:
    items = ["urn:a", "urn:b"]
    assert check_list(items, what="iris") is items


@pytest.mark.parametrize(
    "value",
    [("urn:a", "urn:b"), {"urn:a"}, frozenset({"urn:a"}), range(2), {"k": 1}.keys()],
    ids=["tuple", "set", "frozenset", "range", "keys"],
)
def test_other_sequences_and_sets_become_lists(value: object) -> None:
    assert check_list(value, what="iris") == list(value)  # type: ignore[call-overload]


@pytest.mark.parametrize(
    "value",
    ["urn:a", b"urn:a", bytearray(b"a"), {"urn:a": 1}, iter(["urn:a"]), 5, None],
    ids=["str", "bytes", "bytearray", "dict", "iterator", "int", "none"],
)
def test_a_string_a_mapping_an_iterator_or_a_scalar_is_refused_naming_it(value: object) -> None:
    with pytest.raises(InvalidInputError) as refused:
        check_list(value, what="iris")
    assert str(refused.value) == f"iris must be a list (or a tuple, a set), got {preview(value)}"
