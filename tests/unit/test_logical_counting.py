"""The logical counting mode's transition rules, no database: committed row changes in, the
counters polling feeds out (docs/logical.md, "What it counts")."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pytest

from exporter.counting.stream_counter import ChangeCounter
from exporter.counting.tracker import TrackerOptions
from exporter.db.change_stream import TransactionReader
from exporter.db.pgoutput import decode
from exporter.db.slot_follower import Confirmation
from exporter.model import JobTypeLabels, Tallies
from exporter.model.row_changes import DELETE, INSERT, TRUNCATE, UPDATE, RowChange, Transaction
from exporter.settings.table import TableMapping

FIXTURE = Path(__file__).parent / "fixtures" / "pgoutput_job_lifecycle.json"
T0 = "2026-12-04 19:30:33.991253+00"
T1 = "2026-12-04 19:30:35.991253+00"
T2 = "2026-12-04 19:30:45.491253+00"


def counter(mapping: TableMapping | None = None) -> ChangeCounter:
    return ChangeCounter(
        mapping or TableMapping(),
        TrackerOptions(commit_lag_tolerance=30.0),
        JobTypeLabels({}, 50),
        Tallies((1.0, 10.0), (0.1, 5.0), (60.0,)),
    )


def row(status: int, attempts: int = 0, **values: str | None) -> dict[str, str | None]:
    base: dict[str, str | None] = {
        "job_id": "j1", "job_type": "7", "status": str(status), "attempts": str(attempts),
        "max_attempts": "3", "last_error": None, "result": None, "run_after": T0,
        "run_started_at": None, "created_at": T0, "updated_at": T0,
    }  # fmt: skip
    return {**base, **values}


_lsn = iter(range(100, 10_000, 10))


def tx(*changes: RowChange, end: int | None = None) -> Transaction:
    at = end if end is not None else next(_lsn)
    return Transaction(commit_lsn=at - 1, end_lsn=at, commit_time=1_796_412_650.0, changes=changes)


def running(attempts: int = 1) -> dict[str, str | None]:
    return row(2, attempts, run_started_at=T1, updated_at=T1)


def test_a_whole_life_counts_enqueue_failure_completion_with_its_figures() -> None:
    c = counter()
    result = '{"metrics": {"duration_ms": 2500, "cost": {"ai_usd": 0.01, "total_usd": 0.015}}}'
    done = row(3, 2, run_started_at=T1, updated_at=T2, result=result, last_error="boom")
    c.apply(tx(RowChange(INSERT, new=row(1))))
    c.apply(tx(RowChange(UPDATE, old=row(1), new=running())))
    c.apply(tx(RowChange(UPDATE, old=running(), new=row(1, 1, last_error="boom"))))
    c.apply(tx(RowChange(UPDATE, old=row(1, 1), new=running(2))))
    c.apply(tx(RowChange(UPDATE, old=running(2), new=done)))
    t = c.tallies
    assert t.enqueued == {"7": 1}
    assert t.failures == {("7", "error"): 1}
    assert t.completed == {"7": 1}
    assert t.cost == pytest.approx({("7", "ai"): 0.01, ("7", "other"): 0.005})
    assert t.duration["7"].total == 2.5  # the worker's own figure
    assert t.wait["7"].total == 2.0  # run_started_at - run_after, exact
    assert t.latency["7"].total == 11.5  # updated_at - created_at, exact


def test_a_release_with_attempts_minus_one_is_no_failure_death_or_requeue() -> None:
    c = counter()
    c.apply(tx(RowChange(UPDATE, old=running(1), new=row(1, 0))))
    assert not c.tallies.failures
    assert not c.tallies.dead
    assert not c.tallies.requeued


def test_failure_reasons_come_from_the_newest_failure() -> None:
    c = counter()
    reaped = row(1, 1, last_error="JobDeadlineExceeded: 30s [lease-expired reclaim]")
    c.apply(tx(RowChange(UPDATE, old=running(), new=reaped)))
    c.apply(tx(RowChange(UPDATE, old=running(), new=row(1, 1, last_error="JobDeadlineExceeded"))))
    c.apply(tx(RowChange(UPDATE, old=running(3), new=row(4, 3, last_error="boom"))))
    assert c.tallies.failures == {
        ("7", "lease_expired"): 1,
        ("7", "deadline"): 1,
        ("7", "error"): 1,
    }
    assert c.tallies.dead == {("7", "error"): 1}
    assert c.dead_delta == {7: 1}


def test_a_requeue_leaves_the_dead_letter() -> None:
    c = counter()
    c.apply(tx(RowChange(UPDATE, old=row(4, 3), new=row(1, 0))))
    assert c.tallies.requeued == {"7": 1}
    assert c.dead_delta == {7: -1}


def test_deletes_count_active_rows_as_vanished_and_finished_rows_as_nothing() -> None:
    c = counter()
    for status in (1, 2, 3, 4):
        c.apply(tx(RowChange(DELETE, old=row(status))))
    assert c.tallies.vanished == {"pending": 1, "running": 1}
    assert c.dead_delta == {7: -1}
    assert not c.tallies.completed


def test_a_transaction_sent_again_is_counted_once() -> None:
    c = counter()
    assert c.apply(tx(RowChange(INSERT, new=row(1)), end=50_000))
    assert not c.apply(tx(RowChange(INSERT, new=row(1)), end=50_000))
    assert not c.apply(tx(RowChange(INSERT, new=row(1)), end=40_000))
    assert c.tallies.enqueued == {"7": 1}
    assert c.skipped == 2


def test_a_changed_done_row_and_a_truncate_count_nothing() -> None:
    c = counter()
    c.apply(tx(RowChange(UPDATE, old=row(3), new=row(1)), RowChange(TRUNCATE)))
    assert not any(c.tallies.counters().values())
    assert c.truncates == 1


def test_an_identity_index_update_without_old_key_keeps_the_status() -> None:
    # REPLICA IDENTITY USING INDEX (job_id, status): a renew sends no old key at all.
    c = counter()
    c.apply(tx(RowChange(UPDATE, old=None, new=running())))
    assert not any(c.tallies.counters().values())


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
    c = counter(mapping)
    old = {"id": "1", "kind": "mail", "state": "active", "tries": "1", "changed_at": T0}
    new = {**old, "state": "finished", "output": "{}", "started_at": T0, "inserted_at": T0,
           "not_before": T0, "changed_at": T1}  # fmt: skip
    c.apply(tx(RowChange(INSERT, new={**old, "state": "queued"})))
    c.apply(tx(RowChange(UPDATE, old=old, new=new)))
    c.apply(tx(RowChange(UPDATE, old=new, new={**new, "state": "paused"})))
    assert c.tallies.enqueued == {"mail": 1}
    assert c.tallies.completed == {"mail": 1}
    assert c.tallies.latency["mail"].total == 2.0
    assert c.tallies.unmapped_status == {"'paused'": 1}


def test_the_captured_stream_of_one_job_counts_its_life_once() -> None:
    messages = [base64.b64decode(m) for m in json.loads(FIXTURE.read_text())["messages"]]
    reader = TransactionReader("job")
    transactions = [t for m in messages if (t := reader.take(decode(m))) is not None]
    assert [t.end_lsn for t in transactions] == sorted(t.end_lsn for t in transactions)
    c = counter()
    for transaction in [*transactions, *transactions]:  # sent twice: counted once
        c.apply(transaction)
    t = c.tallies
    assert sum(t.enqueued.values()) == 1
    assert sum(t.failures.values()) == 1
    assert sum(t.completed.values()) == 1
    assert not t.vanished  # the DELETE came after DONE


def test_another_tables_changes_in_the_publication_are_left_out() -> None:
    messages = [base64.b64decode(m) for m in json.loads(FIXTURE.read_text())["messages"]]
    reader = TransactionReader("other")
    assert not any(t.changes for m in messages if (t := reader.take(decode(m))) is not None)


def test_confirmation_waits_for_a_scrape_or_for_counts_a_few_intervals_old() -> None:
    confirm = Confirmation(max_age=30.0)
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


def test_an_update_whose_old_status_is_unknown_counts_nothing() -> None:
    # A key-only old tuple without the status (an identity the start refuses) must not pass
    # for a pending row.
    c = counter()
    old = {k: None for k in row(2)}
    c.apply(tx(RowChange(UPDATE, old=old, new=row(3, 1, result="{}"))))
    assert not any(c.tallies.counters().values())


@pytest.mark.usefixtures("restore_logging")
def test_the_demo_refuses_logical_counting_before_starting_a_cluster(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from exporter.cli import main

    assert main(["demo", "--collect.counting", "logical"], {}) == 2
    assert "collect.counting: the demo counts by polling only" in capsys.readouterr().err


# --- the stream thread's loop, on a scripted cursor -------------------------------------------


class ScriptedCursor:
    """Plays captured pgoutput messages, then reports the server at ``wal_end``; records the
    feedback. Its fileno is a pipe that never becomes readable."""

    def __init__(self, payloads: list[bytes], wal_end: int) -> None:
        import os

        self._payloads = list(payloads)
        self._read_fd, self._write_fd = os.pipe()
        self.wal_end = 0
        self._server_end = wal_end
        self.flushed: list[int] = []

    def fileno(self) -> int:
        return self._read_fd

    def close(self) -> None:
        import os

        os.close(self._read_fd)
        os.close(self._write_fd)

    def read_message(self) -> object:
        from types import SimpleNamespace

        if self._payloads:
            return SimpleNamespace(payload=self._payloads.pop(0))
        self.wal_end = self._server_end
        return None

    def send_feedback(self, *, write_lsn: int, flush_lsn: int, force: bool) -> None:
        self.flushed.append(flush_lsn)


def _run_stream(cursor: ScriptedCursor, confirm: int | None) -> tuple[list[Transaction], int]:
    import threading
    import time

    from exporter.db.change_stream import ChangeStream, StreamOptions

    stream = ChangeStream(StreamOptions("postgresql://x@db.invalid/q", "s", "p", "job"))
    thread = threading.Thread(target=stream._read, args=(cursor,))
    thread.start()
    deadline = time.monotonic() + 5
    while stream.server_lsn == 0 and time.monotonic() < deadline:
        time.sleep(0.01)
    delivered = stream.drain()
    if confirm is not None:
        stream.confirm(confirm)
        time.sleep(0.7)  # one wait on the socket: the thread sends what it may
    stream._stop.set()
    thread.join(5)
    cursor.close()
    return delivered, stream.confirmed_lsn


def test_the_thread_confirms_nothing_counted_until_allowed_then_follows_the_server() -> None:
    messages = [base64.b64decode(m) for m in json.loads(FIXTURE.read_text())["messages"]]
    server = 2**40
    delivered, confirmed = _run_stream(ScriptedCursor(messages, server), confirm=None)
    assert delivered
    assert confirmed == 0  # handed over, never allowed: a successor gets them again
    last = delivered[-1].end_lsn
    delivered, confirmed = _run_stream(ScriptedCursor(messages, server), confirm=last - 1)
    assert confirmed == last - 1  # allowed part of it: no further, not the server's position
    delivered, confirmed = _run_stream(ScriptedCursor(messages, server), confirm=last)
    assert confirmed == server  # all carried, the table quiet: other tables' WAL is let go
