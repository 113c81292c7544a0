"""No module of the blackboard or of coherence reaches a private member of another object.

An object's members whose names start with ``_`` are its own: another object uses what it makes
public (the handle calls ``board.writes``, never ``board._coherence``). The scan reads each
module's syntax tree and flags every ``<expression>._name`` whose expression is not ``self`` or
``cls``: ``board._x``, ``self.board._x``, ``job._x``, ``module._x``. The few reaches between
objects of one module that belong together (a class and the queue that drives it) are listed
here by module and member; a new one must be listed, with its reason, or made public.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import gliding_core

PACKAGE = Path(gliding_core.__file__).parent
SCANNED = ("blackboard", "coherence")

FRIENDS = {
    # ``CommitQueue`` wakes the thread of each ``Job`` it holds through the job's lock.
    ("blackboard/groupcommit.py", "_wake"),
    # ``SeenNodes.of`` fills the ledger it has just built (a classmethod of the same class).
    ("coherence/seen.py", "_copies"),
    ("coherence/seen.py", "_shown"),
}
"""Same-module friends: (module under the package, member) pairs allowed across objects."""

NAMED_TUPLE_API = frozenset({"_asdict", "_fields", "_make", "_replace"})
"""Members of a named tuple that are public despite their underscore."""


def reaches(source: str) -> list[tuple[int, str]]:
    """Return each ``(line, expression)`` of ``source`` that reaches another's private member."""
    found: list[tuple[int, int, str]] = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Attribute):
            continue
        name = node.attr
        if not name.startswith("_") or name.startswith("__") or name in NAMED_TUPLE_API:
            continue
        owner = node.value
        if isinstance(owner, ast.Name) and owner.id in ("self", "cls"):
            continue
        found.append((node.lineno, node.col_offset, ast.unparse(node)))
    return [(line, text) for line, _, text in sorted(found)]


def modules() -> list[Path]:
    return sorted(path for folder in SCANNED for path in (PACKAGE / folder).rglob("*.py"))


def test_the_scan_sees_every_kind_of_reach() -> None:
    source = """
class Handle:
    def write(self, board, job):
        self._grants = {}              # its own: allowed
        cls = type(self); cls._seen    # allowed
        board._coherence.write()       # another object's
        self.board._after_write()      # another object's, through an attribute
        job._wake.release()            # another object's
        point._replace(x=1)            # a named tuple's public API: allowed
        return module._private, self.__class__
"""
    assert [text for _, text in reaches(source)] == [
        "board._coherence",
        "self.board._after_write",
        "job._wake",
        "module._private",
    ]


def test_the_modules_are_scanned() -> None:
    names = {path.relative_to(PACKAGE).as_posix() for path in modules()}
    assert {"blackboard/handle.py", "blackboard/writes.py", "coherence/commits.py"} <= names


@pytest.mark.parametrize("path", modules(), ids=lambda p: p.relative_to(PACKAGE).as_posix())
def test_no_module_reaches_a_private_member_of_another_object(path: Path) -> None:
    module = path.relative_to(PACKAGE).as_posix()
    found = [
        f"{module}:{line}: {text}"
        for line, text in reaches(path.read_text(encoding="utf-8"))
        if (module, text.rsplit(".", 1)[1]) not in FRIENDS
    ]
    assert found == []
