"""Conversation: the budgeted model view the adapters share, and what it archives."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gliding_core import (
    Conversation,
    HashEmbedder,
    InvalidInputError,
    Memory,
    MemoryConfig,
    Scope,
    SearchFilters,
    TopicConfig,
    adopt_unscoped_turns,
    reader_filters,
    resolve_scope,
    scope_task_iri,
)

TASK = "urn:task:conversation"


@pytest.fixture
def memory() -> Iterator[Memory]:
    config = MemoryConfig(topics=TopicConfig(interval_s=0))
    with Memory(config=config, embedder=HashEmbedder()) as value:
        yield value


def chat(turns: int, start: int = 0) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for i in range(start, start + turns):
        out.append(
            {"role": "user", "content": f"Question {i} about shipping crates", "id": f"u{i}"}
        )
        out.append({"role": "assistant", "content": f"Crates go out on dock {i}.", "id": f"a{i}"})
    return out


def test_a_history_that_fits_is_sent_whole_without_a_summary(memory: Memory) -> None:
    conversation = Conversation(memory, TASK, budget=2_000)
    history = chat(3)
    conversation.record(history)

    view = conversation.view(history)

    assert [m["id"] for m in view.messages if m["role"] != "system"] == [m["id"] for m in history]
    assert "[Context from" not in view.memory
    assert view.dropped == 0


def test_a_long_history_is_cut_to_the_budget_and_the_old_fact_recalled(memory: Memory) -> None:
    conversation = Conversation(memory, TASK, budget=250)
    history = [{"role": "user", "content": "The vault code is 5521.", "id": "fact"}, *chat(30)]
    history.append({"role": "user", "content": "What is the vault code?", "id": "q"})
    conversation.record(history)

    view = conversation.view(history)

    assert view.tokens <= 250
    assert view.tokens == memory.framing().count(view.messages)  # exact, as sent
    assert view.history_tokens > 2 * 250
    assert view.messages[-1]["id"] == "q"
    assert "5521" in view.memory
    assert all("5521" not in str(m["content"]) for m in view.messages[1:])


def test_the_summary_and_recall_leave_out_what_the_window_shows(memory: Memory) -> None:
    conversation = Conversation(memory, TASK, budget=300)
    history = chat(20)
    conversation.record(history)

    view = conversation.view(history)

    window = [str(m["content"]) for m in view.messages if m["role"] != "system"]
    for line in view.memory.splitlines():
        assert not any(text in line for text in window), line


def test_each_message_is_archived_once_by_id(memory: Memory) -> None:
    conversation = Conversation(memory, TASK)
    history = chat(2)

    first = conversation.record(history)
    again = conversation.record([*history, {"role": "user", "content": "new", "id": "n"}])

    assert len(first) == 4
    assert [t.summary for t in again] == ["new"]
    assert conversation.archived("u0") == first[0].l0_archive_iri
    assert conversation.archived("missing") is None


def test_supplements_are_delivered_once_and_always_kept(memory: Memory) -> None:
    conversation = Conversation(memory, TASK, budget=200)
    memory.supplements.put(TASK, "Ship nothing on Sundays.")
    history = chat(20)
    conversation.record(history)

    delivered = conversation.deliver()
    view = conversation.view(history, supplements=delivered)

    assert [s.content for s in delivered] == ["Ship nothing on Sundays."]
    assert view.messages[-1]["content"] == "Ship nothing on Sundays."
    assert "Sundays" not in view.memory  # shown as a message: not repeated in the memory
    assert conversation.deliver() == []


def test_inputs_taken_at_a_cycle_start_are_delivered_later(memory: Memory) -> None:
    conversation = Conversation(memory, TASK)
    memory.supplements.put(TASK, "Use the north dock.")

    taken = conversation.take_pending()  # a callback handler at a cycle start

    assert [s.content for s in taken] == ["Use the north dock."]
    assert [s.content for s in conversation.deliver()] == ["Use the north dock."]
    assert conversation.deliver() == []


def test_a_tool_call_stays_with_its_results(memory: Memory) -> None:
    conversation = Conversation(memory, TASK, budget=200, window_share=0.4)
    history = chat(8)
    history += [
        {
            "role": "assistant",
            "content": "",
            "id": "call",
            "tool_calls": [{"id": "t1", "name": "crates", "args": {}}],
        },
        {"role": "tool", "content": "12 crates " * 20, "tool_call_id": "t1", "id": "result"},
        {"role": "assistant", "content": "There are 12 crates.", "id": "answer"},
    ]
    view = conversation.view(history)

    ids = [m.get("id") for m in view.messages]
    assert ("call" in ids) == ("result" in ids)


messages = st.lists(
    st.tuples(st.sampled_from(["user", "assistant"]), st.text(min_size=1, max_size=120)),
    min_size=1,
    max_size=40,
)


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(items=messages, budget=st.integers(min_value=120, max_value=800))
def test_the_view_keeps_the_newest_message_and_the_budget(
    memory: Memory, items: list[tuple[str, str]], budget: int
) -> None:
    conversation = Conversation(memory, TASK, budget=budget)
    history = [{"role": r, "content": c, "id": f"m{i}"} for i, (r, c) in enumerate(items)]
    view = conversation.view(history)

    assert view.messages[-1]["id"] == history[-1]["id"]
    newest = memory.framing().count([history[-1]])
    assert view.tokens <= max(budget, newest)
    kept = [m["id"] for m in view.messages if m["role"] != "system"]
    assert kept == sorted(kept, key=lambda key: int(key[1:]))  # order kept


def test_bad_arguments_get_typed_errors_naming_the_value(memory: Memory) -> None:
    with pytest.raises(InvalidInputError, match="memory must be a gliding_core Memory, got 'mem'"):
        Conversation("mem", TASK)  # type: ignore[arg-type]
    with pytest.raises(InvalidInputError, match="budget must be an int >= 1, got 0"):
        Conversation(memory, TASK, budget=0)
    with pytest.raises(InvalidInputError, match="window_share"):
        Conversation(memory, TASK, window_share=2)
    with pytest.raises(InvalidInputError, match="summary_share"):
        Conversation(memory, TASK, summary_share=-0.1)
    with pytest.raises(InvalidInputError, match="recall_k"):
        Conversation(memory, TASK, recall_k=-1)
    conversation = Conversation(memory, TASK)
    with pytest.raises(InvalidInputError, match="message 1"):
        conversation.record([{"role": "user", "content": "ok"}, {"content": "no role"}])
    assert memory.store.count() == 0  # nothing archived half-way
    with pytest.raises(InvalidInputError, match="id must be a string"):
        conversation.record([{"role": "user", "content": "x", "id": 3}])
    with pytest.raises(InvalidInputError, match="query"):
        conversation.view([], query=5)  # type: ignore[arg-type]
    with pytest.raises(InvalidInputError, match="budget"):
        conversation.view([], budget=0)


def test_a_view_may_take_its_own_budget_and_shares(memory: Memory) -> None:
    conversation = Conversation(memory, TASK, budget=2_000, summary_share=0.0)
    history = chat(40)
    conversation.record(history)

    small = conversation.view(history, budget=200)
    large = conversation.view(history)

    assert small.tokens <= 200 < large.tokens <= 2_000
    assert "[Context from" not in small.memory  # no room given to the L1 context


def test_a_supplement_never_splits_a_tool_call_from_its_result(memory: Memory) -> None:
    conversation = Conversation(memory, TASK)
    history = [
        {"role": "user", "content": "Weather in Oslo?", "id": "q"},
        {
            "role": "assistant",
            "content": "",
            "id": "call",
            "tool_calls": [{"id": "t1", "name": "weather", "args": {}}],
        },
        {"role": "user", "content": "Use Celsius please.", "id": "s", "supplement": True},
        {"role": "tool", "content": "3 degrees", "tool_call_id": "t1", "id": "result"},
    ]

    view = conversation.view(history)

    assert [m["id"] for m in view.messages if m["role"] != "system"] == ["q", "call", "result", "s"]


def test_conversations_on_one_session_share_what_was_archived_and_shown(memory: Memory) -> None:
    first = Conversation(memory, TASK)
    history = chat(3)
    first.record(history)
    memory.supplements.put(TASK, "Ship on Monday.")
    assert [s.content for s in first.deliver()] == ["Ship on Monday."]

    second = Conversation(memory, TASK)  # a new adapter instance, per request

    assert second.record(history) == []
    assert second.deliver() == []
    assert second.archived("u0") == first.archived("u0")


def test_the_ledger_is_the_sessions_and_each_session_has_its_own(memory: Memory) -> None:
    """What was archived and shown lives on the session, as long as it, not in a module."""
    first = Conversation(memory, TASK)
    first.record(chat(1))
    session = memory.session(TASK)
    assert first.session is session
    assert set(session.ledger.recorded) == {"u0", "a0"}
    assert session.ledger.recorded["u0"] == first.archived("u0")
    other = Conversation(memory, TASK, agent="another")  # another agent: another session
    assert other.session.ledger is not session.ledger
    assert other.record(chat(1)) != []  # its own archive: the messages are its to record


def test_a_memory_block_may_ask_for_the_l1_context_without_a_history(memory: Memory) -> None:
    conversation = Conversation(memory, TASK, budget=500)
    conversation.record(chat(10))

    assert "[Context from" not in conversation.view([], query="crates").memory
    assert "[Context from" in conversation.view([], query="crates", summary=True).memory


# -- scopes --------------------------------------------------------------------------------------


def test_scope_mapping_is_injective_and_documented() -> None:
    assert Scope.user("alice").task_iri == "urn:gliding:scope:user:alice"
    assert Scope.user("alice").tag == "scope:user:alice"
    assert Scope.thread("t/1").name == "thread:t%2F1"
    assert Scope.task(TASK).task_iri == TASK
    assert Scope.user("a:b").tag != Scope.user("a").tag
    assert len({Scope.user("x").tag, Scope.thread("x").tag, Scope.user("x:").tag}) == 3
    iris = {Scope.user("x").task_iri, Scope.thread("x").task_iri, Scope.task("urn:x").task_iri}
    assert len(iris) == 3
    assert scope_task_iri(user_id="alice", thread_id="t1") == Scope.user("alice").task_iri
    assert scope_task_iri(thread_id="t1") == Scope.thread("t1").task_iri
    assert scope_task_iri(default=TASK) == TASK
    assert resolve_scope(default=Scope.user("z")) == Scope.user("z")


@pytest.mark.parametrize(
    "make",
    [
        lambda: Scope.task(Scope.user("alice").task_iri),
        lambda: Scope.task(Scope.thread("t1").task_iri),
        lambda: Scope.task("urn:gliding:scope:anything"),
        lambda: Scope.of_task("urn:gliding:scope:user:"),
        lambda: Scope.of_task("urn:gliding:scope:user:a:b"),  # not how "a:b" is written
        lambda: resolve_scope(default="urn:gliding:scope:group:x"),
    ],
)
def test_a_task_scope_cannot_take_the_task_iri_of_a_user_or_a_thread(
    make: Callable[[], object],
) -> None:
    # Otherwise it would share the user's L1 session and inputs (keyed by the task IRI), and
    # a forget or an export of the task would reach them.
    with pytest.raises(InvalidInputError, match="urn:gliding:scope:"):
        make()


@pytest.mark.parametrize(
    "scope", [Scope.user("alice"), Scope.thread("t/1"), Scope.user("a:b"), Scope.task(TASK)]
)
def test_a_task_iri_gives_back_its_scope(scope: Scope) -> None:
    assert Scope.of_task(scope.task_iri) == scope
    assert resolve_scope(default=scope.task_iri) == scope


def test_unscoped_turns_of_a_user_s_task_are_adopted_into_the_user_s_scope() -> None:
    with Memory(embedder=HashEmbedder()) as memory:
        memory.session(TASK).add_turn("user", "plain task words")
        memory.session(Scope.user("alice").task_iri).add_turn("user", "alice words")
        for entry in memory.store.by_type("Turn"):  # as archived before scopes existed
            memory.store.retag(entry.iri, remove=[t for t in entry.tags if t.startswith("scope:")])
        assert adopt_unscoped_turns(memory.store) == 2
        tags = {entry.node["summary"]: entry.tags for entry in memory.store.by_type("Turn")}
        assert Scope.user("alice").tag in tags["alice words"]
        assert Scope.task(TASK).tag in tags["plain task words"]


@pytest.mark.parametrize(
    ("make", "match"),
    [
        (lambda: Scope.user(""), "user id"),
        (lambda: Scope.thread(7), "thread id"),  # type: ignore[arg-type]
        (lambda: Scope("group", "x"), "kind"),  # type: ignore[arg-type]
        (lambda: Scope.task("not an iri"), "task IRI"),
        (lambda: Scope.user("\ud800"), "Unicode"),
        (lambda: resolve_scope(), "needs a user_id"),
        (lambda: Scope.user("a").filters("urn:kg:x"), "shared"),
        (lambda: Scope.user("a").filters([3]), "shared"),  # type: ignore[list-item]
        (lambda: reader_filters("user:a"), "scope"),  # type: ignore[arg-type]
        (lambda: SearchFilters(any_of=(1,)), "any_of"),  # type: ignore[arg-type]
        (lambda: SearchFilters(exclude_types=("",)), "exclude_types"),
        (lambda: SearchFilters(named_graphs=3), "named_graphs"),  # type: ignore[arg-type]
        (lambda: SearchFilters(all_of=[SearchFilters(), "x"]), "all_of"),  # type: ignore[list-item]
    ],
)
def test_bad_scopes_get_typed_errors(make: Any, match: str) -> None:
    with pytest.raises(InvalidInputError, match=match):
        make()


def test_a_conversation_recalls_its_scope_and_the_shared_graphs_only(memory: Memory) -> None:
    alice = Conversation(memory, scope=Scope.user("alice"), shared=["urn:kg:common"], budget=200)
    bob = Conversation(memory, scope=Scope.user("bob"), budget=200)
    alice.record([{"role": "user", "content": "My locker code is 7781.", "id": "a1"}])
    bob.record([{"role": "user", "content": "My locker code is 1234.", "id": "b1"}])
    memory.store.put({"@id": "urn:kg:1", "text": "Lockers open at 8."}, named_graph="urn:kg:common")
    memory.store.put({"@id": "urn:loose", "text": "Locker code list: 0000."})  # of no scope
    memory.supplements.put(alice.task_iri, "My locker code changed to 9999.")  # pending

    view = alice.view([{"role": "user", "content": "locker code?", "id": "q"}])

    assert "7781" in view.memory
    assert "Lockers open at 8." in view.memory
    for other in ("1234", "0000", "9999"):
        assert other not in view.memory
    assert alice.session is not bob.session
    with pytest.raises(InvalidInputError, match="is not the task of scope"):
        Conversation(memory, TASK, scope=Scope.user("alice"))


def test_scope_filters_hold_in_both_search_arms(memory: Memory) -> None:
    common = "urn:kg:common"
    memory.store.put({"@id": "urn:a", "text": "red kite"}, tags=[Scope.user("a").tag])
    memory.store.put({"@id": "urn:b", "text": "red kite"}, tags=[Scope.user("b").tag])
    memory.store.put({"@id": "urn:c", "text": "red kite"}, named_graph=common)
    memory.store.put({"@id": "urn:d", "text": "red kite"})
    memory.store.put({"@id": "urn:e", "@type": "SupplementaryInput", "text": "red kite"})

    def found(filters: SearchFilters) -> set[str]:
        return {hit.iri for hit in memory.search("red kite", 10, filters=filters)}

    assert found(Scope.user("a").filters()) == {"urn:a"}
    assert found(Scope.user("a").filters([common])) == {"urn:a", "urn:c"}
    assert found(Scope.user("a").filters([Scope.user("b")])) == {"urn:a", "urn:b"}
    assert found(reader_filters(None)) == {"urn:c", "urn:d"}
    only_c = SearchFilters(named_graph=common)
    assert found(Scope.user("a").filters([common], base=only_c)) == {"urn:c"}
    assert found(SearchFilters(exclude_tags=(Scope.user("a").tag,))) == {
        "urn:b",
        "urn:c",
        "urn:d",
        "urn:e",
    }


def test_no_input_reaches_the_l1_context_but_as_its_message(memory: Memory) -> None:
    conversation = Conversation(memory, TASK, budget=120)
    conversation.record(chat(20))
    memory.supplements.put(TASK, "Crates on dock 3 are fragile.")
    conversation.take_pending()  # in the session, as a callback handler leaves it

    view = conversation.view(chat(20), summary=True)
    delivered = conversation.deliver()
    later = conversation.view(chat(20), supplements=delivered, summary=True)

    assert "fragile" not in view.memory
    assert "fragile" not in later.memory
    assert sum("fragile" in str(m["content"]) for m in later.messages) == 1


SCOPES = [Scope.user("a"), Scope.user("b"), Scope.thread("a"), Scope.task("urn:t:1")]
GRAPHS = ["urn:kg:1", "urn:kg:2"]
ENTRY = st.tuples(
    st.sampled_from([None, *SCOPES]),
    st.sampled_from([None, *GRAPHS]),
    st.booleans(),  # a supplementary input
)


@settings(
    max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    entries=st.lists(ENTRY, max_size=12),
    reader=st.sampled_from([None, *SCOPES]),
    shared=st.lists(st.sampled_from([*GRAPHS, *SCOPES]), max_size=3, unique=True),
)
def test_what_a_reader_may_read_is_exactly_its_scope_and_shares(
    memory: Memory, entries: list[Any], reader: Scope | None, shared: list[Any]
) -> None:
    """The SQL of ``reader_filters`` picks exactly the entries the scoping rules allow."""
    prefix = f"urn:case:{len(memory.store.by_prefix('urn:case:', limit=None))}:"
    expected = []
    for index, (owner, graph, is_input) in enumerate(entries):
        iri = f"{prefix}{index}"
        node = {"@id": iri, "@type": "SupplementaryInput" if is_input else "Note", "text": "x"}
        tags = [owner.tag] if owner is not None else []
        memory.store.put(node, tags=tags, named_graph=graph)
        readable = owner == reader or graph in shared or owner in shared
        if not is_input and readable:
            expected.append(iri)

    found = memory.store.matching(reader_filters(reader, shared), None)

    assert [iri for iri in found if iri.startswith(prefix)] == expected


def test_turns_from_before_scopes_are_adopted_by_their_task(memory: Memory) -> None:
    old = memory.session(TASK)
    old.add_turn("user", "The vault code is 5512.")  # archived without a scope tag
    unscoped = Conversation(memory, TASK, budget=200)
    question = [{"role": "user", "content": "vault code?", "id": "q"}]
    assert "5512" not in unscoped.view(question).memory

    assert adopt_unscoped_turns(memory.store) == 1
    assert adopt_unscoped_turns(memory.store) == 0  # once
    assert "5512" in Conversation(memory, TASK, budget=200).view(question).memory
    with pytest.raises(InvalidInputError, match="store"):
        adopt_unscoped_turns("not a store")  # type: ignore[arg-type]
