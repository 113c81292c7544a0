"""Hyperspace: the dense index (``VectorIndex``) in PostgreSQL with pgvector, beside L0.

``PgVectorIndex(store, embedder, name)`` keeps its vectors in a table of the memory's own
schema, in the database of the ``PostgresEntryStore`` it follows and through that store's
connection pool: so every worker of a fleet shares one index, and the index's storage goes
wherever the memory goes. How it follows L0 is ``following.FollowingIndex``'s.

- The table ``dense_<name>`` holds one row per vector id (an indexed IRI, or one of a long
  text's further windows, ``"<iri> #<i>"``: see ``following``), its vector whole (float32, of
  the embedder's dimension). The HNSW graph by cosine distance (``dense_<name>_half``) is built
  over half-precision copies (``halfvec``; with pgvector before 0.7, or past 4,000 dimensions,
  over the vectors themselves, ``dense_<name>_hnsw``): half the pages to walk and to keep in
  the server's buffers. The graph orders the hits; each is scored by its whole vector, and they
  are returned in that order. ``dense_indexes`` records each index's embedder and dimension;
  an index opened with another embedder raises ``IndexMismatchError`` (``on_mismatch="raise"``,
  the default on a shared database) or is dropped and rebuilt from L0 (``"rebuild"``).
- Vectors travel in ``COPY``'s binary form to a staging table of the session, and move from
  there in one upsert. A catch-up (or a rebuild) of at least ``BULK_FROM`` vectors, and at
  least as many as the table holds (a first load, an index filled from L0), drops the graph,
  writes them to the bare table, and builds the graph once at its end: inserting each vector
  into a graph costs several times its share of a build, which pgvector does in memory
  (``maintenance_work_mem`` is raised for it) and in parallel where the server allows. The
  drop and the build are ``CONCURRENTLY``, so other workers' searches (then exact scans) and
  writes go on, under a session lock that one worker holds for the whole load (another that
  finds it taken writes through whatever graph there is). A worker killed mid-load leaves no
  graph, or an invalid one: the next index opened on the table builds it.
- A search catches up first; when nothing changed (no change after the applied one, the shared
  watermark not past it) that is one statement, not the two reads of a catch-up.
- A query without an allowed set walks the HNSW graph with a beam of at least ``SEARCH_BEAM``
  (``hnsw.ef_search``), never fewer than the hits asked for up to pgvector's widest
  (``WIDEST_BEAM``, 1,000: a query for more gets what that beam finds). The beam is a setting of the
  connection's session, set only when it changes (``session_setting``): the query is then one
  statement, one round trip, with no transaction around it. With an allowed set, the allowed
  rows are scored exactly (their primary key, then the distance of each), since an approximate
  walk would drop the allowed rows it never meets.
- The re-rank's vectors of candidates this process has not cached are read from the table
  (``vector_send``: pgvector's binary form, no text to format or parse), each entry with all
  its windows by one range of the key, the entries expired in L0 left out: one statement, and
  exactly what was indexed, where reading the texts from L0 to look their vectors up in the
  embedding cache cost several times as much in the client.
- pgvector is an extension a superuser installs (it is not trusted): on opening, the index
  installs it if it may, and otherwise raises a ``ConfigError`` naming the statement to have
  run. Its type and operators are named qualified by the schema that holds them.

Invariants: those of ``following``; the index writes only its own two tables (and its session's
staging table, emptied at each commit); SQL is built from constants and validated names, every
value a parameter.
"""

from __future__ import annotations

import logging
import re
import struct
import time
from collections.abc import Iterator, Sequence
from contextlib import ExitStack, closing, contextmanager, suppress
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np
import psycopg

from gliding_core.config import MAX_WINDOWS, DenseConfig
from gliding_core.errors import GlidingError, IndexMismatchError, InvalidInputError, StorageError
from gliding_core.hyperspace.embedders import Embedder
from gliding_core.hyperspace.following import FollowingIndex, Matrix, chunks
from gliding_core.hyperspace.vectors import Vector
from gliding_core.hyperspace.windows import WINDOW_SEPARATOR
from gliding_core.jsonld import preview
from gliding_core.store.filters import MAX_RESULTS, POSTGRESQL, SearchFilters
from gliding_core.store.postgres import PostgresEntryStore
from gliding_core.store.postgres.database import Migration, lock_key, session_setting
from gliding_core.store.postgres.schema import EXPIRED

