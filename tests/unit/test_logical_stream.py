"""The change stream's runs without a database: a scripted psycopg2 in the stream's real thread.

What these prove (docs/logical.md, "How it runs"): a run that fails keeps its failure, with what
it folded before, until the event loop takes both once; the follower then counts the restart by
reason, says it at WARNING once per new failure, starts a new run and fails the collection; a
stop that times out keeps the thread, and no second run starts beside it; the slot is recorded as
confirmed only once the feedback was sent; the thread's log lines carry the queue's fields; and
the loop confirms nothing counted until the event loop allows it, then follows the server.
"""

from __future__ import annotations

import io
import json
import threading
import time
from types import SimpleNamespace
from typing import Any

import pytest

from exporter.counting.stream_counter import StreamFold
from exporter.counting.tracker import TrackerOptions
from exporter.db.change_folder import Outlet, TransactionFolder
from exporter.db.change_stream import (
    KEEPALIVES,
    SESSION_OPTIONS,
    ChangeStream,
    StreamOptions,
    StreamRun,
)
from exporter.db.pool import DatabaseError
from exporter.db.slot_follower import Follower
from exporter.logs import log_fields, setup_logging
from exporter.model import JobTypeLabels, Tallies
from exporter.model.row_changes import Batch
from exporter.settings.table import TableMapping
from tests.unit import pgoutput_messages as pg

OPTIONS = StreamOptions("postgresql://x@db.invalid/q", "s", "p", "job")
BUCKETS = ((1.0,), (1.0,), (1.0,))


def fold() -> StreamFold:
    return StreamFold(TableMapping(), TrackerOptions(30.0), BUCKETS)


class Broken(Exception):
    """Stands for a psycopg2 error; ``pgcode`` as the server sent it (None: no SQLSTATE)."""

    def __init__(self, message: str, pgcode: str | None = None) -> None:
        super().__init__(message)
        self.pgcode = pgcode


class ScriptedCursor:
    """Plays pgoutput messages, then raises ``then`` (or reports the server at ``wal_end``);
    records the feedback. Its fileno is a pipe that never becomes readable."""

    def __init__(self, payloads: list[bytes], wal_end: int = 0, then: Exception | None = None):
        import os

        self._payloads = list(payloads)
        self._read_fd, self._write_fd = os.pipe()
        self.wal_end = 0
        self._server_end = wal_end
        self._then = then
        self.flushed: list[int] = []
        self.send_fails = False

    def fileno(self) -> int:
        return self._read_fd

    def close(self) -> None:
        import os

        os.close(self._read_fd)
        os.close(self._write_fd)

    def execute(self, sql: str, args: tuple[Any, ...]) -> None:
        pass

    def fetchone(self) -> tuple[str]:
        return ("reserved",)  # the slot is there and usable

    def start_replication(self, **kwargs: Any) -> None:
        pass

    def read_message(self) -> object:
        if self._payloads:
            return SimpleNamespace(payload=self._payloads.pop(0))
        if self._then is not None:
            raise self._then
        self.wal_end = self._server_end
        return None

    def send_feedback(self, *, write_lsn: int, flush_lsn: int, force: bool) -> None:
        if self.send_fails:
            raise Broken("SSL SYSCALL error: EOF detected")
        self.flushed.append(flush_lsn)


def scripted_psycopg2(
    monkeypatch: pytest.MonkeyPatch, cursor: ScriptedCursor, gate: threading.Event | None = None
) -> list[dict[str, Any]]:
    """psycopg2 replaced by one whose connection hands out ``cursor`` (after ``gate``, if any);
    returns the keyword arguments of every connect."""
    connects: list[dict[str, Any]] = []

    class Connection:
        def cursor(self) -> ScriptedCursor:
            return cursor

        def close(self) -> None:
            pass

    class Psycopg2:
        Error = Broken

        class errors:
            DuplicateObject = KeyError

        @staticmethod
        def connect(dsn: str, **kwargs: Any) -> Connection:
            connects.append(kwargs)
            if gate is not None:
                gate.wait(10)
            return Connection()

    extras = SimpleNamespace(LogicalReplicationConnection=None)
    monkeypatch.setattr("exporter.db.change_stream.psycopg2_modules", lambda: (Psycopg2, extras))
    monkeypatch.setattr("exporter.db.stream_failure.psycopg2_modules", lambda: (Psycopg2, extras))
    return connects


