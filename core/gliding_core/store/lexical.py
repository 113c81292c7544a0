"""L0: the words of the lexical index, made as SQLite's FTS5 makes them, and BM25's constants.

The SQLite store indexes an entry's text with FTS5 (``porter unicode61 remove_diacritics 2``)
and ranks with its ``bm25()``. A store on another database ranks the same way only if it splits
text into the same terms, so this module rebuilds that tokenizer in Python:

- ``unicode61``: a token is a run of token characters; everything else separates. In ASCII the
  token characters are the letters and digits, folded to lower case. For any other character
  the SQLite linked into this process is asked, once, what its ``unicode61`` tokenizer does
  with it (a separator, or a token character and what it folds to, diacritics removed), and the
  answer is kept: FTS5's tables follow an older Unicode than Python's ``unicodedata`` (emoji
  are token characters there, Greek keeps its accents), so asking it is the only exact rule.
- ``porter``: each token of 3 to 64 UTF-8 bytes is reduced to its stem by M. F. Porter's
  algorithm ("An algorithm for suffix stripping", 1980) with the two changes of his own later
  reference version (``bli`` -> ``ble``, ``logi`` -> ``log``), as FTS5 does; a suffix is
  removed only from a longer word.

A query goes through ``query_words`` (its words, lower-cased, stop words left out unless
nothing else is left), and each word through the tokenizer, as FTS5 tokenizes each quoted
phrase of the query the SQLite store builds. A word the tokenizer splits in two (``foo_bar``)
is a phrase for FTS5 (its parts next to each other); here its parts count as words of their own.

Invariants: ``tokens`` is deterministic for a given SQLite build; the cache of characters only
grows, by at most one entry per code point, and that of stems to at most ``_STEMS_KEPT``
words; nothing here touches a store.
"""

from __future__ import annotations

import re
import sqlite3
import threading
from collections import Counter
from functools import lru_cache

# FTS5's bm25(): k1 and b of Robertson and Zaragoza's Okapi BM25, and the idf that stands for
# an idf of zero or less (a term in more than half of the entries).
K1 = 1.2
B = 0.75
MIN_IDF = 1e-6

_WORD = re.compile(r"\w+", re.UNICODE)
_ASCII_TOKEN = re.compile(r"[a-z0-9]+")
_PORTER_BYTES = range(3, 65)  # shorter and longer tokens are left as they are
_STEMS_KEPT = 65_536  # the most stems term_counts keeps beside stem's own cache


def query_words(query: str, stop_words: frozenset[str]) -> list[str]:
    """Return the words of a full-text query, lower-cased, each once, in order.

    Stop words are left out unless the query holds nothing else.
    """
    words = list(dict.fromkeys(word.lower() for word in _WORD.findall(query)))
    return [word for word in words if word not in stop_words] or words


def query_terms(query: str, stop_words: frozenset[str]) -> Counter[str]:
    """Return the index terms of a query's words, with how many words gave each.

    Two words with one stem (``painting painted``) are two phrases for FTS5, each scored:
    the count says how many times a term's score is added.
    """
    terms: Counter[str] = Counter()
    for word in query_words(query, stop_words):
        terms.update(dict.fromkeys(tokens(word), 1))
    return terms


def term_counts(text: str) -> tuple[Counter[str], int]:
    """Return the terms of ``text`` with their frequencies, and its length in tokens."""
    words = _words(text)
    # Counted in C, no list of stems between; each stem looked up in a plain dict first.
    return Counter(map(_STEMS.__getitem__, words)), len(words)


def tokens(text: str) -> list[str]:
    """Return the terms of ``text`` in order, as FTS5's ``porter unicode61`` tokenizer gives."""
    return list(map(stem, _words(text)))


def _words(text: str) -> list[str]:
    """Return the folded tokens of ``text`` in order, before stemming."""
    if text.isascii():
        words: list[str] = _ASCII_TOKEN.findall(text.lower())
        return words
    return [word for word in _CHARACTERS.folded(text).split(" ") if word]


# -- characters ----------------------------------------------------------------------------------


