"""The forms a secret may take on an output surface, for the tests that search every surface.

A test's password carries :data:`MARKER`, which nothing the exporter prints contains, so any
form of it found on a surface is a leak and never a coincidence.
"""

from __future__ import annotations

import html
import json
import urllib.parse
from collections.abc import Callable

MARKER = "Zq"


# How a text may carry a secret: encoded for a URL or decoded from one, then escaped for the
# surface (a JSON or logfmt value, HTML, a Python literal); each pair is one form to look for.
ENCODINGS: tuple[Callable[[str], str], ...] = (
    lambda text: text,
    lambda text: urllib.parse.quote(text, safe=""),
    urllib.parse.quote,
    urllib.parse.quote_plus,
    urllib.parse.unquote,
    urllib.parse.unquote_plus,
)
ESCAPES: tuple[Callable[[str], str], ...] = (
    lambda text: text,
    lambda text: json.dumps(text)[1:-1],
    lambda text: json.dumps(text, ensure_ascii=False)[1:-1],
    html.escape,
    lambda text: repr(text)[1:-1],
)


def forms(secret: str) -> set[str]:
    """The byte sequences that would give the secret away: every encoding, every escape."""
    found = {escape(encode(secret)) for encode in ENCODINGS for escape in ESCAPES}
    return {form for form in found if MARKER in form}


def leaks(secrets: tuple[str, ...], surfaces: dict[str, str]) -> list[str]:
    """Each surface that carries a form of one of the secrets, and which form."""
    return [
        f"{name}: {form!r}"
        for name, text in surfaces.items()
        for secret in secrets
        for form in forms(secret)
        if form in text
    ]
