"""The SPARQL tokenizer, the allow-list and the rewrite, read as an attacker reads them.

The tokenizer follows the grammar's terminals (escapes in local names, the four string forms,
codepoint escapes resolved first); the check refuses what it does not know; the rewrite is
what the store runs, and means what the text meant. Properties (hypothesis): on any text the
tokenizer raises nothing but ``InvalidInputError`` and the check nothing but its typed
refusals, neither recursing however deep the text nests; a rewrite passes its own check
unchanged and holds no ``SERVICE``.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pyoxigraph as ox
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gliding_core import GlidingError, L0Store
from gliding_core.blackboard.board import Blackboard
from gliding_core.blackboard.graph import EmbeddedGraph
from gliding_core.blackboard.sparql_check import (
    CASTS,
    CheckedQuery,
    check_agent_query,
    check_query,
    with_values,
)
from gliding_core.blackboard.sparql_tokens import Token, local_name, resolve, tokenize
from gliding_core.config import BlackboardConfig, QueryLimits
from gliding_core.errors import (
    ConfigError,
    ContentTooLargeError,
    InvalidInputError,
    PermissionDeniedError,
)

LIMITS = QueryLimits()
HUGE = QueryLimits.model_construct(
    max_chars=10**8,
    max_group_depth=10**8,
    max_bracket_depth=10**8,
    max_triple_patterns=10**8,
    max_union_arms=10**8,
    max_operators=10**8,
)
EXAMPLES = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def kinds(text: str) -> list[tuple[str, str]]:
    return [(t.kind, t.text) for t in tokenize(text, LIMITS)]


def words(text: str) -> set[str]:
    """The bare words of a text, upper case."""
    return {t.text.upper() for t in tokenize(text, HUGE) if t.kind == "WORD"}


# -- the terminals -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("ex:o\\#", [("PNAME", "ex:o\\#")]),
        ("ex:o\\' x", [("PNAME", "ex:o\\'"), ("WORD", "x")]),
        ("ex:a.b.", [("PNAME", "ex:a.b"), ("PUNCT", ".")]),
        ("ex:%41\\~:c", [("PNAME", "ex:%41\\~:c")]),
        (":x :", [("PNAME", ":x"), ("PNAME", ":")]),
        ("?x $y ?", [("VAR", "?x"), ("VAR", "$y"), ("OP", "?")]),
        ("_:b1.", [("BNODE", "_:b1"), ("PUNCT", ".")]),
        ('"a\\"b" \'c\'', [("STRING2", '"a\\"b"'), ("STRING1", "'c'")]),
        (
            "'''it''s''' \"\"\"x\"y\"\"\"",
            [("STRING_LONG1", "'''it''s'''"), ("STRING_LONG2", '"""x"y"""')],
        ),
        ('"a"@en-GB', [("STRING2", '"a"'), ("LANGTAG", "@en-GB")]),
        ('"1"^^x:int', [("STRING2", '"1"'), ("DTYPE", "^^"), ("PNAME", "x:int")]),
        (
            "1 -1 +1.5 .5 1e3 1.E-2",
            [("NUMBER", n) for n in ("1", "-1", "+1.5", ".5", "1e3", "1.E-2")],
        ),
        ("1.", [("NUMBER", "1"), ("PUNCT", ".")]),
        ("true.", [("WORD", "true"), ("PUNCT", ".")]),
        ("<urn:a#'> <=", [("IRIREF", "<urn:a#'>"), ("OP", "<=")]),
        ("( ) [\t]", [("NIL", "( )"), ("ANON", "[\t]")]),
        ("a # SERVICE\nb", [("WORD", "a"), ("WORD", "b")]),
        ("?a<?b", [("VAR", "?a"), ("OP", "<"), ("VAR", "?b")]),
        (
            "||&&!=^^|^",
            [("OP", "||"), ("OP", "&&"), ("OP", "!="), ("DTYPE", "^^"), ("OP", "|"), ("OP", "^")],
        ),
        ("SE\\u0052VICE", [("WORD", "SERVICE")]),
        ("\\U00000053ERVICE", [("WORD", "SERVICE")]),
        ('"\\u0041"', [("STRING2", '"A"')]),
    ],
)
def test_the_tokenizer_reads_the_grammars_terminals(
    text: str, expected: list[tuple[str, str]]
) -> None:
    assert kinds(text) == expected


