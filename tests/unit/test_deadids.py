"""The compact set of dead job ids: membership through adds, discards and rebuilds."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from exporter.counting import deadids
from exporter.counting.deadids import DeadIds


def test_ids_read_at_the_baseline_are_members_until_discarded() -> None:
    ids = DeadIds(["a", "b", "c"])
    assert "a" in ids
    assert "b" in ids
    assert len(ids) == 3
    ids.discard("b")
    assert "b" not in ids
    assert len(ids) == 2
    ids.add("b")
    ids.add("d")
    assert "b" in ids
    assert "d" in ids
    assert len(ids) == 4
    assert 3 not in ids


@given(
    st.lists(st.text(max_size=4), max_size=30, unique=True),  # a primary key's ids
    st.lists(st.tuples(st.booleans(), st.text(max_size=4)), max_size=200),
)
def test_it_behaves_as_a_set_across_rebuilds(
    initial: list[str], steps: list[tuple[bool, str]]
) -> None:
    rebuild_at = deadids._REBUILD_AT
    deadids._REBUILD_AT = 4  # fold changes into the sorted array often
    try:
        ids, model = DeadIds(initial), set(initial)
        for add, job_id in steps:
            if add:
                ids.add(job_id)
                model.add(job_id)
            else:
                ids.discard(job_id)
                model.discard(job_id)
            assert len(ids) == len(model)
        assert all(job_id in ids for job_id in model)
        assert not any(job_id in ids for _, job_id in steps if job_id not in model)
    finally:
        deadids._REBUILD_AT = rebuild_at
