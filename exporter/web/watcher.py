"""Keeps the web config current: re-reads the file and its certificates when they change.

A broken replacement is logged and the last good configuration stays in force, so a bad
rotation never takes the endpoint down.
"""

from __future__ import annotations

import asyncio
import logging
import os
import ssl
import time
from collections.abc import Callable

from exporter.web.auth import Authenticator
from exporter.web.tls import ReloadingSSLContext, build_ssl_context
from exporter.web.validate import WebConfigError
from exporter.web.webconfig import WebConfig, load_web_config

log = logging.getLogger(__name__)


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
        self._ssl = build_ssl_context(self._config.tls)
        self._authenticator = Authenticator(self._config.basic_auth_users)
        self._signature = _signature(_watched_files(path, self._config))
        self._next_check = clock() + check_interval
        self._last_error: str | None = None
        # Bounds the CPU a flood of wrong passwords can take; cached pairs skip the queue.
        self._bcrypt_slots = asyncio.Semaphore(max_concurrent_bcrypt)
        self._listener_ssl: ReloadingSSLContext | None = None

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
            config, ssl_context = self._load(self._path)
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

    def _load(self, path: str) -> tuple[WebConfig, ssl.SSLContext | None]:
        """Read the file as a replacement of the running configuration (WebConfigError if not)."""
        config = load_web_config(path)
        if (config.tls is None) != (self._config.tls is None):
            raise WebConfigError("tls_server_config: turning TLS on or off needs a restart")
        return config, build_ssl_context(config.tls)

    def check(self) -> None:
        """Raise WebConfigError, naming the key, when the file could not replace the running one."""
        if self._path is not None:
            self._load(self._path)

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
            self._listener_ssl = ReloadingSSLContext(ssl.PROTOCOL_TLS_SERVER)
            self._listener_ssl.current = self.current_ssl_context
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
