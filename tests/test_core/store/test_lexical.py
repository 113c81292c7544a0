"""The lexical tokenizer rebuilt in Python splits and stems text exactly as SQLite's FTS5 does
(``porter unicode61 remove_diacritics 2``): the PostgreSQL store's full-text search ranks like
the SQLite store's only if both index the same terms.

FTS5 itself is the oracle: its ``fts5vocab`` table lists the terms it indexed, in order.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gliding_core.store.lexical import query_terms, stem, term_counts, tokens
from gliding_core.store.sqlite import TEXT_TOKENIZER


@pytest.fixture(scope="module")
def fts5() -> Iterator[sqlite3.Connection]:
    conn = sqlite3.connect(":memory:")
    conn.execute(f"CREATE VIRTUAL TABLE t USING fts5(text, tokenize = '{TEXT_TOKENIZER}')")
    conn.execute("CREATE VIRTUAL TABLE v USING fts5vocab(t, 'instance')")
    yield conn
    conn.close()


def fts5_tokens(conn: sqlite3.Connection, text: str) -> list[str]:
    """The terms FTS5 indexes for ``text``, in order."""
    conn.execute("DELETE FROM t")
    conn.execute("INSERT INTO t (rowid, text) VALUES (1, ?)", (text,))
    return [row[0] for row in conn.execute("SELECT term FROM v ORDER BY offset")]


EXAMPLES = [
    "The painters painted a painting; painting is what they paint.",
    "Relational databases: generalizations, conditionally, hopefulness, formalize",
    "Crème brûlée, naïve café, Ångström, Œuvre, straße",
    "Ελληνικά κείμενα με τόνους, кириллица \u0422\u0415\u041a\u0421\u0422",
    "emoji 🙂 between words, 日本語のテキスト, العربية",
    "snake_case and kebab-case, e-mail, C++ and x86_64, v1.2.3",
    "a ab abc abcd, I, it's, don't, O'Reilly's",
    "agreed feed bled sing conflated troubled sized hopping falling hissing fizzed",
    "happy sky relational conditional rational valenci hesitanci digitizer",
    "triplicate formative formalize electriciti electrical hopeful goodness",
    "revival allowance inference airliner gyroscopic adjustable defensible",
    "irritant replacement adjustment dependent adoption homologou communism",
    "activate angulariti homologous effective bowdlerize probate rate cease",
    "controll roll generate generation oscillators oscillate",
    "x" * 70 + " " + "ab" * 40,
    "Tabs\tand\nnew lines\r\nand  double  spaces",
    "numbers 12345 3.14159 1e10 0x1F",
]


@pytest.mark.parametrize("text", EXAMPLES)
def test_tokens_are_fts5s(fts5: sqlite3.Connection, text: str) -> None:
    assert tokens(text) == fts5_tokens(fts5, text)


ALPHABET = st.sampled_from(
    list("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789")
    + list(" \t\n.,;:!?'\"-_()[]{}/\\@#%&*+=<>|~`^$")
    + list("éèêëàâäçñøåæœßÉÀÇÑØÅÆŒ")
    + list("αβγδεζηθάέήίόύώΑΒΓΔ")
    + list("абвгдежзийклмнопрАБВГ")
    + list("日本語中文한국어")
    + ["🙂", "👍", "\u00a0", "\u2003", "\u200b", "\u0301", "ﬁ", "²", "½", "Ⅻ"]
)


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet=ALPHABET, max_size=120))
def test_any_text_is_tokenized_as_fts5_does(fts5: sqlite3.Connection, text: str) -> None:
    assert tokens(text) == fts5_tokens(fts5, text)


@settings(max_examples=200, deadline=None)
@given(st.text(alphabet=st.sampled_from(list("abcdefghijklmnopqrstuvwxyz")), max_size=14))
def test_any_word_is_stemmed_as_fts5_does(fts5: sqlite3.Connection, word: str) -> None:
    expected = [stem(word)] if word else []
    assert expected == fts5_tokens(fts5, word)


def test_term_counts_give_frequencies_and_length() -> None:
    counts, length = term_counts("Painting the painted wall; the wall")
    assert length == 6
    assert counts == {"paint": 2, "the": 2, "wall": 2}


def test_query_terms_count_each_word_and_skip_stop_words() -> None:
    assert query_terms("the painting painted", frozenset({"the"})) == {"paint": 2}
    assert query_terms("the", frozenset({"the"})) == {"the": 1}  # nothing else is left
    assert query_terms("", frozenset()) == {}
