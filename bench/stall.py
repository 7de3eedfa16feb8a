"""``python -m bench.stall``: the counters during a long read-only transaction (issue 21).

A ``pg_dump``, a forgotten ``BEGIN`` or a slow report holds the horizon back for as long as it
runs. This starts the exporter beside the throughput benchmark's pgbench load, opens such a
transaction (``REPEATABLE READ READ ONLY``, one read, then idle) after a warm-up, holds it for
``--hold`` seconds and commits. Sampling /metrics every second it records how far the exported
enqueued and completed counters trail the truth, the tracker's held jobs, RSS and each
collection's duration; at the end it checks the counters equal the table.

How far a counter trails, at a sample: the exporter has counted ``v`` completions since the
start; the truth is every DONE row's ``updated_at`` (DONE is final in this load). If ``v`` is
short of the truth at the sample's time, the trail is the age of the oldest completion not yet
counted. Without any stall it is about one interval plus a collection (a completion waits for
the next cycle); the issue asks for at most three intervals throughout.
"""

from __future__ import annotations

import argparse
import asyncio
import bisect
import contextlib
import itertools
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import aiohttp
import asyncpg

from bench.processes import ROOT, wait_ready
from bench.throughput import (
    _seconds,
    counts,
    loaded_database,
    pgbench,
    scrape,
    start_exporter,
    total,
)
from exporter.demo.cluster import Cluster

COMPLETED, ENQUEUED = "jobqueue_jobs_completed_total", "jobqueue_jobs_enqueued_total"


async def truth_times(dsn: str, since: float, column: str, where: str) -> list[float]:
    """Sorted Unix times of the rows' ``column`` after ``since``: when each event happened."""
    conn = await asyncpg.connect(dsn)
    try:
        rows = await conn.fetch(
            f"SELECT extract(epoch FROM {column})::float8 AS t FROM job "
            f"WHERE {where} AND {column} > to_timestamp($1) ORDER BY 1",
            since,
        )
        return [float(r["t"]) for r in rows]
    finally:
        await conn.close()


def trail(times: list[float], at: float, counted: float) -> float:
    """Seconds the oldest event not yet counted at ``at`` had waited (0 when none)."""
    happened = bisect.bisect_right(times, at)
    n = int(counted)
    if n >= happened:
        return 0.0
    return at - times[n]


async def hold(dsn: str, opened: asyncio.Event, release: asyncio.Event) -> None:
    """A session idle inside a read-only snapshot until ``release``, like pg_dump."""
    conn = await asyncpg.connect(dsn)
    try:
        await conn.execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
        await conn.fetchval("SELECT count(*) FROM (SELECT 1 FROM job LIMIT 1) s")
        opened.set()
        await release.wait()
        await conn.execute("COMMIT")
    finally:
        await conn.close()


async def run(args: argparse.Namespace) -> dict[str, Any]:
    cluster = Cluster()
    cluster.start()
    exporter = None
    try:
        _, dsn = await loaded_database(cluster, "stall", args.rows)
        exporter, port = start_exporter(dsn, args.interval, ROOT)
        await wait_ready(port, exporter)
        session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10))
        before = await scrape(session, port)
        rows0, done0 = await counts(dsn)
        t0 = time.time()
        seconds = args.warmup + args.hold + args.after
        bench = pgbench(dsn, args.rate, seconds, 4)
        # pgbench's output is read as it comes: a full pipe would stop its clients.
        drained = asyncio.create_task(asyncio.to_thread(bench.communicate))
        opened, release = asyncio.Event(), asyncio.Event()
        samples: list[dict[str, float]] = []
        holder: asyncio.Task[None] | None = None
        held_from = held_to = 0.0
        seen = -1.0
        while not drained.done():
            now = time.time()
            if holder is None and now - t0 >= args.warmup:
                holder = asyncio.create_task(hold(dsn, opened, release))
                await opened.wait()
                held_from = time.time()
                print(f"bench stall: holding a read-only transaction for {args.hold:.0f} s",
                      file=sys.stderr, flush=True)  # fmt: skip
            if holder is not None and not release.is_set() and now - held_from >= args.hold:
                release.set()
                await holder
                held_to = time.time()
            with contextlib.suppress(aiohttp.ClientError, TimeoutError):
                m = await scrape(session, port)
                done = total(m, "jobqueue_exporter_collections_total")
                samples.append({
                    "t": time.time(),
                    "completed": total(m, COMPLETED) - total(before, COMPLETED),
                    "enqueued": total(m, ENQUEUED) - total(before, ENQUEUED),
                    "held": total(m, "jobqueue_exporter_held_jobs"),
                    "rss": exporter.rss_bytes(),
                    "new_cycle": float(done != seen and seen >= 0),
                    "duration": total(m, "jobqueue_exporter_collection_duration_seconds"),
                    "rows_read": total(m, "jobqueue_exporter_rows_read_total"),
                })  # fmt: skip
                seen = done
            await asyncio.sleep(1.0)
        out, _ = await drained
        if bench.returncode != 0 or "aborted" in out:
            print(out[-3000:], file=sys.stderr)
        rows1, done1 = await counts(dsn)
        for _ in range(600):  # let the exporter read what is left
            m = await scrape(session, port)
            counted = total(m, COMPLETED) - total(before, COMPLETED)
            if counted >= done1 - done0:
                break
            print(f"bench stall: {counted:.0f} of {done1 - done0} completions counted",
                  file=sys.stderr, flush=True)  # fmt: skip
            await asyncio.sleep(1.0)
        await asyncio.sleep(2 * _seconds(args.interval))
        after = await scrape(session, port)
        await session.close()
        completed_at = await truth_times(dsn, t0, "updated_at", "status = 3")
        enqueued_at = await truth_times(dsn, t0, "created_at", "true")
        return summarise(args, samples, held_from, held_to, completed_at, enqueued_at, {
            "enqueued": (total(after, ENQUEUED) - total(before, ENQUEUED), rows1 - rows0),
            "completed": (total(after, COMPLETED) - total(before, COMPLETED), done1 - done0),
        })  # fmt: skip
    finally:
        if exporter is not None:
            exporter.stop()
        cluster.destroy()


