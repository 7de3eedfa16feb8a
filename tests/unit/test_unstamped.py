"""A change without an ``updated_at`` stamp, found by the polling tracker and its cycle: counted
in the unstamped counter and nothing else, never for a change the reads return, and said once
per queue (no database)."""

from __future__ import annotations

from dataclasses import replace

from exporter.counting.status_rule import UNMAPPED
from exporter.counting.transitions import TransitionCursor
from exporter.counting.unstamped import UNSTAMPED_MESSAGE
from exporter.model import DEAD, DONE, PENDING, RUNNING, Row
from tests.unit.test_counting_cycle import T0, horizon, mode, quiet, run
from tests.unit.test_tracker import make_tracker, row, running

FLOOR = 1009.75


def test_jobs_completed_without_a_stamp_are_counted_as_unstamped_and_nothing_else() -> None:
    t = make_tracker()
    jobs = [running(f"j{i}") for i in range(5)]
    t.baseline(1000.0, jobs, [])
    t.begin()
    assert t.suspects({PENDING: 0, RUNNING: 5}, FLOOR, 100) == []  # the table agrees
    suspects = t.suspects({PENDING: 0, RUNNING: 0}, FLOOR, 100)
    assert sorted(suspects) == [j.job_id for j in jobs]
    # SET state = 'finished' and nothing else: the stamp is still the claim's.
    t.settle_unread(suspects, [replace(j, status=DONE) for j in jobs], FLOOR)
    assert t.tallies.unstamped == {"done": 5}
    assert not any(t.tallies.counters().values())  # no enqueue, failure, death, completion
    assert t.unstamped_first is not None
    t.finish(1010.0, floor=FLOOR)
    assert t.tracked == 0  # done now, below the floor: forgotten
    # Found once: a later look finds nothing more to count.
    assert t.suspects({PENDING: 0, RUNNING: 0}, FLOOR, 100) == []


def test_a_change_stamped_where_the_reads_will_return_it_is_left_to_them() -> None:
    t = make_tracker()
    job = running("a")
    t.baseline(1000.0, [job], [])
    t.begin()
    # Committed late: stamped at the claim's transaction start, which the horizon kept above
    # the floor, and not read yet. The reads count it; the check must not.
    late = replace(job, status=DONE, updated_at=FLOOR)
    t.settle_unread(t.suspects({RUNNING: 0}, FLOOR + 1, 100), [late], FLOOR)
    assert t.tallies.unstamped == {}
    t.feed([late])
    t.finish(1010.0, floor=FLOOR)
    assert t.tallies.completed == {"1": 1}


def test_a_change_the_reads_returned_is_never_counted_again_as_unstamped() -> None:
    t = make_tracker()
    job = running("a")
    t.baseline(1000.0, [job], [])
    done = replace(job, status=DONE, updated_at=1001.0)
    t.begin()
    t.feed([done])  # read, and counted
    t.settle_unread(["a"], [done], FLOOR)  # looked up in the same snapshot: the same row
    t.finish(1010.0, floor=FLOOR)
    assert t.tallies.completed == {"1": 1}
    assert t.tallies.unstamped == {}


def test_a_missing_suspect_was_deleted_and_vanished_not_unstamped() -> None:
    t = make_tracker()
    t.baseline(1000.0, [running("a"), running("b")], [])
    t.begin()
    t.settle_unread(["a", "b"], [running("b")], FLOOR)
    assert t.tallies.vanished == {"running": 1}
    assert t.tallies.unstamped == {}
    assert t.suspects({RUNNING: 1}, FLOOR, 100) == []  # the count agrees again


def test_an_unstamped_death_moves_the_dead_letter_and_an_unstamped_claim_keeps_the_job() -> None:
    t = make_tracker()
    t.baseline(1000.0, [running("a"), row("b", updated_at=990.0)], [])
    t.begin()
    dead = replace(running("a"), status=DEAD, last_error="boom")
    claimed = replace(row("b", updated_at=990.0), status=RUNNING, attempts=1)
    t.settle_unread(["a", "b"], [dead, claimed], FLOOR)
    assert t.tallies.unstamped == {"dead": 1, "running": 1}
    assert +t.tallies.dead == {}
    assert t.dead_delta == {1: 1}
    t.finish(1010.0, floor=FLOOR)
    assert t.tracked == 1  # the claimed job is still active: tracked as it is now


def test_many_suspects_are_looked_up_a_slice_at_a_time_until_each_was() -> None:
    t = make_tracker()
    t.baseline(1000.0, [running(f"j{i:02}") for i in range(25)], [])
    looked: list[str] = []
    for _ in range(3):
        batch = t.suspects({RUNNING: 0}, FLOOR, 10)
        assert len(batch) == 10
        looked += batch
    assert set(looked) == {f"j{i:02}" for i in range(25)}


def test_only_jobs_below_the_floor_in_a_status_the_table_is_short_of_are_suspects() -> None:
    t = make_tracker()
    t.baseline(1000.0, [running("old"), running("new", at=1009.9), row("p", updated_at=1.0)], [])
    assert t.suspects({PENDING: 1, RUNNING: 1}, FLOOR, 100) == ["old"]


def _active(job_id: str) -> Row:
    """A running job as the baseline's ``active`` statement returns it."""
    at = T0.timestamp() + 50.0
    return {
        "job_id": job_id, "job_type": 3, "status": RUNNING, "attempts": 1, "max_attempts": 3,
        "last_error": None, "result": None, "run_after": at, "run_started_at": at,
        "created_at": at, "updated_at": at, "wait_seconds": None, "latency_seconds": None,
    }  # fmt: skip


def _cycle(cursor: TransitionCursor, seconds: float, rechecked: list[Row] | None) -> list[str]:
    answers: dict[str, list[object]] = {"snapshot": [quiet(seconds)], "changes_after": [[]]}
    if rechecked is not None:
        answers["recheck"] = [rechecked]
    asked, collected = run(cursor.cycle(horizon(seconds)), answers)  # type: ignore[arg-type]
    assert [q.name for q in asked if q.name == "recheck"] == (["recheck"] * (rechecked is not None))
    return [n.message for n in collected.notices]


def test_the_cycle_looks_up_suspects_and_says_so_once_per_queue() -> None:
    cursor = mode()
    run(cursor.cycle(horizon(100.0)),
        {"snapshot": [quiet(100.0)], "dead": [[]], "active": [[_active("a"), _active("b")]],
         "dead_ids": [[]]})  # fmt: skip
    # The table shows no running job: both are looked up; one completed without a stamp.
    done = {**_active("a"), "status": DONE}
    assert _cycle(cursor, 110.0, [done, _active("b")]) == [UNSTAMPED_MESSAGE]
    assert cursor.tallies.unstamped == {"done": 1}
    # Another one later: counted, not said again; nor by the next mode of the same queue.
    other = {**_active("b"), "status": UNMAPPED}
    assert _cycle(cursor, 111.0, [other]) == []
    assert cursor.tallies.unstamped == {"done": 1, "other": 1}
    fresh = TransitionCursor(cursor.sql, cursor.options, cursor.labels, cursor.tallies)
    run(fresh.cycle(horizon(120.0)),
        {"snapshot": [quiet(120.0)], "dead": [[]], "active": [[_active("c")]],
         "dead_ids": [[]]})  # fmt: skip
    assert _cycle(fresh, 130.0, [{**_active("c"), "status": DONE}]) == []
    assert fresh.tallies.unstamped == {"done": 2, "other": 1}
    # Nothing tracked that the table lacks: nothing looked up.
    assert _cycle(fresh, 131.0, None) == []
