"""Expiry contract: an entry with a TTL vanishes from every read when it expires, and a sweep
deletes it for good; defaults per graph and scope; bad TTLs are refused.

Every test runs on each implementation in ``conftest.ENTRY_STORES``. An expired entry here
is one whose TTL has passed: the tests wait past it (they assert what is read after the
expiry, never how soon anything happens).
"""

from __future__ import annotations

import math
import time
from fractions import Fraction
from typing import Any

import numpy as np
import pytest

from gliding_core import EntryNotFoundError, EntryStore, InvalidInputError, Record
from gliding_core.store.filters import SearchFilters

SHORT = 0.05  # seconds: the TTL of the entries that expire in a test
HIERARCHY = ("parent",)


def _expire() -> None:
    time.sleep(SHORT * 3)


def _fill(store: EntryStore) -> None:
    store.put_many(
        [
            Record(
                {
                    "@id": "urn:x:old",
                    "@type": "Note",
                    "text": "fleeting Qzfleet",
                    "parent": {"@id": "urn:x:kept"},
                },
                tags=["t", "scope:user:alice"],
                named_graph="urn:g",
                importance=0.9,
                ttl=SHORT,
            ),
            Record(
                {
                    "@id": "urn:x:kept",
                    "@type": "Note",
                    "text": "lasting words",
                    "parent": {"@id": "urn:x:old"},
                },
                tags=["t"],
                named_graph="urn:g",
            ),
        ]
    )


def test_an_expired_entry_is_invisible_to_every_read(entry_store: EntryStore) -> None:
    _fill(entry_store)
    assert entry_store.count() == 2
    assert entry_store.expires_at(["urn:x:old", "urn:x:kept"]).keys() == {"urn:x:old"}
    before = entry_store.change_sequence()
    _expire()
    store, old = entry_store, "urn:x:old"
    assert store.get(old) is None
    assert store.get_node(old) is None
    assert old not in store
    assert store.count() == 1
    assert store.get_many([old, "urn:x:kept"]).keys() == {"urn:x:kept"}
    assert store.contents([old]) == {}
    assert store.graphs_of([old]) == {}
    assert store.expires_at([old]) == {}
    assert store.search_ids("Qzfleet") == []
    assert store.search_text("fleeting") == []
    assert [e.iri for e in store.by_tags(["t"])] == ["urn:x:kept"]
    assert [e.iri for e in store.by_tags(["scope:user:alice"])] == []
    assert [e.iri for e in store.by_graph("urn:g")] == ["urn:x:kept"]
    assert [e.iri for e in store.by_type("Note")] == ["urn:x:kept"]
    assert [e.iri for e in store.by_prefix("urn:x:")] == ["urn:x:kept"]
    assert [e.iri for e in store.by_importance(0.0, 1.0)] == ["urn:x:kept"]
    assert [e.iri for e in store.recent(limit=5)] == ["urn:x:kept"]
    assert store.matching(SearchFilters(tags_any=("t",))) == ["urn:x:kept"]
    assert store.matching(SearchFilters(), [old, "urn:x:kept"]) == ["urn:x:kept"]
    assert [e.source for e in store.neighbours(old, direction="in")] == ["urn:x:kept"]
    assert store.neighbours(old, direction="out") == []
    assert store.linked([old], list(HIERARCHY)) == [(old, "urn:x:kept")]  # kept's link to it
    assert (old, "urn:x:kept") not in store.hierarchy(HIERARCHY)
    assert ("urn:x:old", "Note") not in store.hierarchy(HIERARCHY)
    assert store.tag_counts() == {"t": 1}
    assert store.graph_counts() == {"urn:g": 1}
    assert store.type_counts() == {"Note": 1}
    assert [iri for batch in store.scan_texts() for iri, _ in batch] == ["urn:x:kept"]
    assert store.change_sequence() == before  # expiring is no write
    assert [(iri, text) for _, iri, text in store.changes_since(0) if iri == old] == [(old, None)]
    with pytest.raises(EntryNotFoundError):
        store.retag(old, add=["more"])


