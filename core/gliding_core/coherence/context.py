"""L2 coherence: shared nodes shown to a model, each at the least cost its copy allows.

For one agent and a list of shared nodes, each node is read through the coordinator and
rendered by what the agent already saw: a node it holds at the current generation is shown as a
reference (its IRI and a one-line summary) or left out, a node it saw at an older generation
still kept is shown as the change (the properties that differ), and any other node whole.

Invariants: every node is read, so the agent ends up holding every node at its current
generation (the context never shows a stale value as current); token counts are exact for the
counter's encoding; nodes keep the order they were asked for.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Literal

from gliding_core.coherence.coordinator import Coherence, NodeDelta, Reading
from gliding_core.errors import InvalidInputError
from gliding_core.jsonld import Node, canonical_json, node_types
from gliding_core.tokens import TokenCounter

Unchanged = Literal["reference", "omit"]

SUMMARY_KEYS = ("name", "title", "label", "summary", "description", "text", "content")
SUMMARY_CHARACTERS = 80


@dataclass(frozen=True, slots=True)
class SharedItem:
    """One shared node as shown: how (``reference``, ``change``, ``whole``), text and tokens."""

    iri: str
    generation: int
    shown: Literal["reference", "change", "whole"]
    text: str
    tokens: int


@dataclass(frozen=True, slots=True)
class SharedContext:
    """The shared nodes of one agent's context, rendered; ``omitted`` were left out unchanged."""

    items: tuple[SharedItem, ...]
    omitted: tuple[str, ...]
    tokens: int

    def text(self) -> str:
        """Return the items' texts, one per line."""
        return "\n".join(item.text for item in self.items)


def summary(node: Node) -> str:
    """Return a one-line summary of ``node``: its types and its first label-like property."""
    types = ", ".join(node_types(node))
    label = next((node[k] for k in SUMMARY_KEYS if isinstance(node.get(k), str)), None)
    if label is None:
        label = ", ".join(k for k in sorted(node) if not k.startswith("@"))
    line = " ".join(f"{types}: {label}".split()) if types else " ".join(str(label).split())
    if len(line) > SUMMARY_CHARACTERS:
        line = line[: SUMMARY_CHARACTERS - 3] + "..."
    return line


def change_text(delta: NodeDelta) -> str:
    """Return a delta as one line: the IRI, the two generations and what differs."""
    body: dict[str, Any] = {"changed": delta.changed}
    if delta.removed:
        body["removed"] = list(delta.removed)
    return (
        f"{delta.iri} changed (generation {delta.from_generation} -> {delta.to_generation}): "
        f"{canonical_json(body)}"
    )


def reference_text(reading: Reading) -> str:
    """Return the line for a node the agent already holds at its current generation."""
    return f"{reading.iri} (generation {reading.generation}, unchanged): {summary(reading.value)}"


def render_shared(
    coordinator: Coherence,
    agent: str,
    iris: Iterable[str],
    *,
    counter: TokenCounter,
    unchanged: Unchanged = "reference",
) -> SharedContext:
    """Read ``iris`` for ``agent`` and render each node by what the agent already saw.

    Args:
        coordinator: the coordinator the agent reads through.
        agent: whose context this is.
        iris: the shared nodes, in the order to show them (duplicates shown once).
        counter: counts each item's tokens.
        unchanged: ``reference`` shows an unchanged node as its IRI and a summary line;
            ``omit`` leaves it out.
    """
    if unchanged not in ("reference", "omit"):
        raise InvalidInputError(f"unchanged must be 'reference' or 'omit', got {unchanged!r}")
    items: list[SharedItem] = []
    omitted: list[str] = []
    for reading in coordinator.read_many(agent, dict.fromkeys(iris)):
        iri = reading.iri
        if reading.kind == "hit" and unchanged == "omit":
            omitted.append(iri)
            continue
        items.append(shown(reading, counter))
    return SharedContext(tuple(items), tuple(omitted), sum(i.tokens for i in items))


def shown(reading: Reading, counter: TokenCounter) -> SharedItem:
    """Return the cheapest faithful rendering of one reading.

    A change that alters nothing is shown as a reference, and a change that costs at least as
    many tokens as the whole node is shown whole.
    """
    iri, generation, delta = reading.iri, reading.generation, reading.delta
    if reading.kind == "hit" or (delta is not None and not delta.changed and not delta.removed):
        text = reference_text(reading)
        return SharedItem(iri, generation, "reference", text, counter.count(text))
    whole = canonical_json(reading.value)
    whole_tokens = counter.count(whole)
    if delta is not None:
        text = change_text(delta)
        tokens = counter.count(text)
        if tokens < whole_tokens:
            return SharedItem(iri, generation, "change", text, tokens)
    return SharedItem(iri, generation, "whole", whole, whole_tokens)
