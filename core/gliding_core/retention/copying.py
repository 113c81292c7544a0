"""Memory: copying a memory from one place to another (a directory, a PostgreSQL schema), verified.

``copy_memory(source, target)`` moves a memory up (a directory to a database shared by a fleet
of workers) or back down. What it carries is L0, whole: every live entry, exactly (IRI, node,
tags, graph, importance, metadata, MESI state, creation time, expiry, index fields), and the
whole text of an entry kept in parts (``EntryStore.put_text``). That is every durable thing a
user would lose, because the layers above keep their durable state as L0 entries:

=========================  =====================================================================
carried (L0 entries)       session turns and summaries, the adapters' chat logs (and their
                           ``ChatMarks``), supplementary inputs (pending ones stay pending,
                           consumed ones keep their audit), LangGraph store items, knowledge,
                           the blackboard nodes flushed to L0 (write-back)
not carried: derived       the dense index (the target's follows its change log when it next
                           opens with its engines: vectors are computed again, by the embedder
                           it opens with), the Poincaré index, the embedding cache
not carried: running       the blackboard's graph (its nodes reach L0 by write-back: close the
agents' state              memory, which flushes, before copying), its coordination store
                           (leases, fencing tokens and agents' heartbeats describe processes
                           alive on the source; tasks and messages refer to that graph) and the
                           coherence directory (copies held by running processes)
not carried: statistics    read counts (``access_count``, ``last_accessed``) and generations
                           start again on the target
=========================  =====================================================================

The records are export records (``retention.transfer.entry_record``) and each is checked as an
import checks a line of a file (``read_record``: types, ranges, the target's size and depth
limits), so a hostile or damaged source is refused like a hostile file. Order of a copy:

1. both places are checked and opened: a directory's owner lock is taken (no memory may run
   its engines there meanwhile); a target that holds entries is refused unless ``merge``;
2. the source is read a batch at a time and written inside one transaction of the target:
   a bad entry anywhere rolls the whole copy back (``MalformedImportError`` lists them), so
   nothing is written half-way; a directory the copy created is removed again (a failure
   after the commit leaves the target as written, for the user to look at);
3. after the commit both sides are read again through ``EntryStore``, the same way
   (``census``): per kind of entry, a count and a SHA-256 over every entry's digest. A row
   missing, altered or (without ``merge``) added raises ``CopyVerificationError`` naming the
   kind and the IRIs; only then does the copy report success.

Invariants: the source is only read; a password of a database URL appears in no message,
``repr`` or report (``mask_url``).
"""

from __future__ import annotations

import hashlib
import os
import shutil
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from gliding_core.attention.supplementary import IRI_PREFIX as SUPPLEMENT_PREFIX
from gliding_core.config import (
    MemoryConfig,
    check_database_url,
    is_database_url,
    mask_url,
    not_a_directory,
)
from gliding_core.errors import (
    CopyVerificationError,
    GlidingError,
    InvalidInputError,
    MalformedImportError,
    TargetNotEmptyError,
)
from gliding_core.fields import IndexFields
from gliding_core.jsonld import canonical_json, preview
from gliding_core.retention.transfer import entry_record, read_record, restore_whole
from gliding_core.storage import STORE_FILE, storage_for
from gliding_core.store.entry import Entry, Restored
from gliding_core.store.parts import is_head
from gliding_core.store.protocol import EntryStore
from gliding_core.view.chatlog import ACTIVE, CLEARED

BATCH = 500
SHOWN = 5  # IRIs named per difference in a message

Progress = Callable[[str, int, int], None]
"""Told ``(phase, done, total)`` as a copy goes: ``"copy"``, then ``"verify source"`` and
``"verify target"`` (entries)."""

