"""The child process of the crash tests: queries of one shape, at sizes given, against a board.

Usage: ``sparql_crash_child.py BACKEND SHAPE SIZE...`` where ``BACKEND`` is ``memory``, the
URL of an ``oxigraph serve``, or ``memory-small-stack`` (in memory, the queries sent from a
thread with a 1 MiB stack, as a framework's worker thread may have). The board has the
default limits (``at_caps``: the largest a configuration may set). Each size is sent as a
``do`` agent's query and as the system's (``Blackboard.query``), in that order, and each
answer is one line of JSON on stdout:
``{"size": 16, "mode": "agent", "outcome": "ran"}`` or ``"outcome": "ContentTooLargeError"``.
A size is sent only after the previous one was answered, so the last line tells how far the
child got if the process dies.
"""

from __future__ import annotations

import json
import sys
import threading
from collections.abc import Callable

from gliding_core.blackboard.board import AgentHandle, Blackboard
from gliding_core.blackboard.graph import EmbeddedGraph, GraphBackend, SparqlEndpoint
from gliding_core.config import BlackboardConfig, QueryLimits
from gliding_core.errors import GlidingError

TASK = "iri://task/crash"
T = "?s ?p ?o"


def _groups(n: int) -> str:
    return "SELECT ?o WHERE " + "{ " * n + T + " }" * n


def _parens(n: int) -> str:
    return f"SELECT ?o WHERE {{ {T} FILTER" + "(" * n + "?o" + ")" * n + " }"


def _union(n: int) -> str:
    return "SELECT ?o WHERE { " + " UNION ".join([f"{{ {T} }}"] * n) + " }"


def _or_chain(n: int) -> str:
    return f"SELECT ?o WHERE {{ {T} FILTER(" + " || ".join(["?o"] * (n + 1)) + ") }"


def _calls(n: int) -> str:
    return f"SELECT ?o WHERE {{ {T} FILTER(" + "STR(" * (n - 1) + "?o" + ")" * n + " }"


def _exists(n: int) -> str:
    return "SELECT ?o WHERE { " + f"{T} FILTER EXISTS {{ " * (n - 1) + T + " }" * n


def _blanks(n: int) -> str:
    return "SELECT ?o WHERE { ?s ?p " + "[ ?p " * n + "?o" + " ]" * n + " }"


def _binds(n: int) -> str:
    return f"SELECT ?o WHERE {{ {T} " + " ".join(f"BIND(1 AS ?b{i})" for i in range(n)) + " }"


def _minus(n: int) -> str:
    return f"SELECT ?o WHERE {{ {T}" + f" MINUS {{ {T} }}" * n + " }"


def _path(n: int) -> str:
    return "SELECT ?o WHERE { ?s " + "/".join(["<urn:p>"] * n) + " ?o }"


def _triples(n: int) -> str:
    return "SELECT ?o WHERE { " + " . ".join([T] * n) + " }"


def _collections(n: int) -> str:
    return "SELECT ?o WHERE { ?s ?p " + "(" * n + "?o" + ")" * n + " }"


def _subselects(n: int) -> str:
    return "SELECT ?o WHERE " + "{ SELECT ?o WHERE " * (n - 1) + f"{{ {T} }}" + " }" * (n - 1)


def _combined(n: int) -> str:
    """Every limit at once: ``n`` is ignored; groups, calls and operators at their limits."""
    inner = "FILTER(" + "STR(" * 14 + "?o" + ")" * 15 + " FILTER(" + " || ".join(["?o"] * 120) + ")"
    return "SELECT ?o WHERE " + "{ " * 15 + f"{T} {inner}" + " }" * 15


def caps() -> QueryLimits:
    """The largest limits a configuration may set (each field's upper bound)."""
    values = {}
    for name, field in QueryLimits.model_fields.items():
        values[name] = next(m.le for m in field.metadata if hasattr(m, "le"))
    return QueryLimits(**values)


def _at_caps(n: int) -> str:
    """Every recursion at once at the largest limits: ``FILTER EXISTS`` nested, calls nested
    inside, an OR chain inside them (``n`` is ignored)."""
    top = caps()
    groups, brackets = top.max_group_depth, top.max_bracket_depth
    chain = " || ".join(["?o"] * (top.max_operators - 5))
    inner = "FILTER(" + "STR(" * (brackets - 2) + f"({chain})" + ")" * (brackets - 2) + ")"
    return (
        "SELECT ?o WHERE { "
        + f"{T} FILTER EXISTS {{ " * (groups - 1)
        + f"{T} {inner}"
        + (" }" * groups)
    )


SHAPES: dict[str, Callable[[int], str]] = {
    "groups": _groups,
    "parens": _parens,
    "union": _union,
    "or_chain": _or_chain,
    "calls": _calls,
    "exists": _exists,
    "blanks": _blanks,
    "binds": _binds,
    "minus": _minus,
    "path": _path,
    "triples": _triples,
    "collections": _collections,
    "subselects": _subselects,
    "combined": _combined,
    "at_caps": _at_caps,
}


def _backend(where: str) -> GraphBackend:
    if where == "memory":
        return EmbeddedGraph()
    endpoint = SparqlEndpoint(where)
    endpoint.update("CLEAR ALL")
    return endpoint


def _outcome(run: Callable[[], object]) -> str:
    try:
        run()
    except GlidingError as exc:
        return type(exc).__name__
    return "ran"


def main(where: str, shape: str, sizes: list[int]) -> None:
    limits = caps() if shape == "at_caps" else QueryLimits()
    config = BlackboardConfig(flush_interval_s=0.0, query_limits=limits)
    board = Blackboard(_backend(where), config=config)
    board.write([{"@id": "urn:s", "urn:p": {"@id": "urn:o"}}], task=TASK, area="execution")
    doer = board.agent("doer", role="do", task=TASK)
    for size in sizes:
        text = SHAPES[shape](size)
        for mode, run in _runs(board, doer, text):
            answer = {"size": size, "chars": len(text), "mode": mode, "outcome": _outcome(run)}
            print(json.dumps(answer), flush=True)
    board.close()


def _runs(
    board: Blackboard, doer: AgentHandle, text: str
) -> list[tuple[str, Callable[[], object]]]:
    """The two ways ``text`` is sent: as the agent's query and as the system's."""
    return [
        ("agent", lambda: doer.query(text, areas=["execution"])),
        ("system", lambda: board.query(text)),
    ]


def in_small_thread(where: str, shape: str, sizes: list[int]) -> None:
    """Run ``main`` on a thread with a 1 MiB stack (an eighth of the main thread's)."""
    threading.stack_size(1 << 20)
    worker = threading.Thread(target=main, args=(where, shape, sizes))
    worker.start()
    worker.join()


if __name__ == "__main__":
    where, shape, sizes = sys.argv[1], sys.argv[2], [int(size) for size in sys.argv[3:]]
    if where == "memory-small-stack":
        in_small_thread("memory", shape, sizes)
    else:
        main(where, shape, sizes)
