"""L0: the entry record, its MESI state, and the validated write request.

Invariant: a ``Record`` that was constructed is valid; the store never sees unchecked input.
It holds a node and metadata that encode as UTF-8 and nest at most ``MAX_DEPTH_CEILING`` deep
(the store then holds the depth against its own, lower, ``StoreConfig.max_depth``), tags and a
named graph that are labels (see ``jsonld.label_problem``), and an importance that is a float.
Numbers are any finite real number but a bool (a numpy ``float32`` too), converted to ``float``.
Timestamps are UNIX seconds (UTC).
"""

from __future__ import annotations

import json
import math
import numbers
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Literal, NamedTuple

from gliding_core.checks import check_real
from gliding_core.errors import InvalidInputError
from gliding_core.fields import IndexFields, check_index
from gliding_core.jsonld import (
    MAX_DEPTH_CEILING,
    Node,
    canonical_json,
    check_label,
    check_string_keys,
    check_text,
    nesting_depth,
    parse_canonical,
    parse_node,
    preview,
)


class MesiState(str, Enum):
    """The MESI coherence state of an entry; ``SHARED`` by default."""

    MODIFIED = "M"
    EXCLUSIVE = "E"
    SHARED = "S"
    INVALID = "I"

    @classmethod
    def parse(cls, value: object) -> MesiState:
        """Return the state named by a letter (``"M"``), a name (``"modified"``) or a member."""
        if isinstance(value, cls):
            return value
        if isinstance(value, str):
            text = value.strip().upper()
            for state in cls:
                if text in (state.value, state.name):
                    return state
        raise InvalidInputError(f"unknown MESI state {preview(value)}; expected one of M, E, S, I")


class Entry(NamedTuple):
    """One L0 entry: a JSON-LD node and what the memory knows about it (an immutable snapshot).

    A named tuple rather than a frozen dataclass: queries build hundreds of these per call, and
    a tuple is several times cheaper to construct.
    """

    iri: str
    content: str
    importance: float
    access_count: int
    created_at: float
    last_accessed: float
    updated_at: float
    tags: tuple[str, ...]
    metadata: dict[str, Any]
    mesi_state: MesiState
    content_hash: str
    named_graph: str | None
    jsonld_context: str | None
    jsonld_types: tuple[str, ...]
    generation: int

    @property
    def node(self) -> Node:
        """The full JSON-LD node, parsed from ``content``."""
        value: Node = json.loads(self.content)
        return value


@dataclass(frozen=True, slots=True)
class Edge:
    """A reference from the node ``source`` to the IRI ``target`` under ``predicate``."""

    source: str
    predicate: str
    target: str


@dataclass(frozen=True, slots=True)
class TextHit:
    """A full-text search hit: the entry, its BM25 score (higher is better), its 1-based rank."""

    entry: Entry
    score: float
    rank: int


@dataclass(frozen=True, slots=True)
class Restored:
    """An entry as an export kept it, to be written back exactly (``EntryStore.restore_many``).

    Attributes:
        record: the node with its tags, graph, importance, metadata and MESI state.
        created_at: its creation time (UNIX seconds).
        expires_at: when it expires, or ``None``.
    """

    record: Record
    created_at: float
    expires_at: float | None = None


@dataclass(frozen=True, slots=True)
class Record:
    """A validated request to write one node, with the entry fields the caller sets.

    ``None`` means "not given": a new entry takes the default, a merge keeps the existing value.
    ``depth`` is how deep the node or the metadata nests, whichever is deeper. ``ttl`` is how
    many seconds from the write the entry lives (``math.inf``: it no longer expires).
    ``index`` says which properties feed search (``gliding_core.fields``): a list of field paths
    or ``False`` for none, kept by later merges that give none (as LangGraph's
    ``put(index=...)``); ``None``: those an earlier write gave, else what
    ``StoreConfig.index_fields`` gives the node's types, else its text-like values (``replace``
    forgets an earlier write's).

    Raises:
        InvalidNodeError: the node is not a valid JSON-LD object.
        NodeTooDeepError: the node or the metadata nests deeper than ``MAX_DEPTH_CEILING``.
        InvalidInputError: a tag, the importance, the graph, the metadata, the state or the
            index fields are invalid.
    """

    node: Node
    content: str
    types: tuple[str, ...]
    tags: tuple[str, ...] = ()
    importance: float | None = None
    named_graph: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict)
    mesi_state: MesiState | None = None
    depth: int = 1
    ttl: float | None = None
    index: IndexFields = None

    def __init__(
        self,
        node: object,
        *,
        tags: Sequence[str] = (),
        importance: float | None = None,
        named_graph: str | None = None,
        metadata: Mapping[str, Any] | None = None,
        mesi_state: MesiState | str | None = None,
        ttl: float | None = None,
        index: Literal[False] | Sequence[str] | None = None,
    ) -> None:
        set_ = object.__setattr__
        parsed, content, types, depth = parse_node(node)
        set_(self, "node", parsed)
        set_(self, "content", content)
        set_(self, "types", types)
        set_(self, "tags", _check_tags(tags))
        # The usual cases (a float in range, no graph, no metadata) are checked inline.
        if importance is not None and not (type(importance) is float and 0.0 <= importance <= 1.0):
            importance = check_importance(importance)
        set_(self, "importance", importance)
        set_(self, "named_graph", None if named_graph is None else _check_graph(named_graph))
        checked, metadata_depth = ({}, 0) if metadata is None else _check_metadata(metadata)
        set_(self, "metadata", checked)
        set_(self, "mesi_state", None if mesi_state is None else MesiState.parse(mesi_state))
        set_(self, "depth", max(depth, metadata_depth))
        set_(self, "ttl", None if ttl is None else check_ttl(ttl))
        set_(self, "index", None if index is None else check_index(index))