KINDS: tuple[tuple[str, Callable[[Entry], bool]], ...] = (
    ("supplementary inputs", lambda e: e.iri.startswith(SUPPLEMENT_PREFIX)),
    ("chat log", lambda e: ACTIVE in e.tags or CLEARED in e.tags),
    ("session turns", lambda e: "turn" in e.tags),
    ("blackboard flushes", lambda e: "l2_generation" in e.metadata),
    ("other entries", lambda e: True),
)
"""The kinds a verification counts and hashes apart, first match wins: an entry's kind."""


@dataclass(frozen=True, slots=True)
class Place:
    """One side of a copy: a memory directory, or a schema of a PostgreSQL database.

    Build one with ``Place.parse``. ``url`` holds the connection string (with its password,
    when it has one): it is never shown; ``describe()`` masks it.
    """

    kind: Literal["directory", "postgresql"]
    directory: Path | None = None
    url: str | None = field(default=None, repr=False)
    schema: str | None = None

    @classmethod
    def parse(cls, text: object, *, schema: str | None = None) -> Place:
        """Return the place ``text`` names: a ``postgresql://`` URL (in ``schema``, else
        ``GLIDING_DATABASE_SCHEMA``, else ``gliding``) or a directory path.

        Raises:
            InvalidInputError: ``text`` is empty, a URL of another scheme, or a malformed
                PostgreSQL URL (shown masked); ConfigError: ``schema`` is not a usable name.
        """
        if isinstance(text, Path):
            text = str(text)
        if not isinstance(text, str) or not text or "\0" in text:
            raise InvalidInputError(
                f"a copy needs a directory or a PostgreSQL URL, got {preview(text)}"
            )
        if is_database_url(text):
            try:
                check_database_url(text)
            except ValueError as exc:
                raise InvalidInputError(str(exc)) from None
            overrides: dict[str, Any] = {"database_url": text}
            if schema is not None:
                overrides["database_schema"] = schema
            config = MemoryConfig.from_env(**overrides)
            return cls("postgresql", url=text, schema=config.database_schema)
        why = not_a_directory(text)
        if why is not None:
            raise InvalidInputError(
                f"{why}: neither a directory nor a PostgreSQL URL"
                " (postgresql://user@host:5432/db); a copy goes between those"
            )
        return cls("directory", directory=Path(text))

    def describe(self) -> str:
        """Say where this is, with no secret in it."""
        if self.directory is not None:
            return str(self.directory)
        return f"{mask_url(self.url or '')} schema {self.schema}"

    def same_as(self, other: Place) -> bool:
        """Whether both name one memory (one directory, or one database's one schema)."""
        if self.directory is not None and other.directory is not None:
            return _resolved(self.directory) == _resolved(other.directory)
        if self.url is None or other.url is None:
            return False
        return self.schema == other.schema and _database(self.url) == _database(other.url)


@dataclass(frozen=True, slots=True)
class Difference:
    """What differs in one kind of entry between a copy's source and its target.

    Attributes:
        kind: the kind (``KINDS``).
        source_entries, target_entries: how many entries of the kind each side holds.
        missing: IRIs in the source, not in the target (all of them).
        altered: IRIs on both sides whose entries differ.
        extra: IRIs in the target, not in the source (only when not merging).
    """

    kind: str
    source_entries: int
    target_entries: int
    missing: tuple[str, ...] = ()
    altered: tuple[str, ...] = ()
    extra: tuple[str, ...] = ()

    def describe(self) -> str:
        """One clause: the kind, its counts and the first IRIs of each sort of difference."""
        counts = f"{self.source_entries} in the source, {self.target_entries} in the target"
        parts = [f"{self.kind}: {counts}"]
        sorts = {"missing": self.missing, "altered": self.altered, "extra": self.extra}
        for name, iris in sorts.items():
            if iris:
                more = f" and {len(iris) - SHOWN} more" if len(iris) > SHOWN else ""
                parts.append(f"{len(iris)} {name} ({', '.join(iris[:SHOWN])}{more})")
        return ", ".join(parts)


