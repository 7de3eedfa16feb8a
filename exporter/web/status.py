"""The page at ``/``: what a person opening the exporter's port needs to see at a glance.

Version, uptime, the configuration's last load, and one row per queue: the table and profile it
reads, up or down, leader or not (as jobqueue_exporter_leader says), jobs by status, then the
diagnostics: last success, last error, collection time, counting mode (and a logical queue's
slot lag), tracked jobs and job types. One self-contained HTML document (inline CSS, no
script, no external asset), every value escaped.

The counts are what a person came for, so they come first; up to 1400 px wide the diagnostics
leave the table's columns and wrap, labelled, beneath their queue's counts.
"""

from __future__ import annotations

import datetime
import html
from collections.abc import Sequence
from dataclasses import dataclass

from exporter import __version__
from exporter.model import ConfigStatus, QueueStatus, QueueView
from exporter.redaction import redact
from exporter.vocabulary import DOCS_URL, PROJECT
from exporter.web.middleware import HEALTHY_PATHS, READY_PATHS


@dataclass(frozen=True)
class StatusPage:
    """Everything the page shows, gathered on the event loop, rendered anywhere."""

    telemetry_path: str
    uptime: float
    now: float  # Unix time, to say how long ago things happened
    config: ConfigStatus
    queues: Sequence[QueueStatus]


_CSS = """
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",sans-serif;margin:24px;color:#1d2430;
background:#f6f7f9}
h1{font-size:20px;margin:0 0 4px}h1 small{font-weight:400;color:#5b6472}
nav a{margin-right:14px}a{color:#0b5cad}
.meta{color:#5b6472;margin:6px 0 18px}
table{border-collapse:collapse;background:#fff;box-shadow:0 1px 2px #0002;width:100%}
th,td{padding:7px 10px;border-bottom:1px solid #e3e6ea;text-align:left;vertical-align:top}
th{background:#eef1f4;font-weight:600;font-size:12px;text-transform:uppercase;color:#3d4552}
td.n{text-align:right;font-variant-numeric:tabular-nums}th.n{text-align:right}td.s{white-space:nowrap}
.badge{display:inline-block;padding:1px 8px;border-radius:10px;font-weight:600;font-size:12px}
.up{background:#d7f5dd;color:#0f6b26}.down{background:#fde0df;color:#a3211b}
.standby{background:#e8eaee;color:#4a5260}.leader{background:#dbe9fb;color:#164f94}
.err{color:#a3211b;max-width:28em;overflow-wrap:break-word;white-space:normal}
.muted{color:#8a919c}.reads{white-space:nowrap;font-size:12px}
.banner{padding:8px 12px;border-radius:6px;margin:0 0 14px;background:#fde0df;color:#a3211b}
@media (max-width:1400px){
table,thead,tbody{display:block}tr{display:flex;flex-wrap:wrap;border-bottom:1px solid #e3e6ea}
thead tr{background:#eef1f4}
th,td{box-sizing:border-box;min-width:0;border:0;padding:7px 6px;flex:0 0 10.4%}
th{font-size:11px}th.d{display:none}td.s{white-space:normal}.reads{white-space:normal}
.key{flex-basis:17%;padding-left:10px}.badges{flex-basis:10%}
td.d{flex-basis:13.9%;padding:0 6px 8px 10px;font-size:13px;text-align:left}
td.e{flex-basis:30%}td.d::before{content:attr(data-label);display:block;font-size:11px;
text-transform:uppercase;color:#5b6472}}
@media (max-width:600px){.key{flex-basis:100%}.badges{flex-basis:50%}th,td{flex-basis:16.6%}
td.d{flex-basis:50%}td.e{flex-basis:100%}}
"""


def _text(message: str) -> str:
    """An error message as the page shows it: redacted (exporter/redaction.py), then escaped."""
    return html.escape(redact(message))


def _ago(now: float, then: float | None) -> str:
    """``12 s ago``, ``3 min ago``, ``2 h ago``, ``4 d ago``; ``never`` for None or 0."""
    if not then:
        return "never"
    return _duration(max(0.0, now - then)) + " ago"


def _duration(seconds: float) -> str:
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if seconds >= size:
            return f"{seconds / size:.0f} {unit}"
    return f"{seconds:.0f} s"


