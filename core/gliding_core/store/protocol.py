"""L0: ``EntryStore``, what the layers above need of the long-term store of JSON-LD entries.

Sessions archive turns in it, search ranks and filters it, the chat log and the supplementary
inputs keep their state in it, the blackboard writes back to it, and derived indexes (the dense
index, the Poincaré index) follow it through its change log. ``L0Store`` (SQLite, in
``gliding_core.store.sqlite``) is the first implementation; a server database is the second.
A constructor is not part of the protocol: ``Memory`` chooses the implementation.

The contract every implementation keeps (its suite is ``tests/test_core/contracts/``):

- Writes: a write request is validated whole before anything is written, and a batch
  (``put_many``, ``replace_many``) is one transaction: a failure anywhere writes nothing.
  ``put`` (and ``put_many``, ``replace``) refuses a node over ``max_content_bytes`` with
  ``ContentTooLargeError``; ``put_text`` takes a text of any size: a head of it in the node,
  every byte of it beside the entry, all of it in the full-text search (when the entry's index
  fields take its ``"text"``: the default does), ``full_text`` giving it back whole; a later
  write that changes the entry's ``"text"``, or a delete, drops it.
  ``put`` merges a node into the entry of its ``@id`` (``gliding_core.jsonld``'s merge laws:
  tags and types united, importance averaged, the longer ``text`` kept, other keys replaced);
  ``replace`` makes the entry exactly the node given, keeping its creation time and going on
  with its generation. A node without ``@id`` gets an IRI starting with ``MINTED_IRI_PREFIX``.
  The generation increases on every change of content, tags, types, graph, importance or
  metadata, and never on a read or on a write that changes nothing.
- Transactions: ``transaction()`` groups every write of the calling thread inside the block
  into one transaction, all of them or none; a transaction opened inside another joins it, and
  a write that fails inside it rolls back only itself. Inside the block the thread reads its own
  writes; every other reader sees the store as it was before the block until the commit.
  ``in_transaction()`` tells the calling thread whether it is inside one (what it reads may
  still roll back). ``hold(purpose)``, inside a transaction, makes it the only one holding
  ``purpose`` until it ends, in every process: another transaction asking for the same purpose
  waits, and its reads after that see what the first committed (so a read-change-write of
  state kept in entries is never lost between processes).
- Reads never write an entry: ``get`` counts itself (``access_count``, ``last_accessed``) and
  the count shows in every later read; ``get_many`` and the queries count nothing. Query results
  come in a stated order (oldest first unless the method says otherwise).
- Scope: every read that takes ``SearchFilters`` applies them in the store, in the same query
  as the rest, so no entry outside the filters is ever fetched.
- Index fields: an entry's searchable text is its values under its index fields
  (``gliding_core.fields.indexed_text``), the same for the full-text search, the change log,
  ``scan_texts`` and ``searchable_texts``. A write's ``index`` (``Record.index``) sets them
  (a later ``put`` without one keeps them, a ``replace`` without one does not); otherwise
  ``StoreConfig.index_fields`` gives them for the node's types at each write, else the default
  (the text-like values). They are stored with the entry (``indexed_with``), so its text can be
  recomputed exactly. A path of a write's ``index`` that selects nothing in the node written
  is refused (``InvalidInputError``), nothing written. Entries written before index fields
  existed keep ``("$",)``, every string and number, until written again.
- The change log: every committed change of an entry's text (written with a different text, or
  deleted) takes the next sequence number, in the same transaction as the write; the log keeps
  each IRI's latest change only, so ``change_sequence`` only grows and ``changes_since(n)``
  gives a derived index everything it needs to catch up from ``n``, whichever handle or process
  wrote. Watermarks never decrease. ``subscribe``'s listeners hear of changes after the commit
  only, never of a write that rolled back.
- Expiry: an entry written with a TTL (``ttl=`` of ``put``/``replace``, ``Record.ttl``), or
  new with a default of ``StoreConfig.expiry``, expires then: from that moment no read returns,
  counts, searches, links or logs its text (every read, as the store's clock says), and a write
  to its IRI starts a new entry. ``sweep_expired`` deletes expired entries for good. A write
  without a TTL keeps the entry's expiry; ``math.inf`` removes it. Three reads see the
  expired entries not yet swept when asked (``include_expired=True`` of ``get_many``,
  ``by_graph`` and ``graph_counts``), for a caller that shows them until the sweep, as
  LangGraph's stores do without ``omit_expired``; nothing else ever does.
- Erasure: ``delete`` and ``delete_many`` take an entry out of every index and the access
  statistics at once; ``scrub`` then makes what was deleted unrecoverable from the files
  (the change log keeps a deleted entry's IRI, never its text, for the derived indexes).
- Handles: one handle is safe to share between threads. Closing twice is harmless; any other
  use of a closed handle raises ``ClosedError``. Bad input raises ``InvalidInputError`` (or
  ``InvalidNodeError``, ``ContentTooLargeError``) naming the bad value; a missing entry where
  one is required raises ``EntryNotFoundError``; the backend's own failures leave as
  ``StorageError``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager
from typing import Any, Literal, Protocol, runtime_checkable

from gliding_core.config import StoreConfig
from gliding_core.fields import IndexFields
from gliding_core.jsonld import Node
from gliding_core.store.entry import Edge, Entry, Restored, TextHit
from gliding_core.store.entry import Records as Records  # what a batch write takes
from gliding_core.store.filters import SearchFilters

MINTED_IRI_PREFIX = "urn:uuid:"


Change = tuple[str, "str | None"]
"""A committed change of text: ``(iri, text)``, or ``(iri, None)`` for a deleted entry."""

Direction = Literal["out", "in", "both"]


@runtime_checkable
class EntryStore(Protocol):
    """The long-term store of JSON-LD entries, as the layers above use it (see the module)."""

    @property
    def config(self) -> StoreConfig:
        """The store's settings (``max_content_bytes``, ``text_keys``, ...)."""
        ...

    @property
    def stop_words(self) -> frozenset[str]:
        """The words a full-text query leaves out unless nothing else is left."""
        ...

    @property
    def concurrent_reads(self) -> bool:
        """Whether reads from several threads run at once, each on a connection of its own
        (a search then sends its independent reads together)."""
        ...

    def close(self) -> None:
        """Finish pending work and release the handle; closing twice is harmless."""
        ...

    # -- transactions --------------------------------------------------------------------------

    def transaction(self) -> AbstractContextManager[None]:
        """Group the calling thread's writes inside the block into one transaction."""
        ...

    def in_transaction(self) -> bool:
        """Whether the calling thread is inside a write transaction of this handle."""
        ...

    def hold(self, purpose: str) -> None:
        """Hold the lock named ``purpose`` until the calling thread's transaction ends."""
        ...

    # -- writes --------------------------------------------------------------------------------

    def put(
        self,
        node: object,
        *,
        tags: Sequence[str] = (),
        importance: float | None = None,
        named_graph: str | None = None,
        metadata: Mapping[str, Any] | None = None,
        ttl: float | None = None,
        index: Literal[False] | Sequence[str] | None = None,
    ) -> str:
        """Store a node (a mapping or JSON text), merged into the entry of its ``@id``; with
        ``ttl``, the entry expires that many seconds from now (``math.inf``: never); ``index``
        says which properties feed search (``Record.index``)."""
        ...

    def put_text(
        self,
        node: object,
        text: str,
        *,
        tags: Sequence[str] = (),
        importance: float | None = None,
        named_graph: str | None = None,
        metadata: Mapping[str, Any] | None = None,
        index: Literal[False] | Sequence[str] | None = None,
    ) -> str:
        """Store ``node`` with ``text`` under ``"text"``, whatever its size: ``put`` when it
        fits ``max_content_bytes``; else the node keeps a head of ``text_head_bytes`` and the
        whole text is kept beside the entry (and the entry becomes exactly this node);
        ``index`` as ``put``'s (the whole text is searched when the fields take ``"text"``)."""
        ...

    def put_many(self, records: Records) -> list[str]:
        """Store many nodes in one transaction; return their IRIs, in order."""
        ...

    def replace(
        self,
        node: object,
        *,
        tags: Sequence[str] = (),
        importance: float | None = None,
        named_graph: str | None = None,
        metadata: Mapping[str, Any] | None = None,
        ttl: float | None = None,
        index: Literal[False] | Sequence[str] | None = None,
    ) -> str:
        """Store a node as exactly the entry of its ``@id``; return its IRI (``ttl`` and
        ``index`` as ``put``'s; without a TTL the entry keeps its expiry)."""
        ...

    def replace_many(self, records: Records) -> list[str]:
        """Replace many entries in one transaction; return their IRIs, in order."""
        ...

    def retag(self, iri: str, *, add: Sequence[str] = (), remove: Sequence[str] = ()) -> Entry:
        """Add and remove tags of an entry; return the entry as it now is."""
        ...

    def delete(self, iri: str) -> bool:
        """Delete an entry from the store and every index; return whether it existed."""
        ...

    def delete_many(self, iris: Sequence[str]) -> list[str]:
        """Delete entries from the store and every index in one transaction; return the IRIs
        that existed, in the order given (each deletion is a change, as ``delete``'s)."""
        ...

    def restore_many(self, items: Sequence[Restored]) -> list[str]:
        """Write entries back exactly as exported (node, tags, graph, importance, metadata,
        state, creation time, expiry), in one transaction, replacing entries of the same IRI;
        return their IRIs in order."""
        ...

    def scan_entries(self, batch: int = 1_000) -> Iterator[list[Entry]]:
        """Yield every live entry, oldest first, in batches (to export the store)."""
        ...

    def expires_at(self, iris: Sequence[str]) -> dict[str, float]:
        """Return when each live entry among ``iris`` that has a TTL expires (UNIX seconds)."""
        ...

    def sweep_expired(self, *, limit: int = 1_000) -> list[Entry]:
        """Delete up to ``limit`` expired entries in one transaction, as ``delete`` does;
        return them as they were, soonest expired first."""
        ...

    def scrub(self) -> None:
        """Make what was deleted unrecoverable from the backend's files: no byte of a deleted
        entry (its text, its terms in the full-text index) stays in a free page, a log or an
        index segment. Costs about a copy of the database; ``forget`` calls it."""
        ...

    # -- reads ---------------------------------------------------------------------------------

    def get(self, iri: str) -> Entry | None:
        """Return the entry of ``iri`` or ``None``, counting the read."""
        ...

    def get_node(self, iri: str) -> Node | None:
        """Return the node stored under ``iri`` or ``None``, counting the read."""
        ...

    def full_text(self, iri: str) -> str | None:
        """Return the whole ``"text"`` of the entry of ``iri`` (however it was stored), its
        searchable text when it has no string ``"text"``, or ``None`` when there is no entry."""
        ...

    def get_many(self, iris: Sequence[str], *, include_expired: bool = False) -> dict[str, Entry]:
        """Return the existing entries among ``iris``, by IRI, counting nothing; with
        ``include_expired``, the expired ones not yet swept too."""
        ...

    def __contains__(self, iri: object) -> bool: ...

    def count(self) -> int:
        """Return the number of entries."""
        ...

    def by_tags(
        self, tags: Sequence[str], *, match: Literal["all", "any"] = "all", limit: int | None = None
    ) -> list[Entry]:
        """Return the entries carrying all (or any) of ``tags``, oldest first."""
        ...

    def by_graph(
        self, named_graph: str, *, limit: int | None = None, include_expired: bool = False
    ) -> list[Entry]:
        """Return the entries of a named graph, oldest first; with ``include_expired``, the
        expired ones not yet swept too, in their places."""
        ...

    def by_type(self, types: str | Sequence[str], *, limit: int | None = None) -> list[Entry]:
        """Return the entries having any of the JSON-LD ``types``, oldest first."""
        ...

    def by_prefix(self, prefix: str, *, limit: int | None = None) -> list[Entry]:
        """Return the entries whose IRI starts with ``prefix`` (taken literally), in IRI order."""
        ...

    def by_importance(
        self, minimum: float = 0.0, maximum: float = 1.0, *, limit: int | None = None
    ) -> list[Entry]:
        """Return the entries with importance in [minimum, maximum], most important first."""
        ...

    def recent(self, *, limit: int = 10) -> list[Entry]:
        """Return the most recently changed entries, newest first."""
        ...

    def contents(self, iris: Sequence[str]) -> dict[str, str]:
        """Return the stored JSON-LD text of the existing entries among ``iris``, by IRI."""
        ...

    def searchable_texts(self, iris: Sequence[str]) -> dict[str, str]:
        """Return the searchable text of the existing entries among ``iris`` that have one
        (their values under their index fields: what both search arms see), by IRI."""
        ...

    def indexed_with(self, iris: Sequence[str]) -> dict[str, IndexFields]:
        """Return the index fields each existing entry among ``iris`` was written with, by IRI
        (``None``: the default)."""
        ...

    def graphs_of(self, iris: Sequence[str]) -> dict[str, str]:
        """Return the named graph of each entry among ``iris`` that has one, by IRI."""
        ...

    def neighbours(self, iri: str, *, direction: Direction = "both") -> list[Edge]:
        """Return the references from (``"out"``), to (``"in"``) or around ``iri``."""
        ...

    def linked(self, iris: Sequence[str], predicates: Sequence[str]) -> list[tuple[str, str]]:
        """Return ``(iri, neighbour)`` pairs joined under ``predicates``, either direction."""
        ...

    def hierarchy(self, predicates: Sequence[str]) -> list[tuple[str, str]]:
        """Return ``(child, parent)`` pairs: entries under their types, links under
        ``predicates`` from source to target."""
        ...

    def tag_counts(self) -> dict[str, int]:
        """Return the number of entries per tag, most used first."""
        ...

    def graph_counts(self, *, include_expired: bool = False) -> dict[str, int]:
        """Return the number of entries per named graph, largest first; with
        ``include_expired``, the expired ones not yet swept counted too."""
        ...

    def type_counts(self) -> dict[str, int]:
        """Return the number of entries per JSON-LD type, most used first."""
        ...

    # -- search --------------------------------------------------------------------------------

    def search_text(
        self, query: str, *, limit: int = 10, filters: SearchFilters | None = None
    ) -> list[TextHit]:
        """Full-text search over the entries' text, best first (BM25-like: term frequency,
        rarity and length count; word forms match; stop words left out)."""
        ...

    def search_ids(
        self, query: str, *, limit: int = 10, filters: SearchFilters | None = None
    ) -> list[tuple[str, float]]:
        """``search_text`` returning ``(iri, score)`` pairs only: search's lexical arm."""
        ...

    def matching(
        self, filters: SearchFilters, iris: Sequence[str] | None = None, *, limit: int | None = None
    ) -> list[str]:
        """Return the IRIs (among ``iris`` when given, in their order; else oldest first) of
        the entries that pass ``filters``: the first ``limit`` of them when it is given (an
        int >= 1; ``InvalidInputError`` otherwise)."""
        ...

    # -- the change log ------------------------------------------------------------------------

    def change_sequence(self) -> int:
        """Return the sequence number of the last committed change of text (0 when none)."""
        ...

    def changes_since(
        self, sequence: int, *, limit: int = 1000
    ) -> list[tuple[int, str, str | None]]:
        """Return the changes of text after ``sequence``, oldest first: ``(seq, iri, text)``."""
        ...

    def watermark(self, name: str) -> int:
        """Return the sequence the derived index ``name`` has applied (0 when none)."""
        ...

    def set_watermark(self, name: str, sequence: int) -> None:
        """Record that the derived index ``name`` has applied every change up to ``sequence``."""
        ...

    def subscribe(self, listener: Callable[[list[Change]], None]) -> Callable[[], None]:
        """Call ``listener`` with the text changes of each commit made through this handle;
        return a function that cancels the subscription."""
        ...

    def scan_texts(self, batch: int = 1_000) -> Iterator[list[tuple[str, str]]]:
        """Yield ``(iri, text)`` of every entry with text, in batches (to rebuild an index)."""
        ...
