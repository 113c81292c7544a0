"""L0: a write batch staged in memory, so one transaction writes each entry's final state once.

Pure code, no I/O. ``Staged`` is an entry as the batch leaves it; ``stage`` applies one write
request to it by the merge rules, and ``Rows`` lists what the batch writes, table by table:
- tags united (existing first), types united, properties merged key by key (see ``jsonld``);
- importance averaged with the stored one when the request gives one, kept otherwise;
- metadata merged key by key (new wins); graph and MESI state replaced when given;
- the index fields (``gliding_core.fields``): the request's own when it gives them; else those
  an earlier request gave (a merge keeps them; ``restage`` does not); else what
  ``StoreConfig.index_fields`` gives the entry's types now, else the default;
- ``generation`` increases by one on each request that changes anything.

``restage`` is the other rule, for ``L0Store.replace``: the entry becomes exactly the request
(node, tags, graph and metadata as given; importance and MESI state set when given, kept
otherwise), keeping its identity, its creation time and its generation's count; ``Rows`` then
takes removed tags out of the tag index too.

``check_record`` holds each request to the store's own limits before the transaction starts
(content and metadata size, nesting depth, tag and graph name size); ``stage`` holds the merge
result to them again, so no entry is ever written over a limit. ``write_requests`` does that for a
whole batch, giving a node without ``@id`` its minted IRI first: what both stores run on a
batch's records (``store.entry.records_of``) before their transaction.
"""

from __future__ import annotations

import gc
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Literal

from gliding_core.config import ExpiryConfig, StoreConfig
from gliding_core.errors import ContentTooLargeError, InvalidInputError, NodeTooDeepError
from gliding_core.fields import (
    decode,
    encode,
    for_types,
    given,
    indexed_facets,
    indexed_text,
    unselected,
)
from gliding_core.jsonld import (
    MAX_DEPTH_CEILING,
    Node,
    canonical_json,
    content_hash,
    merge_nodes,
    nesting_depth,
    node_context,
    node_types,
    preview,
)
from gliding_core.store.entry import MesiState, Record
from gliding_core.store.protocol import MINTED_IRI_PREFIX

Request = tuple[Node, str, Record]
"""A checked write request: the node as written (with its ``@id``), its JSON, its record."""

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
    types: tuple[str, ...]
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
    indexed_node: Node | None  # the node they were built from, to take its text back out
    indexed_tags: tuple[str, ...]
    indexed_types: tuple[str, ...]
    changed: bool = False
    index_fields: str | None = None  # the index fields, as stored (``fields.encode``)
    indexed_fields: str | None = None  # those the text index holds the entry's text under


def check_size(iri: object, content: str, limit: int) -> None:
    """Raise ``ContentTooLargeError`` when ``content`` is over ``limit`` UTF-8 bytes."""
    if len(content) * 4 <= limit:
        return  # no character takes more than four bytes: too small to be over, no encoding
    size = len(content.encode("utf-8"))
    if size > limit:
        raise ContentTooLargeError(
            f"node {preview(iri)} is {size} bytes, over the limit of {limit} bytes "
            "(StoreConfig.max_content_bytes)"
        )


def check_record(record: Record, iri: str, content: str, config: StoreConfig) -> None:
    """Hold a write request to the store's limits: content size, nesting depth, label sizes.

    ``content`` is the node's canonical JSON as it will be written (with its minted ``@id``).

    Raises:
        ContentTooLargeError: the content, the metadata, a tag or the named graph is too large.
        NodeTooDeepError: the node or its metadata nests deeper than ``config.max_depth``.
    """
    check_size(iri, content, config.max_content_bytes)
    if record.depth > config.max_depth:
        raise NodeTooDeepError(
            f"node {preview(iri)} or its metadata nests {record.depth} levels deep, over the"
            f" limit of {config.max_depth} (StoreConfig.max_depth)"
        )
    quarter = config.max_label_bytes // 4  # a label this short fits, whatever its characters
    for tag in record.tags:  # inline: this runs for every record of every batch
        if len(tag) > quarter:
            check_label_size(tag, config.max_label_bytes, what="tag")
    graph = record.named_graph
    if graph is not None and len(graph) > quarter:
        check_label_size(graph, config.max_label_bytes, what="named_graph")
    if record.metadata:
        _check_metadata_size(iri, record.metadata, config.max_content_bytes)


