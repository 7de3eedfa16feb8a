"""``python -m bench.decode``: the change stream's thread-side cost per job, offline and repeatable.

A throwaway ``wal_level = logical`` cluster runs ``--jobs`` lives of bench/throughput.py's
script (enqueue, claim, renew, complete, each step its own transaction, as the reference
queue commits them), under each replica identity ``logical-setup`` offers: ``full`` (REPLICA
IDENTITY FULL, the whole table published) and ``index`` (a unique index on (job_id, status,
attempts) as the identity, and a publication of the columns the exporter reads). The slot's
messages are captured with ``pg_logical_slot_peek_binary_changes`` (pgoutput, proto_version 1,
as the stream asks for them) and replayed through the stream's own folder and the default
profile's fold, best of ``--runs``, in process CPU time: no psycopg2, no network, so the figure
is the exporter's Python work alone (psycopg2 adds about 2 µs per message, 12 per job:
bench/RESULTS.md, "Counting from the change stream"). It checks that every replay counts what the
script did.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
import tracemalloc

import asyncpg

from exporter.counting.stream_counter import READ_ROLES, StreamFold, credit
from exporter.counting.tracker import TrackerOptions
from exporter.db.change_folder import Outlet, TransactionFolder
from exporter.demo.cluster import Cluster
from exporter.demo.queue import prepare_database
from exporter.model import JobTypeLabels, Tallies
from exporter.model.row_changes import Batch
from exporter.settings.table import TableMapping

BUCKETS = ((0.1, 1.0, 10.0, 60.0), (0.1, 1.0, 10.0), (1.0, 10.0, 60.0))
LIVES = """
CREATE PROCEDURE lives(n int) LANGUAGE plpgsql AS $$
DECLARE claimed uuid;
BEGIN
  FOR i IN 1..n LOOP
    INSERT INTO job (job_type, payload) VALUES (1 + i % 8, '{"product_code": "P"}');
    COMMIT;
    UPDATE job SET status = 2, worker_id = 'w', lease_until = now() + interval '120 s',
           run_started_at = now(), attempts = attempts + 1, updated_at = now()
     WHERE job_id = (SELECT job_id FROM job WHERE status = 1 ORDER BY created_at LIMIT 1)
    RETURNING job_id INTO claimed;
    COMMIT;
    UPDATE job SET lease_until = now() + interval '120 s', updated_at = now()
     WHERE job_id = claimed;
    COMMIT;
    UPDATE job SET status = 3, lease_until = NULL, worker_id = NULL, updated_at = now(),
           result = jsonb_build_object('outcome', 'ok', 'metrics', jsonb_build_object(
               'duration_ms', 100 + i % 9000, 'cost', jsonb_build_object(
                   'ai_usd', 0.012, 'proxy_usd', 0.003, 'total_usd', 0.016)))
     WHERE job_id = claimed;
    COMMIT;
  END LOOP;
END $$;
"""
IDENTITIES = {
    "full": [
        "ALTER TABLE job REPLICA IDENTITY FULL",
        "CREATE PUBLICATION p FOR TABLE job",
    ],
    "index": [
        "CREATE UNIQUE INDEX job_identity ON job (job_id, status, attempts)",
        "ALTER TABLE job REPLICA IDENTITY USING INDEX job_identity",
        "CREATE PUBLICATION p FOR TABLE job (job_id, " + ", ".join(READ_ROLES) + ")",
    ],
}
PEEK = """
SELECT data FROM pg_logical_slot_peek_binary_changes(
    $1, NULL, NULL, 'proto_version', '1', 'publication_names', 'p')
"""


async def capture(cluster: Cluster, identity: str, jobs: int) -> list[bytes]:
    """The slot's messages for ``jobs`` lives on a fresh database set up with ``identity``."""
    name = f"decode_{identity}"
    cluster.create_database(name)
    dsn = cluster.dsn(name)
    await prepare_database(dsn)
    conn = await asyncpg.connect(dsn)
    try:
        for statement in IDENTITIES[identity]:
            await conn.execute(statement)
        await conn.execute(LIVES)
        # A standing backlog, as in bench throughput: claims never find an empty queue.
        await conn.execute("CALL lives(0)")
        await conn.execute(
            "INSERT INTO job (job_type, payload) SELECT 1, '{}' FROM generate_series(1, 100)"
        )
        await conn.fetchval("SELECT pg_create_logical_replication_slot($1, 'pgoutput')", name)
        await conn.execute("CALL lives($1)", jobs)
        return [bytes(row["data"]) for row in await conn.fetch(PEEK, name)]
    finally:
        await conn.close()


def replay(messages: list[bytes]) -> tuple[float, Tallies]:
    """CPU seconds to fold the messages (one folder, as one run of the stream), and the counts."""
    fold = StreamFold(TableMapping(), TrackerOptions(30.0), BUCKETS)
    outlet = Outlet()
    folder = TransactionFolder("job", fold, outlet, 0)
    started = time.process_time()
    take = folder.take
    for message in messages:
        take(message)
    batches = outlet.take()
    elapsed = time.process_time() - started
    tallies = Tallies(*BUCKETS)
    labels = JobTypeLabels({}, 50)
    for batch in batches:
        assert isinstance(batch, Batch)
        credit(batch.tally, tallies, labels.label, [])
    return elapsed, tallies


def held(messages: list[bytes]) -> int:
    """Peak bytes Python allocates while folding the messages."""
    tracemalloc.start()
    replay(messages)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return peak


def main(argv: list[str] | None = None) -> int:
    """Capture, replay, print a Markdown table."""
    parser = argparse.ArgumentParser(prog="python -m bench.decode", description=__doc__)
    parser.add_argument("--jobs", type=int, default=5000)
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args(argv)
    cluster = Cluster()
    cluster.start()
    try:
        cluster.psql("ALTER SYSTEM SET wal_level = logical")
        cluster.restart()
        print(
            "| identity | messages per job | bytes per job | µs per job (best) | µs per message "
            "| peak Python memory | counted |"
        )
        print("|---|---:|---:|---:|---:|---:|---|")
        for identity in IDENTITIES:
            messages = asyncio.run(capture(cluster, identity, args.jobs))
            runs = [replay(messages) for _ in range(args.runs)]
            best = min(seconds for seconds, _ in runs)
            tallies = runs[0][1]
            exact = all(
                sum(getattr(t, name).values()) == args.jobs
                for _, t in runs
                for name in ("enqueued", "completed")
            )
            size = sum(len(m) for m in messages)
            print(
                f"| {identity} | {len(messages) / args.jobs:.1f} | {size / args.jobs:,.0f} "
                f"| {best / args.jobs * 1e6:.1f} | {best / len(messages) * 1e6:.2f} "
                f"| {held(messages) / 2**10:,.0f} KiB "
                f"| {'exact' if exact else 'WRONG'} ({sum(tallies.completed.values()):,}) |"
            )
    finally:
        cluster.destroy()
    return 0


if __name__ == "__main__":
    sys.exit(main())
