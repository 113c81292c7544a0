"""Attention: the supplementary-input queue on PostgreSQL, for workers in many processes.

``PostgresSupplementaryQueue`` keeps each input as an entry of a ``PostgresEntryStore``, as
``SupplementaryInputStore`` does on any store, and adds what PostgreSQL's concurrent writers
need for exactly-once delivery: ``take_pending`` first takes a lock per task
(``PostgresEntryStore.hold``) held to the end of the caller's transaction. A second consumer of
the task, in any process, waits for that transaction to end, and its next statement (read
committed) sees the inputs marked consumed: so the one run that starts the next cycle gets every
pending input, and a run that starts at the same moment gets none, never a copy.

Invariants: those of ``attention.supplementary``; consumers of different tasks never wait for
each other (one lock per task).
"""

from __future__ import annotations

from gliding_core.attention.supplementary import SupplementaryInputStore
from gliding_core.bus import EventBus
from gliding_core.errors import InvalidInputError
from gliding_core.jsonld import preview
from gliding_core.store.postgres import PostgresEntryStore


class PostgresSupplementaryQueue(SupplementaryInputStore):
    """Per-task supplementary inputs in a PostgreSQL entry store: a ``SupplementaryQueue``
    that any number of processes share.

    Args:
        store: the PostgreSQL L0 store that keeps the inputs (its transactions are the ones
            ``take_pending`` joins).
        bus: where ``USER_SUPPLEMENTARY_INPUT`` events are published, if given.

    Raises:
        InvalidInputError: ``store`` is not a ``PostgresEntryStore``.
    """

    def __init__(self, store: PostgresEntryStore, bus: EventBus | None = None) -> None:
        if not isinstance(store, PostgresEntryStore):
            raise InvalidInputError(
                f"a PostgresSupplementaryQueue needs a PostgresEntryStore, got {preview(store)}"
            )
        super().__init__(store, bus)
        self._postgres = store

    def _exclude_other_consumers(self, task_iri: str) -> None:
        """Hold the task's lock until the caller's transaction ends (see the module)."""
        self._postgres.hold(f"supplement:{task_iri}")
