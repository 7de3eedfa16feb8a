"""The shipped deployment artefacts: Dockerfile, Kubernetes manifests, the compose stack, LICENSE.

No container engine or cluster runs here, so these tests check what can be checked without
one: hadolint, that every file the image and the stack use exists, that the manifests and
the compose file cross-reference (ports, labels, selectors, paths), that the exporter's own
loader accepts the settings each deployment passes it, that the Prometheus config with the
compose mounts resolved passes promtool, and that the init scripts the compose PostgreSQL
runs really build the schema, the indexes and a read-only role on PostgreSQL 15.
"""

from __future__ import annotations

import fnmatch
import http.server
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import threading
import zipfile
from collections.abc import Iterator
from pathlib import Path, PurePosixPath
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import pytest
import yaml

import exporter
from exporter.cli import build_parser, settings_from_namespace
from exporter.demo.cluster import Cluster
from exporter.settings import SETTINGS, AlertSettings, WebSettings, parse_listen_address

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = ROOT / "Dockerfile"
K8S = ROOT / "deploy" / "kubernetes"
COMPOSE_DIR = ROOT / "deploy" / "compose"
COMPOSE = COMPOSE_DIR / "compose.yaml"

DEFAULT_PORT = parse_listen_address(WebSettings().listen_address[0])[1]
TELEMETRY_PATH = WebSettings().telemetry_path
IMAGE_REPOSITORY = "ghcr.io/jobqueue-exporter/jobqueue-exporter"
# The rules select the exporter's series by job label; every deployment must produce it.
RULES_JOB = re.fullmatch(r'job="([^"]+)"', AlertSettings().selector)
EXPORTER_INDEXES = (
    "job_exporter_active_idx",
    "job_exporter_updated_at_idx",
    "job_exporter_dead_idx",
)


# --- helpers -------------------------------------------------------------------------------


def find_tool(name: str, *extra_dirs: str) -> str:
    """Locate a binary on the venv's bin dir, PATH and extra dirs; fail (never skip) without it."""
    search = os.pathsep.join(
        [str(Path(sys.executable).parent), os.environ.get("PATH", ""), *extra_dirs]
    )
    found = shutil.which(name, path=search)
    if found is None:
        pytest.fail(f"{name} not found on {search}: install it (see .ci/run)")
    return found


def dockerfile_instructions() -> list[tuple[str, str]]:
    """The Dockerfile as (INSTRUCTION, arguments) pairs, continuation lines joined."""
    instructions: list[tuple[str, str]] = []
    pending = ""
    for raw in DOCKERFILE.read_text().splitlines():
        line = raw.strip()
        if not pending and (not line or line.startswith("#")):
            continue
        if line.startswith("#"):
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        pending += line
        keyword, _, rest = pending.partition(" ")
        instructions.append((keyword.upper(), rest.strip()))
        pending = ""
    return instructions


def builder_copy_sources() -> list[str]:
    """Sources of the COPY instructions that read the build context (not --from=stage)."""
    sources: list[str] = []
    for keyword, rest in dockerfile_instructions():
        if keyword not in ("COPY", "ADD"):
            continue
        words = shlex.split(rest)
        if any(w.startswith("--from") for w in words):
            continue
        paths = [w for w in words if not w.startswith("--")]
        sources.extend(paths[:-1])
    return sources


def load_all(path: Path) -> list[dict[str, Any]]:
    """Every YAML document of a file, empty ones dropped."""
    with path.open() as handle:
        return [doc for doc in yaml.safe_load_all(handle) if doc is not None]


def k8s_objects() -> list[dict[str, Any]]:
    """Every object of every manifest under deploy/kubernetes (the kustomization excluded)."""
    objects: list[dict[str, Any]] = []
    for path in sorted(K8S.glob("*.yaml")):
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
    """The example Deployments: the sidecar one and the standalone one."""
    found = [o for o in k8s_objects() if o["kind"] == "Deployment"]
    assert {d["metadata"]["name"] for d in found} == {"queue-worker", "jobqueue-exporter"}
    return found


