"""Static checks of dashboards/jobqueue.json: structure, PromQL via promtool, metric names."""

from __future__ import annotations

import dataclasses
import http.server
import json
import re
import shutil
import socket
import subprocess
import sys
import threading
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests import dashboard_checks as checks

ALERT_NAMES = (
    "JobQueueJobsStuck",
    "JobQueueReaperNotRunning",
    "JobQueueDeadlineKills",
    "JobQueueCostSpike",
    "JobQueueCostBudgetExceeded",
    "JobQueueBacklogStale",
    "JobQueueNoProgress",
    "JobQueueHighFailureRatio",
    "JobQueueDeadLetterGrowing",
    "JobQueueDatabaseUnreachable",
    "JobQueueExporterDown",
    "JobQueueMetricsAbsent",
    "JobQueueCollectionSlow",
    "JobQueueMissingIndex",
    "JobQueueErrorBudgetBurn",
    "JobQueueWaitBudgetBurn",
    "JobQueueSlowDrain",
    "JobQueueCollectionErrors",
    "JobQueueMalformedRows",
    "JobQueueLogicalLagGrowing",
    "JobQueueLogicalWalNearCap",
    "JobQueueLogicalWalUnbounded",
    "JobQueueLogicalGap",
)

# The rows of issue 5, top to bottom, with the panels each must hold.
REQUIRED_LAYOUT: dict[str, list[str]] = {
    "Health at a glance": [
        "Database reachable", "Jobs stuck", "Oldest runnable wait", "Dead letters (1h)",
        "Deadline kills (1h)", "Cost (1h)", "Active alerts",
    ],
    "Job types and SLO": ["Job types", "SLO burn rate by job type (1h)", "Error budget left (1d)"],
    "Flow": [
        "Enqueued / completed / failed per second", "Queue depth by status",
        "Ready vs scheduled pending",
    ],
    "Latency": [
        "Wait time p50 / p95 / p99", "End-to-end latency p50 / p95 / p99",
        "Job duration p50 / p95 / p99 by job type", "Longest current run",
    ],
    "Failures": [
        "Failed attempts by reason", "Failure ratio by job type", "Dead letters by reason",
        "Requeues",
    ],
    "Cost": ["Hourly cost by component", "Cost per completed job by job type", "Cost by job type"],
    "Exporter": [
        "Collection duration per query", "Collection errors by reason", "Skipped collections",
        "Time since last success", "Missing indexes",
    ],
    "Capacity, leases and collections": [
        "Time to drain", "Lease-expired age", "Collection duration", "Collection error ratio",
        "Malformed rows", "Build version",
    ],
    "Logical counting": ["Replication slot WAL", "Slot gaps (1h)"],
}  # fmt: skip

# Panels that explain an alert must link to its runbook section.
REQUIRED_RUNBOOK_LINKS: dict[str, set[str]] = {
    "Database reachable": {"JobQueueDatabaseUnreachable"},
    "Jobs stuck": {"JobQueueJobsStuck", "JobQueueReaperNotRunning"},
    "Oldest runnable wait": {"JobQueueBacklogStale"},
    "Dead letters (1h)": {"JobQueueDeadLetterGrowing"},
    "Deadline kills (1h)": {"JobQueueDeadlineKills"},
    "Cost (1h)": {"JobQueueCostSpike", "JobQueueCostBudgetExceeded"},
    "Enqueued / completed / failed per second": {"JobQueueNoProgress"},
    "Failure ratio by job type": {"JobQueueHighFailureRatio"},
    "Hourly cost by component": {"JobQueueCostSpike"},
    "Time since last success": {"JobQueueExporterDown"},
    "Collection duration per query": {"JobQueueCollectionSlow"},
    "Missing indexes": {"JobQueueMissingIndex"},
    "Job types": {"JobQueueErrorBudgetBurn", "JobQueueBacklogStale"},
    "Time to drain": {"JobQueueSlowDrain"},
    "Lease-expired age": {"JobQueueReaperNotRunning"},
    "Collection error ratio": {"JobQueueCollectionErrors"},
    "Malformed rows": {"JobQueueMalformedRows"},
    "Replication slot WAL": {
        "JobQueueLogicalLagGrowing",
        "JobQueueLogicalWalNearCap",
        "JobQueueLogicalWalUnbounded",
    },
    "Slot gaps (1h)": {"JobQueueLogicalGap"},
}

ALLOWED_PANEL_TYPES = {"timeseries", "stat", "bargauge", "table", "row", "text"}


