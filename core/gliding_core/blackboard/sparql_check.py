"""L2: the checks of SPARQL text: what an agent's query, and the system's, may contain.

A query is read into terminals (``sparql_tokens.tokenize``, under the size limits of
``config.QueryLimits``), walked once by an allow-list, and written back from its tokens: the
text a store runs is that rewrite (``CheckedQuery.text``), never the text that came in. The
rewrite declares no prefix and no base (every IRI is absolute, prefixed names expanded),
keeps no comment, writes each literal in one canonical form and holds no codepoint escape, so
the backend parses exactly the tokens that were checked: a keyword hidden from the check
(behind an escape, in a comment, in a string) is not in what runs.

What an agent's query (``check_agent_query``: ``AgentHandle.query``, the tool ``query``) may
hold:
- the prologue (``BASE``, ``PREFIX``), then one query form: ``SELECT``, ``ASK``,
  ``CONSTRUCT``, ``DESCRIBE`` (an update is ``PermissionDeniedError``; an update keyword
  anywhere else is refused as not part of a query);
- bare words from ``KEYWORDS`` only: SPARQL 1.1's query keywords, built-in functions and
  aggregates (``a`` in lower case); no ``SERVICE`` (nor ``SILENT``), no dataset clause
  (``FROM``, ``FROM NAMED``: the blackboard sets the dataset), any other word refused;
- ``GRAPH ?var`` (the dataset confines it), or ``GRAPH`` with a constant IRI among the graphs
  the query runs over (``PermissionDeniedError`` otherwise);
- property paths, subqueries, ``VALUES``, ``FILTER EXISTS``, as the grammar has them;
- no call of a function named by an IRI, but for the XSD casts (``CASTS``): nothing custom is
  registered. An IRI directly followed by ``(`` where an expression may stand is a call.
The system's queries (``check_query``: ``Blackboard.query``, the frames, user frames among them)
are read with the same tokenizer, limits and allow-list, but may name any graph and hold
``FROM`` / ``FROM NAMED`` (the dataset the blackboard sets still overrides them).

Neither pyoxigraph 0.5.13 (``Store.query`` has no option to turn ``SERVICE`` off; it calls
any URL given) nor ``oxigraph serve`` 0.5.13 (no such flag in ``oxigraph serve --help``, and a
``SERVICE`` call back to its own ``/query`` runs without the caller's dataset) can refuse a
``SERVICE``: the rewrite is the structural guarantee that no ``SERVICE`` token reaches either.

Invariants:
- Size limits are checked before any parser sees the text: its length before it is read,
  group and bracket depth, ``UNION`` arms and operators while it is tokenized (the walk and
  the backend never see a text past them), triple patterns by the walk, before the backend.
  ``max_triple_patterns`` counts conservatively: each ``.``, ``;`` or ``,`` between triples,
  each ``{`` and ``[``, each ``FILTER``, ``BIND``, ``OPTIONAL``, ``MINUS`` and ``VALUES``,
  each ``/`` and ``|`` of a property path, and two for each term of a collection or path
  group ``( ... )`` in a pattern.
- Nothing here recurses: the walk keeps its own stack of open brackets.
- Every refusal is typed: ``ContentTooLargeError`` (a limit), ``PermissionDeniedError`` (an
  update, a forbidden graph), ``InvalidInputError`` (anything else), and names what it refused.
- A check costs a dictionary look-up for a text seen before (512 texts of up to 8,192
  characters are kept, by text, limits and mode, and where bindings go in each); the graphs
  of an agent's query are compared on each call.
"""

from __future__ import annotations

import functools
from collections.abc import Collection
from dataclasses import dataclass
from typing import NamedTuple

from gliding_core.blackboard.sparql_tokens import (
    STRINGS,
    Token,
    decode_codepoints,
    iri_text,
    is_keyword,
    local_name,
    resolve,
    string_text,
    tokenize,
)
from gliding_core.config import QueryLimits
from gliding_core.errors import ContentTooLargeError, InvalidInputError, PermissionDeniedError
from gliding_core.jsonld import check_text, preview

