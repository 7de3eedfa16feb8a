"""How a lost slot becomes one gap, without a database: the stream thread's decision on a
scripted replication cursor, and the follower's new baseline on a scripted stream."""

from __future__ import annotations

import time
from dataclasses import replace
from types import SimpleNamespace
from typing import Any

import pytest

from exporter.db.change_stream import ChangeStream, Ended, Gap, StreamOptions, StreamRun
from exporter.db.slot_follower import Follower
from exporter.model.change_tally import ChangeTally
from exporter.model.row_changes import Batch, ChangeFold

OPTIONS = StreamOptions("postgresql://x@db.invalid/q", "s", "p", "job")


class DuplicateObject(Exception):
    """Stands for psycopg2.errors.DuplicateObject."""


class FakePsycopg2:
    class errors:
        DuplicateObject = DuplicateObject


class SlotCursor:
    """A replication cursor over one slot whose wal_status is scripted (None: no slot)."""

    def __init__(self, wal_status: str | None, *, create_fails: bool = False) -> None:
        self.wal_status = wal_status
        self.create_fails = create_fails
        self.calls: list[str] = []

    def execute(self, sql: str, args: tuple[Any, ...]) -> None:
        self.calls.append("select")

    def fetchone(self) -> tuple[str] | None:
        return None if self.wal_status is None else (self.wal_status,)

    def drop_replication_slot(self, slot: str) -> None:
        self.calls.append("drop")
        self.wal_status = None

    def create_replication_slot(self, slot: str, output_plugin: str) -> None:
        self.calls.append("create")
        if self.create_fails:
            raise ConnectionError("server closed the connection")
        self.wal_status = "reserved"


RUN = StreamRun()


def ensure(stream: ChangeStream, cursor: SlotCursor, run: StreamRun = RUN) -> None:
    stream._ensure_slot(FakePsycopg2, cursor, run)


def test_a_slot_missing_at_the_first_start_is_created_and_no_gap() -> None:
    stream, cursor, run = ChangeStream(OPTIONS), SlotCursor(None), StreamRun()
    ensure(stream, cursor, run)
    assert cursor.calls == ["select", "create"]
    assert stream.gaps == 0
    assert run.outlet.take() == []


@pytest.mark.parametrize("status", ["reserved", "extended", "unreserved"])
def test_a_usable_slot_is_read_as_it_is(status: str) -> None:
    stream, cursor = ChangeStream(OPTIONS), SlotCursor(status)
    ensure(stream, cursor)
    assert cursor.calls == ["select"]
    assert stream.gaps == 0


def test_a_lost_slot_found_at_start_is_dropped_replaced_and_one_gap() -> None:
    stream, cursor, run = ChangeStream(OPTIONS), SlotCursor("lost"), StreamRun()
    stream.confirm(900)
    ensure(stream, cursor, run)
    assert cursor.calls == ["select", "drop", "create"]
    assert stream.gaps == 1
    [gap] = run.outlet.take()
    assert isinstance(gap, Gap)
    assert "lost" in gap.found
    assert stream._confirm == 0  # nothing of the old slot is confirmed on the new one
    stream.confirm(1000)  # a position of the old slot, from before the gap was taken
    assert stream._confirm == 0
    stream.confirm(1000, gaps=1)
    assert stream._confirm == 1000


def test_a_slot_gone_after_this_process_read_it_is_a_gap_without_a_drop() -> None:
    stream, cursor = ChangeStream(OPTIONS), SlotCursor("reserved")
    ensure(stream, cursor)
    cursor.wal_status = None  # dropped by hand, or a failover to a server without it
    ensure(stream, cursor)
    assert cursor.calls == ["select", "select", "create"]
    assert stream.gaps == 1


def test_a_gap_whose_new_slot_fails_to_be_created_is_counted_once() -> None:
    stream, cursor = ChangeStream(OPTIONS), SlotCursor("lost", create_fails=True)
    with pytest.raises(ConnectionError):
        ensure(stream, cursor)
    cursor.create_fails = False
    ensure(stream, cursor)  # the next run finds no slot: it only creates one
    assert cursor.calls == ["select", "drop", "create", "select", "create"]
    assert stream.gaps == 1


