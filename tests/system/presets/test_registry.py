"""The preset registry: every preset answers for the same metrics and ships valid SQL."""

from __future__ import annotations

import pytest

from exporter.counting.ledger import Ledger
from exporter.profiles import PRESETS
from exporter.profiles.base import preset_queries

METRICS = {
    "pending", "running", "scheduled", "oldest_pending_age", "oldest_ready_wait",
    "running_oldest", "stuck", "held", "enqueued", "completed", "failures", "failure_reason",
    "failure_deadline",
    "dead", "requeued", "cancelled", "wait", "duration", "latency",
}  # fmt: skip


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_preset_declares_every_metric_and_reads_only(name: str) -> None:
    preset = PRESETS[name]
    assert set(preset.capabilities) == METRICS
    reader = preset.make_reader(None, Ledger())
    assert reader.horizon_query().name == "horizon"
    event_log = getattr(reader, "event_log", None)
    # The SQL file is named after the reader's module (graphile-worker: graphile_worker.sql).
    for sql in preset_queries(getattr(reader, "preset", name), event_log=event_log).values():
        # The readers run under a read-only role: every block is a single SELECT (or WITH).
        code = " ".join(line.split("--")[0] for line in sql.splitlines()).strip()
        assert code.split()[0].upper() in ("SELECT", "WITH"), sql[:60]
        assert ";" not in code.rstrip(";"), "one statement per block"
        for verb in ("INSERT", "UPDATE", "DELETE", "CREATE", "ALTER", "DROP", "TRUNCATE"):
            assert f" {verb} " not in f" {code.upper()} ", verb


def test_index_files_are_concurrent_and_idempotent() -> None:
    for preset in PRESETS.values():
        sql = preset.index_sql()
        if sql is not None:
            statements = [line for line in sql.splitlines() if line.startswith("CREATE")]
            assert statements
            assert all("CONCURRENTLY IF NOT EXISTS" in line for line in statements)
