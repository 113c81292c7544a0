"""L2: the RDF backends of the blackboard, behind one small protocol.

``GraphBackend`` is what the node layer needs from a quad store: an atomic SPARQL update, an
atomic insert of quads, the triples of given subjects in a graph, the quads of given subjects
and predicates in any graph (the node layer's look-up by IRI), a SPARQL query over a chosen
dataset with variables bound safely, and ``close()``. Two classes implement it:
``EmbeddedGraph`` (pyoxigraph's ``Store``, in memory or on disk) and ``SparqlEndpoint`` (any
SPARQL 1.1 protocol endpoint over httpx, such as ``oxigraph serve``).

Invariants:
- ``update`` and ``extend`` apply all of their change or nothing (one transaction in Oxigraph,
  one request to an endpoint). Callers build update text from terms (``str(NamedNode(...))``),
  never by splicing. At an endpoint an update whose reply was lost after the request left
  (``boundary``'s ``sparql-update`` table) raises ``WriteOutcomeUnknownError``: applied or
  not, the caller cannot tell from here; one that never left raises ``StorageError``.
- ``query`` never lets the text widen the dataset: when ``dataset`` is given it replaces the
  query's ``FROM`` / ``FROM NAMED`` (pyoxigraph's ``default_graph`` / ``named_graphs``, the
  protocol's ``default-graph-uri`` / ``named-graph-uri``). ``dataset=None`` is the whole store,
  the default graph being the union of every graph (the system's view). An empty dataset is
  empty on every backend: at an endpoint, where sending no graph means the server's own
  default dataset, its default graph is ``EMPTY_GRAPH``, which nothing writes.
- ``bindings`` bind variables to terms: pyoxigraph substitutions embedded; at an endpoint, a
  ``VALUES`` block of serialised terms opening the query's outer group, found on the query's
  SPARQL tokens (where Oxigraph starts from it; a trailing ``VALUES`` was joined after the
  whole pattern: 26 ms for a 2-hop CONSTRUCT at 10,000 nodes). A bound variable must be
  projected by a SELECT.
- Results come back as pyoxigraph terms from both backends, so callers see one shape.
- pyoxigraph 0.5.13 on disk loses concurrent read-modify-write updates: writers must be
  serialised above this layer (the node layer's single writer does it).
"""

from __future__ import annotations

import gc
import logging
import os
import shutil
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NoReturn, Protocol, Union

import httpx
import pyoxigraph as ox

from gliding_core.blackboard import sparql_check
from gliding_core.boundary import translate, translated
from gliding_core.errors import (
    ClosedError,
    InvalidInputError,
    StorageError,
    WriteOutcomeUnknownError,
)
from gliding_core.jsonld import preview

logger = logging.getLogger(__name__)

FRESH_SUFFIX, OLD_SUFFIX = ".rewriting", ".replaced"  # beside a disk store being rewritten

Term = Union[ox.NamedNode, ox.BlankNode, ox.Literal, ox.Triple]  # noqa: UP007 (a runtime alias)

_Params = list[tuple[str, str | int | float | bool | None]]
_RESULTS_JSON = "application/sparql-results+json"
_N_TRIPLES = "application/n-triples"
_GATEWAY_GAVE_UP = frozenset({502, 504})  # a proxy's "no (timely) answer from the server"
EMPTY_GRAPH = "urn:gliding-horse:meta:empty-dataset"
"""The default graph of an empty dataset at an endpoint: a bookkeeping name (graphs under
``urn:gliding-horse:meta:`` are never written as nodes), and no bookkeeping graph's name, whose
suffix is an escaped absolute IRI (with ``%3A``)."""


