"""Fault injection against a real PostgreSQL: locks, kills, black holes, restarts, bad schemas.

Every test runs the exporter with a role of its own whose password is unique, captures every
log record, and checks at the end that the password appears in none of them. Waits poll a
condition with a generous bound; the only timing asserts are upper bounds far from the
expected figure. Figures seen (detection, recovery, peak connections) are printed with ``-s``.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import logging
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import aiohttp
import asyncpg
import pytest

from exporter.db import APPLICATION_NAME
from exporter.demo.cluster import Cluster, StopMode, free_port
from exporter.demo.fleet import Fleet, FleetConfig
from exporter.demo.queue import prepare_database
from exporter.logs import setup_logging
from exporter.service import Service
from exporter.settings import Settings
from tests.conftest import execute, fetchval
from tests.helpers import (
    RawRecords,
    Samples,
    fast_settings,
    get,
    parse,
    table_locked,
    value,
    wait_for_completions,
    wait_until,
)
from tests.tcp_proxy import TcpProxy
from tests.truth import assert_exact

pytestmark = [pytest.mark.slow, pytest.mark.cluster]

ROOT = Path(__file__).resolve().parents[2]
DB = "queue"
ROLE = "watcher"
COUNT_EXPORTER_SESSIONS = "SELECT count(*) FROM pg_stat_activity WHERE application_name = $1"


# --- fixtures and helpers ---------------------------------------------------------------------


@dataclass
class Env:
    """A test's own cluster, queue database, password role and log capture."""

    cluster: Cluster
    admin: str  # postgres, trusted: for the test's own fiddling
    dsn: str  # the exporter's: read-only role with a unique password
    password: str
    raw: RawRecords
    rendered: io.StringIO

    def assert_no_password_logged(self, *extra: str) -> None:
        """The password is in no log record, rendered line or extra output."""
        assert self.raw.lines or any(extra), "no log output was captured"
        assert not [line for line in self.raw.lines if self.password in line]
        assert self.password not in self.rendered.getvalue()
        for text in extra:
            assert self.password not in text


def grant_read_only(cluster: Cluster, role: str, dbname: str) -> None:
    """The documented grants, after taking away what PUBLIC has by default, so they must suffice."""
    cluster.psql(f'REVOKE ALL ON DATABASE "{dbname}" FROM PUBLIC')
    cluster.psql(f'GRANT CONNECT ON DATABASE "{dbname}" TO "{role}"')
    cluster.psql(
        f'REVOKE ALL ON SCHEMA public FROM PUBLIC; GRANT USAGE ON SCHEMA public TO "{role}"; '
        f'GRANT SELECT ON job TO "{role}"',
        dbname=dbname,
    )


@pytest.fixture
def env(fresh_cluster: Cluster) -> Iterator[Env]:
    """A cluster of the test's own with the queue, the read-only role and the log capture."""
    password = "pw-" + uuid.uuid4().hex
    fresh_cluster.create_database(DB)
    asyncio.run(prepare_database(fresh_cluster.dsn(DB)))
    fresh_cluster.create_role(ROLE, password)
    grant_read_only(fresh_cluster, ROLE, DB)
    raw = RawRecords()
    rendered = io.StringIO()
    setup_logging("debug", "logfmt", [], stream=rendered)
    logging.getLogger().addHandler(raw)
    try:
        yield Env(
            fresh_cluster,
            fresh_cluster.dsn(DB),
            fresh_cluster.dsn(DB, user=ROLE, password=password),
            password,
            raw,
            rendered,
        )
    finally:
        logging.getLogger().removeHandler(raw)


@contextlib.asynccontextmanager
async def running(settings: Settings) -> AsyncIterator[Service]:
    """An exporter in this process, stopped (and its sessions closed) at the end."""
    exporter = Service(settings)
    await exporter.start()
    try:
        yield exporter
    finally:
        await exporter.stop()


