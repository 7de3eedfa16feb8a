"""Ground-truth workload for GoodJob 4: its statements replayed (good_job_client.py) by Ruby
processes with skewed clocks, a held enqueue transaction, cleanup during the run, a process
SIGKILLed mid-job, retries, discards and the dashboard's retries and discards; the truth is the
harness's own log, which must agree with the table and with GoodJob's design."""

from __future__ import annotations

import asyncio
import contextlib
import random
import sys
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import asyncpg

from tests.system.presets.good_job_client import (
    ERROR_EVENTS,
    INTERRUPTED,
    Clock,
    GoodJobProcess,
    Log,
    Performer,
    cleanup_preserved_jobs,
    connect,
    discard_by_hand,
    enqueue,
    insert,
    retry_by_hand,
)
from tests.system.presets.processes import Worker, said, wait_for

STUCK_AFTER = 2.0  # the exporter's heartbeat_timeout in this workload (GoodJob's is 5 min)
# cleanup_preserved_jobs_before_seconds_ago (14 days by default): jobs finished by the host 2 s
# behind are deleted 6 s (twelve intervals) after their end, while the reader still follows them.
OLDER_THAN = 8.0
CLEANED = 20  # the run's own jobs the cleanup deletes before the workload ends
OLD = Clock(-86400.0)  # the history ran a day ago: the first cleanup deletes it
# Two worker hosts behind and ahead of the database (one behind runs only jobs due that long
# ago: the one ahead takes the fresh ones), beside one on time.
SKEWED = (Clock(-2.0), Clock(5.0))
DEAD_OUTCOMES = ("unhandled", "discard", "retry_stopped")


def decide(job_class: str, executions: int, args: Any) -> Any:
    """What each job class's code does (ActiveJob's retry_on / discard_on, as declared)."""
    if job_class == "FlakyJob":  # retry_on StandardError, wait: 0.2, attempts: 5
        return ("retry", args.get("wait", 0.2)) if executions <= args["fail_until"] else "success"
    if job_class == "StubbornJob":  # retry_on StandardError, wait: 0.2, attempts: 2
        return ("retry", 0.2) if executions < 2 else "retry_stopped"
    if job_class == "BadJob":  # raises, nothing catches it
        return "unhandled"
    if job_class == "DoomedJob":  # discard_on
        return "discard"
    if job_class == "RetryMeJob":  # fails once, works when retried from the dashboard
        return "unhandled" if executions == 1 else "success"
    return "success"


@contextlib.asynccontextmanager
async def processes(
    dsn: str, log: Log, specs: list[tuple[Clock, bool, list[str], int]]
) -> AsyncIterator[list[GoodJobProcess]]:
    """GoodJob processes (clock, advisory, queues, threads), working until the block ends;
    each refreshes its record every 0.5 s, as its ProcessTracker does (far more often)."""
    stop = asyncio.Event()
    started: list[GoodJobProcess] = []
    tasks: list[asyncio.Task[None]] = []

    async def work(thread: Performer) -> None:
        await thread.open()
        try:
            while not stop.is_set():
                if not await thread.perform_next():
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(stop.wait(), 0.05)
        finally:
            await thread.close()

    async def heartbeat(process: GoodJobProcess) -> None:
        while not stop.is_set():
            await process.refresh()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), 0.5)

    try:
        for clock, advisory, queues, threads in specs:
            process = GoodJobProcess(dsn, clock, advisory)
            await process.start()
            started.append(process)
            tasks.append(asyncio.create_task(heartbeat(process)))
            for _ in range(threads):
                tasks.append(asyncio.create_task(work(Performer(process, queues, decide, log))))
        yield started
    finally:
        stop.set()
        await asyncio.gather(*tasks)
        for process in started:
            await process.stop()


