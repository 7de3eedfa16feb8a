"""How a setting is declared: its kind, default, help, flag and environment variable, in one place.

A settings dataclass declares each field with :func:`setting`; the loader, the command line,
``--help`` and docs/configuration.md all read the declaration back with :func:`specs_of`.
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from exporter.settings.kinds import Kind

ENV_PREFIX = "JOBQUEUE_EXPORTER_"
_SPEC = "jobqueue_exporter.spec"


@dataclass(frozen=True)
class Spec:
    """What one field declares about itself (the key comes from where it is declared)."""

    kind: Kind
    help: str
    optional: bool = False  # None is a value (written null in YAML, empty in a flag)
    choices: tuple[str, ...] = ()
    # Other spellings of a choice, as (alias, choice) pairs: what users type for a library's name.
    aliases: tuple[tuple[str, str], ...] = ()
    check: Callable[[Any], None] | None = None  # raises ValueError beyond what the kind checks
    flag: str | None = None  # when the Go exporters spell it otherwise than the key
    env: str | None = None  # likewise for the environment variable
    secret: bool = False  # never echoed, not even its type
    # Says which queue an entry of a queues: list is (its DSN, table, slot): the entry's own
    # value wins over a flag or environment variable, which only fills in where it names none.
    per_queue: bool = False
    # The command whose --help lists the flag (None: every command that takes its section);
    # the others take it unlisted, which keeps the main --help short.
    listed_in: str | None = None
    # Where the choices are listed, when there are too many for --help to list them.
    choices_in: str | None = None


def setting(kind: Kind, default: object, help: str, **options: Any) -> Any:
    """Declare a settings field: ``interval: float = setting(Kind.DURATION, 15.0, "...")``."""
    spec = Spec(kind, help, **options)
    if isinstance(default, dict | list | set):
        return dataclasses.field(default_factory=lambda: copy.copy(default), metadata={_SPEC: spec})
    return dataclasses.field(default=default, metadata={_SPEC: spec})


@dataclass(frozen=True)
class Setting:
    """One declared field with its dotted key, as the loader and the docs see it."""

    section: str
    name: str
    spec: Spec
    default: object

    @property
    def key(self) -> str:
        """The dotted key, which is also the YAML path."""
        return f"{self.section}.{self.name}"

    @property
    def kind(self) -> Kind:
        """The kind of value."""
        return self.spec.kind

    @property
    def flag(self) -> str:
        """The command-line flag, Go-exporter style (``--collect.statement-timeout``)."""
        return self.spec.flag or "--" + self.key.replace("_", "-")

    @property
    def env(self) -> str:
        """The environment variable that sets it."""
        return self.spec.env or ENV_PREFIX + self.key.replace(".", "_").upper()


def specs_of(section: str, cls: type) -> Iterator[Setting]:
    """The declared fields of one settings dataclass, in declaration order."""
    for f in dataclasses.fields(cls):
        spec = f.metadata.get(_SPEC)
        if spec is None:
            continue
        if f.default is not dataclasses.MISSING:
            default: object = f.default
        elif f.default_factory is not dataclasses.MISSING:
            default = f.default_factory()
        else:
            raise TypeError(f"setting {section}.{f.name} has no default")
        yield Setting(section, f.name, spec, default)
