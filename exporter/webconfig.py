"""The Prometheus web-config file (``--web.config.file``): TLS, basic auth, headers, HTTP limits.

It reads the keys of prometheus/exporter-toolkit's ``web-configuration.md`` so one file serves
our exporter and the Go ones. :class:`WebConfigWatcher` re-reads the file and the certificate
files when they change, so certificates rotate without a restart; a broken replacement is
logged and the last good configuration stays in force.

Exceptions: :class:`WebConfigError` (the file is unreadable, not YAML, or a key is unknown or
malformed; the message names the key and never contains a password or hash).
"""

from __future__ import annotations

import asyncio
import binascii
import hashlib
import hmac
import logging
import os
import re
import secrets
import ssl
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import bcrypt
import yaml
from aiohttp import web
from aiohttp.typedefs import Handler, Middleware

log = logging.getLogger(__name__)

REALM = "jobqueue-exporter"
ALLOWED_METHODS = ("GET", "HEAD")

# 8 KiB matches Go's net/http per-line expectations closely enough and is far above what a
# Prometheus scrape sends; longer request lines or header fields are refused by aiohttp.
MAX_LINE_SIZE = 8192
MAX_FIELD_SIZE = 8192
MAX_HEADERS = 64

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
# The exporter-toolkit's header allow-list, and the values it accepts where it checks them.
ALLOWED_HEADERS = (
    "Content-Security-Policy",
    "X-Frame-Options",
    "X-Content-Type-Options",
    "X-XSS-Protection",
    "Strict-Transport-Security",
)
_HEADER_VALUES = {"X-Frame-Options": ("deny", "sameorigin"), "X-Content-Type-Options": ("nosniff",)}

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
_BCRYPT_HASH = re.compile(r"\$2[aby]\$(\d\d)\$[./A-Za-z0-9]{53}")
_BCRYPT_MAX_PASSWORD = 72
_PLAIN_KEY = re.compile(r"[A-Za-z0-9_.@+-]{1,100}")


class WebConfigError(Exception):
    """The web-config file is unreadable or invalid; the message names the offending key."""


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


@dataclass(frozen=True)
class WebConfig:
    """The whole web-config file; an empty file means plain HTTP without authentication."""

    tls: TLSConfig | None = None
    # repr=False so that logging a WebConfig can never print a hash.
    basic_auth_users: Mapping[str, str] = field(default_factory=dict, repr=False)
    headers: Mapping[str, str] = field(default_factory=dict)
    http2: bool = True


class _UniqueKeyLoader(yaml.SafeLoader):
    """A SafeLoader that refuses duplicate mapping keys instead of keeping the last one."""


def _construct_unique_mapping(loader: _UniqueKeyLoader, node: yaml.MappingNode) -> dict[Any, Any]:
    """Build a mapping, raising on a key that appears twice."""
    seen: set[Any] = set()
    for key_node, _ in node.value:
        key = loader.construct_object(key_node)
        if isinstance(key, str | int | float | bool) and key in seen:
            raise yaml.constructor.ConstructorError(
                None, None, f"duplicate key {key!r}", key_node.start_mark
            )
        seen.add(key)
    return loader.construct_mapping(node)


_UniqueKeyLoader.add_constructor(
    yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG,
    _construct_unique_mapping,
)


def _parse_yaml(path: str, text: str) -> Any:
    """Parse YAML, reporting only the position and problem so no line (or hash) is echoed."""
    try:
        return yaml.load(text, Loader=_UniqueKeyLoader)  # a SafeLoader subclass
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark
        where = f"line {mark.line + 1}, column {mark.column + 1}" if mark else "unknown position"
        raise WebConfigError(f"{path}: not valid YAML ({where}: {exc.problem})") from None
    except yaml.YAMLError:
        raise WebConfigError(f"{path}: not valid YAML") from None


def _shown(key: str) -> str:
    """A key as it may appear in a message: quoted when empty or odd, so logs stay one line."""
    return key if _PLAIN_KEY.fullmatch(key) else repr(key)


