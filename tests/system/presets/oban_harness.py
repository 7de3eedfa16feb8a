"""Ground-truth workload for Oban: its own schema and SQL, a node that works jobs as Oban's
producer and executor do, a node that is SIGKILLed mid-job, and the truth from oban_jobs."""

from __future__ import annotations

import asyncio
import contextlib
import sys
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import asyncpg

from tests.system.presets.oban_client import Ack, ObanClient, error_entry
from tests.system.presets.processes import Worker, said, wait_for

QUEUES = ["default", "fragile"]  # "parked" is nobody's: its jobs stay for the gauges
CANCEL_REASON = "cancelled by the job itself"
RESCUE_AFTER = 1.0  # the Lifeline's rescue_after in this workload (and the reader's)
W = "app.workers."


class JobTimeoutError(TimeoutError):
    """``oban.worker.JobTimeoutError``, raised as the executor raises it past a timeout."""


JobTimeoutError.__module__ = "oban.worker"


def perform(job: dict[str, Any]) -> Ack:
    """Run one job's handler and decide its ack as ``Executor._record_stopped`` does."""
    name, args, attempt = job["worker"].removeprefix(W), job["args"], job["attempt"]
    try:
        if name == "Canceller":
            return Ack(job, "cancelled", error=error_entry(job, CANCEL_REASON))
        if name == "Snoozer" and not job["meta"].get("snoozed"):
            return Ack(job, "scheduled", attempt_change=-1, schedule_in=1,
                       meta={"snoozed": job["meta"].get("snoozed", 0) + 1})  # fmt: skip
        if name == "Slow":
            try:
                raise TimeoutError
            except TimeoutError as error:
                raise JobTimeoutError(f"{job['worker']} timed out after 0.1s") from error
        if name == "Bad" or (name == "Flaky" and attempt <= args.get("fail_until", 0)):
            raise RuntimeError(f"{name} failed attempt {attempt}")
    except Exception as error:
        entry = error_entry(job, error)
        if attempt >= job["max_attempts"]:
            return Ack(job, "discarded", error=entry)
        return Ack(job, "retryable", error=entry, schedule_in=1)  # the worker's backoff()
    return Ack(job, "completed")


async def work(oban: ObanClient, queues: list[str], stop: asyncio.Event) -> None:
    """A node: per queue fetch, execute, ack (the Producer's loop), until ``stop``."""
    node, producer = "test-node", str(uuid.uuid4())
    while not stop.is_set():
        busy = False
        for queue in queues:
            jobs = await oban.fetch(queue, 10, node, producer)
            if jobs:
                busy = True
                await oban.ack([perform(job) for job in jobs])
        if not busy:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), 0.05)


async def stage(oban: ObanClient, stop: asyncio.Event) -> None:
    """The Stager, every 0.2 s (Oban's default is 1 s)."""
    while not stop.is_set():
        await oban.stage(5000, [*QUEUES, "parked"])
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), 0.2)


@contextlib.asynccontextmanager
async def node(oban: ObanClient, queues: list[str]) -> AsyncIterator[None]:
    """A working node and the Stager for the duration of the block."""
    stop = asyncio.Event()
    tasks = [asyncio.create_task(work(oban, queues, stop)), asyncio.create_task(stage(oban, stop))]
    try:
        yield
    finally:
        stop.set()
        await asyncio.gather(*tasks)


@dataclass
class GroundTruth:
    """The counters and gauges the library's table records (requeued: by hand)."""

    counters: dict[str, dict[Any, int]]
    gauges: dict[str, dict[str, int]]
    histograms: dict[str, tuple[int, float, float, float]]  # count, sums of duration/wait/latency


async def history(oban: ObanClient) -> dict[str, int]:
    """What happened before the exporter started; returns the ids the workload needs later."""
    for _ in range(3):
        await oban.insert(W + "Ok")
    await oban.insert(W + "Bad", max_attempts=1)
    await oban.insert(W + "Canceller")
    retry_me = await oban.insert(W + "Flaky", max_attempts=1, args={"fail_until": 1})
    waiting = await oban.insert(W + "Flaky", max_attempts=3, args={"fail_until": 1})
    for _ in range(2):
        await oban.insert(W + "Parked", queue="parked")
    later = await oban.insert(W + "Held", scheduled_at=_in_an_hour())
    await oban.insert(W + "Held", scheduled_at=_in_an_hour())
    # One pass of a node with no Stager: the waiting Flaky job stays retryable.
    await oban.ack([perform(job) for job in await oban.fetch("default", 20, "old", "old")])
    return {"retry_me": retry_me, "waiting": waiting, "cancel_me": later}


async def run_workload(
    dsn: str,
    oban: ObanClient,
    ids: dict[str, int],
    while_stuck: Callable[[int], Awaitable[None]],
    until_forgotten: Callable[[int], Awaitable[None]],
) -> dict[int, int]:
    """The live workload; returns the retries by hand per job id."""
    # A node claims both Fragile jobs and dies with them: SIGKILL, no ack, no cleanup.
    await oban.insert(W + "Fragile", queue="fragile", max_attempts=3)
    await oban.insert(W + "Fragile", queue="fragile", max_attempts=1)
    doomed = Worker([sys.executable, "-m", "tests.system.presets.oban_worker", dsn, "fragile",
                     "10"], {}, "oban-doomed")  # fmt: skip
    try:
        await wait_for(lambda: said(doomed, "fetched 2"), "the doomed node's claim", 30)
        doomed.kill()
    finally:
        doomed.close()
    async with node(oban, QUEUES):
        for _ in range(8):
            await oban.insert(W + "Ok")
        for _ in range(3):
            await oban.insert(W + "Flaky", max_attempts=3, args={"fail_until": 2})
        for _ in range(2):
            await oban.insert(W + "Bad", max_attempts=2)
        await oban.insert(W + "Slow", max_attempts=1)
        await oban.insert(W + "Canceller")
        await oban.insert(W + "Snoozer")
        await oban.insert(W + "Later", scheduled_at=_in(2.0))
        assert await oban.cancel([ids["cancel_me"]]) == 1
        # The Lifeline: both orphans are past rescue_after once the exporter calls them stuck.
        await while_stuck(2)
        assert await oban.rescue(RESCUE_AFTER) == 2
        # A retry by hand of a job that ended before the exporter started and that the
        # reader no longer follows: it runs again at once and succeeds.
        await until_forgotten(ids["retry_me"])
        assert await oban.retry([ids["retry_me"]]) == 1
        await wait_for(lambda: _quiet(dsn), "the workload to drain", 60)
    return {ids["retry_me"]: 1}


