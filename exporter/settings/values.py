"""Setting values: every declared setting by key and flag, and one raw value (YAML, or the text
of a flag or environment variable) turned into its field's type, or the mistake named.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from exporter.settings.declaration import Setting, specs_of
from exporter.settings.kinds import PARSERS, Kind, show
from exporter.settings.schema import PROCESS_SECTIONS, QUEUE_SECTIONS
from exporter.settings.secrets import check_dsn
from exporter.settings.yamlfile import Document, suggest

QUEUES_KEY = "queues"
TABLE_KEY = "table"


def _all_settings() -> dict[str, Setting]:
    out: dict[str, Setting] = {}
    for sections in (QUEUE_SECTIONS, PROCESS_SECTIONS):
        for section, cls in sections.items():
            for s in specs_of(section, cls):
                out[s.key] = s
    return out


SETTINGS: dict[str, Setting] = _all_settings()
FLAGS: dict[str, str] = {s.flag: key for key, s in SETTINGS.items()}
SECTIONS = (*QUEUE_SECTIONS, TABLE_KEY, QUEUES_KEY, *PROCESS_SECTIONS)


def parse_value(setting: Setting, value: object, from_text: bool) -> object:
    """Turn one YAML value (or flag/environment text) into the field's type, or ValueError."""
    spec = setting.spec
    if spec.optional and (value is None or (from_text and isinstance(value, str) and not value)):
        return None
    if spec.secret and not isinstance(value, str):
        # A secret is never echoed back, not even its type's repr.
        raise ValueError(f"expected a string, got {type(value).__name__}")
    if spec.kind is Kind.DSN:
        assert isinstance(value, str)
        check_dsn(value)
    if spec.kind is Kind.STRING and value == "" and setting.key == "alerts.selector":
        return ""  # an empty selector matches every series
    parsed = PARSERS[spec.kind](value)
    if spec.choices:
        assert isinstance(parsed, str)
        parsed = dict(spec.aliases).get(parsed.lower(), parsed.lower())
        if parsed not in spec.choices:
            raise ValueError(f"expected one of {', '.join(spec.choices)}, got {show(value)}")
    if spec.check is not None:
        spec.check(parsed)
    return parsed


def section_values(
    document: Document, body: object, prefix: str, sections: Iterable[str], errors: list[str]
) -> dict[str, object]:
    """Flatten ``{section: {name: value}}`` (at ``prefix`` in the file) to dotted keys."""
    values: dict[str, object] = {}
    if not isinstance(body, dict):
        return values
    for section, content in body.items():
        where = f"{prefix}{section}"
        if section not in sections:
            continue
        if content is None:
            continue
        if not isinstance(content, dict):
            errors.append(
                f"{where}: expected a mapping of settings, got {show(content)}"
                + document.where(where)
            )
            continue
        for name, value in content.items():
            key = f"{section}.{name}"
            if not isinstance(name, str) or key not in SETTINGS:
                errors.append(
                    f"{prefix}{key}: unknown setting{suggest(key, SETTINGS)}"
                    + document.where(f"{prefix}{key}")
                )
                continue
            values[key] = value
    return values


def normalise_flag(name: str) -> str:
    """``--collect.statement-timeout`` (or ``collect.statement_timeout``) -> the dotted key."""
    flag = name if name.startswith("--") else "--" + name
    if flag in FLAGS:
        return FLAGS[flag]
    return name.removeprefix("--").replace("-", "_")


def parse_all(
    raw: Mapping[str, tuple[object, bool, str]], prefix: str, errors: list[str]
) -> dict[str, object]:
    parsed: dict[str, object] = {}
    for key, (value, from_text, where) in raw.items():
        try:
            parsed[key] = parse_value(SETTINGS[key], value, from_text)
        except ValueError as exc:
            errors.append(f"{prefix}{key}: {exc}{where}")
    return parsed
