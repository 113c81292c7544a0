"""Embedding backends: the local model, HTTP APIs against a real local server, cache, auto."""

from __future__ import annotations

import json
import logging
import sqlite3
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import pytest

from gliding_core import HashEmbedder, InvalidInputError
from gliding_core.errors import EmbedderError
from gliding_core.hyperspace.backends import (
    RECENT_QUERIES,
    CachedEmbedder,
    HttpEmbedder,
    SentenceTransformerEmbedder,
    auto_embedder,
    make_embedder,
    page_size_for,
)
from gliding_core.hyperspace.vectors import cosine


class FakeEmbeddingServer(BaseHTTPRequestHandler):
    """Answers /v1/embeddings and /api/embed; fails the first ``failures`` requests with 503."""

    failures = 0
    requests: ClassVar[list[dict[str, Any]]] = []

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        auth = self.headers.get("Authorization")
        type(self).requests.append({"path": self.path, "body": body, "auth": auth})
        if type(self).failures > 0:
            type(self).failures -= 1
            self._send(503, {"error": "busy"})
            return
        if body["model"] == "slow":
            time.sleep(1.0)
        if body["model"] == "broken":
            self._send(400, {"error": "unknown model broken"})
            return
        vectors = [[float(len(text)), 1.0, float(i)] for i, text in enumerate(body["input"])]
        if self.path == "/api/embed":
            self._send(200, {"embeddings": vectors})
        else:  # answer out of order: the client must sort by index
            rows = [{"index": i, "embedding": v} for i, v in enumerate(vectors)]
            self._send(200, {"data": list(reversed(rows))})

    def _send(self, status: int, payload: object) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: object) -> None:
        pass

    def handle_one_request(self) -> None:
        try:
            super().handle_one_request()
        except (BrokenPipeError, ConnectionResetError):  # the client gave up (timeout test)
            self.close_connection = True


@pytest.fixture
def server() -> Iterator[str]:
    FakeEmbeddingServer.failures = 0
    FakeEmbeddingServer.requests = []
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), FakeEmbeddingServer)
    httpd.daemon_threads = False  # server_close() then waits for every handler to finish
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()
    thread.join()


def test_openai_compatible_api_in_batches(server: str) -> None:
    embedder = HttpEmbedder(server, "text-embed", api_key="secret", batch_size=2, backoff=0.01)
    vectors = embedder.embed_documents(["a", "bb", "ccc"])
    assert vectors == [[1.0, 1.0, 0.0], [2.0, 1.0, 1.0], [3.0, 1.0, 0.0]]
    assert [r["path"] for r in FakeEmbeddingServer.requests] == ["/v1/embeddings"] * 2
    assert FakeEmbeddingServer.requests[0]["auth"] == "Bearer secret"
    assert embedder.dimension == 3
    assert embedder.name == "openai:text-embed"


def test_ollama_api(server: str) -> None:
    embedder = HttpEmbedder(server, "nomic-embed-text", api="ollama")
    assert embedder.embed_query("four") == [4.0, 1.0, 0.0]
    assert FakeEmbeddingServer.requests[0]["path"] == "/api/embed"


def test_retries_with_backoff_then_succeeds(server: str, caplog: pytest.LogCaptureFixture) -> None:
    FakeEmbeddingServer.failures = 2
    embedder = HttpEmbedder(server, "m", retries=3, backoff=0.01)
    with caplog.at_level(logging.WARNING):
        assert embedder.embed_query("x") == [1.0, 1.0, 0.0]
    assert len(FakeEmbeddingServer.requests) == 3
    assert "retrying" in caplog.text


def test_gives_up_with_a_clear_error(server: str) -> None:
    FakeEmbeddingServer.failures = 10
    with pytest.raises(EmbedderError, match="HTTP 503"):
        HttpEmbedder(server, "m", retries=1, backoff=0.01).embed_query("x")
    FakeEmbeddingServer.failures = 0
    with pytest.raises(EmbedderError, match="unknown model broken"):
        HttpEmbedder(server, "broken").embed_query("x")  # 4xx: no retry


def test_a_slow_server_times_out_into_an_embedder_error(server: str) -> None:
    embedder = HttpEmbedder(server, "slow", timeout=0.2, retries=1, backoff=0.01)
    with pytest.raises(EmbedderError, match="did not answer after 2 attempts"):
        embedder.embed_query("x")


def test_an_unreachable_server_is_an_embedder_error() -> None:
    embedder = HttpEmbedder("http://127.0.0.1:9", "m", retries=1, backoff=0.01, timeout=2)
    with pytest.raises(EmbedderError, match="did not answer after 2 attempts"):
        embedder.embed_query("x")


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"base_url": "ftp://x", "model": "m"}, "http"),
        ({"base_url": "http://x", "model": ""}, "model"),
        ({"base_url": "http://x", "model": "m", "api": "grpc"}, "grpc"),
        ({"base_url": "http://x", "model": "m", "batch_size": 0}, "batch_size"),
    ],
)
def test_bad_settings_are_named(options: dict[str, Any], message: str) -> None:
    with pytest.raises(InvalidInputError, match=message):
        HttpEmbedder(**options)