def test_a_local_name_means_its_escapes() -> None:
    assert local_name("o\\#\\'\\.x%41") == "o#'.x%41"


@pytest.mark.parametrize(
    ("text", "where"),
    [
        ("SELECT * { ?s ?p 'open }", "at 17"),
        ("SELECT * { ?s ?p ?o } \\", "at 22"),
        ("SELECT * { ?s ?p ?o } \x01", "at 22"),
        ('SELECT * { ?s ?p "a\\q" }', "at 17"),
        ("SELECT * { ?s ?p ?o } }", "closes nothing"),
        ("SELECT * {\u00a0?s ?p ?o }", "at 10"),
    ],
)
def test_what_is_not_a_terminal_is_refused_by_position(text: str, where: str) -> None:
    with pytest.raises(InvalidInputError, match=where):
        tokenize(text, LIMITS)


@pytest.mark.parametrize(
    "text",
    [
        "\\u005Cu0053ERVICE",  # resolves to \u0053ERVICE: a second backend pass would see SERVICE
        "SELECT * { ?s ?p '\\u' }",
        "SELECT * { ?s ?p '\\\\users' }",
        "\\uD800",
        "\\U00110000",
    ],
)
def test_codepoint_escapes_that_name_nothing_or_hide_one_are_refused(text: str) -> None:
    with pytest.raises(InvalidInputError, match=r"\\u|names no character"):
        tokenize(text, LIMITS)


# -- the limits, before anything parses ------------------------------------------------------


@pytest.mark.parametrize(
    ("field", "make"),
    [
        ("max_chars", lambda n: "SELECT * { ?s ?p ?o }" + " " * (n - 21)),
        ("max_group_depth", lambda n: "SELECT * WHERE " + "{" * n + "?s ?p ?o" + "}" * n),
        (
            "max_bracket_depth",
            lambda n: "SELECT * { ?s ?p ?o FILTER" + "(" * n + "?o" + ")" * n + " }",
        ),
        ("max_union_arms", lambda n: "SELECT * { " + " UNION ".join(["{ ?s ?p ?o }"] * n) + " }"),
        (
            "max_operators",
            lambda n: "SELECT ?o { ?s ?p ?o FILTER(" + " || ".join(["?o"] * (n + 1)) + ") }",
        ),
        ("max_triple_patterns", lambda n: "SELECT * { " + " . ".join(["?s ?p ?o"] * n) + " }"),
    ],
)
def test_each_limit_admits_its_value_and_refuses_one_more(
    field: str, make: Callable[[int], str]
) -> None:
    limit = getattr(LIMITS, field)
    check_query(make(limit))
    with pytest.raises(ContentTooLargeError, match=field.removeprefix("max_")):
        check_query(make(limit + 1))


def test_the_length_is_checked_before_anything_reads_the_text() -> None:
    limits = QueryLimits(max_chars=100)
    with pytest.raises(ContentTooLargeError, match="100 characters"):
        check_query("\\u0053" * 20 + "\x01" * 90, limits)  # neither decoded nor read


def test_reading_stops_at_the_first_token_past_a_limit() -> None:
    deep = "SELECT * WHERE " + "{" * 17 + "\x01" * 10_000
    with pytest.raises(ContentTooLargeError, match="group"):
        check_query(deep)  # the bad character after the groups is never reached


def test_limits_are_validated_settings() -> None:
    for bad in [{"max_group_depth": 0}, {"max_group_depth": 100}, {"max_chars": "big"}]:
        with pytest.raises(ConfigError):
            QueryLimits(**bad)
    config = BlackboardConfig(query_limits={"max_group_depth": 3})
    assert config.query_limits.max_group_depth == 3
    assert BlackboardConfig().query_limits == LIMITS


