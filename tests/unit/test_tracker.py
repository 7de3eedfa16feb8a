"""The tracker alone: rows in, exact transition counts out (no database)."""

from __future__ import annotations

import json
from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as st

from exporter.counting.tracker import Tracker, TrackerOptions
from exporter.model import DEAD, DONE, PENDING, RUNNING, JobRow, JobTypeLabels, Tallies

TOL = 30.0
MARK = " [lease-expired reclaim]"
RESULT = json.dumps(
    {
        "metrics": {
            "duration_ms": 8000,
            "cost": {"ai_usd": 0.01, "proxy_usd": 0.002, "total_usd": 0.015},
        }
    }
)


def make_tracker(cap: int = 50) -> Tracker:
    tallies = Tallies((1.0, 10.0), (1.0, 10.0), (1.0, 10.0))
    return Tracker(TrackerOptions(commit_lag_tolerance=TOL), JobTypeLabels({}, cap), tallies)


def row(job_id: str = "a", **kw: object) -> JobRow:
    base = JobRow(
        job_id=job_id, job_type=1, status=PENDING, attempts=0, max_attempts=3, last_error=None,
        result=None, run_after=1000.0, run_started_at=None, created_at=1000.0, updated_at=1000.0,
    )  # fmt: skip
    return replace(base, **kw)  # type: ignore[arg-type]


def running(job_id: str, at: float = 990.0) -> JobRow:
    """A job claimed at ``at`` (its first attempt), as the tracker reads it."""
    return row(job_id, status=RUNNING, attempts=1, run_started_at=at, updated_at=at)


def test_insert_after_baseline_is_one_enqueue_even_when_read_twice() -> None:
    t = make_tracker()
    t.baseline(1000.0, [], [])
    new = row(created_at=1005.0, updated_at=1005.0)
    t.apply(1010.0, [new])
    t.apply(1020.0, [new])  # still inside the tolerance window: re-read
    assert t.tallies.enqueued["1"] == 1


def test_rows_active_at_baseline_are_not_enqueues_but_their_completion_counts() -> None:
    t = make_tracker()
    running = row(
        status=RUNNING, attempts=1, run_started_at=990.0, updated_at=990.0, created_at=900.0
    )
    t.baseline(1000.0, [running], [])
    done = replace(running, status=DONE, result=RESULT, updated_at=1004.0)
    t.apply(1010.0, [done])
    assert t.tallies.enqueued["1"] == 0
    assert t.tallies.completed["1"] == 1
    assert t.tallies.latency["1"].total == 104.0
    assert t.tallies.wait["1"].total == 0.0  # run_after 1000 > run_started_at 990 is clamped
    assert abs(t.tallies.cost[("1", "other")] - 0.003) < 1e-12


def test_change_stamped_before_baseline_but_committed_after_is_history() -> None:
    t = make_tracker()
    running = row(
        status=RUNNING, attempts=1, run_started_at=980.0, updated_at=980.0, created_at=900.0
    )
    t.baseline(1000.0, [running], [])
    late = replace(running, status=DONE, result=RESULT, updated_at=995.0)
    t.apply(1010.0, [late])
    assert t.tallies.completed["1"] == 0


def test_commit_lag_within_tolerance_is_counted_once() -> None:
    t = make_tracker()
    t.baseline(1000.0, [], [])
    t.apply(1010.0, [])
    # Stamped 1008 (before the 1010 cycle) but committed after it: the 1020 cycle still reads
    # rows newer than 1010 - 30 and counts it; the 1030 cycle re-reads it and does not.
    job = row(created_at=1008.0, updated_at=1008.0)
    t.apply(1020.0, [job])
    t.apply(1030.0, [job])
    assert t.tallies.enqueued["1"] == 1


def test_fail_reclaim_fail_reclaim_complete_in_one_interval_counts_four_failures() -> None:
    t = make_tracker()
    job = row(status=RUNNING, attempts=1, max_attempts=5, run_started_at=1001.0, updated_at=1001.0,
              created_at=1001.0)  # fmt: skip
    t.baseline(1000.0, [], [])
    t.apply(1002.0, [job])
    # Between two cycles: fail(E1), reclaim, fail(E2), reclaim, complete on attempt 5.
    final = replace(job, status=DONE, attempts=5, last_error="boom" + MARK, result=RESULT,
                    run_started_at=1010.0, updated_at=1011.0)  # fmt: skip
    t.apply(1012.0, [final])
    failures = sum(n for (label, _), n in t.tallies.failures.items() if label == "1")
    assert failures == 4
    assert t.tallies.failures[("1", "lease_expired")] == 1
    assert (
        t.tallies.failures[("1", "error")] == 3
    )  # overwritten messages take the survivor's reason
    assert t.tallies.completed["1"] == 1


