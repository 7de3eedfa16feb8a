"""The Kubernetes manifests as files: each one parses, and they cross-reference.

deploy/kubernetes/ holds three kustomizations: monitoring/ (ServiceMonitor, PrometheusRule,
dashboard ConfigMap), exporter/ (Deployment, Service, ConfigMap; the Secret is an example
created out of band) and example/ (the exporter as a sidecar of a worker instead). No
cluster runs here, so these tests check selectors, labels, ports, probes, Secret and
ConfigMap keys, the security context and the image tag, and that the exporter's own loader
accepts the settings each Deployment gives it. test_kustomize.py checks what kubectl renders.
"""

from __future__ import annotations

import json
from pathlib import Path, PurePosixPath
from typing import Any

import pytest
import yaml

import exporter
from exporter.settings import parse_listen_address
from tests.artefacts.deploy_files import (
    DEFAULT_PORT,
    EXAMPLE,
    EXPORTER,
    IMAGE_REPOSITORY,
    K8S,
    MONITORING,
    ROOT,
    RULES_JOB,
    TELEMETRY_PATH,
    dockerfile_uid,
    load_all,
    settings_from_argv,
    split_args,
)

DIRECTORIES = (MONITORING, EXPORTER, EXAMPLE)


def k8s_objects() -> list[dict[str, Any]]:
    """Every object of every manifest under deploy/kubernetes (the kustomizations excluded)."""
    objects: list[dict[str, Any]] = []
    for path in sorted(K8S.glob("*/*.yaml")):
        if path.name == "kustomization.yaml":
            continue
        objects.extend(load_all(path))
    return objects


def k8s_object(kind: str, name: str) -> dict[str, Any]:
    """The one object of this kind and name."""
    matches = [o for o in k8s_objects() if o["kind"] == kind and o["metadata"]["name"] == name]
    assert len(matches) == 1, f"expected one {kind}/{name}, found {len(matches)}"
    return matches[0]


def deployments() -> list[dict[str, Any]]:
    """The Deployments: the exporter's own one and the example's sidecar one."""
    found = [o for o in k8s_objects() if o["kind"] == "Deployment"]
    assert {d["metadata"]["name"] for d in found} == {"queue-worker", "jobqueue-exporter"}
    return found


def exporter_container(deployment: dict[str, Any]) -> dict[str, Any]:
    """The exporter's container in a Deployment's pod template."""
    containers = deployment["spec"]["template"]["spec"]["containers"]
    matches = [c for c in containers if c["image"].startswith(IMAGE_REPOSITORY + ":")]
    assert len(matches) == 1, f"{deployment['metadata']['name']}: one exporter container"
    return matches[0]


def kustomization(directory: Path) -> dict[str, Any]:
    """A directory's kustomization.yaml."""
    (document,) = load_all(directory / "kustomization.yaml")
    return document


def test_there_are_exactly_the_three_kustomizations() -> None:
    assert sorted(p.parent.name for p in K8S.glob("*/kustomization.yaml")) == [
        "example", "exporter", "monitoring"
    ]  # fmt: skip
    # No kustomization at the top: the exporter and the monitoring objects go to different
    # namespaces, and only the monitoring one applies without an edit.
    assert not (K8S / "kustomization.yaml").exists()


def test_every_manifest_parses_and_names_a_kind() -> None:
    for path in sorted(K8S.glob("*/*.yaml")):
        documents = load_all(path)
        assert documents, f"{path.name} is empty"
        for doc in documents:
            assert doc.get("apiVersion"), path.name
            assert doc.get("kind"), path.name
            if doc["kind"] != "Kustomization":
                assert doc["metadata"]["name"], path.name


def test_kustomizations_list_existing_files_and_the_secret_is_only_an_example() -> None:
    for directory in DIRECTORIES:
        for resource in kustomization(directory)["resources"]:
            assert (directory / resource).exists(), f"{directory.name} names missing {resource}"
            assert "secret" not in resource, "the Secret is created out of band, never applied"
    assert "../exporter" in kustomization(EXAMPLE)["resources"]


def test_the_image_is_the_one_edit_and_names_the_released_tag() -> None:
    (image,) = kustomization(EXPORTER)["images"]
    assert image == {"name": IMAGE_REPOSITORY, "newTag": exporter.__version__}
    assert "images" not in kustomization(EXAMPLE), "the example inherits ../exporter's image"
    for deployment in deployments():
        image_ref = exporter_container(deployment)["image"]
        assert image_ref == f"{IMAGE_REPOSITORY}:{exporter.__version__}"