@dataclass(frozen=True, slots=True)
class Dataset:
    """The graphs a query may see: its default graph (their union) and its named graphs."""

    default: tuple[str, ...]
    named: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class QueryResult:
    """The answer to a SPARQL query, the same from every backend.

    Attributes:
        form: ``"select"``, ``"ask"`` or ``"graph"`` (CONSTRUCT and DESCRIBE).
        variables: the projected variables of a SELECT, in order.
        rows: the solutions of a SELECT; an unbound variable is absent from its row.
        boolean: the answer of an ASK.
        triples: the triples of a CONSTRUCT or DESCRIBE.
    """

    form: str
    variables: tuple[str, ...] = ()
    rows: tuple[dict[str, Term], ...] = ()
    boolean: bool | None = None
    triples: tuple[ox.Triple, ...] = field(default=())

    def values(self) -> list[dict[str, str]]:
        """Return the SELECT rows with each term as its plain value (IRI or lexical form)."""
        return [{name: term_value(t) for name, t in row.items()} for row in self.rows]


def term_value(term: Term) -> str:
    """Return an IRI's text, a literal's lexical form, a blank node's label."""
    if isinstance(term, ox.Triple):
        return str(term)
    return str(term.value)


class GraphBackend(Protocol):
    """The quad store under a blackboard."""

    kind: str
    """``"memory"``, ``"disk"`` or ``"server"``: what the store is, for figures and messages."""

    def update(self, text: str) -> None:
        """Apply a SPARQL 1.1 update, all of it or nothing."""
        ...

    def extend(self, quads: Sequence[ox.Quad]) -> None:
        """Add quads, all of them or none."""
        ...

    def triples_of(self, subjects: Sequence[str], graph: str) -> list[ox.Quad]:
        """Return every quad of ``graph`` whose subject is one of ``subjects``."""
        ...

    def quads_about(self, subjects: Sequence[str], predicates: Sequence[str]) -> list[ox.Quad]:
        """Return every quad of any named graph with one of ``subjects`` and ``predicates``."""
        ...

    def query(
        self,
        text: str,
        *,
        dataset: Dataset | None = None,
        bindings: Mapping[str, Term] | None = None,
    ) -> QueryResult:
        """Run a SPARQL query over ``dataset`` (the whole store when ``None``)."""
        ...

    def close(self) -> None:
        """Release the store; closing twice is harmless."""
        ...


def _from_pyoxigraph(result: Any) -> QueryResult:
    if isinstance(result, ox.QueryBoolean):
        return QueryResult("ask", boolean=bool(result))
    if isinstance(result, ox.QueryTriples):
        return QueryResult("graph", triples=tuple(result))
    names = tuple(v.value for v in result.variables)
    rows = []
    for solution in result:
        row = {}
        for name in names:
            value = solution[name]
            if value is not None:
                row[name] = value
        rows.append(row)
    return QueryResult("select", variables=names, rows=tuple(rows))


def _raise_translated(exc: Exception, doing: str) -> NoReturn:
    """Raise what ``exc`` of pyoxigraph maps to (``boundary``), else ``exc`` itself."""
    error = translate("oxigraph", exc, doing)
    if error is None:
        raise exc
    raise error from exc


