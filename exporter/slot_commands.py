"""The commands and start-up checks of collect.counting: logical (docs/logical.md).

``logical-setup`` prints the SQL a DBA runs; ``logical-drop`` drops each logical queue's slot
(the exporter never drops one by itself); :func:`check_logical` refuses to start, with one
message naming the setting, when a server cannot give what the counting needs.
"""

from __future__ import annotations

import asyncio
import logging
import sys

from exporter.db import DatabaseError
from exporter.db.slot_setup import (
    check_all,
    drop_slot,
    logical_queues,
    setup_script,
    slot_of,
)
from exporter.db.stream_failure import psycopg2_modules
from exporter.model import LogicalTarget
from exporter.profiles import profile_of
from exporter.redaction import redact
from exporter.settings import ConfigError, QueueSettings, Settings
from exporter.settings.flags import LOGICAL_SETUP

log = logging.getLogger(__name__)


def target_of(queue: QueueSettings) -> LogicalTarget | None:
    """The table the queue's profile streams; None when the profile cannot count logical."""
    target = profile_of(queue).logical_target
    return target(queue) if target is not None else None


def check_logical(settings: Settings) -> None:
    """ConfigError naming each refusal; a database that is down is warned about, not refused
    (its stream fails visibly until it is back)."""
    queues = logical_queues(settings, target_of)
    presets = [q.name for q in settings.queues if q.collect.counting == "logical"]
    presets = [name for name in presets if name not in {q.name for q in queues}]
    if presets:
        raise ConfigError(
            f"collect.counting: queue {', '.join(presets)}: logical counting is built for the "
            "default profile, mapped tables and graphile-worker so far; use polling for this "
            "preset (docs/presets.md says why)"
        )
    if not queues:
        return
    try:
        psycopg2_modules()
    except DatabaseError as exc:
        raise ConfigError(str(exc)) from None  # it names collect.counting: logical already
    problems, unchecked = asyncio.run(check_all(settings, target_of))
    for queue, why in unchecked:
        log.warning(
            "logical counting not checked now: the database cannot be reached",
            extra={"fields": {"queue": queue, "err": why}},
        )
    if problems:
        raise ConfigError("\n".join(problems))


def refuse_demo(settings: Settings) -> None:
    """ConfigError: the demo's throwaway cluster runs wal_level=replica, with no slot to read."""
    if any(q.collect.counting == "logical" for q in settings.queues):
        raise ConfigError(
            "collect.counting: the demo counts by polling only (its cluster runs "
            "wal_level=replica); tests/db/test_logical.py shows the logical mode on a cluster"
        )


def logical_command(command: str, settings: Settings) -> int:
    """Run logical-setup or logical-drop; the exit code."""
    if command == LOGICAL_SETUP:
        sys.stdout.write(setup_script(settings, target_of))
        sys.stdout.flush()
        return 0
    failed = False
    for queue in logical_queues(settings, target_of):
        slot = slot_of(queue)
        if not queue.database.dsn:
            sys.stderr.write(f"queue {queue.name}: no database.dsn, slot {slot} not dropped\n")
            failed = True
            continue
        try:
            dropped = asyncio.run(drop_slot(queue))
        except DatabaseError as exc:
            sys.stderr.write(f"queue {queue.name}: slot {slot} not dropped: {redact(str(exc))}\n")
            failed = True
            continue
        done = "dropped" if dropped else "not found (nothing to drop)"
        sys.stdout.write(f"queue {queue.name}: slot {slot} {done}\n")
    sys.stdout.flush()
    return 1 if failed else 0
