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
from exporter.db.logical import check_all, drop_slot, logical_queues, setup_script, slot_of
from exporter.db.stream import psycopg2_modules
from exporter.settings import ConfigError, Settings
from exporter.settings.flags import LOGICAL_SETUP

log = logging.getLogger(__name__)


def check_logical(settings: Settings) -> None:
    """ConfigError naming each refusal; a database that is down is warned about, not refused
    (its stream fails visibly until it is back)."""
    presets = [q.name for q in settings.queues if q.collect.counting == "logical"]
    presets = [name for name in presets if name not in {q.name for q in logical_queues(settings)}]
    if presets:
        raise ConfigError(
            f"collect.counting: queue {', '.join(presets)}: logical counting is built for the "
            "default profile and mapped tables only so far; use polling for a preset"
        )
    if not logical_queues(settings):
        return
    try:
        psycopg2_modules()
    except DatabaseError as exc:
        raise ConfigError(f"collect.counting: {exc}") from None
    problems, unchecked = asyncio.run(check_all(settings))
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
        sys.stdout.write(setup_script(settings))
        sys.stdout.flush()
        return 0
    failed = False
    for queue in logical_queues(settings):
        slot = slot_of(queue)
        if not queue.database.dsn:
            sys.stderr.write(f"queue {queue.name}: no database.dsn, slot {slot} not dropped\n")
            failed = True
            continue
        try:
            dropped = asyncio.run(drop_slot(queue))
        except DatabaseError as exc:
            sys.stderr.write(f"queue {queue.name}: slot {slot} not dropped: {exc}\n")
            failed = True
            continue
        done = "dropped" if dropped else "not found (nothing to drop)"
        sys.stdout.write(f"queue {queue.name}: slot {slot} {done}\n")
    sys.stdout.flush()
    return 1 if failed else 0
