"""The GoodJob reader, pure: two versions of a job's row in, exact deltas out (each case a path
through GoodJob's Job#perform and the dashboard's actions, taken between two cycles), and whole
cycles on rows shaped like good_job.sql's, for what the state diff does without a sequence."""

from __future__ import annotations

from typing import Any

import pytest

from exporter.model import CountingError
from exporter.profiles import PRESETS
from exporter.profiles.good_job import CLOCK_MARGIN, INSERTED, GoodJobReader, RowState, change
from exporter.profiles.mapping import coverage_of
from exporter.vocabulary import ERROR, LEASE_EXPIRED, Status

E, L = ERROR, LEASE_EXPIRED
T0 = 1_000_000.0


def test_a_retry_on_is_a_failure_retried_automatically() -> None:
    # running -> retry_on's enqueue of the same row, then the execution's end with error_event 3
    before = RowState("running", attempt=1)
    delta = change(before, RowState("waiting", attempt=1, errors=1), [E])
    assert (delta.failures, delta.retried, delta.dead, delta.by_hand) == ((E,), 1, None, 0)


def test_a_discard_on_or_an_unhandled_error_is_a_failure_and_a_death() -> None:
    before = RowState("running", attempt=2, errors=1)
    delta = change(before, RowState("discarded", attempt=2, errors=2, ended_at=5.0), [E, E])
    assert (delta.failures, delta.dead, delta.retried, delta.cancelled) == ((E,), E, 0, 0)


def test_an_interrupted_attempt_closed_by_the_next_perform_is_a_lost_lease_retried() -> None:
    # The process died mid-job; the next perform closes its execution, then starts a new one.
    before = RowState("running", attempt=1)
    delta = change(before, RowState("running", attempt=2, errors=1), [L])
    assert (delta.failures, delta.retried, delta.dead, delta.completed) == ((L,), 1, None, 0)


def test_an_interrupted_execution_seen_closed_before_the_next_start_counts_once() -> None:
    closed = RowState("running", attempt=1, errors=1)  # good_job_executions alone changed
    first = change(RowState("running", attempt=1), closed, [L])
    second = change(closed, RowState("running", attempt=2, errors=1), [L])
    assert (first.failures, second.failures, first.retried + second.retried) == ((L,), (), 1)


def test_a_discard_from_the_dashboard_is_a_cancellation_never_a_failure() -> None:
    waiting = RowState("waiting", attempt=1, errors=1)  # after a retry_on
    delta = change(waiting, RowState("cancelled", attempt=1, errors=1, cancel_mark="t",
                                     ended_at=5.0), [E])  # fmt: skip
    assert (delta.cancelled, delta.failures, delta.dead, delta.retried) == (1, (), None, 0)


def test_a_forced_discard_of_a_job_whose_process_died_is_a_cancellation_only() -> None:
    # Its execution is never closed: GoodJob records no error for that attempt.
    before = RowState("running", attempt=1)
    now = RowState("cancelled", attempt=1, cancel_mark="t", ended_at=5.0)
    delta = change(before, now, [])
    assert (delta.cancelled, delta.failures, delta.dead) == (1, (), None)


def test_a_failure_then_a_dashboard_discard_in_one_interval_keeps_the_failure() -> None:
    before = RowState("running", attempt=1)
    now = RowState("cancelled", attempt=1, errors=1, cancel_mark="t", ended_at=5.0)
    delta = change(before, now, [E])
    assert (delta.cancelled, delta.failures, delta.retried) == (1, (E,), 1)


def test_a_retry_from_the_dashboard_is_a_requeue_by_hand() -> None:
    before = RowState("discarded", attempt=1, errors=1, ended_at=5.0)
    delta = change(before, RowState("waiting", attempt=1, errors=1), [E])
    assert (delta.by_hand, delta.failures, delta.retried) == (1, (), 0)


def test_a_new_job_retried_then_done_in_one_interval_counts_both() -> None:
    delta = change(INSERTED, RowState("succeeded", attempt=2, errors=1, ended_at=9.0), [E])
    assert (delta.completed, delta.failures, delta.retried) == (1, (E,), 1)


def test_good_job_exports_two_reasons_cancellations_and_no_latency() -> None:
    coverage = coverage_of(PRESETS["good-job"].capabilities)
    assert coverage.failure_reasons == (LEASE_EXPIRED, ERROR)
    assert coverage.statuses == (Status.PENDING, Status.RUNNING)
    assert coverage.stuck_reasons == (LEASE_EXPIRED,)
    assert "cancelled" not in coverage.withheld
    assert "latency" in coverage.withheld


