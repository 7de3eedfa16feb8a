"""The River workload: its history before the exporter starts, the live run at a few dozen jobs
a second with every hard part, and what the table says at the end."""

from __future__ import annotations

import asyncio
import contextlib
import random
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import UTC, datetime, timedelta
from typing import Any

from psycopg import AsyncConnection
from psycopg.rows import dict_row

from tests.system.presets.processes import wait_for
from tests.system.presets.river_client import Clock, Result, RiverSQL
from tests.system.presets.river_harness import AHEAD, INSERTER, LAGGING, Args, Leader, Worker
from tests.system.presets.river_ledger import Log

RATE = 30  # jobs a second, for RUN_SECONDS
RUN_SECONDS = 12.0
# kind, args, max_attempts, weight: what the inserts are made of.
MIX = [
    ("ok", {}, 25, 12),
    ("flaky", {"fail_until": 2}, 3, 3),  # fails once; its retry (1 s) goes straight to available
    ("slowretry", {"fail_until": 2, "retry_in": 6}, 3, 1),  # retryable, then JobSchedule
    ("bad", {}, 2, 1),  # fails twice: discarded
    ("canceller", {}, 25, 1),  # returns JobCancel
    ("snoozer", {}, 25, 1),  # snoozes 1 s (available), then completes
    ("snoozer", {"snooze": 7}, 25, 1),  # snoozes 7 s (scheduled), then completes
]


class Inserts:
    """River's Python client (riverqueue 0.7.0, over SQLAlchemy and psycopg) and the Go client's
    InsertMany from a process whose clock lags; every committed insert goes into the log."""

    def __init__(self, river: RiverSQL, log: Log) -> None:
        import riverqueue
        from riverqueue.driver import riversqlalchemy
        from sqlalchemy.ext.asyncio import create_async_engine

        self.river, self.log, self.options = river, log, riverqueue.InsertOpts
        url = "postgresql+psycopg://" + river.dsn.split("://", 1)[1]
        self.engine = create_async_engine(url)
        self.client = riverqueue.AsyncClient(riversqlalchemy.AsyncDriver(self.engine))

    async def one(self, kind: str, args: dict[str, Any] | None = None, **opts: Any) -> int:
        """``client.insert``: one job, in its own transaction (JobInsertFast)."""
        inserted = await self.client.insert(
            Args(kind, args or {}), insert_opts=self.options(**opts)
        )
        self._log(inserted.job.id, kind, opts)
        return int(inserted.job.id)

    async def go(self, jobs: list[dict[str, Any]]) -> None:
        """The Go client's ``InsertMany``, its clock INSERTER's."""
        for row in await self.river.insert_many(jobs, INSERTER):
            self.log.inserted(row)

    async def held(self, kinds: list[str], hold: float, commit: bool) -> None:
        """``client.insert_tx`` in an application transaction held open while others commit."""
        async with self.engine.connect() as conn:
            tx = await conn.begin()
            ids = [(await self.client.insert_tx(conn, Args(kind))).job.id for kind in kinds]
            await asyncio.sleep(hold)
            if commit:
                await tx.commit()
                for job_id, kind in zip(ids, kinds, strict=True):
                    self._log(job_id, kind, {})
            else:
                await tx.rollback()

    def _log(self, job_id: int, kind: str, opts: dict[str, Any]) -> None:
        state = "scheduled" if opts.get("scheduled_at") else "available"
        self.log.inserted({"id": job_id, "kind": kind, "state": state})

    async def close(self) -> None:
        """Dispose of the engine's pool."""
        await self.engine.dispose()


def _in(seconds: float) -> datetime:
    return datetime.now(UTC) + timedelta(seconds=seconds)


async def busy(dsn: str) -> int:
    """Jobs still to be worked soon outside the parked queue (0: the workload is quiet)."""
    async with await AsyncConnection.connect(dsn) as conn:
        cursor = await conn.execute(
            "SELECT count(*) FROM river_job WHERE queue <> 'parked' AND (state IN "
            "('available', 'running') OR (state IN ('retryable', 'scheduled') "
            "AND scheduled_at < now() + interval '1 minute'))"
        )
        row = await cursor.fetchone()
        return int(row[0]) if row else 0


async def table(dsn: str) -> dict[int, dict[str, Any]]:
    """Every job row as it is now."""
    async with await AsyncConnection.connect(dsn, row_factory=dict_row) as conn:
        cursor = await conn.execute("SELECT *, scheduled_at > now() AS future FROM river_job")
        return {row["id"]: row for row in await cursor.fetchall()}


def gauges(rows: dict[int, dict[str, Any]]) -> dict[str, dict[str, int]]:
    """pending (scheduled included), running and scheduled per kind, as River's states say."""
    out: dict[str, dict[str, int]] = {}
    for row in rows.values():
        if row["state"] in ("completed", "discarded", "cancelled"):
            continue
        figures = out.setdefault(row["kind"], {"pending": 0, "running": 0, "scheduled": 0})
        figures["running" if row["state"] == "running" else "pending"] += 1
        figures["scheduled"] += row["state"] != "running" and row["future"]
    return out


