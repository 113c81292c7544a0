"""The child process of the hostile model's crash cases: one query an agent sends.

A memory on an embedded board (no endpoint) or on a board at a SPARQL server, a ``do`` agent
on a task, and one case of ``CASES`` sent through ``gliding_core.tools.board_tools.query``.
The child answers on stdout with one JSON line, ``{"outcome": "refused", "error": ...,
"typed": ...}`` or ``{"outcome": "answered"}``; a crash of the engine takes the process with
it (no line, a signal's return code), which is what the parent looks for.

Usage: ``hostile_child.py CASE [ENDPOINT]``.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable

from gliding_core import GlidingError, HashEmbedder, Memory, MemoryConfig
from gliding_core.config import BlackboardConfig, TopicConfig
from gliding_core.tools import board_tools as ops

TASK = "urn:hostile:crash:task"


def nested_groups(depth: int = 3_000) -> str:
    """``SELECT * WHERE { { { ... ?s ?p ?o ... } } }``: about 12 KB at 3,000 groups."""
    return "SELECT * WHERE " + "{ " * depth + "?s ?p ?o " + "} " * depth


def nested_parentheses(depth: int = 8_000) -> str:
    """A FILTER of ``depth`` nested parentheses."""
    return "SELECT * WHERE { ?s ?p ?o FILTER(" + "(" * depth + "?o" + ")" * depth + ") }"


def wide_union(arms: int = 10_000) -> str:
    """A ``arms``-way UNION of one triple pattern each."""
    return "SELECT * WHERE { " + " UNION ".join(["{ ?s ?p ?o }"] * arms) + " }"


def or_chain(size: int = 1 << 20) -> str:
    """A FILTER of ``?o = n || ...`` about ``size`` bytes long."""
    terms: list[str] = []
    length = 0
    while length < size:
        term = f"?o = {len(terms)}"
        terms.append(term)
        length += len(term) + 4
    return "SELECT * WHERE { ?s ?p ?o FILTER(" + " || ".join(terms) + ") }"


def long_comment(size: int = 1 << 20) -> str:
    """A query with a 1 MB comment: any scan that is quadratic in the text never ends."""
    return "ASK {} #" + "x" * size


CASES: dict[str, Callable[[], str]] = {
    "nested-groups-3000": nested_groups,
    "nested-parentheses-8000": nested_parentheses,
    "union-10000": wide_union,
    "or-chain-1mb": or_chain,
    "comment-1mb": long_comment,
}
SERVER_CASES = ("nested-groups-3000", "nested-parentheses-8000", "union-10000", "or-chain-1mb")


def main() -> None:
    case = sys.argv[1]
    endpoint = sys.argv[2] if len(sys.argv) > 2 else None
    board = BlackboardConfig(endpoint=endpoint, flush_interval_s=0.0)
    config = MemoryConfig(embedder="hash", topics=TopicConfig(interval_s=0), blackboard=board)
    memory = Memory(config=config, embedder=HashEmbedder(), engines=False)
    doer = memory.agent("crash-doer", role="do", task=TASK)
    text = CASES[case]()
    try:
        ops.query(doer, text)
    except GlidingError as exc:
        answer = {"outcome": "refused", "error": type(exc).__name__, "typed": True}
    except Exception as exc:  # an untyped refusal is reported as such
        answer = {"outcome": "refused", "error": type(exc).__name__, "typed": False}
    else:
        answer = {"outcome": "answered"}
    sys.stdout.write(json.dumps(answer) + "\n")
    sys.stdout.flush()
    memory.close()  # (a dead server fails this: the exit status says so)


if __name__ == "__main__":
    main()