@dataclass(slots=True)
class Census:
    """Every live entry of a store as a verification sees it: ``iri -> (kind, digest)``."""

    entries: dict[str, tuple[str, str]] = field(default_factory=dict)

    def summary(self, iris: set[str] | None = None) -> dict[str, tuple[int, str]]:
        """Per kind: the count and a SHA-256 over the entries' digests, in IRI order (of the
        entries among ``iris`` when given)."""
        kinds: dict[str, list[str]] = {name: [] for name, _ in KINDS}
        for iri in sorted(self.entries if iris is None else iris & self.entries.keys()):
            kind, digest = self.entries[iri]
            kinds[kind].append(f"{iri}\t{digest}\n")
        return {
            kind: (len(lines), hashlib.sha256("".join(lines).encode("utf-8")).hexdigest())
            for kind, lines in kinds.items()
        }


@dataclass(frozen=True, slots=True)
class CopyReport:
    """What a verified copy wrote.

    Attributes:
        source, target: where from and where to (passwords masked).
        copied: the entries copied.
        texts_in_parts: how many of them keep a text in parts (copied whole).
        target_before: the entries the target held before (``merge``).
        kinds: per kind, the entries copied and their SHA-256 (equal on both sides).
    """

    source: str
    target: str
    copied: int
    texts_in_parts: int
    target_before: int
    kinds: dict[str, tuple[int, str]]


def copy_memory(
    source: Place,
    target: Place,
    *,
    merge: bool = False,
    config: MemoryConfig | None = None,
    progress: Progress | None = None,
    before_verify: Callable[[EntryStore], None] | None = None,
) -> CopyReport:
    """Copy the memory at ``source`` into ``target``, verify it, and return what was copied.

    Args:
        source: the memory to copy (only read).
        target: where to copy it: a directory (created when missing) or a database schema
            (created on first use).
        merge: copy into a target that already holds entries (an entry of the same IRI is
            replaced by the source's); by default such a target is refused.
        config: settings of both sides (the store's limits, the database timeouts);
            ``MemoryConfig.from_env()`` when omitted.
        progress: told how far the copy has gone (``Progress``).
        before_verify: called with the target's store after the commit, before the
            verification reads it back (a check of one's own; a test's fault).

    Raises:
        InvalidInputError: a place is not a ``Place``, both name one memory, the source holds
            no memory or cannot be read, or the target cannot be a directory.
        TargetNotEmptyError: the target holds entries and ``merge`` is off.
        MalformedImportError: entries of the source are malformed or over the target's limits;
            nothing was written (``problems`` lists them, by position in the source).
        CopyVerificationError: the target, read back, differs from the source.
        StorageError: a store failed (``DirectoryInUseError``: a memory runs its engines in a
            directory; ``DatabaseUnavailableError``: PostgreSQL did not answer).
    """
    _check_places(source, target)
    _check_options(merge, config, progress, before_verify)
    config = config or MemoryConfig.from_env()
    tell = progress or _silent
    created = _check_target(target)
    committed = False
    try:
        with ExitStack() as closer:
            if source.url is not None:
                _check_source_schema(source, config)
            source_store = _open(source, config, closer)
            target_store = _open(target, config, closer)
            before = _check_empty(target, target_store, merge=merge)
            total = source_store.count()
            copied, parts = _write(source_store, target_store, total, tell)
            committed = True  # from here on, a failure leaves the target for the user to see
            if before_verify is not None:
                before_verify(target_store)
            kinds = _verify(source_store, target_store, merge=merge, tell=tell)
    except BaseException:
        if created is not None and not committed:
            shutil.rmtree(created, ignore_errors=True)
        raise
    return CopyReport(source.describe(), target.describe(), copied, parts, before, kinds)


def _check_options(merge: object, config: object, progress: object, before_verify: object) -> None:
    if not isinstance(merge, bool):
        raise InvalidInputError(f"merge must be True or False, got {preview(merge)}")
    if config is not None and not isinstance(config, MemoryConfig):
        raise InvalidInputError(f"config must be a MemoryConfig or None, got {preview(config)}")
    for name, value in (("progress", progress), ("before_verify", before_verify)):
        if value is not None and not callable(value):
            raise InvalidInputError(f"{name} must be callable or None, got {preview(value)}")


