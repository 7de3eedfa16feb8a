"""Small helpers shared by the tests that run the exporter against a real database."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import replace

import aiohttp
import asyncpg
from prometheus_client.parser import text_string_to_metric_families

from exporter.counting.transitions import TransitionCursor
from exporter.db import Database
from exporter.demo.fleet import Fleet
from exporter.metrics import render
from exporter.poller import Poller
from exporter.runtime import connect_options
from exporter.settings import (
    CollectSettings,
    DatabaseSettings,
    QueueSettings,
    Settings,
    WebSettings,
)

# The queue label of the tests' queue; value() expects it unless told another.
QUEUE = "test"
# Series about the process rather than a queue: no queue label.
PROCESS_WIDE = {
    "jobqueue_exporter_build_info",
    "jobqueue_exporter_config_last_reload_successful",
    "jobqueue_exporter_config_last_reload_success_timestamp_seconds",
}


def fast_queue(dsn: str, name: str = QUEUE, **collect: object) -> QueueSettings:
    """One queue collected fast."""
    base = CollectSettings(
        interval=0.2,
        timeout=3.0,
        statement_timeout=2.0,
        lock_timeout=0.5,
        commit_lag_tolerance=30.0,
    )
    return QueueSettings(
        name=name,
        database=DatabaseSettings(dsn=dsn, connect_timeout=2.0),
        collect=replace(base, **collect),  # type: ignore[arg-type]
    )


def fast_settings(dsn: str, **collect: object) -> Settings:
    """Settings for a fast exporter of one queue on an ephemeral port."""
    return Settings(
        queues=(fast_queue(dsn, **collect),),
        web=WebSettings(listen_address=("127.0.0.1:0",)),
    )


def cursor(poller: Poller) -> TransitionCursor:
    """The default profile's counting mode of a poller (its tracker and change cursor)."""
    mode = poller.mode
    assert isinstance(mode, TransitionCursor)
    return mode


def make_poller(settings: Settings | QueueSettings) -> Poller:
    """A poller with its own database pool (close it with ``poller.database.close()``)."""
    queue = settings.queues[0] if isinstance(settings, Settings) else settings
    return Poller(queue, Database(connect_options(queue)))


Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def scrape(poller: Poller) -> Samples:
    """Render the poller's metrics and parse them back: {(sample name, sorted labels): value}."""
    text = render([poller.view()], process_metrics=False).decode()
    return parse(text)


def parse(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Parse an exposition with prometheus-client's own parser."""
    samples: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            samples[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return samples


def value(
    samples: dict[tuple[str, tuple[tuple[str, str], ...]], float], name: str, **labels: str
) -> float:
    """One sample's value (of the tests' queue unless ``queue`` is given); KeyError when absent."""
    if name not in PROCESS_WIDE:
        labels.setdefault("queue", QUEUE)
    return samples[(name, tuple(sorted(labels.items())))]


class RawRecords(logging.Handler):
    """Keeps every record's unredacted text, to prove the code never logs a secret at all."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        text = record.getMessage() + " " + repr(getattr(record, "fields", ""))
        if record.exc_info:
            text += logging.Formatter().formatException(record.exc_info)
        self.lines.append(text)


async def wait_for_completions(fleet: Fleet, count: int, limit: float = 120.0) -> None:
    """Let the fleet run until it has completed ``count`` more jobs (an amount of work, not of
    time, so a loaded machine runs the same scenario, only slower)."""
    target = sum(fleet.tally.completed.values()) + count
    deadline = time.monotonic() + limit
    while sum(fleet.tally.completed.values()) < target:
        if time.monotonic() > deadline:
            raise AssertionError(f"the fleet completed fewer than {count} jobs in {limit:g}s")
        await asyncio.sleep(0.05)


async def get(port: int | None, path: str) -> tuple[int, str, float]:
    """One GET with a hard client deadline, so a hung endpoint fails the test instead of it."""
    assert port
    started = time.monotonic()
    timeout = aiohttp.ClientTimeout(total=5)
    async with (
        aiohttp.ClientSession(timeout=timeout) as session,
        session.get(f"http://127.0.0.1:{port}{path}") as response,
    ):
        return response.status, await response.text(), time.monotonic() - started


async def wait_until(
    predicate: Callable[[], bool],
    within: float = 30.0,
    what: str = "",
) -> float:
    """Poll until true; returns the seconds it took, fails after ``within`` seconds."""
    started = time.monotonic()
    while not predicate():
        if time.monotonic() - started > within:
            raise AssertionError(f"not reached within {within}s: {what or predicate}")
        await asyncio.sleep(0.02)
    return time.monotonic() - started


@contextlib.asynccontextmanager
async def table_locked(admin_dsn: str) -> AsyncIterator[asyncpg.Connection]:
    """Hold ACCESS EXCLUSIVE on job from another session until the block ends."""
    conn = await asyncpg.connect(admin_dsn)
    try:
        transaction = conn.transaction()
        await transaction.start()
        await conn.execute("LOCK TABLE job IN ACCESS EXCLUSIVE MODE")
        yield conn
        # The server may have gone away meanwhile (restart tests): then there is nothing to undo.
        with contextlib.suppress(asyncpg.InterfaceError, asyncpg.PostgresError, OSError):
            await transaction.rollback()
    finally:
        if not conn.is_closed():
            conn.terminate()


@contextlib.asynccontextmanager
async def poller_running(poller: Poller) -> AsyncIterator[asyncio.Task[None]]:
    """The poller's loop as a task for the length of the block, cancelled at its end."""
    task = asyncio.create_task(poller.run())
    try:
        yield task
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


async def settle(poller: Poller, collections: int = 3) -> None:
    """Let the poller read everything committed so far."""
    for _ in range(collections):
        await poller.wait_for_success()


async def collect_until(poller: Poller, done: Callable[[], bool], limit: float = 30.0) -> None:
    """Collect back to back until ``done()`` (the horizon moves with the database's clock)."""
    async with asyncio.timeout(limit):
        while not done():
            assert await poller.collect_once()
