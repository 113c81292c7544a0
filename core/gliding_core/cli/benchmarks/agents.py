"""Benchmark of multi-agent sharing, the framework-neutral half: tasks, scripts, ledger, checks.

``gliding-horse bench agents`` (its LangChain half is ``gliding_langchain.cli.agents_bench``) runs
four agents (plan, do, check, act) on a generated, seeded set of tasks with each way of sharing
state. This module holds what every method shares, so the comparison is the same work:

- ``generate``: the tasks. Each has a plan of steps; some steps are refined by the planner once
  a first artifact exists (a second plan version), some first drafts carry a flaw (``TODO``)
  that the reviewer sends back; every artifact is reviewed at its version, and every approved
  review gets an accepting decision.
- the scripts (``next_write``): what an agent of a role does next, given what it knows (the
  latest version of each item it can see in the messages its model got). The same scripts
  drive every method; only what the agents can see differs.
- ``Ledger``: the committed versions. A write names the versions it was made from (an
  artifact the step version it implements, a review the artifact version it reviewed, a
  decision the artifact and review versions it decided on, every item the version of itself it
  replaces); each name older than the latest committed version at the moment of the write is
  one stale read, counted identically for every method.
- ``check_task``: whether a task's final state is complete and correct: every step at its final
  version, its artifact implementing it without a flaw, a review of that artifact version
  approving it, and a decision accepting that review.

Invariants: the tasks and the scripts depend only on the seed; the scripts are pure functions
of what an agent knows; an item is a JSON-LD node whose ``version`` rises by one per write.
"""

from __future__ import annotations

import json
import math
import random
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from gliding_core.blackboard.permissions import DEFAULT_MATRIX
from gliding_core.errors import InvalidInputError
from gliding_core.projection.frames import Frame

ROLES = ("plan", "do", "check", "act")
AGENT_NAMES = {"plan": "planner", "do": "doer", "check": "checker", "act": "actor"}
KINDS = ("plan", "step", "artifact", "review", "decision")
AREA_OF_KIND = {
    "plan": "plan",
    "step": "plan",
    "artifact": "execution",
    "review": "review",
    "decision": "decision",
}
WRITES = {"plan": ("plan", "step"), "do": ("artifact",), "check": ("review",), "act": ("decision",)}
NEEDS = {
    "plan": ("plan", "step", "artifact"),
    "do": ("step", "artifact", "review"),
    "check": ("artifact", "review"),
    "act": ("artifact", "review", "decision"),
}
# Who is woken when an item of a kind is committed (the same wake-ups for every method).
WATCHERS = {kind: tuple(r for r in ROLES if kind in NEEDS[r]) for kind in KINDS}
# The versions a write names, by the field that names them and the kind of item named.
DEPENDS = {"artifact": {"implements": "step"}, "review": {"reviewed": "artifact"}}
DEPENDS["decision"] = {"decided": "artifact", "reviewVersion": "review"}
FLAW = "TODO"
SYSTEM_PROMPTS = {
    "plan": "You are the planner. Write the task's plan and its steps; refine a step when its"
    " first artifact shows the plan needs more detail.",
    "do": "You are the doer. Write one artifact per plan step, implementing the step's latest"
    " version; revise an artifact when its review asks for it.",
    "check": "You are the checker. Review each artifact at its latest version: approve it, or"
    " ask for a revision when it still has a TODO.",
    "act": "You are the actor. Accept each artifact whose latest version has an approving"
    " review, naming the versions you decided on.",
}
_WORDS = (
    "parse", "validate", "cache", "index", "retry", "audit", "stream", "merge", "encode",
    "schema", "queue", "token", "lease", "buffer", "route", "render", "export", "batch",
    "report", "config", "handler", "client", "server", "record", "event", "metric",
)  # fmt: skip


@dataclass(frozen=True, slots=True)
class StepSpec:
    """One plan step: its instructions, a refined second version, whether its draft is flawed."""

    index: int
    title: str
    instructions: str
    refined: str | None
    flawed: bool


@dataclass(frozen=True, slots=True)
class TaskSpec:
    """One generated task: its IRI, goal and steps."""

    iri: str
    goal: str
    steps: tuple[StepSpec, ...]

    def item(self, kind: str, index: int | None = None) -> str:
        """Return the IRI of an item of this task (``index`` for all kinds but the plan)."""
        return f"{self.iri}/plan" if kind == "plan" else f"{self.iri}/{kind}/{index}"

    def keys(self, kinds: Iterable[str]) -> list[str]:
        """Return the IRIs of every item of ``kinds``, in a fixed order."""
        found = []
        for kind in kinds:
            if kind == "plan":
                found.append(self.item("plan"))
            else:
                found += [self.item(kind, s.index) for s in self.steps]
        return found

    def brief(self, role: str) -> str:
        """Return the hand-over message an agent of ``role`` is started with."""
        return (
            f"Task {self.iri}: {self.goal}. The plan has {len(self.steps)} steps"
            f" ({self.item('step', 1)} ... {self.item('step', len(self.steps))}). Work as"
            f" the {role} agent until nothing is left for you to do."
        )


