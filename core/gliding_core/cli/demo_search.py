"""CLI: the search part of ``gliding-horse demo``: hybrid search with filters, each hit explained by
its arms, and a structure-aware query over the trained Poincaré index.

Writes to the stream it is given; works on the memory it is given (after the L0 demo).
"""

from __future__ import annotations

from typing import TextIO

from gliding_core.cli.table import render
from gliding_core.hyperspace.poincare import PoincareSettings
from gliding_core.memory import Memory
from gliding_core.store.filters import SearchFilters

PREFIX = "urn:demo:"


def run(out: TextIO, memory: Memory) -> None:
    """Search the demo's knowledge set three ways and write what each returns."""
    out.write(f"\n== Hyperspace: hybrid search (embedder {memory.embedder_name})\n")
    _explained(out, memory, "how do we avoid charging a card twice", None)
    only_backend = SearchFilters(tags_any=("backend",), types=("Decision",))
    _explained(out, memory, "card payments", only_backend)
    memory.structure.train(PoincareSettings(dimension=5, epochs=300))
    anchor = PREFIX + "task/payments-api"
    near = memory.structure.similar(anchor, 4)
    out.write(
        render(
            ["node", "Poincaré distance"],
            [(_short(n), d) for n, d in near],
            title=f"\nStructurally nearest to {_short(anchor)} (trained on types and parent links)",
        )
        + "\n"
    )
    dual = memory.structure.dual_search(
        memory.hyperspace, "load and payments", 4, alpha=0.5, anchor=anchor
    )
    out.write(
        render(
            ["hit", "text score", "structure", "mixed"],
            [(_short(d.hit.iri), d.hit.score, d.structure, d.score) for d in dual],
            title="\nDual-space query 'load and payments' (alpha 0.5: text and structure mixed)",
        )
        + "\n"
    )


def _explained(out: TextIO, memory: Memory, query: str, filters: SearchFilters | None) -> None:
    hits = memory.search(query, 4, filters=filters)
    rows = []
    for hit in hits:
        lexical, dense = hit.arms.get("lexical"), hit.arms.get("dense")
        rows.append(
            (
                _short(hit.iri),
                f"#{lexical.rank} ({lexical.score:.2f})" if lexical else "-",
                f"#{dense.rank} ({dense.score:.2f})" if dense else "-",
                hit.score,
            )
        )
    label = "" if filters is None else f", filters {_describe(filters)}"
    out.write(
        render(
            ["hit", "lexical (BM25)", "dense (cosine)", "score"],
            rows,
            title=f"\nQuery {query!r}{label}",
        )
        + "\n"
    )


def _describe(filters: SearchFilters) -> str:
    parts = [f"tags any {list(filters.tags_any)}"] if filters.tags_any else []
    parts += [f"types {list(filters.types)}"] if filters.types else []
    return ", ".join(parts)


def _short(iri: str) -> str:
    return iri.removeprefix(PREFIX)