logger = logging.getLogger(__name__)

SEARCH_BEAM = 128  # hnsw.ef_search: recall over speed, as the Chroma index does
WIDEST_BEAM = 1_000  # the largest hnsw.ef_search pgvector takes
BATCH = 1_000  # vectors written per statement
COMPONENT = "dense"
_NAME = re.compile(r"[a-z0-9_]{1,40}")

_NO_BOUND = 1 << 62  # an unbounded filtered query's bound (its LIMIT stays a bigint)

BULK_FROM = 5_000
"""A catch-up (or rebuild) with at least this many changes to apply, and at least as many as
the table holds vectors, loads them without the HNSW graph and builds the graph once after."""
BULK_PROBE = 500  # a write of at least this many vectors asks how large its catch-up is
BUILD_MEMORY_MAX = 1 << 30  # bytes of maintenance_work_mem a graph build asks for, at most
GRAPH_BYTES = 1_024  # an element's share of the graph beside its vector (neighbours, header)
REPAIR_AFTER_S = 60.0  # after a failed graph build, the next try waits this long
HALF_SINCE = (0, 7)  # the pgvector version that brought half-precision vectors (halfvec)
HALF_DIMENSIONS = 4_000  # the most dimensions pgvector's HNSW takes in halfvec

# PostgreSQL's binary COPY: the signature, flags and header extension; the end of the data.
_COPY_HEADER = b"PGCOPY\n\xff\r\n\x00" + struct.pack("!ii", 0, 0)
_COPY_TRAILER = struct.pack("!h", -1)
_STAGING = "pg_temp.gliding_dense_load"  # the session's staging table of a write

OnMismatch = Literal["rebuild", "raise"]


def _create_registry(conn: psycopg.Connection[Any]) -> None:
    conn.execute(
        'CREATE TABLE dense_indexes (name text COLLATE "C" PRIMARY KEY, embedder text NOT NULL,'
        " dimension integer NOT NULL)"
    )


MIGRATIONS: list[Migration] = [(1, "create the dense index registry", _create_registry)]


