"""The procrastinate app of the ground-truth workload; ``python -m`` it to run a worker.

Usage: PRESET_PROCRASTINATE_DSN=... python -m tests.system.presets.procrastinate_tasks worker
The procrastinate CLI finds the same app as tests.system.presets.procrastinate_tasks.app.
"""

from __future__ import annotations

import asyncio
import os
import sys

import procrastinate

WORK_QUEUE = "work"
PARKED_QUEUE = "parked"  # no worker listens here: these jobs stay pending for the gauges
# Short beats so a killed worker's jobs look stalled within seconds, not 30.
HEARTBEAT_INTERVAL = 0.5
STALLED_AFTER = 2.0

DSN_VARIABLE = "PRESET_PROCRASTINATE_DSN"
# Subprocesses (worker, CLI) read the DSN from the environment; the test process swaps the
# connector per database with app.replace_connector().
app = procrastinate.App(
    connector=procrastinate.PsycopgConnector(conninfo=os.environ.get(DSN_VARIABLE, ""))
)


@app.task(name="ok", queue=WORK_QUEUE)
async def ok(n: int) -> int:
    """Succeeds at once."""
    return n


@app.task(name="flaky", queue=WORK_QUEUE, retry=2, pass_context=True)
async def flaky(context: procrastinate.JobContext, n: int) -> int:
    """Fails its first attempt, succeeds on the retry."""
    assert context.job is not None
    if context.job.attempts == 0:
        raise RuntimeError(f"flaky {n}: first attempt fails")
    return n


@app.task(name="bad", queue=WORK_QUEUE, retry=1)
async def bad(n: int) -> int:
    """Fails every attempt: one retry, then dead."""
    raise ValueError(f"bad {n}")


@app.task(name="slow", queue=WORK_QUEUE, pass_context=True)
async def slow(context: procrastinate.JobContext, n: int) -> int:
    """Runs long on its first attempt (its worker gets SIGKILLed), quickly once retried."""
    assert context.job is not None
    if context.job.attempts == 0:
        await asyncio.sleep(600)
    return n


@app.task(name="later", queue=WORK_QUEUE)
async def later(n: int) -> int:
    """Deferred with schedule_in: waits before it becomes ready."""
    return n


@app.task(name="parked", queue=PARKED_QUEUE)
async def parked(n: int) -> int:
    """Never runs in the workload (nobody listens to its queue)."""
    return n


def main(argv: list[str]) -> None:
    """Run one worker on the work queue until a signal stops it."""
    if len(argv) != 2 or argv[1] != "worker":
        sys.exit(__doc__)
    with app.open():
        app.run_worker(
            queues=[WORK_QUEUE],
            concurrency=4,
            update_heartbeat_interval=HEARTBEAT_INTERVAL,
            stalled_worker_timeout=STALLED_AFTER,
            fetch_job_polling_interval=0.2,
        )


if __name__ == "__main__":
    main(sys.argv)
