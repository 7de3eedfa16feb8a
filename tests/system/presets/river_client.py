"""River's own SQL, run the way its Go client, workers and leader run it, and its Python client.

River is a Go library, so its workers cannot run here; what touches the database is its sqlc
queries, and river_sql/ holds them verbatim (riverqueue/river @ fdf6cdf, migration line main
001-007, with the callers, parameters and transactions of each). This module applies the
conversion the Go driver makes (the schema template emptied, ``@name`` and
``sqlc.narg('name')`` bound by name, ``sqlc.embed(river_job)`` as ``river_job.*``) and runs each
statement with the parameters and transaction its caller uses. Inserts also go through River's
official Python client, ``riverqueue`` 0.7.0 from PyPI (the presets extra), which is real code.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from functools import cache
from pathlib import Path
from typing import Any

import pytest
from psycopg.rows import dict_row
from psycopg_pool import AsyncConnectionPool

SQL_DIR = Path(__file__).parent / "river_sql"
RESCUE_ERROR = "Stuck job rescued by JobRescuer"  # JobRescuer's own error text
SCHEDULER_INTERVAL = 5.0  # JobScheduler's interval: the executor's "near retry" threshold too


def require_riverqueue() -> None:
    """Fail (never skip) when River's Python client is missing, saying how to get it."""
    try:
        import riverqueue  # noqa: F401
        import sqlalchemy.ext.asyncio  # noqa: F401
    except ImportError as error:
        pytest.fail(f"riverqueue is not installed ({error}); run: pip install -e '.[presets]'")


@cache
def queries() -> dict[str, str]:
    """River's sqlc queries (section 1-7: the Go client's), ready for psycopg's named style."""
    text = (SQL_DIR / "river_queries.sql").read_text(encoding="utf-8")
    text = text.split("-- 8. PyPI riverqueue", 1)[0]  # the Python client is the real package
    out: dict[str, str] = {}
    for block in re.split(r"^-- name: ", text, flags=re.M)[1:]:
        header, _, body = block.partition("\n")
        body = re.split(r"^-- -{20,}|^-- ={20,}", body, flags=re.M)[0]
        out[header.split()[0]] = convert(body)
    return out


def convert(sql: str) -> str:
    """What sqlc and rivershared/sqlctemplate do to a query before pgx sends it."""
    sql = "\n".join(line.split("--", 1)[0].rstrip() for line in sql.splitlines())
    sql = sql.replace("/* TEMPLATE: schema */", "")
    sql = sql.replace("sqlc.embed(river_job)", "river_job.*")
    sql = re.sub(r"sqlc\.n?arg\('(\w+)'\)", r"%(\1)s", sql)
    sql = re.sub(r"@(\w+)", r"%(\1)s", sql)
    assert "sqlc." not in sql, sql
    assert "TEMPLATE" not in sql, sql
    return sql.strip().rstrip(";")


def migration_versions() -> list[str]:
    """river_migrations.sql, one transaction per version, as rivermigrate applies them."""
    text = (SQL_DIR / "river_migrations.sql").read_text(encoding="utf-8")
    return re.findall(r"^BEGIN;\n(.*?)^COMMIT;", text, flags=re.M | re.S)


@dataclass(frozen=True)
class Clock:
    """A process's clock: the database's plus an offset (a worker whose clock is skewed)."""

    offset: float = 0.0

    def now(self) -> datetime:
        """``time.Now().UTC()`` on that process."""
        return datetime.now(UTC) + timedelta(seconds=self.offset)