def _silent(phase: str, done: int, total: int) -> None:
    return None


# -- places ----------------------------------------------------------------------------------


def _check_places(source: Place, target: Place) -> None:
    for name, place in (("source", source), ("target", target)):
        if not isinstance(place, Place):
            raise InvalidInputError(
                f"the {name} must be a Place (Place.parse), got {preview(place)}"
            )
    if source.same_as(target):
        raise InvalidInputError(
            f"the source and the target are one memory ({target.describe()}): copy to another"
            " directory, database or schema"
        )
    if source.directory is not None:
        _check_source_directory(source.directory)


def _check_source_directory(directory: Path) -> None:
    where = str(directory)
    if not directory.exists():
        raise InvalidInputError(f"the source {where!r} does not exist")
    if not directory.is_dir():
        raise InvalidInputError(f"the source {where!r} is not a directory")
    store = directory / STORE_FILE
    if not store.is_file():
        raise InvalidInputError(f"the source {where!r} holds no memory ({STORE_FILE})")
    if not (os.access(directory, os.R_OK | os.X_OK) and os.access(store, os.R_OK)):
        raise InvalidInputError(f"the source {where!r} cannot be read (permissions)")


def _check_source_schema(source: Place, config: MemoryConfig) -> None:
    """Refuse a source database schema that does not exist (opening it would create it)."""
    from gliding_core.store.postgres import Database, DatabaseSettings

    url, schema = source.url or "", source.schema or ""
    settings = DatabaseSettings(max_connections=1, timeout_s=config.database_timeout_s)
    database = Database(url, schema=schema, settings=settings)
    try:
        with database.translated("looking for the source's schema"), database.connection() as c:
            found = c.execute("SELECT 1 FROM pg_namespace WHERE nspname = %s", (schema,)).fetchone()
    finally:
        database.close()
    if found is None:
        raise InvalidInputError(
            f"the source {source.describe()} holds no memory: the database has no schema"
            f" {schema!r} (--source-schema names another)"
        )


def _check_target(target: Place) -> Path | None:
    """Create a target directory that is missing; return it when this copy created it."""
    directory = target.directory
    if directory is None:
        return None
    where = str(directory)
    if directory.exists():
        if not directory.is_dir():
            raise InvalidInputError(f"the target {where!r} exists and is not a directory")
        if not os.access(directory, os.W_OK | os.X_OK):
            raise InvalidInputError(f"the target {where!r} cannot be written (permissions)")
        return None
    first = next((p for p in reversed(directory.parents) if not p.exists()), directory)
    try:
        directory.mkdir(parents=True)
    except OSError as exc:
        raise InvalidInputError(f"the target {where!r} cannot be created: {exc}") from None
    return first


def _open(place: Place, config: MemoryConfig, closer: ExitStack) -> EntryStore:
    """Open the place's L0 store, as its memory would, taking a directory's owner lock."""
    if place.url is not None:
        settings = {**dict(config), "database_url": place.url, "database_schema": place.schema}
        config = MemoryConfig(**settings)
    storage = storage_for(place.directory, config)
    storage.claim(engines=True, closer=closer)
    return storage.open_store(closer)


def _check_empty(target: Place, store: EntryStore, *, merge: bool) -> int:
    held = store.count()
    if held and not merge:
        raise TargetNotEmptyError(
            f"the target {target.describe()} already holds {held} entries: give --merge"
            " (merge=True) to copy into it, or choose an empty target",
            entries=held,
        )
    return held


def _resolved(directory: Path) -> Path:
    try:
        return directory.resolve()
    except OSError:
        return directory.absolute()


def _database(url: str) -> tuple[str, ...]:
    """What names a database in ``url``: host, port, database and user (never the password)."""
    try:
        from psycopg.conninfo import conninfo_to_dict

        given = conninfo_to_dict(url)
    except Exception:
        return (mask_url(url),)
    keys = ("host", "hostaddr", "port", "dbname", "user")
    return tuple(str(given.get(key) or "") for key in keys)


