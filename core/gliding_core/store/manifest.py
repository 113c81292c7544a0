"""Memory directory: ``memory.json``, what a memory directory records about itself.

It names the embedder the owner last indexed with (for ``gliding-horse inspect``; the dense
index checks its own collection's metadata) and, for a memory whose dense index lives on a
Chroma server, the collection that is this memory's on that server (so two memories sharing a
server never share a collection).

Invariants: the file is always a JSON object whose known keys hold strings; it is replaced
atomically (a reader never sees half of it); processes updating it at once are serialised by
an exclusive ``flock`` on the directory, so no update is lost; a file that cannot be read or
holds anything else raises ``StorageError`` naming it, and is never overwritten.
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import uuid
from collections.abc import Iterator, Mapping
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

from gliding_core.errors import StorageError
from gliding_core.jsonld import preview

MANIFEST_FILE = "memory.json"
KEYS = ("embedder", "collection")
_COLLECTION = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{1,510}[A-Za-z0-9]")


def read_manifest(directory: Path) -> dict[str, Any]:
    """Return the manifest of ``directory``, ``{}`` when it has none.

    Raises:
        StorageError: the file cannot be read, is not JSON, or a known key holds a non-string
            (or a collection name Chroma would refuse).
    """
    path = directory / MANIFEST_FILE
    try:
        if not path.exists():
            return {}
        manifest = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise StorageError(
            f"cannot read the manifest {str(path)!r} ({exc}); delete it to have it rewritten"
        ) from exc
    if not isinstance(manifest, dict) or not all(
        isinstance(manifest.get(key, ""), str) for key in KEYS
    ):
        raise StorageError(
            f"the manifest {str(path)!r} is not a JSON object of strings: {preview(manifest)}; "
            "delete it to have it rewritten"
        )
    collection = manifest.get("collection")
    if collection is not None and not _COLLECTION.fullmatch(collection):
        raise StorageError(f"the manifest {str(path)!r} names an invalid collection {collection!r}")
    return manifest


def update_manifest(
    directory: Path, values: Mapping[str, str], *, unless_set: bool = False
) -> dict[str, Any]:
    """Write ``values`` into the manifest of ``directory``; return the manifest as it stands.

    Args:
        directory: the memory directory.
        values: the keys to set.
        unless_set: keep a key another process has set already (to agree on a first value).

    Raises:
        StorageError: the manifest cannot be read or written.
    """
    with _exclusive(directory):
        manifest = read_manifest(directory)
        wanted = {
            key: value
            for key, value in values.items()
            if manifest.get(key) != value and not (unless_set and key in manifest)
        }
        if wanted:
            manifest = {**manifest, **wanted}
            _replace(directory / MANIFEST_FILE, json.dumps(manifest, indent=2) + "\n")
    return manifest


def server_collection(directory: Path) -> str:
    """Return the name of this memory's collection on a Chroma server, choosing it once."""
    current = read_manifest(directory).get("collection")
    if current is not None:
        return str(current)
    chosen = {"collection": f"gliding-{uuid.uuid4().hex[:16]}"}
    return str(update_manifest(directory, chosen, unless_set=True)["collection"])


def _replace(path: Path, text: str) -> None:
    staged = path.with_name(f".{path.name}.{os.getpid()}")
    try:
        staged.write_text(text, encoding="utf-8")
        staged.replace(path)
    except OSError as exc:
        with suppress(OSError):
            staged.unlink()
        raise StorageError(f"cannot write the manifest {str(path)!r}: {exc}") from exc


@contextmanager
def _exclusive(directory: Path) -> Iterator[None]:
    """Hold an exclusive ``flock`` on the directory itself while the block runs."""
    try:
        descriptor = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError as exc:
        raise StorageError(f"cannot open the memory directory {str(directory)!r}: {exc}") from exc
    try:
        fcntl.flock(descriptor, fcntl.LOCK_EX)  # held for one read and one write: brief
        yield
    finally:
        os.close(descriptor)
