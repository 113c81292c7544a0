"""Contract suites: the implementation tables every storage protocol's suite runs against.

Each table maps an implementation's name to a factory. A factory takes the test's request and
its temporary directory and yields a ``Backend``: how to open a handle on one storage location
made for the test, whether a second handle (or another process) shares it, and the Python source
a child process runs to open it. Tests open their handles through the fixtures below and never
name an implementation, so a new backend (PostgreSQL, issue 26) adds one row per table and every
test in this folder runs on it.

The file is split into blocks, one per protocol, so that the owners of the suites can edit their
own block without touching the others':

- the shared machinery (``Backend``, ``Factory``, ``backend_fixture``, ``run_child``);
- L0 store, dense index and supplementary-input queue (``test_entry_store.py``,
  ``test_vector_index.py``, ``test_supplementary_queue.py``);
- coordination store and coherence directory (``test_coordination_store.py``,
  ``test_directory.py``).
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import Generic, TypeVar

import pytest

T = TypeVar("T")


# ================================================================================================
# Shared machinery
# ================================================================================================


@dataclass(frozen=True)
class Backend(Generic[T]):
    """One implementation of a protocol, on one storage location made for the test.

    Attributes:
        name: The implementation's name in its table (the test id).
        open: Open a new handle on the same storage, as another worker would; the caller
            closes it.
        shared: Whether a second handle, or another process, sees what the first one commits
            (false for in-memory stores, which exist only inside their handle).
        child_source: Python source that defines ``open_backend()``, returning a new handle on
            the same storage, for tests that run a child process (a SIGKILLed writer, a second
            worker). Empty when the storage cannot be reached from another process.
    """

    name: str
    open: Callable[[], T]
    shared: bool
    child_source: str = ""


Factory = Callable[[pytest.FixtureRequest, Path], AbstractContextManager[Backend[T]]]
"""Make one storage location for a test and yield its ``Backend``; tear it down after."""


def backend_fixture(
    table: dict[str, Factory[T]], request: pytest.FixtureRequest, tmp_path: Path
) -> Iterator[Backend[T]]:
    """Yield the backend of ``request.param`` in ``table``, torn down after the test."""
    with table[request.param](request, tmp_path) as backend:
        yield backend


def shared_names(table: dict[str, Factory[T]], shared: set[str]) -> list[str]:
    """The sorted names of ``table`` whose storage a second handle or process sees."""
    return sorted(name for name in table if name in shared)


def run_child(backend: Backend[object], body: str, *args: str) -> subprocess.Popen[str]:
    """Start a child process that runs ``backend.child_source`` and then ``body``.

    ``body`` calls ``open_backend()``; its ``sys.argv[1:]`` are ``args``. Its stdout is a pipe
    of text lines, so the test can read what the child acknowledged before killing it.
    """
    assert backend.child_source, f"{backend.name} cannot be opened from another process"
    source = backend.child_source + "\n" + body
    return subprocess.Popen(
        [sys.executable, "-c", source, *args], stdout=subprocess.PIPE, text=True
    )


# ================================================================================================
# L0 store, dense index, supplementary-input queue (store/, hyperspace/, attention/)
# ================================================================================================

# (filled in on branch i25-l0proto)


# ================================================================================================
# Coordination store and coherence directory (blackboard/coordination/, coherence/)
# ================================================================================================

# (filled in on branch i25-d2)
