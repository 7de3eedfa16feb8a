"""Queue schemas as data plus a counting mode: the reference table and the libraries' presets.

``PROFILES`` is the registry the service looks a queue's ``profile`` up in: ``default`` (the
reference table, :mod:`exporter.profiles.default`) and one per preset (procrastinate, pgqueuer,
pg-boss, django-tasks, Oban, graphile-worker, Solid Queue, GoodJob, River; ``PRESETS`` has their
readers, capabilities and retention). See docs/presets.md for the interface, the proofs, and
"Adding a preset".
"""

from __future__ import annotations

from typing import Any

from exporter.profiles import (
    django_tasks,
    good_job,
    graphile_worker,
    oban,
    pgboss,
    pgqueuer,
    procrastinate,
    river,
    solid_queue,
)
from exporter.profiles.base import Preset, Profile
from exporter.profiles.default import DEFAULT
from exporter.profiles.preset import preset_profile
from exporter.settings import QueueSettings

__all__ = ["PRESETS", "PROFILES", "Preset", "Profile", "profile_of"]


# Each preset module declares its own facts; the registry names them, one keyword each.
PRESETS: dict[str, Preset] = {
    preset.name: preset
    for preset in (
        Preset(
            name="procrastinate",
            library="procrastinate",
            versions=">=3.10,<3.11",
            make_reader=procrastinate.ProcrastinateReader,
            capabilities=procrastinate.CAPABILITIES,
            retention=procrastinate.RETENTION,
            table="procrastinate_jobs",
        ),
        Preset(
            name="pgqueuer",
            library="pgqueuer",
            versions=">=1.6,<1.7",
            make_reader=pgqueuer.PgqueuerReader,
            capabilities=pgqueuer.CAPABILITIES,
            retention=pgqueuer.RETENTION,
            table="pgqueuer",
            index_file="pgqueuer_indexes.sql",
            required_indexes=("pgqueuer_exporter_held_idx",),
        ),
        Preset(
            name="pgboss",
            library="pg-boss",
            versions=">=12,<13 (schema version 46)",
            make_reader=pgboss.PgbossReader,
            capabilities=pgboss.CAPABILITIES,
            retention=pgboss.RETENTION,
            table="pgboss.job",
        ),
        Preset(
            name="django-tasks",
            library="django-tasks-db",
            versions=">=0.13,<0.14 (django-tasks 0.12, Django 5.2)",
            make_reader=django_tasks.DjangoTasksReader,
            capabilities=django_tasks.CAPABILITIES,
            retention=django_tasks.RETENTION,
            table=django_tasks.TABLE,
            index_file="django_tasks_indexes.sql",
            required_indexes=(
                "django_tasks_exporter_running_idx",
                "django_tasks_exporter_enqueued_idx",
            ),
        ),
        Preset(
            name="oban",
            library="oban (Python) / Oban (Elixir)",
            versions="Python 0.7; Elixir 2.x",
            make_reader=oban.ObanReader,
            capabilities=oban.CAPABILITIES,
            retention=oban.RETENTION,
            table="oban_jobs",
            index_file="oban_indexes.sql",
            required_indexes=("oban_jobs_completed_at_index",),
        ),
        Preset(
            name="graphile-worker",
            library="graphile-worker",
            versions=">=0.18,<0.19 (migration 20)",
            make_reader=graphile_worker.GraphileWorkerReader,
            capabilities=graphile_worker.CAPABILITIES,
            retention=graphile_worker.RETENTION,
            table="graphile_worker._private_jobs",
            index_file="graphile_worker_indexes.sql",
            required_indexes=(
                "graphile_worker_exporter_locked_idx",
                "graphile_worker_exporter_dead_idx",
            ),
            logical=graphile_worker.LOGICAL,
        ),
        Preset(
            name="solid-queue",
            library="solid_queue (Rails)",
            versions=">=1.5,<1.6 (preserve_finished_jobs on)",
            make_reader=solid_queue.SolidQueueReader,
            capabilities=solid_queue.CAPABILITIES,
            retention=solid_queue.RETENTION,
            table=solid_queue.TABLE,
        ),
        Preset(
            name="solid-queue-unpreserved",
            library="solid_queue (Rails)",
            versions=">=1.5,<1.6 (preserve_finished_jobs off)",
            make_reader=solid_queue.SolidQueueUnpreservedReader,
            capabilities=solid_queue.UNPRESERVED,
            retention=solid_queue.RETENTION,
            table=solid_queue.TABLE,
        ),
        Preset(
            name="good-job",
            library="good_job (Rails)",
            versions="4.x, migrated up to 4.19.2 (preserve_job_records on)",
            make_reader=good_job.GoodJobReader,
            capabilities=good_job.CAPABILITIES,
            retention=good_job.RETENTION,
            table=good_job.TABLE,
        ),
        Preset(
            name="river",
            library="River (Go)",
            versions="migration line main up to 007 (proven at 007, River v0.43 line)",
            make_reader=river.RiverReader,
            capabilities=river.CAPABILITIES,
            retention=river.RETENTION,
            table="river_job",
        ),
    )
}

# Any: each profile's hooks take the mode that profile made, which the poller hands back.
PROFILES: dict[str, Profile[Any]] = {
    DEFAULT.name: DEFAULT,
    **{name: preset_profile(preset) for name, preset in PRESETS.items()},
}


def profile_of(settings: QueueSettings) -> Profile[Any]:
    """The profile a queue's settings name."""
    return PROFILES[settings.profile]
