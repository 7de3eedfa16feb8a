"""What a queue's collections are worth a log line for, said once rather than once per cycle.

The poller hands every finished collection here: the baseline taken, a mode's warnings while
they last, its notices, the held-jobs cap crossed and left, and at start the preset's note and
a retention shorter than two intervals. Each condition is one line when it starts (and, where
it matters, one when it ends); the gauges say it meanwhile.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

from exporter.model import Collected, HeldJobs

log = logging.getLogger("exporter.poller")  # the lines a user knows as the poller's


class CollectionLog:
    """One queue's log lines about its collections, each condition said once."""

    def __init__(self) -> None:
        self._counting = False
        self._warnings: tuple[str, ...] = ()
        self._held_exceeded = False  # past collect.max_held_jobs at the last collection

    @staticmethod
    def started(note: Mapping[str, str], retention: float | None, interval: float) -> None:
        """At start: which preset is read, and a library retention the interval may outrun."""
        if note:
            log.info("collecting a preset queue", extra={"fields": dict(note)})
        if retention is not None and 2 * interval > retention:
            log.warning(
                "the library's default retention is shorter than two collection intervals",
                extra={"fields": {**note, "retention_seconds": retention,
                                  "interval_seconds": interval}},
            )  # fmt: skip

    def rebaselined(self) -> None:
        """A new baseline follows: its first counting cycle is announced again."""
        self._counting = False

    def collected(self, collected: Collected, tracked: int | None) -> None:
        """After a successful cycle: the baseline, the mode's warnings and notices."""
        if collected.counting and not self._counting:
            log.info(
                "baseline taken; counting from now on", extra={"fields": {"tracked_jobs": tracked}}
            )
        self._counting = collected.counting
        if collected.warnings != self._warnings:
            for warning in collected.warnings:
                log.warning(warning)
            self._warnings = collected.warnings
        for notice in collected.notices:
            log.warning(notice.message, extra={"fields": dict(notice.fields)})

    def held(self, held: HeldJobs | None) -> None:
        """One line when the held-jobs cap is crossed and one when back under."""
        # jobqueue_exporter_held_cap_exceeded says it meanwhile.
        exceeded = held is not None and held.exceeded
        if held is not None and exceeded != self._held_exceeded:
            fields = {"held_jobs": held.jobs, "max_held_jobs": held.cap}
            if exceeded:
                log.warning(
                    "more finished jobs held than collect.max_held_jobs while a long "
                    "transaction holds the horizon back; counting stays exact, memory grows "
                    "(about 360 bytes a job) until it ends",
                    extra={"fields": fields},
                )
            else:
                log.info("held jobs back under collect.max_held_jobs", extra={"fields": fields})
        self._held_exceeded = exceeded

    @staticmethod
    def missing_index(name: str, command: str) -> None:
        """An index the queue's cycle needs is missing."""
        log.warning(
            "index missing: per-cycle queries will scan the table; the command prints "
            "the statement that creates it",
            extra={"fields": {"index": name, "command": command}},
        )
