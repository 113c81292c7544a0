"""CLI: the benchmarks of `gliding-horse bench`; each measures one layer and returns figures."""

from __future__ import annotations

import sys
from collections.abc import Iterable, Iterator
from typing import TypeVar

from tqdm import tqdm

T = TypeVar("T")


def progress(items: Iterable[T], what: str, *, total: int | None = None) -> Iterator[T]:
    """Iterate over ``items`` with a progress bar on standard error (when it is a terminal).

    The bar is off when standard error is not a terminal (CI logs, tests), so figures printed
    on standard output stay clean either way.
    """
    yield from tqdm(items, desc=what, total=total, file=sys.stderr, leave=False, disable=None)