def test_exporter_manifests_name_no_placeholder_host() -> None:
    # The database host comes from the Secret; nothing applied names a host to replace.
    for path in EXPORTER.glob("*.yaml"):
        if path.name == "secret.example.yaml":
            continue
        text = "\n".join(line.split("#")[0] for line in path.read_text().splitlines())
        assert ".example." not in text, path.name
        assert ".invalid" not in text, path.name


def test_deployment_selectors_match_their_pod_labels() -> None:
    for deployment in deployments():
        selector = deployment["spec"]["selector"]["matchLabels"]
        labels = deployment["spec"]["template"]["metadata"]["labels"]
        assert selector.items() <= labels.items(), deployment["metadata"]["name"]


def test_standalone_deployment_runs_one_replica() -> None:
    assert k8s_object("Deployment", "jobqueue-exporter")["spec"]["replicas"] == 1


def test_service_selects_the_exporter_pods_of_both_deployments() -> None:
    service = k8s_object("Service", "jobqueue-exporter")
    selector = service["spec"]["selector"]
    for deployment in deployments():
        labels = deployment["spec"]["template"]["metadata"]["labels"]
        assert selector.items() <= labels.items(), deployment["metadata"]["name"]
    # An exporter whose database is down must stay a scrape target to report jobqueue_up 0.
    assert service["spec"]["publishNotReadyAddresses"] is True


def test_service_target_port_is_the_exporter_container_port() -> None:
    (port,) = k8s_object("Service", "jobqueue-exporter")["spec"]["ports"]
    for deployment in deployments():
        container_ports = {
            p["name"]: p["containerPort"] for p in exporter_container(deployment)["ports"]
        }
        assert port["targetPort"] in container_ports
        assert container_ports[port["targetPort"]] == DEFAULT_PORT
    assert port["port"] == DEFAULT_PORT


def test_servicemonitor_selects_the_service_in_any_namespace_by_port_and_path() -> None:
    monitor = k8s_object("ServiceMonitor", "jobqueue-exporter")
    service = k8s_object("Service", "jobqueue-exporter")
    assert monitor["apiVersion"] == "monitoring.coreos.com/v1"
    assert (
        monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    )
    # The ServiceMonitor lives in the monitoring namespace, the Service in the application's.
    assert monitor["spec"]["namespaceSelector"] == {"any": True}
    port_names = {p["name"] for p in service["spec"]["ports"]}
    for endpoint in monitor["spec"]["endpoints"]:
        assert endpoint["port"] in port_names
        assert endpoint["path"] == TELEMETRY_PATH


def test_servicemonitor_gives_the_job_label_the_rules_select_on() -> None:
    assert RULES_JOB is not None, 'alerts.selector is no longer job="...": update this test'
    monitor = k8s_object("ServiceMonitor", "jobqueue-exporter")
    service = k8s_object("Service", "jobqueue-exporter")
    assert service["metadata"]["labels"][monitor["spec"]["jobLabel"]] == RULES_JOB.group(1)


def test_dashboard_configmap_is_generated_from_the_shipped_dashboard() -> None:
    from dashboards import build_configmap

    assert build_configmap.OUTPUT.parent == MONITORING
    assert build_configmap.OUTPUT.read_text() == build_configmap.render(), (
        "the dashboard ConfigMap is stale: run python dashboards/build_configmap.py"
    )
    configmap = k8s_object("ConfigMap", build_configmap.NAME)
    shipped = (ROOT / "dashboards" / "jobqueue.json").read_text()
    assert configmap["data"] == {build_configmap.KEY: shipped.rstrip("\n")}
    assert json.loads(configmap["data"][build_configmap.KEY]) == json.loads(shipped)
    assert build_configmap.OUTPUT.name in kustomization(MONITORING)["resources"]


def test_dashboard_configmap_render_tracks_a_changed_dashboard() -> None:
    from dashboards import build_configmap

    changed = '{\n  "title": "x",\n\n  "note": "  leading: spaces"\n}\n'
    (document,) = yaml.safe_load_all(build_configmap.render(changed))
    assert document["data"][build_configmap.KEY] == changed.rstrip("\n")


def test_probes_use_healthz_for_liveness_and_readyz_for_readiness() -> None:
    for deployment in deployments():
        container = exporter_container(deployment)
        port_names = {p["name"] for p in container["ports"]}
        liveness = container["livenessProbe"]["httpGet"]
        readiness = container["readinessProbe"]["httpGet"]
        assert liveness["path"] == "/healthz"
        assert readiness["path"] == "/readyz"
        assert {liveness["port"], readiness["port"]} <= port_names


