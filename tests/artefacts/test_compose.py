"""The compose stack: every file it mounts, its services' cross-references, its configs.

No container engine runs here, so these tests check that every file the stack mounts exists,
that every target and datasource names a service on a port it exposes, that the exporter's
own loader accepts the settings the compose service gives it, `promtool check config` on the
stack's Prometheus config with the mounts resolved, `amtool check-config` on the mounted
Alertmanager config, and that the init scripts the compose PostgreSQL runs really build the
schema, the indexes and a read-only role on PostgreSQL 15.
"""

from __future__ import annotations

import asyncio
import contextlib
import fnmatch
import io
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path, PurePosixPath
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import asyncpg
import pytest
import yaml

from exporter.demo import fleet_service
from exporter.demo.cluster import Cluster
from exporter.demo.queue import JobQueue
from exporter.settings import parse_listen_address
from tests.artefacts.deploy_files import (
    COMPOSE,
    COMPOSE_DIR,
    DOCKERFILE,
    ROOT,
    RULES_JOB,
    TELEMETRY_PATH,
    find_tool,
    load_all,
    settings_from_argv,
    split_args,
)

EXPORTER_INDEXES = (
    "job_exporter_active_idx",
    "job_exporter_updated_at_idx",
    "job_exporter_dead_idx",
)


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


EXPECTED_SERVICES = {"postgres", "fleet", "exporter", "prometheus", "alertmanager", "grafana"}


def test_compose_has_the_whole_chain() -> None:
    assert set(compose()["services"]) == EXPECTED_SERVICES


def test_compose_depends_on_names_existing_services() -> None:
    services = compose()["services"]
    for name, service in services.items():
        for dependency in service.get("depends_on", []):
            assert dependency in services, f"{name} depends on unknown {dependency}"
            assert dependency != name


@pytest.mark.daemon
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


def fleet_check_argv(dsn: str) -> list[str]:
    """The fleet's compose healthcheck as a command line here: this Python, the test's DSN."""
    test = compose()["services"]["fleet"]["healthcheck"]["test"]
    assert test[:4] == ["CMD", "python", "-m", "exporter.demo.fleet_service"], test
    args = test[4:]
    args[args.index("--dsn") + 1] = dsn
    return [sys.executable, "-m", test[3], *args]


def seconds(duration: str) -> float:
    """A compose duration such as ``30s`` or ``1m``, in seconds."""
    value, unit = float(duration[:-1]), duration[-1]
    return value * {"s": 1, "m": 60}[unit]


def test_the_fleet_has_a_healthcheck_of_its_own_not_the_exporters() -> None:
    fleet = compose()["services"]["fleet"]
    check = fleet["healthcheck"]
    assert not check.get("disable"), "a fleet without a healthcheck reports nothing"
    assert "healthcheck" not in check["test"]  # the image's: `jobqueue-exporter healthcheck`
    assert check["test"][4] == "--check"
    # The same database the fleet drives, by the one anchor.
    dsn = fleet["command"][fleet["command"].index("--dsn") + 1]
    assert check["test"][check["test"].index("--dsn") + 1] == dsn
    # The check answers (connect, then query, each capped) before compose gives up on it.
    assert seconds(check["timeout"]) > 2 * fleet_service.CHECK_TIMEOUT + 2
    assert seconds(check["start_period"]) >= 30  # the fleet's first enqueue comes within a second


async def test_the_fleet_healthcheck_passes_only_while_jobs_move(db_dsn: str) -> None:
    """What the compose healthcheck does, run here against a real queue database."""
    argv = fleet_check_argv(db_dsn)[3:]  # main()'s arguments: what follows the module

    async def check() -> tuple[int, str]:
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            code = await asyncio.to_thread(fleet_service.main, argv)
        return code, out.getvalue()

    code, said = await check()
    assert (code, said) == (1, "the job table is empty: the fleet has not enqueued anything yet\n")
    conn = await asyncpg.connect(db_dsn)
    try:
        await JobQueue(conn, backoff_base=1.0).enqueue(1)
        assert await check() == (0, "ok: the fleet is moving jobs\n")
        # Two minutes without a change, by the database's clock: a stopped fleet.
        await conn.execute("UPDATE job SET updated_at = now() - interval '2 minutes'")
        code, said = await check()
        assert code == 1
        assert said.startswith("no job has changed for 120 s (more than 60 s)"), said
    finally:
        await conn.close()


@pytest.mark.daemon
def test_the_fleet_healthcheck_fails_without_echoing_the_password() -> None:
    # The real command line, as compose runs it, with a database nothing listens for.
    unreachable = "postgresql://postgres:fleet-secret@127.0.0.1:1/jobqueue"
    done = subprocess.run(
        fleet_check_argv(unreachable), capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 1, done.stderr[-2000:]
    assert done.stdout.startswith("cannot reach the queue's database: "), done.stdout
    assert "fleet-secret" not in done.stdout + done.stderr


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


@pytest.mark.daemon
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


@pytest.mark.daemon
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


@pytest.mark.cluster
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