def exporter_container(deployment: dict[str, Any]) -> dict[str, Any]:
    """The exporter's container in a Deployment's pod template."""
    containers = deployment["spec"]["template"]["spec"]["containers"]
    matches = [c for c in containers if c["image"].startswith(IMAGE_REPOSITORY + ":")]
    assert len(matches) == 1, f"{deployment['metadata']['name']}: one exporter container"
    return matches[0]


def split_args(args: list[str]) -> tuple[str | None, dict[str, str]]:
    """The --config.file value and the other ``--key=value`` flags of a container."""
    config_file: str | None = None
    flags: dict[str, str] = {}
    for arg in args:
        name, sep, value = arg.partition("=")
        assert sep, f"flags are written --name=value, got {arg!r}"
        if name == "--config.file":
            config_file = value
        else:
            flags[name] = value
    return config_file, flags


def compose() -> dict[str, Any]:
    """The compose file, YAML anchors and merge keys resolved."""
    document = yaml.safe_load(COMPOSE.read_text())
    assert isinstance(document, dict)
    return document


def compose_mounts(service: dict[str, Any]) -> list[tuple[Path, str]]:
    """The (host path, container path) of each bind mount of a compose service."""
    mounts: list[tuple[Path, str]] = []
    for volume in service.get("volumes", []):
        if isinstance(volume, dict):
            source, target = volume["source"], volume["target"]
        else:
            source, target = volume.split(":")[:2]
        if source.startswith((".", "/")):
            mounts.append(((COMPOSE_DIR / source).resolve(), target))
    return mounts


def host_path(service: dict[str, Any], container_path: str) -> Path:
    """Where a path inside a compose service's container comes from on the host."""
    best: tuple[Path, str] | None = None
    for source, target in compose_mounts(service):
        inside = PurePosixPath(container_path)
        covers = inside == PurePosixPath(target) or PurePosixPath(target) in inside.parents
        if covers and (best is None or len(target) > len(best[1])):
            best = (source, target)
    assert best is not None, f"{container_path} is not mounted into the container"
    source, target = best
    return source / PurePosixPath(container_path).relative_to(target)


def container_ports(service: dict[str, Any]) -> set[int]:
    """The container-side ports a compose service exposes or publishes."""
    ports = {int(p) for p in service.get("expose", [])}
    for mapping in service.get("ports", []):
        ports.add(int(str(mapping).split(":")[-1].split("/")[0]))
    return ports


def target_service_port(target: str) -> tuple[str, int]:
    """Split ``host:port`` of a scrape or alerting target."""
    host, _, port = target.rpartition(":")
    return host, int(port)


# --- LICENSE -------------------------------------------------------------------------------


def test_license_is_the_full_apache_2_text() -> None:
    text = (ROOT / "LICENSE").read_text()
    assert "Apache License" in text
    assert "Version 2.0, January 2004" in text
    assert "TERMS AND CONDITIONS FOR USE, REPRODUCTION, AND DISTRIBUTION" in text
    assert "END OF TERMS AND CONDITIONS" in text
    assert len(text) > 10_000  # the full text, not a stub pointing at the URL


# --- Dockerfile ----------------------------------------------------------------------------