class EmbeddedGraph:
    """pyoxigraph's embedded store: in memory (``path=None``) or in a directory on disk.

    Only one process can open a directory (RocksDB's lock); a second one gets ``StorageError``.
    """

    def __init__(self, path: str | os.PathLike[str] | None = None) -> None:
        self.path = None if path is None else os.fspath(path)
        self.kind = "memory" if path is None else "disk"
        if self.path is not None:
            _recover(self.path)
        with translated("oxigraph", f"opening the blackboard graph at {self.path or ':memory:'}"):
            self._store = ox.Store(self.path) if self.path is not None else ox.Store()
        self._closed = False
        self._compacted = False
        self._lock = threading.Lock()

    @property
    def store(self) -> ox.Store:
        """The pyoxigraph store (raises ``ClosedError`` after ``close()``)."""
        if self._closed:
            raise ClosedError("the blackboard graph is closed")
        return self._store

    def update(self, text: str) -> None:
        """Apply a SPARQL update in one transaction."""
        store = self.store
        try:  # (``try``, not ``with translated``: free unless it raises, and every write calls it)
            store.update(text)
        except Exception as exc:
            _raise_translated(exc, "updating the blackboard graph")

    def extend(self, quads: Sequence[ox.Quad]) -> None:
        """Add quads in one transaction."""
        store = self.store
        try:  # (as in ``update``)
            store.extend(quads)
        except Exception as exc:
            _raise_translated(exc, "adding to the blackboard graph")

    def triples_of(self, subjects: Sequence[str], graph: str) -> list[ox.Quad]:
        """Return the quads of ``graph`` about ``subjects`` (one index look-up each)."""
        store, name = self.store, ox.NamedNode(graph)
        found: list[ox.Quad] = []
        with translated("oxigraph", "reading the blackboard graph"):
            for subject in subjects:
                found.extend(store.quads_for_pattern(ox.NamedNode(subject), None, None, name))
        return found

    def quads_about(self, subjects: Sequence[str], predicates: Sequence[str]) -> list[ox.Quad]:
        """Return the quads of ``subjects`` and ``predicates`` (one look-up a subject).

        One look-up by subject, filtered here, is cheaper than one per predicate: a subject
        the store does not know (every new node) costs one index probe.
        """
        store, wanted = self.store, frozenset(predicates)
        found: list[ox.Quad] = []
        with translated("oxigraph", "reading the blackboard graph"):
            for subject in subjects:
                found.extend(
                    quad
                    for quad in store.quads_for_pattern(ox.NamedNode(subject), None, None, None)
                    if quad.predicate.value in wanted
                    and not isinstance(quad.graph_name, ox.DefaultGraph)
                )
        return found

    def query(
        self,
        text: str,
        *,
        dataset: Dataset | None = None,
        bindings: Mapping[str, Term] | None = None,
    ) -> QueryResult:
        """Run a query; ``dataset`` replaces whatever the text names."""
        options: dict[str, Any] = {}
        if dataset is None:
            options["use_default_graph_as_union"] = True
        else:
            options["default_graph"] = [ox.NamedNode(g) for g in dataset.default]
            options["named_graphs"] = [ox.NamedNode(g) for g in dataset.named]
        if bindings:
            options["substitutions"] = {ox.Variable(k): v for k, v in bindings.items()}
        with translated("oxigraph", "querying the blackboard graph"):
            return _from_pyoxigraph(self.store.query(text, **options))

    def compact(self) -> None:
        """Have ``close`` rewrite a disk store from its live quads, so deleted ones leave its files.

        Oxigraph never removes a string from its dictionary, and RocksDB keeps deleted keys in
        its tables and log until they are compacted: deleted text stays in the files of the
        store it was written to. So, once this was called, ``close`` writes the live quads into
        a fresh store beside it and puts that in its place (nothing else uses the store then);
        a crash meanwhile leaves the old store or the new one, whole (``_recover``). A store in
        memory has no files: nothing to do.
        """
        with self._lock:
            self._compacted = self.path is not None

    def close(self) -> None:
        """Flush and release the store (rewritten first when ``compact`` was called)."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            live: list[ox.Quad] | None = None
            if self.path is not None:
                with translated("oxigraph", "flushing the blackboard graph"):
                    self._store.flush()
                    live = list(self._store) if self._compacted else None
            del self._store
            if live is not None and self.path is not None:
                _rewrite(self.path, live)

    def __repr__(self) -> str:
        return f"EmbeddedGraph({self.path or ':memory:'!r})"


class SparqlEndpoint:
    """A SPARQL 1.1 protocol endpoint (``oxigraph serve``, Fuseki, ...) over HTTP.

    Args:
        url: the server's base URL; queries go to ``{url}/query`` and updates to
            ``{url}/update`` unless ``query_url`` / ``update_url`` say otherwise.
        timeout_s: the timeout of each request.
        client: a ready httpx client (its settings are used as they are).

    The system's whole-store view asks Oxigraph's ``union-default-graph``; on another server,
    give every query a dataset or configure the server's default graph as the union.
    """

    kind = "server"

    def __init__(
        self,
        url: str,
        *,
        query_url: str | None = None,
        update_url: str | None = None,
        timeout_s: float = 30.0,
        client: httpx.Client | None = None,
    ) -> None:
        if not isinstance(url, str) or not url.startswith(("http://", "https://")):
            raise InvalidInputError(f"SPARQL endpoint URL must be http(s), got {preview(url)}")
        base = url.rstrip("/")
        self.url = base
        self.query_url = query_url or f"{base}/query"
        self.update_url = update_url or f"{base}/update"
        self._client = client or httpx.Client(timeout=timeout_s, trust_env=False)
        self._owns_client = client is None
        self._closed = False

    def _post(
        self,
        url: str,
        text: str,
        content_type: str,
        params: _Params,
        accept: str,
        *,
        update: bool = False,
    ) -> httpx.Response:
        if self._closed:
            raise ClosedError("the SPARQL endpoint client is closed")
        with translated("sparql-update" if update else "sparql", f"sending a request to {url}"):
            response = self._client.post(
                url,
                content=text.encode("utf-8"),
                params=params,
                headers={"content-type": content_type, "accept": accept},
            )
        if response.status_code == 400:
            raise InvalidInputError(f"the SPARQL endpoint refused the request: {response.text}")
        if response.status_code >= 300:
            message = (
                f"the SPARQL endpoint {url} answered {response.status_code}: {response.text[:500]}"
            )
            # A gateway between gave up waiting for the server, which may have applied it.
            if update and response.status_code in _GATEWAY_GAVE_UP:
                raise WriteOutcomeUnknownError(message)
            raise StorageError(message)
        return response

    def update(self, text: str) -> None:
        """Send a SPARQL update (one request: the server applies all of it or nothing).

        Raises:
            WriteOutcomeUnknownError: the request may have reached the server and its answer
                was lost (a read timeout, a reset or close after sending, a gateway's 502 or
                504): the update may or may not be applied.
            StorageError: the update was not applied (no connection was made, or the
                server answered with an error).
        """
        self._post(self.update_url, text, "application/sparql-update", [], "*/*", update=True)

    def extend(self, quads: Sequence[ox.Quad]) -> None:
        """Send the quads as one ``INSERT DATA``."""
        if quads:
            self.update(f"INSERT DATA {{ {quads_text(quads)} }}")

    def triples_of(self, subjects: Sequence[str], graph: str) -> list[ox.Quad]:
        """Return the quads of ``graph`` about ``subjects`` (one query)."""
        if not subjects:
            return []
        values = " ".join(str(ox.NamedNode(s)) for s in subjects)
        # VALUES inside the GRAPH block: Oxigraph then starts from the subjects (outside it,
        # a pattern of several triples is evaluated whole before the join).
        result = self.query(
            f"SELECT ?s ?p ?o WHERE {{ GRAPH {ox.NamedNode(graph)} {{ VALUES ?s {{ {values} }}"
            " ?s ?p ?o } }",
            dataset=Dataset((), (graph,)),
        )
        name = ox.NamedNode(graph)
        return [ox.Quad(r["s"], r["p"], r["o"], name) for r in result.rows]  # type: ignore[arg-type]

    def quads_about(self, subjects: Sequence[str], predicates: Sequence[str]) -> list[ox.Quad]:
        """Return the quads of ``subjects`` and ``predicates`` in any named graph (one query)."""
        if not subjects or not predicates:
            return []
        values = " ".join(str(ox.NamedNode(s)) for s in subjects)
        properties = " ".join(str(ox.NamedNode(p)) for p in predicates)
        result = self.query(
            f"SELECT ?s ?p ?o ?g WHERE {{ GRAPH ?g {{ VALUES ?s {{ {values} }}"
            f" VALUES ?p {{ {properties} }} ?s ?p ?o }} }}"
        )
        return [
            ox.Quad(r["s"], r["p"], r["o"], r["g"])  # type: ignore[arg-type]
            for r in result.rows
        ]

    def query(
        self,
        text: str,
        *,
        dataset: Dataset | None = None,
        bindings: Mapping[str, Term] | None = None,
    ) -> QueryResult:
        """Run a query; ``dataset`` travels as protocol parameters, which override the text."""
        params: _Params = []
        if dataset is None:
            params.append(("union-default-graph", ""))
        elif not dataset.default and not dataset.named:
            params.append(("default-graph-uri", EMPTY_GRAPH))
        else:
            params += [("default-graph-uri", g) for g in dataset.default]
            params += [("named-graph-uri", g) for g in dataset.named]
        if bindings:
            text = with_values(text, bindings)
        accept = f"{_RESULTS_JSON}, {_N_TRIPLES};q=0.9"
        response = self._post(self.query_url, text, "application/sparql-query", params, accept)
        kind = response.headers.get("content-type", "").split(";")[0].strip()
        with translated("oxigraph", "parsing the SPARQL endpoint's answer"):
            if kind == _RESULTS_JSON:
                return _from_pyoxigraph(
                    ox.parse_query_results(response.content, ox.QueryResultsFormat.JSON)
                )
            if kind == _N_TRIPLES:
                quads = ox.parse(response.content, ox.RdfFormat.N_TRIPLES)
                return QueryResult(
                    "graph",
                    triples=tuple(ox.Triple(q.subject, q.predicate, q.object) for q in quads),
                )
        raise StorageError(f"the SPARQL endpoint answered with an unexpected type {kind!r}")

    def close(self) -> None:
        """Close the HTTP client this endpoint made; the server's data stays."""
        if not self._closed:
            self._closed = True
            if self._owns_client:
                self._client.close()

    def __repr__(self) -> str:
        return f"SparqlEndpoint({self.url!r})"


