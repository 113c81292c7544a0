"""EntryStore contract: texts of any size (``put_text``, ``full_text``).

A node over ``max_content_bytes`` is refused by ``put``; a text of any size is kept whole by
``put_text``: the node holds a bounded head, every byte is kept beside it, full-text search
covers all of it, and a later change of the text, or a delete, takes the parts out. The limits
are made small here so that the tests stay fast; the code paths are those of the defaults.
"""

from __future__ import annotations

import pytest

from gliding_core import ContentTooLargeError, EntryStore, InvalidInputError
from gliding_core.store.filters import SearchFilters
from tests.test_core.contracts.conftest import Backend

pytestmark = pytest.mark.store_config(max_content_bytes=4_096, text_head_bytes=512)

# Over the limit, with characters of one to four bytes, so a cut on a byte count lands inside
# characters; the word at the very end is far past any head.
LARGE = "".join(
    f"line {i}: caf\u00e9 \u732b \U0001f600 reading {i * 7} units. " for i in range(400)
)
LARGE += "the last word is zanzibar"


def _size(text: str) -> int:
    return len(text.encode("utf-8"))


def test_put_still_refuses_a_node_over_the_limit(entry_store: EntryStore) -> None:
    with pytest.raises(ContentTooLargeError, match="max_content_bytes"):
        entry_store.put({"@id": "urn:t:big", "text": LARGE})
    assert "urn:t:big" not in entry_store


def test_put_text_keeps_every_byte_and_the_node_a_bounded_head(entry_store: EntryStore) -> None:
    assert _size(LARGE) > 4 * 4_096
    iri = entry_store.put_text({"@id": "urn:t:big", "role": "tool"}, LARGE, tags=["t"])

    assert iri == "urn:t:big"
    assert entry_store.full_text(iri) == LARGE
    entry = entry_store.get(iri)
    assert entry is not None
    assert _size(entry.content) <= 4_096
    head = entry.node["text"]
    assert _size(head) <= 512
    assert LARGE.startswith(head.split("\n[...")[0])
    assert "full_text" in head  # the head says where the rest is
    assert entry.node["role"] == "tool"
    assert entry.tags == ("t",)


def test_a_small_text_is_a_plain_put(entry_store: EntryStore) -> None:
    iri = entry_store.put_text({"@id": "urn:t:small"}, "a short text", importance=0.9)
    node = entry_store.get_node(iri)
    assert node == {"@id": "urn:t:small", "text": "a short text"}
    assert entry_store.full_text(iri) == "a short text"


def test_search_covers_the_whole_text_and_ranks_the_entry_once(entry_store: EntryStore) -> None:
    iri = entry_store.put_text({"@id": "urn:t:big"}, LARGE, tags=["t"])
    entry_store.put({"@id": "urn:t:other", "text": "units of reading"}, tags=["u"])

    assert [h.entry.iri for h in entry_store.search_text("zanzibar")] == [iri]
    found = [i for i, _ in entry_store.search_ids("reading units", limit=10)]
    assert sorted(found) == [iri, "urn:t:other"]  # each once, though the big one has two rows
    tagged = entry_store.search_ids("zanzibar", filters=SearchFilters(tags_all=("u",)))
    assert tagged == []  # the filters hold for the parts' matches too


def test_a_write_that_changes_the_text_drops_the_parts(entry_store: EntryStore) -> None:
    iri = entry_store.put_text({"@id": "urn:t:big"}, LARGE)
    entry_store.replace({"@id": iri, "text": "now short"})

    assert entry_store.full_text(iri) == "now short"
    assert entry_store.search_ids("zanzibar") == []
    assert [i for i, _ in entry_store.search_ids("short")] == [iri]


def test_a_write_that_leaves_the_text_keeps_the_parts(entry_store: EntryStore) -> None:
    iri = entry_store.put_text({"@id": "urn:t:big"}, LARGE)
    entry_store.put({"@id": iri}, metadata={"seen": True})
    entry_store.retag(iri, add=["kept"])

    assert entry_store.full_text(iri) == LARGE
    assert [i for i, _ in entry_store.search_ids("zanzibar")] == [iri]


