"""L0: the entries that keep an L1 session's state, so that any worker can rebuild the session.

The format lives beside the store, not in L1: the session writes and reads it, and erasure
(``gliding_core.retention``) prunes it without opening any session. A session
(``gliding_core.session``) is known by its agent and task: ``session_id`` derives its id
from them, so every process that opens the session of one agent on one task opens the same one.
What its context depends on lives in L0, never only in a process:

- the turns, each archived as an entry ``<session IRI>/turn/<n>`` (its message id and the
  supplementary input it delivered in its metadata): what was recorded, and which inputs were
  taken, is read back from them;
- the state entry ``<session IRI>/state`` (type ``SessionState``): the summary chain with each
  turn's scores, times and marks, the number of turns archived, the texts whose embeddings the
  relevance tracker compares with, the budget when one was set, the inputs taken and not yet
  shown, and a random ``stamp`` that changes with every write. A process compares the stamp
  with the one it holds before each use and reads the state again when another process wrote
  since. Its size follows the chain's, which the budget bounds.

The state entry has no text (nothing searches it), refers to its task under ``task`` (so
forgetting the scope finds it) and lives in the session's graph. Reading it is untrusted: a state
entry of another agent or task, or one malformed, is ignored (logged) and the session starts
from its archived turns; each number is checked and each token count computed again.

Invariants: ``session_id`` is injective in practice (128 bits of SHA-256 over the agent, a
newline, the task IRI; a label holds no newline); ``decode(encode(state))`` is the state.
"""

from __future__ import annotations

import hashlib
import logging
import math
import re
import uuid
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, fields
from typing import Any

from gliding_core.store.entry import Entry
from gliding_core.store.protocol import EntryStore

logger = logging.getLogger(__name__)

STATE_TYPE = "SessionState"
STATE_KEY = "session_state"
FORMAT = 1
MAX_EXTRA_REFS = 256  # evicted entries of other sessions (paged in, then out) the state keeps
_TURN_IRI = re.compile(r"(urn:gliding:session:[0-9a-f]+)/turn/[0-9]+")


def session_id(agent: str, task_iri: str) -> str:
    """Return the id of the session of ``agent`` on ``task_iri`` (32 hex digits)."""
    return hashlib.sha256(f"{agent}\n{task_iri}".encode()).hexdigest()[:32]


@dataclass(frozen=True, slots=True)
class SavedTurn:
    """A turn of the chain as the state keeps it (its embedding and token count are derived)."""

    iri: str
    role: str
    summary: str
    relevance: float
    supplement: bool
    created: float
    access: float
    pinned: bool
    old_topic: bool


@dataclass(frozen=True, slots=True)
class SavedState:
    """What a session keeps in its state entry (see the module)."""

    stamp: str
    count: int
    turns: tuple[SavedTurn, ...]
    extra_refs: tuple[str, ...] = ()
    unshown: tuple[str, ...] = ()
    task_text: str | None = None
    previous_text: str | None = None
    budget: int | None = None


@dataclass(frozen=True, slots=True)
class ArchivedTurn:
    """A turn entry of the session: its number, IRI, message id and delivered input, if any."""

    number: int
    iri: str
    message_id: str | None
    supplement: str | None


def state_node(session_iri: str, task_iri: str) -> dict[str, Any]:
    """The node of the state entry: no text, its session and its task as references."""
    return {
        "@id": f"{session_iri}/state",
        "@type": STATE_TYPE,
        "session": {"@id": session_iri},
        "task": {"@id": task_iri},
    }


def encode(state: SavedState, *, agent: str) -> dict[str, Any]:
    """Return the metadata of the state entry for ``state``."""
    turns = [_fields(turn) for turn in state.turns]
    return {
        STATE_KEY: {
            "format": FORMAT,
            "agent": agent,
            "stamp": state.stamp,
            "count": state.count,
            "turns": turns,
            "extra_refs": list(state.extra_refs[-MAX_EXTRA_REFS:]),
            "unshown": list(state.unshown),
            "task_text": state.task_text,
            "previous_text": state.previous_text,
            "budget": state.budget,
        }
    }


def _fields(turn: SavedTurn) -> list[object]:
    return [getattr(turn, item.name) for item in fields(turn)]  # the order ``_turn`` reads


def decode(entry: Entry, *, task_iri: str, agent: str) -> SavedState | None:
    """Return the state kept in ``entry``, or ``None`` (logged) when it is not this session's
    or is malformed."""
    try:
        return _decode(entry, task_iri=task_iri, agent=agent)
    except (KeyError, TypeError, ValueError) as exc:
        logger.warning("ignoring the session state %s: %s", entry.iri, exc)
        return None


