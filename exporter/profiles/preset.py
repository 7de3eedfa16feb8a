"""A preset as a profile: its table, its index file, and its reader, which is the counting mode."""

from __future__ import annotations

from dataclasses import replace

from exporter.counting.ledger import Ledger
from exporter.counting.reader import LedgerReader
from exporter.model import Coverage, JobTypeLabels, LogicalTarget, PresetJobTypes, Tallies
from exporter.profiles.base import Preset, Profile
from exporter.profiles.mapping import coverage_of
from exporter.profiles.preset_stream import StreamedMode
from exporter.settings import QueueSettings


def preset_profile(preset: Preset) -> Profile[LedgerReader | StreamedMode]:
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

    def mode(
        settings: QueueSettings, labels: JobTypeLabels, tallies: Tallies
    ) -> LedgerReader | StreamedMode:
        assert isinstance(labels, PresetJobTypes)
        stuck_after = settings.collect.heartbeat_timeout
        if logical is not None and from_stream(settings):
            # The reader reads the gauges; its own counts go to a ledger nothing exports.
            gauges = preset.make_reader(stuck_after, Ledger(labels), streamed)
            return StreamedMode(gauges, logical.rules(), labels, tallies, streamed, preset.table)
        # None: the library's own default heartbeat / stalled-worker timeout.
        return preset.make_reader(stuck_after, Ledger(labels, tallies), coverage)

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