async def history(dsn: str, log: Log) -> dict[str, str]:
    """What happened before the exporter started: finished (done and dead), a retry waiting,
    a job discarded by hand before it ran, pending and scheduled jobs."""
    conn = await connect(dsn)
    try:
        for _ in range(3):
            await enqueue(conn, OLD, log, "OkJob")
        await enqueue(conn, OLD, log, "BadJob")
        await enqueue(conn, OLD, log, "DoomedJob")
        retry_me = await enqueue(conn, OLD, log, "RetryMeJob")
        async with processes(dsn, log, [(OLD, True, ["default"], 1)]):
            await wait_for(lambda: _unfinished(dsn, "default", 0), "the history's jobs", 30)
        never_run = await enqueue(conn, OLD, log, "NeverRunJob", queue="parked")
        await discard_by_hand(conn, OLD, log, never_run)
        # A retry waiting for its time (3 s ahead) when the exporter starts.
        await enqueue(conn, Clock(), log, "FlakyJob", args={"fail_until": 1, "wait": 3.0})
        async with processes(dsn, log, [(Clock(), True, ["default"], 1)]):
            await wait_for(lambda: _waiting_retries(dsn), "the history's retry", 30)
        for _ in range(2):
            await enqueue(conn, Clock(), log, "ParkedJob", queue="parked")
        await enqueue(conn, Clock(), log, "HeldJob", wait=3600.0)
    finally:
        await conn.close()
    log.mark = len(log.entries)
    return {"retry_me": retry_me, "never_run": never_run}


async def run_workload(
    dsn: str,
    log: Log,
    ids: dict[str, str],
    cycles: Callable[[int], Awaitable[None]],
    while_stuck: Callable[[int], Awaitable[None]],
    rate: float = 40.0,
    seconds: float = 8.0,
) -> None:
    """The live workload, at ``rate`` jobs a second for ``seconds``."""
    op, app, gone, feed = [await connect(dsn) for _ in range(4)]
    try:
        # The dashboard: a retry of a dead job and of one discarded before it ran (both long
        # forgotten by the reader), and a discard of a waiting job.
        await retry_by_hand(op, Clock(), log, ids["retry_me"])
        await retry_by_hand(op, Clock(), log, ids["never_run"])
        await discard_by_hand(op, Clock(), log,
                              await enqueue(op, Clock(), log, "ParkedJob", queue="parked"))  # fmt: skip
        # An app's transaction enqueues (once in a savepoint) and stays open across cycles;
        # another enqueues and rolls back.
        held, dropped = app.transaction(), gone.transaction()
        await held.start()
        held_ids = [await insert(app, Clock(), "LateJob")]
        async with app.transaction():
            held_ids.append(await insert(app, Clock(), "LateJob"))
        await dropped.start()
        await insert(gone, Clock(), "GoneJob")
        doomed = await _doomed(dsn, log, op)
        specs = [(SKEWED[0], True, ["default"], 1), (SKEWED[1], False, ["default"], 2),
                 (Clock(), True, ["default"], 1)]  # fmt: skip
        async with processes(dsn, log, specs) as live:
            cleaner = asyncio.create_task(_clean(dsn, log))
            producer = asyncio.create_task(_produce(feed, log, rate, seconds))
            await cycles(3)
            await held.commit()
            for job_id in held_ids:
                log.add("enqueued", job_id, "LateJob")
            await dropped.rollback()
            # The dead processes: both their jobs are stuck, one is discarded by force, then
            # Process.cleanup removes them (the heartbeat one once 5 minutes have passed:
            # its updated_at moved back, the one statement that is not GoodJob's, standing
            # in for the time), and a live process takes the other job over.
            await while_stuck(2)
            await discard_by_hand(op, Clock(), log, doomed["advisory"], force=True)
            await op.execute("UPDATE good_job_processes SET updated_at = updated_at - "
                             "interval '10 minutes' WHERE id = $1", doomed["heartbeat_process"])  # fmt: skip
            gone_processes = await live[0].cleanup()
            assert set(gone_processes) == {doomed["heartbeat_process"], doomed["advisory_process"]}
            async with processes(dsn, log, [(Clock(), True, ["fragile"], 1)]):
                await producer
                await wait_for(lambda: _quiet(dsn), "the workload to drain", 90)
            await wait_for(lambda: _cleaned(log), "the cleanup of the run's jobs", 60)
            cleaner.cancel()
            await asyncio.gather(cleaner, return_exceptions=True)
    finally:
        for conn in (op, app, gone, feed):
            await conn.close()