FORMS = frozenset({"SELECT", "CONSTRUCT", "DESCRIBE", "ASK"})
"""The query forms a checked query may have."""
UPDATES = frozenset(
    {"INSERT", "DELETE", "LOAD", "CLEAR", "CREATE", "DROP", "COPY", "MOVE", "ADD", "WITH"}
)
"""The words that begin a SPARQL update operation (an update where a query form stands)."""
FUNCTIONS = frozenset(
    """STR LANG LANGMATCHES DATATYPE BOUND IRI URI BNODE RAND ABS CEIL FLOOR ROUND CONCAT STRLEN
    UCASE LCASE ENCODE_FOR_URI CONTAINS STRSTARTS STRENDS STRBEFORE STRAFTER YEAR MONTH DAY
    HOURS MINUTES SECONDS TIMEZONE TZ NOW UUID STRUUID MD5 SHA1 SHA256 SHA384 SHA512 COALESCE
    IF STRLANG STRDT SAMETERM ISIRI ISURI ISBLANK ISLITERAL ISNUMERIC REGEX SUBSTR REPLACE
    COUNT SUM MIN MAX AVG SAMPLE GROUP_CONCAT""".split()  # noqa: SIM905 (a word list reads better as text)
)
"""SPARQL 1.1's built-in functions and aggregates (section 17.4 and 18.5)."""
KEYWORDS = FUNCTIONS | frozenset(
    """SELECT CONSTRUCT DESCRIBE ASK WHERE DISTINCT REDUCED AS ORDER BY ASC DESC GROUP HAVING
    LIMIT OFFSET VALUES UNDEF OPTIONAL UNION MINUS FILTER BIND GRAPH EXISTS NOT IN TRUE FALSE
    SEPARATOR""".split()  # noqa: SIM905 (a word list reads better as text)
)
"""The bare words an agent's query may hold (upper case; ``a`` is the one lower-case word)."""
_SYSTEM_KEYWORDS = KEYWORDS | {"FROM", "NAMED"}
_XSD = "http://www.w3.org/2001/XMLSchema#"
CASTS = frozenset(
    _XSD + name
    for name in """boolean double float decimal integer dateTime string date time duration
    yearMonthDuration dayTimeDuration""".split()  # noqa: SIM905 (a word list reads better as text)
)
"""The function IRIs a query may call: the XSD constructor functions (section 17.5)."""

# Words after which "(" opens an expression (a call's arguments, a filter, a binding).
_EXPRESSION_AFTER = FUNCTIONS | {"FILTER", "BIND", "HAVING", "BY", "ASC", "DESC", "IN"}
_COUNTED_WORDS = frozenset({"FILTER", "BIND", "OPTIONAL", "MINUS", "VALUES"})
_IRIS = frozenset({"IRIREF", "PNAME"})
_TERMS = _IRIS | STRINGS | {"VAR", "NUMBER", "BNODE", "ANON", "NIL", "WORD"}
# What an open bracket holds.
_GROUP, _DATA, _EXPRESSION, _LIST, _ROW, _BLANK = "group", "data", "expr", "list", "row", "blank"
_TRIPLES_IN = frozenset({_GROUP, _LIST, _BLANK})
_PATH_STEPS = frozenset({"/", "|"})


@dataclass(frozen=True, slots=True)
class CheckedQuery:
    """A query that passed a check, written back from its tokens.

    Attributes:
        text: what the store runs: absolute IRIs, canonical literals, no comment, no prefix.
        form: ``SELECT``, ``CONSTRUCT``, ``DESCRIBE`` or ``ASK``.
        graphs: the constant IRIs it names after ``GRAPH``.
    """

    text: str
    form: str
    graphs: frozenset[str]


class _Refusal(NamedTuple):
    """Why a text was refused (kept in the cache; the error is made anew for each caller)."""

    kind: str  # "large", "update" or "invalid"
    message: str


DEFAULT_LIMITS = QueryLimits()


