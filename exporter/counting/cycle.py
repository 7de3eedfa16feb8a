"""What a counting mode and the database layer exchange: statements out, rows in.

No I/O: a counting mode hands out :class:`Query` values, the database layer runs them (see
docs/presets.md, "Interface") and passes the rows back.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

Row = Mapping[str, Any]
Results = Mapping[str, Sequence[Row]]


class CountingError(Exception):
    """Counting exactly is impossible with what the database shows (privileges, schema).

    ``reason`` is the collection-error reason the exporter reports it under.
    """

    def __init__(self, message: str, reason: str = "schema") -> None:
        super().__init__(message)
        self.reason = reason


# The name the preset readers know it by.
PresetError = CountingError


@dataclass(frozen=True)
class Query:
    """One named statement with its positional arguments ($1, $2, ...)."""

    name: str
    sql: str
    args: tuple[Any, ...] = ()
