"""pgoutput v1 messages built by hand, as PostgreSQL's proto.c writes them, for the stream's
unit tests; the captured fixture (fixtures/pgoutput_job_lifecycle.json) is the real thing."""

from __future__ import annotations

import base64
import json
import struct
from collections.abc import Sequence
from pathlib import Path

from exporter.db.pgoutput import POSTGRES_EPOCH

FIXTURE = Path(__file__).parent / "fixtures" / "pgoutput_job_lifecycle.json"
Value = str | bytes | None  # bytes: sent as they are (malformed text); "u" alone: unchanged TOAST
TOAST = object()  # an unchanged TOASTed value


def captured() -> list[bytes]:
    """One job's life on the reference table, as a pgoutput slot streamed it."""
    return [base64.b64decode(text) for text in json.loads(FIXTURE.read_text())["messages"]]


def _micros(at: float) -> int:
    return round((at - POSTGRES_EPOCH) * 1_000_000)


def begin(final_lsn: int, at: float = POSTGRES_EPOCH + 1.0, xid: int = 1) -> bytes:
    """Begin: the commit's LSN, its time, the transaction id."""
    return b"B" + struct.pack(">QqI", final_lsn, _micros(at), xid)


def commit(commit_lsn: int, end_lsn: int, at: float = POSTGRES_EPOCH + 1.0) -> bytes:
    """Commit: no flags, the commit record's LSN and end, the time."""
    return b"C" + struct.pack(">BQQq", 0, commit_lsn, end_lsn, _micros(at))


def relation(
    oid: int, name: str, columns: Sequence[str], keys: Sequence[str] = (), identity: str = "f"
) -> bytes:
    """Relation: namespace public, the replica identity, each column with its key flag."""
    out = b"R" + struct.pack(">I", oid) + b"public\0" + name.encode() + b"\0" + identity.encode()
    out += struct.pack(">h", len(columns))
    for column in columns:
        flag = 1 if column in keys or identity == "f" else 0
        out += struct.pack(">B", flag) + column.encode() + b"\0" + struct.pack(">Ii", 25, -1)
    return out


def tuple_data(values: Sequence[Value | object]) -> bytes:
    """TupleData: 'n' for None, 'u' for TOAST, 't' with the UTF-8 text (or the bytes) else."""
    out = struct.pack(">h", len(values))
    for value in values:
        if value is None:
            out += b"n"
        elif value is TOAST:
            out += b"u"
        else:
            raw = value if isinstance(value, bytes) else str(value).encode()
            out += b"t" + struct.pack(">i", len(raw)) + raw
    return out


def insert(oid: int, new: Sequence[Value | object]) -> bytes:
    """Insert of a new row."""
    return b"I" + struct.pack(">I", oid) + b"N" + tuple_data(new)


def update(
    oid: int,
    new: Sequence[Value | object],
    old: Sequence[Value | object] | None = None,
    *,
    key: bool = False,
) -> bytes:
    """Update: the old row ('O' whole, 'K' its key) when given, then the new row."""
    head = b"U" + struct.pack(">I", oid)
    if old is not None:
        head += (b"K" if key else b"O") + tuple_data(old)
    return head + b"N" + tuple_data(new)


def delete(oid: int, old: Sequence[Value | object], *, key: bool = False) -> bytes:
    """Delete of a row, its old row whole ('O') or its key ('K')."""
    return b"D" + struct.pack(">I", oid) + (b"K" if key else b"O") + tuple_data(old)
