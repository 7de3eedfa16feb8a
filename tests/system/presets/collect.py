"""Runs a preset reader's cycles against a live database, the way the exporter's db layer would."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import Counter
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

import asyncpg

from exporter.profiles.base import Query, Reading, Results, Row
from exporter.profiles.pgqueuer import HEARTBEAT_REASON
from exporter.vocabulary import ERROR, LEASE_EXPIRED


class CycleReader(Protocol):
    """The interface every preset reader offers (docs/presets.md, "Interface")."""

    def horizon_query(self) -> Query: ...

    def queries(self, horizon: Row) -> list[Query]: ...

    def apply(self, results: Results) -> Reading: ...


def as_counted(counters: dict[str, dict[Any, int]]) -> dict[str, dict[Any, int]]:
    """A library's own record as the exporter counts it (docs/presets.md, "In the exporter"):
    reasons bounded (a heartbeat re-pick is a lost lease, anything else an error), requeues by
    hand only (every retry minus the failed attempts that did not die), no zeros."""

    def reason(found: str) -> str:
        return LEASE_EXPIRED if found == HEARTBEAT_REASON else ERROR

    out: dict[str, Counter[Any]] = {name: Counter() for name in counters}
    for name in ("enqueued", "completed", "cancelled"):
        out[name].update(counters.get(name, {}))
    for name in ("failures", "dead"):
        for (job_type, found), n in counters.get(name, {}).items():
            out[name][(job_type, reason(found))] += n
    by_hand: Counter[str] = Counter(counters.get("requeued", {}))
    for (job_type, _), n in counters.get("failures", {}).items():
        by_hand[job_type] -= n
    for (job_type, _), n in counters.get("dead", {}).items():
        by_hand[job_type] += n
    out["requeued"] = Counter({job_type: n for job_type, n in by_hand.items() if n > 0})
    return {name: {k: v for k, v in found.items() if v} for name, found in out.items()}


@dataclass
class CycleTiming:
    """Wall time of each statement of one cycle, in seconds."""

    statements: dict[str, float] = field(default_factory=dict)

    @property
    def total(self) -> float:
        """The whole cycle's statement time."""
        return sum(self.statements.values())


async def run_cycle(
    conn: asyncpg.Connection, reader: CycleReader, timing: CycleTiming | None = None
) -> Reading:
    """One collection: the horizon in autocommit, then one REPEATABLE READ, READ ONLY transaction."""

    async def timed(query: Query) -> list[Any]:
        started = time.perf_counter()
        rows: list[Any] = await conn.fetch(query.sql, *query.args)
        if timing is not None:
            timing.statements[query.name] = time.perf_counter() - started
        return rows

    horizon = await timed(reader.horizon_query())
    results: dict[str, list[Any]] = {}
    async with conn.transaction(isolation="repeatable_read", readonly=True):
        for query in reader.queries(horizon[0]):
            results[query.name] = await timed(query)
    return reader.apply(results)


@dataclass
class Poller:
    """Polls a reader every ``interval`` seconds in the background and keeps every reading."""

    dsn: str
    reader: CycleReader
    interval: float = 0.5
    readings: list[Reading] = field(default_factory=list)
    error: BaseException | None = None
    _cycle_done: asyncio.Event = field(default_factory=asyncio.Event)

    async def _loop(self) -> None:
        conn = await asyncpg.connect(
            self.dsn, server_settings={"application_name": "preset-poller"}
        )
        try:
            while True:
                self.readings.append(await run_cycle(conn, self.reader))
                self._cycle_done.set()
                await asyncio.sleep(self.interval)
        except asyncio.CancelledError:
            raise
        except BaseException as exc:
            self.error = exc
            self._cycle_done.set()
            raise
        finally:
            await conn.close()

    async def cycles(self, count: int, within: float = 30.0) -> None:
        """Wait until ``count`` more cycles have finished."""
        target = len(self.readings) + count
        await self.until(lambda: len(self.readings) >= target, within)

    async def until(self, condition: Callable[[], bool], within: float = 30.0) -> None:
        """Wait until ``condition()`` holds after some cycle; fail on a reader error."""
        deadline = time.monotonic() + within
        while not condition():
            if self.error is not None:
                raise AssertionError(f"the reader failed: {self.error!r}") from self.error
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise AssertionError(f"condition not reached in {within} s")
            self._cycle_done.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._cycle_done.wait(), remaining)

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[Poller]:
        """Run the loop for the duration of the block, and wait for the counting baseline."""
        task = asyncio.create_task(self._loop())
        try:
            await self.until(lambda: bool(self.readings) and self.readings[-1].counting)
            yield self
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        if self.error is not None:
            raise AssertionError(f"the reader failed: {self.error!r}") from self.error


async def wait_for(
    probe: Callable[[], Any], what: str, within: float = 60.0, interval: float = 0.1
) -> Any:
    """Poll an async probe until it returns something truthy; fail with ``what`` on timeout."""
    deadline = time.monotonic() + within
    while True:
        value = await probe()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {within} s waiting for {what}")
        await asyncio.sleep(interval)
