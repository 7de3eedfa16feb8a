"""The health check's set-up, without a server: which address it asks, whose flags it reads."""

from __future__ import annotations

from pathlib import Path

import pytest

from exporter.settings import WebSettings
from exporter.settings.flags import HEALTHCHECK, parse_command_line
from exporter.web.healthcheck import (
    HEALTH_PATH,
    HealthcheckError,
    probe,
    probe_address,
    process_arguments,
    process_directory,
)
from exporter.web.middleware import HEALTHY_PATHS


@pytest.mark.parametrize(
    ("listen", "expected"),
    [
        ((":10049",), ("127.0.0.1", 10049)),
        (("0.0.0.0:9000", "[::]:9000"), ("127.0.0.1", 9000)),
        (("[::]:9001",), ("::1", 9001)),
        (("192.0.2.7:9002",), ("192.0.2.7", 9002)),
        (("localhost:9003",), ("localhost", 9003)),
    ],
)
def test_the_probe_asks_the_first_listen_address_on_loopback_for_a_wildcard(
    listen: tuple[str, ...], expected: tuple[str, int]
) -> None:
    assert probe_address(WebSettings(listen_address=listen)) == expected


def test_the_probe_asks_a_route_basic_auth_exempts() -> None:
    assert HEALTH_PATH in HEALTHY_PATHS


def write_cmdline(proc: Path, pid: int, *words: str) -> None:
    (proc / str(pid)).mkdir(parents=True)
    (proc / str(pid) / "cmdline").write_bytes(b"".join(w.encode() + b"\0" for w in words))


def test_the_flags_come_from_the_exporters_own_command_line(tmp_path: Path) -> None:
    flags = ["--web.listen-address=:9100", "--web.config.file=/etc/web.yml"]
    write_cmdline(tmp_path, 1, "/opt/jobqueue-exporter/bin/jobqueue-exporter", *flags)
    write_cmdline(tmp_path, 2, "/sbin/docker-init", "--", "jobqueue-exporter", "run", *flags)
    write_cmdline(tmp_path, 3, "/usr/bin/python3", "-m", "exporter", *flags)
    write_cmdline(tmp_path, 4, "/usr/bin/python3", "-m", "http.server")
    assert process_arguments(1, tmp_path) == flags
    assert process_arguments(2, tmp_path) == ["run", *flags]
    assert process_arguments(3, tmp_path) == flags
    with pytest.raises(HealthcheckError, match="process 4 is not jobqueue-exporter"):
        process_arguments(4, tmp_path)
    with pytest.raises(HealthcheckError, match="cannot read the command line of process 5"):
        process_arguments(5, tmp_path)


def test_healthcheck_takes_every_flag_of_run() -> None:
    namespace = parse_command_line(
        [HEALTHCHECK, "--pid=1", "--web.listen-address=:9100", "--collect.interval=5s"]
    )
    assert (namespace.command, namespace.pid) == (HEALTHCHECK, 1)


def test_a_web_config_that_does_not_load_is_unhealthy_with_its_reason(tmp_path: Path) -> None:
    broken = tmp_path / "web.yml"
    broken.write_text("tls_server_config: {cert_file: /nonexistent.pem}\n")
    result = probe(WebSettings(config_file=str(broken)))
    assert not result.healthy
    assert result.message.startswith("unhealthy: web config: ")


def test_a_systemd_socket_cannot_be_probed() -> None:
    result = probe(WebSettings(systemd_socket=True))
    assert not result.healthy
    assert "systemd" in result.message


def test_the_relative_paths_are_read_from_the_exporters_working_directory(tmp_path: Path) -> None:
    home = tmp_path / "exporter-home"
    home.mkdir()
    write_cmdline(tmp_path, 7, "jobqueue-exporter", "--config.file", "config.yml")
    (tmp_path / "7" / "cwd").symlink_to(home)
    assert process_directory(7, tmp_path) == str(home)
    with pytest.raises(HealthcheckError, match="cannot read the working directory of process 8"):
        process_directory(8, tmp_path)