@dataclass
class Result:
    """One finished attempt as the executor hands it to the completer
    (riverdriver.JobSetState* constructors), stamped with the worker's clock."""

    job: dict[str, Any]
    state: str  # completed, available, retryable, discarded, cancelled, scheduled
    at: datetime  # the worker's now() when the attempt ended
    error: str | None = None
    scheduled_at: datetime | None = None
    snooze: bool = False
    outcome: str = ""  # what the handler did: the harness's own words

    def params(self) -> dict[str, Any]:
        """This result's elements of JobSetStateIfRunningMany's arrays."""
        job, final = self.job, self.state in ("completed", "discarded", "cancelled")
        entry = None
        if self.error is not None:
            entry = json.dumps({"at": job["attempted_at"].isoformat(), "attempt": job["attempt"],
                                "error": self.error, "trace": ""})  # fmt: skip
        meta = json.dumps({"snoozes": int(job["metadata"].get("snoozes", 0)) + 1})
        return {
            "ids": job["id"],
            "attempt_do_update": self.snooze,
            "attempt": job["attempt"] - 1 if self.snooze else 0,
            "errors_do_update": entry is not None,
            "errors": entry,
            "finalized_at_do_update": final,
            "finalized_at": self.at if final else None,
            "metadata_do_merge": self.snooze,
            "metadata_updates": meta if self.snooze else "{}",
            "scheduled_at_do_update": self.scheduled_at is not None,
            "scheduled_at": self.scheduled_at,
            "state": self.state,
        }


def columns(rows: Sequence[dict[str, Any]]) -> dict[str, list[Any]]:
    """Parallel arrays, one per parameter, as the Go driver builds them."""
    keys = list(rows[0]) if rows else []
    return {key: [row[key] for row in rows] for key in keys}