async def assert_serving(
    exporter: Service,
    up: int,
    until: Callable[[Samples], bool] | None = None,
    within: float = 30.0,
) -> Samples:
    """/metrics and /healthz answer at once, and /metrics says jobqueue_up is ``up``.

    ``jobqueue_up`` must be right on the first scrape: /metrics never serves a rendering whose
    health verdict is out of date. Counters may trail by one collection (a scrape that arrives
    while the next rendering is under way gets the previous one), so ``until`` is polled.
    """
    started = time.monotonic()
    while True:
        status, body, elapsed = await get(exporter.port, "/metrics")
        assert status == 200, status
        assert elapsed < 2.0, elapsed  # instant in practice; generous for a loaded CI host
        samples = parse(body)
        assert value(samples, "jobqueue_up") == up
        if until is None or until(samples):
            break
        assert time.monotonic() - started < within, "/metrics never reached the expected state"
        await asyncio.sleep(0.05)
    status, _, elapsed = await get(exporter.port, "/healthz")
    assert status == 200, status
    assert elapsed < 2.0, elapsed  # instant in practice; generous for a loaded CI host
    return samples


async def wait_for_query(
    dsn: str,
    sql: str,
    *args: object,
    within: float = 30.0,
) -> float:
    """Poll a boolean query until it is true; returns the seconds it took."""
    started = time.monotonic()
    while not await fetchval(dsn, sql, *args):
        if time.monotonic() - started > within:
            raise AssertionError(f"not reached within {within}s: {sql}")
        await asyncio.sleep(0.05)
    return time.monotonic() - started


class SessionSampler:
    """Counts the exporter's sessions in pg_stat_activity every 0.2 s, in the background."""

    def __init__(self, admin_dsn: str) -> None:
        self.admin_dsn = admin_dsn
        self.samples: list[int] = []
        self._task: asyncio.Task[None] | None = None

    async def __aenter__(self) -> SessionSampler:
        conn = await asyncpg.connect(self.admin_dsn)

        async def sample() -> None:
            try:
                while True:
                    self.samples.append(
                        int(await conn.fetchval(COUNT_EXPORTER_SESSIONS, APPLICATION_NAME))
                    )
                    await asyncio.sleep(0.2)
            finally:
                await conn.close()

        self._task = asyncio.create_task(sample())
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._task is not None
        self._task.cancel()
        await asyncio.gather(self._task, return_exceptions=True)

    @property
    def peak(self) -> int:
        return max(self.samples, default=0)


# Each stop mode between collections and during one (a collection held on a lock).
SHUTDOWNS: tuple[tuple[StopMode, bool], ...] = (
    ("fast", False),
    ("immediate", True),
    ("fast", True),
    ("immediate", False),
)
WAITING_ON_LOCK = (
    "SELECT count(*) > 0 FROM pg_stat_activity WHERE application_name = $1 "
    "AND wait_event_type = 'Lock'"
)


def figure(name: str, seconds: float | int) -> None:
    """Print a figure for the closing note (visible with -s)."""
    print(
        f"FIGURE {name}: {seconds:.2f}"
        if isinstance(seconds, float)
        else f"FIGURE {name}: {seconds}"
    )


# --- database safety --------------------------------------------------------------------------

# The issue asks for a minute of lock. What the minute shows is the exporter over repeated lock
# timeouts, so the hold is counted in collections that fail on the lock rather than in seconds
# (each waits out the 0.5 s lock_timeout: twelve take about 8 s on a quiet machine, and the same
# twelve on a loaded one). Raise LOCKED_COLLECTIONS to 90 for the minute.
LOCKED_COLLECTIONS = 12


