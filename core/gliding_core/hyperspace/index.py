"""Hyperspace: ``VectorIndex``, what search and the memory need of a dense index.

A dense index holds the vectors of each L0 entry with text (one, or a long text's windows),
computed by the memory's embedder, and answers nearest-neighbour queries by cosine.
``DenseIndex`` (``gliding_core.hyperspace.dense``) implements it over a Chroma collection,
embedded in the process or on a Chroma server, and ``PgVectorIndex``
(``gliding_core.hyperspace.pgvector``) in PostgreSQL; both on the shared base
``following.FollowingIndex``. A constructor is not part of the protocol.

The contract every implementation keeps (its suite is ``tests/test_core/contracts/``):

- L0 is the source of truth. The index follows an ``EntryStore`` through its change log and
  records there, under its own watermark, the change sequence it has applied; it catches up on
  opening, after each commit of its store and before each search, and never applies a write of
  a transaction that is still open (``EntryStore.in_transaction``). ``behind()`` says how many
  committed changes it has not applied; a failed catch-up (the embedder or the backend down) is
  logged and retried, and a reopened index applies what a killed process left behind.
- An index opened with another embedder than the one its vectors came from raises
  ``IndexMismatchError`` (or rebuilds itself, where it owns its storage); it never mixes vectors.
- Erasure: ``remove`` drops vectors at once; ``scrub`` leaves nothing of a removed entry
  (vector or IRI) in the backend's storage, which may cost a rebuild from L0.
- Reads (``query``, ``similarities``, ``vectors``) return entries, one per IRI. A long text is
  held as several vectors (overlapping windows, ``DenseConfig``); the entry's score is then the
  best of its windows', and ``count`` counts entries.
- ``deferred()`` lets a writer commit without embedding; ``refresh_later()`` catches up in a
  background thread while ``catching_up`` is true, and searches meanwhile do not wait for it.
  ``reporting(report)`` tells a writer how many of its entries are embedded as it goes.
- Vectors come from the embedder, never from the backend. Writes are split into batches the
  backend accepts. The backend's failures leave as ``StorageError``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from typing import Protocol, runtime_checkable

from gliding_core.hyperspace.embedders import Embedder
from gliding_core.hyperspace.vectors import Vector
from gliding_core.store.filters import SearchFilters


@runtime_checkable
class VectorIndex(Protocol):
    """A dense index over the text of L0 entries (see the module)."""

    widest_query: int | None
    """The most entries one unrestricted query returns, however many are asked for (``None``:
    no bound)."""

    @property
    def name(self) -> str:
        """The index's name (its collection or table), unique per memory."""
        ...

    @property
    def embedder(self) -> Embedder:
        """The embedder that computes its vectors."""
        ...

    def behind(self) -> int:
        """Return how many committed L0 changes the index has not applied (cheap)."""
        ...

    def refresh(self, *, wait: bool = False) -> int:
        """Catch up with L0 unless another thread is doing so; return ``behind()`` after.

        Never raises for a failed catch-up: it is logged and retried.
        """
        ...

    def refresh_later(self) -> None:
        """Catch up with L0 in a background thread and return at once; while it runs,
        ``catching_up`` is true and searches do not wait for it."""
        ...

    @property
    def catching_up(self) -> bool:
        """Whether a background catch-up (``refresh_later``) is running."""
        ...

    def deferred(self) -> AbstractContextManager[None]:
        """Within this block, the calling thread's commits are not applied when they commit
        (``refresh_later`` or the next search applies them)."""
        ...

    def reporting(self, report: Callable[[int], None]) -> AbstractContextManager[None]:
        """Within this block, the catch-ups the calling thread runs (its commits') call
        ``report(n)`` as ``n`` more entries are embedded, in steps (a progress bar's ``update``).
        """
        ...

    def catch_up(self) -> int:
        """Apply every L0 change after the watermark; return how many were read.

        Raises:
            StorageError: L0 or the backend failed (the watermark stays where it got to).
        """
        ...

    def vector(self, text: str | Vector) -> Vector:
        """Return the query vector of ``text`` (a vector passes through unchanged)."""
        ...

    def query(
        self, text: str | Vector, n: int, *, allowed: Sequence[str] | None = None
    ) -> list[tuple[str, float]]:
        """Return up to ``n`` ``(iri, cosine)`` pairs nearest to ``text``, best first; with
        ``allowed``, only among those IRIs."""
        ...

    def similarities(self, text: str | Vector, iris: Sequence[str]) -> dict[str, float]:
        """Return the exact cosine of ``text`` with each indexed entry among ``iris``."""
        ...

    def vectors(self, iris: Sequence[str]) -> dict[str, Vector]:
        """Return the unit vector of each indexed entry among ``iris``."""
        ...

    def upsert(self, items: Sequence[tuple[str, str]]) -> None:
        """Embed and store the texts of these ``(iri, text)`` entries."""
        ...

    def rebuild(self, batch: int = 512) -> int:
        """Re-embed every L0 entry with text and drop what L0 no longer holds; return the
        number of entries indexed."""
        ...

    def reset(self) -> int:
        """Drop every vector and re-embed all of L0; return the number of entries indexed."""
        ...

    def count(self) -> int:
        """Return the number of indexed entries (a windowed entry counts once)."""
        ...

    def remove(self, iris: Sequence[str]) -> int:
        """Drop the vectors of ``iris`` (every window of each) now, not waiting for the change
        log; return how many of the entries the index held."""
        ...

    def scrub(self) -> None:
        """Make the vectors and IRIs of removed entries unrecoverable from the storage the
        index owns (its logs, segments and free pages); a server's storage is the server's.
        The index then holds exactly L0's entries with text."""
        ...

    def close(self) -> None:
        """Stop following the store and record the applied sequence; closing twice is harmless."""
        ...


@runtime_checkable
class FilteringIndex(Protocol):
    """A dense index that can apply a search's filters itself, in the statement that scores
    (a backend in the database of L0: ``PgVectorIndex``)."""

    def query_filtered(
        self, text: str | Vector, n: int, filters: SearchFilters, *, at_most: int | None
    ) -> list[tuple[str, float]] | None:
        """Return up to ``n`` ``(iri, cosine)`` pairs nearest to ``text`` among the entries
        passing ``filters``, best first, scored exactly; ``None`` when more than ``at_most``
        entries pass (nothing is scored then; ``None``: no bound)."""
        ...
