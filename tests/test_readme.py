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
def test_a_readme_snippet_runs_as_pasted(index: int, tmp_path: Path) -> None:
    code = snippets()[index]
    environment = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    environment.pop("GLIDING_EMBEDDER", None)
    result = subprocess.run(
        [sys.executable, "-W", "error::DeprecationWarning:gliding_core", "-c", code],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        env=environment,
    )
    assert result.returncode == 0, f"snippet {index} failed:\n{code}\n{result.stderr[-3000:]}"
