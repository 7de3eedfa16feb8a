"""Build a realistic queue table of any size with generate_series, entirely inside PostgreSQL.

The shape follows research/performance.md: about 99 % DONE with a ``result`` jsonb, 0.5 %
DEAD (a fifth of them deadline kills), a few hundred PENDING (some in backoff), about 50
RUNNING (some with an expired lease, some overrunning), ``created_at`` over 90 days with the
recent days denser, eight job types in the history and ``active_types`` among active rows.
"""

from __future__ import annotations

from dataclasses import dataclass

import asyncpg

from exporter.demo.queue import DEADLINE_ERROR, INDEXES_FILE, prepare_database, split_sql

HISTORY_DAYS = 90
HISTORY_TYPES = 8


@dataclass(frozen=True)
class Shape:
    """How many rows of each status one generated table holds."""

    rows: int
    pending: int = 300
    scheduled: int = 40  # of the pending, in backoff (run_after in the future)
    running: int = 50
    lease_expired: int = 5  # of the running, lease ran out (worker died, reaper late)
    overrunning: int = 3  # of the running, started more than 10 minutes ago
    active_types: int = 50  # job types among active and dead rows, for the exposition size

    @property
    def dead(self) -> int:
        """About 0.5 % of the table."""
        return max(1, self.rows // 200)

    @property
    def done(self) -> int:
        """Everything else."""
        return self.rows - self.dead - self.pending - self.running


# A density falling linearly from twice the mean today to zero 90 days ago: the queue grew,
# recent days are denser. (A density with a pole at "now", such as power(random(), 2), would
# put thousands of history rows into the last minute and bill them to the live trickle.)
_AGE = f"make_interval(secs => {HISTORY_DAYS} * 86400 * (1 - sqrt(random())))"

_DONE = f"""
INSERT INTO job (job_type, status, priority, payload, attempts, max_attempts, run_after,
                 run_started_at, created_at, updated_at, result)
SELECT 1 + i % {HISTORY_TYPES}, 3, 100, jsonb_build_object('product_code', 'P' || i),
       1, 3, c, c + w, c, least(now(), c + w + d),
       jsonb_build_object(
           'outcome', CASE WHEN i % 10 = 0 THEN 'not_found' ELSE 'ok' END,
           'price', round((random() * 500)::numeric, 2),
           'metrics', jsonb_build_object(
               'duration_ms', round(extract(epoch FROM d) * 1000),
               'cost', jsonb_build_object(
                   'ai_usd', round(ai::numeric, 5), 'proxy_usd', round(px::numeric, 5),
                   'total_usd', round((ai + px)::numeric, 5))))
FROM (SELECT i, now() - {_AGE} AS c,
             make_interval(secs => random() * 5) AS w,
             make_interval(secs => 1 + random() * 20) AS d,
             random() * 0.02 AS ai, random() * 0.005 AS px
      FROM generate_series(1, $1) AS i) AS g
"""

_DEAD = f"""
INSERT INTO job (job_type, status, priority, payload, attempts, max_attempts, run_after,
                 run_started_at, created_at, updated_at, last_error)
SELECT 1 + i % $2, 4, 100, '{{}}'::jsonb, 3, 3, c, c + make_interval(secs => 60),
       c, c + make_interval(secs => 400),
       CASE WHEN i % 5 = 0 THEN '{DEADLINE_ERROR}'
            ELSE 'TimeoutError: upstream did not answer in 30s' END
FROM (SELECT i, now() - {_AGE} AS c FROM generate_series(1, $1) AS i) AS g
"""

# The first $3 pending jobs failed once and wait out their backoff.
_PENDING = """
INSERT INTO job (job_type, status, priority, attempts, max_attempts, run_after, created_at,
                 updated_at, last_error)
SELECT 1 + i % $2, 1, 100,
       CASE WHEN i <= $3 THEN 1 ELSE 0 END, 3,
       CASE WHEN i <= $3 THEN now() + make_interval(secs => 30 + i) ELSE c END,
       c, c,
       CASE WHEN i <= $3 THEN 'HTTPError: 503 Service Unavailable' END
FROM (SELECT i, now() - make_interval(secs => random() * 600) AS c
      FROM generate_series(1, $1) AS i) AS g
"""

# The first $3 running jobs lost their worker; the next $4 run for over 10 minutes.
_RUNNING = """
INSERT INTO job (job_type, status, priority, attempts, max_attempts, worker_id, lease_until,
                 run_after, run_started_at, created_at, updated_at)
SELECT 1 + i % $2, 2, 100, 1, 3, 'bench-' || i,
       CASE WHEN i <= $3 THEN now() - make_interval(secs => 60 + i) ELSE now() + interval '30 s' END,
       s - interval '2 s',
       s, s - interval '2 s', s
FROM (SELECT i, now() - make_interval(secs => CASE WHEN i > $3 AND i <= $3 + $4
                                                   THEN 900 + i ELSE random() * 60 END) AS s
      FROM generate_series(1, $1) AS i) AS g
"""


async def build_table(dsn: str, shape: Shape, *, exporter_indexes: bool = True) -> None:
    """Create the queue's table in an empty database and fill it; indexes come after the load."""
    await prepare_database(dsn, exporter_indexes=False)
    conn = await asyncpg.connect(dsn)
    try:
        await conn.execute(_DONE, shape.done)
        await conn.execute(_DEAD, shape.dead, shape.active_types)
        await conn.execute(_PENDING, shape.pending, shape.active_types, shape.scheduled)
        await conn.execute(
            _RUNNING, shape.running, shape.active_types, shape.lease_expired, shape.overrunning
        )
        if exporter_indexes:
            await create_exporter_indexes(conn)
        # VACUUM sets the visibility map, without which no index-only scan is index-only.
        await conn.execute("VACUUM (ANALYZE) job")
        await conn.execute("CHECKPOINT")
    finally:
        await conn.close()


async def create_exporter_indexes(conn: asyncpg.Connection) -> None:
    """Create the indexes the exporter asks for, from its own indexes.sql."""
    for statement in split_sql(INDEXES_FILE.read_text()):
        await conn.execute(statement)


async def drop_exporter_indexes(conn: asyncpg.Connection) -> None:
    """Drop the exporter's indexes (for the write-overhead comparison)."""
    for name in ("job_exporter_active_idx", "job_exporter_updated_at_idx", "job_exporter_dead_idx"):
        await conn.execute(f"DROP INDEX IF EXISTS {name}")