@pytest.fixture(scope="module")
def dashboard() -> dict[str, Any]:
    """The committed dashboard, parsed."""
    return checks.load_dashboard()


def panels(dashboard: dict[str, Any]) -> list[dict[str, Any]]:
    return list(checks.iter_panels(dashboard))


def targets(dashboard: dict[str, Any]) -> Iterator[tuple[dict[str, Any], dict[str, Any]]]:
    for panel in checks.iter_panels(dashboard):
        for target in panel.get("targets", []):
            yield panel, target


def datasource_refs(node: Any) -> Iterator[Any]:
    """Every value stored under a "datasource" key, anywhere in the JSON."""
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "datasource":
                yield value
            yield from datasource_refs(value)
    elif isinstance(node, list):
        for item in node:
            yield from datasource_refs(item)


def test_committed_json_is_the_generator_output() -> None:
    from dashboards import build_dashboard

    assert checks.DASHBOARD_PATH.read_text() == build_dashboard.render(), (
        "dashboards/jobqueue.json is stale: run python dashboards/build_dashboard.py"
    )


def test_dashboard_has_the_required_top_level_fields(dashboard: dict[str, Any]) -> None:
    assert dashboard["uid"] == "jobqueue-exporter"
    assert 8 <= len(dashboard["uid"]) <= 40
    assert dashboard["id"] is None
    assert dashboard["title"] == "Job queue / Overview"
    assert isinstance(dashboard["schemaVersion"], int)
    assert dashboard["schemaVersion"] >= 38
    assert dashboard["timezone"] == "utc"
    assert dashboard["refresh"] == "30s"
    assert dashboard["time"] == {"from": "now-6h", "to": "now"}
    assert dashboard["tags"]


def test_runbook_base_url_matches_the_alert_settings() -> None:
    from dashboards import build_dashboard
    from exporter.settings import AlertSettings

    assert AlertSettings().runbook_base_url == build_dashboard.RUNBOOK_BASE_URL


def test_templating_has_one_datasource_and_multi_value_filters(dashboard: dict[str, Any]) -> None:
    variables = {v["name"]: v for v in dashboard["templating"]["list"]}
    datasources = [v for v in variables.values() if v["type"] == "datasource"]
    assert len(datasources) == 1
    assert datasources[0]["name"] == "datasource"
    assert datasources[0]["query"] == "prometheus"
    assert datasources[0]["label"] == "Data source"
    expected = {
        "instance": "label_values(jobqueue_up, instance)",
        "job_type": "label_values(jobqueue_jobs, job_type)",
    }
    for name, query in expected.items():
        var = variables[name]
        assert var["type"] == "query"
        assert var["query"]["query"] == query
        assert var["datasource"] == {"type": "prometheus", "uid": "${datasource}"}
        assert var["multi"] is True
        assert var["includeAll"] is True
        assert var["allValue"] == ".+"
        assert var["refresh"] == 2


def test_panel_ids_are_unique(dashboard: dict[str, Any]) -> None:
    ids = [p["id"] for p in panels(dashboard)]
    assert len(ids) == len(set(ids))


def test_panels_fit_24_columns_without_overlapping(dashboard: dict[str, Any]) -> None:
    cells: dict[tuple[int, int], str] = {}
    for panel in panels(dashboard):
        pos = panel["gridPos"]
        assert pos["x"] >= 0
        assert pos["w"] > 0
        assert pos["h"] > 0
        assert pos["x"] + pos["w"] <= 24, panel["title"]
        for x in range(pos["x"], pos["x"] + pos["w"]):
            for y in range(pos["y"], pos["y"] + pos["h"]):
                assert (x, y) not in cells, f"{panel['title']} overlaps {cells[(x, y)]}"
                cells[(x, y)] = panel["title"]


def test_only_current_panel_types_are_used(dashboard: dict[str, Any]) -> None:
    assert {p["type"] for p in panels(dashboard)} <= ALLOWED_PANEL_TYPES


def test_every_datasource_is_the_variable(dashboard: dict[str, Any]) -> None:
    refs = list(datasource_refs(dashboard))
    assert refs, "no datasource references at all"
    for ref in refs:
        assert ref == {"type": "prometheus", "uid": "${datasource}"}, ref
    for panel, target in targets(dashboard):
        assert target["datasource"]["uid"] == "${datasource}", panel["title"]
        assert target["refId"], panel["title"]


