"""A preset as a profile: the library's reader run as a counting mode, its gauges as a snapshot."""

from __future__ import annotations

from dataclasses import dataclass, replace

from exporter.counting.cycle import Collected, CountingMode, Cycle, Query, Row
from exporter.counting.ledger import Ledger
from exporter.model import Coverage, JobTypeLabels, LogicalTarget, PresetJobTypes, Tallies
from exporter.profiles.base import Preset, PresetReader, Profile
from exporter.profiles.mapping import coverage_of, snapshot_of
from exporter.profiles.streamed import StreamedMode
from exporter.settings import QueueSettings


@dataclass
class PresetMode:
    """A preset reader's cycle (horizon, its statements, apply) as a counting mode."""

    reader: PresetReader
    labels: PresetJobTypes
    coverage: Coverage

    @property
    def tracked(self) -> None:
        """A reader keeps cursors, not a set of tracked jobs."""
        return None

    @property
    def held(self) -> None:
        """A reader keeps no finished jobs while the horizon is held (what waits for it is
        the id watermark's set of consumed event ids)."""
        return None

    def horizon_query(self) -> Query:
        """The reader's horizon statement."""
        return self.reader.horizon_query()

    def cycle(self, horizon: Row) -> Cycle:
        """The reader's statements in order, then its reading as the queue's snapshot."""
        results: dict[str, list[Row]] = {}
        for query in self.reader.queries(horizon):
            results[query.name] = list((yield query) or ())
        reading = self.reader.apply(results)
        return Collected(
            snapshot=snapshot_of(reading, self.labels, self.coverage),
            counting=reading.counting,
            rows_read=sum(reading.rows_read.values()),
            warnings=tuple(reading.warnings),
        )


def preset_profile(preset: Preset) -> Profile:
    """The profile of a preset: its table, its index file, and its reader as the mode."""
    coverage = coverage_of(preset.capabilities)
    logical = preset.logical
    streamed = coverage
    if logical is not None:
        streamed = coverage_of(logical.capabilities)
        streamed = replace(streamed, withheld=streamed.withheld - logical.fills)

    def labels(settings: QueueSettings) -> JobTypeLabels:
        return PresetJobTypes(settings.collect.max_job_types)

    def from_stream(settings: QueueSettings) -> bool:
        return logical is not None and settings.collect.counting == "logical"

    def mode(settings: QueueSettings, labels: JobTypeLabels, tallies: Tallies) -> CountingMode:
        assert isinstance(labels, PresetJobTypes)
        stuck_after = settings.collect.heartbeat_timeout
        if logical is not None and from_stream(settings):
            # The reader reads the gauges; its own counts go to a ledger nothing exports.
            gauges = preset.make_reader(stuck_after, Ledger(labels))
            rules = logical.rules(Ledger(labels, tallies))
            return StreamedMode(gauges, rules, labels, streamed, preset.table)
        # None: the library's own default heartbeat / stalled-worker timeout.
        reader = preset.make_reader(stuck_after, Ledger(labels, tallies))
        return PresetMode(reader, labels, coverage)

    def coverage_for(settings: QueueSettings) -> Coverage:
        return streamed if from_stream(settings) else coverage

    def logical_target(settings: QueueSettings) -> LogicalTarget:
        # No status column: only REPLICA IDENTITY FULL gives the old row the rules read.
        return LogicalTarget(preset.table, None)

    return Profile(
        name=preset.name,
        coverage=coverage,
        required_indexes=preset.required_indexes,
        watched_table=lambda settings: preset.table,
        make_labels=labels,
        make_mode=mode,
        note={
            "profile": preset.name,
            "history": preset.retention.history_kept,
            "note": preset.retention.warning,
        },
        retention=preset.retention.seconds,
        settings_coverage=coverage_for,
        logical_target=logical_target if logical is not None else None,
    )