async def _doomed(dsn: str, log: Log, conn: asyncpg.Connection) -> dict[str, str]:
    """Two jobs started by the two processes of a worker, which is then SIGKILLed."""
    for _ in range(2):
        await enqueue(conn, Clock(), log, "FragileJob", queue="fragile")
    worker = Worker([sys.executable, "-m", "tests.system.presets.good_job_worker", dsn,
                     "fragile"], {}, "good-job-doomed")  # fmt: skip
    out: dict[str, str] = {}
    try:
        await wait_for(lambda: said(worker, "ready"), "the doomed worker's claims", 30)
        worker.kill()
        for line in worker.output().splitlines():
            if line.startswith("started "):
                _, job_id, job_class, process_id, kind = line.split()
                log.add("started", job_id, job_class)
                out[kind], out[f"{kind}_process"] = job_id, process_id
    finally:
        worker.close()
    return out


async def _produce(conn: asyncpg.Connection, log: Log, rate: float, seconds: float) -> None:
    """Jobs at ``rate`` a second: mostly successes, retried failures, deaths of three kinds."""
    pick = random.Random(37)
    for _ in range(2):
        await enqueue(conn, Clock(), log, "LaterJob", wait=2.0)
    for n in range(int(rate * seconds)):
        roll = pick.random()
        if roll < 0.12:
            await enqueue(conn, Clock(), log, "FlakyJob", args={"fail_until": 1 + n % 2})
        else:
            name = "OkJob" if roll < 0.8 else pick.choice(["BadJob", "DoomedJob", "StubbornJob"])
            await enqueue(conn, Clock(), log, name)
        await asyncio.sleep(1 / rate)


async def _clean(dsn: str, log: Log) -> None:
    """GoodJob's cleanup every second, deleting jobs finished OLDER_THAN seconds ago."""
    conn = await connect(dsn)
    try:
        while True:
            await cleanup_preserved_jobs(conn, Clock(), log, OLDER_THAN)
            await asyncio.sleep(1.0)
    finally:
        await conn.close()


async def _cleaned(log: Log) -> bool:
    entries = log.since_mark()
    made = {e.job_id for e in entries if e.kind == "enqueued"}
    return len(made & {e.job_id for e in entries if e.kind == "cleaned"}) > CLEANED


async def _scalar(dsn: str, sql: str, *args: Any) -> Any:
    conn = await connect(dsn)
    try:
        return await conn.fetchval(sql, *args)
    finally:
        await conn.close()


async def _unfinished(dsn: str, queue: str, n: int) -> bool:
    found = await _scalar(dsn, "SELECT count(*) FROM good_jobs WHERE finished_at IS NULL "
                               "AND queue_name = $1", queue)  # fmt: skip
    return int(found) == n


async def _waiting_retries(dsn: str) -> bool:
    return bool(await _scalar(dsn, "SELECT count(*) FROM good_jobs WHERE error_event = 3 "
                                   "AND finished_at IS NULL AND performed_at IS NULL"))  # fmt: skip


async def _quiet(dsn: str) -> bool:
    busy = await _scalar(dsn, "SELECT count(*) FROM good_jobs WHERE finished_at IS NULL AND "
                              "queue_name <> 'parked' AND job_class <> 'HeldJob'")  # fmt: skip
    return int(busy) == 0


@dataclass
class GroundTruth:
    """What the log says happened after the baseline, per job class, as the exporter counts
    it, and the gauges the table shows at the end."""

    counters: dict[str, dict[Any, int]]
    histograms: dict[str, tuple[int, float, float]]  # completions, sums of duration and wait
    gauges: dict[str, dict[str, int]]


