"""The asyncpg pool: the SQL, one collection's read-only transaction, timeouts, translation.

Errors are translated here into ``DatabaseError`` with a short reason (timeout, lock,
connection, query, schema, permission), so callers never see asyncpg's exception tree and no
message carries the DSN.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import time
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field
from importlib import resources
from typing import Any

import asyncpg

from exporter.counting.changefeed import ChangeFeed, Horizon
from exporter.model import ActiveStats, Figures, JobRow, Snapshot
from exporter.vocabulary import REQUIRED_INDEXES

APPLICATION_NAME = "jobqueue-exporter"


class DatabaseError(Exception):
    """A collection failed; ``reason`` is the label of jobqueue_exporter_collection_errors_total."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


def load_queries(table: str) -> dict[str, str]:
    """Read the named SQL blocks of queries.sql, with the table name filled in."""
    text = resources.files("exporter").joinpath("sql/queries.sql").read_text(encoding="utf-8")
    blocks: dict[str, str] = {}
    for chunk in re.split(r"^-- name: ", text, flags=re.MULTILINE)[1:]:
        name, _, body = chunk.partition("\n")
        blocks[name.strip()] = body.replace("{table}", quote_table(table)).strip()
    return blocks


def quote_table(table: str) -> str:
    """Quote a possibly schema-qualified table name as SQL identifiers."""
    return ".".join('"' + part.replace('"', '""') + '"' for part in table.split("."))


