"""A second process for the coherence state machine: runs JSON commands from stdin on its own
coordinator over the shared SQLite files (or a PostgreSQL schema for the directory, its URL in
``GLIDING_TEST_DATABASE_URL``) and answers each on stdout (one line each)."""

from __future__ import annotations

import json
import os
import sys
from typing import Any

from gliding_core.coherence import CoherenceCoordinator, SQLiteDirectory, SQLiteNodeSource
from gliding_core.coherence.directory import Directory
from gliding_core.errors import EntryNotFoundError, StaleWriteError


class Child:
    """The coordinator of this process and the write-backs it did since the last answer."""

    def __init__(self) -> None:
        self.coordinator: CoherenceCoordinator | None = None
        self.parts: tuple[Directory, SQLiteNodeSource] | None = None
        self.written_back: list[tuple[str, int]] = []
        self.leases: set[tuple[str, str]] = set()

    def open(self, directory: str | None, nodes: str, postgres_schema: str | None = None) -> None:
        self.close()
        self.parts = (self.directory(directory, postgres_schema), SQLiteNodeSource(nodes))
        self.coordinator = CoherenceCoordinator(
            self.parts[1],
            self.parts[0],
            write_back=lambda iri, value, generation: self.written_back.append((iri, generation)),
            holds_write_lease=lambda agent, iri: (agent, iri) in self.leases,
        )

    @staticmethod
    def directory(path: str | None, postgres_schema: str | None) -> Directory:
        if postgres_schema is None:
            assert path is not None
            return SQLiteDirectory(path)
        from gliding_core.coherence.postgres_directory import PostgresDirectory

        url = os.environ["GLIDING_TEST_DATABASE_URL"]
        return PostgresDirectory.open(url, schema=postgres_schema)

    def close(self) -> None:
        if self.parts is not None:
            self.parts[0].close()
            self.parts[1].close()
            self.parts = None

    def run(self, command: dict[str, Any]) -> dict[str, Any]:
        op = command.pop("op")
        if op == "open":
            self.open(command.get("directory"), command["nodes"], command.get("postgres_schema"))
            return {}
        if op == "close":
            self.close()
            return {}
        assert self.coordinator is not None
        if op == "read":
            reading = self.coordinator.read(command["agent"], command["iri"])
            return {"value": reading.value, "generation": reading.generation}
        if op == "write":
            leased = (command["agent"], command["iri"])
            if command.pop("leased", False):
                self.leases.add(leased)
            try:
                return {"generation": self.coordinator.write(**command)}
            finally:
                self.leases.discard(leased)
        if op == "increment":
            return {"retries": increment(self.coordinator, **command)}
        getattr(self.coordinator, op)(**command)
        return {}


def increment(coordinator: CoherenceCoordinator, *, agent: str, iri: str, times: int) -> int:
    """Add 1 to the node's ``count`` ``times`` times, retrying refused writes; return retries."""
    retries = 0
    for _ in range(times):
        while True:
            reading = coordinator.read(agent, iri)
            value = {**reading.value, "count": reading.value["count"] + 1}
            try:
                coordinator.write(agent, iri, value, based_on=reading.generation)
                break
            except StaleWriteError:
                retries += 1
    return retries


def main() -> None:
    child = Child()
    for line in sys.stdin:
        try:
            answer = child.run(json.loads(line))
        except StaleWriteError as exc:
            answer = {
                "error": "StaleWriteError",
                "current_generation": exc.current_generation,
                "current_value": exc.current_value,
            }
        except EntryNotFoundError:
            answer = {"error": "EntryNotFoundError"}
        answer["written_back"] = child.written_back
        child.written_back = []
        sys.stdout.write(json.dumps(answer) + "\n")
        sys.stdout.flush()
    child.close()


if __name__ == "__main__":
    main()
