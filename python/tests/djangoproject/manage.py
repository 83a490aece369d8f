#!/usr/bin/env python3
"""The test project's manage.py: `python tests/djangoproject/manage.py vtrr_worker ...`."""

from __future__ import annotations

import os
import sys
from pathlib import Path

if __name__ == "__main__":
    # The project package lives in tests/: put that on the path, not this directory.
    here = Path(__file__).resolve().parent
    sys.path[0] = str(here.parent)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "djangoproject.settings")
    from django.core.management import execute_from_command_line

    execute_from_command_line(sys.argv)