def wait_until(predicate: Any, within: float = 5.0) -> None:
    deadline = time.monotonic() + within
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


def test_a_run_that_fails_hands_over_its_failure_once_with_what_it_folded_before(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    cursor = ScriptedCursor(pg.captured(), then=Broken("server closed the connection"))
    connects = scripted_psycopg2(monkeypatch, cursor)
    stream = ChangeStream(OPTIONS)
    stream.start(fold(), 0)
    wait_until(lambda: not stream.running)
    ended = stream.ended()
    assert ended is not None
    assert (ended.failure.reason, ended.failure.message) == ("lost", "server closed the connection")
    [batch] = ended.items
    assert isinstance(batch, Batch)
    assert batch.commits == 6  # folded before the connection broke: not lost with the run
    assert stream.ended() is None  # taken once
    # A dead peer is found by the kernel, and the walsender formats text as UTF-8.
    assert {k: connects[0][k] for k in KEEPALIVES} == KEEPALIVES
    assert "client_encoding=UTF8" in connects[0]["options"] == SESSION_OPTIONS
    cursor.close()


def test_a_stop_that_times_out_keeps_the_thread_and_no_second_run_starts_beside_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    gate = threading.Event()  # the connect blocks, as a slot's creation waits for transactions
    cursor = ScriptedCursor([], wal_end=100)
    scripted_psycopg2(monkeypatch, cursor, gate)
    stream = ChangeStream(OPTIONS)
    stream.start(fold(), 0)
    assert not stream.stop(timeout=0.1)
    assert stream.lingering
    with pytest.raises(DatabaseError, match="has not ended yet"):
        stream.start(fold(), 0)
    gate.set()  # it unblocks, sees its own stop flag, and ends without reading
    wait_until(lambda: not stream.lingering)
    assert cursor.flushed == [0]  # its last feedback confirms nothing new
    stream.start(fold(), 0)  # now a run may start
    assert stream.stop()
    cursor.close()


def test_the_slot_is_recorded_as_confirmed_only_once_the_feedback_was_sent(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    cursor = ScriptedCursor([], wal_end=100)
    cursor.send_fails = True
    scripted_psycopg2(monkeypatch, cursor)
    stream = ChangeStream(OPTIONS)
    stream.confirm(80)
    stream.start(fold(), 0)
    wait_until(lambda: not stream.running)
    ended = stream.ended()
    assert ended is not None
    assert ended.failure.reason == "lost"
    assert stream.confirmed_lsn == 0  # the send failed: the server never got 80
    cursor.close()


def test_the_threads_log_lines_carry_the_queue_of_the_task_that_started_it(
    monkeypatch: pytest.MonkeyPatch, restore_logging: None
) -> None:
    lines = io.StringIO()
    setup_logging("info", "json", (), stream=lines)
    cursor = ScriptedCursor([], then=Broken("x"))
    cursor.fetchone = lambda: None  # type: ignore[method-assign]  # no slot: it is created
    cursor.create_replication_slot = lambda slot, output_plugin: None  # type: ignore[attr-defined]
    scripted_psycopg2(monkeypatch, cursor)
    stream = ChangeStream(OPTIONS)
    with log_fields(queue="mail"):
        stream.start(fold(), 0)
    wait_until(lambda: not stream.running)
    records = [json.loads(line) for line in lines.getvalue().splitlines()]
    assert [r["msg"] for r in records][:2] == [
        "creating the replication slot; it waits for the transactions open now to end",
        "replication slot created",
    ]
    assert all(r["queue"] == "mail" for r in records)
    cursor.close()


class FailingStream:
    """A stream whose every run ends with ``failure`` after folding ``batch``."""

    def __init__(self, reason: str, message: str) -> None:
        from exporter.db.change_stream import Ended, StreamFailure

        self.failure = StreamFailure(reason, message)
        self._ended = Ended
        self.options = OPTIONS
        self.running = False
        self.runs = 0
        self.lingering = False
        self.on_feedback: Any = None
        self.gaps = 0
        self.confirmed_lsn = 0
        self.starts: list[int] = []
        self.position = 0

    def take(self) -> list[Batch]:
        return []

    def ended(self) -> Any:
        if not self.starts or self.running:
            return None
        self.position += 100
        batch = Batch(fold().tally(), self.position, commits=1)
        return self._ended(self.failure, [batch])

    def start(self, fold: Any, skip_below: int) -> None:
        self.starts.append(skip_below)
        self.runs += 1

    def confirm(self, lsn: int, gaps: int = 0) -> None:
        pass


class Mode:
    def __init__(self) -> None:
        self.tallies = Tallies(*BUCKETS)
        self.position = 0

    @property
    def stream(self) -> Mode:
        return self

    def fold(self) -> StreamFold:
        return fold()

    def take(self, batch: Batch) -> None:
        self.position = batch.position


async def test_a_failed_run_is_counted_said_once_started_again_and_fails_the_collection(
    restore_logging: None,
) -> None:
    lines = io.StringIO()
    setup_logging("info", "json", (), stream=lines)
    follower = Follower(OPTIONS, 1.0)
    stream = FailingStream("in_use", 'replication slot "s" is active for PID 4242')
    follower.stream = stream  # type: ignore[assignment]
    mode = Mode()
    await follower.feed(mode, Mode)  # the first feed starts the first run
    assert stream.starts == [0]
    for attempt in range(3):
        with pytest.raises(DatabaseError) as caught:
            await follower.feed(mode, Mode)
        assert caught.value.reason == "stream"
        assert "in_use" in str(caught.value)
        assert "active for PID 4242" in str(caught.value)
        assert mode.position == 100 * (attempt + 1)  # what it folded first is counted
    assert stream.starts == [0, 100, 200, 300]  # started again, past what was counted
    assert follower.stream_health().restarts == {"in_use": 3}
    warnings = [json.loads(x) for x in lines.getvalue().splitlines()]
    assert [(w["level"], w["reason"]) for w in warnings] == [("WARN", "in_use")]  # said once
    # The slot is free again: a run reads across two feeds (a whole interval), then the same
    # failure comes back, and is news again.
    stream.running = True
    await follower.feed(mode, Mode)
    await follower.feed(mode, Mode)
    stream.running = False
    with pytest.raises(DatabaseError):
        await follower.feed(mode, Mode)
    warnings = [json.loads(x) for x in lines.getvalue().splitlines()]
    assert [w["level"] for w in warnings] == ["WARN", "WARN"]


def test_the_loop_confirms_nothing_counted_until_allowed_then_follows_the_server() -> None:
    messages = pg.captured()
    server = 2**40

    def run(confirm: int | None) -> tuple[list[Batch], int]:
        cursor = ScriptedCursor(messages, wal_end=server)
        stream = ChangeStream(OPTIONS)
        streamed = StreamRun()
        folder = TransactionFolder("job", fold(), Outlet(), 0)
        folder.outlet = streamed.outlet
        thread = threading.Thread(target=stream._read, args=(cursor, streamed, folder))
        thread.start()
        wait_until(lambda: stream.server_lsn != 0)
        delivered = [b for b in streamed.outlet.take() if isinstance(b, Batch)]
        if confirm is not None:
            stream.confirm(confirm)
            wait_until(lambda: stream.confirmed_lsn >= confirm)
            time.sleep(0.6)  # one more wait on the socket: nothing further may go
        streamed.stop.set()
        thread.join(5)
        cursor.close()
        return delivered, stream.confirmed_lsn

    delivered, confirmed = run(confirm=None)
    assert delivered
    assert confirmed == 0  # handed over, never allowed: a successor gets them again
    last = delivered[-1].position
    assert run(confirm=last - 1)[1] == last - 1  # allowed part of it: no further
    assert run(confirm=last)[1] == server  # all carried, the table quiet: other WAL let go


def test_a_credited_tally_keeps_the_labels_of_the_event_loop() -> None:
    from exporter.counting.stream_counter import credit

    labels = JobTypeLabels({7: "mail"}, 50)
    f = fold()
    tally = f.tally()
    tally.enqueued[tally.key(7)] += 2
    tallies = Tallies(*BUCKETS)
    credit(tally, tallies, labels.label, [])
    assert tallies.enqueued == {"mail": 2}
