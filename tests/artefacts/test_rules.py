"""The shipped rules: promtool lint and unit tests, drift against the renderer, runbook links,
metric names against exporter/metrics.py, and the pint/mixtool checks re-implemented."""

from __future__ import annotations

import dataclasses
import os
import re
import shutil
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
import yaml

from exporter.metrics import exposed_metric_names
from exporter.rules import (
    format_duration,
    parse_rule_labels,
    render_prometheus_rule,
    render_rules,
    rule_groups,
    runbook_url,
    selector_labels,
)
from exporter.settings import AlertSettings
from exporter.settings.kinds import parse_duration

ROOT = Path(__file__).resolve().parents[2]
RULES_FILE = ROOT / "alerts" / "jobqueue.rules.yml"
PROMETHEUS_RULE_FILE = ROOT / "deploy" / "kubernetes" / "monitoring" / "prometheusrule.yaml"
RULE_TESTS = sorted((ROOT / "alerts" / "tests").glob("*.yml"))
BUDGET_TEST = ROOT / "alerts" / "tests" / "budget" / "cost_budget.yml"
BUDGET_RULES_FILE = ROOT / "alerts" / "tests" / "budget" / "rules" / "jobqueue-budget.rules.yml"
RUNBOOKS = ROOT / "docs" / "runbooks.md"
BUDGET_SETTINGS = dataclasses.replace(AlertSettings(), cost_budget_usd_per_hour=50.0)

# Every alert named in issues 4, 15 and 21; the budget alert exists only with a budget.
EXPECTED_ALERTS = {
    "JobQueueJobsStuck",
    "JobQueueJobOverrun",
    "JobQueueErrorBudgetBurn",
    "JobQueueWaitBudgetBurn",
    "JobQueueCostNewJobType",
    "JobQueueUnitCostAnomaly",
    "JobQueueSlowDrain",
    "JobQueueProducersStopped",
    "JobQueueWorkerCrashStorm",
    "JobQueueDeadLetterSize",
    "JobQueueMalformedRows",
    "JobQueueCollectionErrors",
    "JobQueueLabelCapReached",
    "JobQueueReaperNotRunning",
    "JobQueueDeadlineKills",
    "JobQueueCostSpike",
    "JobQueueBacklogStale",
    "JobQueueNoProgress",
    "JobQueueHighFailureRatio",
    "JobQueueDeadLetterGrowing",
    "JobQueueDatabaseUnreachable",
    "JobQueueExporterDown",
    "JobQueueMetricsAbsent",
    "JobQueueCollectionSlow",
    "JobQueueMissingIndex",
    "JobQueueJobsVanished",
    "JobQueueUnmappedStatus",
    "JobQueueUnstampedChanges",
    "JobQueueHeldJobsCapExceeded",
    "JobQueueLogicalLagGrowing",
    "JobQueueLogicalWalNearCap",
    "JobQueueLogicalWalUnbounded",
    "JobQueueLogicalGap",
}


def _promtool() -> str:
    path = shutil.which("promtool")
    assert path, "promtool is not installed (Debian package prometheus); these tests need it"
    return path


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, capture_output=True, text=True, timeout=300, check=False)