def test_every_panel_has_a_unit_and_a_description(dashboard: dict[str, Any]) -> None:
    for panel in panels(dashboard):
        if panel["type"] == "row":
            continue
        assert panel["fieldConfig"]["defaults"]["unit"], panel["title"]
        assert len(panel["description"].strip()) > 20, panel["title"]
        assert panel["targets"], panel["title"]


def test_rates_use_the_rate_interval(dashboard: dict[str, Any]) -> None:
    seen = 0
    for panel, target in targets(dashboard):
        for match in re.finditer(r"\b(?:rate|irate)\(([^\[]*)\[([^\]]*)\]", target["expr"]):
            seen += 1
            assert match.group(2) == "$__rate_interval", (panel["title"], target["expr"])
    assert seen > 10


def test_every_selector_filters_instance_and_job_type(dashboard: dict[str, Any]) -> None:
    exposed = checks.known_metric_names()
    from exporter.metrics import BY_NAME

    with_job_type = {n for d in BY_NAME.values() if "job_type" in d.labels for n in d.exposed_names}
    assert with_job_type
    for panel, target in targets(dashboard):
        expr = target["expr"]
        selectors = re.findall(r"([A-Za-z_:][\w:]*)\{([^}]*)\}", expr)
        for metric, matchers in selectors:
            assert metric in exposed, metric
            assert re.search(r'\binstance=~"\$instance\|?"', matchers), (panel["title"], expr)
            if metric in with_job_type:
                assert 'job_type=~"$job_type"' in matchers, (panel["title"], expr)
        # No bare metric name without a selector slipped through.
        assert checks.metric_names(expr) <= {m for m, _ in selectors}, expr


def test_every_selector_filters_job_and_each_per_queue_one_filters_queue(
    dashboard: dict[str, Any],
) -> None:
    # A panel without the filter shows every queue's numbers under one queue's heading: the
    # "Active alerts" stat once counted the firing alerts of all queues.
    from exporter.metrics import BY_NAME

    per_queue = {n for d in BY_NAME.values() if "queue" in d.labels for n in d.exposed_names}
    per_queue |= checks.recording_rule_names() | {"ALERTS"}
    checked = set()
    for panel, target in targets(dashboard):
        for metric, matchers in re.findall(r"([A-Za-z_:][\w:]*)\{([^}]*)\}", target["expr"]):
            assert re.search(r'\bjob=~"\$job\|?"', matchers), (panel["title"], metric)
            if metric in per_queue:
                assert re.search(r'\bqueue=~"\$queue\|?"', matchers), (panel["title"], metric)
                checked.add(metric)
    assert {"ALERTS", "jobqueue_jobs"} <= checked


def test_rows_and_panels_follow_the_issue_order(dashboard: dict[str, Any]) -> None:
    layout: dict[str, list[str]] = {}
    current: list[str] = []
    for panel in dashboard["panels"]:
        if panel["type"] == "row":
            current = layout.setdefault(panel["title"], [])
            current.extend(p["title"] for p in panel.get("panels", []))
        else:
            current.append(panel["title"])
    assert list(layout) == list(REQUIRED_LAYOUT)
    for row, titles in REQUIRED_LAYOUT.items():
        assert layout[row] == titles, row


def test_health_row_is_stat_panels_with_thresholds(dashboard: dict[str, Any]) -> None:
    titles = set(REQUIRED_LAYOUT["Health at a glance"])
    stats = [p for p in panels(dashboard) if p["title"] in titles]
    assert len(stats) == len(titles)
    for panel in stats:
        assert panel["type"] == "stat", panel["title"]
        assert len(panel["fieldConfig"]["defaults"]["thresholds"]["steps"]) >= 1
        assert panel["options"]["reduceOptions"]["calcs"] == ["lastNotNull"]
    up = next(p for p in stats if p["title"] == "Database reachable")
    options = up["fieldConfig"]["defaults"]["mappings"][0]["options"]
    assert (options["0"]["text"], options["1"]["text"]) == ("Down", "Up")


def runbook_anchors(panel: dict[str, Any]) -> set[str]:
    base = checks.load_dashboard()["links"][0]["url"]
    anchors = set()
    for link in panel.get("links", []):
        if link["url"].startswith(base + "#"):
            anchors.add(link["url"].removeprefix(base + "#"))
    return anchors


