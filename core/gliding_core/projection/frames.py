"""L3: projection frames: what each role sees of a task, as SPARQL CONSTRUCT over the blackboard.

A frame is a CONSTRUCT query over one task's area graphs (L2 nodes, and L0 entries paged into
the task's ``knowledge`` area), its parameters, its limits and the properties it embeds. The
nine shipped frames are the reference's (``summary_only`` ... ``5w2h_summary``), rewritten in
the blackboard's one vocabulary (``gh:``, the namespace nodes are written in: the reference
queried another one and matched nothing). Users register frames of their own the same way.

Invariants:
- A frame's parameters are bound as terms (``ParamKind.IRI`` to a named node, ``LITERAL`` to a
  plain literal) through the store's substitutions; nothing the caller passes is spliced into
  the query text. An unbound parameter matches any value (``da_input`` without a plan reads
  every plan's steps).
- The query sees only the frame's areas of the task (the dataset is set by the blackboard, so
  ``FROM`` in the text cannot widen it), never another task's graphs.
- Every frame marks its selected nodes with ``SELECTED`` in its template, so the framing step
  knows the frame's nodes from the objects they embed; the mark never reaches the output.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum

import pyoxigraph as ox

from gliding_core.blackboard.board import check_query
from gliding_core.blackboard.vocabulary import AREAS, PREFIXES, check_area
from gliding_core.errors import FrameNotFoundError, InvalidInputError
from gliding_core.jsonld import preview

SELECTED = "urn:gliding-horse:projection:selected"
PROLOGUE = "".join(f"PREFIX {name}: <{iri}>\n" for name, iri in PREFIXES.items())
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
_VARIABLE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,63}$")


class ParamKind(str, Enum):
    """How a frame parameter is bound: as an IRI (a node) or as a plain string literal."""

    IRI = "iri"
    LITERAL = "literal"


@dataclass(frozen=True, slots=True)
class Frame:
    """One projection frame.

    Attributes:
        name: the frame's name (``pa_init``).
        description: who uses it and for what.
        where: the body of the CONSTRUCT's WHERE clause; it binds ``?node`` to each selected
            node and may bind ``?p`` / ``?o`` to the properties shown (see ``template``).
        template: the CONSTRUCT template, without braces (the ``SELECTED`` mark is added).
        params: the parameters bound as ``?name`` and how (``{"plan": ParamKind.IRI}``);
            ``task`` (the task's IRI) is always bound.
        areas: the task's areas the query sees.
        max_nodes: the most selected nodes the frame returns.
        max_tokens: the default token budget of a projection of this frame.
        embed: the properties whose objects are embedded as nested nodes.
        roles: the roles the frame is meant for (documentation and the scheduler's defaults).
    """

    name: str
    description: str
    where: str
    template: str
    params: Mapping[str, ParamKind] = field(default_factory=dict)
    areas: tuple[str, ...] = AREAS
    max_nodes: int = 10
    max_tokens: int = 512
    embed: tuple[str, ...] = ()
    roles: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not _NAME.match(self.name):
            raise InvalidInputError(f"a frame name must be a short word, got {preview(self.name)}")
        for key in ("max_nodes", "max_tokens"):
            value = getattr(self, key)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise InvalidInputError(f"frame {self.name!r}: {key} must be an int >= 1")
        object.__setattr__(self, "areas", tuple(check_area(a) for a in self.areas))
        object.__setattr__(self, "params", _check_params(self.name, self.params))
        object.__setattr__(self, "embed", tuple(self.embed))
        check_query(self.sparql)
        try:
            ox.Store().query(self.sparql)  # parses the text; an empty store answers at once
        except SyntaxError as exc:
            raise InvalidInputError(
                f"frame {self.name!r}: its SPARQL does not parse: {exc}"
            ) from exc

    @property
    def sparql(self) -> str:
        """The whole CONSTRUCT query (prefixes, template with the mark, WHERE, LIMIT)."""
        mark = f"?node <{SELECTED}> true ."
        # Solutions, not nodes, are limited: a multi-valued property gives a node several.
        limit = self.max_nodes * 8
        return (
            f"{PROLOGUE}CONSTRUCT {{ {mark} {self.template} }}\n"
            f"WHERE {{ {self.where} }}\nLIMIT {limit}"
        )

    def bindings(
        self, task: str, params: Mapping[str, object]
    ) -> dict[str, ox.NamedNode | ox.Literal]:
        """Return the terms the query's variables are bound to.

        Raises:
            InvalidInputError: an unknown parameter, or a value that is not an IRI / a string.
        """
        if not isinstance(params, Mapping):
            raise InvalidInputError(f"frame parameters must be a mapping, got {preview(params)}")
        unknown = sorted(set(params) - set(self.params))
        if unknown:
            raise InvalidInputError(
                f"frame {self.name!r} takes parameters {sorted(self.params)}, not {unknown}"
            )
        bound: dict[str, ox.NamedNode | ox.Literal] = {}
        task_term = _iri(task, "task")
        if re.search(r"[?$]task\b", self.where):  # the store refuses a variable not in the query
            bound["task"] = task_term
        for key, value in params.items():
            if value is None:
                continue
            kind = self.params[key]
            bound[key] = _iri(value, key) if kind is ParamKind.IRI else _literal(value, key)
        return bound


def _check_params(name: str, params: object) -> dict[str, ParamKind]:
    if not isinstance(params, Mapping):
        raise InvalidInputError(f"frame {name!r}: params must be a mapping of names to kinds")
    checked: dict[str, ParamKind] = {}
    for key, kind in params.items():
        if not isinstance(key, str) or not _VARIABLE.match(key) or key == "task":
            raise InvalidInputError(f"frame {name!r}: bad parameter name {preview(key)}")
        try:
            checked[key] = ParamKind(kind)
        except ValueError:
            raise InvalidInputError(
                f"frame {name!r}: parameter {key!r} kind must be 'iri' or 'literal', got {kind!r}"
            ) from None
    return checked


def _iri(value: object, what: str) -> ox.NamedNode:
    if not isinstance(value, str):
        raise InvalidInputError(f"frame parameter {what!r} must be an IRI, got {preview(value)}")
    try:
        return ox.NamedNode(value)
    except ValueError as exc:
        raise InvalidInputError(
            f"frame parameter {what!r} must be an absolute IRI, got {value!r} ({exc})"
        ) from exc


def _literal(value: object, what: str) -> ox.Literal:
    if not isinstance(value, str) or not value:
        raise InvalidInputError(f"frame parameter {what!r} must be a string, got {preview(value)}")
    return ox.Literal(value)


def _optional(*names: str) -> str:
    return " ".join(f"OPTIONAL {{ ?node gh:{n} ?{_var(n)} }}" for n in names)


def _shown(*names: str) -> str:
    return " ".join(f"?node gh:{n} ?{_var(n)} ." for n in names)


def _var(name: str) -> str:
    return "v_" + name


def _embedded(*links: str) -> str:
    """Return the WHERE part binding the objects under ``links``, three levels deep."""
    values = " ".join(f"gh:{link}" for link in links)
    return (
        f"OPTIONAL {{ VALUES ?link {{ {values} }} ?node ?link ?o1 . ?o1 ?p1 ?v1 ."
        " OPTIONAL { ?v1 ?p2 ?v2 . OPTIONAL { ?v2 ?p3 ?v3 } } }"
    )


_EMBED_TEMPLATE = "?node ?link ?o1 . ?o1 ?p1 ?v1 . ?v1 ?p2 ?v2 . ?v2 ?p3 ?v3 ."


def _frame(
    name: str,
    description: str,
    select: str,
    shown: Sequence[str],
    *,
    embed: Sequence[str] = (),
    **options: object,
) -> Frame:
    shown = (*shown, *(link for link in embed if link not in shown))
    where = f"{select} OPTIONAL {{ ?node a ?type }} {_optional(*shown)}"
    template = f"?node a ?type . {_shown(*shown)}"
    if embed:
        where += f" {_embedded(*embed)}"
        template += f" {_EMBED_TEMPLATE}"
    return Frame(name, description, where, template, embed=tuple(embed), **options)  # type: ignore[arg-type]


_W5H2 = ("what", "why", "who", "when", "where", "how", "howMuch")

SHIPPED: tuple[Frame, ...] = (
    _frame(
        "summary_only",
        "Situation awareness: every node of the task that has a summary, with its status.",
        "?node gh:summary ?any_summary .",
        ("summary", "status", "confidence", "importance"),
        max_nodes=20,
        max_tokens=500,
        roles=("sa",),
    ),
    _frame(
        "pa_init",
        "Plan: the task (goal, constraints, resources, 5W2H), its plans and its knowledge.",
        "{ ?task a gh:Task . BIND(?task AS ?node) } UNION { ?node gh:task ?task }"
        " UNION { GRAPH ?g { ?node gh:summary ?any }"
        " FILTER(STRSTARTS(STR(?g), 'urn:gliding-horse:graph:knowledge:')) }",
        ("summary", "goal", "constraints", "resources", "deadline", "status", "importance", *_W5H2),
        embed=("subTasks", "resources"),
        areas=("tasks", "plan", "knowledge"),
        roles=("plan",),
    ),
    _frame(
        "da_input",
        "Do: the steps of a plan (all plans when none is given) with their instructions.",
        "{ ?node gh:plan ?plan } UNION { ?plan a gh:Plan . BIND(?plan AS ?node) }",
        ("summary", "instructions", "dependencies", "language", "status", "importance"),
        embed=("inputData",),
        params={"plan": ParamKind.IRI},
        areas=("plan", "execution", "knowledge"),
        roles=("do",),
    ),
    _frame(
        "ca_review",
        "Check: an artifact (all of the task's when none is given) and the success criteria.",
        "{ ?artifact a gh:Artifact . BIND(?artifact AS ?node) }"
        " UNION { ?node a gh:Task ; gh:successCriteria ?any }",
        (
            "summary",
            "storagePath",
            "language",
            "dependencies",
            "successCriteria",
            "status",
            "importance",
            *_W5H2,
        ),
        embed=("results", "validationRules"),
        params={"artifact": ParamKind.IRI},
        areas=("tasks", "execution", "review"),
        max_tokens=256,
        roles=("check",),
    ),
    _frame(
        "aa_decision",
        "Act: a review (all of the task's when none is given), its verdict and the decisions.",
        "{ ?review a gh:Review . BIND(?review AS ?node) } UNION { ?node a gh:Decision }",
        ("summary", "verdict", "severity", "suggestions", "decision", "status", "importance"),
        embed=("reviewResults",),
        params={"review": ParamKind.IRI},
        areas=("review", "decision"),
        roles=("act",),
    ),
    _frame(
        "health_check",
        "Situation awareness: status, confidence and error count of the task's nodes.",
        "?node gh:status ?any_status .",
        ("status", "confidence", "errorCount", "importance"),
        max_nodes=20,
        max_tokens=256,
        roles=("sa",),
    ),
    _frame(
        "error_analysis",
        "Situation awareness: the errors of an agent (every agent when none is given).",
        "?node a gh:Error ; gh:agent ?agent .",
        ("agent", "errorType", "errorMessage", "timestamp", "summary", "importance"),
        params={"agent": ParamKind.LITERAL},
        roles=("sa",),
    ),
    _frame(
        "reference_only",
        "Any role: the IRIs and types of the task's nodes (what prefetch loads).",
        "?node a ?any_type .",
        (),
        max_nodes=50,
        max_tokens=128,
    ),
    _frame(
        "5w2h_summary",
        "Dashboard: the 5W2H of the task (what, why, status, deadline, priority).",
        "{ ?node a gh:FiveW2H } UNION { ?node gh:what ?any_what }",
        ("what", "why", "status", "summary", "deadline", "priority", "importance"),
        max_nodes=20,
        max_tokens=300,
        roles=("sa",),
    ),
)


class FrameSet:
    """The frames a projector knows: the nine shipped ones and those users register."""

    def __init__(self, frames: Sequence[Frame] = SHIPPED) -> None:
        self._frames: dict[str, Frame] = {}
        for frame in frames:
            self.register(frame)

    def register(self, frame: Frame, *, replace: bool = False) -> None:
        """Add a frame; an existing name is refused unless ``replace``."""
        if not isinstance(frame, Frame):
            raise InvalidInputError(f"expected a Frame, got {preview(frame)}")
        if frame.name in self._frames and not replace:
            raise InvalidInputError(f"frame {frame.name!r} exists; pass replace=True to replace it")
        self._frames[frame.name] = frame

    def get(self, name: object) -> Frame:
        """Return the frame called ``name``.

        Raises:
            FrameNotFoundError: no such frame.
        """
        if not isinstance(name, str) or name not in self._frames:
            raise FrameNotFoundError(f"no frame {preview(name)}; known: {self.names()}")
        return self._frames[name]

    def names(self) -> list[str]:
        """Return the frames' names, in registration order."""
        return list(self._frames)

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and name in self._frames
