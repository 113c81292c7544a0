"""The plan/do/check/act round of ``gliding-horse demo``."""

from __future__ import annotations

import io

from gliding_core import Memory, MemoryConfig
from gliding_core.config import BlackboardConfig
from gliding_core.demo_blackboard import DECISION, TASK, run


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