class _Characters:
    """What FTS5's ``unicode61`` tokenizer does with each character, asked of SQLite once each.

    ``table`` maps a character to the text it folds to (a token character) or to a space (a
    separator), for ``str.translate``. ASCII is filled in at start: letters and digits are
    token characters (upper case folded), everything else separates.
    """

    def __init__(self) -> None:
        self.table: dict[int, str] = {
            code: chr(code).lower() if chr(code).isalnum() else " " for code in range(128)
        }
        self._lock = threading.Lock()
        self._db: sqlite3.Connection | None = None

    def folded(self, text: str) -> str:
        """Return ``text`` with every separator a space and every token character folded."""
        table = self.table
        unknown = [char for char in set(text) if ord(char) not in table]
        if unknown:
            self._learn(unknown)
        return text.translate(table)

    def _learn(self, chars: list[str]) -> None:
        with self._lock:
            chars = [char for char in chars if ord(char) not in self.table]
            if chars:
                self.table.update(zip(map(ord, chars), self._ask(chars), strict=True))

    def _ask(self, chars: list[str]) -> list[str]:
        """Return what each of ``chars`` becomes in a token: its folding, or a space.

        Each character is put between two letters (``a`` and ``b``): a separator leaves the two
        tokens ``a`` and ``b``; a token character leaves one token, ``a`` + its folding + ``b``.
        """
        if self._db is None:
            self._db = sqlite3.connect(":memory:", check_same_thread=False)
            self._db.executescript(
                "CREATE VIRTUAL TABLE probe USING fts5"
                " (text, tokenize = 'unicode61 remove_diacritics 2');"
                "CREATE VIRTUAL TABLE probe_terms USING fts5vocab (probe, 'instance');"
            )
        db = self._db
        probes = " ".join(f"a{char}b" for char in chars)
        db.execute("INSERT INTO probe (rowid, text) VALUES (1, ?)", (probes,))
        terms = [row[0] for row in db.execute("SELECT term FROM probe_terms ORDER BY offset")]
        db.execute("DELETE FROM probe")
        answers: list[str] = []
        position = 0
        for _ in chars:
            term = terms[position]
            if term == "a":  # a separator: "a" and "b" came out apart
                answers.append(" ")
                position += 2
            else:
                answers.append(term[1:-1])
                position += 1
        return answers


_CHARACTERS = _Characters()


# -- the Porter stemmer ----------------------------------------------------------------------------

# Steps 2 to 4: suffix -> replacement. Only the longest suffix a word ends with is considered, and
# it is replaced only when the measure of what precedes it is large enough.
_STEP2 = {
    "ational": "ate",
    "tional": "tion",
    "enci": "ence",
    "anci": "ance",
    "izer": "ize",
    "bli": "ble",
    "alli": "al",
    "entli": "ent",
    "eli": "e",
    "ousli": "ous",
    "ization": "ize",
    "ation": "ate",
    "ator": "ate",
    "alism": "al",
    "iveness": "ive",
    "fulness": "ful",
    "ousness": "ous",
    "aliti": "al",
    "iviti": "ive",
    "biliti": "ble",
    "logi": "log",
}
_STEP3 = {
    "icate": "ic",
    "ative": "",
    "alize": "al",
    "iciti": "ic",
    "ical": "ic",
    "ful": "",
    "ness": "",
}
_STEP4 = {
    suffix: ""
    for suffix in (
        *("al", "ance", "ence", "er", "ic", "able", "ible", "ant", "ement", "ment", "ent"),
        *("ion", "ou", "ism", "ate", "iti", "ous", "ive", "ize"),
    )
}


class _Stems(dict[str, str]):
    """The stems of the words seen, up to ``_STEMS_KEPT`` of them, none longer than a word
    ``stem`` changes (others are asked of ``stem`` each time).

    Called from C (``map``), a plain dict's lookup costs less than a call through ``stem``'s
    LRU cache, which keeps its order at every hit: a batch of 5,000 entries stems some 90,000
    words.
    """

    def __missing__(self, word: str) -> str:
        found = stem(word)
        if len(self) < _STEMS_KEPT and len(word) < _PORTER_BYTES.stop:
            self[word] = found
        return found


_STEMS = _Stems()


