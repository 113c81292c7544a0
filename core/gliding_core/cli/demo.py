"""CLI: the demo behind ``gliding-horse demo``: a small software task kept in the memory.

It writes to the stream it is given; it never changes anything outside the memory it opens.
Parts that need a framework (the LangChain agent) are registered under the entry-point group
``gliding_horse.demos`` by the adapter packages and run last, when their extra is installed.
"""

from __future__ import annotations

from importlib.metadata import entry_points
from typing import Any, TextIO

from gliding_core.cli.demo_blackboard import run as show_blackboard
from gliding_core.cli.demo_search import run as show_search
from gliding_core.cli.demo_session import run as show_session
from gliding_core.cli.table import render
from gliding_core.memory import Memory
from gliding_core.store.entry import Record

DEMO_GROUP = "gliding_horse.demos"
PROJECT = "urn:demo:"
GRAPH_TASKS = "graph:tasks"
GRAPH_DECISIONS = "graph:decisions"
GRAPH_PEOPLE = "graph:people"


def knowledge_set() -> list[Record]:
    """Return the demo's JSON-LD nodes: people, a task tree and the decisions taken on it."""

    def ref(name: str) -> dict[str, str]:
        return {"@id": PROJECT + name}

    people: list[tuple[str, dict[str, Any]]] = [
        ("person/alice", {"@type": "Person", "name": "Alice", "role": "backend lead"}),
        ("person/bob", {"@type": "Person", "name": "Bob", "role": "frontend engineer"}),
        ("person/chen", {"@type": "Person", "name": "Chen", "role": "site reliability"}),
    ]
    tasks: list[tuple[str, dict[str, Any], list[str]]] = [
        (
            "task/checkout",
            {
                "@type": "Task",
                "text": "Ship the new checkout flow with saved cards",
                "owner": ref("person/alice"),
            },
            ["epic", "checkout"],
        ),
        (
            "task/payments-api",
            {
                "@type": "Task",
                "text": "Build the payments API on top of the card vault",
                "parent": ref("task/checkout"),
                "owner": ref("person/alice"),
            },
            ["backend", "checkout"],
        ),
        (
            "task/checkout-ui",
            {
                "@type": "Task",
                "text": "Checkout page with saved-card picker",
                "parent": ref("task/checkout"),
                "owner": ref("person/bob"),
                "dependsOn": ref("task/payments-api"),
            },
            ["frontend", "checkout"],
        ),
        (
            "task/load-test",
            {
                "@type": "Task",
                "text": "Load test the payments API at 200 requests per second",
                "parent": ref("task/checkout"),
                "owner": ref("person/chen"),
                "dependsOn": ref("task/payments-api"),
            },
            ["ops", "checkout"],
        ),
    ]
    decisions: list[tuple[str, dict[str, Any], list[str], float]] = [
        (
            "decision/postgres",
            {
                "@type": "Decision",
                "text": "Store card tokens in PostgreSQL, never raw card numbers",
                "madeBy": ref("person/alice"),
                "about": ref("task/payments-api"),
            },
            ["security", "backend"],
            0.9,
        ),
        (
            "decision/idempotency",
            {
                "@type": "Decision",
                "text": "Every payment request carries an "
                "idempotency key so retries never charge twice",
                "madeBy": ref("person/alice"),
                "about": ref("task/payments-api"),
            },
            ["backend"],
            0.8,
        ),
        (
            "decision/feature-flag",
            {
                "@type": "Decision",
                "text": "Release the checkout behind a feature flag, 5% of users first",
                "madeBy": ref("person/bob"),
                "about": ref("task/checkout-ui"),
            },
            ["frontend", "release"],
            0.6,
        ),
    ]
    records = [
        Record({"@id": PROJECT + key, **node}, tags=["person"], named_graph=GRAPH_PEOPLE)
        for key, node in people
    ]
    records += [
        Record({"@id": PROJECT + key, **node}, tags=tags, named_graph=GRAPH_TASKS)
        for key, node, tags in tasks
    ]
    records += [
        Record(
            {"@id": PROJECT + key, **node},
            tags=tags,
            named_graph=GRAPH_DECISIONS,
            importance=importance,
        )
        for key, node, tags, importance in decisions
    ]
    return records


