"""Settings of the test project; the environment says which server and queue names to use.

`VTRR_DJANGO_URL` (the test server), `VTRR_DJANGO_PREFIX` (the vtrr queue
names' prefix, one per test), `VTRR_DJANGO_LEASE_SECONDS` (short, so a
killed worker's task comes back within the test) and `VTRR_DJANGO_DEBUG`
(1: DEBUG on, as in development, where Django's own task log lines show).
No LOGGING: the workers' output is what a project that configured none sees.
"""

from __future__ import annotations

import os
from typing import Any

SECRET_KEY = "vtrr-django-tests"
DEBUG = os.environ.get("VTRR_DJANGO_DEBUG") == "1"
USE_TZ = True
TIME_ZONE = "UTC"
DATABASES: dict[str, Any] = {}
INSTALLED_APPS = ["threadmill", "vtrr.django"]
QUEUES = ["default", "other"]


def tasks_setting(url: str, prefix: str, lease_seconds: float) -> dict[str, Any]:
    """TASKS: the vtrr backend ("default") and threadmill's FIFO Redis backend ("fifo")."""
    return {
        "default": {
            "BACKEND": "vtrr.django.VTRRBackend",
            "QUEUES": QUEUES,
            "OPTIONS": {"url": url, "prefix": prefix, "lease_ttl": lease_seconds},
        },
        "fifo": {
            "BACKEND": "threadmill.backends.redis.RedisTaskBackend",
            "QUEUES": QUEUES,
            "REDIS_URL": url,
        },
    }


TEST_REDIS_URL = os.environ.get("VTRR_DJANGO_URL", "redis://127.0.0.1:6379/0")
TEST_PREFIX = os.environ.get("VTRR_DJANGO_PREFIX", "django:default")
TEST_DONE_KEY = f"{TEST_PREFIX}:done"
TASKS = tasks_setting(
    TEST_REDIS_URL, TEST_PREFIX, float(os.environ.get("VTRR_DJANGO_LEASE_SECONDS", "3600"))
)