def test_expired_best_matches_leave_their_places_to_the_next(entry_store: EntryStore) -> None:
    # The best-scored matches (the shortest texts) expire: a search still gives its limit of
    # live entries, the next best, as a filtered search does; however many of them expired
    # (more than a store may read beyond its limit at first).
    entry_store.put_many(
        [
            Record({"@id": f"urn:e:{i}", "text": "Qzcommon " + "pad " * (i // 6)}, ttl=SHORT)
            for i in range(60)
        ]
    )
    entry_store.put_many(
        [Record({"@id": f"urn:k:{i}", "text": "Qzcommon " + "pad " * (10 + i)}) for i in range(20)]
    )
    _expire()
    found = entry_store.search_ids("Qzcommon", limit=6)
    assert [iri for iri, _ in found] == [f"urn:k:{i}" for i in range(6)]
    assert found == entry_store.search_ids(
        "Qzcommon", limit=6, filters=SearchFilters(min_importance=0.0)
    )


def test_include_expired_reads_show_expired_entries_until_the_sweep(
    entry_store: EntryStore,
) -> None:
    _fill(entry_store)
    entry_store.put({"@id": "urn:y:alone", "text": "gone soon"}, named_graph="urn:h", ttl=SHORT)
    _expire()
    store, old, kept = entry_store, "urn:x:old", "urn:x:kept"
    found = store.get_many([old, kept, "urn:x:none"], include_expired=True)
    assert found.keys() == {old, kept}
    assert found[old].node["text"] == "fleeting Qzfleet"  # as it was when it expired
    assert found[old].tags == ("t", "scope:user:alice")
    assert found[old].named_graph == "urn:g"
    assert [e.iri for e in store.by_graph("urn:g", include_expired=True)] == [old, kept]
    assert [e.iri for e in store.by_graph("urn:g", include_expired=True, limit=1)] == [old]
    assert [e.iri for e in store.by_graph("urn:h", include_expired=True)] == ["urn:y:alone"]
    assert store.graph_counts(include_expired=True) == {"urn:g": 2, "urn:h": 1}
    # Nothing else sees them: the default of the same reads, and every other read.
    assert store.get_many([old, kept]).keys() == {kept}
    assert [e.iri for e in store.by_graph("urn:g")] == [kept]
    assert store.by_graph("urn:h") == []
    assert store.graph_counts() == {"urn:g": 1}
    assert store.get(old) is None
    # A sweep deletes them for good: the include-expired reads no longer find them.
    assert {e.iri for e in store.sweep_expired()} == {old, "urn:y:alone"}
    assert store.get_many([old, "urn:y:alone"], include_expired=True) == {}
    assert [e.iri for e in store.by_graph("urn:g", include_expired=True)] == [kept]
    assert store.graph_counts(include_expired=True) == {"urn:g": 1}


@pytest.mark.parametrize("flag", ["yes", 1, None])
def test_a_bad_include_expired_is_refused(entry_store: EntryStore, flag: Any) -> None:
    with pytest.raises(InvalidInputError, match="include_expired"):
        entry_store.get_many(["urn:a"], include_expired=flag)
    with pytest.raises(InvalidInputError, match="include_expired"):
        entry_store.by_graph("urn:g", include_expired=flag)
    with pytest.raises(InvalidInputError, match="include_expired"):
        entry_store.graph_counts(include_expired=flag)


def test_a_sweep_deletes_expired_entries_for_good_and_returns_them(
    entry_store: EntryStore,
) -> None:
    _fill(entry_store)
    assert entry_store.sweep_expired() == []  # nothing has expired yet
    _expire()
    before = entry_store.change_sequence()
    swept = entry_store.sweep_expired()
    assert [e.iri for e in swept] == ["urn:x:old"]
    assert swept[0].node["text"] == "fleeting Qzfleet"
    assert entry_store.sweep_expired() == []
    assert entry_store.change_sequence() > before  # a deletion the derived indexes follow
    assert entry_store.delete("urn:x:old") is False


def test_a_sweep_takes_at_most_its_limit(entry_store: EntryStore) -> None:
    entry_store.put_many([Record({"@id": f"urn:e:{i}"}, ttl=SHORT) for i in range(5)])
    _expire()
    assert len(entry_store.sweep_expired(limit=3)) == 3
    assert len(entry_store.sweep_expired(limit=3)) == 2
    with pytest.raises(InvalidInputError):
        entry_store.sweep_expired(limit=0)


def test_a_write_to_an_expired_iri_starts_a_new_entry(entry_store: EntryStore) -> None:
    _fill(entry_store)
    _expire()
    entry_store.put({"@id": "urn:x:old", "other": "value"})
    entry = entry_store.get("urn:x:old")
    assert entry is not None
    assert entry.node == {"@id": "urn:x:old", "other": "value"}  # nothing of the old one
    assert entry.tags == ()
    assert entry.generation == 1
    assert entry_store.expires_at(["urn:x:old"]) == {}  # and no TTL: it was not given


def test_a_write_without_ttl_keeps_the_expiry_and_infinity_removes_it(
    entry_store: EntryStore,
) -> None:
    entry_store.put({"@id": "urn:a", "text": "one"}, ttl=3_600)
    first = entry_store.expires_at(["urn:a"])["urn:a"]
    entry_store.put({"@id": "urn:a", "text": "one more"})
    entry_store.replace({"@id": "urn:a", "text": "two"})
    assert entry_store.expires_at(["urn:a"]) == {"urn:a": first}
    entry_store.put({"@id": "urn:a"}, ttl=7_200)
    assert entry_store.expires_at(["urn:a"])["urn:a"] > first
    entry_store.put({"@id": "urn:a"}, ttl=math.inf)
    assert entry_store.expires_at(["urn:a"]) == {}


def test_a_ttl_may_be_any_real_number_numpy_s_included(entry_store: EntryStore) -> None:
    # importance took numpy's scalars and a TTL refused them.
    entry_store.put({"@id": "urn:np"}, ttl=np.float32(3_600.0))
    entry_store.put_many([Record({"@id": "urn:np64"}, ttl=np.int64(3_600))])
    entry_store.put({"@id": "urn:frac"}, ttl=Fraction(7_200, 2))
    assert set(entry_store.expires_at(["urn:np", "urn:np64", "urn:frac"])) == {
        "urn:np",
        "urn:np64",
        "urn:frac",
    }
    entry_store.put({"@id": "urn:np"}, ttl=np.float64("inf"))
    assert "urn:np" not in entry_store.expires_at(["urn:np"])


@pytest.mark.parametrize(
    "ttl",
    [
        0,
        -1,
        float("nan"),
        "60",
        True,
        [60],
        np.float32("nan"),
        np.bool_(True),
        pytest.param(10**400, id="10**400"),
    ],
)
def test_a_bad_ttl_is_refused_and_nothing_written(entry_store: EntryStore, ttl: Any) -> None:
    with pytest.raises(InvalidInputError, match="ttl"):
        entry_store.put({"@id": "urn:a"}, ttl=ttl)
    with pytest.raises(InvalidInputError, match="ttl"):
        entry_store.put_many([Record({"@id": "urn:b"}), Record({"@id": "urn:c"}, ttl=ttl)])
    assert entry_store.count() == 0


@pytest.mark.store_config(
    expiry={"default_s": 7_200.0, "by_graph": {"urn:g": 60.0}, "by_scope": {"user:alice": 600.0}}
)
def test_new_entries_get_the_configured_ttls(entry_store: EntryStore) -> None:
    now = time.time()
    entry_store.put({"@id": "urn:graph"}, named_graph="urn:g", tags=["scope:user:alice"])
    entry_store.put({"@id": "urn:scope"}, tags=["scope:user:alice", "scope:user:bob"])
    entry_store.put({"@id": "urn:other"})
    entry_store.put({"@id": "urn:given"}, tags=["scope:user:alice"], ttl=5.0)
    left = {
        iri: at - now
        for iri, at in entry_store.expires_at(
            ["urn:graph", "urn:scope", "urn:other", "urn:given"]
        ).items()
    }
    assert left["urn:graph"] == pytest.approx(60, abs=30)  # the graph's TTL comes first
    assert left["urn:scope"] == pytest.approx(600, abs=30)
    assert left["urn:other"] == pytest.approx(7_200, abs=30)
    assert left["urn:given"] == pytest.approx(5, abs=5)
    entry_store.put({"@id": "urn:other", "more": 1})  # an existing entry gets no default again
    assert entry_store.expires_at(["urn:other"])["urn:other"] == pytest.approx(now + 7_200, abs=30)
