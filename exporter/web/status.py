"""The page at ``/``: what a person opening the exporter's port needs to see at a glance."""

from __future__ import annotations

import html
from collections.abc import Sequence

from exporter import __version__


def status_page(telemetry_path: str, readiness: Sequence[tuple[str, str | None]]) -> str:
    """Version, links, and each queue's readiness, as self-contained HTML."""
    path = html.escape(telemetry_path)
    rows = "".join(
        f"<tr><td>{html.escape(queue)}</td><td>{'ready' if why is None else 'not ready'}</td>"
        f"<td>{html.escape(why or '')}</td></tr>"
        for queue, why in readiness
    )
    return (
        '<!doctype html><html><head><meta charset="utf-8"><title>jobqueue-exporter</title>'
        "</head><body>"
        f"<h1>jobqueue-exporter {html.escape(__version__)}</h1>"
        f'<p><a href="{path}">Metrics</a> · <a href="/healthz">healthz</a> · '
        '<a href="/readyz">readyz</a></p>'
        "<table><tr><th>queue</th><th>state</th><th>last error</th></tr>"
        f"{rows}</table></body></html>\n"
    )
