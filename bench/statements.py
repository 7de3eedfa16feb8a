"""The exporter's share of the database's statement time, from ``pg_stat_statements``.

The exporter logs in under a role of its own, so its statements are told apart from the
queue's by ``userid``. The statistics are reset when the load starts and read when it ends;
the share is the exporter's ``total_exec_time`` over every role's in the benchmark's database
(planning time is not tracked: pgbench's simple protocol plans every statement, the
exporter's prepared statements are planned once, and only execution is compared).
"""

from __future__ import annotations

import re
from typing import Any

import asyncpg

from exporter.demo.cluster import Cluster

ROLE = "jobqueue_exporter"
TOP = 5  # exporter statements listed, by total time

# Per statement, summed over every role and query id of the benchmark's database.
STATEMENTS = """
SELECT s.userid = (SELECT oid FROM pg_roles WHERE rolname = $1) AS exporter,
       s.query, sum(s.calls)::bigint AS calls, sum(s.total_exec_time) AS total_ms,
       sum(s.rows)::bigint AS rows
FROM pg_stat_statements s
WHERE s.dbid = (SELECT oid FROM pg_database WHERE datname = current_database())
GROUP BY 1, 2
"""


def prepare_cluster(cluster: Cluster) -> None:
    """Load pg_stat_statements (a restart) and create the exporter's own read-only role."""
    cluster.psql("ALTER SYSTEM SET shared_preload_libraries = 'pg_stat_statements'")
    cluster.restart()
    # Statements inside functions too, should a profile ever call one (known once loaded).
    cluster.psql("ALTER SYSTEM SET pg_stat_statements.track = 'all'")
    cluster.psql("SELECT pg_reload_conf()")
    cluster.create_role(ROLE, grants=[f"GRANT pg_read_all_stats TO {ROLE}"])


def prepare_database(cluster: Cluster, name: str) -> None:
    """The extension and the exporter's grant (docs/security.md) in one benchmark database."""
    cluster.psql("CREATE EXTENSION IF NOT EXISTS pg_stat_statements", dbname=name)
    cluster.psql(f"GRANT SELECT ON job TO {ROLE}", dbname=name)


async def reset(dsn: str) -> None:
    """Start the measured window: forget every statement seen so far."""
    conn = await asyncpg.connect(dsn)
    try:
        await conn.execute("SELECT pg_stat_statements_reset()")
    finally:
        await conn.close()


def label(query: str, names: dict[str, str]) -> str:
    """The exporter's name for a statement when its text is one of ``names``, else its start.

    pg_stat_statements shows constants as $n, so statements that differ only in constants
    (``dead`` and ``done``) are one entry there, and get the first name that fits.
    """
    flat = _flat(query)
    for name, sql in names.items():
        if _flat(sql) == flat:
            return name
    text = " ".join(query.split())
    return text[:60] + ("…" if len(text) > 60 else "")


def _flat(sql: str) -> str:
    """Without comments, spacing, and constants, NULL among them (pg_stat_statements shows
    those as $n)."""
    text = re.sub(r"--[^\n]*", "", sql)
    # A NULL that is a value (THEN NULL) is a constant to pg_stat_statements too; one in IS NULL
    # is not, but both sides of a comparison go through here, so either way they agree.
    text = re.sub(r"\$\d+|'(?:[^']|'')*'|\b\d+(?:\.\d+)?\b|\bNULL\b", "?", text)
    return " ".join(text.split()).rstrip(" ;")


async def share(dsn: str, names: dict[str, str]) -> dict[str, Any]:
    """The exporter's and everyone's statement time since the reset, and its top statements."""
    conn = await asyncpg.connect(dsn)
    try:
        rows = await conn.fetch(STATEMENTS, ROLE)
    finally:
        await conn.close()
    everyone = sum(float(r["total_ms"]) for r in rows)
    ours = sorted((r for r in rows if r["exporter"]), key=lambda r: -float(r["total_ms"]))
    exporter = sum(float(r["total_ms"]) for r in ours)
    return {
        "role": ROLE,
        "all_ms": everyone,
        "exporter_ms": exporter,
        "share_pct": 100.0 * exporter / everyone if everyone else 0.0,
        "exporter_calls": sum(int(r["calls"]) for r in ours),
        "top": [
            {
                "statement": label(r["query"], names),
                "calls": int(r["calls"]),
                "total_ms": float(r["total_ms"]),
                "mean_ms": float(r["total_ms"]) / int(r["calls"]) if r["calls"] else 0.0,
                "rows": int(r["rows"]),
                "query": r["query"],
            }
            for r in ours[:TOP]
        ],
    }


def render(results: list[dict[str, Any]]) -> str:
    """Per rate: the share line, then the exporter's top statements as a Markdown table."""
    out: list[str] = []
    for r in results:
        s = r.get("statements")
        if not s:
            continue
        out += [
            "",
            f"Database statement time at {r['target_rate'] or 'max'} jobs/s "
            f"({r['jobs_per_s']:,.0f} reached): exporter {s['exporter_ms']:,.0f} ms of "
            f"{s['all_ms']:,.0f} ms = **{s['share_pct']:.1f} %** "
            f"(role {s['role']}, {s['exporter_calls']:,} statements, pg_stat_statements "
            "over the load)",
            "",
            "| exporter statement | calls | total ms | mean ms | rows |",
            "|---|---:|---:|---:|---:|",
        ]
        for t in s["top"]:
            name = t["statement"].replace("|", r"\|")
            out.append(
                f"| {name} | {t['calls']:,} | {t['total_ms']:,.1f} | "
                f"{t['mean_ms']:.3f} | {t['rows']:,} |"
            )
    return "\n".join(out)
