"""The plan/do/check/act round of ``gliding-horse demo``."""

from __future__ import annotations

import io

from gliding_core import EventType, Memory, MemoryConfig
from gliding_core.cli.demo_blackboard import CODE, DECISION, PLAN, REVIEW, TASK, run
from gliding_core.config import BlackboardConfig

WRITES = {"planner": PLAN, "coder": CODE, "reviewer": REVIEW, "lead": DECISION}


def test_the_round_refuses_what_the_matrix_forbids_and_flushes_the_task() -> None:
    out = io.StringIO()
    config = MemoryConfig(embedder="hash", blackboard=BlackboardConfig(flush_interval_s=0.0))
    with Memory(config=config) as memory:
        run(out, memory)
        text = out.getvalue()
        assert text.count("PermissionDeniedError") == 4
        assert "plan-ready  planner" in text
        assert "was in L0 before the task ended: True" in text
        assert "after: 4 of 4" in text
        assert memory.store.get(DECISION) is not None
        coordination = memory.blackboard.coordination
        assert coordination is not None
        assert coordination.tasks.get(TASK).status.value == "completed"


def test_each_of_the_four_agents_leases_what_it_writes_and_releases_it() -> None:
    config = MemoryConfig(embedder="hash", blackboard=BlackboardConfig(flush_interval_s=0.0))
    with Memory(config=config) as memory:
        run(io.StringIO(), memory)
        granted = [e.payload for e in memory.bus.recent(EventType.LEASE_GRANTED)]
        released = [e.payload for e in memory.bus.recent(EventType.LEASE_RELEASED)]
        wanted = [{"holder": h, "resource": r, "mode": "write"} for h, r in WRITES.items()]
        for leases in (granted, released):
            assert [{k: p[k] for k in ("holder", "resource", "mode")} for p in leases] == wanted
        coordination = memory.blackboard.coordination
        assert coordination is not None
        assert all(coordination.leases.holders(iri) == [] for iri in WRITES.values())