def check_query(text: object, limits: QueryLimits | None = None) -> CheckedQuery:
    """Return the system's query ``text`` checked and written back.

    Raises:
        InvalidInputError: not a non-empty string, something SPARQL does not have, a
            ``SERVICE``, an unknown word, a custom function.
        ContentTooLargeError: past a limit of ``limits`` (the defaults when ``None``).
        PermissionDeniedError: a SPARQL update.
    """
    return _checked(text, limits, agent=False, role="system")


def check_agent_query(
    text: object,
    *,
    graphs: Collection[str],
    role: str,
    limits: QueryLimits | None = None,
) -> CheckedQuery:
    """Return an agent's query ``text`` checked and written back (see the module docstring).

    Args:
        text: the query.
        graphs: the graphs it runs over: the only constants ``GRAPH`` may name.
        role: the agent's role (for the refusals).
        limits: the size limits (the defaults when ``None``).

    Raises:
        InvalidInputError: as ``check_query``, and a dataset clause (``FROM``).
        ContentTooLargeError: past a limit.
        PermissionDeniedError: an update, or ``GRAPH`` naming a graph outside ``graphs``.
    """
    checked = _checked(text, limits, agent=True, role=role)
    for graph in checked.graphs:
        if graph not in graphs:
            raise PermissionDeniedError(
                f"role {role!r} may not read graph <{graph}> (GRAPH names only the graphs of"
                " the areas the query reads)",
                role=role,
                graph=graph,
                operation="read",
            )
    return checked


def _checked(text: object, limits: QueryLimits | None, *, agent: bool, role: str) -> CheckedQuery:
    if not isinstance(text, str) or not text.strip():
        raise InvalidInputError(f"a SPARQL query must be a non-empty string, got {preview(text)}")
    chosen = DEFAULT_LIMITS if limits is None else limits
    if len(text) <= _REMEMBERED_CHARS:
        outcome = _remembered(text, chosen, agent)
    else:
        outcome = _outcome(text, chosen, agent)
    if isinstance(outcome, CheckedQuery):
        return outcome
    if outcome.kind == "update":
        raise PermissionDeniedError(
            outcome.message, role=role, graph="*", operation="sparql-update"
        )
    if outcome.kind == "large":
        raise ContentTooLargeError(outcome.message)
    raise InvalidInputError(outcome.message)


def _outcome(text: str, limits: QueryLimits, agent: bool) -> CheckedQuery | _Refusal:
    """Check ``text``; return it written back, or why it was refused."""
    try:
        tokens = tokenize(text, limits)  # the size limits first, before the text is encoded
        check_text(text, what="a SPARQL query")  # no backend takes a lone surrogate
        return _Walk(tokens, limits.max_triple_patterns, agent).run()
    except PermissionDeniedError as exc:
        return _Refusal("update", str(exc))
    except ContentTooLargeError as exc:
        return _Refusal("large", str(exc))
    except InvalidInputError as exc:
        return _Refusal("invalid", str(exc))


# A frame or a benchmark runs one text with new bindings again and again: its check is kept.
_remembered = functools.lru_cache(maxsize=512)(_outcome)
_REMEMBERED_CHARS = 8_192  # longer texts are checked every time rather than kept


