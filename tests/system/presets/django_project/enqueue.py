"""Enqueue tasks through the library's own API: python -m ...django_project.enqueue PLAN_JSON.

PLAN_JSON is a list of {"task": name, "count": n, "queue": name?, "run_after": seconds?}.
"""

from __future__ import annotations

import json
import os
import sys
from datetime import timedelta


def main(plan: list[dict[str, object]]) -> None:
    """Enqueue every entry of the plan, one task result per count."""
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.system.presets.django_project.settings")
    import django

    django.setup()
    from django.utils import timezone

    from tests.system.presets.django_project import tasks

    for entry in plan:
        task = getattr(tasks, str(entry["task"]))
        if "queue" in entry:
            task = task.using(queue_name=str(entry["queue"]))
        if "run_after" in entry:
            delay = timedelta(seconds=float(str(entry["run_after"])))
            task = task.using(run_after=timezone.now() + delay)
        for n in range(int(str(entry["count"]))):
            if task.func.__code__.co_argcount:
                task.enqueue(n)
            else:
                task.enqueue()


if __name__ == "__main__":
    main(json.loads(sys.argv[1]))
