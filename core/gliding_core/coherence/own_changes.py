"""L2 coherence: what a coordinator's own directory transactions changed, to vouch copies by.

A coordinator notes the token each of its own directory transactions ended at and the nodes it
changed (``OwnChanges``); a copy vouched at an earlier token is then known current without asking
the directory, as long as nothing but this coordinator's own transactions came in between.

Invariants:
- A token counts as the coordinator's own only if its transaction changed a record the directory
  stores (``touched_nodes`` compares records as the directory does); a token the directory did
  not move for could be another's change, and a non-integer token is never noted.
- A run of own tokens is broken by any gap (a token from another process or coordinator, or one
  out of order): what is vouched across a gap goes to the directory.
- Each node's last touching token is noted before the run's top moves, under one lock; a doubt
  (an unknown token, a node touched after the copy's token) answers "not current".
"""

from __future__ import annotations

import threading
from collections.abc import Hashable, Iterable, Mapping

from gliding_core.coherence.directory import NodeRecord


class OwnChanges:
    """The directory changes this coordinator committed itself, to re-vouch copies cheaply.

    Tokens ``since`` to ``top`` were all produced by this coordinator's own transactions (a
    token from anyone else, another process or coordinator, breaks the run), and ``touched``
    says the last of them that changed each node. A copy vouched at token ``h`` is still
    current at token ``now`` when ``now`` is ``top``, every token after ``h`` is in the run and
    none of them touched its node. ``touched`` is written before ``top`` moves, so a reader
    that sees ``top`` sees what led to it; any doubt answers no (the directory is asked).
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.since = self.top = -2
        self.touched: dict[str, int] = {}
        self.written: dict[str, int] = {}  # the last own token that wrote each node's value

    def record(self, token: Hashable, iris: Iterable[str]) -> None:
        """Note that this coordinator's transaction ending at ``token`` changed ``iris``."""
        self.committed(token, list(iris), [])

    def wrote(self, token: Hashable, iris: Iterable[str]) -> None:
        """Note that the transaction ending at ``token`` wrote the values of ``iris``."""
        self.committed(token, [], list(iris))

    def committed(self, token: Hashable, touched: list[str], written: list[str]) -> None:
        """Note that the transaction ending at ``token`` changed ``touched`` (its token then
        extends the run, or starts a new one after a gap: someone else's change, or out of
        order) and wrote the values of ``written``, under one lock."""
        if not isinstance(token, int):
            return
        with self._lock:
            if touched:  # else the token is not this transaction's own: no run extends
                for iri in touched:
                    self.touched[iri] = token
                if token == self.top + 1:
                    self.top = token
                else:
                    self.since = self.top = token
            for iri in written:
                self.written[iri] = token

    def vouch(self, held: Hashable, now: Hashable, iri: str) -> bool:
        """Return whether a copy of ``iri`` current at token ``held`` is current at ``now``."""
        return (
            isinstance(held, int)
            and isinstance(now, int)
            and now == self.top
            and held + 1 >= self.since
            and self.touched.get(iri, -1) <= held
        )


def touched_nodes(old: Mapping[str, NodeRecord], new: Mapping[str, NodeRecord]) -> list[str]:
    """Return the nodes whose record ``new`` changes: exactly those the directory stores.

    It compares them alike (``changed_records``): records are immutable, so the same object
    is the same record, and another one is compared by value (an equal record built anew
    must not count: a token noted as this coordinator's own when the directory did not move
    could be another's change).
    """
    touched = []
    for iri, record in new.items():
        before = old.get(iri)
        if record is before:
            continue
        if before is None or record.generation != before.generation or record != before:
            touched.append(iri)
    return touched
