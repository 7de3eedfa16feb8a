"""Ground-truth workload for River: its own SQL in its own order and transactions, workers with
skewed clocks and a completer that holds batches, a worker that dies, the leader's scheduler,
rescuer and cleaner, an operator's cancels and retries, and inserts through ``riverqueue``.

The executor's decisions follow River's internal/jobexecutor (an error whose retry is at most
the scheduler's interval away goes straight back to available; a JobCancel returned by the job
cancels it with its error appended; a snooze gives its attempt back), the completer's its
BatchCompleter (results stamped with the worker's clock when the job ends, written in one
JobSetStateIfRunningMany per flush). Everything each statement did goes into the log
(river_ledger.py), which must agree with the table at the end.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from psycopg import AsyncConnection
from psycopg.rows import dict_row

from tests.system.presets.river_client import SCHEDULER_INTERVAL, Clock, Result, RiverSQL
from tests.system.presets.river_ledger import Log

RESCUE_AFTER = 3.0  # the JobRescuer's RescueStuckJobsAfter here (and the exporter's)
RETENTION = 15.0  # the JobCleaner's retention here (River: 24 h, discarded 7 days)
ON_TIME = Clock()
LAGGING, AHEAD, INSERTER = Clock(-8.0), Clock(3.0), Clock(-5.0)  # skewed clocks


@dataclass
class Args:
    """A job's args for ``riverqueue``: its kind and JSON."""

    kind: str
    args: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> str:
        """The args as River stores them."""
        return json.dumps(self.args)


def decide(job: dict[str, Any], clock: Clock, cancelled: bool) -> Result:
    """The handler of each kind, and River's executor turning its return into a result."""
    kind, args, attempt = job["kind"], job["args"], job["attempt"]
    now = clock.now()
    if kind == "canceller":  # return river.JobCancel(err)
        return Result(job, "cancelled", now, error="JobCancel: not wanted any more")
    if kind == "snoozer" and not job["metadata"].get("snoozes"):  # return river.JobSnooze(d)
        wait = float(args.get("snooze", 1.0))
        state = "available" if wait <= SCHEDULER_INTERVAL else "scheduled"
        return Result(job, state, now, scheduled_at=now + timedelta(seconds=wait), snooze=True)
    retry_in = float(args.get("retry_in", (len(job["errors"] or ()) + 1) ** 4))  # default policy
    if cancelled:
        error = "context canceled"  # the job's context, cancelled by the 'cancel' control
    elif kind in ("bad", "oops") or (
        kind in ("flaky", "slowretry") and attempt < args["fail_until"]
    ):
        error = f"{kind} failed attempt {attempt}"
    else:
        return Result(job, "completed", now)
    if attempt >= job["max_attempts"]:
        return Result(job, "discarded", now, error=error)
    state = "available" if retry_in <= SCHEDULER_INTERVAL else "retryable"
    return Result(job, state, now, error=error, scheduled_at=now + timedelta(seconds=retry_in))


