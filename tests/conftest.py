"""Shared fixtures: one PostgreSQL server per session and a fresh queue database per test.

The server is a throwaway :class:`~exporter.demo.cluster.Cluster` (run as the ``postgres``
user when the suite runs as root), or the server named by ``JOBQUEUE_EXPORTER_TEST_DSN``
(a URL whose role may create databases). When neither works the suite fails: it never skips.

Fixtures:
    pg_cluster                  the session's :class:`PgServer` (admin DSN, the Cluster if ours)
    db_dsn                      DSN of a new database with the queue schema and exporter indexes
    schema_dsn_without_indexes  the same without the exporter's indexes
    fresh_cluster               a Cluster of the test's own, to stop/restart freely (always local)
    secret_cluster              a fresh_cluster with a queue database and a password role
    restore_logging             the root logger as it was before the test
Helpers: :func:`execute`, :func:`fetch`, :func:`fetchval`, :func:`dsn_with_database`.

Every cluster the session starts copies one initdb (``shared_template``), and every test that
starts a cluster, a daemon, a browser or a queue library must carry that need's marker
(tests/needs.py); the end of the run lists tests slower than :data:`SLOW_LIMIT` that carry no
tier marker. docs/testing.md describes the tiers.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import uuid
from collections import defaultdict
from collections.abc import AsyncIterator, Generator, Iterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, urlsplit, urlunsplit

import asyncpg
import hypothesis
import pytest

from exporter.demo.cluster import Cluster, ClusterError, shared_template
from exporter.demo.queue import prepare_database
from tests import needs

TEST_DSN_VARIABLE = "JOBQUEUE_EXPORTER_TEST_DSN"

# CI explores a fixed set of examples, so a red run is reproducible and never a dice roll;
# developers' runs keep exploring new ones (and hypothesis remembers what failed). Neither has
# a per-example deadline: these tests check results, not speed, and on 2 busy cores the
# default 200 ms failed parsers that were merely descheduled.
hypothesis.settings.register_profile("ci", derandomize=True, deadline=None)
hypothesis.settings.register_profile("dev", deadline=None)
hypothesis.settings.load_profile("ci" if os.environ.get("CI") else "dev")

# A test without a tier marker that takes longer than this is named at the end of the run:
# the fast tier (about 800 such tests) has to answer in two minutes.
SLOW_LIMIT = 5.0
FAST_DIRECTORIES = ("tests/unit/", "tests/db/", "tests/artefacts/")

_session = contextlib.ExitStack()


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--unmarked-needs",
        choices=("fail", "report"),
        default="fail",
        help="a test that starts a cluster, daemon, browser or queue library without its "
        "marker: fail it (default), or list it at the end (tests/needs.py)",
    )


def pytest_configure(config: pytest.Config) -> None:
    needs.install(report_only=config.getoption("unmarked_needs") == "report")


def pytest_sessionstart(session: pytest.Session) -> None:
    # One initdb for the session (per xdist worker): every Cluster() copies it.
    _session.enter_context(shared_template())


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    _session.close()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Generator[None]:
    needs.CHECK.current = item
    try:
        yield
    finally:
        needs.CHECK.current = None


def pytest_terminal_summary(terminalreporter: Any) -> None:
    """Name the unmarked needs (with --unmarked-needs=report) and the slow unmarked tests."""
    seconds: defaultdict[str, float] = defaultdict(float)
    unmarked: set[str] = set()
    missing: set[str] = set()
    for reports in terminalreporter.stats.values():
        for report in reports:
            if not isinstance(report, pytest.TestReport):
                continue
            if report.when == "call":  # setup may carry the session's cluster start
                seconds[report.nodeid] += report.duration
            if report.nodeid.startswith(FAST_DIRECTORIES) and not (
                set(report.keywords) & set(needs.TIER_MARKERS)
            ):
                unmarked.add(report.nodeid)
            missing |= {text for name, text in report.user_properties if name == "unmarked-need"}
    if missing:
        terminalreporter.section("tests that need a marker they do not carry")
        for text in sorted(missing):
            terminalreporter.write_line(text)
    slow = sorted(
        ((seconds[nodeid], nodeid) for nodeid in unmarked if seconds[nodeid] > SLOW_LIMIT),
        reverse=True,
    )
    if slow:
        terminalreporter.section(f"fast-tier tests over {SLOW_LIMIT:g}s")
        terminalreporter.write_line(
            "they carry no tier marker: make them faster or mark them (docs/testing.md)"
        )
        for duration, nodeid in slow:
            terminalreporter.write_line(f"{duration:6.1f}s {nodeid}")


@dataclass
class PgServer:
    """The session's PostgreSQL server: an admin DSN, and the Cluster when the suite started it."""

    admin_dsn: str
    cluster: Cluster | None

    def dsn(self, dbname: str) -> str:
        """The admin DSN pointed at another database."""
        return dsn_with_database(self.admin_dsn, dbname)