def test_exporter_containers_are_locked_down() -> None:
    for deployment in deployments():
        container = exporter_container(deployment)
        context = container["securityContext"]
        assert context["runAsNonRoot"] is True
        assert context["runAsUser"] == dockerfile_uid()
        assert context["readOnlyRootFilesystem"] is True
        assert context["allowPrivilegeEscalation"] is False
        assert context["capabilities"]["drop"] == ["ALL"]
        resources = container["resources"]
        assert resources["requests"]["cpu"]
        assert resources["requests"]["memory"]
        assert resources["limits"]["memory"]


def test_every_secret_reference_is_to_the_documented_secret_and_its_keys() -> None:
    configmap = k8s_object("ConfigMap", "jobqueue-exporter-config")
    secret = k8s_object("Secret", "jobqueue-exporter-db")
    for deployment in deployments():
        pod = deployment["spec"]["template"]["spec"]
        volumes = {v["name"]: v for v in pod["volumes"]}
        container = exporter_container(deployment)
        mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
        for name in mounts.values():
            assert name in volumes, f"volumeMount {name} has no volume"
        for volume in volumes.values():
            if "configMap" in volume:
                assert volume["configMap"]["name"] == configmap["metadata"]["name"]
            if "secret" in volume:
                assert volume["secret"]["secretName"] == secret["metadata"]["name"]
                for item in volume["secret"].get("items", []):
                    assert item["key"] in secret["stringData"]
        # Every container, the example worker's too: no Secret the docs do not create.
        for each in pod["containers"]:
            for env in each.get("env", []):
                ref = env.get("valueFrom", {}).get("secretKeyRef")
                if ref is not None:
                    assert ref["name"] == secret["metadata"]["name"], each["name"]
                    assert ref["key"] in secret["stringData"]
        # Files named in the flags live on a mounted volume that provides them.
        config_file, flags = split_args(container["args"])
        for path in [config_file, flags.get("--database.password-file")]:
            if path is None:
                continue
            directory = str(PurePosixPath(path).parent)
            assert directory in mounts, f"{path}: its directory is not a mount"
            volume = volumes[mounts[directory]]
            if "configMap" in volume:
                assert PurePosixPath(path).name in configmap["data"]
            else:
                items = [i["path"] for i in volume["secret"]["items"]]
                assert PurePosixPath(path).name in items


def test_the_secret_example_and_the_role_docs_agree_on_the_grants() -> None:
    comment = (EXPORTER / "secret.example.yaml").read_text()
    role = (ROOT / "docs" / "deploy.md").read_text().split("## The database role")[1]
    assert "needs only SELECT" not in comment
    for grant in ("CONNECT", "USAGE", "SELECT", "pg_read_all_stats"):
        assert grant in comment, grant
        assert grant in role, grant


def resolve_container_settings(deployment: dict[str, Any], tmp_path: Path) -> Any:
    """Resolve settings through the CLI from the container's ConfigMap, env, Secret and args."""
    configmap = k8s_object("ConfigMap", "jobqueue-exporter-config")
    secret = k8s_object("Secret", "jobqueue-exporter-db")
    container = exporter_container(deployment)
    config_file, flags = split_args(container["args"])
    assert config_file is not None
    # The files the container would read, written where this test can read them.
    local_config = tmp_path / "config.yml"
    local_config.write_text(configmap["data"][PurePosixPath(config_file).name])
    local_files = {config_file: str(local_config)}
    if "--database.password-file" in flags:
        password = tmp_path / "password"
        password.write_text(secret["stringData"]["password"])
        local_files[flags["--database.password-file"]] = str(password)
    args = []
    for arg in container["args"]:
        name, _, value = arg.partition("=")
        args.append(f"{name}={local_files.get(value, value)}")
    environ: dict[str, str] = {}
    for env in container.get("env", []):
        if "value" in env:
            environ[env["name"]] = env["value"]
        else:
            ref = env["valueFrom"]["secretKeyRef"]
            environ[env["name"]] = secret["stringData"][ref["key"]]
    return settings_from_argv(args, environ)


@pytest.mark.parametrize("name", ["queue-worker", "jobqueue-exporter"])
def test_the_exporter_accepts_the_settings_each_deployment_gives_it(
    name: str, tmp_path: Path
) -> None:
    settings = resolve_container_settings(k8s_object("Deployment", name), tmp_path)
    secret = k8s_object("Secret", "jobqueue-exporter-db")
    (queue,) = settings.queues
    assert queue.name == "app"  # no queue name in the ConfigMap: the DSN's database name
    assert queue.collect.leader_election  # replicas elect one collector
    assert queue.database.dsn is not None
    # The DSN in the environment has none; the password file puts it in.
    assert secret["stringData"]["password"] not in secret["stringData"]["dsn"]
    assert secret["stringData"]["password"] in queue.database.dsn
    assert parse_listen_address(settings.web.listen_address[0])[1] == DEFAULT_PORT
    assert settings.web.telemetry_path == TELEMETRY_PATH