def _elapsed(seconds: float) -> str:
    """A collection time: milliseconds below a second."""
    return f"{seconds * 1000:.1f} ms" if seconds < 1 else f"{seconds:.2f} s"


def _utc(moment: float) -> str:
    stamp = datetime.datetime.fromtimestamp(moment, tz=datetime.UTC)
    return stamp.strftime("%Y-%m-%d %H:%M:%S UTC")


def _when(now: float, moment: float | None) -> str:
    """How long ago, with the exact time as a tooltip."""
    if not moment:
        return '<span class="muted">never</span>'
    return f'<span title="{_utc(moment)}">{_ago(now, moment)}</span>'


_NOT_COUNTED = (
    '<span class="muted" title="not counted (collect.done_count, or the queue\'s profile '
    'cannot tell)">&ndash;</span>'
)


def _counts(view: QueueView) -> list[str]:
    """Pending, running, dead, done, stuck and the oldest pending age, or dashes when withdrawn."""
    snapshot = view.snapshot
    if snapshot is None:
        return ['<span class="muted">&ndash;</span>'] * 6
    active = snapshot.active.values()
    dead = sum(snapshot.dead.values()) if snapshot.dead is not None else None
    done = sum(snapshot.done.values()) if snapshot.done is not None else None
    stuck = sum(s.stuck_lease_expired + s.stuck_overrun for s in active)
    oldest = max((s.oldest_pending_age for s in active), default=0.0)
    cells: list[int | str | None] = [
        sum(s.pending for s in active),
        sum(s.running for s in active),
        dead,
        done,
        stuck,
        _duration(oldest) if oldest else "none",
    ]
    return [
        _NOT_COUNTED
        if cell is None
        else html.escape(f"{cell:,}" if isinstance(cell, int) else cell)
        for cell in cells
    ]


def _bytes(count: int) -> str:
    """A WAL size as a person reads it: ``812 B``, ``3.4 MiB``."""
    if count < 1024:
        return f"{count:,} B"
    size = count / 1024
    for unit in ("KiB", "MiB"):
        if size < 1024:
            return f"{size:.1f} {unit}"
        size /= 1024
    return f"{size:,.1f} GiB"


def _counting(status: QueueStatus) -> str:
    """The counting mode; for a logical queue, the slot's lag (and its WAL status when at risk)."""
    if status.counting != "logical":
        return html.escape(status.counting)
    slot = status.view.slot
    if slot is None:
        why = "another exporter reads the slot" if not status.view.collector else "no report yet"
        return f'logical<div class="muted">slot lag: {why}</div>'
    title = (
        f"{slot.lag_bytes:,} bytes of WAL not yet confirmed (jobqueue_exporter_logical_lag_bytes)"
        f"; {slot.retained_bytes:,} retained; wal_status {slot.wal_status}"
    )
    risk = "" if slot.wal_status in ("reserved", "extended") else f" · {slot.wal_status}"
    gaps = f" · {slot.gaps:,} gaps" if slot.gaps else ""
    style = "err" if risk or gaps else "muted"
    return (
        f'logical<div class="{style}" title="{html.escape(title, quote=True)}">'
        f"slot lag {_bytes(slot.lag_bytes)}{html.escape(risk + gaps)}</div>"
    )


def _unmapped(view: QueueView) -> str:
    """Rows whose status none of table.status_values maps, and the values (escaped), if any."""
    found = view.tallies.unmapped_status if view.tallies is not None else None
    if not found:
        return ""
    rows = sum(found.values())
    values = ", ".join(f"{value} ({n:,})" for value, n in found.most_common())
    return (
        f'<div class="err">{rows:,} changed rows with a status none of table.status_values '
        f"maps: {html.escape(values)}</div>"
    )


