"""A history holding a hostile model's tool calls: counted, viewed, archived and logged, bounded.

A prompt-injected model calls a tool with arguments nested 1,200 or 100,000 deep (built
iteratively), ten megabytes long, or holding values JSON has not; the tool refuses, and the call
stays in the history. Before ``framing.bounded_call``, the next view raised ``RecursionError``
from ``ChatFraming.message_tokens`` (its ``json.dumps`` of the calls) or counted ten megabytes
of arguments at every step, and the chat log could not store the message. Now a record keeps
such a call with its id, its name and a marker saying why its arguments were left out, and
everything else of the history as it was.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from gliding_core import (
    ChatFraming,
    Conversation,
    HashEmbedder,
    InvalidInputError,
    Memory,
    Scope,
    TokenCounter,
)
from gliding_core.framing import (
    CALL_LIMITS,
    ELIDED,
    MAX_CALL_BYTES,
    MAX_CALL_LABEL,
    bounded_call,
    check_messages,
    is_elided,
)
from gliding_core.view.chatlog import ChatLog
from gliding_core.view.stale_turns import node_copies
from tests.test_core.hostile_calls import MB10, deep_dict, deep_list

FRAMING = ChatFraming(TokenCounter())
TASK = "urn:task:hostile-history"

# Arguments a tool refuses, as a model sends them; each with what the marker says.
HOSTILE: dict[str, tuple[Callable[[], Any], str]] = {
    "deep-1200-objects": (lambda: {"iri": deep_dict(1_200)}, "levels deep"),
    "deep-1200-arrays": (lambda: {"iri": deep_list(1_200)}, "levels deep"),
    "deep-100000-objects": (lambda: {"payload": deep_dict(100_000)}, "levels deep"),
    "deep-100000-arrays": (lambda: {"payload": deep_list(100_000)}, "levels deep"),
    "huge-10MB": (lambda: {"iri": "x" * MB10}, "characters of text"),
    "huge-key": (lambda: {"k" * MB10: 1}, "characters of text"),
    "wide": (lambda: {"payload": [0] * 1_000_000}, "values"),
    "many-bytes": (lambda: {"payload": ["\u00e9" * 200] * 900}, "bytes of JSON"),
    "nan": (lambda: {"since": math.nan}, "numbers must be finite"),
    "huge-int": (lambda: {"since": 2**70}, "64 bits"),
    "surrogate": (lambda: {"iri": "urn:\ud800"}, "lone surrogate"),
    "int-key": (lambda: {"payload": {1: "x"}}, "no string"),
    "bytes": (lambda: {"iri": b"urn:x"}, "no JSON value"),
}


def hostile_history(arguments: Any, *, name: str = "read_node") -> list[dict[str, Any]]:
    """A user turn, the model's call with ``arguments``, the tool's refusal, the final answer."""
    return [
        {"role": "user", "content": "Plan the launch; the budget is 4,100 euros.", "id": "u1"},
        {
            "role": "assistant",
            "content": "Reading the plan first.",
            "id": "a1",
            "tool_calls": [{"id": "call-1", "name": name, "args": arguments}],
        },
        {
            "role": "tool",
            "content": "Error: the arguments were refused",
            "tool_call_id": "call-1",
            "id": "t1",
        },
        {"role": "assistant", "content": "The launch plan is ready.", "id": "a2"},
    ]


@pytest.fixture
def memory() -> Iterator[Memory]:
    with Memory(embedder=HashEmbedder()) as value:
        yield value


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_a_hostile_call_keeps_its_id_and_name_and_says_why_its_arguments_were_left_out(
    case: str,
) -> None:
    build, says = HOSTILE[case]
    arguments = build()
    bounded = bounded_call({"id": "call-1", "name": "read_node", "args": arguments})
    assert is_elided(bounded)
    assert (bounded["id"], bounded["name"]) == ("call-1", "read_node")
    marker = bounded["args"][ELIDED]
    assert marker.startswith("the arguments of this call were left out of the chat record")
    assert says in marker
    text = json.dumps(bounded)  # small, valid JSON, and valid Unicode
    assert len(text) < 1_000
    text.encode("utf-8")
    assert bounded_call(bounded) == bounded  # bounding a bounded call changes nothing


def test_a_call_within_the_limits_is_kept_as_it_is() -> None:
    arguments = {
        "node": {"@id": "urn:n:1", "text": "x" * (MAX_CALL_BYTES // 2), "deep": deep_dict(25)},
        "area": "execution",
        "based_on": 3,
        "ratio": 0.5,
    }
    call = {"id": "c", "name": "write_node", "args": arguments, "type": "tool_call"}
    bounded = bounded_call(call)
    assert bounded == call
    assert bounded is not call
    assert bounded["args"] is arguments  # not copied
    assert not is_elided(bounded)


def test_the_limits_are_where_they_are_said_to_be() -> None:
    # The call is level 1, its args level 2: objects down to the depth limit are kept.
    at_limit = {"id": "c", "name": "t", "args": deep_dict(CALL_LIMITS.depth - 1)}
    assert not is_elided(bounded_call(at_limit))
    assert is_elided(bounded_call({**at_limit, "args": deep_dict(CALL_LIMITS.depth)}))
    under = "y" * (MAX_CALL_BYTES - 100)
    assert not is_elided(bounded_call({"args": {"t": under}}))
    assert is_elided(bounded_call({"args": {"t": under + "y" * 200}}))


def test_an_elided_call_keeps_a_label_cut_to_its_limit_and_valid_unicode() -> None:
    long_name = "n" * (MAX_CALL_LABEL * 4)
    bounded = bounded_call({"id": "\udfff" + "i" * 10, "name": long_name, "args": {"a": math.inf}})
    assert bounded["name"] == "n" * MAX_CALL_LABEL + "..."
    bounded["id"].encode("utf-8")
    assert bounded["id"].endswith("i" * 10)
    anonymous = bounded_call({"args": deep_list(2_000), "id": None, "name": 7})
    assert set(anonymous) == {"id", "args"}  # an id that is not a string is kept as None
    assert anonymous["id"] is None


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_counting_a_hostile_history_counts_its_bounded_form(case: str) -> None:
    history = hostile_history(HOSTILE[case][0]())
    checked = check_messages(history)
    assert is_elided(checked[1]["tool_calls"][0])
    assert history[1]["tool_calls"][0]["args"] is not checked[1]["tool_calls"][0]["args"]
    total = FRAMING.count(history)
    assert total == FRAMING.count(checked)
    assert total < 400  # ten megabytes would be over a million tokens
    assert FRAMING.message_tokens(history[1]) == FRAMING.message_tokens(checked[1])
    assert FRAMING.group_tokens(history[1:3]) == FRAMING.group_tokens(checked[1:3])


@pytest.mark.parametrize(
    "case", ["deep-1200-objects", "deep-100000-arrays", "huge-10MB", "nan", "surrogate"]
)
def test_a_conversation_views_and_archives_a_hostile_history_and_loses_no_content(
    memory: Memory, case: str
) -> None:
    chat = Conversation(memory, TASK, budget=600)
    history = hostile_history(HOSTILE[case][0]())
    turns = chat.record(history)
    assert [turn.role for turn in turns] == ["user", "assistant", "tool", "assistant"]
    archived = [memory.store.get(turn.l0_archive_iri) for turn in turns]
    texts = [entry.node["text"] for entry in archived if entry is not None]
    assert texts == [
        "Plan the launch; the budget is 4,100 euros.",
        "Reading the plan first. (calls read_node)",
        "Error: the arguments were refused",
        "The launch plan is ready.",
    ]
    view = chat.view(history)
    assert [m["content"] for m in view.messages if not m.get("memory")] == [
        m["content"] for m in history
    ]
    call = view.messages[1]["tool_calls"][0]
    assert is_elided(call)
    assert (call["id"], call["name"]) == ("call-1", "read_node")
    assert view.tokens == FRAMING.count(view.messages)
    assert view.tokens <= 600


def test_a_model_reply_with_ordinary_arguments_is_kept_whole_in_view_and_archive(
    memory: Memory,
) -> None:
    chat = Conversation(memory, TASK, budget=4_000)
    arguments = {"node": {"@id": "urn:n:1", "text": "the launch is on the ninth"}, "area": "plan"}
    history = hostile_history(arguments, name="write_node")
    chat.record(history)
    view = chat.view(history)
    assert view.messages[1]["tool_calls"] == history[1]["tool_calls"]


@pytest.mark.parametrize("case", ["deep-100000-objects", "huge-10MB", "surrogate"])
def test_the_chat_log_keeps_a_hostile_message_with_its_content_and_the_marker(
    memory: Memory, case: str
) -> None:
    log = ChatLog(Conversation(memory, scope=Scope.thread("t1")))
    history = hostile_history(HOSTILE[case][0]())
    log.append(history)
    logged = log.messages()
    assert [m.record["content"] for m in logged] == [m["content"] for m in history]
    call = logged[1].record["tool_calls"][0]
    assert is_elided(call)
    assert HOSTILE[case][1] in call["args"][ELIDED]
    again = ChatLog(Conversation(memory, scope=Scope.thread("t1"))).messages()  # reread from L0
    assert [m.record for m in again] == [m.record for m in logged]


def test_a_tool_result_nested_too_deep_to_parse_quotes_no_node(memory: Memory) -> None:
    chat = Conversation(memory, TASK, budget=600)
    deep_text = "[" * 100_000 + "]" * 100_000
    history = hostile_history({"iri": "urn:n:1"})
    history[2] = {**history[2], "content": '{"view": ' + deep_text + "}"}
    history.append({"role": "tool", "content": deep_text, "tool_call_id": "call-1", "id": "t2"})
    assert node_copies(history) == ()
    chat.record(history)
    assert chat.view(history).tokens <= 600


@pytest.mark.parametrize(
    ("message", "says"),
    [
        ({"role": "assistant", "tool_calls": "read_node"}, "tool_calls must be a list"),
        ({"role": "assistant", "tool_calls": {"id": "c"}}, "tool_calls must be a list"),
        ({"role": "assistant", "tool_calls": [["c", "read_node"]]}, "must be a mapping"),
        ({"role": "user", "content": [deep_list(100_000)]}, "levels deep"),
        ({"role": "user", "content": [{"type": "text", "text": "\ud800"}]}, "lone surrogate"),
        ({"role": "user", "content": [{"type": "text", "n": math.nan}]}, "finite"),
    ],
)
def test_a_malformed_record_is_refused_naming_what_is_wrong(
    message: dict[str, Any], says: str
) -> None:
    with pytest.raises(InvalidInputError, match=says):
        check_messages([message])
    with pytest.raises(InvalidInputError, match=says):
        FRAMING.message_tokens(message)