def test_alert_panels_link_to_existing_runbook_anchors(dashboard: dict[str, Any]) -> None:
    valid = {name.lower() for name in ALERT_NAMES}
    linked: set[str] = set()
    by_title = {p["title"]: p for p in panels(dashboard)}
    for panel in panels(dashboard):
        anchors = runbook_anchors(panel)
        assert anchors <= valid, (panel["title"], anchors - valid)
        linked |= anchors
    for title, alerts in REQUIRED_RUNBOOK_LINKS.items():
        assert {a.lower() for a in alerts} <= runbook_anchors(by_title[title]), title
    assert linked == valid, f"alerts no panel explains: {valid - linked}"


def test_substitution_replaces_every_grafana_variable() -> None:
    expr = 'rate(x{a=~"$instance",b=~"${job_type}",c=~"[[foo]]"}[$__rate_interval]) + $__range'
    assert checks.substitute(expr) == 'rate(x{a=~".+",b=~".+",c=~".+"}[1m]) + 1h'
    assert checks.substitute("y[${__interval}]", {"__interval": "5m"}) == "y[5m]"


def test_metric_name_extraction_ignores_labels_functions_and_keywords() -> None:
    expr = (
        'histogram_quantile(0.95, sum by (job_type, le) (rate(a_bucket{le="1", x=~"y"}[5m]))) '
        "/ on (job_type) group_left (reason) b_total offset 1h or vector(1e3) and bool c:rule:x"
    )
    assert checks.metric_names(expr) == {"a_bucket", "b_total", "c:rule:x"}


def all_exprs(dashboard: dict[str, Any]) -> list[str]:
    return [q.expr for q in checks.panel_queries(dashboard)] + [
        selector for _, selector in checks.variable_queries(dashboard)
    ]


def test_dashboard_uses_only_metrics_the_exporter_or_rules_define(
    dashboard: dict[str, Any],
) -> None:
    exprs = all_exprs(dashboard)
    assert len(exprs) > 30
    assert checks.unknown_metric_names(exprs) == {}


def test_metric_name_check_catches_a_misspelt_metric(dashboard: dict[str, Any]) -> None:
    board = json.loads(json.dumps(dashboard))
    panel = next(p for p in board["panels"] if p["title"] == "Queue depth by status")
    panel["targets"][0]["expr"] = panel["targets"][0]["expr"].replace(
        "jobqueue_jobs{", "jobqueue_job{"
    )
    unknown = checks.unknown_metric_names(all_exprs(board))
    assert list(unknown.values()) == [{"jobqueue_job"}]


def run_promtool_check(exprs: list[str], tmp_path: Path) -> subprocess.CompletedProcess[str]:
    promtool = shutil.which("promtool")
    assert promtool, "promtool is required (Debian package prometheus)"
    rules = tmp_path / "dashboard.rules.yml"
    rules.write_text(checks.promtool_rules_file(exprs))
    return subprocess.run(
        [promtool, "check", "rules", str(rules)], capture_output=True, text=True, check=False
    )