async def test_access_exclusive_lock_counts_errors_never_exceeds_two_connections_and_recovers(
    env: Env,
) -> None:
    settings = fast_settings(env.dsn, interval=0.2, lock_timeout=0.5)
    async with running(settings) as exporter, SessionSampler(env.admin) as sessions:
        poller = exporter.queues[0].poller
        await poller.wait_for_success()
        async with table_locked(env.admin):
            figure("lock: detection (s)", await wait_until(lambda: not poller.health.up))
            sampled, first = len(sessions.samples), poller.generation
            # /metrics and /healthz keep answering after every collection the lock fails.
            while poller.generation - first < LOCKED_COLLECTIONS:
                await assert_serving(exporter, up=0)
                await poller.wait_for_collections(poller.generation + 1)
            failed = poller.health.errors["lock"] + poller.health.errors["timeout"]
            assert poller.health.errors["lock"] >= 1
            assert failed > LOCKED_COLLECTIONS, poller.health.errors  # every one of them failed
            # Sampled every 0.2 s through collections of at least 0.5 s each: the peak below
            # covers the whole hold.
            assert len(sessions.samples) - sampled >= LOCKED_COLLECTIONS
            await assert_serving(
                exporter,
                up=0,
                until=lambda s: (
                    value(s, "jobqueue_exporter_collection_errors_total", reason="lock") >= 1
                ),
            )
            figure("lock: failed collections while locked", failed)
        released_at = time.monotonic()
        await poller.wait_for_success()
        figure("lock: recovery after release (s)", time.monotonic() - released_at)
        await assert_serving(exporter, up=1)
    figure("lock: peak exporter sessions", sessions.peak)
    assert 1 <= sessions.peak <= 2, sessions.samples
    env.assert_no_password_logged()


async def test_read_only_role_with_the_documented_grants_is_enough_and_writes_nothing(
    env: Env,
) -> None:
    # The fixture revoked PUBLIC's rights and granted exactly what docs/security.md lists.
    await execute(env.admin, "INSERT INTO job (job_type) SELECT 5 FROM generate_series(1, 3)")
    writes = (
        "SELECT n_tup_ins + n_tup_upd + n_tup_del + n_tup_hot_upd FROM pg_stat_user_tables "
        "WHERE relname = 'job'"
    )
    async with running(fast_settings(env.dsn)) as exporter:
        poller = exporter.queues[0].poller
        await poller.wait_for_success()
        # The admin's own inserts are flushed to the statistics by now (its session ended).
        await wait_for_query(env.admin, writes.replace("SELECT", "SELECT 3 <=", 1))
        before = await fetchval(env.admin, writes)
        await poller.wait_for_collections(poller.generation + 10)
        samples = await assert_serving(exporter, up=1)
        assert value(samples, "jobqueue_jobs", job_type="5", status="pending") == 3
        for name in ("job_exporter_active_idx", "job_exporter_updated_at_idx"):
            # The index check reads pg_index/pg_class, which PUBLIC may read.
            assert value(samples, "jobqueue_exporter_missing_index", index=name) == 0
        assert sum(poller.health.errors.values()) == 0, poller.health.errors
    assert await fetchval(env.admin, writes) == before
    role = await asyncpg.connect(env.dsn)
    try:
        for sql in (
            "INSERT INTO job (job_type) VALUES (1)",
            "UPDATE job SET attempts = attempts",
            "DELETE FROM job",
            "CREATE TABLE exporter_was_here (x int)",
        ):
            with pytest.raises(asyncpg.InsufficientPrivilegeError):
                await role.execute(sql)
    finally:
        await role.close()
    env.assert_no_password_logged()


# --- fault injection --------------------------------------------------------------------------


async def test_killed_backend_is_replaced_by_the_next_collection(env: Env) -> None:
    async with running(fast_settings(env.dsn)) as exporter:
        poller = exporter.queues[0].poller
        await poller.wait_for_success()
        pids = {
            r["pid"]
            for r in await fetch_rows(
                env.admin, "SELECT pid FROM pg_stat_activity WHERE application_name = $1"
            )
        }
        assert pids
        killed = await fetchval(
            env.admin,
            "SELECT count(*) FILTER (WHERE pg_terminate_backend(pid)) FROM pg_stat_activity "
            "WHERE application_name = $1",
            APPLICATION_NAME,
        )
        assert killed >= 1
        killed_at = time.monotonic()
        generation = poller.generation
        await wait_until(
            lambda: poller.generation >= generation + 3 and poller.health.up, within=20
        )
        figure("kill: recovery (s)", time.monotonic() - killed_at)
        # A kill that lands between collections costs nothing; one that lands during a
        # collection costs one error, counted as a connection error (test below).
        figure("kill: failed collections", sum(poller.health.errors.values()))
        assert sum(poller.health.errors.values()) <= 1, poller.health.errors
        now = {
            r["pid"]
            for r in await fetch_rows(
                env.admin, "SELECT pid FROM pg_stat_activity WHERE application_name = $1"
            )
        }
        assert now, "no session after recovery"
        assert not now & pids  # new sessions: none of the killed ones came back
        await assert_serving(exporter, up=1)
    env.assert_no_password_logged()


