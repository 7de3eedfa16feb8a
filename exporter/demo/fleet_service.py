"""The simulated fleet as a service of its own, against an existing queue database: the compose
stack's ``fleet`` service, and the healthcheck that fits it.

    python -m exporter.demo.fleet_service --dsn postgresql://…       run until SIGTERM
    python -m exporter.demo.fleet_service --dsn postgresql://… --check

The fleet is not the exporter, so the image's HEALTHCHECK (the exporter's /healthz) cannot
speak for it. What the fleet is for is moving jobs, so ``--check`` asks the database whether a
job row changed within ``--within`` seconds, by the database's clock: exit 0 if so, 1 (and one
line saying why) if not, or if the database cannot be reached.
"""

from __future__ import annotations

import argparse
import asyncio
import signal

import asyncpg

from exporter.demo.fleet import DATABASE_ERRORS, Fleet, FleetConfig
from exporter.demo.tally import Tally
from exporter.redaction import redact

# A minute holds about 120 enqueues at the default rate: a quiet minute means a stopped fleet.
DEFAULT_WITHIN = 60.0
# Connect, then query, each capped: twice this stays below the compose healthcheck's timeout,
# so the check answers before compose gives up on it.
CHECK_TIMEOUT = 3.0

# The age of the newest change to a job row; NULL for an empty table.
_NEWEST_CHANGE_AGE = "SELECT extract(epoch FROM now() - max(updated_at))::float8 FROM job"


async def run_fleet(dsn: str, config: FleetConfig) -> None:
    """Drive the demo fleet against an existing queue database until SIGTERM or SIGINT."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    fleet = Fleet(dsn, config, Tally(detailed=False))
    await fleet.start()
    try:
        await stop.wait()
    finally:
        await fleet.stop()


async def check_progress(dsn: str, within: float) -> str | None:
    """None when a job row changed in the last ``within`` seconds; else why the fleet is idle."""
    try:
        conn = await asyncpg.connect(dsn, timeout=CHECK_TIMEOUT)
    except (*DATABASE_ERRORS, TimeoutError) as exc:
        return f"cannot reach the queue's database: {redact(str(exc)) or type(exc).__name__}"
    try:
        age = await conn.fetchval(_NEWEST_CHANGE_AGE, timeout=CHECK_TIMEOUT)
    except (*DATABASE_ERRORS, TimeoutError) as exc:
        return f"cannot read the job table: {redact(str(exc)) or type(exc).__name__}"
    finally:
        await conn.close()
    if age is None:
        return "the job table is empty: the fleet has not enqueued anything yet"
    if age > within:
        return f"no job has changed for {age:.0f} s (more than {within:g} s): the fleet is stuck"
    return None


def main(argv: list[str] | None = None) -> int:
    """Run the fleet, or with --check say whether it is moving jobs (exit 0) or not (1)."""
    parser = argparse.ArgumentParser(
        prog="python -m exporter.demo.fleet_service",
        description="Run the simulated worker fleet against an existing queue database "
        "(the compose stack's 'fleet' service).",
    )
    parser.add_argument("--dsn", required=True, help="postgresql:// URL of the queue's owner")
    parser.add_argument("--rate", type=float, default=FleetConfig.enqueue_rate, help="jobs/s")
    parser.add_argument(
        "--check", action="store_true",
        help="do not run: exit 0 if a job changed within --within seconds, else 1 (healthcheck)",
    )  # fmt: skip
    parser.add_argument(
        "--within", type=float, default=DEFAULT_WITHIN,
        help="seconds of database time --check allows without a change (default %(default)g)",
    )  # fmt: skip
    arguments = parser.parse_args(argv)
    if arguments.check:
        why = asyncio.run(check_progress(arguments.dsn, arguments.within))
        print(why or "ok: the fleet is moving jobs")
        return 0 if why is None else 1
    asyncio.run(run_fleet(arguments.dsn, FleetConfig(enqueue_rate=arguments.rate)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
