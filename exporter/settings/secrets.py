"""Secrets in settings: DSNs parsed strictly, their passwords found and injected from a file.

:func:`check_dsn` refuses a DSN that does not have the shape
``scheme://[user[:password]@]host[:port][/db][?params]``, naming the part that is wrong and never
echoing any of it; :func:`dsn_secrets` finds every password a DSN carries, in a malformed one
too, for the redactor (exporter/redaction.py) that every message leaving the process passes.
"""

from __future__ import annotations

import re
import urllib.parse
from collections.abc import Iterable, Mapping

from exporter.redaction import mask_patterns

SCHEMES = ("postgres", "postgresql")
# The query parameters asyncpg reads a password from: the login's, and the TLS key's.
SECRET_PARAMETERS = ("password", "sslpassword")
# libpq's variable, which asyncpg reads when the DSN has no password.
PASSWORD_ENV = "PGPASSWORD"
ENCODE_HINT = (
    "percent-encode '@', '/', '?', '#', '[', ']' and '%' in a user name or password "
    "(%40, %2F, %3F, %23, %5B, %5D, %25)"
)
# scheme, any slashes, user ':' password '@': a userinfo wherever a mistyped DSN put it.
_LOOSE_USERINFO_RE = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:/*[^:/@]*:(?P<pw>.*)@")
_KV_PASSWORD_RE = re.compile(
    r"\b(?:ssl)?password\s*=\s*(?:'(?P<quoted>(?:[^'\\]|\\.)*)'?|(?P<bare>[^\s&]+))", re.IGNORECASE
)
_CONTROL_RE = re.compile(r"[\x00-\x1f\x7f]")


class SecretError(ValueError):
    """A DSN or password file is unusable; the message never contains the secret."""


def dsn_secrets(dsn: str) -> set[str]:
    """Every password the DSN carries, as written and decoded: the userinfo's, a ``password``
    or ``sslpassword`` parameter's, a ``password=`` of a key=value string; found in a malformed
    DSN too (a missing slash, an unencoded '@'), so the redactor knows them whatever the shape."""
    found: set[str] = set()
    loose = _LOOSE_USERINFO_RE.match(dsn)
    if loose is not None:
        # Up to the last '@' (the pattern is greedy): a password with an unencoded '@' whole,
        # never a piece of it short enough to mask unrelated text.
        found.add(loose["pw"])
    for match in _KV_PASSWORD_RE.finditer(dsn):
        value = match["quoted"] if match["quoted"] is not None else match["bare"]
        found.update({value, value.replace("\\'", "'")})
    try:
        split = urllib.parse.urlsplit(dsn)
        userinfo, at, _ = split.netloc.rpartition("@")
        if at and ":" in userinfo:
            found.add(userinfo.partition(":")[2])
        for name, value in urllib.parse.parse_qsl(split.query, keep_blank_values=False):
            if name in SECRET_PARAMETERS:
                found.add(value)
    except ValueError:
        pass
    decoded = {urllib.parse.unquote(s) for s in found}
    return {s for s in found | decoded if s}


def source_secrets(environ: Mapping[str, str], values: Iterable[str]) -> set[str]:
    """The secrets of the raw sources, before any is parsed: ``PGPASSWORD``, and the passwords
    of the DSN-shaped ``values`` (the DSN variables and flags as given)."""
    found = {environ[PASSWORD_ENV]} if environ.get(PASSWORD_ENV) else set()
    for value in values:
        found |= dsn_secrets(value)
    return found


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
        return mask_patterns(dsn)
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


def _check_shape(dsn: str) -> urllib.parse.SplitResult:
    """The DSN split as a URL of the shape ``scheme://[user[:password]@]host[:port][/db][?params]``;
    SecretError naming the part that breaks it. A mistyped DSN would otherwise be read as
    something else (after one slash, all of it as a database name), and a server's message
    naming that database would carry the password."""
    if _CONTROL_RE.search(dsn):
        raise SecretError("holds a control character (a newline or tab copied along with it?)")
    if dsn != dsn.strip():
        raise SecretError("begins or ends with a space")
    scheme, colon, rest = dsn.partition(":")
    if not colon or scheme.lower() not in SCHEMES:
        # asyncpg takes URLs only, so key=value DSNs are refused here rather than at connect.
        raise SecretError(
            "expected a URL such as postgresql://user@host:5432/dbname "
            "(postgres:// or postgresql://; key=value DSNs such as host=... dbname=... are not "
            "supported: write them as a URL)"
        )
    if not rest.startswith("//"):
        raise SecretError(
            "the scheme must be followed by '//' (postgresql://user@host:5432/dbname); without "
            "it the rest would be read as a database name"
        )
    try:
        split = urllib.parse.urlsplit(dsn)
    except ValueError:  # a '[' or ']' outside an IPv6 address
        raise SecretError(f"the host part is not valid; {ENCODE_HINT}") from None
    if "#" in dsn:
        raise SecretError(f"holds a '#', which would end the URL; {ENCODE_HINT}")
    if "@" in split.query and "@" not in split.netloc:
        raise SecretError(
            f"the parameters after '?' hold an '@' while the host part has none: a '?' in the "
            f"password ends the host part early; {ENCODE_HINT} (in ?user= too)"
        )
    database = split.path[1:]
    if "@" in database:
        raise SecretError(
            f"the database name holds an '@': a '/' or '?' in the password ends the host part "
            f"early; {ENCODE_HINT}"
        )
    if "/" in database:
        raise SecretError(
            f"the database name holds a '/': one slash too many, or a '/' in the password; "
            f"{ENCODE_HINT}"
        )
    return split


def check_dsn(dsn: str) -> None:
    """Raise SecretError (never echoing any of the DSN) unless asyncpg reads it as the user
    meant it: a postgres URL of the strict shape, numeric ports, a known sslmode."""
    split = _check_shape(dsn)
    try:
        query = urllib.parse.parse_qs(split.query, strict_parsing=True) if split.query else {}
    except ValueError:
        hint = f"; {ENCODE_HINT}" if "@" in split.query else ""
        raise SecretError(
            f"the parameters after '?' are not name=value pairs joined by '&'{hint}"
        ) from None
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
