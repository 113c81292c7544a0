"""Memory: carrying a memory out and back in, as JSON Lines.

The file: a header line, then one line per L0 entry, oldest first::

    {"format": "gliding-horse-memory", "version": 3, "embedder": "hash-256",
     "dimension": 256, "scope": null, "entries": 42}
    {"entry": {"@id": "urn:...", "@type": "Turn", "text": "..."}, "tags": ["turn", ...],
     "graph": "urn:gliding:session:...", "importance": 0.5, "created": 1796540000.25,
     "metadata": {...}, "state": "S", "expires": null, "scope": "user:alice",
     "embedding": [0.01, ...]}

``entry`` is the JSON-LD node as stored. An entry whose text is kept in parts
(``EntryStore.put_text``: a text over ``max_content_bytes``) holds the head of it, and says
``"text_parts": n``; the ``n`` lines after it carry the whole text, in order, at most
``PART_BYTES`` each: ``{"part": 0, "text": "..."}``. Import puts the text back in parts.
Sessions (their turns), chat logs, supplementary inputs, LangGraph store items and the
blackboard nodes flushed to L0 are entries like any other, so they travel too; ``scope`` names
the scope an entry belongs to (informative: its tags carry it). ``embedding`` is the vector
the header's embedder gives the entry's text: its values under its index fields
(``gliding_core.fields``), which ``index`` gives when they are not the default (a list of
field paths, or ``false``); import gives them back as the entry's own.

Import treats the file as hostile: each line is at most ``MAX_LINE_BYTES`` and parsed JSON
nesting is bounded (``Record``'s checks, a ``RecursionError`` caught), every field is checked
by type and range, unknown keys are refused, the header must come first and name this format
and version, an entry given twice is bad on its second line, and a file with fewer entry lines
than its header's ``entries`` is cut short (the line after its last is bad). Every line is
checked before anything is written, and everything is written in one L0 transaction: a bad
line writes nothing (``MalformedImportError`` lists each bad line by number), unless
``skip_bad`` imports the rest and lists them. Entries come back exactly (IRI, content, tags,
graph, importance, metadata, creation time, expiry).

The vectors are the one part of a line that cannot be checked by reading it: a number list of
the right size is a valid vector of any text. The embedding cache keys a vector by its text's
digest, so a vector taken from a hostile file would be the vector of that text for every entry
that has it, in the memory already or written later, and would steer the dense arm's ranking
of them (cache poisoning). Computing every vector again is sound but makes an import with the
local model cost as much as embedding the memory anew, which is what carrying the vectors
saves. So, when the header names the memory's embedder (and ``keep_vectors`` is on):

- A vector from the file never replaces or pre-empts one the cache holds: only the texts the
  cache has no vector of yet take the file's (``CachedEmbedder.remember`` inserts, never
  replaces, so a vector computed meanwhile wins too). A text the memory already knows keeps
  its vector, and its entries their ranking, whatever the file says.
- Those new texts are verified before anything is written: ``VERIFY_SAMPLE`` of them, drawn
  at random by the system's generator (a file cannot know which), are embedded and compared
  with the file's vectors, which must agree within ``VECTOR_TOLERANCE`` (the distance over
  the computed vector's length: the hash embedder agrees exactly, the local model on CPU up
  to float noise, far below it; a vector within it moves a cosine score by at most that
  much). Each text's vectors in the file must agree with one another too. A mismatch refuses
  the whole file with ``MalformedImportError`` naming the entry and its line, even with
  ``skip_bad``: one forged vector found means the file's other vectors cannot be trusted, and
  leaving out only the line found would keep those that escaped the sample. Nothing is
  written, nor cached. ``keep_vectors=False`` imports such a file with its vectors dropped.

What is left: a file that forges the vectors of only a few of its own texts passes the sample
with a chance that falls with each forgery; the forged vectors are then those of texts the
file itself brings (the ranking of its own entries, and of a later entry of exactly the same
text). A file from a source not trusted with that much is imported with ``keep_vectors=False``:
its vectors are dropped and computed again. Without the memory's embedder in the header, the
vectors are always computed again.
"""

