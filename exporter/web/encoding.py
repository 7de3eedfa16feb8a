"""Compressed /metrics: every coding made once per rendering, and the one each scraper accepts.

Prometheus asks for gzip on every scrape (``Accept-Encoding: gzip``); the text exposition
shrinks about tenfold, for about a millisecond of zlib once per rendering rather than once per
scrape. zstd is offered too where Python has it: the standard library's ``compression.zstd``
from 3.14, ``backports.zstd`` (the same module, ``pip install 'jobqueue-exporter[zstd]'``)
before. It is smaller still for a tenth of gzip's CPU, but Prometheus does not ask for it
today, so the exporter does not depend on it.
"""

from __future__ import annotations

import sys
import zlib
from collections.abc import Callable, Mapping
from functools import partial

zstd_compress: Callable[..., bytes] | None
try:
    if sys.version_info >= (3, 14):
        from compression.zstd import compress as zstd_compress
    else:
        from backports.zstd import compress as zstd_compress
except ImportError:  # no zstd here: gzip and identity only
    zstd_compress = None

IDENTITY = "identity"
GZIP = "gzip"
ZSTD = "zstd"
# zlib's default level; 9 costs four times the CPU for 10 % fewer bytes.
GZIP_LEVEL = 6
ZSTD_LEVEL = 3
# When a scraper accepts several codings equally, the smallest body wins.
PREFERENCE = (ZSTD, GZIP, IDENTITY)
_ALIASES = {"x-gzip": GZIP}


def _gzip(body: bytes) -> bytes:
    # mtime 0 (wbits 31 writes no timestamp): equal bodies give equal bytes.
    compressor = zlib.compressobj(GZIP_LEVEL, zlib.DEFLATED, 31)
    return compressor.compress(body) + compressor.flush()


def _compressors() -> dict[str, Callable[[bytes], bytes]]:
    found: dict[str, Callable[[bytes], bytes]] = {GZIP: _gzip}
    if zstd_compress is not None:
        found[ZSTD] = partial(zstd_compress, level=ZSTD_LEVEL)
    return found


COMPRESSORS = _compressors()


def encode_all(body: bytes) -> dict[str, bytes]:
    """The body in every coding this process can make, identity included (blocking; zlib and
    zstd release the GIL, so a worker thread does not hold the event loop)."""
    return {IDENTITY: body, **{coding: make(body) for coding, make in COMPRESSORS.items()}}


def _quality(text: str) -> float | None:
    """A q-value (0 to 1, at most three decimals), or None when malformed."""
    try:
        q = float(text)
    except ValueError:
        return None
    return q if 0.0 <= q <= 1.0 else None


def parse_accept_encoding(header: str) -> dict[str, float]:
    """Coding -> q-value from an Accept-Encoding header; malformed members are ignored."""
    accepted: dict[str, float] = {}
    for member in header.split(","):
        name, *params = (part.strip() for part in member.split(";"))
        name = _ALIASES.get(name.lower(), name.lower())
        if not name:
            continue
        q: float | None = 1.0
        for param in params:
            key, _, value = param.partition("=")
            if key.strip().lower() == "q":
                q = _quality(value.strip())
        if q is not None:
            accepted[name] = q
    return accepted


def choose_encoding(header: str | None, available: Mapping[str, bytes]) -> str:
    """The coding to send (RFC 9110 12.5.3): the available one the client rates highest.

    No header means identity. ``*`` rates every coding the header does not name; identity is
    acceptable unless excluded by ``identity;q=0`` or ``*;q=0``. When nothing is acceptable the
    body goes out uncompressed anyway, as the RFC suggests, rather than as an error a scraper
    would record as a failed scrape.
    """
    if header is None:
        return IDENTITY
    accepted = parse_accept_encoding(header)
    wildcard = accepted.get("*")

    def quality(coding: str) -> float:
        if coding in accepted:
            return accepted[coding]
        if wildcard is not None:
            return wildcard
        return 1.0 if coding == IDENTITY else 0.0

    ranked = [c for c in PREFERENCE if c in available and quality(c) > 0]
    if not ranked:
        return IDENTITY
    return max(ranked, key=lambda c: (quality(c), -PREFERENCE.index(c)))