class Worker:
    """One River client: a producer per queue, an executor per job, a BatchCompleter."""

    def __init__(self, river: RiverSQL, log: Log, name: str, queues: list[str], clock: Clock,
                 hold: float = 0.0, slots: int = 10) -> None:  # fmt: skip
        self.river, self.log, self.name, self.queues = river, log, name, queues
        self.clock, self.hold, self.slots = clock, hold, slots
        self.running: dict[int, asyncio.Event] = {}  # job id -> its 'cancel' control
        self.pending: list[tuple[float, Result]] = []
        self.flushed: list[Callable[[Result, str], Awaitable[None]]] = []
        self.fetched = 0
        self.failed: list[Exception] = []
        self._stop = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []
        self._jobs: set[asyncio.Task[None]] = set()

    async def start(self) -> Worker:
        """Connect (one connection for the producers, one for the completer) and work."""
        self._fetch = await AsyncConnection.connect(
            self.river.dsn, autocommit=True, row_factory=dict_row
        )
        self._complete = await AsyncConnection.connect(
            self.river.dsn, autocommit=True, row_factory=dict_row
        )
        for queue in self.queues:
            await self.river.queue_seen(queue)
        self._tasks = [asyncio.create_task(self._produce()), asyncio.create_task(self._completer())]
        return self

    async def _produce(self) -> None:
        while not self._stop.is_set():
            for queue in self.queues:
                free = self.slots - len(self.running)
                if free > 0:
                    for job in await self.river.fetch(queue, self.name, free, self._fetch):
                        self.log.fetched(job)
                        self.fetched += 1
                        self.running[job["id"]] = asyncio.Event()
                        task = asyncio.create_task(self._execute(job))
                        self._jobs.add(task)
                        task.add_done_callback(self._jobs.discard)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stop.wait(), 0.05)

    async def _execute(self, job: dict[str, Any]) -> None:
        cancel = self.running[job["id"]]
        # "seconds": how long the first attempt runs (a hung or slow job); retries are quick.
        seconds = random.uniform(0.005, 0.03)
        if job["attempt"] == 1:
            seconds = float(job["args"].get("seconds", seconds))
        try:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(cancel.wait(), seconds)
            result = decide(job, self.clock, cancel.is_set())
            self.pending.append((asyncio.get_running_loop().time(), result))
        except Exception as error:
            self.failed.append(error)  # a bug of the harness: stop() raises it
            raise
        finally:
            del self.running[job["id"]]

    async def _completer(self) -> None:
        loop = asyncio.get_running_loop()
        while not (self._stop.is_set() and not self.running and not self.pending):
            await asyncio.sleep(0.05)
            due = [
                r for at, r in self.pending if loop.time() - at >= self.hold or self._stop.is_set()
            ]
            if due:
                self.pending = [(at, r) for at, r in self.pending if r not in due]
                await self._flush(due)

    async def _flush(self, results: list[Result]) -> None:
        rows = {row["id"]: row for row in await self.river.set_states(results, self._complete)}
        outcomes = [(r, self.log.finished(r.state, r.error is not None, r.snooze, rows[r.job["id"]]))
                    for r in results]  # fmt: skip
        for result, became in outcomes:
            for hook in self.flushed:
                await hook(result, became)

    def cancel(self, job_id: int) -> None:
        """The 'cancel' control notification reaching this client's producer."""
        if job_id in self.running:
            self.running[job_id].set()

    async def stop(self) -> None:
        """A graceful stop: no more fetches, running jobs finish, the completer flushes."""
        self._stop.set()
        await asyncio.gather(*self._tasks)
        await self._close()
        if self.failed:
            raise self.failed[0]

    async def kill(self) -> None:
        """The process dies: nothing more is written, held results are lost."""
        for task in [*self._tasks, *self._jobs]:
            task.cancel()
        await asyncio.gather(*self._tasks, *self._jobs, return_exceptions=True)
        await self._close()

    async def _close(self) -> None:
        await self._fetch.close()
        await self._complete.close()


class Leader:
    """The elected client's maintenance services: JobScheduler and JobCleaner on their loops,
    the JobRescuer when the workload calls it (its 30 s period, compressed to one pass)."""

    def __init__(self, river: RiverSQL, log: Log, clock: Clock = ON_TIME) -> None:
        self.river, self.log, self.clock = river, log, clock
        self._stop = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []

    def start(self) -> Leader:
        """Start the scheduler (every 0.5 s) and the cleaner (every second)."""
        self._tasks = [asyncio.create_task(self._every(0.5, self.schedule)),
                       asyncio.create_task(self._every(1.0, self.clean))]  # fmt: skip
        return self

    async def _every(self, period: float, step: Callable[[], Awaitable[None]]) -> None:
        while not self._stop.is_set():
            await step()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stop.wait(), period)

    async def schedule(self) -> None:
        """One JobScheduler pass."""
        for row in await self.river.schedule(self.clock):
            self.log.promoted(row)

    async def clean(self) -> None:
        """One JobCleaner pass."""
        before = self.clock.now() - timedelta(seconds=RETENTION)
        self.log.cleaned(before, await self.river.clean(before))

    async def rescue(self) -> list[str]:
        """One JobRescuer pass: the running jobs older than RESCUE_AFTER, rescued."""
        stuck = await self.river.stuck(self.clock, RESCUE_AFTER)
        ends = await self.river.rescue(stuck, self.clock, retry_in=0.5)
        for job, (state, finalized_at) in zip(stuck, ends, strict=True):
            self.log.rescued(job["id"], state, finalized_at)
        return [state for state, _ in ends]

    async def stop(self) -> None:
        """Stop the loops."""
        self._stop.set()
        await asyncio.gather(*self._tasks)
