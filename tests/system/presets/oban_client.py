"""Oban Python 0.7's own query files, called the way ``oban/_query.py`` and
``oban/_executor.py`` call them.

Oban Python needs Python >= 3.12 (its ``job.py`` uses the ``type`` statement), so its modules
cannot be imported here; its SQL is the part that touches the database, and this runs that SQL
verbatim from the unpacked wheel (scripts/presets-install), over psycopg 3 and a
psycopg_pool pool as the library does, with the same parameters, casts and transactions.
"""

from __future__ import annotations

import re
import traceback
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import cache
from typing import Any

import pytest
from psycopg.rows import dict_row
from psycopg.types.json import Jsonb
from psycopg_pool import AsyncConnectionPool

from tests.needs import need
from tests.system.presets.processes import PRESETS_DIR

VERSION = "0.7.0"
QUERIES = PRESETS_DIR / f"oban-{VERSION}" / "oban" / "queries"
# oban/_query.py: the fields each statement takes, and which are JSON.
INSERTABLE_FIELDS = ("args", "inserted_at", "max_attempts", "meta", "priority", "queue",
                     "scheduled_at", "state", "tags", "worker")  # fmt: skip
ACKABLE_FIELDS = ("id", "attempted_at", "state", "attempt_change", "schedule_in", "error", "meta")
JSON_FIELDS = ("args", "error", "errors", "meta")
TIMESTAMP_FIELDS = ("inserted_at", "attempted_at", "cancelled_at", "completed_at",
                    "discarded_at", "scheduled_at")  # fmt: skip


def require_oban() -> None:
    """Fail (never skip) when the unpacked Oban wheel is missing, saying how to get it."""
    need("library", "the Oban wheel's query files (.presets/)")
    if not (QUERIES / "install.sql").is_file():
        pytest.fail(f"oban {VERSION} is not unpacked in {QUERIES.parents[1]}; "
                    "run: scripts/presets-install")  # fmt: skip


@cache
def load(name: str, prefix: str = "public") -> str:
    """A query file as ``Query._load_file`` prepares it: the table names schema-qualified."""
    sql = (QUERIES / name).read_text(encoding="utf-8")
    return re.sub(
        r"\b(oban_insert|oban_job_state|oban_jobs|oban_leaders|oban_producers|oban_state_to_bit)\b",
        rf"{prefix}.\1",
        sql,
    )


def cast(field: str, value: Any) -> Any:
    """``Query._cast_type``: JSON fields wrapped, timestamps written as naive UTC."""
    if field in JSON_FIELDS and value is not None:
        return Jsonb(value)
    if field in TIMESTAMP_FIELDS and value is not None:
        return value.astimezone(UTC).replace(tzinfo=None)
    return value


@dataclass(frozen=True)
class Ack:
    """``oban._executor.AckAction``: how one attempt ended."""

    job: dict[str, Any]
    state: str
    attempt_change: int | None = None
    error: dict[str, Any] | None = None
    meta: dict[str, Any] | None = None
    schedule_in: int | None = None

    def args(self) -> dict[str, Any]:
        """The parameters of ack_job.sql, as ``_ack_jobs`` builds them."""
        values = {"id": self.job["id"], "attempted_at": self.job["attempted_at"]}
        values.update(state=self.state, attempt_change=self.attempt_change,
                      schedule_in=self.schedule_in, error=self.error, meta=self.meta)  # fmt: skip
        return {field: cast(field, values[field]) for field in ACKABLE_FIELDS}


def error_entry(job: dict[str, Any], error: BaseException | str) -> dict[str, Any]:
    """``Executor._format_error``: the traceback when there is one, else the reason."""
    text = error if isinstance(error, str) else traceback.format_exc()
    return {"attempt": job["attempt"], "at": datetime.now(UTC).isoformat(), "error": text}


async def insert_on(conn: Any, worker: str, **fields: Any) -> int:
    """insert_job.sql on a given connection (inside the caller's transaction, if any)."""
    job = {"args": {}, "inserted_at": None, "max_attempts": 20, "meta": {}, "priority": 0,
           "queue": "default", "scheduled_at": None, "state": "available", "tags": [],
           "worker": worker, **fields}  # fmt: skip
    cursor = await conn.execute(
        load("insert_job.sql"), {key: cast(key, job[key]) for key in INSERTABLE_FIELDS}
    )
    row = await cursor.fetchone()
    assert row is not None
    return int(row["id"] if isinstance(row, dict) else row[0])


class ObanClient:
    """The statements of ``oban._query.Query`` over a psycopg pool."""

    def __init__(self, dsn: str) -> None:
        self.pool = AsyncConnectionPool(dsn, min_size=1, max_size=4, open=False)

    async def __aenter__(self) -> ObanClient:
        await self.pool.open()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.pool.close()

    async def install(self) -> None:
        """``oban install``: the library's own install.sql."""
        async with self.pool.connection() as conn:
            await conn.execute(load("install.sql"))  # type: ignore[arg-type]

    async def insert(self, worker: str, **fields: Any) -> int:
        """``Query.insert_jobs`` for one job, with ``Job``'s defaults."""
        async with self.pool.connection() as conn:
            return await insert_on(conn, worker, **fields)

    async def fetch(self, queue: str, demand: int, node: str, uuid: str) -> list[dict[str, Any]]:
        """``Query.fetch_jobs``: claim available jobs (state executing, attempt + 1)."""
        async with (
            self.pool.connection() as conn,
            conn.transaction(),
            conn.cursor(row_factory=dict_row) as cur,
        ):
            await cur.execute(
                load("fetch_jobs.sql"),  # type: ignore[arg-type]
                {"queue": queue, "demand": demand, "attempted_by": [node, uuid]},
            )
            return await cur.fetchall()

    async def ack(self, acks: Sequence[Ack]) -> list[int]:
        """``Query.ack_jobs``: record how each attempt ended, in one transaction."""
        acked = []
        async with self.pool.connection() as conn, conn.transaction():
            for ack in acks:
                cursor = await conn.execute(load("ack_job.sql"), ack.args())  # type: ignore[arg-type]
                row = await cursor.fetchone()
                if row:
                    acked.append(int(row[0]))
        return acked

    async def _rowcount(self, name: str, args: dict[str, Any]) -> int:
        async with self.pool.connection() as conn, conn.transaction():
            cursor = await conn.execute(load(name), args)  # type: ignore[arg-type]
            return cursor.rowcount

    async def stage(self, limit: int, queues: list[str]) -> None:
        """``Query.stage_jobs`` (the Stager): due scheduled and retryable jobs to available."""
        async with self.pool.connection() as conn, conn.transaction():
            await conn.execute(
                load("stage_jobs.sql"),  # type: ignore[arg-type]
                {"limit": limit, "queues": queues, "before": None},
            )

    async def rescue(self, rescue_after: float) -> int:
        """``Query.rescue_jobs`` (the Lifeline): orphaned executing jobs back, or discarded."""
        return await self._rowcount("rescue_jobs.sql", {"rescue_after": rescue_after})

    async def retry(self, ids: list[int]) -> int:
        """``Oban.retry_many_jobs``: finished (or waiting) jobs back to available, by hand."""
        return await self._rowcount("retry_many_jobs.sql", {"ids": ids})

    async def cancel(self, ids: list[int]) -> int:
        """``Oban.cancel_many_jobs``: jobs not yet running become cancelled at once."""
        async with self.pool.connection() as conn, conn.transaction():
            cursor = await conn.execute(load("cancel_many_jobs.sql"), {"ids": ids})  # type: ignore[arg-type]
            return len(await cursor.fetchall())
