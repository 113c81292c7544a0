"""L0: a write batch staged in memory, so one transaction writes each entry's final state once.

Pure code, no I/O. ``Staged`` is an entry as the batch leaves it; ``stage`` applies one write
request to it by the merge rules:
- tags united (existing first), types united, properties merged key by key (see ``jsonld``);
- importance averaged with the stored one when the request gives one, kept otherwise;
- metadata merged key by key (new wins); graph and MESI state replaced when given;
- ``generation`` increases by one on each request that changes anything.
"""

from __future__ import annotations

from dataclasses import dataclass

from gliding_core.entry import MesiState, Record
from gliding_core.errors import ContentTooLargeError
from gliding_core.jsonld import Node, canonical_json, content_hash, merge_nodes, preview

# Tags and types are stored joined by the ASCII unit separator, which validation keeps out of
# them: splitting is several times faster than parsing JSON on every row read.
SEPARATOR = "\x1f"


@dataclass(slots=True)
class Staged:
    """One entry's state in a write batch."""

    id: int
    iri: str
    node: Node
    content: str
    content_hash: str
    importance: float
    created_at: float
    tags: tuple[str, ...]
    metadata: dict[str, object]
    mesi_state: MesiState
    named_graph: str | None
    generation: int
    in_database: bool
    indexed_hash: str | None  # content hash the text/type/edge indexes hold; None: not indexed
    indexed_tags: tuple[str, ...]
    indexed_types: tuple[str, ...]
    changed: bool = False


def check_size(iri: object, content: str, limit: int) -> None:
    """Raise ``ContentTooLargeError`` when ``content`` is over ``limit`` UTF-8 bytes."""
    size = len(content.encode("utf-8"))
    if size > limit:
        raise ContentTooLargeError(
            f"node {preview(iri)} is {size} bytes, over the limit of {limit} bytes "
            "(StoreConfig.max_content_bytes)"
        )


def new_entry(
    entry_id: int,
    node: Node,
    content: str,
    record: Record,
    *,
    default_importance: float,
    now: float,
) -> Staged:
    """Return the staged state of a new entry written by ``record``."""
    return Staged(
        id=entry_id,
        iri=node["@id"],
        node=node,
        content=content,
        content_hash=content_hash(content),
        importance=default_importance if record.importance is None else record.importance,
        created_at=now,
        tags=record.tags,
        metadata=dict(record.metadata),
        mesi_state=record.mesi_state or MesiState.SHARED,
        named_graph=record.named_graph,
        generation=1,
        in_database=False,
        indexed_hash=None,
        indexed_tags=(),
        indexed_types=(),
        changed=True,
    )


def stage(
    entry: Staged, node: Node, record: Record, *, text_keys: frozenset[str], max_bytes: int
) -> None:
    """Merge the write request (``node`` with ``record``'s options) into ``entry`` in place."""
    merged = merge_nodes(entry.node, node, text_keys=text_keys)
    content = canonical_json(merged)
    check_size(entry.iri, content, max_bytes)
    digest = content_hash(content) if content != entry.content else entry.content_hash
    tags = tuple(dict.fromkeys(entry.tags + record.tags))
    importance = entry.importance
    if record.importance is not None:
        importance = (entry.importance + record.importance) / 2
    metadata = {**entry.metadata, **record.metadata}
    graph = record.named_graph or entry.named_graph
    state = record.mesi_state or entry.mesi_state
    if (digest, tags, importance, metadata, graph, state) == (
        entry.content_hash,
        entry.tags,
        entry.importance,
        entry.metadata,
        entry.named_graph,
        entry.mesi_state,
    ):
        return
    entry.node, entry.content, entry.content_hash = merged, content, digest
    entry.tags, entry.importance, entry.metadata = tags, importance, metadata
    entry.named_graph, entry.mesi_state = graph, state
    entry.generation += 1
    entry.changed = True
