"""HTTP embedders chosen by configuration: keep-alive, proxies from the environment, Retry-After."""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, ClassVar

import httpx
import pytest

from gliding_core import ConfigError, HttpEmbedder, Memory, MemoryConfig
from gliding_core.hyperspace.backends import make_embedder
from gliding_core.hyperspace.remote import _retry_after


class EmbeddingApi(BaseHTTPRequestHandler):
    """An OpenAI-compatible embeddings endpoint that records who called and how."""

    protocol_version = "HTTP/1.1"  # keep-alive, as real API servers do
    seen: ClassVar[list[dict[str, Any]]] = []
    throttle: ClassVar[list[str]] = []  # Retry-After values to answer 429 with, in order

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        type(self).seen.append({"port": self.client_address[1], "path": self.path, "body": body})
        if type(self).throttle:
            self._send(429, {"error": "slow down"}, {"Retry-After": type(self).throttle.pop(0)})
            return
        rows = [
            {"index": i, "embedding": [float(len(t)), 1.0]} for i, t in enumerate(body["input"])
        ]
        self._send(200, {"data": rows})

    def _send(self, status: int, payload: object, headers: dict[str, str] | None = None) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        for name, value in {"Content-Type": "application/json", **(headers or {})}.items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def api(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy"):
        monkeypatch.delenv(name, raising=False)
    EmbeddingApi.seen, EmbeddingApi.throttle = [], []
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), EmbeddingApi)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()
    thread.join()


def test_requests_reuse_one_connection(api: str) -> None:
    embedder = HttpEmbedder(api, "m", batch_size=1)
    try:
        embedder.embed_documents(["a", "bb", "ccc"])
    finally:
        embedder.close()
    assert len(EmbeddingApi.seen) == 3
    assert len({request["port"] for request in EmbeddingApi.seen}) == 1


def test_retry_after_is_honoured(api: str, caplog: pytest.LogCaptureFixture) -> None:
    EmbeddingApi.throttle = ["0"]
    embedder = HttpEmbedder(api, "m", backoff=30.0)  # without Retry-After it would wait 30 s
    with caplog.at_level(logging.WARNING):
        assert embedder.embed_query("xy") == [2.0, 1.0]
    embedder.close()
    assert "retrying in 0.00s" in caplog.text


def test_retry_after_is_capped(api: str, caplog: pytest.LogCaptureFixture) -> None:
    EmbeddingApi.throttle = ["3600"]
    embedder = HttpEmbedder(api, "m", max_wait=0.01)
    with caplog.at_level(logging.WARNING):
        embedder.embed_query("x")
    embedder.close()
    assert "retrying in 0.01s" in caplog.text


def test_retry_after_as_seconds_or_a_date() -> None:
    request = httpx.Request("POST", "http://x")
    assert _retry_after(httpx.Response(429, headers={"Retry-After": "7"}, request=request), 1) == 7
    past = httpx.Response(429, headers={"Retry-After": "Wed, 21 Oct 2015 07:28:00 GMT"})
    assert _retry_after(past, 1.0) == 0.0
    assert _retry_after(httpx.Response(429, headers={"Retry-After": "soon"}), 1.5) == 1.5
    assert _retry_after(httpx.Response(503), 2.0) == 2.0


def test_a_proxy_from_the_environment_is_used(api: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Requests go through ``HTTP_PROXY`` (here a second local server that records them)."""
    proxied: list[str] = []

    class Proxy(EmbeddingApi):
        def do_POST(self) -> None:
            proxied.append(self.path)  # a proxy is sent the absolute URL
            super().do_POST()

    proxy = ThreadingHTTPServer(("127.0.0.1", 0), Proxy)
    thread = threading.Thread(target=proxy.serve_forever, daemon=True)
    thread.start()
    monkeypatch.setenv("HTTP_PROXY", f"http://127.0.0.1:{proxy.server_address[1]}")
    monkeypatch.delenv("NO_PROXY", raising=False)
    monkeypatch.delenv("no_proxy", raising=False)
    try:
        embedder = HttpEmbedder("http://embeddings.invalid", "m")
        assert embedder.embed_query("abc") == [3.0, 1.0]
        embedder.close()
    finally:
        proxy.shutdown()
        proxy.server_close()
        thread.join()
    assert proxied == ["http://embeddings.invalid/v1/embeddings"]


def test_the_http_embedders_are_chosen_by_configuration(api: str) -> None:
    config = MemoryConfig(embedder="openai", embedder_url=api, embedder_model="small")
    with Memory(config=config) as memory:
        assert memory.embedder_name == "openai:small"
        memory.store.put({"@id": "urn:ex:1", "text": "hello there"})
        assert [hit.iri for hit in memory.search("hello")] == ["urn:ex:1"]
    assert {request["body"]["model"] for request in EmbeddingApi.seen} == {"small"}


def test_defaults_of_each_api() -> None:
    openai = make_embedder("openai", api_key="k")
    ollama = make_embedder("ollama")
    assert isinstance(openai, HttpEmbedder)
    assert isinstance(ollama, HttpEmbedder)
    assert openai.endpoint == "https://api.openai.com/v1/embeddings"
    assert ollama.endpoint == "http://localhost:11434/api/embed"
    openai.close()
    ollama.close()


def test_settings_from_the_environment() -> None:
    config = MemoryConfig.from_env(
        {
            "GLIDING_EMBEDDER": "openai",
            "OPENAI_API_KEY": "sk-test",
            "OPENAI_BASE_URL": "http://127.0.0.1:1234/v1",
            "GLIDING_CHROMA_HOST": "chroma.local",
            "GLIDING_CHROMA_PORT": "8123",
        }
    )
    assert config.embedder == "openai"
    assert config.embedder_api_key == "sk-test"
    assert config.embedder_url == "http://127.0.0.1:1234/v1"
    assert (config.chroma_host, config.chroma_port) == ("chroma.local", 8123)
    assert "sk-test" not in repr(config)
    ollama = MemoryConfig.from_env({"GLIDING_EMBEDDER": "ollama", "OLLAMA_HOST": "gpu:11434"})
    assert ollama.embedder_url == "http://gpu:11434"
    assert MemoryConfig.from_env({}) == MemoryConfig()
    assert MemoryConfig.from_env({"GLIDING_EMBEDDER": "ollama"}, embedder="hash").embedder == "hash"


@pytest.mark.parametrize(
    ("environ", "named"),
    [
        ({"GLIDING_EMBEDDER": "word2vec"}, "word2vec"),
        ({"GLIDING_CHROMA_PORT": "eighty"}, "eighty"),
        ({"GLIDING_EMBEDDER_URL": "ftp://x"}, "ftp://x"),
    ],
)
def test_a_bad_variable_is_named(environ: dict[str, str], named: str) -> None:
    with pytest.raises(ConfigError, match=named):
        MemoryConfig.from_env(environ)