def _evaluations(test_file: Path) -> int:
    """How many rule evaluations promtool makes for a test file: each case's last eval_time
    over the file's evaluation_interval (what its run time follows)."""
    document = yaml.safe_load(test_file.read_text())
    interval = parse_duration(document.get("evaluation_interval", "1m"))
    total = 0
    for case in document["tests"]:
        checks = case.get("alert_rule_test", []) + case.get("promql_expr_test", [])
        total += int(max((parse_duration(c["eval_time"]) for c in checks), default=0) // interval)
    return total


def _rules(settings: AlertSettings) -> list[dict[str, Any]]:
    return [rule for group in rule_groups(settings) for rule in group["rules"]]


def _alerts(settings: AlertSettings) -> list[dict[str, Any]]:
    return [rule for rule in _rules(settings) if "alert" in rule]


# ---- promtool -------------------------------------------------------------------------


@pytest.mark.daemon
def test_committed_rules_pass_promtool_lint() -> None:
    result = _run(_promtool(), "check", "rules", "--lint=all", "--lint-fatal", str(RULES_FILE))
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.slow
@pytest.mark.daemon
def test_promtool_suite_passes_standalone_with_the_documented_glob() -> None:
    """`promtool test rules alerts/tests/*.yml alerts/tests/*/*.yml` from the checkout itself.

    One promtool per file, in parallel: the same files and paths as the documented command.
    The files with the most evaluations start first (weekly.yml alone takes a third of the
    time), so the last one to finish is a short one and neither core waits long for the other.
    """
    tests = [*RULE_TESTS, *sorted((ROOT / "alerts" / "tests").glob("*/*.yml"))]
    assert len(tests) >= 4
    assert BUDGET_TEST in tests
    tests.sort(key=_evaluations, reverse=True)

    def run(test: Path) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [_promtool(), "test", "rules", str(test.relative_to(ROOT))],
            capture_output=True, text=True, timeout=900, check=False, cwd=ROOT,
        )  # fmt: skip

    with ThreadPoolExecutor(max_workers=os.cpu_count() or 2) as pool:
        for test, result in zip(tests, pool.map(run, tests), strict=True):
            output = result.stdout + result.stderr
            assert result.returncode == 0, f"{test.name}: {output}"
            assert "FAILED" not in output
            assert "no file match" not in output


def _check_loaded_together(files: list[Path], directory: Path) -> subprocess.CompletedProcess[str]:
    """promtool's duplicate-rule lint over the groups of ``files`` as Prometheus loads them.

    Prometheus loads a glob's files side by side, so a record or alert name with the same
    labels in two files is evaluated twice ("duplicate sample for timestamp"); promtool looks
    for duplicates within one file, so the groups are merged into one first.
    """
    groups = []
    for path in files:
        for group in yaml.safe_load(path.read_text())["groups"]:
            groups.append({**group, "name": f"{path.name}/{group['name']}"})
    merged = directory / "together.rules.yml"
    merged.write_text(yaml.safe_dump({"groups": groups}, sort_keys=False))
    return _run(
        _promtool(), "check", "rules", "--lint=duplicate-rules", "--lint-fatal", str(merged)
    )


