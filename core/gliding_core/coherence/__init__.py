"""L2 coherence: MESI copies of shared nodes, one coherent view per agent, fewest tokens shown.

Every agent holds copies of the shared (blackboard) nodes it read, each with the generation it
read. The ``Directory`` is the one place that holds per-agent state: per node, which agents
hold a copy, in which MESI state, at which generation. The coordinator (``Coherence``, also
exported as ``CoherenceCoordinator``) executes
the protocol (``protocol.TRANSITIONS``, a table of pure transitions) for an agent's reads, writes,
write-backs, evictions and lease expiries, against a ``NodeSource`` (the blackboard, through a
narrow seam) and announces invalidations on the ``EventBus``. ``render_shared`` shows an
agent's shared nodes by what it already saw: a reference, the change, or the whole node.

Every blackboard owns one coordinator (``Blackboard.coherence``; every write goes through it
from ``gliding_core.blackboard.writes``): agents' handles read and write through it, the board's
flush is its write-back, and lease expiries and lost agents reach it from the coordination
layer. A ``SQLiteDirectory`` beside the coordination database is shared by the processes of a
memory directory whose blackboard is on disk or on a SPARQL server; a ``PostgresDirectory``
(``coherence.postgres_directory``, imported only by who uses it: it needs the ``postgres`` extra)
by the processes of every machine on one database, each change pushed to them by notification.

Invariants (each module states its own): single writer / multiple readers per node; a served
copy equals the node's current value and generation; generations never decrease; a write based
on an old generation is refused unless the writer holds a Write lease; dirty values are written
back before any copy is downgraded or dropped, critical ones before the write returns.

Decision on L0's ``mesi_state`` column: retired. A single column per entry cannot say "A holds
M, B holds I", and L0 is the main memory under the agents' caches, which in MESI has no state of
its own. From this layer on the directory alone holds copy states; nothing reads or writes the
column. It stays in the schema with its default ``S`` so existing files open unchanged;
``L0Store.set_mesi_state`` should be deprecated and the column dropped at the next schema
upgrade (a change to ``store/sqlite.py`` and ``store/entry.py`` left to their owner).
"""

from gliding_core.coherence.context import SharedContext, SharedItem, render_shared
from gliding_core.coherence.coordinator import (
    CRITICAL_TAGS,
    Coherence,
    CoherenceCoordinator,
    NodeDelta,
    Reading,
)
from gliding_core.coherence.directory import Copy, Directory, LocalDirectory, NodeRecord
from gliding_core.coherence.node_sources import DictNodeSource, NodeSource, SQLiteNodeSource
from gliding_core.coherence.protocol import TRANSITIONS, Action, CopyEvent, Transition, transition
from gliding_core.coherence.sqlite_directory import SQLiteDirectory

__all__ = [
    "CRITICAL_TAGS",
    "TRANSITIONS",
    "Action",
    "Coherence",
    "CoherenceCoordinator",
    "Copy",
    "CopyEvent",
    "DictNodeSource",
    "Directory",
    "LocalDirectory",
    "NodeDelta",
    "NodeRecord",
    "NodeSource",
    "Reading",
    "SQLiteDirectory",
    "SQLiteNodeSource",
    "SharedContext",
    "SharedItem",
    "Transition",
    "render_shared",
    "transition",
]
