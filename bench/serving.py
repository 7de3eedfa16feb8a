"""/metrics under load: latency and size from concurrent scrapers (ours or wrk), and a scrape's text."""

from __future__ import annotations

import asyncio
import random
import shutil
import subprocess
import time
from typing import Any

import aiohttp

from bench.stats import percentile


async def serving(
    url: str,
    clients: int,
    seconds: float,
    period: float | None = None,
    encoding: str = "identity",
) -> dict[str, Any]:
    """Latency of /metrics under ``clients`` concurrent scrapers for ``seconds``.

    Without ``period`` each scraper asks again as soon as it has its answer (closed loop: the
    server's saturation, where latency is clients / throughput); with it, each scrapes once
    per ``period`` seconds at a random phase, as that many Prometheus servers would. Each asks
    for ``encoding`` (Prometheus sends ``gzip``); bodies are timed and sized as sent, not
    decompressed, since Prometheus decompresses on its own side.
    """
    latencies: list[float] = []
    sizes: list[int] = []
    errors = 0
    deadline = time.monotonic() + seconds
    connector = aiohttp.TCPConnector(limit=clients)
    async with aiohttp.ClientSession(
        connector=connector, headers={"Accept-Encoding": encoding}, auto_decompress=False
    ) as session:

        async def scraper() -> None:
            nonlocal errors
            if period is not None:
                await asyncio.sleep(random.uniform(0, period))
            while time.monotonic() < deadline:
                began = time.perf_counter()
                async with session.get(url) as resp:
                    body = await resp.read()
                    if resp.status != 200:
                        errors += 1
                latencies.append((time.perf_counter() - began) * 1000)
                sizes.append(len(body))
                if period is not None:
                    await asyncio.sleep(max(0.0, period - (time.perf_counter() - began)))

        began = time.perf_counter()
        await asyncio.gather(*(scraper() for _ in range(clients)))
        elapsed = time.perf_counter() - began
    return {
        "clients": clients,
        "seconds": seconds,
        "period": period,
        "encoding": encoding,
        "requests": len(latencies),
        "requests_per_s": len(latencies) / elapsed,
        "p50_ms": percentile(latencies, 50),
        "p99_ms": percentile(latencies, 99),
        "max_ms": max(latencies, default=0.0),
        "errors": errors,
        "body_bytes": max(sizes, default=0),
    }


async def scrape_text(url: str) -> str:
    """One /metrics body."""
    async with aiohttp.ClientSession() as session, session.get(url) as resp:
        return await resp.text()


def query_durations_from_metrics(text: str) -> dict[str, float]:
    """jobqueue_exporter_query_duration_seconds per query from an exposition, in milliseconds."""
    found: dict[str, float] = {}
    for line in text.splitlines():
        if line.startswith("jobqueue_exporter_query_duration_seconds{"):
            labels, _, value = line.rpartition(" ")
            name = labels.split('query="', 1)[1].split('"', 1)[0]
            found[name] = float(value) * 1000
    return found


def _wrk_ms(text: str) -> float:
    """A wrk latency like 812.00us, 3.21ms or 1.02s, in milliseconds."""
    for suffix, scale in (("us", 0.001), ("ms", 1.0), ("s", 1000.0)):
        if text.endswith(suffix):
            return float(text[: -len(suffix)]) * scale
    return float(text)


def serving_wrk(url: str, clients: int, seconds: float) -> dict[str, Any] | None:
    """The same load from wrk (a C client, so the client's own cost stays out); None without wrk."""
    wrk = shutil.which("wrk")
    if wrk is None:
        return None
    done = subprocess.run(
        [wrk, "-t2", f"-c{clients}", f"-d{max(1, round(seconds))}s", "--latency", url],
        capture_output=True, text=True, check=False, timeout=seconds + 30,
    )  # fmt: skip
    if done.returncode != 0:
        return {"error": done.stderr.strip()[-300:]}
    found: dict[str, Any] = {"clients": clients, "seconds": seconds}
    for line in done.stdout.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[0] in ("50%", "90%", "99%"):
            found[f"p{parts[0][:-1]}_ms"] = _wrk_ms(parts[1])
        elif line.startswith("Requests/sec:"):
            found["requests_per_s"] = float(parts[1])
        elif "requests in" in line:
            found["requests"] = int(parts[0])
        elif line.strip().startswith("Non-2xx"):
            found["errors"] = int(parts[-1])
    return found
