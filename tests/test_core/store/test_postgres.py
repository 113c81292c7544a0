"""What the PostgreSQL L0 store keeps beyond the EntryStore contract: full-text search ranked
exactly as the SQLite store's FTS5 ranks, its index kept in blocks that documents leave without
a trace or a lost removal, memories in schemas of their own, a schema version upgraded in place,
an ordinary role (no superuser) told which statement to have run, and no password in any repr,
message or log line.

The contract itself runs on PostgreSQL in ``tests/test_core/contracts/``.
"""

from __future__ import annotations

import logging
import random
import threading
import time
import uuid
from collections.abc import Iterator

import psycopg
import pytest
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from gliding_core import (
    ConfigError,
    HashEmbedder,
    InvalidInputError,
    L0Store,
    Record,
    SearchFilters,
    StorageError,
)
from gliding_core.hyperspace.pgvector import PgVectorIndex
from gliding_core.store.filters import POSTGRESQL
from gliding_core.store.postgres import Database, DatabaseSettings, PostgresEntryStore
from gliding_core.store.postgres.schema import BLOCK, SCHEMA_VERSION
from gliding_core.store.staging import SEPARATOR

PASSWORD = "Tr0ub4dor-and-3-very-secret"


@pytest.fixture
def pg(postgres_url: str, postgres_schema: str) -> Iterator[PostgresEntryStore]:
    with PostgresEntryStore(postgres_url, schema=postgres_schema) as store:
        yield store


def _admin(url: str) -> psycopg.Connection[tuple[object, ...]]:
    return psycopg.connect(url, autocommit=True)


def _with(url: str, **changes: str) -> str:
    return make_conninfo(**{**conninfo_to_dict(url), **changes})


# -- ranking -------------------------------------------------------------------------------------

WORDS = [
    *("memory", "agent", "painting", "painted", "paints", "token", "budget", "lease"),
    *("fencing", "cache", "coherence", "invalid", "write", "read", "stale", "process"),
    *("worker", "database", "schema", "vector", "search", "rank", "score", "query", "entry"),
    *("graph", "node", "edge", "session", "summary", "archive"),
    *("the", "a", "of", "and", "to", "in", "is", "it", "that"),
]


def _corpus(n: int, seed: int) -> list[Record]:
    rng = random.Random(seed)
    return [
        Record(
            {
                "@id": f"urn:doc:{i}",
                "text": " ".join(rng.choice(WORDS) for _ in range(rng.randint(3, 40))),
            },
            tags=[f"group:{i % 3}"],
        )
        for i in range(n)
    ]


QUERIES = [
    "painting",
    "painted memory",
    "lease fencing token",
    "stale read of the cache",
    "vector search rank score",
    "the",
    "graph node edge session summary archive worker",
    "absent words only",
]


def test_text_search_ranks_and_scores_as_the_sqlite_store(pg: PostgresEntryStore) -> None:
    """The lexical arm of hybrid search gives the same hits with the same BM25 scores on both
    stores (the issue asks for LoCoMo recall within 0.01; equal scores give equal recall)."""
    corpus = _corpus(400, seed=7)
    with L0Store() as lite:
        lite.put_many(corpus)
        pg.put_many(corpus)
        pg.delete("urn:doc:3")  # deletions change the counts BM25 reads
        lite.delete("urn:doc:3")
        pg.put({"@id": "urn:doc:4", "text": "painting painting painting lease"})
        lite.put({"@id": "urn:doc:4", "text": "painting painting painting lease"})
        for query in QUERIES:
            want = lite.search_ids(query, limit=25)
            got = pg.search_ids(query, limit=25)
            assert [round(s, 9) for _, s in got] == [round(s, 9) for _, s in want], query
            # Equal scores may come in either order; the sets of IRIs at each score agree.
            assert _by_score(got) == _by_score(want), query
        only = SearchFilters(tags_all=("group:1",))
        assert _by_score(pg.search_ids("painting lease", limit=50, filters=only)) == _by_score(
            lite.search_ids("painting lease", limit=50, filters=only)
        )


NARROW_CASES = {
    # which entries the filter allows -> what the search does at limits 3 and 20
    "every 97th": (lambda i: i % 97 == 0, ("allowed", "allowed")),
    "every other": (lambda i: i % 2 == 0, ("none", "none")),  # the first check fills
    "the low scorers": (lambda i: i % 5 < 2, ("allowed", "too many")),
}


