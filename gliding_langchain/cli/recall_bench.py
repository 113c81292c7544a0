"""Adapter: LangChain's ``trim_messages`` as a comparison method of ``bench locomo``.

Registered under the entry-point group ``gliding_horse.recall_methods`` as ``langchain-trim``.
Each LoCoMo turn is one ``HumanMessage`` whose text is the turn's line (``[date] speaker:
text``); the context at budget B is what ``trim_messages(strategy="last", max_tokens=B)`` keeps,
counted exactly (cl100k) on the message texts with the memory's ``TokenCounter``.

Invariant: the kept messages' token counts sum to at most B. The context does not depend on the
question, so it is cut once per budget at ingest.
"""

from __future__ import annotations

from collections.abc import Sequence

from langchain_core.messages import BaseMessage, HumanMessage, trim_messages

from gliding_core.cli.benchmarks.conversations import Turn
from gliding_core.hyperspace.embedders import Embedder
from gliding_core.tokens import TokenCounter


class TrimMethod:
    """The last turns of the conversation that fit the budget, as ``trim_messages`` cuts them.

    Args:
        turns: the conversation, oldest first.
        tokens: the counter whose exact counts ``trim_messages`` uses.
        embedder: unused (the window ignores meaning); taken to fit the factory protocol.
        budgets: the token budgets to cut for.
    """

    def __init__(
        self,
        turns: Sequence[Turn],
        *,
        tokens: TokenCounter,
        embedder: Embedder,
        budgets: Sequence[int],
    ) -> None:
        messages = [HumanMessage(content=turn.line) for turn in turns]

        def count(kept: list[BaseMessage]) -> int:
            return sum(tokens.count_many([message.text for message in kept]))

        self._kept = {
            budget: [
                message.text
                for message in trim_messages(
                    messages, max_tokens=budget, strategy="last", token_counter=count
                )
            ]
            for budget in budgets
        }

    def context(self, question: str, budget: int) -> list[str]:
        """Return the texts of the messages kept at ``budget`` (the same for every question)."""
        return list(self._kept[budget])

    def close(self) -> None:
        """Release nothing: the kept messages are plain strings."""