def test_a_boards_limits_apply_to_its_agents_and_to_itself(store: L0Store) -> None:
    config = BlackboardConfig(flush_interval_s=0.0, query_limits={"max_group_depth": 3})
    board = Blackboard(EmbeddedGraph(), store=store, config=config)
    doer = board.agent("d", role="do", task="urn:task:t")
    three, four = ("ASK " + "{" * n + "}" * n for n in (3, 4))
    assert board.query(three).boolean is True
    assert doer.query(three).boolean is True
    for run in (lambda: board.query(four), lambda: doer.query(four)):
        with pytest.raises(ContentTooLargeError, match="max_group_depth"):
            run()
    board.close()


# -- the allow-list -----------------------------------------------------------------------------

GRAPH_A, GRAPH_B = "urn:graph:a", "urn:graph:b"


def agent(text: str, graphs: tuple[str, ...] = (GRAPH_A,)) -> CheckedQuery:
    return check_agent_query(text, graphs=graphs, role="do")


@pytest.mark.parametrize(
    "text",
    [
        "SELECT * WHERE { SERVICE <http://x/> { ?s ?p ?o } }",
        "PREFIX ex: <urn:ex:> SELECT * WHERE { VALUES ?z { ex:o\\# } SERVICE <http://x/> {} }",
        "SELECT * WHERE { \\u0053ERVICE <http://x/> { } }",
        "SELECT * WHERE { SERVICE SILENT ?u { } }",
        "SELECT * WHERE { { SELECT * WHERE { service <http://x/> { } } } }",
    ],
)
def test_service_is_refused_in_either_mode(text: str) -> None:
    for check in (check_query, agent):
        with pytest.raises(InvalidInputError, match="SERVICE"):
            check(text)


@pytest.mark.parametrize(
    "text",
    [
        'ASK { ?s <urn:service> "SERVICE" }',
        "ASK { ?s <urn:x#SERVICE> ?o } # SERVICE <http://x/> { }",
        "PREFIX ex: <urn:ex:> ASK { ?s ex:SERVICE ?o }",
        "ASK { ?service ?p '''SERVICE <http://x/> { }''' }",
    ],
)
def test_the_word_in_a_string_an_iri_a_name_or_a_comment_is_not_the_keyword(text: str) -> None:
    checked = agent(text)
    assert "SERVICE" not in words(checked.text)
    assert "#" not in checked.text.split(">")[-1]  # no comment survives the rewrite


def test_an_update_is_refused_as_one_where_a_form_stands() -> None:
    for text in [
        "INSERT DATA { <urn:a> <urn:b> 1 }",
        "PREFIX ex: <urn:ex:> BASE <urn:b> # SELECT\n DELETE WHERE { ?s ?p ?o }",
        "\\u0049NSERT DATA { <urn:a> <urn:b> 1 }",
    ]:
        with pytest.raises(PermissionDeniedError) as refused:
            agent(text)
        assert refused.value.operation == "sparql-update"
        assert refused.value.role == "do"
    with pytest.raises(InvalidInputError, match="UPDATE"):
        agent("SELECT * WHERE { } INSERT DATA { <urn:a> <urn:b> 1 }")


def test_a_dataset_clause_is_the_systems_only() -> None:
    text = f"SELECT * FROM <{GRAPH_B}> FROM NAMED <{GRAPH_B}> WHERE {{ ?s ?p ?o }}"
    with pytest.raises(InvalidInputError, match="FROM"):
        agent(text)
    assert "FROM NAMED <urn:graph:b>" in check_query(text).text


def test_graph_may_name_only_the_graphs_the_query_reads() -> None:
    assert agent(f"ASK {{ GRAPH <{GRAPH_A}> {{ }} GRAPH ?g {{ }} }}").graphs == {GRAPH_A}
    for text in [
        f"ASK {{ GRAPH <{GRAPH_B}> {{ }} }}",
        "PREFIX g: <urn:graph:> ASK { GRAPH g:b { } }",
        "BASE <urn:graph:b> ASK { GRAPH <> { } }",
        "PREFIX g: <urn:gra> ASK { GRAPH g:ph:b { } }",
    ]:
        with pytest.raises(PermissionDeniedError, match="urn:graph:b") as refused:
            agent(text)
        assert refused.value.graph == GRAPH_B
    with pytest.raises(InvalidInputError, match="GRAPH takes"):
        agent("ASK { GRAPH 'x' { } }")


