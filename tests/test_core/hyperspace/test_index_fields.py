"""Hyperspace: the dense arm embeds the same text as the lexical arm, the index fields alone."""

from __future__ import annotations

import numpy as np

from gliding_core import HashEmbedder, Memory, MemoryConfig, StoreConfig


def _unit(vector: list[float]) -> np.ndarray:
    array = np.asarray(vector, dtype=np.float64)
    return array / np.linalg.norm(array)


def test_a_provenance_field_does_not_move_the_dense_vector() -> None:
    config = MemoryConfig(store=StoreConfig(index_fields={"Fact": ["text"]}))
    embedder = HashEmbedder()
    with Memory(config=config, embedder=embedder) as memory:
        memory.store.put(
            {
                "@id": "urn:f:1",
                "@type": "Fact",
                "text": "the lake at sunrise",
                "speaker": "Caroline Zebrafinch",
            }
        )
        memory.store.put({"@id": "urn:n:1", "text": "a note", "by": "Caroline Zebrafinch"})
        vectors = memory.index.vectors(["urn:f:1", "urn:n:1"])  # type: ignore[attr-defined]
        fact = _unit(embedder.embed_documents(["the lake at sunrise"])[0])
        note = _unit(embedder.embed_documents(["Caroline Zebrafinch\na note"])[0])
        assert np.allclose(np.asarray(vectors["urn:f:1"], dtype=np.float64), fact, atol=1e-5)
        assert np.allclose(np.asarray(vectors["urn:n:1"], dtype=np.float64), note, atol=1e-5)
        # The lexical arm agrees: the speaker finds the note, not the fact.
        assert [iri for iri, _ in memory.store.search_ids("Zebrafinch")] == ["urn:n:1"]


def test_an_entry_without_index_fields_is_not_embedded() -> None:
    with Memory(embedder=HashEmbedder()) as memory:
        memory.store.put({"@id": "urn:a", "text": "kept but never searched"}, index=False)
        memory.store.put({"@id": "urn:b", "text": "searched"})
        assert memory.index.count() == 1
        assert [hit.iri for hit in memory.search("kept never searched", 5)] == ["urn:b"]
        assert memory.store.get("urn:a") is not None