class _Walk:
    """One pass over a query's tokens: the allow-list, the pattern count and the rewrite."""

    def __init__(self, tokens: list[Token], max_triples: int, agent: bool) -> None:
        self.tokens = tokens
        self.max_triples = max_triples
        self.agent = agent
        self.words = KEYWORDS if agent else _SYSTEM_KEYWORDS
        self.base: str | None = None
        self.prefixes: dict[str, str] = {}
        self.out: list[str] = []
        self.open: list[str] = []  # what each open bracket holds
        self.clauses: list[str] = [""]  # per group level: "", "select" or "modifier"
        self.values_next = False  # a VALUES is waiting for its "{"
        self.graphs: set[str] = set()
        self.triples = 0
        self.form = ""
        self.skip = -1  # the datatype IRI already written with its literal

    def run(self) -> CheckedQuery:
        at = self._prologue()
        if at >= len(self.tokens):
            raise InvalidInputError("a SPARQL query needs a query form (SELECT, ASK...)")
        self.form = self._form(self.tokens[at])
        for index in range(at, len(self.tokens)):
            if index != self.skip:
                self._token(index)
        if self.open:
            raise InvalidInputError(f"SPARQL query: {len(self.open)} brackets are left open")
        text = " ".join(self.out)
        if "\\u" in text or "\\U" in text:  # a backend would resolve it: never sent (see tokenize)
            raise InvalidInputError("SPARQL query: its rewrite would hold a codepoint escape")
        return CheckedQuery(text, self.form, frozenset(self.graphs))

    # -- the prologue and the form ---------------------------------------------------------

    def _prologue(self) -> int:
        tokens, at = self.tokens, 0
        while at < len(tokens) and tokens[at].kind == "WORD":
            word = tokens[at].text.upper()
            if word == "BASE" and self._kind(at + 1) == "IRIREF":
                self.base = self._iri(tokens[at + 1])
                at += 2
            elif word == "PREFIX" and self._kind(at + 1) == "PNAME" and self._kind(at + 2):
                self._prefix(tokens[at + 1], tokens[at + 2])
                at += 3
            elif word in ("BASE", "PREFIX"):
                raise _invalid(tokens[at], f"{word} needs an IRI")
            else:
                break
        return at

    def _prefix(self, name: Token, iri: Token) -> None:
        prefix, _, local = name.text.partition(":")
        if local or iri.kind != "IRIREF":
            raise _invalid(name, "PREFIX takes a name ending in ':' and an <IRI>")
        self.prefixes[prefix] = self._iri(iri)

    def _form(self, token: Token) -> str:
        word = token.text.upper() if token.kind == "WORD" else ""
        if word in FORMS:
            return word
        if word in UPDATES:
            raise _update(word)
        raise _invalid(token, "a SPARQL query must be a SELECT, ASK, CONSTRUCT or DESCRIBE")

    # -- each token --------------------------------------------------------------------------

    def _token(self, index: int) -> None:
        token = self.tokens[index]
        kind = token.kind
        if kind == "WORD":
            self._word(index)
        elif kind == "PUNCT":
            self._punct(index)
        elif kind in _IRIS:
            self._iri_token(index)
        elif kind in STRINGS:
            self._term(string_text(token))
        elif kind == "LANGTAG" or kind == "DTYPE":
            self._attached(index)
        elif kind == "OP" or (kind == "NIL" and self._kind(index - 1) in _IRIS):
            if token.text in _PATH_STEPS and self.open and self.open[-1] in _TRIPLES_IN:
                self._count(1)  # a step of a property path is a triple pattern of its own
            self._emit(token.text)  # an operator, or the empty argument list of a call
        else:  # VAR, NUMBER, BNODE, ANON, NIL
            self._term(token.text)

    def _word(self, index: int) -> None:
        token = self.tokens[index]
        if token.text == "a":
            self._term("a")
            return
        word = token.text.upper()
        self._allowed(token, word)
        if word == "GRAPH":
            self._graph_name(index + 1)
        elif word == "SELECT":
            self.clauses[-1] = "select"
        elif word == "WHERE":
            self.clauses[-1] = ""
        elif word in ("GROUP", "ORDER", "HAVING"):
            self.clauses[-1] = "modifier"
        elif word == "VALUES":
            self.values_next = True
        if word in _COUNTED_WORDS:
            self._count(1)
        if word in ("TRUE", "FALSE"):
            self._term(word.lower())
        else:
            self._emit(word)

    def _allowed(self, token: Token, word: str) -> None:
        if word in self.words and token.text.isascii():  # "\u017felect".upper() is "SELECT"
            return
        if word in UPDATES:  # not where a form stands: no update request, nor a query
            raise _invalid(token, "a SPARQL UPDATE keyword has no place in a query")
        if word in ("SERVICE", "SILENT"):
            raise _invalid(
                token, "SPARQL SERVICE (a remote query) is not allowed on the blackboard"
            )
        if word in ("FROM", "NAMED"):
            raise _invalid(
                token,
                "an agent's query may not name its dataset (FROM): the"
                " blackboard sets it to the graphs of the areas it reads",
            )
        if word in ("BASE", "PREFIX"):
            raise _invalid(token, f"{word} belongs before the query form")
        what = "keyword" if is_keyword(token.text) else "word"
        raise _invalid(
            token, f"unknown {what} {preview(token.text)} (not in the allow-list of SPARQL 1.1)"
        )

    def _graph_name(self, index: int) -> None:
        kind = self._kind(index)
        if kind == "VAR":
            return
        if kind not in _IRIS:
            raise _invalid(self.tokens[index - 1], "GRAPH takes a variable or an IRI")
        self.graphs.add(self._iri(self.tokens[index]))

    def _punct(self, index: int) -> None:
        text = self.tokens[index].text
        if text == "{":
            self._open_group()
        elif text == "(":
            self.open.append(self._paren(index))
        elif text == "[":
            self.open.append(_BLANK)
            self._count(1)
        elif text in "})]":
            self._close(index)
        elif self.open and self.open[-1] in _TRIPLES_IN:  # ".", ";" or "," between triples
            self._count(1)
        self._emit(text)

    def _open_group(self) -> None:
        if self.values_next:
            self.values_next = False
            self.open.append(_DATA)
        else:
            self.open.append(_GROUP)
            self._count(1)
        if self.clauses[-1] == "select":  # SELECT ... { (WHERE left out)
            self.clauses[-1] = ""
        self.clauses.append("")

    def _close(self, index: int) -> None:
        token = self.tokens[index]
        if not self.open:
            raise _invalid(token, "closes nothing")
        held = self.open.pop()
        expected = "}" if held in (_GROUP, _DATA) else "]" if held == _BLANK else ")"
        if token.text != expected:
            raise _invalid(token, f"closes a bracket that {expected!r} should close")
        if expected == "}":
            self.clauses.pop()

    def _paren(self, index: int) -> str:
        """Return what the ``(`` at ``index`` opens: an expression, a collection, a row."""
        before = self.tokens[index - 1]
        inner = self.open[-1] if self.open else ""
        if before.kind == "WORD" and before.text.upper() in _EXPRESSION_AFTER:
            return _EXPRESSION
        if before.kind in _IRIS and self._calling(index - 1):
            return _EXPRESSION
        if self.values_next or inner in (_DATA, _ROW):
            return _ROW
        if inner == _EXPRESSION or not self.open or self.clauses[-1]:
            return _EXPRESSION
        return _LIST

    def _calling(self, index: int) -> bool:
        """Whether the IRI at ``index``, followed by ``(``, is a function call."""
        inner = self.open[-1] if self.open else ""
        if inner == _EXPRESSION or not self.open or self.clauses[-1]:
            return True
        return self._kind(index - 1) == "WORD" and self.tokens[index - 1].text.upper() == "FILTER"

    def _iri_token(self, index: int) -> None:
        token = self.tokens[index]
        iri = self._iri(token)
        following = self._kind(index + 1)
        call = following == "NIL" or (following == "PUNCT" and self.tokens[index + 1].text == "(")
        if call and self._calling(index) and iri not in CASTS:
            raise _invalid(
                token,
                f"<{iri}> is not a function here (only SPARQL's built-in"
                " functions and the XSD casts may be called)",
            )
        if self.open and self.open[-1] == _LIST:
            self._count(2)
        self._emit(iri_text(iri))

    def _attached(self, index: int) -> None:
        token = self.tokens[index]
        if self._kind(index - 1) not in STRINGS:
            raise _invalid(token, "a language tag or ^^ must follow a string")
        if token.kind == "DTYPE" and self._kind(index + 1) not in _IRIS:
            raise _invalid(token, "^^ must be followed by a datatype IRI")
        self.out[-1] += token.text
        if token.kind == "DTYPE":
            self.out[-1] += iri_text(self._iri(self.tokens[index + 1]))
            self.skip = index + 1

    def _term(self, text: str) -> None:
        if self.open and self.open[-1] == _LIST:
            self._count(2)
        self._emit(text)

    def _emit(self, text: str) -> None:
        self.out.append(text)

    def _count(self, patterns: int) -> None:
        self.triples += patterns
        if self.triples > self.max_triples:
            raise ContentTooLargeError(
                f"a SPARQL query may hold {self.max_triples} triple patterns (counting each"
                " group, filter, binding and collection member; max_triple_patterns)"
            )

    # -- helpers -----------------------------------------------------------------------------

    def _kind(self, index: int) -> str:
        return self.tokens[index].kind if 0 <= index < len(self.tokens) else ""

    def _iri(self, token: Token) -> str:
        """Return the absolute IRI an ``IRIREF`` or a prefixed name stands for."""
        if token.kind == "IRIREF":
            reference = token.text[1:-1]
            iri = resolve(self.base, reference)
            if iri is None:
                raise _invalid(token, "is a relative IRI and the query has no (absolute) BASE")
        else:
            prefix, _, local = token.text.partition(":")
            namespace = self.prefixes.get(prefix)
            if namespace is None:
                raise _invalid(token, f"uses the prefix {prefix + ':'!r}, which no PREFIX declares")
            iri = namespace + local_name(local)
        iri_text(iri)  # refuses what is not an absolute IRI
        return iri


