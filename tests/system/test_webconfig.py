"""The web-config file: validation, TLS (mTLS, rotation), basic auth and HTTP hardening.

Every server here is a real aiohttp server on loopback with the web-config middlewares and
limits; certificates are made with the openssl CLI, which must be installed.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import logging
import os
import shutil
import socket
import ssl
import subprocess
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import bcrypt
import pytest
import yaml
from aiohttp import web
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from exporter.web.middleware import middlewares, server_limits
from exporter.web.validate import WebConfigError
from exporter.web.watcher import WebConfigWatcher
from exporter.web.webconfig import WebConfig, load_web_config

PASSWORD = "correct horse"
# Cost 4 keeps the suite fast; the code path is the same as for cost 10.
HASH = bcrypt.hashpw(PASSWORD.encode(), bcrypt.gensalt(4)).decode()
METRICS_BODY = "jobqueue_up 1\n"


# --- certificates ---------------------------------------------------------------------------


@dataclass(frozen=True)
class PKI:
    """A CA with server certificates (two generations), a client certificate and a stranger."""

    dir: Path
    ca: Path
    server1: tuple[Path, Path]
    server2: tuple[Path, Path]
    client: tuple[Path, Path]
    stranger: tuple[Path, Path]


def _openssl(cwd: Path, *args: str) -> None:
    """Run the openssl CLI; a missing binary fails the test rather than skipping it."""
    assert shutil.which("openssl"), "openssl CLI is required for the TLS tests"
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


def _make_ca(d: Path, name: str) -> tuple[Path, Path]:
    """Create a self-signed CA."""
    _openssl(
        d, "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
        "-nodes", "-keyout", f"{name}.key", "-out", f"{name}.pem", "-days", "2",
        "-subj", f"/CN={name}",
        "-addext", "basicConstraints=critical,CA:TRUE",
        "-addext", "keyUsage=critical,keyCertSign,cRLSign",
    )  # fmt: skip
    return d / f"{name}.pem", d / f"{name}.key"


def _make_leaf(
    d: Path, ca: tuple[Path, Path], name: str, serial: int, usage: str
) -> tuple[Path, Path]:
    """Create a certificate for 127.0.0.1/localhost signed by the CA."""
    (d / f"{name}.ext").write_text(
        "subjectAltName=IP:127.0.0.1,DNS:localhost\n"
        f"extendedKeyUsage={usage}\n"
        "keyUsage=critical,digitalSignature\n"
        "authorityKeyIdentifier=keyid\n"
        "subjectKeyIdentifier=hash\n"
    )
    _openssl(
        d, "req", "-new", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
        "-nodes", "-keyout", f"{name}.key", "-out", f"{name}.csr", "-subj", f"/CN={name}",
    )  # fmt: skip
    _openssl(
        d, "x509", "-req", "-in", f"{name}.csr", "-CA", str(ca[0]), "-CAkey", str(ca[1]),
        "-set_serial", str(serial), "-days", "2", "-out", f"{name}.pem",
        "-extfile", f"{name}.ext",
    )  # fmt: skip
    return d / f"{name}.pem", d / f"{name}.key"


@pytest.fixture(scope="session")
def pki(tmp_path_factory: pytest.TempPathFactory) -> PKI:
    """One PKI for the whole session; tests copy the files they will modify."""
    d = tmp_path_factory.mktemp("pki")
    ca = _make_ca(d, "test-ca")
    other_ca = _make_ca(d, "other-ca")
    return PKI(
        dir=d,
        ca=ca[0],
        server1=_make_leaf(d, ca, "server-1", 1001, "serverAuth"),
        server2=_make_leaf(d, ca, "server-2", 1002, "serverAuth"),
        client=_make_leaf(d, ca, "client-1", 2001, "clientAuth"),
        stranger=_make_leaf(d, other_ca, "stranger", 3001, "clientAuth"),
    )


def _client_ctx(pki: PKI, cert: tuple[Path, Path] | None = None) -> ssl.SSLContext:
    """A client context that trusts the test CA and optionally presents a certificate."""
    ctx = ssl.create_default_context(cafile=str(pki.ca))
    if cert is not None:
        ctx.load_cert_chain(str(cert[0]), str(cert[1]))
    return ctx


def _install(src: tuple[Path, Path], dst_dir: Path) -> None:
    """Atomically replace the served cert and key, as cert-manager or certbot would."""
    for source, name in ((src[0], "tls.crt"), (src[1], "tls.key")):
        tmp = dst_dir / f".{name}.tmp"
        shutil.copyfile(source, tmp)
        os.replace(tmp, dst_dir / name)


# --- server ---------------------------------------------------------------------------------


def _write_config(path: Path, document: dict[str, Any]) -> Path:
    """Write a web-config file atomically."""
    tmp = path.with_suffix(".tmp")
    tmp.write_text(yaml.safe_dump(document))
    os.replace(tmp, path)
    return path


async def _metrics(request: web.Request) -> web.Response:
    """Stands in for the real /metrics handler."""
    return web.Response(text=METRICS_BODY)


async def _healthz(request: web.Request) -> web.Response:
    """Stands in for the real /healthz handler."""
    return web.Response(text="ok\n")


@contextlib.asynccontextmanager
async def serve(watcher: WebConfigWatcher, *, limits_via_app: bool = False) -> AsyncIterator[int]:
    """Run the stand-in app on a loopback port with the web-config middlewares and limits."""
    if limits_via_app:
        # The alternative to AppRunner kwargs: the Application carries the handler limits.
        app = web.Application(middlewares=middlewares(watcher), handler_args=server_limits())
        runner = web.AppRunner(app)
    else:
        app = web.Application(middlewares=middlewares(watcher))
        runner = web.AppRunner(app, **server_limits())
    app.router.add_get("/metrics", _metrics)
    app.router.add_get("/healthz", _healthz)
    await runner.setup()
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    site = web.SockSite(runner, sock, ssl_context=watcher.ssl_context())
    await site.start()
    try:
        yield port
    finally:
        await runner.cleanup()


async def raw_exchange(port: int, data: bytes) -> bytes:
    """Send raw bytes and read until the server closes (requests carry Connection: close)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        with contextlib.suppress(ConnectionError):
            writer.write(data)
            await writer.drain()
        chunks = []
        with contextlib.suppress(ConnectionError):
            async with asyncio.timeout(5):
                while chunk := await reader.read(65536):
                    chunks.append(chunk)
        return b"".join(chunks)
    finally:
        writer.close()
        with contextlib.suppress(ConnectionError):
            await writer.wait_closed()


