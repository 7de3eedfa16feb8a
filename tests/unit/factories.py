"""Plain model objects for the unit tests: a queue's view as a collection leaves it."""

from __future__ import annotations

from collections import Counter
from dataclasses import replace
from typing import TypeVar

from exporter.model import ActiveStats, Health, HeldJobs, QueueView, Snapshot, Tallies
from exporter.runtime import QueueRuntime
from exporter.settings import QueueSettings
from exporter.settings.schema import DatabaseSettings
from exporter.vocabulary import REQUIRED_INDEXES

R = TypeVar("R")


def view(queue: str = "orders", **changes: object) -> QueueView:
    """A leader's view of one healthy queue with two job types; ``changes`` replace fields."""
    tallies = Tallies((1.0, 10.0), (0.1,), (60.0,))
    tallies.enqueued["email"] = 7
    tallies.completed["email"] = 5
    tallies.failures[("email", "deadline")] = 2
    tallies.add_cost("email", "ai", 0.5)
    tallies.observe("email", duration=2.0, wait=0.05, latency=30.0)
    tallies.observe("email", duration=20.0, wait=1.0, latency=90.0)
    base = QueueView(
        queue=queue,
        leader=True,
        snapshot=Snapshot(
            taken_at=1000.0,
            active={1: ActiveStats(pending=3, running=1, oldest_pending_age=12.5, stuck_overrun=1)},
            dead={1: 4},
        ),
        label_of={1: "email"},
        labels=("email", "scrape"),
        folded=0,
        tallies=tallies,
        health=Health(
            up=True,
            last_success_at=999.0,
            collections=10,
            errors=Counter({"timeout": 1}),
            query_durations={"snapshot": 0.002},
            missing_indexes={name: 0 for name in REQUIRED_INDEXES},
        ),
        up=True,
        collection_timeout=10.0,
        tracked=4,
        held=HeldJobs(jobs=2, cap=1_000_000),
    )
    return replace(base, **changes)  # type: ignore[arg-type]


def preset_queue(profile: str, name: str = "media", **collect: float) -> QueueSettings:
    """A queue of a preset at a placeholder DSN, with some collect settings changed."""
    base = QueueSettings(name=name, database=DatabaseSettings(dsn="postgresql://u@h/a"))
    return replace(base, profile=profile, collect=replace(base.collect, **collect))


def reader_of(settings: QueueSettings, kind: type[R]) -> R:
    """The counting mode a queue's runtime starts with, checked to be the preset's reader."""
    mode = QueueRuntime(settings).poller.mode
    assert isinstance(mode, kind)
    return mode
