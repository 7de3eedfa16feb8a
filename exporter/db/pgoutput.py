"""pgoutput, protocol version 1: one replication message's bytes into a plain value.

The formats are PostgreSQL's "Logical Replication Message Formats" (protocol chapter). Only
what a publication of one table sends with ``proto_version 1`` is decoded: Begin, Commit,
Origin, Relation, Type, Insert, Update, Delete and Truncate. A prepared transaction arrives as
an ordinary Begin ... Commit at its COMMIT PREPARED while the slot's ``two_phase`` is off, which
is the default. Values arrive as the server's text output (UTF-8: the stream asks for it, and
anything else is refused, never replaced); turning them into numbers is the caller's business.

Two ways in. :func:`decode` turns any message into a frozen value, for the rare ones (Relation,
Truncate) and for tests. The replication thread reads the frequent ones, a transaction's Begin,
Commit and row changes, with :func:`begin_of`, :func:`commit_of` and :func:`read_row`: fixed
offsets and precompiled structs over the payload, and only the columns it counts decoded (a
row's other values are stepped over by their length). Both refuse what is not pgoutput v1.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

# Commit timestamps count microseconds from 2000-01-01 00:00 UTC; this is that instant as Unix
# time, so callers get the seconds every other time in the exporter is kept in.
POSTGRES_EPOCH: Final = 946_684_800.0


class PgoutputError(ValueError):
    """A message that is not valid pgoutput v1 (truncated, unknown kind, bad tuple)."""


class Unchanged:
    """A TOASTed value the UPDATE did not change: the server sends a marker, not the value."""

    def __repr__(self) -> str:
        return "UNCHANGED"


UNCHANGED: Final = Unchanged()

Value = str | Unchanged | None


@dataclass(frozen=True)
class Begin:
    """A transaction starts; ``final_lsn`` is where its commit record ends."""

    final_lsn: int
    commit_time: float
    xid: int


@dataclass(frozen=True)
class Commit:
    """A transaction ends: every change between its Begin and here committed at once."""

    commit_lsn: int
    end_lsn: int
    commit_time: float


@dataclass(frozen=True)
class Origin:
    """The transaction was replayed from another node (logical replication in a chain)."""

    lsn: int
    name: str


@dataclass(frozen=True)
class Relation:
    """A table's shape, sent before its first change and again after any ALTER; ``keys`` marks
    the columns of its replica identity (all of them under REPLICA IDENTITY FULL)."""

    oid: int
    namespace: str
    name: str
    replica_identity: str
    columns: tuple[str, ...]
    keys: tuple[bool, ...] = ()


@dataclass(frozen=True)
class TypeInfo:
    """A non-builtin type's name (an enum status column, say), sent before its first use."""

    oid: int
    namespace: str
    name: str


@dataclass(frozen=True)
class Insert:
    """A new row."""

    relation: int
    new: tuple[Value, ...]


@dataclass(frozen=True)
class Update:
    """A changed row; ``old`` is the whole old row under REPLICA IDENTITY FULL, its key columns
    when an identity column changed, and None when the identity's columns did not change."""

    relation: int
    old: tuple[Value, ...] | None
    old_is_key: bool
    new: tuple[Value, ...]


@dataclass(frozen=True)
class Delete:
    """A removed row: the whole old row (FULL) or its identity columns only."""

    relation: int
    old: tuple[Value, ...]
    old_is_key: bool


@dataclass(frozen=True)
class Truncate:
    """TRUNCATE of published tables: the rows go without a Delete each."""

    relations: tuple[int, ...]
    cascade: bool
    restart_identity: bool


Message = Begin | Commit | Origin | Relation | TypeInfo | Insert | Update | Delete | Truncate


_STRUCTS: dict[str, struct.Struct] = {}


