"""TLS of the web-config file: ``tls_server_config`` parsed, and the server context built from it.

The listener gets a context that hands each new connection to the freshest one, so certificates
rotate without a restart (see :mod:`exporter.web.watcher`).
"""

from __future__ import annotations

import ssl
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from exporter.web.validate import WebConfigError, choice, mapping, readable_file, shown, string

CLIENT_AUTH_TYPES = (
    "NoClientCert",
    "RequestClientCert",
    "RequireAnyClientCert",
    "VerifyClientCertIfGiven",
    "RequireAndVerifyClientCert",
)
TLS_VERSIONS: dict[str, ssl.TLSVersion] = {
    "TLS10": ssl.TLSVersion.TLSv1,
    "TLS11": ssl.TLSVersion.TLSv1_1,
    "TLS12": ssl.TLSVersion.TLSv1_2,
    "TLS13": ssl.TLSVersion.TLSv1_3,
}
# Go's crypto/tls names (what users of the Go exporters write) -> OpenSSL names. TLS 1.3 suites
# are accepted and ignored, as in Go, because neither Go nor OpenSSL lets them be restricted here.
_GO_CIPHER_SUITES = {
    "TLS_RSA_WITH_AES_128_CBC_SHA": "AES128-SHA",
    "TLS_RSA_WITH_AES_256_CBC_SHA": "AES256-SHA",
    "TLS_RSA_WITH_AES_128_GCM_SHA256": "AES128-GCM-SHA256",
    "TLS_RSA_WITH_AES_256_GCM_SHA384": "AES256-GCM-SHA384",
    "TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA": "ECDHE-ECDSA-AES128-SHA",
    "TLS_ECDHE_ECDSA_WITH_AES_256_CBC_SHA": "ECDHE-ECDSA-AES256-SHA",
    "TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA": "ECDHE-RSA-AES128-SHA",
    "TLS_ECDHE_RSA_WITH_AES_256_CBC_SHA": "ECDHE-RSA-AES256-SHA",
    "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256": "ECDHE-ECDSA-AES128-GCM-SHA256",
    "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256": "ECDHE-RSA-AES128-GCM-SHA256",
    "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384": "ECDHE-ECDSA-AES256-GCM-SHA384",
    "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384": "ECDHE-RSA-AES256-GCM-SHA384",
    "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256": "ECDHE-ECDSA-CHACHA20-POLY1305",
    "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256": "ECDHE-RSA-CHACHA20-POLY1305",
}
_TLS13_SUITES = ("TLS_AES_128_GCM_SHA256", "TLS_AES_256_GCM_SHA384", "TLS_CHACHA20_POLY1305_SHA256")

# Keys of the toolkit format that Python's ssl module cannot honour; rejected rather than
# silently ignored, because each one is a security setting the operator expects to hold.
_UNSUPPORTED_TLS_KEYS = {
    "cert": "inline PEM is not supported; use cert_file",
    "key": "inline PEM is not supported; use key_file",
    "client_ca": "inline PEM is not supported; use client_ca_file",
    "client_allowed_sans": "not supported; issue client certificates from a dedicated CA instead",
    "curve_preferences": "not supported by Python's ssl module; remove the key",
}
_TLS_KEYS = (
    "cert_file",
    "key_file",
    "client_ca_file",
    "client_auth_type",
    "min_version",
    "max_version",
    "cipher_suites",
    "prefer_server_cipher_suites",
)


@dataclass(frozen=True)
class TLSConfig:
    """``tls_server_config``: where the certificate lives and what clients must present."""

    cert_file: str
    key_file: str
    client_ca_file: str | None = None
    client_auth_type: str = "NoClientCert"
    min_version: str = "TLS12"
    max_version: str = "TLS13"
    # OpenSSL names, already translated from Go's; empty means OpenSSL's defaults.
    cipher_suites: tuple[str, ...] = ()
    prefer_server_cipher_suites: bool = True