@pytest.mark.parametrize("case", list(NARROW_CASES))
def test_a_filtered_text_search_ranks_as_the_sqlite_store_however_narrow_the_filter(
    pg: PostgresEntryStore, case: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Far more candidates than the first keyed check reads (ten times the limit): a narrow
    # filter's allowed entries are read and only the candidates among them checked; a wide
    # one's best pass in the first check; one allowing too many, none of them among the best
    # candidates, falls back to checking the rest by key.
    allows, expected = NARROW_CASES[case]
    records = [
        Record(
            {"@id": f"urn:f:{i}", "text": f"harbour crane {'crane ' * (i % 5)}pier {i}"},
            tags=["narrow"] if allows(i) else ["other"],
        )
        for i in range(600)
    ]
    asked: list[str] = []
    allowed = pg._allowed

    def recording(*args: object) -> object:
        found = allowed(*args)  # type: ignore[arg-type]
        asked.append("too many" if found is None else "allowed")
        return found

    monkeypatch.setattr(pg, "_allowed", recording)
    gone = next(i for i in range(1, 600) if allows(i))
    with L0Store() as lite:
        lite.put_many(records)
        pg.put_many(records)
        pg.delete(f"urn:f:{gone}")  # an allowed entry gone
        lite.delete(f"urn:f:{gone}")
        only = SearchFilters(tags_any=("narrow",))
        for limit, branch in zip((3, 20), expected, strict=True):
            asked.clear()
            got = pg.search_ids("crane pier", limit=limit, filters=only)
            assert asked == ([] if branch == "none" else [branch])
            want = lite.search_ids("crane pier", limit=limit, filters=only)
            assert len(got) == min(limit, sum(map(allows, range(600))) - 1)
            assert [round(s, 9) for _, s in got] == [round(s, 9) for _, s in want]
            assert _by_score(got) == _by_score(want)
            hits = pg.search_text("crane pier", limit=limit, filters=only)
            assert [(h.entry.iri, h.score) for h in hits] == got


def test_a_damaged_block_of_the_full_text_index_is_reported_not_misread(
    pg: PostgresEntryStore, postgres_url: str, postgres_schema: str
) -> None:
    # The client reads a block's arrays in their binary form; a null among them (which the
    # store never writes) would shift every element after it.
    pg.put_many([{"@id": f"urn:z:{i}", "text": f"zebra stripes {i}"} for i in range(3)])
    assert len(pg.search_ids("zebra")) == 3
    with _admin(postgres_url) as conn:
        conn.execute(
            f'UPDATE "{postgres_schema}".postings SET ids = array_append(ids, NULL),'
            " frequencies = array_append(frequencies, 1), lengths = array_append(lengths, 3)"
            " WHERE term = 'zebra'"
        )
    with pytest.raises(StorageError, match="full-text index is damaged"):
        pg.search_ids("zebra")
    assert [iri for iri, _ in pg.search_ids("stripes")] == [f"urn:z:{i}" for i in range(3)]


def _by_score(hits: list[tuple[str, float]]) -> dict[float, set[str]]:
    grouped: dict[float, set[str]] = {}
    for iri, score in hits[:-1] if len(hits) > 1 else hits:  # the last tie may be cut apart
        grouped.setdefault(round(score, 9), set()).add(iri)
    return grouped


# -- the index's blocks --------------------------------------------------------------------------


def _blocks(url: str, schema: str, term: str) -> list[tuple[int, int, list[int]]]:
    """The blocks of ``term``: ``(low, high, ids)``, in key order."""
    with _admin(url) as conn:
        rows = conn.execute(
            f'SELECT low, high, ids FROM "{schema}".postings WHERE term = %s ORDER BY low',
            (term,),
        ).fetchall()
    return [(int(low), int(high), [int(i) for i in ids]) for low, high, ids in rows]  # type: ignore[call-overload, attr-defined]


def _ids(store: PostgresEntryStore, iris: list[str]) -> list[int]:
    with store.db.connection() as conn:
        found = dict(
            conn.execute("SELECT iri, id FROM entries WHERE iri = ANY(%s)", (iris,)).fetchall()
        )
    return [found[iri] for iri in iris]


def test_a_batch_writes_a_block_per_term_of_at_most_block_documents(
    pg: PostgresEntryStore, postgres_url: str, postgres_schema: str
) -> None:
    count = 2 * BLOCK + 50
    pg.put_many([{"@id": f"urn:b:{i}", "text": f"shared word{i}"} for i in range(count)])
    ids = _ids(pg, [f"urn:b:{i}" for i in range(count)])
    blocks = _blocks(postgres_url, postgres_schema, "share")  # the Porter stem of "shared"
    assert [len(found) for _, _, found in blocks] == [BLOCK, BLOCK, 50]
    assert [i for _, _, found in blocks for i in found] == sorted(ids)
    assert all((low, high) == (found[0], found[-1]) for low, high, found in blocks)
    assert _blocks(postgres_url, postgres_schema, "word7") == [(ids[7], ids[7], [ids[7]])]
    assert pg.integrity_check() == "ok"


def test_documents_leave_their_blocks_and_the_ranking_stays_the_sqlite_stores(
    pg: PostgresEntryStore, postgres_url: str, postgres_schema: str
) -> None:
    """Deleting the first, a middle and the last document of a block rewrites it around them
    (its key moves to the new first); deleting every document of a block deletes it; a
    document whose text changes leaves its block and joins a new one, even when it was the
    first of its old block and is the first of the new one (a key taken again)."""
    nodes = [{"@id": f"urn:d:{i}", "text": f"common painting lease {i}"} for i in range(BLOCK + 5)]
    with L0Store() as lite:
        for store in (pg, lite):
            store.put_many(nodes)
        ids = _ids(pg, [node["@id"] for node in nodes])
        for store in (pg, lite):
            store.delete_many(["urn:d:0", "urn:d:50", f"urn:d:{BLOCK - 1}"])
        first, _ = _blocks(postgres_url, postgres_schema, "common")
        assert (first[0], first[1], len(first[2])) == (ids[1], ids[BLOCK - 2], BLOCK - 3)
        assert ids[50] not in first[2]
        for store in (pg, lite):
            store.delete_many([f"urn:d:{i}" for i in range(BLOCK, BLOCK + 5)])
        assert [block[2] for block in _blocks(postgres_url, postgres_schema, "common")] == [
            first[2]
        ]
        for store in (pg, lite):  # urn:d:1 is now the first of the block: a new text for it
            store.replace({"@id": "urn:d:1", "text": "common painting painting archive"})
        blocks = _blocks(postgres_url, postgres_schema, "common")
        assert [block[0] for block in blocks] == [ids[1], ids[2]]  # its own block, its old key
        assert blocks[0][2] == [ids[1]]
        assert ids[1] not in blocks[1][2]
        for store in (pg, lite):
            store.put({"@id": "urn:d:1", "text": "common painting painting archive again"})
        assert pg.integrity_check() == "ok"
        for query in ("common", "painting lease", "archive", "painting 7", "absent"):
            want, got = lite.search_ids(query, limit=200), pg.search_ids(query, limit=200)
            assert [round(s, 9) for _, s in got] == [round(s, 9) for _, s in want], query
            assert _by_score(got) == _by_score(want), query


def _postings_of(url: str, schema: str, term: str) -> list[tuple[list[int], list[int]]]:
    """The blocks of ``term`` as ``(ids, frequencies)``, in key order, each checked well formed
    (``low`` and ``high`` its first and last id, at most ``BLOCK`` ids, ascending)."""
    with _admin(url) as conn:
        rows = conn.execute(
            f'SELECT low, high, ids, frequencies, lengths FROM "{schema}".postings'
            " WHERE term = %s ORDER BY low",
            (term,),
        ).fetchall()
    blocks = []
    for low, high, ids, frequencies, lengths in rows:
        assert (low, high) == (ids[0], ids[-1])  # type: ignore[index]
        assert len(ids) == len(frequencies) == len(lengths) <= BLOCK  # type: ignore[arg-type]
        assert list(ids) == sorted(set(ids))  # type: ignore[call-overload]
        blocks.append(([int(i) for i in ids], [int(f) for f in frequencies]))  # type: ignore[attr-defined]
    return blocks


def test_a_batch_out_of_id_order_of_stored_and_new_entries_writes_blocks_in_id_order(
    pg: PostgresEntryStore, postgres_url: str, postgres_schema: str
) -> None:
    """One batch gives a term to stored entries, in descending order of their ids, and to new
    ones after them: its 220 postings go into blocks of ``BLOCK`` in ascending id order, each
    with its own frequency, and the stored entries' old postings leave their blocks."""
    pg.put_many([{"@id": f"urn:o:{i}", "text": f"alpha beta{i}"} for i in range(130)])
    batch = [
        {"@id": f"urn:o:{i}", "text": "gamma " * (1 + i % 3) + f"delta{i}"}
        for i in reversed(range(130))
    ]
    batch += [{"@id": f"urn:n:{i}", "text": "gamma " * (1 + i % 4) + "alpha"} for i in range(90)]
    pg.replace_many(batch)
    iris = [node["@id"] for node in batch]
    want = dict(zip(_ids(pg, iris), (node["text"].count("gamma") for node in batch), strict=True))
    blocks = _postings_of(postgres_url, postgres_schema, "gamma")
    assert [len(ids) for ids, _ in blocks] == [BLOCK, BLOCK, 20]
    assert [(i, f) for ids, fs in blocks for i, f in zip(ids, fs, strict=True)] == sorted(
        want.items()
    )
    new_ids = _ids(pg, [f"urn:n:{i}" for i in range(90)])
    assert [i for ids, _ in _postings_of(postgres_url, postgres_schema, "alpha") for i in ids] == (
        new_ids
    )
    assert _postings_of(postgres_url, postgres_schema, "beta7") == []
    assert pg.integrity_check() == "ok"


def _fresh_batch() -> list[Record]:
    """New entries of every kind of row: types (one named twice), references (one twice, one
    to itself), tags, graphs, metadata, contexts, index fields, texts of any characters, and a
    term in more than ``BLOCK`` of them."""
    records = []
    for i in range(2 * BLOCK + 30):
        node: dict[str, object] = {
            "@id": f"urn:f:{i}",
            "@type": ["Note", "Note", f"Kind{i % 4}"] if i % 5 else f"Kind{i % 4}",
            "text": f"common word{i % 37} ünïcode{i % 3} tab\there back\\slash",
            "about": [{"@id": f"urn:f:{i // 7}"}, {"@id": f"urn:f:{i // 7}"}],
            "self": {"@id": f"urn:f:{i}"},
        }
        if i % 6 == 0:
            node["@context"] = {"@vocab": "https://schema.org/"}
        if i % 9 == 0:
            node["title"] = f"only the title {i}"
        records.append(
            Record(
                node,
                tags=[f"group-{i % 3}", "back\\tag" if i % 2 else "plain"],
                importance=None if i % 4 else i / 1000,
                named_graph=f"urn:graph:{i % 2}" if i % 3 else None,
                metadata={"n": i, "who": "ü"} if i % 2 else None,
                mesi_state="E" if i % 8 == 0 else None,
                index=["title"] if i % 9 == 0 else None,
            )
        )
    return records


def _rows_by_iri(store: PostgresEntryStore) -> dict[str, object]:
    """Every row of the store's tables with entry ids replaced by IRIs, but the times a write
    takes from the clock."""
    tables = {
        "entries": "SELECT iri, content, importance, access_count, tags, metadata, mesi_state,"
        " content_hash, named_graph, jsonld_context, jsonld_types, generation, index_fields"
        " FROM entries ORDER BY iri",
        "entry_tags": "SELECT t.tag, e.iri FROM entry_tags AS t JOIN entries AS e"
        " ON e.id = t.entry_id ORDER BY 1, 2",
        "entry_types": "SELECT t.type, e.iri FROM entry_types AS t JOIN entries AS e"
        " ON e.id = t.entry_id ORDER BY 1, 2",
        "edges": "SELECT e.iri, g.predicate, g.target FROM edges AS g JOIN entries AS e"
        " ON e.id = g.source_id ORDER BY 1, 2, 3",
        "postings": "SELECT p.term, array_agg(e.iri ORDER BY u.n), p.frequencies, p.lengths"
        " FROM postings AS p CROSS JOIN LATERAL unnest(p.ids) WITH ORDINALITY AS u(id, n)"
        " JOIN entries AS e ON e.id = u.id GROUP BY p.term, p.low, p.frequencies, p.lengths"
        " ORDER BY p.term, p.low",
        "text_stats": "SELECT documents, tokens FROM text_stats",
        "changes": "SELECT seq, iri FROM changes ORDER BY seq",
        "entry_expiry": "SELECT count(*) FROM entry_expiry",
        "entry_parts": "SELECT count(*) FROM entry_parts",
    }
    with store.db.connection() as conn:
        return {name: conn.execute(sql).fetchall() for name, sql in tables.items()}


def test_a_batch_of_new_entries_writes_the_rows_a_staged_batch_writes(
    pg: PostgresEntryStore, postgres_url: str
) -> None:
    """A batch whose entries are all new skips staging and every look at stored rows; the same
    batch beside one stored entry, which it leaves as it is, takes the staged path. Both must
    leave every table with the same rows."""
    other_schema = f"test_{uuid.uuid4().hex[:16]}"
    stored = Record({"@id": "urn:stored", "text": "common stored words"}, tags=["group-0"])
    try:
        with PostgresEntryStore(postgres_url, schema=other_schema) as staged:
            for store in (pg, staged):
                store.put_many([stored])
            pg.put_many(_fresh_batch())  # all new: the direct path
            staged.put_many([*_fresh_batch(), stored])  # one stored entry: the staged path
            fresh, through_staging = _rows_by_iri(pg), _rows_by_iri(staged)
            assert fresh == through_staging
            assert len(fresh["entries"]) == 2 * BLOCK + 31  # type: ignore[arg-type]
            assert len(fresh["edges"]) == 2 * BLOCK + 30 - 1  # type: ignore[arg-type]
            assert pg.integrity_check() == staged.integrity_check() == "ok"
    finally:
        with _admin(postgres_url) as conn:
            conn.execute(f'DROP SCHEMA IF EXISTS "{other_schema}" CASCADE')


def test_texts_of_any_characters_are_indexed_and_ranked_as_the_sqlite_store(
    pg: PostgresEntryStore,
) -> None:
    """Terms that array or COPY syntax would read otherwise (a word NULL, quotes, braces,
    backslashes, commas, tabs, newlines around them), letters outside ASCII, emoji and a token
    over 64 bytes, in one batch: the index holds them exactly and ranks them as FTS5 does."""
    texts = [
        'say "null" NULL {braces} back\\slash, comma;semi\ttab\nnewline\r\nend',
        "Ελληνικά καφές café naïve Ünïcödé ß straße",
        "emoji 🙂🙂 party 🎉 null",
        "日本語のテキスト 中文 한국어",
        "x" * 70 + " " + "y" * 3 + " 12345 007 braces",
        '{} "" \\ , ; NULL null Null',
    ]
    nodes = [{"@id": f"urn:c:{n}", "text": text} for n, text in enumerate(texts)]
    queries = ["null", "braces", "back slash", "tab newline", "café", "καφές", "🎉 party"]
    queries += ["日本語のテキスト", "straße", "x" * 70, "007", "semi"]
    with L0Store() as lite:
        lite.put_many(nodes)
        pg.put_many(nodes)
        for query in queries:
            want, got = lite.search_ids(query, limit=10), pg.search_ids(query, limit=10)
            assert want, query
            assert [round(s, 9) for _, s in got] == [round(s, 9) for _, s in want], query
            assert _by_score(got) == _by_score(want), query
    assert pg.integrity_check() == "ok"


def test_labels_and_references_with_a_backslash_are_written_as_given(
    pg: PostgresEntryStore,
) -> None:
    """A batch's tags, types and references go to ``COPY`` unescaped unless one holds a
    character its text form escapes: a backslash among them is written as given."""
    pg.put_many(
        [
            Record(
                {"@id": "urn:s:1", "@type": "Kind\\One", "about": {"@id": "urn:x\\y"}},
                tags=["back\\slash", "plain"],
            ),
            Record({"@id": "urn:s:2", "about": {"@id": "urn:s:1"}}, tags=["plain"]),
        ]
    )
    assert [entry.iri for entry in pg.by_tags(["back\\slash"])] == ["urn:s:1"]
    assert [entry.iri for entry in pg.by_type("Kind\\One")] == ["urn:s:1"]
    assert [
        (edge.predicate, edge.target) for edge in pg.neighbours("urn:s:1", direction="out")
    ] == [("about", "urn:x\\y")]
    assert pg.integrity_check() == "ok"


def test_two_writers_putting_one_term_at_once_each_write_whole_blocks(
    postgres_url: str, postgres_schema: str
) -> None:
    """Two stores (two sessions, as two processes would hold) put batches sharing a term at the
    same moment: every posting is in exactly one well-formed block, none lost or doubled."""
    count = 2 * BLOCK + 30
    start = threading.Barrier(2)
    failures: list[BaseException] = []

    def write(store: PostgresEntryStore, name: str) -> None:
        try:
            start.wait(timeout=60)
            for batch in range(2):
                store.put_many(
                    [
                        {"@id": f"urn:{name}:{batch}:{i}", "text": f"shared {name} word{i}"}
                        for i in range(count)
                    ]
                )
        except BaseException as exc:  # collected for the main thread
            failures.append(exc)

    with (
        PostgresEntryStore(postgres_url, schema=postgres_schema) as first,
        PostgresEntryStore(postgres_url, schema=postgres_schema) as second,
    ):
        threads = [
            threading.Thread(target=write, args=(store, name))
            for store, name in ((first, "one"), (second, "two"))
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert failures == []
        iris = [f"urn:{n}:{b}:{i}" for n in ("one", "two") for b in range(2) for i in range(count)]
        ids = sorted(_ids(first, iris))
        blocks = _postings_of(postgres_url, postgres_schema, "share")
        assert sorted(i for found, _ in blocks for i in found) == ids
        assert len(blocks) == 4 * 3  # each batch's 230 postings in blocks of 100, 100 and 30
        assert first.integrity_check() == "ok"


def _waiting_for_a_block(url: str) -> bool:
    """Whether a session waits for a lock in a statement on the lexical index."""
    with _admin(url) as conn:
        row = conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'"
            " AND query LIKE %s",
            ("%postings%",),
        ).fetchone()
    return row is not None and row != (0,)


def test_two_writers_taking_documents_out_of_one_block_at_once_lose_neither_removal(
    pg: PostgresEntryStore, postgres_url: str, postgres_schema: str
) -> None:
    """The second remover waits for the block the first holds, then reads it as the first left
    it: a rewrite from its own older snapshot would put the first one's document back."""
    pg.put_many([{"@id": f"urn:r:{i}", "text": f"together alone{i}"} for i in range(10)])
    done: list[object] = []
    with PostgresEntryStore(postgres_url, schema=postgres_schema) as other:
        with pg.transaction():
            assert pg.delete("urn:r:0")  # the first of the block: its key moves
            thread = threading.Thread(target=lambda: done.append(other.delete("urn:r:1")))
            thread.start()
            deadline = time.monotonic() + 30
            while not _waiting_for_a_block(postgres_url):
                assert time.monotonic() < deadline, "the second remover never waited"
                time.sleep(0.01)
        thread.join()
    assert done == [True]
    ((_, _, left),) = _blocks(postgres_url, postgres_schema, "togeth")
    assert len(left) == 8
    assert pg.integrity_check() == "ok"
    assert {iri for iri, _ in pg.search_ids("together", limit=20)} == {
        f"urn:r:{i}" for i in range(2, 10)
    }


def test_an_index_of_one_row_per_term_and_entry_is_gathered_into_blocks(
    postgres_url: str, postgres_schema: str
) -> None:
    """A schema of version 5 (its lexical index a row per term and entry, documents of texts
    in parts among them) comes up as blocks, ranking as before."""
    long = "lease archive " * 100_000  # over max_content_bytes: kept in parts
    with PostgresEntryStore(postgres_url, schema=postgres_schema) as store:
        store.put_many(_corpus(3 * BLOCK, seed=3))
        store.delete_many(["urn:doc:5", "urn:doc:150"])
        store.put_text({"@id": "urn:long"}, long)
        before = {query: store.search_ids(query, limit=50) for query in QUERIES}
    with _admin(postgres_url) as conn:  # back to version 5's layout
        conn.execute(f'SET search_path = "{postgres_schema}"')
        rows = _postings_by_entry(conn)
        conn.execute("UPDATE schema_versions SET version = 5 WHERE component = 'l0'")
    with PostgresEntryStore(postgres_url, schema=postgres_schema) as store:
        assert store.integrity_check() == "ok"
        for query, want in before.items():
            got = store.search_ids(query, limit=50)
            assert [round(s, 9) for _, s in got] == [round(s, 9) for _, s in want], query
            assert _by_score(got) == _by_score(want), query
        store.delete("urn:doc:7")
        assert store.full_text("urn:long") == long
        assert store.integrity_check() == "ok"
    with _admin(postgres_url) as conn:
        blocks = conn.execute(
            f'SELECT count(*), max(cardinality(ids)) FROM "{postgres_schema}".postings'
        ).fetchone()
        negative = conn.execute(
            f'SELECT count(*) FROM "{postgres_schema}".postings WHERE low < 0'
        ).fetchone()
    assert rows is not None
    assert blocks is not None
    assert int(blocks[0]) < int(rows[0]) / 3  # type: ignore[call-overload]  # gathered
    assert blocks[1] == BLOCK  # and no block too long
    assert negative != (0,)  # the text in parts is there as its own document


def _postings_by_entry(conn: psycopg.Connection[tuple[object, ...]]) -> tuple[object, ...] | None:
    """Lay the lexical index out as versions 2 to 5 had it, a row per term and entry (in the
    schema of ``conn``'s search path); return the count of its rows."""
    conn.execute("ALTER TABLE postings RENAME TO postings_blocks")
    conn.execute("ALTER INDEX postings_pkey RENAME TO postings_blocks_pkey")
    conn.execute(
        'CREATE TABLE postings (term text COLLATE "C" NOT NULL, entry_id bigint NOT NULL,'
        " frequency integer NOT NULL, length integer NOT NULL,"
        " PRIMARY KEY (term, entry_id) INCLUDE (frequency, length))"
    )
    conn.execute(
        "INSERT INTO postings SELECT p.term, u.id, u.f, u.l FROM postings_blocks AS p,"
        " unnest(p.ids, p.frequencies, p.lengths) AS u(id, f, l)"
    )
    conn.execute("DROP TABLE postings_blocks")
    return conn.execute("SELECT count(*) FROM postings").fetchone()


# -- schemas -------------------------------------------------------------------------------------


def test_memories_in_two_schemas_of_one_database_never_see_each_other(
    postgres_url: str, pg: PostgresEntryStore
) -> None:
    other_schema = f"test_{uuid.uuid4().hex[:16]}"
    try:
        with PostgresEntryStore(postgres_url, schema=other_schema) as other:
            pg.put({"@id": "urn:a", "text": "only in the first"})
            other.put({"@id": "urn:b", "text": "only in the second"})
            assert (pg.count(), other.count()) == (1, 1)
            assert "urn:b" not in pg
            assert pg.search_ids("second") == []
            assert [iri for iri, _ in other.search_ids("second")] == ["urn:b"]
            assert other.changes_since(0) == [(1, "urn:b", "only in the second")]
    finally:
        with _admin(postgres_url) as conn:
            conn.execute(f'DROP SCHEMA IF EXISTS "{other_schema}" CASCADE')


@pytest.mark.parametrize(
    "schema",
    ["", "Upper", "1digit", 'x"; DROP SCHEMA public; --', "pg_catalog", "public", "a" * 64, 7],
)
def test_a_bad_schema_name_is_refused_before_connecting(schema: object) -> None:
    with pytest.raises(InvalidInputError, match="schema"):
        PostgresEntryStore("postgresql://nobody@/nowhere?host=/nonexistent", schema=schema)  # type: ignore[arg-type]


def test_an_old_schema_is_upgraded_in_place(postgres_url: str, postgres_schema: str) -> None:
    with PostgresEntryStore(postgres_url, schema=postgres_schema) as store:
        store.put_many(_corpus(50, seed=1))
        before = store.search_ids("painting lease", limit=10)
    with _admin(postgres_url) as conn:  # version 1: no lexical index, expiry, parts or fields
        conn.execute(f'DROP VIEW "{postgres_schema}".live_entries')
        conn.execute(f'ALTER TABLE "{postgres_schema}".entries DROP COLUMN index_fields')
        conn.execute(
            f'DROP TABLE "{postgres_schema}".postings, "{postgres_schema}".text_stats,'
            f' "{postgres_schema}".entry_expiry, "{postgres_schema}".entry_parts'
        )
        conn.execute(
            f"UPDATE \"{postgres_schema}\".schema_versions SET version = 1 WHERE component = 'l0'"
        )
    with PostgresEntryStore(postgres_url, schema=postgres_schema) as store:
        assert store.count() == 50
        assert store.integrity_check() == "ok"  # the index was filled from the entries
        assert store.search_ids("painting lease", limit=10) == before
        store.put({"@id": "urn:upgraded"}, ttl=3_600)  # and entries may expire
        assert store.expires_at(["urn:upgraded"]).keys() == {"urn:upgraded"}
        long = "lease " * 300_000  # and texts may be kept in parts
        store.put_text({"@id": "urn:long"}, long)
        assert store.full_text("urn:long") == long
    with _admin(postgres_url) as conn:
        found = conn.execute(
            f'SELECT version FROM "{postgres_schema}".schema_versions WHERE component = %s',
            ("l0",),
        ).fetchone()
    assert found == (SCHEMA_VERSION,)


def test_entries_of_a_schema_before_index_fields_keep_every_value(
    postgres_url: str, postgres_schema: str
) -> None:
    with PostgresEntryStore(postgres_url, schema=postgres_schema) as store:  # as before
        store.put({"@id": "urn:a", "text": "plain words", "source": "urn:src:zebra"}, index=["$"])
        store.put({"@id": "urn:b", "text": "other words", "n": 1234}, index=["$"])
    with _admin(postgres_url) as conn:  # version 4: no index fields, a row per term and entry
        conn.execute(f'SET search_path = "{postgres_schema}"')
        conn.execute("DROP VIEW live_entries")
        conn.execute("ALTER TABLE entries DROP COLUMN index_fields")
        _postings_by_entry(conn)
        conn.execute("UPDATE schema_versions SET version = 4 WHERE component = 'l0'")
    with PostgresEntryStore(postgres_url, schema=postgres_schema) as store:
        assert store.indexed_with(["urn:a", "urn:b"]) == {"urn:a": ("$",), "urn:b": ("$",)}
        assert [iri for iri, _ in store.search_ids("zebra")] == ["urn:a"]
        store.put({"@id": "urn:a", "note": "seen"})  # now the default: the old text goes out
        assert store.search_ids("zebra") == []
        assert [iri for iri, _ in store.search_ids("plain")] == ["urn:a"]
        assert store.delete("urn:b")
        assert store.search_ids("1234") == []
        assert store.integrity_check() == "ok"
        store.put({"@id": "urn:c", "text": "new words", "ref": "R-9"})
        assert store.indexed_with(["urn:c"]) == {"urn:c": None}  # a new row: NULL, the default


def test_a_schema_of_a_newer_version_is_refused(postgres_url: str, postgres_schema: str) -> None:
    PostgresEntryStore(postgres_url, schema=postgres_schema).close()
    with _admin(postgres_url) as conn:
        conn.execute(f'UPDATE "{postgres_schema}".schema_versions SET version = 99')
    with pytest.raises(ConfigError, match=r"version 99.*upgrade gliding-horse"):
        PostgresEntryStore(postgres_url, schema=postgres_schema)


# -- an ordinary role ----------------------------------------------------------------------------


@pytest.fixture
def ordinary_role(postgres_url: str) -> Iterator[tuple[str, str]]:
    """A role that is not a superuser and owns a new database; yield its URL and the admin's
    URL of that database. Needs a superuser URL (the embedded server's)."""
    with _admin(postgres_url) as conn:
        row = conn.execute("SELECT rolsuper FROM pg_roles WHERE rolname = current_user")
        if row.fetchone() != (True,):
            pytest.skip("creating a role and a database needs a superuser")
        name = f"owner_{uuid.uuid4().hex[:10]}"
        conn.execute(f"CREATE ROLE {name} LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE")
        conn.execute(f"CREATE DATABASE {name} OWNER {name}")
    try:
        yield _with(postgres_url, user=name, dbname=name), _with(postgres_url, dbname=name)
    finally:
        with _admin(postgres_url) as conn:
            conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
            conn.execute(f"DROP ROLE IF EXISTS {name}")


def test_an_ordinary_role_runs_a_memory_and_is_told_which_extension_to_have_installed(
    ordinary_role: tuple[str, str],
) -> None:
    url, admin_url = ordinary_role
    with PostgresEntryStore(url, schema="memory") as store:  # creates its schema and tables
        store.put({"@id": "urn:a", "text": "an ordinary owner writes"})
        with pytest.raises(
            ConfigError, match=r'have an administrator run CREATE EXTENSION "vector"'
        ):
            PgVectorIndex(store, HashEmbedder(16))
        with _admin(admin_url) as conn:
            conn.execute("CREATE EXTENSION vector")
        index = PgVectorIndex(store, HashEmbedder(16))
        try:
            assert index.count() == 1
            assert index.query("ordinary owner", 1)[0][0] == "urn:a"
        finally:
            index.close()


def test_a_role_that_may_not_create_a_schema_is_told_the_statement(
    ordinary_role: tuple[str, str], postgres_url: str
) -> None:
    url, admin_url = ordinary_role
    name = conninfo_to_dict(url)["user"]
    with _admin(admin_url) as conn:
        conn.execute(f"REVOKE CREATE ON DATABASE {name} FROM {name}")
        conn.execute(f"ALTER DATABASE {name} OWNER TO {conninfo_to_dict(postgres_url)['user']}")
        conn.execute(f"GRANT CONNECT ON DATABASE {name} TO {name}")
    with pytest.raises(ConfigError, match=f'CREATE SCHEMA "memory" AUTHORIZATION "{name}"'):
        PostgresEntryStore(url, schema="memory")


# -- secrets -------------------------------------------------------------------------------------


def test_the_password_appears_in_no_repr_message_or_log_line(
    postgres_url: str, postgres_schema: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    with_password = _with(postgres_url, password=PASSWORD)
    with PostgresEntryStore(with_password, schema=postgres_schema) as store:
        assert PASSWORD not in repr(store)
        assert PASSWORD not in store.database
        assert "password=***" in store.database
        index = PgVectorIndex(store, HashEmbedder(16))
        assert PASSWORD not in repr(index)
        index.close()
    unreachable = _with(with_password, host="/nonexistent/socket/dir")
    with pytest.raises(StorageError) as failed:
        PostgresEntryStore(
            unreachable, schema=postgres_schema, settings=DatabaseSettings(timeout_s=1)
        )
    assert PASSWORD not in _chain(failed.value)
    uri = f"postgresql://someone:{PASSWORD}@host/db?no_such_option=1"
    with pytest.raises(ConfigError) as refused:
        Database(uri, schema="memory")
    assert PASSWORD not in _chain(refused.value)
    assert all(PASSWORD not in record.getMessage() for record in caplog.records)


def _chain(error: BaseException) -> str:
    """Every message and repr of an exception and of its causes and contexts."""
    parts: list[str] = []
    current: BaseException | None = error
    while current is not None:
        parts += [str(current), repr(current)]
        current = current.__cause__ or current.__context__
    return "\n".join(parts)


# -- locks ---------------------------------------------------------------------------------------


def test_a_lock_outside_a_transaction_is_refused(pg: PostgresEntryStore) -> None:
    with pytest.raises(InvalidInputError, match=r"inside store\.transaction"):
        pg.hold("anything")
    with pg.transaction():
        pg.hold("anything")  # taken, and let go at the commit
    with pytest.raises(InvalidInputError, match="lock purpose"), pg.transaction():
        pg.hold("bad\x00purpose")


ODD_TAGS = ["a tag", "x,y", "{braced}", 'quo"te', "ünï", "back\\slash", "NULL", "t"]


def test_a_probe_checks_each_entry_s_own_tags_as_the_tag_table_holds_them(
    pg: PostgresEntryStore,
) -> None:
    """The probe form (each given entry checked on its own row) reads the tags the row keeps
    joined by ``staging.SEPARATOR``: it passes the same entries as the tag table's form, for
    tags of any text, in ``matching`` and in the lexical arm's check of its candidates."""
    assert POSTGRESQL.own_tags == f"string_to_array(e.tags, chr({ord(SEPARATOR)}))"
    rng = random.Random(7)
    records = [
        Record({"@id": f"urn:p:{i}", "text": f"note {i}"}, tags=rng.sample(ODD_TAGS, i % 4))
        for i in range(40)
    ]
    pg.put_many(records)
    iris = [f"urn:p:{i}" for i in range(40)]
    cases = [
        SearchFilters(tags_any=("x,y", "{braced}")),
        SearchFilters(tags_all=("a tag", 'quo"te')),
        SearchFilters(exclude_tags=("ünï", "NULL")),
        SearchFilters(
            any_of=(SearchFilters(tags_any=("t",)), SearchFilters(tags_all=("back\\slash",)))
        ),
        SearchFilters(tags_any=("absent",)),
    ]
    for filters in cases:
        collected = pg.matching(filters)  # the tag table's form
        assert pg.matching(filters, iris) == collected  # each given entry probed on its row
        expected = [r.node["@id"] for r in records if _passes(filters, set(r.tags))]
        assert collected == expected
        # The lexical arm checks its candidates (every entry holds "note") the probe's way.
        found = pg.search_ids("note", limit=40, filters=filters)
        assert sorted(iri for iri, _ in found) == sorted(expected)


def _passes(filters: SearchFilters, tags: set[str]) -> bool:
    if filters.tags_any and not tags & set(filters.tags_any):
        return False
    if filters.tags_all and not set(filters.tags_all) <= tags:
        return False
    if tags & set(filters.exclude_tags):
        return False
    return not filters.any_of or any(_passes(part, tags) for part in filters.any_of)


# -- what PostgreSQL's text cannot hold ----------------------------------------------------------


def test_a_reference_under_a_key_holding_a_nul_is_refused_by_name_and_writes_nothing(
    pg: PostgresEntryStore,
) -> None:
    """A reference's key is kept as the edge's predicate, as text, which cannot hold a NUL
    (SQLite's can; everywhere else the node's JSON escapes it): every write refuses it before
    it starts, naming the entry and the key, and nothing of its batch is written."""
    bad = {"@id": "urn:bad", "see\x00also": {"@id": "urn:good"}}
    nested = {"@id": "urn:nested", "about": {"k\x00": [{"@id": "urn:good"}]}}
    for node in (bad, nested):
        writes = (
            lambda node=node: pg.put(node),
            lambda node=node: pg.replace(node),
            lambda node=node: pg.put_many([{"@id": "urn:good", "text": "fine"}, node]),
            lambda node=node: pg.put_text(node, "long " * 50_000),
        )
        for write in writes:
            with pytest.raises(InvalidInputError) as caught:
                write()
            message = str(caught.value)
            assert node["@id"] in message
            assert "\\x00" in message  # the key, shown with its NUL
            assert "NUL" in message
    assert pg.count() == 0
    pg.put({"@id": "urn:fine", "text": "a NUL in a value \x00 is kept escaped"})
    assert pg.get("urn:fine") is not None
    assert pg.integrity_check() == "ok"


def test_a_text_in_parts_holding_a_nul_is_refused_by_name_and_writes_nothing(
    pg: PostgresEntryStore,
) -> None:
    """A text kept in parts is stored as it is, and PostgreSQL's text cannot hold a NUL: the
    write is refused before it starts, naming the entry and where the NUL is. A text small
    enough to be kept whole is in the node's JSON, NUL escaped, and is kept."""
    pg.put({"@id": "urn:before", "text": "already there"})
    text = "long " * 300_000 + "\x00 and more"  # over max_content_bytes: kept in parts
    with pytest.raises(InvalidInputError) as caught:
        pg.put_text({"@id": "urn:big"}, text)
    message = str(caught.value)
    assert "urn:big" in message
    assert "NUL" in message
    assert str(len("long " * 300_000)) in message  # where it is

    def both() -> None:
        with pg.transaction():
            pg.put({"@id": "urn:inside", "text": "written first"})
            pg.put_text({"@id": "urn:big"}, text)

    with pytest.raises(InvalidInputError, match="NUL"):
        both()
    assert [e.iri for batch in pg.scan_entries() for e in batch] == ["urn:before"]
    pg.put_text({"@id": "urn:small"}, "a\x00b")
    assert pg.full_text("urn:small") == "a\x00b"
    assert pg.integrity_check() == "ok"
