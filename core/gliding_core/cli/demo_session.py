"""CLI: the session part of ``gliding-horse demo``: L1 eviction, page-in, supplementary input and a
topic shift in one scripted conversation, with the token figures.

Writes to the stream it is given; works on the memory it is given.
"""

from __future__ import annotations

import threading
from typing import TextIO

from gliding_core.bus import Event, EventType
from gliding_core.cli.table import render
from gliding_core.config import SessionConfig
from gliding_core.memory import Memory
from gliding_core.session import Session

TASK = "urn:demo:task/payments-api"
BUDGET = 220

CONVERSATION = [
    (
        "user",
        "We need the payments API for saved cards. It must tokenize cards through the "
        "vault and never store raw card numbers.",
    ),
    (
        "assistant",
        "Plan: a POST /payments endpoint that takes a card token, an amount and a "
        "currency, and calls the card vault to charge the token.",
    ),
    ("user", "What happens when the vault times out during a payment?"),
    (
        "assistant",
        "The payment request is retried with backoff; the vault call carries the "
        "payment id so the vault can reject a duplicate charge.",
    ),
    ("user", "Which currencies does the payments API accept at launch?"),
    (
        "assistant",
        "EUR, USD and GBP at launch; the currency list lives in configuration so "
        "adding one needs no deploy.",
    ),
    ("user", "How do refunds work for a card payment?"),
    (
        "assistant",
        "POST /payments/{id}/refunds creates a refund for part or all of the amount; "
        "the vault refunds the token and the payment keeps a refund history.",
    ),
    ("user", "Let's also write the API documentation for the payments endpoints."),
    (
        "assistant",
        "Documentation: request and response schemas for payments and refunds, error "
        "codes for vault timeouts and declined cards, and curl examples.",
    ),
    # The topic changes: the team offsite.
    ("user", "Different subject: the team offsite is next month, where should we book?"),
    (
        "assistant",
        "For an offsite of twelve people a lake hotel with a meeting room works; book "
        "the hotel four weeks ahead.",
    ),
    ("user", "What should the offsite agenda look like for the hotel days?"),
    (
        "assistant",
        "Day one: retrospective and roadmap at the hotel; day two: a hike by the lake "
        "and a team dinner.",
    ),
]
SUPPLEMENT_AFTER = 4  # the user's extra instruction arrives while the agent works on this turn
SUPPLEMENT = "Every payment POST must carry an idempotency key so retries never charge twice."


def run(out: TextIO, memory: Memory) -> None:
    """Play the conversation through an L1 session and write what happens."""
    session = memory.session(
        TASK, agent="payments-agent", role="do", config=SessionConfig(budget=BUDGET)
    )
    events: list[Event] = []
    watch = [EventType.TURN_EVICTED, EventType.TOPIC_SHIFT, EventType.TURN_PAGED_IN]
    subscription = memory.bus.subscribe(events.append, types=watch)
    window = memory.framing()
    rows: list[tuple[object, ...]] = []
    history: list[dict[str, str]] = []
    out.write(f"\n== L1: a {len(CONVERSATION)}-turn conversation in a session of {BUDGET} tokens\n")
    for step, (role, text) in enumerate(CONVERSATION, start=1):
        arrived = session.start_cycle(memory.supplements)
        for item in arrived:
            history.append({"role": "user", "content": item.content})
            out.write(f"  step {step}: supplementary input delivered: {item.content!r}\n")
        if step == SUPPLEMENT_AFTER:
            _send_while_working(memory)
        session.add_turn(role, text)
        history.append({"role": role, "content": text})
        memory.topics.check(session)
        context = session.context()
        rows.append(
            (
                step,
                role,
                len(session.turns),
                window.count(context.messages),
                window.count(history),
                len(session.weak_refs),
            )
        )
        for event in events:
            out.write(f"  step {step}: {_describe(event)}\n")
        events.clear()
    out.write(
        render(
            ["step", "role", "turns in L1", "prompt tokens", "full history tokens", "evicted"],
            rows,
            title="\nTokens the model sees at each step",
        )
        + "\n"
    )
    _page_in(out, memory, session)
    subscription.cancel()


def _send_while_working(memory: Memory) -> None:
    """Another thread (a user at a keyboard) sends input while the agent is mid-step."""
    sender = threading.Thread(
        target=memory.supplements.put, args=(TASK, SUPPLEMENT), kwargs={"producer": "user"}
    )
    sender.start()
    sender.join()


def _describe(event: Event) -> str:
    payload = event.payload
    if event.type == EventType.TURN_EVICTED:
        return (
            f"evicted ({payload['reason']}) {' '.join(payload['iri'].rsplit('/', 2)[-2:])} "
            f"- {payload['tokens']} tokens, still in L0"
        )
    if event.type == EventType.TOPIC_SHIFT:
        return (
            f"topic shift (similarity {payload['similarity']:.2f}): "
            f"{len(payload['old_topic_turns'])} turns of the old topic marked, "
            f"{len(payload['evicted'])} evicted at once"
        )
    return f"{event.type} {dict(payload)}"


def _page_in(out: TextIO, memory: Memory, session: Session) -> None:
    if not session.weak_refs:
        return
    iri = session.weak_refs[0]
    turn = session.page_in(iri)
    node = memory.store.get_node(iri) or {}
    out.write(f"\n== Page-in: {iri}\n  full text in L0: {node.get('text')!r}\n")
    if turn is None:
        out.write("  it does not fit the budget now; it stays in L0\n")
    else:
        out.write(
            f"  back in the chain as {turn.tokens} tokens; chain now "
            f"{session.total_tokens}/{session.budget} tokens, "
            f"{len(session.weak_refs)} turns paged out\n"
        )
