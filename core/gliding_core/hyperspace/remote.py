"""Hyperspace: embedding APIs over HTTP (OpenAI-compatible ``/v1/embeddings``, Ollama).

Invariants: one keep-alive connection pool per embedder (httpx), proxies taken from the
environment (``HTTPS_PROXY``, ``NO_PROXY`` ...); a timeout, a connection error, 429 or a 5xx is
retried with exponential back-off, waiting what the server's ``Retry-After`` asks when it says
(capped); any other failure, and the last one, is an ``EmbedderError`` naming the server and
the model. Vectors come back in the order of the texts, whatever order the server sends them.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from email.utils import parsedate_to_datetime
from typing import Any, Literal

import httpx

from gliding_core.checks import check_count
from gliding_core.errors import EmbedderError, InvalidInputError
from gliding_core.hyperspace.embedders import _check_texts
from gliding_core.jsonld import preview

logger = logging.getLogger(__name__)

Api = Literal["openai", "ollama"]
DEFAULT_URLS: dict[str, str] = {
    "openai": "https://api.openai.com",
    "ollama": "http://localhost:11434",
}
DEFAULT_MODELS: dict[str, str] = {
    "openai": "text-embedding-3-small",
    "ollama": "nomic-embed-text",
}


class HttpEmbedder:
    """An embedding API over HTTP: OpenAI-compatible ``/v1/embeddings`` or Ollama ``/api/embed``.

    Args:
        base_url: the server, e.g. ``https://api.openai.com`` or ``http://localhost:11434``.
        model: the model name the server knows.
        api: ``"openai"`` (OpenAI, vLLM, LM Studio, OneAPI) or ``"ollama"``.
        api_key: sent as a bearer token when given.
        timeout: seconds per request.
        retries: further attempts after a timeout, a connection error, 429 or 5xx.
        backoff: seconds before the first retry; doubled each time.
        batch_size: texts per request.
        max_wait: the longest pause before a retry, whatever ``Retry-After`` asks (seconds).
        transport: an httpx transport (tests and custom networking); the default one otherwise.
    """

    def __init__(
        self,
        base_url: str,
        model: str,
        *,
        api: str = "openai",
        api_key: str | None = None,
        timeout: float = 30.0,
        retries: int = 3,
        backoff: float = 0.5,
        batch_size: int = 128,
        max_wait: float = 60.0,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        if not isinstance(base_url, str) or not base_url.startswith(("http://", "https://")):
            raise InvalidInputError(f"base_url must be an http(s) URL, got {preview(base_url)}")
        if api not in ("openai", "ollama"):
            raise InvalidInputError(f"api must be 'openai' or 'ollama', got {preview(api)}")
        if not isinstance(model, str) or not model:
            raise InvalidInputError(f"model must be a non-empty string, got {preview(model)}")
        check_count(batch_size, what="batch_size", minimum=1)
        check_count(retries, what="retries", minimum=0)
        for name, value in (("timeout", timeout), ("backoff", backoff), ("max_wait", max_wait)):
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
                raise InvalidInputError(f"{name} must be a number >= 0, got {preview(value)}")
        if api_key is not None and not isinstance(api_key, str):
            raise InvalidInputError("api_key must be a string or None")
        self.base_url, self.model, self.api = base_url.rstrip("/"), model, api
        self.timeout, self.retries, self.backoff = float(timeout), retries, float(backoff)
        self.batch_size, self.max_wait = batch_size, float(max_wait)
        self.name = f"{api}:{model}"
        self.dimension: int | None = None
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        # trust_env: proxies and CA bundles from the environment, as every HTTP client does.
        self._client = httpx.Client(
            timeout=self.timeout, headers=headers, trust_env=True, transport=transport
        )

    @property
    def endpoint(self) -> str:
        """The URL requests go to."""
        if self.api == "ollama":
            return f"{self.base_url}/api/embed"
        base = self.base_url if self.base_url.endswith("/v1") else f"{self.base_url}/v1"
        return f"{base}/embeddings"

    def embed_documents(self, texts: Sequence[str]) -> list[list[float]]:
        """Return one vector per text, in order, in batches of ``batch_size``."""
        items = _check_texts(texts)
        out: list[list[float]] = []
        for start in range(0, len(items), self.batch_size):
            out.extend(self._request(items[start : start + self.batch_size]))
        if out and self.dimension is None:
            self.dimension = len(out[0])
        return out

    def embed_query(self, text: str) -> list[float]:
        """Return the vector of a query."""
        return self.embed_documents([text])[0]

    def close(self) -> None:
        """Close the connection pool; closing twice is harmless."""
        self._client.close()

    def __del__(self) -> None:
        # An embedder dropped without close() must not leave its pooled sockets open.
        client = getattr(self, "_client", None)
        if client is not None:
            client.close()

    def _request(self, batch: list[str]) -> list[list[float]]:
        body = {"model": self.model, "input": batch}
        delay = self.backoff
        for attempt in range(self.retries + 1):
            last = attempt == self.retries
            try:
                response = self._client.post(self.endpoint, json=body)
            except httpx.TransportError as exc:  # refused, reset, timed out, name not found
                if last:
                    raise EmbedderError(
                        f"{self.name} at {self.endpoint} did not answer after "
                        f"{self.retries + 1} attempts: {type(exc).__name__}: {exc}"
                    ) from exc
                wait = delay
            else:
                if response.status_code == 200:
                    return self._parse(response, len(batch))
                retryable = response.status_code == 429 or response.status_code >= 500
                if not retryable or last:
                    raise EmbedderError(
                        f"{self.name} at {self.endpoint} answered HTTP {response.status_code}: "
                        f"{response.text[:300]}"
                    )
                wait = _retry_after(response, delay)
            wait = min(wait, self.max_wait)
            logger.warning("%s: attempt %d failed, retrying in %.2fs", self.name, attempt + 1, wait)
            time.sleep(wait)
            delay *= 2
        raise AssertionError("unreachable")  # pragma: no cover

    def _parse(self, response: httpx.Response, expected: int) -> list[list[float]]:
        try:
            payload: Any = response.json()
        except ValueError as exc:
            raise EmbedderError(
                f"{self.name} sent a body that is not JSON: {response.text[:200]!r}"
            ) from exc
        try:
            if self.api == "ollama":
                vectors = payload["embeddings"]
            else:
                rows = sorted(payload["data"], key=lambda row: row["index"])
                vectors = [row["embedding"] for row in rows]
            result = [[float(x) for x in vector] for vector in vectors]
        except (KeyError, TypeError, ValueError) as exc:
            raise EmbedderError(
                f"{self.name} sent an unexpected response: {preview(payload)}"
            ) from exc
        if len(result) != expected:
            raise EmbedderError(f"{self.name} returned {len(result)} vectors for {expected} texts")
        return result

    def __repr__(self) -> str:
        return f"HttpEmbedder({self.endpoint!r}, model={self.model!r})"


def _retry_after(response: httpx.Response, default: float) -> float:
    """The pause ``Retry-After`` asks for (seconds or an HTTP date), else ``default``."""
    value = response.headers.get("Retry-After")
    if value is None:
        return default
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return default
    return max(0.0, when.timestamp() - time.time())
