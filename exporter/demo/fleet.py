"""A simulated fleet of workers on the job queue, and the ground-truth tally of what it did.

The fleet enqueues, claims, renews, completes, fails, dies, reaps and requeues jobs like a
real deployment; every committed transition goes into a :class:`~exporter.demo.tally.Tally`,
from which tests learn exactly what the exporter should have counted.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import random
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import Any

import asyncpg

from exporter.demo.hazards import ORDINARY_ERRORS, Hazards
from exporter.demo.payloads import job_result
from exporter.demo.queue import DEADLINE_ERROR, JobQueue, Transition
from exporter.demo.tally import Tally, cost_components, failure_reason, result_fields

log = logging.getLogger(__name__)

# What a lost or refused connection raises; the fleet waits and tries again.
DATABASE_ERRORS = (asyncpg.PostgresError, asyncpg.InterfaceError, OSError)

# Label names the demo gives its job types (the job_types setting), so that its metrics,
# dashboard and alerts read like a real deployment's rather than "1" to "5".
DEMO_JOB_TYPES = {
    1: "send_email",
    2: "render_pdf",
    3: "resize_image",
    4: "sync_crm",
    5: "charge_card",
}


@dataclass(frozen=True)
class FleetConfig:
    """How the simulated fleet behaves; the defaults make a lively demo at human speed."""

    seed: int = 1
    workers: int = 16
    enqueue_rate: float = 2.0  # jobs per second (on average; the demo swings it slowly)
    rate_swing: float = 0.5  # relative amplitude of the slow swing of the enqueue rate
    rate_period: float = 300.0
    job_types: int = 5
    duration: tuple[float, float] = (1.0, 10.0)
    lease_seconds: float = 30.0
    backoff_base: float = 5.0
    poll_interval: float = 0.5  # idle worker's wait before trying to claim again
    reap_interval: float = 10.0
    operator_interval: float = 15.0
    requeue_after: float = 0.0  # the operator only requeues jobs dead for at least this long
    p_error: float = 0.08
    p_deadline: float = 0.04
    p_worker_death: float = 0.02
    # One job type keeps the error, deadline and death rates above; the others see them scaled
    # down, so the demo looks like a fleet that is mostly healthy with one type in trouble.
    troubled_type: int = 4
    healthy_scale: float = 0.02
    p_requeue: float = 0.3
    p_duplicate: float = 0.05
    p_malformed: float = 0.02
    max_attempts: tuple[int, int] = (1, 3)
    error_pause: float = 1.0  # wait after a database error before the next try

    @classmethod
    def fast(cls, **overrides: Any) -> FleetConfig:
        """A configuration for tests: many short jobs, one-second leases, tiny backoff."""
        values: dict[str, Any] = dict(
            workers=8, enqueue_rate=60.0, rate_swing=0.0, duration=(0.01, 0.2),
            lease_seconds=1.0, backoff_base=0.05, poll_interval=0.02, reap_interval=0.2,
            operator_interval=0.3, p_error=0.15, p_deadline=0.1, p_worker_death=0.05,
            healthy_scale=1.0, p_requeue=0.5, p_duplicate=0.1, p_malformed=0.1, error_pause=0.1,
        )  # fmt: skip
        values.update(overrides)
        return cls(**values)


class Fleet(Hazards):
    """Workers, an enqueuer, a reaper and an operator running against one database."""

    def __init__(
        self,
        dsn: str,
        config: FleetConfig | None = None,
        tally: Tally | None = None,
        queue: type[JobQueue] = JobQueue,
    ) -> None:
        """``queue``: whose statements drive the table (JobQueue's, for the job table)."""
        self.dsn = dsn
        self.queue = queue
        self.config = config or FleetConfig()
        self.tally = tally if tally is not None else Tally()
        self.errors = 0  # database errors; the tally is exact only while this stays 0
        self._rng = random.Random(self.config.seed)
        self._pool: asyncpg.Pool | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self._gate = asyncio.Event()
        self._idle = asyncio.Event()
        self._idle.set()
        self._inflight = 0
        self._reserved: set[Any] = set()  # jobs driven by hazard helpers only
        self._serial = 0
        self._recent_keys: list[str] = []

    # -- lifecycle ---------------------------------------------------------------------

    async def open(self) -> None:
        """Open the connection pool (hazard helpers work without starting the fleet)."""
        if self._pool is None:
            size = self.config.workers + 4
            # command_timeout: a hung server must cost a logged error, not a frozen fleet.
            self._pool = await asyncpg.create_pool(
                self.dsn, min_size=1, max_size=size, command_timeout=30
            )

    async def start(self) -> None:
        """Start every simulated process."""
        await self.open()
        self._gate.set()
        if self._tasks:
            return
        coroutines = [self._worker(i) for i in range(self.config.workers)]
        coroutines += [self._enqueuer(), self._reaper(), self._operator()]
        self._tasks = [asyncio.create_task(c) for c in coroutines]

    async def pause(self) -> None:
        """Hold every process and return once no transaction of the fleet is in flight."""
        self._gate.clear()
        await self._idle.wait()

    def resume(self) -> None:
        """Let the processes go on after :meth:`pause`."""
        self._gate.set()

    async def stop(self) -> None:
        """Quiesce, cancel every process and close the pool; the tally stays readable."""
        await self.pause()
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks = []
        if self._pool is not None:
            await self._pool.close()
            self._pool = None

    async def __aenter__(self) -> Fleet:
        await self.open()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    # -- plumbing ----------------------------------------------------------------------

    @contextlib.asynccontextmanager
    async def _transaction(self) -> AsyncIterator[JobQueue]:
        """Wait for the gate, then lend a queue on a pooled connection, counted as in flight."""
        while not self._gate.is_set():
            await self._gate.wait()
        self._inflight += 1
        self._idle.clear()
        try:
            async with self._connection() as conn:
                yield self.queue(conn, backoff_base=self.config.backoff_base)
        finally:
            self._inflight -= 1
            if self._inflight == 0:
                self._idle.set()

    @contextlib.asynccontextmanager
    async def _connection(self) -> AsyncIterator[asyncpg.Connection]:
        """A pooled connection (hazard helpers use it directly, outside the gate)."""
        if self._pool is None:
            raise RuntimeError("the fleet is not open")
        async with self._pool.acquire() as conn:
            yield conn

    def _record(self, transitions: Iterable[Transition | None]) -> None:
        for transition in transitions:
            if transition is not None:
                self.tally.record(transition)

    async def _guarded(self, loop_body: Callable[[], Awaitable[None]]) -> None:
        """Run a process body forever; a database error costs a pause, not the process."""
        while True:
            try:
                await loop_body()
            except DATABASE_ERRORS as exc:
                self.errors += 1
                log.warning("fleet: database error: %s", exc)
                await asyncio.sleep(self.config.error_pause)

    async def _while_leased(
        self, lease_end: float, step: Callable[[JobQueue], Awaitable[Transition | None]]
    ) -> Transition | None:
        """Run one statement on a claimed job, retrying database errors until lease_end.

        A real worker that loses the database keeps its job and tries again: a blip shorter
        than the lease costs no attempt. Only once the lease would have run out is the job the
        reaper's (lease_expired), and the error goes to :meth:`_guarded`.
        """
        loop = asyncio.get_running_loop()
        while True:
            try:
                async with self._transaction() as queue:
                    done = await step(queue)
                self._record([done])
                return done
            except DATABASE_ERRORS as exc:
                if loop.time() + self.config.error_pause >= lease_end:
                    raise
                self.errors += 1
                log.warning("fleet: database error, retrying while the lease holds: %s", exc)
                await asyncio.sleep(self.config.error_pause)

    # -- the simulated processes -------------------------------------------------------

    async def _enqueuer(self) -> None:
        cfg = self.config
        loop = asyncio.get_running_loop()
        started = loop.time()

        async def body() -> None:
            phase = 2 * math.pi * (loop.time() - started) / cfg.rate_period
            rate = max(0.05, cfg.enqueue_rate * (1 + cfg.rate_swing * math.sin(phase)))
            await asyncio.sleep(self._rng.expovariate(rate))
            job_type = self._rng.randint(1, cfg.job_types)
            duplicate = bool(self._recent_keys) and self._rng.random() < cfg.p_duplicate
            if duplicate:
                key = self._rng.choice(self._recent_keys)
                job_type = int(key.split(":", 1)[0])
            else:
                self._serial += 1
                key = f"{job_type}:{self._serial}"
                self._recent_keys = [*self._recent_keys[-49:], key]
            payload = {"product_code": f"P{self._rng.randint(1000, 9999)}", "product_name": "demo"}
            attempts = self._rng.randint(*cfg.max_attempts)
            async with self._transaction() as queue:
                done = await queue.enqueue(job_type, payload, dedupe_key=key, max_attempts=attempts)
                if done is None:
                    self.tally.duplicates[job_type] += 1
                self._record([done])

        await self._guarded(body)

    async def _worker(self, index: int) -> None:
        cfg = self.config
        generation = 0
        loop = asyncio.get_running_loop()

        async def body() -> None:
            nonlocal generation
            worker_id = f"worker-{index}.{generation}"
            # The lease runs from no earlier than the claim's statement: the worker's own
            # estimate of its end is never past the database's.
            lease_end = loop.time() + cfg.lease_seconds
            async with self._transaction() as queue:
                job = await queue.claim(worker_id, cfg.lease_seconds, exclude=self._reserved)
                self._record([job])
            if job is None:
                await asyncio.sleep(cfg.poll_interval)
                return
            # Scaling the draw up scales every hazard's probability down by the same factor.
            fate = self._rng.random()
            if job.job_type != self.queue.job_type_of(cfg.troubled_type):
                fate /= cfg.healthy_scale
            if fate < cfg.p_worker_death:
                generation += 1  # the process died; its successor has a new id
                return
            duration = self._rng.uniform(*cfg.duration)
            renewed_to = await self._run(job, worker_id, duration, lease_end)
            if renewed_to is None:
                return
            fate -= cfg.p_worker_death
            job_id = job.job_id
            if fate < cfg.p_deadline + cfg.p_error:
                error = (
                    DEADLINE_ERROR if fate < cfg.p_deadline else self._rng.choice(ORDINARY_ERRORS)
                )
                await self._while_leased(renewed_to, lambda q: q.fail(job_id, worker_id, error))
            else:
                result = self._result(duration)
                await self._while_leased(
                    renewed_to, lambda q: q.complete(job_id, worker_id, result)
                )

        await self._guarded(body)

    async def _run(
        self, job: Transition, worker_id: str, duration: float, lease_end: float
    ) -> float | None:
        """Simulate the work, renewing the lease; the lease's end, or None if the job was lost."""
        loop = asyncio.get_running_loop()
        lease = self.config.lease_seconds
        deadline = loop.time() + duration
        every = lease / 3
        while (left := deadline - loop.time()) > 0:
            await asyncio.sleep(min(every, left))
            if deadline - loop.time() > 0:
                asked = loop.time()
                renewed = await self._while_leased(
                    lease_end, lambda q: q.renew(job.job_id, worker_id, lease)
                )
                if renewed is None:
                    return None
                lease_end = asked + lease
        return lease_end

    def _result(self, duration: float) -> Any:
        """A completed job's result jsonb, sometimes malformed on purpose (payloads.py)."""
        return job_result(self._rng, duration, self.config.p_malformed)

    async def _reaper(self) -> None:
        async def body() -> None:
            await asyncio.sleep(self.config.reap_interval)
            async with self._transaction() as queue:
                self._record(await queue.reap(exclude=self._reserved))

        await self._guarded(body)

    async def _operator(self) -> None:
        seen: set[tuple[uuid.UUID, Any]] = set()

        async def body() -> None:
            await asyncio.sleep(self.config.operator_interval)
            async with self._transaction() as queue:
                rows = await queue.dead_letters(self._reserved, self.config.requeue_after)
            for row in rows:
                # Each death is considered once, as an operator would look at it once.
                if (row["job_id"], row["updated_at"]) in seen:
                    continue
                seen.add((row["job_id"], row["updated_at"]))
                if self._rng.random() < self.config.p_requeue:
                    async with self._transaction() as queue:
                        self._record([await queue.requeue(row["job_id"])])

        await self._guarded(body)


__all__ = [
    "Fleet",
    "FleetConfig",
    "Tally",
    "cost_components",
    "failure_reason",
    "result_fields",
]