def test_put_text_again_replaces_the_parts(entry_store: EntryStore) -> None:
    iri = entry_store.put_text({"@id": "urn:t:big"}, LARGE)
    other = LARGE.replace("zanzibar", "timbuktu")
    entry_store.put_text({"@id": iri}, other)

    assert entry_store.full_text(iri) == other
    assert entry_store.search_ids("zanzibar") == []
    assert [i for i, _ in entry_store.search_ids("timbuktu")] == [iri]


def test_delete_takes_the_parts_out_and_leaves_the_others(entry_store: EntryStore) -> None:
    iri = entry_store.put_text({"@id": "urn:t:big"}, LARGE)
    kept = entry_store.put_text({"@id": "urn:t:kept"}, LARGE.replace("zanzibar", "timbuktu"))
    assert entry_store.delete(iri)

    assert entry_store.full_text(iri) is None
    assert entry_store.search_ids("zanzibar") == []
    assert [i for i, _ in entry_store.search_ids("timbuktu")] == [kept]
    assert entry_store.full_text(kept) == LARGE.replace("zanzibar", "timbuktu")


def test_the_change_log_carries_the_head_only(entry_store: EntryStore) -> None:
    """A derived index (the dense one) embeds a bounded part of a text kept in parts."""
    start = entry_store.change_sequence()
    iri = entry_store.put_text({"@id": "urn:t:big"}, LARGE)
    ((_, logged, text),) = entry_store.changes_since(start)
    assert logged == iri
    assert text is not None
    assert _size(text) <= 512 + 64
    assert "zanzibar" not in text


def test_a_rolled_back_put_text_leaves_nothing(entry_store: EntryStore) -> None:
    def write_then_fail() -> None:
        with entry_store.transaction():
            entry_store.put_text({"@id": "urn:t:big"}, LARGE)
            raise RuntimeError("abort")

    with pytest.raises(RuntimeError):
        write_then_fail()
    assert entry_store.full_text("urn:t:big") is None
    assert entry_store.search_ids("zanzibar") == []


@pytest.mark.parametrize("text", [None, 42, b"bytes", "lone \ud800 surrogate"])
def test_bad_text_is_refused_and_nothing_is_written(entry_store: EntryStore, text: object) -> None:
    with pytest.raises(InvalidInputError):
        entry_store.put_text({"@id": "urn:t:bad"}, text)  # type: ignore[arg-type]
    assert "urn:t:bad" not in entry_store


def test_full_text_of_a_node_without_text_is_its_searchable_text(entry_store: EntryStore) -> None:
    iri = entry_store.put({"@id": "urn:t:n", "name": "Ada", "born": 1815})
    assert entry_store.full_text(iri) == "Ada"  # the text-like values: not the number
    entry_store.put({"@id": "urn:t:n"}, index=["$"])  # every value
    assert entry_store.full_text(iri) == "1815\nAda"
    assert entry_store.full_text("urn:t:none") is None


def test_another_handle_reads_the_whole_text(shared_entry_backend: Backend[EntryStore]) -> None:
    first = shared_entry_backend.open()
    second = shared_entry_backend.open()
    try:
        iri = first.put_text({"@id": "urn:t:big"}, LARGE)
        assert second.full_text(iri) == LARGE
        assert [i for i, _ in second.search_ids("zanzibar")] == [iri]
    finally:
        first.close()
        second.close()


@pytest.mark.store_config(max_content_bytes=2_048, text_head_bytes=1_024)
def test_a_head_of_characters_json_escapes_still_fits(entry_store: EntryStore) -> None:
    """Control characters take six bytes each in the node's JSON: the head shrinks to fit."""
    text = "\x01" * 20_000 + " tail"
    iri = entry_store.put_text({"@id": "urn:t:escaped"}, text)
    entry = entry_store.get(iri)
    assert entry is not None
    assert _size(entry.content) <= 2_048
    assert entry_store.full_text(iri) == text


def test_a_node_too_large_without_its_text_is_still_refused(entry_store: EntryStore) -> None:
    with pytest.raises(ContentTooLargeError, match="max_content_bytes"):
        entry_store.put_text({"@id": "urn:t:fat", "notes": "n" * 5_000}, LARGE)
    assert "urn:t:fat" not in entry_store
    assert entry_store.search_ids("zanzibar") == []


