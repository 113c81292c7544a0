"""L2: the terminals of SPARQL 1.1 (a tokenizer), what they mean, and how they are written back.

``tokenize`` reads a query's text into the grammar's terminals (SPARQL 1.1 Query Language,
section 19.8): ``IRIREF``, ``PNAME_NS`` / ``PNAME_LN`` (with the ``PN_LOCAL`` escapes ``\\#``,
``\\'`` ... and ``%HH``), ``BLANK_NODE_LABEL``, ``VAR1`` / ``VAR2``, the four string forms
with their ``ECHAR`` escapes, numbers (signed as the grammar signs them), ``LANGTAG``, ``^^``,
punctuation and operators, ``ANON`` and ``NIL``, and bare words (keywords, function names).
Whitespace and comments separate tokens and are dropped. Section 19.2's codepoint escapes
(``\\uXXXX``, ``\\UXXXXXXXX``) are resolved on the whole text first, as the grammar says (and as
Oxigraph's parser does), so ``SE\\u0052VICE`` is the word ``SERVICE`` here as it is there.

Invariants:
- Anything that is not a terminal is refused (``InvalidInputError`` naming the position, in
  the text with its codepoint escapes resolved, and a preview of it): an unknown character, an
  unclosed string or IRI, a bad escape. So is a text whose resolved form still holds ``\\u`` or
  ``\\U`` (a backend would resolve it a second time), or an escape naming no character.
- The text's length is checked before anything reads it; group depth (``{``), bracket depth
  (``(`` and ``[`` together), ``UNION`` keywords and operators (``|| && = != < > <= >= + - * /
  ! ^ | ?``, signed numbers and commas) are counted while it is read, and the first one past
  its limit stops the reading (``ContentTooLargeError``). Nothing here recurses, and each
  token is one match of a regular expression with no nested repetition (linear in the text).
- ``serialize`` writes a token back in one canonical form, which the backend reads as the
  same terminal: IRIs absolute in ``<...>``, strings as ``"..."`` with ``ECHAR`` escapes only
  (never a codepoint escape), keywords in upper case.
"""

from __future__ import annotations

import functools
import re
from typing import NamedTuple, Protocol

import pyoxigraph as ox

from gliding_core.errors import ContentTooLargeError, InvalidInputError
from gliding_core.jsonld import preview


class Limits(Protocol):
    """The size limits a query's text is read under (``config.QueryLimits``)."""

    @property
    def max_chars(self) -> int:
        """The longest text, in characters."""
        ...

    @property
    def max_group_depth(self) -> int:
        """The deepest nesting of ``{``."""
        ...

    @property
    def max_bracket_depth(self) -> int:
        """The deepest nesting of ``(`` and ``[`` together."""
        ...

    @property
    def max_union_arms(self) -> int:
        """The most ``UNION`` arms (keywords plus one)."""
        ...

    @property
    def max_operators(self) -> int:
        """The most operators (and commas)."""
        ...


class Token(NamedTuple):
    """One terminal: its kind (``IRIREF``, ``PNAME``, ``WORD``...), its text and where it starts."""

    kind: str
    text: str
    start: int


# -- the grammar's character classes (section 19.8, productions 163-173) ----------------------
_BASE = (
    "A-Za-z\u00c0-\u00d6\u00d8-\u00f6\u00f8-\u02ff\u0370-\u037d\u037f-\u1fff\u200c-\u200d"
    "\u2070-\u218f\u2c00-\u2fef\u3001-\ud7ff\uf900-\ufdcf\ufdf0-\ufffd\U00010000-\U000effff"
)
_U = _BASE + "_"
_CHARS = _U + "\\-0-9\u00b7\u0300-\u036f\u203f-\u2040"
_VARNAME = f"[{_U}0-9][{_U}0-9\u00b7\u0300-\u036f\u203f-\u2040]*"
_PLX = r"%[0-9A-Fa-f]{2}|\\[_~.\-!$&'()*+,;=/?#@%]"
_PN_PREFIX = f"[{_BASE}](?:[{_CHARS}.]*[{_CHARS}])?"
_PN_LOCAL = f"(?:[{_U}:0-9]|{_PLX})(?:(?:[{_CHARS}.:]|{_PLX})*(?:[{_CHARS}:]|{_PLX}))?"
_ECHAR = r"""\\[tbnrf\\"']"""
_EXPONENT = "[eE][+-]?[0-9]+"

