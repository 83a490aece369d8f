"""The `vtrr.django` app: it carries the `vtrr_worker` management command."""

from __future__ import annotations

from django.apps import AppConfig


class VTRRDjangoConfig(AppConfig):  # type: ignore[misc]
    name = "vtrr.django"
    # The default label would be "django": give it one that cannot collide.
    label = "vtrr_django"
    verbose_name = "vtrr"
