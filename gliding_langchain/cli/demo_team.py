"""The end of ``gliding-horse demo``: four LangChain role agents on one task, in a few lines.

``pdca_graph`` runs plan, do, check and act agents (scripted offline models acting on what
they are sent) that hand over through the blackboard; while the doer works, the user sends a
note. The demo prints the handovers, whether the final board is correct, the prompt tokens per
model call against a shared full history, and where the note arrived.
"""

from __future__ import annotations

import threading
from typing import TextIO

from langchain_core.messages import AIMessage, BaseMessage

from gliding_core import Memory
from gliding_core.cli.table import render
from gliding_core.testing import Request, RoleScript, round_problems
from gliding_core.view.team import ROLES
from gliding_langchain.messages import SUPPLEMENT_ID_PREFIX, to_records
from gliding_langchain.team import call_tokens, pdca_agents, pdca_graph
from gliding_langchain.testing import ScriptedChatModel, pdca_model

TASK = "urn:demo:task/refund-service"
BUDGET = 1_200
REQUEST = Request(
    "a refund service",
    ("validate the payment", "call the card vault", "write the audit row", "notify the customer"),
)
NAMES = {"plan": "lc-planner", "do": "lc-doer", "check": "lc-checker", "act": "lc-decider"}
NOTE = "Note from the user: refunds over 500 EUR need a second approval."


def _doer(memory: Memory) -> ScriptedChatModel:
    """The do role's model; on its first call the user sends a note from another thread."""
    script = RoleScript("do", TASK)
    sent: list[threading.Thread] = []

    def reply(messages: list[BaseMessage]) -> AIMessage:
        if not sent:
            sent.append(threading.Thread(target=memory.supplements.put, args=(TASK, NOTE)))
            sent[0].start()
            sent[0].join()
        move = script(to_records(messages))
        calls = [{"id": c.id, "name": c.name, "args": c.args} for c in move.calls]
        return AIMessage(content=move.text, tool_calls=calls)

    return ScriptedChatModel(reply=reply)


def run(out: TextIO, memory: Memory) -> None:
    """Run the round on ``memory`` and write what it shows to ``out``."""
    models = {role: pdca_model(role, TASK) for role in ROLES}
    models["do"] = _doer(memory)
    agents = pdca_agents(memory, TASK, models, names=NAMES, budget=BUDGET)
    state = pdca_graph(memory, TASK, agents=agents).invoke({"request": REQUEST.text})
    problems = round_problems(memory.blackboard, TASK, len(REQUEST.steps))
    rows = call_tokens(memory, agents, state)
    received = [
        role
        for role in ROLES
        for request in models[role].requests
        for message in request
        if (message.id or "").startswith(SUPPLEMENT_ID_PREFIX)
    ]
    table = [
        (agents[r].name, r, sum(1 for t in rows if t.role == r),
         max(t.sent for t in rows if t.role == r), max(t.shared for t in rows if t.role == r))
        for r in ROLES
    ]  # fmt: skip
    out.write(
        f"\n== Four role agents on one task (LangChain create_agent, budget {BUDGET} tokens)\n"
        f"handovers: {' -> '.join(state['handovers'])}; final board correct:"
        f" {'yes' if not problems else 'no: ' + '; '.join(problems)}\n"
        + render(["agent", "role", "calls", "max tokens sent", "max with shared history"], table)
        + f"\ntotal prompt tokens: {sum(t.sent for t in rows)} with frames,"
        f" {sum(t.shared for t in rows)} with a shared full history\n"
        f"the note sent while the doer worked reached: {', '.join(received[:1]) or 'nobody'}"
        f" ({len(set(received))} agent, in {len(received)} model call(s) of its run)\n"
    )
