"""EntryStore contract: index fields, which properties of a node its searches see.

Every test runs on each implementation in ``conftest.ENTRY_STORES``. A property outside an
entry's index fields is kept, returned and filterable, but no search finds the entry by it,
and it does not move the entry's rank; the change log (what the dense index embeds) carries
the same text as the full-text index.
"""

from __future__ import annotations

from typing import Any

import pytest

from gliding_core import EntryStore, InvalidInputError, Record
from gliding_core.fields import MAX_PATHS
from tests.test_core.contracts.conftest import Backend

# A fact with provenance: who said it, where it came from, when, under which id.
FACT: dict[str, Any] = {
    "@id": "urn:f:1",
    "@type": "Fact",
    "text": "Melanie paints sunrises over the lake",
    "speaker": "Caroline",
    "source": "https://example.org/archive/zebra",
    "date": "2023-05-07",
    "turn": "D1:3",
    "rank": 42,
}


def _ids(store: EntryStore, query: str) -> list[str]:
    return [iri for iri, _ in store.search_ids(query, limit=10)]


def _logged(store: EntryStore, iri: str) -> str | None:
    """The text the change log gives the dense index for ``iri`` (``None``: none; an entry
    written without text is no change of text)."""
    texts = {i: text for _, i, text in store.changes_since(0, limit=1_000)}
    return texts.get(iri)


# -- the default: the text-like values -------------------------------------------------------


def test_by_default_identifiers_iris_dates_and_numbers_are_not_searched(
    entry_store: EntryStore,
) -> None:
    entry_store.put(FACT)
    assert _ids(entry_store, "sunrises") == ["urn:f:1"]
    assert _ids(entry_store, "Caroline") == ["urn:f:1"]  # a name is text: name the fields
    for word in ("zebra", "archive", "2023", "D1", "42"):
        assert _ids(entry_store, word) == [], word
    entry = entry_store.get("urn:f:1")
    assert entry is not None
    assert entry.node == FACT  # kept and returned whole
    assert [e.iri for e in entry_store.by_type("Fact")] == ["urn:f:1"]  # and filterable
    text = _logged(entry_store, "urn:f:1")
    assert text == "Caroline\nMelanie paints sunrises over the lake"  # in key order
    assert entry_store.searchable_texts(["urn:f:1"]) == {"urn:f:1": text}
    assert entry_store.indexed_with(["urn:f:1"]) == {"urn:f:1": None}


# -- per @type -------------------------------------------------------------------------------


@pytest.mark.store_config(index_fields={"Fact": ["text"], "Hidden": False})
def test_the_fields_of_a_type_are_its_only_searched_text(entry_store: EntryStore) -> None:
    entry_store.put(FACT)
    entry_store.put({"@id": "urn:f:2", "@type": "Fact", "text": "Caroline bakes bread"})
    entry_store.put({"@id": "urn:h:1", "@type": "Hidden", "text": "Caroline's secret"})
    entry_store.put({"@id": "urn:n:1", "@type": "Note", "text": "a note", "by": "Caroline"})
    # The speaker of urn:f:1 neither finds it nor ranks it: only the text that says the name.
    assert sorted(_ids(entry_store, "Caroline")) == ["urn:f:2", "urn:n:1"]
    assert _ids(entry_store, "sunrises") == ["urn:f:1"]
    assert _logged(entry_store, "urn:f:1") == FACT["text"]
    assert _logged(entry_store, "urn:h:1") is None
    assert entry_store.get("urn:h:1") is not None
    assert entry_store.indexed_with(["urn:f:1", "urn:h:1", "urn:n:1"]) == {
        "urn:f:1": ("text",),
        "urn:h:1": False,
        "urn:n:1": None,
    }


@pytest.mark.store_config(index_fields={"Fact": ["text"]})
def test_a_provenance_field_does_not_change_the_scores(entry_store: EntryStore) -> None:
    plain = {"@id": "urn:f:1", "@type": "Fact", "text": "the lake at sunrise"}
    entry_store.put(plain)
    entry_store.put({"@id": "urn:f:2", "@type": "Fact", "text": "sunrise sunrise"})
    before = dict(entry_store.search_ids("sunrise lake"))
    entry_store.put({**plain, "speaker": "sunrise lake sunrise lake", "note": "lake"})
    assert dict(entry_store.search_ids("sunrise lake")) == pytest.approx(before)


# -- per write -------------------------------------------------------------------------------


def test_a_write_names_its_fields(entry_store: EntryStore) -> None:
    node = {"@id": "urn:d:1", "title": "Harbour report", "body": "tides and ferries", "n": 7}
    entry_store.put(node, index=["title", "n"])
    assert _ids(entry_store, "harbour") == ["urn:d:1"]
    assert _ids(entry_store, "7") == ["urn:d:1"]  # named, so indexed though a number
    assert _ids(entry_store, "ferries") == []
    assert entry_store.indexed_with(["urn:d:1"]) == {"urn:d:1": ("title", "n")}


def test_paths_reach_into_objects_and_lists(entry_store: EntryStore) -> None:
    node = {
        "@id": "urn:d:1",
        "author": {"name": "Ada", "mail": "ada@example.org"},
        "turns": [{"text": "first words"}, {"text": "middle words"}, {"text": "last words"}],
        "tags": ["alpha", "omega"],
    }
    entry_store.put(node, index=["author.name", "turns[0].text", "turns[-1].text", "tags[*]"])
    assert _logged(entry_store, "urn:d:1") == "Ada\nfirst words\nlast words\nalpha\nomega"
    assert _ids(entry_store, "middle") == []


