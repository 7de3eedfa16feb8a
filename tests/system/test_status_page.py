"""The status page in a real browser: Debian's headless Chromium renders it, two queues, one down.

Chromium is a test dependency like promtool: ``scripts/dev`` installs Debian's package as root,
and this test fails (never skips) without it. ``STATUS_PNG=docs/status.png pytest
tests/system/test_status_page.py`` also writes the screenshot the README shows.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import struct
import urllib.request
from collections.abc import AsyncIterator, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import asyncpg
import numpy as np
import pytest
from matplotlib import image

from exporter.demo.queue import JobQueue
from exporter.service import Service
from exporter.settings import Settings, WebSettings
from tests.helpers import fast_queue
from tests.pages import RenderedPage, layout_of, with_layout_probe

pytestmark = pytest.mark.browser

CHROMIUM = "chromium"
WIDTH, HEIGHT = 1360, 440
NARROW = 760  # a laptop's half screen, where the diagnostics once pushed the counts out of view
COUNTS = ("pending", "running", "dead", "done", "stuck", "oldest pending")
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


def assert_both_badges_drawn(shot: Path) -> None:
    """The screenshot shows orders' green "up" badge and billing's red "down" one."""
    picture = image.imread(str(shot))
    assert pixels_of(picture, (0xD7, 0xF5, 0xDD)) > 100
    assert pixels_of(picture, (0xFD, 0xE0, 0xDF)) > 100


def two_queues(dsn: str) -> Settings:
    """orders (up, with work in every state) and billing (down from the start)."""
    down = fast_queue(DOWN_DSN, name="billing")
    down = replace(down, database=replace(down.database, connect_timeout=1.0))
    return Settings(
        queues=(fast_queue(dsn, name="orders", job_types={1: "email", 2: "scrape"}), down),
        web=WebSettings(listen_address=("127.0.0.1:0",)),
    )


@contextlib.asynccontextmanager
async def serving(dsn: str) -> AsyncIterator[str]:
    """The status page's URL, once orders (filled) has collected and billing has tried once."""
    await fill(dsn)
    service = Service(two_queues(dsn))
    await service.start()
    try:
        await service.queue("orders").poller.wait_for_success()
        await service.queue("billing").poller.wait_for_collections(1)
        yield f"http://127.0.0.1:{service.port}/"
    finally:
        await service.stop()


async def test_chromium_renders_every_queue_with_its_state_and_the_page_looks_right(
    db_dsn: str, tmp_path: Path
) -> None:
    async with serving(db_dsn) as url:
        metrics = await asyncio.to_thread(fetch_text, f"{url}metrics")
        dom = await chromium(url, tmp_path / "profile", "--dump-dom")
        shot = tmp_path / "status.png"
        await chromium(
            url, tmp_path / "profile", f"--screenshot={shot}", f"--window-size={WIDTH},{HEIGHT}"
        )

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
    assert_both_badges_drawn(shot)
    if os.environ.get("STATUS_PNG"):
        shutil.copyfile(shot, os.environ["STATUS_PNG"])


async def laid_out(page: Path, width: int, profile: Path) -> dict[str, Any]:
    """Where Chromium puts every cell of the page at this window width (tests/pages.py)."""
    dom = await chromium(page.as_uri(), profile, "--dump-dom", f"--window-size={width},900")
    return layout_of(dom.decode())


@pytest.mark.browser
async def test_at_760_px_the_counts_stay_in_view_and_the_diagnostics_wrap_beneath(
    db_dsn: str, tmp_path: Path
) -> None:
    async with serving(db_dsn) as url:
        served = await asyncio.to_thread(fetch_text, url)
        shot = tmp_path / "narrow.png"
        await chromium(
            url, tmp_path / "profile", f"--screenshot={shot}", f"--window-size={NARROW},900"
        )
    probe = tmp_path / "probe.html"
    probe.write_text(with_layout_probe(served))
    narrow = await laid_out(probe, NARROW, tmp_path / "profile")
    wide = await laid_out(probe, 1600, tmp_path / "profile")

    assert (narrow["viewport"], wide["viewport"]) == (NARROW, 1600)
    for layout in (narrow, wide):
        assert layout["scroll"] <= layout["viewport"], "the page scrolls sideways"
    heads = {h["name"]: h for h in narrow["heads"]}
    assert set(narrow["rows"]) == {"orders", "billing"}
    for queue, cells in narrow["rows"].items():
        by_name = {c["name"]: c for c in cells}
        counts = [by_name[name] for name in COUNTS]
        for cell in counts:
            assert 0 <= cell["left"] < cell["right"] <= NARROW, (queue, cell)
            # Under its own header, which is shown: the number is read as what it is.
            head = heads[cell["name"]]
            assert head["shown"], head
            assert abs(head["left"] - cell["left"]) <= 1, (head, cell)
            assert abs(head["right"] - cell["right"]) <= 1, (head, cell)
        assert len({round(c["top"]) for c in counts}) == 1, f"{queue}: the counts share a line"
        beneath = max(c["bottom"] for c in counts)
        diagnostics = [c for c in cells if c["name"] not in (*COUNTS, "queue", "state", "role")]
        assert {c["name"] for c in diagnostics} >= {"last error", "counting", "tracked jobs"}
        for cell in diagnostics:
            assert cell["top"] >= beneath - 1, (queue, cell)
            assert cell["left"] >= 0, (queue, cell)
            assert cell["right"] <= NARROW, (queue, cell)
            assert not heads[cell["name"]]["shown"]  # labelled in its cell instead
    orders = {c["name"]: c["text"] for c in narrow["rows"]["orders"]}
    assert (orders["pending"], orders["running"], orders["dead"]) == ("34", "4", "2")
    # Wide, the page is one table: every cell of a queue on one line.
    for queue, cells in wide["rows"].items():
        assert len({round(c["top"]) for c in cells}) == 1, queue

    assert png_size(shot.read_bytes()) == (NARROW, 900)
    assert_both_badges_drawn(shot)
