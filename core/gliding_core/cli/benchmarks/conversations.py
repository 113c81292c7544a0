"""Reading LoCoMo conversations (Maharana et al., ACL 2024) for the benchmarks.

The data file is never part of the project; benchmarks take its path as an argument.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from gliding_core.errors import InvalidInputError

QUESTION_CATEGORIES = (1, 2, 3, 4)  # 5 is adversarial: no evidence in the conversation
_DATE_FORMAT = "%I:%M %p on %d %B, %Y"
SECONDS_BETWEEN_TURNS = 30.0


@dataclass(frozen=True, slots=True)
class Turn:
    """One dialogue turn, with the session it belongs to and when it happened."""

    dia_id: str
    session: int
    date: str
    time: float
    speaker: str
    text: str

    @property
    def line(self) -> str:
        """The turn as the benchmarks write it: ``[date] speaker: text``."""
        return f"[{self.date}] {self.speaker}: {self.text}"


@dataclass(frozen=True, slots=True)
class Question:
    """A question with the dialogue turns that hold its answer."""

    question: str
    evidence: tuple[str, ...]
    category: int


@dataclass(frozen=True, slots=True)
class Note:
    """A text written about the conversation (an observation or a session summary), with the
    dialogue turns it cites."""

    key: str
    kind: str
    session: int
    text: str
    cites: tuple[str, ...]
    speaker: str | None = None  # an observation's: whose turns it was drawn from


@dataclass(frozen=True, slots=True)
class Conversation:
    """One LoCoMo conversation, with its observations and session summaries (``notes``)."""

    sample_id: str
    speakers: tuple[str, str]
    turns: list[Turn]
    questions: list[Question]
    notes: list[Note] = field(default_factory=list)


def load(path: Path, conversations: list[str] | None = None) -> list[Conversation]:
    """Load the conversations of a LoCoMo JSON file, all or those named.

    Raises:
        InvalidInputError: the file is missing or malformed, or a named conversation is absent.
    """
    try:
        raw = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise InvalidInputError(f"cannot read LoCoMo data at {str(path)!r}: {exc}") from exc
    if not isinstance(raw, list):
        raise InvalidInputError(f"LoCoMo data at {str(path)!r} must be a JSON list")
    items: dict[str, dict[str, Any]] = {
        str(item.get("sample_id")): item for item in raw if isinstance(item, dict)
    }
    wanted = conversations or list(items)
    missing = [name for name in wanted if name not in items]
    if missing:
        raise InvalidInputError(f"conversations not in {str(path)!r}: {', '.join(missing)}")
    return [_conversation(items[name]) for name in wanted]


def _conversation(item: dict[str, Any]) -> Conversation:
    conv = item["conversation"]
    numbers = sorted(
        int(key.split("_")[1])
        for key in conv
        if key.startswith("session_") and not key.endswith("date_time")
    )
    turns: list[Turn] = []
    for number in numbers:
        date = str(conv.get(f"session_{number}_date_time", ""))
        start = _parse_date(date)
        for index, raw in enumerate(conv[f"session_{number}"]):
            text = str(raw.get("text", ""))
            if raw.get("blip_caption"):
                text += f" [image: {raw['blip_caption']}]"
            turns.append(
                Turn(
                    dia_id=str(raw["dia_id"]),
                    session=number,
                    date=date,
                    time=start + index * SECONDS_BETWEEN_TURNS,
                    speaker=str(raw["speaker"]),
                    text=text,
                )
            )
    questions = [
        Question(
            question=str(q["question"]),
            evidence=tuple(str(e) for e in q.get("evidence", [])),
            category=int(q["category"]),
        )
        for q in item.get("qa", [])
    ]
    return Conversation(
        sample_id=str(item["sample_id"]),
        speakers=(str(conv.get("speaker_a", "A")), str(conv.get("speaker_b", "B"))),
        turns=turns,
        questions=questions,
        notes=_notes(item, turns),
    )


def _notes(item: dict[str, Any], turns: list[Turn]) -> list[Note]:
    """The observations (one line each, citing the turns they name) and the session summaries
    (citing every turn of their session), when the file has them."""
    by_session: dict[int, list[str]] = {}
    for turn in turns:
        by_session.setdefault(turn.session, []).append(turn.dia_id)
    notes: list[Note] = []
    observations = item.get("observation") or {}
    for key in sorted(observations, key=_session_number):
        session = _session_number(key)
        for speaker, speaker_facts in (observations[key] or {}).items():
            for fact in speaker_facts:
                text, cited = str(fact[0]), fact[1] if len(fact) > 1 else []
                cites = tuple(str(c) for c in (cited if isinstance(cited, list) else [cited]))
                notes.append(
                    Note(f"obs-{len(notes)}", "observation", session, text, cites, str(speaker))
                )
    summaries = item.get("session_summary") or {}
    for key in sorted(summaries, key=_session_number):
        session = _session_number(key)
        cites = tuple(by_session.get(session, []))
        notes.append(Note(f"sum-{session}", "summary", session, str(summaries[key]), cites))
    return notes


def _session_number(key: str) -> int:
    """``session_12_summary`` -> 12."""
    parts = key.split("_")
    return int(parts[1]) if len(parts) > 1 and parts[1].isdigit() else 0


def _parse_date(text: str) -> float:
    try:
        return (
            datetime.strptime(text.strip(), _DATE_FORMAT).replace(tzinfo=timezone.utc).timestamp()
        )
    except ValueError:
        return 0.0


def answerable(conversation: Conversation) -> list[Question]:
    """Return the questions of categories 1-4 that name evidence turns present in the data."""
    present = {t.dia_id for t in conversation.turns}
    return [
        q
        for q in conversation.questions
        if q.category in QUESTION_CATEGORIES and any(e in present for e in q.evidence)
    ]
