"""SIGHUP to a real exporter process: the file is re-read, a bad one keeps the running settings."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import aiohttp
import pytest
import yaml

from exporter.demo.cluster import free_port
from tests.conftest import execute
from tests.helpers import Samples, parse, value

pytestmark = pytest.mark.daemon

ROOT = Path(__file__).resolve().parents[2]
OK = "jobqueue_exporter_config_last_reload_successful"


def write(path: Path, interval: str, job_types: dict[int, str]) -> None:
    collect = {"interval": interval, "job_types": job_types}
    path.write_text(yaml.safe_dump({"queue": {"name": "orders"}, "collect": collect}))


async def scrape(port: int) -> Samples:
    async with (
        aiohttp.ClientSession() as http,
        http.get(f"http://127.0.0.1:{port}/metrics") as r,
    ):
        assert r.status == 200
        return parse(await r.text())


async def scrape_until(
    port: int, process: subprocess.Popen[bytes], predicate: Callable[[Samples], bool]
) -> Samples:
    deadline = time.monotonic() + 30
    while True:
        assert process.poll() is None, "the exporter exited"
        try:
            samples = await scrape(port)
            if predicate(samples):
                return samples
        except aiohttp.ClientError:
            pass
        assert time.monotonic() < deadline, "/metrics never reached the expected state"
        await asyncio.sleep(0.1)


def enqueued(samples: Samples, job_type: str) -> float | None:
    return samples.get(
        ("jobqueue_jobs_enqueued_total", (("job_type", job_type), ("queue", "orders")))
    )


async def test_sighup_reloads_the_file_and_a_bad_file_keeps_the_running_settings(
    db_dsn: str, tmp_path: Path
) -> None:
    config = tmp_path / "config.yml"
    write(config, "200ms", {3: "email"})
    port = free_port()
    environ = {**os.environ, "JOBQUEUE_EXPORTER_DSN": db_dsn}
    err = tmp_path / "stderr"
    with err.open("wb") as stderr:
        process = subprocess.Popen(  # noqa: ASYNC220 (started once; nothing else runs yet)
            [
                sys.executable, "-m", "exporter", f"--config.file={config}",
                f"--web.listen-address=127.0.0.1:{port}", "--log.format=json",
                "--collect.timeout=3s", "--collect.statement-timeout=2s",
            ],
            cwd=ROOT, env=environ, stdout=subprocess.DEVNULL, stderr=stderr,
        )  # fmt: skip
    try:
        await scrape_until(port, process, lambda s: value(s, "jobqueue_up", queue="orders") == 1)
        await execute(db_dsn, "INSERT INTO job (job_type) VALUES (3), (3)")
        before = await scrape_until(port, process, lambda s: enqueued(s, "email") == 2)
        loaded_at = value(before, "jobqueue_exporter_config_last_reload_success_timestamp_seconds")

        write(config, "300ms", {3: "mail"})
        process.send_signal(signal.SIGHUP)
        after = await scrape_until(port, process, lambda s: enqueued(s, "mail") is not None)
        assert enqueued(after, "mail") == 2  # the counter moved to the new name, not reset
        assert enqueued(after, "email") is None
        assert value(after, OK) == 1
        assert value(after, "jobqueue_exporter_config_last_reload_success_timestamp_seconds") > (
            loaded_at
        )

        config.write_text("collect:\n  interval: 5s\n  interval: 6s\n")  # a duplicate key
        process.send_signal(signal.SIGHUP)
        failed = await scrape_until(port, process, lambda s: value(s, OK) == 0)
        assert enqueued(failed, "mail") == 2  # the running settings stay
        await execute(db_dsn, "INSERT INTO job (job_type) VALUES (3)")
        await scrape_until(port, process, lambda s: enqueued(s, "mail") == 3)  # and keep counting
    finally:
        process.send_signal(signal.SIGTERM)
        code = await asyncio.to_thread(process.wait, 30)
    lines = [json.loads(line) for line in err.read_text().splitlines()]
    assert code == 0, lines[-5:]
    reloads = [line for line in lines if line["msg"].startswith("configuration reload")]
    assert [line["level"] for line in reloads] == ["INFO", "ERROR"]
    assert "config.yml:3:3: duplicate key 'interval' (first at line 2)" in reloads[1]["err"]
    # Every line written while collecting names its queue.
    assert all(
        line.get("queue") == "orders" for line in lines if line["source"].startswith("poller.py")
    )