def _rewrite(path: str, quads: Sequence[ox.Quad]) -> None:
    """Write ``quads`` into a fresh store and put it in place of the closed one at ``path``."""
    fresh, old = path + FRESH_SUFFIX, path + OLD_SUFFIX
    shutil.rmtree(fresh, ignore_errors=True)
    with translated("oxigraph", f"rewriting the blackboard graph at {path}"):
        store = ox.Store(fresh)
        store.extend(quads)
        store.flush()
        del store
    gc.collect()  # the fresh store closes with its last reference
    os.replace(path, old)
    os.replace(fresh, path)
    shutil.rmtree(old, ignore_errors=True)


def _recover(path: str) -> None:
    """Finish or undo a rewrite a crash interrupted: keep whichever store is whole."""
    fresh, old = path + FRESH_SUFFIX, path + OLD_SUFFIX
    if os.path.isdir(path):
        shutil.rmtree(old, ignore_errors=True)
        shutil.rmtree(fresh, ignore_errors=True)
    elif os.path.isdir(fresh) and os.path.isdir(old):
        os.replace(fresh, path)  # the old store was moved aside: the fresh one is whole
        shutil.rmtree(old, ignore_errors=True)


def quads_text(quads: Sequence[ox.Quad]) -> str:
    """Return quads as SPARQL ``GRAPH`` blocks of ``INSERT DATA`` / ``DELETE DATA``."""
    blocks: dict[str, list[str]] = {}
    for quad in quads:
        line = f"{quad.subject} {quad.predicate} {quad.object} ."
        blocks.setdefault(str(quad.graph_name), []).append(line)
    return " ".join(f"GRAPH {graph} {{ {' '.join(lines)} }}" for graph, lines in blocks.items())


def with_values(text: str, bindings: Mapping[str, Term]) -> str:
    """Return the query with a ``VALUES`` block of ``bindings`` opening its outer group.

    The group is found on the query's tokens (``sparql_check.with_values``), never in
    strings, IRIs or comments.
    """
    return sparql_check.with_values(text, _values_clause(bindings))


def _values_clause(bindings: Mapping[str, Term]) -> str:
    names = " ".join(f"?{ox.Variable(name).value}" for name in bindings)
    terms = " ".join(str(value) for value in bindings.values())
    return f"VALUES ({names}) {{ ({terms}) }}"


def open_graph(
    *, path: str | os.PathLike[str] | None = None, endpoint: str | None = None
) -> GraphBackend:
    """Return the backend for an endpoint URL, a directory, or memory (in that order)."""
    if endpoint is not None:
        return SparqlEndpoint(endpoint)
    return EmbeddedGraph(path)


__all__: Sequence[str] = (
    "EMPTY_GRAPH",
    "Dataset",
    "EmbeddedGraph",
    "GraphBackend",
    "QueryResult",
    "SparqlEndpoint",
    "Term",
    "open_graph",
    "quads_text",
    "term_value",
)
