"""What ``kubectl kustomize`` renders from deploy/kubernetes, run offline as a user would.

The monitoring kustomization must render without an edit into what kube-prometheus-stack
picks up with its default values:

- its Prometheus selects ServiceMonitors and PrometheusRules labelled
  ``release: <Helm release name>`` (``serviceMonitorSelectorNilUsesHelmValues`` and
  ``ruleSelectorNilUsesHelmValues`` default to true; the chart's
  templates/prometheus/prometheus.yaml turns them into ``matchLabels: {release: ...}``),
  in every namespace (``serviceMonitorNamespaceSelector`` and ``ruleNamespaceSelector``
  default to ``{}``);
- its Grafana's dashboard sidecar loads ConfigMaps labelled ``grafana_dashboard: "1"``
  (``grafana.sidecar.dashboards.label`` / ``labelValue``) from Grafana's own namespace
  (``searchNamespace`` unset).

See prometheus-community/helm-charts, charts/kube-prometheus-stack (values.yaml and
templates/prometheus/prometheus.yaml). The release name and namespace assumed are the ones
its documentation installs: ``kube-prometheus-stack`` in ``monitoring``.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import yaml

import exporter
from exporter.rules import render_prometheus_rule
from exporter.settings import AlertSettings
from tests.artefacts.deploy_files import (
    EXAMPLE,
    EXPORTER,
    IMAGE_REPOSITORY,
    MONITORING,
    find_tool,
    load_all,
)

# What kube-prometheus-stack selects with its default values (module docstring).
RELEASE = "kube-prometheus-stack"
MONITORING_NAMESPACE = "monitoring"
SELECTED_LABELS = {"release": RELEASE}
SIDECAR_LABEL = ("grafana_dashboard", "1")
SETTINGS_NAME = "jobqueue-exporter-monitoring-settings"


def kustomize(directory: Path) -> list[dict[str, Any]]:
    """The objects ``kubectl kustomize`` renders from a directory (offline, no cluster)."""
    done = subprocess.run(
        [find_tool("kubectl"), "kustomize", str(directory)],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return [doc for doc in yaml.safe_load_all(done.stdout) if doc is not None]


def by_kind(objects: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """One object per kind; fails when a kind is rendered twice."""
    kinds = [o["kind"] for o in objects]
    assert len(kinds) == len(set(kinds)), kinds
    return {o["kind"]: o for o in objects}


def alerts(rule: dict[str, Any]) -> list[dict[str, Any]]:
    """The alerting rules of a PrometheusRule."""
    return [r for group in rule["spec"]["groups"] for r in group["rules"] if "alert" in r]


def settings_value(directory: Path, key: str) -> str:
    """A value of the local-config settings object of the monitoring kustomization."""
    (settings,) = load_all(directory / "alerting-settings.yaml")
    assert settings["metadata"]["name"] == SETTINGS_NAME
    return str(settings["data"][key])


def test_monitoring_renders_only_the_monitoring_objects_in_the_monitoring_namespace() -> None:
    objects = by_kind(kustomize(MONITORING))
    assert set(objects) == {"ServiceMonitor", "PrometheusRule", "ConfigMap"}
    for kind, item in objects.items():
        assert item["metadata"]["namespace"] == MONITORING_NAMESPACE, kind
    # The settings object is kustomize's input, never applied.
    assert objects["ConfigMap"]["metadata"]["name"] != SETTINGS_NAME


def test_monitoring_objects_carry_what_kube_prometheus_stack_selects_by_default() -> None:
    objects = by_kind(kustomize(MONITORING))
    for kind in ("ServiceMonitor", "PrometheusRule"):
        labels = objects[kind]["metadata"]["labels"]
        assert SELECTED_LABELS.items() <= labels.items(), kind
    key, value = SIDECAR_LABEL
    assert objects["ConfigMap"]["metadata"]["labels"][key] == value
    # Selected from the monitoring namespace, the exporter's Service lives in another one.
    assert objects["ServiceMonitor"]["spec"]["namespaceSelector"] == {"any": True}


def test_every_alert_links_the_dashboard_without_a_placeholder_host() -> None:
    rule = by_kind(kustomize(MONITORING))["PrometheusRule"]
    base = settings_value(MONITORING, "dashboard_url")
    assert base == "/d/jobqueue-exporter/jobqueue"
    found = alerts(rule)
    assert found
    for alert in found:
        url = alert["annotations"]["dashboard_url"]
        assert url.startswith(base + "?var-job={{ $labels.job }}"), alert["alert"]
        assert "example.invalid" not in url


def test_the_rendered_rules_are_the_generated_ones_but_for_the_dashboard_url() -> None:
    rendered = by_kind(kustomize(MONITORING))["PrometheusRule"]
    (generated,) = yaml.safe_load_all(render_prometheus_rule(AlertSettings()))
    base = settings_value(MONITORING, "dashboard_url")
    for group in generated["spec"]["groups"]:
        for rule in group["rules"]:
            if "alert" in rule:
                query = rule["annotations"]["dashboard_url"].split("?", 1)[1]
                rule["annotations"]["dashboard_url"] = f"{base}?{query}"
    assert rendered["spec"] == generated["spec"]


def test_one_patch_sets_the_release_label_and_one_value_the_dashboard_url(
    tmp_path: Path,
) -> None:
    copy = tmp_path / "monitoring"
    shutil.copytree(MONITORING, copy)
    kustomization = copy / "kustomization.yaml"
    text = kustomization.read_text()
    assert text.count(f"value: {RELEASE}") == 1
    kustomization.write_text(text.replace(f"value: {RELEASE}", "value: prom"))
    settings = copy / "alerting-settings.yaml"
    absolute = "https://grafana.example.com/d/jobqueue-exporter/jobqueue"
    old = settings_value(MONITORING, "dashboard_url")
    settings.write_text(
        settings.read_text().replace(f"dashboard_url: {old}", f"dashboard_url: {absolute}")
    )
    objects = by_kind(kustomize(copy))
    for kind in ("ServiceMonitor", "PrometheusRule"):
        assert objects[kind]["metadata"]["labels"]["release"] == "prom", kind
    for alert in alerts(objects["PrometheusRule"]):
        assert alert["annotations"]["dashboard_url"].startswith(absolute + "?"), alert["alert"]


def paths_to(node: Any, value: str, where: str = "") -> list[str]:
    """The dotted paths at which a parsed YAML document holds exactly this string."""
    if isinstance(node, dict):
        return [p for k, v in node.items() for p in paths_to(v, value, f"{where}.{k}".strip("."))]
    if isinstance(node, list):
        return [p for i, v in enumerate(node) for p in paths_to(v, value, f"{where}[{i}]")]
    return [where] if node == value else []


def test_one_line_moves_every_monitoring_object_to_another_namespace(tmp_path: Path) -> None:
    # No other value of the bundle is the namespace: kustomize rewrites metadata.namespace,
    # but not a namespace written into a selector or a setting...
    for path in sorted(MONITORING.glob("*.yaml")):
        found = [where for doc in load_all(path) for where in paths_to(doc, MONITORING_NAMESPACE)]
        wanted = ["namespace"] if path.name == "kustomization.yaml" else []
        assert found == wanted, path.name
    # ...so changing it moves every object, and only that changes.
    copy = tmp_path / "monitoring"
    shutil.copytree(MONITORING, copy)
    kustomization = copy / "kustomization.yaml"
    text = kustomization.read_text()
    kustomization.write_text(
        text.replace(f"\nnamespace: {MONITORING_NAMESPACE}\n", "\nnamespace: observability\n")
    )
    moved, shipped = by_kind(kustomize(copy)), by_kind(kustomize(MONITORING))
    for kind, item in moved.items():
        assert item["metadata"].pop("namespace") == "observability", kind
        assert shipped[kind]["metadata"].pop("namespace") == MONITORING_NAMESPACE, kind
    assert moved == shipped


def test_exporter_renders_its_workload_for_the_namespace_it_is_applied_to() -> None:
    objects = by_kind(kustomize(EXPORTER))
    assert set(objects) == {"ConfigMap", "Service", "Deployment"}
    for kind, item in objects.items():
        assert "namespace" not in item["metadata"], kind  # kubectl -n decides
    (container,) = objects["Deployment"]["spec"]["template"]["spec"]["containers"]
    assert container["image"] == f"{IMAGE_REPOSITORY}:{exporter.__version__}"


def test_example_swaps_the_standalone_exporter_for_the_sidecar() -> None:
    objects = by_kind(kustomize(EXAMPLE))
    assert set(objects) == {"ConfigMap", "Service", "Deployment"}
    assert objects["Deployment"]["metadata"]["name"] == "queue-worker"
    secrets = set()
    pod = objects["Deployment"]["spec"]["template"]["spec"]
    for container in pod["containers"]:
        for env in container.get("env", []):
            ref = env.get("valueFrom", {}).get("secretKeyRef")
            if ref is not None:
                secrets.add(ref["name"])
    secrets |= {v["secret"]["secretName"] for v in pod["volumes"] if "secret" in v}
    # The one Secret docs/deploy.md has the user create; nothing refers to another.
    assert secrets == {"jobqueue-exporter-db"}
