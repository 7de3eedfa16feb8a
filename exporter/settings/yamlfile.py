"""The config file: YAML that refuses duplicate keys, with the line each key was written on.

PyYAML lets the last of two equal keys win silently; a typo'd copy of a section would then
replace the real one without a word. Errors name the file and line, never quote its text (a
line may hold a password).
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import yaml

from exporter.redaction import redact
from exporter.settings.kinds import show
from exporter.settings.secrets import SecretError, read_text_file


class ConfigError(Exception):
    """A setting is missing, malformed or unknown; the message names the key (and line)."""


def suggest(word: str, candidates: Iterable[str]) -> str:
    """`` (did you mean X?)`` for a near miss, else nothing."""
    close = difflib.get_close_matches(word, list(candidates), n=1, cutoff=0.7)
    return f" (did you mean {close[0]}?)" if close else ""


class _Loader(yaml.SafeLoader):
    """A safe loader that refuses duplicate keys (YAML lets the last one win silently)."""


def _construct_mapping(loader: _Loader, node: yaml.MappingNode, deep: bool = False) -> Any:
    seen: dict[Any, int] = {}
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=True)
        line = key_node.start_mark.line + 1
        try:
            first = seen.get(key)
        except TypeError:  # an unhashable key; the mapping constructor reports it
            continue
        if first is not None:
            raise yaml.constructor.ConstructorError(
                None,
                None,
                f"duplicate key {show(key)} (first at line {first})",
                key_node.start_mark,
            )
        seen[key] = line
    return loader.construct_mapping(node, deep=deep)


_Loader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)


@dataclass
class Document:
    """A parsed config file: its mapping, and the line each dotted key was written on."""

    path: str
    data: dict[str, Any]
    lines: dict[str, int] = field(default_factory=dict)

    def where(self, key: str) -> str:
        """`` (FILE:LINE)`` for a key written in the file, else nothing."""
        line = self.lines.get(key)
        return f" ({self.path}:{line})" if line else ""


def _index_lines(node: yaml.Node, prefix: str, lines: dict[str, int]) -> None:
    if isinstance(node, yaml.MappingNode):
        for key_node, value_node in node.value:
            if isinstance(key_node, yaml.ScalarNode):
                key = f"{prefix}.{key_node.value}" if prefix else str(key_node.value)
                lines[key] = key_node.start_mark.line + 1
                _index_lines(value_node, key, lines)
    elif isinstance(node, yaml.SequenceNode):
        for index, item in enumerate(node.value):
            key = f"{prefix}[{index}]"
            lines[key] = item.start_mark.line + 1
            _index_lines(item, key, lines)


def read_document(path: str) -> Document:
    """Read and parse the config file; errors name the file and line, never quote its text."""
    try:
        text = read_text_file(path)
    except SecretError as exc:
        raise ConfigError(f"{path}: {exc}") from None
    try:
        data = yaml.load(text, Loader=_Loader)  # a SafeLoader subclass: plain data only
        root = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = f"{path}:{mark.line + 1}:{mark.column + 1}" if mark else path
        problem = " ".join(part for part in (exc.context, exc.problem) if part)
        what = "" if isinstance(exc, yaml.constructor.ConstructorError) else "YAML syntax error: "
        raise ConfigError(f"{where}: {what}{redact(problem)}") from None
    except (yaml.YAMLError, RecursionError, ValueError, OverflowError) as exc:
        raise ConfigError(f"{path}: YAML error: {redact(str(exc))[:200]}") from None
    if data is None:
        return Document(path, {})
    if not isinstance(data, dict):
        raise ConfigError(
            f"{path}: the top level must be a mapping of sections, got {type(data).__name__}"
        )
    lines: dict[str, int] = {}
    if root is not None:
        _index_lines(root, "", lines)
    return Document(path, data, lines)