def _mapping(value: Any, key: str) -> dict[str, Any]:
    """Check that a value is a mapping with string keys (None counts as empty)."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise WebConfigError(f"{key}: must be a mapping, got {type(value).__name__}")
    for k in value:
        if not isinstance(k, str):
            raise WebConfigError(f"{key}: keys must be strings, got {type(k).__name__}")
    return value


def _string(value: Any, key: str) -> str:
    """Check that a value is a non-empty string."""
    if not isinstance(value, str) or not value:
        raise WebConfigError(f"{key}: must be a non-empty string")
    return value


def _choice(value: Any, key: str, choices: tuple[str, ...]) -> str:
    """Check that a value is one of the allowed strings."""
    if value not in choices:
        raise WebConfigError(f"{key}: must be one of {', '.join(choices)}")
    return str(value)


def _readable_file(path: str, key: str, base_dir: str) -> str:
    """Resolve a path relative to the config file and check that it can be read."""
    resolved = os.path.join(base_dir, path)
    try:
        with open(resolved, "rb"):
            pass
    except OSError as exc:
        raise WebConfigError(f"{key}: cannot read {resolved}: {exc.strerror}") from None
    return resolved


def _parse_tls(raw: Any, base_dir: str) -> TLSConfig | None:
    """Validate ``tls_server_config``."""
    section = _mapping(raw, "tls_server_config")
    if not section:
        return None
    for key in section:
        if key in _UNSUPPORTED_TLS_KEYS:
            raise WebConfigError(f"tls_server_config.{key}: {_UNSUPPORTED_TLS_KEYS[key]}")
        if key not in _TLS_KEYS:
            raise WebConfigError(f"tls_server_config.{_shown(key)}: unknown key")
    if "cert_file" not in section:
        raise WebConfigError("tls_server_config.cert_file: required when TLS is configured")
    if "key_file" not in section:
        raise WebConfigError("tls_server_config.key_file: required with cert_file")
    cert_file = _readable_file(
        _string(section["cert_file"], "tls_server_config.cert_file"),
        "tls_server_config.cert_file",
        base_dir,
    )
    key_file = _readable_file(
        _string(section["key_file"], "tls_server_config.key_file"),
        "tls_server_config.key_file",
        base_dir,
    )
    client_ca_file = None
    if section.get("client_ca_file") is not None:
        client_ca_file = _readable_file(
            _string(section["client_ca_file"], "tls_server_config.client_ca_file"),
            "tls_server_config.client_ca_file",
            base_dir,
        )
    auth_type = _choice(
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
    min_version = _choice(
        section.get("min_version", "TLS12"), "tls_server_config.min_version", versions
    )
    max_version = _choice(
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


def _parse_users(raw: Any) -> dict[str, str]:
    """Validate ``basic_auth_users``: each value must be a bcrypt hash."""
    users = _mapping(raw, "basic_auth_users")
    parsed = {}
    for user, hashed in users.items():
        key = f"basic_auth_users.{_shown(user)}"
        if not user or ":" in user:
            raise WebConfigError(f"{key}: user names must be non-empty and contain no colon")
        match = _BCRYPT_HASH.fullmatch(hashed) if isinstance(hashed, str) else None
        if match is None:
            raise WebConfigError(f"{key}: not a bcrypt hash (make one with htpasswd -nBC 10)")
        if not 4 <= int(match.group(1)) <= 31:
            raise WebConfigError(f"{key}: bcrypt cost must be between 4 and 31")
        parsed[user] = hashed
    return parsed


def _parse_http(raw: Any) -> tuple[dict[str, str], bool]:
    """Validate ``http_server_config``: the allowed response headers and the http2 switch."""
    section = _mapping(raw, "http_server_config")
    for key in section:
        if key not in ("headers", "http2"):
            raise WebConfigError(f"http_server_config.{_shown(key)}: unknown key")
    http2 = section.get("http2", True)
    if not isinstance(http2, bool):
        raise WebConfigError("http_server_config.http2: must be true or false")
    canonical = {name.lower(): name for name in ALLOWED_HEADERS}
    headers = {}
    for name, value in _mapping(section.get("headers"), "http_server_config.headers").items():
        key = f"http_server_config.headers.{_shown(name)}"
        if name.lower() not in canonical:
            raise WebConfigError(
                f"{key}: header not allowed; use one of {', '.join(ALLOWED_HEADERS)}"
            )
        name = canonical[name.lower()]
        value = _string(value, key)
        if "\r" in value or "\n" in value:
            raise WebConfigError(f"{key}: must not contain line breaks")
        if name in _HEADER_VALUES and value.lower() not in _HEADER_VALUES[name]:
            raise WebConfigError(f"{key}: must be one of {', '.join(_HEADER_VALUES[name])}")
        headers[name] = value
    return headers, http2


def load_web_config(path: str) -> WebConfig:
    """Read and validate a web-config file, including that its certificate files load."""
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except OSError as exc:
        raise WebConfigError(f"{path}: cannot read: {exc.strerror}") from None
    except UnicodeDecodeError:
        raise WebConfigError(f"{path}: not UTF-8 text") from None
    document = _parse_yaml(path, text)
    top = _mapping(document, "web config")
    for key in top:
        if key == "rate_limit":
            raise WebConfigError("rate_limit: not supported; rate-limit in a reverse proxy")
        if key not in ("tls_server_config", "http_server_config", "basic_auth_users"):
            raise WebConfigError(f"{_shown(key)}: unknown key")
    base_dir = os.path.dirname(os.path.abspath(path))
    headers, http2 = _parse_http(top.get("http_server_config"))
    config = WebConfig(
        tls=_parse_tls(top.get("tls_server_config"), base_dir),
        basic_auth_users=_parse_users(top.get("basic_auth_users")),
        headers=headers,
        http2=http2,
    )
    build_ssl_context(config)  # so broken certificates fail at start-up, naming the key
    return config


def _no_key_password() -> bytes:
    """Refuse encrypted keys instead of letting OpenSSL prompt on the terminal."""
    return b""


def _ssl_reason(exc: ssl.SSLError) -> str:
    """A short reason from an SSLError, without OpenSSL's source locations."""
    return str(exc.reason or exc.strerror or "unknown error").lower().replace("_", " ")