def _invalid(token: Token, why: str) -> InvalidInputError:
    return InvalidInputError(f"SPARQL query: {preview(token.text)} at {token.start}: {why}")


def _update(word: str) -> PermissionDeniedError:
    return PermissionDeniedError(
        f"SPARQL UPDATE ({word}) is not allowed here; write nodes through the blackboard",
        role="agent",
        graph="*",
        operation="sparql-update",
    )


# -- where bindings go -----------------------------------------------------------------------


class _Unlimited(NamedTuple):
    """Limits for text the blackboard already checked (``values_anchor``)."""

    max_chars: int = 1 << 62
    max_group_depth: int = 1 << 62
    max_bracket_depth: int = 1 << 62
    max_union_arms: int = 1 << 62
    max_operators: int = 1 << 62


def with_values(text: str, clause: str) -> str:
    """Return ``text`` with ``clause`` (a ``VALUES`` block) opening the query's outer group.

    The group is the one after the top-level ``WHERE`` (or the form's first group when
    ``WHERE`` is left out); without one (``DESCRIBE <iri>``, ``CONSTRUCT WHERE``) the clause
    trails the query. ``text`` is read, and returned, with its codepoint escapes resolved, as
    a backend reads it.
    """
    decoded, at = _remembered_anchor(text) if len(text) <= _REMEMBERED_CHARS else _opening(text)
    if at is None:
        return f"{decoded}\n{clause}"
    return f"{decoded[:at]} {clause} {decoded[at:]}"