# One alternative per terminal, tried in this order after the whitespace and comments before
# it (a match is a token): the frequent first, each one before any whose text it begins
# (``ANON`` before ``[``, a number before ``.`` and ``-``, an IRI before ``<``). A word is read
# with the prefix it would have as a prefixed name, so a run of name characters is read once.
# ``END`` and ``BAD`` match wherever nothing else does, so a match never backtracks into the
# whitespace before it.
_TERMINALS = (
    ("END", r"\Z"),
    ("ANON", r"\[[ \t\r\n]*\]"),
    ("NIL", r"\([ \t\r\n]*\)"),
    (
        "NUMBER",
        f"[+-]?(?:[0-9]+\\.[0-9]*{_EXPONENT}|\\.[0-9]+{_EXPONENT}|[0-9]+{_EXPONENT}"
        "|[0-9]*\\.[0-9]+|[0-9]+)",
    ),
    ("PUNCT", r"[{}()\[\].,;]"),
    ("VAR", f"[?$]{_VARNAME}"),
    ("IRIREF", r"<[^<>\"{}|^`\\\x00-\x20]*>"),
    ("PNAME", f"(?:{_PN_PREFIX})?:(?:{_PN_LOCAL})?"),
    ("WORD", _PN_PREFIX),
    ("STRING_LONG1", f"'''(?:(?:'|'')?(?:[^'\\\\]|{_ECHAR}))*'''"),
    ("STRING_LONG2", f'"""(?:(?:"|"")?(?:[^"\\\\]|{_ECHAR}))*"""'),
    ("STRING1", f"'(?:[^'\\\\\\n\\r]|{_ECHAR})*'"),
    ("STRING2", f'"(?:[^"\\\\\\n\\r]|{_ECHAR})*"'),
    ("BNODE", f"_:[{_U}0-9](?:[{_CHARS}.]*[{_CHARS}])?"),
    ("LANGTAG", "@[a-zA-Z]+(?:-[a-zA-Z0-9]+)*"),
    ("DTYPE", r"\^\^"),
    ("OP", r"\|\||&&|!=|<=|>=|[=<>!+\-*/^|?]"),
    ("BAD", r"[\s\S]"),
)
_SCANNER = re.compile(
    r"(?:[ \t\r\n]|#[^\r\n]*)*(?:"
    + "|".join(f"(?P<{name}>{pattern})" for name, pattern in _TERMINALS)
    + ")"
)
_KEYWORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_CODEPOINT = re.compile(r"\\u([0-9A-Fa-f]{4})|\\U([0-9A-Fa-f]{8})")
_COUNTED = frozenset({"PUNCT", "OP", "NUMBER", "WORD"})
STRINGS = frozenset({"STRING1", "STRING2", "STRING_LONG1", "STRING_LONG2"})
"""The kinds of string tokens."""


def decode_codepoints(text: str) -> str:
    """Return ``text`` with its ``\\uXXXX`` and ``\\UXXXXXXXX`` escapes resolved (section 19.2).

    Raises:
        InvalidInputError: an escape names no character (a surrogate, past U+10FFFF), or the
            resolved text still holds ``\\u`` or ``\\U``.
    """
    if "\\u" not in text and "\\U" not in text:
        return text
    decoded = _CODEPOINT.sub(_codepoint, text)
    if "\\u" in decoded or "\\U" in decoded:
        at = max(decoded.find("\\u"), decoded.find("\\U"))
        raise InvalidInputError(
            "a SPARQL query may not hold \\u or \\U once its codepoint escapes are resolved"
            f" (at {at}: {preview(decoded[at : at + 40])})"
        )
    return decoded


