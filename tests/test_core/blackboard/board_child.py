"""The other process of the blackboard's two-process coherence test: a memory on the shared
directory and SPARQL server, running JSON commands from stdin as agent ``there`` and answering
each on stdout (one line each).

Usage: ``board_child.py DIRECTORY ENDPOINT TASK``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from gliding_core import Memory, MemoryConfig
from gliding_core.blackboard.handle import AgentHandle
from gliding_core.config import BlackboardConfig
from gliding_core.errors import StaleWriteError


def increment(handle: AgentHandle, iri: str, times: int) -> int:
    """Add 1 to the node's ``count`` ``times`` times, re-reading when refused; return retries."""
    retries = 0
    for _ in range(times):
        while True:
            node = handle.read(iri)
            assert node is not None
            value = {**node.node, "count": node.node["count"] + 1}
            try:
                handle.write([value], area="execution", based_on=node.generation)
                break
            except StaleWriteError:
                retries += 1
    return retries


def run(memory: Memory, there: AgentHandle, command: dict[str, Any]) -> dict[str, Any]:
    op, iri = command["op"], command["iri"]
    if op == "increment":
        return {"retries": increment(there, iri, command["times"])}
    if op in ("read", "system_read"):
        node = there.read(iri) if op == "read" else memory.blackboard.read(iri)
        return {} if node is None else {"generation": node.generation, "text": node.node["text"]}
    value = {"@id": iri, "@type": "Step", "text": command["text"]}
    try:
        [node] = there.write([value], area="execution", based_on=command["based_on"])
    except StaleWriteError as exc:
        return {"error": "StaleWriteError", "current_generation": exc.current_generation}
    return {"generation": node.generation}


def main() -> None:
    directory, endpoint, task = sys.argv[1:4]
    board = BlackboardConfig(endpoint=endpoint, flush_interval_s=0.0)
    config = MemoryConfig(embedder="hash", blackboard=board)
    with Memory.open(Path(directory), config=config, engines=False) as memory:
        there = memory.agent("there", role="do", task=task)
        for line in sys.stdin:
            sys.stdout.write(json.dumps(run(memory, there, json.loads(line))) + "\n")
            sys.stdout.flush()


if __name__ == "__main__":
    main()
