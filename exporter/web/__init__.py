"""The HTTP side: server, routes, the /metrics rendering, the status page and the web-config
file (TLS, basic auth, headers, and the watcher that reloads them). Only this package imports
aiohttp."""
