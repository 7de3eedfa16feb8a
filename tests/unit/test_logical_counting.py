"""The logical counting mode's transition rules, no database: committed row changes in, the
counters polling feeds out (docs/logical.md, "What it counts")."""

from __future__ import annotations

import pytest

from exporter.counting.status_rule import CANCELLED, IGNORED, UNMAPPED, status_change
from exporter.counting.stream_counter import StreamFold, credit
from exporter.counting.tracker import TrackerOptions
from exporter.db.change_folder import SPILL, Outlet, TransactionFolder
from exporter.db.slot_follower import Confirmation
from exporter.model import JobTypeLabels, Tallies
from exporter.model.change_tally import MAX_KEYS
from exporter.model.row_changes import DELETE, INSERT, TRUNCATE, UPDATE, Batch, RowChange
from exporter.settings.table import TableMapping
from tests.unit import pgoutput_messages as pg

T0 = "2026-12-04 19:30:33.991253+00"
T1 = "2026-12-04 19:30:35.991253+00"
T2 = "2026-12-04 19:30:45.491253+00"
COMMIT = 1_796_412_650.0
BUCKETS = ((1.0, 10.0), (0.1, 5.0), (60.0,))


class Counted:
    """A fold, the tally it counts into, and the queue's counters the tally is credited to."""

    def __init__(self, mapping: TableMapping | None = None) -> None:
        self.fold = StreamFold(mapping or TableMapping(), TrackerOptions(30.0), BUCKETS)
        self.tally = self.fold.tally()
        self.tallies = Tallies(*BUCKETS)
        self.named: list[tuple[str, str | None]] = []

    def count(self, *changes: RowChange) -> Tallies:
        for change in changes:
            self.fold.count(change, COMMIT, self.tally)
        credit(self.tally, self.tallies, JobTypeLabels({}, 50).label, self.named)
        self.dead_delta = dict(self.tally.dead_delta)
        self.tally = self.fold.tally()
        return self.tallies


def row(status: int, attempts: int = 0, **values: str | None) -> dict[str, str | None]:
    base: dict[str, str | None] = {
        "job_id": "j1", "job_type": "7", "status": str(status), "attempts": str(attempts),
        "max_attempts": "3", "last_error": None, "result": None, "run_after": T0,
        "run_started_at": None, "created_at": T0, "updated_at": T0,
    }  # fmt: skip
    return {**base, **values}


def running(attempts: int = 1) -> dict[str, str | None]:
    return row(2, attempts, run_started_at=T1, updated_at=T1)


def test_a_whole_life_counts_enqueue_failure_completion_with_its_figures() -> None:
    c = Counted()
    result = '{"metrics": {"duration_ms": 2500, "cost": {"ai_usd": 0.01, "total_usd": 0.015}}}'
    done = row(3, 2, run_started_at=T1, updated_at=T2, result=result, last_error="boom")
    t = c.count(
        RowChange(INSERT, new=row(1)),
        RowChange(UPDATE, old=row(1), new=running()),
        RowChange(UPDATE, old=running(), new=row(1, 1, last_error="boom")),
        RowChange(UPDATE, old=row(1, 1), new=running(2)),
        RowChange(UPDATE, old=running(2), new=done),
    )
    assert t.enqueued == {"7": 1}
    assert t.failures == {("7", "error"): 1}
    assert t.completed == {"7": 1}
    assert t.cost == pytest.approx({("7", "ai"): 0.01, ("7", "other"): 0.005})
    assert t.duration["7"].total == 2.5  # the worker's own figure
    assert t.wait["7"].total == 2.0  # run_started_at - run_after, exact
    assert t.latency["7"].total == 11.5  # updated_at - created_at, exact


def test_a_release_with_attempts_minus_one_is_no_failure_death_or_requeue() -> None:
    t = Counted().count(RowChange(UPDATE, old=running(1), new=row(1, 0)))
    assert not t.failures
    assert not t.dead
    assert not t.requeued


def test_failure_reasons_come_from_the_newest_failure() -> None:
    c = Counted()
    reaped = row(1, 1, last_error="JobDeadlineExceeded: 30s [lease-expired reclaim]")
    t = c.count(
        RowChange(UPDATE, old=running(), new=reaped),
        RowChange(UPDATE, old=running(), new=row(1, 1, last_error="JobDeadlineExceeded")),
        RowChange(UPDATE, old=running(3), new=row(4, 3, last_error="boom")),
    )
    assert t.failures == {("7", "lease_expired"): 1, ("7", "deadline"): 1, ("7", "error"): 1}
    assert t.dead == {("7", "error"): 1}
    assert c.dead_delta == {7: 1}