def generate(count: int, *, seed: int, steps: tuple[int, int] = (3, 5)) -> list[TaskSpec]:
    """Return ``count`` tasks drawn from ``seed`` (3 to 5 steps each by default)."""
    if isinstance(count, bool) or not isinstance(count, int) or count < 1:
        raise InvalidInputError(f"count must be a positive int, got {count!r}")
    rng = random.Random(seed)
    tasks = []
    for number in range(1, count + 1):
        iri = f"urn:bench:agents:task/{number}"
        goal = f"build the {_phrase(rng, 3)} service"
        specs = []
        for index in range(1, rng.randint(*steps) + 1):
            title = _phrase(rng, 2)
            refined = f"{_phrase(rng, 12)}." if rng.random() < 0.4 else None
            specs.append(
                StepSpec(index, title, f"{_phrase(rng, 14)}.", refined, rng.random() < 0.35)
            )
        tasks.append(TaskSpec(iri, goal, tuple(specs)))
    return tasks


def _phrase(rng: random.Random, words: int) -> str:
    return " ".join(rng.choice(_WORDS) for _ in range(words))


# -- what each role sees of a task, as frames (the gliding method's view) ----------------------

FRAME_OF_ROLE = {role: f"agents_{role}" for role in ROLES}
_SHOWN = {
    "plan": ("version",),
    "do": ("version", "instructions", "implements", "reviewed", "verdict"),
    "check": ("version", "content", "reviewed"),
    "act": ("version", "reviewed", "verdict", "decided", "reviewVersion"),
}
_AREAS = {
    "plan": ("plan", "execution"),
    "do": ("plan", "execution", "review"),
    "check": ("execution", "review"),
    "act": ("execution", "review", "decision"),
}
_SELECT = {
    "plan": "{ ?node a gh:Plan } UNION { ?node a gh:Step } UNION { ?node a gh:Artifact }",
    "do": "{ ?node a gh:Step } UNION { ?node a gh:Artifact } UNION { ?node a gh:Review }",
    # The checker's work: the artifacts whose latest version has no review yet, and the reviews.
    "check": "{ ?node a gh:Artifact ; gh:version ?v ."
    " FILTER NOT EXISTS { ?any gh:artifact ?node ; gh:reviewed ?v } }"
    " UNION { ?node a gh:Review }",
    "act": "{ ?node a gh:Artifact } UNION { ?node a gh:Review } UNION { ?node a gh:Decision }",
}


def bench_frames() -> list[Frame]:
    """Return the four frames of the benchmark's roles: what each role's script needs."""
    frames = []
    for role in ROLES:
        values = " ".join(["rdf:type", *(f"gh:{name}" for name in _SHOWN[role])])
        frames.append(
            Frame(
                FRAME_OF_ROLE[role],
                f"bench agents: what the {role} agent needs of a task",
                _SELECT[role],
                "?node ?p ?o .",
                body=f"OPTIONAL {{ VALUES ?p {{ {values} }} ?node ?p ?o }}",
                areas=_AREAS[role],
                max_nodes=64,
                roles=(role,),
            )
        )
    return frames


def bench_permissions() -> dict[str, dict[str, list[str]]]:
    """Return the default permission matrix plus a read of every area of each role's frame.

    The benchmark's agents read their frames as themselves (``FrameSource.for_agent``), and
    the default matrix does not let them read all of their frames' areas (``do`` may not read
    ``plan``, ``act`` not ``execution`` ...); this grants those reads and nothing else.
    """
    rules = {
        role: {area: sorted(op.value for op in ops) for area, ops in areas.items()}
        for role, areas in DEFAULT_MATRIX.items()
    }
    for role in ROLES:
        for area in _AREAS[role]:
            granted = rules[role].setdefault(area, [])
            if "read" not in granted:
                granted.append("read")
    return rules


# -- what an agent knows -------------------------------------------------------------------------