@lru_cache(maxsize=65_536)
def stem(word: str) -> str:
    """Return the Porter stem of a folded token (tokens outside 3..64 UTF-8 bytes unchanged)."""
    if len(word.encode("utf-8")) not in _PORTER_BYTES:
        return word
    word = _step1a(word)
    word = _step1b(word)
    if word.endswith("y") and _has_vowel(word[:-1]):
        word = word[:-1] + "i"
    word = _longest(word, _STEP2, minimum=1)
    word = _longest(word, _STEP3, minimum=1)
    word = _longest(word, _STEP4, minimum=2)
    return _step5(word)


def _step1a(word: str) -> str:
    """Plurals: ``sses`` -> ``ss``, ``ies`` -> ``i``, ``ss`` stays, ``s`` -> nothing."""
    if word.endswith("sses") and len(word) > 4:
        return word[:-2]
    if word.endswith("ies") and len(word) > 3:
        return word[:-2]
    if word.endswith("ss"):
        return word
    return word[:-1] if word.endswith("s") else word


def _step1b(word: str) -> str:
    """Past tenses and gerunds: ``eed`` -> ``ee``; ``ed`` and ``ing`` go after a vowel."""
    if word.endswith("eed") and len(word) > 3:
        return word[:-1] if _measure(word[:-3]) > 0 else word
    for suffix in ("ed", "ing"):
        if word.endswith(suffix) and _has_vowel(word[: -len(suffix)]):
            return _tidy(word[: -len(suffix)])
    return word


def _tidy(word: str) -> str:
    """What step 1b does after taking ``ed`` or ``ing`` off: restore an ``e``, undouble."""
    if word.endswith(("at", "bl", "iz")):
        return word + "e"
    # A double consonant, ``y`` counted as one here (as FTS5 does), but l, s and z stay.
    last = word[-1]
    if len(word) > 1 and last == word[-2] and last.isascii() and last not in "aeioulsz":
        return word[:-1]
    if _measure(word) == 1 and _cvc(word):
        return word + "e"
    return word


def _longest(word: str, rules: dict[str, str], *, minimum: int) -> str:
    """Replace the longest suffix of ``rules`` that ``word`` ends with, if its stem measures
    at least ``minimum`` (and, for ``ion``, ends with ``s`` or ``t``)."""
    for size in range(min(len(word) - 1, 7), 0, -1):
        suffix = word[-size:]
        if suffix in rules:
            stem_ = word[:-size]
            if _measure(stem_) < minimum or (suffix == "ion" and not stem_.endswith(("s", "t"))):
                return word
            return stem_ + rules[suffix]
    return word


def _step5(word: str) -> str:
    """A final ``e`` goes after a long stem (or a short one not ending consonant-vowel-
    consonant); a double ``l`` is undoubled after a long stem."""
    if word.endswith("e"):
        stem_ = word[:-1]
        measure = _measure(stem_)
        if measure > 1 or (measure == 1 and not _cvc(stem_)):
            word = stem_
    if word.endswith("ll") and _measure(word) > 1:
        word = word[:-1]
    return word


def _consonants(word: str) -> list[bool]:
    """Which letters of ``word`` are consonants: not a vowel, and ``y`` only after a vowel."""
    flags: list[bool] = []
    for index, char in enumerate(word):
        if char in "aeiou":
            flags.append(False)
        elif char == "y":
            flags.append(index == 0 or not flags[index - 1])
        else:
            flags.append(True)
    return flags


def _measure(word: str) -> int:
    """Porter's m: how many times a run of vowels is followed by a run of consonants."""
    flags = _consonants(word)
    count, previous = 0, True
    for consonant in flags:
        if consonant and not previous:
            count += 1
        previous = consonant
    return count


def _has_vowel(word: str) -> bool:
    return not all(_consonants(word))


def _cvc(word: str) -> bool:
    """Whether ``word`` ends consonant-vowel-consonant, the last not ``w``, ``x`` or ``y``.

    FTS5 looks at the last three bytes: a last letter outside ASCII is two consonants there.
    """
    if len(word) < 3 or word[-1] in "wxy" or not word[-1].isascii():
        return False
    flags = _consonants(word)
    return flags[-3] and not flags[-2] and flags[-1]