def test_a_requeue_leaves_the_dead_letter() -> None:
    c = Counted()
    assert c.count(RowChange(UPDATE, old=row(4, 3), new=row(1, 0))).requeued == {"7": 1}
    assert c.dead_delta == {7: -1}


def test_deletes_count_active_rows_as_vanished_and_finished_rows_as_nothing() -> None:
    c = Counted()
    t = c.count(*(RowChange(DELETE, old=row(status)) for status in (1, 2, 3, 4)))
    assert t.vanished == {"pending": 1, "running": 1}
    assert c.dead_delta == {7: -1}
    assert not t.completed


def test_a_changed_done_row_and_a_truncate_count_nothing_but_the_truncate() -> None:
    c = Counted()
    c.fold.count(RowChange(UPDATE, old=row(3), new=row(1)), COMMIT, c.tally)
    c.fold.count(RowChange(TRUNCATE), COMMIT, c.tally)
    assert c.tally.truncates == 1
    assert not any(c.count().counters().values())


def test_an_identity_index_update_without_old_key_keeps_the_status() -> None:
    # REPLICA IDENTITY USING INDEX (job_id, status, attempts): a renew sends no old key at all.
    assert not any(Counted().count(RowChange(UPDATE, new=running())).counters().values())


def test_unmapped_means_uncounted_from_or_to_a_status_the_mapping_does_not_name() -> None:
    # A typo in status_values (the table writes 3, the mapping says 9): completions are counted
    # as unmapped rows, and as nothing else: no failure, no death, no completion.
    mapping = TableMapping(status_values={"pending": 1, "running": 2, "done": 9, "dead": 4})
    c = Counted(mapping)
    t = c.count(
        RowChange(UPDATE, old=running(), new=row(3, 1, result="{}")),  # 3: unmapped here
        RowChange(UPDATE, old=running(), new=row(3, 1, result="{}")),
    )
    assert not any(t.counters().values())
    assert t.unmapped_status == {"3": 2}
    assert c.named == [("3", "3")]


CODES = {
    1: "1",
    2: "2",
    3: "3",
    4: "4",
    UNMAPPED: "typo",
    CANCELLED: "cancelled",
    IGNORED: "archived",
}


@pytest.mark.parametrize("before", [None, *CODES])
@pytest.mark.parametrize("after", list(CODES))
def test_the_stream_counts_each_status_change_as_the_one_rule_says(
    before: int | None, after: int
) -> None:
    mapping = TableMapping(cancelled=("cancelled",), ignored=("archived",))
    c = Counted(mapping)
    new = row(after, 1, result="{}", last_error="boom")
    if before is None:
        change = RowChange(INSERT, new={**new, "status": CODES[after]})
    else:
        old = {**row(before, 1), "status": CODES[before]}
        change = RowChange(UPDATE, old=old, new={**new, "status": CODES[after]})
    t = c.count(change)
    rule = status_change(before, after)
    assert sum(t.enqueued.values()) == rule.enqueued
    assert sum(t.cancelled.values()) == rule.cancelled
    assert sum(t.unmapped_status.values()) == rule.unmapped
    moved = sum(t.completed.values()) + sum(t.failures.values()) + sum(t.dead.values())
    moved += sum(t.requeued.values())
    if not rule.transition:
        assert moved == 0  # a change into a status outside the four is no transition
    assert c.dead_delta.get(7, 0) == (after == 4 and before != 4 and rule.transition) - (
        before == 4 and after != 4
    )


def test_a_mapped_table_is_read_by_its_column_names_and_status_values() -> None:
    mapping = TableMapping(
        name="app.tasks",
        columns={"job_id": "id", "job_type": "kind", "status": "state", "attempts": "tries",
                 "max_attempts": "max_tries", "last_error": "error", "result": "output",
                 "run_after": "not_before", "run_started_at": "started_at",
                 "created_at": "inserted_at", "updated_at": "changed_at"},
        status_values={"pending": "queued", "running": "active", "done": "finished",
                       "dead": "failed"},
    )  # fmt: skip
    c = Counted(mapping)
    old = {"id": "1", "kind": "mail", "state": "active", "tries": "1", "changed_at": T0}
    new = {**old, "state": "finished", "output": "{}", "started_at": T0, "inserted_at": T0,
           "not_before": T0, "changed_at": T1}  # fmt: skip
    t = c.count(
        RowChange(INSERT, new={**old, "state": "queued"}),
        RowChange(UPDATE, old=old, new=new),
        RowChange(UPDATE, old=new, new={**new, "state": "paused"}),
    )
    assert t.enqueued == {"mail": 1}
    assert t.completed == {"mail": 1}
    assert t.latency["mail"].total == 2.0
    assert t.unmapped_status == {"'paused'": 1}
    assert c.fold.columns == {"kind", "state", "tries", "error", "output", "not_before",
                              "started_at", "inserted_at", "changed_at"}  # fmt: skip


