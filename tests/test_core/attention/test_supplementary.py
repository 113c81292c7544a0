"""SupplementaryInputStore beyond the queue's contract: bus events, and a session's cycle.

What every ``SupplementaryQueue`` promises (zero loss, exactly once, order, audit, ``wait``,
taking inside the caller's L0 transaction) is the contract suite's
(``contracts/test_supplementary_queue.py``), which runs on this queue too.
"""

from __future__ import annotations

from gliding_core import EventBus, EventType, L0Store, Memory, SupplementaryInputStore

TASK = "urn:task:1"


def test_each_put_is_published_on_the_bus(store: L0Store) -> None:
    bus = EventBus()
    inputs = SupplementaryInputStore(store, bus)
    inputs.put(TASK, "use RS256", producer="alice", relevance=0.7)
    inputs.put(TASK, "and rotate keys monthly", producer="alice")
    inputs.put("urn:task:other", "not for this task")
    inputs.take_pending(TASK)  # taking publishes nothing
    events = bus.recent(EventType.USER_SUPPLEMENTARY_INPUT)
    assert [e.payload["content"] for e in events] == [
        "use RS256",
        "and rotate keys monthly",
        "not for this task",
    ]
    assert [e.payload["producer"] for e in events] == ["alice", "alice", None]


def test_start_cycle_turns_inputs_into_protected_turns_once() -> None:
    with Memory() as memory:
        session = memory.session(TASK)
        session.add_turn("user", "Migrate the billing service to Postgres")
        memory.supplements.put(TASK, "keep the old MySQL replica for a week", producer="user")
        memory.supplements.put(TASK, "billing exports must not stop", relevance=0.9)
        taken = session.start_cycle(memory.supplements)
        assert [i.content for i in taken] == [
            "keep the old MySQL replica for a week",
            "billing exports must not stop",
        ]
        turns = session.turns[1:]
        assert [t.is_supplement for t in turns] == [True, True]
        assert turns[1].relevance_score == 0.9
        assert 0.0 <= turns[0].relevance_score <= 1.0
        assert session.start_cycle(memory.supplements) == []
        node = memory.store.get_node(turns[0].l0_archive_iri)
        assert node is not None
        assert node["@type"] == "SupplementaryInput"