def run(out: TextIO, memory: Memory | None = None) -> None:
    """Run the demo on ``memory`` (a new in-memory one by default) and write what it shows."""
    owned = memory is None
    if owned:
        _progress(out, "Opening an in-memory memory and loading its embedding model ...")
    memory = memory or Memory()
    try:
        _show_l0(out, memory)
        show_search(out, memory)
        _progress(out, "\nRunning an agent session (embedding each turn) ...")
        show_session(out, memory)
        show_blackboard(out, memory)
        for part in entry_points(group=DEMO_GROUP):
            _progress(out, f"\nLoading the {part.name} demo ...")
            try:
                show = part.load()
            except ImportError as error:  # its extra is not installed
                out.write(f"(skipping the {part.name} demo: {error})\n")
                continue
            show(out, memory)
    finally:
        if owned:
            memory.close()


def _progress(out: TextIO, line: str) -> None:
    """Say what the next slow step is, at once (the stream may be buffered)."""
    out.write(line + "\n")
    out.flush()


def _show_l0(out: TextIO, memory: Memory) -> None:
    store = memory.store
    records = knowledge_set()
    store.put_many(records)
    _say(out, "L0: the durable store", f"stored {len(records)} JSON-LD nodes in one transaction")

    iri = PROJECT + "decision/postgres"
    before = store.get(iri)
    store.put(
        {"@id": iri, "@type": "SecurityControl", "status": "approved", "text": "Store card tokens"},
        tags=["pci"],
        importance=0.5,
    )
    after = store.get(iri)
    if before is None or after is None:
        raise AssertionError("the demo's decision vanished from the store")
    _say(
        out,
        "Merge: the same @id stored again",
        render(
            ["field", "before", "after"],
            [
                ("tags", ", ".join(before.tags), ", ".join(after.tags)),
                ("types", ", ".join(before.jsonld_types), ", ".join(after.jsonld_types)),
                ("importance", before.importance, after.importance),
                ("text", before.node["text"], after.node["text"]),
                ("status", before.node.get("status", "-"), after.node["status"]),
                ("generation", before.generation, after.generation),
            ],
        )
        + "\n(tags and types united, importance averaged, the longer text kept, new keys added)",
    )

    def rows(entries: list[Any]) -> list[tuple[object, ...]]:
        return [(e.iri.removeprefix(PROJECT), ", ".join(e.tags), e.named_graph) for e in entries]

    _say(
        out,
        "Tags: backend AND checkout",
        render(["iri", "tags", "graph"], rows(store.by_tags(["backend", "checkout"]))),
    )
    _say(
        out,
        "Tags: release OR ops",
        render(["iri", "tags", "graph"], rows(store.by_tags(["release", "ops"], match="any"))),
    )
    _say(
        out,
        f"Named graph {GRAPH_DECISIONS}",
        render(["iri", "tags", "graph"], rows(store.by_graph(GRAPH_DECISIONS))),
    )
    _say(out, "Type Person", render(["iri", "tags", "graph"], rows(store.by_type("Person"))))
    hits = store.search_text("payments retries charge", limit=3)
    _say(
        out,
        "Text search (BM25): 'payments retries charge'",
        render(
            ["rank", "score", "iri", "text"],
            [
                (h.rank, h.score, h.entry.iri.removeprefix(PROJECT), h.entry.node.get("text", ""))
                for h in hits
            ],
        ),
    )
    edges = store.neighbours(PROJECT + "task/payments-api")
    _say(
        out,
        "Neighbours of task/payments-api (both directions)",
        render(
            ["source", "predicate", "target"],
            [
                (e.source.removeprefix(PROJECT), e.predicate, e.target.removeprefix(PROJECT))
                for e in edges
            ],
        ),
    )
    text = after.content
    _say(
        out,
        "Tokens",
        f"the merged decision is {memory.count_tokens(text)} tokens "
        f"({memory.tokens.encoding_name}, exact) for {len(text)} characters of JSON-LD",
    )


def _say(out: TextIO, title: str, body: str) -> None:
    out.write(f"\n== {title}\n{body}\n")