def _codepoint(match: re.Match[str]) -> str:
    code = int(match.group(1) or match.group(2), 16)
    if code > 0x10FFFF or 0xD800 <= code <= 0xDFFF:
        raise InvalidInputError(f"{match.group(0)} names no character (in a SPARQL query)")
    return chr(code)


def tokenize(text: str, limits: Limits) -> list[Token]:
    """Return the tokens of a query's text, whitespace and comments left out.

    Raises:
        ContentTooLargeError: the text is longer than ``limits.max_chars``, or nests, unions
            or operates past a limit (the reading stops at the first token past it).
        InvalidInputError: something in it is not a SPARQL terminal, or a closing bracket
            has no opening one.
    """
    if len(text) > limits.max_chars:
        raise ContentTooLargeError(
            f"a SPARQL query may be {limits.max_chars} characters long, this one is {len(text)}"
            " (query_limits.max_chars)"
        )
    decoded = decode_codepoints(text)
    counter = _Counter(limits)
    found: list[Token] = []
    for match in _SCANNER.finditer(decoded):
        kind = match.lastgroup or "BAD"
        if kind == "END":
            break
        token = Token(kind, match.group(kind), match.start(kind))
        if kind == "BAD":
            raise InvalidInputError(
                f"SPARQL query: {preview(token.text)} at {token.start} is not part of SPARQL"
                f" (near {preview(decoded[max(0, token.start - 20) : token.start + 20])})"
            )
        if kind in _COUNTED:
            counter.count(token)
        found.append(token)
    return found


class _Counter:
    """The depths and counts of a text being read, checked against its limits at each token."""

    __slots__ = ("brackets", "groups", "limits", "operators", "unions")

    def __init__(self, limits: Limits) -> None:
        self.limits = limits
        self.groups = self.brackets = self.unions = self.operators = 0

    def count(self, token: Token) -> None:
        kind, text = token.kind, token.text
        if kind == "PUNCT":
            if text == "{":
                self.groups += 1
                _at_most(
                    self.groups, self.limits.max_group_depth, "nest groups { } ", "group_depth"
                )
            elif text == "(" or text == "[":
                self.brackets += 1
                _at_most(
                    self.brackets,
                    self.limits.max_bracket_depth,
                    "nest ( ) and [ ]",
                    "bracket_depth",
                )
            elif text == "}" or text == ")" or text == "]":
                self._close(token)
            elif text == ",":
                self._operator()
        elif kind == "OP" or (kind == "NUMBER" and text[0] in "+-"):
            self._operator()
        elif kind == "WORD" and len(text) == 5 and text.upper() == "UNION":
            self.unions += 1
            _at_most(self.unions + 1, self.limits.max_union_arms, "join by UNION", "union_arms")

    def _close(self, token: Token) -> None:
        if token.text == "}":
            self.groups -= 1
            left = self.groups
        else:
            self.brackets -= 1
            left = self.brackets
        if left < 0:
            raise InvalidInputError(f"SPARQL query: {token.text!r} at {token.start} closes nothing")

    def _operator(self) -> None:
        self.operators += 1
        _at_most(
            self.operators, self.limits.max_operators, "hold operators and commas", "operators"
        )


def _at_most(count: int, limit: int, what: str, field: str) -> None:
    """Refuse a query whose ``count`` of something went past ``limit``."""
    if count > limit:
        raise ContentTooLargeError(
            f"a SPARQL query may {what} at most {limit} (query_limits.max_{field}: it has more)"
        )


# -- what the terminals mean -------------------------------------------------------------------

_ECHARS = {"t": "\t", "b": "\b", "n": "\n", "r": "\r", "f": "\f", "\\": "\\", '"': '"', "'": "'"}
_ESCAPED = re.compile(r"\\(.)", re.DOTALL)


def string_value(token: Token) -> str:
    """Return the characters a string token stands for (its ``ECHAR`` escapes resolved)."""
    quotes = 3 if token.kind.startswith("STRING_LONG") else 1
    body = token.text[quotes:-quotes]
    if "\\" not in body:
        return body
    return _ESCAPED.sub(lambda m: _ECHARS[m.group(1)], body)


