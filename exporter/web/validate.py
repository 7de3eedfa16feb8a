"""Checks shared by the parsers of the web-config file, and the one error they raise.

Messages name the key and never quote a value that could be a password hash.
"""

from __future__ import annotations

import os
import re
from typing import Any

_PLAIN_KEY = re.compile(r"[A-Za-z0-9_.@+-]{1,100}")


class WebConfigError(Exception):
    """The web-config file is unreadable or invalid; the message names the offending key."""


def shown(key: str) -> str:
    """A key as it may appear in a message: quoted when empty or odd, so logs stay one line."""
    return key if _PLAIN_KEY.fullmatch(key) else repr(key)


def mapping(value: Any, key: str) -> dict[str, Any]:
    """Check that a value is a mapping with string keys (None counts as empty)."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise WebConfigError(f"{key}: must be a mapping, got {type(value).__name__}")
    for k in value:
        if not isinstance(k, str):
            raise WebConfigError(f"{key}: keys must be strings, got {type(k).__name__}")
    return value


def string(value: Any, key: str) -> str:
    """Check that a value is a non-empty string."""
    if not isinstance(value, str) or not value:
        raise WebConfigError(f"{key}: must be a non-empty string")
    return value


def choice(value: Any, key: str, choices: tuple[str, ...]) -> str:
    """Check that a value is one of the allowed strings."""
    if value not in choices:
        raise WebConfigError(f"{key}: must be one of {', '.join(choices)}")
    return str(value)


def readable_file(path: str, key: str, base_dir: str) -> str:
    """Resolve a path relative to the config file and check that it can be read."""
    resolved = os.path.join(base_dir, path)
    try:
        with open(resolved, "rb"):
            pass
    except OSError as exc:
        raise WebConfigError(f"{key}: cannot read {resolved}: {exc.strerror}") from None
    return resolved