def test_an_old_key_without_the_status_counts_nothing_and_a_null_status_is_outside_the_flow() -> (
    None
):
    # A key-only old row without the status (an identity the start refuses) must not pass for
    # a pending row: the status is taken as unchanged.
    key_only = {"job_id": "j1"}
    t = Counted().count(RowChange(UPDATE, old=key_only, new=row(3, 1, result="{}")))
    assert not any(t.counters().values())
    # A NULL status is a value no mapping names, as polling's SQL reads it: a job back from it
    # comes back into the flow.
    t = Counted().count(RowChange(UPDATE, old={**row(1, 1), "status": None}, new=row(2, 1)))
    assert t.enqueued == {"7": 1}


def test_quiet_updates_are_the_claims_heartbeats_and_changes_of_done_rows_only() -> None:
    fold = Counted().fold
    assert fold.quiet("1", "2")  # a claim
    assert fold.quiet("2", "2")  # a heartbeat
    assert fold.quiet("3", "1")  # a DONE row changed: not ours to count
    assert not fold.quiet("2", "3")  # a completion
    assert not fold.quiet("2", "1")  # a failure (or a release: the rows tell)
    assert not fold.quiet("4", "1")  # a requeue
    assert not fold.quiet("1", "4")  # a death
    assert not fold.quiet("2", "7")  # to an unmapped value: counted as unmapped
    assert not fold.quiet("2", None)


def test_a_tally_keeps_at_most_max_keys_job_types_apart_and_the_rest_under_other() -> None:
    c = Counted()
    for n in range(MAX_KEYS + 5):
        c.fold.count(RowChange(INSERT, new=row(1, job_type=f"t{n}")), COMMIT, c.tally)
    t = c.count()
    assert len(t.enqueued) == 51  # the label cap: 50 job types, the rest under other
    assert sum(t.enqueued.values()) == MAX_KEYS + 5


# --- the thread's folder: pgoutput messages into batches -------------------------------------

OID = 16386
COLUMNS = ("job_id", "job_type", "status", "priority", "payload", "attempts", "last_error",
           "result", "run_after", "run_started_at", "created_at", "updated_at")  # fmt: skip


def values(status: int, attempts: int = 0, **changed: object) -> list[object]:
    base: dict[str, object] = {
        "job_id": "j1", "job_type": "7", "status": str(status), "priority": "100",
        "payload": "{}", "attempts": str(attempts), "last_error": None, "result": None,
        "run_after": T0, "run_started_at": None, "created_at": T0, "updated_at": T0,
    }  # fmt: skip
    base.update(changed)
    return [base[c] for c in COLUMNS]


def folder(skip_below: int = 0, keys: tuple[str, ...] = ()) -> TransactionFolder:
    fold = Counted().fold
    fold_folder = TransactionFolder("job", fold, Outlet(), skip_below)
    identity = "i" if keys else "f"
    fold_folder.take(pg.relation(OID, "job", COLUMNS, keys, identity))
    return fold_folder


def credited(batches: list[Batch]) -> Tallies:
    tallies = Tallies(*BUCKETS)
    for batch in batches:
        credit(batch.tally, tallies, JobTypeLabels({}, 50).label, [])
    return tallies


def transaction(f: TransactionFolder, lsn: int, *changes: bytes) -> None:
    f.take(pg.begin(lsn))
    for change in changes:
        f.take(change)
    f.take(pg.commit(lsn, lsn + 8))


def test_the_captured_stream_of_one_job_counts_its_life_once_even_sent_twice() -> None:
    messages = pg.captured()
    f = TransactionFolder("job", Counted().fold, Outlet(), 0)
    for message in [*messages, *messages]:  # sent again after a reconnect: counted once
        f.take(message)
    batches = [b for b in f.outlet.take() if isinstance(b, Batch)]
    assert len(batches) == 1
    assert batches[0].commits == 6
    assert batches[0].position == 26552800  # the last Commit's end
    t = credited(batches)
    assert sum(t.enqueued.values()) == 1
    assert sum(t.failures.values()) == 1
    assert sum(t.completed.values()) == 1
    assert not t.vanished  # the DELETE came after DONE
    assert batches[0].tally.changes == 6  # the claims were read too, and counted as nothing


