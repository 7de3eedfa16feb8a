"""``jobqueue-exporter demo`` as a process: what it prints leads to its page, metrics and database."""

from __future__ import annotations

import asyncio
import os
import re
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from urllib.parse import urlsplit

import asyncpg
import pytest

from tests.pages import RenderedPage

BANNER = re.compile(
    r"status page (?P<page>\S+)\n\s+metrics\s+(?P<metrics>\S+)\n\s+database\s+(?P<dsn>\S+)"
)


def fetch_text(url: str) -> str:
    """The body of a GET."""
    with urllib.request.urlopen(url, timeout=10) as response:
        return str(response.read().decode())


def banner_of(process: subprocess.Popen[str], limit: float = 90.0) -> re.Match[str]:
    """Read the demo's stdout until its banner is complete."""
    assert process.stdout is not None
    seen = ""
    deadline = time.monotonic() + limit
    while (found := BANNER.search(seen)) is None:
        line = process.stdout.readline()
        if not line and process.poll() is not None:
            pytest.fail(f"the demo exited {process.returncode} before its banner:\n{seen}")
        assert time.monotonic() < deadline, f"no banner after {limit} s:\n{seen}"
        seen += line
    return found


async def jobs_in(dsn: str) -> int:
    """How many jobs the demo's database holds, once the fleet has enqueued some."""
    conn = await asyncpg.connect(dsn, timeout=10)
    try:
        deadline = time.monotonic() + 30
        while not (count := await conn.fetchval("SELECT count(*) FROM job")):
            assert time.monotonic() < deadline, "the fleet enqueued nothing"
            await asyncio.sleep(0.2)
        return int(count)
    finally:
        await conn.close()


@pytest.mark.daemon
@pytest.mark.cluster
def test_the_demo_prints_its_status_page_metrics_and_database_and_each_answers(
    tmp_path: Path,
) -> None:
    log = (tmp_path / "demo.log").open("w")
    process = subprocess.Popen(
        [sys.executable, "-m", "exporter", "demo", "--web.listen-address=127.0.0.1:0"],
        stdout=subprocess.PIPE, stderr=log, text=True, start_new_session=True,
    )  # fmt: skip
    try:
        found = banner_of(process)
        page, metrics, dsn = found["page"], found["metrics"], found["dsn"]
        assert urlsplit(page).path == "/"
        assert urlsplit(dsn).password is None, "the demo's database needs no password"
        assert set(RenderedPage(fetch_text(page)).rows) == {"jobqueue"}
        assert 'jobqueue_up{queue="jobqueue"}' in fetch_text(metrics)
        # The database the exporter reads: the fleet's jobs are in it.
        assert asyncio.run(jobs_in(dsn)) > 0
    finally:
        os.killpg(process.pid, signal.SIGINT)
        code = process.wait(60)
        assert process.stdout is not None
        process.stdout.close()
        log.close()
    assert code == 0, (tmp_path / "demo.log").read_text()[-2000:]
    with pytest.raises(ConnectionRefusedError):  # Ctrl-C removed the database with its cluster
        asyncio.run(asyncpg.connect(dsn, timeout=5))