def dsn_with_database(dsn: str, dbname: str) -> str:
    """Replace the database of a postgresql:// URL."""
    parts = urlsplit(dsn)
    if parts.scheme not in ("postgres", "postgresql"):
        raise ValueError(f"{TEST_DSN_VARIABLE} must be a postgresql:// URL")
    return urlunsplit(parts._replace(path="/" + quote(dbname, safe="")))


async def execute(dsn: str, sql: str, *args: Any) -> str:
    """Run one statement on a short-lived connection and return its status tag."""
    conn = await asyncpg.connect(dsn)
    try:
        return str(await conn.execute(sql, *args))
    finally:
        await conn.close()


async def fetch(dsn: str, sql: str, *args: Any) -> list[asyncpg.Record]:
    """Run one query on a short-lived connection and return its rows."""
    conn = await asyncpg.connect(dsn)
    try:
        return list(await conn.fetch(sql, *args))
    finally:
        await conn.close()


async def fetchval(dsn: str, sql: str, *args: Any) -> Any:
    """Run one query on a short-lived connection and return the first column of its first row."""
    conn = await asyncpg.connect(dsn)
    try:
        return await conn.fetchval(sql, *args)
    finally:
        await conn.close()


@pytest.fixture(scope="session")
def pg_cluster() -> Iterator[PgServer]:
    """One PostgreSQL server for the whole session; fails loudly when none can be had."""
    external = os.environ.get(TEST_DSN_VARIABLE)
    if external:
        yield PgServer(admin_dsn=external, cluster=None)
        return
    try:
        cluster = Cluster()
        needs.CHECK.exempt.append(cluster.data_dir)  # the session's own: no test's need
        cluster.start()
    except ClusterError as exc:
        pytest.fail(f"no PostgreSQL for the tests: {exc} (or set {TEST_DSN_VARIABLE})")
    try:
        yield PgServer(admin_dsn=cluster.dsn(), cluster=cluster)
    finally:
        cluster.destroy()


@pytest.fixture(scope="session")
async def _templates(pg_cluster: PgServer) -> AsyncIterator[dict[bool, str]]:
    """Two template databases (with and without the exporter's indexes), made once per session."""
    tag = uuid.uuid4().hex[:8]
    names = {True: f"jqe_template_{tag}", False: f"jqe_template_noidx_{tag}"}
    try:
        for with_indexes, name in names.items():
            await execute(pg_cluster.admin_dsn, f'CREATE DATABASE "{name}"')
            await prepare_database(pg_cluster.dsn(name), exporter_indexes=with_indexes)
    except (OSError, asyncpg.PostgresError) as exc:
        pytest.fail(f"cannot prepare test databases on {pg_cluster.admin_dsn!r}: {exc}")
    yield names
    for name in names.values():
        await execute(pg_cluster.admin_dsn, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


async def _database_from(pg_cluster: PgServer, template: str) -> AsyncIterator[str]:
    name = f"jqe_test_{uuid.uuid4().hex[:12]}"
    await execute(pg_cluster.admin_dsn, f'CREATE DATABASE "{name}" TEMPLATE "{template}"')
    try:
        yield pg_cluster.dsn(name)
    finally:
        # FORCE: a test that leaked a pool must not leak its database too.
        await execute(pg_cluster.admin_dsn, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture
async def db_dsn(pg_cluster: PgServer, _templates: dict[bool, str]) -> AsyncIterator[str]:
    """A new database holding the empty job table, its indexes and the exporter's indexes."""
    async for dsn in _database_from(pg_cluster, _templates[True]):
        yield dsn


@pytest.fixture
async def schema_dsn_without_indexes(
    pg_cluster: PgServer, _templates: dict[bool, str]
) -> AsyncIterator[str]:
    """A new database with the job table and the queue's indexes but not the exporter's."""
    async for dsn in _database_from(pg_cluster, _templates[False]):
        yield dsn


@pytest.fixture
def fresh_cluster() -> Iterator[Cluster]:
    """A started Cluster owned by this test alone (stop, crash or restart it at will)."""
    try:
        cluster = Cluster()
    except ClusterError as exc:
        pytest.fail(str(exc))
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.destroy()


@pytest.fixture
def secret_cluster(fresh_cluster: Cluster) -> tuple[Cluster, str, str]:
    """A cluster with a queue database and a password-protected, SELECT-only role."""
    password = "pw-" + uuid.uuid4().hex
    fresh_cluster.create_database("queue")
    asyncio.run(prepare_database(fresh_cluster.dsn("queue")))
    fresh_cluster.create_role("watcher", password)
    fresh_cluster.psql("GRANT SELECT ON job TO watcher", dbname="queue")
    return fresh_cluster, fresh_cluster.dsn("queue", user="watcher", password=password), password


@pytest.fixture
def restore_logging() -> Iterator[None]:
    """Put the root logger's handlers and level back after a test that sets up logging."""
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    root.handlers[:] = handlers
    root.setLevel(level)


# The session's wal_level=logical cluster and its published queue databases (tests/db and
# tests/system share them): logical_server, logical_db.
pytest_plugins = ("tests.logical_cluster",)
