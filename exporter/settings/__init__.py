"""Settings: declared once (schema), parsed by kind (kinds), read from file, environment and flags
(sources), with secrets kept out of every message (secrets).

The rest of the exporter imports from here only.
"""

from exporter.settings.alert_thresholds import AlertSettings
from exporter.settings.declaration import Setting
from exporter.settings.kinds import Kind, parse_duration, parse_listen_address
from exporter.settings.reload_plan import Change, ReloadPlan, plan_reload
from exporter.settings.schema import (
    DSN_ENV,
    DSN_FALLBACK_ENV,
    CollectSettings,
    DatabaseSettings,
    LogSettings,
    QueueSettings,
    Settings,
    WebSettings,
)
from exporter.settings.secrets import dsn_password, dsn_secrets, source_secrets
from exporter.settings.sources import (
    CONFIG_FILE_ENV,
    SETTINGS,
    check_config_file,
    load_settings,
)
from exporter.settings.yamlfile import ConfigError

__all__ = [
    "CONFIG_FILE_ENV",
    "DSN_ENV",
    "DSN_FALLBACK_ENV",
    "SETTINGS",
    "AlertSettings",
    "Change",
    "CollectSettings",
    "ConfigError",
    "DatabaseSettings",
    "Kind",
    "LogSettings",
    "QueueSettings",
    "ReloadPlan",
    "Setting",
    "Settings",
    "WebSettings",
    "check_config_file",
    "dsn_password",
    "dsn_secrets",
    "load_settings",
    "parse_duration",
    "parse_listen_address",
    "plan_reload",
    "source_secrets",
]