def test_another_tables_changes_in_the_publication_are_left_out() -> None:
    f = TransactionFolder("other", Counted().fold, Outlet(), 0)
    for message in pg.captured():
        f.take(message)
    assert f.outlet.take() == []


def test_a_batch_never_holds_part_of_a_transaction() -> None:
    f = folder()
    f.take(pg.begin(100))
    f.take(pg.insert(OID, values(1)))
    assert f.open
    assert f.outlet.take() == []  # taken mid-transaction: nothing of it yet
    f.take(pg.insert(OID, values(1)))
    f.take(pg.commit(100, 108))
    (batch,) = f.outlet.take()
    assert isinstance(batch, Batch)
    assert (batch.position, batch.commits, batch.tally.changes) == (108, 1, 2)


def test_a_transaction_past_the_spill_is_folded_apart_and_counted_the_same() -> None:
    f = folder()
    transaction(f, 100, *(pg.insert(OID, values(1, job_type=str(n % 3))) for n in range(SPILL * 4)))
    (batch,) = f.outlet.take()
    assert isinstance(batch, Batch)
    assert sum(batch.tally.enqueued.values()) == SPILL * 4
    assert batch.tally.changes == SPILL * 4


def test_a_heartbeat_is_read_without_building_its_rows_and_counts_nothing() -> None:
    f = folder()
    transaction(f, 100, pg.update(OID, values(2, 1), values(2, 1)))
    assert f._changes == []  # committed: nothing kept
    (batch,) = f.outlet.take()
    assert isinstance(batch, Batch)
    assert batch.tally.changes == 1
    assert not any(credited([batch]).counters().values())


def test_a_key_only_old_row_keeps_its_key_and_an_unchanged_toast_value_is_unknown() -> None:
    # REPLICA IDENTITY USING INDEX on (job_id, status, attempts): the old row carries those,
    # every other column as a null that means "not sent".
    f = folder(keys=("job_id", "status", "attempts"))
    old = [
        v if c in ("job_id", "status", "attempts") else None
        for c, v in zip(COLUMNS, values(2, 1), strict=True)
    ]
    done = values(3, 1, result=pg.TOAST, updated_at=T1, run_started_at=T0)
    transaction(f, 100, pg.update(OID, done, old, key=True))
    (batch,) = f.outlet.take()
    assert isinstance(batch, Batch)
    t = credited([batch])
    assert t.completed == {"7": 1}
    assert not t.cost  # the result was not sent: unknown, not malformed
    assert not t.malformed


def test_a_value_that_is_not_utf8_is_refused() -> None:
    from exporter.db.pgoutput import PgoutputError

    f = folder()
    f.take(pg.begin(100))
    with pytest.raises(PgoutputError, match="not UTF-8"):
        f.take(pg.insert(OID, values(1, job_type=b"\xff\xfe")))


def test_confirmation_waits_for_a_scrape_or_for_counts_a_few_intervals_old() -> None:
    confirm = Confirmation(floor=30.0)
    for at in (0.0, 5.0, 10.0):  # scraped every 5 s: the floor decides
        confirm.scraped(at)
    confirm.counted(100, at=0.0)
    confirm.counted(200, at=10.0)
    assert confirm.position(now=5.0) == 0  # counted, not scraped, not old: kept
    confirm.carried(100)
    assert confirm.position(now=5.0) == 100
    assert confirm.position(now=39.0) == 100
    assert confirm.position(now=40.0) == 200  # nothing scraped it for 30 s: let go
    confirm.counted(300, at=41.0)
    confirm.carried(300)
    assert confirm.position(now=41.0) == 300


def test_uncarried_counts_wait_twice_the_longest_scrape_gap_before_they_are_let_go() -> None:
    # A 1 s interval (floor 3 s) and Prometheus scraping every 10 s: a count no scrape carried
    # yet is kept 20 s, so a leader killed just before the next scrape leaves it to its successor.
    confirm = Confirmation(floor=3.0)
    assert confirm.max_age == 600.0  # no scrape seen yet: the bound
    for at in (0.0, 10.0, 20.0):
        confirm.scraped(at)
    assert confirm.max_age == 20.0
    confirm.counted(100, at=21.0)
    assert confirm.position(now=29.5) == 0  # 3 s (the floor) would have let it go
    assert confirm.position(now=41.0) == 100
    confirm.scraped(2000.0)  # a gap of half an hour: bounded
    assert confirm.max_age == 600.0
    assert confirm.anew().max_age == 600.0  # a new slot keeps what was learnt of the scrapes


# --- the commands -------------------------------------------------------------------------


