"""Ground truth for Solid Queue 1.5: its statements replayed by Rails processes with skewed
clocks, a log of what each transition did, and the check that log and tables agree.

Every transition goes through solid_queue_client.py / solid_queue_maintenance.py, in Solid
Queue's order and transactions. The harness decides each job's outcome by its class, as a Rails
app's Active Job code would (``retry_on``, ``discard_on``, an unhandled error), and logs it:
that log is the truth the exporter's counters are compared with. Before it is trusted, every
job it names must be where the log says in the tables (:func:`check_agreement`), and the
tables must keep Solid Queue's own invariants (a retry_on row follows a finished row).

``Log(preserved=False)`` runs the same workload as an app with ``preserve_finished_jobs`` off:
every Rails process the harness starts deletes a job as it finishes, so the log says such a
job is gone, and no job keeps more than one row.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import random
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import asyncpg

from tests.system.presets.solid_queue_maintenance import RailsProcess

LOST = "lease_expired"
RETRY_WAIT = 0.3  # retry_on's wait in this workload (Active Job's default is 3 s)
# Each Rails process's clock against the database's, in seconds: the dispatcher runs ahead of
# every worker, so the retries the workers schedule on their own clocks come due at once.
SKEWS = {"enqueuer": -10.0, "dispatcher": 30.0, "workers": (20.0, -40.0, 0.0)}
COUNTERS = ("enqueued", "completed", "failures", "dead", "requeued", "cancelled")
MIX = ["OkJob"] * 10 + ["DiscardJob"] * 2 + ["FlakyJob"] * 3 + ["BadJob"] * 2 + ["CrashJob"] * 2


@dataclass
class Log:
    """What the harness did: counted events (after the exporter's baseline) and where each
    job should be now."""

    live: bool = False
    # SolidQueue.preserve_finished_jobs of the app whose processes the harness starts (on:
    # Solid Queue's default). Off, a finished job's row is deleted: the log says "gone".
    preserved: bool = True
    counters: dict[str, Counter[Any]] = field(
        default_factory=lambda: {name: Counter() for name in COUNTERS}
    )
    where: dict[int, str] = field(default_factory=dict)  # job id -> finished, failed, ...
    completed_ids: set[int] = field(default_factory=set)  # completions since the baseline
    cleared: set[int] = field(default_factory=set)  # finished two days ago: the clean-up's

    @property
    def finished(self) -> str:
        """Where a finished job is: its row, or nowhere when its finish deleted it."""
        return "finished" if self.preserved else "gone"

    def note(self, event: str, class_name: str, job_id: int, where: str, reason: str = "") -> None:
        """One transition: count it (when live) and say where its job is now."""
        self.where[job_id] = where
        if event == "completed" and self.live:
            self.completed_ids.add(job_id)
        if not self.live or event in ("released", "discarded_dead", "superseded"):
            return
        if event in ("failed", "retry_on"):
            self.counters["failures"][(class_name, reason or "error")] += 1
        if event == "failed":
            self.counters["dead"][(class_name, reason)] += 1
        elif event != "retry_on":
            self.counters[event][class_name] += 1

    def truth(self) -> dict[str, dict[Any, int]]:
        return {name: {k: v for k, v in c.items() if v} for name, c in self.counters.items()}


async def perform(rails: RailsProcess, job: dict[str, Any], log: Log, fixed: bool = True) -> None:
    """Run one claimed job to its end as Active Job would, and log what it left."""
    assert rails.preserve == log.preserved, "one app: its processes share the setting"
    name, job_id = job["class_name"], int(job["job_id"])
    executions = json.loads(job["arguments"])["executions"]
    if name in ("FlakyJob", "BadJob") and executions == 0:
        # retry_on: the same job, re-enqueued as a new row first; this one then finishes.
        again = await rails.enqueue(name, executions=1, active_job_id=job["active_job_id"],
                                    delay=RETRY_WAIT)  # fmt: skip
        log.note("retry_on", name, again.id, again.where)
        assert await rails.finish(job)
        log.note("superseded", name, job_id, log.finished)
    elif name in ("BadJob", "CrashJob") or (name == "FixedJob" and not fixed):
        if await rails.fail(job, "RuntimeError", f"{name} failed"):
            log.note("failed", name, job_id, "failed", "error")
    elif await rails.finish(job):  # a success, or discard_on (stored exactly alike)
        log.note("completed", name, job_id, log.finished)


async def work(rails: RailsProcess, log: Log, stop: asyncio.Event, queue: str = "default") -> None:
    """A worker: claim up to 3 (its threads), perform, heartbeat; until ``stop``."""
    beat = 0.0
    while not stop.is_set():
        jobs = await rails.claim(queue, 3)
        for job in jobs:
            await perform(rails, job, log)
        loop = asyncio.get_running_loop()
        if loop.time() - beat > 0.5:
            await rails.heartbeat()
            beat = loop.time()
        if not jobs:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), 0.02)


async def every(seconds: float, action: Callable[[], Awaitable[Any]], stop: asyncio.Event) -> None:
    """Run ``action`` every ``seconds`` until ``stop`` (the dispatcher, the clean-up)."""
    while not stop.is_set():
        await action()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), seconds)


@dataclass
class History:
    """The jobs the live workload acts on by hand later."""

    retry_me: int = 0  # a failed CrashJob: retried by hand, fails again
    retry_all: list[int] = field(default_factory=list)  # failed FixedJobs: retried, then done
    discard_dead: int = 0  # a failed CrashJob: discarded by hand
    discard_parked: int = 0  # a ParkedJob scheduled an hour ahead: discarded by hand
    discard_waiting: int = 0  # a job on a queue no worker serves: discarded by hand


async def history(dsn: str, log: Log) -> History:
    """What happened before the exporter started: finished (some two days ago, by a worker
    whose clock says so, for the clean-up), failed, left pending (ready, blocked) and
    scheduled jobs, and a retry_on row waiting for its turn."""
    out = History()
    old = await RailsProcess.connect(dsn, skew=-2 * 86400.0, preserve=log.preserved)
    app = await RailsProcess.connect(dsn, preserve=log.preserved)
    try:
        await old.register("Worker")
        for _ in range(6):
            await old.enqueue("OkJob")
        for job in await old.claim("default", 10):
            await perform(old, job, log)
            if log.preserved:  # else its finish deleted it: nothing is left to clear
                log.cleared.add(int(job["job_id"]))
        await app.register("Worker")
        for name in ("OkJob", "OkJob", "CrashJob", "CrashJob", "FixedJob", "FixedJob", "FlakyJob"):
            await app.enqueue(name)
        for job in await app.claim("default", 10):
            await perform(app, job, log, fixed=False)
        failed = sorted(i for i, w in log.where.items() if w == "failed")
        out.retry_me, out.discard_dead, *out.retry_all = failed
        parked = [await app.enqueue("ParkedJob", queue="parked", delay=3600.0) for _ in range(2)]
        out.discard_parked = parked[0].id
        others = [await app.enqueue("OtherJob", queue="other") for _ in range(2)]
        out.discard_waiting = others[0].id
        for _ in range(2):  # the first takes the semaphore (ready), the second waits (blocked)
            await app.enqueue("SerialJob", queue="other", concurrency_key="SerialJob/1")
        await app.deregister()
        await old.deregister()
    finally:
        await old.close()
        await app.close()
    return out


async def run_workload(
    dsn: str, log: Log, past: History, while_stuck: Callable[[int], Awaitable[None]],
    seconds: float = 6.0, rate: float = 30.0,
) -> None:  # fmt: skip
    """The live workload: ``rate`` jobs a second for ``seconds``, three workers with skewed
    clocks, the dispatcher, the clean-up of jobs finished a day ago, a held enqueue, a worker
    that dies holding two jobs (pruned), one stopped gracefully, and an operator's acts."""
    log.live = True
    stop = asyncio.Event()
    kept = log.preserved
    procs = [await RailsProcess.connect(dsn, s, kept) for s in SKEWS["workers"]]
    dispatcher = await RailsProcess.connect(dsn, SKEWS["dispatcher"], kept)
    cleaner, app, held, operator, doomed, graceful = [
        await RailsProcess.connect(dsn, SKEWS["enqueuer"], kept) for _ in range(6)
    ]
    everyone = [*procs, dispatcher, cleaner, app, held, operator, doomed, graceful]
    try:
        for rails in (*procs, dispatcher, doomed, graceful, operator):
            await rails.register("Supervisor" if rails is operator else "Worker")
        tasks = [asyncio.create_task(work(p, log, stop)) for p in procs]
        tasks.append(asyncio.create_task(every(0.2, dispatcher.dispatch, stop)))
        tasks.append(asyncio.create_task(every(0.5, lambda: cleaner.clear_finished(
            timedelta(days=1)), stop)))  # fmt: skip
        # An app transaction holds its enqueue open while later ids commit.
        await held.conn.execute("BEGIN")
        late = await held.enqueue_in_transaction("OkJob")
        # The doomed worker claims two slow jobs and dies: no heartbeat, no end.
        for _ in range(2):
            slow = await app.enqueue("SlowJob", queue="slow")
            log.note("enqueued", "SlowJob", slow.id, "ready")
        assert len(await doomed.claim("slow", 2)) == 2
        rng = random.Random(37)
        for n in range(int(seconds * rate)):
            name = rng.choice(MIX)
            job = await app.enqueue(name)
            log.note("enqueued", name, job.id, job.where)
            if n == 10:
                await held.conn.execute("COMMIT")
                log.note("enqueued", "OkJob", late.id, "ready")
                calm = await app.enqueue("OkJob", queue="calm")
                log.note("enqueued", "OkJob", calm.id, "ready")
                [claimed] = await graceful.claim("calm", 1)  # then stops: released
            if n == int(rate):
                await graceful.deregister()
                log.note("released", "OkJob", int(claimed["job_id"]), "ready")
                await held.register("Worker")  # a worker of the calm queue runs it
                tasks.append(asyncio.create_task(work(held, log, stop, "calm")))
                await _by_hand(operator, past, log)
            if n % 5 == 0:
                later = await app.enqueue("LaterJob", delay=1.0)
                log.note("enqueued", "LaterJob", later.id, later.where)
            await asyncio.sleep(1 / rate)
        await doomed.conn.execute(
            "UPDATE solid_queue_processes SET last_heartbeat_at = last_heartbeat_at "
            "- interval '10 minutes' WHERE id = %s",
            (doomed.id,),
        )  # fmt: skip  (the one statement not Solid Queue's: it stands in for 10 minutes)
        await while_stuck(2)
        for job_id in await operator.prune():
            log.note("failed", "SlowJob", job_id, "failed", LOST)
        await _until_quiet(dsn)
    finally:
        stop.set()
        await asyncio.gather(*tasks, return_exceptions=True)
        for rails in everyone:
            await rails.close()


async def _by_hand(operator: RailsProcess, past: History, log: Log) -> None:
    """An operator in Mission Control: retry, retry all, discard a dead and two waiting jobs."""
    await operator.retry(past.retry_me)
    log.note("requeued", "CrashJob", past.retry_me, "ready")
    await operator.retry_all(past.retry_all)
    for job_id in past.retry_all:
        log.note("requeued", "FixedJob", job_id, "ready")
    await operator.discard("solid_queue_failed_executions", past.discard_dead)
    log.note("discarded_dead", "CrashJob", past.discard_dead, "gone")
    await operator.discard("solid_queue_scheduled_executions", past.discard_parked)
    log.note("cancelled", "ParkedJob", past.discard_parked, "gone")
    await operator.discard("solid_queue_ready_executions", past.discard_waiting)
    log.note("cancelled", "OtherJob", past.discard_waiting, "gone")


async def _until_quiet(dsn: str, within: float = 60.0) -> None:
    """Until no job of a served queue waits or runs (the parked and other queues stay)."""
    conn = await asyncpg.connect(dsn)
    try:
        deadline = asyncio.get_running_loop().time() + within
        while True:
            busy = await conn.fetchval(
                "SELECT (SELECT count(*) FROM solid_queue_ready_executions "
                "        WHERE queue_name IN ('default', 'calm')) "
                "     + (SELECT count(*) FROM solid_queue_scheduled_executions "
                "        WHERE queue_name = 'default') "
                "     + (SELECT count(*) FROM solid_queue_claimed_executions)"
            )
            if busy == 0:
                return
            assert asyncio.get_running_loop().time() < deadline, f"{busy} jobs still busy"
            await asyncio.sleep(0.1)
    finally:
        await conn.close()


async def table_states(dsn: str) -> dict[int, dict[str, Any]]:
    """Every job row: where it is, its class, and the figures the truth needs."""
    conn = await asyncpg.connect(dsn)
    try:
        rows = await conn.fetch(
            "SELECT j.id, j.class_name, j.active_job_id, "
            "       (j.arguments::jsonb ->> 'executions')::int AS executions, "
            "       CASE WHEN j.finished_at IS NOT NULL THEN 'finished' "
            "            WHEN f.id IS NOT NULL THEN 'failed' "
            "            WHEN c.id IS NOT NULL THEN 'running' "
            "            WHEN r.id IS NOT NULL THEN 'ready' "
            "            WHEN s.id IS NOT NULL THEN 'scheduled' "
            "            WHEN b.id IS NOT NULL THEN 'blocked' ELSE 'none' END AS place, "
            "       s.scheduled_at > timezone('UTC', now()) AS future, "
            "       greatest(extract(epoch FROM j.finished_at - (SELECT min(k.created_at) "
            "           FROM solid_queue_jobs k WHERE k.active_job_id = j.active_job_id)), 0)"
            "           ::float8 AS latency "
            "FROM solid_queue_jobs j "
            "LEFT JOIN solid_queue_failed_executions f ON f.job_id = j.id "
            "LEFT JOIN solid_queue_claimed_executions c ON c.job_id = j.id "
            "LEFT JOIN solid_queue_ready_executions r ON r.job_id = j.id "
            "LEFT JOIN solid_queue_scheduled_executions s ON s.job_id = j.id "
            "LEFT JOIN solid_queue_blocked_executions b ON b.job_id = j.id"
        )
        return {int(r["id"]): dict(r) for r in rows}
    finally:
        await conn.close()


def check_agreement(log: Log, tables: dict[int, dict[str, Any]]) -> None:
    """The log, Solid Queue's design and the tables agree, or the truth is not trusted: every
    job the log names is where it says (the clean-up took the ones finished two days ago),
    and every row with executions > 0 follows a finished row of the same job (retry_on).
    With preserve_finished_jobs off no row is finished and a job has one row at most: the
    retry_on row's forerunner was deleted when it finished."""
    for job_id, where in log.where.items():
        found = tables.get(job_id, {}).get("place", "gone")
        expected = "gone" if job_id in log.cleared else where
        assert found == expected, f"job {job_id}: the log says {expected}, the tables {found}"
    by_job: dict[str, list[dict[str, Any]]] = {}
    for row in sorted(tables.values(), key=lambda r: r["id"]):
        by_job.setdefault(row["active_job_id"], []).append(row)
    if not log.preserved:
        for rows in by_job.values():
            assert len(rows) == 1, rows
            assert rows[0]["place"] != "finished", rows
        return
    for rows in by_job.values():
        for earlier, later in itertools.pairwise(rows):
            assert later["executions"] == earlier["executions"] + 1, rows
            assert earlier["place"] == "finished", rows


def gauges_of(tables: dict[int, dict[str, Any]]) -> dict[str, dict[str, int]]:
    """The gauges the tables say, per class: pending, running, scheduled, held. A finished job
    counts in none, whether its row is kept (preserved) or deleted (not)."""
    out: dict[str, Counter[str]] = {}
    for row in tables.values():
        g = out.setdefault(row["class_name"], Counter())
        place = row["place"]
        g["pending"] += place in ("ready", "scheduled", "blocked")
        g["running"] += place == "running"
        g["scheduled"] += bool(row["future"])
        g["held"] += place == "failed"
    return {name: dict(g) for name, g in out.items() if any(g.values())}