def write_requests(records: list[Record], config: StoreConfig) -> list[Request]:
    """Return the write requests of ``records``, each held to ``config``'s limits, in order.

    A node without ``@id`` gets ``MINTED_IRI_PREFIX`` and a random UUID. Every record is
    checked before the caller writes anything.

    Raises:
        ContentTooLargeError, NodeTooDeepError: as ``check_record``.
    """
    out: list[Request] = []
    for record in records:
        node, content = record.node, record.content
        if "@id" not in node:
            node = {"@id": MINTED_IRI_PREFIX + str(uuid.uuid4()), **node}
            content = canonical_json(node)
        check_record(record, node["@id"], content, config)
        out.append((node, content, record))
    return out


@contextmanager
def collector_paused() -> Iterator[None]:
    """Pause the cyclic garbage collector while a batch is validated, staged and written.

    A batch allocates many small objects and no reference cycles; the collector would walk
    them again and again, and, as they survive, the caller's own objects too (about 5 us per
    entry at 5,000 entries a batch in the SQLite store, more on PostgreSQL, whose batch also
    lays out its lexical postings). Reference counting still frees everything; the collector
    resumes, as it was, when the batch is done.
    """
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _check_metadata_size(iri: str, metadata: dict[str, object], limit: int) -> None:
    text = canonical_json(metadata)
    if len(text) * 4 > limit and len(text.encode("utf-8")) > limit:
        raise ContentTooLargeError(
            f"metadata of {preview(iri)} is {len(text.encode('utf-8'))} bytes, over the limit of"
            f" {limit} bytes (StoreConfig.max_content_bytes)"
        )


def check_tags(tags: tuple[str, ...], config: StoreConfig) -> tuple[str, ...]:
    """Return ``tags`` if each is within ``config.max_label_bytes`` (see ``check_label_size``)."""
    for tag in tags:
        check_label_size(tag, config.max_label_bytes, what="tag")
    return tags


def check_label_size(label: str, limit: int, *, what: str) -> None:
    """Raise ``ContentTooLargeError`` when a tag or graph name is over ``limit`` UTF-8 bytes."""
    if len(label) * 4 <= limit:
        return
    size = len(label.encode("utf-8"))
    if size > limit:
        raise ContentTooLargeError(
            f"{what} {preview(label)} is {size} bytes, over the limit of {limit} bytes"
            " (StoreConfig.max_label_bytes)"
        )


ByType = Mapping[str, Literal[False] | tuple[str, ...]]
"""``StoreConfig.index_fields``: the index fields of each listed ``@type``."""


def index_of(
    record: Record,
    node: Node,
    types: Sequence[str] | Callable[[], Sequence[str]],
    by_type: ByType,
) -> str | None:
    """Return the index fields (stored form) a write request gives its entry, ``node`` as it
    will be written: the request's own, else those of its types, else the default (``None``).

    Raises:
        InvalidInputError: a field path of the request selects nothing in ``node``.
    """
    fields = record.index
    if fields is None:
        if not by_type:
            return None
        found = for_types(types() if callable(types) else types, by_type)
        return encode(found, derived=True)
    missing = unselected(node, fields)
    if missing:
        raise InvalidInputError(
            f"index field {missing[0]!r} selects nothing in node {preview(node.get('@id'))}"
            f" (its keys: {preview(sorted(node))})"
        )
    return encode(fields)


def new_entry(
    entry_id: int,
    node: Node,
    content: str,
    record: Record,
    *,
    default_importance: float,
    now: float,
    index_fields: str | None = None,
) -> Staged:
    """Return the staged state of a new entry written by ``record`` (``index_fields``: see
    ``index_of``)."""
    return Staged(
        id=entry_id,
        iri=node["@id"],
        node=node,
        content=content,
        types=record.types,
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
        indexed_node=None,
        indexed_tags=(),
        indexed_types=(),
        changed=True,
        index_fields=index_fields,
    )