class PgVectorIndex(FollowingIndex):
    """Cosine nearest neighbours over the text of L0 entries, in pgvector beside the entries.

    Args:
        store: the PostgreSQL L0 store to follow; the index lives in its schema and uses its
            connection pool.
        embedder: computes the vectors (its ``dimension`` sizes the column).
        name: the index's name: 1 to 40 lower-case letters, digits or ``_``.
        on_mismatch: what to do when the index was built by another embedder: ``"raise"``
            ``IndexMismatchError`` or ``"rebuild"`` it from L0.
        retry_s: the first delay before a failed catch-up is retried; doubled up to a minute.
        windows: how long texts are split into windows (``DenseConfig``; its defaults when
            omitted).

    Raises:
        ConfigError: pgvector is not installed and this role may not install it (the message
            names the statement to have run).
        IndexMismatchError: the index holds another embedder's vectors and ``on_mismatch`` is
            ``"raise"``.
        StorageError: PostgreSQL failed.
    """

    widest_query: int | None = WIDEST_BEAM  # pgvector's widest beam: a query gets what it finds

    def __init__(
        self,
        store: PostgresEntryStore,
        embedder: Embedder,
        name: str = "default",
        *,
        on_mismatch: OnMismatch = "raise",
        retry_s: float = 1.0,
        windows: DenseConfig | None = None,
    ) -> None:
        if not isinstance(store, PostgresEntryStore):
            raise InvalidInputError(
                f"a PgVectorIndex follows a PostgresEntryStore, got {preview(store)}"
            )
        if not isinstance(name, str) or not _NAME.fullmatch(name):
            raise InvalidInputError(
                f"an index name is 1 to 40 lower-case letters, digits or _, got {preview(name)}"
            )
        if on_mismatch not in ("rebuild", "raise"):
            raise InvalidInputError(
                f"on_mismatch must be 'rebuild' or 'raise', got {preview(on_mismatch)}"
            )
        super().__init__(store, embedder, name, retry_s=retry_s, windows=windows)
        self.max_batch = BATCH
        self._db = store.db
        self.dimension = _dimension(embedder)
        extension = self._db.require_extension("vector")
        self._vector = f'"{extension}".vector'
        self._distance = f'OPERATOR("{extension}".<=>)'
        self.table = f'"dense_{name}"'
        graphs = {False: f'"dense_{name}_hnsw"', True: f'"dense_{name}_half"'}
        half = self.dimension <= HALF_DIMENSIONS and self._version() >= HALF_SINCE
        self._graph, self._old_graph = graphs[half], graphs[not half]
        if half:  # the graph holds half-precision copies; the table keeps the vectors whole
            self._key = f'(embedding::"{extension}".halfvec({self.dimension}))'
            self._probe = f'"{extension}".halfvec({self.dimension})'
            self._opclass = f'"{extension}".halfvec_cosine_ops'
        else:
            self._key, self._probe = "embedding", self._vector
            self._opclass = f'"{extension}".vector_cosine_ops'
        self._element_bytes = (2 if half else 4) * self.dimension + GRAPH_BYTES
        self._send = f'"{extension}".vector_send'
        # An entry's vector id is its IRI, its windows' "<iri> #<i>": under the byte order of
        # the key, all of them and nothing else (an IRI holds no space) lie from the IRI up
        # to "<iri> $". The LIMIT keeps the range a subquery run per IRI, one index range
        # scan each: joined, the planner cannot size the range and scans the whole table.
        self._windows_sql = (
            f"SELECT d.iri, {self._send}(d.embedding) FROM unnest(%s::text[]) AS k(iri)"
            f" CROSS JOIN LATERAL ({self._windows_of('k.iri', 'w.iri, w.embedding')}) AS d"
            f" WHERE k.iri NOT IN (SELECT e.iri FROM entries AS e WHERE e.id IN ({EXPIRED}))"
        )
        self._graph_key = lock_key(self._db.schema, f"{self.table} graph")
        self._load: _Load | None = None
        self._graph_unsure = True  # whether the graph must be checked (and built) before use
        self._repair_at = 0.0  # the monotonic time from which a missing graph is built again
        self._db.prepare(COMPONENT, MIGRATIONS)
        self._start(fill=self._open(on_mismatch))

    def __repr__(self) -> str:
        return f"PgVectorIndex({self.name!r}, embedder={preview(self.embedder_label)})"

    def _windows_of(self, iri: str, columns: str) -> str:
        """The query of ``columns`` of the rows of the entry ``iri`` (an SQL expression) and of
        its windows (``w``), in key order."""
        return (
            f"SELECT {columns} FROM {self.table} AS w WHERE w.iri >= {iri}"
            f" AND w.iri < {iri} || ' $' ORDER BY w.iri LIMIT {MAX_WINDOWS}"
        )

    # -- the table -----------------------------------------------------------------------------

    def _open(self, on_mismatch: OnMismatch) -> bool:
        """Create the table or check whose it is; return whether it must be filled from L0.

        An empty table beside a store with entries is filled whatever the watermark says.
        """
        with self._transaction("opening the dense index") as conn:
            conn.execute(
                "SELECT pg_advisory_xact_lock(%s)", (lock_key(self._db.schema, self.table),)
            )
            row = conn.execute(
                "SELECT embedder, dimension FROM dense_indexes WHERE name = %s", (self.name,)
            ).fetchone()
            problem = None if row is None else self._mismatch(row[0], row[1])
            if problem is not None and on_mismatch == "raise":
                raise IndexMismatchError(
                    f"the dense index {self.name!r} in PostgreSQL {problem}; open it with that"
                    " embedder, or reset it"
                )
            if row is None or problem is not None:
                self._create(conn)
            else:  # a graph of the other precision (an older version's) is built anew
                conn.execute(f"DROP INDEX IF EXISTS {self._old_graph}")
            empty = conn.execute(f"SELECT NOT EXISTS (SELECT 1 FROM {self.table})").fetchone()
        return bool(empty and empty[0]) and self.store.count() > 0

    def _mismatch(self, embedder: str, dimension: int) -> str | None:
        if embedder != self.embedder_label:
            return f"was built by the embedder {embedder!r}, not {self.embedder_label!r}"
        if dimension != self.dimension:
            return f"holds vectors of dimension {dimension}, not {self.dimension}"
        return None

    def _create(self, conn: psycopg.Connection[Any]) -> None:
        """(Re)create the table and its HNSW index, and record the embedder."""
        conn.execute(f"DROP TABLE IF EXISTS {self.table}")
        conn.execute(
            f'CREATE TABLE {self.table} (iri text COLLATE "C" PRIMARY KEY,'
            f" embedding {self._vector}({self.dimension}) NOT NULL)"
        )
        conn.execute(self._graph_ddl(concurrently=False))
        conn.execute(
            "INSERT INTO dense_indexes (name, embedder, dimension) VALUES (%s, %s, %s)"
            " ON CONFLICT (name) DO UPDATE SET embedder = excluded.embedder,"
            " dimension = excluded.dimension",
            (self.name, self.embedder_label, self.dimension),
        )

    def _graph_ddl(self, *, concurrently: bool) -> str:
        """The statement that builds the HNSW graph over the table's vectors."""
        how = "CONCURRENTLY " if concurrently else ""
        return (
            f"CREATE INDEX {how}IF NOT EXISTS {self._graph} ON {self.table}"
            f" USING hnsw ({self._key} {self._opclass})"
        )

    def _version(self) -> tuple[int, ...]:
        """pgvector's version in the database, as numbers (``(0, 8, 1)``)."""
        with self._transaction("reading pgvector's version") as conn:
            row = conn.execute("SELECT extversion FROM pg_extension WHERE extname = 'vector'")
            found = row.fetchone()
        return tuple(int(part) for part in re.findall(r"\d+", str(found[0] if found else "0")))

    # -- loading many vectors: without the graph, built once after ------------------------------

    def _catch_up(self) -> int:
        if self._graph_unsure and time.monotonic() >= self._repair_at:
            self._repair_graph()
        if not self._rebuild_pending and self._settled():
            self._persist(force=False)  # as a catch-up that found nothing new does
            return 0
        with self._loading(rebuilding=False):
            return super()._catch_up()

    def _settled(self) -> bool:
        """Whether L0 holds no change after the one this index applied and no other worker
        has moved the shared watermark past it: one statement, where the full catch-up reads
        the watermark and then the change log (each search catches up first)."""
        doing = f"reading the L0 change log for {self.name!r}"
        with self._db.translated(doing), self._db.connection() as conn:
            # max(seq), not EXISTS (seq > %s): under the pool's generic plans the latter may
            # be a scan of the whole log that finds nothing; the former reads one index entry.
            row = conn.execute(
                "SELECT COALESCE((SELECT max(seq) FROM changes), 0) <= %s"
                " AND COALESCE((SELECT sequence FROM watermarks WHERE name = %s), 0) <= %s",
                (self._applied, self.watermark_name, self._applied),
                prepare=True,
            ).fetchone()
        return bool(row and row[0])

    def _rebuild(self, batch: int) -> int:
        with self._loading(rebuilding=True):
            return super()._rebuild(batch)

    @contextmanager
    def _loading(self, *, rebuilding: bool) -> Iterator[None]:
        """Around a catch-up or a rebuild (under the guard): if its first large write finds
        it large (``_large``), the graph is dropped for it and built once at its end, even
        when it fails, so the table is never left without one by this process."""
        outer = self._load is None
        if self._load is None:
            self._load = _Load(rebuilding=rebuilding)
        elif rebuilding:
            self._load.rebuilding = True
        try:
            yield
        finally:
            if outer:
                load, self._load = self._load, None
                if load.held is not None:
                    self._finish_load(load)

    def _bulk_check(self, count: int) -> None:
        """Called by a write of ``count`` vectors: the first large write of a catch-up decides
        whether it loads without the graph."""
        load = self._load
        if load is None or load.decided or count < BULK_PROBE:
            return
        load.decided = True
        if self._large(load):
            self._drop_graph(load)

    def _large(self, load: _Load) -> bool:
        """Whether the catch-up (or rebuild) under way writes at least ``BULK_FROM`` vectors
        and at least as many as the table holds: then inserting each into the graph costs
        more than building the graph anew from all of them."""
        if load.rebuilding:
            pending = self.store.count()
        else:
            pending = self.store.change_sequence() - self._applied
        if pending < BULK_FROM:
            return False
        with self._transaction(f"counting the vectors of {self.name!r}") as conn:
            row = conn.execute(f"SELECT count(*) FROM {self.table}").fetchone()
        return pending >= (int(row[0]) if row else 0)

    def _drop_graph(self, load: _Load) -> None:
        """Take the graph lock and drop the graph, keeping the lock's connection in ``load``;
        nothing when another worker holds the lock (it is loading or building: this one's
        vectors go into the graph, or the table, as they are).

        The lock is a session lock on a connection of its own kept for the load: a process that dies
        while loading lets it go, and the next one to open the index builds the graph.
        ``CONCURRENTLY``: searches and writes of other workers go on meanwhile (a search
        without the graph scores every vector, exactly).
        """
        held = ExitStack()
        try:
            with self._db.translated(f"loading the dense index {self.name!r}"):
                # Outside the pool, which the load itself needs (it may hold one connection).
                conn = held.enter_context(closing(self._db.connect("gliding-horse graph")))
                if not _try_lock(conn, self._graph_key):
                    held.close()
                    return
                held.callback(_unlock, conn, self._graph_key)
                conn.execute(f"DROP INDEX CONCURRENTLY IF EXISTS {self._graph}")
        except BaseException:
            held.close()
            raise
        self._graph_unsure = True
        load.held, load.conn = held, conn

    def _finish_load(self, load: _Load) -> None:
        """Build the graph after a load and let the lock go; a failure is logged (searches
        then score every vector, exactly) and the build is tried again by the next catch-up."""
        assert load.held is not None
        assert load.conn is not None
        with load.held:
            try:
                self._build_graph(load.conn)
            except GlidingError as exc:
                self._repair_at = time.monotonic() + REPAIR_AFTER_S
                logger.warning(
                    "the dense index %r could not build its HNSW graph (%s): its searches score"
                    " every vector until it is built",
                    self.name,
                    exc,
                )

    def _repair_graph(self) -> None:
        """Build the graph if it is missing or was left invalid (a worker died building it),
        unless another worker holds the graph lock (it is loading or building)."""
        doing = f"checking the HNSW graph of {self.name!r}"
        try:
            with self._db.translated(doing), self._db.connection() as conn:
                if _graph_valid(conn, self._graph) is True:
                    self._graph_unsure = False
                    return
                if not _try_lock(conn, self._graph_key):
                    return
                try:
                    self._build_graph(conn)
                finally:
                    _unlock(conn, self._graph_key)
        except GlidingError as exc:
            self._repair_at = time.monotonic() + REPAIR_AFTER_S
            logger.warning("the dense index %r could not build its HNSW graph: %s", self.name, exc)

    def _build_graph(self, conn: psycopg.Connection[Any]) -> None:
        """Build the graph on ``conn``, which holds the graph lock.

        ``CONCURRENTLY``, so other workers' writes go on while it is built (their vectors are
        added to it). With ``maintenance_work_mem`` for the whole graph (up to
        ``BUILD_MEMORY_MAX``), pgvector builds it in memory, with parallel workers when the
        server allows them. An invalid graph, left by a build that failed, is dropped first.

        Raises:
            StorageError: PostgreSQL failed, or the graph is not valid after the build.
        """
        with self._db.translated(f"building the HNSW graph of {self.name!r}"):
            if _graph_valid(conn, self._graph) is False:
                conn.execute(f"DROP INDEX CONCURRENTLY IF EXISTS {self._graph}")
            row = conn.execute(
                f"SELECT count(*), pg_size_bytes(current_setting('maintenance_work_mem'))"
                f" FROM {self.table}"
            ).fetchone()
            rows, memory = (int(row[0]), int(row[1])) if row else (0, 0)
            wanted = min(BUILD_MEMORY_MAX, rows * self._element_bytes * 5 // 4)
            conn.execute(
                "SELECT set_config('maintenance_work_mem', %s, false)",
                (f"{max(memory, wanted) // 1024}kB",),
            )
            try:
                conn.execute(self._graph_ddl(concurrently=True))
            finally:
                conn.execute("RESET maintenance_work_mem")
            if _graph_valid(conn, self._graph) is not True:
                raise StorageError(f"the HNSW graph of the dense index {self.name!r} is not valid")
        self._graph_unsure = False

    def reset(self) -> int:
        """Drop every vector and re-embed all of L0; return the number of entries indexed.
        Searches meanwhile wait for it."""
        with self._guard, self._refilling():
            with self._transaction("resetting the dense index") as conn:
                conn.execute(f"TRUNCATE {self.table}")
            self._forget()
            return self._rebuild(512)

    @contextmanager
    def _transaction(self, doing: str) -> Iterator[psycopg.Connection[Any]]:
        """A transaction on a connection of the store's pool, errors translated."""
        with self._db.translated(doing), self._db.connection() as conn, conn.transaction():
            yield conn

    # -- the backend's operations --------------------------------------------------------------

    def _write(self, keys: list[str], vectors: Matrix) -> None:
        """Upsert the vectors: sent in PostgreSQL's binary ``COPY`` form to a staging table of
        the session (no text to format or parse), then moved in one ``INSERT``, by key order
        (one lock order for all writers)."""
        if vectors.ndim != 2 or vectors.shape[1] != self.dimension:
            raise InvalidInputError(
                f"the embedder gave vectors of shape {vectors.shape}, not (n, {self.dimension})"
            )
        self._bulk_check(len(keys))
        with self._transaction(f"writing {len(keys)} vectors to {self.name!r}") as conn:
            conn.execute(
                f"CREATE TEMP TABLE IF NOT EXISTS {_STAGING} (iri text, embedding"
                f" {self._vector}) ON COMMIT DELETE ROWS"
            )
            with (
                conn.cursor() as cursor,
                cursor.copy(f"COPY {_STAGING} (iri, embedding) FROM STDIN (FORMAT BINARY)") as copy,
            ):
                copy.write(_binary_rows(keys, vectors))
            conn.execute(
                f"INSERT INTO {self.table} (iri, embedding)"
                f" SELECT iri, embedding FROM {_STAGING} ORDER BY iri"
                " ON CONFLICT (iri) DO UPDATE SET embedding = excluded.embedding"
            )

    def _remove(self, keys: list[str]) -> None:
        with self._transaction(f"deleting from the dense index {self.name!r}") as conn:
            conn.execute(f"DELETE FROM {self.table} WHERE iri = ANY(%s::text[])", (keys,))

    def _present(self, keys: list[str]) -> list[str]:
        with self._transaction(f"reading ids of the dense index {self.name!r}") as conn:
            rows = conn.execute(
                f"SELECT iri FROM {self.table} WHERE iri = ANY(%s::text[])", (keys,)
            ).fetchall()
        return [row[0] for row in rows]

    def _fetch(self, keys: list[str]) -> list[tuple[str, Vector]]:
        doing = f"reading vectors of {self.name!r}"
        with self._db.translated(doing), self._db.connection() as conn:
            rows = conn.execute(
                f"SELECT iri, {self._send}(embedding) FROM {self.table}"
                " WHERE iri = ANY(%s::text[])",
                (keys,),
                binary=True,
            ).fetchall()
        if not rows:
            return []
        vectors = _unpacked_rows([raw for _, raw in rows])
        return [(key, vector) for (key, _), vector in zip(rows, vectors, strict=True)]

    def _read_matrices(self, iris: list[str]) -> dict[str, Matrix]:
        """Read entries' window vectors from the table: each entry's vector and its windows'
        in one statement (a range of the key from the IRI to its last window), in pgvector's
        binary form, the entries expired in L0 left out, as L0's texts would leave them."""
        wanted = set(iris)
        places: list[tuple[str, int]] = []
        raws: list[bytes] = []
        doing = f"reading vectors of {self.name!r}"
        for part in chunks(iris, self.max_batch):
            with self._db.translated(doing), self._db.connection() as conn:
                found = conn.execute(self._windows_sql, (part,), binary=True).fetchall()
            for key, raw in found:
                iri, _, window = key.partition(WINDOW_SEPARATOR)
                if iri in wanted:  # the range holds only the IRI and its windows; made sure
                    places.append((iri, int(window or 0)))
                    raws.append(raw)
        if not raws:
            return {}
        matrix = _unpacked_rows(raws)
        order = sorted(range(len(places)), key=places.__getitem__)  # by IRI, then window
        rows: dict[str, list[int]] = {}
        for row in order:
            rows.setdefault(places[row][0], []).append(row)
        return {iri: matrix[found] for iri, found in rows.items()}

    def scrub(self) -> None:
        """Leave nothing of removed entries in the index's table: rewrite it and its HNSW
        index into new files (``VACUUM FULL``), the old ones dropped.

        A deleted row's vector and IRI stay in the table's pages (a dead tuple) and in the
        HNSW graph until then; the planner's statistics are rewritten after
        (``Database.rewrite``). The table is locked while it is copied (queries and writes of
        this index wait). The write-ahead log, replicas and backups are the server
        administrator's.
        """
        self.catch_up()
        self._db.rewrite([self.table], f"scrubbing the dense index {self.name!r}")

    def _ids(self) -> Iterator[str]:
        last = ""
        while True:
            with self._transaction(f"reading the ids of {self.name!r}") as conn:
                rows = conn.execute(
                    f"SELECT iri FROM {self.table} WHERE iri > %s ORDER BY iri LIMIT %s",
                    (last, self.max_batch),
                ).fetchall()
            yield from (row[0] for row in rows)
            if len(rows) < self.max_batch:
                return
            last = rows[-1][0]

    def count(self) -> int:
        """Return the number of indexed entries (a windowed entry counts once)."""
        with self._transaction(f"counting the dense index {self.name!r}") as conn:
            row = conn.execute(
                f"SELECT count(*) FROM {self.table} WHERE strpos(iri, %s) = 0",
                (WINDOW_SEPARATOR,),
            ).fetchone()
        return int(row[0]) if row else 0

    def _nearest(self, vector: Vector, n: int, keys: list[str] | None) -> list[tuple[str, float]]:
        if keys is not None:
            return self._exact(vector, keys, n)
        doing = f"querying the dense index {self.name!r}"
        with self._db.translated(doing), self._db.connection() as conn:
            beam = min(max(SEARCH_BEAM, n), WIDEST_BEAM)
            session_setting(conn, "hnsw.ef_search", str(beam))
            rows = conn.execute(
                f"SELECT iri, embedding {self._distance} %(q)s::{self._vector} AS d"
                f" FROM {self.table} ORDER BY {self._key} {self._distance} %(q)s::{self._probe}"
                " LIMIT %(n)s",
                {"q": _literal(vector), "n": n},
            ).fetchall()
        # The graph ranks by its copies; the hits are scored, and put in order, whole.
        return [(iri, 1.0 - float(d)) for iri, d in sorted(rows, key=lambda row: (row[1], row[0]))]

    def query_filtered(
        self, text: str | Vector, n: int, filters: SearchFilters, *, at_most: int | None
    ) -> list[tuple[str, float]] | None:
        """Return up to ``n`` ``(iri, cosine)`` pairs nearest to ``text`` among the live
        entries passing ``filters``, best first (equal cosines by IRI; a windowed entry by its
        best window), scored exactly in one statement; ``None`` when more than ``at_most``
        entries pass (then nothing was scored: the caller walks the graph; ``at_most=None``:
        no bound).

        The statement reads at most ``at_most + 1`` of the entries the filter allows (their
        number comes back first) and, when they are few enough, scores each one's vectors
        (one range of the key, as the re-rank's read) against the query.

        Raises:
            InvalidInputError: ``filters`` is not ``SearchFilters``, ``n`` is not an int from
                1 to ``MAX_RESULTS``, or ``at_most`` not one from 1 to 2**62.
        """
        if not isinstance(filters, SearchFilters):
            raise InvalidInputError(f"filters must be SearchFilters, got {preview(filters)}")
        most = _NO_BOUND if at_most is None else at_most
        for name, value, top in (("n", n, MAX_RESULTS), ("at_most", most, _NO_BOUND)):
            if isinstance(value, bool) or not isinstance(value, int) or not 0 < value <= top:
                raise InvalidInputError(
                    f"{name} must be an int from 1 to {top}, got {preview(value)}"
                )
        vector = self.vector(text)
        if not np.any(vector):  # no direction, no cosine (the database would rank NaN first)
            return []
        condition, params = filters.sql(POSTGRESQL)
        sql = (
            f"WITH allowed AS MATERIALIZED (SELECT e.iri FROM live_entries AS e WHERE {condition}"
            " LIMIT %s), counted AS (SELECT count(*) AS c FROM allowed)"
            " SELECT NULL, NULL, c FROM counted UNION ALL"
            " (SELECT a.iri, b.s, 0 FROM allowed AS a CROSS JOIN LATERAL"
            f" (SELECT max(1 - (v.embedding {self._distance} %s::{self._vector})) AS s FROM"
            f" ({self._windows_of('a.iri', 'w.embedding')}) AS v) AS b"
            " WHERE b.s IS NOT NULL AND (SELECT c FROM counted) <= %s"
            " ORDER BY 2 DESC, 1 LIMIT %s)"
        )
        doing = f"querying the dense index {self.name!r}"
        with self._reading(), self._db.translated(doing), self._db.connection() as conn:
            rows = conn.execute(sql, (*params, most + 1, _literal(vector), most, n))
            found = rows.fetchall()
        # The count is the row without an IRI; the scored rows are put in order here (a
        # UNION ALL promises no order of its own).
        passing = next(count for iri, _, count in found if iri is None)
        if passing > most:
            return None
        scored = [(iri, float(score)) for iri, score, _ in found if iri is not None]
        return sorted(scored, key=lambda pair: (-pair[1], pair[0]))

    def _exact(self, vector: Vector, keys: list[str], n: int) -> list[tuple[str, float]]:
        # Ordered by the similarity, not by the distance operator: the planner then reads the
        # allowed rows by their key instead of walking the approximate graph.
        with self._transaction(f"scoring vectors of {self.name!r}") as conn:
            rows = conn.execute(
                f"SELECT iri, 1 - (embedding {self._distance} %s::{self._vector}) AS s"
                f" FROM {self.table} WHERE iri = ANY(%s::text[]) ORDER BY s DESC, iri LIMIT %s",
                (_literal(vector), keys, n),
            ).fetchall()
        return [(iri, float(score)) for iri, score in rows]


@dataclass(slots=True)
class _Load:
    """A catch-up or rebuild under way, as the graph sees it."""

    rebuilding: bool
    decided: bool = False  # whether its first large write has asked how large it is
    held: ExitStack | None = field(default=None)  # the graph lock's connection, when dropped
    conn: psycopg.Connection[Any] | None = None


def _try_lock(conn: psycopg.Connection[Any], key: int) -> bool:
    row = conn.execute("SELECT pg_try_advisory_lock(%s)", (key,)).fetchone()
    return bool(row and row[0])


def _unlock(conn: psycopg.Connection[Any], key: int) -> None:
    """Let a session lock go; a broken connection has let it go already."""
    with suppress(psycopg.Error):
        conn.execute("SELECT pg_advisory_unlock(%s)", (key,))


def _graph_valid(conn: psycopg.Connection[Any], graph: str) -> bool | None:
    """Whether the index ``graph`` (quoted, in the schema) is valid; ``None``: there is none."""
    row = conn.execute(
        "SELECT indisvalid FROM pg_index WHERE indexrelid = to_regclass(%s)", (graph,)
    ).fetchone()
    return None if row is None else bool(row[0])


def _dimension(embedder: Embedder) -> int:
    dimension = getattr(embedder, "dimension", None)
    if isinstance(dimension, int) and not isinstance(dimension, bool) and dimension > 0:
        return dimension
    return len(embedder.embed_query("dimension"))


def _binary_rows(keys: list[str], vectors: Matrix) -> bytes:
    """The rows ``(iri, vector)`` in ``COPY``'s binary form: a vector is its dimension, a
    reserved zero and its floats, big-endian, as pgvector's binary input reads it."""
    dimension = vectors.shape[1]
    head = struct.pack("!ihh", 4 + 4 * dimension, dimension, 0)
    body = np.ascontiguousarray(vectors, dtype=">f4")
    parts = [_COPY_HEADER]
    for key, row in zip(keys, body, strict=True):
        raw = key.encode("utf-8")
        parts += (struct.pack("!hi", 2, len(raw)), raw, head, row.tobytes())
    parts.append(_COPY_TRAILER)
    return b"".join(parts)


def _unpacked_rows(raws: Sequence[bytes]) -> Matrix:
    """Vectors from pgvector's binary form, one row each, decoded at once (each row's 4-byte
    head takes the place of one float, dropped). The column's type fixes the dimension, so
    every row has one length."""
    flat = np.frombuffer(b"".join(raws), dtype=">f4").reshape(len(raws), -1)
    return flat[:, 1:].astype(np.float32)


def _literal(vector: Any) -> str:
    """A vector as pgvector's text form, each float32 written exactly."""
    return "[" + ",".join(map(repr, np.asarray(vector, dtype=np.float32).tolist())) + "]"