def _decode(entry: Entry, *, task_iri: str, agent: str) -> SavedState:
    task = entry.node.get("task")
    if not isinstance(task, Mapping) or task.get("@id") != task_iri:
        raise ValueError("it belongs to another task")
    raw = entry.metadata[STATE_KEY]
    if not isinstance(raw, Mapping) or raw.get("format") != FORMAT:
        raise ValueError("unknown format")
    if raw.get("agent") != agent:
        raise ValueError("it belongs to another agent")
    budget = raw.get("budget")
    return SavedState(
        stamp=_text(raw["stamp"]),
        count=_count(raw["count"]),
        turns=tuple(_turn(item) for item in _list(raw["turns"])),
        extra_refs=tuple(_text(i) for i in _list(raw.get("extra_refs", []))),
        unshown=tuple(_text(i) for i in _list(raw.get("unshown", []))),
        task_text=_optional_text(raw.get("task_text")),
        previous_text=_optional_text(raw.get("previous_text")),
        budget=None if budget is None else max(1, _count(budget)),
    )


def _turn(item: object) -> SavedTurn:
    fields = _list(item)
    if len(fields) != 9:
        raise ValueError(f"a turn has {len(fields)} fields, not 9")
    iri, role, summary, relevance, supplement, created, access, pinned, old = fields
    score = _number(relevance)
    if not 0.0 <= score <= 1.0:
        raise ValueError(f"relevance {score!r} is outside [0, 1]")
    return SavedTurn(
        iri=_text(iri),
        role=_text(role),
        summary=_text(summary),
        relevance=score,
        supplement=_flag(supplement),
        created=_number(created),
        access=_number(access),
        pinned=_flag(pinned),
        old_topic=_flag(old),
    )


def archived_turns(entries: Iterable[Entry], session_iri: str) -> list[ArchivedTurn]:
    """Return the turn entries among ``entries`` (``<session_iri>/turn/<n>``), by number."""
    pattern = re.compile(re.escape(session_iri) + r"/turn/([1-9][0-9]{0,17})")
    found = []
    for entry in entries:
        match = pattern.fullmatch(entry.iri)
        if match is None:
            continue
        message = entry.metadata.get("message_id")
        supplement = entry.metadata.get("supplement")
        found.append(
            ArchivedTurn(
                int(match.group(1)),
                entry.iri,
                message if isinstance(message, str) else None,
                supplement if isinstance(supplement, str) else None,
            )
        )
    return sorted(found, key=lambda turn: turn.number)


def prune_states(
    store: EntryStore, gone: Collection[str], summaries: Collection[str] = ()
) -> list[str]:
    """Take the entries ``gone`` (deleted or expired turns) out of their sessions' states.

    A session open in no process still keeps its chain in L0: its state must not go on showing
    a forgotten turn's summary, nor keep one (``summaries``: those of the gone turns) as the
    text its relevance tracker compares with. Each state that held one is written again, with
    a new stamp, so every process holding the session reads it again. Returns the IRIs of the
    states written.
    """
    sessions = sorted({m.group(1) for iri in gone if (m := _TURN_IRI.fullmatch(iri))})
    found = store.get_many([f"{session}/state" for session in sessions])
    summaries = set(summaries)
    written = []
    with store.transaction():
        for iri, entry in found.items():
            raw = entry.metadata.get(STATE_KEY)
            if not isinstance(raw, Mapping):
                continue
            turns = [t for t in _list(raw.get("turns", [])) if not _names(t, gone)]
            refs = [r for r in _list(raw.get("extra_refs", [])) if r not in gone]
            texts = {
                key: None if raw.get(key) in summaries else raw.get(key)
                for key in ("task_text", "previous_text")
            }
            kept = {**raw, **texts, "turns": turns, "extra_refs": refs, "stamp": uuid.uuid4().hex}
            store.replace(entry.node, named_graph=entry.named_graph, metadata={STATE_KEY: kept})
            written.append(iri)
    return written


def _names(turn: object, gone: Collection[str]) -> bool:
    """Whether a kept turn is one of ``gone``."""
    return isinstance(turn, list) and bool(turn) and turn[0] in gone


def _list(value: object) -> list[object]:
    if not isinstance(value, list):
        raise TypeError(f"expected a list, got {type(value).__name__}")
    return value


def _text(value: object) -> str:
    if not isinstance(value, str):
        raise TypeError(f"expected a string, got {type(value).__name__}")
    return value


def _optional_text(value: object) -> str | None:
    return None if value is None else _text(value)


def _flag(value: object) -> bool:
    if not isinstance(value, bool):
        raise TypeError(f"expected true or false, got {type(value).__name__}")
    return value


def _number(value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise TypeError(f"expected a finite number, got {value!r:.40}")
    return float(value)


def _count(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise TypeError(f"expected a count, got {value!r:.40}")
    return value
