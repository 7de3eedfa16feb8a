"""``jobqueue-exporter healthcheck`` against a real exporter process on a real database.

The exporter runs as the console script runs it (``python -m exporter``), on a port given by
flag, with and without a web-config file (TLS, basic auth, client certificates); the health
check runs as a separate process, as a container's HEALTHCHECK would.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import bcrypt
import pytest
import yaml

from exporter.demo.cluster import free_port

pytestmark = [pytest.mark.slow, pytest.mark.daemon]

ROOT = Path(__file__).resolve().parents[2]
PASSWORD = "correct horse"
HASH = bcrypt.hashpw(PASSWORD.encode(), bcrypt.gensalt(4)).decode()


@dataclass
class Exporter:
    """A running exporter: its process, its own flags and its log."""

    popen: subprocess.Popen[bytes]
    flags: list[str]
    log: Path


def self_signed(directory: Path) -> tuple[Path, Path]:
    """A certificate for 127.0.0.1, made with the openssl CLI (a missing one fails the test)."""
    assert shutil.which("openssl"), "openssl CLI is required for the TLS tests"
    cert, key = directory / "server.pem", directory / "server.key"
    subprocess.run(
        [
            "openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt",
            "ec_paramgen_curve:prime256v1", "-nodes", "-keyout", str(key), "-out", str(cert),
            "-days", "2", "-subj", "/CN=localhost",
            "-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost",
        ],
        check=True, capture_output=True,
    )  # fmt: skip
    return cert, key


def web_config(directory: Path, **tls: str) -> Path:
    """A web-config file with TLS and one basic-auth user."""
    cert, key = self_signed(directory)
    document: dict[str, Any] = {
        "tls_server_config": {"cert_file": str(cert), "key_file": str(key), **tls},
        "basic_auth_users": {"admin": HASH},
    }
    path = directory / "web.yml"
    path.write_text(yaml.safe_dump(document))
    return path


def wait_for_port(exporter: Exporter, port: int) -> None:
    """Until the exporter accepts connections (fails if it exits first)."""
    deadline = time.monotonic() + 60
    while True:
        assert exporter.popen.poll() is None, exporter.log.read_text()
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return
        except OSError:
            assert time.monotonic() < deadline, exporter.log.read_text()
            time.sleep(0.1)


@pytest.fixture
def start(db_dsn: str, tmp_path: Path) -> Iterator[Any]:
    """Start exporters on the test's database; stop them all at the end."""
    started: list[Exporter] = []

    def run(*extra: str, cwd: Path = ROOT, port: int | None = None) -> tuple[Exporter, int]:
        """``port``: given by the caller's own flags or file (None: a flag here names one)."""
        flags = list(extra)
        if port is None:
            port = free_port()
            flags.insert(0, f"--web.listen-address=127.0.0.1:{port}")
        log = tmp_path / f"exporter-{len(started)}.log"
        with log.open("wb") as out:
            popen = subprocess.Popen(
                [sys.executable, "-m", "exporter", *flags],
                cwd=cwd, env={**os.environ, "JOBQUEUE_EXPORTER_DSN": db_dsn,
                              "PYTHONPATH": str(ROOT)},
                stdout=out, stderr=subprocess.STDOUT,
            )  # fmt: skip
        exporter = Exporter(popen, flags, log)
        started.append(exporter)
        wait_for_port(exporter, port)
        return exporter, port

    yield run
    for exporter in started:
        stop(exporter)


def stop(exporter: Exporter) -> None:
    """SIGTERM and wait; a second call does nothing."""
    if exporter.popen.poll() is None:
        exporter.popen.send_signal(signal.SIGTERM)
        exporter.popen.wait(30)


