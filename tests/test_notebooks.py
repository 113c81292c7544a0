"""The notebooks: git keeps them without outputs, and each runs offline to its key outputs.

Running is not enough: a notebook whose scripted model answers "I do not remember" runs to the
end. Each notebook's printed outputs must hold what the notebook is there to show (its key
outputs below) and none of the answers that would mean the memory failed.
"""

from __future__ import annotations

import re
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

NOTEBOOKS = sorted((Path(__file__).parent.parent / "notebooks").glob("*.ipynb"))

# Per notebook: what its printed outputs must hold, and what they must not.
KEY_OUTPUTS: dict[str, tuple[list[str], list[str]]] = {
    "01_quickstart": (
        [
            "Use PostgreSQL 16 for orders, with logical replication.",  # merged by @id
            "turns paged out",
            "back in the chain: Turn",  # an evicted turn paged back in
            "urn:ex:decision/db 3.5",  # hybrid search: the decision first
            "['urn:ex:person/alice']",  # a filtered search
        ],
        ["back in the chain: None"],
    ),
    "02_langchain_agent": (
        [
            "You planted Cherokee Purple.",  # recalled after it left the window
            "Note: the south bed gets frost in April.",  # the supplementary input delivered
            "Sam prefers organic fertiliser",
        ],
        ["I do not know"],
    ),
    "03_llamaindex_agent": (
        [
            "The storage unit code is 4-7-1-9.",  # recalled after it left the window
            "Note: the van can only park after 9am.",  # the supplementary input delivered
            "four people",  # the memory block recalls the piano
        ],
        ["I do not remember"],
    ),
    "04_multi_agent": (
        [
            "handovers: plan -> do -> check -> act",
            "problems with the final board: none",
            "do     model calls carrying the note: [2]",  # delivered to the doer, once
            "task status: completed",
            "Error: not permitted: role 'do' may not update in the 'review' area",
            "Error: stale write",
            "hand-offs: li-planner -> li-doer -> li-checker -> li-decider",
            "problems: none",
        ],
        ["Traceback"],
    ),
}


def test_the_four_notebooks_are_there() -> None:
    assert [p.name for p in NOTEBOOKS] == [
        "01_quickstart.ipynb",
        "02_langchain_agent.ipynb",
        "03_llamaindex_agent.ipynb",
        "04_multi_agent.ipynb",
    ]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_is_stored_without_outputs(path: Path) -> None:
    notebook = nbformat.read(path, as_version=4)
    for cell in notebook.cells:
        if cell.cell_type == "code":
            assert cell.outputs == [], f"{path.name}: a cell has outputs"
            assert cell.execution_count is None, f"{path.name}: a cell has an execution count"


def test_every_notebook_has_key_outputs() -> None:
    assert sorted(KEY_OUTPUTS) == [p.stem for p in NOTEBOOKS]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_runs_to_its_key_outputs(path: Path, tmp_path: Path) -> None:
    notebook = nbformat.read(path, as_version=4)
    client = NotebookClient(
        notebook,
        timeout=600,
        kernel_name="python3",
        resources={"metadata": {"path": str(tmp_path)}},  # files a notebook writes go here
    )
    client.execute()  # raises CellExecutionError, with the cell and traceback, on failure
    errors = [
        output
        for cell in notebook.cells
        if cell.cell_type == "code"
        for output in cell.outputs
        if output.output_type == "error"
    ]
    assert errors == []
    printed = _printed(notebook)
    wanted, unwanted = KEY_OUTPUTS[path.stem]
    assert [text for text in wanted if text not in printed] == [], printed[-4000:]
    assert [text for text in unwanted if text in printed] == [], printed[-4000:]
    if path.stem == "01_quickstart":  # the session's context stayed within its budget
        sent = re.search(r"full history (\d+) tokens, sent (\d+) tokens", printed)
        assert sent is not None
        assert int(sent[2]) <= 300 < int(sent[1])


def _printed(notebook: nbformat.NotebookNode) -> str:
    """Everything the notebook's code cells printed or showed as text, in order."""
    texts = []
    for cell in notebook.cells:
        if cell.cell_type != "code":
            continue
        for output in cell.outputs:
            if output.output_type == "stream":
                texts.append(output.text)
            elif output.output_type in ("execute_result", "display_data"):
                texts.append(str(output.get("data", {}).get("text/plain", "")))
    return "\n".join(texts)