@pytest.fixture(scope="module")
def local() -> SentenceTransformerEmbedder:
    return SentenceTransformerEmbedder()


def test_the_bundled_local_model_embeds_offline(local: SentenceTransformerEmbedder) -> None:
    vectors = local.embed_documents(
        ["The cat sat on the mat.", "A kitten rests on a rug.", "Quarterly tax filing deadline."]
    )
    assert local.dimension == 384
    assert local.name == "local:all-MiniLM-L6-v2"
    assert all(abs(float(np.linalg.norm(v)) - 1.0) < 1e-4 for v in vectors)
    similar, unrelated = cosine(vectors[0], vectors[1]), cosine(vectors[0], vectors[2])
    assert similar is not None
    assert unrelated is not None
    assert similar > unrelated + 0.2


def test_a_model_that_cannot_load_is_an_embedder_error(tmp_path: Path) -> None:
    with pytest.raises(EmbedderError, match="cannot load"):
        SentenceTransformerEmbedder(tmp_path / "no-model-here")


class Counting(HashEmbedder):
    """The hash embedder, noting in ``calls`` each batch of texts it embeds."""

    def __init__(self, calls: list[list[str]]) -> None:
        super().__init__()
        self.calls = calls

    def embed_documents(self, texts: Any) -> list[list[float]]:
        self.calls.append(list(texts))
        return super().embed_documents(texts)


def test_the_cache_embeds_each_text_once_and_persists(tmp_path: Path) -> None:
    calls: list[list[str]] = []
    path = tmp_path / "cache.sqlite3"
    cache = CachedEmbedder(Counting(calls), path)
    first = cache.embed_documents(["a", "b", "a"])
    assert cache.embed_query("b") == first[1]
    assert calls == [["a", "b"]]
    assert (cache.hits, cache.misses) == (2, 2)
    cache.close()
    again = CachedEmbedder(Counting(calls), path)
    assert again.embed_documents(["a"]) == [first[0]]
    assert calls == [["a", "b"]]  # nothing embedded twice, even after a restart


@pytest.mark.parametrize(
    ("dimension", "size"),
    [
        (None, 8_192),
        (256, 8_192),
        (384, 8_192),
        (480, 8_192),
        (490, 16_384),
        (768, 16_384),
        (1_536, 32_768),
        (3_072, 65_536),
        (20_000, 65_536),
    ],
)
def test_a_new_cache_file_has_pages_that_hold_a_row(dimension: int | None, size: int) -> None:
    assert page_size_for(dimension) == size


def test_a_long_model_name_counts_in_the_row() -> None:
    assert page_size_for(470) == 8_192
    assert page_size_for(470, beside=200) == 16_384  # a name of 150 bytes beside the vector


def test_a_new_cache_stores_each_vector_in_its_page_and_an_old_one_keeps_its_pages(
    tmp_path: Path,
) -> None:
    """No row of a new cache spills to an overflow page (with SQLite's 4 KB pages every one
    did: two random pages a look-up); a file made with 4 KB pages opens and reads as before."""
    for dimension in (256, 768):
        path = tmp_path / f"cache-{dimension}.sqlite3"
        cache = CachedEmbedder(HashEmbedder(dimension=dimension), path)
        vectors = cache.embed_documents([f"text {i}" for i in range(300)])
        cache.close()
        with sqlite3.connect(path) as conn:
            assert conn.execute("PRAGMA page_size").fetchone()[0] == page_size_for(dimension)
            pages = dict(conn.execute("SELECT pagetype, count(*) FROM dbstat GROUP BY 1"))
        assert "overflow" not in pages, pages
        again = CachedEmbedder(HashEmbedder(dimension=dimension), path)
        assert again.embed_documents([f"text {i}" for i in range(300)]) == vectors
        assert again.misses == 0
        again.close()
    old = tmp_path / "old.sqlite3"
    with sqlite3.connect(old) as conn:
        conn.execute("PRAGMA page_size = 4096")
        conn.execute(
            "CREATE TABLE embeddings (model TEXT NOT NULL, digest BLOB NOT NULL,"
            " vector BLOB NOT NULL, PRIMARY KEY (model, digest)) WITHOUT ROWID"
        )
    cache = CachedEmbedder(HashEmbedder(), old)
    first = cache.embed_documents(["a", "b"])
    cache.close()
    again = CachedEmbedder(HashEmbedder(), old)
    assert again.embed_documents(["a", "b"]) == first
    assert again.misses == 0
    again.close()
    with sqlite3.connect(old) as conn:
        assert conn.execute("PRAGMA page_size").fetchone()[0] == 4_096