async def fetch_rows(dsn: str, sql: str) -> list[asyncpg.Record]:
    """Rows of a query whose only parameter is the exporter's application_name."""
    conn = await asyncpg.connect(dsn)
    try:
        return list(await conn.fetch(sql, APPLICATION_NAME))
    finally:
        await conn.close()


async def test_black_hole_times_out_at_the_collect_deadline_and_recovers(env: Env) -> None:
    async with TcpProxy(env.cluster.port) as proxy:
        dsn = f"postgresql://{ROLE}:{env.password}@127.0.0.1:{proxy.port}/{DB}"
        # Server-side timeouts cannot fire (the server never sees the query), and asyncpg's
        # command timeout is longer than collect.timeout: only the exporter's deadline can act.
        settings = fast_settings(dsn, timeout=2.0, statement_timeout=5.0)
        async with running(settings) as exporter, SessionSampler(env.admin) as sessions:
            poller = exporter.queues[0].poller
            await poller.wait_for_success()
            before = poller.health.errors["timeout"]
            proxy.blackhole()
            detection = await wait_until(
                lambda: poller.health.errors["timeout"] > before, within=15
            )
            figure("black hole: detection (s)", detection)
            assert detection < 10  # OS TCP timeouts are minutes; collect.timeout is 2 s
            assert poller.health.collection_duration < 4.0
            await assert_serving(exporter, up=0)
            # Keep failing for a while: each attempt is bounded, none piles up.
            await wait_until(lambda: poller.health.errors["timeout"] >= before + 3, within=30)
            await assert_serving(exporter, up=0)
            proxy.restore()
            restored_at = time.monotonic()
            await wait_until(lambda: poller.health.up, within=20)
            figure("black hole: recovery after restore (s)", time.monotonic() - restored_at)
            await assert_serving(exporter, up=1)
            # A connection cut outright is noticed and replaced as well.
            proxy.sever()
            generation = poller.generation
            await wait_until(lambda: poller.generation >= generation + 3 and poller.health.up)
        figure("black hole: peak exporter sessions", sessions.peak)
        assert sessions.peak <= 2, sessions.samples
    env.assert_no_password_logged()


async def test_statement_timeout_cancels_slow_queries_as_timeout_and_recovers(env: Env) -> None:
    # A query blocked on a lock is a slow query to the server: with lock_timeout far above
    # statement_timeout, the statement timeout is what cancels it (pg_sleep is not in our SQL).
    settings = fast_settings(env.dsn, statement_timeout=0.3, lock_timeout=30.0, timeout=5.0)
    async with running(settings) as exporter:
        poller = exporter.queues[0].poller
        await poller.wait_for_success()
        async with table_locked(env.admin):
            detection = await wait_until(lambda: poller.health.errors["timeout"] >= 2)
            figure("statement timeout: detection (s)", detection)
            assert "statement timeout" in (poller.health.last_error or "")
            assert poller.health.collection_duration < 2.0  # 0.3 s, not collect.timeout's 5 s
            await assert_serving(
                exporter,
                up=0,
                until=lambda s: (
                    value(s, "jobqueue_exporter_collection_errors_total", reason="timeout") >= 2
                ),
            )
        released_at = time.monotonic()
        await poller.wait_for_success()
        figure("statement timeout: recovery (s)", time.monotonic() - released_at)
    env.assert_no_password_logged()