@pytest.mark.daemon
def test_every_rule_file_of_the_alerts_glob_loads_with_the_others(tmp_path: Path) -> None:
    shipped = sorted((ROOT / "alerts").glob("*.rules.yml"))
    assert RULES_FILE in shipped
    assert BUDGET_RULES_FILE not in shipped
    result = _check_loaded_together(shipped, tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.daemon
def test_loading_the_budget_fixture_beside_the_shipped_rules_is_a_duplicate(
    tmp_path: Path,
) -> None:
    """The check fails on the old layout, where the budget fixture sat in alerts/."""
    result = _check_loaded_together([RULES_FILE, BUDGET_RULES_FILE], tmp_path)
    assert result.returncode != 0
    assert "duplicate rule(s) found" in result.stdout + result.stderr
    assert "job:jobqueue_up:max" in result.stdout + result.stderr


@pytest.mark.daemon
def test_budget_rendering_passes_promtool_lint() -> None:
    lint = _run(_promtool(), "check", "rules", "--lint=all", "--lint-fatal", str(BUDGET_RULES_FILE))
    assert lint.returncode == 0, lint.stdout + lint.stderr


def test_committed_generated_tests_are_the_generator_output() -> None:
    from tests.rulegen.files import generated

    for path, text in generated().items():
        assert path.read_text() == text, (
            f"{path.relative_to(ROOT)} is stale: run `python -m tests.rulegen`"
        )


def test_every_alert_has_a_firing_and_a_silent_case() -> None:
    from tests.rulegen.cases import all_cases
    from tests.rulegen.weekly import budget_cases, weekly_cases

    cases = [*all_cases(), *weekly_cases(), *budget_cases()]
    firing = {c.alert for c in cases if c.fire_at}
    silent = {c.alert for c in cases if c.silent_at}
    everything = EXPECTED_ALERTS | {"JobQueueCostBudgetExceeded"}
    assert everything - firing == set(), "alerts without a firing case"
    assert everything - silent == set(), "alerts without a silent case"


@pytest.mark.daemon
def test_a_wrong_expectation_makes_promtool_fail(tmp_path: Path) -> None:
    """The harness sees promtool failures: a test expecting silence where an alert fires fails."""
    broken = tmp_path / "broken.yml"
    broken.write_text(
        yaml.safe_dump(
            {
                "rule_files": [str(RULES_FILE)],
                "evaluation_interval": "30s",
                "tests": [
                    {
                        "interval": "30s",
                        "input_series": [
                            {"series": 'jobqueue_up{job="jobqueue-exporter"}', "values": "0x20"}
                        ],
                        "alert_rule_test": [
                            {"eval_time": "9m", "alertname": "JobQueueDatabaseUnreachable"}
                        ],
                    }
                ],
            }
        )
    )
    result = _run(_promtool(), "test", "rules", str(broken))
    assert result.returncode != 0


def test_per_type_overrides_render_one_term_per_type() -> None:
    settings = dataclasses.replace(
        AlertSettings(),
        backlog_stale_after_by_job_type={"report": 7200.0},
        slo_success_target_by_job_type={"report": 0.9},
    )
    stale = next(r for r in _alerts(settings) if r["alert"] == "JobQueueBacklogStale")
    assert 'job_type!~"report"}[5m]) > 900' in stale["expr"]
    assert 'job_type="report"}[5m]) > 7200' in stale["expr"]
    burn = next(
        r for r in _rules(settings) if r.get("record") == "slo:jobqueue_attempt_errors:burn_rate1h"
    )
    assert '{job_type="report"} / 0.1' in burn["expr"]
    assert '{job_type!~"report"} / 0.01' in burn["expr"]


def test_counters_are_summed_across_pods_and_gauges_maxed() -> None:
    """A rollout splits a counter over two pods' series: only a sum counts it whole."""
    for rule in _rules(AlertSettings()):
        for inner in re.findall(r"(\w+) without\([^)]*\) \((?:rate|increase)\(", rule["expr"]):
            assert inner == "sum", rule.get("alert") or rule.get("record")


def test_every_rule_keeps_the_queue_label() -> None:
    for rule in _rules(AlertSettings()):
        assert not re.search(r"\b(by|without)\([^)]*\bqueue\b", rule["expr"]), rule


def test_short_durations_render_for_end_to_end_tests() -> None:
    fast = dataclasses.replace(
        AlertSettings(),
        evaluation_interval=1.0,
        baseline_evaluation_interval=1.0,
        stuck_for=5.0,
        deadline_kills_window=60.0,
    )
    groups = rule_groups(fast)
    assert {g["interval"] for g in groups} == {"1s"}
    stuck = next(r for r in _alerts(fast) if r["alert"] == "JobQueueJobsStuck")
    assert stuck["for"] == "5s"
    kills = next(r for r in _alerts(fast) if r["alert"] == "JobQueueDeadlineKills")
    assert "[1m]" in kills["expr"]


@pytest.mark.parametrize(
    ("seconds", "text"),
    [(0, "0s"), (0.5, "500ms"), (30, "30s"), (90, "1m30s"), (3600, "1h"), (86400 * 7, "7d")],
)
def test_format_duration_writes_prometheus_durations(seconds: float, text: str) -> None:
    assert format_duration(seconds) == text


# ---- drift and structure --------------------------------------------------------------


def test_committed_rules_file_is_the_rendering_of_the_defaults() -> None:
    assert RULES_FILE.read_text() == render_rules(AlertSettings()), (
        "alerts/jobqueue.rules.yml is stale: run "
        "`jobqueue-exporter render-rules --output alerts/jobqueue.rules.yml`"
    )


def test_committed_prometheusrule_is_the_rendering_of_the_defaults() -> None:
    assert PROMETHEUS_RULE_FILE.read_text() == render_prometheus_rule(AlertSettings())
    document = yaml.safe_load(PROMETHEUS_RULE_FILE.read_text())
    assert document["apiVersion"] == "monitoring.coreos.com/v1"
    assert document["kind"] == "PrometheusRule"
    assert document["spec"]["groups"] == yaml.safe_load(RULES_FILE.read_text())["groups"]


def test_prometheusrule_labels_replace_the_release_default() -> None:
    default = yaml.safe_load(render_prometheus_rule(AlertSettings()))["metadata"]["labels"]
    assert default["release"] == "kube-prometheus-stack"
    labels = parse_rule_labels(["release=monitoring", "example.com/team=data-eng"])
    chosen = yaml.safe_load(render_prometheus_rule(AlertSettings(), labels=labels))
    assert chosen["metadata"]["labels"] == {
        "app.kubernetes.io/name": "jobqueue-exporter",
        "app.kubernetes.io/component": "alerting-rules",
        "app.kubernetes.io/part-of": "jobqueue",
        "release": "monitoring",
        "example.com/team": "data-eng",
    }


@pytest.mark.parametrize("text", ["release", "bad key=x", "release=a b", "-x=1", "k=" + "v" * 64])
def test_prometheusrule_label_rejects_what_kubernetes_would(text: str) -> None:
    with pytest.raises(ValueError, match="KEY=VALUE"):
        parse_rule_labels([text])


def test_render_rules_command_sets_the_prometheusrule_labels(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from exporter.cli import main

    output = tmp_path / "rule.yaml"
    argv = ["render-rules", "--format", "prometheusrule", "--output", str(output)]
    labels = ["--prometheusrule.label", "release=prom", "--prometheusrule.label", "tier=ops"]
    assert main([*argv, *labels], {}) == 0
    metadata = yaml.safe_load(output.read_text())["metadata"]
    assert metadata["labels"]["release"] == "prom"
    assert metadata["labels"]["tier"] == "ops"
    assert main(argv, {}) == 0
    assert yaml.safe_load(output.read_text())["metadata"]["labels"]["release"] == (
        "kube-prometheus-stack"
    )
    capsys.readouterr()
    assert main([*argv, "--prometheusrule.label", "no-equals"], {}) == 2
    assert "--prometheusrule.label: 'no-equals' is not KEY=VALUE" in capsys.readouterr().err
    assert main(["render-rules", *labels], {}) == 2
    assert "needs --format prometheusrule" in capsys.readouterr().err
    assert main(labels, {}) == 2
    assert "--prometheusrule.label is a flag of render-rules, not of run" in capsys.readouterr().err


def test_prometheusrule_namespace_is_optional() -> None:
    document = yaml.safe_load(render_prometheus_rule(AlertSettings(), "x", namespace="monitoring"))
    assert document["metadata"]["name"] == "x"
    assert document["metadata"]["namespace"] == "monitoring"


def readme_alert_rows(readme: str) -> set[str]:
    """The alert names of the README's alert table (``A / B`` rows share JobQueue)."""
    section = readme.split("\n## Alerts\n", 1)[1].split("\n## ", 1)[0]
    cells = [line.split("|")[1].strip() for line in section.splitlines() if line.startswith("| ")]
    return {
        name if name.startswith("JobQueue") else "JobQueue" + name
        for cell in cells
        if cell.startswith("JobQueue")
        for name in cell.split(" / ")
    }


def test_every_alert_has_a_row_in_the_readme_alert_table() -> None:
    rows = readme_alert_rows((ROOT / "README.md").read_text())
    assert rows == {r["alert"] for r in _alerts(BUDGET_SETTINGS)}


def test_the_readme_alert_table_check_reads_shared_rows_and_misses_a_dropped_one() -> None:
    readme = "# x\n\n## Alerts\n\n| alert | when |\n|---|---|\n| JobQueueA / B | x |\n| JobQueueC | y |\n\n## Next\n"
    assert readme_alert_rows(readme) == {"JobQueueA", "JobQueueB", "JobQueueC"}
    assert readme_alert_rows(readme.replace("| JobQueueC | y |\n", "")) == {
        "JobQueueA",
        "JobQueueB",
    }


def test_every_issue_alert_is_rendered_and_budget_only_when_configured() -> None:
    default_names = {r["alert"] for r in _alerts(AlertSettings())}
    assert default_names == EXPECTED_ALERTS
    budget_names = {r["alert"] for r in _alerts(BUDGET_SETTINGS)}
    assert budget_names == EXPECTED_ALERTS | {"JobQueueCostBudgetExceeded"}


def test_deadline_kills_has_a_warning_and_a_critical_twin() -> None:
    twins = [r for r in _alerts(AlertSettings()) if r["alert"] == "JobQueueDeadlineKills"]
    assert sorted(r["labels"]["severity"] for r in twins) == ["critical", "warning"]


def test_multiline_expressions_are_yaml_blocks() -> None:
    text = RULES_FILE.read_text()
    assert "expr: |" in text
    assert "\\n" not in text


def test_exporter_down_carries_static_labels_for_inhibition() -> None:
    down = next(r for r in _alerts(AlertSettings()) if r["alert"] == "JobQueueExporterDown")
    assert down["labels"]["job"] == "jobqueue-exporter"
    assert down["labels"]["component"] == "jobqueue"


def test_selector_labels_keep_only_equality_matchers() -> None:
    assert selector_labels('job="a", env=~"p.*", team!="x", ns = "q"') == {"job": "a", "ns": "q"}


# ---- runbooks -------------------------------------------------------------------------


def _github_anchor(heading: str) -> str:
    slug = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return slug.replace(" ", "-")


def _runbook_anchors() -> set[str]:
    headings = re.findall(r"^#{1,6}\s+(.+?)\s*$", RUNBOOKS.read_text(), flags=re.MULTILINE)
    return {_github_anchor(h) for h in headings}


def test_every_runbook_url_points_at_a_section_of_the_runbooks() -> None:
    anchors = _runbook_anchors()
    settings = BUDGET_SETTINGS
    for rule in _alerts(settings):
        url = rule["annotations"]["runbook_url"]
        assert url == runbook_url(settings, rule["alert"])
        base, _, anchor = url.partition("#")
        assert base == settings.runbook_base_url
        assert anchor in anchors, f"docs/runbooks.md has no section #{anchor}"


def test_runbook_anchor_check_rejects_an_unknown_anchor() -> None:
    assert "jobqueuenosuchalert" not in _runbook_anchors()
    assert "jobqueuejobsstuck" in _runbook_anchors()


# ---- metric names ---------------------------------------------------------------------

_KEYWORDS = {
    "and", "or", "unless", "by", "without", "on", "ignoring", "group_left", "group_right",
    "offset", "bool", "inf", "nan",
}  # fmt: skip
_NAME = re.compile(r"(?<![\w.:])([a-zA-Z_:][\w:]*)(?!\w)(\s*\()?")


def metric_names(expr: str) -> set[str]:
    """Metric names referenced by a PromQL expression (functions, keywords, labels removed)."""
    text = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)
    text = re.sub(r"\{[^}]*\}", " ", text)  # label matchers
    text = re.sub(r"\[[^\]]*\]", " ", text)  # ranges and subqueries
    text = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", text)
    names = set()
    for match in _NAME.finditer(text):
        name, call = match.group(1), match.group(2)
        if call or name in _KEYWORDS:
            continue
        names.add(name)
    return names


def _series_name(series: str) -> str:
    return series.split("{", 1)[0].strip()


def _test_series_names(path: Path) -> set[str]:
    document = yaml.safe_load(path.read_text())
    return {_series_name(s["series"]) for t in document["tests"] for s in t.get("input_series", [])}


def _unknown_names(names: set[str], recorded: set[str]) -> set[str]:
    return names - exposed_metric_names() - recorded - {"up"}


def test_metric_name_tokenizer_finds_only_metric_names() -> None:
    expr = (
        'sum without(reason) (max without(instance, pod) (rate(jobqueue_x_total{a="b c", '
        'reason!="lease_expired"}[1h] offset 1d))) * 3600 > 5\nunless on(job) absent(up) '
        "and job:rec:rule > 1e3"
    )
    assert metric_names(expr) == {"jobqueue_x_total", "up", "job:rec:rule"}


def test_metric_name_check_catches_a_misspelt_name() -> None:
    expr = (
        'max without(instance, pod) (rate(jobqueue_job_failure_total{reason="deadline"}[5m])) > 0'
    )
    assert _unknown_names(metric_names(expr), set()) == {"jobqueue_job_failure_total"}


def test_every_metric_in_rules_and_test_inputs_exists() -> None:
    settings = BUDGET_SETTINGS
    recorded = {r["record"] for r in _rules(settings) if "record" in r}
    used = set().union(*(metric_names(r["expr"]) for r in _rules(settings)))
    assert "jobqueue_job_failures_total" in used
    assert not _unknown_names(used, recorded), "rules use unknown metrics"
    recorded |= {"ALERTS"}
    for path in [*RULE_TESTS, BUDGET_TEST]:
        unknown = _unknown_names(_test_series_names(path), recorded)
        assert not unknown, f"{path.name} feeds unknown series {unknown}"


# ---- pint / mixtool checks re-implemented ---------------------------------------------

_COUNTER_SUFFIXES = ("_total", "_bucket", "_sum", "_count")
_SEVERITIES = {"critical", "warning", "info"}


def lint_alert(rule: dict[str, Any]) -> list[str]:
    """Problems pint's offline checks and mixtool's alert rules would report for one alert."""
    problems = []
    name = rule["alert"]
    expr = rule["expr"]
    bare = re.sub(r"\{[^}]*\}", "", re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr))
    if not re.search(r"(==|!=|>=|<=|>|<)", bare) and "absent(" not in bare:
        problems.append("alerts/comparison: no comparison")
    if not rule.get("for") or rule["for"] == "0s":
        problems.append("for: missing")
    if not re.fullmatch(r"JobQueue(?:[A-Z][a-z0-9]+)+", name):
        problems.append("alert-name-camelcase: not CamelCase with the JobQueue prefix")
    labels = rule.get("labels", {})
    if labels.get("severity") not in _SEVERITIES:
        problems.append("severity: not critical|warning|info")
    if labels.get("component") != "jobqueue":
        problems.append("component: missing")
    if any("$value" in v or "{{" in v for v in labels.values()):
        problems.append("alerts/template: query value in labels")
    annotations = rule.get("annotations", {})
    summary = annotations.get("summary", "")
    if "{{" in summary or not re.fullmatch(r"[A-Z].+\.", summary):
        problems.append("alert-summary-style: summary must be static and end with '.'")
    description = annotations.get("description", "")
    if "{{" not in description:
        problems.append("alert-description-templating: description is not templated")
    if not annotations.get("runbook_url"):
        problems.append("runbook_url: missing")
    for counter in re.findall(r"\b(?:rate|irate|increase)\(\s*([a-zA-Z_:][\w:]*)", expr):
        if not counter.endswith(_COUNTER_SUFFIXES):
            problems.append(f"promql/rate: {counter} is not a counter")
    if re.search(r"\b(topk|bottomk)\s*\(", expr):
        problems.append("promql/fragile: topk/bottomk in an alert")
    return problems


