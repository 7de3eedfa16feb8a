"""``python -m bench throughput --counting logical``: the change stream's cost, beside polling.

Each rate runs twice on fresh databases of one wal_level=logical cluster: polling with its
indexes (the ``updated_at`` index included), then the logical mode set up the way a DBA would,
from ``jobqueue-exporter logical-setup`` (REPLICA IDENTITY FULL, the publication, the role's
REPLICATION), without the ``updated_at`` index it does not need. Besides throughput.py's
figures this measures WAL per job (``pg_current_wal_lsn()`` around the load) and the CPU of
the walsender that decodes the slot for the exporter (``/proc/<pid>/stat`` of the
pg_stat_activity row whose backend_type is walsender); the exporter's CPU is divided by the
rows changed (four per job: insert, claim, renew, complete).
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import asyncpg

from bench.processes import ROOT
from exporter.demo.cluster import Cluster

CHANGES_PER_JOB = 4  # the script's insert, claim, renew and complete
UPDATED_AT_INDEX = "job_exporter_updated_at_idx"
WALSENDERS = "SELECT pid FROM pg_stat_activity WHERE backend_type = 'walsender'"


def prepare_cluster(cluster: Cluster) -> None:
    """wal_level = logical (a restart), a bounded slot, replication connections from 127.0.0.1."""
    cluster.psql("ALTER SYSTEM SET wal_level = logical")
    cluster.psql("ALTER SYSTEM SET max_slot_wal_keep_size = '4GB'")
    with (cluster.data_dir / "pg_hba.conf").open("a") as hba:
        hba.write("host replication all 127.0.0.1/32 trust\n")
    cluster.restart()


def exporter_args(counting: str) -> list[str]:
    """The exporter's extra arguments for a mode."""
    return [f"--collect.counting={counting}"] if counting == "logical" else []


def setup_logical(cluster: Cluster, name: str, exporter_dsn: str) -> None:
    """Apply what ``logical-setup`` prints for the queue, and drop the index it does not need."""
    args = [sys.executable, "-m", "exporter", "logical-setup", "--collect.counting=logical",
            f"--database.dsn={exporter_dsn}"]  # fmt: skip
    script = subprocess.run(args, cwd=ROOT, check=True, capture_output=True, text=True).stdout
    for line in script.splitlines():
        if line and not line.startswith("--"):
            cluster.psql(line, dbname=name)
    cluster.psql(f"DROP INDEX IF EXISTS {UPDATED_AT_INDEX}", dbname=name)


async def wal_lsn(dsn: str) -> int:
    """The server's WAL position, in bytes."""
    conn = await asyncpg.connect(dsn)
    try:
        return int(await conn.fetchval("SELECT pg_current_wal_lsn() - '0/0'"))
    finally:
        await conn.close()


async def walsender_cpu(dsn: str) -> float:
    """CPU seconds of the walsenders now (0 with none: the polling run)."""
    conn = await asyncpg.connect(dsn)
    try:
        pids = [int(r["pid"]) for r in await conn.fetch(WALSENDERS)]
    finally:
        await conn.close()
    return sum(_cpu(pid) for pid in pids)


def _cpu(pid: int) -> float:
    """User + system CPU seconds of a process (0 once it is gone)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def wait_streaming(dsn: str, within: float = 60.0) -> None:
    """Until the exporter's slot exists and is read (its first cycles create it)."""
    conn = await asyncpg.connect(dsn)
    try:
        for _ in range(int(within * 4)):
            if await conn.fetchval(
                "SELECT count(*) FROM pg_replication_slots "
                "WHERE database = current_database() AND active"
            ):
                return
            await asyncio.sleep(0.25)
    finally:
        await conn.close()
    raise RuntimeError("the exporter's replication slot never became active")


async def drop_slots(dsn: str) -> None:
    """Drop the database's inactive slots, so a finished run keeps no WAL."""
    conn = await asyncpg.connect(dsn)
    try:
        await conn.execute(
            "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots "
            "WHERE database = current_database() AND NOT active"
        )
    finally:
        await conn.close()


def costs(result: dict[str, Any], cpu: float, wal: int, walsender: float, wall: float) -> None:
    """Add the per-change and per-job figures to one run's result."""
    jobs = max(1, int(result["jobs"]))
    changes = CHANGES_PER_JOB * jobs
    result.update(
        exporter_us_per_change=1e6 * cpu / changes,
        walsender_cpu_pct=100.0 * walsender / wall,
        walsender_us_per_change=1e6 * walsender / changes,
        wal_bytes_per_job=wal / jobs,
    )


def render(results: list[dict[str, Any]]) -> str:
    """A Markdown table of each mode's cost, side by side per rate."""
    lines = [
        "| jobs/s (target) | counting | jobs/s | exporter CPU | exporter µs / job | "
        "walsender µs / job | WAL / job | RSS | scrape median / max | counters |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for r in results:
        exact = "exact" if r["exact"] else "**off**"
        settled = f", {r['settled_s']:.0f} s after the load" if r.get("settled_s") else ""
        lines.append(
            f"| {r['target_rate'] or 'max'} | {r['counting']} | {r['jobs_per_s']:,.0f} | "
            f"{r['cpu_pct']:.1f} % | {CHANGES_PER_JOB * r['exporter_us_per_change']:,.0f} | "
            f"{CHANGES_PER_JOB * r['walsender_us_per_change']:,.0f} | "
            f"{r['wal_bytes_per_job']:,.0f} B | {r['rss_max_mib']:.0f} MiB | "
            f"{(r['median_scrape_s'] or 0) * 1000:.1f} / {(r['max_scrape_s'] or 0) * 1000:.1f} ms | "
            f"{exact} ({r['completed'][0]:,.0f} = {r['completed'][1]:,}{settled}) |"
        )
    return "\n".join(lines)
