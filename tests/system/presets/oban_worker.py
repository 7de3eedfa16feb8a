"""An Oban node that claims jobs and never finishes them: the workload SIGKILLs it mid-job.

Usage: python -m tests.system.presets.oban_worker DSN QUEUE DEMAND
"""

from __future__ import annotations

import asyncio
import sys
import uuid

from tests.system.presets.oban_client import ObanClient


async def main(dsn: str, queue: str, demand: int) -> None:
    """Claim up to ``demand`` jobs with fetch_jobs.sql, say so, then hang inside them."""
    async with ObanClient(dsn) as oban:
        jobs = await oban.fetch(queue, demand, "doomed-node", str(uuid.uuid4()))
        print(f"fetched {len(jobs)}", flush=True)
        await asyncio.Event().wait()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2], int(sys.argv[3])))
