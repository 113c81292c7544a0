"""Index fields: the text-like rule, the field paths, their checks and their stored form."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gliding_core import ConfigError, InvalidInputError, StoreConfig
from gliding_core.fields import (
    LEGACY,
    check_by_type,
    check_index,
    decode,
    encode,
    for_types,
    indexed_facets,
    indexed_text,
    is_text_like,
    select,
    unselected,
)
from gliding_core.fields import (
    given as given_by_write,
)
from gliding_core.jsonld import node_references, node_text


@pytest.mark.parametrize(
    "value",
    ["hello", "Melanie paints", "well-known", "e.g.", "Zoë", "東京", "8 May 2023", "Hi!"],
)
def test_text_like(value: str) -> None:
    assert is_text_like(value)


@pytest.mark.parametrize(
    "value",
    [
        "",
        "42",
        "3.14",
        "2023-05-07",
        "12:30",
        "2023-05-07 10:00",
        "2023-05-07T10:00:00Z",
        "D1:3",
        "a1b2c3",
        "123e4567-e89b-12d3-a456-426614174000",
        "https://example.org/x",
        "urn:uuid:1",
        "mailto:ada",
        "ex:thing",
        "ada@example.org",
        "docs/readme",
        "snake_case_id",
        "#anchor",
        "+1 555 0100",
        "---",
    ],
)
def test_not_text_like(value: str) -> None:
    assert not is_text_like(value)


def test_the_default_takes_text_like_strings_and_leaves_keywords_and_references() -> None:
    node = {
        "@id": "urn:n:1",
        "@type": "Note",
        "body": {"@value": "bonjour le monde", "@language": "fr"},
        "about": {"@id": "urn:topic:weather"},
        "count": 3,
        "done": True,
        "parts": ["first part", "P-17", {"deep": "deep words"}],
    }
    assert indexed_text(node, None) == "bonjour le monde\nfirst part\ndeep words"
    assert indexed_text(node, False) == ""


def test_the_whole_node_is_the_text_of_every_string_and_number() -> None:
    node = {"@id": "urn:n:1", "a": "x1", "b": [2, {"c": "text"}], "d": False}
    assert indexed_text(node, LEGACY) == node_text(node) == "x1\n2\ntext"
    assert indexed_text(node, ("$",)) == node_text(node)


def test_paths_select_as_langgraph_says() -> None:
    node = {
        "a": {"b": {"c": "deep"}},
        "list": [{"k": "one"}, {"k": "two"}, {"k": "three"}],
        "people": [{"name": "Ada"}, {"name": "Alan"}],
    }
    assert select(node, "a.b.c") == ["deep"]
    assert select(node, "list[0].k") == ["one"]
    assert select(node, "list[-1].k") == ["three"]
    assert select(node, "list[*].k") == ["one", "two", "three"]
    assert select(node, "list[9].k") == []
    assert select(node, "people.name") == ["Ada", "Alan"]  # a key on a list: each element
    assert select(node, "a.missing") == []
    assert unselected(node, ("a.b", "nope", "list[5]")) == ["nope", "list[5]"]
    assert indexed_text(node, ("people.name", "a")) == "Ada\nAlan\ndeep"


@given(st.recursive(st.text() | st.integers() | st.booleans(), st.lists, max_leaves=20))
def test_text_is_a_pure_function_of_node_and_fields(value: Any) -> None:
    node = {"@id": "urn:x", "v": value}
    for fields in (None, False, LEGACY, ("v",)):
        assert indexed_text(node, fields) == indexed_text(dict(node), fields)
    assert indexed_text(node, ("v",)) == indexed_text(node, LEGACY)


def _spec_text_like(value: Any) -> list[str]:
    """The default text, as the module docstring states it: text-like strings in document
    order, nothing under a keyword but ``@value``."""
    if isinstance(value, str):
        return [value] if value and is_text_like(value) else []
    if isinstance(value, list):
        return [text for item in value for text in _spec_text_like(item)]
    if isinstance(value, dict):
        return [
            text
            for key, item in value.items()
            if not key.startswith("@") or key == "@value"
            for text in _spec_text_like(item)
        ]
    return []


_KEYS = st.sampled_from(["text", "name", "@value", "@language", "@reverse", "@list", "@id", "k"])
_VALUES = st.recursive(
    st.text(max_size=12)
    | st.sampled_from(["two words", "urn:a", "D1:3", "en", "2023-05-07"])
    | st.integers()
    | st.booleans()
    | st.builds(lambda t: {"@id": t}, st.sampled_from(["urn:a", "urn:self", ""])),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(_KEYS, inner, max_size=4),
    max_leaves=25,
)


@given(st.dictionaries(_KEYS, _VALUES, max_size=5))
def test_one_walk_gives_the_references_and_the_text_of_each_rule(node: dict[str, Any]) -> None:
    # The store takes a node's references and its text from one walk (indexed_facets); it must
    # give what the two separate definitions give, or the full-text index could not take an
    # entry's text out again.
    node["@id"] = "urn:self"
    assert indexed_text(node, None) == "\n".join(_spec_text_like(node))
    for fields in (None, LEGACY, ("text", "k")):
        assert indexed_facets(node, fields) == (node_references(node), indexed_text(node, fields))


def test_keywords_hold_references_but_no_default_text() -> None:
    node = {"@id": "urn:n", "@reverse": {"cites": {"@id": "urn:m"}, "note": "hidden words"}}
    assert indexed_facets(node, None) == ([("cites", "urn:m")], "")
    assert indexed_facets(node, LEGACY) == ([("cites", "urn:m")], "hidden words")


def test_check_index() -> None:
    assert check_index(None) is None
    assert check_index(True) is None
    assert check_index(False) is False
    assert check_index(["a", "b", "a"]) == ("a", "b")
    assert check_index(("a.b[0]", "c[*]", "d[-1].e")) == ("a.b[0]", "c[*]", "d[-1].e")
    for bad in ("a", 0, 1.0, {"a"}, {"a": 1}, [], [""], [1], ["a..b"], ["a["]):
        with pytest.raises(InvalidInputError):
            check_index(bad)


def test_an_error_names_the_bad_path() -> None:
    with pytest.raises(InvalidInputError, match=r"'turns\[x\]'"):
        check_index(["text", "turns[x]"])


def test_per_type_fields() -> None:
    table = check_by_type({"A": ["x"], "B": ["y", "x"], "C": False})
    assert table == {"A": ("x",), "B": ("y", "x"), "C": False}
    assert for_types(("Z",), table) is None
    assert for_types(("C",), table) is False
    assert for_types(("C", "A"), table) == ("x",)
    assert for_types(("A", "B"), table) == ("x", "y")


@pytest.mark.parametrize(
    "table",
    [
        {"A": True},
        {"A": None},
        {"A": "text"},
        {"A": []},
        {"A": ["bad..path"]},
        {"": ["x"]},
        {"A\n": ["x"]},
        {1: ["x"]},
        ["A"],
    ],
)
def test_a_bad_table_is_a_config_error_naming_it(table: Any) -> None:
    with pytest.raises(ConfigError, match="index_fields"):
        StoreConfig(index_fields=table)


def test_the_config_holds_the_checked_table() -> None:
    config = StoreConfig(index_fields={"Turn": ["text"], "Secret": False})
    assert config.index_fields == {"Turn": ("text",), "Secret": False}
    assert StoreConfig().index_fields == {}


def test_stored_form_round_trips() -> None:
    for fields in (None, False, ("a",), ("a.b[0]", "c")):
        assert decode(encode(fields)) == fields
        assert decode(encode(fields, derived=True)) == fields
    assert given_by_write(encode(("a",)))
    assert not given_by_write(encode(("a",), derived=True))
    assert not given_by_write(None)
    with pytest.raises(InvalidInputError):
        decode("not json")