@dataclass
class RiverSQL:
    """The statements of River's client, producers, completer and leader over a psycopg pool."""

    dsn: str
    pool: AsyncConnectionPool = field(init=False)

    def __post_init__(self) -> None:
        self.pool = AsyncConnectionPool(self.dsn, min_size=1, max_size=6, open=False,
                                        kwargs={"autocommit": True, "row_factory": dict_row})  # fmt: skip

    async def __aenter__(self) -> RiverSQL:
        await self.pool.open()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.pool.close()

    async def run(
        self, name: str, params: dict[str, Any], conn: Any = None
    ) -> list[dict[str, Any]]:
        """One statement in autocommit (or on ``conn``, in its transaction)."""
        if conn is not None:
            cursor = await conn.execute(queries()[name], params)
            return await cursor.fetchall() if cursor.description else []
        async with self.pool.connection() as own:
            return await self.run(name, params, own)

    async def migrate(self) -> None:
        """``rivermigrate`` up to 007: each version in its own transaction."""
        async with self.pool.connection() as conn:
            for version in migration_versions():
                async with conn.transaction():
                    await conn.execute(version)  # type: ignore[arg-type]

    async def insert_many(
        self, jobs: Sequence[dict[str, Any]], clock: Clock
    ) -> list[dict[str, Any]]:
        """``Client.InsertMany`` (Go): JobInsertFastMany and the insert notification in one
        transaction; created_at and scheduled_at from the inserting client's clock."""
        now = clock.now()
        rows = [{"id": 0, "args": json.dumps(j.get("args", {})), "created_at": now,
                 "kind": j["kind"], "max_attempts": j.get("max_attempts", 25), "metadata": "{}",
                 "priority": 1, "queue": j.get("queue", "default"),
                 "scheduled_at": j.get("scheduled_at", now),
                 "state": "scheduled" if "scheduled_at" in j else "available", "tags": "",
                 "unique_key": None, "unique_states": 0} for j in jobs]  # fmt: skip
        async with self.pool.connection() as conn, conn.transaction():
            inserted = await self.run("JobInsertFastMany", columns(rows), conn)
            queues = sorted({r["queue"] for r in inserted if r["state"] == "available"})
            await self.run("PGNotifyMany", {"schema": None, "topic": "river_insert",
                           "payload": [json.dumps({"queue": q}) for q in queues]}, conn)  # fmt: skip
        return inserted

    async def fetch(
        self, queue: str, client_id: str, slots: int, conn: Any
    ) -> list[dict[str, Any]]:
        """``producer.dispatchWork``: JobGetAvailable, in autocommit."""
        return await self.run("JobGetAvailable", {"now": None, "max_attempted_by": 100,
                              "attempted_by": client_id, "queue": queue, "max_to_lock": slots},
                              conn)  # fmt: skip

    async def set_states(self, results: Sequence[Result], conn: Any) -> list[dict[str, Any]]:
        """The BatchCompleter's flush: one JobSetStateIfRunningMany, in autocommit."""
        params = columns([r.params() for r in results])
        return await self.run("JobSetStateIfRunningMany", {**params, "now": None}, conn)

    async def schedule(self, leader: Clock) -> list[dict[str, Any]]:
        """``JobScheduler.runOnce``: due scheduled and retryable jobs to available, looking
        ahead one interval, and the insert notification, in one transaction."""
        async with self.pool.connection() as conn, conn.transaction():
            ahead = leader.now() + timedelta(seconds=SCHEDULER_INTERVAL)
            rows = await self.run("JobSchedule", {"now": ahead, "max": 10000}, conn)
            queues = sorted({r["queue"] for r in rows if not r["conflict_discarded"]})
            await self.run("PGNotifyMany", {"schema": None, "topic": "river_insert",
                           "payload": [json.dumps({"queue": q}) for q in queues]}, conn)  # fmt: skip
        return rows

    async def stuck(self, leader: Clock, rescue_after: float) -> list[dict[str, Any]]:
        """``JobRescuer.runOnce``'s read: JobGetStuck, one page."""
        horizon = leader.now() - timedelta(seconds=rescue_after)
        return await self.run(
            "JobGetStuck", {"after_id": 0, "stuck_horizon": horizon, "max": 10000}
        )

    async def rescue(self, jobs: Sequence[dict[str, Any]], leader: Clock,
                     retry_in: float) -> list[tuple[str, datetime | None]]:  # fmt: skip
        """``JobRescuer.runOnce``'s write: JobRescueMany, each job cancelled (a cancel was
        asked), discarded (attempts used up) or retryable; returns the states and stamps."""
        now, rows = leader.now(), []
        for job in jobs:
            if "cancel_attempted_at" in job["metadata"]:
                state, final, at = "cancelled", now, job["scheduled_at"]
            elif job["attempt"] >= job["max_attempts"]:
                state, final, at = "discarded", now, job["scheduled_at"]
            else:
                state, final, at = "retryable", None, now + timedelta(seconds=retry_in)
            error = {"at": now.isoformat(), "attempt": job["attempt"], "error": RESCUE_ERROR,
                     "trace": ""}  # fmt: skip
            rows.append({"id": job["id"], "error": json.dumps(error),
                         "finalized_at": final or datetime(1, 1, 1, tzinfo=UTC),
                         "scheduled_at": at, "state": state})  # fmt: skip
        if rows:
            await self.run("JobRescueMany", columns(rows))
        zero = datetime(1, 1, 1, tzinfo=UTC)
        return [(row["state"], None if row["finalized_at"] == zero else row["finalized_at"])
                for row in rows]  # fmt: skip

    async def cancel(self, job_id: int, client: Clock) -> dict[str, Any]:
        """``Client.JobCancel``: a waiting job is cancelled at once, a running one only marked."""
        [row] = await self.run("JobCancel", {"id": job_id, "schema": None,
                               "control_topic": "river_control", "now": None,
                               "cancel_attempted_at": json.dumps(client.now().isoformat())})  # fmt: skip
        return row

    async def retry(self, job_id: int) -> dict[str, Any]:
        """``Client.JobRetry``: a job that is not running goes back to available."""
        [row] = await self.run("JobRetry", {"id": job_id, "now": None})
        return row

    async def clean(self, horizon: datetime) -> int:
        """``JobCleaner.runOnce``, every retention ending at ``horizon``: JobDeleteBefore."""
        params = {"cancelled_do_delete": True, "cancelled_finalized_at_horizon": horizon,
                  "completed_do_delete": True, "completed_finalized_at_horizon": horizon,
                  "discarded_do_delete": True, "discarded_finalized_at_horizon": horizon,
                  "queues_excluded": None, "queues_included": None, "max": 10000}  # fmt: skip
        async with self.pool.connection() as conn:
            cursor = await conn.execute(queries()["JobDeleteBefore"], params)  # type: ignore[arg-type]
            return cursor.rowcount

    async def queue_seen(self, name: str) -> None:
        """``producer.StartWorkContext``: QueueCreateOrSetUpdatedAt."""
        await self.run("QueueCreateOrSetUpdatedAt", {"now": None, "metadata": "{}", "name": name,
                       "paused_at": None, "updated_at": None})  # fmt: skip