class ScriptedStream:
    """Hands over what it is given; records what the follower lets it confirm."""

    def __init__(self, *items: Batch | Gap) -> None:
        self.items = list(items)
        self.gaps = sum(isinstance(i, Gap) for i in items)
        self.confirmed: list[tuple[int, int]] = []
        self.confirmed_lsn = 0
        self.sends = True  # False: a stream that never gets its feedback out
        self.running = True
        self.runs = 1
        self.lingering = False
        self.options = OPTIONS
        self.on_feedback: Any = None
        self.ending: Ended | None = None  # what ended() reports once
        self.starts: list[int] = []  # the skip_below of each start

    def take(self) -> list[Batch | Gap]:
        out, self.items = self.items, []
        return out

    def ended(self) -> Ended | None:
        ending, self.ending = self.ending, None
        if ending is not None:
            self.running = False
        return ending

    def start(self, fold: ChangeFold, skip_below: int) -> None:
        self.starts.append(skip_below)
        self.running = True

    def confirm(self, lsn: int, gaps: int = 0) -> None:
        self.confirmed.append((lsn, gaps))
        if gaps == self.gaps and self.sends:
            self.confirmed_lsn = max(self.confirmed_lsn, lsn)


class Mode:
    def __init__(self) -> None:
        self.taken: list[int] = []

    def take(self, batch: Batch) -> None:
        self.taken.append(batch.position)

    def fold(self) -> ChangeFold:
        raise AssertionError("a scripted stream needs no fold")

    @property
    def position(self) -> int:
        return self.taken[-1] if self.taken else 0

    @property
    def stream(self) -> Mode:
        return self


def tx(end: int) -> Batch:
    return Batch(ChangeTally((), (), ()), end, commits=1)


async def test_after_a_gap_the_new_slots_changes_go_to_a_new_baseline() -> None:
    follower = Follower(OPTIONS, 1.0)
    # On a promoted standby the new slot's positions may be lower than the old slot's.
    stream = ScriptedStream(tx(400), tx(500), Gap("s", "wal_status lost"), tx(300), tx(350))
    follower.stream = stream  # type: ignore[assignment]
    old, new = Mode(), Mode()
    await follower.feed(old, lambda: new)
    assert old.taken == [400, 500]
    assert new.taken == [300, 350]  # not filtered by the old slot's position
    assert follower.gaps == 1
    assert follower.position == 350
    assert stream.confirmed == [(0, 1)]
    # A body rendered before the gap carries the old slot's 500; 350 is no higher than the
    # floor, so it too may be of the old slot: neither is a position to confirm the new one at.
    await follower.served(500)
    await follower.served(350)
    await follower.feed(new, lambda: Mode())
    assert stream.confirmed[-1] == (0, 1)
    assert all(lsn == 0 for lsn, _ in stream.confirmed)


async def test_a_served_position_is_confirmed_before_the_response_leaves() -> None:
    follower = Follower(OPTIONS, 1.0)
    stream = ScriptedStream(tx(100), tx(200))
    follower.stream = stream  # type: ignore[assignment]
    await follower.feed(Mode(), Mode)
    assert stream.confirmed_lsn == 0  # counted, never scraped, not three intervals old
    await follower.served(200)
    assert stream.confirmed[-1] == (200, 0)
    assert stream.confirmed_lsn == 200
    await follower.served(150)  # an older body: nothing to send again
    assert len(stream.confirmed) == 2
    await follower.served(900)  # never past what was counted
    assert stream.confirmed_lsn == 200