# -- index fields ------------------------------------------------------------------------------


def _found(store: EntryStore, query: str) -> list[str]:
    return [iri for iri, _ in store.search_ids(query, limit=10)]


def test_put_text_takes_index_fields_as_put_does(entry_store: EntryStore) -> None:
    """The fields name what is searched, in the head and in the parts alike; the text is
    kept and given back whole either way."""
    titled = entry_store.put_text(
        {"@id": "urn:t:titled", "title": "Harbour log"}, LARGE, index=["title"]
    )
    hidden = entry_store.put_text({"@id": "urn:t:hidden", "title": "Quay log"}, LARGE, index=False)
    texted = entry_store.put_text(
        {"@id": "urn:t:texted", "title": "Pier log"},
        LARGE.replace("zanzibar", "timbuktu"),
        index=["text"],
    )
    assert entry_store.indexed_with([titled, hidden, texted]) == {
        titled: ("title",),
        hidden: False,
        texted: ("text",),
    }
    assert _found(entry_store, "harbour") == [titled]
    assert _found(entry_store, "zanzibar") == []  # only in the parts of entries not searched by it
    assert _found(entry_store, "quay") == []
    assert _found(entry_store, "timbuktu") == [texted]  # past the head: found by the parts
    assert _found(entry_store, "pier") == []
    assert entry_store.searchable_texts([titled, hidden]) == {titled: "Harbour log"}
    for iri in (titled, hidden):
        assert entry_store.full_text(iri) == LARGE


def test_a_small_put_text_takes_index_fields_too(entry_store: EntryStore) -> None:
    iri = entry_store.put_text(
        {"@id": "urn:t:small", "title": "Ferry"}, "short words", index=["title"]
    )
    assert entry_store.indexed_with([iri]) == {iri: ("title",)}
    assert _found(entry_store, "short") == []
    assert _found(entry_store, "ferry") == [iri]


@pytest.mark.parametrize("text", [LARGE, "a short text"], ids=["in parts", "whole"])
@pytest.mark.parametrize(
    "index",
    [
        "text",
        [],
        [1],
        ["a..b"],
        ["@id"],
        ["nope"],
        {"text": 1},
        [None],
        ["text", ["title"]],
        [["text"]],
        {"text"},
        range(2),
        ("text",) * 100_000,
        ["x" * 1_000_000],
        [".".join(["text"] * 40)],
        [f"text{n}" for n in range(65)],
        [b"text"],
        2.5,
    ],
)
def test_put_text_refuses_bad_index_fields_and_writes_nothing(
    entry_store: EntryStore, text: str, index: object
) -> None:
    with pytest.raises(InvalidInputError) as raised:
        entry_store.put_text({"@id": "urn:t:bad"}, text, index=index)  # type: ignore[arg-type]
    assert "index" in str(raised.value)
    assert len(str(raised.value)) < 1_000  # the value named, in a preview
    assert "urn:t:bad" not in entry_store
    assert entry_store.search_ids("zanzibar") == []


def test_parts_not_searched_leave_the_index_sound_when_they_go(entry_store: EntryStore) -> None:
    """Parts written without their search document are taken out without touching the
    index: the other entries' matches and the store's counts stay right."""
    kept = entry_store.put_text({"@id": "urn:t:kept"}, LARGE.replace("zanzibar", "timbuktu"))
    iri = entry_store.put_text({"@id": "urn:t:quiet", "title": "Quiet"}, LARGE, index=["title"])
    entry_store.put_text({"@id": iri, "title": "Quiet"}, LARGE + " again", index=False)
    entry_store.replace({"@id": iri, "text": "now short and searched"})
    assert entry_store.full_text(iri) == "now short and searched"
    assert _found(entry_store, "searched") == [iri]
    entry_store.put_text({"@id": iri}, LARGE, index=False)
    assert entry_store.delete(iri)
    assert _found(entry_store, "timbuktu") == [kept]
    assert entry_store.search_ids("zanzibar") == []
    assert entry_store.full_text(kept) == LARGE.replace("zanzibar", "timbuktu")
    check = getattr(entry_store, "integrity_check", None)
    if check is not None:
        assert check() == "ok"
