"""The one redaction boundary: every text that leaves the process passes a :class:`Redactor`.

A redactor knows the configured secrets (a DSN's password, a password file's content,
``PGPASSWORD``) and replaces each, in every form a text may carry it (as written,
percent-encoded or decoded, escaped for JSON, logfmt, HTML or a Prometheus label), with
``***``. Independently it masks what looks like a password in a DSN it was never told about:
a URL's ``user:password@`` with any number of slashes after the scheme, a bare
``user:password@host`` as a server's message quotes a mistyped DSN, and ``password=...``.

The process has one (:func:`redact`): the command line and the service tell it every
configured secret as they load the settings (:func:`remember`), and it never forgets one (a
line about the old settings may still be on its way after a reload). The exits use it: log
lines, the status page, ``/readyz``, ``/-/reload``, the errors a queue stores, and what the
command line prints. A queue label derived from a database name is redacted where it is
derived (exporter/settings/sources.py). No I/O, and nothing of the exporter is imported here.
"""

from __future__ import annotations

import html
import json
import re
import urllib.parse
from collections.abc import Iterable

REDACTED = "***"

# scheme:[//]user:password@ -- zero to three slashes, as a mistyped DSN may have; the password
# may hold an unencoded '@', so take up to the last '@' before the host part ends.
_URL_USERINFO_RE = re.compile(
    r"(?P<pre>\b[A-Za-z][A-Za-z0-9+.-]*:/{0,3}[^\s:/@\"'<>]*):(?P<pw>[^\s/\"'<>]*)@"
)
# user:password@host without a scheme, as a server quotes what it took for a database name
# (a password already masked is left alone, so a masked URL is not masked again, user and all).
_BARE_USERINFO_RE = re.compile(
    r"(?P<pre>(?:^|(?<=[\s\"'(\[=,;]))[^\s:/@\"'=<>()\[\],;]+)"
    r":(?P<pw>(?:(?!\*\*\*)[^\s/\"'<>])+)@(?=[^\s@])"
)
_KV_PASSWORD_RE = re.compile(
    r"(?P<pre>password\s*=\s*)(?P<pw>'(?:[^'\\]|\\.)*'?|[^\s&]+)", re.IGNORECASE
)
# In a rendered log line: stop at a quote or backslash, so the line's own quoting survives.
_KV_IN_LINE_RE = re.compile(
    r"(?P<pre>password\s*=\s*)(?P<pw>'(?:[^'\\]|\\.)*'?|[^\s&\"\\]+)", re.IGNORECASE
)


def _label_escaped(text: str) -> str:
    """As the Prometheus text format escapes a label value."""
    return text.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def variants(secret: str) -> set[str]:
    """The forms a text may carry the secret in: as given, percent-encoded (each way Python and
    libpq write it) and decoded, and each of those escaped as JSON, logfmt, HTML, a Python
    literal and a Prometheus label value."""
    plain = {
        secret,
        urllib.parse.quote(secret, safe=""),
        urllib.parse.quote(secret),
        urllib.parse.quote_plus(secret),
        urllib.parse.unquote(secret),
        urllib.parse.unquote_plus(secret),
    }
    forms: set[str] = set()
    for text in plain:
        forms.update(
            {
                text,
                json.dumps(text, ensure_ascii=False)[1:-1],
                json.dumps(text)[1:-1],
                html.escape(text),
                html.escape(text, quote=False),
                repr(text)[1:-1],
                _label_escaped(text),
            }
        )
    forms.discard("")
    return forms


def mask_patterns(text: str) -> str:
    """The text with every DSN-shaped password made ``***`` (known secrets aside)."""
    text = _URL_USERINFO_RE.sub(rf"\g<pre>:{REDACTED}@", text)
    text = _BARE_USERINFO_RE.sub(rf"\g<pre>:{REDACTED}@", text)
    return _KV_PASSWORD_RE.sub(rf"\g<pre>{REDACTED}", text)


class Redactor:
    """Replaces known secrets (in all their forms) and DSN-shaped passwords with ``***``."""

    def __init__(self, secrets: Iterable[str] = ()) -> None:
        self.secrets: frozenset[str] = frozenset(s for s in secrets if s)
        forms: set[str] = set()
        for secret in self.secrets:
            forms |= variants(secret)
        # Longest first, so a secret that contains another is replaced whole.
        self._forms = tuple(sorted(forms, key=lambda form: (-len(form), form)))

    def plus(self, secrets: Iterable[str]) -> Redactor:
        """A redactor that knows these secrets too."""
        more = self.secrets | {s for s in secrets if s}
        return self if more == self.secrets else Redactor(more)

    def known(self, text: str) -> str:
        """The text with every known secret, in each of its forms, made ``***``."""
        for form in self._forms:
            if form in text:
                text = text.replace(form, REDACTED)
        return text

    def __call__(self, text: str) -> str:
        """The text with every known secret and every DSN-shaped password made ``***``."""
        return mask_patterns(self.known(text))

    def line(self, text: str) -> str:
        """A second pass over a rendered log line, whose values were redacted one by one."""
        text = self.known(text)
        text = _URL_USERINFO_RE.sub(rf"\g<pre>:{REDACTED}@", text)
        text = _BARE_USERINFO_RE.sub(rf"\g<pre>:{REDACTED}@", text)
        return _KV_IN_LINE_RE.sub(rf"\g<pre>{REDACTED}", text)


_process = Redactor()


def remember(secrets: Iterable[str]) -> None:
    """Teach the process's redactor these secrets too (it never forgets one)."""
    global _process
    _process = _process.plus(secrets)


def current() -> Redactor:
    """The process's redactor, as it is now."""
    return _process


def redact(text: str) -> str:
    """The text as it may leave the process: through the process's redactor."""
    return _process(text)