class _Reader:
    """A cursor over one message's bytes; every read checks that the bytes are there."""

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.at = 0

    def take(self, size: int) -> bytes:
        end = self.at + size
        if size < 0 or end > len(self.data):
            raise PgoutputError(f"message ends at byte {len(self.data)}, wanted {end}")
        chunk = self.data[self.at : end]
        self.at = end
        return chunk

    def unpack(self, fmt: str) -> int:
        packer = _STRUCTS.get(fmt)
        if packer is None:
            packer = _STRUCTS[fmt] = struct.Struct(fmt)
        end = self.at + packer.size
        if end > len(self.data):
            raise PgoutputError(f"message ends at byte {len(self.data)}, wanted {end}")
        (value,) = packer.unpack_from(self.data, self.at)
        self.at = end
        return int(value)

    def string(self) -> str:
        end = self.data.find(b"\0", self.at)
        if end < 0:
            raise PgoutputError("a string has no terminating NUL")
        text = _text(self.data[self.at : end])
        self.at = end + 1
        return text

    def time(self) -> float:
        return POSTGRES_EPOCH + self.unpack(">q") / 1_000_000

    def tuple(self) -> tuple[Value, ...]:
        values: list[Value] = []
        for _ in range(self.unpack(">h")):
            kind = self.take(1)
            if kind == b"n":
                values.append(None)
            elif kind == b"u":
                values.append(UNCHANGED)
            elif kind == b"t":
                values.append(_text(self.take(self.unpack(">i"))))
            else:
                raise PgoutputError(f"unknown column kind {kind!r} in a tuple")
        return tuple(values)

    def done(self) -> None:
        if self.at != len(self.data):
            raise PgoutputError(f"{len(self.data) - self.at} bytes left after the message")


def _text(raw: bytes) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise PgoutputError(f"a value is not UTF-8 ({exc.reason} at byte {exc.start})") from None


def decode(payload: bytes) -> Message:
    """Decode one pgoutput v1 message; raise PgoutputError when it is not one."""
    r = _Reader(payload)
    kind = r.take(1)
    read = _DECODERS.get(kind)
    if read is None:
        raise PgoutputError(f"unknown pgoutput message kind {kind!r}")
    message = read(r)
    r.done()
    return message


def _begin(r: _Reader) -> Begin:
    return Begin(final_lsn=r.unpack(">Q"), commit_time=r.time(), xid=r.unpack(">I"))


def _commit(r: _Reader) -> Commit:
    r.take(1)  # flags: none are defined
    return Commit(commit_lsn=r.unpack(">Q"), end_lsn=r.unpack(">Q"), commit_time=r.time())


def _origin(r: _Reader) -> Origin:
    return Origin(lsn=r.unpack(">Q"), name=r.string())


def _relation(r: _Reader) -> Relation:
    oid, namespace, name = r.unpack(">I"), r.string(), r.string()
    identity = chr(r.unpack(">B"))
    columns: list[str] = []
    keys: list[bool] = []
    for _ in range(r.unpack(">h")):
        keys.append(bool(r.unpack(">B") & 1))  # flags: 1 marks a column of the identity
        columns.append(r.string())
        r.take(8)  # type oid and typmod: the values arrive as text anyway
    return Relation(oid, namespace, name, identity, tuple(columns), tuple(keys))


def _type(r: _Reader) -> TypeInfo:
    return TypeInfo(oid=r.unpack(">I"), namespace=r.string(), name=r.string())


def _insert(r: _Reader) -> Insert:
    relation = r.unpack(">I")
    if r.take(1) != b"N":
        raise PgoutputError("an Insert without its new tuple")
    return Insert(relation, r.tuple())


def _update(r: _Reader) -> Update:
    relation = r.unpack(">I")
    marker = r.take(1)
    old: tuple[Value, ...] | None = None
    old_is_key = marker == b"K"
    if marker in (b"K", b"O"):
        old = r.tuple()
        marker = r.take(1)
    if marker != b"N":
        raise PgoutputError("an Update without its new tuple")
    return Update(relation, old, old_is_key, r.tuple())


def _delete(r: _Reader) -> Delete:
    relation = r.unpack(">I")
    marker = r.take(1)
    if marker not in (b"K", b"O"):
        raise PgoutputError("a Delete without its old tuple")
    return Delete(relation, r.tuple(), marker == b"K")


def _truncate(r: _Reader) -> Truncate:
    count = r.unpack(">I")
    options = r.unpack(">B")
    relations = tuple(r.unpack(">I") for _ in range(count))
    return Truncate(relations, cascade=bool(options & 1), restart_identity=bool(options & 2))


_DECODERS: Final[dict[bytes, Callable[[_Reader], Message]]] = {
    b"B": _begin,
    b"C": _commit,
    b"O": _origin,
    b"R": _relation,
    b"Y": _type,
    b"I": _insert,
    b"U": _update,
    b"D": _delete,
    b"T": _truncate,
}


# --- The replication thread's path: fixed offsets, only the kept columns decoded ----------

_BEGIN: Final = struct.Struct(">QqI")  # final LSN, commit time (µs since 2000), xid
_COMMIT: Final = struct.Struct(">BQQq")  # flags, commit LSN, end LSN, commit time
_OID: Final = struct.Struct(">I")
_LSN: Final = struct.Struct(">Q")
_COUNT: Final = struct.Struct(">h")
# A value's length, read unsigned: a negative one (never sent) then runs past the message's end,
# which the checks below catch, instead of walking backwards.
_SIZE: Final = struct.Struct(">I")


