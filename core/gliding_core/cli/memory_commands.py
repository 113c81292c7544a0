"""CLI: commands that change or carry what a memory holds: ``forget``, ``export``, ``import``,
``copy``.

``forget``, ``export`` and ``import`` open the directory as its owner (with its engines: the
dense index and the blackboard are reached too), with the embedder its manifest records when
this machine has it, so that nothing is re-embedded. ``copy`` opens the L0 store of each side
only (``gliding_core.retention.copying``), and shows its progress on a terminal. A command that
erases asks first on a terminal; elsewhere it needs ``--yes``.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any, TextIO
from urllib.parse import unquote

from gliding_core.cli.table import render
from gliding_core.errors import InvalidInputError
from gliding_core.hyperspace.backends import make_embedder
from gliding_core.hyperspace.embedders import Embedder, HashEmbedder
from gliding_core.memory import MANIFEST_FILE, STORE_FILE, Memory
from gliding_core.retention.copying import Place, copy_memory, kinds_table
from gliding_core.retention.erasure import ForgetReport
from gliding_core.store.scope import Scope

# The embedders a manifest may name, by the start of the name, and how to make them again.
_RECORDED = {"local:": "local", "chroma-onnx:": "chroma-onnx"}


def register(commands: Any) -> None:
    """Add the commands of this module to the ``gliding-horse`` sub-command parser."""
    forget = commands.add_parser(
        "forget",
        help="erase a user's, a thread's, a task's or some entries' data from a memory, for good",
    )
    forget.add_argument("path", type=Path, help="a memory directory (made by Memory.open)")
    target = forget.add_mutually_exclusive_group(required=True)
    target.add_argument("--user", help="a user id: everything of Scope.user(ID)")
    target.add_argument("--thread", help="a thread id: everything of Scope.thread(ID)")
    target.add_argument("--task", help="a task IRI: everything of Scope.task(IRI)")
    target.add_argument("--iri", action="append", help="an entry IRI (repeat for more)")
    forget.add_argument("--yes", action="store_true", help="do not ask (needed off a terminal)")
    forget.set_defaults(handler=forget_command)

    export = commands.add_parser("export", help="write a memory to a JSON Lines file")
    export.add_argument("path", type=Path, help="a memory directory (made by Memory.open)")
    export.add_argument("out", type=Path, help="the JSON Lines file to write")
    export.add_argument(
        "--scope", type=_scope, help="only this scope: user:ID, thread:ID, task:IRI"
    )
    export.set_defaults(handler=export_command)

    load = commands.add_parser("import", help="read a JSON Lines export into a memory")
    load.add_argument("source", type=Path, help="the JSON Lines file to read")
    load.add_argument("path", type=Path, help="the memory directory (created when missing)")
    load.add_argument(
        "--skip-bad", action="store_true", help="import the good lines and list the bad ones"
    )
    load.set_defaults(handler=import_command)

    copy = commands.add_parser(
        "copy",
        help="copy a memory between a directory and a PostgreSQL database, verified",
        description=(
            "Copy every L0 entry (turns, chat logs, supplementary inputs, flushed blackboard"
            " nodes, texts kept in parts) from SOURCE to TARGET in one transaction, then read"
            " both back and compare counts and hashes per kind. A password is best left out of"
            " the URL (PGPASSWORD or ~/.pgpass): a command line is visible to `ps`."
        ),
    )
    copy.add_argument("source", help="a memory directory or a postgresql:// URL")
    copy.add_argument("target", help="a directory (created when missing) or a postgresql:// URL")
    copy.add_argument(
        "--merge", action="store_true", help="copy into a target that already holds entries"
    )
    copy.add_argument(
        "--database-schema",
        help="the PostgreSQL schema of both sides (default: GLIDING_DATABASE_SCHEMA, else gliding)",
    )
    copy.add_argument("--source-schema", help="the source's schema (over --database-schema)")
    copy.add_argument("--target-schema", help="the target's schema (over --database-schema)")
    copy.set_defaults(handler=copy_command)


def _scope(text: str) -> Scope:
    kind, _, key = text.partition(":")
    if kind not in ("user", "thread", "task") or not key:
        raise argparse.ArgumentTypeError(f"expected user:ID, thread:ID or task:IRI, got {text!r}")
    try:
        return Scope(kind, key if kind == "task" else unquote(key))  # type: ignore[arg-type]
    except InvalidInputError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _header_embedder(source: Path) -> object:
    """The embedder the export's header names (``None`` when it cannot be read: the import
    itself then reports the header)."""
    try:
        with source.open(encoding="utf-8") as stream:
            header = json.loads(stream.readline(65_536))
    except (OSError, UnicodeError, ValueError, RecursionError):
        return None
    return header.get("embedder") if isinstance(header, dict) else None


def export_command(args: argparse.Namespace, out: TextIO) -> int:
    """``gliding-horse export DIR OUT.jsonl [--scope user:alice]``."""
    with open_directory(args.path) as memory:
        count = memory.export_jsonl(args.out, scope=args.scope)
    out.write(f"exported {count} entries to {args.out}\n")
    return 0


def import_command(args: argparse.Namespace, out: TextIO) -> int:
    """``gliding-horse import IN.jsonl DIR [--skip-bad]``."""
    if not args.source.is_file():
        raise InvalidInputError(f"{str(args.source)!r} is not a file")
    existing = (args.path / STORE_FILE).is_file()
    if existing:
        memory = open_directory(args.path)
    else:  # a new memory gets the export's embedder, when this machine has it
        memory = Memory.open(args.path, embedder=embedder_named(_header_embedder(args.source)))
    with memory:
        report = memory.import_jsonl(args.source, skip_bad=args.skip_bad)
    for number, problem in report.skipped:
        sys.stderr.write(f"gliding-horse: skipped line {number}: {problem}\n")
    vectors = "kept" if report.vectors_kept else "computed again"
    out.write(f"imported {len(report.imported)} entries into {args.path} (vectors {vectors})\n")
    return 0


def copy_command(args: argparse.Namespace, out: TextIO) -> int:
    """``gliding-horse copy SOURCE TARGET [--merge] [--database-schema NAME]``."""
    source = Place.parse(args.source, schema=args.source_schema or args.database_schema)
    target = Place.parse(args.target, schema=args.target_schema or args.database_schema)
    with _Bars(sys.stderr) as bars:
        report = copy_memory(source, target, merge=args.merge, progress=bars)
    title = f"Copied {report.copied} entries from {report.source} to {report.target}"
    out.write(render(["kind", "entries", "sha-256"], list(kinds_table(report)), title=title))
    merged = f", beside {report.target_before} it held" if report.target_before else ""
    out.write(
        f"\nverified: the target holds every entry of the source, counts and hashes equal"
        f" ({report.texts_in_parts} texts in parts copied whole{merged})\n"
    )
    return 0


class _Bars:
    """A tqdm bar per phase of a copy, on a terminal only."""

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream
        self.shown = stream.isatty()
        self.bars: dict[str, Any] = {}

    def __call__(self, phase: str, done: int, total: int) -> None:
        if not self.shown:
            return
        bar = self.bars.get(phase)
        if bar is None:
            from tqdm import tqdm

            bar = tqdm(total=total, desc=phase, unit=" entries", file=self.stream, leave=True)
            self.bars[phase] = bar
        bar.update(done - bar.n)

    def __enter__(self) -> _Bars:
        return self

    def __exit__(self, *exc_info: object) -> None:
        for bar in self.bars.values():
            bar.close()


def open_directory(path: Path) -> Memory:
    """Open an existing memory directory as its owner, with the embedder it records.

    Raises:
        InvalidInputError: ``path`` holds no memory.
    """
    if not (path / STORE_FILE).is_file():
        raise InvalidInputError(f"{str(path)!r} holds no memory ({STORE_FILE})")
    return Memory.open(path, embedder=recorded_embedder(path))


def recorded_embedder(path: Path) -> Embedder | None:
    """The embedder the directory's manifest names, or ``None`` (the configured one) when it
    names none this command can make again."""
    manifest = path / MANIFEST_FILE
    name = json.loads(manifest.read_text()).get("embedder") if manifest.is_file() else None
    return embedder_named(name)


def embedder_named(name: object) -> Embedder | None:
    """The embedder a manifest or an export names, when this command can make it again."""
    if not isinstance(name, str):
        return None
    if name.startswith("hash-") and name[5:].isdigit():
        return HashEmbedder(int(name[5:]))
    for prefix, backend in _RECORDED.items():
        if name.startswith(prefix):
            return make_embedder(backend)
    return None


def forget_command(args: argparse.Namespace, out: TextIO) -> int:
    """``gliding-horse forget DIR --user NAME`` (or ``--thread``, ``--task``, ``--iri``)."""
    target: Scope | list[str]
    if args.iri:
        target = list(args.iri)
    elif args.user is not None:
        target = Scope.user(args.user)
    elif args.thread is not None:
        target = Scope.thread(args.thread)
    else:
        target = Scope.task(args.task)
    what = f"{len(target)} entries" if isinstance(target, list) else f"everything of {target}"
    if not args.yes and not _confirmed(f"Forget {what} in {args.path}? It cannot be undone."):
        return 2
    with open_directory(args.path) as memory:
        report = memory.forget(target)
    out.write(report_table(report) + "\n")
    return 0


def _confirmed(question: str) -> bool:
    """Ask on the terminal; off a terminal, say that ``--yes`` is needed (no answer is yes)."""
    if not sys.stdin.isatty():
        sys.stderr.write("gliding-horse: error: not on a terminal: give --yes to forget\n")
        return False
    sys.stderr.write(f"{question} [y/N] ")
    sys.stderr.flush()
    answer = sys.stdin.readline().strip().lower()
    if answer not in ("y", "yes"):
        sys.stderr.write("gliding-horse: nothing was forgotten\n")
        return False
    return True


def report_table(report: ForgetReport) -> str:
    """Render what ``forget`` removed, per layer."""
    rows: list[tuple[str, object]] = [
        ("L0 entries", report.removed),
        *((f"  of type {kind}", n) for kind, n in sorted(report.kinds.items())),
        ("supplementary inputs", report.inputs),
        ("turns of open sessions", report.session_turns),
        ("dense vectors", report.vectors),
        ("Poincaré points", report.structure),
        ("cached embeddings", report.embeddings),
        ("blackboard nodes", report.blackboard_nodes),
        ("coordination messages", report.messages),
        ("files rewritten", ", ".join(report.scrubbed) or "none"),
    ]
    rows += [("not reached", reason) for reason in report.skipped]
    return render(["layer", "removed"], rows, title=f"Forgot {report.target}")
