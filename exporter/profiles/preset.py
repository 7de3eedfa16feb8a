"""A preset as a profile: its table, its index file, and its reader, which is the counting mode."""

from __future__ import annotations

from exporter.counting.ledger import Ledger
from exporter.counting.reader import LedgerReader
from exporter.model import JobTypeLabels, PresetJobTypes, Tallies
from exporter.profiles.base import Preset, Profile
from exporter.profiles.mapping import coverage_of
from exporter.settings import QueueSettings


def preset_profile(preset: Preset) -> Profile[LedgerReader]:
    """The profile of a preset: its table, its index file, and its reader as the mode."""
    coverage = coverage_of(preset.capabilities)

    def labels(settings: QueueSettings) -> JobTypeLabels:
        return PresetJobTypes(settings.collect.max_job_types)

    def mode(settings: QueueSettings, labels: JobTypeLabels, tallies: Tallies) -> LedgerReader:
        assert isinstance(labels, PresetJobTypes)
        # None: the library's own default heartbeat / stalled-worker timeout.
        stuck_after = settings.collect.heartbeat_timeout
        return preset.make_reader(stuck_after, Ledger(labels, tallies), coverage)

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
    )