def truth(log: Log) -> tuple[dict[str, dict[Any, int]], dict[str, tuple[int, float, float]]]:
    """The counters and histograms of the log's entries since the baseline."""
    names = ("enqueued", "completed", "failures", "dead", "requeued", "cancelled")
    counters: dict[str, Counter[Any]] = {name: Counter() for name in names}
    histograms: dict[str, tuple[int, float, float]] = {}
    for e in log.since_mark():
        c = e.job_class
        if e.kind == "enqueued":
            counters["enqueued"][c] += 1
        elif e.kind == "interrupted":
            counters["failures"][(c, "lease_expired")] += 1
        elif e.kind == "retried_by_hand":
            counters["requeued"][c] += 1
        elif e.kind == "discarded_by_hand":
            counters["cancelled"][c] += 1
        elif e.kind == "ended" and e.outcome == "success":
            counters["completed"][c] += 1
            n, d, w = histograms.get(c, (0, 0.0, 0.0))
            histograms[c] = (n + 1, d + (e.duration or 0.0), w + (e.wait or 0.0))
        elif e.kind == "ended":
            counters["failures"][(c, "error")] += 1
            counters["dead"][(c, "error")] += e.outcome in DEAD_OUTCOMES
    return {n: {k: v for k, v in c.items() if v} for n, c in counters.items()}, histograms


async def agree(dsn: str, log: Log) -> dict[str, dict[str, int]]:
    """Check that the log, the table and GoodJob's design agree, job by job; return the
    gauges the table shows (GoodJob's scopes, the database's clock)."""
    conn = await connect(dsn)
    try:
        now = await conn.fetchval("SELECT timezone('UTC', now())")
        rows = {str(r["id"]): r for r in await conn.fetch("SELECT * FROM good_jobs")}
        runs: dict[str, list[Any]] = {}
        for r in await conn.fetch("SELECT * FROM good_job_executions ORDER BY created_at"):
            runs.setdefault(str(r["active_job_id"]), []).append(r)
    finally:
        await conn.close()
    expected: dict[str, dict[str, Any]] = {}
    for e in log.entries:
        job = expected.setdefault(e.job_id, {"starts": 0, "events": [], "state": "waiting"})
        if e.kind == "cleaned":
            job["state"] = "cleaned"
        elif e.kind == "started":
            job["starts"] += 1
            job["state"] = "running"
        elif e.kind == "interrupted":
            job["events"].append(INTERRUPTED)
        elif e.kind == "ended":
            job["events"] += [ERROR_EVENTS[e.outcome]] if e.outcome != "success" else []
            job["state"] = {"success": "succeeded", "retry": "waiting"}.get(e.outcome, "discarded")
        elif e.kind in ("retried_by_hand", "enqueued"):
            job["state"] = "waiting"
        elif e.kind == "discarded_by_hand":
            job["state"] = "discarded"
    kept = {i for i, job in expected.items() if job["state"] != "cleaned"}
    assert set(rows) == kept, f"in the table, not the log: {set(rows) - kept}; " \
                              f"in the log, not the table: {kept - set(rows)}"  # fmt: skip
    assert not set(runs) - kept, "executions of a cleaned job were left"
    gauges: dict[str, dict[str, int]] = {}
    for job_id in kept:
        row, job, attempts = rows[job_id], expected[job_id], runs.get(job_id, [])
        assert (row["executions_count"] or 0) == job["starts"] == len(attempts), job_id
        events = sorted(r["error_event"] for r in attempts if r["error"] is not None)
        assert events == sorted(job["events"]), (job_id, events, job["events"])
        assert _scope(row) == job["state"], (job_id, _scope(row), job["state"])
        if row["finished_at"] is None:
            g = gauges.setdefault(row["job_class"], {"pending": 0, "running": 0, "scheduled": 0})
            g["running" if row["performed_at"] else "pending"] += 1
            due = row["scheduled_at"] or row["created_at"]
            g["scheduled"] += row["performed_at"] is None and due > now
    return gauges


def _scope(row: Any) -> str:
    """GoodJob's scopes (job.rb), by the row."""
    if row["finished_at"] is None:
        return "waiting" if row["performed_at"] is None else "running"
    return "succeeded" if row["error"] is None else "discarded"