async def test_changed_schema_is_named_in_the_error_and_does_not_crash_loop(env: Env) -> None:
    settings = fast_settings(env.dsn, staleness_limit=1.0)
    async with running(settings) as exporter:
        poller = exporter.queues[0].poller
        await poller.wait_for_success()

        # The database comes back from a restart without the table.
        await execute(env.admin, "ALTER TABLE job RENAME TO job_old")
        env.cluster.stop("fast")
        env.cluster.start()
        await wait_until(lambda: poller.health.errors["schema"] >= 1 and not poller.health.up)
        assert '"job" does not exist' in (poller.health.last_error or "")
        await assert_serving(
            exporter,
            up=0,
            until=lambda s: (
                value(s, "jobqueue_exporter_collection_errors_total", reason="schema") >= 1
            ),
        )
        # No crash loop: it keeps collecting at most once per interval-ish, logging once.
        errors, started = poller.health.errors["schema"], time.monotonic()
        await wait_until(lambda: poller.health.errors["schema"] >= errors + 5)
        rate = (poller.health.errors["schema"] - errors) / (time.monotonic() - started)
        assert rate <= 1 / (0.5 * settings.queues[0].collect.interval) + 1, rate
        schema_lines = [
            line for line in env.raw.lines if "collection failed" in line and "schema" in line
        ]
        assert any('"job"' in line for line in schema_lines), schema_lines
        assert len(schema_lines) <= 3, schema_lines  # the same error is logged once, not per cycle

        await execute(env.admin, "ALTER TABLE job_old RENAME TO job")
        recovery = await wait_until(lambda: poller.health.up)
        figure("schema: recovery after the table is back (s)", recovery)

        # A renamed column.
        errors = poller.health.errors["schema"]
        await execute(env.admin, "ALTER TABLE job RENAME COLUMN status TO state")
        await wait_until(lambda: poller.health.errors["schema"] > errors and not poller.health.up)
        assert 'column "status"' in (poller.health.last_error or ""), poller.health.last_error
        assert any(
            'column \\"status\\"' in line or 'column "status"' in line for line in env.raw.lines
        )
        await assert_serving(exporter, up=0)
        await execute(env.admin, "ALTER TABLE job RENAME COLUMN state TO status")
        await wait_until(lambda: poller.health.up)
        await assert_serving(exporter, up=1)
    env.assert_no_password_logged()


async def test_fast_and_immediate_shutdowns_lose_and_double_count_no_transition(env: Env) -> None:
    # As in test_exactness: runs and backoffs longer than a collection interval, so that every
    # failure's message is read before the next attempt overwrites it.
    config = FleetConfig.fast(
        job_types=4, workers=6, enqueue_rate=20.0, duration=(0.3, 0.6), backoff_base=1.0,
        lease_seconds=1.0, operator_interval=0.5, requeue_after=1.0,
    )  # fmt: skip
    # lock_timeout and statement_timeout long: the "during a collection" faults below hold a
    # collection on a lock while the server goes away under it.
    settings = fast_settings(
        env.dsn, interval=0.2, lock_timeout=20.0, statement_timeout=20.0, timeout=25.0
    )
    fleet = Fleet(env.admin, config)
    try:
        await fleet.start()
        await wait_for_completions(fleet, 5)  # history before the exporter starts: not counted
        await fleet.pause()
        async with running(settings) as exporter:
            poller = exporter.queues[0].poller
            await poller.wait_for_success()
            before = fleet.tally.snapshot()
            for mode, during in SHUTDOWNS:
                fleet.resume()
                await wait_for_completions(fleet, 5)
                # The fleet is held so that its own errors cannot spoil the tally; transitions
                # it committed just now are not read yet when the server goes away.
                await fleet.pause()
                if during:
                    async with table_locked(env.admin):
                        await wait_for_query(env.admin, WAITING_ON_LOCK, APPLICATION_NAME)
                        env.cluster.stop(mode)
                else:
                    env.cluster.stop(mode)
                detection = await wait_until(lambda: not poller.health.up, within=20)
                await assert_serving(exporter, up=0)
                env.cluster.start()
                started_at = time.monotonic()
                await wait_until(lambda: poller.health.up, within=30)
                figure(
                    f"restart {mode} {'during' if during else 'between'}: detection (s)",
                    detection,
                )
                figure(
                    f"restart {mode} {'during' if during else 'between'}: recovery after start (s)",
                    time.monotonic() - started_at,
                )
            fleet.resume()
            await wait_for_completions(fleet, 5)
            await fleet.pause()
            for _ in range(3):
                await poller.wait_for_success()
            truth = fleet.tally.since(before)
            assert fleet.errors == 0
            assert sum(truth.completed.values()) > 10
            assert_exact(poller, truth)
            await assert_serving(exporter, up=1)
    finally:
        await fleet.stop()
    env.assert_no_password_logged()