def stage(
    entry: Staged,
    node: Node,
    record: Record,
    *,
    text_keys: frozenset[str],
    max_bytes: int,
    max_depth: int = MAX_DEPTH_CEILING,
    by_type: ByType | None = None,
) -> None:
    """Merge the write request (``node`` with ``record``'s options) into ``entry`` in place.

    ``by_type`` is ``StoreConfig.index_fields``.

    Raises:
        ContentTooLargeError: the merged node is over ``max_bytes``.
        NodeTooDeepError: the merged node nests deeper than ``max_depth`` (an entry written
            under a higher limit, merged after the limit was lowered).
        InvalidInputError: a field path of the request selects nothing in the merged node.
    """
    merged = merge_nodes(entry.node, node, text_keys=text_keys)
    nesting_depth(merged, max_depth, what=f"the merge into {preview(entry.iri)}")
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
    types = lambda: tuple(node_types(merged))  # noqa: E731 (called only when needed)
    if record.index is None and given(entry.index_fields):
        index = entry.index_fields  # a write's own index fields stay until another gives some
    else:
        index = index_of(record, merged, types, by_type or {})
    fields = (digest, tags, importance, metadata, graph, state, index)
    _become(entry, merged, content, fields, types)


def restage(
    entry: Staged, node: Node, content: str, record: Record, *, by_type: ByType | None = None
) -> None:
    """Make ``entry`` exactly the write request (``node`` with ``record``'s fields), in place.

    Nothing merges: properties and tags the request lacks are gone. The generation increases
    by one if anything changed; the creation time stays. ``by_type`` is
    ``StoreConfig.index_fields``.
    """
    digest = content_hash(content) if content != entry.content else entry.content_hash
    importance = entry.importance if record.importance is None else record.importance
    state = record.mesi_state or entry.mesi_state
    index = index_of(record, node, record.types, by_type or {})
    fields = (
        digest,
        record.tags,
        importance,
        dict(record.metadata),
        record.named_graph,
        state,
        index,
    )
    _become(entry, node, content, fields, lambda: record.types)


_Fields = tuple[str, tuple[str, ...], float, dict[str, object], str | None, MesiState, str | None]
"""An entry's stored fields: content hash, tags, importance, metadata, graph, MESI state,
index fields."""


def _become(
    entry: Staged, node: Node, content: str, fields: _Fields, types: Callable[[], tuple[str, ...]]
) -> None:
    """Give ``entry`` ``node`` and ``fields`` (hash, tags, importance, metadata, graph, state,
    index fields).

    Nothing happens when the fields equal the entry's; else its generation increases by one and
    it is marked changed (``types`` is called only then).
    """
    current = (
        entry.content_hash,
        entry.tags,
        entry.importance,
        entry.metadata,
        entry.named_graph,
        entry.mesi_state,
        entry.index_fields,
    )
    if fields == current:
        return
    entry.node, entry.content, entry.types = node, content, types()
    (
        entry.content_hash,
        entry.tags,
        entry.importance,
        entry.metadata,
        entry.named_graph,
        entry.mesi_state,
        entry.index_fields,
    ) = fields
    entry.generation += 1
    entry.changed = True