@pytest.mark.parametrize(
    "text",
    [
        "PREFIX ex: <urn:ex:> ASK { ?s ?p ?o FILTER(ex:f(?o)) }",
        "PREFIX ex: <urn:ex:> ASK { ?s ?p ?o FILTER ex:f(?o) }",
        "PREFIX ex: <urn:ex:> ASK { BIND(ex:f() AS ?x) }",
        "PREFIX ex: <urn:ex:> SELECT (ex:f(?o) AS ?x) WHERE { ?s ?p ?o }",
        "PREFIX ex: <urn:ex:> SELECT ?o WHERE { ?s ?p ?o } ORDER BY ?o ex:f(?o)",
        "PREFIX ex: <urn:ex:> SELECT ?o WHERE { ?s ?p ?o } GROUP BY ex:f(?o)",
        "PREFIX ex: <urn:ex:> SELECT ?o WHERE { { SELECT ?o WHERE { ?s ?p ?o } ORDER BY ?s"
        " ex:f(?o) } }",
        "SELECT ?o WHERE { ?s ?p ?o FILTER(STR(<http://127.0.0.1:9/f>(?o)) = '') }",
    ],
)
def test_a_call_of_a_function_named_by_an_iri_is_refused(text: str) -> None:
    with pytest.raises(InvalidInputError, match="not a function"):
        agent(text)


def test_the_xsd_casts_and_collections_after_an_iri_are_allowed() -> None:
    assert len(CASTS) >= 7
    agent(
        "PREFIX xsd: <http://www.w3.org/2001/XMLSchema#> PREFIX ex: <urn:ex:>"
        " SELECT ?o WHERE { ?s ex:p (1 ex:q) . FILTER(xsd:integer(?o) > 1) }"
    )
    agent("PREFIX ex: <urn:ex:> CONSTRUCT { ?s ex:p ( ?o ) } WHERE { ?s ?p ?o }")


@pytest.mark.parametrize(
    "text",
    [
        "SELECT * WHERE { ?s A ?o }",
        "\u017fELECT * WHERE { ?s ?p ?o }",  # the long s: its upper case is S
        "SELECT * WHERE { ?s ?p ?o FILTER(\uff33\uff34\uff32(?o)) }",  # fullwidth STR
        "SELECT * WHERE { ?s ?p ?o } LATERAL { }",
        "SELECT * WHERE { ?s ?p ?o BIND(TRIPLE(?s, ?p, ?o) AS ?t) }",
        "SELECT * WHERE { ?s ?p ?o } frob",
        "SELECT * WHERE { ?s ?p ?o } PREFIX ex: <urn:ex:>",
        "SELECT * WHERE { ?s ex:p ?o }",
        "SELECT * WHERE { ?s <relative> ?o }",
        "PREFIX ex: <relative/> SELECT * WHERE { ?s ex:p ?o }",
        "BASE <relative> SELECT * WHERE { }",
        "SELECT * WHERE { ?s ?p ?o FILTER(?o = 'a'@en@fr) }",
        "SELECT * WHERE { ?s ?p @en }",
        "SELECT * WHERE { ?s ?p '1'^^'x' }",
        "SELECT * WHERE { ?s ?p ?o ) }",
        "SELECT * WHERE { ?s ?p ?o ",
        "PREFIX ex <urn:ex:> SELECT * { }",
        "PREFIX ex:a <urn:ex:> SELECT * { }",
        "SELECT * { ?s <urn:a b> ?o }",
        "# only a comment",
        "PREFIX ex: <urn:ex:>",
    ],
)
def test_what_the_allow_list_does_not_know_is_refused(text: str) -> None:
    with pytest.raises(InvalidInputError):
        agent(text)


def test_a_non_string_or_empty_query_is_refused() -> None:
    for value in [None, 5, b"ASK {}", "", "   "]:
        with pytest.raises(InvalidInputError, match="non-empty string"):
            check_query(value)