async def test_a_response_waits_a_bounded_time_for_a_stream_that_cannot_send(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr("exporter.db.slot_follower.SERVED_WAIT", 0.05)
    follower = Follower(OPTIONS, 1.0)
    stream = ScriptedStream(tx(100))
    stream.sends = False
    follower.stream = stream  # type: ignore[assignment]
    await follower.feed(Mode(), Mode)
    started = time.monotonic()
    await follower.served(100)
    assert stream.confirmed[-1] == (100, 0)  # asked for, and sent with a later feedback
    assert time.monotonic() - started < 1.0
    stream.running = False
    started = time.monotonic()
    await follower.served(100)  # between two runs: kept for the next run, nothing to wait for
    assert stream.confirmed[-1] == (100, 0)
    assert time.monotonic() - started < 0.05


class Refusal(Exception):
    """Stands for psycopg2.errors.ObjectNotInPrerequisiteState: SQLSTATE 55000."""

    pgcode = "55000"


class RefusingCursor(SlotCursor):
    """A slot that looked usable but was invalidated before START_REPLICATION refused it once
    (in the server's language, which the stream does not read: the catalog says lost)."""

    def __init__(self) -> None:
        super().__init__("unreserved")
        self.starts = 0

    def start_replication(self, **kwargs: Any) -> None:
        self.starts += 1
        self.calls.append("start")
        if self.starts == 1:
            self.wal_status = "lost"
            raise Refusal('no se puede leer del slot de replicación lógica "s"')


def _fake_connection(monkeypatch: pytest.MonkeyPatch, cursor: SlotCursor) -> None:
    class Connection:
        def cursor(self) -> SlotCursor:
            return cursor

        def close(self) -> None:
            pass

    class Psycopg2(FakePsycopg2):
        Error = Exception

        @staticmethod
        def connect(*args: Any, **kwargs: Any) -> Connection:
            return Connection()

    extras = SimpleNamespace(LogicalReplicationConnection=None)
    monkeypatch.setattr("exporter.db.change_stream.psycopg2_modules", lambda: (Psycopg2, extras))


def test_a_slot_refused_at_start_replication_as_invalidated_is_one_gap(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    cursor = RefusingCursor()
    _fake_connection(monkeypatch, cursor)
    stream, run = ChangeStream(OPTIONS), StreamRun()
    monkeypatch.setattr(stream, "_read", lambda cur, run, folder: None)
    stream._read_slot(run, None, 0)  # type: ignore[arg-type]
    assert cursor.calls == ["select", "start", "select", "drop", "create", "start"]
    assert stream.gaps == 1
    assert run.failure is None
    [gap] = run.outlet.take()
    assert isinstance(gap, Gap)
    assert gap.found.startswith("START_REPLICATION refused: no se puede leer")


def test_a_refusal_of_a_slot_the_catalog_does_not_call_lost_is_a_failure_not_a_gap(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    cursor = RefusingCursor()
    cursor.start_replication = lambda **kwargs: (_ for _ in ()).throw(Refusal("wal_level"))  # type: ignore[method-assign]
    _fake_connection(monkeypatch, cursor)
    stream, run = ChangeStream(OPTIONS), StreamRun()
    stream._read_slot(run, None, 0)  # type: ignore[arg-type]
    assert stream.gaps == 0
    assert run.failure is not None
    assert (run.failure.reason, run.failure.message) == ("setup", "wal_level")


def test_the_leaders_view_carries_the_slot_and_a_standbys_does_not() -> None:
    from exporter.model import SlotHealth, Standing
    from exporter.runtime import QueueRuntime
    from tests.helpers import fast_queue

    queue = fast_queue("postgresql://x@db.invalid/q")
    collect = replace(queue.collect, counting="logical", leader_election=False)
    runtime = QueueRuntime(replace(queue, collect=collect))
    assert runtime.follower is not None
    assert runtime.poller.view().slot is None  # before the slot's first read
    health = SlotHealth(
        lag_bytes=10, retained_bytes=20, wal_status="reserved", safe_wal_bytes=30, gaps=1
    )
    runtime.follower.health = health
    assert runtime.poller.view().slot == health

    class Standby:
        async def guard(self) -> bool:
            return False

        def standing(self) -> Standing:
            return Standing(collector=False, holding=False, reachable=True)

    runtime.poller.seat = Standby()
    assert runtime.poller.view().slot is None


async def test_a_failed_health_read_leaves_the_changes_for_the_next_feed() -> None:
    from contextlib import asynccontextmanager

    from exporter.db.pool import DatabaseError

    class Down:
        up = False

        @asynccontextmanager
        async def session(self) -> Any:
            if not self.up:
                raise DatabaseError("connection", "connection refused")
            yield SimpleNamespace(fetchrow=self.fetchrow)

        async def fetchrow(self, sql: str, slot: str) -> dict[str, Any]:
            return {"lag_bytes": 5, "retained_bytes": 7, "wal_status": "reserved",
                    "safe_wal_size": None}  # fmt: skip

    database = Down()
    follower = Follower(OPTIONS, 1.0, database=database)  # type: ignore[arg-type]
    follower.stream = ScriptedStream(tx(100), tx(200))  # type: ignore[assignment]
    mode = Mode()
    with pytest.raises(DatabaseError):
        await follower.feed(mode, Mode)
    assert follower.health is None
    database.up = True
    await follower.feed(mode, Mode)
    assert mode.taken == [100, 200]
    assert follower.health is not None
    assert (follower.health.lag_bytes, follower.health.safe_wal_bytes) == (5, None)
