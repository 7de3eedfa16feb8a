"""graphile-worker's change rules (exporter/profiles/graphile_stream.py) without a database."""

from __future__ import annotations

import pytest

from exporter.counting.stream_counter import credit
from exporter.model import PresetJobTypes, Tallies
from exporter.model.row_changes import DELETE, INSERT, UPDATE, RowChange
from exporter.profiles.graphile_stream import UNKNOWN_TASK, GraphileChanges
from exporter.vocabulary import ERROR, LEASE_EXPIRED

COMMIT = 1_000_000_100.0  # Unix seconds: 2001-09-09 01:48:20 UTC
LOCKED = "2001-09-09 01:48:10+00"  # 10 s before the commit
RUN_AT = "2001-09-09 01:48:05+00"
CREATED = "2001-09-09 01:48:00+00"
LATER = "2001-09-09 01:48:30+00"  # failJobs pushes run_at past its now()


def job(**values: str | None) -> dict[str, str | None]:
    row: dict[str, str | None] = {
        "id": "7", "task_id": "1", "attempts": "1", "max_attempts": "3", "last_error": None,
        "run_at": RUN_AT, "created_at": CREATED, "locked_at": LOCKED,
    }  # fmt: skip
    row.update(values)
    return row


BUCKETS = ((1.0, 60.0), (1.0, 60.0), (1.0, 60.0))


class Rules:
    """graphile's rules as the mode runs them: folded by task_id, credited under task names."""

    def __init__(self) -> None:
        self.changes = GraphileChanges("SELECT")
        self.changes.look({"tasks": [{"id": "1", "identifier": "mail"}]})
        self.fold = self.changes.fold(BUCKETS)

    def count(self, *changes: RowChange) -> Tallies:
        tally = self.fold.tally()
        for change in changes:
            self.fold.count(change, COMMIT, tally)
        tallies = Tallies(*BUCKETS)
        labels = PresetJobTypes(50)
        credit(tally, tallies, lambda key: labels.label_of_name(self.changes.name(key)), [])
        return tallies


def rules() -> Rules:
    return Rules()


def test_a_deleted_locked_row_is_a_completion_timed_from_its_old_row() -> None:
    tallies = rules().count(RowChange(DELETE, old=job()))
    assert tallies.completed == {"mail": 1}
    assert tallies.duration["mail"].total == 10.0
    assert tallies.wait["mail"].total == 5.0
    assert tallies.latency["mail"].total == 20.0


def test_an_unlock_with_attempts_lowered_is_a_release_never_a_failure() -> None:
    tallies = rules().count(RowChange(UPDATE, old=job(), new=job(attempts="0", locked_at=None)))
    assert not any(tallies.counters().values())


def test_a_failjobs_unlock_is_an_error_and_a_freed_lock_a_lost_lease() -> None:
    failed = job(locked_at=None, last_error="boom", run_at=LATER)
    freed = job(locked_at=None, attempts="3", last_error="boom", run_at=RUN_AT)
    tallies = rules().count(
        RowChange(UPDATE, old=job(last_error="boom"), new=failed),
        RowChange(UPDATE, old=job(attempts="3", last_error="boom"), new=freed),
    )
    assert tallies.failures == {("mail", ERROR): 1, ("mail", LEASE_EXPIRED): 1}
    assert tallies.dead == {("mail", LEASE_EXPIRED): 1}


def test_deleting_an_available_row_is_vanished_and_a_dead_one_nothing() -> None:
    tallies = rules().count(
        RowChange(DELETE, old=job(locked_at=None)),
        RowChange(DELETE, old=job(locked_at=None, attempts="3")),
    )
    assert tallies.vanished == {"pending": 1}
    assert not any(tallies.counters().values())


def test_a_job_of_a_task_never_read_is_counted_under_unknown_task() -> None:
    r = rules()
    assert not r.changes.known("9")
    assert r.count(RowChange(INSERT, new=job(task_id="9", locked_at=None))).enqueued == {
        UNKNOWN_TASK: 1
    }


def test_an_update_that_leaves_the_row_locked_is_quiet_and_one_that_unlocks_it_is_not() -> None:
    fold = rules().fold
    assert fold.quiet(None, LOCKED)  # a claim
    assert fold.quiet(LOCKED, LOCKED)  # changed while locked
    assert not fold.quiet(LOCKED, None)  # unlocked: a failure, a release or a death


def test_logical_setup_prints_the_graphile_table_and_refuses_a_preset_without_rules(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from exporter.cli import main

    dsn = ["--collect.counting", "logical", "--database.dsn", "postgresql://exp@db.invalid/app"]
    assert main(["logical-setup", "--queue.profile", "graphile-worker", *dsn], {}) == 0
    out = capsys.readouterr().out
    assert 'ALTER TABLE "graphile_worker"."_private_jobs" REPLICA IDENTITY FULL;' in out
    assert 'CREATE PUBLICATION "jobqueue_app" FOR TABLE "graphile_worker"."_private_jobs";' in out
    assert main(["logical-setup", "--queue.profile", "pgboss", *dsn], {}) == 0
    assert "profile pgboss cannot count from a change stream yet" in capsys.readouterr().out
