"""Secrets in settings: DSN passwords found, injected from a file, and redacted from any text.

Every message the settings produce goes through :func:`redact_dsn`, so a DSN pasted into the
wrong setting, a YAML error that quotes a line, or ``repr(settings)`` never shows a password.
"""

from __future__ import annotations

import re
import urllib.parse

# scheme://user:password@ -- the password may hold unencoded '@', so take up to the last '@'
# before the host part begins (a '/' or whitespace).
_URL_USERINFO_RE = re.compile(r"(?P<pre>[A-Za-z][A-Za-z0-9+.-]*://[^\s:/@]*):(?P<pw>[^\s/]*)@")
_KV_PASSWORD_RE = re.compile(
    r"(?P<pre>password\s*=\s*)(?P<pw>'(?:[^'\\]|\\.)*'?|[^\s&]+)", re.IGNORECASE
)


class SecretError(ValueError):
    """A DSN or password file is unusable; the message never contains the secret."""


def redact_dsn(text: str) -> str:
    """The text with every URL userinfo password and ``password=...`` made ``***``."""
    return _KV_PASSWORD_RE.sub(r"\g<pre>***", redact_dsn_userinfo(text))


def redact_dsn_userinfo(text: str) -> str:
    """The text with the password of every ``scheme://user:password@`` made ``***``."""
    return _URL_USERINFO_RE.sub(r"\g<pre>:***@", text)


def dsn_password(dsn: str) -> str | None:
    """The decoded password in a URL DSN (userinfo or ``?password=``), or None."""
    try:
        split = urllib.parse.urlsplit(dsn)
    except ValueError:
        return None
    userinfo, at, _ = split.netloc.rpartition("@")
    if at and ":" in userinfo:
        return urllib.parse.unquote(userinfo.partition(":")[2])
    for name, value in urllib.parse.parse_qsl(split.query):
        if name == "password":
            return value
    return None


def dsn_database(dsn: str) -> str | None:
    """The database a URL DSN names (its path, or else its user, as libpq defaults), or None."""
    try:
        split = urllib.parse.urlsplit(dsn)
    except ValueError:
        return None
    name = urllib.parse.unquote(split.path.lstrip("/"))
    if not name:
        for key, value in urllib.parse.parse_qsl(split.query):
            if key == "dbname":
                name = value
    if not name:
        userinfo, at, _ = split.netloc.rpartition("@")
        name = urllib.parse.unquote(userinfo.partition(":")[0]) if at else ""
    return name or None


def dsn_without_password(dsn: str) -> str:
    """The DSN with its password removed (userinfo and ``?password=``): what it connects to."""
    try:
        split = urllib.parse.urlsplit(dsn)
    except ValueError:
        return redact_dsn(dsn)
    userinfo, at, hostinfo = split.netloc.rpartition("@")
    netloc = f"{userinfo.partition(':')[0]}@{hostinfo}" if at else split.netloc
    query = urllib.parse.urlencode(
        [(k, v) for k, v in urllib.parse.parse_qsl(split.query) if k != "password"]
    )
    return urllib.parse.urlunsplit(split._replace(netloc=netloc, query=query))


def check_dsn(dsn: str) -> None:
    """Raise SecretError (never echoing the DSN) unless it is a postgres URL asyncpg can use."""
    try:
        split = urllib.parse.urlsplit(dsn)
    except ValueError:
        raise SecretError("is not a valid URL") from None
    if split.scheme not in ("postgres", "postgresql"):
        # asyncpg takes URLs only, so key=value DSNs are refused here rather than at connect.
        raise SecretError(
            "expected a URL such as postgresql://user@host:5432/dbname "
            "(postgres:// or postgresql://; key=value DSNs are not supported)"
        )


def inject_password(dsn: str, password: str) -> str:
    """Put the password into the URL DSN's userinfo, percent-encoded."""
    if dsn_password(dsn) is not None:
        raise SecretError(
            "the DSN already has a password; remove it from the DSN or drop the password file"
        )
    split = urllib.parse.urlsplit(dsn)
    userinfo, at, hostinfo = split.netloc.rpartition("@")
    if not at:
        userinfo, hostinfo = "", split.netloc
    netloc = f"{userinfo}:{urllib.parse.quote(password, safe='')}@{hostinfo}"
    return urllib.parse.urlunsplit(split._replace(netloc=netloc))


def read_text_file(path: str) -> str:
    """A UTF-8 text file's content; SecretError says why not without quoting the file."""
    try:
        with open(path, encoding="utf-8") as handle:
            return handle.read()
    except UnicodeDecodeError:
        raise SecretError("not a UTF-8 text file") from None
    except OSError as exc:
        raise SecretError(f"cannot read: {exc.strerror or exc}") from None
    except ValueError:  # a NUL byte in the path: the OS cannot even look for it
        raise SecretError("not a usable file name") from None


def read_password_file(path: str) -> str:
    """The password a file holds (one trailing newline stripped); SecretError names the path."""
    try:
        content = read_text_file(path)
    except SecretError as exc:
        raise SecretError(f"{exc} ({path!r})") from None
    password = content.rstrip("\r\n")
    if not password:
        raise SecretError(f"{path} is empty")
    return password