async def _quiet(dsn: str) -> bool:
    conn = await asyncpg.connect(dsn)
    try:
        busy = await conn.fetchval(
            "SELECT count(*) FROM oban_jobs WHERE state IN ('available', 'executing', "
            "'retryable') AND queue <> 'parked' OR (state = 'scheduled' AND worker <> $1)",
            W + "Held",
        )
        return int(busy) == 0
    finally:
        await conn.close()


def _in(seconds: float) -> Any:
    from datetime import UTC, datetime, timedelta

    return datetime.now(UTC) + timedelta(seconds=seconds)


def _in_an_hour() -> Any:
    return _in(3600.0)


async def snapshot_rows(dsn: str) -> dict[int, dict[str, Any]]:
    """Every job row, as the truth reads it."""
    conn = await asyncpg.connect(dsn)
    try:
        await conn.set_type_codec("jsonb", encoder=str, decoder=_json, schema="pg_catalog")
        rows = await conn.fetch(
            "SELECT id, worker, state::text AS state, attempt, max_attempts, errors, meta, "
            "extract(epoch FROM coalesce(completed_at, discarded_at, cancelled_at))::float8 "
            "  AS ended_at, "
            "extract(epoch FROM completed_at - attempted_at)::float8 AS duration, "
            "extract(epoch FROM attempted_at - scheduled_at)::float8 AS wait, "
            "extract(epoch FROM completed_at - inserted_at)::float8 AS latency, "
            "scheduled_at > timezone('UTC', now()) AS future FROM oban_jobs"
        )
        return {int(r["id"]): dict(r) for r in rows}
    finally:
        await conn.close()


def _json(text: str) -> Any:
    import json

    return json.loads(text)


def _kind(entry: dict[str, Any]) -> str:
    last = entry["error"].rstrip().splitlines()[-1]
    return "deadline" if last.startswith("oban.worker.JobTimeoutError") else "error"


def _failures(row: dict[str, Any]) -> Counter[str]:
    """Failed attempts a row records: error entries (not a Cancel's reason), Lifeline rescues,
    and an orphan the Lifeline discarded (its last attempt has no entry)."""
    entries = [e for e in row["errors"] if e["error"] != CANCEL_REASON]
    out = Counter(_kind(e) for e in entries)
    out["lease_expired"] += int(row["meta"].get("rescued", 0)) + _orphan_discarded(row)
    return out


def _orphan_discarded(row: dict[str, Any]) -> int:
    own = [e for e in row["errors"] if e["attempt"] == row["attempt"]]
    return int(row["state"] == "discarded" and not own)


def truth(
    start: dict[int, dict[str, Any]], end: dict[int, dict[str, Any]], by_hand: dict[int, int]
) -> GroundTruth:
    """What happened after ``start`` (the rows when the exporter began), per worker."""
    counters: dict[str, Counter[Any]] = {k: Counter() for k in
                                         ("enqueued", "completed", "failures", "dead", "requeued",
                                          "cancelled")}  # fmt: skip
    histograms: dict[str, tuple[int, float, float, float]] = {}
    for job_id, row in end.items():
        worker, before = row["worker"], start.get(job_id)
        counters["enqueued"][worker] += before is None
        failed = _failures(row) - (_failures(before) if before else Counter())
        for reason, n in failed.items():
            counters["failures"][(worker, reason)] += n
        ended = row["ended_at"] is not None and (
            before is None or before["ended_at"] != row["ended_at"]
        )
        dead = ended and row["state"] == "discarded"
        if dead:
            kinds = [_kind(e) for e in row["errors"]]
            reason = "lease_expired" if _orphan_discarded(row) else kinds[-1]
            counters["dead"][(worker, reason)] += 1
        counters["requeued"][worker] += by_hand.get(job_id, 0)
        if ended and row["state"] == "completed":
            counters["completed"][worker] += 1
            n, d, w, lat = histograms.get(worker, (0, 0.0, 0.0, 0.0))
            histograms[worker] = (n + 1, d + row["duration"], w + row["wait"], lat + row["latency"])
        if ended and row["state"] == "cancelled":
            counters["cancelled"][worker] += 1
    gauges: dict[str, dict[str, int]] = {}
    for row in end.values():
        if row["state"] in ("available", "scheduled", "executing", "retryable"):
            g = gauges.setdefault(row["worker"], {"pending": 0, "running": 0, "scheduled": 0})
            g["running" if row["state"] == "executing" else "pending"] += 1
            g["scheduled"] += row["state"] in ("scheduled", "retryable") and row["future"]
    plain = {name: {k: v for k, v in c.items() if v} for name, c in counters.items()}
    return GroundTruth(plain, gauges, histograms)
