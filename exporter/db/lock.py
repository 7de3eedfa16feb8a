"""The session that holds a queue's advisory lock (leader election's database side)."""

from __future__ import annotations

import asyncio
from typing import Any

import asyncpg

from exporter.db.pool import APPLICATION_NAME, ConnectOptions, DatabaseError, translate

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