from __future__ import annotations

import contextlib
import io
import json
import math
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from random import SystemRandom
from typing import IO, Any, NoReturn, Protocol

import numpy as np

from gliding_core.errors import (
    GlidingError,
    InvalidInputError,
    MalformedImportError,
    StorageError,
)
from gliding_core.fields import IndexFields, indexed_text, unselected
from gliding_core.hyperspace.backends import CachedEmbedder
from gliding_core.jsonld import preview
from gliding_core.retention.erasure import scope_entries
from gliding_core.store.entry import Entry, MesiState, Record, Restored
from gliding_core.store.parts import is_head, split_text
from gliding_core.store.protocol import EntryStore
from gliding_core.store.scope import TAG_PREFIX, Scope

FORMAT = "gliding-horse-memory"
VERSION = 3  # 2: texts kept in parts travel whole, on part lines after their entry; 3: index
READABLE_VERSIONS = (1, 2, 3)
PART_BYTES = 1_048_576  # a part line's text, in UTF-8 bytes (JSON escaping stays in a line)
MAX_LINE_BYTES = 8 * 1_048_576  # a node and its metadata at their limits, with a vector
_HEADER_KEYS = {"format", "version", "embedder", "dimension", "scope", "entries"}
_ENTRY_KEYS = {
    "entry",
    "tags",
    "graph",
    "importance",
    "created",
    "metadata",
    "state",
    "expires",
    "scope",
    "embedding",
    "text_parts",
    "index",
}
_PART_KEYS = {"part", "text"}
VERIFY_SAMPLE = 16  # the file's vectors of new texts embedded again to check them
VECTOR_TOLERANCE = 1e-3  # |file - computed| / |computed| a kept vector may be off by

Source = str | os.PathLike[str] | IO[str]


class TransferParts(Protocol):
    """What export and import need of a memory (``Memory`` has it)."""

    @property
    def store(self) -> EntryStore: ...

    @property
    def embedder_name(self) -> str: ...


@dataclass(frozen=True, slots=True)
class ImportReport:
    """What an import wrote.

    Attributes:
        imported: the IRIs written, in the file's order.
        skipped: ``(line number, what is wrong)`` of each bad line left out (``skip_bad``).
        embedder: the header's embedder.
        vectors_kept: whether the file's vectors were kept (its embedder is the memory's, a
            sample of them checked, only those of texts the cache held no vector of taken);
            otherwise the dense index computes them again.
    """

    imported: tuple[str, ...] = ()
    skipped: tuple[tuple[int, str], ...] = ()
    embedder: str = ""
    vectors_kept: bool = False


@dataclass(slots=True)
class _Parsed:
    header: dict[str, Any] = field(default_factory=dict)
    items: list[Restored] = field(default_factory=list)
    texts: list[str] = field(default_factory=list)
    vectors: list[list[float]] = field(default_factory=list)
    owners: list[tuple[int, str]] = field(default_factory=list)  # each vector's line and IRI
    wholes: list[tuple[Restored, str]] = field(default_factory=list)
    problems: list[tuple[int, str]] = field(default_factory=list)
    waiting: _Waiting | None = None
    lines: dict[str, int] = field(default_factory=dict)  # each entry's IRI: its line


@dataclass(slots=True)
class _Waiting:
    """An entry line whose text comes on the part lines after it, until they all came."""

    number: int
    item: Restored
    text: str
    vector: list[float] | None
    parts: int
    got: list[str] = field(default_factory=list)


# -- export ----------------------------------------------------------------------------------