@dataclass(slots=True)
class Rows:
    """The SQL parameters that write a batch's changed entries and bring each index in line.

    ``changes`` are the ``(iri, text)`` pairs of the entries whose text was (re)indexed;
    ``relogged`` the IRIs among them whose text differs from what it was (for the change log);
    ``retexted`` the ids of stored entries whose ``"text"`` changed (their parts, if any, no
    longer complete it: ``gliding_core.store.parts``); ``fields`` the ``(index fields, id)``
    of the entries whose stored index fields change (a new entry with the default has none:
    the column's default, ``NULL``, is the default).
    """

    created: list[tuple[object, ...]] = field(default_factory=list)
    updated: list[tuple[object, ...]] = field(default_factory=list)
    tags: list[tuple[str, int]] = field(default_factory=list)
    old_tags: list[tuple[str, int]] = field(default_factory=list)
    unindexed: list[tuple[int]] = field(default_factory=list)
    old_types: list[tuple[str, int]] = field(default_factory=list)
    old_texts: list[tuple[int, str]] = field(default_factory=list)
    types: list[tuple[str, int]] = field(default_factory=list)
    edges: list[tuple[int, str, str]] = field(default_factory=list)
    texts: list[tuple[int, str]] = field(default_factory=list)
    changes: list[tuple[str, str | None]] = field(default_factory=list)
    relogged: list[str] = field(default_factory=list)
    retexted: list[int] = field(default_factory=list)
    fields: list[tuple[str | None, int]] = field(default_factory=list)

    def add(self, entry: Staged, now: float) -> None:
        """Add the rows that write ``entry`` as staged."""
        entry_id = entry.id
        types = entry.types
        values = (
            entry.content,
            entry.importance,
            now,
            SEPARATOR.join(entry.tags),
            canonical_json(entry.metadata) if entry.metadata else "{}",
            entry.mesi_state._value_,
            entry.content_hash,
            entry.named_graph,
            node_context(entry.node),
            SEPARATOR.join(types),
            entry.generation,
            entry_id,
        )
        if entry.in_database:
            self.updated.append(values)
            indexed = entry.indexed_tags
            self.tags += [(tag, entry_id) for tag in entry.tags if tag not in indexed]
            if len(indexed) > len(entry.tags) or not set(indexed) <= set(entry.tags):
                self.old_tags += [(tag, entry_id) for tag in indexed if tag not in entry.tags]
        else:
            self.created.append((*values, entry.iri, entry.created_at, now))
            self.tags += [(tag, entry_id) for tag in entry.tags]
        if entry.index_fields != (entry.indexed_fields if entry.in_database else None):
            self.fields.append((entry.index_fields, entry_id))
        if entry.indexed_hash != entry.content_hash or entry.indexed_fields != entry.index_fields:
            self._reindex(entry, types)

    def _reindex(self, entry: Staged, types: tuple[str, ...]) -> None:
        """Add the rows that replace the entry's types, edges and text in their indexes."""
        entry_id = entry.id
        old_text = ""
        if entry.indexed_node is not None:
            self.unindexed.append((entry_id,))
            self.old_types += [(t, entry_id) for t in entry.indexed_types]
            # The full-text index keeps no copy of the text: taking it out needs it given back.
            old_text = indexed_text(entry.indexed_node, decode(entry.indexed_fields))
            if old_text:
                self.old_texts.append((entry_id, old_text))
            if entry.indexed_node.get("text") != entry.node.get("text"):
                self.retexted.append(entry_id)
        self._index(
            entry_id, entry.iri, entry.node, types, old_text=old_text, fields=entry.index_fields
        )

    def add_new(
        self,
        entry_id: int,
        node: Node,
        content: str,
        record: Record,
        *,
        importance: float,
        now: float,
        index_fields: str | None = None,
    ) -> None:
        """Add the rows that write a new entry straight from its write request.

        The rows ``add(new_entry(...))`` gives, without staging the entry first: for a batch of
        new, distinct entries, where nothing merges into anything. ``index_fields``: see
        ``index_of``.
        """
        iri = node["@id"]
        tags = record.tags
        self.created.append(
            (
                content,
                importance,
                now,
                SEPARATOR.join(tags),
                canonical_json(record.metadata) if record.metadata else "{}",
                (record.mesi_state or MesiState.SHARED)._value_,
                content_hash(content),
                record.named_graph,
                node_context(node),
                SEPARATOR.join(record.types),
                1,
                entry_id,
                iri,
                now,
                now,
            )
        )
        for tag in tags:  # a loop, not a comprehension: a frame fewer for the usual few
            self.tags.append((tag, entry_id))
        if index_fields is not None:
            self.fields.append((index_fields, entry_id))
        self._index(entry_id, iri, node, record.types, old_text="", fields=index_fields)

    def _index(
        self,
        entry_id: int,
        iri: str,
        node: Node,
        types: tuple[str, ...],
        *,
        old_text: str,
        fields: str | None,
    ) -> None:
        """Add the rows that put a node's types, references and text in their indexes.

        ``old_text`` is the text the entry had before this write ("" for none); ``fields`` the
        index fields its text is made under (stored form).
        """
        references, text = indexed_facets(node, decode(fields))
        for t in types:
            self.types.append((t, entry_id))
        for predicate, target in references:
            self.edges.append((entry_id, predicate, target))
        if text:
            self.texts.append((entry_id, text))
        if text != old_text:
            self.relogged.append(iri)
        self.changes.append((iri, text))


SCOPE_TAG = "scope:"  # the tag of a scope's entries: ``gliding_core.store.scope.TAG_PREFIX``


def default_ttl(record: Record, settings: ExpiryConfig) -> float | None:
    """The TTL a new entry written without one gets: its graph's, its scopes' or the default."""
    graph = record.named_graph
    if graph is not None and graph in settings.by_graph:
        return settings.by_graph[graph]
    scoped = [
        settings.by_scope[tag[len(SCOPE_TAG) :]]
        for tag in record.tags
        if tag.startswith(SCOPE_TAG) and tag[len(SCOPE_TAG) :] in settings.by_scope
    ]
    return min(scoped) if scoped else settings.default_s
