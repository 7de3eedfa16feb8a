"""The status page in a real browser: Debian's headless Chromium renders it, two queues, one down.

Chromium is a test dependency like promtool: ``scripts/dev`` installs Debian's package as root,
and this test fails (never skips) without it. ``STATUS_PNG=docs/status.png pytest
tests/system/test_status_page.py`` also writes the screenshot the README shows.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import struct
import urllib.request
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

import asyncpg
import numpy as np
import pytest
from matplotlib import image

from exporter.demo.queue import JobQueue
from exporter.service import Service
from exporter.settings import Settings, WebSettings
from tests.helpers import fast_queue
from tests.pages import RenderedPage

pytestmark = pytest.mark.browser

CHROMIUM = "chromium"
WIDTH, HEIGHT = 1360, 420
# Nothing listens on port 1: the second queue is down from the start.
DOWN_DSN = "postgresql://watcher@127.0.0.1:1/billing"


async def chromium(url: str, profile: Path, *args: str) -> bytes:
    """Run headless Chromium once on ``url``; its stdout."""
    binary = shutil.which(CHROMIUM)
    if binary is None:
        pytest.fail("chromium is missing: apt-get install chromium (scripts/dev test installs it)")
    process = await asyncio.create_subprocess_exec(
        binary, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
        "--disable-component-update", "--disable-sync", "--no-first-run", "--hide-scrollbars",
        "--force-device-scale-factor=1", f"--user-data-dir={profile}", *args, url,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    out, err = await asyncio.wait_for(process.communicate(), 120)
    assert process.returncode == 0, err.decode(errors="replace")[-2000:]
    return out


async def fill(dsn: str) -> None:
    """A queue with work in every state, so the screenshot shows numbers, not zeros."""
    conn = await asyncpg.connect(dsn)
    try:
        queue = JobQueue(conn, backoff_base=3600)
        for n in range(40):
            await queue.enqueue(1 + n % 3, {"n": n}, max_attempts=1)
        for n in range(6):
            job = await queue.claim(f"worker-{n}", 300)
            assert job is not None
            if n < 2:
                await queue.fail(job.job_id, f"worker-{n}", "ValueError: bad payload")
    finally:
        await conn.close()


def fetch_text(url: str) -> str:
    """The body of a GET."""
    with urllib.request.urlopen(url, timeout=10) as response:
        return str(response.read().decode())


def png_size(data: bytes) -> tuple[int, int]:
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    assert data[12:16] == b"IHDR"
    width, height = struct.unpack(">II", data[16:24])
    return width, height


def pixels_of(picture: np.ndarray, rgb: Sequence[int]) -> int:
    """How many pixels have this colour (the badges' backgrounds)."""
    wanted = np.array(rgb, dtype=float) / 255
    return int(np.all(np.abs(picture[:, :, :3] - wanted) < 2 / 255, axis=2).sum())


async def test_chromium_renders_every_queue_with_its_state_and_the_page_looks_right(
    db_dsn: str, tmp_path: Path
) -> None:
    await fill(db_dsn)
    down = fast_queue(DOWN_DSN, name="billing")
    down = replace(down, database=replace(down.database, connect_timeout=1.0))
    settings = Settings(
        queues=(fast_queue(db_dsn, name="orders", job_types={1: "email", 2: "scrape"}), down),
        web=WebSettings(listen_address=("127.0.0.1:0",)),
    )
    service = Service(settings)
    await service.start()
    try:
        await service.queue("orders").poller.wait_for_success()
        await service.queue("billing").poller.wait_for_collections(1)
        url = f"http://127.0.0.1:{service.port}/"
        metrics = await asyncio.to_thread(fetch_text, f"{url}metrics")
        dom = await chromium(url, tmp_path / "profile", "--dump-dom")
        shot = tmp_path / "status.png"
        await chromium(
            url, tmp_path / "profile", f"--screenshot={shot}", f"--window-size={WIDTH},{HEIGHT}"
        )
    finally:
        await service.stop()

    rows = RenderedPage(dom.decode()).rows
    assert set(rows) == {"orders", "billing"}
    assert rows["orders"][:4] == ["orders", "job · profile default", "up", "leader"]
    assert rows["billing"][:3] == ["billing", "job · profile default", "down"]
    assert any("connection" in cell for cell in rows["billing"])  # why it is down
    # The badge says what /metrics says: billing's database was never reached, so no lock.
    assert 'jobqueue_exporter_leader{queue="orders"} 1.0' in metrics
    assert 'jobqueue_exporter_leader{queue="billing"} 0.0' in metrics
    assert RenderedPage(dom.decode()).cells["billing"]["role"] == "not leader"
    orders = RenderedPage(dom.decode()).cells["orders"]
    assert (orders["pending"], orders["running"], orders["dead"]) == ("34", "4", "2"), orders

    data = shot.read_bytes()
    assert png_size(data) == (WIDTH, HEIGHT)
    assert len(data) > 20_000  # a blank or error page compresses to a few kilobytes
    picture = image.imread(str(shot))
    assert pixels_of(picture, (0xD7, 0xF5, 0xDD)) > 100  # the green "up" badge
    assert pixels_of(picture, (0xFD, 0xE0, 0xDF)) > 100  # the red "down" badge
    if os.environ.get("STATUS_PNG"):
        shutil.copyfile(shot, os.environ["STATUS_PNG"])