def export_memory(
    parts: TransferParts, out: Source, *, scope: Scope | None = None, cache: CachedEmbedder
) -> int:
    """Write the memory (or one scope of it) to ``out`` as JSON Lines; return the entries.

    Args:
        parts: the memory.
        out: a path (written whole, then moved in place) or an open text file.
        scope: export only this scope's entries (as ``Memory.forget`` would find them).
        cache: the memory's embedder, whose vectors go with the entries.

    Raises:
        InvalidInputError: ``scope`` is not a ``Scope`` or ``out`` is neither a path nor a file.
        StorageError: the store failed or the file cannot be written.
    """
    if scope is not None and not isinstance(scope, Scope):
        raise InvalidInputError(f"scope must be a Scope or None, got {preview(scope)}")
    batches = list(_batches(parts.store, scope))
    count = sum(len(batch) for batch in batches)
    header: dict[str, Any] = {
        "format": FORMAT,
        "version": VERSION,
        "embedder": parts.embedder_name,
        "dimension": cache.dimension,
        "scope": None if scope is None else scope.name,
        "entries": count,
    }
    try:
        with _Writer(out) as stream:
            stream.write(json.dumps(header, ensure_ascii=False) + "\n")
            for batch in batches:
                for line in _lines(parts.store, batch, cache):
                    stream.write(line + "\n")
    except OSError as exc:  # a full disk, a closed pipe: the path's partial file is gone
        raise StorageError(f"writing the export failed: {exc}") from exc
    return count


def _batches(store: EntryStore, scope: Scope | None) -> Iterator[list[Entry]]:
    if scope is None:
        yield from store.scan_entries()
        return
    iris = scope_entries(store, scope)
    for start in range(0, len(iris), 1_000):
        found = store.get_many(iris[start : start + 1_000])
        yield sorted(found.values(), key=lambda e: (e.created_at, e.iri))


def _lines(store: EntryStore, entries: list[Entry], cache: CachedEmbedder) -> Iterator[str]:
    fields = store.indexed_with([entry.iri for entry in entries])
    texts = [indexed_text(entry.node, fields.get(entry.iri)) for entry in entries]
    with_text = [t for t in texts if t]
    matrix = iter(cache.matrix(with_text).tolist()) if with_text else iter(())
    expiry = store.expires_at([entry.iri for entry in entries])
    for entry, text in zip(entries, texts, strict=True):
        vector = next(matrix) if text else None
        line = entry_record(entry, expiry.get(entry.iri), vector, index=fields.get(entry.iri))
        whole = store.full_text(entry.iri) if is_head(entry.node.get("text")) else None
        parts = split_text(whole, PART_BYTES) if whole is not None and whole != text else []
        if parts:
            line["text_parts"] = len(parts)
        yield json.dumps(line, ensure_ascii=False, allow_nan=False)
        for number, part in enumerate(parts):
            yield json.dumps({"part": number, "text": part}, ensure_ascii=False)


def entry_record(
    entry: Entry,
    expires: float | None,
    embedding: list[float] | None = None,
    *,
    index: IndexFields = None,
) -> dict[str, Any]:
    """Return the export record of one entry (a line of the file, before JSON).

    Args:
        entry: the entry as the store gave it.
        expires: when it expires (``EntryStore.expires_at``), or ``None``.
        embedding: its vector, when it has text and one goes with it.
        index: its index fields (``EntryStore.indexed_with``); ``None``, the default, is left
            out of the record.
    """
    scopes = [t[len(TAG_PREFIX) :] for t in entry.tags if t.startswith(TAG_PREFIX)]
    record: dict[str, Any] = {
        "entry": entry.node,
        "tags": list(entry.tags),
        "graph": entry.named_graph,
        "importance": entry.importance,
        "created": entry.created_at,
        "metadata": entry.metadata,
        "state": entry.mesi_state.value,
        "expires": expires,
        "scope": scopes[0] if scopes else None,
    }
    if embedding is not None:
        record["embedding"] = embedding
    if index is not None:
        record["index"] = index if index is False else list(index)
    return record


