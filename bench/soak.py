"""``python -m bench.soak --minutes 30``: exporter + fleet + a scrape every second, footprint over time.

Prints one line per ``--every`` seconds (RSS, open file descriptors, database connections the
exporter holds) and a verdict on the RSS target at the end: at most 60 MB and flat (the last
quarter's median within 10 % of the first quarter's).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from pathlib import Path
from typing import Any

import aiohttp

from bench import processes, stats
from bench.data import Shape, build_table
from exporter.demo.cluster import Cluster

RSS_LIMIT = 60 * 1024 * 1024
FLAT_TOLERANCE = 0.10


async def soak(dsn: str, minutes: float, every: float, rate: float) -> dict[str, Any]:
    """Run the exporter and the fleet for ``minutes``, scraping once a second."""
    fleet = processes.start_fleet(dsn, rate)
    exporter, port = processes.start_exporter(dsn, interval="15s")
    url = f"http://127.0.0.1:{port}/metrics"
    samples: list[dict[str, float]] = []
    failures = 0
    try:
        await processes.wait_ready(port, exporter)
        began = time.monotonic()
        next_report = began + every
        cpu0, last = exporter.cpu_seconds(), began
        async with aiohttp.ClientSession() as session:
            while (now := time.monotonic()) - began < minutes * 60:
                try:
                    async with session.get(url) as resp:
                        await resp.read()
                        failures += resp.status != 200
                except aiohttp.ClientError:
                    failures += 1
                if now >= next_report:
                    sample = {
                        "t": now - began,
                        "rss": exporter.rss_bytes(),
                        "fds": exporter.open_fds(),
                        "db_connections": await processes.exporter_connections(dsn),
                        # CPU since the previous line, so a spike shows where it happened.
                        "cpu_percent": (exporter.cpu_seconds() - cpu0)
                        / max(now - last, 1e-9)
                        * 100,
                    }
                    cpu0, last = exporter.cpu_seconds(), now
                    samples.append(sample)
                    print(
                        f"{sample['t']:7.0f} s  RSS {sample['rss'] / 2**20:6.1f} MiB  "
                        f"fds {sample['fds']:4.0f}  db connections {sample['db_connections']:.0f}  "
                        f"cpu {sample['cpu_percent']:5.1f} %",
                        flush=True,
                    )
                    next_report += every
                await asyncio.sleep(max(0.0, 1.0 - (time.monotonic() - now)))
    finally:
        exporter.stop()
        fleet.stop()
    return verdict(samples, failures)


def verdict(samples: list[dict[str, float]], failures: int) -> dict[str, Any]:
    """Max RSS, growth from the first quarter to the last, and whether the target holds."""
    rss = [s["rss"] for s in samples]
    quarter = max(1, len(rss) // 4)
    first, last = stats.median(rss[:quarter]), stats.median(rss[-quarter:])
    growth = (last / first - 1) if first else 0.0
    return {
        "samples": samples,
        "scrape_failures": failures,
        "rss_max_bytes": max(rss, default=0),
        "rss_growth": growth,
        "fds_max": max((s["fds"] for s in samples), default=0),
        "db_connections_max": max((s["db_connections"] for s in samples), default=0),
        "rss_ok": bool(rss) and max(rss) <= RSS_LIMIT and growth <= FLAT_TOLERANCE,
    }


async def main_async(args: argparse.Namespace) -> dict[str, Any]:
    """Use the given database, or build a small one in a throwaway cluster."""
    if args.dsn:
        return await soak(args.dsn, args.minutes, args.every, args.rate)
    with Cluster() as cluster:
        cluster.create_database("soak")
        dsn = cluster.dsn("soak")
        await build_table(dsn, Shape(args.rows))
        return await soak(dsn, args.minutes, args.every, args.rate)


def main(argv: list[str] | None = None) -> int:
    """Run the soak; exit 1 when the RSS target is missed."""
    parser = argparse.ArgumentParser(prog="python -m bench.soak", description=__doc__)
    parser.add_argument("--minutes", type=float, default=30.0)
    parser.add_argument("--every", type=float, default=10.0, help="seconds between report lines")
    parser.add_argument("--rate", type=float, default=20.0, help="fleet jobs per second")
    parser.add_argument("--rows", type=int, default=100_000, help="table size when building one")
    parser.add_argument("--dsn", help="watch this database instead of a throwaway one")
    parser.add_argument("--out", help="write the samples and verdict as JSON here")
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    if args.minutes <= 2 and args.every == 10.0:
        args.every = 5.0
    result = asyncio.run(main_async(args))
    print(
        f"RSS max {result['rss_max_bytes'] / 2**20:.1f} MiB, growth {result['rss_growth'] * 100:+.1f} %"
        f" (first → last quarter), fds max {result['fds_max']:.0f}, db connections max "
        f"{result['db_connections_max']:.0f}, scrape failures {result['scrape_failures']}: "
        + ("target met" if result["rss_ok"] else "TARGET MISSED (≤ 60 MB and flat)")
    )
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=2))
    return 0 if result["rss_ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
