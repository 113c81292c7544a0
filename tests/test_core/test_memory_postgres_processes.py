"""Memory on PostgreSQL with workers in several OS processes: what one worker does, the others
see, and what must happen once happens once.

Each worker is a child process opening the memory the way a deployment does (``Memory.open()``
with ``GLIDING_DATABASE_URL`` and ``GLIDING_DATABASE_SCHEMA``), on the session's PostgreSQL in
the test's own schema.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

from gliding_core import BlackboardConfig, Memory, MemoryConfig

REPOSITORY = Path(__file__).resolve().parents[2]
TASK = "urn:task:fleet"


def _env(url: str, schema: str, **more: str) -> dict[str, str]:
    return {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(REPOSITORY), str(REPOSITORY / "core")]),
        "GLIDING_DATABASE_URL": url,
        "GLIDING_DATABASE_SCHEMA": schema,
        "GLIDING_EMBEDDER": "hash",
        **more,
    }


def _workers(source: str, env: dict[str, str], names: list[str]) -> list[subprocess.Popen[str]]:
    return [
        subprocess.Popen(
            [sys.executable, "-c", textwrap.dedent(source), name],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for name in names
    ]


def _results(workers: list[subprocess.Popen[str]]) -> list[str]:
    """Each worker's standard output, once all have exited; a failed worker fails the test
    (and the others are stopped)."""
    try:
        outputs = []
        for worker in workers:
            out, err = worker.communicate(timeout=600)
            assert worker.returncode == 0, err
            outputs.append(out)
        return outputs
    finally:
        for worker in workers:
            if worker.poll() is None:
                worker.kill()
            worker.communicate()


_CONSUMER = """
    import json, sys
    from gliding_core import Memory

    name = sys.argv[1]
    taken = []
    with Memory.open() as memory:
        session = memory.session("urn:task:fleet", agent=name)
        while True:
            # Read before the cycle: once the producer's last input is committed and no
            # input is pending, none is left for any worker.
            done = memory.store.get("urn:fleet:done") is not None
            taken += [item.iri for item in session.start_cycle(memory.supplements)]
            if done and memory.supplements.pending_count("urn:task:fleet") == 0:
                break
        archived = [turn for _, turn in session.taken_inputs.values()]
        assert all(memory.store.get(iri) is not None for iri in archived)
    print(json.dumps(taken))
"""


def test_inputs_put_while_two_worker_processes_start_cycles_are_taken_once(
    postgres_url: str, postgres_schema: str
) -> None:
    config = MemoryConfig(embedder="hash", database_schema=postgres_schema)
    with Memory.open(postgres_url, config=config) as memory:
        memory.store.put({"@id": "urn:fleet:start", "text": "ready"})  # the schema exists
        workers = _workers(_CONSUMER, _env(postgres_url, postgres_schema), ["w1", "w2"])
        put = [memory.supplements.put(TASK, f"input {n}").iri for n in range(60)]
        memory.store.put({"@id": "urn:fleet:done", "text": "no more inputs"})
        first, second = (json.loads(out) for out in _results(workers))
        assert not set(first) & set(second)  # no input delivered twice
        assert sorted(first + second) == sorted(put)  # and none lost
        assert all(item.consumed for item in memory.supplements.history(TASK))


_INCREMENTER = """
    import sys
    from gliding_core import Memory

    name = sys.argv[1]
    with Memory.open() as memory:  # GLIDING_SPARQL_ENDPOINT names the graph
        handle = memory.agent(name, role="do", task=sys.argv[2])
        for _ in range(15):
            lease = handle.acquire(sys.argv[3], mode="write", timeout_s=120)
            node = handle.read(sys.argv[3])
            count = int(node.node["count"]) + 1
            handle.write(
                [{"@id": sys.argv[3], "count": str(count)}],
                area="execution",
                lease_token=lease.token,
                based_on=node.generation,
            )
            handle.release(sys.argv[3])
    print("ok")
"""


def test_three_worker_processes_increment_one_node_under_leases_losing_nothing(
    postgres_url: str, postgres_schema: str, oxigraph_server: str
) -> None:
    task = f"urn:task:{postgres_schema}"
    counter = f"urn:fleet:{postgres_schema}:counter"
    config = MemoryConfig(
        embedder="hash",
        database_schema=postgres_schema,
        blackboard=BlackboardConfig(endpoint=oxigraph_server),
    )
    with Memory.open(postgres_url, config=config) as memory:
        handle = memory.agent("starter", role="do", task=task)
        handle.write([{"@id": counter, "count": "0"}], area="execution")
        env = _env(postgres_url, postgres_schema, GLIDING_SPARQL_ENDPOINT=oxigraph_server)
        workers = [
            subprocess.Popen(
                [sys.executable, "-c", textwrap.dedent(_INCREMENTER), name, task, counter],
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            for name in ("w1", "w2", "w3")
        ]
        assert [out.strip() for out in _results(workers)] == ["ok"] * 3
        # Every increment of every process landed: one holder at a time, each on the
        # value the one before it wrote (a stale copy would have lost some).
        node = handle.read(counter)
        assert node is not None
        assert node.node["count"] == "45"
