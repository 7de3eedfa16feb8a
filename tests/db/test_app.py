"""The whole exporter process in-process: HTTP endpoints, outages and recovery, no leaked secrets."""

from __future__ import annotations

import asyncio
import base64
import gzip
import io
import logging
import socket
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import replace
from pathlib import Path

import aiohttp
import bcrypt
import pytest

from exporter.demo.cluster import Cluster
from exporter.logs import setup_logging
from exporter.service import Service
from tests.conftest import execute
from tests.helpers import QUEUE, RawRecords, Samples, fast_settings, parse, value


@pytest.fixture
def logs() -> AsyncIterator[tuple[RawRecords, io.StringIO]]:
    raw = RawRecords()
    rendered = io.StringIO()
    setup_logging("debug", "logfmt", [], stream=rendered)
    logging.getLogger().addHandler(raw)
    yield raw, rendered
    logging.getLogger().removeHandler(raw)


async def get(port: int, path: str) -> tuple[int, str, float]:
    started = time.perf_counter()
    async with (
        aiohttp.ClientSession() as session,
        session.get(f"http://127.0.0.1:{port}{path}") as r,
    ):
        return r.status, await r.text(), time.perf_counter() - started


async def scrape_until(
    port: int, predicate: Callable[[Samples], bool], limit: float = 20.0
) -> Samples:
    """Scrape /metrics until ``predicate`` holds; every scrape must answer 200 at once."""
    deadline = time.monotonic() + limit
    while True:
        status, body, elapsed = await get(port, "/metrics")
        assert status == 200
        assert elapsed < 2.0  # milliseconds in practice; generous for a loaded CI host
        samples = parse(body)
        if predicate(samples):
            return samples
        if time.monotonic() > deadline:
            raise AssertionError("/metrics never reached the expected state")
        await asyncio.sleep(0.05)


@pytest.mark.cluster
async def test_database_down_then_up_then_down_again_is_reported_and_recovers(
    secret_cluster: tuple[Cluster, str, str], logs: tuple[RawRecords, io.StringIO]
) -> None:
    cluster, dsn, password = secret_cluster
    admin = cluster.dsn("queue")
    await execute(admin, "INSERT INTO job (job_type) VALUES (5)")
    cluster.stop("fast")
    settings = fast_settings(dsn, staleness_limit=1.0)
    exporter = Service(settings)
    await exporter.start()
    port = exporter.port
    assert port
    try:
        # Down at start: served anyway, fast, with up 0 and not ready.
        await exporter.queues[0].poller.wait_for_collections(2)
        samples = await scrape_until(
            port,
            lambda s: (
                value(s, "jobqueue_exporter_collection_errors_total", reason="connection") >= 1
            ),
        )
        assert value(samples, "jobqueue_up") == 0
        assert (await get(port, "/readyz"))[0] == 503
        assert (await get(port, "/healthz"))[0] == 200

        cluster.start()
        samples = await scrape_until(port, lambda s: value(s, "jobqueue_up") == 1)
        assert value(samples, "jobqueue_jobs", job_type="5", status="pending") == 1
        assert (await get(port, "/readyz"))[0] == 200

        # Away mid-run: gauges are withdrawn once stale, self-metrics stay, /metrics stays fast.
        cluster.stop("immediate")
        samples = await scrape_until(port, lambda s: not [k for k in s if k[0] == "jobqueue_jobs"])
        assert value(samples, "jobqueue_up") == 0
        assert ("jobqueue_exporter_collections_total", (("queue", QUEUE),)) in samples
        assert (await get(port, "/readyz"))[0] == 503

        cluster.start()
        samples = await scrape_until(port, lambda s: value(s, "jobqueue_up") == 1)
        assert value(samples, "jobqueue_jobs", job_type="5", status="pending") == 1
    finally:
        await exporter.stop()
    raw, rendered = logs
    assert any("collection failed" in line for line in raw.lines)
    assert not [line for line in raw.lines if password in line]
    assert password not in rendered.getvalue()


async def test_landing_page_names_the_exporter_and_links_metrics(db_dsn: str) -> None:
    settings = fast_settings(db_dsn)
    settings = replace(settings, web=replace(settings.web, telemetry_path="/custom"))
    exporter = Service(settings)
    await exporter.start()
    try:
        assert exporter.port
        await exporter.queues[0].poller.wait_for_success()
        status, body, _ = await get(exporter.port, "/")
        assert status == 200
        assert "jobqueue-exporter" in body
        assert 'href="/custom"' in body
        assert (await get(exporter.port, "/custom"))[0] == 200
        assert (await get(exporter.port, "/metrics"))[0] == 404
    finally:
        await exporter.stop()


