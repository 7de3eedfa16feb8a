"""The pgqueuer worker of the ground-truth workload.

Usage: python -m tests.system.presets.pgqueuer_worker DSN MARKER_DIR
"""

from __future__ import annotations

import asyncio
import signal
import sys
from datetime import timedelta
from pathlib import Path

import asyncpg
from pgqueuer import AsyncpgDriver, DatabaseRetryEntrypointExecutor, Job, PgQueuer
from pgqueuer.executors import EntrypointExecutorParameters

# Short so a killed worker's job is re-picked within seconds (pgqueuer's default is 30 s).
HEARTBEAT_TIMEOUT = 2.0
PARKED = "parked"  # never registered here: those jobs stay queued for the gauges


def retrying(max_attempts: int) -> object:
    """pgqueuer's database-level retry executor with short delays."""

    def factory(params: EntrypointExecutorParameters) -> DatabaseRetryEntrypointExecutor:
        return DatabaseRetryEntrypointExecutor(
            parameters=params,
            max_attempts=max_attempts,
            initial_delay=timedelta(milliseconds=200),
            max_delay=timedelta(seconds=1),
        )

    return factory


async def main(dsn: str, marker_dir: Path) -> None:
    """Register the workload's entrypoints and run until SIGTERM."""
    conn = await asyncpg.connect(dsn)
    pgq = PgQueuer(AsyncpgDriver(conn))

    @pgq.entrypoint("ok")
    async def ok(job: Job) -> None:
        await asyncio.sleep(0.02)

    @pgq.entrypoint("flaky", executor_factory=retrying(3))  # type: ignore[arg-type]
    async def flaky(job: Job) -> None:
        if job.attempts == 0:
            raise RuntimeError("flaky: first attempt fails")

    @pgq.entrypoint("bad", executor_factory=retrying(2))  # type: ignore[arg-type]
    async def bad(job: Job) -> None:
        raise ValueError("bad: always fails")

    @pgq.entrypoint("held", on_failure="hold")
    async def held(job: Job) -> None:
        raise KeyError("held: fails once, kept for a human")

    @pgq.entrypoint("slow")
    async def slow(job: Job) -> None:
        # The first run is SIGKILLed mid-job; the re-pick (same attempts) finds the marker.
        marker = marker_dir / f"slow-{job.id}"
        if not marker.exists():
            marker.touch()
            await asyncio.sleep(600)

    @pgq.entrypoint("later")
    async def later(job: Job) -> None:
        return None

    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, pgq.shutdown.set)
    await pgq.run(
        dequeue_timeout=timedelta(seconds=0.5),
        batch_size=5,
        heartbeat_timeout=timedelta(seconds=HEARTBEAT_TIMEOUT),
        log_aggregation_interval=timedelta(seconds=1),
    )


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    asyncio.run(main(sys.argv[1], Path(sys.argv[2])))