def test_index_false_leaves_the_entry_unsearched_but_kept(entry_store: EntryStore) -> None:
    entry_store.put(FACT, index=False, tags=["fact"])
    assert _ids(entry_store, "sunrises") == []
    assert _logged(entry_store, "urn:f:1") is None
    assert entry_store.searchable_texts(["urn:f:1"]) == {}
    entry = entry_store.get("urn:f:1")
    assert entry is not None
    assert entry.node == FACT
    assert [e.iri for e in entry_store.by_tags(["fact"])] == ["urn:f:1"]


def test_a_merge_keeps_the_fields_a_write_gave_and_replace_forgets_them(
    entry_store: EntryStore,
) -> None:
    entry_store.put({"@id": "urn:d:1", "title": "Harbour", "body": "ferries"}, index=["title"])
    entry_store.put({"@id": "urn:d:1", "body": "ferries and tides"})
    assert _ids(entry_store, "tides") == []
    assert entry_store.indexed_with(["urn:d:1"]) == {"urn:d:1": ("title",)}
    entry_store.replace({"@id": "urn:d:1", "title": "Harbour", "body": "ferries and tides"})
    assert _ids(entry_store, "tides") == ["urn:d:1"]
    assert entry_store.indexed_with(["urn:d:1"]) == {"urn:d:1": None}


def test_changing_the_fields_takes_the_old_text_out_of_the_index(
    entry_backend: Backend[EntryStore], entry_store: EntryStore
) -> None:
    node = {"@id": "urn:d:1", "title": "Harbour", "body": "ferries"}
    entry_store.put(node)
    assert _ids(entry_store, "ferries") == ["urn:d:1"]
    entry_store.put(node, index=["title"])  # the same content, other fields: a change of text
    assert _ids(entry_store, "ferries") == []
    assert _ids(entry_store, "harbour") == ["urn:d:1"]
    assert _logged(entry_store, "urn:d:1") == "Harbour"
    entry_store.put(node, index=False)
    assert _ids(entry_store, "harbour") == []
    entry_store.put(node, index=["body"])
    assert _ids(entry_store, "ferries") == ["urn:d:1"]
    assert entry_store.delete("urn:d:1")
    assert _ids(entry_store, "ferries") == []
    if entry_backend.verify is not None:
        entry_backend.verify(entry_store)


def test_records_carry_their_fields_in_a_batch(entry_store: EntryStore) -> None:
    entry_store.put_many(
        [
            Record({"@id": "urn:a", "title": "apples", "body": "pears"}, index=["title"]),
            Record({"@id": "urn:b", "title": "plums", "body": "pears"}, index=False),
            {"@id": "urn:c", "body": "pears"},
        ]
    )
    assert _ids(entry_store, "pears") == ["urn:c"]
    assert _ids(entry_store, "apples") == ["urn:a"]


# -- refusals: nothing is written ------------------------------------------------------------


@pytest.mark.parametrize(
    "index",
    [
        "text",  # a string, not a list of paths
        b"text",
        7,
        {"text": True},
        [],
        [""],
        [None],
        [3],
        ["text", ["body"]],
        ["a..b"],
        [".text"],
        ["text."],
        ["[0]"],
        ["turns[x]"],
        ["turns[0"],
        ["turns]0["],
        [" text"],
        ["@id"],
        ["a.@type"],
        ["x" * 600],
        [".".join(["a"] * 40)],
        [f"field{i}" for i in range(MAX_PATHS + 1)],
    ],
)
def test_a_bad_index_is_refused_and_writes_nothing(entry_store: EntryStore, index: Any) -> None:
    with pytest.raises(InvalidInputError) as raised:
        entry_store.put({"@id": "urn:d:1", "text": "words"}, index=index)
    assert "index" in str(raised.value)
    with pytest.raises(InvalidInputError):
        entry_store.put_many([{"@id": "urn:d:2"}, Record({"@id": "urn:d:3"}, index=index)])
    assert entry_store.count() == 0


def test_a_path_that_selects_nothing_is_refused_whole(entry_store: EntryStore) -> None:
    entry_store.put({"@id": "urn:d:0", "text": "kept"})
    with pytest.raises(InvalidInputError, match="'txet'"):
        entry_store.put_many(
            [
                {"@id": "urn:d:1", "text": "one"},
                Record({"@id": "urn:d:2", "text": "two"}, index=["txet"]),
            ]
        )
    with pytest.raises(InvalidInputError, match="'body'"):
        entry_store.put({"@id": "urn:d:0", "text": "changed"}, index=["body"])
    assert entry_store.count() == 1
    entry = entry_store.get("urn:d:0")
    assert entry is not None
    assert entry.node["text"] == "kept"
    assert _ids(entry_store, "kept") == ["urn:d:0"]
    # A merge may name a field the stored entry has, though the request lacks it.
    entry_store.put({"@id": "urn:d:0", "extra": "more words"}, index=["text"])
    assert _ids(entry_store, "more") == []
    assert _ids(entry_store, "kept") == ["urn:d:0"]


def test_index_true_is_the_default(entry_store: EntryStore) -> None:
    entry_store.put(FACT, index=True)  # a careless caller
    assert entry_store.indexed_with(["urn:f:1"]) == {"urn:f:1": None}