@pytest.mark.usefixtures("restore_logging")
def test_without_psycopg2_the_start_names_the_extra(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import sys

    from exporter.cli import main

    monkeypatch.setitem(sys.modules, "psycopg2", None)
    args = ["--collect.counting", "logical", "--database.dsn", "postgresql://u@db.invalid/shop",
            "--database.connect-timeout", "1s"]  # fmt: skip
    assert main(args, {}) == 2
    err = capsys.readouterr().err
    assert "collect.counting" in err
    assert "jobqueue-exporter[logical]" in err


@pytest.mark.usefixtures("restore_logging")
def test_a_preset_with_logical_counting_is_refused_naming_the_setting(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from exporter.cli import main

    args = ["--collect.counting", "logical", "--queue.profile", "procrastinate",
            "--database.dsn", "postgresql://u@db.invalid/shop"]  # fmt: skip
    assert main(args, {}) == 2
    err = capsys.readouterr().err
    assert "collect.counting: queue shop" in err
    assert "use polling for this preset" in err


@pytest.mark.usefixtures("restore_logging")
def test_the_demo_refuses_logical_counting_before_starting_a_cluster(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from exporter.cli import main

    assert main(["demo", "--collect.counting", "logical"], {}) == 2
    assert "collect.counting: the demo counts by polling only" in capsys.readouterr().err


def test_an_unchanged_toast_value_is_taken_from_the_whole_old_row_under_full_identity() -> None:
    # A long last_error the failing UPDATE did not rewrite arrives as 'u' in the new row.
    f = folder()
    error = "JobDeadlineExceeded: " + "x" * 3000
    old = values(2, 1, last_error=error)
    transaction(f, 100, pg.update(OID, values(1, 1, last_error=pg.TOAST), old))
    (batch,) = f.outlet.take()
    assert isinstance(batch, Batch)
    assert credited([batch]).failures == {("7", "deadline"): 1}


def test_a_rails_style_table_naive_stamps_in_the_declared_zone_and_no_result() -> None:
    # timestamp(6) without time zone, written in +05:45, and no result column at all.
    columns = {r: r for r in ("job_id", "job_type", "status", "attempts", "max_attempts",
                              "last_error", "run_after", "run_started_at", "created_at",
                              "updated_at", "priority", "payload", "dedupe_key", "worker_id",
                              "lease_until")}  # fmt: skip
    mapping = TableMapping(columns=columns, time_zone="+05:45")
    c = Counted(mapping)
    assert "result" not in c.fold.columns
    naive = {"created_at": "2026-12-04 19:30:00", "run_after": "2026-12-04 19:30:00"}
    done = {**row(3, 1), **naive, "run_started_at": "2026-12-04 19:30:01",
            "updated_at": "2026-12-04 19:30:04"}  # fmt: skip
    done.pop("result")
    running_row = {**done, "status": "2", "updated_at": "2026-12-04 19:30:01"}
    t = c.count(RowChange(UPDATE, old=running_row, new=done))
    assert t.completed == {"7": 1}
    assert t.latency["7"].total == 4.0
    assert t.duration["7"].total == 3.0  # from the row: no result to read it from
    # The commit's own time (aware) meets the naive stamps without a TypeError: an update that
    # leaves updated_at alone ends at the commit.
    left_alone = {**done, "updated_at": running_row["updated_at"]}
    t = c.count(RowChange(UPDATE, old=running_row, new=left_alone))
    assert t.completed == {"7": 2}


def test_a_dead_row_deleted_under_an_identity_index_asks_for_a_recount_not_a_guess() -> None:
    # Its old row is the identity's key (job_id, status, attempts): no job type to move.
    c = Counted()
    c.fold.count(RowChange(DELETE, old={"job_id": "j1", "status": "4", "attempts": "3"}),
                 COMMIT, c.tally)  # fmt: skip
    assert c.tally.dead_unknown == 1
    assert not c.tally.dead_delta


def test_the_mode_recounts_the_dead_letter_at_its_next_cycle_after_such_a_delete() -> None:
    from exporter.counting.stream_mode import LogicalMode
    from exporter.counting.transitions import CursorOptions

    tallies = Tallies(*BUCKETS)
    mode = LogicalMode({}, CursorOptions(tracker=TrackerOptions(30.0)), TableMapping(),
                       JobTypeLabels({}, 50), tallies)  # fmt: skip
    mode.dead_letter.counted_at = 1  # recounted at the first cycle
    assert not mode.dead_letter.due(2)
    tally = mode.fold().tally()
    tally.dead_unknown = 1
    mode.take(Batch(tally, 100))
    assert mode.dead_letter.due(2)