class _Writer:
    """A text stream to write to: the file given, or a temporary file moved onto the path."""

    def __init__(self, out: Source) -> None:
        self.out = out
        self.path: Path | None = None
        self.stream: IO[str] | None = None

    def __enter__(self) -> IO[str]:
        if isinstance(self.out, (str, os.PathLike)):
            self.path = Path(self.out)
            try:
                self.stream = open(
                    self.path.with_name(self.path.name + ".partial"), "w", encoding="utf-8"
                )
            except (OSError, ValueError) as exc:  # ValueError: a NUL byte in the path
                raise InvalidInputError(f"cannot write {str(self.path)!r}: {exc}") from exc
            return self.stream
        binary = isinstance(self.out, (io.BufferedIOBase, io.RawIOBase)) or "b" in str(
            getattr(self.out, "mode", "")  # a tempfile wrapper of a binary file
        )
        if isinstance(self.out, io.TextIOBase) or (
            not binary and callable(getattr(self.out, "write", None))
        ):
            return self.out
        raise InvalidInputError(f"out must be a path or a text file, got {preview(self.out)}")

    def __exit__(self, kind: object, *rest: object) -> None:
        if self.stream is None or self.path is None:
            return
        partial = Path(self.stream.name)
        try:
            self.stream.close()  # (its last write may fail here)
        except OSError:
            partial.unlink(missing_ok=True)
            raise
        if kind is None:
            try:
                os.replace(partial, self.path)
            except OSError as exc:  # the path is a directory, say
                partial.unlink(missing_ok=True)
                raise InvalidInputError(f"cannot write {str(self.path)!r}: {exc}") from exc
        else:
            partial.unlink(missing_ok=True)


# -- import ----------------------------------------------------------------------------------


def import_memory(
    parts: TransferParts,
    source: Source,
    *,
    cache: CachedEmbedder,
    skip_bad: bool = False,
    keep_vectors: bool = True,
) -> ImportReport:
    """Read a JSON Lines export into the memory (see the module); return what was written.

    Args:
        parts: the memory.
        source: a path or an open text file.
        cache: the memory's embedder, which keeps the file's vectors when it made them.
        skip_bad: import the good lines and list the bad ones, instead of writing nothing.
        keep_vectors: take the file's vectors of texts the cache has none of, once a sample of
            them is verified; ``False`` drops them all (the dense index computes them).

    Raises:
        MalformedImportError: a line is malformed (and ``skip_bad`` is off, or the header is),
            or a vector of the file is not what the memory's embedder gives its text (even
            with ``skip_bad``); nothing was written. Its ``problems`` list each bad line.
        InvalidInputError: ``source`` cannot be read, or ``skip_bad`` or ``keep_vectors`` is
            not a bool.
        EmbedderError: the embedder failed while verifying; nothing was written.
    """
    if not isinstance(keep_vectors, bool):
        raise InvalidInputError(f"keep_vectors must be a bool, got {preview(keep_vectors)}")
    if not isinstance(skip_bad, bool):  # "no" would skip: any non-empty string is true
        raise InvalidInputError(f"skip_bad must be a bool, got {preview(skip_bad)}")
    parsed = _parse(source, parts.store)
    header_bad = any(number == 1 for number, _ in parsed.problems) or not parsed.header
    if parsed.problems and (not skip_bad or header_bad):
        shown = "; ".join(f"line {n}: {why}" for n, why in parsed.problems[:10])
        more = len(parsed.problems) - 10
        raise MalformedImportError(
            f"the import file has {len(parsed.problems)} bad line(s), nothing was written: "
            f"{shown}{f' (and {more} more)' if more > 0 else ''}",
            parsed.problems,
        )
    matched = keep_vectors and parsed.header.get("embedder") == parts.embedder_name
    if matched and parsed.texts:
        texts, vectors = _verified_new(parsed, cache)
        if texts:
            cache.remember(texts, vectors)
    with parts.store.transaction():
        iris = parts.store.restore_many(parsed.items) if parsed.items else []
        for item, whole in parsed.wholes:
            restore_whole(parts.store, item, whole)
    return ImportReport(
        imported=tuple(iris),
        skipped=tuple(parsed.problems),
        embedder=str(parsed.header.get("embedder", "")),
        vectors_kept=matched,
    )