async def history(river: RiverSQL, inserts: Inserts, log: Log) -> dict[str, int]:
    """What happened before the exporter started; returns the ids the live run needs."""
    for _ in range(4):
        await inserts.one("ok")
    await inserts.one("bad", max_attempts=1)
    await inserts.one("canceller")
    retry_me = await inserts.one("flaky", {"fail_until": 2}, max_attempts=1)
    await inserts.one("slowretry", {"fail_until": 2, "retry_in": 3600})  # waits an hour
    for _ in range(2):
        await inserts.one("parked", queue="parked")  # no client works this queue
    cancel_me = await inserts.one("later", scheduled_at=_in(3600))
    await inserts.one("later", scheduled_at=_in(3600))
    worker = await Worker(river, log, "history", ["default"], Clock()).start()
    await wait_for(lambda: _none(river.dsn), "the history to be worked", 30)
    await worker.stop()
    return {"retry_me": retry_me, "cancel_me": cancel_me}


async def _none(dsn: str) -> bool:
    return await busy(dsn) == 0


@contextlib.asynccontextmanager
async def running(workers: list[Worker], leader: Leader) -> AsyncIterator[None]:
    """The clients and the leader's loops for the block, stopped gracefully after it."""
    for worker in workers:
        await worker.start()
    leader.start()
    try:
        yield
    finally:
        await leader.stop()
        for worker in workers:
            await worker.stop()


async def run_workload(
    river: RiverSQL,
    inserts: Inserts,
    log: Log,
    ids: dict[str, int],
    while_stuck: Callable[[dict[str, int]], Awaitable[None]],
) -> list[str]:
    """The live run, after the exporter's baseline; returns the rescuer's verdicts."""
    # A client takes four jobs of the fragile queue and dies: three never return, the fourth
    # finished but its completer still held the result.
    doomed = await Worker(river, log, "doomed", ["fragile"], Clock(), hold=3600, slots=4).start()
    for attempts in (3, 1, 3):
        await inserts.one("fragile", {"seconds": 3600}, queue="fragile", max_attempts=attempts)
    held_back = await inserts.one("ok", queue="fragile", max_attempts=3)
    await wait_for(
        lambda: _true(doomed.fetched == 4 and len(doomed.pending) == 1), "the doomed claim"
    )
    await doomed.kill()
    marked = max(i for i, job in log.jobs.items() if job.kind == "fragile")
    log.cancelled(await river.cancel(marked, Clock()))  # running: marked only
    workers = [Worker(river, log, "a", ["default", "fragile"], Clock()),
               Worker(river, log, "b", ["default"], LAGGING, hold=1.5),
               Worker(river, log, "c", ["default"], AHEAD)]  # fmt: skip

    async def cancel_after_error(result: Result, became: str) -> None:
        # An error, then a cancel by hand of the job waiting for its retry, at once.
        if result.job["kind"] == "oops" and became == "retryable":
            log.cancelled(await river.cancel(result.job["id"], Clock()))

    for worker in workers:
        worker.flushed.append(cancel_after_error)
    leader = Leader(river, log)
    async with running(workers, leader):
        side = asyncio.gather(
            inserts.held(["ok", "ok", "canceller"], hold=2.5, commit=True),
            inserts.held(["ok"], hold=1.0, commit=False),
            _operator(river, inserts, log, workers, ids),
        )
        await _insert(inserts)
        await side
        await while_stuck({"fragile": 3, "ok": 1})
        verdicts = await leader.rescue()
        await wait_for(lambda: _none(river.dsn), "the workload to drain", 90)
    assert held_back in log.jobs
    return verdicts


async def _true(value: bool) -> bool:
    return value


async def _insert(inserts: Inserts) -> None:
    """RATE * RUN_SECONDS jobs, RATE a second (slower if the machine is): riverqueue's inserts,
    and every fifth tick a batch of the Go client's. The same jobs every run (a fixed seed)."""
    loop = asyncio.get_running_loop()
    start, rng = loop.time(), random.Random(37)
    kinds = [(kind, args, attempts) for kind, args, attempts, weight in MIX for _ in range(weight)]
    for tick in range(int(RUN_SECONDS * 10)):
        picks = [rng.choice(kinds) for _ in range(RATE // 10)]
        if tick % 5 == 4:
            await inserts.go([{"kind": k, "args": a, "max_attempts": m} for k, a, m in picks])
        else:
            for kind, args, attempts in picks:
                await inserts.one(kind, args, max_attempts=attempts)
        if tick % 10 == 9:
            await inserts.one("later", scheduled_at=_in(2.0))
        await asyncio.sleep(max(0.0, start + (tick + 1) * 0.1 - loop.time()))


async def _operator(river: RiverSQL, inserts: Inserts, log: Log, workers: list[Worker],
                    ids: dict[str, int]) -> None:  # fmt: skip
    """What a human (or the app) does by hand while the queue runs."""
    await asyncio.sleep(1.0)
    log.cancelled(await river.cancel(ids["cancel_me"], Clock()))  # waiting: cancelled at once
    await inserts.one("oops", {"retry_in": 30}, max_attempts=3)  # see cancel_after_error
    slow = await inserts.one("slow", {"seconds": 10, "retry_in": 10})

    async def slow_running() -> bool:
        return any(slow in worker.running for worker in workers)

    await wait_for(slow_running, "the slow job to run", 30)
    log.cancelled(await river.cancel(slow, Clock()))  # running: marked, then its client's cancel
    for worker in workers:
        worker.cancel(slow)
    log.retried(await river.retry(ids["retry_me"]))  # a discarded job, back by hand