# -- the copy --------------------------------------------------------------------------------


def _write(source: EntryStore, target: EntryStore, total: int, tell: Progress) -> tuple[int, int]:
    """Copy every entry in one transaction of the target; return (entries, texts in parts).

    Every entry is checked; after the first bad one nothing more is written, the rest are
    checked still, and the transaction rolls back with all of them named.
    """
    problems: list[tuple[int, str]] = []
    copied = parts = 0
    with target.transaction():
        for items, wholes in _batches(source, target, problems):
            if not problems:
                target.restore_many(items)
                for item, text in wholes:
                    restore_whole(target, item, text)
            copied += len(items)
            parts += len(wholes)
            tell("copy", min(copied + len(problems), total), total)
        if problems:
            raise _malformed(problems)
    return copied, parts


def _batches(
    source: EntryStore, target: EntryStore, problems: list[tuple[int, str]]
) -> Iterator[tuple[list[Restored], list[tuple[Restored, str]]]]:
    """Yield the source's entries checked for the target, a batch at a time, with the whole
    text of each one kept in parts; a bad entry goes to ``problems`` instead."""
    position = 0
    for batch in _scan(source):
        expiry = source.expires_at([entry.iri for entry in batch])
        fields = _index_fields(source, [entry.iri for entry in batch])
        items: list[Restored] = []
        wholes: list[tuple[Restored, str]] = []
        for entry in batch:
            position += 1
            try:
                index = fields.get(entry.iri)
                if isinstance(index, Exception):
                    raise index
                record = entry_record(entry, expiry.get(entry.iri), index=index)
                item, _, _ = read_record(record, target)
                if is_head(item.record.node.get("text")):
                    wholes.append((item, _whole_text(source, entry.iri)))
            except (GlidingError, ValueError, TypeError, RecursionError) as exc:
                problems.append((position, f"{entry.iri}: {str(exc)[:300]}"))
                continue
            items.append(item)
        yield items, wholes


def _index_fields(source: EntryStore, iris: list[str]) -> dict[str, IndexFields | Exception]:
    """The index fields of ``iris`` in the source; where a batch's cannot be read (a damaged
    row), each entry's, the error in place of the fields of an entry whose row is damaged."""
    try:
        return dict(source.indexed_with(iris))
    except (GlidingError, ValueError, TypeError, RecursionError):
        found: dict[str, IndexFields | Exception] = {}
        for iri in iris:
            try:
                found.update(source.indexed_with([iri]))
            except (GlidingError, ValueError, TypeError, RecursionError) as exc:
                found[iri] = exc
        return found


def _scan(source: EntryStore) -> Iterator[list[Entry]]:
    """The source's live entries a batch at a time. A row the store cannot give back at all
    (its tags or metadata damaged, not only its node) ends the copy as malformed."""
    batches, given = source.scan_entries(BATCH), 0
    while True:
        try:
            batch = next(batches)
        except StopIteration:
            return
        except GlidingError:
            raise
        except (ValueError, LookupError, TypeError, RecursionError) as exc:
            where = given + 1
            raise MalformedImportError(
                f"the source cannot be read from entry {where} on, nothing was written: {exc}",
                [(where, f"unreadable row: {str(exc)[:300]}")],
            ) from None
        given += len(batch)
        yield batch


def _whole_text(source: EntryStore, iri: str) -> str:
    text = source.full_text(iri)
    if text is None:
        raise InvalidInputError("its text in parts was deleted while it was being copied")
    return text


def _malformed(problems: list[tuple[int, str]]) -> MalformedImportError:
    shown = "; ".join(f"entry {n}: {why}" for n, why in problems[:10])
    more = len(problems) - 10
    return MalformedImportError(
        f"the source has {len(problems)} bad entr{'y' if len(problems) == 1 else 'ies'},"
        f" nothing was written: {shown}{f' (and {more} more)' if more > 0 else ''}",
        problems,
    )


