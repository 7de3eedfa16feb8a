"""The collection loop of a queue that a library owns (procrastinate, pgqueuer, pg-boss).

:class:`PresetPoller` is the :class:`~exporter.poller.Poller` with another inside: the loop,
single flight, backoff, deadline, health and staleness are the poller's; each collection runs
the preset's reader (docs/presets.md, "Interface") instead of the tracker, and maps its
reading onto the model (:mod:`exporter.profiles.mapping`), so the metrics of every queue
render for it.
"""

from __future__ import annotations

import logging
from dataclasses import replace
from typing import Any

from exporter.db import Database, DatabaseError
from exporter.db.presets import read_cycle
from exporter.model import QueueView
from exporter.poller import INDEX_CHECK_EVERY, Poller
from exporter.profiles import PRESETS, Preset, PresetReader
from exporter.profiles.base import PresetError, Tallies
from exporter.profiles.mapping import (
    Carried,
    PresetJobTypes,
    carry,
    coverage_of,
    snapshot_of,
)
from exporter.settings import QueueSettings
from exporter.vocabulary import DEFAULT_PROFILE

log = logging.getLogger(__name__)


class PresetPoller(Poller):
    """Collects one preset queue: the shared loop, the preset's reader inside each cycle."""

    def __init__(self, settings: QueueSettings, database: Database, **options: Any) -> None:
        self.preset: Preset = PRESETS[settings.profile]
        super().__init__(settings, database, **options)  # monotonic=, rng= as the Poller takes
        self.labels: PresetJobTypes = PresetJobTypes(settings.collect.max_job_types)
        self.coverage = coverage_of(self.preset.capabilities)
        self.reader = self._new_reader()
        self._carried = Carried()
        self._warnings: list[str] = []
        log.info(
            "collecting a preset queue",
            extra={
                "fields": {
                    "profile": self.preset.name,
                    "history": self.preset.retention.history_kept,
                    "note": self.preset.retention.warning,
                }
            },
        )
        retention = self.preset.retention.seconds
        if retention is not None and 2 * settings.collect.interval > retention:
            # Rows pruned between two cycles are never read: their counts are lost for good.
            log.warning(
                "the library's default retention is shorter than two collection intervals",
                extra={
                    "fields": {
                        "profile": self.preset.name,
                        "retention_seconds": retention,
                        "interval_seconds": settings.collect.interval,
                        "note": self.preset.retention.warning,
                    }
                },
            )

    def _new_reader(self) -> PresetReader:
        collect = self.settings.collect
        # None: the library's own default heartbeat / stalled-worker timeout.
        reader = self.preset.make_reader(collect.heartbeat_timeout)
        # The queue's configured buckets, so the histograms merge into the queue's Tallies.
        reader.tallies = Tallies(
            duration_bounds=collect.duration_buckets,
            wait_bounds=collect.wait_buckets,
            latency_bounds=collect.latency_buckets,
        )
        return reader

    def rebaseline(self) -> None:
        """Count from a new reader's baseline; what was counted stays counted."""
        super().rebaseline()
        self.reader = self._new_reader()
        self._carried = Carried()

    def view(self) -> QueueView:
        """The queue's part of /metrics, without the series the preset cannot fill."""
        return replace(super().view(), coverage=self.coverage)

    async def _collect(self) -> None:
        if (
            self._indexes_checked_at is None
            or self._cycle - self._indexes_checked_at >= INDEX_CHECK_EVERY
        ):
            await self._check_indexes()
        reader = self.reader
        try:
            results, durations = await read_cycle(
                self.database, reader.horizon_query(), reader.queries
            )
            reading = reader.apply(results)
        except DatabaseError:
            # An outage or a timeout: the reader's cursor is intact, and once the database is
            # back it counts what happened meanwhile.
            raise
        except PresetError as exc:
            # Counting exactly is impossible with what this role sees: the collection fails,
            # visibly, and counting starts over once the cause is gone; what was counted stays.
            self.rebaseline()
            raise DatabaseError(exc.reason, f"{self.preset.name} preset: {exc}") from None
        except Exception:
            self.rebaseline()  # a reader that failed half-way cannot be trusted to go on
            raise
        if reading.warnings != self._warnings:
            for warning in reading.warnings:
                log.warning("preset reader", extra={"fields": {"warning": warning}})
            self._warnings = list(reading.warnings)
        snapshot = snapshot_of(reading, self.labels, self.coverage)
        if reading.counting:
            carry(self.tallies, self._carried, reader.tallies, self.labels)
        self.snapshot = snapshot
        self.health.query_durations = durations
        self.health.rows_read += sum(reading.rows_read.values())
        self.health.last_success_at = reading.taken_at

    async def _check_indexes(self) -> None:
        required = self.preset.required_indexes
        missing = await self.database.missing_indexes(required)
        self.health.missing_indexes = {name: int(name in missing) for name in required}
        self._indexes_checked_at = self._cycle
        for name in missing:
            log.warning(
                "index missing: per-cycle queries will scan the table; "
                "create it from the shipped file",
                extra={
                    "fields": {
                        "index": name,
                        "file": f"exporter/profiles/sql/{self.preset.index_file}",
                    }
                },
            )


def make_poller(settings: QueueSettings, database: Database) -> Poller:
    """The collection loop the queue's profile needs."""
    if settings.profile == DEFAULT_PROFILE:
        return Poller(settings, database)
    return PresetPoller(settings, database)


def watched_table(settings: QueueSettings) -> str:
    """The table whose OID keys the queue's election lock and whose existence is checked."""
    if settings.profile == DEFAULT_PROFILE:
        return settings.database.table
    return PRESETS[settings.profile].table
