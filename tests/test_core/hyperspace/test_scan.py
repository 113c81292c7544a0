"""The exact scan's rows: whatever the writes, rewrites and removals, they answer as a plain
exact search over the entries' current vectors would."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from gliding_core.hyperspace.scan import ScanRows

DIMENSION = 6
IRIS = [f"urn:s:{i}" for i in range(12)]


def _unit_rows(seed: int, count: int) -> np.ndarray:
    rows = np.random.default_rng(seed).normal(size=(count, DIMENSION)).astype(np.float32)
    return rows / np.linalg.norm(rows, axis=1, keepdims=True)


def _exact(held: dict[str, np.ndarray], unit: np.ndarray, n: int, allowed: list[str] | None):
    scores = {
        iri: float(np.max(matrix @ unit))
        for iri, matrix in held.items()
        if allowed is None or iri in allowed
    }
    return sorted(scores.items(), key=lambda pair: (-pair[1], pair[0]))[:n]


_OPERATION = st.one_of(
    st.tuples(
        st.just("put"),
        st.dictionaries(st.sampled_from(IRIS), st.tuples(st.integers(0, 10**6), st.integers(1, 3))),
    ),
    st.tuples(st.just("drop"), st.lists(st.sampled_from([*IRIS, "urn:none"]), max_size=4)),
)


@settings(max_examples=300, deadline=None)
@given(
    operations=st.lists(_OPERATION, max_size=25),
    query_seed=st.integers(0, 10**6),
    n=st.integers(0, 14),
    allowed=st.none() | st.lists(st.sampled_from([*IRIS, "urn:none"]), max_size=6),
)
def test_the_rows_answer_as_an_exact_search_over_the_current_vectors(
    operations: list[tuple[str, object]], query_seed: int, n: int, allowed: list[str] | None
) -> None:
    held: dict[str, np.ndarray] = {}
    rows = ScanRows({}, DIMENSION)
    for kind, argument in operations:
        if kind == "put":
            assert isinstance(argument, dict)
            fresh = {iri: _unit_rows(seed, count) for iri, (seed, count) in argument.items()}
            rows.put(fresh)
            held.update(fresh)
        else:
            assert isinstance(argument, list)
            rows.drop(argument)
            for iri in argument:
                held.pop(iri, None)
        if rows.worn:  # what the dense index does: build them anew from what it holds
            rows = ScanRows(held, DIMENSION)
        assert len(rows) == len(held)
    unit = _unit_rows(query_seed, 1)[0]
    found = rows.best(unit, n, allowed)
    expected = _exact(held, unit, n, allowed)
    # The same ranking, up to scores equal within float rounding (a row scored in matrices of
    # other shapes may differ in its last bit): each hit is held, allowed and scored right.
    assert len(found) == len(expected) == len({iri for iri, _ in found})
    assert np.allclose([s for _, s in found], [s for _, s in expected], atol=1e-6)
    exact = dict(_exact(held, unit, len(held), allowed))
    assert all(abs(exact[iri] - score) <= 1e-6 for iri, score in found)


def test_equal_scores_are_ranked_by_iri_and_an_entry_by_its_best_window() -> None:
    same = _unit_rows(1, 1)
    other = _unit_rows(2, 1)
    rows = ScanRows({"urn:b": same, "urn:a": same.copy(), "urn:c": np.vstack([other, same])}, 6)
    assert [iri for iri, _ in rows.best(same[0], 3)] == ["urn:a", "urn:b", "urn:c"]
    assert [iri for iri, _ in rows.best(same[0], 2)] == ["urn:a", "urn:b"]
    rows.put({"urn:a": other})  # rewritten: its old row no longer counts
    assert [iri for iri, _ in rows.best(same[0], 3)] == ["urn:b", "urn:c", "urn:a"]
    assert rows.best(same[0], 5, allowed=["urn:a", "urn:gone"]) == [
        ("urn:a", float(other[0] @ same[0]))
    ]
    rows.drop(["urn:b", "urn:c"])
    assert rows.worn  # 4 of 5 rows dead
    assert [iri for iri, _ in rows.best(same[0], 5)] == ["urn:a"]
    assert rows.best(same[0], 0) == []
