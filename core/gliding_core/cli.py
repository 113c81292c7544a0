"""The ``gliding-horse`` command: demo, inspect and benchmarks (no layer: the user's entry point).

Errors the user can fix (a bad path, a bad number) end with a one-line message and exit code 2.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TextIO

from gliding_core import demo
from gliding_core.errors import GlidingError
from gliding_core.memory import STORE_FILE, Memory
from gliding_core.table import render


def main(argv: Sequence[str] | None = None, out: TextIO | None = None) -> int:
    """Run the command line with ``argv`` (``sys.argv[1:]`` by default); return the exit code."""
    stream = out or sys.stdout
    parser = _parser()
    args = parser.parse_args(argv)
    try:
        code: int = args.handler(args, stream)
    except GlidingError as exc:
        sys.stderr.write(f"gliding-horse: error: {exc}\n")
        return 2
    return code


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="gliding-horse", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)

    run_demo = commands.add_parser("demo", help="run the demo on embedded defaults")
    run_demo.add_argument("--path", type=Path, help="keep the demo's memory in this directory")
    run_demo.set_defaults(handler=_demo)

    inspect = commands.add_parser("inspect", help="show what a memory directory holds")
    inspect.add_argument("path", type=Path, help="a memory directory (made by Memory.open)")
    inspect.add_argument("--recent", type=_positive, default=10, help="recent entries to list")
    inspect.set_defaults(handler=_inspect)

    bench = commands.add_parser("bench", help="run a benchmark").add_subparsers(
        dest="benchmark", required=True
    )
    l0 = bench.add_parser("l0", help="L0 store throughput and latency")
    l0.add_argument("--entries", type=_positive, default=100_000)
    l0.add_argument("--queries", type=_positive, default=2_000)
    l0.add_argument("--seed", type=int, default=0)
    l0.add_argument("--json", type=Path, help="also write the figures to this JSON file")
    l0.set_defaults(handler=_bench_l0)
    return parser


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return value


def _demo(args: argparse.Namespace, out: TextIO) -> int:
    if args.path is None:
        demo.run(out)
    else:
        with Memory.open(args.path) as memory:
            demo.run(out, memory)
    return 0


def _inspect(args: argparse.Namespace, out: TextIO) -> int:
    path: Path = args.path
    if not (path / STORE_FILE).is_file():
        sys.stderr.write(f"gliding-horse: error: {str(path)!r} holds no memory ({STORE_FILE})\n")
        return 2
    with Memory.open(path) as memory:
        store = memory.store
        sections = [
            render(
                ["what", "count"],
                [
                    ("entries", store.count()),
                    ("tags", len(store.tag_counts())),
                    ("named graphs", len(store.graph_counts())),
                    ("types", len(store.type_counts())),
                ],
                title="Memory",
            ),
            render(["tag", "entries"], list(store.tag_counts().items())[:20], title="Tags"),
            render(
                ["graph", "entries"], list(store.graph_counts().items())[:20], title="Named graphs"
            ),
            render(["type", "entries"], list(store.type_counts().items())[:20], title="Types"),
            render(
                ["iri", "types", "tags", "importance", "gen"],
                [
                    (
                        e.iri,
                        ", ".join(e.jsonld_types),
                        ", ".join(e.tags),
                        e.importance,
                        e.generation,
                    )
                    for e in store.recent(limit=args.recent)
                ],
                title="Most recent entries",
            ),
        ]
    out.write("\n\n".join(sections) + "\n")
    return 0


def _bench_l0(args: argparse.Namespace, out: TextIO) -> int:
    from gliding_core.benchmarks import l0

    figures = l0.run(args.entries, seed=args.seed, queries=args.queries)
    out.write(
        render(
            ["figure", "value"],
            list(figures.items()),
            title=f"L0 benchmark, {args.entries:,} entries",
        )
        + "\n"
    )
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2) + "\n")
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