def _opening(text: str) -> tuple[str, int | None]:
    """Return ``text`` decoded, and where its outer group's ``{`` ends (``None``: none)."""
    decoded = decode_codepoints(text)
    anchor = _anchor(tokenize(decoded, _Unlimited()))
    return decoded, None if anchor is None else anchor.start + 1


# A text is bound again and again with new values (a frame's, a benchmark's): where is kept.
_remembered_anchor = functools.lru_cache(maxsize=512)(_opening)


def _anchor(tokens: list[Token]) -> Token | None:
    """Return the ``{`` opening the query's outer group pattern, if it has one."""
    depth, form, where, template = 0, "", False, False
    for token in tokens:
        if token.kind == "PUNCT" and token.text == "}":
            depth -= 1
        elif token.kind == "PUNCT" and token.text == "{":
            if depth == 0 and form:
                if form != "CONSTRUCT" or template:
                    return token
                if where:  # CONSTRUCT WHERE { ... }: the group is the template
                    return None
                template = True
            depth += 1
        elif depth == 0 and token.kind == "WORD":
            word = token.text.upper()
            if not form and word in FORMS:
                form = word
            where = where or word == "WHERE"
    return None


__all__ = [
    "CASTS",
    "FORMS",
    "FUNCTIONS",
    "KEYWORDS",
    "UPDATES",
    "CheckedQuery",
    "check_agent_query",
    "check_query",
    "with_values",
]