def test_dockerfile_passes_hadolint() -> None:
    hadolint = find_tool("hadolint")
    done = subprocess.run(
        [hadolint, "--no-color", str(DOCKERFILE)], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stdout + done.stderr


def test_every_file_the_dockerfile_copies_exists_and_is_in_the_build_context() -> None:
    sources = builder_copy_sources()
    assert sources, "the Dockerfile copies nothing from the build context"
    ignored = [
        line.strip()
        for line in (ROOT / ".dockerignore").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    for source in sources:
        assert (ROOT / source).exists(), f"COPY {source}: no such file in the repository"
        top = source.rstrip("/").split("/")[0]
        hits = [p for p in ignored if fnmatch.fnmatch(top, p.rstrip("/"))]
        assert not hits, f"COPY {source} is excluded from the build context by .dockerignore {hits}"


def test_dockerignore_keeps_local_state_out_of_the_context() -> None:
    ignored = {line.strip() for line in (ROOT / ".dockerignore").read_text().splitlines()}
    assert {".git", ".venv", ".venv-demo", ".pytest_cache", ".mypy_cache", "tests"} <= ignored


def test_image_is_multi_stage_on_a_pinned_slim_python_base() -> None:
    instructions = dockerfile_instructions()
    args = dict(
        rest.split("=", 1) for keyword, rest in instructions if keyword == "ARG" and "=" in rest
    )
    froms = [rest for keyword, rest in instructions if keyword == "FROM"]
    assert len(froms) == 2
    assert froms[0].endswith(" AS builder")
    base = args["PYTHON_IMAGE"]
    assert re.fullmatch(r"python:3\.11\.\d+-slim-bookworm", base), base
    assert all(f.split()[0] == "${PYTHON_IMAGE}" for f in froms)
    # The final stage takes only the venv from the builder, not the source tree.
    last_from = max(i for i, (keyword, _) in enumerate(instructions) if keyword == "FROM")
    final = instructions[last_from:]
    copies = [rest for keyword, rest in final if keyword == "COPY"]
    assert copies == ["--from=builder /opt/jobqueue-exporter /opt/jobqueue-exporter"]


def test_image_runs_the_console_script_as_a_fixed_non_root_user_on_the_default_port() -> None:
    instructions = dict(dockerfile_instructions())
    assert json.loads(instructions["ENTRYPOINT"]) == ["jobqueue-exporter"]
    assert instructions["EXPOSE"] == str(DEFAULT_PORT)
    user = instructions["USER"]
    assert re.fullmatch(r"\d+:\d+", user), "a numeric UID:GID lets Kubernetes check runAsNonRoot"
    assert int(user.split(":")[0]) != 0
    env = instructions["ENV"]
    assert "PYTHONDONTWRITEBYTECODE=1" in env
    assert "PYTHONUNBUFFERED=1" in env


def healthcheck_command() -> list[str]:
    """The HEALTHCHECK's exec-form command."""
    rest = dict(dockerfile_instructions())["HEALTHCHECK"]
    command = json.loads(rest[rest.index("CMD") + len("CMD") :].strip())
    assert isinstance(command, list)
    return [str(word) for word in command]


class _Health(http.server.BaseHTTPRequestHandler):
    """Answers /healthz with the status the test sets on the server."""

    def do_GET(self) -> None:
        status = 200 if self.path == "/healthz" and self.server.healthy else 503  # type: ignore[attr-defined]
        self.send_response(status)
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def health_server() -> Iterator[http.server.HTTPServer]:
    server = http.server.HTTPServer(("127.0.0.1", 0), _Health)
    server.healthy = True  # type: ignore[attr-defined]
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


def run_healthcheck(port: int) -> int:
    """Run the image's HEALTHCHECK command here, pointed at a port through the environment."""
    command = healthcheck_command()
    assert command[0] == "python", "the image has no curl: the check must use Python"
    env = {**os.environ, SETTINGS["web.listen_address"].env: f":{port}"}
    done = subprocess.run(
        [sys.executable, *command[1:]], env=env, capture_output=True, timeout=30, check=False
    )
    return done.returncode


def test_healthcheck_passes_on_a_healthy_healthz_and_fails_otherwise(
    health_server: http.server.HTTPServer,
) -> None:
    port = health_server.server_address[1]
    assert run_healthcheck(port) == 0
    health_server.healthy = False  # type: ignore[attr-defined]
    assert run_healthcheck(port) != 0
    health_server.shutdown()
    health_server.server_close()
    assert run_healthcheck(port) != 0


def test_healthcheck_defaults_to_the_exporters_default_port() -> None:
    command = " ".join(healthcheck_command())
    assert f"'{WebSettings().listen_address[0]}'" in command
    assert SETTINGS["web.listen_address"].env in command
    assert "/healthz" in command


def test_builder_stage_builds_a_wheel_from_exactly_the_copied_files(tmp_path: Path) -> None:
    """Copy only what the builder stage copies and build the wheel the way its RUN does."""
    context = tmp_path / "src"
    context.mkdir()
    for source in builder_copy_sources():
        origin = ROOT / source
        if origin.is_dir():
            shutil.copytree(origin, context / source, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy2(origin, context / source)
    wheels = tmp_path / "wheels"
    done = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--wheel-dir", str(wheels), "."],
        cwd=context, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    (wheel,) = wheels.glob("*.whl")
    assert wheel.name.startswith(f"jobqueue_exporter-{exporter.__version__}-")
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        entry_points = next(n for n in names if n.endswith(".dist-info/entry_points.txt"))
        scripts = archive.read(entry_points).decode()
    # Runtime files the image and the compose stack rely on.
    assert {"exporter/sql/indexes.sql", "exporter/sql/schema.sql", "exporter/cli.py"} <= names
    assert re.search(r"^jobqueue-exporter = exporter\.cli:main$", scripts, re.MULTILINE)


# --- Kubernetes ----------------------------------------------------------------------------


def test_every_manifest_parses_and_names_a_kind() -> None:
    for path in sorted(K8S.glob("*.yaml")):
        documents = load_all(path)
        assert documents, f"{path.name} is empty"
        for doc in documents:
            assert doc.get("apiVersion"), path.name
            assert doc.get("kind"), path.name
            if doc["kind"] != "Kustomization":
                assert doc["metadata"]["name"], path.name


def test_kustomization_lists_existing_files_and_the_released_image_tag() -> None:
    (kustomization,) = load_all(K8S / "kustomization.yaml")
    for resource in kustomization["resources"]:
        assert (K8S / resource).is_file(), f"kustomization names missing {resource}"
    (image,) = kustomization["images"]
    assert image == {"name": IMAGE_REPOSITORY, "newTag": exporter.__version__}


def test_deployments_use_the_released_image() -> None:
    for deployment in deployments():
        image = exporter_container(deployment)["image"]
        assert image == f"{IMAGE_REPOSITORY}:{exporter.__version__}"


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


def test_servicemonitor_selects_the_service_and_names_its_port_and_path() -> None:
    monitor = k8s_object("ServiceMonitor", "jobqueue-exporter")
    service = k8s_object("Service", "jobqueue-exporter")
    assert monitor["apiVersion"] == "monitoring.coreos.com/v1"
    assert (
        monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    )
    port_names = {p["name"] for p in service["spec"]["ports"]}
    for endpoint in monitor["spec"]["endpoints"]:
        assert endpoint["port"] in port_names
        assert endpoint["path"] == TELEMETRY_PATH


def test_servicemonitor_gives_the_job_label_the_rules_select_on() -> None:
    assert RULES_JOB is not None, 'alerts.selector is no longer job="...": update this test'
    monitor = k8s_object("ServiceMonitor", "jobqueue-exporter")
    service = k8s_object("Service", "jobqueue-exporter")
    assert service["metadata"]["labels"][monitor["spec"]["jobLabel"]] == RULES_JOB.group(1)


def test_prometheusrule_is_picked_up_by_the_same_prometheus_as_the_servicemonitor() -> None:
    path = K8S / "prometheusrule.yaml"
    assert path.is_file(), "deploy/kubernetes/prometheusrule.yaml is missing"
    (rule,) = load_all(path)
    assert rule["apiVersion"] == "monitoring.coreos.com/v1"
    assert rule["kind"] == "PrometheusRule"
    monitor_labels = k8s_object("ServiceMonitor", "jobqueue-exporter")["metadata"]["labels"]
    assert monitor_labels.items() <= rule["metadata"]["labels"].items()
    assert rule["spec"]["groups"]


def test_dashboard_configmap_is_generated_from_the_shipped_dashboard() -> None:
    from dashboards import build_configmap

    assert build_configmap.OUTPUT.read_text() == build_configmap.render(), (
        "deploy/kubernetes/grafana-dashboard.yaml is stale: run python dashboards/build_configmap.py"
    )
    configmap = k8s_object("ConfigMap", build_configmap.NAME)
    shipped = (ROOT / "dashboards" / "jobqueue.json").read_text()
    assert configmap["data"] == {build_configmap.KEY: shipped.rstrip("\n")}
    assert json.loads(configmap["data"][build_configmap.KEY]) == json.loads(shipped)


def test_dashboard_configmap_carries_the_sidecar_label_and_is_in_the_kustomization() -> None:
    from dashboards import build_configmap

    configmap = k8s_object("ConfigMap", build_configmap.NAME)
    # kube-prometheus-stack's sidecar matches label grafana_dashboard with value "1", a string.
    assert configmap["metadata"]["labels"]["grafana_dashboard"] == "1"
    (kustomization,) = load_all(K8S / "kustomization.yaml")
    assert build_configmap.OUTPUT.name in kustomization["resources"]


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


def dockerfile_uid() -> int:
    """The numeric UID the image runs as."""
    return int(dict(dockerfile_instructions())["USER"].split(":")[0])


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


def test_volumes_mounts_configmap_and_secret_references_resolve() -> None:
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
        for env in container.get("env", []):
            ref = env.get("valueFrom", {}).get("secretKeyRef")
            if ref is not None:
                assert ref["name"] == secret["metadata"]["name"]
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


def settings_from_argv(args: list[str], environ: dict[str, str]) -> Any:
    """Resolve settings exactly as the console script does: its parser, then its loader."""
    return settings_from_namespace(build_parser().parse_args(args), environ)


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
    assert queue.name == "orders"  # the ConfigMap names the queue
    assert queue.collect.leader_election  # replicas elect one collector
    assert queue.database.dsn is not None
    assert secret["stringData"]["password"] in queue.database.dsn
    assert parse_listen_address(settings.web.listen_address[0])[1] == DEFAULT_PORT
    assert settings.web.telemetry_path == TELEMETRY_PATH


# --- compose -------------------------------------------------------------------------------


EXPECTED_SERVICES = {"postgres", "fleet", "exporter", "prometheus", "alertmanager", "grafana"}


def test_compose_has_the_whole_chain() -> None:
    assert set(compose()["services"]) == EXPECTED_SERVICES


def test_compose_depends_on_names_existing_services() -> None:
    services = compose()["services"]
    for name, service in services.items():
        for dependency in service.get("depends_on", []):
            assert dependency in services, f"{name} depends on unknown {dependency}"
            assert dependency != name


def test_compose_fleet_command_is_a_runnable_module() -> None:
    fleet = compose()["services"]["fleet"]
    entrypoint, command = fleet["entrypoint"], fleet["command"]
    assert entrypoint[:2] == ["python", "-m"]
    done = subprocess.run(
        [sys.executable, *entrypoint[1:], "--help"],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    for flag in (word for word in command if word.startswith("--")):
        assert flag.split("=")[0] in done.stdout, f"the fleet has no {flag} option"


def test_every_file_the_compose_stack_mounts_exists() -> None:
    mounted = 0
    for name, service in compose()["services"].items():
        for source, _ in compose_mounts(service):
            assert source.exists(), f"{name} mounts {source}, which does not exist"
            assert ROOT in source.parents, f"{name} mounts {source} from outside the repository"
            mounted += 1
    assert mounted >= 7


def test_compose_builds_the_image_from_this_dockerfile() -> None:
    services = compose()["services"]
    for name in ("exporter", "fleet"):
        build = services[name]["build"]
        context = (COMPOSE_DIR / build["context"]).resolve()
        assert context == ROOT
        assert (context / build["dockerfile"]).resolve() == DOCKERFILE


def test_compose_postgres_runs_schema_then_indexes_then_the_exporter_role() -> None:
    service = compose()["services"]["postgres"]
    initdb = sorted(
        (target, source)
        for source, target in compose_mounts(service)
        if target.startswith("/docker-entrypoint-initdb.d/")
    )
    assert [source for _, source in initdb] == [
        ROOT / "exporter" / "sql" / "schema.sql",
        ROOT / "exporter" / "sql" / "indexes.sql",
        COMPOSE_DIR / "initdb" / "30-exporter-role.sql",
    ]


def prometheus_config() -> dict[str, Any]:
    """The compose stack's prometheus.yml."""
    document = yaml.safe_load((COMPOSE_DIR / "prometheus.yml").read_text())
    assert isinstance(document, dict)
    return document


def test_prometheus_targets_are_compose_services_on_ports_they_expose() -> None:
    services = compose()["services"]
    config = prometheus_config()
    targets = [
        t
        for job in config["scrape_configs"]
        for static in job.get("static_configs", [])
        for t in static["targets"]
    ]
    targets += [
        t
        for am in config["alerting"]["alertmanagers"]
        for static in am["static_configs"]
        for t in static["targets"]
    ]
    checked = 0
    for target in targets:
        host, port = target_service_port(target)
        if host == "localhost":
            continue  # Prometheus scraping itself
        assert host in services, f"target {target}: no such service"
        assert port in container_ports(services[host]), f"target {target}: port not exposed"
        checked += 1
    assert checked >= 2


def test_prometheus_scrapes_the_exporter_under_the_job_the_rules_select() -> None:
    assert RULES_JOB is not None
    jobs = {job["job_name"]: job for job in prometheus_config()["scrape_configs"]}
    job = jobs[RULES_JOB.group(1)]
    assert job.get("metrics_path", "/metrics") == TELEMETRY_PATH
    (target,) = job["static_configs"][0]["targets"]
    assert target_service_port(target)[0] == "exporter"


def test_compose_exporter_listens_where_prometheus_scrapes_and_its_settings_load(
    tmp_path: Path,
) -> None:
    service = compose()["services"]["exporter"]
    config_file, _ = split_args(service.get("command", []))
    assert config_file is not None
    # The container's path of the config file, resolved to the file the stack mounts there.
    mounts = {target: source for source, target in compose_mounts(service)}
    args = [
        f"--config.file={mounts[config_file]}" if arg.startswith("--config.file=") else arg
        for arg in service.get("command", [])
    ]
    settings = settings_from_argv(args, dict(service["environment"]))
    port = parse_listen_address(settings.web.listen_address[0])[1]
    assert port in container_ports(service)
    (queue,) = settings.queues
    assert queue.name == "jobqueue"  # the queues: list's entry names the queue label
    assert queue.database.dsn is not None  # inherited from the environment's top-level DSN
    assert urlsplit(queue.database.dsn).hostname == "postgres"


def test_prometheus_config_with_the_compose_mounts_resolved_passes_promtool(
    tmp_path: Path,
) -> None:
    promtool = find_tool("promtool")
    service = compose()["services"]["prometheus"]
    config = prometheus_config()
    config_path = next(
        arg.split("=", 1)[1] for arg in service["command"] if arg.startswith("--config.file=")
    )
    assert host_path(service, config_path) == COMPOSE_DIR / "prometheus.yml"
    resolved = []
    for pattern in config["rule_files"]:
        # The rules directory is made of file mounts, so match the container paths.
        matches = [
            source for source, target in compose_mounts(service) if fnmatch.fnmatch(target, pattern)
        ]
        assert matches, f"rule_files {pattern} matches no mounted file"
        resolved += [str(m) for m in matches]
    config["rule_files"] = resolved
    local = tmp_path / "prometheus.yml"
    local.write_text(yaml.safe_dump(config))
    done = subprocess.run(
        [promtool, "check", "config", str(local)], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS" in done.stdout + done.stderr


def test_alertmanager_gets_the_shipped_config_and_it_passes_amtool() -> None:
    amtool = find_tool("amtool")
    service = compose()["services"]["alertmanager"]
    config_path = next(
        arg.split("=", 1)[1] for arg in service["command"] if arg.startswith("--config.file=")
    )
    source = host_path(service, config_path)
    assert source == ROOT / "alerts" / "alertmanager.yml"
    config = yaml.safe_load(source.read_text())
    for template in config.get("templates", []):
        assert any(fnmatch.fnmatch(target, template) for _, target in compose_mounts(service)), (
            f"template {template} is not mounted"
        )
    done = subprocess.run(
        [amtool, "check-config", str(source)], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stdout + done.stderr


def test_grafana_provisions_the_prometheus_service_and_the_shipped_dashboard() -> None:
    services = compose()["services"]
    grafana = services["grafana"]
    (datasources,) = load_all(
        host_path(grafana, "/etc/grafana/provisioning/datasources/prometheus.yml")
    )
    (datasource,) = datasources["datasources"]
    url = urlsplit(datasource["url"])
    assert url.hostname == "prometheus"
    assert url.port in container_ports(services["prometheus"])

    (providers,) = load_all(host_path(grafana, "/etc/grafana/provisioning/dashboards/jobqueue.yml"))
    (provider,) = providers["providers"]
    dashboard_path = host_path(grafana, provider["options"]["path"] + "/jobqueue.json")
    assert dashboard_path == ROOT / "dashboards" / "jobqueue.json"
    home = grafana["environment"]["GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH"]
    assert host_path(grafana, home) == dashboard_path


def datasource_refs(node: Any) -> Iterator[Any]:
    """Every ``datasource`` value anywhere in a dashboard."""
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "datasource":
                yield value
            else:
                yield from datasource_refs(value)
    elif isinstance(node, list):
        for item in node:
            yield from datasource_refs(item)


def test_dashboard_datasources_resolve_under_file_provisioning() -> None:
    """File provisioning does not fill ``__inputs``: every panel must use a variable or our uid."""
    dashboard = json.loads((ROOT / "dashboards" / "jobqueue.json").read_text())
    assert "__inputs" not in dashboard
    variables = {
        v["name"]
        for v in dashboard.get("templating", {}).get("list", [])
        if v["type"] == "datasource"
    }
    grafana = compose()["services"]["grafana"]
    (datasources,) = load_all(
        host_path(grafana, "/etc/grafana/provisioning/datasources/prometheus.yml")
    )
    uids = {d["uid"] for d in datasources["datasources"]}
    allowed = uids | {f"${{{v}}}" for v in variables} | {f"${v}" for v in variables}
    refs = list(datasource_refs(dashboard))
    assert refs
    for ref in refs:
        uid = ref.get("uid") if isinstance(ref, dict) else ref
        if uid in (None, "-- Grafana --", "grafana"):
            continue
        assert uid in allowed, f"dashboard datasource {uid!r} resolves to nothing"


# --- compose PostgreSQL init scripts, on a real server -------------------------------------


@pytest.fixture(scope="module")
def initdb_cluster() -> Iterator[Cluster]:
    # Its own cluster: the scripts create a cluster-wide role and expect a database named
    # like the compose stack's, which must not collide with the suite's shared cluster.
    with Cluster() as cluster:
        yield cluster


def test_compose_initdb_scripts_build_the_queue_and_a_read_only_exporter_role(
    initdb_cluster: Cluster,
) -> None:
    services = compose()["services"]
    postgres = services["postgres"]
    database = postgres["environment"]["POSTGRES_DB"]
    initdb_cluster.create_database(database)
    scripts = sorted(
        (target, source)
        for source, target in compose_mounts(postgres)
        if target.startswith("/docker-entrypoint-initdb.d/")
    )
    for _, script in scripts:
        # Exactly how the image's entrypoint runs them: no --single-transaction, so each
        # statement commits alone and CREATE INDEX CONCURRENTLY is allowed.
        done = subprocess.run(
            [
                str(initdb_cluster.bin_dir / "psql"), "-v", "ON_ERROR_STOP=1",
                "--username", "postgres", "--no-password", "--no-psqlrc",
                "-h", str(initdb_cluster.socket_dir), "-p", str(initdb_cluster.port),
                "--dbname", database, "-f", str(script),
            ],
            capture_output=True, text=True, check=False,
        )  # fmt: skip
        assert done.returncode == 0, f"{script.name}: {done.stderr}"

    valid = initdb_cluster.psql(
        "SELECT c.relname FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid "
        "WHERE i.indisvalid ORDER BY 1",
        dbname=database,
    ).split()
    assert set(EXPORTER_INDEXES) <= set(valid)

    # The exporter's DSN from the compose file, pointed at this cluster.
    dsn = urlsplit(services["exporter"]["environment"]["JOBQUEUE_EXPORTER_DSN"])
    local = urlunsplit(
        dsn._replace(netloc=f"{dsn.username}:{dsn.password}@127.0.0.1:{initdb_cluster.port}")
    )
    psql = str(initdb_cluster.bin_dir / "psql")
    read = subprocess.run(
        [psql, "-X", "-A", "-t", "-v", "ON_ERROR_STOP=1", local, "-c", "SELECT count(*) FROM job"],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert read.returncode == 0, read.stderr
    assert read.stdout.strip() == "0"
    write = subprocess.run(
        [psql, "-X", "-v", "ON_ERROR_STOP=1", local, "-c", "INSERT INTO job (job_type) VALUES (1)"],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert write.returncode != 0
    assert "read-only transaction" in write.stderr or "permission denied" in write.stderr
