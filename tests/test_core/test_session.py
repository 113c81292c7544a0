"""L1 sessions: a worked example of two-phase eviction, eviction direction, pinning, paging,
context."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gliding_core import (
    ConfigError,
    EntryNotFoundError,
    EventBus,
    EvictionPolicy,
    ExtractiveSummarizer,
    HashEmbedder,
    InvalidInputError,
    L0Store,
    Session,
    SessionConfig,
    TokenCounter,
)
from gliding_core.session import LOW_HEADER, SessionServices

TASK = "urn:task:jwt"
NOW = 1_000_000.0
TOKENS = TokenCounter()


class Clock:
    """A clock the test moves by hand."""

    def __init__(self, now: float = NOW) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def exactly(text: str, tokens: int, role: str = "user") -> str:
    """Pad ``text`` with one-token words until its context line is exactly ``tokens`` tokens."""
    while TOKENS.count(f"[{role}] {text}") < tokens:
        text += " pad"
    assert TOKENS.count(f"[{role}] {text}") == tokens
    return text


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def store() -> Iterator[L0Store]:
    with L0Store() as value:
        yield value


def services(store: L0Store, clock: Clock, *, embedder: bool = False) -> SessionServices:
    return SessionServices(
        store=store,
        tokens=TOKENS,
        summarizer=ExtractiveSummarizer(TOKENS),
        bus=EventBus(),
        embedder=HashEmbedder() if embedder else None,
        clock=clock,
    )


def session(store: L0Store, clock: Clock, budget: int, **options: object) -> Session:
    embedder = bool(options.pop("embedder", False))
    return Session(
        services(store, clock, embedder=embedder),
        TASK,
        config=SessionConfig(budget=budget),
        **options,  # type: ignore[arg-type]
    )


def test_the_worked_example_of_two_phase_eviction(store: L0Store, clock: Clock) -> None:
    """The design's example, turns in Chinese: budget 200; phase 1 drops the two stale,
    low-relevance turns."""
    chain = session(store, clock, 200)
    rows = [
        ("user", "用户询问如何配置 JWT 认证", 60, 0.9, False, 0),
        ("assistant", "提供了 JWT 密钥生成和验证的代码", 80, 0.85, False, 0),
        ("user", "补充说明：需要支持 RS256 算法", 40, 0.2, True, 400),  # noqa: RUF001 (seed text)
        ("user", "用户切换到讨论数据库连接池", 50, 0.1, False, 600),
        ("assistant", "提供了 HikariCP 配置示例", 70, 0.15, False, 600),
    ]
    added = [
        chain.add_turn(role, exactly(text, n, role), relevance=r, supplement=s, at=NOW - age)
        for role, text, n, r, s, age in rows
    ]
    assert [t.tokens for t in added] == [60, 80, 40, 50, 70]
    assert chain.turns == added[:3]
    assert chain.total_tokens == 180
    assert chain.weak_refs == [added[3].l0_archive_iri, added[4].l0_archive_iri]
    assert added[2].is_supplement  # stale and low-relevance, but protected
    for turn in added:
        node = store.get_node(turn.l0_archive_iri)
        assert node is not None
        assert node["text"].startswith(rows[added.index(turn)][1])


def _three_turns(
    chain: Session, relevances: list[float], sizes: list[int], ages: list[int]
) -> list:
    chain.add_turn("user", exactly("the task statement", 10), relevance=1.0)
    return [
        chain.add_turn("user", exactly(f"turn number {i}", size), relevance=r, at=NOW - age)
        for i, (r, size, age) in enumerate(zip(relevances, sizes, ages, strict=True))
    ]


def test_phase_two_keeps_the_more_relevant_turn(store: L0Store, clock: Clock) -> None:
    chain = session(store, clock, 75)
    low, high, mid = _three_turns(chain, [0.35, 0.95, 0.6], [30, 30, 30], [10, 10, 10])
    remaining = chain.turns
    assert high in remaining
    assert low not in remaining  # the reference implementation evicted `high` here
    assert mid in remaining or chain.total_tokens <= 75


def test_phase_two_drops_larger_turns_first_at_equal_relevance(
    store: L0Store, clock: Clock
) -> None:
    chain = session(store, clock, 80)
    small, large = _three_turns(chain, [0.6, 0.6], [20, 60], [10, 10])
    assert chain.turns[1:] == [small]
    assert large.l0_archive_iri in chain.weak_refs


def test_phase_two_drops_older_turns_first_at_equal_relevance(store: L0Store, clock: Clock) -> None:
    chain = session(store, clock, 69)
    old, new = _three_turns(chain, [0.6, 0.6], [30, 30], [250, 5])
    assert chain.turns[1:] == [new]
    assert old.l0_archive_iri in chain.weak_refs


def test_similarity_to_the_task_or_query_decides_between_equal_turns(
    store: L0Store, clock: Clock
) -> None:
    chain = session(store, clock, 1_000, embedder=True)
    chain.add_turn("user", "configure JWT authentication for the api")
    jwt = chain.add_turn(
        "assistant", exactly("JWT signing keys for authentication", 20), relevance=0.5, at=NOW - 30
    )
    pool = chain.add_turn(
        "assistant", exactly("database connection pool sizing", 20), relevance=0.5, at=NOW - 30
    )
    query = HashEmbedder().embed_query("how big should the database connection pool be")
    scores = chain.scores(None, [jwt, pool], now=NOW)
    assert scores[id(jwt)] > scores[id(pool)]  # no query: the task goal decides
    scores = chain.scores(query, [jwt, pool], now=NOW)
    assert scores[id(pool)] > scores[id(jwt)]
    chain.set_budget(chain.total_tokens - 1)
    assert jwt in chain.turns
    assert pool not in chain.turns


def test_the_first_turn_is_pinned(store: L0Store, clock: Clock) -> None:
    chain = session(store, clock, 5)
    first = chain.add_turn("user", exactly("a long task statement", 20))
    chain.add_turn("assistant", "ok")
    assert chain.turns == [first]  # over budget, but only the pinned turn remains
    assert first.pinned


def test_an_evicted_turn_pages_back_in(store: L0Store, clock: Clock) -> None:
    chain = session(store, clock, 100)
    chain.add_turn("user", exactly("task", 20), relevance=1.0)
    old = chain.add_turn(
        "user", exactly("old detail about invoices", 40), relevance=0.4, at=NOW - 100
    )
    chain.add_turn("user", exactly("new detail", 50), relevance=0.9)
    assert old.l0_archive_iri in chain.weak_refs
    back = chain.page_in(old.l0_archive_iri)
    assert back is not None
    assert back.summary == old.summary
    assert back.l0_archive_iri not in chain.weak_refs
    assert back in chain.turns
    assert chain.total_tokens <= 100
    assert len(chain.weak_refs) == 1  # the newer turn made room


def test_page_in_of_what_cannot_fit_keeps_it_in_l0(store: L0Store, clock: Clock) -> None:
    chain = session(store, clock, 30)
    chain.add_turn("user", exactly("task", 20))
    iri = store.put({"@id": "urn:big", "text": exactly("big", 150)})
    assert chain.page_in(iri) is None
    assert iri in chain.weak_refs
    assert store.get_node(iri) is not None
    with pytest.raises(EntryNotFoundError):
        chain.page_in("urn:missing")


def test_every_turn_is_archived_with_its_context(store: L0Store, clock: Clock) -> None:
    chain = Session(services(store, clock), TASK, agent="coder", role="do")
    turn = chain.add_turn("assistant", "Wrote the migration.", metadata={"model": "fake"})
    entry = store.get(turn.l0_archive_iri)
    assert entry is not None
    node = entry.node
    assert node["role"] == "assistant"
    assert node["agent"] == "coder"
    assert node["session"] == {"@id": chain.iri}
    assert node["task"] == {"@id": TASK}
    assert node["text"] == "Wrote the migration."
    assert node["time"].startswith("1970-01-12")
    assert entry.named_graph == chain.iri
    assert entry.metadata == {"model": "fake"}
    assert f"session:{chain.id}" in entry.tags


def test_long_content_is_summarised_within_the_limit(store: L0Store, clock: Clock) -> None:
    chain = Session(services(store, clock), TASK, config=SessionConfig(max_summary_tokens=30))
    text = " ".join(
        f"Sentence {i} talks about the deployment pipeline and caching." for i in range(40)
    )
    turn = chain.add_turn("user", text)
    assert turn.tokens <= 30
    assert store.get_node(turn.l0_archive_iri)["text"] == text  # type: ignore[index]


def test_context_sections_and_exact_tokens(store: L0Store, clock: Clock) -> None:
    chain = Session(
        services(store, clock), TASK, config=SessionConfig(budget=400, max_low_relevance=2)
    )
    chain.add_turn("user", "Ship the billing export", relevance=1.0)
    chain.add_turn("assistant", "Export runs nightly at 02:00", relevance=0.8)
    chain.add_turn("user", "RS256 only please", relevance=0.1, supplement=True)
    for i in range(4):
        chain.add_turn("assistant", f"unrelated aside number {i}", relevance=0.1 + i / 100)
    context = chain.context()
    text = context.text
    assert context.tokens == TOKENS.count(text)
    assert context.tokens <= chain.budget
    main, _, low = text.partition(LOW_HEADER)
    assert "Ship the billing export" in main
    assert "RS256 only please" in main  # a supplement is always in the main section
    assert "Export runs nightly" in main
    assert low.count("(relevance:") == 2  # at most max_low_relevance
    assert "aside number 3" in low
    assert "aside number 0" not in text


def test_context_shrinks_its_rendering_to_the_budget(store: L0Store, clock: Clock) -> None:
    chain = session(store, clock, 60)
    chain.add_turn("user", exactly("task", 20), relevance=1.0)
    chain.add_turn("user", exactly("a", 19), relevance=0.9)
    chain.add_turn("user", exactly("b", 19), relevance=0.9)
    context = chain.context()
    assert context.tokens <= 60
    assert context.tokens == TOKENS.count(context.text)


def test_role_presets_and_validation() -> None:
    plan = EvictionPolicy.for_role("Plan")
    assert plan.beta == 0.6
    assert plan.recency_weight == pytest.approx(0.5)
    check = EvictionPolicy.for_role("reviewer")
    assert check.beta == 0.65
    assert check.cost_weight == pytest.approx(0.2 / 0.35)
    assert EvictionPolicy.for_role("anything").beta == 0.4  # SA
    with pytest.raises(ConfigError, match="beta"):
        EvictionPolicy(beta=1.5)
    with pytest.raises(ConfigError, match="safe_window_s"):
        EvictionPolicy(safe_window_s=0)
    with pytest.raises(ConfigError, match="budget"):
        SessionConfig(budget=0)


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda s: s.add_turn("user", ""), "non-empty"),
        (lambda s: s.add_turn("", "text"), "role"),
        (lambda s: s.add_turn("user", "text", relevance=2), "2"),
        (lambda s: s.add_turn("user", "text", at="yesterday"), "yesterday"),
        (lambda s: s.set_budget(0), "budget"),
        (lambda s: s.context(query=3), "query"),
        (lambda s: s.page_in("not an iri"), "whitespace"),
    ],
)
def test_bad_input_is_a_typed_error(
    store: L0Store, clock: Clock, call: object, message: str
) -> None:
    chain = session(store, clock, 100)
    with pytest.raises(InvalidInputError, match=message):
        call(chain)  # type: ignore[operator]
    assert chain.turns == []


def test_a_session_needs_a_task_iri(store: L0Store, clock: Clock) -> None:
    with pytest.raises(InvalidInputError, match="task IRI"):
        Session(services(store, clock), "not an iri")


OPERATION = st.one_of(
    st.tuples(
        st.just("add"),
        st.integers(3, 60),
        st.floats(0.0, 1.0),
        st.integers(0, 900),
        st.booleans(),
    ),
    st.tuples(st.just("page_in"), st.integers(0, 50)),
    st.tuples(st.just("budget"), st.integers(20, 300)),
)


@settings(max_examples=60, deadline=None)
@given(budget=st.integers(20, 300), operations=st.lists(OPERATION, min_size=1, max_size=25))
def test_invariants_hold_after_any_operations(budget: int, operations: list[tuple]) -> None:
    clock = Clock()
    with L0Store() as store:
        chain = session(store, clock, budget)
        added = []
        for op in operations:
            if op[0] == "add":
                _, size, relevance, age, supplement = op
                added.append(
                    chain.add_turn(
                        "user",
                        exactly("t", size),
                        relevance=relevance,
                        supplement=supplement,
                        at=NOW - age,
                    )
                )
            elif op[0] == "page_in" and chain.weak_refs:
                chain.page_in(chain.weak_refs[op[1] % len(chain.weak_refs)])
            elif op[0] == "budget":
                chain.set_budget(op[1])
            turns = chain.turns
            assert chain.total_tokens <= chain.budget or all(t.pinned for t in turns)
            for iri in chain.weak_refs:
                assert store.get_node(iri) is not None
            live = {t.l0_archive_iri for t in turns} | set(chain.weak_refs)
            assert {t.l0_archive_iri for t in added} <= live
