"""L2: the checks of SPARQL text and the names the blackboard's queries use.

Invariants: a query that reaches a store from here is a query (never an update) and calls no
remote ``SERVICE``; the checks read the text with its strings, IRIs and comments blanked, so a
keyword inside a literal is not a keyword.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Sequence
from typing import Protocol

from gliding_core.blackboard.graph import mask_opaque
from gliding_core.blackboard.vocabulary import AREAS, VOCAB, area_graph, check_area
from gliding_core.errors import InvalidInputError, PermissionDeniedError
from gliding_core.jsonld import preview

_UPDATE_KEYWORDS = frozenset(
    {"insert", "delete", "load", "clear", "create", "drop", "copy", "move", "add", "with"}
)
_SERVICE = re.compile(r"(?<![\w:])service(?![\w:])", re.IGNORECASE)
MIRRORED_AREAS = frozenset({"tasks", "agents", "messages"})
"""Areas the coordination layer writes; agents reach them through their handle's operations."""
_PROLOGUE = re.compile(r"\s*(?:base\s*<>|prefix\s+[\w.-]*:\s*<>)", re.IGNORECASE)


class FenceChecker(Protocol):
    """What a guarded write needs from the lease table (``LeaseTable.check_fence``)."""

    def check_fence(self, resource: str, holder: str, token: int) -> None:
        """Raise unless ``token`` is the newest one granted for ``resource`` to ``holder``."""
        ...


def type_iri(name: str) -> str:
    """Return the IRI of a type given as a vocabulary term (``"Task"``) or an absolute IRI."""
    if not isinstance(name, str) or not name:
        raise InvalidInputError(f"a type must be a non-empty string, got {preview(name)}")
    return name if ":" in name else VOCAB + name


def check_query(text: object) -> str:
    """Return ``text`` if it is a SPARQL query that may run here: not an update, no SERVICE.

    Raises:
        InvalidInputError: not a string, or it calls a remote ``SERVICE``.
        PermissionDeniedError: it is a SPARQL UPDATE.
    """
    if not isinstance(text, str) or not text.strip():
        raise InvalidInputError(f"a SPARQL query must be a non-empty string, got {preview(text)}")
    problem = _remembered_problem(text) if len(text) <= _REMEMBERED_CHARS else _problem(text)
    if problem == "service":
        raise InvalidInputError("SPARQL SERVICE (a remote query) is not allowed on the blackboard")
    if problem == "update":
        raise PermissionDeniedError(
            "SPARQL UPDATE is not allowed here; write nodes through the blackboard",
            role="agent",
            graph="*",
            operation="sparql-update",
        )
    return text


def _problem(text: str) -> str | None:
    """What keeps ``text`` from running here: ``"service"``, ``"update"`` or nothing."""
    bare = re.sub(r"<\s*>", "<>", mask_opaque(text))
    if _SERVICE.search(bare) or "\\u" in bare.lower():
        return "service"
    words = _PROLOGUE.sub(" ", bare).split()
    if words and words[0].lower() in _UPDATE_KEYWORDS:
        return "update"
    return None


# A frame or a benchmark runs one text with new bindings again and again, and the check of its
# text (regular expressions over all of it) cost as much as a 2-hop CONSTRUCT's evaluation.
_remembered_problem = functools.lru_cache(maxsize=512)(_problem)
_REMEMBERED_CHARS = 8_192  # longer texts are checked every time rather than kept


def task_graphs(task: str, areas: Sequence[str] = AREAS) -> list[str]:
    """Return the named graphs of a task's areas."""
    return [area_graph(task, check_area(a)) for a in areas]
