"""Hyperspace: the rows a small dense index scans to answer a query exactly.

``ScanRows`` holds the unit window vectors of every entry of an index, in one matrix, for an
exact scan: a query's cosines are one matrix-vector product, and an entry's score is the best of
its windows. Writes are appended: an entry written again gets new rows at the end and its old
rows are left dead (never scored); a removed entry's rows die too. When a third of the rows are
dead the owner builds the rows anew from its cache (``worn``).

Invariants: an entry's rows are consecutive and form one group; a group is live (its entry's
current rows) or dead; ``where`` names the live group of each entry it holds, and only those.
The caller serialises access (the dense index holds its cache lock around every call).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

import numpy as np
import numpy.typing as npt

Matrix = npt.NDArray[np.float32]

_FIRST_ROWS = 64  # rows (and groups) allocated at first; doubled as they fill


class ScanRows:
    """The window vectors of an index's entries, scored exactly (see the module).

    Args:
        matrices: each entry's window vectors (unit rows, one matrix per entry).
        dimension: the vectors' length.
    """

    def __init__(self, matrices: Mapping[str, Matrix], dimension: int) -> None:
        self._rows: Matrix = np.zeros((_FIRST_ROWS, dimension), dtype=np.float32)
        self._starts = np.zeros(_FIRST_ROWS, dtype=np.intp)  # first row of each group
        self._live = np.zeros(_FIRST_ROWS, dtype=bool)
        self._entries: list[str | None] = []  # each group's entry, None once dead
        self._where: dict[str, int] = {}  # entry -> its live group
        self._used = 0  # rows
        self._dead = 0  # dead rows
        self.put(matrices)

    def __len__(self) -> int:
        """The number of entries held."""
        return len(self._where)

    @property
    def worn(self) -> bool:
        """Whether a third or more of the rows are dead: time to build them anew."""
        return self._dead * 3 > self._used

    def put(self, matrices: Mapping[str, Matrix]) -> None:
        """Hold these entries' rows (an entry held already gets these instead)."""
        self.drop(matrices)
        matrices = {iri: matrix for iri, matrix in matrices.items() if len(matrix)}
        if not matrices:
            return
        sizes = np.fromiter(map(len, matrices.values()), dtype=np.intp, count=len(matrices))
        rows, first = int(sizes.sum()), len(self._entries)
        self._reserve(self._used + rows, first + len(matrices))
        self._rows[self._used : self._used + rows] = np.concatenate(list(matrices.values()))
        self._starts[first : first + len(matrices)] = self._used + np.cumsum(sizes) - sizes
        self._live[first : first + len(matrices)] = True
        self._entries += matrices
        self._where.update(zip(matrices, range(first, first + len(matrices)), strict=True))
        self._used += rows

    def drop(self, iris: Iterable[str]) -> None:
        """Stop scoring these entries (those not held are ignored)."""
        for iri in iris:
            group = self._where.pop(iri, None)
            if group is not None:
                self._live[group] = False
                self._entries[group] = None
                self._dead += self._group_rows(group)

    def best(
        self, unit: Matrix, n: int, allowed: Sequence[str] | None = None
    ) -> list[tuple[str, float]]:
        """Return the ``n`` entries (among ``allowed`` when given) of highest cosine with the
        unit vector ``unit``, best first, equal scores by IRI."""
        groups = len(self._entries)
        if n <= 0 or not self._where:
            return []
        cosines = self._rows[: self._used] @ unit
        scores = np.maximum.reduceat(cosines, self._starts[:groups])
        if allowed is None:
            places = np.flatnonzero(self._live[:groups])
        else:
            wanted = {self._where[iri] for iri in allowed if iri in self._where}
            places = np.fromiter(sorted(wanted), dtype=np.intp, count=len(wanted))
        scores = scores[places]
        if len(scores) > n:  # every entry tied with the n-th best, then the order by IRI
            cut = np.partition(scores, len(scores) - n)[len(scores) - n]
            picked = np.flatnonzero(scores >= cut)
        else:
            picked = np.arange(len(scores))
        found = [(str(self._entries[places[i]]), float(scores[i])) for i in picked]
        return sorted(found, key=lambda pair: (-pair[1], pair[0]))[:n]

    def _group_rows(self, group: int) -> int:
        end = self._starts[group + 1] if group + 1 < len(self._entries) else self._used
        return int(end - self._starts[group])

    def _reserve(self, rows: int, groups: int) -> None:
        """Grow the arrays (doubling) to hold ``rows`` rows and ``groups`` groups."""
        if rows > len(self._rows):
            grown = np.zeros((max(rows, 2 * len(self._rows)), self._rows.shape[1]), np.float32)
            grown[: self._used] = self._rows[: self._used]
            self._rows = grown
        if groups > len(self._starts):
            size = max(groups, 2 * len(self._starts))
            self._starts = np.resize(self._starts, size)
            self._live = np.resize(self._live, size)
