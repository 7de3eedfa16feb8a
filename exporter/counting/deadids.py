"""The ids of dead jobs the tracker does not keep, so that a requeue is told from a new job.

A row the tracker has never seen is a requeue only if its job was DEAD when last read: at the
baseline (every dead id is read once then), or dead and forgotten since. Nothing else says so:
``created_at`` does not (an archive restore inserts old timestamps, a transaction prepared
before the baseline commits rows created before it). The ids are kept as 64-bit hashes in a
sorted ``array('Q')`` (8 bytes each: 8 MB for a million dead letters), with small sets for the
changes since the last rebuild. Two ids collide with probability 2^-64 per pair: with a million
dead ids a new job is taken for a requeue with probability about 5e-14. The hash is Python's
own (SipHash, salted per process): the set lives only in this process's memory. No I/O.
"""

from __future__ import annotations

from array import array
from bisect import bisect_left
from collections.abc import Iterable

_MASK = (1 << 64) - 1
# Changes are folded into the sorted array once they outnumber this (and an eighth of it).
_REBUILD_AT = 4096


def _key(job_id: str) -> int:
    return hash(job_id) & _MASK


class DeadIds:
    """A compact set of job ids (64-bit hashes); see the module's docstring for its error rate."""

    def __init__(self, job_ids: Iterable[str] = ()) -> None:
        # job_ids are a primary key's: unique, so no set is built (it would triple the peak).
        self._sorted = array("Q", sorted(map(_key, job_ids)))
        self._added: set[int] = set()
        self._removed: set[int] = set()  # keys of _sorted no longer in the set

    def __len__(self) -> int:
        return len(self._sorted) - len(self._removed) + len(self._added)

    def __contains__(self, job_id: object) -> bool:
        if not isinstance(job_id, str):
            return False
        key = _key(job_id)
        if key in self._added:
            return True
        return key not in self._removed and self._in_sorted(key)

    def add(self, job_id: str) -> None:
        """Remember a job as dead."""
        key = _key(job_id)
        if self._in_sorted(key):
            self._removed.discard(key)
        else:
            self._added.add(key)
        self._maybe_rebuild()

    def discard(self, job_id: str) -> None:
        """Forget a job (requeued, or known to the tracker again)."""
        key = _key(job_id)
        self._added.discard(key)
        if self._in_sorted(key):
            self._removed.add(key)
        self._maybe_rebuild()

    def nbytes(self) -> int:
        """Approximate memory held, in bytes (the array, and about 60 bytes per pending change)."""
        return self._sorted.itemsize * len(self._sorted) + 60 * (
            len(self._added) + len(self._removed)
        )

    def _in_sorted(self, key: int) -> bool:
        at = bisect_left(self._sorted, key)
        return at < len(self._sorted) and self._sorted[at] == key

    def _maybe_rebuild(self) -> None:
        changes = len(self._added) + len(self._removed)
        if changes < _REBUILD_AT or changes * 8 < len(self._sorted):
            return
        keys = set(self._sorted) - self._removed
        keys |= self._added
        self._sorted = array("Q", sorted(keys))
        self._added.clear()
        self._removed.clear()
