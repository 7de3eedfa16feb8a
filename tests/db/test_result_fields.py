"""The values changes_after pulls out of ``result`` on a real PostgreSQL decode as the document does.

The query extracts each path once, as the value's JSON text, and Python keeps the numbers; a
JSON string holding a number ("0.5") must stay malformed, as it is in the whole document.
"""

from __future__ import annotations

import json

import asyncpg

from exporter.counting.change_cursor import FOREVER
from exporter.counting.results import ResultPaths, decode_figures, decode_result
from exporter.counting.sqltext import render_queries
from exporter.model import NIL, Figures
from exporter.settings.table import TableMapping

PATHS = ResultPaths()


def metrics(duration: object, cost: object) -> object:
    return {"metrics": {"duration_ms": duration, "cost": cost}}


NUMBERS = [0, -0.0, 1500, 0.25, 1e-7, 1.5e-300, 1e300, 2**53 - 1, 2**53 + 1, 2**60, -1, 1.0]
NOT_NUMBERS = ["0.5", "1500", "", "-1", "Infinity", "NaN", True, False, None, [], [1], {}, {"a": 1}]
DOCUMENTS: list[object] = [
    *(metrics(v, {"ai_usd": v, "proxy_usd": v, "total_usd": v}) for v in NUMBERS + NOT_NUMBERS),
    metrics(8123, {"ai_usd": 0.012, "proxy_usd": "0.003", "total_usd": 0.02}),
    metrics(8123, ["ai_usd", 0.5]),
    metrics(8123, "0.5"),
    {"metrics": [1500]},
    {"metrics": "x"},
    {"other": 1},
    [1, 2],
    5,
    "0.5",
    True,
    None,  # the JSON null
]


async def test_values_from_sql_decode_as_the_whole_document(db_dsn: str) -> None:
    conn = await asyncpg.connect(db_dsn)
    try:
        await conn.executemany(
            "INSERT INTO job (job_type, status, result) VALUES (1, 3, $1::text::jsonb)",
            [(json.dumps(d),) for d in DOCUMENTS],
        )
        await conn.execute("INSERT INTO job (job_type, status, result) VALUES (1, 3, NULL)")
        since = await conn.fetchval("SELECT now() - interval '1 hour'")
        rows = await conn.fetch(
            render_queries(TableMapping(name="job"))["changes_after"],
            since, NIL, FOREVER, 1000, *[list(p) for p in PATHS.as_tuple()],
        )  # fmt: skip
        texts = {
            r["job_id"]: r["result"]
            for r in await conn.fetch("SELECT job_id::text, result::text FROM job")
        }
    finally:
        await conn.close()
    assert len(rows) == len(DOCUMENTS) + 1
    counted = 0
    for r in rows:
        figures = Figures(
            r["result_kind"], r["duration_ms"], r["ai_usd"], r["proxy_usd"], r["total_usd"]
        )
        via_sql = decode_figures(figures)
        assert via_sql == decode_result(texts[r["job_id"]], PATHS), (texts[r["job_id"]], figures)
        counted += len(via_sql.cost) + (via_sql.duration_seconds is not None)
    # Not a vacuous comparison: the numbers came through, and the strings did arrive.
    assert counted > 0
    assert any(r["ai_usd"] == '"0.5"' for r in rows)