# -- verification ----------------------------------------------------------------------------


def census(store: EntryStore, *, tell: Progress | None = None, phase: str = "census") -> Census:
    """Read every live entry of ``store`` and digest it, the same way on any backend.

    An entry's digest is a SHA-256 of its IRI, node (with its whole text in place of a head
    kept in parts), tags (as a set), graph, importance, metadata, MESI state, creation time,
    expiry and index fields: what a copy carries, and nothing a copy renews (read counts,
    generation).
    """
    found = Census()
    total = store.count()
    for batch in store.scan_entries(BATCH):
        iris = [entry.iri for entry in batch]
        expiry, fields = store.expires_at(iris), store.indexed_with(iris)
        for entry in batch:
            digest = _digest(store, entry, expiry.get(entry.iri), fields.get(entry.iri))
            found.entries[entry.iri] = (_kind(entry), digest)
        if tell is not None:
            tell(phase, min(len(found.entries), total), total)
    return found


def _kind(entry: Entry) -> str:
    return next(name for name, test in KINDS if test(entry))


def _digest(
    store: EntryStore, entry: Entry, expires: float | None, index: IndexFields = None
) -> str:
    node = entry.node
    if is_head(node.get("text")):
        node = {**node, "text": store.full_text(entry.iri)}
    fields = [
        entry.iri,
        node,
        sorted(set(entry.tags)),
        entry.named_graph,
        entry.importance,
        entry.metadata,
        entry.mesi_state.value,
        entry.created_at,
        expires,
        index,
    ]
    return hashlib.sha256(canonical_json({"entry": fields}).encode("utf-8")).hexdigest()


def _verify(
    source: EntryStore, target: EntryStore, *, merge: bool, tell: Progress
) -> dict[str, tuple[int, str]]:
    """Compare both sides' census; return the copied kinds' summary, or raise what differs."""
    mine = census(source, tell=tell, phase="verify source")
    theirs = census(target, tell=tell, phase="verify target")
    differences = compare(mine, theirs, merge=merge)
    if differences:
        raise CopyVerificationError(
            "the copy, read back, differs from its source: "
            + "; ".join(d.describe() for d in differences)
            + " (the target holds what was written: remove it, or copy again with --merge)",
            differences,
        )
    return mine.summary()


def compare(source: Census, target: Census, *, merge: bool) -> list[Difference]:
    """Return what differs between two censuses, per kind (with ``merge``, the target may
    hold entries the source does not)."""
    missing: dict[str, list[str]] = {}
    altered: dict[str, list[str]] = {}
    extra: dict[str, list[str]] = {}
    for iri, (kind, digest) in sorted(source.entries.items()):
        other = target.entries.get(iri)
        if other is None:
            missing.setdefault(kind, []).append(iri)
        elif other[1] != digest:
            altered.setdefault(kind, []).append(iri)
    if not merge:
        for iri, (kind, _) in sorted(target.entries.items()):
            if iri not in source.entries:
                extra.setdefault(kind, []).append(iri)
    counted = _counts(source), _counts(target)
    kinds = [name for name, _ in KINDS if name in missing or name in altered or name in extra]
    return [
        Difference(
            kind,
            counted[0].get(kind, 0),
            counted[1].get(kind, 0),
            tuple(missing.get(kind, ())),
            tuple(altered.get(kind, ())),
            tuple(extra.get(kind, ())),
        )
        for kind in kinds
    ]


def _counts(found: Census) -> dict[str, int]:
    counts: dict[str, int] = {}
    for kind, _ in found.entries.values():
        counts[kind] = counts.get(kind, 0) + 1
    return counts


def kinds_table(report: CopyReport) -> Sequence[tuple[str, int, str]]:
    """Rows ``(kind, entries, hash head)`` of a report, for a table."""
    return [(kind, count, digest[:16]) for kind, (count, digest) in report.kinds.items()]
