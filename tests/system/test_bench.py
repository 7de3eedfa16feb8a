"""CI smoke test of the benchmark: the quick variant runs end to end and writes its JSON."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

pytestmark = [pytest.mark.slow, pytest.mark.daemon]


def test_quick_benchmark_writes_every_figure(tmp_path: Path) -> None:
    """``python -m bench --quick`` runs end to end and reports every part of the issue."""
    # No bound on its duration here: speed is what the benchmark measures, not what CI asserts.
    done = subprocess.run(
        [sys.executable, "-m", "bench", "--quick", "--no-peer", "--out", str(tmp_path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads((tmp_path / "results.json").read_text())
    assert {"machine", "plan", "sizes", "table", "quick"} <= report.keys()
    assert report["quick"] is True
    (size,) = report["sizes"]
    assert size["rows"] == 20_000
    expected = {
        "build_seconds", "table_bytes", "exporter_cycle", "queue_reports", "ratio",
        "write_overhead", "serving", "footprint", "exporter_connections",
        "exporter_metric_query_ms",
    }  # fmt: skip
    assert expected <= size.keys()
    cycle = size["exporter_cycle"]
    assert {"horizon", "snapshot", "dead", "changes_after"} <= cycle["queries_ms"].keys()
    assert cycle["total_ms"] > 0
    # The exporter's reads go through its indexes, never through the whole table.
    assert cycle["seq_scan_on_job"] is False
    assert size["queue_reports"]["ops_ms"] > 0
    assert size["queue_reports"]["cost_buckets_ms"] > 0
    writes = size["write_overhead"]
    assert writes["with"]["jobs_per_s"] > 0
    assert writes["without"]["jobs_per_s"] > 0
    assert set(writes["index_bytes"]) == {
        "job_exporter_active_idx", "job_exporter_updated_at_idx", "job_exporter_dead_idx",
    }  # fmt: skip
    assert size["serving"]["requests"] > 0
    assert size["serving"]["errors"] == 0
    assert size["serving"]["body_bytes"] > 1000
    # Scrapers that ask for gzip get it: a tenth of the bytes or less.
    assert size["serving_gzip"]["errors"] == 0
    assert 0 < size["serving_gzip"]["body_bytes"] < size["serving"]["body_bytes"] / 5
    assert size["footprint"]["rss_max_bytes"] > 0
    assert 1 <= size["exporter_connections"] <= 2
    # The table printed matches the JSON.
    assert "20,000 rows" in report["table"]
    assert "20,000 rows" in done.stdout


def test_throughput_reports_the_exporters_share_of_statement_time(tmp_path: Path) -> None:
    """``python -m bench throughput`` tells the exporter's statements apart by role and ranks them."""
    done = subprocess.run(
        [sys.executable, "-m", "bench", "throughput", "--rates", "max", "--seconds", "5",
         "--rows", "20000", "--interval", "1s", "--out", str(tmp_path)],
        cwd=ROOT, capture_output=True, text=True, timeout=900, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    (result,) = json.loads((tmp_path / "throughput.json").read_text())
    assert result["exact"] is True
    share = result["statements"]
    assert share["role"] == "jobqueue_exporter"
    # pgbench runs as postgres, the exporter under its own role: both show up, apart.
    assert 0 < share["exporter_ms"] < share["all_ms"]
    assert share["share_pct"] == pytest.approx(100 * share["exporter_ms"] / share["all_ms"])
    assert share["exporter_calls"] > 0
    top = share["top"]
    assert 0 < len(top) <= 5
    assert [t["total_ms"] for t in top] == sorted((t["total_ms"] for t in top), reverse=True)
    # Statements the exporter names in queries.sql are shown by that name.
    names = {t["statement"] for t in top}
    assert {"changes_after", "snapshot"} <= names
    changes = next(t for t in top if t["statement"] == "changes_after")
    assert changes["calls"] > 0
    assert changes["rows"] > 0
    assert changes["mean_ms"] == pytest.approx(changes["total_ms"] / changes["calls"])
    out = done.stdout
    assert "Database statement time at max jobs/s" in out
    assert f"= **{share['share_pct']:.1f} %**" in out
    assert "| exporter statement | calls | total ms | mean ms | rows |" in out
    assert "| changes_after | " in out