def test_dead_reason_is_the_last_failure_and_deadline_prefix_is_recognised() -> None:
    t = make_tracker()
    job = row(status=RUNNING, attempts=1, max_attempts=1, run_started_at=1001.0, updated_at=1001.0,
              created_at=1001.0)  # fmt: skip
    t.baseline(1000.0, [], [])
    t.apply(1002.0, [job])
    dead = replace(job, status=DEAD, last_error="JobDeadlineExceeded: 300s", updated_at=1005.0)
    t.apply(1006.0, [dead])
    assert t.tallies.failures[("1", "deadline")] == 1
    assert t.tallies.dead[("1", "deadline")] == 1
    reaped = replace(row("b"), status=DEAD, attempts=1, max_attempts=1,
                     last_error="JobDeadlineExceeded: 300s" + MARK, created_at=1003.0,
                     updated_at=1007.0)  # fmt: skip
    t.apply(1008.0, [reaped])
    assert t.tallies.dead[("1", "lease_expired")] == 1


def test_requeue_of_a_job_dead_before_start_is_counted_from_attempts() -> None:
    t = make_tracker()
    t.baseline(1000.0, [], [], dead_ids=["a"])
    t.apply(1040.0, [])
    # Dead long before the exporter started, requeued, claimed, failed once, now running again.
    job = row(status=RUNNING, attempts=2, created_at=100.0, run_started_at=1045.0, updated_at=1045.0,
              last_error="x")  # fmt: skip
    t.apply(1050.0, [job])
    assert t.tallies.requeued["1"] == 1
    assert t.tallies.failures[("1", "error")] == 1
    assert t.tallies.enqueued["1"] == 0


def test_attempts_going_down_reveal_death_and_requeue_between_cycles() -> None:
    t = make_tracker()
    job = row(status=RUNNING, attempts=2, max_attempts=3, run_started_at=990.0, created_at=900.0,
              updated_at=990.0)  # fmt: skip
    t.baseline(1000.0, [job], [])
    # Attempt 2 fails, attempt 3 fails -> DEAD, requeued (attempts 0), claimed: attempts 1.
    again = replace(job, attempts=1, run_after=1008.0, run_started_at=1009.0, updated_at=1009.0,
                    last_error=None)  # fmt: skip
    t.apply(1010.0, [again])
    assert t.tallies.failures[("1", "error")] == 2
    assert t.tallies.dead[("1", "error")] == 1
    assert t.tallies.requeued["1"] == 1


def test_a_release_with_attempts_lowered_is_no_failure_death_or_requeue() -> None:
    t = make_tracker()
    claimed = {"status": RUNNING, "attempts": 1, "run_started_at": 1001.0, "updated_at": 1001.0}
    jobs = [row(job_id, created_at=1000.5, run_after=1000.5, **claimed) for job_id in "abc"]
    t.baseline(1000.0, [], [])
    t.apply(1002.0, jobs)
    a, b, c = jobs
    # A worker shutting down hands its jobs back: PENDING, attempts - 1, run_after untouched.
    # b is then claimed again by another worker, c claimed again and completed.
    released = [
        replace(a, status=PENDING, attempts=0, run_started_at=None, updated_at=1005.0),
        replace(b, run_started_at=1006.0, updated_at=1006.0),
        replace(c, status=DONE, run_started_at=1006.0, updated_at=1007.0, result=RESULT),
    ]
    t.apply(1010.0, released)
    assert sum(t.tallies.failures.values()) == 0
    assert sum(t.tallies.dead.values()) == 0
    assert sum(t.tallies.requeued.values()) == 0
    assert t.tallies.completed["1"] == 1
    assert t.dead_delta["1"] == 0


def seen_pending(t: Tracker, **kw: object) -> JobRow:
    """A job enqueued after the baseline and read PENDING with 0 attempts (run_after 1001)."""
    job = row(created_at=1001.0, run_after=1001.0, updated_at=1001.0, **kw)
    t.baseline(1000.0, [], [])
    t.apply(1002.0, [job])
    return job


def test_a_requeue_hidden_in_one_interval_is_told_by_run_after_set_without_a_failure() -> None:
    t = make_tracker()
    job = seen_pending(t, max_attempts=1)
    # Claim, fail (dead: run_after kept), requeue (run_after = now() = 1005), claim, complete.
    done = replace(job, status=DONE, attempts=1, run_after=1005.0, run_started_at=1006.0,
                   updated_at=1007.0, result=RESULT)  # fmt: skip
    t.apply(1010.0, [done])
    assert t.tallies.failures[("1", "error")] == 1
    assert t.tallies.dead[("1", "error")] == 1
    assert t.tallies.requeued["1"] == 1
    assert t.tallies.completed["1"] == 1
    assert t.tallies.wait["1"].total == 1.0  # the wait of the attempt after the requeue