def collect(value: Any, known: dict[str, dict[str, Any]], prefix: str) -> None:
    """Add every item (a dict with an ``@id`` under ``prefix`` and a ``version``) in ``value``.

    Strings are searched for JSON objects; of two sightings of an item the higher version wins.
    """
    if isinstance(value, str):
        for found in _json_objects(value):
            collect(found, known, prefix)
    elif isinstance(value, dict):
        iri, version = value.get("@id"), value.get("version")
        if isinstance(iri, str) and iri.startswith(prefix) and isinstance(version, int):
            old = known.get(iri)
            if old is None or old["version"] < version:
                known[iri] = value
            elif old["version"] == version:  # a reference ("unchanged") keeps what was shown
                known[iri] = {**value, **old}
        for inner in value.values():
            collect(inner, known, prefix)
    elif isinstance(value, list):
        for inner in value:
            collect(inner, known, prefix)


def _json_objects(text: str) -> Iterable[Any]:
    """Yield the JSON values that start at a ``{`` or ``[`` of ``text`` (outermost only)."""
    decoder = json.JSONDecoder()
    position = 0
    while True:
        starts = [i for i in (text.find("{", position), text.find("[", position)) if i >= 0]
        if not starts:
            return
        start = min(starts)
        try:
            value, end = decoder.raw_decode(text, start)
        except json.JSONDecodeError:
            position = start + 1
            continue
        yield value
        position = end


# -- the scripts -----------------------------------------------------------------------------------


def next_write(
    role: str, task: TaskSpec, known: Mapping[str, dict[str, Any]]
) -> dict[str, Any] | None:
    """Return the item an agent of ``role`` writes next from what it knows, or ``None``."""
    script = {"plan": _plan, "do": _do, "check": _check, "act": _act}[role]
    return script(task, known)


def _bump(
    known: Mapping[str, dict[str, Any]], iri: str, kind: str, **fields: Any
) -> dict[str, Any]:
    old = known.get(iri)
    node = {"@id": iri, "@type": kind.capitalize(), **fields}
    node["version"] = 1 if old is None else int(old["version"]) + 1
    return node


def _plan(task: TaskSpec, known: Mapping[str, dict[str, Any]]) -> dict[str, Any] | None:
    plan = task.item("plan")
    if plan not in known:
        return _bump(known, plan, "plan", summary=task.goal, stepCount=len(task.steps))
    for step in task.steps:
        iri = task.item("step", step.index)
        if iri not in known:
            return _step(task, step, known, step.instructions)
    for step in task.steps:
        iri = task.item("step", step.index)
        drafted = task.item("artifact", step.index) in known
        if step.refined and drafted and known[iri]["version"] < 2:
            return _step(task, step, known, step.refined)
    return None


def _step(
    task: TaskSpec, step: StepSpec, known: Mapping[str, dict[str, Any]], text: str
) -> dict[str, Any]:
    iri = task.item("step", step.index)
    return _bump(
        known, iri, "step", plan={"@id": task.item("plan")}, summary=step.title, instructions=text
    )


def _do(task: TaskSpec, known: Mapping[str, dict[str, Any]]) -> dict[str, Any] | None:
    for spec in task.steps:
        step = known.get(task.item("step", spec.index))
        if step is None:
            continue
        iri = task.item("artifact", spec.index)
        artifact, review = known.get(iri), known.get(task.item("review", spec.index))
        stale = artifact is None or artifact["implements"] != step["version"]
        sent_back = (
            artifact is not None
            and review is not None
            and review["reviewed"] == artifact["version"]
            and review["verdict"] == "revise"
        )
        if stale or sent_back:
            flawed = spec.flawed and artifact is None
            return _bump(
                known,
                iri,
                "artifact",
                step={"@id": step["@id"]},
                implements=step["version"],
                summary=f"{spec.title}, implementing step version {step['version']}",
                content=artifact_text(step["instructions"], flawed=flawed),
            )
    return None


def artifact_text(instructions: str, *, flawed: bool) -> str:
    """Return the artifact a doer writes for a step's instructions (with the flaw, or not)."""
    body = " ".join(f"def {word}(): return {word!r}." for word in instructions.split()[:12])
    return f"{body} {FLAW}: handle errors." if flawed else f"{body} Errors are handled."


def _check(task: TaskSpec, known: Mapping[str, dict[str, Any]]) -> dict[str, Any] | None:
    for spec in task.steps:
        artifact = known.get(task.item("artifact", spec.index))
        if artifact is None:
            continue
        iri = task.item("review", spec.index)
        review = known.get(iri)
        if review is None or review["reviewed"] != artifact["version"]:
            flawed = FLAW in str(artifact.get("content", ""))
            return _bump(
                known,
                iri,
                "review",
                artifact={"@id": artifact["@id"]},
                reviewed=artifact["version"],
                verdict="revise" if flawed else "approve",
                suggestions="handle the errors left as TODO" if flawed else "none",
            )
    return None