def local_name(local: str) -> str:
    """Return a ``PN_LOCAL`` with its ``\\`` escapes resolved (``%HH`` stays, as SPARQL says)."""
    if "\\" not in local:
        return local
    return _ESCAPED.sub(lambda m: m.group(1), local)


_IRI_PARTS = re.compile(r"^(?:([^:/?#]+):)?(?://([^/?#]*))?([^?#]*)(?:\?([^#]*))?(?:#(.*))?$")


def resolve(base: str | None, reference: str) -> str | None:
    """Return ``reference`` resolved against ``base`` (RFC 3986, 5.2.2); ``None`` if it stays
    relative (no base, or a relative base). An absolute reference is returned as written."""
    parts = _IRI_PARTS.match(reference)
    if parts is None:  # the pattern matches every string; kept for the type checker
        return None
    scheme, authority, path, query, fragment = parts.groups()
    if scheme is not None:  # absolute: kept as written (the rewrite sends what was checked)
        return reference
    if base is None:
        return None
    base_parts = _IRI_PARTS.match(base)
    if base_parts is None or base_parts.group(1) is None:
        return None
    b_scheme, b_authority, b_path, b_query, _ = base_parts.groups()
    if authority is not None:
        return _recompose(b_scheme, authority, _without_dots(path), query, fragment)
    if not path:
        return _recompose(
            b_scheme, b_authority, b_path, b_query if query is None else query, fragment
        )
    if not path.startswith("/"):
        if b_authority is not None and not b_path:
            path = "/" + path
        else:
            path = b_path[: b_path.rfind("/") + 1] + path
    return _recompose(b_scheme, b_authority, _without_dots(path), query, fragment)


def _recompose(
    scheme: str, authority: str | None, path: str, query: str | None, fragment: str | None
) -> str:
    text = scheme + ":"
    if authority is not None:
        text += "//" + authority
    text += path
    if query is not None:
        text += "?" + query
    if fragment is not None:
        text += "#" + fragment
    return text


def _without_dots(path: str) -> str:
    """Remove the ``.`` and ``..`` segments of a path (RFC 3986, 5.2.4)."""
    if "." not in path:
        return path
    segments = path.split("/")
    kept: list[str] = []
    for segment in segments:
        if segment == "..":
            if kept and kept != [""]:  # an absolute path keeps its leading ""
                kept.pop()
        elif segment != ".":
            kept.append(segment)
    if segments[-1] in (".", ".."):
        kept.append("")
    return "/".join(kept)


# -- how tokens are written back -----------------------------------------------------------------


@functools.lru_cache(maxsize=4096)
def iri_text(iri: str) -> str:
    """Return ``<iri>`` if ``iri`` is an absolute IRI the backend reads as written.

    Raises:
        InvalidInputError: it is not one.
    """
    try:
        return str(ox.NamedNode(iri))
    except ValueError as exc:
        raise InvalidInputError(
            f"SPARQL query: {preview(iri)} is not an absolute IRI ({exc})"
        ) from exc


_LITERAL_ESCAPES = str.maketrans({"\\": "\\\\", '"': '\\"', "\n": "\\n", "\r": "\\r"})


def literal_text(value: str) -> str:
    """Return ``value`` as a ``"..."`` string whose only escapes are ``ECHAR``s."""
    return '"' + value.translate(_LITERAL_ESCAPES) + '"'


def string_text(token: Token) -> str:
    """Return a string token in the canonical form (``literal_text`` of its value)."""
    text = token.text
    if token.kind == "STRING2" and "\\" not in text:
        return text
    return literal_text(string_value(token))


def is_keyword(word: str) -> bool:
    """Whether a bare word has the shape of a SPARQL keyword (letters, digits, ``_``)."""
    return _KEYWORD.fullmatch(word) is not None


__all__ = [
    "STRINGS",
    "Limits",
    "Token",
    "decode_codepoints",
    "iri_text",
    "is_keyword",
    "literal_text",
    "local_name",
    "resolve",
    "string_text",
    "string_value",
    "tokenize",
]
