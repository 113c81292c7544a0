"""A conversation thread served step by step by one worker or several: what each step showed.

A step is one run of a LangGraph-like thread: the thread's history (the checkpointer's, given by
the caller) gains a user message, the worker records it, delivers pending supplementary inputs,
builds the model view, and records the scripted reply. ``run_step`` returns what the model saw
and what the L1 session holds, in a form two runs on two databases can compare (turn IRIs are
the same there: a session's id comes from its agent and task). ``serve`` is a worker process's
loop: one JSON command a line on stdin, one JSON answer a line on stdout.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

from gliding_core import (
    ConversationSettings,
    HashEmbedder,
    Memory,
    MemoryConfig,
    SessionConfig,
    TopicConfig,
)
from gliding_core.store.scope import Scope
from gliding_core.view.conversation import Conversation

START = 1_000_000.0
TOPICS = [
    "the release checklist for the payments service and its rollback plan",
    "a flaky login test on the mobile client that fails behind the CDN",
    "database connection pool sizing for the reporting replicas at night",
    "the quarterly budget review and the cloud spend of the data team",
    "rotating the signing keys of the JWT issuer without downtime",
    "a customer complaint about invoices in the wrong currency",
]
STEPS = 10
SETTINGS = ConversationSettings(agent="helper", budget=420, recall_k=3)


class Clock:
    """The time of the step being served (every worker is told it: runs are reproducible)."""

    def __init__(self) -> None:
        self.now = START

    def __call__(self) -> float:
        return self.now


def memory_config(**more: Any) -> MemoryConfig:
    """Settings under which the chain evicts within a few steps and no timer runs."""
    return MemoryConfig(
        embedder="hash",
        session=SessionConfig(budget=160, max_summary_tokens=40),
        topics=TopicConfig(interval_s=0),
        **more,
    )


def user_text(step: int) -> str:
    topic = TOPICS[step % len(TOPICS)]
    return f"Step {step}: please look into {topic}; note item {step * 7} for later."


def reply_text(step: int) -> str:
    topic = TOPICS[step % len(TOPICS)]
    return f"Done with step {step}: I checked {topic} and wrote down item {step * 7}."


class Worker:
    """One worker: a memory and its conversations, kept between steps as a service keeps them."""

    def __init__(self, memory: Memory, clock: Clock) -> None:
        self.memory, self.clock = memory, clock
        self.chats: dict[str, Conversation] = {}

    def chat(self, thread: str) -> Conversation:
        if thread not in self.chats:
            self.chats[thread] = Conversation(
                self.memory, scope=Scope.thread(thread), settings=SETTINGS
            )
        return self.chats[thread]

    def put_input(self, thread: str, text: str) -> None:
        self.memory.supplements.put(Scope.thread(thread).task_iri, text, producer="ops")

    def run_step(self, thread: str, step: int, history: list[dict[str, Any]]) -> dict[str, Any]:
        """Serve step ``step`` of ``thread``, whose history so far is ``history``."""
        self.clock.now = START + 300.0 * step
        chat = self.chat(thread)
        history = [*history, {"role": "user", "content": user_text(step), "id": f"u{step}"}]
        chat.record(history)
        delivered = [
            {"role": "user", "content": s.content, "supplement": s.iri, "id": s.iri}
            for s in chat.deliver()
        ]
        history += delivered
        view = chat.view(history)
        reply = {"role": "assistant", "content": reply_text(step), "id": f"a{step}"}
        history.append(reply)
        chat.record(history)
        return {
            "history": history,
            "seen": {
                "messages": [
                    [m["role"], m["content"], bool(m.get("supplement")), bool(m.get("memory"))]
                    for m in view.messages
                ],
                "recall": [hit.iri for hit in view.recall],
                "delivered": [m["content"] for m in delivered],
                "chain": [[t.l0_archive_iri, t.summary] for t in chat.session.turns],
            },
        }


def serve() -> None:
    """A worker process: ``{"step": n, "thread": t, "history": [...]}`` or ``{"put": text,
    "thread": t}`` a line on stdin; the answer a line on stdout; ``{"stop": true}`` ends."""
    schema = sys.argv[1]
    clock = Clock()
    url = os.environ["GLIDING_DATABASE_URL"]
    config = memory_config(database_schema=schema, database_url=url)
    with Memory(config=config, embedder=HashEmbedder(), clock=clock) as memory:
        worker = Worker(memory, clock)
        for line in sys.stdin:
            command = json.loads(line)
            if command.get("stop"):
                break
            if "put" in command:
                worker.put_input(command["thread"], command["put"])
                answer: dict[str, Any] = {"ok": True}
            else:
                answer = worker.run_step(command["thread"], command["step"], command["history"])
            print(json.dumps(answer), flush=True)


if __name__ == "__main__":
    serve()