def summarise(
    args: argparse.Namespace,
    samples: list[dict[str, float]],
    held_from: float,
    held_to: float,
    completed_at: list[float],
    enqueued_at: list[float],
    final: dict[str, tuple[float, int]],
) -> dict[str, Any]:
    """The figures: trails, held jobs, RSS and collection cost during the hold; exactness."""
    during = [s for s in samples if held_from <= s["t"] <= held_to]
    cycles = [s for s in during if s["new_cycle"]]
    reads = [b["rows_read"] - a["rows_read"] for a, b in itertools.pairwise(cycles)]
    interval = _seconds(args.interval)
    trail_c = max((trail(completed_at, s["t"], s["completed"]) for s in samples), default=0.0)
    trail_e = max((trail(enqueued_at, s["t"], s["enqueued"]) for s in samples), default=0.0)
    return {
        "rate": args.rate,
        "hold_s": held_to - held_from,
        "interval_s": interval,
        "jobs_completed": final["completed"][1],
        "max_trail_completed_s": trail_c,
        "max_trail_enqueued_s": trail_e,
        "max_trail_intervals": max(trail_c, trail_e) / interval,
        "held_jobs_max": max((s["held"] for s in during), default=0.0),
        "rss_max_mib": max((s["rss"] for s in during), default=0) / 2**20,
        "rss_before_hold_mib": max((s["rss"] for s in samples if s["t"] < held_from), default=0)
        / 2**20,
        "collections_during_hold": len(cycles),
        "collection_median_s": statistics.median(c["duration"] for c in cycles) if cycles else None,
        "collection_max_s": max((c["duration"] for c in cycles), default=None),
        "rows_read_per_cycle_median": statistics.median(reads) if reads else None,
        "final": final,
        "exact": all(counted == truth for counted, truth in final.values()),
    }


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.stall", description=__doc__)
    parser.add_argument("--rate", type=float, default=200.0, help="jobs/s (pgbench -R)")
    parser.add_argument("--hold", type=float, default=1800.0, help="seconds the transaction holds")
    parser.add_argument("--warmup", type=float, default=60.0, help="load before the hold, seconds")
    parser.add_argument("--after", type=float, default=60.0, help="load after the hold, seconds")
    parser.add_argument("--interval", default="15s", help="the exporter's collect.interval")
    parser.add_argument("--rows", type=int, default=100_000, help="history rows in the table")
    parser.add_argument("--out", default="bench/out", help="directory for stall.json")
    args = parser.parse_args(argv)
    result = asyncio.run(run(args))
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "stall.json").write_text(json.dumps(result, indent=2))
    for key, value in result.items():
        print(f"{key}: {value:.3f}" if isinstance(value, float) else f"{key}: {value}")
    return 0 if result["exact"] and result["max_trail_intervals"] <= 3 else 1


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
