"""The Oban reader's per-job arithmetic: two versions of a row in, exact deltas out.

Each case is a path through Oban's state machine (oban/queries/*.sql), taken between two cycles.
"""

from __future__ import annotations

from exporter.profiles.oban import INSERTED, RowState, change

E, D = "error", "deadline"


def test_a_completion_after_a_failure_and_a_retry_in_one_interval_counts_both() -> None:
    # available -> executing -> retryable (error) -> staged -> executing -> completed
    now = RowState("completed", attempt=2, errors=1, ended_at=10.0)
    delta = change(INSERTED, now, [E])
    assert (delta.completed, delta.failures, delta.retried, delta.dead) == (1, (E,), 1, None)


def test_an_error_with_attempts_left_is_a_failure_and_an_automatic_retry() -> None:
    before = RowState("executing", attempt=1)
    delta = change(before, RowState("retryable", attempt=1, errors=1), [D])
    assert (delta.failures, delta.retried, delta.dead) == ((D,), 1, None)


def test_the_last_error_discards_with_its_own_reason_and_no_retry() -> None:
    before = RowState("executing", attempt=3, errors=2)
    delta = change(before, RowState("discarded", attempt=3, errors=3, ended_at=5.0), [E, E, D])
    assert (delta.failures, delta.dead, delta.retried) == ((D,), D, 0)


def test_a_lifeline_rescue_is_a_lost_lease_retried() -> None:
    before = RowState("executing", attempt=1)
    delta = change(before, RowState("available", attempt=1, rescued=1), [])
    assert (delta.failures, delta.retried, delta.dead) == (("lease_expired",), 1, None)


def test_a_lifeline_discard_of_an_orphan_is_a_lost_lease_and_a_death() -> None:
    before = RowState("executing", attempt=1)
    delta = change(before, RowState("discarded", attempt=1, ended_at=5.0), [])
    assert (delta.failures, delta.dead, delta.retried) == (("lease_expired",), "lease_expired", 0)


def test_a_lifeline_discard_without_an_attempt_withdraws_the_retry_of_its_last_failure() -> None:
    # retryable (counted: failure + retry), staged, then discarded unrun (attempts exhausted)
    before = RowState("available", attempt=2, errors=2)
    delta = change(before, RowState("discarded", attempt=2, errors=2, ended_at=5.0), [E, E])
    assert (delta.failures, delta.dead, delta.retried) == ((), E, -1)


def test_a_cancel_returned_by_the_job_is_a_cancellation_not_a_failure() -> None:
    before = RowState("executing", attempt=1)
    delta = change(before, RowState("cancelled", attempt=1, errors=1, ended_at=5.0), [E])
    assert (delta.cancelled, delta.failures, delta.retried) == (1, (), 0)


def test_a_cancel_by_hand_after_a_failure_keeps_the_failure() -> None:
    # executing -> retryable (error) -> cancel_many (marks meta) within one interval
    before = RowState("executing", attempt=1)
    now = RowState("cancelled", attempt=1, errors=1, cancel_mark="t", ended_at=5.0)
    delta = change(before, now, [E])
    assert (delta.cancelled, delta.failures, delta.retried) == (1, (E,), 1)


def test_a_snooze_is_neither_a_failure_nor_a_retry() -> None:
    before = RowState("executing", attempt=1)
    delta = change(before, RowState("scheduled", attempt=0, snoozed=1), [])
    assert (delta.failures, delta.retried, delta.completed) == ((), 0, 0)


def test_a_retry_by_hand_of_a_known_dead_job_that_then_completes() -> None:
    before = RowState("discarded", attempt=1, errors=1, ended_at=5.0)
    delta = change(before, RowState("completed", attempt=2, errors=1, ended_at=9.0), [E])
    assert (delta.by_hand, delta.retried, delta.completed, delta.failures) == (1, 0, 1, ())


def test_a_retry_by_hand_of_a_cancelled_job_waiting_to_run() -> None:
    before = RowState("cancelled", attempt=0, cancel_mark="t", ended_at=5.0)
    delta = change(before, RowState("available", cancel_mark="t"), [])
    assert (delta.by_hand, delta.retried, delta.cancelled, delta.failures) == (1, 0, 0, ())


def test_an_unchanged_version_counts_nothing() -> None:
    job = RowState("retryable", attempt=2, errors=2, rescued=1)
    delta = change(job, job, [E, E])
    assert (delta.retried, delta.failures, delta.completed, delta.dead) == (0, (), 0, None)


def test_oban_exports_its_three_failure_reasons_and_cancellations_the_default_none() -> None:
    from exporter.model import Coverage
    from exporter.profiles import PRESETS
    from exporter.profiles.mapping import coverage_of
    from exporter.vocabulary import DEADLINE, ERROR, LEASE_EXPIRED, Status

    coverage = coverage_of(PRESETS["oban"].capabilities)
    assert coverage.failure_reasons == (DEADLINE, LEASE_EXPIRED, ERROR)
    assert coverage.statuses == (Status.PENDING, Status.RUNNING)
    assert "cancelled" not in coverage.withheld
    assert "cancelled" in Coverage().withheld  # the default schema cannot cancel