async def test_server_going_away_is_counted_as_a_connection_error(env: Env) -> None:
    settings = fast_settings(env.dsn, lock_timeout=20.0, statement_timeout=20.0, timeout=25.0)
    async with running(settings) as exporter:
        poller = exporter.queues[0].poller
        for mode, during in SHUTDOWNS[:3]:
            await poller.wait_for_success()
            if during:
                async with table_locked(env.admin):
                    await wait_for_query(env.admin, WAITING_ON_LOCK, APPLICATION_NAME)
                    env.cluster.stop(mode)
            else:
                env.cluster.stop(mode)
            await wait_until(lambda: not poller.health.up, within=20)
            env.cluster.start()
            await wait_until(lambda: poller.health.up, within=30)
        # The exporter's session killed in the middle of a collection.
        await poller.wait_for_success()
        async with table_locked(env.admin):
            await wait_for_query(env.admin, WAITING_ON_LOCK, APPLICATION_NAME)
            await execute(
                env.admin,
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE application_name = $1",
                APPLICATION_NAME,
            )
            await wait_until(lambda: not poller.health.up, within=20)
        await wait_until(lambda: poller.health.up, within=30)
        assert set(poller.health.errors) == {"connection"}, poller.health.errors
    env.assert_no_password_logged()


@pytest.mark.daemon
async def test_sigterm_in_the_middle_of_a_collection_exits_quickly_and_closes_connections(
    env: Env, tmp_path: Path
) -> None:
    port = free_port()
    # The DSN goes in the environment, not argv, where every user's `ps` would show it.
    environ = {**os.environ, "JOBQUEUE_EXPORTER_DSN": env.dsn}
    out, err = tmp_path / "stdout", tmp_path / "stderr"
    with out.open("wb") as stdout, err.open("wb") as stderr:
        process = subprocess.Popen(  # noqa: ASYNC220 (started once; nothing else runs yet)
            [
                sys.executable,
                "-m",
                "exporter",
                "--collect.interval=0.2s",
                "--collect.timeout=60s",
                "--collect.lock-timeout=50s",
                "--collect.statement-timeout=50s",
                f"--web.listen-address=127.0.0.1:{port}",
                "--log.level=debug",
            ],
            cwd=ROOT,
            env=environ,
            stdout=stdout,
            stderr=stderr,
        )
    try:
        started = time.monotonic()
        while True:
            try:
                status, body, _ = await get(port, "/metrics")
                if status == 200 and value(parse(body), "jobqueue_up", queue=DB) == 1:
                    break
            except (aiohttp.ClientError, KeyError):
                pass
            assert process.poll() is None, err.read_text()
            assert time.monotonic() - started < 30, "exporter did not come up"
            await asyncio.sleep(0.1)
        async with table_locked(env.admin):
            await wait_for_query(env.admin, WAITING_ON_LOCK, APPLICATION_NAME)
            signalled = time.monotonic()
            process.send_signal(signal.SIGTERM)
            code = await asyncio.to_thread(process.wait, 30)
            exit_time = time.monotonic() - signalled
            figure("SIGTERM mid-collection: exit (s)", exit_time)
            assert code == 0, err.read_text()
            assert exit_time < 5.0
            gone = await wait_for_query(
                env.admin,
                "SELECT count(*) = 0 FROM pg_stat_activity WHERE application_name = $1",
                APPLICATION_NAME,
                within=5.0,
            )
            figure("SIGTERM: sessions gone after exit (s)", gone)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    logs = out.read_text() + err.read_text()
    assert "stopped" in logs
    env.assert_no_password_logged(logs)