def parse_tls(raw: Any, base_dir: str) -> TLSConfig | None:
    """Validate ``tls_server_config``."""
    section = mapping(raw, "tls_server_config")
    if not section:
        return None
    for key in section:
        if key in _UNSUPPORTED_TLS_KEYS:
            raise WebConfigError(f"tls_server_config.{key}: {_UNSUPPORTED_TLS_KEYS[key]}")
        if key not in _TLS_KEYS:
            raise WebConfigError(f"tls_server_config.{shown(key)}: unknown key")
    if "cert_file" not in section:
        raise WebConfigError("tls_server_config.cert_file: required when TLS is configured")
    if "key_file" not in section:
        raise WebConfigError("tls_server_config.key_file: required with cert_file")
    cert_file = readable_file(
        string(section["cert_file"], "tls_server_config.cert_file"),
        "tls_server_config.cert_file",
        base_dir,
    )
    key_file = readable_file(
        string(section["key_file"], "tls_server_config.key_file"),
        "tls_server_config.key_file",
        base_dir,
    )
    client_ca_file = None
    if section.get("client_ca_file") is not None:
        client_ca_file = readable_file(
            string(section["client_ca_file"], "tls_server_config.client_ca_file"),
            "tls_server_config.client_ca_file",
            base_dir,
        )
    auth_type = choice(
        section.get("client_auth_type", "NoClientCert"),
        "tls_server_config.client_auth_type",
        CLIENT_AUTH_TYPES,
    )
    if auth_type == "RequireAnyClientCert":
        raise WebConfigError(
            "tls_server_config.client_auth_type: RequireAnyClientCert is not supported (Python's"
            " ssl cannot require a certificate without verifying it); use"
            " RequireAndVerifyClientCert with client_ca_file"
        )
    if auth_type in ("VerifyClientCertIfGiven", "RequireAndVerifyClientCert") and not (
        client_ca_file
    ):
        raise WebConfigError(f"tls_server_config.client_ca_file: required by {auth_type}")
    if client_ca_file and auth_type == "NoClientCert":
        # Same rule as the toolkit: a CA without a policy is almost certainly a mistake.
        raise WebConfigError(
            "tls_server_config.client_auth_type: client_ca_file is set but client_auth_type is"
            " NoClientCert"
        )
    versions = tuple(TLS_VERSIONS)
    min_version = choice(
        section.get("min_version", "TLS12"), "tls_server_config.min_version", versions
    )
    max_version = choice(
        section.get("max_version", "TLS13"), "tls_server_config.max_version", versions
    )
    if TLS_VERSIONS[min_version] > TLS_VERSIONS[max_version]:
        raise WebConfigError("tls_server_config.min_version: is above max_version")
    ciphers = section.get("cipher_suites") or []
    if not isinstance(ciphers, list):
        raise WebConfigError("tls_server_config.cipher_suites: must be a list")
    openssl_ciphers = []
    for i, name in enumerate(ciphers):
        if name in _TLS13_SUITES:
            continue
        if name not in _GO_CIPHER_SUITES:
            raise WebConfigError(
                f"tls_server_config.cipher_suites[{i}]: unknown or insecure cipher suite {name!r}"
            )
        openssl_ciphers.append(_GO_CIPHER_SUITES[name])
    prefer = section.get("prefer_server_cipher_suites", True)
    if not isinstance(prefer, bool):
        raise WebConfigError("tls_server_config.prefer_server_cipher_suites: must be true or false")
    return TLSConfig(
        cert_file=cert_file,
        key_file=key_file,
        client_ca_file=client_ca_file,
        client_auth_type=auth_type,
        min_version=min_version,
        max_version=max_version,
        cipher_suites=tuple(openssl_ciphers),
        prefer_server_cipher_suites=prefer,
    )


def _no_key_password() -> bytes:
    """Refuse encrypted keys instead of letting OpenSSL prompt on the terminal."""
    return b""


def _ssl_reason(exc: ssl.SSLError) -> str:
    """A short reason from an SSLError, without OpenSSL's source locations."""
    return str(exc.reason or exc.strerror or "unknown error").lower().replace("_", " ")


def build_ssl_context(tls: TLSConfig | None) -> ssl.SSLContext | None:
    """Build a server SSLContext from the TLS settings, or None when TLS is not configured."""
    if tls is None:
        return None
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = TLS_VERSIONS[tls.min_version]
    ctx.maximum_version = TLS_VERSIONS[tls.max_version]
    if tls.cipher_suites:
        try:
            ctx.set_ciphers(":".join(tls.cipher_suites))
        except ssl.SSLError as exc:
            raise WebConfigError(f"tls_server_config.cipher_suites: {_ssl_reason(exc)}") from None
    if tls.prefer_server_cipher_suites:
        ctx.options |= ssl.OP_CIPHER_SERVER_PREFERENCE
    else:
        ctx.options &= ~ssl.OP_CIPHER_SERVER_PREFERENCE
    # Parse the certificate on its own first, so a bad cert and a bad key get different messages.
    try:
        ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT).load_verify_locations(cafile=tls.cert_file)
    except (OSError, ssl.SSLError) as exc:
        reason = _ssl_reason(exc) if isinstance(exc, ssl.SSLError) else exc.strerror
        raise WebConfigError(
            f"tls_server_config.cert_file: cannot load a certificate from {tls.cert_file}: {reason}"
        ) from None
    try:
        ctx.load_cert_chain(tls.cert_file, tls.key_file, password=_no_key_password)
    except (OSError, ssl.SSLError) as exc:
        reason = _ssl_reason(exc) if isinstance(exc, ssl.SSLError) else exc.strerror
        raise WebConfigError(
            f"tls_server_config.key_file: cannot load {tls.key_file} (unencrypted PEM key"
            f" matching cert_file expected): {reason}"
        ) from None
    if tls.client_ca_file:
        try:
            ctx.load_verify_locations(cafile=tls.client_ca_file)
        except (OSError, ssl.SSLError) as exc:
            reason = _ssl_reason(exc) if isinstance(exc, ssl.SSLError) else exc.strerror
            raise WebConfigError(
                f"tls_server_config.client_ca_file: cannot load {tls.client_ca_file}: {reason}"
            ) from None
    # RequestClientCert maps to CERT_NONE: the exporter never reads an unverified certificate,
    # so asking for one and ignoring it is the same as not asking.
    ctx.verify_mode = {
        "VerifyClientCertIfGiven": ssl.CERT_OPTIONAL,
        "RequireAndVerifyClientCert": ssl.CERT_REQUIRED,
    }.get(tls.client_auth_type, ssl.CERT_NONE)
    return ctx


class ReloadingSSLContext(ssl.SSLContext):
    """A server context that hands each new connection to the freshest context there is."""

    current: Callable[[], ssl.SSLContext]

    def wrap_bio(
        self,
        incoming: ssl.MemoryBIO,
        outgoing: ssl.MemoryBIO,
        server_side: bool = False,
        server_hostname: str | bytes | None = None,
        session: ssl.SSLSession | None = None,
    ) -> ssl.SSLObject:
        """Wrap the connection with the freshest context, so every setting of it applies."""
        # asyncio calls wrap_bio once per accepted connection; swapping contexts here (rather
        # than in sni_callback) also applies verify mode and protocol versions, which OpenSSL
        # does not take over from a context switched in during the handshake.
        current = self.current()
        return current.wrap_bio(incoming, outgoing, server_side, server_hostname, session)
