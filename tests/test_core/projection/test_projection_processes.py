"""The view cache of a memory shared through PostgreSQL sees the writes of other processes."""

from __future__ import annotations

from gliding_core.blackboard.graph import SparqlEndpoint
from gliding_core.cli.benchmarks import agents as work
from gliding_core.config import BlackboardConfig, MemoryConfig
from gliding_core.hyperspace.embedders import HashEmbedder
from gliding_core.memory import Memory


def _open(url: str, schema: str, endpoint: str) -> Memory:
    board = BlackboardConfig(endpoint=endpoint, permissions=work.bench_permissions())
    config = MemoryConfig(database_url=url, database_schema=schema, blackboard=board)
    memory = Memory(config=config, embedder=HashEmbedder())
    for frame in work.bench_frames():
        memory.scheduler.projector.register(frame)
    return memory


def test_a_cached_view_shows_a_node_another_memory_created_and_changed(
    postgres_url: str, postgres_schema: str, oxigraph_server: str
) -> None:
    # Two memories on one database are two processes' worth of buses and coordinators: the
    # other's write announces nothing here, so the view must be checked against the directory.
    graph = SparqlEndpoint(oxigraph_server)
    graph.update("CLEAR ALL")
    graph.close()
    task = work.generate(1, seed=0)[0]
    artifact = {"@id": task.item("artifact", 1), "@type": "Artifact", "version": 1}
    with (
        _open(postgres_url, postgres_schema, oxigraph_server) as here,
        _open(postgres_url, postgres_schema, oxigraph_server) as there,
    ):
        reader = here.scheduler.with_roles({"act": work.FRAME_OF_ROLE["act"]})
        checker = here.agent("checker", role="check", task=task.iri)
        review = {"@id": task.item("review", 1), "@type": "Review", "version": 1}
        checker.write([{**review, "reviewed": 1, "verdict": "approve"}], area="review")
        writer = there.agent("doer", role="do", task=task.iri)
        first = reader.read(task.iri, "act", budget=2_000)
        assert first.level == "l3"  # the frame's view, now cached
        assert review["@id"] in first.iris
        assert artifact["@id"] not in first.iris
        assert here.scheduler.projector.cache.stats().valid >= 1
        writer.write([{**artifact, "content": "v1"}], area="execution")
        seen = reader.read(task.iri, "act", budget=2_000)
        assert artifact["@id"] in seen.iris
        writer.write([{**artifact, "version": 2, "content": "v2"}], area="execution", based_on=1)
        again = reader.read(task.iri, "act", budget=2_000)
        assert '"version":2' in again.text