def healthcheck(*args: str) -> subprocess.CompletedProcess[str]:
    """``jobqueue-exporter healthcheck`` as its own process, without the exporter's DSN."""
    environ = {k: v for k, v in os.environ.items() if not k.startswith("JOBQUEUE_EXPORTER_")}
    return subprocess.run(
        [sys.executable, "-m", "exporter", "healthcheck", *args],
        cwd=ROOT, env=environ, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip


def test_healthcheck_follows_the_listen_address_flag_and_the_processes_own_flags(
    start: Any,
) -> None:
    exporter, port = start()
    by_flags = healthcheck(*exporter.flags)
    assert by_flags.returncode == 0, by_flags.stderr
    assert by_flags.stdout == f"healthy: http://127.0.0.1:{port}/healthz answered 200\n"
    by_pid = healthcheck(f"--pid={exporter.popen.pid}")
    assert (by_pid.returncode, by_pid.stdout) == (0, by_flags.stdout), by_pid.stderr
    stop(exporter)
    gone = healthcheck(*exporter.flags)
    assert gone.returncode == 1
    assert gone.stderr.startswith(f"unhealthy: http://127.0.0.1:{port}/healthz: "), gone.stderr
    assert "refused" in gone.stderr.lower()
    missing = healthcheck(f"--pid={exporter.popen.pid}")
    assert missing.returncode == 1
    assert "cannot read the command line" in missing.stderr


@pytest.mark.daemon
def test_healthcheck_by_pid_reads_the_exporters_relative_paths_from_its_working_directory(
    start: Any, tmp_path: Path
) -> None:
    home = tmp_path / "exporter-home"
    home.mkdir()
    port = free_port()
    (home / "config.yml").write_text(f"web:\n  listen_address: ['127.0.0.1:{port}']\n")
    exporter, _ = start("--config.file", "config.yml", cwd=home, port=port)
    assert not (ROOT / "config.yml").exists()  # the health check's own directory has none
    by_pid = healthcheck(f"--pid={exporter.popen.pid}")
    assert by_pid.returncode == 0, by_pid.stderr
    assert by_pid.stdout == f"healthy: http://127.0.0.1:{port}/healthz answered 200\n"


def test_healthcheck_speaks_tls_past_basic_auth_and_prints_no_secret(
    start: Any, tmp_path: Path
) -> None:
    config = web_config(tmp_path)
    exporter, port = start(f"--web.config.file={config}")
    unverified = ssl.create_default_context()
    unverified.check_hostname = False
    unverified.verify_mode = ssl.CERT_NONE
    # Basic auth is really on: /metrics refuses a request without credentials.
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(f"https://127.0.0.1:{port}/metrics", context=unverified, timeout=10)
    refused.value.close()  # the error holds the TLS connection open
    assert refused.value.code == 401
    done = healthcheck(f"--pid={exporter.popen.pid}")
    assert done.returncode == 0, done.stderr
    assert done.stdout == f"healthy: https://127.0.0.1:{port}/healthz answered 200\n"
    # Without the web config it asks in plain HTTP, which a TLS server does not answer.
    plain = healthcheck(f"--web.listen-address=127.0.0.1:{port}")
    assert plain.returncode == 1
    assert plain.stderr.startswith(f"unhealthy: http://127.0.0.1:{port}/healthz: ")
    for output in (done.stdout + done.stderr, plain.stdout + plain.stderr):
        assert PASSWORD not in output
        assert HASH not in output


def test_healthcheck_with_required_client_certificates_checks_the_port(
    start: Any, tmp_path: Path
) -> None:
    config = web_config(tmp_path)
    document = yaml.safe_load(config.read_text())
    tls = document["tls_server_config"]
    # The server's own certificate is the client CA: the probe still holds no client key.
    tls.update(client_auth_type="RequireAndVerifyClientCert", client_ca_file=tls["cert_file"])
    config.write_text(yaml.safe_dump(document))
    exporter, port = start(f"--web.config.file={config}")
    done = healthcheck(f"--pid={exporter.popen.pid}")
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"healthy: https://127.0.0.1:{port} accepts connections")
    stop(exporter)
    gone = healthcheck(*exporter.flags)
    assert gone.returncode == 1
    assert gone.stderr.startswith(f"unhealthy: https://127.0.0.1:{port}: ")
