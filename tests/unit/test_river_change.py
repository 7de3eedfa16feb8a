"""The River reader's per-job arithmetic: two versions of a row in, exact deltas out.

Each case is a path through River's state machine (its sqlc queries: JobGetAvailable,
JobSetStateIfRunningMany, JobRescueMany, JobCancel, JobRetry, JobSchedule), taken between two
cycles. ``cancel_mark`` is what river.sql reads: the JobCancel mark of a job cancelled while
waiting, None for every other version (a running job's cancel is finalised with an entry).
"""

from __future__ import annotations

from exporter.profiles.river import INSERTED, RowState, change

E, L = "error", "lease_expired"


def test_an_error_whose_retry_is_near_goes_back_to_available_and_is_still_a_failure() -> None:
    # JobSetStateErrorAvailable: no retryable state is ever seen, only the entry.
    before = RowState("running", attempt=1)
    delta = change(before, RowState("available", attempt=1, errors=1), [E])
    assert (delta.failures, delta.retried, delta.dead) == ((E,), 1, None)


def test_two_errors_and_a_completion_between_two_reads_count_two_failures() -> None:
    now = RowState("completed", attempt=3, errors=2, ended_at=10.0)
    delta = change(INSERTED, now, [E, E])
    assert (delta.completed, delta.failures, delta.retried) == (1, (E, E), 2)


def test_the_last_attempts_error_discards_the_job_with_its_reason() -> None:
    before = RowState("running", attempt=3, errors=2)
    delta = change(before, RowState("discarded", attempt=3, errors=3, ended_at=5.0), [E, E, E])
    assert (delta.failures, delta.dead, delta.retried) == ((E,), E, 0)


def test_a_rescue_is_a_lost_worker_retried() -> None:
    before = RowState("running", attempt=1)
    delta = change(before, RowState("retryable", attempt=1, errors=1), [L])
    assert (delta.failures, delta.retried, delta.dead) == ((L,), 1, None)


def test_a_rescue_with_attempts_used_up_is_a_lost_worker_and_a_death() -> None:
    before = RowState("running", attempt=2, errors=1)
    delta = change(before, RowState("discarded", attempt=2, errors=2, ended_at=5.0), [E, L])
    assert (delta.failures, delta.dead, delta.retried) == ((L,), L, 0)


def test_a_jobcancel_returned_by_the_worker_is_a_cancellation_not_a_failure() -> None:
    before = RowState("running", attempt=1)
    delta = change(before, RowState("cancelled", attempt=1, errors=1, ended_at=5.0), [E])
    assert (delta.cancelled, delta.failures, delta.retried) == (1, (), 0)


def test_a_running_job_cancelled_by_hand_is_no_failure_though_its_worker_appends_an_error() -> None:
    # JobCancel marks the running job; its worker's error becomes 'cancelled' in
    # JobSetStateIfRunningMany, entry appended; both between two reads.
    before = RowState("running", attempt=2, errors=1)
    now = RowState("cancelled", attempt=2, errors=2, ended_at=5.0)
    delta = change(before, now, [E, E])
    assert (delta.cancelled, delta.failures, delta.retried) == (1, (), 0)


def test_a_stuck_job_cancelled_by_hand_and_finalised_by_the_rescuer_is_no_failure() -> None:
    before = RowState("running", attempt=1)
    delta = change(before, RowState("cancelled", attempt=1, errors=1, ended_at=5.0), [L])
    assert (delta.cancelled, delta.failures, delta.dead) == (1, (), None)


def test_an_error_then_a_cancel_by_hand_while_waiting_keeps_the_failure() -> None:
    before = RowState("running", attempt=1)
    now = RowState("cancelled", attempt=1, errors=1, cancel_mark="t1", ended_at=5.0)
    delta = change(before, now, [E])
    assert (delta.cancelled, delta.failures, delta.retried) == (1, (E,), 1)


def test_a_waiting_job_cancelled_by_hand_is_one_cancellation() -> None:
    delta = change(INSERTED, RowState("cancelled", cancel_mark="t1", ended_at=5.0), [])
    assert (delta.cancelled, delta.failures, delta.by_hand) == (1, (), 0)


def test_a_job_cancelled_waiting_retried_by_hand_then_cancelled_in_job_is_no_failure() -> None:
    # The first cancel's mark stays in metadata, but river.sql reads it only for a waiting
    # cancel: the in-job cancel's version carries none.
    before = RowState("cancelled", cancel_mark="t1", ended_at=5.0)
    now = RowState("cancelled", attempt=1, errors=1, ended_at=9.0)
    delta = change(before, now, [E])
    assert (delta.by_hand, delta.cancelled, delta.failures) == (1, 1, ())


def test_a_snooze_gives_its_attempt_back_and_is_no_failure() -> None:
    before = RowState("running", attempt=1)
    delta = change(before, RowState("available", attempt=0, snoozed=1), [])
    assert (delta.failures, delta.retried, delta.completed) == ((), 0, 0)


def test_a_snooze_then_a_completion_between_two_reads_is_one_completion() -> None:
    now = RowState("completed", attempt=1, snoozed=1, ended_at=4.0)
    delta = change(RowState("running", attempt=1), now, [])
    assert (delta.completed, delta.failures) == (1, ())


def test_a_soft_stop_gives_the_attempt_back_without_a_failure() -> None:
    before = RowState("running", attempt=2, errors=1)
    delta = change(before, RowState("available", attempt=1, errors=1), [E])
    assert (delta.failures, delta.retried) == ((), 0)


def test_jobretry_of_a_discarded_job_that_then_completes_is_a_requeue_by_hand() -> None:
    before = RowState("discarded", attempt=1, errors=1, ended_at=5.0)
    delta = change(before, RowState("completed", attempt=2, errors=1, ended_at=9.0), [E])
    assert (delta.by_hand, delta.retried, delta.completed, delta.failures) == (1, 0, 1, ())


def test_jobschedule_promoting_a_retryable_job_counts_nothing() -> None:
    before = RowState("retryable", attempt=1, errors=1)
    delta = change(before, RowState("available", attempt=1, errors=1), [E])
    assert (delta.failures, delta.retried, delta.completed, delta.dead) == ((), 0, 0, None)


def test_river_exports_lost_workers_and_errors_but_no_deadline() -> None:
    from exporter.profiles import PRESETS
    from exporter.profiles.mapping import coverage_of
    from exporter.vocabulary import ERROR, LEASE_EXPIRED, Status

    coverage = coverage_of(PRESETS["river"].capabilities)
    assert coverage.failure_reasons == (LEASE_EXPIRED, ERROR)
    assert coverage.statuses == (Status.PENDING, Status.RUNNING)
    assert "cancelled" not in coverage.withheld
    assert "requeued" not in coverage.withheld
