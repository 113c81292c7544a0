"""check_arguments and tool_refusal: a tool call's arguments bounded first, every failure a text."""

from __future__ import annotations

import logging
from typing import Any, Literal

import pytest
from hypothesis import HealthCheck, given, settings
from pydantic import BaseModel, Field

from gliding_core import InvalidInputError, StaleWriteError
from gliding_core.tools.arguments import (
    MAX_ARGUMENT_CHARS,
    MAX_ARGUMENT_DEPTH,
    MAX_ARGUMENT_VALUES,
    check_arguments,
    tool_refusal,
)
from gliding_core.tools.board_tools import board_refusal
from tests.test_core.hostile_calls import JSON_VALUES, deep_dict, deep_json, deep_list


class Schema(BaseModel):
    """A tool's arguments, as the adapters' schemas declare them."""

    iri: str = Field(description="A node.")
    payload: dict[str, Any] | None = None
    since: int = Field(default=0, ge=0)
    mode: Literal["read", "write"] = "write"


def check(arguments: object) -> dict[str, Any]:
    return check_arguments(arguments, Schema, tool="probe")


def nested(levels: int) -> dict[str, Any]:
    """Arguments ``levels`` deep in all: the arguments object and ``levels - 1`` objects below."""
    return {"iri": "urn:a", "payload": deep_dict(levels - 1)}


def test_valid_arguments_come_back_validated_and_only_those_given() -> None:
    assert check({"iri": "urn:a", "since": 3}) == {"iri": "urn:a", "since": 3}
    assert check('{"iri": "urn:a", "payload": {"k": [1, 2.5, null]}}') == {
        "iri": "urn:a",
        "payload": {"k": [1, 2.5, None]},
    }


@pytest.mark.parametrize(
    ("arguments", "says"),
    [
        ({"iri": "urn:a", "agent": "planner"}, "probe takes no argument 'agent'"),
        ({"payload": {}}, "iri is missing (it is required)"),
        ({"iri": ["urn:a"]}, "iri: Input should be a valid string, got ['urn:a']"),
        ({"iri": "urn:a", "since": "5"}, "since: Input should be a valid integer"),
        ({"iri": "urn:a", "since": True}, "since: Input should be a valid integer"),
        ({"iri": "urn:a", "since": -1}, "since: Input should be greater than or equal to 0"),
        ({"iri": "urn:a", "mode": "shared"}, "mode: Input should be 'read' or 'write'"),
        ({"iri": None}, "iri: Input should be a valid string, got None"),
        (["urn:a"], "must be a JSON object of named arguments, got list"),
        ("[1]", "must be a JSON object of named arguments, got list"),
        ('{"iri": ', "are no JSON text"),
        ({"iri": "urn:a", 1: "x"}, "a key that is no string at $: 1"),
        ({"iri": "urn:a", "payload": {"v": float("nan")}}, "hold nan at $.payload.v"),
        ({"iri": "urn:a", "payload": {"v": [2**64]}}, "integer out of range at $.payload.v[0]"),
        ({"iri": "urn:\ud800"}, "holds a lone surrogate"),
        ({"iri": "urn:a", "payload": {"\udfff": 1}}, "holds a lone surrogate"),
        ({"iri": "urn:a", "payload": {"v": (1, 2)}}, "hold a tuple at $.payload.v, no JSON"),
    ],
)
def test_a_bad_call_is_refused_naming_what_is_wrong(arguments: object, says: str) -> None:
    with pytest.raises(InvalidInputError) as refused:
        check(arguments)
    assert says in str(refused.value)


def test_a_refusal_of_the_arguments_says_how_to_call_the_tool() -> None:
    with pytest.raises(InvalidInputError, match="bound to the tool") as refused:
        check({"iri": "urn:a", "role": "plan"})
    assert str(refused.value).endswith(
        "Call probe again with its arguments only: iri (string, required), payload (object or"
        ' null), since (integer), mode ("read" or "write").'
    )


def test_the_limits_hold_to_the_unit() -> None:
    check(nested(MAX_ARGUMENT_DEPTH))
    with pytest.raises(InvalidInputError, match=f"more than {MAX_ARGUMENT_DEPTH} levels deep"):
        check(nested(MAX_ARGUMENT_DEPTH + 1))
    check({"iri": "urn:a", "payload": {"v": [0] * (MAX_ARGUMENT_VALUES - 3)}})
    with pytest.raises(InvalidInputError, match="more than 65,536 values"):
        check({"iri": "urn:a", "payload": {"v": [0] * (MAX_ARGUMENT_VALUES - 2)}})
    room = MAX_ARGUMENT_CHARS - len("iri") - len("payload") - len("v")
    check({"iri": "", "payload": {"v": "x" * room}})
    with pytest.raises(InvalidInputError, match="more than 1,048,576 characters"):
        check({"iri": "", "payload": {"v": "x" * (room + 1)}})


@pytest.mark.parametrize("levels", [1_200, 100_000])
def test_deep_arguments_are_refused_as_values_and_as_text(levels: int) -> None:
    for arguments in ({"iri": deep_dict(levels)}, {"iri": deep_list(levels)}):
        with pytest.raises(InvalidInputError, match="levels deep"):
            check(arguments)
    with pytest.raises(InvalidInputError, match="nest"):
        check(deep_json(levels))


def test_text_over_the_limit_is_refused_before_it_is_parsed() -> None:
    # Not JSON at all: the length is what is refused, so the parser never saw it.
    with pytest.raises(InvalidInputError, match="characters of text, over the limit"):
        check("{" * (MAX_ARGUMENT_CHARS + 1))


class _Bomb(list):  # type: ignore[type-arg]
    """A list that says it is huge and fails if anything walks it."""

    def __len__(self) -> int:
        return 10_000_000

    def __iter__(self) -> Any:
        raise AssertionError("walked")


def test_a_container_over_the_limit_is_refused_before_its_items_are_walked() -> None:
    with pytest.raises(InvalidInputError, match="values"):
        check({"iri": "urn:a", "payload": {"v": _Bomb()}})


def test_tool_refusal_words_our_refusals_and_never_leaks_another_error() -> None:
    stale = StaleWriteError(
        "stale", iri="urn:a", based_on=0, current_generation=2, current_value={"x": 1}
    )
    assert tool_refusal(stale, tool="write_node", refusal=board_refusal).startswith(
        "Error: stale write: 'urn:a' is at generation 2"
    )
    assert tool_refusal(InvalidInputError("bad"), tool="t") == "Error: bad"
    leaked = tool_refusal(RuntimeError("my password is hunter2"), tool="t")
    assert leaked.startswith("Error: t failed on these arguments (RuntimeError")
    assert "hunter2" not in leaked


def test_tool_refusal_survives_a_refusal_that_fails(caplog: pytest.LogCaptureFixture) -> None:
    def broken(error: Exception) -> str:
        raise ValueError("no words")

    with caplog.at_level(logging.WARNING, logger="gliding_core.tools.arguments"):
        text = tool_refusal(InvalidInputError("bad"), tool="t", refusal=broken)
    assert text.startswith("Error: t failed")
    assert "could not be worded" in caplog.text


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(arguments=JSON_VALUES)
def test_any_value_is_accepted_or_refused_by_our_error_only(arguments: object) -> None:
    for candidate in (arguments, {"iri": "urn:a", "payload": {"v": arguments}}):
        try:
            checked = check(candidate)
        except InvalidInputError:
            continue  # any other exception fails the test
        Schema.model_validate(checked, strict=True)