@dataclass
class Reading:
    """Everything one collection read, in one consistent snapshot of the database."""

    snapshot: Snapshot
    changed: list[JobRow]
    active: list[JobRow] | None  # only for a baseline
    existing: set[str] | None  # answer to the purge check, when asked
    durations: dict[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class ConnectOptions:
    """How to reach the database and the guard rails every session gets."""

    dsn: str
    table: str = "job"
    max_connections: int = 2
    connect_timeout: float = 5.0
    statement_timeout: float = 5.0
    lock_timeout: float = 1.0


class Database:
    """A small pool of read-only sessions to the queue's database."""

    def __init__(self, options: ConnectOptions) -> None:
        self.options = options
        self.queries = load_queries(options.table)
        self._pool: Any = None

    async def _get_pool(self) -> Any:
        if self._pool is None:
            opts = self.options
            try:
                # min_size=0: the exporter starts (and serves /metrics) with the database down.
                self._pool = await asyncpg.create_pool(
                    dsn=opts.dsn,
                    min_size=0,
                    max_size=opts.max_connections,
                    timeout=opts.connect_timeout,
                    command_timeout=opts.statement_timeout + opts.connect_timeout,
                    max_inactive_connection_lifetime=300.0,
                    server_settings={
                        "application_name": APPLICATION_NAME,
                        "statement_timeout": str(int(opts.statement_timeout * 1000)),
                        "lock_timeout": str(int(opts.lock_timeout * 1000)),
                        "idle_in_transaction_session_timeout": str(
                            int((opts.statement_timeout + opts.connect_timeout) * 2000)
                        ),
                        "default_transaction_read_only": "on",
                    },
                )
            except Exception as exc:
                raise translate(exc) from None
        return self._pool

    @contextlib.asynccontextmanager
    async def session(self) -> AsyncIterator[Any]:
        """A pooled connection; one left by an error or a cancellation is never handed back (it
        may be mid-protocol, its server gone). Errors of the body pass through as they are."""
        pool = await self._get_pool()
        try:
            conn = await pool.acquire()
        except Exception as exc:
            raise translate(exc) from None
        healthy = False
        try:
            yield conn
            healthy = True
        finally:
            if not healthy:
                # When the server went away the pool may already have detached the connection.
                with contextlib.suppress(asyncpg.InterfaceError):
                    conn.terminate()
            await pool.release(conn)

    async def read(
        self,
        *,
        since: float | None,
        stuck_threshold: float,
        done_count: bool,
        count_dead: bool = True,
        baseline_window: float = 0.0,
        check_ids: list[str] | None = None,
        feed: ChangeFeed | None = None,
        consume: Callable[[list[JobRow]], None] | None = None,
        budget: float = float("inf"),
        paths: tuple[tuple[str, ...], ...] = (),
    ) -> Reading:
        """Run one collection's queries in a REPEATABLE READ, READ ONLY transaction.

        Without ``feed``: ``since`` None means a baseline (every active row, and the rows
        changed in the last ``baseline_window`` seconds), else the rows changed after ``since``.
        With ``feed``: the horizon is read first, in autocommit; a feed that has not started
        yet makes this a baseline (active rows only), else the changes past the cursor are
        read in chunks of ``feed.max_rows``, each handed to ``consume`` at once, until the
        bound is reached or ``budget`` seconds of reading are spent. ``paths``: where the
        duration and the three costs are in ``result`` (pulled out in SQL).
        """
        durations: dict[str, float] = {}
        try:
            async with self.session() as conn:
                baseline = since is None
                if feed is not None:
                    baseline = not feed.started
                    # Autocommit, before the snapshot: see exporter/counting/changefeed.py for why.
                    started = time.perf_counter()
                    feed.plan(Horizon.from_row(await conn.fetchrow(self.queries["horizon"])))
                    durations["horizon"] = time.perf_counter() - started
                async with conn.transaction(isolation="repeatable_read", readonly=True):

                    async def timed(name: str, *args: object) -> list[Any]:
                        started = time.perf_counter()
                        rows: list[Any] = await conn.fetch(self.queries[name], *args)
                        durations[name] = time.perf_counter() - started
                        return rows

                    now = (await timed("now"))[0][0]
                    active_rows = await timed("snapshot", stuck_threshold)
                    dead_rows = await timed("dead") if count_dead else None
                    done_rows = await timed("done") if done_count else None
                    changed: list[JobRow] = []
                    if baseline:
                        active = [_with_result(r) for r in await timed("active")]
                        if feed is None:
                            # The baseline also keeps the rows changed within the tolerance window
                            # (jobs that just died among them), so a requeue of one is recognised.
                            window = await timed("changes", now - baseline_window)
                            changed = [_with_result(r) for r in window]
                    else:
                        active = None
                        if feed is None:
                            changed = [_with_result(r) for r in await timed("changes", since)]
                    if feed is not None and not baseline:
                        await self._read_chunks(conn, feed, consume, budget, paths, durations)
                    existing = None
                    if check_ids:
                        existing = {r["job_id"] for r in await timed("existing", check_ids)}
        except Exception as exc:
            raise translate(exc) from None
        snapshot = Snapshot(
            taken_at=now,
            active={r["job_type"]: _active_stats(r) for r in active_rows},
            dead={r["job_type"]: r["jobs"] for r in dead_rows} if dead_rows is not None else None,
            done={r["job_type"]: r["jobs"] for r in done_rows} if done_rows is not None else None,
        )
        return Reading(snapshot, changed, active, existing, durations)

    async def _read_chunks(
        self,
        conn: Any,
        feed: ChangeFeed,
        consume: Callable[[list[JobRow]], None] | None,
        budget: float,
        paths: tuple[tuple[str, ...], ...],
        durations: dict[str, float],
    ) -> None:
        started = time.perf_counter()
        slowest = 0.0
        query = self.queries["changes_after"]
        path_args = [list(p) for p in paths]
        while (bounds := feed.chunk()) is not None:
            chunk_started = time.perf_counter()
            rows = await conn.fetch(query, *bounds, *path_args)
            slowest = max(slowest, time.perf_counter() - chunk_started)
            if consume is not None:
                consume([_changed_row(r) for r in rows])
            more = feed.took([(r["updated_key"], r["job_id"]) for r in rows])
            if not more or time.perf_counter() - started >= budget:
                break
        # The slowest chunk: what the statement timeout must stay well above.
        durations["changes_after"] = slowest

    async def missing_indexes(self, required: Sequence[str] = REQUIRED_INDEXES) -> list[str]:
        """Names of the ``required`` indexes that do not exist; raises if the table is missing."""
        pool = await self._get_pool()
        try:
            async with pool.acquire() as conn:
                row = await conn.fetchrow(self.queries["indexes"], self.options.table)
        except Exception as exc:
            raise translate(exc) from None
        if not row["table_exists"]:
            raise DatabaseError("schema", f"table {self.options.table} does not exist")
        names = set(row["names"])
        return [name for name in required if name not in names]

    async def connections(self) -> int:
        """Connections the pool holds now (for tests and the footprint benchmark)."""
        if self._pool is None:
            return 0
        return int(self._pool.get_size())

    async def close(self, grace: float = 5.0) -> None:
        """Close every connection; terminate those that do not close in time."""
        if self._pool is None:
            return
        pool, self._pool = self._pool, None
        try:
            await asyncio.wait_for(pool.close(), grace)
        except (TimeoutError, Exception):
            pool.terminate()


def _job_row(r: Any, *, result: str | None = None, figures: Figures | None = None) -> JobRow:
    return JobRow(
        job_id=r["job_id"],
        job_type=r["job_type"],
        status=r["status"],
        attempts=r["attempts"],
        max_attempts=r["max_attempts"],
        last_error=r["last_error"],
        result=result,
        run_after=r["run_after"],
        run_started_at=r["run_started_at"],
        created_at=r["created_at"],
        updated_at=r["updated_at"],
        wait_seconds=r["wait_seconds"],
        latency_seconds=r["latency_seconds"],
        figures=figures,
    )


def _with_result(r: Any) -> JobRow:
    """A row of ``changes`` or ``active``: the whole ``result`` document, as text."""
    return _job_row(r, result=r["result"])


def _changed_row(r: Any) -> JobRow:
    """A row of ``changes_after``: the numbers in ``result`` come already pulled out in SQL."""
    if r["status"] != 3:
        return _job_row(r)
    figures = Figures(
        r["result_kind"], r["duration_ms"], r["ai_usd"], r["proxy_usd"], r["total_usd"]
    )
    return _job_row(r, figures=figures)


def _active_stats(r: Any) -> ActiveStats:
    return ActiveStats(
        pending=r["pending"],
        running=r["running"],
        scheduled=r["scheduled"],
        oldest_pending_age=max(0.0, r["oldest_pending_age"]),
        oldest_ready_wait=max(0.0, r["oldest_ready_wait"]),
        stuck_lease_expired=r["stuck_lease_expired"],
        stuck_overrun=r["stuck_overrun"],
        lease_expired_oldest=max(0.0, r["lease_expired_oldest"]),
        running_oldest=max(0.0, r["running_oldest"]),
    )


def translate(exc: BaseException) -> DatabaseError:
    """Map asyncpg and socket errors to a DatabaseError with a reason and a password-free text."""
    if isinstance(exc, DatabaseError):
        return exc
    if isinstance(exc, asyncpg.QueryCanceledError):
        return DatabaseError("timeout", f"statement timeout: {exc}")
    if isinstance(exc, asyncpg.LockNotAvailableError):
        return DatabaseError("lock", f"lock timeout: {exc}")
    if isinstance(exc, asyncpg.UndefinedTableError | asyncpg.UndefinedColumnError):
        return DatabaseError("schema", f"schema mismatch: {exc}")
    if isinstance(exc, asyncpg.InsufficientPrivilegeError):
        return DatabaseError("permission", f"permission denied: {exc}")
    if isinstance(
        exc, asyncpg.InvalidAuthorizationSpecificationError | asyncpg.InvalidPasswordError
    ):
        # An unknown role lands here too (SQLSTATE 28000): the server refused the login.
        return DatabaseError("connection", f"authentication failed: {exc}")
    if isinstance(exc, asyncpg.InvalidCatalogNameError):
        # The DSN names a database the server does not have: the connection is what failed,
        # and "query" would send the operator to the SQL instead of the DSN.
        return DatabaseError("connection", f"connection failed: {exc}")
    if isinstance(exc, TimeoutError):
        return DatabaseError("timeout", "timed out waiting for the database")
    if isinstance(
        exc,
        OSError
        | ConnectionError
        | asyncpg.PostgresConnectionError
        | asyncpg.InterfaceError
        | asyncpg.InternalClientError
        | asyncpg.CannotConnectNowError
        | asyncpg.AdminShutdownError,
    ):
        return DatabaseError("connection", f"connection failed: {type(exc).__name__}: {exc}")
    if isinstance(exc, asyncpg.PostgresError):
        return DatabaseError("query", f"query failed: {type(exc).__name__}: {exc}")
    return DatabaseError("query", f"unexpected error: {type(exc).__name__}: {exc}")
