"""The Prometheus web-config file (``--web.config.file``) in exporter-toolkit's format.

One file serves our exporter and the Go ones: ``tls_server_config`` (see :mod:`exporter.web.tls`),
``basic_auth_users`` (bcrypt) and ``http_server_config`` (headers, http2). Unknown keys are
errors that name the key; no message quotes a hash or a password.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import yaml

from exporter.web.tls import TLSConfig, build_ssl_context, parse_tls
from exporter.web.validate import WebConfigError, mapping, shown, string

# The exporter-toolkit's header allow-list, and the values it accepts where it checks them.
ALLOWED_HEADERS = (
    "Content-Security-Policy",
    "X-Frame-Options",
    "X-Content-Type-Options",
    "X-XSS-Protection",
    "Strict-Transport-Security",
)
_HEADER_VALUES = {"X-Frame-Options": ("deny", "sameorigin"), "X-Content-Type-Options": ("nosniff",)}

_BCRYPT_HASH = re.compile(r"\$2[aby]\$(\d\d)\$[./A-Za-z0-9]{53}")


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


def _parse_users(raw: Any) -> dict[str, str]:
    """Validate ``basic_auth_users``: each value must be a bcrypt hash."""
    users = mapping(raw, "basic_auth_users")
    parsed = {}
    for user, hashed in users.items():
        key = f"basic_auth_users.{shown(user)}"
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
    section = mapping(raw, "http_server_config")
    for key in section:
        if key not in ("headers", "http2"):
            raise WebConfigError(f"http_server_config.{shown(key)}: unknown key")
    http2 = section.get("http2", True)
    if not isinstance(http2, bool):
        raise WebConfigError("http_server_config.http2: must be true or false")
    canonical = {name.lower(): name for name in ALLOWED_HEADERS}
    headers = {}
    for name, value in mapping(section.get("headers"), "http_server_config.headers").items():
        key = f"http_server_config.headers.{shown(name)}"
        if name.lower() not in canonical:
            raise WebConfigError(
                f"{key}: header not allowed; use one of {', '.join(ALLOWED_HEADERS)}"
            )
        name = canonical[name.lower()]
        value = string(value, key)
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
    top = mapping(document, "web config")
    for key in top:
        if key == "rate_limit":
            raise WebConfigError("rate_limit: not supported; rate-limit in a reverse proxy")
        if key not in ("tls_server_config", "http_server_config", "basic_auth_users"):
            raise WebConfigError(f"{shown(key)}: unknown key")
    base_dir = os.path.dirname(os.path.abspath(path))
    headers, http2 = _parse_http(top.get("http_server_config"))
    config = WebConfig(
        tls=parse_tls(top.get("tls_server_config"), base_dir),
        basic_auth_users=_parse_users(top.get("basic_auth_users")),
        headers=headers,
        http2=http2,
    )
    build_ssl_context(config.tls)  # so broken certificates fail at start-up, naming the key
    return config