def _act(task: TaskSpec, known: Mapping[str, dict[str, Any]]) -> dict[str, Any] | None:
    for spec in task.steps:
        artifact = known.get(task.item("artifact", spec.index))
        review = known.get(task.item("review", spec.index))
        if artifact is None or review is None:
            continue
        if review["reviewed"] != artifact["version"] or review["verdict"] != "approve":
            continue
        iri = task.item("decision", spec.index)
        decision = known.get(iri)
        if decision is None or decision["decided"] != artifact["version"]:
            return _bump(
                known,
                iri,
                "decision",
                review={"@id": review["@id"]},
                decided=artifact["version"],
                reviewVersion=review["version"],
                decision="accept",
            )
    return None


def kind_of(iri: str) -> str:
    """Return the kind of an item from its IRI (``.../artifact/2`` -> ``artifact``)."""
    if iri.endswith("/plan"):
        return "plan"
    return iri.rsplit("/", 2)[-2]


# -- the ledger ------------------------------------------------------------------------------------


@dataclass
class Ledger:
    """The latest committed version of every item, and the stale reads of the writes."""

    latest: dict[str, int] = field(default_factory=dict)
    stale_reads: int = 0
    writes: int = 0
    stale_by_kind: dict[str, int] = field(default_factory=dict)

    def stale_in(self, node: Mapping[str, Any]) -> int:
        """Return how many versions ``node``'s write names that are older than the latest."""
        iri = str(node["@id"])
        stale = int(self.latest.get(iri, 0) != int(node["version"]) - 1)
        task = iri.rsplit("/", 2)[0]
        for key, kind in DEPENDS.get(kind_of(iri), {}).items():
            named = f"{task}/{kind}/{iri.rsplit('/', 1)[-1]}"
            stale += int(self.latest.get(named, 0) != node.get(key))
        return stale

    def commit(self, node: Mapping[str, Any], stale: int) -> None:
        """Record a write that went through (with the stale reads ``stale_in`` found before)."""
        iri = str(node["@id"])
        self.latest[iri] = int(node["version"])
        self.stale_reads += stale
        self.writes += 1
        if stale:
            kind = kind_of(iri)
            self.stale_by_kind[kind] = self.stale_by_kind.get(kind, 0) + stale


# -- the check of a final state --------------------------------------------------------------------


def check_task(task: TaskSpec, state: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """Return what is wrong with a task's final state (``[]``: complete and correct)."""
    problems = [] if task.item("plan") in state else ["no plan"]
    for spec in task.steps:
        step, artifact, review, decision = (
            state.get(task.item(kind, spec.index))
            for kind in ("step", "artifact", "review", "decision")
        )
        final = spec.refined or spec.instructions
        if step is None or step.get("instructions") != final:
            problems.append(f"step {spec.index} is not at its final version")
            continue
        if artifact is None or artifact.get("implements") != step.get("version"):
            problems.append(f"artifact {spec.index} does not implement the latest step")
        elif artifact.get("content") != artifact_text(final, flawed=False):
            problems.append(f"artifact {spec.index} is not the finished work")
        elif review is None or review.get("reviewed") != artifact.get("version"):
            problems.append(f"review {spec.index} is not of the latest artifact")
        elif review.get("verdict") != "approve":
            problems.append(f"review {spec.index} does not approve")
        elif decision is None or decision.get("decided") != artifact.get("version"):
            problems.append(f"decision {spec.index} is not on the latest artifact")
        elif decision.get("reviewVersion") != review.get("version"):
            problems.append(f"decision {spec.index} is not on the latest review")
    return problems


# -- figures ---------------------------------------------------------------------------------------


def p95(values: Sequence[int]) -> float:
    """Return the 95th percentile of ``values`` (nearest rank)."""
    ordered = sorted(values)
    return float(ordered[max(0, math.ceil(0.95 * len(ordered)) - 1)]) if ordered else 0.0


def summarize(
    calls: Sequence[int], per_task: Sequence[int], ledger: Ledger, correct: int, tasks: int
) -> dict[str, Any]:
    """Return one method's figures (``tasks_correct`` is a count, of ``tasks``)."""
    return {
        "tokens_per_call_mean": round(statistics.fmean(calls), 1) if calls else 0.0,
        "tokens_per_call_p95": p95(calls),
        "tokens_per_task": round(statistics.fmean(per_task), 1) if per_task else 0.0,
        "model_calls": len(calls),
        "writes": ledger.writes,
        "stale_reads": ledger.stale_reads,
        "stale_reads_by_writer": dict(sorted(ledger.stale_by_kind.items())),
        "tasks_correct": correct,
        "tasks": tasks,
    }
