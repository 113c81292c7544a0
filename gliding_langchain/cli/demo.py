"""The last part of ``gliding-horse demo``: a LangChain agent working on the memory.

A ``create_agent`` agent (the scripted offline model, one tool) runs a long conversation with
``GlidingMemoryMiddleware``; while it works on one of the requests, the user sends a note from
another thread. The demo prints, for each model call, what the model saw in tokens against the
full history, and where the note arrived. The demo ends with four role agents on one task
(``gliding_langchain.cli.demo_team``).
"""

from __future__ import annotations

import threading
from typing import TextIO

from langchain.agents import create_agent
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage
from langchain_core.tools import tool

from gliding_core import Memory
from gliding_core.cli.table import render
from gliding_langchain.callbacks import SupplementaryInputCallbackHandler
from gliding_langchain.cli import demo_team
from gliding_langchain.messages import SUPPLEMENT_ID_PREFIX
from gliding_langchain.middleware import GlidingMemoryMiddleware
from gliding_langchain.testing import ScriptedChatModel

TASK = "urn:demo:task/trip-planning"
BUDGET = 450
FIRST = "I'm planning a trip to Lisbon in May. My hotel booking reference is QX-4471."
STOPS = [
    "the Alfama district",
    "the Belem tower",
    "the Gulbenkian museum",
    "the tram 28 route",
    "the LX Factory",
    "the Oceanarium",
    "Sintra as a day trip",
    "the Time Out market",
    "the Jeronimos monastery",
    "the Bairro Alto at night",
    "the Cascais beaches",
    "the Tile museum",
]
LAST = "What was my hotel booking reference again?"
NOTE = "Note from the user: my flight lands at 7am, so the first day starts early."


def _model() -> ScriptedChatModel:
    def reply(messages: list[BaseMessage]) -> AIMessage:
        last = messages[-1]
        if last.type == "human" and last.text != LAST:
            call = {"id": f"call-{len(messages)}", "name": "guide", "args": {"place": last.text}}
            return AIMessage(content="", tool_calls=[call])
        if last.type in ("tool", "human") and last.text != LAST:
            return AIMessage(content=f"Noted. {last.text}")
        recalled = "QX-4471" if "QX-4471" in messages[0].text else "I do not remember"
        return AIMessage(content=f"Your booking reference is {recalled}.")

    return ScriptedChatModel(reply=reply)


def run(out: TextIO, memory: Memory) -> None:
    """Run the agent on ``memory`` and write the per-call token figures to ``out``."""
    requests = [FIRST, *(f"What should I know about {stop}?" for stop in STOPS), LAST]
    middle = requests[len(requests) // 2]
    senders: list[threading.Thread] = []

    @tool
    def guide(place: str) -> str:
        """Look a place up in the travel guide."""
        if place == middle and not senders:  # the user sends a note while the tool runs
            senders.append(threading.Thread(target=memory.supplements.put, args=(TASK, NOTE)))
            senders[0].start()
            senders[0].join()
        return f"Guide: {place} is worth half a day; go early and buy tickets online."

    model = _model()
    middleware = GlidingMemoryMiddleware(memory, TASK, budget=BUDGET, recall_k=3)
    handler = SupplementaryInputCallbackHandler(middleware.conversation)
    agent = create_agent(model, [guide], middleware=[middleware], system_prompt="Be concise.")
    messages: list[BaseMessage] = []
    for text in requests:
        state = agent.invoke(
            {"messages": [*messages, HumanMessage(text)]}, config={"callbacks": [handler]}
        )
        messages = state["messages"]
    rows = []
    seen = False
    for call, (view, request) in enumerate(zip(middleware.views, model.requests, strict=True)):
        arrived = not seen and any((m.id or "").startswith(SUPPLEMENT_ID_PREFIX) for m in request)
        seen = seen or arrived
        rows.append(
            (
                call + 1,
                view.tokens,
                view.history_tokens,
                f"{view.tokens / view.history_tokens:.0%}",
                len(view.recall),
                "arrives" if arrived else "",
            )
        )
    out.write(f"\n== LangChain agent on the memory (budget {BUDGET} tokens per model call)\n")
    out.write(
        render(
            ["model call", "tokens sent", "full history", "share", "recalled", "user note"],
            rows,
        )
        + "\n"
    )
    out.write(
        f"{len(messages)} messages in the agent's state; the model saw at most "
        f"{max(v.tokens for v in middleware.views)} tokens per call, the full history "
        f"reached {middleware.views[-1].history_tokens}.\n"
        f"Early calls may carry more than the history: recall quotes related L0 entries.\n"
        f"The last question asked for a fact from the first turn: the model answered "
        f"{messages[-1].text!r}\n"
    )
    demo_team.run(out, memory)
