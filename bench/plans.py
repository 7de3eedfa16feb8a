"""What EXPLAIN (ANALYZE, BUFFERS) says about a statement: time, buffers, scan types."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import asyncpg


@dataclass
class Plan:
    """What EXPLAIN (ANALYZE, BUFFERS) said about one query."""

    ms: float
    buffers: int
    seq_scan_on_job: bool
    nodes: list[str] = field(default_factory=list)


def _walk(node: dict[str, Any]) -> list[dict[str, Any]]:
    found = [node]
    for child in node.get("Plans", []):
        found += _walk(child)
    return found


async def explain(conn: asyncpg.Connection, sql: str, *args: object) -> Plan:
    """Run EXPLAIN (ANALYZE, BUFFERS) and keep the time, the buffers touched and the scan types."""
    raw = await conn.fetchval(f"EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) {sql}", *args)
    doc = (json.loads(raw) if isinstance(raw, str) else raw)[0]
    top = doc["Plan"]
    nodes = _walk(top)
    buffers = int(top.get("Shared Hit Blocks", 0)) + int(top.get("Shared Read Blocks", 0))
    seq = any(n["Node Type"] == "Seq Scan" and n.get("Relation Name") == "job" for n in nodes)
    names = sorted(
        {f"{n['Node Type']}" + (f" {n['Index Name']}" if "Index Name" in n else "") for n in nodes}
    )
    return Plan(float(doc["Execution Time"]), buffers, seq, names)