def test_a_job_dead_and_requeued_unseen_and_still_pending_counts_every_attempt_it_had() -> None:
    t = make_tracker()
    job = seen_pending(t, max_attempts=3)
    # Three claims, two retried failures, a death, a requeue: read PENDING with 0 attempts.
    again = replace(job, run_after=1008.0, updated_at=1008.0)
    t.apply(1010.0, [again])
    assert t.dead_delta["1"] == 0  # died and left the dead letter in the same interval
    t.apply(1020.0, [again])  # read again: counted once
    assert t.tallies.failures[("1", "error")] == 3
    assert t.tallies.dead[("1", "error")] == 1
    assert t.tallies.requeued["1"] == 1


def test_run_after_moved_by_a_failure_or_a_postponement_is_not_a_requeue() -> None:
    t = make_tracker()
    retried = seen_pending(t, job_id="a")
    reaped = row("b", created_at=1001.0, run_after=1001.0, updated_at=1001.0)
    postponed = row("c", created_at=1001.0, run_after=1001.0, updated_at=1001.0)
    t.apply(1002.5, [reaped, postponed])
    changed = [
        # Claim, fail (retried: run_after = now() + 5), claim, complete.
        replace(retried, status=DONE, attempts=2, last_error="boom", run_after=1008.0,
                run_started_at=1008.5, updated_at=1009.0, result=RESULT),
        # Claim, reaped (run_after = now()), claim, complete.
        replace(reaped, status=DONE, attempts=2, last_error=MARK, run_after=1004.0,
                run_started_at=1005.0, updated_at=1006.0, result=RESULT),
        # The application postpones a pending job by an hour.
        replace(postponed, run_after=4600.0, updated_at=1003.0),
    ]  # fmt: skip
    t.apply(1010.0, changed)
    assert t.tallies.failures[("1", "error")] == 1
    assert t.tallies.failures[("1", "lease_expired")] == 1
    assert sum(t.tallies.dead.values()) == 0
    assert sum(t.tallies.requeued.values()) == 0
    assert t.tallies.completed["1"] == 2


def test_labels_beyond_the_cap_fold_into_other() -> None:
    t = make_tracker(cap=2)
    t.baseline(1000.0, [], [])
    rows = [row(str(i), job_type=i, created_at=1001.0, updated_at=1001.0) for i in range(5)]
    t.apply(1002.0, rows)
    assert t.tallies.enqueued == {"0": 1, "1": 1, "other": 3}
    assert t.labels.folded == {2, 3, 4}


def test_settled_rows_are_forgotten_so_memory_stays_bounded() -> None:
    t = make_tracker()
    t.baseline(1000.0, [], [])
    rows = [row(str(i), status=DONE, attempts=1, result=RESULT, created_at=1001.0, updated_at=1001.0,
                run_started_at=1001.0) for i in range(100)]  # fmt: skip
    t.apply(1002.0, rows)
    assert t.tracked == 100
    t.apply(1002.0 + TOL + 1, [])
    assert t.tracked == 0


def test_finished_jobs_above_the_floor_are_held_until_it_passes_them() -> None:
    # A long transaction holds the floor at 1001: every job finished since stays, one entry
    # each however many times it changed; active jobs are tracked but not held.
    t = make_tracker()
    t.baseline(1000.0, [], [], origin=1001.0)
    done = [row(str(i), status=DONE, attempts=1, result=RESULT, created_at=1002.0,
                updated_at=1003.0 + i, run_started_at=1002.5) for i in range(3)]  # fmt: skip
    dead = row("x", status=DEAD, attempts=1, max_attempts=1, last_error="boom",
               created_at=1002.0, updated_at=1004.0, run_started_at=1003.0)  # fmt: skip
    t.apply(1010.0, [*done, dead, row("p", created_at=1005.0, updated_at=1005.0)], floor=1001.0)
    t.apply(1020.0, done[:1], floor=1001.0)  # read again past the held bound: no new entry
    assert (t.held, t.tracked) == (4, 5)
    t.apply(1030.0, [], floor=1004.5)  # the horizon moved past all but one of them
    assert (t.held, t.tracked) == (1, 2)
    assert "x" in t.dead_ids
    t.apply(1040.0, [], floor=1030.0)
    assert (t.held, t.tracked) == (0, 1)


