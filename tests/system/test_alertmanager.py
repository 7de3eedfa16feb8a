"""The example Alertmanager config: amtool validation, routing, and inhibition on a real
Alertmanager (amtool cannot evaluate inhibition)."""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml

from exporter.rules import BLINDING_ALERTS, alerting_rules
from exporter.settings import AlertSettings

pytestmark = pytest.mark.daemon

ROOT = Path(__file__).resolve().parents[2]
CONFIG = ROOT / "alerts" / "alertmanager.yml"


def _binary(name: str) -> str:
    path = shutil.which(name)
    assert path, f"{name} is not installed (Debian package prometheus-alertmanager)"
    return path


def test_config_passes_amtool_check_config() -> None:
    result = subprocess.run(
        [_binary("amtool"), "check-config", str(CONFIG)],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout
    # Alertmanager 0.25 can crash on empty lists; the config must not contain any.
    assert not _empty_lists(yaml.safe_load(CONFIG.read_text()))


def _empty_lists(node: Any, path: str = "") -> list[str]:
    """Paths of empty lists anywhere in a parsed YAML document."""
    if isinstance(node, dict):
        return [p for k, v in node.items() for p in _empty_lists(v, f"{path}.{k}")]
    if isinstance(node, list):
        found = [path] if not node else []
        return found + [p for i, v in enumerate(node) for p in _empty_lists(v, f"{path}[{i}]")]
    return []


def test_empty_list_check_finds_one() -> None:
    assert _empty_lists({"a": [{"b": []}]}) == [".a[0].b"]


@pytest.mark.parametrize(
    ("labels", "receiver"),
    [
        (["severity=critical", "alertname=JobQueueJobsStuck", "job=jobqueue-exporter",
          "job_type=crawl", "component=jobqueue"], "pager"),
        (["severity=warning", "alertname=JobQueueDeadlineKills", "job=jobqueue-exporter",
          "job_type=crawl", "component=jobqueue"], "ticket"),
        (["severity=info", "alertname=JobQueueMissingIndex", "job=jobqueue-exporter",
          "component=jobqueue"], "blackhole"),
        (["alertname=Unlabelled"], "ticket"),
    ],
    ids=["critical", "warning", "info", "fall-through"],
)  # fmt: skip
def test_route_reaches_its_receiver(labels: list[str], receiver: str) -> None:
    result = subprocess.run(
        [_binary("amtool"), "config", "routes", "test", f"--config.file={CONFIG}",
         f"--verify.receivers={receiver}", *labels],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr


def test_route_check_fails_on_a_wrong_receiver() -> None:
    result = subprocess.run(
        [_binary("amtool"), "config", "routes", "test", f"--config.file={CONFIG}",
         "--verify.receivers=pager", "severity=warning"],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert result.returncode != 0


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _get(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=5) as response:
        body = response.read()
    return json.loads(body) if body else None


@pytest.fixture(scope="module")
def alertmanager(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A real Alertmanager on a free loopback port with the example config."""
    storage = tmp_path_factory.mktemp("alertmanager")
    port = _free_port()
    base = f"http://127.0.0.1:{port}"
    log = (storage / "alertmanager.log").open("w")
    process = subprocess.Popen(
        [_binary("prometheus-alertmanager"), f"--config.file={CONFIG}",
         f"--storage.path={storage}", f"--web.listen-address=127.0.0.1:{port}",
         "--cluster.listen-address="],
        stdout=log, stderr=subprocess.STDOUT,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 30
        while True:
            assert process.poll() is None, (storage / "alertmanager.log").read_text()
            try:
                with urllib.request.urlopen(f"{base}/-/ready", timeout=1) as response:
                    if response.status == 200:
                        break
            except OSError:
                pass
            assert time.monotonic() < deadline, "Alertmanager did not become ready"
            time.sleep(0.1)
        yield base
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        log.close()


def _rule_labels(alertname: str, severity: str | None = None) -> dict[str, str]:
    """The static labels the shipped rule puts on an alert."""
    for rule in alerting_rules(AlertSettings()):
        if rule["alert"] == alertname and severity in (None, rule["labels"]["severity"]):
            return {"alertname": alertname, **rule["labels"]}
    raise AssertionError(f"no rule {alertname} {severity}")


def _post(base: str, alerts: list[dict[str, str]]) -> None:
    now = datetime.now(UTC)
    body = [
        {
            "labels": labels,
            "annotations": {"summary": "test"},
            "startsAt": now.isoformat(),
            "endsAt": (now + timedelta(hours=1)).isoformat(),
        }
        for labels in alerts
    ]
    request = urllib.request.Request(
        f"{base}/api/v2/alerts",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
        method="POST",
    )
    with urllib.request.urlopen(request, timeout=5) as response:
        assert response.status == 200


def _states(
    base: str, job: str, expected: dict[tuple[str, str], str]
) -> dict[tuple[str, str], Any]:
    """Poll until every (alertname, severity) of ``job`` has the expected state."""
    deadline = time.monotonic() + 15
    while True:
        states = {
            (a["labels"]["alertname"], a["labels"]["severity"]): a["status"]
            for a in _get(f"{base}/api/v2/alerts")
            if a["labels"].get("job") == job
        }
        if {k: v["state"] for k, v in states.items()} == expected or time.monotonic() > deadline:
            return states
        time.sleep(0.1)


def _queue_alerts(job: str) -> list[dict[str, str]]:
    return [
        {**_rule_labels("JobQueueJobsStuck"), "job": job, "job_type": "crawl"},
        {**_rule_labels("JobQueueDeadLetterGrowing"), "job": job, "job_type": "crawl"},
        {**_rule_labels("JobQueueMissingIndex"), "job": job, "index": "job_exporter_dead_idx"},
    ]


QUEUE_KEYS = [
    ("JobQueueJobsStuck", "critical"),
    ("JobQueueDeadLetterGrowing", "warning"),
    ("JobQueueMissingIndex", "info"),
]


@pytest.mark.parametrize("cause", BLINDING_ALERTS)
def test_blinding_alert_inhibits_every_queue_alert_of_its_job(
    alertmanager: str, cause: str
) -> None:
    source = _rule_labels(cause)
    job = source["job"] if cause == "JobQueueExporterDown" else f"db-{cause.lower()}"
    if cause != "JobQueueExporterDown":
        source = {**source, "job": job}  # from the series, not static
    # The ExporterDown case uses exactly the rule's static labels: absent() has no others.
    _post(alertmanager, [source, *_queue_alerts(job)])
    expected = {(cause, "critical"): "active", **dict.fromkeys(QUEUE_KEYS, "suppressed")}
    states = _states(alertmanager, job, expected)
    assert {k: v["state"] for k, v in states.items()} == expected
    for key in QUEUE_KEYS:
        assert states[key]["inhibitedBy"], key
    assert not states[(cause, "critical")]["inhibitedBy"]


def test_queue_alerts_stay_active_without_a_blinding_alert(alertmanager: str) -> None:
    job = "quiet-queue"
    # A database outage of another queue must not silence this one.
    _post(alertmanager, [{**_rule_labels("JobQueueDatabaseUnreachable"), "job": "elsewhere"}])
    _post(alertmanager, _queue_alerts(job))
    expected = dict.fromkeys(QUEUE_KEYS, "active")
    states = _states(alertmanager, job, expected)
    assert {k: v["state"] for k, v in states.items()} == expected


def test_critical_twin_inhibits_its_warning_twin(alertmanager: str) -> None:
    job = "twins"
    common = {"job": job, "job_type": "crawl", "reason": "deadline"}
    other_type = {"job": job, "job_type": "mail", "reason": "deadline"}
    _post(
        alertmanager,
        [
            {**_rule_labels("JobQueueDeadlineKills", "critical"), **common},
            {**_rule_labels("JobQueueDeadlineKills", "warning"), **common},
        ],
    )
    expected = {
        ("JobQueueDeadlineKills", "critical"): "active",
        ("JobQueueDeadlineKills", "warning"): "suppressed",
    }
    states = _states(alertmanager, job, expected)
    assert {k: v["state"] for k, v in states.items()} == expected
    # The warning of another job type has no critical twin and stays active.
    _post(alertmanager, [{**_rule_labels("JobQueueDeadlineKills", "warning"), **other_type}])
    deadline = time.monotonic() + 15
    while True:
        mail = [
            a
            for a in _get(f"{alertmanager}/api/v2/alerts")
            if a["labels"].get("job") == job and a["labels"].get("job_type") == "mail"
        ]
        if (mail and mail[0]["status"]["state"] == "active") or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    assert mail[0]["status"]["state"] == "active"


def test_exporter_down_inhibits_metrics_absent_and_metrics_absent_pages_alone(
    alertmanager: str,
) -> None:
    """A whole job down pages once (ExporterDown); one vanished pod of it pages per queue."""
    down = {**_rule_labels("JobQueueExporterDown"), "namespace": "team-a"}
    job = down["job"] + "-absent"
    absent = {**_rule_labels("JobQueueMetricsAbsent"), "namespace": "team-a", "queue": "qa"}
    _post(alertmanager, [{**down, "job": job}, {**absent, "job": job}])
    expected = {
        ("JobQueueExporterDown", "critical"): "active",
        ("JobQueueMetricsAbsent", "critical"): "suppressed",
    }
    states = _states(alertmanager, job, expected)
    assert {k: v["state"] for k, v in states.items()} == expected
    alone = f"{job}-alone"
    _post(alertmanager, [{**absent, "job": alone}])
    states = _states(alertmanager, alone, {("JobQueueMetricsAbsent", "critical"): "active"})
    assert {k: v["state"] for k, v in states.items()} == {
        ("JobQueueMetricsAbsent", "critical"): "active"
    }


@pytest.mark.parametrize(
    ("source", "target"),
    [
        ("JobQueueNoProgress", "JobQueueBacklogStale"),
        ("JobQueueNoProgress", "JobQueueSlowDrain"),
        ("JobQueueReaperNotRunning", "JobQueueJobsStuck"),
    ],
)
def test_cause_inhibits_its_symptom_for_the_same_queue_and_job_type_only(
    alertmanager: str, source: str, target: str
) -> None:
    job = f"cause-{source.lower()}-{target.lower()}"
    same = {"job": job, "namespace": "ns", "queue": "q1", "job_type": "crawl"}
    other_queue = {**same, "queue": "q2"}
    other_type = {**same, "job_type": "mail"}
    _post(
        alertmanager,
        [
            {**_rule_labels(source), **same},
            {**_rule_labels(target), **same},
            {**_rule_labels(target), **other_queue},
            {**_rule_labels(target), **other_type},
        ],
    )
    deadline = time.monotonic() + 15
    while True:
        states = {
            (a["labels"]["alertname"], a["labels"]["queue"], a["labels"]["job_type"]): a["status"][
                "state"
            ]
            for a in _get(f"{alertmanager}/api/v2/alerts")
            if a["labels"].get("job") == job
        }
        expected = {
            (source, "q1", "crawl"): "active",
            (target, "q1", "crawl"): "suppressed",
            (target, "q2", "crawl"): "active",
            (target, "q1", "mail"): "active",
        }
        if states == expected or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    assert states == expected


@pytest.mark.parametrize("cause", ["JobQueueDatabaseUnreachable", "JobQueueMetricsAbsent"])
def test_queue_outage_of_one_queue_leaves_another_queue_of_the_job_alone(
    alertmanager: str, cause: str
) -> None:
    job = f"two-queues-{cause.lower()}"
    down = {**_rule_labels(cause), "job": job, "queue": "qa"}
    _post(
        alertmanager,
        [
            down,
            {**_rule_labels("JobQueueJobsStuck"), "job": job, "queue": "qa", "job_type": "x"},
            {**_rule_labels("JobQueueJobsStuck"), "job": job, "queue": "qb", "job_type": "x"},
        ],
    )
    expected = {"qa": "suppressed", "qb": "active"}
    assert _stuck_states(alertmanager, job, "queue", expected) == expected


def _stuck_states(
    alertmanager: str, job: str, key: str, expected: dict[str, str]
) -> dict[str, str]:
    """JobsStuck's state by the ``key`` label, once it is ``expected`` or after 15 s."""
    deadline = time.monotonic() + 15
    while True:
        states = {
            a["labels"][key]: a["status"]["state"]
            for a in _get(f"{alertmanager}/api/v2/alerts")
            if a["labels"].get("job") == job and a["labels"]["alertname"] == "JobQueueJobsStuck"
        }
        if states == expected or time.monotonic() > deadline:
            return states
        time.sleep(0.1)


@pytest.mark.parametrize("cause", BLINDING_ALERTS)
def test_a_blinding_alert_in_one_namespace_leaves_another_namespace_alone(
    alertmanager: str, cause: str
) -> None:
    # kube-prometheus gives every namespace's exporter the same job label: only namespace differs.
    job = f"two-namespaces-{cause.lower()}"
    source = {**_rule_labels(cause), "job": job, "namespace": "team-a", "queue": "orders"}
    stuck = _rule_labels("JobQueueJobsStuck")
    mine = {**stuck, "job": job, "namespace": "team-a", "queue": "orders", "job_type": "x"}
    theirs = {**mine, "namespace": "team-b"}
    _post(alertmanager, [source, mine, theirs])
    expected = {"team-a": "suppressed", "team-b": "active"}
    assert _stuck_states(alertmanager, job, "namespace", expected) == expected
