"""The "Every setting" tables of docs/configuration.md, generated from the declarations.

A test compares the document with :func:`reference_tables`, so the documentation cannot drift
from what the loader accepts.
"""

from __future__ import annotations

from exporter.settings.declaration import Setting, specs_of
from exporter.settings.kinds import SYNTAX, Kind
from exporter.settings.schema import DSN_FALLBACK_ENV, PROCESS_SECTIONS, QUEUE_SECTIONS
from exporter.settings.table import NAIVE_TIME, ROLES, STATUS_NAMES, UNREAD_ROLES, USABLE

_UNITS = (("d", 86400.0), ("h", 3600.0), ("m", 60.0), ("s", 1.0))


def format_duration(seconds: float) -> str:
    """A duration as the settings write it: ``15s``, ``1h30m``, ``500ms``."""
    millis = round(seconds * 1000)
    if millis == 0:
        return "0s"
    out = []
    for unit, size in _UNITS:
        count, millis = divmod(millis, round(size * 1000))
        if count:
            out.append(f"{count}{unit}")
    if millis:
        out.append(f"{millis}ms")
    return "".join(out)


def default_text(setting: Setting) -> str | None:
    """The default as a user would write it in a flag, or None when there is no value."""
    value = setting.default
    if value is None or value == {}:
        return None
    if setting.kind is Kind.DURATION and isinstance(value, int | float):
        return format_duration(float(value))
    if setting.kind is Kind.JSON_PATH and isinstance(value, tuple):
        return ".".join(value)
    if setting.kind in (Kind.BUCKETS, Kind.LISTEN_ADDRESS) and isinstance(value, tuple):
        return ",".join(f"{v:g}" if isinstance(v, float | int) else v for v in value)
    if isinstance(value, bool):
        return str(value).lower()
    return str(value)


def _default(setting: Setting) -> str:
    text = default_text(setting)
    if text is not None and setting.kind is Kind.DURATION:
        return text
    if text is not None:
        return f"`{text}`"
    return "null" if setting.default is None else "none"


def _kind(setting: Setting) -> str:
    text = setting.kind.value
    if setting.spec.choices:
        text = "one of " + ", ".join(setting.spec.choices)
        if setting.spec.aliases:
            text += " (also " + ", ".join(f"{a} for {c}" for a, c in setting.spec.aliases) + ")"
    return text + (" or null" if setting.spec.optional else "")


def _env(setting: Setting) -> str:
    text = f"`{setting.env}`"
    if setting.key == "database.dsn":
        text += f", `{DSN_FALLBACK_ENV}`"
    return text


def reference_tables() -> str:
    """One Markdown table per section, and the syntax of each kind."""
    out: list[str] = []
    for sections in (QUEUE_SECTIONS, PROCESS_SECTIONS):
        for section, cls in sections.items():
            out.append(f"### `{section}`\n")
            out.append("| Key | Flag | Environment variable | Kind | Default | Meaning |")
            out.append("|---|---|---|---|---|---|")
            for s in specs_of(section, cls):
                help_text = s.spec.help.replace("|", "\\|")
                out.append(
                    f"| `{s.key}` | `{s.flag}` | {_env(s)} | {_kind(s)} | {_default(s)} "
                    f"| {help_text} |"
                )
            out.append("")
    out.append("### `table`\n")
    out.append(
        'A queue\'s `table:` mapping (docs/configuration.md, "A home-grown table"): '
        "`name`, the column of each role below under `columns` (an omitted role keeps its "
        "reference name; `result: null` for a table without one), `status_values` for "
        + ", ".join(f"`{s}`" for s in STATUS_NAMES)
        + " (all four, integers or text) and optionally `cancelled` and `ignore` (a value or a "
        "list each: values of the table's own), and `timestamps: {time_zone: UTC}` (or an "
        "offset such as `+02:00`) when its time columns are `timestamp without time zone`.\n"
    )
    out.append("| Role (`columns.…`) | Reference column | Types it may have | What it must mean |")
    out.append("|---|---|---|---|")
    for role, meaning in ROLES.items():
        types = ", ".join(sorted(USABLE.get(role, ())))
        if NAIVE_TIME in USABLE.get(role, ()):
            types = "timestamptz; timestamp with `timestamps.time_zone`"
        if role in UNREAD_ROLES:
            types = "any (checked only when mapped)"
        out.append(f"| `{role}` | `{role}` | {types} | {meaning} |")
    out.append("")
    out.append("### Kinds of value\n")
    out.append("| Kind | In YAML | In a flag or environment variable |")
    out.append("|---|---|---|")
    for kind in Kind:
        yaml_form, text_form = SYNTAX[kind]
        out.append(f"| {kind.value} | {yaml_form} | {text_form} |")
    return "\n".join(out) + "\n"
