"""``python -m bench.held``: the tracker's memory per finished job kept while the horizon is held.

While a long transaction holds the horizon back, the change cursor's floor stays put and every
job that finishes meanwhile stays in the tracker (jobqueue_exporter_held_jobs) until the floor
passes it. This feeds the tracker rows the way the change query returns them (a uuid job_id as
text, floats for the timestamps) and measures with tracemalloc what stays allocated once the
rows themselves are gone: the bytes per held job quoted in docs/exactness.md.
"""

from __future__ import annotations

import argparse
import gc
import tracemalloc
import uuid

from exporter.counting.tracker import Tracker, TrackerOptions
from exporter.model import DEAD, DONE, JobRow, JobTypeLabels, Tallies

START = 1_800_000_000.0


def finished_rows(n: int, status: int, error: str | None) -> list[JobRow]:
    """``n`` jobs finished after the baseline, one row each, as the change query reads them."""
    rows = []
    for i in range(n):
        at = START + 1.0 + i * 1e-3
        message = None if error is None else f"{error} {i}"
        job_id = str(uuid.uuid4())
        row = JobRow(job_id, i % 5, status, 1, 3, message, None, at - 2, at - 1, at - 2, at)
        rows.append(row)
    return rows


def bytes_per_held_job(n: int, status: int, error: str | None) -> tuple[int, float]:
    """Held jobs and the bytes each keeps, after feeding ``n`` finished rows."""
    tallies = Tallies((1.0, 10.0), (1.0, 10.0), (1.0, 10.0))
    tracker = Tracker(TrackerOptions(commit_lag_tolerance=30.0), JobTypeLabels({}, 50), tallies)
    tracker.baseline(START, [], [], origin=START)  # the floor stays at the baseline: held
    gc.collect()
    tracemalloc.start()  # before the rows: their job_id strings and floats are what stays
    before = tracemalloc.get_traced_memory()[0]
    rows = finished_rows(n, status, error)
    tracker.begin()
    tracker.feed(rows)
    tracker.finish(START + n * 1e-3 + 2.0, floor=START)
    del rows  # what the rows alone held goes; what the tracker keeps of them stays
    gc.collect()
    kept = tracemalloc.get_traced_memory()[0] - before
    tracemalloc.stop()
    return tracker.held, kept / tracker.held


def main() -> None:
    """Print the bytes per held job for done jobs and for dead jobs with an error message."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--jobs", type=int, default=100_000)
    args = parser.parse_args()
    for name, status, error in (("done", DONE, None), ("dead", DEAD, "ValueError: boom")):
        held, per_job = bytes_per_held_job(args.jobs, status, error)
        print(f"{name}: {held:,} held jobs, {per_job:.0f} bytes each")


if __name__ == "__main__":
    main()
