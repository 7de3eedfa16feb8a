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


def dsn_target(dsn: str) -> str:
    """``host:port/dbname`` of a URL DSN, for log lines: where it connects, no user, no secret."""
    try:
        split = urllib.parse.urlsplit(dsn)
    except ValueError:
        return "(unparsable DSN)"
    hosts = split.netloc.rpartition("@")[2]
    if not hosts:
        query = dict(urllib.parse.parse_qsl(split.query))
        hosts = query.get("host", "")
        if hosts and query.get("port"):
            hosts += ":" + query["port"]
    return f"{hosts or 'localhost'}/{dsn_database(dsn) or ''}"


SSL_MODES = ("disable", "allow", "prefer", "require", "verify-ca", "verify-full")
_IPV6_HOST_RE = re.compile(r"\[[^\]]+\](?::(?P<port>.*))?")


def _check_port(text: str, where: str) -> None:
    # Never quote the text: in a mistyped DSN the "port" may be a piece of the password.
    if not (text.isascii() and text.isdigit() and 1 <= int(text) <= 65535):
        raise SecretError(f"{where} is not a number from 1 to 65535")


def _check_hosts(hostlist: str, where: str) -> None:
    """Each ``host[:port]`` of a comma-separated list, as asyncpg will split it at connect."""
    several = "," in hostlist
    for number, spec in enumerate(hostlist.split(","), start=1):
        name = (f"host {number}" if several else "the host") + where
        if not spec:
            raise SecretError(f"{name} is empty")
        if "@" in spec:
            # asyncpg splits at the first '@': the rest of the password would be a host name.
            raise SecretError(f"{name} holds an '@'; write '@' in a password as %40")
        if spec.startswith("/"):
            continue  # a Unix socket directory has no port
        if spec.startswith("["):
            match = _IPV6_HOST_RE.fullmatch(spec)
            if match is None:
                raise SecretError(f"{name} is not a valid [IPv6] address")
            port = match["port"]
        else:
            port = spec.partition(":")[2] if ":" in spec else None
        if port is not None:
            _check_port(
                urllib.parse.unquote(port),
                f"the port of {name}" if several or where else "the port",
            )


def check_dsn(dsn: str) -> None:
    """Raise SecretError (never echoing the DSN) unless asyncpg can connect with it as given:
    a postgres URL with numeric ports and a known sslmode."""
    try:
        split = urllib.parse.urlsplit(dsn)
        query = urllib.parse.parse_qs(split.query, strict_parsing=True) if split.query else {}
    except ValueError:
        raise SecretError("is not a valid URL") from None
    if split.scheme not in ("postgres", "postgresql"):
        # asyncpg takes URLs only, so key=value DSNs are refused here rather than at connect.
        raise SecretError(
            "expected a URL such as postgresql://user@host:5432/dbname "
            "(postgres:// or postgresql://; key=value DSNs are not supported)"
        )
    hostlist = split.netloc.partition("@")[2] if "@" in split.netloc else split.netloc
    if hostlist:
        _check_hosts(hostlist, "")
    for port in query.get("port", [])[-1:]:
        for number, part in enumerate(port.split(","), start=1):
            _check_port(part, f"port {number} of ?port=")
    for hosts in query.get("host", [])[-1:]:
        _check_hosts(hosts, " of ?host=")
    for mode in query.get("sslmode", [])[-1:]:
        if mode.replace("_", "-") not in SSL_MODES:
            raise SecretError(f"sslmode must be one of {', '.join(SSL_MODES)}")


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
