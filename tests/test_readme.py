"""Every Python snippet of the README runs as pasted, offline, each in a fresh interpreter."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

README = Path(__file__).resolve().parent.parent / "README.md"
_BLOCK = re.compile(r"^```python\n(.*?)^```", re.MULTILINE | re.DOTALL)


def snippets() -> list[str]:
    """The README's ```python blocks, in order."""
    return _BLOCK.findall(README.read_text(encoding="utf-8"))


def test_the_readme_has_snippets() -> None:
    assert len(snippets()) >= 3


@pytest.mark.parametrize("index", range(len(snippets())))
def test_a_readme_snippet_runs_as_pasted(
    index: int, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    code = snippets()[index]
    # The hash embedder keeps each fresh interpreter quick; the snippets run the same on any.
    environment = {**os.environ, "HF_HUB_OFFLINE": "1", "GLIDING_EMBEDDER": "hash"}
    if "GLIDING_DATABASE_URL" in code:  # a worker of a shared memory: the servers that
        # `gliding-horse serve` starts, and a schema of the test's own
        environment["GLIDING_DATABASE_URL"] = request.getfixturevalue("postgres_url")
        environment["GLIDING_SPARQL_ENDPOINT"] = request.getfixturevalue("oxigraph_server")
        code = code.replace('"gliding"', repr(request.getfixturevalue("postgres_schema")))
        environment["GLIDING_DATABASE_SCHEMA"] = request.getfixturevalue("postgres_schema")
    result = subprocess.run(
        [sys.executable, "-c", code],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        env=environment,
    )
    assert result.returncode == 0, f"snippet {index} failed:\n{code}\n{result.stderr[-3000:]}"
