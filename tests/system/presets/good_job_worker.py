"""Two GoodJob processes in one Ruby process that each start a job and never finish it: the
workload SIGKILLs it mid-job. One process record only heartbeats (production's default), the
other holds its advisory lock (advisory_lock_heartbeat, development's).

Usage: python -m tests.system.presets.good_job_worker DSN QUEUE
Prints "started <job id> <job class> <process id> <advisory|heartbeat>" per job, then "ready".
"""

from __future__ import annotations

import asyncio
import sys

from tests.system.presets.good_job_client import Clock, GoodJobProcess, Log, Performer


async def main(dsn: str, queue: str) -> None:
    """Register both processes, start one job on each, say so, then hang inside them."""
    threads = []  # their connections hold the locks until the SIGKILL
    for advisory in (False, True):
        process = GoodJobProcess(dsn, Clock(), advisory)
        await process.start()
        thread = Performer(process, [queue], None, Log())
        threads.append(thread)
        await thread.open()
        row = await thread.claim()
        assert row is not None, "nothing to claim"
        await thread.start(row)
        kind = "advisory" if advisory else "heartbeat"
        print(f"started {row['id']} {row['job_class']} {process.id} {kind}", flush=True)
    print("ready", flush=True)
    await asyncio.Event().wait()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2]))
