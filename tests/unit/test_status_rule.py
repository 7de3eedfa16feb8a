"""The rule of what one status change counts when a status may be none of the four
(exporter/counting/status_rule.py), on its own: every counting mode applies it, so a mode's tests
can be checked against these cases and this property."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from exporter.counting.status_rule import (
    CANCELLED,
    IGNORED,
    NOTHING,
    UNMAPPED,
    StatusChange,
    code_name,
    status_change,
)
from exporter.vocabulary import Status

PENDING, RUNNING, DONE, DEAD = (int(s) for s in Status)
ANY = (PENDING, RUNNING, DONE, DEAD, UNMAPPED, CANCELLED, IGNORED)
INSIDE = (PENDING, RUNNING, DEAD)  # in the counted flow, not finished


@pytest.mark.parametrize(
    ("before", "after", "counts"),
    [
        # The typo: a running job's completion written as a value nobody mapped.
        (RUNNING, UNMAPPED, StatusChange(unmapped=True)),
        (PENDING, UNMAPPED, StatusChange(unmapped=True)),
        (DEAD, UNMAPPED, StatusChange(unmapped=True)),
        (None, UNMAPPED, StatusChange(unmapped=True)),  # not even the enqueue
        (UNMAPPED, UNMAPPED, StatusChange(unmapped=True)),  # each change read is one row
        (DONE, UNMAPPED, StatusChange(unmapped=True)),  # done is final, the row still counts
        (RUNNING, IGNORED, NOTHING),
        (DONE, IGNORED, NOTHING),
        (None, IGNORED, NOTHING),
        # A cancel cuts the attempt short: one cancellation, no failure, no death.
        (RUNNING, CANCELLED, StatusChange(cancelled=True)),
        (PENDING, CANCELLED, StatusChange(cancelled=True)),
        (DEAD, CANCELLED, StatusChange(cancelled=True)),
        (CANCELLED, CANCELLED, NOTHING),
        (DONE, CANCELLED, NOTHING),
        (None, CANCELLED, StatusChange(enqueued=True, cancelled=True)),
        (UNMAPPED, CANCELLED, StatusChange(enqueued=True, cancelled=True)),
        # Back into the flow from outside it: one enqueue, then the move as from waiting.
        (CANCELLED, PENDING, StatusChange(enqueued=True, transition=True)),
        (IGNORED, RUNNING, StatusChange(enqueued=True, transition=True)),
        (UNMAPPED, DONE, StatusChange(enqueued=True, transition=True)),
        (None, PENDING, StatusChange(enqueued=True, transition=True)),
        # Between the four: as it always was.
        (PENDING, RUNNING, StatusChange(transition=True)),
        (RUNNING, DONE, StatusChange(transition=True)),
        (DEAD, PENDING, StatusChange(transition=True)),
        (DONE, PENDING, NOTHING),
        # A code nobody knows is unmapped, before and after.
        (RUNNING, 42, StatusChange(unmapped=True)),
        (42, PENDING, StatusChange(enqueued=True, transition=True)),
    ],
)
def test_each_change_counts_what_the_rule_says(
    before: int | None, after: int, counts: StatusChange
) -> None:
    assert status_change(before, after) == counts


def test_a_change_into_a_status_outside_the_four_is_never_a_transition() -> None:
    for before in (None, *ANY):
        for after in (UNMAPPED, IGNORED, CANCELLED):
            assert not status_change(before, after).transition, (before, after)


@given(st.lists(st.sampled_from(ANY), min_size=1, max_size=12))
def test_a_job_is_in_the_counted_flow_once_at_a_time(path: list[int]) -> None:
    """Enqueues minus the ways out of the flow (a completion, a cancel, a silent move to an
    unmapped or ignored value) is 1 while the job is inside the flow, 0 once outside: however
    its status wanders, no job is counted in twice or out twice."""
    if DONE in path:
        path = path[: path.index(DONE) + 1]  # done is final: nothing after it counts
    balance = 0
    before: int | None = None
    for after in path:
        change = status_change(before, after)
        balance += change.enqueued
        balance -= change.cancelled
        if change.transition and after == DONE:
            balance -= 1
        if before in INSIDE and after in (UNMAPPED, IGNORED):
            balance -= 1
        assert change.unmapped == (after == UNMAPPED)
        assert balance == (1 if after in INSIDE else 0), (path, before, after)
        before = after


def test_a_code_is_named_for_the_unstamped_counter() -> None:
    assert [code_name(c) for c in ANY] == [
        "pending", "running", "done", "dead", "other", "cancelled", "other",
    ]  # fmt: skip