@settings(max_examples=200, deadline=None)
@given(
    st.one_of(
        st.none(),
        st.text(max_size=20),
        st.recursive(
            st.none()
            | st.booleans()
            | st.floats(allow_nan=False)
            | st.integers()
            | st.text(max_size=5),
            lambda children: (
                st.lists(children, max_size=3)
                | st.dictionaries(st.text(max_size=8), children, max_size=3)
            ),
            max_leaves=10,
        ).map(json.dumps),
    )
)
def test_any_result_document_is_counted_or_marked_malformed_never_crashes(text: str | None) -> None:
    t = make_tracker()
    t.baseline(1000.0, [], [])
    job = row(status=DONE, attempts=1, result=text, created_at=1001.0, updated_at=1001.0,
              run_started_at=1001.0)  # fmt: skip
    t.apply(1002.0, [job])
    assert t.tallies.completed["1"] == 1
    assert all(v >= 0 for v in t.tallies.cost.values())


def test_a_job_first_read_after_the_cursor_passed_its_creation_is_an_enqueue() -> None:
    # A backlog: inserted at 1005, completed at 1050, first read when the cursor is at 1040.
    t = make_tracker()
    t.baseline(1000.0, [], [], origin=999.0)
    t.apply(1030.0, [], floor=1040.0)
    done = row(status=DONE, attempts=1, result=RESULT, created_at=1005.0, updated_at=1050.0,
               run_started_at=1049.0)  # fmt: skip
    t.apply(1060.0, [done], floor=1051.0)
    assert t.tallies.enqueued["1"] == 1
    assert t.tallies.requeued["1"] == 0
    assert t.tracked == 0


def test_a_dead_job_forgotten_leaves_its_id_so_its_requeue_is_recognised() -> None:
    t = make_tracker()
    t.baseline(1000.0, [], [], origin=999.0)
    dead = row(status=DEAD, attempts=1, max_attempts=1, last_error="x", created_at=1005.0,
               updated_at=1006.0, run_started_at=1005.5)  # fmt: skip
    t.apply(1010.0, [dead], floor=1009.0)
    t.apply(5000.0, [], floor=4999.0)
    assert t.tracked == 0
    assert "a" in t.dead_ids
    again = replace(dead, status=PENDING, attempts=0, last_error=None, run_started_at=None,
                    updated_at=5001.0)  # fmt: skip
    t.apply(5010.0, [again], floor=5009.0)
    assert t.tallies.requeued["1"] == 1
    assert t.tallies.enqueued["1"] == 1


def test_an_unknown_row_with_an_old_created_at_is_an_enqueue_unless_it_was_dead() -> None:
    # An archive restore inserts rows created long ago; "old" no longer means "was dead".
    t = make_tracker()
    t.baseline(1000.0, [], [], origin=999.0, dead_ids=["dead"])
    restored = row("restored", created_at=100.0, updated_at=1005.0)
    requeued = row("dead", created_at=100.0, updated_at=1005.0)
    t.apply(1010.0, [restored, requeued], floor=1009.0)
    assert t.tallies.enqueued["1"] == 1
    assert t.tallies.requeued["1"] == 1
    assert "dead" not in t.dead_ids
    assert t.dead_delta[1] == -1


def test_a_row_stamped_before_the_baseline_but_read_after_it_is_history() -> None:
    t = make_tracker()
    t.baseline(1000.0, [], [], origin=999.0)
    t.apply(1010.0, [row("late", created_at=999.5, updated_at=999.5)], floor=1009.0)
    assert t.tallies.counters()["enqueued"] == {}
    # Its next change is counted against what was read, not as a new job.
    claimed = row("late", status=RUNNING, attempts=1, run_started_at=1011.0, updated_at=1011.0)
    t.apply(1020.0, [claimed], floor=1019.0)
    assert t.tallies.counters()["enqueued"] == {}


def test_tracked_active_jobs_purged_are_counted_as_vanished_by_their_last_status() -> None:
    t = make_tracker()
    t.baseline(1000.0, [], [], origin=999.0)
    rows = [
        row("p"),
        row("r", status=RUNNING, attempts=1, run_started_at=1001.0, updated_at=1001.0),
        row("d", status=DONE, attempts=1, result=RESULT, run_started_at=1001.0, updated_at=1002.0),
    ]
    t.apply(1010.0, [replace(r, updated_at=r.updated_at + 1.0) for r in rows], floor=1005.0)
    t.forget(["p", "r", "d", "never-seen"])
    assert +t.tallies.vanished == {"pending": 1, "running": 1}
    assert t.tracked == 0