def basic(user: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


async def test_real_exporter_refuses_bad_requests_and_requires_auth_when_configured(
    db_dsn: str, tmp_path: Path
) -> None:
    web_config = tmp_path / "web.yml"
    hashed = bcrypt.hashpw(b"scrape-secret", bcrypt.gensalt(rounds=4)).decode()
    web_config.write_text(f"basic_auth_users:\n  prometheus: {hashed}\n")
    settings = fast_settings(db_dsn)
    settings = replace(settings, web=replace(settings.web, config_file=str(web_config)))
    exporter = Service(settings)
    await exporter.start()
    try:
        base = f"http://127.0.0.1:{exporter.port}"
        good = {"Authorization": basic("prometheus", "scrape-secret")}
        async with aiohttp.ClientSession() as http:
            async with http.get(f"{base}/metrics") as r:
                assert r.status == 401
                assert r.headers["WWW-Authenticate"].startswith("Basic")
            async with http.get(
                f"{base}/metrics", headers={"Authorization": basic("prometheus", "no")}
            ) as r:
                assert r.status == 401
            async with http.get(f"{base}/healthz") as r:
                assert r.status == 200
            async with http.get(f"{base}/-/healthy") as r:  # the twin is as open
                assert (r.status, await r.text()) == (200, "ok\n")
            for ready in ("/readyz", "/-/ready"):
                async with http.get(f"{base}{ready}") as r:
                    assert r.status == 401
            async with http.get(f"{base}/metrics", headers=good) as r:
                assert r.status == 200
            async with http.post(f"{base}/metrics", headers=good, data=b"x") as r:
                assert r.status in (400, 405, 413)
            async with http.get(f"{base}/metrics", headers={**good, "X-Big": "a" * 20000}) as r:
                assert 400 <= r.status < 500
            async with http.get(f"{base}/%2e%2e/%2e%2e/etc/passwd", headers=good) as r:
                assert r.status in (400, 404)
            async with http.get(f"{base}/metrics", headers=good) as r:  # still serving
                assert r.status == 200
    finally:
        await exporter.stop()


async def test_metrics_are_compressed_for_scrapers_that_ask_and_plain_for_the_rest(
    db_dsn: str,
) -> None:
    exporter = Service(fast_settings(db_dsn))
    await exporter.start()
    try:
        await exporter.queues[0].poller.wait_for_success()
        url = f"http://127.0.0.1:{exporter.port}/metrics"
        async with aiohttp.ClientSession(auto_decompress=False) as http:
            async with http.get(url, headers={"Accept-Encoding": "identity"}) as r:
                plain = await r.read()
                assert "Content-Encoding" not in r.headers
                assert r.headers["Vary"] == "Accept-Encoding"
            async with http.get(url, headers={"Accept-Encoding": "gzip"}) as r:  # Prometheus
                packed = await r.read()
                assert r.headers["Content-Encoding"] == "gzip"
                assert r.headers["Vary"] == "Accept-Encoding"
                assert int(r.headers["Content-Length"]) == len(packed)
            async with http.head(url, headers={"Accept-Encoding": "gzip"}) as r:
                assert r.headers["Content-Encoding"] == "gzip"
            async with http.get(url, headers={"Accept-Encoding": "zstd, gzip;q=0.5"}) as r:
                zstd_body = await r.read()
                coding = r.headers["Content-Encoding"]
        assert len(packed) < len(plain) / 3  # an empty queue; ~10x on a busy one
        text = gzip.decompress(packed).decode()
        assert value(parse(text), "jobqueue_up") == 1
        # Both bodies come from renderings of the same state: the same series.
        assert parse(text).keys() == parse(plain.decode()).keys()
        if coding == "zstd":
            from backports.zstd import decompress

            assert parse(decompress(zstd_body).decode()).keys() == parse(text).keys()
        else:
            assert coding == "gzip"  # no zstd in this Python: the next best
    finally:
        await exporter.stop()


def ipv6_loopback() -> bool:
    try:
        with socket.socket(socket.AF_INET6) as probe:
            probe.bind(("::1", 0))
    except OSError:
        return False
    return True


async def test_one_process_serves_ipv4_and_ipv6_loopback_at_once(db_dsn: str) -> None:
    # Where the machine has no ::1, two IPv4 loopback addresses stand in for the pair.
    second = ("[::1]:0", "[::1]") if ipv6_loopback() else ("127.0.0.2:0", "127.0.0.2")
    settings = fast_settings(db_dsn)
    web = replace(settings.web, listen_address=("127.0.0.1:0", second[0]))
    exporter = Service(replace(settings, web=web))
    await exporter.start()
    try:
        first_port, second_port = exporter.web.ports
        async with aiohttp.ClientSession() as http:
            for url in (
                f"http://127.0.0.1:{first_port}/healthz",
                f"http://{second[1]}:{second_port}/healthz",
            ):
                async with http.get(url) as r:
                    assert (r.status, await r.text()) == (200, "ok\n")
    finally:
        await exporter.stop()