@pytest.mark.daemon
def test_every_query_parses_in_promtool(dashboard: dict[str, Any], tmp_path: Path) -> None:
    exprs = all_exprs(dashboard)
    result = run_promtool_check(exprs, tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"SUCCESS: {len(exprs)} rules found" in result.stdout + result.stderr


@pytest.mark.daemon
def test_promtool_check_rejects_a_broken_query(tmp_path: Path) -> None:
    result = run_promtool_check(["sum by (job_type (rate(x[1m]))"], tmp_path)
    assert result.returncode != 0


@pytest.mark.daemon
def test_slo_panels_divide_by_each_job_types_recorded_target(
    dashboard: dict[str, Any], tmp_path: Path
) -> None:
    """On rules rendered with an override, each type's burn and target are its own."""
    from exporter.rules import render_rules
    from exporter.settings import AlertSettings

    settings = dataclasses.replace(AlertSettings(), slo_success_target_by_job_type={"report": 0.9})
    (tmp_path / "rules.yml").write_text(render_rules(settings))
    exprs = {
        (panel["title"], target.get("legendFormat")): target["expr"]
        for panel, target in targets(dashboard)
    }
    burn = exprs[("SLO burn rate by job type (1h)", "{{job_type}}")]
    target = exprs[("Job types", "SLO target")]
    for expr in (burn, target, exprs[("Error budget left (1d)", "{{job_type}}")]):
        assert "slo:jobqueue_attempt_success:target" in expr
        assert "0.01" not in expr
        assert "0.99" not in expr
    base = 'job="jobqueue-exporter", instance="a", queue="q1"'
    series = []
    # 2 % of crawl's attempts fail (budget 1 %), 5 % of report's (its own budget 10 %).
    for job_type, failed, completed in (("crawl", 1, 49), ("report", 1, 19)):
        labels = f'{base}, job_type="{job_type}"'
        series += [
            {
                "series": f'jobqueue_job_failures_total{{{labels}, reason="error"}}',
                "values": f"0+{failed}x240",
            },
            {
                "series": f"jobqueue_jobs_completed_total{{{labels}}}",
                "values": f"0+{completed}x240",
            },
        ]

    def expect(expr: str, crawl: float, report: float) -> dict[str, Any]:
        return {
            "expr": f"round({checks.substitute(expr)}, 0.001)",
            "eval_time": "90m",
            "exp_samples": [
                {"labels": '{job_type="crawl"}', "value": crawl},
                {"labels": '{job_type="report"}', "value": report},
            ],
        }

    test = {
        "rule_files": ["rules.yml"],
        "evaluation_interval": "30s",
        "tests": [
            {
                "interval": "30s",
                "input_series": series,
                "promql_expr_test": [expect(burn, 2, 0.5), expect(target, 0.99, 0.9)],
            }
        ],
    }
    (tmp_path / "test.yml").write_text(yaml.safe_dump(test, sort_keys=False))
    promtool = shutil.which("promtool")
    assert promtool, "promtool is required (Debian package prometheus)"
    result = subprocess.run(
        [promtool, "test", "rules", "test.yml"],
        capture_output=True, text=True, timeout=300, check=False, cwd=tmp_path,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr


def test_panels_doc_lists_every_panel_and_its_empty_when_healthy_flag(
    dashboard: dict[str, Any],
) -> None:
    doc = checks.PANELS_DOC_PATH.read_text()
    rows = {}
    for line in doc.splitlines():
        cells = [c.strip() for c in re.split(r"(?<!\\)\|", line.strip().strip("|"))]
        if len(cells) >= 6 and cells[1] and not set(cells[1]) <= {"-", ":"}:
            rows[cells[1]] = cells
    for panel in panels(dashboard):
        if panel["type"] == "row":
            continue
        assert panel["title"] in rows, f"{panel['title']} missing from panels.md"
        flag = rows[panel["title"]][5].lower()
        expected = panel["title"] in checks.EMPTY_WHEN_HEALTHY
        assert flag.startswith("yes" if expected else "no"), (panel["title"], flag)
    assert set(rows) >= checks.EMPTY_WHEN_HEALTHY


class _Exposition(http.server.BaseHTTPRequestHandler):
    """A static-shaped /metrics whose counters grow on every scrape, so rates are non-zero."""

    scrapes = 0

    def do_GET(self) -> None:
        type(self).scrapes += 1
        n = type(self).scrapes
        lines = [
            "jobqueue_up 1",
            f"jobqueue_exporter_last_success_timestamp_seconds {time.time():.3f}",
            'jobqueue_jobs{job_type="email",status="pending"} 7',
            'jobqueue_jobs{job_type="email",status="running"} 2',
            'jobqueue_jobs_scheduled{job_type="email"} 3',
            'jobqueue_oldest_ready_wait_seconds{job_type="email"} 42',
            f'jobqueue_jobs_enqueued_total{{job_type="email"}} {10 * n}',
            f'jobqueue_jobs_completed_total{{job_type="email"}} {8 * n}',
            f'jobqueue_job_failures_total{{job_type="email",reason="error"}} {2 * n}',
            f'jobqueue_cost_usd_total{{job_type="email",component="ai"}} {0.5 * n}',
            f'jobqueue_cost_usd_total{{job_type="email",component="proxy"}} {0.1 * n}',
            f'jobqueue_job_wait_seconds_bucket{{job_type="email",le="1"}} {4 * n}',
            f'jobqueue_job_wait_seconds_bucket{{job_type="email",le="10"}} {8 * n}',
            f'jobqueue_job_wait_seconds_bucket{{job_type="email",le="+Inf"}} {8 * n}',
        ]
        # The exporter puts the queue label on every series (one queue here).
        lines = [
            re.sub(r"^(\w+)(?:\{(.*?)\})? ", lambda m: f'{m[1]}{{queue="main"'
                   + (f",{m[2]}" if m[2] else "") + "} ", line)
            for line in lines
        ]  # fmt: skip
        body = ("\n".join(lines) + "\n").encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/plain; version=0.0.4")
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _query(base: str, expr: str) -> list[Any]:
    url = f"{base}/api/v1/query?{urllib.parse.urlencode({'query': expr})}"
    with urllib.request.urlopen(url, timeout=5) as response:
        result: list[Any] = json.load(response)["data"]["result"]
        return result


@pytest.fixture
def prometheus(tmp_path: Path) -> Iterator[str]:
    """A real Prometheus on loopback scraping the exposition above every second.

    It loads the shipped rules, evaluated every second rather than every 30 s so the test need
    not wait: the SLO panels divide by their recorded per-type targets.
    """
    binary = shutil.which("prometheus")
    assert binary, "prometheus is required (Debian package prometheus)"
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Exposition)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    port = _free_port()
    rules = (checks.REPO / "alerts" / "jobqueue.rules.yml").read_text()
    (tmp_path / "rules.yml").write_text(
        re.sub(r"(?m)^    interval: \S+$", "    interval: 1s", rules)
    )
    config = tmp_path / "prometheus.yml"
    config.write_text(
        "global: {scrape_interval: 1s, evaluation_interval: 1s}\n"
        f"rule_files: ['{tmp_path / 'rules.yml'}']\n"
        "scrape_configs:\n"
        f"  - job_name: jobqueue-exporter\n"
        f"    static_configs: [{{targets: ['127.0.0.1:{server.server_address[1]}']}}]\n"
    )
    proc = subprocess.Popen(
        [
            binary,
            f"--config.file={config}",
            f"--storage.tsdb.path={tmp_path / 'data'}",
            f"--web.listen-address=127.0.0.1:{port}",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        # Wait until a rate over the scraped counters exists, i.e. a few scrapes landed.
        deadline = time.monotonic() + 60
        while True:
            assert proc.poll() is None, "prometheus exited"
            assert time.monotonic() < deadline, "prometheus never scraped the exposition"
            try:
                if _query(base, "rate(jobqueue_jobs_enqueued_total[4s]) > 0") and _query(
                    base, "slo:jobqueue_attempt_success:target"
                ):
                    wanted = _Exposition.scrapes + 5
                    break
            except OSError:
                pass
            time.sleep(0.2)
        # A few more scrapes, so the rates are lines rather than single points.
        while _Exposition.scrapes < wanted:
            assert time.monotonic() < deadline, "prometheus stopped scraping"
            time.sleep(0.2)
        yield base
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        server.shutdown()
        server.server_close()


@pytest.mark.slow
@pytest.mark.daemon
def test_preview_renders_panels_from_a_real_prometheus(prometheus: str, tmp_path: Path) -> None:
    output = tmp_path / "dashboard.png"
    end = float(_query(prometheus, "time()")[1])  # a scalar result is [time, "value"]
    result = subprocess.run(
        [
            sys.executable,
            str(checks.REPO / "dashboards" / "render_preview.py"),
            "--prometheus",
            prometheus,
            "--start",
            f"{end - 120:.3f}",
            "--end",
            f"{end:.3f}",
            "--output",
            str(output),
            "--scrape-interval",
            "1",
        ],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    counts = {
        title: int(n)
        for n, title in (line.split("\t") for line in result.stdout.splitlines() if "\t" in line)
    }
    assert output.read_bytes().startswith(b"\x89PNG\r\n\x1a\n")
    assert output.stat().st_size > 20_000
    # Fed panels got series; the ones the exposition leaves out rendered as "no data".
    for title in (
        "Database reachable",
        "Oldest runnable wait",
        "Cost (1h)",
        "Enqueued / completed / failed per second",
        "Queue depth by status",
        "Wait time p50 / p95 / p99",
        "Failed attempts by reason",
        "Hourly cost by component",
        "Job types",
        "SLO burn rate by job type (1h)",
        "Error budget left (1d)",
    ):
        assert counts[title] > 0, (title, result.stdout)
    assert counts["Jobs stuck"] == 0


def test_the_previews_outage_shows_yet_ends_before_any_lease_of_the_fleet() -> None:
    # Issue 35: a two-minute outage (four leases) reaped every running job as lease_expired
    # and zeroed three error budgets in the preview of a healthy fleet.
    from dashboards import record_preview
    from exporter.demo import FleetConfig
    from exporter.settings import QueueSettings

    lease, outage = FleetConfig().lease_seconds, record_preview.OUTAGE_SECONDS
    # A worker renews every third of its lease, so two thirds of it are always left; the
    # server's stop and start add a second or two to the outage.
    assert outage + 2 < lease * 2 / 3
    # At least one collection falls inside it: the outage is on the dashboard.
    assert outage >= QueueSettings(name="q").collect.interval
