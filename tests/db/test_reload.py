"""Reload in-process through POST /-/reload: queues added, renamed, removed and reconnected with
their counters kept; a bad file keeps the running configuration and says so; lifecycle and auth
guard the endpoint."""

from __future__ import annotations

import asyncio
import base64
import io
import logging
import time
import uuid
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import aiohttp
import bcrypt
import pytest
import yaml

from exporter.demo.cluster import Cluster
from exporter.logs import setup_logging
from exporter.service import Service
from exporter.settings import Settings, load_settings
from tests.conftest import execute
from tests.helpers import RawRecords, Samples, parse, value

FAST = {"interval": "200ms", "timeout": "3s", "statement_timeout": "2s", "lock_timeout": "500ms"}
ON_TIME = "jobqueue_exporter_config_last_reload_success_timestamp_seconds"
OK = "jobqueue_exporter_config_last_reload_successful"


def entry(name: str, dsn: str | None = None, **collect: object) -> dict[str, Any]:
    found: dict[str, Any] = {"name": name, "collect": {**FAST, **collect}}
    if dsn is not None:
        found["database"] = {"dsn": dsn}
    return found


def write(path: Path, *queues: dict[str, Any], **top: Any) -> None:
    document = {"web": {"enable_lifecycle": True}, **top, "queues": list(queues)}
    path.write_text(yaml.safe_dump(document), encoding="utf-8")


def loader(path: Path) -> Callable[[], Settings]:
    """What the command line hands the service: the same file and flags, re-read each time."""
    return lambda: load_settings(str(path), {}, {"web.listen_address": "127.0.0.1:0"})


@pytest.fixture
def path(tmp_path: Path) -> Path:
    """The configuration file the test writes and the service re-reads."""
    return tmp_path / "config.yml"


@pytest.fixture
async def started(path: Path) -> AsyncIterator[Callable[..., Any]]:
    """start(*queues, **top): write the file, start a service from it, and wait for the first
    queue's first collection (the baseline counting starts from)."""
    services: list[Service] = []

    async def start(*queues: dict[str, Any], **top: Any) -> Service:
        write(path, *queues, **top)
        service = Service(loader(path)(), loader(path))
        services.append(service)
        await service.start()
        if service.queue(queues[0]["name"]).leader:
            await service.queues[0].poller.wait_for_success()
        return service

    yield start
    for service in services:
        await service.stop()


def enqueued(queue: str, job_type: str) -> Callable[[Samples], float | None]:
    """Reads jobqueue_jobs_enqueued_total of one queue and job type (None while absent)."""
    key = ("jobqueue_jobs_enqueued_total", (("job_type", job_type), ("queue", queue)))
    return lambda samples: samples.get(key)


async def request(service: Service, method: str, path: str, **kwargs: Any) -> tuple[int, str]:
    async with (
        aiohttp.ClientSession() as http,
        http.request(method, f"http://127.0.0.1:{service.port}{path}", **kwargs) as r,
    ):
        return r.status, await r.text()


async def metrics(service: Service) -> Samples:
    status, text = await request(service, "GET", "/metrics")
    assert status == 200
    return parse(text)


async def scrape_until(service: Service, predicate: Callable[[Samples], bool]) -> Samples:
    deadline = time.monotonic() + 20
    while not predicate(samples := await metrics(service)):
        assert time.monotonic() < deadline, "/metrics never reached the expected state"
        await asyncio.sleep(0.05)
    return samples


def queues_in(samples: Samples) -> set[str]:
    return {dict(labels)["queue"] for name, labels in samples if name == "jobqueue_up"}


