"""The database side: the SQL, the asyncpg pool, read-only transactions and timeouts.

Only this package imports asyncpg (``presets`` runs a preset reader's cycle). Its errors are
translated here into ``DatabaseError`` with a short reason (timeout, lock, connection, query,
schema, permission), so callers never see asyncpg's exception tree and no message carries the
DSN.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from importlib import resources
from typing import Any

import asyncpg

from exporter.model import ActiveStats, JobRow, Snapshot
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

    async def read(
        self,
        *,
        since: float | None,
        stuck_threshold: float,
        done_count: bool,
        count_dead: bool = True,
        baseline_window: float = 0.0,
        check_ids: list[str] | None = None,
    ) -> Reading:
        """Run one collection's queries in a REPEATABLE READ, READ ONLY transaction.

        ``since`` None means a baseline: every active row, and the rows changed in the last
        ``baseline_window`` seconds.
        """
        pool = await self._get_pool()
        durations: dict[str, float] = {}
        try:
            conn = await pool.acquire()
        except Exception as exc:
            raise translate(exc) from None
        broken = False
        try:
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
                if since is None:
                    # The baseline also keeps the rows changed within the tolerance window
                    # (jobs that just died among them), so a requeue of one is recognised.
                    active = [_job_row(r) for r in await timed("active")]
                    changed = [_job_row(r) for r in await timed("changes", now - baseline_window)]
                else:
                    active = None
                    changed = [_job_row(r) for r in await timed("changes", since)]
                existing = None
                if check_ids:
                    existing = {r["job_id"] for r in await timed("existing", check_ids)}
        except asyncio.CancelledError:
            # A cancelled query may leave the socket mid-protocol: never hand it back.
            broken = True
            raise
        except Exception as exc:
            broken = True
            raise translate(exc) from None
        finally:
            if broken:
                # When the server went away the pool may already have detached the connection.
                with contextlib.suppress(asyncpg.InterfaceError):
                    conn.terminate()
            await pool.release(conn)
        snapshot = Snapshot(
            taken_at=now,
            active={r["job_type"]: _active_stats(r) for r in active_rows},
            dead={r["job_type"]: r["jobs"] for r in dead_rows} if dead_rows is not None else None,
            done={r["job_type"]: r["jobs"] for r in done_rows} if done_rows is not None else None,
        )
        return Reading(snapshot, changed, active, existing, durations)

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


def _job_row(r: Any) -> JobRow:
    return JobRow(
        job_id=r["job_id"],
        job_type=r["job_type"],
        status=r["status"],
        attempts=r["attempts"],
        max_attempts=r["max_attempts"],
        last_error=r["last_error"],
        result=r["result"],
        run_after=r["run_after"],
        run_started_at=r["run_started_at"],
        created_at=r["created_at"],
        updated_at=r["updated_at"],
        wait_seconds=r["wait_seconds"],
        latency_seconds=r["latency_seconds"],
    )


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
        return DatabaseError("connection", f"authentication failed: {exc}")
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


# 'JQEX': the first key of the two-int advisory lock, so ours never collides with locks the
# queue's own code takes; the second key is the queue table's OID (unique in its database).
LOCK_CLASS = 0x4A514558
# The server notices a dead peer within about 5 + 2 * 3 = 11 s and ends its session, which
# frees the lock for a standby even when the holder's network went silent rather than closed.
_KEEPALIVE = {
    "tcp_keepalives_idle": "5",
    "tcp_keepalives_interval": "2",
    "tcp_keepalives_count": "3",
}
_HOLDS = """
SELECT EXISTS (
    SELECT 1 FROM pg_locks
    WHERE locktype = 'advisory' AND granted AND pid = pg_backend_pid()
      AND database = (SELECT oid FROM pg_database WHERE datname = current_database())
      AND classid = $1::oid AND objid = $2::oid AND objsubid = 2
)
"""


class LockSession:
    """A session of its own that takes the queue's advisory lock and holds it while it lives.

    PostgreSQL frees a session-level advisory lock when the session ends (process killed,
    connection cut, server restarted), so whoever holds it is the one live collector of the
    queue. Only ``pg_try_advisory_lock`` is used: a standby never waits on a lock.
    """

    def __init__(self, options: ConnectOptions) -> None:
        self.options = options
        self._conn: Any = None
        self._key: int | None = None
        self._busy = asyncio.Lock()  # the election loop and the collection guard share it

    async def try_acquire(self) -> bool:
        """Take the lock if it is free; True when this session holds it. DatabaseError if the
        database cannot be reached or the table does not exist."""
        async with self._busy:
            try:
                async with asyncio.timeout(
                    self.options.connect_timeout + self.options.statement_timeout
                ):
                    conn = await self._connection()
                    if self._key is None:
                        oid = await conn.fetchval(
                            "SELECT to_regclass($1)::oid::int4", self.options.table
                        )
                        if oid is None:
                            raise DatabaseError(
                                "schema", f"table {self.options.table} does not exist"
                            )
                        self._key = int(oid)
                    return bool(
                        await conn.fetchval(
                            "SELECT pg_try_advisory_lock($1, $2)", LOCK_CLASS, self._key
                        )
                    )
            except Exception as exc:
                await self._drop()
                raise translate(exc) from None

    async def ping(self) -> None:
        """Reach the database without taking the lock; DatabaseError when it cannot."""
        async with self._busy:
            try:
                async with asyncio.timeout(
                    self.options.connect_timeout + self.options.statement_timeout
                ):
                    await (await self._connection()).fetchval("SELECT 1")
            except Exception as exc:
                await self._drop()
                raise translate(exc) from None

    async def holds(self) -> bool:
        """True when this session is alive and holds the lock; False (and the session closed)
        on any doubt, so a holder that cannot prove it steps down."""
        async with self._busy:
            if self._conn is None or self._key is None:
                return False
            try:
                async with asyncio.timeout(self.options.statement_timeout):
                    held = bool(await self._conn.fetchval(_HOLDS, LOCK_CLASS, self._key))
            except Exception:
                held = False
            if not held:
                await self._drop()
            return held

    async def close(self) -> None:
        """Release the lock by ending the session."""
        async with self._busy:
            await self._drop()

    async def _connection(self) -> Any:
        if self._conn is None or self._conn.is_closed():
            opts = self.options
            self._conn = await asyncpg.connect(
                dsn=opts.dsn,
                timeout=opts.connect_timeout,
                server_settings={
                    "application_name": APPLICATION_NAME,
                    "statement_timeout": str(int(opts.statement_timeout * 1000)),
                    "default_transaction_read_only": "on",
                    **_KEEPALIVE,
                },
            )
        return self._conn

    async def _drop(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            try:
                await asyncio.wait_for(conn.close(), 2.0)
            except Exception:
                conn.terminate()