# -- the rewrite means what the text meant ------------------------------------------------------

EQUIVALENT = [
    "PREFIX ex: <urn:ex:> SELECT ?o WHERE { ?s ex:p\\#1 ?o }",
    "BASE <urn:ex:> PREFIX e: <p> SELECT ?o WHERE { ?s e:\\#1 ?o }",
    "BASE <http://h/a/b> SELECT ?s ?o WHERE { ?s <../c> ?o } ORDER BY ?o",
    "SELECT ?o WHERE { ?s ?p ?o FILTER(?o = '''it's''' || ?o = \"say \\\"hi\\\"\""
    " || ?o = 'x'@en) }",
    "SELECT ?o WHERE { ?s ?p ?o FILTER(?o IN ('\\u0041', \"tab\\t\", '''line\nbreak''')) }",
    "SELECT (COUNT(*) AS ?n) (SUM(?v) AS ?t) WHERE { ?s <urn:v> ?v } GROUP BY ?s"
    " HAVING (SUM(?v) > 1)",
    "SELECT ?s WHERE { ?s (<urn:knows>|^<urn:knows>)+ <urn:c> }",
    "SELECT ?s WHERE { ?s <urn:knows>/<urn:knows>? ?o . FILTER NOT EXISTS { ?o <urn:v> 3 } }",
    "SELECT ?s ?v WHERE { ?s <urn:v> ?v FILTER(?v -1 > 0 && ?v*2 < 10 && -?v < 0) }",
    "SELECT ?s WHERE { ?s ?p ?o MINUS { ?s <urn:v> 1 } OPTIONAL { ?s <urn:x> ?x } }",
    "SELECT ?x WHERE { { SELECT ?x WHERE { ?x ?p ?o } ORDER BY DESC(?x) LIMIT 2 } }",
    "SELECT * WHERE { VALUES (?s ?v) { (<urn:a> 1) (<urn:b> UNDEF) } ?s ?p ?o }",
    "SELECT ?s WHERE { ?s <urn:v> ?v } VALUES ?v { 1 2 }",
    "PREFIX xsd: <http://www.w3.org/2001/XMLSchema#> SELECT ?s WHERE"
    " { ?s <urn:v> ?v FILTER(xsd:string(?v) = '1' && ?v = '1'^^xsd:integer) }",
    "CONSTRUCT { ?s <urn:seen> true } WHERE { ?s ?p ?o } LIMIT 3",
    "CONSTRUCT WHERE { ?s <urn:v> ?v }",
    "DESCRIBE <urn:a>",
    "ASK { <urn:a> <urn:knows> [ <urn:knows> [] ] }",
    "select ?s where { ?s a <urn:T> ; <urn:v> ?v , 2 . bind(str(?v) as ?t)"
    " filter(regex(?t, '^1', 'i')) }",
    "SELECT ?s WHERE { GRAPH ?g { ?s ?p ?o } GRAPH <urn:g> { ?s ?p ?o } }",
    "SELECT (GROUP_CONCAT(?o; SEPARATOR = ',') AS ?all) WHERE { ?s <urn:knows> ?o }",
    "SELECT ?s WHERE { ?s <urn:list> (1 2) }",
    "SELECT * WHERE { ?s <urn:v> ?v FILTER(isLiteral(?v) && !isIRI(?v) && sameTerm(?v, ?v)) }",
]


@pytest.fixture(scope="module")
def data() -> ox.Store:
    store = ox.Store()
    store.load(
        input=b"""
        @prefix u: <urn:> .
        u:a u:knows u:b ; u:v 1 ; u:x "it's", "say \\"hi\\"" , "x"@en, "A", "tab\\t" ;
            a u:T .
        u:b u:knows u:c ; u:v 2 ; u:list (1 2) .
        u:c u:v 3 ; u:knows [ u:knows [] ] .
        <urn:ex:s> <urn:ex:p#1> "hash" .
        <http://h/c> <http://h/c> "dots" .
        """,
        format=ox.RdfFormat.TURTLE,
        to_graph=ox.NamedNode("urn:g"),
    )
    return store