@pytest.mark.parametrize("rule", _alerts(BUDGET_SETTINGS), ids=lambda r: r["alert"])
def test_alert_passes_pint_and_mixtool_style_checks(rule: dict[str, Any]) -> None:
    assert lint_alert(rule) == []


def test_alert_job_type_alerts_quote_job_type_and_value() -> None:
    for rule in _alerts(BUDGET_SETTINGS):
        description = rule["annotations"]["description"]
        expr = rule["expr"].replace("job_types_folded", "")
        per_type = "job_type" in expr and "pod, job_type)" not in expr
        if per_type or rule["expr"].startswith("job_type:"):
            assert "$labels.job_type" in description, rule["alert"]
        assert "$value" in description or "$labels" in description, rule["alert"]


def test_lint_reports_a_bad_alert() -> None:
    bad = {
        "alert": "queue_stuck",
        "expr": "rate(jobqueue_stuck_jobs[5m]) + topk(1, jobqueue_up)",
        "labels": {"severity": "page", "value": "{{ $value }}"},
        "annotations": {"summary": "Stuck {{ $labels.job_type }}", "description": "Stuck."},
    }
    problems = " | ".join(lint_alert(bad))
    for expected in (
        "alerts/comparison",
        "for: missing",
        "alert-name-camelcase",
        "severity",
        "component",
        "query value in labels",
        "alert-summary-style",
        "alert-description-templating",
        "runbook_url",
        "promql/rate: jobqueue_stuck_jobs",
        "promql/fragile",
    ):
        assert expected in problems


def test_queue_alerts_keep_firing_through_an_outage_and_health_alerts_do_not() -> None:
    from exporter.rules import HEALTH_ALERTS

    settings = AlertSettings(cost_budget_usd_per_hour=50.0)
    for alert in _alerts(settings):
        if alert["alert"] in HEALTH_ALERTS:
            assert "keep_firing_for" not in alert, alert["alert"]
        else:
            assert alert["keep_firing_for"] == "7m", alert["alert"]
    for alert in _alerts(dataclasses.replace(settings, keep_firing_for=0)):
        assert "keep_firing_for" not in alert, alert["alert"]