Records = Iterable[Record | Mapping[str, Any] | str]
"""What a batch write takes: records, or nodes as mappings or JSON text."""


def records_of(items: Records, *, what: str) -> list[Record]:
    """Return the items of a batch write as records, each validated (a ``Record`` as it is).

    The one step by which every store turns ``put_many``'s and ``replace_many``'s items into
    records before anything is written; ``what`` names the call in the error.

    Raises:
        InvalidInputError: ``items`` is one node (a mapping, a string or bytes) or no iterable,
            not a batch; or an item is not a valid node (``InvalidNodeError``).
    """
    if isinstance(items, (str, bytes, Mapping)) or not isinstance(items, Iterable):
        raise InvalidInputError(f"{what} takes an iterable of records, got {preview(items)}")
    return [item if isinstance(item, Record) else Record(item) for item in items]


def check_ttl(value: object) -> float:
    """Return a TTL in seconds as a float: a real number > 0 (as ``check_real`` takes them,
    numpy's scalars too), ``math.inf`` for "never expires"."""
    number = math.nan
    if not isinstance(value, bool) and isinstance(value, numbers.Real):
        try:
            number = float(value)
        except OverflowError:  # an int beyond any float: math.inf says "never expires"
            raise InvalidInputError(
                f"ttl {preview(value)} is too large for a float (math.inf: never expires)"
            ) from None
        except (TypeError, ValueError):
            pass
    if not number > 0:
        raise InvalidInputError(
            f"ttl must be a number of seconds > 0 (math.inf: never), got {preview(value)}"
        )
    return number


def check_importance(value: object) -> float:
    """Return ``value`` as a float if it is a real number in [0, 1] (see ``check_real``)."""
    number = check_real(value, what="importance")
    if not 0.0 <= number <= 1.0:
        raise InvalidInputError(f"importance must be in [0, 1], got {preview(value)}")
    return number


def _check_tags(tags: object) -> tuple[str, ...]:
    items: Sequence[object] | set[object] | frozenset[object]
    if isinstance(tags, (list, tuple)):  # the common case, before the slower ABC checks
        items = tags
    elif isinstance(tags, (str, bytes)) or not isinstance(tags, Sequence | set | frozenset):
        raise InvalidInputError(f"tags must be a list of strings, got {preview(tags)}")
    else:
        items = tags
    checked: list[str] = []
    for tag in items:
        if type(tag) is not str or not tag.isprintable() or not tag.strip():
            check_label(tag, what="each tag")
        checked.append(tag)  # type: ignore[arg-type]  # check_label refused any other type
    return tuple(dict.fromkeys(checked))


def _check_graph(graph: object) -> str | None:
    if graph is None:
        return None
    return check_label(graph, what="named_graph")


def _check_metadata(metadata: object) -> tuple[dict[str, Any], int]:
    """Return the metadata as plain JSON values and its depth."""
    if not metadata and (metadata is None or isinstance(metadata, Mapping)):
        return {}, 0
    if not isinstance(metadata, Mapping) or not all(isinstance(k, str) for k in metadata):
        raise InvalidInputError(
            f"metadata must be a mapping with string keys, got {preview(metadata)}"
        )
    depth = nesting_depth(dict(metadata), MAX_DEPTH_CEILING, what="metadata")
    check_string_keys(metadata, what="metadata")
    try:
        content = canonical_json(metadata)
    except (TypeError, ValueError) as exc:
        raise InvalidInputError(
            f"metadata is not JSON-serialisable: {preview(metadata)} ({exc})"
        ) from exc
    check_text(content, what="metadata", locate=metadata)
    return parse_canonical(content), depth