def answers(store: ox.Store, text: str) -> Any:
    result = store.query(text, use_default_graph_as_union=True)
    if isinstance(result, ox.QueryBoolean):
        return bool(result)
    if isinstance(result, ox.QueryTriples):
        return sorted(str(t) for t in result)
    return sorted(str([solution[v] for v in result.variables]) for solution in result)


@pytest.mark.parametrize("text", EQUIVALENT)
def test_the_rewrite_answers_as_the_text_does(data: ox.Store, text: str) -> None:
    rewrite = check_query(text).text
    assert answers(data, rewrite) == answers(data, text)
    assert "PREFIX" not in words(rewrite)
    assert "BASE" not in words(rewrite)
    assert "\\u" not in rewrite


def test_at_least_some_equivalences_are_not_empty(data: ox.Store) -> None:
    """The comparison above would prove little on empty answers."""
    assert sum(bool(answers(data, text)) for text in EQUIVALENT) >= len(EQUIVALENT) - 3


def test_relative_references_resolve_as_rfc_3986_says() -> None:
    base = "http://a/b/c/d;p?q"
    for reference, expected in {
        "g": "http://a/b/c/g",
        "./g": "http://a/b/c/g",
        "../g": "http://a/b/g",
        "../../../g": "http://a/g",
        "/./g": "http://a/g",
        "?y": "http://a/b/c/d;p?y",
        "#s": "http://a/b/c/d;p?q#s",
        "": "http://a/b/c/d;p?q",
        "//g": "http://g",
        "g:h": "g:h",
        "urn:x/../y": "urn:x/../y",  # an absolute IRI is kept as written
    }.items():
        assert resolve(base, reference) == expected, reference
    assert resolve(None, "g") is None
    assert resolve("relative", "g") is None


# -- where bindings go --------------------------------------------------------------------------

CLAUSE = "VALUES (?x) { (1) }"


@pytest.mark.parametrize(
    ("text", "before"),
    [
        ("SELECT ?x WHERE { ?s ?p ?x }", "SELECT ?x WHERE {"),
        ("SELECT ?x WHERE { ?s <urn:a#'> ?x FILTER(?x != '}{') } # {", "SELECT ?x WHERE {"),
        ("SELECT ?x # WHERE {\n { ?s ?p ?x }", "SELECT ?x # WHERE {\n {"),
        ("SELECT ?x { { SELECT ?x WHERE { ?s ?p ?x } } }", "SELECT ?x {"),
        ("CONSTRUCT { ?s ?p ?x } WHERE { ?s ?p ?x }", "CONSTRUCT { ?s ?p ?x } WHERE {"),
        ("CONSTRUCT { ?s ?p ?x } { ?s ?p ?x }", "CONSTRUCT { ?s ?p ?x } {"),
        ("ASK { ?s ?p ?x }", "ASK {"),
        ("PREFIX w: <urn:where:> SELECT ?x WHERE { ?s w:p\\# ?x }", "SELECT ?x WHERE {"),
    ],
)
def test_values_open_the_outer_group(text: str, before: str) -> None:
    bound = with_values(text, CLAUSE)
    assert bound.split(CLAUSE)[0].rstrip().endswith(before.rstrip()), bound
    ox.Store().query(bound)  # it parses


@pytest.mark.parametrize("text", ["CONSTRUCT WHERE { ?s ?p ?x }", "DESCRIBE <urn:x>"])
def test_values_trail_a_query_without_an_outer_group(text: str) -> None:
    assert with_values(text, CLAUSE) == f"{text}\n{CLAUSE}"


# -- the cache --------------------------------------------------------------------------------


def test_a_text_checked_again_costs_a_look_up_and_each_refusal_is_new() -> None:
    text = "SELECT ?s WHERE { ?s ?p ?o }"
    assert check_query(text) is check_query(text)
    assert agent(text) is not check_query(text)  # the agent's check is another entry
    errors = []
    for _ in range(2):
        with pytest.raises(InvalidInputError) as refused:
            check_query("SELECT * { SERVICE <http://x/> { } }")
        errors.append(refused.value)
    assert errors[0] is not errors[1]


