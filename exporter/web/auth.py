"""Basic auth: bcrypt checks with a cache of good pairs, and the middleware that demands it."""

from __future__ import annotations

import binascii
import hashlib
import hmac
import secrets
from collections.abc import Mapping
from typing import TYPE_CHECKING

import bcrypt
from aiohttp import web
from aiohttp.typedefs import Handler, Middleware

if TYPE_CHECKING:
    from exporter.web.watcher import WebConfigWatcher

REALM = "jobqueue-exporter"
_BCRYPT_MAX_PASSWORD = 72


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


def parse_basic_auth(header: str) -> tuple[str, bytes] | None:
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


def unauthorized() -> web.Response:
    """A 401 that tells the client to use basic auth."""
    return web.Response(
        status=401,
        text="Unauthorized\n",
        headers={"WWW-Authenticate": f'Basic realm="{REALM}"'},
    )


def auth_middleware(watcher: WebConfigWatcher, exempt: tuple[str, ...]) -> Middleware:
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
        credentials = parse_basic_auth(request.headers.get("Authorization", ""))
        if credentials is None or not await watcher.check_credentials(*credentials):
            return unauthorized()
        return await handler(request)

    return middleware