def build_ssl_context(config: WebConfig) -> ssl.SSLContext | None:
    """Build a server SSLContext from the TLS settings, or None when TLS is not configured."""
    tls = config.tls
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


class Authenticator:
    """Checks basic-auth credentials against bcrypt hashes, caching successful checks."""

    def __init__(self, users: Mapping[str, str]) -> None:
        """Prepare for the given users (user name -> bcrypt hash)."""
        self._users = {user: hashed.encode() for user, hashed in users.items()}
        # Unknown users are checked against the costliest real hash so they take as long as
        # known ones; the result is ignored.
        self._dummy = max(self._users.values(), key=lambda h: int(h[4:6]), default=b"")
        # A per-process key, so the cache holds nothing an attacker could test offline.
        self._cache_key = secrets.token_bytes(32)
        self._verified: set[bytes] = set()

    @property
    def enabled(self) -> bool:
        """True when at least one user is configured."""
        return bool(self._users)

    def _cache_entry(self, user: str, password: bytes) -> bytes:
        """The cache key for a pair; user names contain no colon, so the join is unambiguous."""
        return hmac.new(self._cache_key, user.encode() + b":" + password, hashlib.sha256).digest()

    def is_cached(self, user: str, password: bytes) -> bool:
        """True when this exact pair was verified before (no bcrypt)."""
        return self._cache_entry(user, password) in self._verified

    def verify(self, user: str, password: bytes) -> bool:
        """Run exactly one bcrypt check, whether or not the user exists (blocking)."""
        hashed = self._users.get(user)
        target = hashed if hashed is not None else self._dummy
        if len(password) > _BCRYPT_MAX_PASSWORD:
            # bcrypt ignores bytes past 72; refuse rather than accept a truncated match.
            password, hashed = password[:_BCRYPT_MAX_PASSWORD], None
        try:
            ok = bcrypt.checkpw(password, target)
        except ValueError:
            ok = False
        return bool(ok) and hashed is not None

    def remember(self, user: str, password: bytes) -> None:
        """Cache a successful verification; bounded because only correct pairs get here."""
        if len(self._verified) < 1024:
            self._verified.add(self._cache_entry(user, password))