class _LearnsItsDimension(HashEmbedder):
    """A model that knows its dimension only once it has answered (as a remote API)."""

    def __init__(self) -> None:
        super().__init__(dimension=1_536)
        self.answered = False

    @property  # type: ignore[override]
    def dimension(self) -> int | None:
        return 1_536 if self.answered else None

    @dimension.setter
    def dimension(self, value: int) -> None:
        pass

    def embed_documents(self, texts: Any) -> list[list[float]]:
        self.answered = True
        return [HashEmbedder(dimension=1_536).embed_query(text) for text in texts]


def test_a_cache_of_a_model_of_unknown_dimension_takes_pages_for_its_first_vector(
    tmp_path: Path,
) -> None:
    """The file is set up when the first vector is saved, its pages sized for it (a remote
    model of 1,536 dimensions); before that nothing is cached, and another process may have
    made it meanwhile."""
    path = tmp_path / "cache.sqlite3"
    cache = CachedEmbedder(_LearnsItsDimension(), path)
    assert cache.missing(["a"]) == ["a"]  # nothing made yet, nothing found
    assert cache.forget(["a"]) == 0
    vectors = cache.embed_documents([f"text {i}" for i in range(50)])
    with sqlite3.connect(path) as conn:
        assert conn.execute("PRAGMA page_size").fetchone()[0] == page_size_for(1_536)
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        pages = dict(conn.execute("SELECT pagetype, count(*) FROM dbstat GROUP BY 1"))
    assert "overflow" not in pages, pages
    # A second handle opened before the first vector finds the table made by the first.
    other_path = tmp_path / "other.sqlite3"
    early = CachedEmbedder(_LearnsItsDimension(), other_path)
    writer = CachedEmbedder(_LearnsItsDimension(), other_path)
    stored = writer.embed_documents(["shared"])
    assert early.embed_documents(["shared"]) == stored
    assert early.misses == 0
    for handle in (cache, early, writer):
        handle.close()
    again = CachedEmbedder(_LearnsItsDimension(), path)
    assert again.embed_documents([f"text {i}" for i in range(50)]) == vectors
    assert again.misses == 0
    again.close()


def test_a_query_is_kept_in_the_process_not_written_to_the_cache(tmp_path: Path) -> None:
    """A query's vector is the text's (the cache's, when the query is a stored text); a new
    query is embedded once while it stays among the recent ones, and never written to the file
    (a write a query cost more than the hash embedder's embedding)."""
    calls: list[list[str]] = []
    path = tmp_path / "cache.sqlite3"
    cache = CachedEmbedder(Counting(calls), path)
    [stored] = cache.embed_documents(["a stored text"])
    assert cache.embed_query("a stored text") == stored
    query = cache.embed_query("a new query")
    assert query == pytest.approx(HashEmbedder().embed_query("a new query"), abs=1e-6)
    assert cache.embed_query("a new query") == query
    assert calls == [["a stored text"], ["a new query"]]
    assert cache.missing(["a new query"]) == ["a new query"]  # not in the file
    for i in range(RECENT_QUERIES):
        cache.embed_query(f"query {i}")
    assert len(calls) == 2 + RECENT_QUERIES
    cache.embed_query("a new query")  # pushed out by the newer ones: embedded again
    assert calls[-1] == ["a new query"]
    with pytest.raises(InvalidInputError):
        cache.embed_query(None)  # type: ignore[arg-type]
    with pytest.raises(InvalidInputError):
        cache.embed_query("bad \ud800 surrogate")
    cache.close()


def test_a_remembered_vector_never_replaces_a_cached_one() -> None:
    """``remember`` takes vectors from outside (an import): a text the cache holds keeps its
    vector, a new one takes the given vector; ``missing`` names the texts it holds none of."""
    cache = CachedEmbedder(HashEmbedder())
    own = cache.embed_documents(["known"])[0]
    assert cache.missing(["known", "new", "new"]) == ["new"]
    given = HashEmbedder().embed_query("something else")
    cache.remember(["known", "new"], [given, given])
    assert cache.embed_documents(["known", "new"]) == [own, pytest.approx(given, abs=1e-6)]
    assert cache.missing(["known", "new"]) == []


def test_auto_falls_back_with_a_warning(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING):
        embedder = auto_embedder(("chroma-onnx", "hash"))
    if isinstance(embedder, HashEmbedder):
        assert "falling back to 'hash'" in caplog.text
    assert make_embedder("hash").name == "hash-256"
    with pytest.raises(InvalidInputError, match="unknown embedder"):
        make_embedder("magic")


def test_auto_prefers_the_local_model() -> None:
    assert auto_embedder().name == "local:all-MiniLM-L6-v2"
