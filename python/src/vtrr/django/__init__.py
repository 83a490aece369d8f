"""vtrr.django: a fair queue for Django's task framework, on threadmill's worker.

`VTRRBackend` is a `threadmill` task backend whose queues are vtrr queues:
tasks are served round-robin by partition (tenant) in virtual time, not
FIFO, so one tenant's backlog cannot starve the others. Add `"vtrr.django"`
to `INSTALLED_APPS` for the `vtrr_worker` management command; threadmill's
own `manage.py threadmill worker` runs the same tasks.

    TASKS = {
        "default": {
            "BACKEND": "vtrr.django.VTRRBackend",
            "OPTIONS": {"url": "redis://127.0.0.1:6379/0"},
        }
    }

The names are imported lazily, so `import vtrr.django` (and Django loading
the app) does not import Django's task framework or threadmill before the
app registry is ready.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .backend import VTRRBackend
    from .options import DEFAULT_PARTITION, default_partition, default_weight

__all__ = ["DEFAULT_PARTITION", "VTRRBackend", "default_partition", "default_weight"]


def __getattr__(name: str) -> Any:
    if name == "VTRRBackend":
        from . import backend

        return backend.VTRRBackend
    if name in __all__:
        from . import options

        return getattr(options, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