_FileSignature = tuple[str, int, int, int, int] | tuple[str, str]


def _signature(paths: tuple[str, ...]) -> tuple[_FileSignature, ...]:
    """What identifies the current content of each file without reading it."""
    result: list[_FileSignature] = []
    for path in paths:
        try:
            st = os.stat(path)
        except OSError as exc:
            result.append((path, str(exc.errno)))
        else:
            result.append((path, st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns))
    return tuple(result)


def _watched_files(path: str | None, config: WebConfig) -> tuple[str, ...]:
    """The config file and every file it names."""
    files = [path] if path is not None else []
    if config.tls is not None:
        files += [config.tls.cert_file, config.tls.key_file]
        if config.tls.client_ca_file:
            files.append(config.tls.client_ca_file)
    return tuple(files)


class _ReloadingSSLContext(ssl.SSLContext):
    """A server context that hands each new connection to the watcher's current context."""

    watcher: WebConfigWatcher

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
        current = self.watcher.current_ssl_context()
        return current.wrap_bio(incoming, outgoing, server_side, server_hostname, session)


class WebConfigWatcher:
    """Holds the current web config and re-reads it (and its certificates) when files change."""

    def __init__(
        self,
        path: str | None,
        *,
        check_interval: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
        max_concurrent_bcrypt: int = 4,
    ) -> None:
        """Load the file now (raising WebConfigError on a bad one); None means no file at all."""
        self._path = path
        self._check_interval = check_interval
        self._clock = clock
        self._config = load_web_config(path) if path is not None else WebConfig()
        self._ssl = build_ssl_context(self._config)
        self._authenticator = Authenticator(self._config.basic_auth_users)
        self._signature = _signature(_watched_files(path, self._config))
        self._next_check = clock() + check_interval
        self._last_error: str | None = None
        # Bounds the CPU a flood of wrong passwords can take; cached pairs skip the queue.
        self._bcrypt_slots = asyncio.Semaphore(max_concurrent_bcrypt)
        self._listener_ssl: _ReloadingSSLContext | None = None

    @property
    def path(self) -> str | None:
        """The web-config file being watched."""
        return self._path

    @property
    def config(self) -> WebConfig:
        """The current (last good) configuration, after checking the files for changes."""
        self.refresh()
        return self._config

    @property
    def authenticator(self) -> Authenticator:
        """The current authenticator, after checking the files for changes."""
        self.refresh()
        return self._authenticator

    def refresh(self, *, force: bool = False) -> bool:
        """Reload if a watched file changed (at most once per check interval); True on reload."""
        now = self._clock()
        if self._path is None or (not force and now < self._next_check):
            return False
        self._next_check = now + self._check_interval
        signature = _signature(_watched_files(self._path, self._config))
        if signature == self._signature and self._last_error is None:
            return False
        try:
            config = load_web_config(self._path)
            if (config.tls is None) != (self._config.tls is None):
                raise WebConfigError("tls_server_config: turning TLS on or off needs a restart")
            ssl_context = build_ssl_context(config)
        except WebConfigError as exc:
            message = str(exc)
            if message != self._last_error:
                log.error("web config reload failed, keeping the last good one: %s", message)
                self._last_error = message
            return False
        self._config = config
        self._ssl = ssl_context
        if self._authenticator.enabled or config.basic_auth_users:
            self._authenticator = Authenticator(config.basic_auth_users)
        self._signature = _signature(_watched_files(self._path, config))
        self._last_error = None
        log.info("web config reloaded from %s", self._path)
        return True

    def current_ssl_context(self) -> ssl.SSLContext:
        """The freshest server context; only valid when TLS is configured."""
        self.refresh()
        if self._ssl is None:
            raise RuntimeError("TLS is not configured")
        return self._ssl

    def ssl_context(self) -> ssl.SSLContext | None:
        """The context to give the listener (TCPSite ssl_context), or None for plain HTTP."""
        if self._ssl is None:
            return None
        if self._listener_ssl is None:
            self._listener_ssl = _ReloadingSSLContext(ssl.PROTOCOL_TLS_SERVER)
            self._listener_ssl.watcher = self
        return self._listener_ssl

    async def check_credentials(self, user: str, password: bytes) -> bool:
        """True when the pair is valid; bcrypt runs in a thread so the event loop keeps serving."""
        authenticator = self.authenticator
        if authenticator.is_cached(user, password):
            return True
        async with self._bcrypt_slots:
            ok = await asyncio.to_thread(authenticator.verify, user, password)
        if ok:
            authenticator.remember(user, password)
        return ok