def _verified_new(parsed: _Parsed, cache: CachedEmbedder) -> tuple[list[str], list[list[float]]]:
    """Return the file's texts the cache has no vector of, with their vectors, once a random
    sample of them agrees with the embedder (see the module).

    Raises:
        MalformedImportError: a text's vectors in the file disagree with one another, or a
            sampled one with the embedder; it names the first such entry of the file.
    """
    first: dict[str, int] = {}  # a text -> its first vector's position in parsed
    for at, text in enumerate(parsed.texts):
        seen = first.setdefault(text, at)
        if seen != at and not _agree(parsed.vectors[at], parsed.vectors[seen]):
            _refuse(parsed, at, f"its vector differs from the one on line {parsed.owners[seen][0]}")
    new = cache.missing(list(first))
    if not new:
        return [], []
    sample = sorted(SystemRandom().sample(new, min(VERIFY_SAMPLE, len(new))), key=first.__getitem__)
    computed = cache.inner.embed_documents(sample)
    vectors = {text: parsed.vectors[first[text]] for text in new}
    for text, vector in zip(sample, computed, strict=True):
        if not _agree(vectors[text], vector):
            _refuse(parsed, first[text], f"its vector is not what {cache.name} gives its text")
        vectors[text] = [float(x) for x in vector]
    return list(vectors), list(vectors.values())


def _agree(given: Sequence[float], computed: Sequence[float]) -> bool:
    """Whether ``given`` is ``computed`` within ``VECTOR_TOLERANCE`` of its length."""
    a, b = np.asarray(given, dtype=np.float64), np.asarray(computed, dtype=np.float64)
    if a.shape != b.shape:
        return False
    scale = max(float(np.linalg.norm(b)), 1e-6)
    return float(np.linalg.norm(a - b)) <= VECTOR_TOLERANCE * scale


def _refuse(parsed: _Parsed, at: int, why: str) -> NoReturn:
    number, iri = parsed.owners[at]
    raise MalformedImportError(
        f"the vector of {preview(iri)} on line {number} cannot be trusted ({why}); nothing "
        "was written (keep_vectors=False imports the file with its vectors computed again)",
        [(number, why)],
    )


def _parse(source: Source, store: EntryStore) -> _Parsed:
    parsed = _Parsed()
    last = entries = 0  # the last line's number; the entry lines read, good or bad
    for number, line in _read_lines(source):
        last, part = number, False
        try:
            value = _json(line)
            if number == 1:
                parsed.header = _header(value)
            elif isinstance(value, dict) and "part" in value:
                part = True
                _part(value, parsed)
            else:
                _close(parsed)
                _entry(value, parsed, store, number)
        except (GlidingError, ValueError, TypeError) as exc:
            parsed.problems.append((number, str(exc)[:300]))
        entries += number > 1 and not part
    _close(parsed)
    announced = parsed.header.get("entries")
    if isinstance(announced, int) and entries < announced:  # cut short at the end of a line
        parsed.problems.append(
            (last + 1, f"the header announces {announced} entries, {entries} came")
        )
    return parsed


def _read_lines(source: Source) -> Iterator[tuple[int, str | None]]:
    if isinstance(source, (str, os.PathLike)):
        try:
            stream: IO[str] = open(source, encoding="utf-8", newline="\n")  # noqa: SIM115
        except (OSError, ValueError) as exc:  # ValueError: a NUL byte in the path
            raise InvalidInputError(f"cannot read {str(source)!r}: {exc}") from exc
        with stream:
            yield from _numbered(stream)
    elif callable(getattr(source, "readline", None)):
        yield from _numbered(source)
    else:
        raise InvalidInputError(f"source must be a path or a text file, got {preview(source)}")


def _numbered(stream: IO[str]) -> Iterator[tuple[int, str | None]]:
    """Number the non-blank lines, each read at most ``MAX_LINE_BYTES`` characters at a time:
    a longer one is given as ``None``, never held whole."""
    number = 0
    while True:
        try:
            line = stream.readline(MAX_LINE_BYTES + 1)
        except UnicodeDecodeError as exc:
            raise MalformedImportError(
                f"the import file is not UTF-8 text after line {number}: {exc}",
                [(number + 1, "not UTF-8 text")],
            ) from None
        if not line:
            return
        number += 1
        if len(line) > MAX_LINE_BYTES and not line.endswith("\n"):
            while (rest := stream.readline(MAX_LINE_BYTES)) and not rest.endswith("\n"):
                pass
            yield number, None
            continue
        if line.strip() or number == 1:
            yield number, line