def _status(response: bytes) -> int:
    """The status code of a raw HTTP response."""
    assert response.startswith(b"HTTP/1."), response[:80]
    return int(response.split(b" ", 2)[1])


def _basic(user: str, password: str) -> dict[str, str]:
    """An Authorization header."""
    token = base64.b64encode(f"{user}:{password}".encode()).decode()
    return {"Authorization": f"Basic {token}"}


async def _get(
    port: int,
    path: str = "/metrics",
    *,
    scheme: str = "http",
    ssl_ctx: ssl.SSLContext | bool = True,
    headers: dict[str, str] | None = None,
    method: str = "GET",
) -> tuple[int, dict[str, str], str]:
    """One request with a fresh connection; returns status, headers and body."""
    timeout = aiohttp.ClientTimeout(total=5)
    async with (
        aiohttp.ClientSession(timeout=timeout) as session,
        session.request(
            method, f"{scheme}://127.0.0.1:{port}{path}", ssl=ssl_ctx, headers=headers
        ) as response,
    ):
        return response.status, dict(response.headers), await response.text()


async def _peer_cert(port: int, ctx: ssl.SSLContext) -> dict[str, Any]:
    """Open a TLS connection and return the server certificate it was shown."""
    _, writer = await asyncio.open_connection(
        "127.0.0.1", port, ssl=ctx, server_hostname="localhost"
    )
    try:
        cert = writer.get_extra_info("peercert")
        assert isinstance(cert, dict)
        return cert
    finally:
        writer.close()
        with contextlib.suppress(ConnectionError, ssl.SSLError):
            await writer.wait_closed()


def _common_name(cert: dict[str, Any]) -> str:
    """The subject CN of a getpeercert() dict."""
    return str(dict(item[0] for item in cert["subject"])["commonName"])


@pytest.fixture
def tls_dir(tmp_path: Path, pki: PKI) -> Path:
    """A directory with tls.crt/tls.key (generation 1) and the CA, as a deployment would have."""
    _install(pki.server1, tmp_path)
    shutil.copyfile(pki.ca, tmp_path / "ca.crt")
    return tmp_path


def _tls_doc(**extra: Any) -> dict[str, Any]:
    """A tls_server_config with relative paths (resolved against the config file's directory)."""
    return {"tls_server_config": {"cert_file": "tls.crt", "key_file": "tls.key", **extra}}


# --- TLS ------------------------------------------------------------------------------------


