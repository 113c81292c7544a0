"""Hyperspace: ``VectorIndex``, what search and the memory need of a dense index.

A dense index holds one vector per L0 entry with text, computed by the memory's embedder, and
answers nearest-neighbour queries by cosine. ``DenseIndex`` (``gliding_core.hyperspace.dense``)
implements it over a Chroma collection, embedded in the process or on a Chroma server; an index
in a server database is another implementation. A constructor is not part of the protocol.

The contract every implementation keeps (its suite is ``tests/test_core/contracts/``):

- L0 is the source of truth. The index follows an ``EntryStore`` through its change log and
  records there, under its own watermark, the change sequence it has applied; it catches up on
  opening, after each commit of its store and before each search, and never applies a write of
  a transaction that is still open (``EntryStore.in_transaction``). ``behind()`` says how many
  committed changes it has not applied; a failed catch-up (the embedder or the backend down) is
  logged and retried, and a reopened index applies what a killed process left behind.
- An index opened with another embedder than the one its vectors came from raises
  ``IndexMismatchError`` (or rebuilds itself, where it owns its storage); it never mixes vectors.
- Reads (``query``, ``similarities``) return entries, one pair per IRI. An implementation may
  hold a long text as several vectors (``DenseIndex`` embeds it in overlapping windows,
  ``DenseConfig``); the entry's score is then the best of its vectors', and ``count`` counts
  entries.
- Vectors come from the embedder, never from the backend. Writes are split into batches the
  backend accepts. The backend's failures leave as ``StorageError``.
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import AbstractContextManager
from typing import Protocol, runtime_checkable

from gliding_core.hyperspace.embedders import Embedder
from gliding_core.hyperspace.vectors import Vector


@runtime_checkable
class VectorIndex(Protocol):
    """A dense index over the text of L0 entries (see the module)."""

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
        """Return the number of indexed entries."""
        ...

    def close(self) -> None:
        """Stop following the store and record the applied sequence; closing twice is harmless."""
        ...
