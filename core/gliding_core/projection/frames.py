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
  ``FROM`` in the text cannot widen it), never another task's graphs, but for the ``tasks``
  area, which is the root task's (``sparql.task_graphs``): the ``Task`` nodes of the task's
  tree are mirrored there, and ``?area_tasks`` is bound to it.
- A frame runs as two queries: ``selection`` picks at most ``max_nodes`` nodes (a SELECT),
  then the CONSTRUCT builds exactly those (their IRIs, from the store's own answer, fill a
  ``VALUES`` clause). The template marks the selected nodes with ``SELECTED``, so the framing
  step knows them from the objects they embed; the mark never reaches the output.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum

import pyoxigraph as ox

from gliding_core.blackboard.sparql import task_graphs
from gliding_core.blackboard.sparql_check import check_query
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
        where: the group pattern that selects the frame's nodes: it binds ``?node``.
        template: the CONSTRUCT template, without braces (the ``SELECTED`` mark is added).
        body: the pattern binding the template's variables once ``?node`` is bound to the
            selected nodes; ``where`` when empty (shipped frames give one of OPTIONALs only, so
            the CONSTRUCT never re-runs the selection).
        params: the parameters bound as ``?name`` and how (``{"plan": ParamKind.IRI}``);
            ``?task`` (the task's IRI) and ``?area_<area>`` (the task's graph of an area,
            ``?area_knowledge``) are bound whenever ``where`` uses them.
        areas: the task's areas the query sees.
        max_nodes: the most selected nodes the frame returns.
        max_tokens: the default token budget of a projection of this frame.
        embed: the properties whose objects are embedded as nested nodes (their triples are
            read by subject, ``framing.EMBED_DEPTH`` levels down).
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
    body: str = ""

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
        checked = (check_query(self.sparql).text, check_query(self.selection).text)
        try:
            for text in checked:  # parses the rewrites; an empty store answers at once
                ox.Store().query(text)
        except SyntaxError as exc:
            raise InvalidInputError(
                f"frame {self.name!r}: its SPARQL does not parse: {exc}"
            ) from exc

    @property
    def selection(self) -> str:
        """The query choosing the frame's nodes: ``SELECT DISTINCT ?node ... LIMIT max_nodes``.

        The parameters are projected too: the store binds only projected variables.
        """
        names = [n for n in ("task", *(f"area_{a}" for a in AREAS)) if uses(self.where, n)]
        names += list(self.params)
        projected = " ".join(f"?{n}" for n in ["node", *names])
        return (
            f"{PROLOGUE}SELECT DISTINCT {projected} WHERE {{ {self.where} }}\n"
            f"LIMIT {self.max_nodes}"
        )

    def construct(self, nodes: str = "") -> str:
        """The CONSTRUCT of the frame, for the chosen ``nodes`` (serialised IRIs) when given.

        The IRIs come from the store's own answer to ``selection``, never from a caller.
        """
        mark = f"?node <{SELECTED}> true ."
        chosen = f"VALUES ?node {{ {nodes} }} " if nodes else ""
        body = self.body or self.where
        return f"{PROLOGUE}CONSTRUCT {{ {mark} {self.template} }}\nWHERE {{ {chosen}{body} }}"

    @property
    def sparql(self) -> str:
        """The whole CONSTRUCT (prefixes, the template with the selection mark, WHERE)."""
        return self.construct()

    def bindings(
        self, task: str, params: Mapping[str, object], *, root: str | None = None
    ) -> dict[str, ox.NamedNode | ox.Literal]:
        """Return the terms the query's variables are bound to.

        ``root`` is the root of the task's tree (``?area_tasks`` is its ``tasks`` graph, where
        the tree's tasks are mirrored); the task's own when ``None``.

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
        if uses(self.where, "task"):  # the store refuses a variable the query does not use
            bound["task"] = task_term
        for area in AREAS:
            if uses(self.where, f"area_{area}"):
                (graph,) = task_graphs(task, [area], root=root)
                bound[f"area_{area}"] = ox.NamedNode(graph)
        for key, value in params.items():
            if value is None:
                continue
            kind = self.params[key]
            bound[key] = _iri(value, key) if kind is ParamKind.IRI else _literal(value, key)
        return bound


def uses(text: str, variable: str) -> bool:
    """Return whether the query text mentions ``?variable`` (or ``$variable``)."""
    return re.search(rf"[?$]{re.escape(variable)}\b", text) is not None


def _check_params(name: str, params: object) -> dict[str, ParamKind]:
    if not isinstance(params, Mapping):
        raise InvalidInputError(f"frame {name!r}: params must be a mapping of names to kinds")
    checked: dict[str, ParamKind] = {}
    for key, kind in params.items():
        reserved = key == "task" or (isinstance(key, str) and key.startswith("area_"))
        if not isinstance(key, str) or not _VARIABLE.match(key) or reserved:
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


def _properties(names: Sequence[str]) -> str:
    """Return the pattern reading a node's type and ``names``: one look-up by subject.

    A filter on the predicate rather than a ``VALUES`` of them: the store then reads each
    node's triples once instead of once per property (a third less time for 20 nodes).
    """
    values = ", ".join(["rdf:type", *(f"gh:{n}" for n in names)])
    return f"OPTIONAL {{ ?node ?p ?o FILTER(?p IN ({values})) }}"


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
    body = _properties(shown)
    template = "?node ?p ?o ."
    return Frame(
        name,
        description,
        select,
        template,
        embed=tuple(embed),
        body=body,
        **options,  # type: ignore[arg-type]
    )


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
        " UNION { GRAPH ?area_knowledge { ?node gh:summary ?any } }",
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
