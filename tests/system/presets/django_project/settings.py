"""Settings of the throwaway project; the database comes from the DSN in JQE_DJANGO_DSN."""

from __future__ import annotations

import os
from urllib.parse import parse_qsl, unquote, urlsplit

DSN_VARIABLE = "JQE_DJANGO_DSN"
QUEUES = ["default", "held"]

_dsn = urlsplit(os.environ[DSN_VARIABLE])
DATABASES = {
    "default": {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": unquote(_dsn.path.lstrip("/")),
        "USER": unquote(_dsn.username or ""),
        "PASSWORD": unquote(_dsn.password or ""),
        "HOST": _dsn.hostname or "",
        "PORT": str(_dsn.port or ""),
        "OPTIONS": dict(parse_qsl(_dsn.query)),
    }
}
INSTALLED_APPS = ["django_tasks", "django_tasks_db"]
TASKS = {"default": {"BACKEND": "django_tasks_db.DatabaseBackend", "QUEUES": QUEUES}}
SECRET_KEY = "throwaway"  # a test project that serves nothing
USE_TZ = True
DEBUG = False
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
