"""What a reload changes: each queue kept, changed live, reconnected, replaced, added or removed,
and the process settings that only a restart can change.

A queue is the same queue when its name, database (the DSN without its password) and table are;
its counters then survive a reload. How much of it must be rebuilt depends on what changed:

- live: collection settings the running loop takes on at once (interval, timeout, thresholds,
  staleness, done counting, job type names, the label cap and the held-jobs cap);
- reconnect: how the exporter connects (password, pool size, connect, statement and lock
  timeouts): a new pool, the counters kept;
- replace: the settings the counting itself depends on (commit-lag tolerance, a preset's
  heartbeat timeout, error markers, result paths, histogram buckets): a new collection loop,
  its counters restart from zero, as they would for this queue after a restart.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, fields

from exporter.settings.schema import CollectSettings, QueueSettings, Settings
from exporter.settings.secrets import dsn_without_password

# Process settings read once, when the listeners start.
RESTART_ONLY = (
    "web.listen_address", "web.telemetry_path", "web.config_file", "web.systemd_socket",
)  # fmt: skip

_CONNECTION = {"statement_timeout", "lock_timeout"}
_LIVE = {"interval", "timeout", "stuck_threshold", "staleness_limit", "done_count"}
_LIVE |= {"max_job_types", "job_types", "max_held_jobs"}
_COUNTING = {f.name for f in fields(CollectSettings)} - _CONNECTION - _LIVE


class Change(enum.IntEnum):
    """How much of a running queue a reload rebuilds; a larger value includes the smaller."""

    SAME = 0
    LIVE = 1
    RECONNECT = 2
    REPLACE = 3


@dataclass(frozen=True)
class ReloadPlan:
    """The difference between the running settings and the reloaded ones."""

    changes: dict[str, Change]  # queues in both, by name
    added: tuple[str, ...]
    removed: tuple[str, ...]
    restart_needed: tuple[str, ...]  # dotted keys that changed but only a restart applies

    def names(self, change: Change) -> list[str]:
        """The queues that change this much."""
        return [name for name, found in self.changes.items() if found is change]


def queue_change(old: QueueSettings, new: QueueSettings) -> Change:
    """How much of a running queue must be rebuilt to run with ``new``."""
    if old == new:
        return Change.SAME
    a, b = old.database, new.database
    if old.profile != new.profile:
        return Change.REPLACE  # other tables, another reader: nothing counted carries over
    if (a.dsn and dsn_without_password(a.dsn)) != (b.dsn and dsn_without_password(b.dsn)):
        return Change.REPLACE
    if a.table != b.table or old.table != new.table:
        return Change.REPLACE  # another table, or other columns: nothing counted carries over
    changed = {f.name for f in fields(CollectSettings)}
    changed = {n for n in changed if getattr(old.collect, n) != getattr(new.collect, n)}
    if changed & _COUNTING:
        return Change.REPLACE
    if a != b or changed & _CONNECTION:
        return Change.RECONNECT  # password (file), pool size, timeouts
    return Change.LIVE


def plan_reload(old: Settings, new: Settings) -> ReloadPlan:
    """Compare the running settings with the reloaded ones."""
    before = {q.name: q for q in old.queues}
    after = {q.name: q for q in new.queues}
    restart = tuple(
        key
        for key in RESTART_ONLY
        if getattr(old.web, key.partition(".")[2]) != getattr(new.web, key.partition(".")[2])
    )
    return ReloadPlan(
        changes={n: queue_change(before[n], after[n]) for n in after if n in before},
        added=tuple(n for n in after if n not in before),
        removed=tuple(n for n in before if n not in after),
        restart_needed=restart,
    )
