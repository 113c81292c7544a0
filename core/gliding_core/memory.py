"""Memory: the one facade users and adapters talk to; it owns every layer's objects.

Invariants: defaults are chosen in one place (``MemoryConfig``); collaborators may be passed in
ready-made; ``Memory()`` keeps everything in memory, ``Memory.open(path)`` keeps everything under
one directory; closing the memory closes what it owns, once.
"""

from __future__ import annotations

import os
from pathlib import Path

from gliding_core.config import MemoryConfig
from gliding_core.errors import InvalidInputError
from gliding_core.store import L0Store
from gliding_core.tokens import TokenCounter

STORE_FILE = "l0.sqlite3"


class Memory:
    """An agent memory: the L0 store and the token counter, with the layers built on them.

    Args:
        config: settings; ``MemoryConfig()`` when omitted.
        store: a ready L0 store; an in-memory one built from ``config`` when omitted.
        tokens: a ready token counter; one for ``config.token_encoding`` when omitted.
        directory: where the memory keeps its files, or ``None`` when it lives in memory.

    Example:
        >>> with Memory() as memory:
        ...     iri = memory.store.put({"@id": "urn:ex:1", "text": "hello"}, tags=["greeting"])
    """

    def __init__(
        self,
        *,
        config: MemoryConfig | None = None,
        store: L0Store | None = None,
        tokens: TokenCounter | None = None,
        directory: Path | None = None,
    ) -> None:
        self.config = config or MemoryConfig()
        self.directory = directory
        self.tokens = tokens or TokenCounter(self.config.token_encoding)
        self.store = store or L0Store(None, self.config.store)

    @classmethod
    def open(cls, path: str | os.PathLike[str], *, config: MemoryConfig | None = None) -> Memory:
        """Open (creating if needed) the memory kept under the directory ``path``.

        Raises:
            InvalidInputError: ``path`` exists and is not a directory.
        """
        if not isinstance(path, (str, os.PathLike)) or not os.fspath(path):
            raise InvalidInputError(f"memory path must be a non-empty path, got {path!r}")
        directory = Path(path)
        if directory.exists() and not directory.is_dir():
            raise InvalidInputError(f"memory path {str(directory)!r} exists and is not a directory")
        directory.mkdir(parents=True, exist_ok=True)
        config = config or MemoryConfig()
        store = L0Store(directory / STORE_FILE, config.store)
        return cls(config=config, store=store, directory=directory)

    def count_tokens(self, text: str) -> int:
        """Return the exact token count of ``text`` in the configured encoding."""
        return self.tokens.count(text)

    def close(self) -> None:
        """Close everything the memory owns; closing twice is harmless."""
        self.store.close()

    def __enter__(self) -> Memory:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __repr__(self) -> str:
        where = "in memory" if self.directory is None else str(self.directory)
        return f"Memory({where})"
