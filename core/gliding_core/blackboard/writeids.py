"""L2: write identities, to tell after a lost reply whether a blackboard write landed.

Every write of nodes and every delete carries a write id: one the board assigns
(``new_write_id``), or the caller's own when it retries a write whose outcome was unknown
(``WriteOutcomeUnknownError.write_id``). The id goes into the store with the write, in the
same update: each node's record (``records``) lists the ids of its last ``WRITES_KEPT`` writes
and deletes, newest first, a delete's marked with a leading ``-``. So once the store answers
again, its records say whether a write landed and at which generation (``landed``,
``deleted_by``), even after other writers moved the node on.

Invariants:
- An id the board assigns is new: a random prefix drawn once per process (again in a forked
  child) and a counter. The ids a caller gives are 1 to 100 letters, digits, ``.``, ``_`` or
  ``-``, starting with a letter or a digit (so a delete's mark is never an id).
- Each write of a node adds one entry and one generation, a delete one entry and none: the
  generation a write gave a node is its generation now less the writes listed before it.
- A batch is stored all or nothing, so it landed when its id is in every node's record; a node
  written ``WRITES_KEPT`` times since (its record no longer reaches back) reads as not landed.
- An id found on a node that now holds other content, graph or tags than the retry's was given
  to two different writes: the retry is refused (``InvalidInputError``), nothing is written.
"""

from __future__ import annotations

import itertools
import os
import re
import secrets
from collections.abc import Mapping, Sequence

from gliding_core.blackboard.records import BoardNode, Known
from gliding_core.blackboard.validation import NodeWrite
from gliding_core.errors import InvalidInputError, WriteOutcomeUnknownError
from gliding_core.jsonld import preview

WRITES_KEPT = 8
"""How many write ids a node's record keeps (its last writes and deletes)."""

DELETED = "-"
"""What marks a delete's id in a record's list (no id starts with it)."""

_VALID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}")


class _Ids:
    """The board's own ids: this process's random prefix and a counter (``next`` is atomic)."""

    def __init__(self) -> None:
        self.draw()

    def draw(self) -> None:
        # 96 random bits: no two processes (nor a process and its forked child) share them.
        self.prefix = f"w{secrets.token_hex(12)}."
        self.counter = itertools.count(1)


_IDS = _Ids()
if hasattr(os, "register_at_fork"):  # a forked child would otherwise repeat its parent's ids
    os.register_at_fork(after_in_child=_IDS.draw)


def new_write_id() -> str:
    """Return a write id no other write has."""
    ids = _IDS
    return f"{ids.prefix}{next(ids.counter):x}"


def check_write_id(value: object) -> str:
    """Return ``value`` if it is a write id a caller may give; ``InvalidInputError`` if not."""
    if not isinstance(value, str) or _VALID.fullmatch(value) is None:
        raise InvalidInputError(
            "write_id must be 1 to 100 letters, digits, '.', '_' or '-', starting with a letter"
            f" or digit (the write_id of a WriteOutcomeUnknownError), got {preview(value)}"
        )
    return value


def pushed(entry: str, writes: tuple[str, ...]) -> tuple[str, ...]:
    """Return a record's ids with ``entry`` first (the oldest dropped past ``WRITES_KEPT``)."""
    return (entry, *writes[: WRITES_KEPT - 1])


def generation_of(write_id: str, known: Known) -> int | None:
    """Return the generation write ``write_id`` gave the node ``known``, if its record says."""
    writes, later = known.writes, 0
    for entry in writes:
        if entry == write_id:
            return known.generation - later
        if not entry.startswith(DELETED):
            later += 1
    return None


def landed(
    write_id: str, requests: Sequence[NodeWrite], known: Mapping[str, Known]
) -> list[BoardNode] | None:
    """Return the nodes as write ``write_id`` of ``requests`` committed them, or ``None``.

    ``known``: what the store holds under the requests' IRIs, read in the transaction that
    decides the retry. A node that write ``write_id`` left as it is comes as stored; one
    written or deleted since comes as the write made it (its content, at its generation).

    Raises:
        InvalidInputError: a node still as ``write_id`` left it holds other content, graph or
            tags than the request: the id was given to another write.
    """
    nodes: list[BoardNode] = []
    for request in requests:
        state = known.get(request.iri)
        generation = None if state is None else generation_of(write_id, state)
        if state is None or generation is None:
            return None
        if isinstance(state, BoardNode) and state.generation == generation:
            mine = (request.content, request.graph, request.tags)
            if (state.content, state.graph, state.tags) != mine:
                raise InvalidInputError(
                    f"write_id {write_id!r} wrote {request.iri!r} with other content, graph or"
                    " tags: it belongs to another write (retry with that write's nodes, or"
                    " write these with a new id)"
                )
            nodes.append(state)
            continue
        nodes.append(
            BoardNode(request.iri, request.content, request.graph, generation, request.tags)
        )
    return nodes


def deleted_by(write_id: str, known: Mapping[str, Known]) -> list[str]:
    """Return the IRIs among ``known`` that delete ``write_id`` removed, in order."""
    mark = DELETED + write_id
    return [iri for iri, state in known.items() if mark in state.writes]


def outcome_unknown(
    write_id: str, iris: Sequence[str], cause: BaseException, *, delete: bool = False
) -> WriteOutcomeUnknownError:
    """Return the ``WriteOutcomeUnknownError`` of write ``write_id`` of ``iris``, saying how to
    resolve it (``cause``: what failed)."""
    shown = list(dict.fromkeys(iris))
    named = ", ".join(map(repr, shown[:5]))
    if len(shown) > 5:
        named += f" and {len(shown) - 5} more"
    if delete:
        retry = f"handle.delete(<the same IRIs>, write_id={write_id!r})"
        result = "the number of nodes it deleted is returned"
    else:
        retry = f"handle.write(<the same nodes>, area=<the same area>, write_id={write_id!r})"
        result = "its committed nodes are returned"
    error = WriteOutcomeUnknownError(
        f"the outcome of {'delete' if delete else 'write'} {write_id!r} of {named} is unknown:"
        f" the store may have applied it and the answer was lost ({cause}). Retry it as"
        f" {retry}: if it landed, {result} and nothing is applied again; if not, it is"
        " applied once",
        write_id=write_id,
        iris=tuple(shown),
    )
    error.__cause__ = cause
    return error
