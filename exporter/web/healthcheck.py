"""The ``healthcheck`` command's probe: the running exporter's /healthz, asked as it serves it.

The probe reads the same settings as the server (listen address, web-config file) and asks
its first listen address over HTTPS when the web config has TLS. /healthz never needs
credentials (basic auth exempts it), so the probe holds none and can print none. A container
health check gets the image's environment but not the arguments given to the container, so
:func:`process_arguments` reads them from the exporter's process, and
:func:`process_directory` where it runs, since it reads relative paths from there.
"""

from __future__ import annotations

import http.client
import os
import socket
import ssl
from dataclasses import dataclass
from pathlib import Path

from exporter.settings import WebSettings, parse_listen_address
from exporter.web.middleware import HEALTHY_PATHS
from exporter.web.validate import WebConfigError
from exporter.web.webconfig import WebConfig, load_web_config

HEALTH_PATH = HEALTHY_PATHS[0]
# Below Docker's default --timeout of 30 s and the Dockerfile's 5 s.
TIMEOUT_SECONDS = 4.0
# Client certificates the probe cannot present: it checks the port instead of /healthz.
_CLIENT_CERT_REQUIRED = ("RequireAndVerifyClientCert",)
# Wildcard listen hosts, and the loopback address that reaches a server bound to them.
_LOOPBACK = {"": "127.0.0.1", "0.0.0.0": "127.0.0.1", "::": "::1"}
_PROGRAM_NAMES = ("jobqueue-exporter",)


class HealthcheckError(Exception):
    """The probe cannot be set up (no such process, not the exporter); the message says why."""


@dataclass(frozen=True)
class ProbeResult:
    """Whether the exporter answered, and one line that says what was asked and what came."""

    healthy: bool
    message: str


def probe_address(web: WebSettings) -> tuple[str, int]:
    """The host and port to ask: the first listen address, loopback for a wildcard host."""
    host, port = parse_listen_address(web.listen_address[0])
    return _LOOPBACK.get(host, host), port


def _url(scheme: str, host: str, port: int) -> str:
    shown = f"[{host}]" if ":" in host else host
    return f"{scheme}://{shown}:{port}{HEALTH_PATH}"


def _tls_context() -> ssl.SSLContext:
    """A client context that does not verify the server's certificate.

    The probe talks to its own process over loopback, where the certificate (issued for the
    service's public name, often by a private CA) cannot be verified and nothing can sit
    between the two ends; what it proves is that the server completes a TLS handshake and
    answers."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    return context


def _port_open(host: str, port: int, timeout: float) -> ProbeResult:
    """Whether the port accepts a TCP connection (mutual TLS leaves the probe no more)."""
    where = _url("https", host, port).removesuffix(HEALTH_PATH)
    try:
        with socket.create_connection((host, port), timeout=timeout):
            pass
    except OSError as exc:
        return ProbeResult(False, f"unhealthy: {where}: {exc.strerror or exc}")
    return ProbeResult(
        True,
        f"healthy: {where} accepts connections (client certificates are required, so "
        f"{HEALTH_PATH} was not asked)",
    )


def probe(web: WebSettings, timeout: float = TIMEOUT_SECONDS) -> ProbeResult:
    """GET /healthz from the exporter these settings describe; healthy only on a 200."""
    if web.systemd_socket:
        return ProbeResult(False, "unhealthy: the exporter listens on a socket systemd passed it")
    try:
        config = load_web_config(web.config_file) if web.config_file else WebConfig()
    except WebConfigError as exc:
        return ProbeResult(False, f"unhealthy: web config: {exc}")
    host, port = probe_address(web)
    connection: http.client.HTTPConnection
    if config.tls is None:
        url = _url("http", host, port)
        connection = http.client.HTTPConnection(host, port, timeout=timeout)
    elif config.tls.client_auth_type in _CLIENT_CERT_REQUIRED:
        return _port_open(host, port, timeout)
    else:
        url = _url("https", host, port)
        connection = http.client.HTTPSConnection(
            host, port, timeout=timeout, context=_tls_context()
        )
    try:
        connection.request("GET", HEALTH_PATH, headers={"User-Agent": "jobqueue-exporter"})
        status = connection.getresponse().status
    except (OSError, http.client.HTTPException) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        return ProbeResult(False, f"unhealthy: {url}: {reason or type(exc).__name__}")
    finally:
        connection.close()
    if status != 200:
        return ProbeResult(False, f"unhealthy: {url} answered {status}")
    return ProbeResult(True, f"healthy: {url} answered 200")


def process_directory(pid: int, proc: Path = Path("/proc")) -> str:
    """The working directory of process ``pid``, against which it reads its relative paths."""
    try:
        return os.readlink(proc / str(pid) / "cwd")
    except OSError as exc:
        raise HealthcheckError(
            f"cannot read the working directory of process {pid}: {exc.strerror or exc}"
        ) from None


def process_arguments(pid: int, proc: Path = Path("/proc")) -> list[str]:
    """The exporter's own arguments from the command line of process ``pid``.

    They follow the ``jobqueue-exporter`` (or ``python -m exporter``) word, so an init
    process in front (``docker run --init``) changes nothing."""
    try:
        raw = (proc / str(pid) / "cmdline").read_bytes()
    except OSError as exc:
        raise HealthcheckError(f"cannot read the command line of process {pid}: {exc}") from None
    words = [os.fsdecode(word) for word in raw.split(b"\0")[:-1]]
    for index, word in enumerate(words):
        if os.path.basename(word) in _PROGRAM_NAMES:
            return words[index + 1 :]
        if word == "-m" and words[index + 1 : index + 2] == ["exporter"]:
            return words[index + 2 :]
    raise HealthcheckError(f"process {pid} is not jobqueue-exporter")