async def test_tls_serves_https_and_refuses_plain_http(tls_dir: Path, pki: PKI) -> None:
    watcher = WebConfigWatcher(str(_write_config(tls_dir / "web.yml", _tls_doc())))
    async with serve(watcher) as port:
        status, _, body = await _get(port, scheme="https", ssl_ctx=_client_ctx(pki))
        assert (status, body) == (200, METRICS_BODY)
        plain = await raw_exchange(port, b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
        assert not plain.startswith(b"HTTP/")
        assert METRICS_BODY.encode() not in plain


async def test_min_version_tls13_refuses_a_tls12_only_client(tls_dir: Path, pki: PKI) -> None:
    doc = _tls_doc(min_version="TLS13")
    watcher = WebConfigWatcher(str(_write_config(tls_dir / "web.yml", doc)))
    async with serve(watcher) as port:
        old_client = _client_ctx(pki)
        old_client.maximum_version = ssl.TLSVersion.TLSv1_2
        with pytest.raises((ssl.SSLError, ConnectionError)):
            await _peer_cert(port, old_client)
        assert _common_name(await _peer_cert(port, _client_ctx(pki))) == "server-1"


async def test_max_version_tls12_refuses_a_tls13_only_client(tls_dir: Path, pki: PKI) -> None:
    doc = _tls_doc(max_version="TLS12")
    watcher = WebConfigWatcher(str(_write_config(tls_dir / "web.yml", doc)))
    async with serve(watcher) as port:
        new_client = _client_ctx(pki)
        new_client.minimum_version = ssl.TLSVersion.TLSv1_3
        with pytest.raises((ssl.SSLError, ConnectionError)):
            await _peer_cert(port, new_client)


async def test_require_and_verify_client_cert(tls_dir: Path, pki: PKI) -> None:
    doc = _tls_doc(client_auth_type="RequireAndVerifyClientCert", client_ca_file="ca.crt")
    watcher = WebConfigWatcher(str(_write_config(tls_dir / "web.yml", doc)))
    async with serve(watcher) as port:
        # In TLS 1.3 the client learns of the refusal only when it reads, hence a full request.
        with pytest.raises(aiohttp.ClientError):
            await _get(port, scheme="https", ssl_ctx=_client_ctx(pki))
        with pytest.raises(aiohttp.ClientError):
            await _get(port, scheme="https", ssl_ctx=_client_ctx(pki, pki.stranger))
        status, _, body = await _get(port, scheme="https", ssl_ctx=_client_ctx(pki, pki.client))
        assert (status, body) == (200, METRICS_BODY)


async def test_verify_client_cert_if_given_accepts_none_and_refuses_a_stranger(
    tls_dir: Path, pki: PKI
) -> None:
    doc = _tls_doc(client_auth_type="VerifyClientCertIfGiven", client_ca_file="ca.crt")
    watcher = WebConfigWatcher(str(_write_config(tls_dir / "web.yml", doc)))
    async with serve(watcher) as port:
        assert (await _get(port, scheme="https", ssl_ctx=_client_ctx(pki)))[0] == 200
        assert (await _get(port, scheme="https", ssl_ctx=_client_ctx(pki, pki.client)))[0] == 200
        with pytest.raises(aiohttp.ClientError):
            await _get(port, scheme="https", ssl_ctx=_client_ctx(pki, pki.stranger))


async def test_rotated_certificate_is_served_to_new_connections(tls_dir: Path, pki: PKI) -> None:
    watcher = WebConfigWatcher(
        str(_write_config(tls_dir / "web.yml", _tls_doc())), check_interval=0
    )
    async with serve(watcher) as port:
        first = await _peer_cert(port, _client_ctx(pki))
        assert (_common_name(first), first["serialNumber"]) == ("server-1", "03E9")
        _install(pki.server2, tls_dir)
        second = await _peer_cert(port, _client_ctx(pki))
        assert (_common_name(second), second["serialNumber"]) == ("server-2", "03EA")


async def test_rotation_waits_for_the_check_interval(tls_dir: Path, pki: PKI) -> None:
    now = [0.0]
    path = str(_write_config(tls_dir / "web.yml", _tls_doc()))
    watcher = WebConfigWatcher(path, check_interval=1.0, clock=lambda: now[0])
    async with serve(watcher) as port:
        _install(pki.server2, tls_dir)
        now[0] = 0.5
        assert _common_name(await _peer_cert(port, _client_ctx(pki))) == "server-1"
        now[0] = 1.0
        assert _common_name(await _peer_cert(port, _client_ctx(pki))) == "server-2"


async def test_broken_replacement_keeps_the_last_good_certificate(
    tls_dir: Path, pki: PKI, caplog: pytest.LogCaptureFixture
) -> None:
    watcher = WebConfigWatcher(
        str(_write_config(tls_dir / "web.yml", _tls_doc())), check_interval=0
    )
    async with serve(watcher) as port:
        (tls_dir / "tls.crt").write_text("-----BEGIN CERTIFICATE-----\ngarbage\n")
        with caplog.at_level(logging.ERROR, logger="exporter.web.watcher"):
            assert _common_name(await _peer_cert(port, _client_ctx(pki))) == "server-1"
            assert _common_name(await _peer_cert(port, _client_ctx(pki))) == "server-1"
        errors = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
        # Logged once per distinct failure, not once per connection.
        assert len(errors) == 1
        assert "tls_server_config.cert_file" in errors[0]
        _install(pki.server2, tls_dir)
        assert _common_name(await _peer_cert(port, _client_ctx(pki))) == "server-2"


async def test_mismatched_key_during_rotation_keeps_serving(tls_dir: Path, pki: PKI) -> None:
    watcher = WebConfigWatcher(
        str(_write_config(tls_dir / "web.yml", _tls_doc())), check_interval=0
    )
    async with serve(watcher) as port:
        # A rotation caught half-way: new certificate, old key.
        shutil.copyfile(pki.server2[0], tls_dir / "tls.crt")
        assert _common_name(await _peer_cert(port, _client_ctx(pki))) == "server-1"
        shutil.copyfile(pki.server2[1], tls_dir / "tls.key")
        assert _common_name(await _peer_cert(port, _client_ctx(pki))) == "server-2"


async def test_turning_tls_off_by_reload_is_refused(tls_dir: Path, pki: PKI) -> None:
    path = _write_config(tls_dir / "web.yml", _tls_doc())
    watcher = WebConfigWatcher(str(path), check_interval=0)
    async with serve(watcher) as port:
        _write_config(path, {})
        assert _common_name(await _peer_cert(port, _client_ctx(pki))) == "server-1"
        assert watcher.config.tls is not None
        # What a reload (SIGHUP, POST /-/reload) asks before applying anything: it is refused,
        # naming the key, and TLS keeps being served.
        with pytest.raises(WebConfigError, match="tls_server_config: turning TLS on or off needs"):
            watcher.check()
        assert _common_name(await _peer_cert(port, _client_ctx(pki))) == "server-1"


def test_go_cipher_suite_names_are_translated(tls_dir: Path) -> None:
    suites = ["TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256", "TLS_AES_128_GCM_SHA256"]
    config = load_web_config(
        str(_write_config(tls_dir / "web.yml", _tls_doc(cipher_suites=suites)))
    )
    assert config.tls is not None
    assert config.tls.cipher_suites == ("ECDHE-RSA-AES128-GCM-SHA256",)


# --- basic auth -----------------------------------------------------------------------------


@pytest.fixture
async def auth_server(tmp_path: Path) -> AsyncIterator[tuple[int, WebConfigWatcher, Path]]:
    """A plain-HTTP server with one user, alice."""
    path = _write_config(tmp_path / "web.yml", {"basic_auth_users": {"alice": HASH}})
    watcher = WebConfigWatcher(str(path), check_interval=0)
    async with serve(watcher) as port:
        yield port, watcher, path


@pytest.fixture
def bcrypt_calls(monkeypatch: pytest.MonkeyPatch) -> list[bytes]:
    """Record the hash of every bcrypt check the exporter runs."""
    calls: list[bytes] = []
    real = bcrypt.checkpw

    def counting(password: bytes, hashed: bytes) -> bool:
        calls.append(hashed)
        return real(password, hashed)

    # webconfig calls bcrypt.checkpw through the module, so patching the module is enough.
    monkeypatch.setattr(bcrypt, "checkpw", counting)
    return calls


@pytest.mark.parametrize(
    "headers",
    [
        pytest.param(None, id="no-header"),
        pytest.param(_basic("alice", "wrong"), id="wrong-password"),
        pytest.param(_basic("mallory", PASSWORD), id="unknown-user"),
        pytest.param({"Authorization": "Basic !!!notbase64"}, id="bad-base64"),
        pytest.param({"Authorization": "Bearer abc"}, id="other-scheme"),
        pytest.param(
            {"Authorization": "Basic " + base64.b64encode(b"alice").decode()}, id="no-colon"
        ),
        pytest.param(_basic("alice", PASSWORD + "x" * 80), id="long-password"),
    ],
)
async def test_bad_credentials_get_401_with_www_authenticate(
    auth_server: tuple[int, WebConfigWatcher, Path], headers: dict[str, str] | None
) -> None:
    port, _, _ = auth_server
    status, response_headers, body = await _get(port, headers=headers)
    assert status == 401
    assert response_headers["WWW-Authenticate"] == 'Basic realm="jobqueue-exporter"'
    assert METRICS_BODY not in body


async def test_right_credentials_get_200_and_healthz_is_open(
    auth_server: tuple[int, WebConfigWatcher, Path],
) -> None:
    port, _, _ = auth_server
    assert (await _get(port, headers=_basic("alice", PASSWORD)))[::2] == (200, METRICS_BODY)
    assert (await _get(port, "/healthz"))[::2] == (200, "ok\n")


async def test_wrong_password_and_unknown_user_each_run_one_bcrypt_check(
    auth_server: tuple[int, WebConfigWatcher, Path], bcrypt_calls: list[bytes]
) -> None:
    port, _, _ = auth_server
    assert (await _get(port, headers=_basic("alice", "wrong")))[0] == 401
    assert (await _get(port, headers=_basic("mallory", "wrong")))[0] == 401
    assert (await _get(port, headers=_basic("alice", "wrong")))[0] == 401
    # Failures are never cached, and the unknown user costs the same hash as a real one.
    assert bcrypt_calls == [HASH.encode()] * 3


async def test_successful_check_is_cached_until_the_file_changes(
    auth_server: tuple[int, WebConfigWatcher, Path], bcrypt_calls: list[bytes]
) -> None:
    port, _, path = auth_server
    for _ in range(3):
        assert (await _get(port, headers=_basic("alice", PASSWORD)))[0] == 200
    assert len(bcrypt_calls) == 1
    new_hash = bcrypt.hashpw(b"new password", bcrypt.gensalt(4)).decode()
    _write_config(path, {"basic_auth_users": {"alice": new_hash}})
    assert (await _get(port, headers=_basic("alice", PASSWORD)))[0] == 401
    assert (await _get(port, headers=_basic("alice", "new password")))[0] == 200
    assert len(bcrypt_calls) == 3


async def test_auth_cannot_be_bypassed_through_healthz_paths(
    auth_server: tuple[int, WebConfigWatcher, Path],
) -> None:
    port, _, _ = auth_server
    for path in ("/healthz/../metrics", "/healthz/%2e%2e/metrics", "/%68ealthz/../metrics"):
        response = await raw_exchange(
            port, f"GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".encode()
        )
        assert _status(response) in (400, 401, 404), path
        assert METRICS_BODY.encode() not in response


async def test_no_users_means_no_auth(tmp_path: Path) -> None:
    watcher = WebConfigWatcher(str(_write_config(tmp_path / "web.yml", {})))
    async with serve(watcher) as port:
        assert (await _get(port))[::2] == (200, METRICS_BODY)


# --- HTTP hardening -------------------------------------------------------------------------

SECURITY_HEADERS = {
    "X-Frame-Options": "deny",
    "X-Content-Type-Options": "nosniff",
    "Content-Security-Policy": "default-src 'none'",
    "Strict-Transport-Security": "max-age=31536000",
    "X-XSS-Protection": "0",
}


async def test_configured_headers_are_on_every_response(tmp_path: Path) -> None:
    doc = {
        "basic_auth_users": {"alice": HASH},
        "http_server_config": {"headers": SECURITY_HEADERS, "http2": False},
    }
    watcher = WebConfigWatcher(str(_write_config(tmp_path / "web.yml", doc)))
    async with serve(watcher) as port:
        for path, method, auth, expected in [
            ("/metrics", "GET", True, 200),
            ("/metrics", "GET", False, 401),
            ("/nope", "GET", True, 404),
            ("/metrics", "POST", True, 405),
            ("/healthz", "HEAD", False, 200),
        ]:
            headers = _basic("alice", PASSWORD) if auth else None
            status, got, _ = await _get(port, path, headers=headers, method=method)
            assert status == expected, (path, method)
            assert {k: got.get(k) for k in SECURITY_HEADERS} == SECURITY_HEADERS, (path, method)


@pytest.mark.parametrize(
    "method", ["POST", "PUT", "DELETE", "PATCH", "OPTIONS", "TRACE", "PROPFIND"]
)
async def test_methods_other_than_get_and_head_get_405(tmp_path: Path, method: str) -> None:
    async with serve(WebConfigWatcher(None)) as port:
        response = await raw_exchange(
            port, f"{method} /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".encode()
        )
        assert _status(response) == 405
        assert b"\r\nAllow: GET, HEAD\r\n" in response


async def test_unknown_method_token_is_refused_by_the_parser() -> None:
    async with serve(WebConfigWatcher(None)) as port:
        response = await raw_exchange(port, b"FOO /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
        assert _status(response) in (400, 405)
        assert (await _get(port))[0] == 200


async def test_head_is_served(tmp_path: Path) -> None:
    async with serve(WebConfigWatcher(None)) as port:
        status, _, body = await _get(port, method="HEAD")
        assert (status, body) == (200, "")


@pytest.mark.parametrize(
    "framing",
    [
        pytest.param("Content-Length: 5\r\n\r\nhello", id="content-length"),
        pytest.param("Transfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n", id="chunked"),
    ],
)
async def test_get_with_a_body_is_refused(framing: str) -> None:
    async with serve(WebConfigWatcher(None)) as port:
        request = f"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n{framing}"
        response = await raw_exchange(port, request.encode())
        assert 400 <= _status(response) < 500
        assert METRICS_BODY.encode() not in response
        assert (await _get(port))[0] == 200


@pytest.mark.parametrize("limits_via_app", [False, True], ids=["runner-kwargs", "handler-args"])
@pytest.mark.parametrize(
    "request_bytes",
    [
        pytest.param(b"GET /metrics HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 20000, id="field"),
        pytest.param(b"GET /" + b"a" * 20000 + b" HTTP/1.1\r\nHost: x", id="request-line"),
        pytest.param(
            b"GET /metrics HTTP/1.1\r\nHost: x" + b"".join(b"\r\nX-H%d: v" % i for i in range(100)),
            id="header-count",
        ),
    ],
)
async def test_oversized_headers_are_refused_and_the_server_keeps_serving(
    limits_via_app: bool, request_bytes: bytes
) -> None:
    async with serve(WebConfigWatcher(None), limits_via_app=limits_via_app) as port:
        response = await raw_exchange(port, request_bytes + b"\r\nConnection: close\r\n\r\n")
        assert _status(response) in (400, 413, 414, 431)
        assert (await _get(port))[::2] == (200, METRICS_BODY)


async def test_headers_just_under_the_limit_are_served() -> None:
    async with serve(WebConfigWatcher(None)) as port:
        status, _, _ = await _get(port, headers={"X-Big": "a" * 4000})
        assert status == 200


@pytest.mark.parametrize(
    "path",
    [
        "/../../etc/passwd",
        "/%2e%2e/%2e%2e/etc/passwd",
        "/metrics/../../../etc/passwd",
        "/..%2f..%2fetc/passwd",
    ],
)
async def test_path_traversal_is_not_found(path: str) -> None:
    async with serve(WebConfigWatcher(None)) as port:
        response = await raw_exchange(
            port, f"GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".encode()
        )
        assert _status(response) in (400, 404)
        assert b"root:" not in response


async def test_slow_client_does_not_block_others() -> None:
    async with serve(WebConfigWatcher(None)) as port:
        _, stalled = await asyncio.open_connection("127.0.0.1", port)
        try:
            stalled.write(b"GET /metr")
            await stalled.drain()
            for _ in range(3):
                assert (await _get(port))[::2] == (200, METRICS_BODY)
        finally:
            stalled.close()
            with contextlib.suppress(ConnectionError):
                await stalled.wait_closed()


async def test_malformed_request_lines_get_4xx_and_the_server_keeps_serving() -> None:
    async with serve(WebConfigWatcher(None)) as port:
        for garbage in (
            b"\x16\x03\x01\x00\xa5",
            b"GET\r\n",
            b"GET / HTTP/9.9\r\n",
            b"G\x00T / HTTP/1.1",
        ):
            response = await raw_exchange(port, garbage + b"\r\n\r\n")
            assert response == b"" or 400 <= _status(response) < 500, garbage
        assert (await _get(port))[0] == 200


# --- validation -----------------------------------------------------------------------------

_CASES: list[tuple[str, Callable[[Path, PKI], dict[str, Any]], str]] = [
    ("unknown-top-key", lambda d, p: {"basic_auth_user": {}}, "basic_auth_user: unknown key"),
    (
        "typo-in-tls-key",
        lambda d, p: _tls_doc(cert_fle="x"),
        "tls_server_config.cert_fle: unknown key",
    ),
    (
        "cert-without-key",
        lambda d, p: {"tls_server_config": {"cert_file": "tls.crt"}},
        "tls_server_config.key_file",
    ),
    (
        "key-without-cert",
        lambda d, p: {"tls_server_config": {"key_file": "tls.key"}},
        "tls_server_config.cert_file",
    ),
    (
        "missing-cert",
        lambda d, p: {"tls_server_config": {"cert_file": "nope.crt", "key_file": "tls.key"}},
        "tls_server_config.cert_file",
    ),
    (
        "garbage-cert",
        lambda d, p: {"tls_server_config": {"cert_file": "web.yml", "key_file": "tls.key"}},
        "tls_server_config.cert_file",
    ),
    (
        "mismatched-key",
        lambda d, p: {"tls_server_config": {"cert_file": "tls.crt", "key_file": str(p.server2[1])}},
        "tls_server_config.key_file",
    ),
    (
        "garbage-ca",
        lambda d, p: _tls_doc(
            client_auth_type="RequireAndVerifyClientCert", client_ca_file="tls.key"
        ),
        "tls_server_config.client_ca_file",
    ),
    (
        "ca-required",
        lambda d, p: _tls_doc(client_auth_type="RequireAndVerifyClientCert"),
        "tls_server_config.client_ca_file",
    ),
    (
        "ca-without-policy",
        lambda d, p: _tls_doc(client_ca_file="ca.crt"),
        "tls_server_config.client_auth_type",
    ),
    (
        "bad-auth-type",
        lambda d, p: _tls_doc(client_auth_type="Always"),
        "tls_server_config.client_auth_type",
    ),
    (
        "require-any",
        lambda d, p: _tls_doc(client_auth_type="RequireAnyClientCert"),
        "tls_server_config.client_auth_type",
    ),
    (
        "bad-min-version",
        lambda d, p: _tls_doc(min_version="TLS14"),
        "tls_server_config.min_version",
    ),
    (
        "min-above-max",
        lambda d, p: _tls_doc(min_version="TLS13", max_version="TLS12"),
        "tls_server_config.min_version",
    ),
    (
        "bad-cipher",
        lambda d, p: _tls_doc(cipher_suites=["TLS_RSA_WITH_RC4_128_SHA"]),
        "tls_server_config.cipher_suites[0]",
    ),
    (
        "cipher-not-list",
        lambda d, p: _tls_doc(cipher_suites="AES"),
        "tls_server_config.cipher_suites",
    ),
    (
        "curves",
        lambda d, p: _tls_doc(curve_preferences=["X25519"]),
        "tls_server_config.curve_preferences",
    ),
    ("inline-cert", lambda d, p: _tls_doc(cert="-----BEGIN"), "tls_server_config.cert"),
    (
        "tls-not-mapping",
        lambda d, p: {"tls_server_config": ["x"]},
        "tls_server_config: must be a mapping",
    ),
    (
        "plaintext-password",
        lambda d, p: {"basic_auth_users": {"alice": "s3cret-plaintext"}},
        "basic_auth_users.alice",
    ),
    (
        "md5-hash",
        lambda d, p: {"basic_auth_users": {"alice": "$apr1$abc$s3cret-plaintext"}},
        "basic_auth_users.alice",
    ),
    (
        "hash-not-string",
        lambda d, p: {"basic_auth_users": {"alice": 12345678}},
        "basic_auth_users.alice",
    ),
    ("user-with-colon", lambda d, p: {"basic_auth_users": {"a:b": HASH}}, "basic_auth_users.'a:b'"),
    (
        "users-not-mapping",
        lambda d, p: {"basic_auth_users": [HASH]},
        "basic_auth_users: must be a mapping",
    ),
    (
        "header-not-allowed",
        lambda d, p: {"http_server_config": {"headers": {"X-Powered-By": "me"}}},
        "http_server_config.headers.X-Powered-By",
    ),
    (
        "bad-frame-options",
        lambda d, p: {"http_server_config": {"headers": {"X-Frame-Options": "allow"}}},
        "http_server_config.headers.X-Frame-Options",
    ),
    (
        "header-newline",
        lambda d, p: {
            "http_server_config": {"headers": {"Content-Security-Policy": "a\r\nSet-Cookie: x"}}
        },
        "http_server_config.headers.Content-Security-Policy",
    ),
    (
        "http2-not-bool",
        lambda d, p: {"http_server_config": {"http2": "yes please"}},
        "http_server_config.http2",
    ),
    (
        "http-unknown-key",
        lambda d, p: {"http_server_config": {"header": {}}},
        "http_server_config.header: unknown key",
    ),
    ("rate-limit", lambda d, p: {"rate_limit": {"interval": "1s"}}, "rate_limit"),
]


@pytest.mark.parametrize(("make", "expected"), [pytest.param(m, e, id=i) for i, m, e in _CASES])
def test_invalid_config_names_the_key(
    tls_dir: Path, pki: PKI, make: Callable[[Path, PKI], dict[str, Any]], expected: str
) -> None:
    path = _write_config(tls_dir / "web.yml", make(tls_dir, pki))
    with pytest.raises(WebConfigError) as info:
        load_web_config(str(path))
    message = str(info.value)
    assert expected in message
    assert "s3cret-plaintext" not in message
    assert HASH not in message
    assert "12345678" not in message


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        pytest.param("- just\n- a list\n", "web config: must be a mapping", id="list"),
        pytest.param(
            "basic_auth_users:\n  alice: " + HASH + "\n  alice: " + HASH + "\n",
            "duplicate",
            id="dup",
        ),
        pytest.param(
            "basic_auth_users:\n  alice: " + HASH + "\n bob: [\n", "not valid YAML (line", id="yaml"
        ),
        pytest.param(
            "basic_auth_users: {alice: " + HASH + "}}\n", "not valid YAML", id="yaml-flow"
        ),
    ],
)
def test_malformed_yaml_is_reported_without_echoing_the_file(
    tmp_path: Path, text: str, expected: str
) -> None:
    path = tmp_path / "web.yml"
    path.write_text(text)
    with pytest.raises(WebConfigError) as info:
        load_web_config(str(path))
    assert expected in str(info.value)
    assert HASH not in str(info.value)
    assert HASH[7:20] not in str(info.value)


@pytest.mark.parametrize(
    ("document", "expected"),
    [
        ({"": 1}, "'': unknown key"),
        ({"basic_auth_users": {"bob\nlevel=error msg=x": "x"}}, "basic_auth_users.'bob\\nlevel"),
    ],
)
def test_odd_keys_are_quoted_in_messages(tmp_path: Path, document: Any, expected: str) -> None:
    with pytest.raises(WebConfigError) as info:
        load_web_config(str(_write_config(tmp_path / "web.yml", document)))
    assert expected in str(info.value)
    assert "\n" not in str(info.value)


def test_unreadable_file_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(WebConfigError, match=r"web\.yml: cannot read"):
        load_web_config(str(tmp_path / "web.yml"))
    (tmp_path / "bin.yml").write_bytes(b"\xff\xfe\x00")
    with pytest.raises(WebConfigError, match="not UTF-8"):
        load_web_config(str(tmp_path / "bin.yml"))


def test_the_example_in_the_docs_loads(tls_dir: Path) -> None:
    docs = (Path(__file__).resolve().parents[2] / "docs" / "security.md").read_text()
    example = docs.split("```yaml\n", 1)[1].split("```", 1)[0]
    (tls_dir / "web.yml").write_text(example)
    config = load_web_config(str(tls_dir / "web.yml"))
    assert config.tls is not None
    assert config.tls.client_auth_type == "RequireAndVerifyClientCert"
    assert list(config.basic_auth_users) == ["prometheus"]
    assert config.headers["X-Frame-Options"] == "deny"


def test_empty_file_means_plain_http_without_auth(tmp_path: Path) -> None:
    path = tmp_path / "web.yml"
    path.write_text("")
    assert load_web_config(str(path)) == WebConfig()


def test_repr_never_shows_a_hash(tmp_path: Path) -> None:
    config = load_web_config(
        str(_write_config(tmp_path / "web.yml", {"basic_auth_users": {"alice": HASH}}))
    )
    assert config.basic_auth_users == {"alice": HASH}
    assert HASH not in repr(config)


_yaml_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=20),
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=12), children, max_size=3)
    ),
    max_leaves=10,
)
_keys = st.sampled_from(
    ["tls_server_config", "http_server_config", "basic_auth_users", "rate_limit", "cert_file",
     "key_file", "client_auth_type", "min_version", "headers", "http2", "X-Frame-Options", "alice"]
)  # fmt: skip
_documents = st.recursive(
    _yaml_values, lambda children: st.dictionaries(_keys, children, max_size=4), max_leaves=12
)


@settings(
    max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(document=_documents)
def test_any_document_is_accepted_or_rejected_cleanly(tmp_path: Path, document: Any) -> None:
    path = tmp_path / "web.yml"
    path.write_text(yaml.safe_dump(document))
    error: WebConfigError | None = None
    try:
        load_web_config(str(path))
    except WebConfigError as exc:
        error = exc
    # Anything else (TypeError, KeyError, ...) escapes and fails the test.
    if error is not None:
        key, sep, reason = str(error).partition(": ")
        assert sep, str(error)
        assert key, str(error)
        assert reason, str(error)
