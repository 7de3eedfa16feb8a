"""The commands and start-up checks of collect.counting: logical (docs/logical.md).

``logical-setup`` prints the SQL a DBA runs; ``logical-drop`` drops each queue's slot (the
exporter never drops one by itself) and prints the SQL that reverses the set-up;
:func:`check_logical` refuses to start, with one message naming the setting, when a server
cannot give what the counting needs, and says what it checked for ``--config.check``.
"""

from __future__ import annotations

import asyncio
import logging
import sys
from typing import TextIO

from exporter.db import DatabaseError
from exporter.db.slot_checks import check_all
from exporter.db.slot_drop import SlotFound, drop_slot
from exporter.db.slot_setup import logical_queues, setup_script, slot_of, teardown_script
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


def check_logical(settings: Settings, *, warn: bool = True) -> list[str]:
    """ConfigError naming each refusal; else one line per logical queue saying what was
    checked. A database that does not answer is warned about (``warn``: in the log), not
    refused (its stream fails visibly until it is back); one that answers no (a grant missing,
    a login refused) is refused."""
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
        return []
    try:
        psycopg2_modules()
    except DatabaseError as exc:
        raise ConfigError(str(exc)) from None  # it names collect.counting: logical already
    problems, unchecked = asyncio.run(check_all(settings, target_of))
    if problems:
        raise ConfigError("\n".join(problems))
    why = dict(unchecked)
    for queue, reason in unchecked if warn else ():
        log.warning(
            "logical counting not checked now: the database cannot be reached",
            extra={"fields": {"queue": queue, "err": reason}},
        )
    return [
        f"queue {q.name}: counting logical NOT checked, the database cannot be reached "
        f"({why[q.name]})"
        if q.name in why
        else f"queue {q.name}: counting logical fits its server"
        for q in queues
        if q.database.dsn
    ]


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
    return _drop(settings)


def _drop(settings: Settings) -> int:
    """Drop the slot of every queue whose profile can stream, whatever its counting now (a
    queue moved back to polling is the usual case); 1 when nothing was dropped or one failed."""
    queues = [(q, t) for q in settings.queues if (t := target_of(q)) is not None]
    dropped: list[SlotFound] = []
    reverse: list[tuple[QueueSettings, LogicalTarget]] = []
    failed = False
    for queue, target in queues:
        slot = slot_of(queue)
        if not queue.database.dsn:
            _say(sys.stderr, f"queue {queue.name}: no database.dsn, slot {slot} not dropped")
            failed = True
            continue
        try:
            found = asyncio.run(drop_slot(queue, slot))
        except DatabaseError as exc:
            _say(sys.stderr, f"queue {queue.name}: slot {slot} not dropped: {exc}")
            failed = True
            continue
        if found is None:
            _say(sys.stdout, f"queue {queue.name}: no slot {slot} (nothing to drop)")
        else:
            _say(sys.stdout, f"queue {queue.name}: slot {slot} dropped{_kept(found)}")
            dropped.append(found)
        if found is not None or queue.collect.counting == "logical":
            reverse.append((queue, target))
    if not queues:
        _say(sys.stderr, "no queue's profile can count from a change stream: no slot to drop")
    elif not dropped and not failed:
        _say(sys.stderr, "nothing was dropped: no queue has a replication slot")
    sys.stdout.write(teardown_script(reverse))
    sys.stdout.flush()
    return 1 if failed or not dropped else 0


def _kept(slot: SlotFound) -> str:
    if slot.retained_bytes is None:
        return ""
    kept = slot.retained_bytes
    size = f"{kept / 2**20:.1f} MiB" if kept >= 2**20 else f"{kept} bytes"
    return f" (it kept {size} of WAL)"


def _say(stream: TextIO, line: str) -> None:
    stream.write(redact(line) + "\n")  # a server's error may echo what the DSN carried