def _json(line: str | None) -> Any:
    if line is None:
        raise InvalidInputError(f"the line is longer than {MAX_LINE_BYTES} characters")
    try:
        return json.loads(line, parse_constant=_no_constant)
    except RecursionError:
        raise InvalidInputError("the line nests too deep") from None
    except json.JSONDecodeError as exc:
        raise InvalidInputError(f"not JSON: {exc.msg} at column {exc.colno}") from None


def _no_constant(name: str) -> None:
    raise InvalidInputError(f"{name} is not a JSON number")


def _header(value: Any) -> dict[str, Any]:
    if not isinstance(value, dict) or value.get("format") != FORMAT:
        raise InvalidInputError(f"the first line is not a {FORMAT} header")
    if value.get("version") not in READABLE_VERSIONS:
        raise InvalidInputError(
            f"format version {preview(value.get('version'))} is not one of {READABLE_VERSIONS}"
        )
    unknown = set(value) - _HEADER_KEYS
    if unknown:
        raise InvalidInputError(f"unknown header keys {sorted(unknown)[:5]}")
    if not isinstance(value.get("embedder"), str):
        raise InvalidInputError("the header names no embedder")
    entries = value.get("entries")
    if entries is not None and (
        isinstance(entries, bool) or not isinstance(entries, int) or entries < 0
    ):
        raise InvalidInputError(f"entries {preview(entries)} is not a count")
    dimension = value.get("dimension")
    if dimension is not None and (
        isinstance(dimension, bool) or not isinstance(dimension, int) or not 0 < dimension < 65_536
    ):
        raise InvalidInputError(f"dimension {preview(dimension)} is not a vector size")
    return value


def _entry(value: Any, parsed: _Parsed, store: EntryStore, number: int) -> None:
    """Check one entry line and add it to ``parsed`` (nothing is added when it is bad); one
    whose text comes in parts waits for its part lines."""
    if not parsed.header:
        raise InvalidInputError("no valid header before this line")
    item, text, vector = read_record(value, store, dimension=parsed.header.get("dimension"))
    iri = str(item.record.node.get("@id"))
    if iri in parsed.lines:  # an export holds an entry once: which of the two is meant?
        raise InvalidInputError(
            f"the entry {preview(iri)} came before, on line {parsed.lines[iri]}"
        )
    parsed.lines[iri] = number
    count = value.get("text_parts")
    if count is None:
        _add(parsed, item, text, vector, number)
        return
    if isinstance(count, bool) or not isinstance(count, int) or not 0 < count <= 1_000_000:
        raise InvalidInputError(f"'text_parts' must be a count of lines, got {preview(count)}")
    if not is_head(item.record.node.get("text")):
        raise InvalidInputError("'text_parts' is given, but the entry's text is not a head")
    parsed.waiting = _Waiting(number, item, text, vector, count)


def _add(
    parsed: _Parsed, item: Restored, text: str, vector: list[float] | None, number: int
) -> None:
    parsed.items.append(item)
    if text and vector is not None:
        parsed.texts.append(text)
        parsed.vectors.append(vector)
        parsed.owners.append((number, str(item.record.node["@id"])))


def _part(value: dict[str, Any], parsed: _Parsed) -> None:
    """Check one part line: the next part of the entry waiting for its text."""
    waiting = parsed.waiting
    if waiting is None:
        raise InvalidInputError("a part line with no entry waiting for its text before it")
    if set(value) != _PART_KEYS:
        raise InvalidInputError(f"a part line has exactly the keys {sorted(_PART_KEYS)}")
    if value["part"] != len(waiting.got) or not isinstance(value["text"], str):
        raise InvalidInputError(
            f"expected part {len(waiting.got)} of the entry on line {waiting.number} as text,"
            f" got part {preview(value['part'])}"
        )
    if len(waiting.got) == waiting.parts:
        raise InvalidInputError(f"the entry on line {waiting.number} has {waiting.parts} parts")
    waiting.got.append(value["text"])