# -- properties -------------------------------------------------------------------------------


@contextmanager
def shallow_stack(frames: int = 60) -> Iterator[None]:
    """Allow only ``frames`` Python frames above this one: a recursive reader would fail."""
    depth = 0
    frame = sys._getframe()
    while frame is not None:
        depth += 1
        frame = frame.f_back  # type: ignore[assignment]
    old = sys.getrecursionlimit()
    sys.setrecursionlimit(depth + frames)
    try:
        yield
    finally:
        sys.setrecursionlimit(old)


def refusals_only(run: Callable[[], object]) -> None:
    try:
        with shallow_stack():
            run()
    except (InvalidInputError, PermissionDeniedError):
        pass


ALPHABET = st.sampled_from(
    [*"{}()[]<>.,;:?$_'\"#\\^|&!=+-*/@ \t\n%", "u0053", "U00000053", "SERVICE", "a", "x"]
)


@EXAMPLES
@given(st.text(max_size=300) | st.lists(ALPHABET, max_size=120).map("".join))
def test_the_tokenizer_and_the_check_raise_only_their_refusals(text: str) -> None:
    refusals_only(lambda: tokenize(text, LIMITS))
    refusals_only(lambda: check_query(text))
    refusals_only(lambda: agent(text))


FRAGMENTS = st.sampled_from(
    [
        "SELECT",
        "ASK",
        "WHERE",
        "{",
        "}",
        "(",
        ")",
        "[",
        "]",
        ".",
        ";",
        ",",
        "?s",
        "?o",
        "$p",
        "a",
        "ex:o\\#",
        "ex:o\\'",
        "ex:a\\.b",
        "<urn:x#'>",
        "<http://127.0.0.1:9/>",
        "'s'",
        '"d"',
        "'''l'''",
        '"""L"""',
        "# c\n",
        "SERVICE",
        "SE\\u0052VICE",
        "\\u0053ERVICE",
        "service",
        "SILENT",
        "OPTIONAL",
        "UNION",
        "FILTER",
        "EXISTS",
        "GRAPH",
        "FROM",
        "BIND",
        "AS",
        "1",
        "-2",
        "@en",
        "^^",
        "||",
        "=",
        "STR",
    ]
)


@EXAMPLES
@given(st.lists(FRAGMENTS, max_size=40), st.sampled_from([" ", "", "\n"]))
def test_a_rewrite_holds_no_service_and_passes_its_own_check_unchanged(
    parts: list[str], glue: str
) -> None:
    text = "PREFIX ex: <urn:ex:> " + glue.join(parts)
    for check in (check_query, agent):
        try:
            checked = check(text)
        except (InvalidInputError, PermissionDeniedError):
            continue
        assert not {"SERVICE", "SILENT"} & words(checked.text)
        assert check(checked.text).text == checked.text


@pytest.mark.parametrize("depth", [10_000, 100_000])
def test_nothing_recurses_however_deep_the_text_nests(depth: int) -> None:
    for opening, closing in [("{", "}"), ("(", ")"), ("[", "]")]:
        text = "SELECT * WHERE { ?s ?p " + opening * depth + "?o" + closing * depth + " }"
        with shallow_stack():
            with contextlib.suppress(GlidingError):  # refused or not, without recursing
                check_query(text, HUGE)
            tokens: list[Token] = tokenize(text, HUGE)
        assert len(tokens) >= 2 * depth


def test_a_board_on_disk_reads_the_rewrite_too(tmp_path: Path, store: L0Store) -> None:
    board = Blackboard(EmbeddedGraph(tmp_path / "g"), store=store)
    board.write([{"@id": "urn:ex:o#", "urn:ex:p": "v"}], task="urn:task:t", area="execution")
    doer = board.agent("d", role="do", task="urn:task:t")
    result = doer.query("PREFIX ex: <urn:ex:> SELECT ?v WHERE { ex:o\\# ex:p ?v } # }")
    assert result.values() == [{"v": "v"}]
    board.close()
