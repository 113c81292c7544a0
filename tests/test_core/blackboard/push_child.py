"""Another worker of the pushed-invalidation tests: a memory in PostgreSQL (the URL in
``GLIDING_DATABASE_URL``) with its blackboard at a SPARQL server, running JSON commands from
stdin as one agent and answering each on stdout (one line each).

Usage: ``push_child.py SCHEMA ENDPOINT TASK AGENT [TIMEOUT_S]``.

The ``wait_*`` commands only look at what this process holds (``Coherence.holds_copy``, the
events on its bus, ``Blackboard.pushed``): they never read a node, so a copy found dropped was
dropped by a push. Each waits at most ``bound_s`` (a liveness bound, not a timing: the answer
says whether it happened, and the test asserts that).
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from typing import Any

from gliding_core import BlackboardConfig, Memory, MemoryConfig
from gliding_core.blackboard.handle import AgentHandle
from gliding_core.bus import Event, EventType


class Worker:
    """One agent of this process and what the bus told it."""

    def __init__(self, memory: Memory, agent: AgentHandle) -> None:
        self.memory, self.agent = memory, agent
        self.board = memory.blackboard
        self.lock = threading.Lock()
        self.pushed: list[dict[str, Any]] = []
        memory.bus.subscribe(self._on_invalidated, [EventType.COPIES_INVALIDATED])

    def _on_invalidated(self, event: Event) -> None:
        if event.payload.get("pushed"):
            with self.lock:
                self.pushed.append(dict(event.payload))

    def held(self, iri: str) -> bool:
        return self.board.coherence.holds_copy(self.agent.name, iri)

    def until(self, done: Any, bound_s: float) -> bool:
        """Poll ``done()`` every few milliseconds until it is true or ``bound_s`` passed."""
        deadline = time.monotonic() + bound_s
        while not done():
            if time.monotonic() > deadline:
                return False
            time.sleep(0.005)
        return True

    def pushes_of(self, iri: str) -> list[list[str]]:
        with self.lock:
            return [p["agents"] for p in self.pushed if p["iri"] == iri]

    def run(self, command: dict[str, Any]) -> dict[str, Any]:
        op, iri, bound = command["op"], command.get("iri", ""), command.get("bound_s", 60.0)
        if op == "read":
            node = self.agent.read(iri)
            if node is None:
                return {"held": self.held(iri)}
            return {
                "generation": node.generation,
                "text": node.node["text"],
                "held": self.held(iri),
            }
        if op == "write":
            value = {"@id": iri, "@type": "Step", "text": command["text"]}
            [node] = self.agent.write([value], area="execution")
            return {"generation": node.generation, "held": self.held(iri)}
        if op == "held":
            return {"held": self.held(iri), "pushes": self.pushes_of(iri)}
        if op == "wait_dropped":  # dropped, and told by a push beyond the first ``after``
            after = command.get("after", 0)
            dropped = self.until(
                lambda: not self.held(iri) and len(self.pushes_of(iri)) > after, bound
            )
            return {"dropped": dropped, "held": self.held(iri), "pushes": self.pushes_of(iri)}
        if op == "wait_pushed":
            want = bool(command["pushed"])
            return {"reached": self.until(lambda: self.board.pushed is want, bound)}
        if op == "state":
            state = self.board.coherence.copies(iri).get(self.agent.name)
            return {"state": None if state is None else state.value}
        raise ValueError(f"unknown op {op!r}")


def main() -> None:
    schema, endpoint, task, name = sys.argv[1:5]
    timeout = float(sys.argv[5]) if len(sys.argv) > 5 else 5.0
    config = MemoryConfig(
        embedder="hash",
        database_schema=schema,
        database_timeout_s=timeout,
        blackboard=BlackboardConfig(endpoint=endpoint, flush_interval_s=0.0),
    )
    with Memory.open(os.environ["GLIDING_DATABASE_URL"], config=config) as memory:
        worker = Worker(memory, memory.agent(name, role="do", task=task))
        print(json.dumps({"ready": worker.board.pushed}), flush=True)
        for line in sys.stdin:
            try:
                answer = worker.run(json.loads(line))
            except Exception as exc:
                answer = {"error": type(exc).__name__, "message": str(exc)}
            sys.stdout.write(json.dumps(answer) + "\n")
            sys.stdout.flush()


if __name__ == "__main__":
    main()