async def test_reload_renames_adds_and_removes_queues_and_keeps_the_counters_of_the_rest(
    db_dsn: str, path: Path, started: Callable[..., Any]
) -> None:
    service: Service = await started(entry("orders", db_dsn, job_types={1: "email"}))
    orders = service.queue("orders")
    await execute(db_dsn, "INSERT INTO job (job_type) SELECT 1 FROM generate_series(1, 3)")
    before = await scrape_until(
        service,
        lambda s: enqueued("orders", "email")(s) == 3,
    )
    loaded_at = value(before, ON_TIME)

    # Rename job type 1, collect more often, and watch a second queue of the same database.
    write(
        path,
        entry("orders", db_dsn, job_types={1: "mail"}, interval="300ms"),
        entry("mails", db_dsn),
    )
    assert await request(service, "POST", "/-/reload") == (200, "configuration reloaded\n")
    assert service.queue("orders") is orders  # same runtime: same pool, tracker and counters
    assert orders.poller.settings.collect.interval == 0.3
    after = await scrape_until(service, lambda s: queues_in(s) == {"orders", "mails"})
    assert value(after, "jobqueue_jobs_enqueued_total", queue="orders", job_type="mail") == 3
    assert not [k for k in after if ("job_type", "email") in k[1]]
    assert value(after, OK) == 1
    assert value(after, ON_TIME) > loaded_at

    await execute(db_dsn, "INSERT INTO job (job_type) VALUES (1)")
    await scrape_until(
        service,
        lambda s: enqueued("orders", "mail")(s) == 4,
    )

    write(path, entry("mails", db_dsn))
    assert (await request(service, "POST", "/-/reload"))[0] == 200
    samples = await metrics(service)  # no waiting: the reload's rendering is served at once
    assert queues_in(samples) == {"mails"}
    assert not [k for k in samples if ("queue", "orders") in k[1]]


async def test_done_counting_and_the_stuck_threshold_change_live_with_the_counters_kept(
    db_dsn: str, path: Path, started: Callable[..., Any]
) -> None:
    service: Service = await started(entry("orders", db_dsn, stuck_threshold="10m"))
    orders = service.queue("orders")
    await execute(
        db_dsn,
        "INSERT INTO job (job_type) VALUES (1);"
        "INSERT INTO job (job_type, status, attempts, result) VALUES (1, 3, 1, '{}');"
        "INSERT INTO job (job_type, status, attempts, worker_id, lease_until, run_started_at) "
        "VALUES (1, 2, 1, 'w', now() + interval '1 hour', now() - interval '5 minutes')",
    )
    done = ("jobqueue_jobs", (("job_type", "1"), ("queue", "orders"), ("status", "done")))
    overrun = (
        "jobqueue_stuck_jobs",
        (("job_type", "1"), ("queue", "orders"), ("reason", "overrun")),
    )
    before = await scrape_until(service, lambda s: enqueued("orders", "1")(s) == 3)
    assert done not in before
    assert before[overrun] == 0

    write(path, entry("orders", db_dsn, stuck_threshold="1m", done_count=True))
    assert (await request(service, "POST", "/-/reload"))[0] == 200
    assert service.queue("orders") is orders
    after = await scrape_until(service, lambda s: s.get(done) == 1 and s.get(overrun) == 1)
    assert enqueued("orders", "1")(after) == 3  # counters kept


async def test_a_changed_database_replaces_the_queue_and_restarts_its_counters(
    db_dsn: str, path: Path, started: Callable[..., Any]
) -> None:
    service: Service = await started(entry("orders", db_dsn))
    first = service.queue("orders")
    await execute(db_dsn, "INSERT INTO job (job_type) VALUES (1)")
    await scrape_until(
        service,
        lambda s: enqueued("orders", "1")(s) == 1,
    )
    write(path, entry("orders", db_dsn, commit_lag_tolerance="10s"))  # the counting changes
    assert (await request(service, "POST", "/-/reload"))[0] == 200
    second = service.queue("orders")
    assert second is not first
    await second.poller.wait_for_success()
    samples = await metrics(service)
    # A new baseline, as after a restart: what happened before it is not counted again.
    assert value(samples, "jobqueue_jobs_enqueued_total", queue="orders", job_type="1") == 0
    assert value(samples, "jobqueue_exporter_collections_total", queue="orders") >= 1