def _close(parsed: _Parsed) -> None:
    """Take the waiting entry in when its parts all came, else list it as a bad line."""
    waiting, parsed.waiting = parsed.waiting, None
    if waiting is None:
        return
    if len(waiting.got) != waiting.parts:
        parsed.problems.append(
            (waiting.number, f"{waiting.parts} part lines announced, {len(waiting.got)} came")
        )
        return
    _add(parsed, waiting.item, waiting.text, waiting.vector, waiting.number)
    parsed.wholes.append((waiting.item, "".join(waiting.got)))


def restore_whole(store: EntryStore, item: Restored, text: str) -> None:
    """Give a restored entry its whole text back, in parts as it was kept, with its own index
    fields (the write makes the entry exactly this node, as ``replace`` does: without them it
    would take the configured ones, or the default)."""
    record = item.record
    store.put_text(
        record.node,
        text,
        tags=record.tags,
        importance=record.importance,
        named_graph=record.named_graph,
        metadata=record.metadata,
        index=record.index,
    )


def read_record(
    value: Any, store: EntryStore, *, dimension: Any = None
) -> tuple[Restored, str, list[float] | None]:
    """Check one export record as untrusted input; return it to restore, its text, its vector.

    Args:
        value: the parsed record (``entry_record``'s shape).
        store: the store it is for: its limits (depth, size) apply.
        dimension: the vector size the header states, when it states one.

    Raises:
        InvalidInputError: a key is unknown, a field has the wrong type or range, or the entry
            is over the store's limits (named in the message).
    """
    if not isinstance(value, dict):
        raise InvalidInputError("an entry line must be a JSON object")
    unknown = set(value) - _ENTRY_KEYS
    if unknown:
        raise InvalidInputError(f"unknown keys {sorted(unknown)[:5]}")
    node = value.get("entry")
    if not isinstance(node, dict) or not isinstance(node.get("@id"), str):
        raise InvalidInputError("'entry' must be a JSON-LD node with an @id")
    tags = value.get("tags", [])
    if not isinstance(tags, list):
        raise InvalidInputError("'tags' must be a list")
    state = value.get("state", "S")
    if state not in {s.value for s in MesiState}:
        raise InvalidInputError(f"'state' {preview(state)} is not M, E, S or I")
    record = Record(
        node,
        tags=tags,
        importance=_number(value.get("importance", 0.5), "importance"),
        named_graph=value.get("graph"),
        metadata=_mapping(value.get("metadata", {})),
        mesi_state=state,
        index=value.get("index"),
    )
    missing = unselected(record.node, record.index)
    if missing:
        raise InvalidInputError(f"index field {missing[0]!r} selects nothing in the entry")
    config = store.config
    if record.depth > config.max_depth:
        raise InvalidInputError(f"the entry nests {record.depth} deep, over {config.max_depth}")
    if len(record.content.encode("utf-8")) > config.max_content_bytes:
        raise InvalidInputError(f"the entry is over {config.max_content_bytes} bytes")
    created = _number(value.get("created"), "created")
    expires = value.get("expires")
    expires = None if expires is None else _number(expires, "expires")
    text = indexed_text(record.node, record.index)
    vector = _vector(value.get("embedding"), dimension) if text else None
    return Restored(record, created, expires), text, vector


def _number(value: Any, what: str) -> float:
    number = math.nan
    if not isinstance(value, bool) and isinstance(value, (int, float)):
        with contextlib.suppress(OverflowError):  # an int too large for a float stays NaN
            number = float(value)
    if not math.isfinite(number):
        raise InvalidInputError(f"{what!r} must be a finite number, got {preview(value)}")
    return number


def _mapping(value: Any) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise InvalidInputError("'metadata' must be a JSON object")
    return value


def _vector(value: Any, dimension: Any) -> list[float] | None:
    if value is None:
        return None
    if not isinstance(value, list) or (isinstance(dimension, int) and len(value) != dimension):
        raise InvalidInputError(f"'embedding' must be a list of {dimension} numbers")
    return [_number(x, "embedding") for x in value]