def _queue_row(status: QueueStatus, now: float) -> str:
    view = status.view
    state = "up" if view.up else "down"
    role, role_class, role_why = _role(view)
    why = ""
    if status.ready is not None:
        # The reason is usually the last error, shown beside it: say it once.
        reason = "" if status.ready == status.last_error else f": {_text(status.ready)}"
        why = f'<div class="err">not ready{reason}</div>'
    if status.last_error:
        error = (
            f'<div class="err">{_text(status.last_error)}</div>'
            f'<div class="muted">{_when(now, status.last_error_at)}</div>'
        )
    else:
        error = '<span class="muted">none</span>'
    withheld = view.tracked is None or "tracked" in view.coverage.withheld
    tracked = _NOT_COUNTED if withheld else f"{view.tracked:,}"
    # Job types are the table's text when it has text ones: whoever enqueues writes them.
    folded = f", {view.folded:,} folded into other" if view.folded else ""
    types = html.escape(" | ".join(view.labels) + folded, quote=True)
    reads = f"{html.escape(status.table)} · profile {html.escape(status.profile)}"
    diagnostics = (
        ("", _when(now, view.health.last_success_at)),
        ("e", f"{error}{_unmapped(view)}"),
        ("n", _elapsed(view.health.collection_duration)),
        ("", _counting(status)),
        ("n", tracked),
        ("n", f'<span title="{types}">{len(view.labels):,}</span>'),
    )
    cells = [
        f'<td class="key"><b>{html.escape(view.queue)}</b>'
        f'<div class="muted reads">{reads}</div></td>',
        f'<td class="s badges"><span class="badge {state}">{state}</span>{why}</td>',
        f'<td class="s badges"><span class="badge {role_class}" title="{role_why}">{role}</span>'
        "</td>",
        *(f'<td class="n">{cell}</td>' for cell in _counts(view)),
        *(
            f'<td class="d {kind}" data-label="{name}">{cell}</td>'
            for name, (kind, cell) in zip(_DIAGNOSTICS, diagnostics, strict=True)
        ),
    ]
    return f'<tr id="queue-{html.escape(view.queue)}">' + "".join(cells) + "</tr>"


def _role(view: QueueView) -> tuple[str, str, str]:
    """The role badge: its text, class and tooltip, read from what jobqueue_exporter_leader
    says, so the page and /metrics never disagree."""
    if not view.collector:
        return "standby", "standby", "another exporter holds the queue's advisory lock"
    if view.leader:
        return "leader", "leader", "this exporter collects the queue (jobqueue_exporter_leader 1)"
    # It goes on collecting so the outage is counted, but it holds no lock and leads nothing.
    why = "no advisory lock held: the database has not been reached (jobqueue_exporter_leader 0)"
    return "not leader", "standby", why


# The counts first: what a person opens the page for. The diagnostics follow them, and wrap
# beneath them on a narrow screen.
_HEAD = (
    ("queue", "key"), ("state", "badges"), ("role", "badges"), ("pending", "n"),
    ("running", "n"), ("dead", "n"), ("done", "n"), ("stuck", "n"), ("oldest pending", "n"),
)  # fmt: skip
_DIAGNOSTICS = (
    "last success", "last error", "collection", "counting", "tracked jobs", "job types",
)  # fmt: skip


def _config_line(config: ConfigStatus, now: float) -> str:
    loaded = f"configuration loaded {_when(now, config.last_success_at)}"
    if config.successful:
        return f'<p class="meta">{loaded}</p>'
    error = _text(config.last_error or "unknown error")
    return (
        f'<p class="banner">The last reload failed {_when(now, config.last_failure_at)}: '
        f"{error}. The previous configuration is still running.</p>"
        f'<p class="meta">{loaded}</p>'
    )


def status_page(page: StatusPage) -> str:
    """The whole page as one self-contained HTML document."""
    path = html.escape(page.telemetry_path, quote=True)
    probes = "".join(f'<a href="{p}">{p}</a>' for p in (*HEALTHY_PATHS, *READY_PATHS))
    ready = sum(1 for q in page.queues if q.ready is None)
    rows = "".join(_queue_row(q, page.now) for q in page.queues)
    head = "".join(f'<th class="{kind}">{name}</th>' for name, kind in _HEAD)
    head += "".join(f'<th class="d">{name}</th>' for name in _DIAGNOSTICS)
    return (
        '<!doctype html><html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{PROJECT}</title><style>{_CSS}</style></head><body>"
        f"<h1>{PROJECT} <small>{html.escape(__version__)}</small></h1>"
        f'<p class="meta">up {_duration(page.uptime)} · {ready} of {len(page.queues)} '
        f"queues ready · {_utc(page.now)}</p>"
        f'<nav><a href="{path}">Metrics</a>{probes}<a href="{DOCS_URL}">Documentation</a></nav>'
        f"{_config_line(page.config, page.now)}"
        f"<table><thead><tr>{head}</tr></thead><tbody>{rows}</tbody></table>"
        "</body></html>\n"
    )