def begin_of(data: bytes) -> tuple[int, float]:
    """A Begin's final LSN (where its commit record is) and commit time, in Unix seconds."""
    if len(data) != 1 + _BEGIN.size:
        raise PgoutputError(f"a Begin of {len(data)} bytes, not {1 + _BEGIN.size}")
    lsn, micros, _ = _BEGIN.unpack_from(data, 1)
    return int(lsn), POSTGRES_EPOCH + micros / 1_000_000


def begin_lsn(data: bytes) -> int:
    """A Begin's final LSN alone: whether the transaction was counted before."""
    if len(data) != 1 + _BEGIN.size:
        raise PgoutputError(f"a Begin of {len(data)} bytes, not {1 + _BEGIN.size}")
    return int(_LSN.unpack_from(data, 1)[0])


def commit_of(data: bytes) -> int:
    """A Commit's end LSN: where the slot may be confirmed once its transaction is counted."""
    if len(data) != 1 + _COMMIT.size:
        raise PgoutputError(f"a Commit of {len(data)} bytes, not {1 + _COMMIT.size}")
    return int(_COMMIT.unpack_from(data, 1)[2])


def relation_of(data: bytes) -> int:
    """The OID of the relation an Insert, Update or Delete changes."""
    if len(data) < 1 + _OID.size:
        raise PgoutputError("a change without its relation")
    return int(_OID.unpack_from(data, 1)[0])


# The replication thread reads every change through these two, written for speed: the kinds as
# byte values ('t' 116, 'n' 110, 'u' 117), the struct bound once.
def read_row(
    data: bytes,
    at: int,
    names: tuple[str | None, ...],
    _size: Callable[[bytes, int], tuple[int, ...]] = _SIZE.unpack_from,
) -> tuple[dict[str, str | None], int]:
    """The TupleData at ``at``: the values of the columns ``names`` names, by position (None
    steps over a column without decoding it), and the offset after it. An unchanged TOASTed
    value is left out (unknown, which is not NULL). The tuple must have a value for each name:
    a relation and a row that disagree are refused."""
    try:
        if _COUNT.unpack_from(data, at)[0] != len(names):
            raise PgoutputError("a tuple whose columns are not its relation's")
        at += 2
        row: dict[str, str | None] = {}
        for name in names:
            kind = data[at]
            if kind == 116:
                end = at + 5 + _size(data, at + 1)[0]
                if name is not None:
                    row[name] = data[at + 5 : end].decode()
                at = end
            elif kind == 110:
                at += 1
                if name is not None:
                    row[name] = None
            elif kind == 117:
                at += 1
            else:
                raise PgoutputError(f"unknown column kind {bytes([kind])!r} in a tuple")
    except (struct.error, IndexError):
        raise PgoutputError("a tuple runs past the end of its message") from None
    except UnicodeDecodeError as exc:
        raise PgoutputError(f"a value is not UTF-8 ({exc.reason} at byte {exc.start})") from None
    if at > len(data):
        raise PgoutputError("a tuple runs past the end of its message")
    return row, at


def value_at(
    data: bytes,
    at: int,
    index: int,
    _size: Callable[[bytes, int], tuple[int, ...]] = _SIZE.unpack_from,
) -> Value:
    """The value of column ``index`` of the TupleData at ``at``, the columns before it stepped
    over: enough to tell an update that counts nothing, without reading its whole row."""
    try:
        if not 0 <= index < _COUNT.unpack_from(data, at)[0]:
            raise PgoutputError(f"a tuple without column {index}")
        at += 2
        for _ in range(index):
            at += 5 + _size(data, at + 1)[0] if data[at] == 116 else 1
        kind = data[at]
        if kind == 116:
            end = at + 5 + _size(data, at + 1)[0]
            if end > len(data):
                raise PgoutputError("a value runs past the end of its message")
            return data[at + 5 : end].decode()
        if kind == 110:
            return None
        if kind == 117:
            return UNCHANGED
        raise PgoutputError(f"unknown column kind {bytes([kind])!r} in a tuple")
    except (struct.error, IndexError):
        raise PgoutputError("a tuple runs past the end of its message") from None
    except UnicodeDecodeError as exc:
        raise PgoutputError(f"a value is not UTF-8 ({exc.reason} at byte {exc.start})") from None