def server_limits() -> dict[str, Any]:
    """Keyword arguments for ``web.AppRunner`` that make aiohttp refuse oversized headers."""
    return {
        "max_line_size": MAX_LINE_SIZE,
        "max_field_size": MAX_FIELD_SIZE,
        "max_headers": MAX_HEADERS,
    }


def _parse_basic_auth(header: str) -> tuple[str, bytes] | None:
    """Split an ``Authorization: Basic`` header into user and password, or None if malformed."""
    scheme, _, encoded = header.strip().partition(" ")
    if scheme.lower() != "basic":
        return None
    try:
        decoded = binascii.a2b_base64(encoded.strip().encode("ascii"), strict_mode=True)
    except (binascii.Error, UnicodeEncodeError):
        return None
    user, colon, password = decoded.partition(b":")
    if not colon:
        return None
    try:
        return user.decode("utf-8"), password
    except UnicodeDecodeError:
        return None


def _unauthorized() -> web.Response:
    """A 401 that tells the client to use basic auth."""
    return web.Response(
        status=401,
        text="Unauthorized\n",
        headers={"WWW-Authenticate": f'Basic realm="{REALM}"'},
    )


def auth_middleware(
    watcher: WebConfigWatcher, exempt: tuple[str, ...] = ("/healthz",)
) -> Middleware:
    """Require basic auth on every route but the exempt ones, when users are configured."""

    @web.middleware
    async def middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
        if not watcher.authenticator.enabled:
            return await handler(request)
        # Compare against the route the router matched, not the raw path, so encodings of
        # "/healthz" cannot reach another handler without auth or vice versa.
        resource = request.match_info.route.resource
        if resource is not None and resource.canonical in exempt:
            return await handler(request)
        credentials = _parse_basic_auth(request.headers.get("Authorization", ""))
        if credentials is None or not await watcher.check_credentials(*credentials):
            return _unauthorized()
        return await handler(request)

    return middleware


def headers_middleware(watcher: WebConfigWatcher) -> Middleware:
    """Set the configured ``http_server_config.headers`` on every response, errors included."""

    @web.middleware
    async def middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
        headers = watcher.config.headers
        try:
            response = await handler(request)
        except web.HTTPException as exc:
            exc.headers.update(headers)
            raise
        if not response.prepared:
            response.headers.update(headers)
        return response

    return middleware


def method_middleware(watcher: WebConfigWatcher) -> Middleware:
    """Serve only GET and HEAD without a body; everything else is refused before auth runs."""
    del watcher  # same factory signature as the others; nothing here is configurable

    @web.middleware
    async def middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
        if request.method not in ALLOWED_METHODS:
            response = web.Response(
                status=405,
                text="Method Not Allowed\n",
                headers={"Allow": ", ".join(ALLOWED_METHODS)},
            )
            response.force_close()
            return response
        chunked = "chunked" in request.headers.get("Transfer-Encoding", "").lower()
        if (request.content_length or 0) > 0 or chunked or request.body_exists:
            # force_close: don't spend time reading a body nobody asked for.
            response = web.Response(status=413, text="Request body not allowed\n")
            response.force_close()
            return response
        return await handler(request)

    return middleware


def middlewares(
    watcher: WebConfigWatcher, exempt: tuple[str, ...] = ("/healthz",)
) -> list[Middleware]:
    """All web-config middlewares, outermost first: headers, method/body check, auth."""
    return [
        headers_middleware(watcher),
        method_middleware(watcher),
        auth_middleware(watcher, exempt),
    ]
