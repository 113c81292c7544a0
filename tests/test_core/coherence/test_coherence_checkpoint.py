"""The SQLite directory's WAL checkpoints run on their own thread, not inside a writer's COMMIT."""

from __future__ import annotations

import time
from pathlib import Path

from gliding_core.coherence import CoherenceCoordinator, DictNodeSource, SQLiteDirectory
from gliding_core.coherence.checkpoint import CHECKPOINT_EVERY, WalCheckpoints


def _write_nodes(directory: SQLiteDirectory, first: int, count: int) -> None:
    coherence = CoherenceCoordinator(DictNodeSource(), directory)
    for i in range(first, first + count):
        coherence.write("a", f"urn:node:{i}", {"@id": f"urn:node:{i}", "n": i}, based_on=0)


def test_commits_do_not_checkpoint_and_the_thread_does(tmp_path: Path) -> None:
    path = tmp_path / "d.sqlite3"
    directory = SQLiteDirectory(path)
    assert directory._conn.execute("PRAGMA wal_autocheckpoint").fetchone() == (0,)
    before = path.stat().st_size
    _write_nodes(directory, 0, CHECKPOINT_EVERY - 1)
    assert directory._checkpoints._thread is None  # under the threshold: no checkpoint asked
    assert path.stat().st_size == before  # the commits stayed in the log
    _write_nodes(directory, CHECKPOINT_EVERY - 1, 1)
    deadline = time.monotonic() + 60  # a liveness bound, not a speed check
    while path.stat().st_size == before and time.monotonic() < deadline:
        time.sleep(0.01)
    assert path.stat().st_size > before  # the thread moved the log into the database
    thread = directory._checkpoints._thread
    directory.close()
    assert thread is not None
    assert not thread.is_alive()
    with SQLiteDirectory(path) as reopened:  # nothing lost: every record is there
        assert reopened.record(f"urn:node:{CHECKPOINT_EVERY - 1}").generation == 1


def test_a_closed_checkpointer_starts_no_thread(tmp_path: Path) -> None:
    checkpoints = WalCheckpoints(tmp_path / "x.sqlite3", every=1)
    checkpoints.close()
    checkpoints.committed()
    assert checkpoints._thread is None
    checkpoints.close()  # twice: harmless
