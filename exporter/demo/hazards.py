"""Hazards the tests make the fleet drive: a transition that commits late, and one job through
every kind of failure; each recorded in the fleet's tally like any other transition."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from contextlib import AbstractAsyncContextManager
from typing import Any

import asyncpg

from exporter.demo.queue import DEADLINE_ERROR, JobQueue, Transition

ORDINARY_ERRORS = (
    "TimeoutError: upstream did not answer in 30s",
    "ConnectionResetError: proxy closed the connection",
    "ValueError: price not found on page",
    "HTTPError: 503 Service Unavailable",
)


class Hazards:
    """The fleet's test hazards; :class:`~exporter.demo.fleet.Fleet` provides the rest."""

    _reserved: set[Any]
    queue: type[JobQueue]

    def _connection(self) -> AbstractAsyncContextManager[asyncpg.Connection]:
        raise NotImplementedError

    def _record(self, transitions: Iterable[Transition | None]) -> None:
        raise NotImplementedError

    def _result(self, duration: float) -> Any:
        raise NotImplementedError

    async def _reserved_job(self, queue: JobQueue, job_type: int, max_attempts: int) -> Transition:
        """Enqueue a job that the fleet's own processes will leave alone."""
        job_id = self.queue.new_id()
        self._reserved.add(job_id)
        job = await queue.enqueue(
            job_type, {"hazard": True}, max_attempts=max_attempts, job_id=job_id
        )
        assert job is not None  # no dedupe_key, so it cannot be skipped
        self._record([job])
        return job

    async def commit_late(
        self,
        delay_s: float,
        *,
        job_type: int = 1,
        action: str = "complete",
        executed: asyncio.Event | None = None,
    ) -> Transition:
        """Make one transition whose transaction sleeps ``delay_s`` before COMMIT.

        ``action`` is ``enqueue``, ``complete`` or ``fail`` (a job with max_attempts 1, so it
        dies). ``updated_at = now()`` is the transaction's start, so the row becomes visible
        seconds after the time it claims; ``executed`` is set once the statement ran.
        """
        async with self._connection() as conn:
            queue = self.queue(conn, backoff_base=0.0)
            job: Transition | None = None
            if action != "enqueue":
                job = await self._reserved_job(queue, job_type, max_attempts=1)
                claimed = await queue.claim("late-worker", 60.0, job_id=job.job_id)
                self._record([claimed])
            async with conn.transaction():
                if action == "enqueue":
                    done = await queue.enqueue(job_type, {"hazard": "late"}, max_attempts=1)
                elif action == "complete" and job is not None:
                    done = await queue.complete(job.job_id, "late-worker", self._result(0.5))
                elif action == "fail" and job is not None:
                    done = await queue.fail(job.job_id, "late-worker", ORDINARY_ERRORS[0])
                else:
                    raise ValueError(f"unknown action {action!r}")
                if executed is not None:
                    executed.set()
                await asyncio.sleep(delay_s)
            assert done is not None
            self._record([done])
            return done

    async def burst(self, job_type: int) -> list[Transition]:
        """Drive one job through 4 failures (error, lease, deadline, lease) and a completion."""
        steps: list[Transition] = []
        async with self._connection() as conn:
            queue = self.queue(conn, backoff_base=0.0)
            job = await self._reserved_job(queue, job_type, max_attempts=5)
            steps.append(job)
            for step in ("fail", "die", "deadline", "die", "complete"):
                worker = f"burst-{step}"
                lease = 0.0 if step == "die" else 60.0
                # Backoff and lease are zero, so the next statement's now() is normally past
                # them already; retry the few times it is not.
                for _ in range(1000):
                    if claimed := await queue.claim(worker, lease, job_id=job.job_id):
                        break
                steps.append(_must(claimed))
                if step == "die":
                    for _ in range(1000):
                        if reaped := await queue.reap(job_id=job.job_id):
                            break
                    steps.append(_must(reaped[0] if reaped else None))
                elif step == "complete":
                    steps.append(
                        _must(await queue.complete(job.job_id, worker, self._result(0.01)))
                    )
                else:
                    error = DEADLINE_ERROR if step == "deadline" else ORDINARY_ERRORS[1]
                    steps.append(_must(await queue.fail(job.job_id, worker, error)))
        self._record(steps[1:])  # the enqueue was recorded by _reserved_job
        return steps


def _must(transition: Transition | None) -> Transition:
    """A transition the hazard helper owns cannot be refused; if it is, say so loudly."""
    if transition is None:
        raise RuntimeError("hazard transition refused: the job was taken by someone else")
    return transition