async def test_a_bad_file_keeps_the_running_configuration_and_the_gauge_says_so(
    db_dsn: str, path: Path, started: Callable[..., Any]
) -> None:
    service: Service = await started(entry("orders", db_dsn))
    orders = service.queue("orders")
    loaded_at = value(await metrics(service), ON_TIME)
    raw = RawRecords()
    logging.getLogger().addHandler(raw)
    try:
        write(path, entry("orders", db_dsn, interval="soon"), entry("mails", db_dsn))
        status, text = await request(service, "POST", "/-/reload")
        assert status == 500
        assert "queues[0].collect.interval: expected a duration" in text
        samples = await metrics(service)
        assert value(samples, OK) == 0
        assert value(samples, ON_TIME) == loaded_at
        assert queues_in(samples) == {"orders"}  # nothing of the bad file was applied
        generation = orders.poller.generation
        await orders.poller.wait_for_collections(generation + 2)  # still collecting
        _, page = await request(service, "GET", "/")
        assert "The last reload failed" in page
        assert "queues[0].collect.interval" in page

        # Changes only a restart can apply are refused the same way, naming the setting.
        # (The flags still win: --web.listen-address given at start-up stays as it was.)
        write(path, entry("orders", db_dsn), web={"enable_lifecycle": True, "telemetry_path": "/m"})
        status, text = await request(service, "POST", "/-/reload")
        assert (status, text) == (
            500,
            "failed to reload config: web.telemetry_path: changing it needs a restart\n",
        )

        write(path, entry("orders", db_dsn))
        assert (await request(service, "POST", "/-/reload"))[0] == 200
        samples = await metrics(service)
        assert value(samples, OK) == 1
        assert value(samples, ON_TIME) > loaded_at
    finally:
        logging.getLogger().removeHandler(raw)
    failures = [line for line in raw.lines if "configuration reload failed" in line]
    assert len(failures) == 2
    assert "queues[0].collect.interval" in failures[0]
    assert "web.telemetry_path" in failures[1]


@pytest.mark.cluster
async def test_a_rotated_password_file_reconnects_without_losing_counts_or_leaking_it(
    secret_cluster: tuple[Cluster, str, str], tmp_path: Path, started: Callable[..., Any]
) -> None:
    cluster, _, old_password = secret_cluster
    dsn = cluster.dsn("queue", user="watcher")  # the password comes from the file
    admin = cluster.dsn("queue")
    secret = tmp_path / "password"
    secret.write_text(old_password + "\n")
    queue = entry("orders")
    queue["database"] = {"dsn": dsn, "password_file": str(secret)}
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    rendered = io.StringIO()
    setup_logging("debug", "logfmt", [old_password], stream=rendered)
    raw = RawRecords()
    root.addHandler(raw)
    try:
        service: Service = await started(queue)
        orders = service.queue("orders")
        await execute(admin, "INSERT INTO job (job_type) VALUES (2), (2)")
        count = enqueued("orders", "2")
        await scrape_until(service, lambda s: count(s) == 2)

        new_password = "pw-" + uuid.uuid4().hex
        cluster.psql("ALTER ROLE watcher PASSWORD :'password'", password=new_password)
        secret.write_text(new_password + "\n")
        assert (await request(service, "POST", "/-/reload"))[0] == 200
        assert service.queue("orders") is orders
        await execute(admin, "INSERT INTO job (job_type) VALUES (2)")
        samples = await scrape_until(service, lambda s: count(s) == 3)
        assert value(samples, "jobqueue_up", queue="orders") == 1
        logging.getLogger("exporter.test").info("the new one is %s", new_password)
    finally:
        root.handlers[:], root.level = handlers, level
    for password in (old_password, new_password):
        assert not [line for line in raw.lines if password in line and "the new one is" not in line]
        assert password not in rendered.getvalue()  # the reload taught the redactor the new one


def basic(user: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


async def test_the_reload_endpoint_needs_lifecycle_post_or_put_and_credentials(
    db_dsn: str, path: Path, started: Callable[..., Any]
) -> None:
    web_config = path.parent / "web.yml"
    hashed = bcrypt.hashpw(b"s3cret", bcrypt.gensalt(rounds=4)).decode()
    web_config.write_text(f"basic_auth_users:\n  admin: {hashed}\n")
    service: Service = await started(
        entry("orders", db_dsn),
        web={"enable_lifecycle": False, "config_file": str(web_config)},
    )
    good = {"Authorization": basic("admin", "s3cret")}
    assert (await request(service, "POST", "/-/reload"))[0] == 401
    assert await request(service, "POST", "/-/reload", headers=good) == (
        403,
        "Lifecycle API is not enabled.\n",
    )
    assert (await request(service, "GET", "/-/reload", headers=good))[0] == 405
    assert (await request(service, "POST", "/metrics", headers=good))[0] == 405
    assert (await request(service, "DELETE", "/-/reload", headers=good))[0] == 405
    assert (await request(service, "POST", "/-/reload", headers=good, data=b"x"))[0] == 413

    # Enabling the lifecycle API is itself reloadable (through SIGHUP, say).
    write(
        path,
        entry("orders", db_dsn),
        web={"enable_lifecycle": True, "config_file": str(web_config)},
    )
    assert await service.reload() is None
    assert (await request(service, "POST", "/-/reload"))[0] == 401
    assert (await request(service, "PUT", "/-/reload", headers=good))[0] == 200