def _row(job_id: str, state: str, *, existed: bool = False, ended_at: float | None = None,
         attempt: int = 0, errors: int = 0, job_type: str = "MailJob") -> dict[str, Any]:  # fmt: skip
    return {"id": job_id, "job_type": job_type, "state": state, "attempt": attempt,
            "errors": errors, "error_kinds": [E] * errors, "rescued": 0, "snoozed": 0,
            "cancel_mark": None, "ended_at": ended_at, "duration": 1.0, "wait": 0.5,
            "latency": None, "existed": existed}  # fmt: skip


class Cycles:
    """Drives the reader as exporter/db/cycle.py does, with the rows a test says SQL returns."""

    def __init__(self) -> None:
        self.reader = GoodJobReader()
        self.args: list[tuple[Any, ...]] = []

    def run(self, at: float, changes: list[dict[str, Any]], active: list[str],
            snapshot: str = "10:12:11") -> list[str]:  # fmt: skip
        queries = self.reader.queries({"lower_bound": at, "hidden": 0, "prepared": 0})
        gauges = [{"job_type": "MailJob", "pending": len(active), "active_ids": active}]
        query = next(q for q in queries if q.name == "changes")
        self.args.append(self.reader.bind(query, {"gauges": gauges}).args)
        results = {"snapshot": [{"now": at, "snapshot": snapshot}], "gauges": gauges,
                   "changes": changes}  # fmt: skip
        return self.reader.apply(results).warnings


def test_without_a_sequence_the_row_says_which_unknown_jobs_are_new() -> None:
    cycles = Cycles()
    cycles.run(T0, [], [], snapshot="5:7:6")  # the baseline: no id watermark to wait for
    assert cycles.args[0][2:] == (None, [])  # no previous snapshot yet, no active job
    new = _row("9f3c0e2a-0000-4000-8000-000000000001", "waiting")
    # A dead job the reader forgot, retried from the dashboard: an attempt of it was in the
    # previous snapshot.
    back = _row("9f3c0e2a-0000-4000-8000-000000000002", "waiting", existed=True,
                attempt=1, errors=1)  # fmt: skip
    cycles.run(T0 + 1, [new, back], [new["id"], back["id"]])
    assert cycles.args[1][2] == "5:7:6"  # the previous snapshot, for the existed test
    counters = cycles.reader.tallies.counters()
    assert counters["enqueued"] == {"MailJob": 1}
    assert counters["requeued"] == {"MailJob": 1}
    assert counters["failures"] == {}  # the forgotten job's old failure is not counted again
    cycles.run(T0 + 2, [], [new["id"], back["id"]])
    assert cycles.args[2][3] == []  # both still active: nothing to look up by id
    cycles.run(T0 + 3, [], [back["id"]])
    assert cycles.args[3][3] == [new["id"]]  # it left the active set: looked up by id


def test_an_end_below_the_window_refuses_the_cycle_and_counts_nothing_of_it() -> None:
    cycles = Cycles()
    cycles.run(T0, [_row("a", "running", attempt=1)], ["a"])
    fresh = _row("b", "waiting")
    # "a" ended by a worker whose clock is more than the margin behind the database's.
    late = _row("a", "succeeded", attempt=1, ended_at=T0 - CLOCK_MARGIN - 30)
    with pytest.raises(CountingError, match="more than 60 s behind the database's"):
        cycles.run(T0 + 1, [fresh, late], ["b"])
    assert cycles.reader.tallies.counters()["enqueued"] == {}
    assert cycles.reader.tallies.counters()["completed"] == {}


def test_an_end_within_the_margin_of_a_clock_behind_is_counted() -> None:
    cycles = Cycles()
    cycles.run(T0, [_row("a", "running", attempt=1)], ["a"])
    cycles.run(T0 + 1, [_row("a", "succeeded", attempt=1, ended_at=T0 - CLOCK_MARGIN + 5)], [])
    assert cycles.reader.tallies.counters()["completed"] == {"MailJob": 1}


def test_an_active_job_gone_without_an_end_is_a_warning_not_a_count() -> None:
    cycles = Cycles()
    cycles.run(T0, [_row("a", "running", attempt=1)], ["a"])
    warnings = cycles.run(T0 + 1, [], [])
    assert any("1 GoodJob jobs were deleted" in w for w in warnings)
    assert cycles.reader.tallies.counters()["completed"] == {}
    assert "a" not in cycles.reader.known
