"""Queue schemas as data plus a counting mode: the reference table and the libraries' presets.

``PROFILES`` is the registry the service looks a queue's ``profile`` up in: ``default`` (the
reference table, :mod:`exporter.profiles.default`) and one per preset (procrastinate, pgqueuer,
pg-boss, django-tasks, Oban, graphile-worker; ``PRESETS`` has their readers, capabilities and
retention). See docs/presets.md for the interface, the proofs, and "Adding a preset".
"""

from __future__ import annotations

from typing import Any

from exporter.profiles import django_tasks, graphile_worker, oban, pgboss, pgqueuer, procrastinate
from exporter.profiles.base import Preset, Profile
from exporter.profiles.default import DEFAULT
from exporter.profiles.preset import preset_profile
from exporter.settings import QueueSettings

__all__ = ["PRESETS", "PROFILES", "Preset", "Profile", "profile_of"]


PRESETS: dict[str, Preset] = {
    preset.name: preset
    for preset in (
        Preset("procrastinate", "procrastinate", ">=3.10,<3.11", procrastinate.ProcrastinateReader,
               procrastinate.CAPABILITIES, procrastinate.RETENTION, None, "procrastinate_jobs"),
        Preset("pgqueuer", "pgqueuer", ">=1.6,<1.7", pgqueuer.PgqueuerReader,
               pgqueuer.CAPABILITIES, pgqueuer.RETENTION, "pgqueuer_indexes.sql", "pgqueuer",
               ("pgqueuer_exporter_held_idx",)),
        Preset("pgboss", "pg-boss", ">=12,<13 (schema version 46)", pgboss.PgbossReader,
               pgboss.CAPABILITIES, pgboss.RETENTION, None, "pgboss.job"),
        Preset("django-tasks", "django-tasks-db", ">=0.13,<0.14 (django-tasks 0.12, Django 5.2)",
               django_tasks.DjangoTasksReader, django_tasks.CAPABILITIES, django_tasks.RETENTION,
               "django_tasks_indexes.sql", django_tasks.TABLE,
               ("django_tasks_exporter_running_idx", "django_tasks_exporter_enqueued_idx")),
        Preset("oban", "oban (Python) / Oban (Elixir)", "Python 0.7; Elixir 2.x", oban.ObanReader,
               oban.CAPABILITIES, oban.RETENTION, "oban_indexes.sql", "oban_jobs",
               ("oban_jobs_completed_at_index",)),
        Preset("graphile-worker", "graphile-worker", ">=0.18,<0.19 (migration 20)",
               graphile_worker.GraphileWorkerReader, graphile_worker.CAPABILITIES,
               graphile_worker.RETENTION, "graphile_worker_indexes.sql",
               "graphile_worker._private_jobs",
               ("graphile_worker_exporter_locked_idx", "graphile_worker_exporter_dead_idx"),
               graphile_worker.LOGICAL),
    )
}  # fmt: skip

# Any: each profile's hooks take the mode that profile made, which the poller hands back.
PROFILES: dict[str, Profile[Any]] = {
    DEFAULT.name: DEFAULT,
    **{name: preset_profile(preset) for name, preset in PRESETS.items()},
}


def profile_of(settings: QueueSettings) -> Profile[Any]:
    """The profile a queue's settings name."""
    return PROFILES[settings.profile]
